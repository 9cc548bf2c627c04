"""The TFLite mappers' window arguments, against LiteRT: convolutions and pools
whose height and width differ in every argument (input, filter, stride,
dilation, padding), so that an argument passed in the other order, or the
padding read as the other scheme, gives another answer."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")

from nnburst import tflite

from .test_tflite import compare
from .tflite_builder import Tensor, options, run_litert, schema, single_op

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
        "CONV_2D",
        [Tensor((1, H, W, C), F32), weights, bias],
        [Tensor((1, out_h, out_w, 4), F32)],
        o,
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
    o = _window_options(
        schema.DepthwiseConv2DOptionsT, padding, stride, dilation, depthMultiplier=2
    )
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


# -- a convolution without a bias -----------------------------------------------------------------
# TFLite's converter may leave CONV_2D's bias out (index -1, or two inputs); this
# LiteRT refuses such a model, so nnburst's answer for it is compared with LiteRT's
# for the same convolution with a zero bias.

BIASES = ["omitted", "absent"]


def _conv_twins(x: Tensor, w: Tensor, zero_bias: Tensor, out: Tensor, bias: str) -> tuple:
    o = options(schema.Conv2DOptionsT, padding=SAME, strideW=1, strideH=1)
    inputs = [x, w, None] if bias == "omitted" else [x, w]
    return single_op("CONV_2D", inputs, [out], o), single_op("CONV_2D", [x, w, zero_bias], [out], o)


def _compare_twins(without: bytes, with_zero: bytes, x: np.ndarray, tolerance: float) -> None:
    (want,) = run_litert(with_zero, [x])
    with tflite.Runner(without, cache_dir=None) as run:
        (got,) = run(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.abs(got.astype(np.float64) - want).max() <= tolerance


@pytest.mark.parametrize("bias", BIASES)
def test_a_float_conv_without_a_bias_is_one_with_zeros(bias: str) -> None:
    w = Tensor((3, 2, 3, C), F32, RNG.uniform(-1, 1, (3, 2, 3, C)).astype(F32))
    zero = Tensor((3,), F32, np.zeros(3, F32))
    models = _conv_twins(Tensor((1, 5, 4, C), F32), w, zero, Tensor((1, 5, 4, 3), F32), bias)
    _compare_twins(*models, RNG.uniform(-2, 2, (1, 5, 4, C)).astype(F32), 1e-5)


@pytest.mark.parametrize("bias", BIASES)
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_an_int8_conv_without_a_bias_is_one_with_zeros(bias: str, per_channel: bool) -> None:
    scales = [0.01, 0.02, 0.015] if per_channel else [0.01]
    w = Tensor(
        (3, 2, 3, C),
        np.int8,
        RNG.integers(-127, 128, (3, 2, 3, C), dtype=np.int8),
        scale=scales if per_channel else scales[0],
        zero_point=[0] * len(scales) if per_channel else 0,
    )
    bias_scales = [0.05 * s for s in scales]
    zero = Tensor((3,), np.int32, np.zeros(3, np.int32),
                  scale=bias_scales if per_channel else bias_scales[0],
                  zero_point=[0] * len(scales) if per_channel else 0)  # fmt: skip
    x = Tensor((1, 5, 4, C), np.int8, scale=0.05, zero_point=-3)
    out = Tensor((1, 5, 4, 3), np.int8, scale=0.1, zero_point=5)
    models = _conv_twins(x, w, zero, out, bias)
    _compare_twins(*models, RNG.integers(-128, 128, (1, 5, 4, C), dtype=np.int8), 1)


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_a_conv_whose_bias_is_tensor_0_matches_litert(dtype: str) -> None:
    """Tensor indices are the file's order: the bias may well be tensor 0."""
    from .tflite_builder import graph

    if dtype == "float32":
        bias = Tensor((3,), F32, RNG.uniform(-1, 1, 3).astype(F32))
        x, out = Tensor((1, 5, 4, C), F32), Tensor((1, 5, 4, 3), F32)
        w = Tensor((3, 2, 3, C), F32, RNG.uniform(-1, 1, (3, 2, 3, C)).astype(F32))
        feed = RNG.uniform(-2, 2, (1, 5, 4, C)).astype(F32)
    else:
        bias = Tensor((3,), np.int32, RNG.integers(-900, 900, 3).astype(np.int32), scale=0.0005,
                      zero_point=0)  # fmt: skip
        x = Tensor((1, 5, 4, C), np.int8, scale=0.05, zero_point=-3)
        out = Tensor((1, 5, 4, 3), np.int8, scale=0.1, zero_point=5)
        w = Tensor((3, 2, 3, C), np.int8, RNG.integers(-127, 128, (3, 2, 3, C), dtype=np.int8),
                   scale=0.01, zero_point=0)  # fmt: skip
        feed = RNG.integers(-128, 128, (1, 5, 4, C), dtype=np.int8)
    o = options(schema.Conv2DOptionsT, padding=SAME, strideW=1, strideH=1)
    model = graph([bias, x, w, out], [("CONV_2D", [1, 2, 0], [3], o)], [1], [3])
    compare(model, [feed], quantized=dtype == "int8")
