"""Compilation caching: the second compilation under a token skips validation
and preparation, gives the same results, and a corrupt or stale cache is
detected and ignored."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

import nnburst as nn
from nnburst.cpu import compilation_cache, registry

TOKEN = bytes(range(32))


def conv_model():
    """3×3 CONV_2D (16→32 channels, ReLU) then 2×2 max pool: prepared state to cache."""
    rng = np.random.default_rng(0)
    T = nn.OperandCode
    model = nn.Model()
    image = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (1, 32, 32, 16)))
    weights = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (32, 3, 3, 16)))
    bias = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (32,)))
    scalars = [model.add_operand(nn.OperandType(T.INT32)) for _ in range(10)]
    conv = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (1, 32, 32, 32)))
    out = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (1, 16, 16, 32)))
    model.set_operand_value(weights, rng.standard_normal((32, 3, 3, 16)).astype(np.float32))
    model.set_operand_value(bias, rng.standard_normal(32).astype(np.float32))
    for operand, value in zip(
        scalars, (1, 1, 1, 1, 2, 2, 2, 2, 2, 0)
    ):  # SAME,1,1,RELU | VALID,2,2,2,2,NONE
        model.set_operand_value(operand, np.int32(value))
    model.add_operation(nn.OperationCode.CONV_2D, [image, weights, bias, *scalars[:4]], [conv])
    model.add_operation(nn.OperationCode.MAX_POOL_2D, [conv, *scalars[4:]], [out])
    model.identify_inputs_and_outputs([image], [out])
    model.finish()
    return model


def compile_and_run(model, cache_dir, token=TOKEN):
    compilation = nn.Compilation(model)
    compilation.set_caching(cache_dir, token)
    compilation.finish()
    out = np.empty((1, 16, 16, 32), np.float32)
    execution = nn.Execution(compilation)
    execution.set_input(
        0, np.linspace(-1, 1, 32 * 32 * 16, dtype=np.float32).reshape(1, 32, 32, 16)
    )
    execution.set_output(0, out)
    execution.compute()
    hit = compilation._prepared.cache_hit
    compilation.close()
    return out, hit


@pytest.fixture
def counted_validations(monkeypatch):
    """Count every operation validate() call the CPU driver makes."""
    calls = []
    original = registry.lookup

    def lookup(code):
        registration = original(code)
        if registration is None:
            return None

        def validate(sig):
            calls.append(sig.code)
            return registration.validate(sig)

        return registry.OperationRegistration(
            registration.code, validate, registration.execute, registration.prepare
        )

    monkeypatch.setattr("nnburst.cpu.states.lookup", lookup)
    return calls


def test_second_compilation_uses_the_cache_and_gives_the_same_results(
    tmp_path, counted_validations
):
    model = conv_model()
    first, hit = compile_and_run(model, tmp_path)
    assert not hit and counted_validations
    assert compilation_cache.cache_path(tmp_path, TOKEN).exists()
    counted_validations.clear()
    second, hit = compile_and_run(model, tmp_path)
    assert hit and not counted_validations  # no operation validated or prepared again
    assert np.array_equal(first, second)


def test_corrupt_cache_is_ignored_and_rewritten(tmp_path):
    model = conv_model()
    expected, _ = compile_and_run(model, tmp_path)
    path = compilation_cache.cache_path(tmp_path, TOKEN)
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    again, hit = compile_and_run(model, tmp_path)
    assert not hit
    assert np.array_equal(expected, again)
    _, hit = compile_and_run(model, tmp_path)
    assert hit  # rewritten


def test_truncated_cache_is_ignored(tmp_path):
    model = conv_model()
    expected, _ = compile_and_run(model, tmp_path)
    path = compilation_cache.cache_path(tmp_path, TOKEN)
    path.write_bytes(path.read_bytes()[:100])
    again, hit = compile_and_run(model, tmp_path)
    assert not hit and np.array_equal(expected, again)


def test_a_token_reused_for_another_model_is_not_trusted(tmp_path):
    model = conv_model()
    compile_and_run(model, tmp_path)
    other = nn.Model()
    t = nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, (2,))
    a, b, out = other.add_operand(t), other.add_operand(t), other.add_operand(t)
    fuse = other.add_operand(nn.OperandType(nn.OperandCode.INT32))
    other.set_operand_value(fuse, np.int32(0))
    other.add_operation(nn.OperationCode.ADD, [a, b, fuse], [out])
    other.identify_inputs_and_outputs([a, b], [out])
    other.finish()
    compilation = nn.Compilation(other)
    compilation.set_caching(tmp_path, TOKEN)
    compilation.finish()
    assert not compilation._prepared.cache_hit
    compilation.close()


def test_states_that_do_not_fit_the_kernels_are_ignored_and_rewritten(tmp_path, caplog):
    """A cache whose key matches but whose states this code cannot bind (written by
    other code of the same version) is compiled afresh, not an OP_FAILED."""
    model = conv_model()
    expected, _ = compile_and_run(model, tmp_path)
    path = compilation_cache.cache_path(tmp_path, TOKEN)
    key = compilation_cache.structure_key(model._hal)
    compiled = compilation_cache.load_compiled(path, key, model._hal.main)
    order, states = compiled.order, compiled.states
    conv = order.index(0)
    # The filter as an older checkout laid it out: not what ConvLoop binds.
    states[conv] = dataclasses.replace(states[conv], filter=np.zeros((75, 24), np.float32))
    assert compilation_cache.save_compiled(path, key, model._hal.main, compiled)
    with caplog.at_level(logging.WARNING, logger="nnburst.cpu"):
        again, hit = compile_and_run(model, tmp_path)
    assert not hit and np.array_equal(expected, again)
    assert "does not fit" in caplog.text
    _, hit = compile_and_run(model, tmp_path)
    assert hit  # rewritten


def test_the_key_covers_the_driver_code(monkeypatch):
    """States prepared by other code (another checkout of the same version) are not
    trusted: the key changes with the CPU driver's sources."""
    model = conv_model()
    key = compilation_cache.structure_key(model._hal)
    monkeypatch.setattr(compilation_cache, "code_fingerprint", lambda: "other code")
    assert compilation_cache.structure_key(model._hal) != key


def test_cached_states_only_rebuild_driver_dataclasses():
    with pytest.raises(ValueError):
        compilation_cache._decode({"dataclass": "os:system", "fields": {}}, {})
    with pytest.raises(ValueError):
        compilation_cache._decode(
            {"dataclass": "nnburst.cpu.registry:OperationRegistration", "fields": {}}, {}
        )
