"""Reductions and normalizations: softmax, the reductions, ARG_MAX/ARG_MIN and
local response normalization."""

from __future__ import annotations

import numpy as np

from ...codes import FuseCode, OperandCode, OperationCode, PaddingCode
from ...model import OperandType
from ..converter import Converter, Unsupported, constant_axes, maps
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
    keep = bool(op.options.KeepDims()) if op.options is not None else False
    if op.name == "MEAN" and _requantizes(c, op):
        _requantizing_mean(c, op, constant_axes(c, op.inputs[1], len(x.shape)))
        return
    axes = c.ints(constant_axes(c, op.inputs[1], len(x.shape)))
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


def _requantizes(c: Converter, op: Operator) -> bool:
    """A quantized operator whose output scale or zero point is not its input's."""
    x, y = c.operand_type(c.tensor(op.inputs[0])), c.operand_type(c.tensor(op.outputs[0]))
    return x.code in _QUANT8 and (x.scale, x.zero_point) != (y.scale, y.zero_point)


_QUANT8 = (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED)


def _requantizing_mean(c: Converter, op: Operator, axes: list[int]) -> None:
    """A quantized mean over height and width into another scale, as one
    DEPTHWISE_CONV_2D: NNAPI's MEAN keeps its input's scale (and truncates its
    mean), while a depthwise window of ones the size of the image, each weighing
    1/N, sums the centred inputs and rescales them by ``s_in / (N s_out)`` with
    one fixed-point rescale, as LiteRT's reference kernel does.  The results are
    LiteRT's exactly when its multiplier is normalized, as for a power-of-two N;
    otherwise LiteRT's, divided by N in integers, sits below 2**30 and rounds
    one bit elsewhere, and a result now and then is one step apart (NNAPI
    derives its multipliers from the scales, always normalized)."""
    x = c.tensor(op.inputs[0])
    if len(x.shape) != 4 or axes != [1, 2]:
        raise Unsupported(
            "a quantized mean into another scale over other axes than height and width"
        )
    batch, height, width, channels = x.shape
    x_type = c.operand_type(x)
    window = height * width
    ones = np.ones((1, height, width, channels), x.dtype)
    filter_scale = float(np.float32(1.0 / window))
    weights = c.model.add_operand(OperandType(x_type.code, ones.shape, filter_scale, 0))
    c.model.set_operand_value(weights, ones)
    bias = c.model.add_operand(
        OperandType(OperandCode.TENSOR_INT32, (channels,), x_type.scale * filter_scale)
    )
    c.model.set_operand_value(bias, np.zeros(channels, np.int32))
    y = c.tensor(op.outputs[0])
    y_type = c.operand_type(y)
    pooled = (batch, 1, 1, channels)
    out = c.operand(op.outputs[0])
    target = out
    if tuple(y.shape) != pooled:
        target = c.model.add_operand(
            OperandType(y_type.code, pooled, y_type.scale, y_type.zero_point)
        )
    inputs = [c.operand(op.inputs[0]), weights, bias, c.i32(PaddingCode.VALID)]
    inputs += [c.i32(1), c.i32(1), c.i32(1), c.i32(FuseCode.NONE)]
    c.add(OperationCode.DEPTHWISE_CONV_2D, inputs, [target])
    if target != out:
        c.add(OperationCode.RESHAPE, [target, c.ints(y.shape or (1,))], [out])


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
