"""CPU driver: the NNAPI 1.2/1.3 convolution, ROI, detection, sequence,
quantized-LSTM and random operations.

Each operation is checked against an independent numpy computation written
here from the operation's definition (a scatter-add loop for transposed
convolution, per-group convolution, a naive bilinear/max loop per ROI, a
plain greedy NMS, repeated single RNN/LSTM steps), and, where the Android
conformance specs publish values, against those known answers.  Validation
rejections must be BAD_DATA; data errors at execution OP_FAILED.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.codes import ResultCode
from nnburst.cpu.executor import PreparedModel
from nnburst.errors import NNError
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.operands import ChannelQuant, OperandInfo

from .op_models import OMITTED, model, rejects, run

# --------------------------------------------------------------- model helpers


def info(
    code: T, *dims: int, scale: float = 0.0, zp: int = 0, channel: ChannelQuant | None = None
) -> OperandInfo:
    return OperandInfo(code, dims, scale, zp, channel)


def f32(*dims: int) -> OperandInfo:
    return OperandInfo(T.TENSOR_FLOAT32, dims)


def i32(value: int) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.INT32, ()), np.array(value, dtype=np.int32)


def fscalar(value: float, code: T = T.FLOAT32) -> tuple[OperandInfo, np.ndarray]:
    dtype = np.float16 if code == T.FLOAT16 else np.float32
    return OperandInfo(code, ()), np.array(value, dtype=dtype)


def boolean(value: bool) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.BOOL, ()), np.array(value)


def const(i: OperandInfo, value: Any) -> tuple[OperandInfo, np.ndarray]:
    return i, np.asarray(value).astype(i.dtype).reshape(i.dimensions)


def omitted(i: OperandInfo) -> tuple[OperandInfo, object]:
    return i, OMITTED


def fails(
    code: Op, inputs: list[Any], outputs: list[OperandInfo], *feed: Any, match: str = ""
) -> None:
    prepared = PreparedModel(model(code, inputs, outputs))
    with pytest.raises(NNError, match=match) as err:
        prepared.run(list(feed))
    assert err.value.code == ResultCode.OP_FAILED


def quant(values: Any, scale: float, zp: int, dtype: Any = np.uint8) -> np.ndarray:
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    q = np.floor(np.asarray(values, dtype=np.float64) / scale + 0.5) + zp
    return np.clip(q, lo, hi).astype(dtype)


def nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


RNG = np.random.default_rng(1234)


# --------------------------------------------------------------- TRANSPOSE_CONV_2D


def naive_transpose_conv(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray,
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
) -> np.ndarray:
    """Scatter every input pixel times the filter into the output; pads = (l, r, t, b)."""
    n, h, wd, _ = x.shape
    o, fh, fw, _ = w.shape
    sh, sw = stride
    pl, pr, pt, pb = pads
    out_h, out_w = (h - 1) * sh + fh - pt - pb, (wd - 1) * sw + fw - pl - pr
    out = np.zeros((n, out_h, out_w, o))
    for bi in range(n):
        for i in range(h):
            for j in range(wd):
                for ki in range(fh):
                    for kj in range(fw):
                        y, xx = i * sh + ki - pt, j * sw + kj - pl
                        if 0 <= y < out_h and 0 <= xx < out_w:
                            out[bi, y, xx] += w[:, ki, kj, :] @ x[bi, i, j]
    return out + b


def tc_explicit(
    x_info: OperandInfo,
    w: Any,
    b: Any,
    pads: tuple[int, int, int, int],
    stride: tuple[int, int],
    fuse: int,
    layout: bool,
) -> list[Any]:
    pl, pr, pt, pb = pads
    return [
        x_info,
        w,
        b,
        i32(pl),
        i32(pr),
        i32(pt),
        i32(pb),
        i32(stride[1]),
        i32(stride[0]),
        i32(fuse),
        boolean(layout),
    ]


def test_transpose_conv_float_matches_scatter_loop_with_negative_tail_padding() -> None:
    x = RNG.normal(size=(2, 3, 4, 3)).astype(np.float32)
    w = RNG.normal(size=(4, 3, 2, 3)).astype(np.float32)
    b = RNG.normal(size=4).astype(np.float32)
    for pads, stride in (((1, 0, 0, 2), (2, 1)), ((0, -1, 1, -2), (2, 3))):
        want = naive_transpose_conv(x, w, b, stride, pads)
        got = run(
            Op.TRANSPOSE_CONV_2D,
            tc_explicit(
                f32(2, 3, 4, 3), const(f32(4, 3, 2, 3), w), const(f32(4), b), pads, stride, 0, False
            ),
            [f32(*want.shape)],
            x,
        )[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # NCHW, relu6
    want = np.clip(naive_transpose_conv(x, w, b, (1, 1), (0, 0, 0, 0)), 0, 6)
    got = run(
        Op.TRANSPOSE_CONV_2D,
        tc_explicit(
            f32(2, 3, 3, 4),
            const(f32(4, 3, 2, 3), w),
            const(f32(4), b),
            (0, 0, 0, 0),
            (1, 1),
            3,
            True,
        ),
        [f32(2, 4, 5, 5)],
        nchw(x),
    )[0]
    np.testing.assert_allclose(got, nchw(want), rtol=1e-5, atol=1e-5)


TC_W1 = np.array(
    [1, 3, 5, 7, 9, 11, 13, 15, 17, 2, 4, 6, 8, 10, 12, 14, 16, 18], np.float32
).reshape(2, 3, 3, 1)
TC_OUT1 = np.array(
    [
        -0.5,
        0,
        1.5,
        2,
        5.5,
        8,
        4.5,
        6,
        8.5,
        10,
        5.5,
        6,
        7.5,
        8,
        23.5,
        26,
        16.5,
        18,
        20.5,
        22,
        14.5,
        18,
        22.5,
        26,
        60.5,
        70,
        40.5,
        46,
        52.5,
        58,
        19.5,
        22,
        25.5,
        28,
        59.5,
        66,
        34.5,
        38,
        42.5,
        46,
        37.5,
        40,
        43.5,
        46,
        101.5,
        108,
        58.5,
        62,
        66.5,
        70,
    ]
).reshape(1, 5, 5, 2)


def tc_implicit(
    x: OperandInfo,
    w: Any,
    b: Any,
    shape: list[int],
    scheme: int,
    stride: tuple[int, int],
    fuse: int,
    layout: bool,
) -> list[Any]:
    return [
        x,
        w,
        b,
        const(info(T.TENSOR_INT32, 4), shape),
        i32(scheme),
        i32(stride[1]),
        i32(stride[0]),
        i32(fuse),
        boolean(layout),
    ]


@pytest.mark.parametrize("layout", [False, True])
def test_transpose_conv_known_answers_implicit_padding(layout: bool) -> None:
    x = np.array([1, 2, 3, 4], np.float32).reshape(1, 2, 2, 1)
    shape = [1, 2, 5, 5] if layout else [1, 5, 5, 2]
    feed = nchw(x) if layout else x
    got = run(
        Op.TRANSPOSE_CONV_2D,
        tc_implicit(
            f32(*feed.shape),
            const(f32(2, 3, 3, 1), TC_W1),
            const(f32(2), [-1.5, -2]),
            shape,
            2,
            (2, 2),
            0,
            layout,
        ),
        [f32(*shape)],
        feed,
    )[0]
    np.testing.assert_allclose(got, nchw(TC_OUT1) if layout else TC_OUT1)
    # SAME padding, stride 3, relu: the requested 3x4 output fixes the padding.
    x2 = np.array([300, 500], np.float32).reshape(1, 1, 2, 1)
    got = run(
        Op.TRANSPOSE_CONV_2D,
        tc_implicit(
            f32(1, 1, 2, 1),
            const(f32(1, 3, 3, 1), [9, 5, 6, 9, 8, 5, 3, 1, 4]),
            const(f32(1), [-1000]),
            [1, 3, 4, 1],
            1,
            (3, 3),
            1,
            False,
        ),
        [f32(1, 3, 4, 1)],
        x2,
    )[0]
    np.testing.assert_allclose(
        got.ravel(), [500, 800, 3500, 1500, 1400, 500, 3500, 3000, 0, 200, 500, 0]
    )


def test_transpose_conv_quantized_known_answers_per_tensor_and_per_channel() -> None:
    x = np.array([1, 2, 3, 4], np.float64).reshape(1, 2, 2, 1)
    bias = np.array([-1.5, -2])
    # quant8 with an output multiplier > 1, then per-channel (signed) filters.
    x_info = info(T.TENSOR_QUANT8_ASYMM, 1, 2, 2, 1, scale=0.5, zp=100)
    w_info = info(T.TENSOR_QUANT8_ASYMM, 2, 3, 3, 1, scale=0.5, zp=128)
    out = info(T.TENSOR_QUANT8_ASYMM, 1, 5, 5, 2, scale=0.1, zp=80)
    got = run(
        Op.TRANSPOSE_CONV_2D,
        tc_implicit(
            x_info,
            const(w_info, quant(TC_W1, 0.5, 128)),
            const(info(T.TENSOR_INT32, 2, scale=0.25), bias / 0.25),
            [1, 5, 5, 2],
            2,
            (2, 2),
            0,
            False,
        ),
        [out],
        quant(x, 0.5, 100),
    )[0]
    np.testing.assert_allclose(got.astype(int), quant(TC_OUT1, 0.1, 80).astype(int), atol=1)
    scales = (0.25, 0.5)
    w_pc = np.stack([quant(TC_W1[c], s, 0, np.int8) for c, s in enumerate(scales)])
    for code, dtype, zp in (
        (T.TENSOR_QUANT8_ASYMM, np.uint8, 100),
        (T.TENSOR_QUANT8_ASYMM_SIGNED, np.int8, -28),
    ):
        w_info = info(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, 2, 3, 3, 1, channel=ChannelQuant(0, scales))
        out = info(code, 1, 5, 5, 2, scale=0.5, zp=zp - 20)
        got = run(
            Op.TRANSPOSE_CONV_2D,
            tc_implicit(
                info(code, 1, 2, 2, 1, scale=0.25, zp=zp),
                const(w_info, w_pc),
                const(info(T.TENSOR_INT32, 2), bias / (np.array(scales) * 0.25)),
                [1, 5, 5, 2],
                2,
                (2, 2),
                0,
                False,
            ),
            [out],
            quant(x, 0.25, zp, dtype),
        )[0]
        want = quant(TC_OUT1, 0.5, zp - 20, dtype)
        np.testing.assert_allclose(got.astype(int), want.astype(int), atol=1)


def test_transpose_conv_float16_and_validation() -> None:
    h = info(T.TENSOR_FLOAT16, 1, 2, 2, 1)
    x = np.array([1, 2, 3, 4], np.float16).reshape(1, 2, 2, 1)
    got = run(
        Op.TRANSPOSE_CONV_2D,
        tc_implicit(
            h,
            const(info(T.TENSOR_FLOAT16, 2, 3, 3, 1), TC_W1),
            const(info(T.TENSOR_FLOAT16, 2), [-1.5, -2]),
            [1, 5, 5, 2],
            2,
            (2, 2),
            0,
            False,
        ),
        [info(T.TENSOR_FLOAT16, 1, 5, 5, 2)],
        x,
    )[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), TC_OUT1, rtol=1e-3)
    w, b = const(f32(2, 3, 3, 1), TC_W1), const(f32(2), [0, 0])
    out = [f32(1, 5, 5, 2)]
    rejects(
        Op.TRANSPOSE_CONV_2D,
        tc_explicit(f32(1, 2, 2, 1), w, b, (0, 0, 0, 0), (2, 2), 0, False)[:-1],
        out,
        "expected 9 .* or 11",
    )
    rejects(
        Op.TRANSPOSE_CONV_2D,
        tc_explicit(f32(1, 2, 2, 1), w, b, (-1, 0, 0, 0), (2, 2), 0, False),
        out,
        "pad_left is -1",
    )
    rejects(
        Op.TRANSPOSE_CONV_2D,
        tc_explicit(f32(1, 2, 2, 1), w, b, (0, 0, 0, 0), (0, 2), 0, False),
        out,
        "stride_h is 0",
    )
    rejects(
        Op.TRANSPOSE_CONV_2D,
        tc_explicit(f32(1, 2, 2, 3), w, b, (0, 0, 0, 0), (2, 2), 0, False),
        out,
        "depth",
    )
    rejects(
        Op.TRANSPOSE_CONV_2D,
        tc_implicit(f32(1, 2, 2, 1), w, b, [1, 5, 5, 2], 3, (2, 2), 0, False),
        out,
        "padding scheme 3",
    )
    q = info(T.TENSOR_QUANT8_ASYMM, 1, 2, 2, 1, scale=0.5, zp=0)
    wq = const(info(T.TENSOR_QUANT8_ASYMM, 2, 3, 3, 1, scale=0.5), np.zeros((2, 3, 3, 1)))
    rejects(
        Op.TRANSPOSE_CONV_2D,
        tc_explicit(
            q, wq, const(info(T.TENSOR_INT32, 2, scale=0.3), [0, 0]), (0, 0, 0, 0), (2, 2), 0, False
        ),
        [info(T.TENSOR_QUANT8_ASYMM, 1, 5, 5, 2, scale=1.0)],
        "bias scale",
    )
    wpc = const(
        info(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, 2, 3, 3, 1, channel=ChannelQuant(3, (1.0,))),
        np.zeros((2, 3, 3, 1)),
    )
    rejects(
        Op.TRANSPOSE_CONV_2D,
        tc_explicit(q, wpc, const(info(T.TENSOR_INT32, 2), [0, 0]), (0, 0, 0, 0), (2, 2), 0, False),
        [info(T.TENSOR_QUANT8_ASYMM, 1, 5, 5, 2, scale=1.0)],
        "dimension 0",
    )


# --------------------------------------------------------------- GROUPED_CONV_2D


def naive_grouped_conv(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray,
    groups: int,
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
) -> np.ndarray:
    """Each group is an ordinary convolution over its slice of channels."""
    pl, pr, pt, pb = pads
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    n, h, wd, c = xp.shape
    o, fh, fw, cg = w.shape
    og = o // groups
    out_h, out_w = (h - fh) // stride[0] + 1, (wd - fw) // stride[1] + 1
    out = np.zeros((n, out_h, out_w, o))
    for g in range(groups):
        xs = xp[..., g * cg : (g + 1) * cg]
        for k in range(g * og, (g + 1) * og):
            for i in range(out_h):
                for j in range(out_w):
                    patch = xs[
                        :, i * stride[0] : i * stride[0] + fh, j * stride[1] : j * stride[1] + fw, :
                    ]
                    out[:, i, j, k] = (patch * w[k]).sum(axis=(1, 2, 3))
    return out + b


def gc_explicit(
    x: OperandInfo,
    w: Any,
    b: Any,
    pads: tuple[int, int, int, int],
    stride: tuple[int, int],
    groups: int,
    fuse: int,
    layout: bool,
) -> list[Any]:
    pl, pr, pt, pb = pads
    return [
        x,
        w,
        b,
        i32(pl),
        i32(pr),
        i32(pt),
        i32(pb),
        i32(stride[1]),
        i32(stride[0]),
        i32(groups),
        i32(fuse),
        boolean(layout),
    ]


def test_grouped_conv_float_matches_per_group_convolution() -> None:
    x = RNG.normal(size=(2, 5, 6, 6)).astype(np.float32)
    w = RNG.normal(size=(9, 3, 2, 2)).astype(np.float32)
    b = RNG.normal(size=9).astype(np.float32)
    want = naive_grouped_conv(x, w, b, 3, (2, 1), (1, 0, 1, 1))
    got = run(
        Op.GROUPED_CONV_2D,
        gc_explicit(
            f32(2, 5, 6, 6),
            const(f32(9, 3, 2, 2), w),
            const(f32(9), b),
            (1, 0, 1, 1),
            (2, 1),
            3,
            0,
            False,
        ),
        [f32(*want.shape)],
        x,
    )[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    got = run(
        Op.GROUPED_CONV_2D,
        gc_explicit(
            f32(2, 6, 5, 6),
            const(f32(9, 3, 2, 2), w),
            const(f32(9), b),
            (1, 0, 1, 1),
            (2, 1),
            3,
            1,
            True,
        ),
        [f32(2, 9, *want.shape[1:3])],
        nchw(x),
    )[0]
    np.testing.assert_allclose(got, nchw(np.maximum(want, 0)), rtol=1e-5, atol=1e-5)


def test_grouped_conv_known_answers_float_and_quant8() -> None:
    x = np.array([1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 1, 2, 3, 3, 3, 3, 3], np.float32)
    x = x.reshape(1, 3, 3, 2)
    w = np.array([1, 2, 2, 1, 4, 3, 2, 1], np.float32).reshape(2, 2, 2, 1)
    want = np.array([33, -0.5, 33, 7.5, 31, 4.5, 27, -9.5]).reshape(1, 2, 2, 2)
    got = run(
        Op.GROUPED_CONV_2D,
        gc_explicit(
            f32(1, 3, 3, 2),
            const(f32(2, 2, 2, 1), w),
            const(f32(2), [10, -33.5]),
            (0, 0, 0, 0),
            (1, 1),
            2,
            0,
            False,
        ),
        [f32(1, 2, 2, 2)],
        x,
    )[0]
    np.testing.assert_allclose(got, want)
    got = run(
        Op.GROUPED_CONV_2D,
        gc_explicit(
            info(T.TENSOR_QUANT8_ASYMM, 1, 3, 3, 2, scale=0.25, zp=100),
            const(info(T.TENSOR_QUANT8_ASYMM, 2, 2, 2, 1, scale=0.25, zp=128), quant(w, 0.25, 128)),
            const(info(T.TENSOR_INT32, 2, scale=0.0625), [160, -536]),
            (0, 0, 0, 0),
            (1, 1),
            2,
            0,
            False,
        ),
        [info(T.TENSOR_QUANT8_ASYMM, 1, 2, 2, 2, scale=0.5, zp=80)],
        quant(x, 0.25, 100),
    )[0]
    np.testing.assert_array_equal(got, quant(want, 0.5, 80))
    # implicit SAME padding, 2 groups
    x2 = np.array([1, 2, 3, 4, 4, 3, 2, 1, 2, 3, 3, 3], np.float32).reshape(1, 3, 2, 2)
    w2 = np.array([100, 20, 1, 200, 10, 2, 200, 30, 1, 100, 20, 3], np.float32)
    got = run(
        Op.GROUPED_CONV_2D,
        [
            f32(1, 3, 2, 2),
            const(f32(2, 2, 3, 1), w2),
            const(f32(2), [500, -1000]),
            i32(1),
            i32(1),
            i32(1),
            i32(2),
            i32(0),
            boolean(False),
        ],
        [f32(1, 3, 2, 2)],
        x2,
    )[0]
    np.testing.assert_allclose(
        got.ravel(), [567, -873, 1480, -160, 608, -840, 1370, -10, 543, -907, 760, -310]
    )


def test_grouped_conv_signed_per_channel_matches_integer_reference() -> None:
    x = RNG.integers(-128, 128, size=(1, 4, 4, 4)).astype(np.int8)
    w = RNG.integers(-127, 128, size=(4, 3, 3, 2)).astype(np.int8)
    scales = (0.02, 0.03, 0.05, 0.01)
    bias = RNG.integers(-500, 500, size=4).astype(np.int32)
    x_info = info(T.TENSOR_QUANT8_ASYMM_SIGNED, 1, 4, 4, 4, scale=0.1, zp=3)
    out_info = info(T.TENSOR_QUANT8_ASYMM_SIGNED, 1, 4, 4, 4, scale=0.7, zp=-5)
    w_info = info(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, 4, 3, 3, 2, channel=ChannelQuant(0, scales))
    got = run(
        Op.GROUPED_CONV_2D,
        gc_explicit(
            x_info,
            const(w_info, w),
            const(info(T.TENSOR_INT32, 4), bias),
            (1, 1, 1, 1),
            (1, 1),
            2,
            0,
            False,
        ),
        [out_info],
        x,
    )[0]
    acc = naive_grouped_conv(
        x.astype(np.float64) - 3, w.astype(np.float64), bias, 2, (1, 1), (1, 1, 1, 1)
    )
    want = np.clip(np.floor(acc * 0.1 * np.array(scales) / 0.7 + 0.5) - 5, -128, 127)
    np.testing.assert_allclose(got.astype(int), want.astype(int), atol=1)


def test_grouped_conv_validation() -> None:
    w, b = const(f32(4, 1, 1, 2), np.ones((4, 1, 1, 2))), const(f32(4), np.zeros(4))
    out = [f32(1, 2, 2, 4)]
    rejects(
        Op.GROUPED_CONV_2D,
        gc_explicit(f32(1, 2, 2, 4), w, b, (0, 0, 0, 0), (1, 1), 3, 0, False),
        out,
        "not divisible by 3 groups",
    )
    rejects(
        Op.GROUPED_CONV_2D,
        gc_explicit(f32(1, 2, 2, 6), w, b, (0, 0, 0, 0), (1, 1), 2, 0, False),
        out,
        "input depth 6",
    )
    rejects(
        Op.GROUPED_CONV_2D,
        gc_explicit(f32(1, 2, 2, 4), w, b, (0, 0, 0, 0), (1, 1), 0, 0, False),
        out,
        "num_groups is 0",
    )
    rejects(
        Op.GROUPED_CONV_2D,
        gc_explicit(f32(1, 2, 2, 4), w, b, (0, 0, 0, 0), (1, 1), 2, 0, False)[:-1],
        out,
        "expected 9 .* or 12",
    )
    rejects(
        Op.GROUPED_CONV_2D,
        gc_explicit(
            f32(1, 2, 2, 4), w, const(f32(3), [0, 0, 0]), (0, 0, 0, 0), (1, 1), 2, 0, False
        ),
        out,
        "bias length 3",
    )


# --------------------------------------------------------------- ROI_ALIGN


def bilinear(img: np.ndarray, y: float, x: float) -> np.ndarray:
    """Bilinear sample of an HWC image; at or past the last row/column the edge is used."""
    h, w, _ = img.shape
    y0, x0 = int(math.floor(y)), int(math.floor(x))
    if y0 >= h - 1:
        y0, y1, ly = h - 1, h - 1, 0.0
    else:
        y1, ly = y0 + 1, y - y0
    if x0 >= w - 1:
        x0, x1, lx = w - 1, w - 1, 0.0
    else:
        x1, lx = x0 + 1, x - x0
    return (
        (1 - ly) * (1 - lx) * img[y0, x0]
        + (1 - ly) * lx * img[y0, x1]
        + ly * (1 - lx) * img[y1, x0]
        + ly * lx * img[y1, x1]
    )


def naive_roi_align(
    fmap: np.ndarray,
    rois: np.ndarray,
    batches: np.ndarray,
    out_h: int,
    out_w: int,
    ratio_h: float,
    ratio_w: float,
    samp_h: int,
    samp_w: int,
) -> np.ndarray:
    out = np.zeros((len(rois), out_h, out_w, fmap.shape[3]))
    for r, (x1, y1, x2, y2) in enumerate(np.asarray(rois, np.float64)):
        x1, x2, y1, y2 = x1 / ratio_w, x2 / ratio_w, y1 / ratio_h, y2 / ratio_h
        bin_w, bin_h = max(x2 - x1, 1.0) / out_w, max(y2 - y1, 1.0) / out_h
        sw = samp_w if samp_w > 0 else math.ceil(bin_w)
        sh = samp_h if samp_h > 0 else math.ceil(bin_h)
        img = fmap[batches[r]].astype(np.float64)
        for i in range(out_h):
            for j in range(out_w):
                acc = 0.0
                for a in range(sh):
                    for c in range(sw):
                        acc = acc + bilinear(
                            img,
                            y1 + i * bin_h + (a + 0.5) * bin_h / sh,
                            x1 + j * bin_w + (c + 0.5) * bin_w / sw,
                        )
                out[r, i, j] = acc / (sh * sw)
    return out


def roi_align_inputs(
    x: OperandInfo,
    rois: OperandInfo,
    n: int,
    out: tuple[int, int],
    ratios: tuple[float, float],
    samples: tuple[int, int],
    layout: bool,
    scalar: T = T.FLOAT32,
) -> list[Any]:
    return [
        x,
        rois,
        info(T.TENSOR_INT32, n),
        i32(out[0]),
        i32(out[1]),
        fscalar(ratios[0], scalar),
        fscalar(ratios[1], scalar),
        i32(samples[0]),
        i32(samples[1]),
        boolean(layout),
    ]


ROI_IMG1 = np.array(
    [-10, -1, 4, -5, -8, -2, 9, 1, 7, -2, 3, -7, -2, 10, -3, 5], np.float32
).reshape(1, 4, 4, 1)
ROI_BOX1 = np.array([[2, 2, 4, 4], [0, 0, 8, 8], [2, 0, 4, 8], [0, 2, 8, 4]], np.float32)
ROI_OUT1 = np.array(
    [
        0.375,
        5.125,
        -0.375,
        2.875,
        -0.5,
        -0.3125,
        3.1875,
        1.125,
        0.25,
        4.25,
        4.875,
        0.625,
        -0.1875,
        1.125,
        0.9375,
        -2.625,
    ]
).reshape(4, 2, 2, 1)


@pytest.mark.parametrize("layout", [False, True])
def test_roi_align_known_answer_float_and_nchw(layout: bool) -> None:
    feed = nchw(ROI_IMG1) if layout else ROI_IMG1
    out_shape = (4, 1, 2, 2) if layout else (4, 2, 2, 1)
    got = run(
        Op.ROI_ALIGN,
        roi_align_inputs(f32(*feed.shape), f32(4, 4), 4, (2, 2), (2.0, 2.0), (4, 4), layout),
        [f32(*out_shape)],
        feed,
        ROI_BOX1,
        np.zeros(4, np.int32),
    )[0]
    np.testing.assert_allclose(got, nchw(ROI_OUT1) if layout else ROI_OUT1, atol=1e-5)
    # Five regions on batch 2 of 4, different height/width ratios, adaptive height sampling.
    img = np.zeros((4, 4, 4, 1), np.float32)
    img[2] = ROI_IMG1[0]
    boxes = np.array(
        [[1, 2, 2, 4], [0, 0, 4, 8], [1, 0, 2, 8], [0, 2, 4, 4], [0, 0, 0, 0]], np.float32
    )
    got = run(
        Op.ROI_ALIGN,
        roi_align_inputs(f32(4, 4, 4, 1), f32(5, 4), 5, (2, 2), (2.0, 1.0), (0, 4), False),
        [f32(5, 2, 2, 1)],
        img,
        boxes,
        np.full(5, 2, np.int32),
    )[0]
    want = np.concatenate([ROI_OUT1.ravel(), [-7.4375, -3.3125, -6.8125, -3.4375]])
    np.testing.assert_allclose(got.ravel(), want, atol=1e-5)


def test_roi_align_quantized_known_answer() -> None:
    for code, dtype, zp in (
        (T.TENSOR_QUANT8_ASYMM, np.uint8, 128),
        (T.TENSOR_QUANT8_ASYMM_SIGNED, np.int8, 0),
    ):
        rois = info(T.TENSOR_QUANT16_ASYMM, 4, 4, scale=0.125)
        got = run(
            Op.ROI_ALIGN,
            roi_align_inputs(
                info(code, 1, 4, 4, 1, scale=0.25, zp=zp),
                rois,
                4,
                (2, 2),
                (2.0, 2.0),
                (4, 4),
                False,
            ),
            [info(code, 4, 2, 2, 1, scale=0.0625, zp=zp)],
            quant(ROI_IMG1, 0.25, zp, dtype),
            (ROI_BOX1 * 8).astype(np.uint16),
            np.zeros(4, np.int32),
        )[0]
        want = quant(ROI_OUT1, 0.0625, zp, dtype)
        np.testing.assert_allclose(got.astype(int), want.astype(int), atol=1)


def test_roi_align_matches_naive_bilinear_loop() -> None:
    fmap = RNG.normal(size=(2, 7, 9, 3)).astype(np.float32)
    rois = np.array(
        [
            [0.5, 1.0, 14.0, 10.0],
            [3.0, 2.0, 3.5, 2.5],
            [0.0, 0.0, 17.9, 13.9],
            [6.0, 4.0, 16.0, 6.0],
        ],
        np.float32,
    )
    batches = np.array([1, 0, 0, 1], np.int32)
    for samples in ((2, 3), (0, 0), (1, 0)):
        want = naive_roi_align(fmap, rois, batches, 3, 2, 2.0, 2.0, *samples)
        got = run(
            Op.ROI_ALIGN,
            roi_align_inputs(f32(2, 7, 9, 3), f32(4, 4), 4, (3, 2), (2.0, 2.0), samples, False),
            [f32(4, 3, 2, 3)],
            fmap,
            rois,
            batches,
        )[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # float16 tensors take float16 ratio scalars
    got = run(
        Op.ROI_ALIGN,
        roi_align_inputs(
            info(T.TENSOR_FLOAT16, 2, 7, 9, 3),
            info(T.TENSOR_FLOAT16, 4, 4),
            4,
            (3, 2),
            (2.0, 2.0),
            (2, 2),
            False,
            T.FLOAT16,
        ),
        [info(T.TENSOR_FLOAT16, 4, 3, 2, 3)],
        fmap.astype(np.float16),
        rois.astype(np.float16),
        batches,
    )[0]
    want = naive_roi_align(
        fmap.astype(np.float16), rois.astype(np.float16), batches, 3, 2, 2.0, 2.0, 2, 2
    )
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)


def test_roi_align_zero_rois_bad_rois_and_validation() -> None:
    args = roi_align_inputs(f32(1, 4, 4, 1), f32(0, 4), 0, (2, 2), (2.0, 2.0), (4, 4), False)
    got = run(
        Op.ROI_ALIGN,
        args,
        [f32(0, 2, 2, 1)],
        ROI_IMG1,
        np.zeros((0, 4), np.float32),
        np.zeros(0, np.int32),
    )[0]
    assert got.shape == (0, 2, 2, 1)
    args = roi_align_inputs(f32(1, 4, 4, 1), f32(1, 4), 1, (2, 2), (2.0, 2.0), (4, 4), False)
    fails(
        Op.ROI_ALIGN,
        args,
        [f32(1, 2, 2, 1)],
        ROI_IMG1,
        np.array([[0, 0, 9, 4]], np.float32),
        np.zeros(1, np.int32),
        match="outside",
    )
    fails(
        Op.ROI_ALIGN,
        args,
        [f32(1, 2, 2, 1)],
        ROI_IMG1,
        np.array([[4, 0, 2, 4]], np.float32),
        np.zeros(1, np.int32),
        match="inverted",
    )
    fails(
        Op.ROI_ALIGN,
        args,
        [f32(1, 2, 2, 1)],
        ROI_IMG1,
        np.array([[0, 0, 2, 2]], np.float32),
        np.ones(1, np.int32),
        match="batch 1",
    )
    rejects(
        Op.ROI_ALIGN,
        roi_align_inputs(f32(1, 4, 4, 1), f32(1, 4), 1, (0, 2), (2.0, 2.0), (4, 4), False),
        [f32(1, 2, 2, 1)],
        "output_height is 0",
    )
    rejects(
        Op.ROI_ALIGN,
        roi_align_inputs(f32(1, 4, 4, 1), f32(1, 4), 1, (2, 2), (2.0, 2.0), (-1, 4), False),
        [f32(1, 2, 2, 1)],
        "sampling",
    )
    rejects(
        Op.ROI_ALIGN,
        roi_align_inputs(
            info(T.TENSOR_FLOAT16, 1, 4, 4, 1),
            info(T.TENSOR_FLOAT16, 1, 4),
            1,
            (2, 2),
            (2.0, 2.0),
            (4, 4),
            False,
        ),
        [info(T.TENSOR_FLOAT16, 1, 2, 2, 1)],
        "FLOAT32; expected FLOAT16",
    )
    q = info(T.TENSOR_QUANT8_ASYMM, 1, 4, 4, 1, scale=0.25, zp=128)
    rejects(
        Op.ROI_ALIGN,
        roi_align_inputs(
            q, info(T.TENSOR_QUANT16_ASYMM, 1, 4, scale=0.25), 1, (2, 2), (2.0, 2.0), (4, 4), False
        ),
        [q],
        "scale 0.125",
    )
    rejects(
        Op.ROI_ALIGN,
        roi_align_inputs(f32(1, 4, 4, 1), f32(1, 4), 1, (2, 2), (2.0, 2.0), (4, 4), False)[:-1],
        [f32(1, 2, 2, 1)],
        "expected 10",
    )


# --------------------------------------------------------------- ROI_POOLING


def naive_roi_pool(
    fmap: np.ndarray,
    rois: np.ndarray,
    batches: np.ndarray,
    out_h: int,
    out_w: int,
    ratio_h: float,
    ratio_w: float,
    empty: float = 0,
) -> np.ndarray:
    out = np.zeros((len(rois), out_h, out_w, fmap.shape[3]), fmap.dtype)
    h, w = fmap.shape[1:3]
    for r, box in enumerate(np.asarray(rois, np.float64)):
        x1, y1, x2, y2 = (int(math.floor(v + 0.5)) for v in box / np.array([ratio_w, ratio_h] * 2))
        bin_h, bin_w = max(y2 - y1 + 1, 1) / out_h, max(x2 - x1 + 1, 1) / out_w
        for i in range(out_h):
            for j in range(out_w):
                hs, he = int(math.floor(i * bin_h + y1)), int(math.ceil((i + 1) * bin_h + y1))
                ws, we = int(math.floor(j * bin_w + x1)), int(math.ceil((j + 1) * bin_w + x1))
                window = fmap[batches[r], min(hs, h) : min(he, h), min(ws, w) : min(we, w)]
                out[r, i, j] = window.max(axis=(0, 1)) if window.size else empty
    return out


def roi_pool_inputs(
    x: OperandInfo,
    rois: OperandInfo,
    n: int,
    out: tuple[int, int],
    ratios: tuple[float, float],
    layout: bool,
    scalar: T = T.FLOAT32,
) -> list[Any]:
    return [
        x,
        rois,
        info(T.TENSOR_INT32, n),
        i32(out[0]),
        i32(out[1]),
        fscalar(ratios[0], scalar),
        fscalar(ratios[1], scalar),
        boolean(layout),
    ]


@pytest.mark.parametrize("layout", [False, True])
def test_roi_pooling_known_answers(layout: bool) -> None:
    boxes = np.array([[2, 2, 4, 4], [0, 0, 6, 6], [2, 0, 4, 6], [0, 2, 6, 4]], np.float32)
    want = np.array([-2, 9, -2, 3, -1, 9, 10, 5, -1, 9, 10, 3, -2, 9, 7, 3], np.float32).reshape(
        4, 2, 2, 1
    )
    feed = nchw(ROI_IMG1) if layout else ROI_IMG1
    shape = (4, 1, 2, 2) if layout else (4, 2, 2, 1)
    got = run(
        Op.ROI_POOLING,
        roi_pool_inputs(f32(*feed.shape), f32(4, 4), 4, (2, 2), (2.0, 2.0), layout),
        [f32(*shape)],
        feed,
        boxes,
        np.zeros(4, np.int32),
    )[0]
    np.testing.assert_array_equal(got, nchw(want) if layout else want)
    q = info(T.TENSOR_QUANT8_ASYMM_SIGNED, *feed.shape, scale=0.25, zp=-2)
    got = run(
        Op.ROI_POOLING,
        roi_pool_inputs(
            q, info(T.TENSOR_QUANT16_ASYMM, 4, 4, scale=0.125), 4, (2, 2), (2.0, 2.0), layout
        ),
        [info(T.TENSOR_QUANT8_ASYMM_SIGNED, *shape, scale=0.25, zp=-2)],
        quant(feed, 0.25, -2, np.int8),
        (boxes * 8).astype(np.uint16),
        np.zeros(4, np.int32),
    )[0]
    np.testing.assert_array_equal(got, quant(nchw(want) if layout else want, 0.25, -2, np.int8))


def test_roi_pooling_matches_naive_max_loop_and_rejects_requantization() -> None:
    fmap = RNG.normal(size=(2, 6, 8, 2)).astype(np.float32)
    rois = np.array(
        [[0, 0, 15, 11], [3.3, 2.6, 9.1, 7.7], [2, 2, 2, 2], [10, 1, 15.9, 11.9]], np.float32
    )
    batches = np.array([0, 1, 1, 0], np.int32)
    want = naive_roi_pool(fmap, rois, batches, 3, 2, 2.0, 2.0)
    got = run(
        Op.ROI_POOLING,
        roi_pool_inputs(f32(2, 6, 8, 2), f32(4, 4), 4, (3, 2), (2.0, 2.0), False),
        [f32(4, 3, 2, 2)],
        fmap,
        rois,
        batches,
    )[0]
    np.testing.assert_array_equal(got, want)
    q = info(T.TENSOR_QUANT8_ASYMM, 1, 4, 4, 1, scale=0.25, zp=128)
    rejects(
        Op.ROI_POOLING,
        roi_pool_inputs(
            q, info(T.TENSOR_QUANT16_ASYMM, 1, 4, scale=0.125), 1, (2, 2), (2.0, 2.0), False
        ),
        [info(T.TENSOR_QUANT8_ASYMM, 1, 2, 2, 1, scale=0.5, zp=128)],
        "scale and zero point",
    )


# --------------------------------------------------------------- HEATMAP_MAX_KEYPOINT

HEAT1 = np.array(
    [
        -10,
        -1,
        4,
        -5,
        -8,
        -2,
        9,
        1,
        7,
        -2,
        3,
        -7,
        -2,
        2,
        -3,
        5,
        -10,
        -1,
        4,
        -5,
        -8,
        -2,
        9,
        1,
        7,
        -2,
        3,
        -7,
        -2,
        10,
        -3,
        5,
        -10,
        -1,
        4,
        -5,
        -8,
        -2,
        4,
        1,
        7,
        -2,
        3,
        -7,
        -2,
        2,
        -3,
        5,
        -10,
        -1,
        4,
        10,
        -8,
        -2,
        4,
        1,
        7,
        -2,
        3,
        -7,
        -2,
        2,
        -3,
        5,
        -10,
        -56,
        4,
        -5,
        -8,
        -2,
        9,
        1,
        7,
        -2,
        3,
        -7,
        -2,
        2,
        -3,
        5,
        -10,
        -57.827329175,
        4,
        -5,
        -8,
        -2,
        9,
        1,
        7,
        -2,
        3,
        -7,
        -2,
        2,
        -3,
        5,
    ],
    np.float32,
).reshape(6, 4, 4, 1)
HEAT_BOXES1 = np.array(
    [
        [5, 2, 10, 20],
        [1, 7, 30, 10],
        [8, 3, 15, 13],
        [6, 5, 19, 12],
        [5, 2, 10, 20],
        [5, 2, 10, 20],
    ],
    np.float32,
)
HEAT_SCORE1 = [9.071493, 10.00500, 7.187500, 10.00000, 10.689667, 9.000000]
HEAT_POINTS1 = [
    8.224462,
    8.537316,
    11.73000,
    9.625000,
    8.875000,
    9.562500,
    17.37500,
    5.875000,
    9.569672,
    2.000000,
    8.125000,
    8.750000,
]


@pytest.mark.parametrize("layout", [False, True])
def test_heatmap_max_keypoint_known_answers(layout: bool) -> None:
    feed = nchw(HEAT1) if layout else HEAT1
    score, points = run(
        Op.HEATMAP_MAX_KEYPOINT,
        [f32(*feed.shape), f32(6, 4), boolean(layout)],
        [f32(6, 1), f32(6, 1, 2)],
        feed,
        HEAT_BOXES1,
    )
    np.testing.assert_allclose(score.ravel(), HEAT_SCORE1, rtol=1e-5)
    np.testing.assert_allclose(points.ravel(), HEAT_POINTS1, rtol=1e-5)
    h16 = info(T.TENSOR_FLOAT16, *feed.shape)
    score, points = run(
        Op.HEATMAP_MAX_KEYPOINT,
        [h16, info(T.TENSOR_FLOAT16, 6, 4), boolean(layout)],
        [info(T.TENSOR_FLOAT16, 6, 1), info(T.TENSOR_FLOAT16, 6, 1, 2)],
        feed.astype(np.float16),
        HEAT_BOXES1.astype(np.float16),
    )
    np.testing.assert_allclose(score.astype(np.float32).ravel()[:4], HEAT_SCORE1[:4], rtol=2e-3)


def test_heatmap_max_keypoint_many_keypoints_and_quantized() -> None:
    heat = np.array(
        [
            0.19,
            0.61,
            0.49,
            0.01,
            0.98,
            0.65,
            0.64,
            0.70,
            0.76,
            0.55,
            0.83,
            0.19,
            0.46,
            0.03,
            0.67,
            0.71,
            0.17,
            0.23,
            0.89,
            0.08,
            0.96,
            0.65,
            0.52,
            0.40,
            0.36,
            0.80,
            0.55,
            0.89,
            0.58,
            0.29,
            0.27,
            0.69,
            0.66,
            0.06,
            0.51,
            0.26,
            0.96,
            0.38,
            0.41,
            0.89,
            0.88,
            0.46,
            0.96,
            0.73,
            0.54,
            0.64,
            0.84,
            0.74,
            0.51,
            0.41,
            0.13,
            0.19,
            0.52,
            0.21,
            0.50,
            0.75,
            0.89,
            0.89,
            0.20,
            0.58,
            0.70,
            0.13,
            0.29,
            0.39,
            0.91,
            0.06,
            0.93,
            0.34,
            0.80,
            0.87,
            0.59,
            0.67,
            0.57,
            0.85,
            0.24,
            0.25,
            0.76,
            0.34,
            0.37,
            0.11,
            0.00,
            0.29,
            0.30,
            0.77,
            0.34,
            0.57,
            0.48,
            0.76,
            0.93,
            0.18,
            0.64,
            0.12,
            0.67,
            0.47,
            0.56,
            0.50,
            0.48,
            0.99,
            0.46,
            0.66,
            0.98,
            0.06,
            0.10,
            0.66,
            0.66,
            0.91,
            0.67,
            0.23,
            0.40,
            0.37,
            0.17,
            0.35,
            0.48,
            0.98,
            0.47,
            0.49,
            0.56,
            0.18,
            0.75,
            0.29,
            0.04,
            0.23,
            0.42,
            0.55,
            0.38,
            0.07,
            0.71,
            0.80,
        ],
        np.float32,
    ).reshape(2, 4, 4, 4)
    boxes = np.array([[5, 2, 10, 20], [1, 7, 30, 10]], np.float32)
    want_score = [1.020210, 0.890556, 1.007110, 0.945129, 0.987798, 1.073820, 0.930000, 0.8]
    want_points = [
        7.227723,
        4.250000,
        8.090278,
        17.750000,
        8.523379,
        12.589181,
        8.365580,
        10.122508,
        12.431603,
        8.934225,
        4.625000,
        9.239437,
        4.625000,
        7.375000,
        26.375000,
        9.625000,
    ]
    score, points = run(
        Op.HEATMAP_MAX_KEYPOINT,
        [f32(2, 4, 4, 4), f32(2, 4), boolean(False)],
        [f32(2, 4), f32(2, 4, 2)],
        heat,
        boxes,
    )
    np.testing.assert_allclose(score.ravel(), want_score, rtol=1e-5)
    np.testing.assert_allclose(points.ravel(), want_points, rtol=1e-5)
    # Quantized: the float algorithm on dequantized data, requantized.
    qh = quant(heat, 0.01, 0)
    q_score, q_points = run(
        Op.HEATMAP_MAX_KEYPOINT,
        [
            info(T.TENSOR_QUANT8_ASYMM, 2, 4, 4, 4, scale=0.01),
            info(T.TENSOR_QUANT16_ASYMM, 2, 4, scale=0.125),
            boolean(False),
        ],
        [
            info(T.TENSOR_QUANT8_ASYMM, 2, 4, scale=0.01, zp=10),
            info(T.TENSOR_QUANT16_ASYMM, 2, 4, 2, scale=0.125),
        ],
        qh,
        (boxes * 8).astype(np.uint16),
    )
    f_score, f_points = run(
        Op.HEATMAP_MAX_KEYPOINT,
        [f32(2, 4, 4, 4), f32(2, 4), boolean(False)],
        [f32(2, 4), f32(2, 4, 2)],
        qh.astype(np.float32) * np.float32(0.01),
        boxes,
    )
    np.testing.assert_allclose(q_score.astype(int), quant(f_score, 0.01, 10).astype(int), atol=1)
    np.testing.assert_allclose(
        q_points.astype(int), quant(f_points, 0.125, 0, np.uint16).astype(int), atol=1
    )
    rejects(
        Op.HEATMAP_MAX_KEYPOINT,
        [f32(2, 1, 1, 4), f32(2, 4), boolean(False)],
        [f32(2, 4), f32(2, 4, 2)],
        "below 2",
    )
    rejects(
        Op.HEATMAP_MAX_KEYPOINT,
        [f32(2, 4, 4, 4), f32(2, 4), boolean(False)],
        [f32(2, 4), info(T.TENSOR_QUANT16_ASYMM, 2, 4, 2, scale=0.125)],
        "output 1",
    )
    fails(
        Op.HEATMAP_MAX_KEYPOINT,
        [f32(1, 4, 4, 1), f32(1, 4), boolean(False)],
        [f32(1, 1), f32(1, 1, 2)],
        HEAT1[:1],
        np.array([[5, 2, 1, 20]], np.float32),
        match="x2 < x1",
    )


# --------------------------------------------------------------- AXIS_ALIGNED_BBOX_TRANSFORM


def naive_bbox_transform(
    rois: np.ndarray, deltas: np.ndarray, batches: np.ndarray, image: np.ndarray
) -> np.ndarray:
    out = np.zeros(deltas.shape)
    for r, (x1, y1, x2, y2) in enumerate(np.asarray(rois, np.float64)):
        h_img, w_img = image[batches[r]]
        w, h, cx, cy = x2 - x1, y2 - y1, (x1 + x2) / 2, (y1 + y2) / 2
        for c in range(deltas.shape[1] // 4):
            dx, dy, dw, dh = deltas[r, 4 * c : 4 * c + 4]
            nx, ny, nw, nh = cx + dx * w, cy + dy * h, math.exp(dw) * w, math.exp(dh) * h
            box = [nx - nw / 2, ny - nh / 2, nx + nw / 2, ny + nh / 2]
            limits = [w_img, h_img, w_img, h_img]
            out[r, 4 * c : 4 * c + 4] = [min(max(v, 0), m) for v, m in zip(box, limits)]
    return out


BBOX_ROIS = np.array(
    [
        [100, 150, 400, 430],
        [120, 60, 122, 61],
        [10, 20, 20, 50],
        [50, 120, 150, 250],
        [400, 100, 1000, 2000],
    ],
    np.float32,
)
BBOX_DELTAS = np.array(
    [
        0.2,
        0.2,
        0.1,
        0.1,
        0.3,
        -0.1,
        -0.2,
        0.1,
        -0.5,
        0.2,
        0.2,
        -0.5,
        -0.1,
        -0.1,
        2.5,
        3,
        -0.5,
        -0.5,
        1,
        1,
        0.5,
        0.5,
        -1.5,
        -1.2,
        0.2,
        0.2,
        -3,
        -4,
        1,
        -0.5,
        0.3,
        0.5,
        0.3,
        -0.2,
        1.1,
        -0.8,
        0.1,
        0.05,
        -0.5,
        -0.5,
    ],
    np.float32,
).reshape(5, 8)


def test_bbox_transform_float_and_quantized() -> None:
    batches = np.array([0, 1, 2, 2, 3], np.int32)
    image = np.array([[512, 512], [128, 256], [256, 256], [1024, 512]], np.float32)
    args = [f32(5, 4), f32(5, 8), info(T.TENSOR_INT32, 5), f32(4, 2)]
    got = run(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM, args, [f32(5, 8)], BBOX_ROIS, BBOX_DELTAS, batches, image
    )[0]
    # Known answer (first box, unclipped) and the definition everywhere.
    np.testing.assert_allclose(
        got[0, :4], [144.224350, 191.276062, 475.775635, 500.723938], rtol=1e-6
    )
    want = naive_bbox_transform(BBOX_ROIS, BBOX_DELTAS, batches, image)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    h = [
        info(T.TENSOR_FLOAT16, 5, 4),
        info(T.TENSOR_FLOAT16, 5, 8),
        info(T.TENSOR_INT32, 5),
        info(T.TENSOR_FLOAT16, 4, 2),
    ]
    got16 = run(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        h,
        [info(T.TENSOR_FLOAT16, 5, 8)],
        BBOX_ROIS.astype(np.float16),
        BBOX_DELTAS.astype(np.float16),
        batches,
        image.astype(np.float16),
    )[0]
    np.testing.assert_allclose(got16.astype(np.float32), want, rtol=5e-3, atol=0.5)
    q16 = dict(scale=0.125)
    qargs = [
        info(T.TENSOR_QUANT16_ASYMM, 5, 4, **q16),
        info(T.TENSOR_QUANT8_ASYMM_SIGNED, 5, 8, scale=0.05, zp=-2),
        info(T.TENSOR_INT32, 5),
        info(T.TENSOR_QUANT16_ASYMM, 4, 2, **q16),
    ]
    qd = quant(BBOX_DELTAS, 0.05, -2, np.int8)
    got = run(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        qargs,
        [info(T.TENSOR_QUANT16_ASYMM, 5, 8, **q16)],
        (BBOX_ROIS * 8).astype(np.uint16),
        qd,
        batches,
        (image * 8).astype(np.uint16),
    )[0]
    want = naive_bbox_transform(BBOX_ROIS, (qd.astype(np.float64) + 2) * 0.05, batches, image)
    np.testing.assert_allclose(
        got.astype(int), quant(want, 0.125, 0, np.uint16).astype(int), atol=1
    )


def test_bbox_transform_errors_and_zero_rois() -> None:
    args = [f32(0, 4), f32(0, 8), info(T.TENSOR_INT32, 0), f32(1, 2)]
    got = run(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        args,
        [f32(0, 8)],
        np.zeros((0, 4), np.float32),
        np.zeros((0, 8), np.float32),
        np.zeros(0, np.int32),
        np.array([[8, 8]], np.float32),
    )[0]
    assert got.shape == (0, 8)
    args = [f32(1, 4), f32(1, 4), info(T.TENSOR_INT32, 1), f32(1, 2)]
    fails(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        args,
        [f32(1, 4)],
        np.array([[1, 1, 2, 2]], np.float32),
        np.zeros((1, 4), np.float32),
        np.array([1], np.int32),
        np.array([[8, 8]], np.float32),
        match="batch index",
    )
    fails(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        args,
        [f32(1, 4)],
        np.array([[3, 1, 2, 2]], np.float32),
        np.zeros((1, 4), np.float32),
        np.array([0], np.int32),
        np.array([[8, 8]], np.float32),
        match="x2 < x1",
    )
    q = info(T.TENSOR_QUANT16_ASYMM, 1, 4, scale=0.125)
    rejects(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        [q, f32(1, 4), info(T.TENSOR_INT32, 1), info(T.TENSOR_QUANT16_ASYMM, 1, 2, scale=0.125)],
        [q],
        "deltas",
    )
    rejects(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        [
            q,
            info(T.TENSOR_QUANT8_ASYMM, 1, 4, scale=0.1),
            info(T.TENSOR_INT32, 1),
            info(T.TENSOR_QUANT16_ASYMM, 1, 2, scale=0.5),
        ],
        [q],
        "image_info must have scale",
    )


# --------------------------------------------------------------- BOX_WITH_NMS_LIMIT


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union


def greedy(
    scores: dict[int, float], boxes: dict[int, np.ndarray], limit: int, update: Any
) -> list[tuple[int, float]]:
    """Plain greedy NMS: take the best, rescore or drop the rest, repeat.

    ``update(score, iou)`` is the new score of a remaining box, or None to drop it.
    """
    pending = dict(scores)
    chosen: list[tuple[int, float]] = []
    while pending and (limit < 0 or len(chosen) < limit):
        best = max(pending, key=lambda k: pending[k])
        chosen.append((best, pending.pop(best)))
        for k in list(pending):
            new = update(pending[k], box_iou(boxes[k], boxes[best]))
            if new is None:
                del pending[k]
            else:
                pending[k] = new
    return chosen


def hard_nms(threshold: float) -> Any:
    return lambda score, iou: None if iou >= threshold else score


def naive_box_nms(
    scores: np.ndarray,
    rois: np.ndarray,
    batches: np.ndarray,
    threshold: float,
    max_det: int,
    kernel: int,
    iou_thr: float,
    sigma: float,
    low: float,
) -> list[tuple[float, list[float], int, int]]:
    fn = [
        lambda iou: 1.0 if iou < iou_thr else 0.0,
        lambda iou: 1.0 if iou < iou_thr else 1.0 - iou,
        lambda iou: math.exp(-iou * iou / sigma),
    ][kernel]
    out = []
    for b in dict.fromkeys(batches.tolist()):
        rows = np.flatnonzero(batches == b)
        found = []
        for c in range(1, scores.shape[1]):
            cand = {r: float(scores[r, c]) for r in rows if scores[r, c] > threshold}
            boxes = {r: rois[r, 4 * c : 4 * c + 4].astype(np.float64) for r in cand}
            soft = lambda s, iou: None if s * fn(iou) < low else s * fn(iou)  # noqa: E731
            found += [(s, c, r) for r, s in greedy(cand, boxes, max_det, soft)]
        found.sort(key=lambda t: -t[0])
        if max_det >= 0:
            found = found[:max_det]
        found.sort(key=lambda t: (t[1], -t[0]))
        out += [(s, rois[r, 4 * c : 4 * c + 4].tolist(), c, b) for s, c, r in found]
    return out


NMS_SCORES = np.array(
    [
        0.90,
        0.95,
        0.75,
        0.80,
        0.70,
        0.85,
        0.60,
        0.90,
        0.95,
        0.90,
        0.65,
        0.90,
        0.80,
        0.85,
        0.80,
        0.60,
        0.60,
        0.20,
        0.60,
        0.80,
        0.40,
        0.90,
        0.55,
        0.60,
        0.90,
        0.75,
        0.70,
        0.80,
        0.70,
        0.85,
        0.90,
        0.95,
        0.75,
        0.80,
        0.85,
        0.80,
        0.60,
        0.90,
        0.95,
        0.60,
        0.60,
        0.20,
        0.50,
        0.90,
        0.80,
        0.90,
        0.75,
        0.70,
        0.90,
        0.65,
        0.90,
        0.90,
        0.55,
        0.60,
        0.60,
        0.80,
        0.40,
    ]
).reshape(19, 3)
_NMS_BASE = [1, 2, 3, 4, 5, 6, 7, 8, 9, 2, 1, 5, 3, 6, 0, 9, 4, 8, 7]


def nms_rois() -> np.ndarray:
    """The conformance spec's 19 boxes x 3 classes (class 1 and 2 boxes are equal)."""
    rows = []
    for r, s in enumerate(_NMS_BASE):
        lo, hi = (s - 1, s + 9) if r < 9 else (s, s + 10)
        if s == 0 and r == 14:
            rows.append([0, 0, 1, 1, 0, 0, 2, 2, 0, 0, 2, 2])
            continue
        rows.append([s, s, s + 9, s + 9, lo, lo, hi, hi, lo, lo, hi, hi])
    return np.array(rows, np.float32)


def nms_inputs(
    score: OperandInfo,
    rois: OperandInfo,
    n: int,
    threshold: float,
    max_det: int,
    kernel: int,
    iou: float,
    sigma: float,
    low: float,
    scalar: T = T.FLOAT32,
) -> list[Any]:
    return [
        score,
        rois,
        info(T.TENSOR_INT32, n),
        fscalar(threshold, scalar),
        i32(max_det),
        i32(kernel),
        fscalar(iou, scalar),
        fscalar(sigma, scalar),
        fscalar(low, scalar),
    ]


def nms_outputs(score: T, box: T, scale: float = 0.0, zp: int = 0) -> list[OperandInfo]:
    box_scale = 0.125 if box == T.TENSOR_QUANT16_ASYMM else 0.0
    return [
        info(score, 0, scale=scale, zp=zp),
        info(box, 0, 4, scale=box_scale),
        info(T.TENSOR_INT32, 0),
        info(T.TENSOR_INT32, 0),
    ]


def test_box_with_nms_limit_hard_known_answers() -> None:
    rois = nms_rois()
    batches = np.array([0] * 9 + [1] * 10, np.int32)
    scores, boxes, classes, out_batches = run(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(19, 3), f32(19, 12), 19, 0.3, -1, 0, 0.4, 1.0, 0.3),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        NMS_SCORES.astype(np.float32),
        rois,
        batches,
    )
    np.testing.assert_allclose(
        scores, [0.95, 0.85, 0.75, 0.95, 0.7, 0.95, 0.9, 0.85, 0.75, 0.95, 0.8, 0.7], rtol=1e-6
    )
    np.testing.assert_array_equal(
        boxes.ravel(),
        [
            0,
            0,
            10,
            10,
            4,
            4,
            14,
            14,
            8,
            8,
            18,
            18,
            2,
            2,
            12,
            12,
            8,
            8,
            18,
            18,
            1,
            1,
            11,
            11,
            0,
            0,
            2,
            2,
            5,
            5,
            15,
            15,
            9,
            9,
            19,
            19,
            3,
            3,
            13,
            13,
            0,
            0,
            2,
            2,
            9,
            9,
            19,
            19,
        ],
    )
    np.testing.assert_array_equal(classes, [1, 1, 1, 2, 2, 1, 1, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(out_batches, [0] * 5 + [1] * 7)
    # max_detections = 5 per image, batch ids 1 and 3, quantized (signed and unsigned) scores
    for code, dtype, zp in (
        (T.TENSOR_QUANT8_ASYMM, np.uint8, 0),
        (T.TENSOR_QUANT8_ASYMM_SIGNED, np.int8, -128),
    ):
        scores, boxes, classes, out_batches = run(
            Op.BOX_WITH_NMS_LIMIT,
            nms_inputs(
                info(code, 19, 3, scale=0.01, zp=zp),
                info(T.TENSOR_QUANT16_ASYMM, 19, 12, scale=0.125),
                19,
                0.3,
                5,
                0,
                0.4,
                1.0,
                0.3,
            ),
            nms_outputs(code, T.TENSOR_QUANT16_ASYMM, 0.01, zp),
            quant(NMS_SCORES, 0.01, zp, dtype),
            (rois * 8).astype(np.uint16),
            np.array([1] * 9 + [3] * 10, np.int32),
        )
        want = quant([0.95, 0.85, 0.75, 0.95, 0.7, 0.95, 0.9, 0.85, 0.95, 0.8], 0.01, zp, dtype)
        np.testing.assert_array_equal(scores, want)
        np.testing.assert_array_equal(
            boxes.ravel() / 8,
            [
                0,
                0,
                10,
                10,
                4,
                4,
                14,
                14,
                8,
                8,
                18,
                18,
                2,
                2,
                12,
                12,
                8,
                8,
                18,
                18,
                1,
                1,
                11,
                11,
                0,
                0,
                2,
                2,
                5,
                5,
                15,
                15,
                3,
                3,
                13,
                13,
                0,
                0,
                2,
                2,
            ],
        )
        np.testing.assert_array_equal(classes, [1, 1, 1, 2, 2, 1, 1, 1, 2, 2])
        np.testing.assert_array_equal(out_batches, [1] * 5 + [3] * 5)


@pytest.mark.parametrize("kernel", [0, 1, 2])
def test_box_with_nms_limit_matches_naive_greedy(kernel: int) -> None:
    rng = np.random.default_rng(kernel)
    n, classes = 24, 4
    xy = rng.uniform(0, 20, size=(n, classes, 2))
    wh = rng.uniform(2, 10, size=(n, classes, 2))
    rois = np.concatenate([xy, xy + wh], axis=2).reshape(n, classes * 4).astype(np.float32)
    scores = rng.uniform(0, 1, size=(n, classes)).astype(np.float32)
    batches = np.array([0] * 10 + [2] * 14, np.int32)
    args = (0.2, 6, kernel, 0.35, 0.6, 0.25)
    got = run(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(n, classes), f32(n, classes * 4), n, *args),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        scores,
        rois,
        batches,
    )
    want = naive_box_nms(scores, rois, batches, *args)
    assert len(got[0]) == len(want) > 0
    np.testing.assert_allclose(got[0], [w[0] for w in want], rtol=1e-5)
    np.testing.assert_array_equal(got[1], np.array([w[1] for w in want], np.float32))
    np.testing.assert_array_equal(got[2], [w[2] for w in want])
    np.testing.assert_array_equal(got[3], [w[3] for w in want])
    # float16 with float16 scalars gives the same selection
    h = run(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(
            info(T.TENSOR_FLOAT16, n, classes),
            info(T.TENSOR_FLOAT16, n, classes * 4),
            n,
            *args,
            scalar=T.FLOAT16,
        ),
        nms_outputs(T.TENSOR_FLOAT16, T.TENSOR_FLOAT16),
        scores.astype(np.float16),
        rois.astype(np.float16),
        batches,
    )
    assert h[0].dtype == np.float16 and len(h[0]) >= 1


def test_box_with_nms_limit_zero_output_and_validation() -> None:
    scores = np.array([[0.9, 0.1, 0.2], [0.8, 0.15, 0.25]], np.float32)
    rois = np.tile(np.array([1, 1, 10, 10], np.float32), (2, 3))
    got = run(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(2, 3), f32(2, 12), 2, 0.3, -1, 0, 0.4, 1.0, 0.3),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        scores,
        rois,
        np.zeros(2, np.int32),
    )
    assert [g.shape for g in got] == [(0,), (0, 4), (0,), (0,)]
    rejects(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(2, 3), f32(2, 12), 2, 0.3, -1, 3, 0.4, 1.0, 0.3),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        "nms_kernel",
    )
    rejects(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(2, 3), f32(2, 8), 2, 0.3, -1, 0, 0.4, 1.0, 0.3),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        "rois have 8 columns",
    )
    rejects(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(2, 3), f32(2, 12), 2, 0.3, -1, 0, 0.4, 1.0, 0.3, scalar=T.FLOAT16),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        "FLOAT16; expected FLOAT32",
    )
    q = info(T.TENSOR_QUANT8_ASYMM, 2, 3, scale=0.01)
    rejects(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(
            q, info(T.TENSOR_QUANT16_ASYMM, 2, 12, scale=0.125), 2, 0.3, -1, 0, 0.4, 1.0, 0.3
        ),
        nms_outputs(T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT16_ASYMM, 0.02),
        "output scores",
    )
    fails(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(2, 3), f32(2, 12), 2, 0.3, -1, 0, 0.4, 1.0, 0.3),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        scores,
        np.tile(np.array([10, 1, 1, 10], np.float32), (2, 3)),
        np.zeros(2, np.int32),
        match="x2 < x1",
    )


def test_zero_sized_boxes_flow_through_roi_align_and_transpose_conv() -> None:
    """BOX_WITH_NMS_LIMIT keeps nothing; ROI_ALIGN and TRANSPOSE_CONV_2D see zero batches."""
    for quantized in (False, True):
        if quantized:
            s = dict(scale=0.1, zp=128)
            t_score, t_roi, t_map = (
                info(T.TENSOR_QUANT8_ASYMM, 1, 2, **s),
                info(T.TENSOR_QUANT16_ASYMM, 1, 8, scale=0.125),
                info(T.TENSOR_QUANT8_ASYMM, 1, 1, 1, 1, **s),
            )
            t_w = info(T.TENSOR_QUANT8_ASYMM, 2, 3, 3, 1, **s)
            t_b = info(T.TENSOR_INT32, 2, scale=0.01)
            score_v, roi_v = quant([[0.9, 0.1]], 0.1, 128), np.array([[8] * 4 + [0] * 4], np.uint16)
            roi_out = info(T.TENSOR_QUANT16_ASYMM, 0, 4, scale=0.125)
            fmap_out = info(T.TENSOR_QUANT8_ASYMM, 0, 2, 2, 1, **s)
            out = info(T.TENSOR_QUANT8_ASYMM, 0, 5, 5, 2, **s)
            score_out = info(T.TENSOR_QUANT8_ASYMM, 0, **s)
            feed = np.array([[[[138]]]], np.uint8)
        else:
            t_score, t_roi, t_map = f32(1, 2), f32(1, 8), f32(1, 1, 1, 1)
            t_w, t_b = f32(2, 3, 3, 1), f32(2)
            score_v = np.array([[0.9, 0.1]], np.float32)
            roi_v = np.array([[1, 1, 10, 10, 0, 0, 10, 10]], np.float32)
            roi_out, fmap_out, out, score_out = f32(0, 4), f32(0, 2, 2, 1), f32(0, 5, 5, 2), f32(0)
            feed = np.ones((1, 1, 1, 1), np.float32)
        operands = [
            Operand(t_score, Lifetime.CONSTANT_COPY, score_v),
            Operand(t_roi, Lifetime.CONSTANT_COPY, roi_v),
            Operand(info(T.TENSOR_INT32, 1), Lifetime.CONSTANT_COPY, np.zeros(1, np.int32)),
            *[
                Operand(a, Lifetime.CONSTANT_COPY, v)
                for a, v in (
                    fscalar(0.3),
                    i32(-1),
                    i32(0),
                    fscalar(0.4),
                    fscalar(1.0),
                    fscalar(0.3),
                )
            ],
            Operand(score_out, Lifetime.SUBGRAPH_OUTPUT),  # 9
            Operand(roi_out, Lifetime.TEMPORARY_VARIABLE),  # 10
            Operand(info(T.TENSOR_INT32, 0), Lifetime.SUBGRAPH_OUTPUT),  # 11
            Operand(info(T.TENSOR_INT32, 0), Lifetime.TEMPORARY_VARIABLE),  # 12
            Operand(t_map, Lifetime.SUBGRAPH_INPUT),  # 13
            *[
                Operand(a, Lifetime.CONSTANT_COPY, v)
                for a, v in (  # 14..20
                    i32(2),
                    i32(2),
                    fscalar(2.0),
                    fscalar(2.0),
                    i32(4),
                    i32(4),
                    boolean(False),
                )
            ],
            Operand(fmap_out, Lifetime.TEMPORARY_VARIABLE),  # 21
            Operand(t_w, Lifetime.CONSTANT_COPY, np.ones((2, 3, 3, 1), t_w.dtype)),  # 22
            Operand(t_b, Lifetime.CONSTANT_COPY, np.zeros(2, t_b.dtype)),  # 23
            *[
                Operand(a, Lifetime.CONSTANT_COPY, v)
                for a, v in (  # 24..29
                    const(info(T.TENSOR_INT32, 4), [0, 5, 5, 2]),
                    i32(2),
                    i32(2),
                    i32(2),
                    i32(0),
                    boolean(False),
                )
            ],
            Operand(out, Lifetime.SUBGRAPH_OUTPUT),  # 30
        ]
        ops = [
            Operation(Op.BOX_WITH_NMS_LIMIT, tuple(range(9)), (9, 10, 11, 12)),
            Operation(Op.ROI_ALIGN, (13, 10, 12, *range(14, 21)), (21,)),
            Operation(Op.TRANSPOSE_CONV_2D, (21, 22, 23, *range(24, 30)), (30,)),
        ]
        prepared = PreparedModel(HalModel(Subgraph(operands, ops, (13,), (9, 11, 30))))
        scores, classes, result = prepared.run([feed])
        assert scores.shape == (0,) and classes.shape == (0,) and result.shape == (0, 5, 5, 2)


# --------------------------------------------------------------- GENERATE_PROPOSALS


def naive_proposals(
    scores: np.ndarray,
    deltas: np.ndarray,
    anchors: np.ndarray,
    image: np.ndarray,
    stride: tuple[float, float],
    pre: int,
    post: int,
    iou: float,
    min_size: float,
) -> list[tuple[float, list[float], int]]:
    """scores NHWC [N, H, W, A], deltas [N, H, W, A*4]."""
    n, h, w, a = scores.shape
    out = []
    for b in range(n):
        boxes, sc = [], []
        for y in range(h):
            for x in range(w):
                for k in range(a):
                    anchor = anchors[k] + [x * stride[1], y * stride[0]] * 2
                    d = deltas[b, y, x, 4 * k : 4 * k + 4].reshape(1, 4)
                    boxes.append(
                        naive_bbox_transform(anchor[None], d, np.zeros(1, int), image[b : b + 1])[0]
                    )
                    sc.append(float(scores[b, y, x, k]))
        order = sorted(range(len(sc)), key=lambda i: -sc[i])
        if 0 < pre < len(order):
            order = order[:pre]
        keep = {}
        for i in order:
            bw, bh = boxes[i][2] - boxes[i][0], boxes[i][3] - boxes[i][1]
            if (
                bw > min_size
                and bh > min_size
                and boxes[i][0] + bw / 2 < image[b, 1]
                and boxes[i][1] + bh / 2 < image[b, 0]
            ):
                keep[i] = sc[i]
        chosen = greedy(keep, dict(enumerate(boxes)), post if post > 0 else -1, hard_nms(iou))
        out += [(s, list(boxes[i]), b) for i, s in chosen]
    return out


def proposals_inputs(
    code: T,
    dims: tuple[int, int, int, int],
    anchors: int,
    layout: bool,
    params: tuple[float, float, int, int, float, float],
) -> list[Any]:
    n, h, w, a = dims
    quantized = code != T.TENSOR_FLOAT32
    score_dims = (n, a, h, w) if layout else dims
    delta_dims = (n, 4 * a, h, w) if layout else (n, h, w, 4 * a)
    s = dict(scale=0.01, zp=-3) if quantized else {}
    anchor_info = (
        info(T.TENSOR_QUANT16_SYMM, anchors, 4, scale=0.125) if quantized else f32(anchors, 4)
    )
    image_info = info(T.TENSOR_QUANT16_ASYMM, n, 2, scale=0.125) if quantized else f32(n, 2)
    sh, sw, pre, post, iou, min_size = params
    return [
        info(code, *score_dims, **s),
        info(code, *delta_dims, **s),
        anchor_info,
        image_info,
        fscalar(sh),
        fscalar(sw),
        i32(pre),
        i32(post),
        fscalar(iou),
        fscalar(min_size),
        boolean(layout),
    ]


@pytest.mark.parametrize("layout", [False, True])
def test_generate_proposals_matches_naive(layout: bool) -> None:
    rng = np.random.default_rng(7)
    n, h, w, a = 2, 3, 4, 2
    scores = rng.uniform(0, 1, size=(n, h, w, a)).astype(np.float32)
    deltas = rng.uniform(-0.4, 0.4, size=(n, h, w, 4 * a)).astype(np.float32)
    anchors = np.array([[0, 0, 16, 16], [-8, -4, 24, 20]], np.float32)
    image = np.array([[40, 60], [32, 32]], np.float32)
    params = (8.0, 8.0, 20, 6, 0.5, 2.0)
    feed = (
        np.ascontiguousarray(scores.transpose(0, 3, 1, 2)) if layout else scores,
        np.ascontiguousarray(deltas.transpose(0, 3, 1, 2)) if layout else deltas,
    )
    got = run(
        Op.GENERATE_PROPOSALS,
        proposals_inputs(T.TENSOR_FLOAT32, (n, h, w, a), a, layout, params),
        [f32(0), f32(0, 4), info(T.TENSOR_INT32, 0)],
        *feed,
        anchors,
        image,
    )
    want = naive_proposals(scores, deltas, anchors, image, (8.0, 8.0), 20, 6, 0.5, 2.0)
    assert len(got[0]) == len(want) > 2
    np.testing.assert_allclose(got[0], [x[0] for x in want], rtol=1e-6)
    np.testing.assert_allclose(got[1], [x[1] for x in want], rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(got[2], [x[2] for x in want])


def test_generate_proposals_quantized_and_validation() -> None:
    rng = np.random.default_rng(8)
    n, h, w, a = 1, 2, 3, 2
    qs = rng.integers(-128, 128, size=(n, h, w, a)).astype(np.int8)
    qd = rng.integers(-40, 40, size=(n, h, w, 4 * a)).astype(np.int8)
    anchors = np.array([[0, 0, 16, 16], [-8, -4, 24, 20]], np.float32)
    image = np.array([[40, 60]], np.float32)
    params = (8.0, 8.0, -1, -1, 0.5, 1.0)
    code = T.TENSOR_QUANT8_ASYMM_SIGNED
    got = run(
        Op.GENERATE_PROPOSALS,
        proposals_inputs(code, (n, h, w, a), a, False, params),
        [
            info(code, 0, scale=0.01, zp=-3),
            info(T.TENSOR_QUANT16_ASYMM, 0, 4, scale=0.125),
            info(T.TENSOR_INT32, 0),
        ],
        qs,
        qd,
        (anchors * 8).astype(np.int16),
        (image * 8).astype(np.uint16),
    )
    real_s = (qs.astype(np.float32) + 3) * np.float32(0.01)
    real_d = (qd.astype(np.float32) + 3) * np.float32(0.01)
    want = naive_proposals(real_s, real_d, anchors, image, (8.0, 8.0), -1, -1, 0.5, 1.0)
    np.testing.assert_array_equal(got[0], quant([x[0] for x in want], 0.01, -3, np.int8))
    np.testing.assert_allclose(
        got[1].astype(int), quant([x[1] for x in want], 0.125, 0, np.uint16).astype(int), atol=1
    )
    bad = proposals_inputs(code, (n, h, w, a), a, False, params)
    bad[2] = info(T.TENSOR_QUANT16_SYMM, a, 4, scale=0.25)
    rejects(
        Op.GENERATE_PROPOSALS,
        bad,
        [
            info(code, 0, scale=0.01, zp=-3),
            info(T.TENSOR_QUANT16_ASYMM, 0, 4, scale=0.125),
            info(T.TENSOR_INT32, 0),
        ],
        "anchors must have scale",
    )
    rejects(
        Op.GENERATE_PROPOSALS,
        proposals_inputs(T.TENSOR_FLOAT32, (n, h, w, a), a, False, params)[:-1],
        [f32(0), f32(0, 4), info(T.TENSOR_INT32, 0)],
        "expected 11 inputs",
    )


# --------------------------------------------------------------- DETECTION_POSTPROCESSING


def naive_detection(
    scores: np.ndarray,
    deltas: np.ndarray,
    anchors: np.ndarray,
    scales: tuple[float, float, float, float],
    regular: bool,
    max_det: int,
    max_classes: int,
    per_class: int,
    threshold: float,
    iou: float,
    background: bool,
) -> list[list[tuple[float, list[float], int]]]:
    sy, sx, sh, sw = scales
    result = []
    for b in range(scores.shape[0]):
        boxes = {}
        for k, (cy, cx, ah, aw) in enumerate(anchors.astype(np.float64)):
            dy, dx, dh, dw = deltas[b, k, :4]
            y, x = cy + ah * dy / sy, cx + aw * dx / sx
            hh, hw = ah * math.exp(dh / sh) / 2, aw * math.exp(dw / sw) / 2
            boxes[k] = np.array([y - hh, x - hw, y + hh, x + hw])
        shift = 0 if background else 1
        found: list[tuple[float, list[float], int]] = []
        if regular:
            for c in range(1, scores.shape[2]):
                cand = {k: float(scores[b, k, c]) for k in boxes if scores[b, k, c] > threshold}
                found += [
                    (s, list(boxes[k]), c - shift)
                    for k, s in greedy(cand, boxes, per_class, hard_nms(iou))
                ]
            found = sorted(found, key=lambda t: -t[0])[:max_det]
        else:
            best = {k: float(scores[b, k, 1:].max()) for k in boxes}
            cand = {k: s for k, s in best.items() if s > threshold}
            for k, _ in greedy(cand, boxes, max_det, hard_nms(iou)):
                top = np.argsort(-scores[b, k, 1:], kind="stable")[:max_classes] + 1
                found += [(float(scores[b, k, c]), list(boxes[k]), int(c) - shift) for c in top]
        result.append(found)
    return result


@pytest.mark.parametrize("regular", [True, False])
def test_detection_postprocessing_matches_naive(regular: bool) -> None:
    rng = np.random.default_rng(11)
    n, anchors_n, classes = 2, 12, 4
    scores = rng.uniform(0, 1, size=(n, anchors_n, classes)).astype(np.float32)
    deltas = rng.uniform(-1, 1, size=(n, anchors_n, 5)).astype(np.float32)
    anchors = np.concatenate(
        [rng.uniform(2, 10, size=(anchors_n, 2)), rng.uniform(2, 6, size=(anchors_n, 2))], axis=1
    ).astype(np.float32)
    scales = (10.0, 10.0, 5.0, 5.0)
    max_det, max_classes, per_class = 5, 2, 3
    args = [
        f32(n, anchors_n, classes),
        f32(n, anchors_n, 5),
        f32(anchors_n, 4),
        *[fscalar(s) for s in scales],
        boolean(regular),
        i32(max_det),
        i32(max_classes),
        i32(per_class),
        fscalar(0.3),
        fscalar(0.4),
        boolean(False),
    ]
    size = max_det if regular else max_det * max_classes
    got = run(
        Op.DETECTION_POSTPROCESSING,
        args,
        [f32(n, size), f32(n, size, 4), info(T.TENSOR_INT32, n, size), info(T.TENSOR_INT32, n)],
        scores,
        deltas,
        anchors,
    )
    want = naive_detection(
        scores, deltas, anchors, scales, regular, max_det, max_classes, per_class, 0.3, 0.4, False
    )
    for b in range(n):
        k = len(want[b])
        assert got[3][b] == k > 0
        np.testing.assert_allclose(got[0][b, :k], [x[0] for x in want[b]], rtol=1e-6)
        np.testing.assert_allclose(got[1][b, :k], [x[1] for x in want[b]], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(got[2][b, :k], [x[2] for x in want[b]])
        assert not got[0][b, k:].any() and not got[1][b, k:].any()


def test_detection_postprocessing_validation() -> None:
    base = [
        f32(1, 3, 3),
        f32(1, 3, 4),
        f32(3, 4),
        *[fscalar(1.0)] * 4,
        boolean(True),
        i32(2),
        i32(1),
        i32(2),
        fscalar(0.3),
        fscalar(0.5),
        boolean(False),
    ]
    outs = [f32(1, 2), f32(1, 2, 4), info(T.TENSOR_INT32, 1, 2), info(T.TENSOR_INT32, 1)]
    bad = list(base)
    bad[3] = fscalar(0.0)
    rejects(Op.DETECTION_POSTPROCESSING, bad, outs, "scale_y is 0")
    bad = list(base)
    bad[10] = i32(0)
    rejects(Op.DETECTION_POSTPROCESSING, bad, outs, "max_detections_per_class is 0")
    rejects(Op.DETECTION_POSTPROCESSING, [f32(1, 3, 1), *base[1:]], outs, "at least 2")
    rejects(
        Op.DETECTION_POSTPROCESSING,
        [info(T.TENSOR_QUANT8_ASYMM, 1, 3, 3, scale=0.1), *base[1:]],
        outs,
        "unsupported type",
    )


# --------------------------------------------------------------- sequence RNN


def rnn_step(
    x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray, h: np.ndarray, fuse: int
) -> np.ndarray:
    """One step of the RNN operation itself (the 1.0 op), as the reference for the sequences."""
    batch, units = h.shape
    out = run(
        Op.RNN,
        [
            f32(*x.shape),
            const(f32(*w.shape), w),
            const(f32(*r.shape), r),
            const(f32(units), b),
            f32(batch, units),
            i32(fuse),
        ],
        [f32(batch, units), f32(batch, units)],
        x,
        h,
    )
    return out[1]


def rnn_sequence(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray,
    h: np.ndarray,
    fuse: int,
    backward: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Time-major x; repeated single steps (reversed for the backward direction)."""
    out = np.zeros((x.shape[0], h.shape[0], w.shape[0]), np.float32)
    steps = range(x.shape[0] - 1, -1, -1) if backward else range(x.shape[0])
    for t in steps:
        h = rnn_step(x[t], w, r, b, h, fuse)
        out[t] = h
    return out, h


def rnn_params(rng: np.random.Generator, units: int, size: int) -> tuple[np.ndarray, ...]:
    return (
        rng.normal(size=(units, size)).astype(np.float32) * 0.5,
        rng.normal(size=(units, units)).astype(np.float32) * 0.5,
        rng.normal(size=units).astype(np.float32),
    )


@pytest.mark.parametrize("time_major", [0, 1])
def test_unidirectional_sequence_rnn_is_repeated_rnn_steps(time_major: int) -> None:
    rng = np.random.default_rng(21)
    steps, batch, size, units = 4, 2, 3, 5
    x = rng.normal(size=(steps, batch, size)).astype(np.float32)
    w, r, b = rnn_params(rng, units, size)
    h0 = rng.normal(size=(batch, units)).astype(np.float32)
    want, last = rnn_sequence(x, w, r, b, h0, 1)
    feed = x if time_major else x.transpose(1, 0, 2).copy()
    out_dims = (steps, batch, units) if time_major else (batch, steps, units)
    got = run(
        Op.UNIDIRECTIONAL_SEQUENCE_RNN,
        [
            f32(*feed.shape),
            const(f32(units, size), w),
            const(f32(units, units), r),
            const(f32(units), b),
            f32(batch, units),
            i32(1),
            i32(time_major),
        ],
        [f32(*out_dims), f32(batch, units)],
        feed,
        h0,
    )
    np.testing.assert_allclose(
        got[0], want if time_major else want.transpose(1, 0, 2), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(got[1], last, rtol=1e-5, atol=1e-5)
    rejects(
        Op.UNIDIRECTIONAL_SEQUENCE_RNN,
        [
            f32(*feed.shape),
            const(f32(units, size), w),
            const(f32(units, units), r),
            const(f32(units), b),
            f32(batch, units),
            i32(1),
            i32(2),
        ],
        [f32(*out_dims)],
        "time_major",
    )


def bi_rnn_inputs(
    x: OperandInfo,
    fw: tuple[np.ndarray, ...],
    bw: tuple[np.ndarray, ...],
    batch: int,
    aux: Any,
    fw_aux: Any,
    bw_aux: Any,
    fuse: int,
    time_major: bool,
    merge: bool,
) -> list[Any]:
    def cell(p: tuple[np.ndarray, ...]) -> list[Any]:
        w, r, b = p
        return [
            const(f32(*w.shape), w),
            const(f32(*r.shape), r),
            const(f32(*b.shape), b),
            f32(batch, w.shape[0]),
        ]

    return [
        x,
        *cell(fw),
        *cell(bw),
        aux,
        fw_aux,
        bw_aux,
        i32(fuse),
        boolean(time_major),
        boolean(merge),
    ]


def test_bidirectional_sequence_rnn_is_forward_plus_reversed_backward() -> None:
    rng = np.random.default_rng(22)
    steps, batch, size, aux_size = 3, 2, 4, 3
    x = rng.normal(size=(steps, batch, size)).astype(np.float32)
    fw, bw = rnn_params(rng, 3, size), rnn_params(rng, 2, size)
    h_fw = rng.normal(size=(batch, 3)).astype(np.float32)
    h_bw = rng.normal(size=(batch, 2)).astype(np.float32)
    no_aux = [
        omitted(f32(steps, batch, aux_size)),
        omitted(f32(3, aux_size)),
        omitted(f32(2, aux_size)),
    ]
    fw_out, fw_last = rnn_sequence(x, *fw, h_fw, 0)
    bw_out, bw_last = rnn_sequence(x, *bw, h_bw, 0, backward=True)
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        bi_rnn_inputs(f32(steps, batch, size), fw, bw, batch, *no_aux, 0, True, False),
        [f32(steps, batch, 3), f32(steps, batch, 2), f32(batch, 3), f32(batch, 2)],
        x,
        h_fw,
        h_bw,
    )
    for g, w in zip(got, (fw_out, bw_out, fw_last, bw_last)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    # merged, batch-major
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        bi_rnn_inputs(f32(batch, steps, size), fw, bw, batch, *no_aux, 0, False, True),
        [f32(batch, steps, 5)],
        x.transpose(1, 0, 2).copy(),
        h_fw,
        h_bw,
    )[0]
    np.testing.assert_allclose(
        got, np.concatenate([fw_out, bw_out], 2).transpose(1, 0, 2), rtol=1e-5, atol=1e-5
    )
    # cross-linking: aux weights act like extra input columns
    aux = rng.normal(size=(steps, batch, aux_size)).astype(np.float32)
    fw_aux = rng.normal(size=(3, aux_size)).astype(np.float32)
    bw_aux = rng.normal(size=(2, aux_size)).astype(np.float32)
    xa = np.concatenate([x, aux], axis=2)
    fw_cat = (np.concatenate([fw[0], fw_aux], 1), fw[1], fw[2])
    bw_cat = (np.concatenate([bw[0], bw_aux], 1), bw[1], bw[2])
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        bi_rnn_inputs(
            f32(steps, batch, size),
            fw,
            bw,
            batch,
            f32(steps, batch, aux_size),
            const(f32(3, aux_size), fw_aux),
            const(f32(2, aux_size), bw_aux),
            0,
            True,
            False,
        ),
        [f32(steps, batch, 3), f32(steps, batch, 2)],
        x,
        h_fw,
        h_bw,
        aux,
    )
    np.testing.assert_allclose(got[0], rnn_sequence(xa, *fw_cat, h_fw, 0)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        got[1], rnn_sequence(xa, *bw_cat, h_bw, 0, backward=True)[0], rtol=1e-5, atol=1e-5
    )
    # parallel linking: the aux input feeds the backward cell instead of the input
    bw_p = rnn_params(rng, 2, aux_size)
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        bi_rnn_inputs(
            f32(steps, batch, size),
            fw,
            bw_p,
            batch,
            f32(steps, batch, aux_size),
            *no_aux[1:],
            0,
            True,
            False,
        ),
        [f32(steps, batch, 3), f32(steps, batch, 2)],
        x,
        h_fw,
        h_bw,
        aux,
    )
    np.testing.assert_allclose(
        got[1], rnn_sequence(aux, *bw_p, h_bw, 0, backward=True)[0], rtol=1e-5, atol=1e-5
    )
    rejects(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        bi_rnn_inputs(f32(steps, batch, size), fw, bw, batch, *no_aux, 0, True, True),
        [f32(steps, batch, 3), f32(steps, batch, 2)],
        "merge_outputs=True",
    )
    rejects(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        bi_rnn_inputs(
            f32(steps, batch, size),
            fw,
            bw,
            batch,
            no_aux[0],
            const(f32(3, aux_size), fw_aux),
            no_aux[2],
            0,
            True,
            False,
        ),
        [f32(steps, batch, 3), f32(steps, batch, 2)],
        "aux weights",
    )


# --------------------------------------------------------------- sequence LSTM


class LstmParams:
    """Weights of one LSTM direction, in the LSTM operation's input order (1..17, 23..26)."""

    def __init__(
        self,
        rng: np.random.Generator,
        size: int,
        units: int,
        out: int,
        cifg: bool = False,
        peephole: bool = False,
        projection: bool = False,
        layer_norm: bool = False,
    ) -> None:
        def m(*shape: int) -> np.ndarray:
            return (rng.normal(size=shape) * 0.4).astype(np.float32)

        gates = "fco" if cifg else "ifco"
        self.units, self.out = units, out
        self.w = {g: m(units, size) if g in gates else None for g in "ifco"}
        self.r = {g: m(units, out) if g in gates else None for g in "ifco"}
        self.p = {g: m(units) if peephole and (g != "i" or not cifg) else None for g in "ifo"}
        self.b = {g: m(units) if g in gates else None for g in "ifco"}
        self.proj = (m(out, units), m(out)) if projection else (None, None)
        self.ln = {g: m(units) + 1 if layer_norm and g in gates else None for g in "ifco"}

    def tensors(self, extra_cols: int = 0, aux: dict[str, np.ndarray] | None = None) -> list[Any]:
        """Constants (or omitted operands) for LSTM inputs 1..17."""

        def c(v: np.ndarray | None, *dims: int) -> Any:
            return omitted(f32(*dims)) if v is None else const(f32(*v.shape), v)

        w = (
            self.w
            if aux is None
            else {
                g: None if v is None else np.concatenate([v, aux[g]], 1) for g, v in self.w.items()
            }
        )
        return (
            [c(w[g], self.units, 1) for g in "ifco"]
            + [c(self.r[g], self.units, 1) for g in "ifco"]
            + [c(self.p[g], self.units) for g in "ifo"]
            + [c(self.b[g], self.units) for g in "ifco"]
            + [c(self.proj[0], self.out, self.units), c(self.proj[1], self.out)]
        )

    def norms(self) -> list[Any]:
        return [
            omitted(f32(self.units)) if self.ln[g] is None else const(f32(self.units), self.ln[g])
            for g in "ifco"
        ]


def lstm_sequence(
    x: np.ndarray,
    p: LstmParams,
    h: np.ndarray,
    c: np.ndarray,
    act: int,
    clips: tuple[float, float],
    backward: bool = False,
    aux: dict[str, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Time-major x through repeated single steps of the LSTM operation."""
    batch = x.shape[1]
    steps = range(x.shape[0] - 1, -1, -1) if backward else range(x.shape[0])
    out = np.zeros((x.shape[0], batch, p.out), np.float32)
    scratch = 3 if p.w["i"] is None else 4
    lstm = PreparedModel(
        model(
            Op.LSTM,
            [
                f32(batch, x.shape[2]),
                *p.tensors(aux=aux),
                f32(batch, p.out),
                f32(batch, p.units),
                i32(act),
                fscalar(clips[0]),
                fscalar(clips[1]),
                *p.norms(),
            ],
            [
                f32(batch, scratch * p.units),
                f32(batch, p.out),
                f32(batch, p.units),
                f32(batch, p.out),
            ],
        )
    )
    for t in steps:
        _, h, c, o = lstm.run([x[t], h, c])
        out[t] = o
    return out, h, c


LSTM_VARIANTS = [
    dict(),
    dict(cifg=True, peephole=True),
    dict(projection=True, layer_norm=True),
    dict(cifg=True, peephole=True, projection=True, layer_norm=True),
]


@pytest.mark.parametrize("variant", range(len(LSTM_VARIANTS)))
def test_unidirectional_sequence_lstm_is_repeated_lstm_steps(variant: int) -> None:
    rng = np.random.default_rng(30 + variant)
    steps, batch, size, units = 3, 2, 3, 4
    opts = LSTM_VARIANTS[variant]
    out_size = 2 if opts.get("projection") else units
    p = LstmParams(rng, size, units, out_size, **opts)
    x = rng.normal(size=(steps, batch, size)).astype(np.float32)
    h0 = rng.normal(size=(batch, out_size)).astype(np.float32)
    c0 = rng.normal(size=(batch, units)).astype(np.float32)
    clips = (0.0, 0.0) if variant % 2 == 0 else (2.0, 0.5)
    want, h, c = lstm_sequence(x, p, h0, c0, 4, clips)
    for time_major in (True, False):
        feed = x if time_major else x.transpose(1, 0, 2).copy()
        dims = (steps, batch, out_size) if time_major else (batch, steps, out_size)
        got = run(
            Op.UNIDIRECTIONAL_SEQUENCE_LSTM,
            [
                f32(*feed.shape),
                *p.tensors(),
                f32(batch, out_size),
                f32(batch, units),
                i32(4),
                fscalar(clips[0]),
                fscalar(clips[1]),
                boolean(time_major),
                *p.norms(),
            ],
            [f32(*dims), f32(batch, out_size), f32(batch, units)],
            feed,
            h0,
            c0,
        )
        np.testing.assert_allclose(
            got[0], want if time_major else want.transpose(1, 0, 2), rtol=1e-5, atol=1e-5
        )
        np.testing.assert_allclose(got[1], h, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[2], c, rtol=1e-5, atol=1e-5)


def bi_lstm_inputs(
    x: OperandInfo,
    fw: LstmParams,
    bw: LstmParams,
    batch: int,
    aux: Any,
    fw_aux: list[Any],
    bw_aux: list[Any],
    merge: bool,
    time_major: bool,
    clips: tuple[float, float] = (0.0, 0.0),
) -> list[Any]:
    return [
        x,
        *fw.tensors(),
        *bw.tensors(),
        f32(batch, fw.out),
        f32(batch, fw.units),
        f32(batch, bw.out),
        f32(batch, bw.units),
        aux,
        *fw_aux,
        *bw_aux,
        i32(4),
        fscalar(clips[0]),
        fscalar(clips[1]),
        boolean(merge),
        boolean(time_major),
        *fw.norms(),
        *bw.norms(),
    ]


def test_bidirectional_sequence_lstm_is_forward_plus_reversed_backward() -> None:
    rng = np.random.default_rng(40)
    steps, batch, size, aux_size = 3, 2, 3, 2
    fw = LstmParams(rng, size, 4, 4, peephole=True)
    bw = LstmParams(rng, size, 3, 2, cifg=True, projection=True, layer_norm=True)
    x = rng.normal(size=(steps, batch, size)).astype(np.float32)
    states = [rng.normal(size=(batch, n)).astype(np.float32) for n in (4, 4, 2, 3)]
    no_aux = omitted(f32(steps, batch, aux_size))
    no_w = [omitted(f32(4, aux_size))] * 4
    fw_out, fw_h, fw_c = lstm_sequence(x, fw, states[0], states[1], 4, (0.0, 0.0))
    bw_out, bw_h, bw_c = lstm_sequence(x, bw, states[2], states[3], 4, (0.0, 0.0), backward=True)
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_LSTM,
        bi_lstm_inputs(f32(steps, batch, size), fw, bw, batch, no_aux, no_w, no_w, False, True),
        [
            f32(steps, batch, 4),
            f32(steps, batch, 2),
            f32(batch, 4),
            f32(batch, 4),
            f32(batch, 2),
            f32(batch, 3),
        ],
        x,
        *states,
    )
    for g, w in zip(got, (fw_out, bw_out, fw_h, fw_c, bw_h, bw_c)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_LSTM,
        bi_lstm_inputs(f32(batch, steps, size), fw, bw, batch, no_aux, no_w, no_w, True, False),
        [f32(batch, steps, 6)],
        x.transpose(1, 0, 2).copy(),
        *states,
    )[0]
    np.testing.assert_allclose(
        got, np.concatenate([fw_out, bw_out], 2).transpose(1, 0, 2), rtol=1e-5, atol=1e-5
    )
    # cross-linking: the aux input multiplies its own weights in every gate
    aux = rng.normal(size=(steps, batch, aux_size)).astype(np.float32)
    fw_aux = {g: rng.normal(size=(4, aux_size)).astype(np.float32) for g in "ifco"}
    bw_aux = {g: rng.normal(size=(3, aux_size)).astype(np.float32) for g in "fco"}
    aux_consts = (
        [const(f32(4, aux_size), fw_aux[g]) for g in "ifco"],
        [omitted(f32(3, aux_size))] + [const(f32(3, aux_size), bw_aux[g]) for g in "fco"],
    )
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_LSTM,
        bi_lstm_inputs(
            f32(steps, batch, size),
            fw,
            bw,
            batch,
            f32(steps, batch, aux_size),
            *aux_consts,
            False,
            True,
        ),
        [f32(steps, batch, 4), f32(steps, batch, 2)],
        x,
        *states,
        aux,
    )
    xa = np.concatenate([x, aux], axis=2)
    np.testing.assert_allclose(
        got[0],
        lstm_sequence(xa, fw, states[0], states[1], 4, (0, 0), aux=fw_aux)[0],
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_allclose(
        got[1],
        lstm_sequence(xa, bw, states[2], states[3], 4, (0, 0), backward=True, aux=bw_aux)[0],
        rtol=1e-5,
        atol=1e-5,
    )
    # parallel linking: aux replaces the backward cell's input
    bw_p = LstmParams(rng, aux_size, 3, 3)
    states_p = states[:2] + [rng.normal(size=(batch, 3)).astype(np.float32)] * 2
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_LSTM,
        bi_lstm_inputs(
            f32(steps, batch, size),
            fw,
            bw_p,
            batch,
            f32(steps, batch, aux_size),
            no_w,
            no_w,
            False,
            True,
        ),
        [f32(steps, batch, 4), f32(steps, batch, 3)],
        x,
        *states_p,
        aux,
    )
    np.testing.assert_allclose(
        got[1],
        lstm_sequence(aux, bw_p, states_p[2], states_p[3], 4, (0, 0), backward=True)[0],
        rtol=1e-5,
        atol=1e-5,
    )
    rejects(
        Op.BIDIRECTIONAL_SEQUENCE_LSTM,
        bi_lstm_inputs(f32(steps, batch, size), fw, bw, batch, no_aux, no_w, no_w, False, True),
        [f32(steps, batch, 4)],
        "merge_outputs=False",
    )


def test_sequence_lstm_validation_and_float16() -> None:
    rng = np.random.default_rng(50)
    p = LstmParams(rng, 3, 4, 4)
    base = [
        f32(2, 1, 3),
        *p.tensors(),
        f32(1, 4),
        f32(1, 4),
        i32(4),
        fscalar(0.0),
        fscalar(0.0),
        boolean(True),
        *p.norms(),
    ]
    rejects(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, base[:-1], [f32(2, 1, 4)], "expected 28")
    bad = list(base)
    bad[20] = i32(5)
    rejects(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, bad, [f32(2, 1, 4)], "activation")
    bad = list(base)
    bad[21] = fscalar(-1.0)
    rejects(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, bad, [f32(2, 1, 4)], "clip")
    rejects(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, [f32(2, 3), *base[1:]], [f32(2, 1, 4)], "rank 2")
    rejects(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, base, [f32(2, 1, 4), f32(1, 4)], "expected 1 or 3")
    # float16: every tensor and both clips in half precision
    h = [
        (info(T.TENSOR_FLOAT16, *a[0].dimensions), a[1])
        if isinstance(a, tuple) and a[0].code == T.TENSOR_FLOAT32 and a[1] is not OMITTED
        else a
        for a in base[1:18]
    ]
    h = [
        (info(T.TENSOR_FLOAT16, *a[0].dimensions), a[1].astype(np.float16))
        if a[1] is not OMITTED
        else (info(T.TENSOR_FLOAT16, *a[0].dimensions), OMITTED)
        for a in h
    ]
    x = rng.normal(size=(2, 1, 3)).astype(np.float32)
    s = np.zeros((1, 4), np.float32)
    got = run(
        Op.UNIDIRECTIONAL_SEQUENCE_LSTM,
        [
            info(T.TENSOR_FLOAT16, 2, 1, 3),
            *h,
            info(T.TENSOR_FLOAT16, 1, 4),
            info(T.TENSOR_FLOAT16, 1, 4),
            i32(4),
            fscalar(0.0, T.FLOAT16),
            fscalar(0.0, T.FLOAT16),
            boolean(True),
            *[omitted(info(T.TENSOR_FLOAT16, 4))] * 4,
        ],
        [info(T.TENSOR_FLOAT16, 2, 1, 4)],
        x.astype(np.float16),
        s.astype(np.float16),
        s.astype(np.float16),
    )[0]
    want = lstm_sequence(x, p, s, s, 4, (0.0, 0.0))[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, atol=5e-3)


# --------------------------------------------------------------- QUANTIZED_16BIT_LSTM

Q16_WEIGHTS = {
    "ii": [146, 250, 235, 171, 10, 218, 171, 108],
    "if": [24, 50, 132, 179, 158, 110, 3, 169],
    "ic": [133, 34, 29, 49, 206, 109, 54, 183],
    "io": [195, 187, 11, 99, 109, 10, 218, 48],
    "ri": [254, 206, 77, 168, 71, 20, 215, 6, 223, 7, 118, 225, 59, 130, 174, 26],
    "rf": [137, 240, 103, 52, 68, 51, 237, 112, 0, 220, 89, 23, 69, 4, 207, 253],
    "rc": [172, 60, 205, 65, 14, 0, 140, 168, 240, 223, 133, 56, 142, 64, 246, 216],
    "ro": [106, 214, 67, 23, 59, 158, 45, 3, 119, 132, 49, 205, 129, 218, 11, 98],
}
Q16_BIAS = {
    "i": [-7876, 13488, -726, 32839],
    "f": [9206, -46884, -11693, -38724],
    "c": [39481, 48624, 48976, -21419],
    "o": [-58999, -17050, -41852, -40538],
}


def q16_lstm_inputs(batch: int, cell_scale: float = 1 / 2048, weights_zp: int = 100) -> list[Any]:
    q8 = T.TENSOR_QUANT8_ASYMM
    ws = 0.00408021
    args: list[Any] = [info(q8, batch, 2, scale=1 / 128, zp=128)]
    for k in ("ii", "if", "ic", "io"):
        args.append(const(info(q8, 4, 2, scale=ws, zp=weights_zp), Q16_WEIGHTS[k]))
    for k in ("ri", "rf", "rc", "ro"):
        args.append(const(info(q8, 4, 4, scale=ws, zp=weights_zp), Q16_WEIGHTS[k]))
    for k in "ifco":
        args.append(const(info(T.TENSOR_INT32, 4, scale=ws / 128), Q16_BIAS[k]))
    args += [
        info(T.TENSOR_QUANT16_SYMM, batch, 4, scale=cell_scale),
        info(q8, batch, 4, scale=1 / 128, zp=128),
    ]
    return args


def test_quantized_16bit_lstm_known_answer() -> None:
    outs = [
        info(T.TENSOR_QUANT16_SYMM, 2, 4, scale=1 / 2048),
        info(T.TENSOR_QUANT8_ASYMM, 2, 4, scale=1 / 128, zp=128),
    ]
    cell, out = run(
        Op.QUANTIZED_16BIT_LSTM,
        q16_lstm_inputs(2),
        outs,
        np.array([[166, 179], [50, 150]], np.uint8),
        np.array([[876, 1034, 955, -909], [761, 1029, 796, -1036]], np.int16),
        np.array([[136, 150, 140, 115], [135, 152, 138, 112]], np.uint8),
    )
    np.testing.assert_array_equal(cell, [[1485, 1177, 1373, -1023], [1019, 1355, 1097, -1235]])
    np.testing.assert_array_equal(out, [[140, 151, 146, 112], [136, 156, 142, 112]])


def test_quantized_16bit_lstm_with_weights_given_at_run_time() -> None:
    """The weights packed per run (model inputs) give what the packing done once
    at prepare time (constants) gives."""
    outs = [
        info(T.TENSOR_QUANT16_SYMM, 2, 4, scale=1 / 2048),
        info(T.TENSOR_QUANT8_ASYMM, 2, 4, scale=1 / 128, zp=128),
    ]
    args = q16_lstm_inputs(2)
    x = np.array([[166, 179], [50, 150]], np.uint8)
    cell = np.array([[876, 1034, 955, -909], [761, 1029, 796, -1036]], np.int16)
    previous = np.array([[136, 150, 140, 115], [135, 152, 138, 112]], np.uint8)
    want = run(Op.QUANTIZED_16BIT_LSTM, args, outs, x, cell, previous)
    feeds = [value for _, value in args[1:13]]
    runtime = [args[0], *(i for i, _ in args[1:13]), *args[13:]]
    got = run(Op.QUANTIZED_16BIT_LSTM, runtime, outs, x, *feeds, cell, previous)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_quantized_16bit_lstm_validation() -> None:
    outs = [
        info(T.TENSOR_QUANT16_SYMM, 1, 4, scale=1 / 2048),
        info(T.TENSOR_QUANT8_ASYMM, 1, 4, scale=1 / 128, zp=128),
    ]
    rejects(Op.QUANTIZED_16BIT_LSTM, q16_lstm_inputs(1, cell_scale=1 / 1024), outs, "2\\*\\*-11")
    args = q16_lstm_inputs(1)
    args[3] = const(info(T.TENSOR_QUANT8_ASYMM, 4, 2, scale=0.00408021, zp=99), Q16_WEIGHTS["ic"])
    rejects(Op.QUANTIZED_16BIT_LSTM, args, outs, "share one scale")
    args = q16_lstm_inputs(1)
    args[0] = info(T.TENSOR_QUANT8_ASYMM, 1, 2, scale=1 / 64, zp=128)
    rejects(Op.QUANTIZED_16BIT_LSTM, args, outs, "scale 1/128")
    rejects(Op.QUANTIZED_16BIT_LSTM, q16_lstm_inputs(1)[:-1], outs, "expected 15 inputs")


@pytest.mark.parametrize("integer_bits", [3, 4, 5, 6])
def test_the_int16_fixed_point_gates_follow_logistic_and_tanh(integer_bits: int) -> None:
    """gemmlowp's 16-bit logistic and tanh (Q0.15 out) over every int16 input, against
    the real functions: within 6 and 12 steps of 2**-15 (their approximation error)."""
    from nnburst.cpu.ops.quantized_lstm import _logistic16, _tanh16

    x = np.arange(-32768, 32768, dtype=np.int64)
    real = x / 2.0 ** (15 - integer_bits)
    logistic = np.clip(np.round(32768 / (1 + np.exp(-real))), -32768, 32767)
    tanh = np.clip(np.round(32768 * np.tanh(real)), -32768, 32767)
    assert np.abs(_logistic16(x, integer_bits) - logistic).max() <= 6
    assert np.abs(_tanh16(x, integer_bits) - tanh).max() <= 12
    assert (
        _logistic16(np.int64(0), integer_bits) == 16384 and _tanh16(np.int64(0), integer_bits) == 0
    )


def _q16_with(changes: dict[int, dict[str, Any]]) -> list[Any]:
    """q16_lstm_inputs(1) with some operands' type changed (``{index: {field: value}}``)."""
    args = q16_lstm_inputs(1)
    for index, fields in changes.items():
        item = args[index]
        if isinstance(item, OperandInfo):
            args[index] = dataclasses.replace(item, **fields)
        else:
            args[index] = (dataclasses.replace(item[0], **fields), item[1])
    return args


@pytest.mark.parametrize(
    "changes, outputs, message",
    [
        ({0: {"scale": 1 / 64}}, {}, "input 0 (input) must have scale 1/128 and zero point 128"),
        ({14: {"zero_point": 0}}, {}, "input 14 (prev_output) must have scale 1/128 and zero point 128"),
        ({i: {"scale": 0.0} for i in range(1, 9)}, {}, "weights need a non-zero scale"),
        ({1: {"zero_point": 99}}, {}, "input 2: all weights must share one scale and zero point"),
        ({2: {"scale": 0.004}}, {}, "input 2: all weights must share one scale and zero point"),
        ({8: {"zero_point": 99}}, {}, "input 8: all weights must share one scale and zero point"),
        ({9: {"scale": 0.001}}, {}, "input 9: bias scale must be weights scale / 128, zero point 0"),
        ({12: {"zero_point": 1}}, {}, "input 12: bias scale must be weights scale / 128, zero point 0"),
        ({13: {"zero_point": 1}}, {}, "input 13 (prev_cell_state) must have scale 2**-11 (4 integer bits) and zero point 0"),
        ({}, {0: {"scale": 1 / 1024}}, "outputs must keep the cell state's and the output's quantization"),
        ({}, {1: {"zero_point": 0}}, "outputs must keep the cell state's and the output's quantization"),
        ({}, {0: {"dimensions": (1, 1, 4)}}, "output 0"),
        ({}, {1: {"dimensions": (4,)}}, "output 1"),
        ({10: {"dimensions": (1, 4)}}, {}, "input 10"),
    ],
)  # fmt: skip
def test_quantized_16bit_lstm_refuses_each_wrong_operand_by_name(
    changes: dict[int, dict[str, Any]], outputs: dict[int, dict[str, Any]], message: str
) -> None:
    outs = [
        info(T.TENSOR_QUANT16_SYMM, 1, 4, scale=1 / 2048),
        info(T.TENSOR_QUANT8_ASYMM, 1, 4, scale=1 / 128, zp=128),
    ]
    for index, fields in outputs.items():
        outs[index] = dataclasses.replace(outs[index], **fields)
    rejects(Op.QUANTIZED_16BIT_LSTM, _q16_with(changes), outs, re.escape(message))


# --------------------------------------------------------------- QUANTIZED_LSTM

QL_W = {
    "ii": [
        64,
        77,
        89,
        -102,
        -115,
        13,
        25,
        38,
        -51,
        64,
        -102,
        89,
        -77,
        64,
        -51,
        -64,
        -51,
        -38,
        -25,
        -13,
    ],
    "if": [
        -77,
        -13,
        38,
        25,
        115,
        -64,
        -25,
        -51,
        38,
        -102,
        -51,
        38,
        -64,
        -51,
        -77,
        38,
        -51,
        -77,
        -64,
        -64,
    ],
    "ic": [
        -51,
        -38,
        -25,
        -13,
        -64,
        64,
        -25,
        -38,
        -25,
        -77,
        77,
        -13,
        -51,
        -38,
        -89,
        89,
        -115,
        -64,
        102,
        77,
    ],
    "io": [
        -102,
        -51,
        -25,
        -115,
        -13,
        -89,
        38,
        -38,
        -102,
        -25,
        77,
        -25,
        51,
        -89,
        -38,
        -64,
        13,
        64,
        -77,
        -51,
    ],
    "ri": [-25, -38, 51, 13, -64, 115, -25, -38, -89, 6, -25, -77],
    "rf": [-64, -38, -64, -25, 77, 51, 115, 38, -13, 25, 64, 25],
    "rc": [-38, 25, 13, -38, 102, -10, -25, 38, 102, -77, -13, 25],
    "ro": [38, -13, 13, -25, -64, -89, -25, -77, -13, -51, -89, -25],
    "bi": [644245, 3221226, 4724464, 8160438],
    "bf": [2147484, -6442451, -4294968, 2147484],
    "bc": [-1073742, 15461883, 5368709, 1717987],
    "bo": [1073742, -214748, 4294968, 2147484],
    "pw": [-25, 51, 3, -51, 25, 127, 77, 20, 18, 51, -102, 51],
    "pb": [0, 0, 0],
    "lni": [3277, 6553, 9830, 16384],
    "lnf": [6553, 6553, 13107, 9830],
    "lnc": [22937, 6553, 9830, 26214],
    "lno": [19660, 6553, 6553, 16384],
}
QL_X = np.array([[90, 102, 13, 26, 38], [102, 13, 26, 51, 64]], np.int8)


def qlstm_inputs(w: dict[str, Any], out_size: int) -> list[Any]:
    units, size = 4, 5
    s8, s16 = T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM

    def c(key: str, i: OperandInfo) -> Any:
        return omitted(i) if w.get(key) is None else const(i, w[key])

    args: list[Any] = [info(T.TENSOR_QUANT8_ASYMM_SIGNED, 2, size, scale=0.0078125)]
    args += [c(k, info(s8, units, size, scale=0.00784314)) for k in ("ii", "if", "ic", "io")]
    args += [c(k, info(s8, units, out_size, scale=0.00784314)) for k in ("ri", "rf", "rc", "ro")]
    args += [omitted(info(s16, units, scale=1.0))] * 3
    args += [c("b" + k, info(T.TENSOR_INT32, units, scale=4.65661e-08)) for k in "ifco"]
    args += [
        c("pw", info(s8, out_size, units, scale=0.00392157)),
        c("pb", info(T.TENSOR_INT32, out_size)),
    ]
    args += [
        info(T.TENSOR_QUANT8_ASYMM_SIGNED, 2, out_size, scale=3.05176e-05),
        info(s16, 2, units, scale=3.05176e-05),
    ]
    args += [c("ln" + k, info(s16, units, scale=3.05182e-05)) for k in "ifco"]
    args += [fscalar(v) for v in (0.0, 0.0, 0.007059, 0.007812, 0.007059, 0.007812)]
    return args + [i32(0), fscalar(0.007)]


def qlstm_outputs(out_size: int) -> list[OperandInfo]:
    state = info(T.TENSOR_QUANT8_ASYMM_SIGNED, 2, out_size, scale=3.05176e-05)
    return [state, info(T.TENSOR_QUANT16_SYMM, 2, 4, scale=3.05176e-05), state]


@pytest.mark.parametrize("case", ["projection", "cifg_projection", "cifg_no_projection"])
def test_quantized_lstm_known_answers(case: str) -> None:
    w = dict(QL_W)
    out_size = 3
    if case.startswith("cifg"):
        for key in ("ii", "ri", "bi", "lni"):
            w[key] = None
    if case == "cifg_no_projection":
        out_size = 4
        w.update(
            pw=None,
            pb=None,
            rf=[-64, -38, -64, -25, 77, 51, 115, 38, -13, 25, 64, 25, 25, 38, -13, 51],
            rc=[-38, 25, 13, -38, 102, -10, -25, 38, 102, -77, -13, 25, 38, -13, 25, 64],
            ro=[38, -13, 13, -25, -64, -89, -25, -77, -13, -51, -89, -25, 13, 64, 25, -38],
        )
    want = {
        "projection": (
            [127, 127, -108, -67, 127, 127],
            [-14650, 8939, 5771, 6715, -11843, 7847, 1508, 12939],
        ),
        "cifg_projection": (
            [127, 127, 127, -128, 127, 127],
            [-11692, 9960, 5491, 8861, -9422, 7726, 2056, 13149],
        ),
        "cifg_no_projection": (
            [-15, 21, 14, 20, -15, 15, 5, 27],
            [-11692, 9960, 5491, 8861, -9422, 7726, 2056, 13149],
        ),
    }[case]
    state, cell, out = run(
        Op.QUANTIZED_LSTM,
        qlstm_inputs(w, out_size),
        qlstm_outputs(out_size),
        QL_X,
        np.zeros((2, out_size), np.int8),
        np.zeros((2, 4), np.int16),
    )
    np.testing.assert_array_equal(out.ravel(), want[0])
    np.testing.assert_array_equal(state, out)
    np.testing.assert_array_equal(cell.ravel(), want[1])


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def _qlstm_peephole_case(
    peephole: bool, zp: int = 3, cell_clip: float = 0.0, projection: int = 0
) -> tuple[list[Any], tuple[np.ndarray, ...]]:
    """A QUANTIZED_LSTM step with peepholes (no layer norm, no CIFG; a cell clip and
    a projection to ``projection`` outputs if asked): the operands, and what the step
    computes in real numbers (float64), quantized."""
    rng = np.random.default_rng(32)
    units, size = 4, 3
    out_size = projection or units
    sx, sh, sw, sr, sp, scell = 1 / 64, 1 / 128, 1 / 256, 1 / 128, 1 / 64, 2.0**-11
    hidden_scale, hidden_zp = (1 / 128, 5) if projection else (sh, -zp)
    s8, s16 = T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM
    w = {g: rng.integers(-60, 61, (units, size)) for g in "ifco"}
    r = {g: rng.integers(-60, 61, (units, out_size)) for g in "ifco"}
    bias = {g: rng.integers(-3000, 3001, units) for g in "ifco"}
    peep = {g: rng.integers(-50, 51, units) * peephole for g in "ifo"}
    x = rng.integers(-100, 101, (2, size)).astype(np.int8)
    h = rng.integers(-100, 101, (2, out_size)).astype(np.int8)
    c = rng.integers(-1500, 1501, (2, units)).astype(np.int16)
    proj_w = rng.integers(-20, 21, (out_size, units))
    proj_b = rng.integers(-200, 201, out_size)
    args: list[Any] = [info(T.TENSOR_QUANT8_ASYMM_SIGNED, 2, size, scale=sx, zp=zp)]
    args += [const(info(s8, units, size, scale=sw), w[g]) for g in "ifco"]
    args += [const(info(s8, units, out_size, scale=sr), r[g]) for g in "ifco"]
    args += [const(info(s16, units, scale=sp), peep[g]) for g in "ifo"]
    args += [const(info(T.TENSOR_INT32, units, scale=sw * sx), bias[g]) for g in "ifco"]
    if projection:
        args += [
            const(info(s8, out_size, units, scale=1 / 128), proj_w),
            const(info(T.TENSOR_INT32, out_size), proj_b),
        ]
    else:
        args += [omitted(info(s8, units, units, scale=1.0)), omitted(info(T.TENSOR_INT32, units))]
    args += [
        info(T.TENSOR_QUANT8_ASYMM_SIGNED, 2, out_size, scale=sh, zp=-zp),
        info(s16, 2, units, scale=scell),
    ]
    args += [omitted(info(s16, units, scale=1.0))] * 4
    # No layer norm: the gates' intermediate scale is the Q3.12 of their arithmetic.
    args += [fscalar(v) for v in (cell_clip, 0.0, 2.0**-12, 2.0**-12, 2.0**-12, 2.0**-12)]
    args += [i32(hidden_zp), fscalar(hidden_scale)]

    xr, hr, cr = (x.astype(float) - zp) * sx, (h.astype(float) + zp) * sh, c * scell

    def pre(g: str) -> np.ndarray:
        return xr @ (w[g] * sw).T + hr @ (r[g] * sr).T + bias[g] * sw * sx

    forget = _sigmoid(pre("f") + peep["f"] * sp * cr)
    input_gate = _sigmoid(pre("i") + peep["i"] * sp * cr)
    cell = forget * cr + input_gate * np.tanh(pre("c"))
    if cell_clip:
        cell = np.clip(cell, -cell_clip, cell_clip)
    out_gate = _sigmoid(pre("o") + peep["o"] * sp * cell)
    hidden = np.clip(np.round(out_gate * np.tanh(cell) / hidden_scale) + hidden_zp, -128, 127)
    if projection:
        real = (hidden - hidden_zp) * hidden_scale @ (proj_w / 128).T + proj_b * hidden_scale / 128
        hidden = np.clip(np.round(real / sh) - zp, -128, 127)
    return args, (x, h, c, np.round(cell / scell), hidden)


@pytest.mark.parametrize(
    "peephole, cell_clip, projection",
    [(True, 0.0, 0), (False, 0.0, 0), (True, 0.25, 0), (True, 0.0, 3), (True, 0.3, 3)],
    ids=["peephole", "no-peephole", "cell-clip", "projection", "clip-and-projection"],
)
def test_quantized_lstm_peepholes_against_a_real_number_model(
    peephole: bool, cell_clip: float, projection: int
) -> None:
    """Each gate sees its peephole weight times the cell state (the previous one for
    the input and forget gates, the new, clipped one for the output gate).  The
    integer step may differ from exact arithmetic by its roundings only: at most 3
    cell-state steps of 2**-11 and one output step."""
    args, (x, h, c, want_cell, want_out) = _qlstm_peephole_case(
        peephole, cell_clip=cell_clip, projection=projection
    )
    out_size = projection or 4
    state = info(T.TENSOR_QUANT8_ASYMM_SIGNED, 2, out_size, scale=1 / 128, zp=-3)
    outs = [state, info(T.TENSOR_QUANT16_SYMM, 2, 4, scale=2.0**-11), state]
    state, cell, out = run(Op.QUANTIZED_LSTM, args, outs, x, h, c)
    assert np.abs(cell.astype(int) - want_cell).max() <= 3
    assert np.abs(out.astype(int) - want_out).max() <= 1
    np.testing.assert_array_equal(state, out)
    if cell_clip:  # the clip binds: some cell values sit on it
        limit = int(cell_clip * 2048)
        assert np.abs(cell).max() == limit and (np.abs(c) > limit).any()
    if peephole and not cell_clip and not projection:  # the peepholes matter
        _, (*_, plain_cell, plain_out) = _qlstm_peephole_case(False)
        assert np.abs(plain_cell - want_cell).max() > 50
        assert np.abs(plain_out - want_out).max() > 3


@pytest.mark.parametrize("shift, accepted", [(-16, False), (-15, True), (-9, True), (-8, False)])
def test_quantized_lstm_cell_state_scale_is_a_power_of_two_from_2_15_to_2_9(
    shift: int, accepted: bool
) -> None:
    args = qlstm_inputs(QL_W, 3)
    args[19] = info(T.TENSOR_QUANT16_SYMM, 2, 4, scale=2.0**shift)
    if accepted:
        PreparedModel(model(Op.QUANTIZED_LSTM, args, qlstm_outputs(3)))
    else:
        message = f"input 19 (cell state) scale {2.0**shift} must be a power of two between"
        rejects(Op.QUANTIZED_LSTM, args, qlstm_outputs(3), re.escape(message))


def test_quantized_lstm_refusals_name_what_is_wrong() -> None:
    w = dict(QL_W, ri=None)
    rejects(
        Op.QUANTIZED_LSTM,
        qlstm_inputs(w, 3),
        qlstm_outputs(3),
        re.escape(
            "input_to_input and recurrent_to_input weights must be both present (LSTM) "
            "or both omitted (CIFG)"
        ),
    )
    args = qlstm_inputs(QL_W, 3)
    args[26] = fscalar(0.0)
    rejects(
        Op.QUANTIZED_LSTM,
        args,
        qlstm_outputs(3),
        re.escape("input 26 (scale) is 0.0; it must be > 0"),
    )
    args = qlstm_inputs(QL_W, 3)
    args[31] = fscalar(-1.0)
    rejects(
        Op.QUANTIZED_LSTM,
        args,
        qlstm_outputs(3),
        re.escape("input 31 (scale) is -1.0; it must be > 0"),
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"ii": None, "ri": None, "lni": None}, "CIFG (no input_to_input weights) omits every input-gate tensor"),
        ({"bf": None}, "gate 'f' needs its input/recurrent weights and bias"),
        ({"bo": None}, "gate 'o' needs its input/recurrent weights and bias"),
        ({"lnc": None}, "layer norm weights must be all present or all omitted"),
    ],
)  # fmt: skip
def test_quantized_lstm_inconsistent_operands_fail_at_run_time(
    change: dict[str, Any], message: str
) -> None:
    prepared = PreparedModel(
        model(Op.QUANTIZED_LSTM, qlstm_inputs(dict(QL_W, **change), 3), qlstm_outputs(3))
    )
    with pytest.raises(NNError, match=re.escape(message)) as err:
        prepared.run([QL_X, np.zeros((2, 3), np.int8), np.zeros((2, 4), np.int16)])
    assert err.value.code == ResultCode.OP_FAILED


def test_quantized_lstm_validation_and_execution_errors() -> None:
    w = dict(QL_W)
    w["ii"] = None  # input weights without recurrent-to-input weights
    rejects(Op.QUANTIZED_LSTM, qlstm_inputs(w, 3), qlstm_outputs(3), "both omitted")
    args = qlstm_inputs(QL_W, 3)
    args[19] = info(T.TENSOR_QUANT16_SYMM, 2, 4, scale=0.001)
    rejects(Op.QUANTIZED_LSTM, args, qlstm_outputs(3), "power of two")
    args = qlstm_inputs(QL_W, 3)
    args[0] = info(T.TENSOR_QUANT8_ASYMM, 2, 5, scale=0.0078125)
    rejects(Op.QUANTIZED_LSTM, args, qlstm_outputs(3), "input 0 has type")
    w = dict(QL_W)
    w["lnc"] = None  # layer norm on some gates only
    prepared = PreparedModel(model(Op.QUANTIZED_LSTM, qlstm_inputs(w, 3), qlstm_outputs(3)))
    with pytest.raises(NNError, match="layer norm") as err:
        prepared.run([QL_X, np.zeros((2, 3), np.int8), np.zeros((2, 4), np.int16)])
    assert err.value.code == ResultCode.OP_FAILED


# --------------------------------------------------------------- RANDOM_MULTINOMIAL


def multinomial(
    logits: np.ndarray, samples: int, seeds: list[int], code: T = T.TENSOR_FLOAT32
) -> np.ndarray:
    return run(
        Op.RANDOM_MULTINOMIAL,
        [info(code, *logits.shape), i32(samples), const(info(T.TENSOR_INT32, 2), seeds)],
        [info(T.TENSOR_INT32, logits.shape[0], samples)],
        logits.astype(info(code).dtype),
    )[0]


def test_random_multinomial_frequencies_follow_softmax() -> None:
    logits = np.array([[0.0, 1.0, 2.0, -1.0], [3.0, 3.0, -np.inf, 0.0]], np.float32)
    samples = 20000
    out = multinomial(logits, samples, [37, 1234])
    assert out.shape == (2, samples) and out.dtype == np.int32
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    for b in range(2):
        freq = np.bincount(out[b], minlength=4) / samples
        # 5 standard deviations of a binomial frequency
        tol = 5 * np.sqrt(probs[b] * (1 - probs[b]) / samples) + 1e-9
        assert np.all(np.abs(freq - probs[b]) <= tol), (freq, probs[b])
    assert not (out[1] == 2).any()  # probability zero never drawn
    # fixed seeds reproduce, other seeds differ; float16 logits work too
    np.testing.assert_array_equal(out, multinomial(logits, samples, [37, 1234]))
    assert not np.array_equal(out, multinomial(logits, samples, [38, 1234]))
    half = multinomial(logits, 1000, [1, 2], T.TENSOR_FLOAT16)
    assert half.shape == (2, 1000) and half.min() >= 0 and half.max() <= 3


def test_random_multinomial_validation() -> None:
    rejects(
        Op.RANDOM_MULTINOMIAL,
        [f32(1, 3), i32(-1), const(info(T.TENSOR_INT32, 2), [1, 2])],
        [info(T.TENSOR_INT32, 1, 0)],
        "num_samples is -1",
    )
    rejects(
        Op.RANDOM_MULTINOMIAL,
        [f32(1, 3), i32(4), const(info(T.TENSOR_INT32, 3), [1, 2, 3])],
        [info(T.TENSOR_INT32, 1, 4)],
        "3 elements",
    )
    rejects(
        Op.RANDOM_MULTINOMIAL,
        [f32(1, 3), i32(4), const(info(T.TENSOR_INT32, 2), [1, 2])],
        [f32(1, 4)],
        "output 0",
    )
    rejects(
        Op.RANDOM_MULTINOMIAL,
        [f32(3), i32(4), const(info(T.TENSOR_INT32, 2), [1, 2])],
        [info(T.TENSOR_INT32, 1, 4)],
        "rank 1",
    )


def test_unidirectional_sequence_lstm_known_answer_layer_norm_peephole_projection() -> None:
    """The conformance spec's 3-step LSTM (layer norm, peephole, projection)."""
    w = {
        "ii": [
            0.5,
            0.6,
            0.7,
            -0.8,
            -0.9,
            0.1,
            0.2,
            0.3,
            -0.4,
            0.5,
            -0.8,
            0.7,
            -0.6,
            0.5,
            -0.4,
            -0.5,
            -0.4,
            -0.3,
            -0.2,
            -0.1,
        ],
        "if": [
            -0.6,
            -0.1,
            0.3,
            0.2,
            0.9,
            -0.5,
            -0.2,
            -0.4,
            0.3,
            -0.8,
            -0.4,
            0.3,
            -0.5,
            -0.4,
            -0.6,
            0.3,
            -0.4,
            -0.6,
            -0.5,
            -0.5,
        ],
        "ic": [
            -0.4,
            -0.3,
            -0.2,
            -0.1,
            -0.5,
            0.5,
            -0.2,
            -0.3,
            -0.2,
            -0.6,
            0.6,
            -0.1,
            -0.4,
            -0.3,
            -0.7,
            0.7,
            -0.9,
            -0.5,
            0.8,
            0.6,
        ],
        "io": [
            -0.8,
            -0.4,
            -0.2,
            -0.9,
            -0.1,
            -0.7,
            0.3,
            -0.3,
            -0.8,
            -0.2,
            0.6,
            -0.2,
            0.4,
            -0.7,
            -0.3,
            -0.5,
            0.1,
            0.5,
            -0.6,
            -0.4,
        ],
        "ri": [-0.2, -0.3, 0.4, 0.1, -0.5, 0.9, -0.2, -0.3, -0.7, 0.05, -0.2, -0.6],
        "rf": [-0.5, -0.3, -0.5, -0.2, 0.6, 0.4, 0.9, 0.3, -0.1, 0.2, 0.5, 0.2],
        "rc": [-0.3, 0.2, 0.1, -0.3, 0.8, -0.08, -0.2, 0.3, 0.8, -0.6, -0.1, 0.2],
        "ro": [0.3, -0.1, 0.1, -0.2, -0.5, -0.7, -0.2, -0.6, -0.1, -0.4, -0.7, -0.2],
        "pi": [0.05, 0.1, 0.25, 0.15],
        "pf": [-0.02, -0.15, -0.25, -0.03],
        "po": [0.1, -0.1, -0.5, 0.05],
        "bi": [0.03, 0.15, 0.22, 0.38],
        "bf": [0.1, -0.3, -0.2, 0.1],
        "bc": [-0.05, 0.72, 0.25, 0.08],
        "bo": [0.05, -0.01, 0.2, 0.1],
        "pw": [-0.1, 0.2, 0.01, -0.2, 0.1, 0.5, 0.3, 0.08, 0.07, 0.2, -0.4, 0.2],
        "lni": [0.1, 0.2, 0.3, 0.5],
        "lnf": [0.2, 0.2, 0.4, 0.3],
        "lnc": [0.7, 0.2, 0.3, 0.8],
        "lno": [0.6, 0.2, 0.2, 0.5],
    }
    x = np.array(
        [
            0.7,
            0.8,
            0.1,
            0.2,
            0.3,
            0.3,
            0.2,
            0.9,
            0.8,
            0.1,
            0.8,
            0.1,
            0.2,
            0.4,
            0.5,
            0.1,
            0.5,
            0.2,
            0.4,
            0.2,
            0.2,
            0.7,
            0.7,
            0.1,
            0.7,
            0.6,
            0.9,
            0.2,
            0.5,
            0.7,
        ],
        np.float32,
    ).reshape(3, 2, 5)
    args = [f32(3, 2, 5)]
    args += [const(f32(4, 5), w["i" + g]) for g in "ifco"]
    args += [const(f32(4, 3), w["r" + g]) for g in "ifco"]
    args += [const(f32(4), w["p" + g]) for g in "ifo"]
    args += [const(f32(4), w["b" + g]) for g in "ifco"]
    args += [
        const(f32(3, 4), w["pw"]),
        f32(0),
        f32(2, 3),
        f32(2, 4),
        i32(4),
        fscalar(0.0),
        fscalar(0.0),
        boolean(True),
    ]
    args += [const(f32(4), w["ln" + g]) for g in "ifco"]
    out, h, c = run(
        Op.UNIDIRECTIONAL_SEQUENCE_LSTM,
        args,
        [f32(3, 2, 3), f32(2, 3), f32(2, 4)],
        x,
        np.zeros(0, np.float32),
        np.zeros((2, 3), np.float32),
        np.zeros((2, 4), np.float32),
    )
    golden = [
        0.024407668039203,
        0.128027379512787,
        -0.001709178090096,
        -0.006924282759428,
        0.084874063730240,
        0.063444979488850,
        0.013764165341854,
        0.140751048922539,
        0.039583537727594,
        -0.004039138555527,
        0.139963015913963,
        0.072681039571762,
        -0.004592306911945,
        0.155278354883194,
        0.083737745881081,
        0.007527053356171,
        0.161902531981468,
        0.056137066334486,
    ]
    np.testing.assert_allclose(out.ravel(), golden, atol=1e-5)
    np.testing.assert_allclose(h.ravel(), golden[-6:], atol=1e-5)
    np.testing.assert_allclose(
        c.ravel(),
        [
            -0.742560744285583,
            0.579139292240143,
            0.114988230168819,
            0.649957716464996,
            -0.686565399169922,
            0.548869132995605,
            0.173138767480850,
            0.587379336357117,
        ],
        atol=1e-5,
    )
