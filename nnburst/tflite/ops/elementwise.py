"""Elementwise operators and activations: NNAPI's unary and binary operations
one to one (those with a fuse operand take the fused activation), LEAKY_RELU
as PRELU, SELECT."""

from __future__ import annotations

import numpy as np

from ...codes import OperandCode, OperationCode
from ...model import OperandType
from ..converter import Converter, maps
from ..reader import Operator

#: Binary operators that take a fused activation, by TFLite name.
_FUSED_BINARY = {
    "ADD": OperationCode.ADD, "SUB": OperationCode.SUB,
    "MUL": OperationCode.MUL, "DIV": OperationCode.DIV,
}  # fmt: skip

#: Unary operators mapped one to one.
_UNARY = {
    "LOGISTIC": OperationCode.LOGISTIC, "TANH": OperationCode.TANH,
    "RELU": OperationCode.RELU, "RELU6": OperationCode.RELU6,
    "RELU_N1_TO_1": OperationCode.RELU1, "EXP": OperationCode.EXP,
    "LOG": OperationCode.LOG, "SQRT": OperationCode.SQRT, "RSQRT": OperationCode.RSQRT,
    "ABS": OperationCode.ABS, "NEG": OperationCode.NEG, "FLOOR": OperationCode.FLOOR,
    "SIN": OperationCode.SIN, "HARD_SWISH": OperationCode.HARD_SWISH,
    "LOGICAL_NOT": OperationCode.LOGICAL_NOT,
    "DEQUANTIZE": OperationCode.DEQUANTIZE, "CAST": OperationCode.CAST,
    "L2_NORMALIZATION": OperationCode.L2_NORMALIZATION,
}  # fmt: skip

#: Binary operators without a fuse operand.
_PLAIN_BINARY = {
    "MAXIMUM": OperationCode.MAXIMUM, "MINIMUM": OperationCode.MINIMUM,
    "PRELU": OperationCode.PRELU, "POW": OperationCode.POW,
    "EQUAL": OperationCode.EQUAL, "NOT_EQUAL": OperationCode.NOT_EQUAL,
    "LESS": OperationCode.LESS, "LESS_EQUAL": OperationCode.LESS_EQUAL,
    "GREATER": OperationCode.GREATER, "GREATER_EQUAL": OperationCode.GREATER_EQUAL,
    "LOGICAL_AND": OperationCode.LOGICAL_AND, "LOGICAL_OR": OperationCode.LOGICAL_OR,
}  # fmt: skip


@maps(*_FUSED_BINARY)
def _binary(c: Converter, op: Operator) -> None:
    fuse, out = c.activation(op.options), c.operand(op.outputs[0])
    inputs = [c.operand(op.inputs[0]), c.operand(op.inputs[1]), fuse]
    c.add(_FUSED_BINARY[op.name], inputs, [out])


@maps(*_UNARY)
def _unary(c: Converter, op: Operator) -> None:
    c.add(_UNARY[op.name], [c.operand(op.inputs[0])], [c.operand(op.outputs[0])])


@maps(*_PLAIN_BINARY)
def _plain_binary(c: Converter, op: Operator) -> None:
    inputs = [c.operand(op.inputs[0]), c.operand(op.inputs[1])]
    c.add(_PLAIN_BINARY[op.name], inputs, [c.operand(op.outputs[0])])


@maps("LEAKY_RELU")
def _leaky_relu(c: Converter, op: Operator) -> None:
    """PRELU with a one-element alpha (broadcast), in the input's type."""
    x = c.tensor(op.inputs[0])
    alpha = op.options.Alpha()
    if x.dtype == np.float32:
        slope = c.constant(OperandCode.TENSOR_FLOAT32, np.array([alpha], np.float32), (1,))
    else:  # quantized: alpha as a quantized value of the input's type
        scale = abs(alpha) / 127 if alpha else 1.0
        code = c.operand_type(x).code
        offset = 0 if code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED else 128
        q = np.array([round(alpha / scale) + offset], x.dtype)
        slope = c.model.add_operand(OperandType(code, (1,), scale, offset))
        c.model.set_operand_value(slope, q)
    c.add(OperationCode.PRELU, [c.operand(op.inputs[0]), slope], [c.operand(op.outputs[0])])


@maps("SELECT", "SELECT_V2")
def _select(c: Converter, op: Operator) -> None:
    out = c.tensor(op.outputs[0])
    inputs = []
    for i in op.inputs:
        t = c.tensor(i)
        if t.shape == out.shape:
            inputs.append(c.operand(i))
            continue
        # SELECT_V2 broadcasts; NNAPI's SELECT does not: tile the input to the output's shape.
        padded = (1,) * (len(out.shape) - len(t.shape)) + t.shape
        reshaped = c.model.add_operand(OperandType(c.operand_type(t).code, padded,
                                                   c.operand_type(t).scale, c.operand_type(t).zero_point))  # fmt: skip
        c.add(OperationCode.RESHAPE, [c.operand(i), c.ints(padded)], [reshaped])
        multiples = [o // p for o, p in zip(out.shape, padded)]
        tiled = c.model.add_operand(OperandType(c.operand_type(t).code, out.shape,
                                                c.operand_type(t).scale, c.operand_type(t).zero_point))  # fmt: skip
        c.add(OperationCode.TILE, [reshaped, c.ints(multiples)], [tiled])
        inputs.append(tiled)
    c.add(OperationCode.SELECT, inputs, [c.operand(op.outputs[0])])
