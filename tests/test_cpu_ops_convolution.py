"""CPU driver: TRANSPOSE_CONV_2D and GROUPED_CONV_2D.

Each is checked against an independent numpy computation written here from
the operation's definition (a scatter-add loop for transposed convolution,
per-group convolution) and, where the Android conformance specs publish
values, against those known answers.  Validation rejections must be BAD_DATA.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.operands import ChannelQuant, OperandInfo

from .op_models import rejects, run
from .op_operands import RNG, boolean, const, f32, i32, info, nchw, quant

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
