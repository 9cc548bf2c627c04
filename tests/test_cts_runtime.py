"""Every NNAPI 1.0/1.1 conformance vector through the public runtime, on every execution path.

Each vector's model is rebuilt with the public calls an app would make
(``Model.add_operand``, ``set_operand_value``, CONSTANT_REFERENCE operands
through a ``Memory`` and ``set_operand_value_from_memory``), compiled for the
CPU reference device, then executed with ``compute``, ``start_compute`` and,
once the burst controller exists, ``burst_compute``.  The model is built once
and shared by the paths of one vector.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest

import nnburst as nn
from nnburst.hal.model import Lifetime

from .cts_vectors import Vector, check_outputs, iter_vectors, parse_vector

VECTORS = list(iter_vectors())
PATHS = ["compute", "start_compute"]
if importlib.util.find_spec("nnburst.hal.burst_controller") is not None:
    PATHS.append("burst_compute")

_ALIGN = 16


def build_model(vector: Vector) -> tuple[nn.Model, nn.Memory | None]:
    """The vector's model through the public API; returns it with the memory its references live in."""
    raw_operands: list[dict[str, Any]] = vector.raw["main"]["operands"]
    hal_operands = vector.model.main.operands
    references = [
        i for i, op in enumerate(hal_operands) if op.lifetime == Lifetime.CONSTANT_REFERENCE
    ]
    offsets, size = {}, 0
    for i in references:
        offsets[i] = size
        size += -(-hal_operands[i].value.nbytes // _ALIGN) * _ALIGN
    memory = nn.Memory.create_shared(size) if size else None
    model = nn.Model()
    try:
        for raw in raw_operands:
            model.add_operand(
                nn.OperandType(
                    raw["type"],
                    tuple(raw["dimensions"]),
                    float(raw["scale"]),
                    int(raw["zeroPoint"]),
                )
            )
        for i, (raw, operand) in enumerate(zip(raw_operands, hal_operands)):
            if raw["channelQuant"]:
                quant = raw["channelQuant"]
                model.set_operand_symm_per_channel_quant_params(
                    i, quant["channelDim"], quant["scales"]
                )
            if operand.lifetime == Lifetime.CONSTANT_COPY:
                model.set_operand_value(i, operand.value)
            elif operand.lifetime == Lifetime.CONSTANT_REFERENCE:
                assert memory is not None
                data = np.ascontiguousarray(operand.value).reshape(-1).view(np.uint8)
                np.frombuffer(memory.buffer, np.uint8, data.size, offsets[i])[:] = data
                model.set_operand_value_from_memory(i, memory, offsets[i], data.size)
            elif operand.lifetime == Lifetime.NO_VALUE:
                model.set_operand_value(i, None)
        for op in vector.model.main.operations:
            model.add_operation(op.code, op.inputs, op.outputs)
        model.identify_inputs_and_outputs(
            vector.model.main.input_indexes, vector.model.main.output_indexes
        )
        model.relax_computation_float32_to_float16(vector.model.relax_float32_to_float16)
        model.finish()
    except BaseException:
        if memory is not None:
            memory.close()
        raise
    return model, memory


class _Built:
    """The last vector's model and compilation, shared by its paths (tests run vector by vector)."""

    name: str | None = None
    compilation: nn.Compilation | None = None
    memory: nn.Memory | None = None
    error: BaseException | None = None

    @classmethod
    def get(cls, name: str, vector: Vector) -> nn.Compilation:
        if cls.name != name:
            cls.release()
            cls.name = name
            try:
                model, cls.memory = build_model(vector)
                compilation = nn.Compilation(
                    model, [d for d in nn.get_devices() if d.name == "nnburst-reference"]
                )
                compilation.finish()
                cls.compilation = compilation
            except Exception as exc:  # reported by every path of this vector
                cls.error = exc
        if cls.error is not None:
            raise cls.error
        assert cls.compilation is not None
        return cls.compilation

    @classmethod
    def release(cls) -> None:
        if cls.compilation is not None:
            cls.compilation.close()
        if cls.memory is not None:
            cls.memory.close()
        cls.name = cls.compilation = cls.memory = cls.error = None


@pytest.fixture(scope="module", autouse=True)
def _release_last_model():
    yield
    _Built.release()


def run(vector: Vector, name: str, path: str) -> list[np.ndarray]:
    compilation = _Built.get(name, vector)
    execution = nn.Execution(compilation)
    for i, value in enumerate(vector.inputs):
        execution.set_input(i, value)
    outputs = []
    for i, expected in enumerate(vector.outputs):
        out = np.zeros(expected.dimensions, expected.values.dtype)
        execution.set_output(i, out)
        outputs.append(out)
    if path == "compute":
        execution.compute()
    elif path == "start_compute":
        execution.start_compute().wait()
    else:
        with nn.Burst(compilation) as burst:
            execution.burst_compute(burst)
    for i, expected in enumerate(vector.outputs):
        if expected.dimensions:
            assert execution.get_output_operand_dimensions(i) == expected.dimensions
    return outputs


CASES = [(name, raw, path) for name, raw in VECTORS for path in PATHS]


@pytest.mark.skipif(not VECTORS, reason="no NNAPI conformance vectors found (NNBURST_CTS_DIR)")
@pytest.mark.parametrize(
    "name, raw, path", CASES, ids=[f"{name}-{path}" for name, _, path in CASES]
)
def test_cts_vector_through_the_runtime(name, raw, path):
    vector = parse_vector(raw)
    if vector.expect_failure:
        with pytest.raises(nn.NNError):
            run(vector, name, path)
        return
    check_outputs(vector, run(vector, name, path))
