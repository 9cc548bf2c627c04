"""Convolutions, pools, fully connected layers, batch matrix products and
resizing: the operators with a window or weights, and their bias operands."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ...codes import FuseCode, OperandCode, OperationCode, PaddingCode
from ...model import OperandType
from ..converter import Converter, Unsupported, maps
from ..reader import Operator

_PADDING = {0: PaddingCode.SAME, 1: PaddingCode.VALID}


def bias_operand(
    c: Converter, op: Operator, input_index: int, filter_index: int, channels: int
) -> int:
    """The bias operand: TFLite may omit it; NNAPI wants one, with the scale its rules derive."""
    x, w = c.tensor(input_index), c.tensor(filter_index)
    bias = op.inputs[2] if len(op.inputs) > 2 else -1
    if x.dtype == np.float32:
        if bias >= 0:
            return c.operand(bias)
        return c.constant(OperandCode.TENSOR_FLOAT32, np.zeros(channels, np.float32), (channels,))
    values = c.values(bias, "bias").astype(np.int32) if bias >= 0 else np.zeros(channels, np.int32)
    # Per-channel filters: scale 0 (NNAPI derives each channel's); per-tensor: in × filter.
    scale = 0.0 if w.per_channel else float(x.scales[0] * w.scales[0])  # type: ignore[index]
    operand = c.model.add_operand(OperandType(OperandCode.TENSOR_INT32, (channels,), scale))
    c.model.set_operand_value(operand, values)
    return operand


def _conv_tail(c: Converter, o: Any) -> list[int]:
    if o.Padding() not in _PADDING:
        raise Unsupported(f"padding {o.Padding()}")
    return [c.i32(_PADDING[o.Padding()]), c.i32(o.StrideW()), c.i32(o.StrideH())]


def _dilations(c: Converter, o: Any) -> list[int]:
    return [c.boolean(False), c.i32(o.DilationWFactor()), c.i32(o.DilationHFactor())]


@maps("CONV_2D")
def _conv(c: Converter, op: Operator) -> None:
    o = op.options
    channels = c.tensor(op.inputs[1]).shape[0]
    fuse, out = c.activation(o), c.operand(op.outputs[0])
    inputs = [c.operand(op.inputs[0]), c.operand(op.inputs[1])]
    inputs += [bias_operand(c, op, op.inputs[0], op.inputs[1], channels), *_conv_tail(c, o), fuse]
    c.add(OperationCode.CONV_2D, [*inputs, *_dilations(c, o)], [out])


@maps("DEPTHWISE_CONV_2D")
def _depthwise(c: Converter, op: Operator) -> None:
    o = op.options
    filt = c.tensor(op.inputs[1])
    channels = filt.shape[3]
    multiplier = max(1, channels // max(1, c.tensor(op.inputs[0]).shape[3]))
    fuse, out = c.activation(o), c.operand(op.outputs[0])
    inputs = [c.operand(op.inputs[0]), c.operand(op.inputs[1])]
    inputs += [bias_operand(c, op, op.inputs[0], op.inputs[1], channels), *_conv_tail(c, o)]
    inputs += [c.i32(multiplier), fuse, *_dilations(c, o)]
    c.add(OperationCode.DEPTHWISE_CONV_2D, inputs, [out])


@maps("TRANSPOSE_CONV")
def _transpose_conv(c: Converter, op: Operator) -> None:
    o = op.options
    shape, weights, x = op.inputs[:3]
    channels = c.tensor(weights).shape[0]
    bias_op = Operator(
        op.index, op.name, [x, weights, op.inputs[3] if len(op.inputs) > 3 else -1], []
    )
    fuse, out = c.activation(o), c.operand(op.outputs[0])
    inputs = [c.operand(x), c.operand(weights), bias_operand(c, bias_op, x, weights, channels)]
    inputs += [c.ints(c.values(shape, "output shape").tolist()), *_conv_tail(c, o), fuse]
    c.add(OperationCode.TRANSPOSE_CONV_2D, [*inputs, c.boolean(False)], [out])


@maps("FULLY_CONNECTED")
def _fully_connected(c: Converter, op: Operator) -> None:
    o = op.options
    if o is not None and o.WeightsFormat() != 0:
        raise Unsupported("shuffled weights")
    units = c.tensor(op.inputs[1]).shape[0]
    result = c.tensor(op.outputs[0])
    fuse, out = c.activation(o), c.operand(op.outputs[0])
    x = c.operand(op.inputs[0])
    inputs = [
        x,
        c.operand(op.inputs[1]),
        bias_operand(c, op, op.inputs[0], op.inputs[1], units),
        fuse,
    ]
    if len(result.shape) == 2:
        c.add(OperationCode.FULLY_CONNECTED, inputs, [out])
        return
    # keep_num_dims: NNAPI's result is [batch, units]; reshape it to the declared shape.
    flat = c.model.add_operand(
        OperandType(c.operand_type(result).code, (int(np.prod(result.shape[:-1])), units),
                    c.operand_type(result).scale, c.operand_type(result).zero_point)
    )  # fmt: skip
    c.add(OperationCode.FULLY_CONNECTED, inputs, [flat])
    c.add(OperationCode.RESHAPE, [flat, c.ints(result.shape)], [out])


_POOLS = {
    "AVERAGE_POOL_2D": OperationCode.AVERAGE_POOL_2D,
    "MAX_POOL_2D": OperationCode.MAX_POOL_2D,
    "L2_POOL_2D": OperationCode.L2_POOL_2D,
}


@maps(*_POOLS)
def _pool(c: Converter, op: Operator) -> None:
    o = op.options
    fuse, out = c.activation(o), c.operand(op.outputs[0])
    inputs = [c.operand(op.inputs[0]), *_conv_tail(c, o)]
    window = [c.i32(o.FilterWidth()), c.i32(o.FilterHeight())]
    c.add(_POOLS[op.name], [*inputs, *window, fuse], [out])


_RESIZES = {
    "RESIZE_BILINEAR": OperationCode.RESIZE_BILINEAR,
    "RESIZE_NEAREST_NEIGHBOR": OperationCode.RESIZE_NEAREST_NEIGHBOR,
}


@maps(*_RESIZES)
def _resize(c: Converter, op: Operator) -> None:
    height, width = (int(v) for v in c.values(op.inputs[1], "size").reshape(-1))
    o = op.options
    flags = [c.boolean(bool(o.AlignCorners())), c.boolean(bool(o.HalfPixelCenters()))]
    inputs = [c.operand(op.inputs[0]), c.i32(width), c.i32(height), c.boolean(False), *flags]
    c.add(_RESIZES[op.name], inputs, [c.operand(op.outputs[0])])


@maps("BATCH_MATMUL")
def _batch_matmul(c: Converter, op: Operator) -> None:
    """x @ W: FULLY_CONNECTED over x's rows (between two RESHAPEs) when W is one
    constant float matrix (NNAPI 1.3, and the driver's bound fast path); any other
    product NNAPI's BATCH_MATMUL (feature level 6) takes, with its adjoint flags."""
    o = op.options
    adj_x, adj_y = (bool(o.AdjX()), bool(o.AdjY())) if o is not None else (False, False)
    x, y, out = c.tensor(op.inputs[0]), c.tensor(op.inputs[1]), c.tensor(op.outputs[0])
    try:
        w: np.ndarray | None = c.values(op.inputs[1], "right-hand side")
    except Unsupported:
        w = None  # a computed right-hand side: BATCH_MATMUL
    if (
        w is not None
        and not adj_x
        and x.dtype == np.float32
        and w.ndim >= 2
        and all(d == 1 for d in w.shape[:-2])
    ):
        _matmul_as_fully_connected(c, op, w, adj_y)
        return
    if not adj_x and len(y.shape) >= 2 and all(d == 1 for d in y.shape[:-2]) and len(x.shape) > 2:
        _matmul_of_rows(c, op, adj_y)  # one right-hand matrix: x's batches are rows
        return
    if len(x.shape) != len(y.shape) or not 2 <= len(x.shape) <= 4:
        raise Unsupported(
            f"a product of ranks {len(x.shape)} and {len(y.shape)} (BATCH_MATMUL: one rank, 2 to 4)"
        )
    if x.shape[:-2] != y.shape[:-2]:
        raise Unsupported(f"batch dimensions that broadcast ({x.shape} by {y.shape})")
    if x.dtype not in (np.float32, np.int8) or y.dtype != x.dtype or out.dtype != x.dtype:
        raise Unsupported(f"a {x.dtype} by {y.dtype} product into {out.dtype}")
    inputs = [c.operand(op.inputs[0]), c.operand(op.inputs[1]), c.boolean(adj_x), c.boolean(adj_y)]
    c.add(OperationCode.BATCH_MATMUL, inputs, [c.operand(op.outputs[0])])


def _matmul_of_rows(c: Converter, op: Operator, adj_y: bool) -> None:
    """[..., M, K] @ one [K, N] matrix as a [rows, K] @ [K, N] BATCH_MATMUL."""
    x, y, out = c.tensor(op.inputs[0]), c.tensor(op.inputs[1]), c.tensor(op.outputs[0])
    if x.dtype not in (np.float32, np.int8) or y.dtype != x.dtype or out.dtype != x.dtype:
        raise Unsupported(f"a {x.dtype} by {y.dtype} product into {out.dtype}")
    rows, depth = int(np.prod(x.shape[:-1])), int(x.shape[-1])
    matrix = (int(y.shape[-2]), int(y.shape[-1]))
    flat_x = c.model.add_operand(dataclasses.replace(c.operand_type(x), dimensions=(rows, depth)))
    flat_y = c.model.add_operand(dataclasses.replace(c.operand_type(y), dimensions=matrix))
    flat_out = c.model.add_operand(
        dataclasses.replace(c.operand_type(out), dimensions=(rows, int(out.shape[-1])))
    )
    c.add(OperationCode.RESHAPE, [c.operand(op.inputs[0]), c.ints((rows, depth))], [flat_x])
    c.add(OperationCode.RESHAPE, [c.operand(op.inputs[1]), c.ints(matrix)], [flat_y])
    c.add(
        OperationCode.BATCH_MATMUL, [flat_x, flat_y, c.boolean(False), c.boolean(adj_y)], [flat_out]
    )
    c.add(OperationCode.RESHAPE, [flat_out, c.ints(out.shape)], [c.operand(op.outputs[0])])


def _matmul_as_fully_connected(c: Converter, op: Operator, w: np.ndarray, adj_y: bool) -> None:
    x, out = c.tensor(op.inputs[0]), c.tensor(op.outputs[0])
    w2 = w.reshape(w.shape[-2], w.shape[-1])
    weights = w2 if adj_y else w2.T  # FULLY_CONNECTED wants [units, depth]
    units, depth = int(weights.shape[0]), int(weights.shape[1])
    rows = int(np.prod(x.shape[:-1]))
    flat_x = c.model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (rows, depth)))
    c.add(OperationCode.RESHAPE, [c.operand(op.inputs[0]), c.ints((rows, depth))], [flat_x])
    w_operand = c.constant(
        OperandCode.TENSOR_FLOAT32, np.ascontiguousarray(weights, np.float32), (units, depth)
    )
    bias = c.constant(OperandCode.TENSOR_FLOAT32, np.zeros(units, np.float32), (units,))
    flat_out = c.model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (rows, units)))
    c.add(
        OperationCode.FULLY_CONNECTED, [flat_x, w_operand, bias, c.i32(FuseCode.NONE)], [flat_out]
    )
    c.add(OperationCode.RESHAPE, [flat_out, c.ints(out.shape or (1,))], [c.operand(op.outputs[0])])
