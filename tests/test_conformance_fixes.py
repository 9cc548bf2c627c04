"""NNAPI conformance bugs found by review (issue 15), each pinned by its documented answer."""

from __future__ import annotations

import numpy as np
import pytest

import nnburst as nn
from nnburst.cpu.driver import cpu_device


def run_one(code: nn.OperationCode, inputs: list[tuple[nn.OperandType, np.ndarray]], out_type):  # type: ignore[no-untyped-def]
    model = nn.Model()
    operands = [model.add_operand(t) for t, _ in inputs]
    out = model.add_operand(out_type)
    model.add_operation(code, operands, [out])
    model.identify_inputs_and_outputs(operands, [out])
    model.finish()
    with nn.Compilation(model, [nn.Device(cpu_device())]) as compilation:
        compilation.finish()
        result = np.zeros(out_type.dimensions, np.dtype(_DTYPES[out_type.code]))
        with nn.Execution(compilation) as execution:
            for i, (_, value) in enumerate(inputs):
                execution.set_input(i, value)
            execution.set_output(0, result)
            execution.compute()
    return result


_DTYPES = {
    nn.OperandCode.TENSOR_QUANT8_ASYMM: np.uint8,
    nn.OperandCode.TENSOR_QUANT8_ASYMM_SIGNED: np.int8,
    nn.OperandCode.TENSOR_INT32: np.int32,
}


@pytest.mark.parametrize(
    ("code", "zero_point", "value", "expected"),
    [
        # One element normalises to ±1: -1 is 0 (uint8) / -128 (int8), +1 saturates at 255 / 127.
        (nn.OperandCode.TENSOR_QUANT8_ASYMM, 128, 127, 0),
        (nn.OperandCode.TENSOR_QUANT8_ASYMM, 128, 0, 0),
        (nn.OperandCode.TENSOR_QUANT8_ASYMM, 128, 129, 255),
        (nn.OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, 0, -1, -128),
        (nn.OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, 0, 1, 127),
    ],
)
def test_quantized_l2_normalization_of_one_element_keeps_its_sign(
    code, zero_point, value, expected
):
    """An input whose sum of squares is 1 once made its multiplier overflow to
    -2**31: -1 came out as +1."""
    dtype = _DTYPES[code]
    t = nn.OperandType(code, (1, 1), scale=1 / 128, zero_point=zero_point)
    out = run_one(nn.OperationCode.L2_NORMALIZATION, [(t, np.array([[value]], dtype))], t)
    assert out.tolist() == [[expected]]


def test_int32_division_by_zero_gives_zero():
    t = nn.OperandType(nn.OperandCode.TENSOR_INT32, (4,))
    fuse = nn.OperandType(nn.OperandCode.INT32)
    a = np.array([7, -7, 5, 0], np.int32)
    b = np.array([2, 2, 0, 0], np.int32)
    out = run_one(nn.OperationCode.DIV, [(t, a), (t, b), (fuse, np.int32(0))], t)
    assert out.tolist() == [3, -4, 0, 0]  # floor division; 0 where the divisor is 0
