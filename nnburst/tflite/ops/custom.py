"""Custom operators that are standard operations in disguise: MediaPipe's
``Convolution2DTransposeBias`` is a transposed convolution with a bias, which
TFLite's builtin TRANSPOSE_CONV could not take when MediaPipe wrote it.

Its options are the raw bytes of the C struct MediaPipe's kernel reads (three
int32: padding, stride width, stride height; padding 1 is SAME and 2 VALID,
as in TFLite's C enum).  MediaPipe's ``MaxPoolingWithArgmax2D`` and
``MaxUnpooling2D`` (pooling that also returns where each maximum was, and
its inverse) decompose into selections, exactly, where their windows stay
inside the image (and, for unpooling, tile it); any other use is refused by
name, with the reason.
"""

from __future__ import annotations

import struct

import numpy as np

from ...codes import FuseCode, OperandCode, OperationCode, PaddingCode
from ...model import OperandType
from ..converter import Converter, Unsupported, maps
from ..reader import Operator
from .convolution import bias_operand

#: TfLitePadding, the C enum the custom options hold (not the schema's Padding).
_C_PADDING = {1: PaddingCode.SAME, 2: PaddingCode.VALID}


def transpose_conv_options(op: Operator) -> tuple[PaddingCode, int, int]:
    """(padding, stride width, stride height) from the custom options."""
    if len(op.custom) < 12:
        raise Unsupported(f"custom options of {len(op.custom)} bytes, not the 12 of its struct")
    padding, stride_w, stride_h = struct.unpack_from("<3i", op.custom)
    if padding not in _C_PADDING or stride_w < 1 or stride_h < 1:
        raise Unsupported(f"padding {padding}, strides {stride_w}x{stride_h}")
    return _C_PADDING[padding], stride_w, stride_h


@maps("CUSTOM:Convolution2DTransposeBias")
def _transpose_conv_bias(c: Converter, op: Operator) -> None:
    """TRANSPOSE_CONV_2D at the output shape the file declares (inputs: the
    image, weights [out, h, w, in], bias [out])."""
    padding, stride_w, stride_h = transpose_conv_options(op)
    x, weights = op.inputs[0], op.inputs[1]
    if c.tensor(x).dtype != np.float32:
        raise Unsupported(f"{c.tensor(x).type_name} data (MediaPipe's kernel is float32)")
    channels = c.tensor(weights).shape[0]
    out = c.tensor(op.outputs[0])
    inputs = [c.operand(x), c.operand(weights), bias_operand(c, op, x, weights, channels)]
    inputs += [c.ints(out.shape), c.i32(padding), c.i32(stride_w), c.i32(stride_h)]
    c.add(
        OperationCode.TRANSPOSE_CONV_2D,
        [*inputs, c.i32(FuseCode.NONE), c.boolean(False)],
        [c.operand(op.outputs[0])],
    )


def pool_options(op: Operator) -> tuple[int, int, int, int, int, int]:
    """(padding, stride w, stride h, filter w, filter h, activation): the head of
    the TfLitePoolParams struct MediaPipe's pooling operators keep as options."""
    if len(op.custom) < 24:
        raise Unsupported(f"custom options of {len(op.custom)} bytes, not the 24 of its struct")
    padding, stride_w, stride_h, filter_w, filter_h, activation = struct.unpack_from(
        "<6i", op.custom
    )
    if padding not in _C_PADDING or min(stride_w, stride_h, filter_w, filter_h) < 1:
        raise Unsupported(
            f"padding {padding}, strides {stride_w}x{stride_h}, window {filter_w}x{filter_h}"
        )
    if activation not in _ACTIVATIONS:
        raise Unsupported(f"fused activation {activation}")
    return padding, stride_w, stride_h, filter_w, filter_h, activation


#: TfLiteFusedActivation (none, relu, relu_n1_to_1, relu6), as NNAPI's fuse codes.
_ACTIVATIONS = {0: FuseCode.NONE, 1: FuseCode.RELU, 2: FuseCode.RELU1, 3: FuseCode.RELU6}


def _unpadded(size: int, window: int, stride: int, padding: int) -> int:
    """The pooled size, for a window that never reaches past the input (else refused)."""
    out = (
        -(-size // stride)
        if _C_PADDING[padding] == PaddingCode.SAME
        else (size - window) // stride + 1
    )
    if out < 1 or (out - 1) * stride + window > size:
        raise Unsupported("a window that reaches into the padding")
    return out


@maps("CUSTOM:MaxPoolingWithArgmax2D")
def _max_pool_with_argmax(c: Converter, op: Operator) -> None:
    """MAX_POOL_2D for the maxima; for each window's index (row-major within the
    window, as a float ``t + 0.1``), the taps compared in order, a later tap
    taking over only when strictly greater, as MediaPipe's loop does: one
    STRIDED_SLICE per tap, then GREATER, MAXIMUM and SELECT."""
    padding, stride_w, stride_h, filter_w, filter_h, activation = pool_options(op)
    x = c.tensor(op.inputs[0])
    if x.dtype != np.float32 or len(x.shape) != 4 or len(op.outputs) != 2:
        raise Unsupported("other than one float32 image in and two outputs")
    n, height, width, channels = x.shape
    out_h = _unpadded(height, filter_h, stride_h, padding)
    out_w = _unpadded(width, filter_w, stride_w, padding)
    pooled = (n, out_h, out_w, channels)
    inputs = [c.operand(op.inputs[0]), c.i32(_C_PADDING[padding]), c.i32(stride_w)]
    inputs += [c.i32(stride_h), c.i32(filter_w), c.i32(filter_h), c.i32(_ACTIVATIONS[activation])]
    c.add(OperationCode.MAX_POOL_2D, inputs, [c.operand(op.outputs[0])])
    floats = OperandType(OperandCode.TENSOR_FLOAT32, pooled)
    best = index = -1
    for tap in range(filter_h * filter_w):
        dy, dx = divmod(tap, filter_w)
        end = [n, dy + (out_h - 1) * stride_h + 1, dx + (out_w - 1) * stride_w + 1, channels]
        strides = [1, stride_h, stride_w, 1]
        value = c.model.add_operand(floats)
        c.add(
            OperationCode.STRIDED_SLICE,
            [c.operand(op.inputs[0]), c.ints([0, dy, dx, 0]), c.ints(end), c.ints(strides),
             c.i32(0), c.i32(0), c.i32(0)],
            [value],
        )  # fmt: skip
        here = c.constant(
            OperandCode.TENSOR_FLOAT32, np.full(pooled, tap + 0.1, np.float32), pooled
        )
        if tap == 0:
            best, index = value, here
            continue
        greater = c.model.add_operand(OperandType(OperandCode.TENSOR_BOOL8, pooled))
        c.add(OperationCode.GREATER, [value, best], [greater])
        last = tap == filter_h * filter_w - 1
        chosen = c.operand(op.outputs[1]) if last else c.model.add_operand(floats)
        c.add(OperationCode.SELECT, [greater, here, index], [chosen])
        index = chosen
        if not last:
            larger = c.model.add_operand(floats)
            c.add(OperationCode.MAXIMUM, [best, value], [larger])
            best = larger
    if filter_h * filter_w == 1:
        c.add(OperationCode.RESHAPE, [index, c.ints(pooled)], [c.operand(op.outputs[1])])


@maps("CUSTOM:MaxUnpooling2D")
def _max_unpooling(c: Converter, op: Operator) -> None:
    """Each value back at its window's index, zeros elsewhere, for windows that
    tile the output (stride = window, square): per tap a SELECT of the values
    where the index names it, the taps stacked along depth, then DEPTH_TO_SPACE.
    An index outside the window (no pooling makes one) leaves zeros."""
    _, stride_w, stride_h, filter_w, filter_h, _ = pool_options(op)
    if not stride_w == stride_h == filter_w == filter_h:
        raise Unsupported("windows that overlap or leave gaps (only stride = square window)")
    values, indices = (c.tensor(i) for i in op.inputs[:2])
    if values.dtype != np.float32 or len(values.shape) != 4 or indices.shape != values.shape:
        raise Unsupported("other than float32 values and indices of one shape")
    shape = values.shape
    whole = c.model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, shape))
    c.add(OperationCode.FLOOR, [c.operand(op.inputs[1])], [whole])
    zeros = c.constant(OperandCode.TENSOR_FLOAT32, np.zeros(shape, np.float32), shape)
    pieces = []
    for tap in range(filter_h * filter_w):
        named = c.model.add_operand(OperandType(OperandCode.TENSOR_BOOL8, shape))
        c.add(
            OperationCode.EQUAL,
            [whole, c.constant(OperandCode.TENSOR_FLOAT32, np.array([tap], np.float32), (1,))],
            [named],
        )
        piece = c.model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, shape))
        c.add(OperationCode.SELECT, [named, c.operand(op.inputs[0]), zeros], [piece])
        pieces.append(piece)
    stacked_shape = (*shape[:3], shape[3] * len(pieces))
    stacked = c.model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, stacked_shape))
    c.add(OperationCode.CONCATENATION, [*pieces, c.i32(3)], [stacked])
    c.add(
        OperationCode.DEPTH_TO_SPACE,
        [stacked, c.i32(filter_w), c.boolean(False)],
        [c.operand(op.outputs[0])],
    )
