"""The TFLite mappers' window arguments, against LiteRT: convolutions and pools
whose height and width differ in every argument (input, filter, stride,
dilation, padding), so that an argument passed in the other order, or the
padding read as the other scheme, gives another answer."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")

from .test_tflite import compare
from .tflite_builder import Tensor, options, schema, single_op

RNG = np.random.default_rng(29)
F32 = np.float32
H, W, C = 9, 7, 3  # the input
SAME, VALID = schema.Padding.SAME, schema.Padding.VALID


def _out(size: int, filt: int, stride: int, dilation: int, padding: int) -> int:
    if padding == SAME:
        return -(-size // stride)
    return (size - (filt - 1) * dilation - 1) // stride + 1


WINDOWS = {  # filter (h, w), stride (h, w), dilation (h, w)
    "3x2 /(1,2) d(2,1)": ((3, 2), (1, 2), (2, 1)),
    "2x3 /(2,1) d(1,2)": ((2, 3), (2, 1), (1, 2)),
    "1x3 /(3,1) d(1,1)": ((1, 3), (3, 1), (1, 1)),
}


def _window_options(cls: type, padding: int, stride: tuple, dilation: tuple, **more: object):
    return options(
        cls, padding=padding, strideH=stride[0], strideW=stride[1],
        dilationHFactor=dilation[0], dilationWFactor=dilation[1], **more,
    )  # fmt: skip


@pytest.mark.parametrize("padding", [SAME, VALID], ids=["same", "valid"])
@pytest.mark.parametrize("window", list(WINDOWS))
def test_conv_windows_match_litert(window: str, padding: int) -> None:
    (fh, fw), stride, dilation = WINDOWS[window]
    out_h = _out(H, fh, stride[0], dilation[0], padding)
    out_w = _out(W, fw, stride[1], dilation[1], padding)
    weights = Tensor((4, fh, fw, C), F32, RNG.uniform(-1, 1, (4, fh, fw, C)).astype(F32))
    bias = Tensor((4,), F32, RNG.uniform(-1, 1, 4).astype(F32))
    o = _window_options(schema.Conv2DOptionsT, padding, stride, dilation)
    model = single_op(
        "CONV_2D", [Tensor((1, H, W, C), F32), weights, bias], [Tensor((1, out_h, out_w, 4), F32)], o
    )
    compare(model, [RNG.uniform(-2, 2, (1, H, W, C)).astype(F32)])


@pytest.mark.parametrize("padding", [SAME, VALID], ids=["same", "valid"])
@pytest.mark.parametrize("window", list(WINDOWS))
def test_depthwise_windows_match_litert(window: str, padding: int) -> None:
    (fh, fw), stride, dilation = WINDOWS[window]
    out_h = _out(H, fh, stride[0], dilation[0], padding)
    out_w = _out(W, fw, stride[1], dilation[1], padding)
    weights = Tensor((1, fh, fw, 2 * C), F32, RNG.uniform(-1, 1, (1, fh, fw, 2 * C)).astype(F32))
    bias = Tensor((2 * C,), F32, RNG.uniform(-1, 1, 2 * C).astype(F32))
    o = _window_options(schema.DepthwiseConv2DOptionsT, padding, stride, dilation, depthMultiplier=2)
    model = single_op(
        "DEPTHWISE_CONV_2D",
        [Tensor((1, H, W, C), F32), weights, bias],
        [Tensor((1, out_h, out_w, 2 * C), F32)],
        o,
    )
    compare(model, [RNG.uniform(-2, 2, (1, H, W, C)).astype(F32)])


@pytest.mark.parametrize("op", ["MAX_POOL_2D", "AVERAGE_POOL_2D", "L2_POOL_2D"])
@pytest.mark.parametrize("padding", [SAME, VALID], ids=["same", "valid"])
def test_pools_with_unequal_filter_and_stride_match_litert(op: str, padding: int) -> None:
    (fh, fw), (sh, sw) = (3, 2), (1, 2)
    out_h, out_w = _out(H, fh, sh, 1, padding), _out(W, fw, sw, 1, padding)
    o = options(schema.Pool2DOptionsT, padding=padding, strideH=sh, strideW=sw,
                filterHeight=fh, filterWidth=fw)  # fmt: skip
    model = single_op(op, [Tensor((1, H, W, C), F32)], [Tensor((1, out_h, out_w, C), F32)], o)
    compare(model, [RNG.uniform(0, 2, (1, H, W, C)).astype(F32)])
