"""The conformance vectors run the two extra ways NNAPI's CTS derives from every model (issue 15).

- **Unknown output dimensions**: every model output is declared with its
  rank but zeros for its dimensions; the values must not change, and
  ``get_output_operand_dimensions`` must report the real ones.
- **Signed quantization**: in single-operation models, every
  TENSOR_QUANT8_ASYMM operand becomes TENSOR_QUANT8_ASYMM_SIGNED with zero
  point − 128 and values − 128, expected outputs shifted the same way.  The
  1.3 operations that take no signed type are listed and must be refused.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import nnburst as nn

from .cts_vectors import check_outputs, iter_vectors, parse_vector
from .test_cts_runtime import build_model

VECTORS = list(iter_vectors())
ASYMM = int(nn.OperandCode.TENSOR_QUANT8_ASYMM)
SIGNED = int(nn.OperandCode.TENSOR_QUANT8_ASYMM_SIGNED)

#: NNAPI 1.3 operations without a TENSOR_QUANT8_ASYMM_SIGNED variant.
NO_SIGNED_VARIANT = {"LSH_PROJECTION", "QUANTIZED_16BIT_LSTM", "HASHTABLE_LOOKUP"}

needs_vectors = pytest.mark.skipif(
    not VECTORS, reason="no NNAPI conformance vectors found (NNBURST_CTS_DIR)"
)


def compute(
    raw: dict[str, Any], flat_outputs: bool = False
) -> tuple[list[np.ndarray], list[tuple[int, ...]]]:
    """Build, compile and compute the vector ``raw``; its outputs and their reported
    dimensions.  ``flat_outputs``: outputs are plain byte buffers, so only the
    driver can say their shapes."""
    vector = parse_vector(raw)
    model, memory = build_model(vector)
    try:
        with nn.Compilation(model, [nn.get_device("nnburst-reference")]) as compilation:
            compilation.finish()
            with nn.Execution(compilation) as execution:
                for i, value in enumerate(vector.inputs):
                    execution.set_input(i, value)
                buffers: list[Any] = []
                for i, expected in enumerate(vector.outputs):
                    if flat_outputs:
                        buffers.append(bytearray(expected.values.nbytes))
                    else:
                        buffers.append(np.zeros(expected.dimensions, expected.values.dtype))
                    execution.set_output(i, buffers[-1])
                execution.compute()
                dims = [execution.get_output_operand_dimensions(i) for i in range(len(buffers))]
                outputs = [
                    np.frombuffer(buffer, expected.values.dtype).reshape(shape)
                    for buffer, expected, shape in zip(buffers, vector.outputs, dims)
                ]
    finally:
        if memory is not None:
            memory.close()
    return outputs, dims


def with_unknown_output_dimensions(raw: dict[str, Any]) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    operands = raw["main"]["operands"]
    for index in raw["main"]["outputIndexes"]:
        operands[index]["dimensions"] = [0] * len(operands[index]["dimensions"])
    return raw


def as_signed(raw: dict[str, Any]) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    operands = raw["main"]["operands"]
    for operand in operands:
        if operand["type"] == ASYMM:
            operand["type"], operand["typeName"] = SIGNED, "TENSOR_QUANT8_ASYMM_SIGNED"
            operand["zeroPoint"] -= 128
            if operand["value"] is not None:
                operand["value"] = [v - 128 for v in operand["value"]]
    for argument in (*raw["inputs"], *raw["outputs"]):
        if operands[argument["operand"]]["type"] == SIGNED and argument.get("values"):
            argument["values"] = [v - 128 for v in argument["values"]]
    return raw


UNKNOWN_DIMS = [
    (name, raw)
    for name, raw in VECTORS
    if not raw["expectFailure"] and all(o["dimensions"] for o in raw["outputs"])
]
SIGNED_CASES = [
    (name, raw)
    for name, raw in VECTORS
    if not raw["expectFailure"]
    and len(raw["main"]["operations"]) == 1
    and not raw["referenced"]
    and any(o["type"] == ASYMM for o in raw["main"]["operands"])
]


@needs_vectors
@pytest.mark.parametrize("name, raw", UNKNOWN_DIMS, ids=[name for name, _ in UNKNOWN_DIMS])
def test_cts_vector_with_unknown_output_dimensions(name, raw):
    outputs, dims = compute(with_unknown_output_dimensions(raw), flat_outputs=True)
    vector = parse_vector(raw)
    check_outputs(vector, outputs)
    assert dims == [expected.dimensions for expected in vector.outputs]


@needs_vectors
@pytest.mark.parametrize("name, raw", SIGNED_CASES, ids=[name for name, _ in SIGNED_CASES])
def test_cts_vector_with_signed_quantization(name, raw):
    signed = as_signed(raw)
    operation = signed["main"]["operations"][0]["typeName"]
    if operation in NO_SIGNED_VARIANT:
        with pytest.raises(nn.NNError):
            compute(signed)
        return
    outputs, _ = compute(signed)
    check_outputs(parse_vector(signed), outputs)
