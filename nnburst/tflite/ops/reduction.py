"""Reductions and normalizations: softmax, the reductions, ARG_MAX/ARG_MIN and
local response normalization."""

from __future__ import annotations

from ...codes import OperandCode, OperationCode
from ...model import OperandType
from ..converter import Converter, constant_axes, maps
from ..reader import Operator


@maps("SOFTMAX")
def _softmax(c: Converter, op: Operator) -> None:
    beta = op.options.Beta() if op.options is not None else 1.0
    c.add(OperationCode.SOFTMAX, [c.operand(op.inputs[0]), c.f32(beta)], [c.operand(op.outputs[0])])


@maps("LOG_SOFTMAX")
def _log_softmax(c: Converter, op: Operator) -> None:
    inputs = [c.operand(op.inputs[0]), c.f32(1.0), c.i32(-1)]
    c.add(OperationCode.LOG_SOFTMAX, inputs, [c.operand(op.outputs[0])])


@maps("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY")
def _reduce(c: Converter, op: Operator) -> None:
    x = c.tensor(op.inputs[0])
    axes = c.ints(constant_axes(c, op.inputs[1], len(x.shape)))
    keep = bool(op.options.KeepDims()) if op.options is not None else False
    out = c.operand(op.outputs[0])
    target = out
    if not keep and not c.tensor(op.outputs[0]).shape:
        # Every axis reduced to a TFLite scalar: NNAPI's rank-0 result would not
        # match the [1] operand, so keep the axes and reshape to [1].
        keep = True
        kept = (1,) * len(x.shape)
        target = c.model.add_operand(OperandType(c.operand_type(x).code, kept,
                                                 c.operand_type(x).scale, c.operand_type(x).zero_point))  # fmt: skip
    code = {
        "MEAN": OperationCode.MEAN, "SUM": OperationCode.REDUCE_SUM,
        "REDUCE_MAX": OperationCode.REDUCE_MAX, "REDUCE_MIN": OperationCode.REDUCE_MIN,
        "REDUCE_PROD": OperationCode.REDUCE_PROD, "REDUCE_ANY": OperationCode.REDUCE_ANY,
    }[op.name]  # fmt: skip
    flag = c.i32(int(keep)) if op.name == "MEAN" else c.boolean(keep)
    c.add(code, [c.operand(op.inputs[0]), axes, flag], [target])
    if target != out:
        c.add(OperationCode.RESHAPE, [target, c.ints([1])], [out])


@maps("ARG_MAX", "ARG_MIN")
def _arg(c: Converter, op: Operator) -> None:
    rank = len(c.tensor(op.inputs[0]).shape)
    (axis,) = constant_axes(c, op.inputs[1], rank)
    out = c.operand(
        op.outputs[0], OperandType(OperandCode.TENSOR_INT32, c.tensor(op.outputs[0]).shape)
    )
    code = OperationCode.ARGMAX if op.name == "ARG_MAX" else OperationCode.ARGMIN
    c.add(code, [c.operand(op.inputs[0]), c.i32(axis)], [out])


@maps("LOCAL_RESPONSE_NORMALIZATION")
def _lrn(c: Converter, op: Operator) -> None:
    o = op.options
    inputs = [c.operand(op.inputs[0]), c.i32(o.Radius()), c.f32(o.Bias()), c.f32(o.Alpha())]
    c.add(
        OperationCode.LOCAL_RESPONSE_NORMALIZATION,
        [*inputs, c.f32(o.Beta())],
        [c.operand(op.outputs[0])],
    )
