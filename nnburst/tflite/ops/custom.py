"""Custom operators that are standard operations in disguise: MediaPipe's
``Convolution2DTransposeBias`` is a transposed convolution with a bias, which
TFLite's builtin TRANSPOSE_CONV could not take when MediaPipe wrote it.

Its options are the raw bytes of the C struct MediaPipe's kernel reads (three
int32: padding, stride width, stride height; padding 1 is SAME and 2 VALID,
as in TFLite's C enum).  Custom operators whose results NNAPI cannot express
are refused by name, with the reason.
"""

from __future__ import annotations

import struct

import numpy as np

from ...codes import FuseCode, OperationCode, PaddingCode
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


@maps("CUSTOM:MaxPoolingWithArgmax2D", "CUSTOM:MaxUnpooling2D")
def _argmax_pooling(c: Converter, op: Operator) -> None:
    raise Unsupported(
        "MediaPipe's pooling with argmax indices and its unpooling: NNAPI has no operation "
        "that returns or scatters by the indices of a window's maximum"
    )
