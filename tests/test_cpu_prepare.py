"""The CPU driver's prepare as one line (validate → optimise → compile → bind) and
the compilation cache on it: a cache hit starts at binding (no validation, no
optimiser, no state preparation) and answers as an uncached compilation; one
validator serves getSupportedOperations and prepare; a cache of another format,
or a damaged or hostile one, is prepared afresh, never run and never a crash."""

from __future__ import annotations

import dataclasses
import json
import logging
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nnburst import tflite
from nnburst.codes import FuseCode, OperandCode, OperationCode
from nnburst.cpu import compilation_cache, prepare, validate
from nnburst.cpu.driver import cpu_device, supported_operations
from nnburst.errors import BadDataError
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.operands import ChannelQuant, OperandInfo

from .model_cache import wheel_member

TOKEN = b"\x07" * 32
NHWC = (1, 6, 5, 3)


def _operand(code: OperandCode, dims: tuple[int, ...], value: Any = None) -> Operand:
    if value is None:
        return Operand(OperandInfo(code, dims), Lifetime.TEMPORARY_VARIABLE)
    return Operand(OperandInfo(code, dims), Lifetime.CONSTANT_COPY, np.asarray(value))


def batch_norm_model() -> HalModel:
    """CONV_2D, then MUL and ADD by per-channel constants: the optimiser folds
    both into the convolution, so an optimised graph differs from the model's."""
    rng = np.random.default_rng(0)
    f32, i32 = OperandCode.TENSOR_FLOAT32, OperandCode.INT32
    out = (1, 6, 5, 4)
    operands = [
        Operand(OperandInfo(f32, NHWC), Lifetime.SUBGRAPH_INPUT),  # 0
        _operand(f32, (4, 3, 3, 3), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
        _operand(f32, (4,), rng.standard_normal(4).astype(np.float32)),
        _operand(i32, (), np.int32(1)),  # 3: SAME
        _operand(i32, (), np.int32(1)),  # 4: stride
        _operand(i32, (), np.int32(0)),  # 5: no activation
        _operand(f32, out),  # 6: conv
        _operand(f32, (4,), np.array([0.5, 1, 2, 4], np.float32)),  # 7
        _operand(f32, out),  # 8: scaled
        _operand(f32, (4,), np.array([1, 0, -1, 2], np.float32)),  # 9
        _operand(i32, (), np.int32(FuseCode.RELU)),  # 10
        Operand(OperandInfo(f32, out), Lifetime.SUBGRAPH_OUTPUT),  # 11
    ]
    operations = [
        Operation(OperationCode.CONV_2D, (0, 1, 2, 3, 4, 4, 5), (6,)),
        Operation(OperationCode.MUL, (6, 7, 5), (8,)),
        Operation(OperationCode.ADD, (8, 9, 10), (11,)),
    ]
    return HalModel(main=Subgraph(operands, operations, [0], [11]))


@pytest.fixture
def stages(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often each stage before binding runs, and the planner."""
    calls = {"validate": 0, "optimise": 0, "compile": 0, "bind": 0}

    def counted(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            calls[name] += 1
            return function(*args)

        return run

    monkeypatch.setattr(
        prepare, "validate_subgraph", counted("validate", prepare.validate_subgraph)
    )
    monkeypatch.setattr(prepare, "optimise", counted("optimise", prepare.optimise))
    monkeypatch.setattr(prepare, "compile_subgraph", counted("compile", prepare.compile_subgraph))
    monkeypatch.setattr(prepare, "bind_operations", counted("bind", prepare.bind_operations))
    return calls


def feeds(model: HalModel, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for index in model.main.input_indexes:
        info = model.main.operands[index].info
        if np.issubdtype(info.dtype, np.integer):
            limits = np.iinfo(info.dtype)
            arrays.append(rng.integers(limits.min, limits.max, info.dimensions, info.dtype))
        else:
            arrays.append(rng.uniform(-1, 1, info.dimensions).astype(info.dtype))
    return arrays


def prepared(model: HalModel, cache_dir: Path | None, token: bytes = TOKEN) -> Any:
    return cpu_device().prepare_model(
        model, cache=None if cache_dir is None else (str(cache_dir), token)
    )


def assert_same_answers(model: HalModel, got: Any, want: Any) -> None:
    x = feeds(model)
    for a, b in zip(got.executor.run(x), want.executor.run(x)):
        np.testing.assert_array_equal(a, b)


# -- the line and the cache ---------------------------------------------------------------


def test_a_cache_hit_starts_at_binding_and_answers_as_uncached(
    tmp_path: Path, stages: dict[str, int]
) -> None:
    model = batch_norm_model()
    uncached = prepared(model, None)
    assert stages == {"validate": 1, "optimise": 1, "compile": 1, "bind": 1}
    first = prepared(model, tmp_path)
    second = prepared(model, tmp_path)
    assert (first.cache_hit, second.cache_hit) == (False, True)
    assert stages == {"validate": 2, "optimise": 2, "compile": 2, "bind": 3}
    assert [op.code for op in second.executor.main.subgraph.operations] == [OperationCode.CONV_2D]
    assert_same_answers(model, second, uncached)


def test_the_hit_binds_the_cached_states_not_fresh_ones(tmp_path: Path) -> None:
    """The states bound on a hit are the ones read from the file."""
    model = batch_norm_model()
    prepared(model, tmp_path)
    hit = prepared(model, tmp_path)
    assert hit.cache_hit
    (conv,) = hit.executor.main.operations
    cached = compilation_cache.load_compiled(
        compilation_cache.cache_path(tmp_path, TOKEN),
        compilation_cache.structure_key(model),
        model.main,
    )
    assert cached is not None
    for field in dataclasses.fields(conv.state):
        a, b = getattr(conv.state, field.name), getattr(cached.states[0], field.name)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
            assert not a.flags.owndata  # a view of the file's blob, not computed again


def test_rewrites_and_stages_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """NNBURST_VLOG=compilation turns on the ``nnburst.compilation`` loggers."""
    model = batch_norm_model()
    with caplog.at_level(logging.DEBUG, logger="nnburst.compilation"):
        prepared(model, tmp_path)
        prepared(model, tmp_path)
    text = caplog.text
    assert "folded into CONV_2D" in text
    assert "prepared 3 operations (1 after rewrites" in text
    assert "from the compilation cache" in text


MODELS = {
    "pose_detection": (
        "mediapipe",
        "0.10.14",
        "mediapipe/modules/pose_detection/pose_detection.tflite",
    ),
    # int8 with per-channel weights and streaming state (resource variables)
    "okay_nabu": ("pymicro-wakeword", "1.0.0", "pymicro_wakeword/models/okay_nabu.tflite"),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_a_real_model_from_the_cache_answers_as_uncached(
    name: str, tmp_path: Path, stages: dict[str, int]
) -> None:
    model = tflite.load(wheel_member(*MODELS[name])).model.hal_model
    uncached = prepared(model, None)
    prepared(model, tmp_path)
    before = dict(stages)
    hit = prepared(model, tmp_path)
    assert hit.cache_hit
    assert {k: stages[k] - before[k] for k in stages} == {
        "validate": 0,
        "optimise": 0,
        "compile": 0,
        "bind": 1,
    }
    assert len(hit.executor.main.operations) == len(uncached.executor.main.operations)
    assert_same_answers(model, hit, uncached)


# -- one validator ----------------------------------------------------------------------


def test_what_is_unsupported_does_not_prepare(monkeypatch: pytest.MonkeyPatch) -> None:
    model = batch_norm_model()
    assert supported_operations(model) == [True, True, True]
    real = validate.lookup
    monkeypatch.setattr(
        validate, "lookup", lambda code: None if code == OperationCode.MUL else real(code)
    )
    assert supported_operations(model) == [True, False, True]
    with pytest.raises(BadDataError, match="operation 1: MUL is not supported"):
        prepared(model, None)


def test_what_does_not_validate_is_unsupported_and_does_not_prepare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = batch_norm_model()
    real = validate.lookup

    def refuse(signature: Any) -> None:
        raise BadDataError("no adds today")

    def lookup(code: int) -> Any:
        registration = real(code)
        if code == OperationCode.ADD:
            return dataclasses.replace(registration, validate=refuse)
        return registration

    monkeypatch.setattr(validate, "lookup", lookup)
    assert supported_operations(model) == [True, True, False]
    with pytest.raises(BadDataError, match=r"operation 2 \(ADD\) is invalid: .*no adds today"):
        prepared(model, None)


# -- formats, damage, hostility ----------------------------------------------------------


def rewrite(path: Path, edit: Callable[[dict[str, Any]], Any], version: int | None = None) -> None:
    """The cache at ``path`` with its description edited and a valid checksum."""
    data = path.read_bytes()
    magic, format_, length = struct.unpack_from("<4sIQ", data)
    body = 16 + length
    blob = data[body + 32 + (-(body + 32) % 64) :]
    meta = json.loads(data[16:body])
    meta = edit(meta) or meta
    description = (meta if isinstance(meta, str) else json.dumps(meta)).encode()
    head = struct.pack("<4sIQ", magic, version or format_, len(description)) + description
    head += compilation_cache._checksum(description, blob)
    path.write_bytes(head + bytes(-len(head) % 64) + blob)


def test_a_cache_of_the_old_format_is_prepared_afresh_and_rewritten(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = batch_norm_model()
    want = prepared(model, tmp_path)
    path = compilation_cache.cache_path(tmp_path, TOKEN)
    rewrite(path, lambda meta: None, version=1)
    with caplog.at_level(logging.INFO, logger="nnburst.cpu"):
        again = prepared(model, tmp_path)
    assert not again.cache_hit
    assert "has format 1, this driver writes 2" in caplog.text
    assert_same_answers(model, again, want)
    assert prepared(model, tmp_path).cache_hit  # rewritten in the new format


def _graph(meta: dict[str, Any], part: str) -> list[Any]:
    """The graph's operands or operations, as the cache writes them."""
    return meta["graph"][part]


def _graph_operand(meta: dict[str, Any], field: int, value: Any) -> None:
    _graph(meta, "operands")[0][field] = value


def _first_input(meta: dict[str, Any], value: int) -> None:
    _graph(meta, "operations")[0][1][0] = value


HOSTILE: dict[str, Callable[[dict[str, Any]], Any]] = {
    "description a list": lambda meta: [meta],
    "graph a string": lambda meta: meta.update(graph="graph"),
    "operation names a missing operand": lambda meta: _first_input(meta, 10**6),
    "operand index past the end": lambda meta: _graph_operand(meta, 0, 10**6),
    "negative dimension": lambda meta: _graph_operand(meta, 2, [-4]),
    "unknown operand code": lambda meta: _graph_operand(meta, 1, 12345),
    "unknown operation code": lambda meta: _graph(meta, "operations")[0].__setitem__(0, 9999),
    "constant of another size": lambda meta: _graph_operand(meta, 2, [5]),
    "constant outside the arrays": lambda meta: _graph_operand(meta, 7, 10**6),
    "order not a permutation": lambda meta: meta.update(order=[1]),
    "a state missing": lambda meta: meta.update(states=[]),
    "a state of a foreign class": lambda meta: meta["states"].__setitem__(
        0, {"dataclass": "os:system", "fields": {}}
    ),
    "a state of the wrong fields": lambda meta: meta["states"][0]["fields"].update(bogus=1),
    "array past the blob": lambda meta: meta["arrays"][0].__setitem__(1, [1 << 40]),
    "negative array extent": lambda meta: meta["arrays"][0].__setitem__(1, [-1]),
    "array of objects": lambda meta: meta["arrays"][0].__setitem__(0, "|O"),
    "nesting too deep": lambda meta: json.dumps({**meta, "states": None}).replace(
        '"states": null', '"states": [' + '{"list": [' * 100_000 + "0" + "]}" * 100_000 + "]"
    ),
}


@pytest.mark.parametrize("damage", list(HOSTILE))
def test_a_hostile_cache_is_prepared_afresh(
    damage: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = batch_norm_model()
    want = prepared(model, tmp_path)
    path = compilation_cache.cache_path(tmp_path, TOKEN)
    rewrite(path, HOSTILE[damage])
    with caplog.at_level(logging.WARNING):
        again = prepared(model, tmp_path)
    assert not again.cache_hit
    assert "corrupt" in caplog.text or "does not fit" in caplog.text
    assert_same_answers(model, again, want)
    assert prepared(model, tmp_path).cache_hit  # rewritten


@pytest.mark.parametrize("size", [0, 3, 16, 40, 100, 1000])
def test_a_truncated_or_random_cache_is_prepared_afresh(tmp_path: Path, size: int) -> None:
    model = batch_norm_model()
    want = prepared(model, tmp_path)
    path = compilation_cache.cache_path(tmp_path, TOKEN)
    data = path.read_bytes()
    path.write_bytes(data[:size])
    assert not prepared(model, tmp_path).cache_hit
    path.write_bytes(data[:16] + np.random.default_rng(size).bytes(size))
    again = prepared(model, tmp_path)
    assert not again.cache_hit
    assert_same_answers(model, again, want)


# -- the rewritten graph as the cache writes it ------------------------------------------


def _round_trip(original: Subgraph, rewritten: Subgraph) -> Subgraph:
    arrays: list[np.ndarray] = []
    written = json.loads(json.dumps(compilation_cache._graph_changes(original, rewritten, arrays)))
    return compilation_cache._restore(original, written, dict(enumerate(arrays)))


def assert_same_graph(got: Subgraph, want: Subgraph) -> None:
    assert [(op.code, op.inputs, op.outputs) for op in got.operations] == [
        (op.code, op.inputs, op.outputs) for op in want.operations
    ]
    assert len(got.operands) == len(want.operands)
    for mine, theirs in zip(got.operands, want.operands):
        assert (mine.info, mine.lifetime, mine.subgraph) == (
            theirs.info,
            theirs.lifetime,
            theirs.subgraph,
        )
        if theirs.value is None:
            assert mine.value is None
        else:
            np.testing.assert_array_equal(mine.value, theirs.value)


def test_the_optimised_graph_is_written_down_and_read_back() -> None:
    original = batch_norm_model().main
    optimised = prepare.optimise(original)
    assert len(optimised.operations) == 1
    assert_same_graph(_round_trip(original, optimised), optimised)


def test_a_per_channel_operand_is_written_down() -> None:
    """Format 1 could not hold one (a per-channel model ran the optimiser on every hit)."""
    original = batch_norm_model().main
    info = OperandInfo(
        OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL,
        (3,),
        channel_quant=ChannelQuant(0, (0.5, 0.25, 2.0)),
    )
    extra = Operand(info, Lifetime.CONSTANT_COPY, np.array([1, -2, 3], np.int8))
    rewritten = dataclasses.replace(original, operands=[*original.operands, extra])
    assert_same_graph(_round_trip(original, rewritten), rewritten)
    unchanged = compilation_cache._graph_changes(original, original, [])
    assert unchanged["operands"] == []


@pytest.mark.parametrize("index", [-1, 13, 10**6])
def test_a_written_operand_outside_the_graph_is_refused(index: int) -> None:
    original = batch_norm_model().main
    assert len(original.operands) == 12  # 12 appends, 13 is past the end
    operand = [index, int(OperandCode.TENSOR_FLOAT32), [4], 0.0, 0, None, 0, None, None]
    with pytest.raises(ValueError):
        compilation_cache._restore(original, {"operands": [operand], "operations": []}, {})
