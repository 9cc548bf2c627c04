"""CPU driver: convolutions, pools, FULLY_CONNECTED, LSTM/RNN/SVDF, LSH_PROJECTION.

The conformance vectors pin these operations to the NNAPI reference; the
tests here check what the vectors do not reach (NCHW, dilation, per-channel
and signed quantization, validation messages) against naive numpy loops
written independently of the vectorised implementation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.codes import ResultCode
from nnburst.cpu.ops.lsh_projection import fingerprint64
from nnburst.errors import NNError
from nnburst.operands import ChannelQuant, OperandInfo

from .op_models import OMITTED, rejects, run


def f32(*dims: int) -> OperandInfo:
    return OperandInfo(T.TENSOR_FLOAT32, dims)


def i32(value: int) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.INT32, ()), np.array(value, dtype=np.int32)


def f32s(value: float) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.FLOAT32, ()), np.array(value, dtype=np.float32)


def boolean(value: bool) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.BOOL, ()), np.array(value)


def const(info: OperandInfo, value: Any) -> tuple[OperandInfo, np.ndarray]:
    return info, np.asarray(value, dtype=info.dtype).reshape(info.dimensions)


# --------------------------------------------------------------- naive references


def naive_conv(x, w, b, stride, pad, dilation=(1, 1), depth_multiplier=None):
    """NHWC conv by explicit loops; pad = (top, bottom, left, right)."""
    n, h, wd, c = x.shape
    fh, fw = w.shape[1:3]
    out_c = w.shape[3] if depth_multiplier else w.shape[0]
    xp = np.zeros((n, h + pad[0] + pad[1], wd + pad[2] + pad[3], c))
    xp[:, pad[0] : pad[0] + h, pad[2] : pad[2] + wd] = x
    oh = (xp.shape[1] - (fh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (xp.shape[2] - (fw - 1) * dilation[1] - 1) // stride[1] + 1
    out = np.zeros((n, oh, ow, out_c))
    for bi in range(n):
        for y in range(oh):
            for xx in range(ow):
                for o in range(out_c):
                    total = b[o]
                    for i in range(fh):
                        for j in range(fw):
                            px = xp[
                                bi,
                                y * stride[0] + i * dilation[0],
                                xx * stride[1] + j * dilation[1],
                            ]
                            if depth_multiplier:
                                total += px[o // depth_multiplier] * w[0, i, j, o]
                            else:
                                total += np.dot(px, w[o, i, j])
                    out[bi, y, xx, o] = total
    return out


def naive_pool(x, kind, fh, fw, stride, pad):
    n, h, wd, c = x.shape
    oh = (h + pad[0] + pad[1] - fh) // stride[0] + 1
    ow = (wd + pad[2] + pad[3] - fw) // stride[1] + 1
    out = np.zeros((n, oh, ow, c))
    for y in range(oh):
        for xx in range(ow):
            y0, x0 = y * stride[0] - pad[0], xx * stride[1] - pad[2]
            win = x[:, max(y0, 0) : y0 + fh, max(x0, 0) : x0 + fw].astype(np.float64)
            if kind == "max":
                out[:, y, xx] = win.max(axis=(1, 2))
            elif kind == "avg":
                out[:, y, xx] = win.mean(axis=(1, 2))
            else:
                out[:, y, xx] = np.sqrt((win**2).mean(axis=(1, 2)))
    return out


RNG = np.random.default_rng(7)


def conv_inputs(x_shape, w_shape, *scalars, code=Op.CONV_2D):
    w = RNG.standard_normal(w_shape).astype(np.float32)
    out_c = w_shape[3] if code == Op.DEPTHWISE_CONV_2D else w_shape[0]
    b = RNG.standard_normal(out_c).astype(np.float32)
    ins = [f32(*x_shape), const(f32(*w_shape), w), const(f32(out_c), b), *scalars]
    return ins, w, b


# --------------------------------------------------------------- CONV_2D / DEPTHWISE


def test_conv_explicit_padding_stride_dilation_matches_naive_loop():
    x = RNG.standard_normal((2, 7, 6, 3)).astype(np.float32)
    scalars = [
        i32(1),
        i32(0),
        i32(2),
        i32(1),
        i32(2),
        i32(1),
        i32(0),
        boolean(False),
        i32(1),
        i32(2),
    ]
    ins, w, b = conv_inputs(x.shape, (4, 3, 2, 3), *scalars)
    (got,) = run(Op.CONV_2D, ins, [f32(0, 0, 0, 0)], x)
    want = naive_conv(x, w, b, stride=(1, 2), pad=(2, 1, 1, 0), dilation=(2, 1))
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scheme", [1, 2])
def test_conv_nchw_equals_nhwc(scheme):
    x = RNG.standard_normal((1, 5, 6, 2)).astype(np.float32)
    ins, _, _ = conv_inputs(
        x.shape, (3, 3, 3, 2), i32(scheme), i32(2), i32(1), i32(1), boolean(False)
    )
    (nhwc,) = run(Op.CONV_2D, ins, [f32(0, 0, 0, 0)], x)
    ins[0] = f32(1, 2, 5, 6)
    ins[-1] = boolean(True)
    (nchw,) = run(Op.CONV_2D, ins, [f32(0, 0, 0, 0)], x.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(nchw, nhwc.transpose(0, 3, 1, 2))
    assert np.all(nhwc >= 0)  # RELU


def test_depthwise_multiplier_same_padding_matches_naive_loop():
    x = RNG.standard_normal((1, 5, 4, 2)).astype(np.float32)
    scalars = [i32(1), i32(1), i32(2), i32(2), i32(0)]  # SAME, stride_w 1, stride_h 2, multiplier 2
    ins, w, b = conv_inputs(x.shape, (1, 3, 3, 4), *scalars, code=Op.DEPTHWISE_CONV_2D)
    (got,) = run(Op.DEPTHWISE_CONV_2D, ins, [f32(1, 3, 4, 4)], x)
    # SAME with in 5, stride 2, filter 3: out 3, padding (1, 1); width: out 4, padding (1, 1).
    want = naive_conv(x, w, b, stride=(2, 1), pad=(1, 1, 1, 1), depth_multiplier=2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    ins[0] = f32(1, 2, 5, 4)
    ins += [boolean(True)]
    (nchw,) = run(Op.DEPTHWISE_CONV_2D, ins, [f32(0, 0, 0, 0)], x.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(nchw, got.transpose(0, 3, 1, 2))


def _quantize(real, scale, zero_point, dtype=np.uint8):
    info = np.iinfo(dtype)
    return np.clip(np.round(real / scale) + zero_point, info.min, info.max).astype(dtype)


@pytest.mark.parametrize("signed", [False, True])
def test_quant8_conv_within_one_step_of_float_conv(signed):
    dtype, code = (
        (np.int8, T.TENSOR_QUANT8_ASYMM_SIGNED) if signed else (np.uint8, T.TENSOR_QUANT8_ASYMM)
    )
    shift = -128 if signed else 0
    in_scale, in_zp, w_scale, w_zp, out_scale, out_zp = (
        0.05,
        120 + shift,
        0.02,
        130 + shift,
        0.1,
        100 + shift,
    )
    xq = RNG.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (1, 6, 5, 3), endpoint=True).astype(
        dtype
    )
    wq = RNG.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (2, 3, 3, 3), endpoint=True).astype(
        dtype
    )
    bq = np.array([300, -500], dtype=np.int32)
    x = (xq.astype(np.float64) - in_zp) * in_scale
    w = (wq.astype(np.float64) - w_zp) * w_scale
    b = bq * (in_scale * w_scale)
    ins = [
        OperandInfo(code, (1, 6, 5, 3), in_scale, in_zp),
        const(OperandInfo(code, (2, 3, 3, 3), w_scale, w_zp), wq),
        const(OperandInfo(T.TENSOR_INT32, (2,), in_scale * w_scale), bq),
        i32(1),
        i32(1),
        i32(1),
        i32(0),
    ]
    (got,) = run(Op.CONV_2D, ins, [OperandInfo(code, (1, 6, 5, 2), out_scale, out_zp)], xq)
    want = _quantize(naive_conv(x, w, b, (1, 1), (1, 1, 1, 1)), out_scale, out_zp, dtype)
    assert got.dtype == dtype
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_per_channel_depthwise_within_one_step_of_float():
    scales = (0.01, 0.02, 0.05, 0.1)
    xq = RNG.integers(0, 255, (1, 4, 4, 4), endpoint=True).astype(np.uint8)
    wq = RNG.integers(-127, 127, (1, 2, 2, 4), endpoint=True).astype(np.int8)
    bq = np.array([10, -20, 30, -40], dtype=np.int32)
    x = (xq.astype(np.float64) - 128) * 0.5
    w = wq * np.array(scales)
    b = bq * 0.5 * np.array(scales)
    ins = [
        OperandInfo(T.TENSOR_QUANT8_ASYMM, (1, 4, 4, 4), 0.5, 128),
        const(
            OperandInfo(
                T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (1, 2, 2, 4), 0.0, 0, ChannelQuant(3, scales)
            ),
            wq,
        ),
        const(OperandInfo(T.TENSOR_INT32, (4,)), bq),
        i32(2),
        i32(1),
        i32(1),
        i32(1),
        i32(0),
    ]
    out = OperandInfo(T.TENSOR_QUANT8_ASYMM, (1, 3, 3, 4), 0.25, 128)
    (got,) = run(Op.DEPTHWISE_CONV_2D, ins, [out], xq)
    want = _quantize(naive_conv(x, w, b, (1, 1), (0, 0, 0, 0), depth_multiplier=1), 0.25, 128)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_conv_filter_as_model_input_matches_constant_filter():
    x = RNG.standard_normal((1, 4, 4, 2)).astype(np.float32)
    ins, w, b = conv_inputs(x.shape, (3, 2, 2, 2), i32(2), i32(1), i32(1), i32(0))
    (constant,) = run(Op.CONV_2D, ins, [f32(1, 3, 3, 3)], x)
    ins[1] = f32(3, 2, 2, 2)
    (fed,) = run(Op.CONV_2D, ins, [f32(1, 3, 3, 3)], x, w)
    np.testing.assert_array_equal(constant, fed)
    with pytest.raises(
        NNError
    ) as err:  # at execution, a filter depth that disagrees with the input
        run(
            Op.CONV_2D,
            [f32(1, 4, 4, 3), f32(0, 0, 0, 0), *ins[2:]],
            [f32(0, 0, 0, 0)],
            np.zeros((1, 4, 4, 3), np.float32),
            w,
        )
    assert err.value.code == ResultCode.OP_FAILED


def _conv_ins(**change):
    ins, _, _ = conv_inputs((1, 4, 4, 2), (3, 2, 2, 2), i32(2), i32(1), i32(1), i32(0))
    for index, value in change.items():
        ins[int(index[1:])] = value
    return ins


@pytest.mark.parametrize(
    "ins, outputs, match",
    [
        (_conv_ins()[:6], [f32(1, 3, 3, 3)], "inputs"),
        (_conv_ins(), [f32(1, 3, 3, 3)] * 2, "output"),
        (_conv_ins(i1=const(f32(3, 2, 2, 1), np.zeros((3, 2, 2, 1)))), [f32(1, 3, 3, 3)], "depth"),
        (_conv_ins(i2=const(f32(4), np.zeros(4))), [f32(1, 3, 3, 3)], "bias length"),
        (_conv_ins(i0=f32(4, 4, 2)), [f32(1, 3, 3, 3)], "rank"),
        (_conv_ins(i3=i32(3)), [f32(1, 3, 3, 3)], "padding scheme"),
        (_conv_ins(i4=i32(0)), [f32(1, 3, 3, 3)], "stride_w"),
        (_conv_ins(i6=i32(7)), [f32(1, 3, 3, 3)], "activation"),
        (_conv_ins(i6=f32s(0.0)), [f32(1, 3, 3, 3)], "fuse"),
        (_conv_ins(i0=OperandInfo(T.TENSOR_INT32, (1, 4, 4, 2))), [f32(1, 3, 3, 3)], "input"),
    ],
)
def test_conv_validation_rejects(ins, outputs, match):
    rejects(Op.CONV_2D, ins, outputs, match)


def test_quant8_conv_rejects_wrong_bias_scale():
    q = T.TENSOR_QUANT8_ASYMM
    ins = [
        OperandInfo(q, (1, 2, 2, 1), 0.5, 0),
        const(OperandInfo(q, (1, 1, 1, 1), 0.5, 0), [[[[2]]]]),
        const(OperandInfo(T.TENSOR_INT32, (1,), 0.5), [0]),
        i32(2),
        i32(1),
        i32(1),
        i32(0),
    ]
    rejects(Op.CONV_2D, ins, [OperandInfo(q, (1, 2, 2, 1), 1.0, 0)], "bias scale")


def test_depthwise_rejects_multiplier_mismatch():
    ins, _, _ = conv_inputs(
        (1, 4, 4, 2),
        (1, 2, 2, 4),
        i32(2),
        i32(1),
        i32(1),
        i32(3),
        i32(0),
        code=Op.DEPTHWISE_CONV_2D,
    )
    rejects(Op.DEPTHWISE_CONV_2D, ins, [f32(1, 3, 3, 4)], "depth_multiplier")


# --------------------------------------------------------------- pools


@pytest.mark.parametrize(
    "code, kind", [(Op.AVERAGE_POOL_2D, "avg"), (Op.MAX_POOL_2D, "max"), (Op.L2_POOL_2D, "l2")]
)
def test_pools_explicit_padding_match_naive_loop_and_nchw(code, kind):
    x = RNG.standard_normal((2, 5, 6, 3)).astype(np.float32)
    # pads left 2, right 0, top 1, bottom 1; stride_w 2, stride_h 1; filter 3 x 2 (w x h)
    scalars = [i32(2), i32(0), i32(1), i32(1), i32(2), i32(1), i32(3), i32(2), i32(0)]
    (got,) = run(code, [f32(2, 5, 6, 3), *scalars], [f32(0, 0, 0, 0)], x)
    want = naive_pool(x, kind, 2, 3, (1, 2), (1, 1, 2, 0))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    (nchw,) = run(
        code, [f32(2, 3, 5, 6), *scalars, boolean(True)], [f32(0, 0, 0, 0)], x.transpose(0, 3, 1, 2)
    )
    np.testing.assert_array_equal(nchw, got.transpose(0, 3, 1, 2))


def test_quant8_average_pool_rounds_half_up_and_clamps_activation():
    info = OperandInfo(T.TENSOR_QUANT8_ASYMM, (1, 1, 4, 1), 0.5, 10)
    x = np.array([1, 2, 200, 201], dtype=np.uint8).reshape(1, 1, 4, 1)
    # VALID, stride 2, filter 2 x 1, RELU6: 6.0 / 0.5 + 10 = 22 caps the second window.
    scalars = [i32(2), i32(2), i32(1), i32(2), i32(1), i32(3)]
    (got,) = run(
        Op.AVERAGE_POOL_2D,
        [info, *scalars],
        [OperandInfo(T.TENSOR_QUANT8_ASYMM, (1, 1, 2, 1), 0.5, 10)],
        x,
    )
    assert got.reshape(-1).tolist() == [10, 22]  # (1+2+1)//2 = 2 -> clamped to zero point 10


def test_signed_average_pool_rounds_half_away_from_zero():
    info = OperandInfo(T.TENSOR_QUANT8_ASYMM_SIGNED, (1, 1, 4, 1), 1.0, 0)
    x = np.array([-1, -2, 1, 2], dtype=np.int8).reshape(1, 1, 4, 1)
    scalars = [i32(2), i32(2), i32(1), i32(2), i32(1), i32(0)]
    (got,) = run(
        Op.AVERAGE_POOL_2D, [info, *scalars], [info.__class__(info.code, (1, 1, 2, 1), 1.0, 0)], x
    )
    assert got.reshape(-1).tolist() == [-2, 2]


def test_pool_validation_rejects():
    scalars = [i32(2), i32(1), i32(1), i32(2), i32(2), i32(0)]
    rejects(
        Op.L2_POOL_2D,
        [OperandInfo(T.TENSOR_QUANT8_ASYMM, (1, 4, 4, 1), 1.0, 0), *scalars],
        [OperandInfo(T.TENSOR_QUANT8_ASYMM, (1, 3, 3, 1), 1.0, 0)],
        "type",
    )
    rejects(Op.MAX_POOL_2D, [f32(1, 4, 4, 1), *scalars[:5]], [f32(1, 3, 3, 1)], "inputs")
    rejects(
        Op.MAX_POOL_2D,
        [f32(1, 4, 4, 1), *scalars[:3], i32(0), *scalars[4:]],
        [f32(1, 3, 3, 1)],
        "filter_w",
    )
    with pytest.raises(NNError) as err:  # 5 x 5 window on a 4 x 4 VALID input
        run(
            Op.MAX_POOL_2D,
            [f32(1, 4, 4, 1), i32(2), i32(1), i32(1), i32(5), i32(5), i32(0)],
            [f32(0, 0, 0, 0)],
            np.zeros((1, 4, 4, 1), np.float32),
        )
    assert err.value.code == ResultCode.OP_FAILED


# --------------------------------------------------------------- FULLY_CONNECTED


def test_fully_connected_flattens_input_and_applies_activation():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    w = RNG.standard_normal((5, 6)).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    (got,) = run(
        Op.FULLY_CONNECTED,
        [f32(2, 3, 4), const(f32(5, 6), w), const(f32(5), b), i32(1)],
        [f32(4, 5)],
        x,
    )
    np.testing.assert_allclose(got, np.maximum(x.reshape(4, 6) @ w.T + b, 0), rtol=1e-5, atol=1e-5)


def test_quant8_fully_connected_within_one_step_of_float():
    q = T.TENSOR_QUANT8_ASYMM
    xq = RNG.integers(0, 255, (3, 8), endpoint=True).astype(np.uint8)
    wq = RNG.integers(0, 255, (4, 8), endpoint=True).astype(np.uint8)
    bq = np.array([100, -100, 0, 5000], dtype=np.int32)
    ins = [
        OperandInfo(q, (3, 8), 0.1, 127),
        OperandInfo(q, (4, 8), 0.01, 120),
        const(OperandInfo(T.TENSOR_INT32, (4,), 0.001), bq),
        i32(0),
    ]
    (got,) = run(Op.FULLY_CONNECTED, ins, [OperandInfo(q, (3, 4), 0.2, 128)], xq, wq)
    real = ((xq - 127.0) * 0.1) @ ((wq - 120.0) * 0.01).T + bq * 0.001
    assert np.abs(got.astype(int) - _quantize(real, 0.2, 128).astype(int)).max() <= 1


def test_float16_fully_connected_matches_float32():
    x = RNG.standard_normal((3, 4)).astype(np.float16)
    w = RNG.standard_normal((2, 4)).astype(np.float16)
    b = RNG.standard_normal(2).astype(np.float16)
    h = OperandInfo(T.TENSOR_FLOAT16, (3, 4))
    ins = [
        h,
        const(OperandInfo(T.TENSOR_FLOAT16, (2, 4)), w),
        const(OperandInfo(T.TENSOR_FLOAT16, (2,)), b),
        i32(0),
    ]
    (got,) = run(Op.FULLY_CONNECTED, ins, [OperandInfo(T.TENSOR_FLOAT16, (3, 2))], x)
    assert got.dtype == np.float16
    want = x.astype(np.float64) @ w.T.astype(np.float64) + b
    np.testing.assert_allclose(got, want, rtol=5e-3, atol=5e-3)


def test_fully_connected_validation_rejects():
    w = const(f32(5, 6), np.zeros((5, 6)))
    rejects(
        Op.FULLY_CONNECTED,
        [f32(4, 6), w, const(f32(4), np.zeros(4)), i32(0)],
        [f32(4, 5)],
        "bias length",
    )
    rejects(
        Op.FULLY_CONNECTED,
        [f32(4, 6), w, const(f32(5), np.zeros(5)), i32(9)],
        [f32(4, 5)],
        "FuseCode",
    )
    rejects(
        Op.FULLY_CONNECTED,
        [f32(4, 7), w, const(f32(5), np.zeros(5)), i32(0)],
        [f32(4, 5)],
        "multiple",
    )
    rejects(
        Op.FULLY_CONNECTED, [f32(6), w, const(f32(5), np.zeros(5)), i32(0)], [f32(1, 5)], "rank"
    )


# --------------------------------------------------------------- RNN / SVDF / LSTM


def test_rnn_step():
    x, h = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 4))
    w, r, b = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 4)), RNG.standard_normal(4)
    feed = [a.astype(np.float32) for a in (x, w, r, b, h)]
    ins = [f32(2, 3), f32(4, 3), f32(4, 4), f32(4), f32(2, 4), i32(3)]
    state, out = run(Op.RNN, ins, [f32(2, 4), f32(2, 4)], *feed)
    want = np.clip(feed[0] @ feed[1].T.astype(np.float64) + feed[4] @ feed[2].T + feed[3], 0, 6)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(state, out)


def test_svdf_state_is_shifted_memory_with_new_activation():
    batch, n_in, filters, memory, rank = 2, 3, 4, 3, 2
    x = RNG.standard_normal((batch, n_in)).astype(np.float32)
    wf = RNG.standard_normal((filters, n_in)).astype(np.float32)
    wt = RNG.standard_normal((filters, memory)).astype(np.float32)
    state = RNG.standard_normal((batch, memory * filters)).astype(np.float32)
    ins = [
        f32(batch, n_in),
        f32(filters, n_in),
        f32(filters, memory),
        (f32(0), OMITTED),
        f32(batch, memory * filters),
        i32(rank),
        i32(0),
    ]
    new_state, out = run(Op.SVDF, ins, [f32(0, 0), f32(0, 0)], x, wf, wt, state)
    mem = state.reshape(batch, filters, memory).astype(np.float64)
    mem[:, :, -1] = x @ wf.T.astype(np.float64)
    want = (mem * wt).sum(axis=2).reshape(batch, filters // rank, rank).sum(axis=2)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    shifted = np.concatenate([mem[:, :, 1:], np.zeros((batch, filters, 1))], axis=2)
    np.testing.assert_allclose(new_state, shifted.reshape(batch, -1), rtol=1e-6, atol=1e-7)


def _lstm_model(
    n_in,
    n_cell,
    n_out,
    *,
    cifg=False,
    peephole=False,
    projection=False,
    layer_norm=False,
    cell_clip=0.0,
    proj_clip=0.0,
):
    """LSTM inputs with the optional operands omitted as NO_VALUE where not wanted."""

    def opt(present, *dims):
        return f32(*dims) if present else (f32(*([0] * len(dims))), OMITTED)

    ins = [
        f32(1, n_in),
        opt(not cifg, n_cell, n_in),
        f32(n_cell, n_in),
        f32(n_cell, n_in),
        f32(n_cell, n_in),
        opt(not cifg, n_cell, n_out),
        f32(n_cell, n_out),
        f32(n_cell, n_out),
        f32(n_cell, n_out),
        opt(peephole and not cifg, n_cell),
        opt(peephole, n_cell),
        opt(peephole, n_cell),
        opt(not cifg, n_cell),
        f32(n_cell),
        f32(n_cell),
        f32(n_cell),
        opt(projection, n_out, n_cell),
        opt(projection, n_out),
        f32(1, n_out),
        f32(1, n_cell),
        i32(4),
        f32s(cell_clip),
        f32s(proj_clip),
    ]
    if layer_norm:
        ins += [opt(not cifg, n_cell), f32(n_cell), f32(n_cell), f32(n_cell)]
    scratch = f32(1, (3 if cifg else 4) * n_cell)
    return ins, [scratch, f32(1, n_out), f32(1, n_cell), f32(1, n_out)]


def _sig(z):
    return 1 / (1 + np.exp(-z))


@pytest.mark.parametrize("layer_norm", [False, True])
def test_lstm_cifg_peephole_projection_clipping(layer_norm):
    n_in, n_cell, n_out = 3, 4, 2
    ins, outs = _lstm_model(
        n_in,
        n_cell,
        n_out,
        cifg=True,
        peephole=True,
        projection=True,
        layer_norm=layer_norm,
        cell_clip=0.5,
        proj_clip=0.3,
    )
    feed = {
        i: RNG.standard_normal(info.dimensions).astype(np.float32)
        for i, info in enumerate(ins)
        if isinstance(info, OperandInfo)
    }
    scratch, h_out, c_out, out = run(Op.LSTM, ins, outs, *feed.values())
    g = {i: v.astype(np.float64) for i, v in feed.items()}
    x, h, c = g[0], g[18], g[19]

    def gate(w, r, bias, ln, peep=0.0):
        z = x @ g[w].T + h @ g[r].T + peep
        if layer_norm:
            z = (z - z.mean()) / np.sqrt(z.var() + 1e-8) * g[ln]
        return z + g[bias]

    f = _sig(gate(2, 6, 13, 24, c * g[10]))
    cell = np.clip(f * c + (1 - f) * np.tanh(gate(3, 7, 14, 25)), -0.5, 0.5)
    o = _sig(gate(4, 8, 15, 26, cell * g[11]))
    want = np.clip((o * np.tanh(cell)) @ g[16].T + g[17], -0.3, 0.3)
    np.testing.assert_allclose(c_out, cell, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(h_out, out)
    assert scratch.shape == (1, 3 * n_cell)


def test_lstm_validation_rejects():
    ins, outs = _lstm_model(2, 4, 4)
    rejects(Op.LSTM, ins[:22], outs, "inputs")
    partial_cifg = list(ins)
    partial_cifg[1] = (f32(0, 0), OMITTED)
    rejects(Op.LSTM, partial_cifg, outs, "all present or all omitted")
    bad_clip = list(ins)
    bad_clip[21] = f32s(-1.0)
    rejects(Op.LSTM, bad_clip, outs, "cell_clip")
    bad_activation = list(ins)
    bad_activation[20] = i32(5)
    rejects(Op.LSTM, bad_activation, outs, "activation")
    rejects(Op.LSTM, ins, outs[:3], "outputs")


def test_svdf_and_rnn_validation_rejects():
    svdf = [f32(2, 3), f32(4, 3), f32(4, 3), f32(4), f32(2, 12), i32(0), i32(0)]
    rejects(Op.SVDF, svdf, [f32(2, 12), f32(2, 4)], "rank")
    rnn = [f32(2, 3), f32(4, 3), f32(4, 4), f32(4, 1), f32(2, 4), i32(0)]
    rejects(Op.RNN, rnn, [f32(2, 4), f32(2, 4)], "rank")


# --------------------------------------------------------------- LSH_PROJECTION


def test_fingerprint64_of_empty_key_is_k2():
    assert fingerprint64(b"") == 0x9AE16A3B2F90404F


def test_lsh_sparse_packs_dense_bits():
    hash_seeds = RNG.standard_normal((3, 4)).astype(np.float32)
    x = RNG.integers(-1000, 1000, (5, 3)).astype(np.int32)

    def project(kind, out_len):
        ins = [
            const(f32(3, 4), hash_seeds),
            OperandInfo(T.TENSOR_INT32, (5, 3)),
            (f32(0), OMITTED),
            i32(kind),
        ]
        return run(Op.LSH_PROJECTION, ins, [OperandInfo(T.TENSOR_INT32, (out_len,))], x)[0]

    dense = project(2, 12).reshape(3, 4)
    assert set(np.unique(dense)) <= {0, 1}
    packed = (dense * np.array([8, 4, 2, 1])).sum(axis=1)
    np.testing.assert_array_equal(project(1, 3), packed)
    np.testing.assert_array_equal(project(3, 3), packed + np.arange(3) * 16)


def test_lsh_validation_rejects():
    ins = [
        const(f32(3, 33), np.zeros((3, 33))),
        OperandInfo(T.TENSOR_INT32, (5, 3)),
        (f32(0), OMITTED),
        i32(2),
    ]
    rejects(Op.LSH_PROJECTION, ins, [OperandInfo(T.TENSOR_INT32, (99,))], "bits")
    ins[0] = const(f32(3, 4), np.zeros((3, 4)))
    ins[3] = i32(4)
    rejects(Op.LSH_PROJECTION, ins, [OperandInfo(T.TENSOR_INT32, (12,))], "type 4")
