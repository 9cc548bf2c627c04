"""The vectorised conv, pool and fully-connected kernels against slow loop references.

Every reference here is written out with plain loops over output pixels, so
it shares nothing with the kernels' padding buffers, window views, im2col
or tap loops.  Quantized results must match exactly (integer accumulators,
then the reference's fixed-point requantization written out in Python
ints); float results to a tight relative tolerance.  Shapes and parameters
come from a seeded grid, so a failure names a reproducible case.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from nnburst import _bindings
from nnburst.codes import FuseCode, PaddingCode
from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.cpu.executor import PreparedModel
from nnburst.cpu.ops import fixed_point, fused_activation
from nnburst.cpu.ops.conv import _c_layout
from nnburst.cpu.ops.native import (
    POOL_MAX,
    POOL_SUM,
    ConvLoop,
    conv_f32,
    depthwise_conv_f32,
    pool_f32,
)
from nnburst.cpu.ops.window_geometry import Window2D
from nnburst.cpu.registry import ExecutionContext
from nnburst.operands import ChannelQuant, OperandInfo

from .op_models import model, run

# --------------------------------------------------------------- references


def same_padding(size: int, stride: int, effective: int) -> tuple[int, int]:
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + effective - size)
    return total // 2, total - total // 2


def ref_conv(x, w, stride, dilation, pads, groups):
    """x [N, H, W, C] (zero point already removed), w [O, KH, KW, C/groups] -> [N, OH, OW, O]."""
    n, h, wd, c = x.shape
    o, kh, kw, cg = w.shape
    (sh, sw), (dh, dw), (pt, pb, pl, pr) = stride, dilation, pads
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, oh, ow, o), dtype=x.dtype)
    per_group = o // groups
    for b, y, z, ch in itertools.product(range(n), range(oh), range(ow), range(o)):
        g = ch // per_group
        total = 0
        for i, j, k in itertools.product(range(kh), range(kw), range(cg)):
            yy, zz = y * sh + i * dh - pt, z * sw + j * dw - pl
            if 0 <= yy < h and 0 <= zz < wd:
                total += x[b, yy, zz, g * cg + k] * w[ch, i, j, k]
        out[b, y, z, ch] = total
    return out


def ref_transpose_conv(x, w, stride, pads):
    """Scatter every input pixel through the filter; pads = (top, bottom, left, right)."""
    n, h, wd, c = x.shape
    o, kh, kw, _ = w.shape
    (sh, sw), (pt, pb, pl, pr) = stride, pads
    full = np.zeros((n, (h - 1) * sh + kh, (wd - 1) * sw + kw, o), dtype=x.dtype)
    for b, y, z, i, j in itertools.product(range(n), range(h), range(wd), range(kh), range(kw)):
        for ch in range(o):
            full[b, y * sh + i, z * sw + j, ch] += sum(
                x[b, y, z, k] * w[ch, i, j, k] for k in range(c)
            )
    return full[:, pt : full.shape[1] - pb, pl : full.shape[2] - pr]


def ref_pool(x, kind, kh, kw, stride, pads):
    n, h, wd, c = x.shape
    (sh, sw), (pt, pb, pl, pr) = stride, pads
    oh, ow = (h + pt + pb - kh) // sh + 1, (wd + pl + pr - kw) // sw + 1
    out = np.zeros((n, oh, ow, c), dtype=np.float64)
    for b, y, z, ch in itertools.product(range(n), range(oh), range(ow), range(c)):
        vals = [
            int(x[b, yy, zz, ch]) if x.dtype.kind in "iu" else float(x[b, yy, zz, ch])
            for yy in range(y * sh - pt, y * sh - pt + kh)
            for zz in range(z * sw - pl, z * sw - pl + kw)
            if 0 <= yy < h and 0 <= zz < wd
        ]
        if kind == "max":
            out[b, y, z, ch] = max(vals)
        elif kind == "l2":
            out[b, y, z, ch] = np.sqrt(sum(v * v for v in vals) / len(vals))
        elif x.dtype.kind in "iu":  # round half away from zero, in integers
            s, k = sum(vals), len(vals)
            out[b, y, z, ch] = (s + k // 2) // k if s >= 0 else -((k // 2 - s) // k)
        else:
            out[b, y, z, ch] = sum(vals) / len(vals)
    return out


def ref_requantize(acc: int, multiplier: int, shift: int) -> int:
    """gemmlowp's MultiplyByQuantizedMultiplier on one Python int."""
    x = acc * (1 << max(shift, 0))
    x = min(max(x, -(2**31)), 2**31 - 1)
    ab = x * multiplier
    nudged = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
    high = abs(nudged) >> 31
    high = high if nudged >= 0 else -high
    exponent = max(-shift, 0)
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> exponent) + (1 if (high & mask) > threshold else 0)


def ref_quantized_output(acc, pairs, out: OperandInfo, fuse: int) -> np.ndarray:
    lo, hi = fused_activation.fused_activation_bounds(fuse, out)
    result = np.empty(acc.shape, dtype=out.dtype)
    for index in np.ndindex(acc.shape):
        m, s = pairs[index[-1] % len(pairs)]
        v = ref_requantize(int(acc[index]), m, s) + out.zero_point
        result[index] = min(max(v, lo), hi)
    return result


def ref_float_output(acc, fuse: int) -> np.ndarray:
    lo, hi = {FuseCode.NONE: (-np.inf, np.inf), FuseCode.RELU: (0, np.inf)}.get(
        FuseCode(fuse), (0, 6) if fuse == FuseCode.RELU6 else (-1, 1)
    )
    return np.clip(acc, lo, hi)


# --------------------------------------------------------------- model helpers


def scalar(value: int) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.INT32, ()), np.array(value, dtype=np.int32)


def flag(value: bool) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.BOOL, ()), np.array(value)


KINDS = ("float32", "float16", "uint8", "int8-per-channel")


def tensors(rng, kind, x_shape, w_shape, channel_dim, depth_out):
    """(input info, input value, filter info, filter value, bias info, bias value)."""
    if kind in ("float32", "float16"):
        code = T.TENSOR_FLOAT32 if kind == "float32" else T.TENSOR_FLOAT16
        dtype = np.float32 if kind == "float32" else np.float16
        x = rng.standard_normal(x_shape).astype(dtype)
        w = rng.standard_normal(w_shape).astype(dtype)
        b = rng.standard_normal(depth_out).astype(dtype)
        return (OperandInfo(code, x_shape), x, OperandInfo(code, w_shape), w), (
            OperandInfo(code, (depth_out,)),
            b,
        )
    if kind == "uint8":
        x_info = OperandInfo(T.TENSOR_QUANT8_ASYMM, x_shape, 0.5, int(rng.integers(0, 256)))
        x = rng.integers(0, 256, x_shape).astype(np.uint8)
        w_info = OperandInfo(T.TENSOR_QUANT8_ASYMM, w_shape, 0.25, int(rng.integers(0, 256)))
        w = rng.integers(0, 256, w_shape).astype(np.uint8)
        bias_scale = 0.5 * 0.25
    else:
        x_info = OperandInfo(
            T.TENSOR_QUANT8_ASYMM_SIGNED, x_shape, 0.5, int(rng.integers(-128, 128))
        )
        x = rng.integers(-128, 128, x_shape).astype(np.int8)
        scales = tuple(float(s) for s in rng.uniform(0.05, 0.5, depth_out))
        w_info = OperandInfo(
            T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
            w_shape,
            channel_quant=ChannelQuant(channel_dim, scales),
        )
        w = rng.integers(-127, 128, w_shape).astype(np.int8)
        bias_scale = 0.0
    b = rng.integers(-5000, 5000, depth_out).astype(np.int32)
    return (x_info, x, w_info, w), (OperandInfo(T.TENSOR_INT32, (depth_out,), bias_scale), b)


def output_info(kind, inp: OperandInfo, shape, scale: float) -> OperandInfo:
    if inp.code in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        return OperandInfo(inp.code, shape)
    return OperandInfo(inp.code, shape, scale, 3 if kind == "uint8" else -7)


def multipliers(w_info, x_info, out, float32_product: bool) -> list[tuple[int, int]]:
    scales = w_info.channel_quant.scales if w_info.channel_quant else (w_info.scale,)
    if float32_product:
        return [fixed_point.conv_multiplier(x_info.scale, s, out.scale) for s in scales]
    return [fixed_point.quantize_multiplier(x_info.scale * s / out.scale) for s in scales]


def check(got, acc, kind, pairs, out, fuse):
    if kind in ("float32", "float16"):
        want = ref_float_output(acc, fuse)
        tol = 1e-5 if kind == "float32" else 2e-3
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * (1 + np.abs(want).max()))
    else:
        np.testing.assert_array_equal(got, ref_quantized_output(acc, pairs, out, fuse))


def offset(value, info: OperandInfo):
    """Real-valued (float) or zero-point-free integer (quantized) operand values."""
    if value.dtype.kind == "f":
        return value.astype(np.float64)
    return value.astype(np.int64) - (0 if info.channel_quant else info.zero_point)


def pads_for(rng, scheme, size, stride, kernel, dilation=(1, 1)):
    """(padding inputs, (top, bottom, left, right)) for 'same', 'valid' or 'explicit'."""
    if scheme == "explicit":
        pads = tuple(int(p) for p in rng.integers(0, 3, 4))
        return [scalar(p) for p in (pads[2], pads[3], pads[0], pads[1])], pads
    if scheme == "valid":
        return [scalar(PaddingCode.VALID)], (0, 0, 0, 0)
    top, bottom = same_padding(size[0], stride[0], (kernel[0] - 1) * dilation[0] + 1)
    left, right = same_padding(size[1], stride[1], (kernel[1] - 1) * dilation[1] + 1)
    return [scalar(PaddingCode.SAME)], (top, bottom, left, right)


def to_layout(x, nchw):
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x


def layout_info(info: OperandInfo, nchw: bool) -> OperandInfo:
    d = info.dimensions
    dims = (d[0], d[3], d[1], d[2]) if nchw else d
    return OperandInfo(info.code, dims, info.scale, info.zero_point, info.channel_quant)


# --------------------------------------------------------------- conv kernels

GRID = list(itertools.product(KINDS, ("same", "valid", "explicit"), (False, True)))


@pytest.mark.parametrize(("kind", "scheme", "nchw"), GRID)
@pytest.mark.parametrize("code", [Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.GROUPED_CONV_2D])
def test_conv_kernels_match_loops(code, kind, scheme, nchw):
    rng = np.random.default_rng([int(code), KINDS.index(kind), len(scheme), nchw])
    n, h, w, kh, kw = 2, int(rng.integers(5, 8)), int(rng.integers(4, 8)), 3, 2
    stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    dilation = (int(rng.integers(1, 3)), 1) if code != Op.GROUPED_CONV_2D else (1, 1)
    fuse = int(rng.integers(0, 4))
    if code == Op.DEPTHWISE_CONV_2D:
        c, mult = 3, int(rng.integers(1, 3))
        groups, depth_out = c, c * mult
        w_shape, channel_dim = (1, kh, kw, depth_out), 3
    else:
        groups = 1 if code == Op.CONV_2D else int(rng.integers(2, 4))
        c, depth_out = 2 * groups, 3 * groups
        w_shape, channel_dim = (depth_out, kh, kw, c // groups), 0
    (x_info, x, w_info, wv), (b_info, b) = tensors(
        rng, kind, (n, h, w, c), w_shape, channel_dim, depth_out
    )
    padding, pads = pads_for(rng, scheme, (h, w), stride, (kh, kw), dilation)
    filt = offset(wv, w_info)
    if code == Op.DEPTHWISE_CONV_2D:
        filt = filt[0].transpose(2, 0, 1)[..., None]  # -> grouped form [C*M, KH, KW, 1]
    acc = ref_conv(offset(x, x_info), filt, stride, dilation, pads, groups) + offset(b, b_info)
    out = output_info(kind, x_info, acc.shape, 0.5 * 0.25 * 8)
    pairs = (
        multipliers(w_info, x_info, out, code == Op.GROUPED_CONV_2D)
        if kind not in ("float32", "float16")
        else []
    )

    scalars = [*padding, scalar(stride[1]), scalar(stride[0])]
    if code == Op.DEPTHWISE_CONV_2D:
        scalars.append(scalar(mult))
    if code == Op.GROUPED_CONV_2D:
        scalars.append(scalar(groups))
    scalars += [scalar(fuse), flag(nchw)]
    if dilation != (1, 1):
        scalars += [scalar(dilation[1]), scalar(dilation[0])]
    ins = [layout_info(x_info, nchw), (w_info, wv), (b_info, b), *scalars]
    out_info = layout_info(out, nchw)
    (got,) = run(code, ins, [out_info], to_layout(x, nchw))
    if nchw:
        got = got.transpose(0, 2, 3, 1)
    check(got, acc, kind, pairs, out, fuse)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("h", "w", "c", "depth_out"),
    [
        (32, 32, 24, 28),  # many pixels, few channels: the C loop
        (8, 8, 24, 28),  # few pixels: BLAS
        (32, 32, 72, 16),  # many input channels: BLAS
    ],
)
def test_pointwise_conv_matches_loops_on_both_sides_of_the_blas_threshold(kind, h, w, c, depth_out):
    rng = np.random.default_rng([KINDS.index(kind), h, c])
    (x_info, x, w_info, wv), (b_info, b) = tensors(
        rng, kind, (1, h, w, c), (depth_out, 1, 1, c), 0, depth_out
    )
    fuse = FuseCode.RELU6
    acc = ref_conv(offset(x, x_info), offset(wv, w_info), (1, 1), (1, 1), (0, 0, 0, 0), 1)
    acc = acc + offset(b, b_info)
    out = output_info(kind, x_info, acc.shape, 0.5 * 0.25 * 8)
    pairs = multipliers(w_info, x_info, out, False) if kind not in ("float32", "float16") else []
    scalars = [scalar(PaddingCode.VALID), scalar(1), scalar(1), scalar(fuse), flag(False)]
    (got,) = run(Op.CONV_2D, [x_info, (w_info, wv), (b_info, b), *scalars], [out], x)
    check(got, acc, kind, pairs, out, fuse)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("nchw", [False, True])
def test_transpose_conv_matches_loops(kind, nchw):
    rng = np.random.default_rng([KINDS.index(kind), nchw, 7])
    n, h, w, c, depth_out, kh, kw = 2, 3, 4, 3, 4, 3, 2
    stride = (int(rng.integers(1, 4)), int(rng.integers(1, 3)))
    pads = (1, 0, 0, 1)
    fuse = int(rng.integers(0, 4))
    (x_info, x, w_info, wv), (b_info, b) = tensors(
        rng, kind, (n, h, w, c), (depth_out, kh, kw, c), 0, depth_out
    )
    acc = ref_transpose_conv(offset(x, x_info), offset(wv, w_info), stride, pads)
    acc = acc + offset(b, b_info)
    out = output_info(kind, x_info, acc.shape, 0.5 * 0.25 * 8)
    pairs = multipliers(w_info, x_info, out, True) if kind[0] in "ui" else []
    pad_inputs = [scalar(pads[2]), scalar(pads[3]), scalar(pads[0]), scalar(pads[1])]
    ins = [
        layout_info(x_info, nchw),
        (w_info, wv),
        (b_info, b),
        *pad_inputs,
        scalar(stride[1]),
        scalar(stride[0]),
        scalar(fuse),
        flag(nchw),
    ]
    (got,) = run(Op.TRANSPOSE_CONV_2D, ins, [layout_info(out, nchw)], to_layout(x, nchw))
    if nchw:
        got = got.transpose(0, 2, 3, 1)
    check(got, acc, kind, pairs, out, fuse)


def test_conv_with_runtime_filter_and_scalars_matches_loops():
    """Filter, bias and parameters as model inputs: nothing is prepared, all resolved per run."""
    rng = np.random.default_rng(11)
    (x_info, x, w_info, wv), (b_info, b) = tensors(rng, "uint8", (1, 5, 6, 4), (3, 3, 3, 4), 0, 3)
    acc = ref_conv(offset(x, x_info), offset(wv, w_info), (2, 1), (1, 1), (1, 1, 1, 1), 1)
    acc = acc + b
    out = output_info("uint8", x_info, (1, 0, 0, 3), 1.0)
    scalar_info = OperandInfo(T.INT32, ())
    ins = [
        OperandInfo(x_info.code, (1, 0, 0, 4), x_info.scale, x_info.zero_point),
        w_info,
        b_info,
        *[scalar_info] * 7,
    ]
    feed = [np.int32(v) for v in (1, 1, 1, 1, 1, 2, FuseCode.RELU)]
    (got,) = run(Op.CONV_2D, ins, [out], x, wv, b, *feed)
    check(got, acc, "uint8", multipliers(w_info, x_info, out, False), out, FuseCode.RELU)


def test_quantized_conv_too_large_for_float32_stays_exact():
    """Sums beyond 2**24 must not be rounded: 288 extreme terms, biased onto a rounding tie.

    The sum is odd, so float32 would be off by one either way.  With the
    multiplier 2**-17 (halve with rounding, then a rounding shift by 16) the
    result steps up between ``half_way - 2`` and ``half_way - 1``; channel 0
    ends on the first, channel 1 on the second, so either error moves one of
    them across.
    """
    x_info = OperandInfo(T.TENSOR_QUANT8_ASYMM, (1, 3, 3, 32), 1.0, 0)
    w_info = OperandInfo(T.TENSOR_QUANT8_ASYMM, (2, 3, 3, 32), 1.0, 0)
    x = np.full((1, 3, 3, 32), 255, np.uint8)
    x[0, 1, 1, 0] = 254
    wv = np.full((2, 3, 3, 32), 255, np.uint8)
    total = 288 * 255 * 255 - 255
    half_way = (total >> 17 << 17) + (1 << 16)
    b_info = OperandInfo(T.TENSOR_INT32, (2,), 1.0)
    b = np.array([half_way - 2 - total, half_way - 1 - total], np.int32)
    out = OperandInfo(T.TENSOR_QUANT8_ASYMM, (1, 1, 1, 2), 2.0**17, 0)
    ins = [x_info, (w_info, wv), (b_info, b), *[scalar(v) for v in (PaddingCode.VALID, 1, 1, 0)]]
    (got,) = run(Op.CONV_2D, ins, [out], x)
    acc = ref_conv(x.astype(np.int64), wv.astype(np.int64), (1, 1), (1, 1), (0,) * 4, 1) + b
    assert acc[0, 0, 0, 0] > 2**24
    check(got, acc, "uint8", multipliers(w_info, x_info, out, False), out, 0)
    assert got.reshape(-1).tolist() == [total >> 17, (total >> 17) + 1]


# --------------------------------------------------------------- pools and fully connected


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (Op.MAX_POOL_2D, "float32"),
        (Op.MAX_POOL_2D, "uint8"),
        (Op.MAX_POOL_2D, "int8"),
        (Op.AVERAGE_POOL_2D, "float32"),
        (Op.AVERAGE_POOL_2D, "float16"),
        (Op.AVERAGE_POOL_2D, "uint8"),
        (Op.AVERAGE_POOL_2D, "int8"),
        (Op.L2_POOL_2D, "float32"),
    ],
)
@pytest.mark.parametrize("scheme", ["same", "valid", "explicit"])
@pytest.mark.parametrize("nchw", [False, True])
def test_pools_match_loops(code, kind, scheme, nchw):
    rng = np.random.default_rng([int(code), len(kind), len(scheme), nchw])
    shape = (2, int(rng.integers(4, 9)), int(rng.integers(4, 9)), 3)
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    fuse = int(rng.integers(0, 4))
    if kind in ("float32", "float16"):
        dtype = np.float32 if kind == "float32" else np.float16
        x = (rng.standard_normal(shape) * 3).astype(dtype)
        code_t = T.TENSOR_FLOAT32 if kind == "float32" else T.TENSOR_FLOAT16
        info = OperandInfo(code_t, shape)
    else:
        code_t = T.TENSOR_QUANT8_ASYMM if kind == "uint8" else T.TENSOR_QUANT8_ASYMM_SIGNED
        info = OperandInfo(code_t, shape, 0.25, 5)
        limits = np.iinfo(info.dtype)
        x = rng.integers(limits.min, int(limits.max) + 1, shape).astype(info.dtype)
    padding, pads = pads_for(rng, scheme, shape[1:3], stride, (kh, kw))
    if scheme == "explicit":  # a window wholly in the padding is an error, not a case
        pads = tuple(min(p, k - 1) for p, k in zip(pads, (kh, kh, kw, kw)))
        padding = [scalar(p) for p in (pads[2], pads[3], pads[0], pads[1])]
    kind_name = {Op.MAX_POOL_2D: "max", Op.AVERAGE_POOL_2D: "avg", Op.L2_POOL_2D: "l2"}[code]
    want = ref_pool(x, kind_name, kh, kw, stride, pads)
    scalars = [*padding, scalar(stride[1]), scalar(stride[0]), scalar(kw), scalar(kh)]
    out = OperandInfo(code_t, want.shape, info.scale, info.zero_point)
    ins = [layout_info(info, nchw), *scalars, scalar(fuse), flag(nchw)]
    (got,) = run(code, ins, [layout_info(out, nchw)], to_layout(x, nchw))
    if nchw:
        got = got.transpose(0, 2, 3, 1)
    if x.dtype.kind == "f":
        tol = 1e-6 if kind == "float32" else 2e-3
        want = ref_float_output(want, fuse)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * (1 + np.abs(want).max()))
    else:
        lo, hi = fused_activation.fused_activation_bounds(fuse, out)
        np.testing.assert_array_equal(got, np.clip(want, lo, hi).astype(x.dtype))


@pytest.mark.parametrize("kind", ["float32", "float16", "uint8", "int8"])
@pytest.mark.parametrize("weights_constant", [True, False])
def test_fully_connected_matches_loops(kind, weights_constant):
    rng = np.random.default_rng([len(kind), weights_constant])
    batch, size, units = 3, 10, 4
    fuse = int(rng.integers(0, 4))
    if kind in ("float32", "float16"):
        (x_info, x, w_info, wv), (b_info, b) = tensors(
            rng, kind, (batch, 2, size // 2), (units, size), 0, units
        )
        w_info = OperandInfo(w_info.code, (units, size))
    else:
        code_t = T.TENSOR_QUANT8_ASYMM if kind == "uint8" else T.TENSOR_QUANT8_ASYMM_SIGNED
        x_info = OperandInfo(code_t, (batch, 2, size // 2), 0.5, 9)
        w_info = OperandInfo(code_t, (units, size), 0.25, -3 if kind == "int8" else 130)
        limits = np.iinfo(x_info.dtype)
        x = rng.integers(limits.min, int(limits.max) + 1, x_info.dimensions).astype(x_info.dtype)
        wv = rng.integers(limits.min, int(limits.max) + 1, (units, size)).astype(x_info.dtype)
        b_info = OperandInfo(T.TENSOR_INT32, (units,), 0.125)
        b = rng.integers(-5000, 5000, units).astype(np.int32)
    rows, weights = offset(x, x_info).reshape(batch, size), offset(wv, w_info)
    acc = np.array(
        [
            [sum(rows[i, k] * weights[u, k] for k in range(size)) for u in range(units)]
            for i in range(batch)
        ]
    ) + offset(b, b_info)
    out = output_info(kind, x_info, (batch, units), 0.5 * 0.25 * 16)
    pairs = multipliers(w_info, x_info, out, False) if kind[0] in "ui" else []
    w_in: Any = (w_info, wv) if weights_constant else w_info
    feed = [x] if weights_constant else [x, wv]
    (got,) = run(Op.FULLY_CONNECTED, [x_info, w_in, (b_info, b), scalar(fuse)], [out], *feed)
    check(got, acc, kind, pairs, out, fuse)


def test_per_channel_multiply_matches_the_integer_reference():
    """One (multiplier, shift) per channel, broadcast along the last axis."""
    rng = np.random.default_rng(5)
    acc = np.concatenate(
        [rng.integers(-(2**33), 2**33, (50, 6)), np.array([[2**31 - 1, -(2**31)] * 3] * 2)]
    )
    pairs = [fixed_point.quantize_multiplier(r) for r in (0.3, 1.7, 3e-5, 0.999, 12.5, 2.0**-31)]
    mult = np.array([m for m, _ in pairs])
    shift = np.array([s for _, s in pairs])
    got = fixed_point.multiply_by_quantized_multiplier(acc, mult, shift)
    want = [[ref_requantize(int(v), m, s) for v, (m, s) in zip(row, pairs)] for row in acc]
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------- the C depthwise kernel


@pytest.mark.parametrize("path", [1, 2, 3], ids=["portable", "avx2", "avx512"])
@pytest.mark.parametrize("channels", [1, 16, 19, 40])
@pytest.mark.parametrize(
    ("stride", "dilation", "pads"),
    [
        ((1, 1), (1, 1), (0, 0, 0, 0)),
        ((2, 1), (1, 2), (1, 0, 2, 1)),
        ((1, 3), (2, 1), (0, 2, 1, 0)),
        ((2, 2), (1, 1), (1, 1, 1, 1)),
        ((1, 1), (1, 1), (3, 3, 4, 4)),  # windows wholly in the padding: the bias alone
    ],
)
def test_c_depthwise_kernel_matches_loops(path, channels, stride, dilation, pads):
    """Channel counts under a tile, one tile, a tail, tiles and a tail; rows
    of 8-pixel blocks inside the input, an overlapped last block, short
    rows, and the pixels whose windows reach into the padding (which C
    reads as zeros, without a padded copy); every built path."""
    rng = np.random.default_rng([channels, *stride, *dilation, *pads])
    n, h, w, kh, kw = 2, 9, 11, 3, 2
    x = rng.standard_normal((n, h, w, channels)).astype(np.float32)
    filt = rng.standard_normal((kh, kw, channels)).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32)
    pt, pb, pl, pr = pads
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    out_h = (h + pt + pb - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    out_w = (w + pl + pr - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    win = Window2D(*pads, *stride, *dilation, out_h, out_w)
    want = np.zeros((n, out_h, out_w, channels), np.float64) + bias
    for y, xx, i, j in itertools.product(range(out_h), range(out_w), range(kh), range(kw)):
        pixel = xp[:, y * stride[0] + i * dilation[0], xx * stride[1] + j * dilation[1]]
        want[:, y, xx] += pixel * filt[i, j]
    weights = _c_layout(filt, np.float32)
    try:
        got = depthwise_conv_f32(x, weights, bias, win, -1.5, 2.5, path)
    except ValueError as exc:
        if "not supported" in str(exc):
            pytest.skip(f"depthwise path {path}: {exc}")
        raise
    np.testing.assert_allclose(got, np.clip(want, -1.5, 2.5), rtol=1e-5, atol=1e-5)


def test_c_depthwise_kernel_refuses_what_does_not_fit():
    x = np.zeros((1, 4, 4, 8), np.float32)
    weights = np.zeros((3, 3, 16), np.float32)
    bias = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match="does not fit the input"):  # rows 0..4 of 4
        depthwise_conv_f32(x, weights, bias, Window2D(0, 0, 0, 0, 1, 1, 1, 1, 3, 2))
    with pytest.raises(ValueError, match="does not fit the input"):  # rows -1..4 of 4, pad 1
        depthwise_conv_f32(x, weights, bias, Window2D(1, 0, 1, 0, 1, 1, 1, 1, 4, 3))
    with pytest.raises(ValueError, match="do not fit 8 channels"):  # not rounded up to 16
        depthwise_conv_f32(
            x, np.zeros((3, 3, 8), np.float32), bias, Window2D(0, 0, 0, 0, 1, 1, 1, 1, 2, 2)
        )
    with pytest.raises(ValueError, match="not built or not supported"):
        depthwise_conv_f32(x, weights, bias, Window2D(0, 0, 0, 0, 1, 1, 1, 1, 2, 2), path=99)


# ---------------------------------------------------------- the C conv kernel

C_CONV_PATHS = {
    "portable": _bindings.CONV_PORTABLE,
    "avx2": _bindings.CONV_AVX2,
    "avx512": _bindings.CONV_AVX512,
}


def c_conv(x, w, bias, win, lo=-np.inf, hi=np.inf, path=0):
    """``conv_f32`` on an NNAPI-layout filter [O, KH, KW, C]; skips a path this CPU has not got."""
    o, kh, kw, c = w.shape
    weights = _c_layout(w.transpose(1, 2, 3, 0).reshape(-1, o), np.float32)
    try:
        return conv_f32(x, weights, (kh, kw), bias, win, lo, hi, path)
    except ValueError as exc:
        if "not supported" in str(exc):
            pytest.skip(f"conv path {path}: {exc}")
        raise


@pytest.mark.parametrize("path", C_CONV_PATHS.values(), ids=C_CONV_PATHS.keys())
@pytest.mark.parametrize(
    ("n", "h", "wd", "c", "o", "k", "stride", "dilation"),
    [
        (1, 10, 12, 16, 32, (3, 3), (1, 1), (1, 1)),  # whole tile pairs, rows of 8 + overlap
        (2, 9, 11, 5, 21, (3, 2), (2, 1), (1, 1)),  # a tile pair's tail, odd strides
        (1, 12, 13, 7, 40, (3, 3), (1, 2), (2, 1)),  # an odd last tile, dilation
        (1, 5, 5, 3, 1, (1, 1), (1, 1), (1, 1)),  # 1x1: one long row, one channel
        (3, 6, 7, 24, 48, (1, 1), (1, 1), (1, 1)),  # 1x1 over three images
        (1, 3, 20, 4, 17, (2, 5), (1, 3), (1, 1)),  # rows shorter than a block: 4 then 1
        (1, 7, 7, 33, 16, (5, 5), (3, 3), (1, 1)),  # one tile, rows of 1
    ],
)
@pytest.mark.parametrize("pads", [(0, 0, 0, 0), (1, 2, 3, 1)], ids=["valid", "padded"])
def test_c_conv_kernel_matches_loops(path, n, h, wd, c, o, k, stride, dilation, pads):
    """Tile pairs, odd tiles and partial tiles; full pixel blocks, overlapped
    last blocks and short rows; strides and dilations; implicit padding on
    each side; every built path."""
    rng = np.random.default_rng([n, h, wd, c, o, *k, *stride, *dilation, *pads])
    x = rng.standard_normal((n, h, wd, c)).astype(np.float32)
    w = rng.standard_normal((o, *k, c)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    want = ref_conv(x.astype(np.float64), w.astype(np.float64), stride, dilation, pads, 1)
    want += bias
    out_h, out_w = want.shape[1:3]
    got = c_conv(x, w, bias, Window2D(*pads, *stride, *dilation, out_h, out_w), path=path)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("path", C_CONV_PATHS.values(), ids=C_CONV_PATHS.keys())
def test_c_conv_kernel_clamps_and_keeps_nan(path):
    """The fused clamp in the store: below lo, above hi, in between, and NaN kept."""
    x = np.array([-3.0, -0.5, 0.25, 7.0, np.nan], np.float32).reshape(1, 1, 5, 1)
    w = np.ones((18, 1, 1, 1), np.float32)  # an 18-channel output: one partial second tile
    got = c_conv(
        x, w, np.zeros(18, np.float32), Window2D(0, 0, 0, 0, 1, 1, 1, 1, 1, 5), -1, 6, path
    )
    want = np.array([-1.0, -0.5, 0.25, 6.0, np.nan], np.float32)
    np.testing.assert_array_equal(got[0, 0], np.repeat(want[:, None], 18, axis=1))


def test_c_conv_kernel_refuses_what_does_not_fit():
    x = np.zeros((1, 4, 4, 8), np.float32)
    weights = _c_layout(np.zeros((72, 8), np.float32), np.float32)
    bias = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match="does not fit the input"):  # rows 0..4 of 4
        conv_f32(x, weights, (3, 3), bias, Window2D(0, 0, 0, 0, 1, 1, 1, 1, 3, 2))
    with pytest.raises(ValueError, match="do not fit 8 -> 8"):  # a 2x2 filter's rows
        conv_f32(x, weights, (2, 2), bias, Window2D(0, 0, 0, 0, 1, 1, 1, 1, 2, 2))
    with pytest.raises(ValueError, match="do not fit 8 -> 24"):  # more channels than columns
        conv_f32(
            x, weights, (3, 3), np.zeros(24, np.float32), Window2D(0, 0, 0, 0, 1, 1, 1, 1, 2, 2)
        )
    with pytest.raises(ValueError, match="does not fit the input"):  # rows -1..4 of 4, pad 1
        conv_f32(x, weights, (3, 3), bias, Window2D(1, 0, 1, 0, 1, 1, 1, 1, 4, 3))
    with pytest.raises(ValueError, match="does not fit the input"):  # a negative pad
        conv_f32(x, weights, (3, 3), bias, Window2D(-1, 1, 0, 0, 1, 1, 1, 1, 2, 2))
    with pytest.raises(ValueError, match="not built or not supported"):
        conv_f32(x, weights, (3, 3), bias, Window2D(0, 0, 0, 0, 1, 1, 1, 1, 2, 2), path=99)


def test_a_prepared_c_loop_refuses_an_input_of_another_shape_or_dtype():
    weights = _c_layout(np.zeros((72, 8), np.float32), np.float32)
    loop = ConvLoop(
        False,
        (1, 4, 4, 8),
        weights,
        (3, 3),
        np.zeros(8, np.float32),
        Window2D(*[0] * 4, *[1] * 4, 2, 2),
    )
    assert loop(np.ones((1, 4, 4, 8), np.float32)).shape == (1, 2, 2, 8)
    for x in (
        np.ones((1, 5, 4, 8), np.float32),  # C would read past its end
        np.ones((1, 4, 4, 8), np.float64),
        np.ones((1, 4, 8, 8), np.float32)[:, :, ::2],  # not contiguous
    ):
        with pytest.raises(ValueError, match=r"prepared for \(1, 4, 4, 8\) float32"):
            loop(x)


@pytest.mark.parametrize(
    ("code", "w_shape", "pads"),
    [
        (Op.CONV_2D, (8, 3, 3, 5), (1, 1, 1, 1)),  # C pads as it reads
        (Op.DEPTHWISE_CONV_2D, (1, 3, 3, 5), (1, 1, 1, 1)),  # a padded copy
        (Op.DEPTHWISE_CONV_2D, (1, 3, 3, 5), (0, 0, 0, 0)),  # the input itself
        (Op.CONV_2D, (8, 1, 1, 5), (0, 0, 0, 0)),  # 1x1 over 32x32 pixels: C
    ],
)
def test_a_float32_convolution_runs_a_kernel_bound_at_prepare_time(code, w_shape, pads):
    rng = np.random.default_rng(len(w_shape) + w_shape[1] + sum(pads))
    x = rng.standard_normal((1, 32, 32, 5), np.float32)
    w = rng.standard_normal(w_shape, np.float32)
    b = rng.standard_normal(w_shape[0] * w_shape[3] if code == Op.DEPTHWISE_CONV_2D else w_shape[0])
    b = b.astype(np.float32)
    depth_out = b.shape[0]
    oh = 32 + pads[0] + pads[1] - w_shape[1] + 1
    out = OperandInfo(T.TENSOR_FLOAT32, (1, oh, oh, depth_out))
    scalars = [scalar(p) for p in (pads[2], pads[3], pads[0], pads[1])] + [scalar(1), scalar(1)]
    if code == Op.DEPTHWISE_CONV_2D:
        scalars.append(scalar(1))
    scalars += [scalar(FuseCode.RELU), flag(False)]
    inputs = [
        OperandInfo(T.TENSOR_FLOAT32, x.shape),
        (OperandInfo(T.TENSOR_FLOAT32, w.shape), w),
        (OperandInfo(T.TENSOR_FLOAT32, b.shape), b),
        *scalars,
    ]
    prepared = PreparedModel(model(code, inputs, [out]))
    (operation,) = prepared.main.operations
    assert operation.kernel is not None
    (got,) = prepared.run([x])
    filt = w.astype(np.float64)
    if code == Op.DEPTHWISE_CONV_2D:
        filt = filt[0].transpose(2, 0, 1)[..., None]
    acc = ref_conv(
        x.astype(np.float64), filt, (1, 1), (1, 1), pads, 5 if code == Op.DEPTHWISE_CONV_2D else 1
    )
    check(got, acc + b, "float32", [], out, FuseCode.RELU)
    # An input the kernel was not prepared for (here: not contiguous) takes
    # the unbound path, to the same result.
    strided = np.repeat(x, 2, axis=2)[:, :, ::2]
    np.testing.assert_array_equal(operation.kernel([strided, w, b]), [got])


# ---------------------------------------------------------- the C pool kernel


@pytest.mark.parametrize("kind", [POOL_MAX, POOL_SUM], ids=["max", "sum"])
@pytest.mark.parametrize("channels", [3, 16, 37])
@pytest.mark.parametrize(
    ("k", "stride", "dilation"), [((2, 2), (2, 2), (1, 1)), ((3, 2), (1, 2), (2, 1))]
)
def test_c_pool_kernel_matches_loops(kind, channels, k, stride, dilation):
    """Channel counts with only the 16-wide tiles, only the tail, and both."""
    rng = np.random.default_rng([kind, channels, *k, *stride, *dilation])
    n, h, w = 2, 9, 8
    x = rng.standard_normal((n, h, w, channels)).astype(np.float32)
    out_h = (h - (k[0] - 1) * dilation[0] - 1) // stride[0] + 1
    out_w = (w - (k[1] - 1) * dilation[1] - 1) // stride[1] + 1
    taps = [
        x[:, i * dilation[0] :: stride[0], j * dilation[1] :: stride[1]][:, :out_h, :out_w]
        for i, j in itertools.product(range(k[0]), range(k[1]))
    ]
    want = np.max(taps, axis=0) if kind == POOL_MAX else np.sum(taps, axis=0, dtype=np.float64)
    got = pool_f32(x, k, Window2D(0, 0, 0, 0, *stride, *dilation, out_h, out_w), kind)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_c_max_pool_propagates_nan_as_numpy():
    """NaN first, last, or alone in a window; -inf padding loses to everything."""
    x = np.full((1, 2, 6, 17), -np.inf, np.float32)
    x[0, 0, 0], x[0, 1, 3], x[0, 1, 4] = np.nan, np.nan, 5.0
    got = pool_f32(x, (2, 2), Window2D(0, 0, 0, 0, 2, 2, 1, 1, 1, 3), POOL_MAX)
    want = np.maximum.reduce([x[:, 0, 0::2], x[:, 0, 1::2], x[:, 1, 0::2], x[:, 1, 1::2]]).reshape(
        got.shape
    )
    np.testing.assert_array_equal(got, want)
    assert (
        np.isnan(got[0, 0, 0]).all() and np.isnan(got[0, 0, 1]).all() and (got[0, 0, 2] == 5).all()
    )


def test_c_pool_kernel_refuses_what_does_not_fit():
    x = np.zeros((1, 4, 4, 8), np.float32)
    with pytest.raises(ValueError, match="does not fit the input"):  # rows 0..4 of 4
        pool_f32(x, (3, 3), Window2D(0, 0, 0, 0, 1, 1, 1, 1, 3, 2), POOL_MAX)
    with pytest.raises(ValueError, match="kind 7"):
        pool_f32(x, (2, 2), Window2D(0, 0, 0, 0, 1, 1, 1, 1, 2, 2), 7)


# --------------------------------------------- kernels bound at prepare time


def _bound_and_unbound(code, inputs, out, *feed):
    """The operation's bound kernel's result and ``execute``'s, on ``feed``."""
    prepared = PreparedModel(model(code, inputs, [out]))
    (operation,) = prepared.main.operations
    assert operation.kernel is not None, "no kernel was bound"
    values = [value for _, value in (i for i in inputs if isinstance(i, tuple))]
    arguments = [*feed, *values]
    context = ExecutionContext(operation.signature, arguments, operation.state)
    return operation.kernel(arguments), operation.registration.execute(context)


@pytest.mark.parametrize(
    ("code", "dtype", "pads"),
    [
        (Op.MAX_POOL_2D, np.float32, (0, 1, 0, 1)),
        (Op.MAX_POOL_2D, np.uint8, (0, 0, 0, 0)),
        (Op.AVERAGE_POOL_2D, np.float32, (1, 1, 1, 1)),
        (Op.AVERAGE_POOL_2D, np.uint8, (1, 1, 1, 1)),  # the counts shrink at the edges
        (Op.AVERAGE_POOL_2D, np.int8, (0, 1, 0, 1)),  # negative sums round away from zero
        (Op.L2_POOL_2D, np.float32, (0, 0, 0, 0)),
    ],
)
def test_a_pool_with_constant_parameters_runs_a_bound_kernel(code, dtype, pads):
    rng = np.random.default_rng([int(code), pads[0]])
    shape = (1, 9, 9, 6)
    if dtype == np.float32:
        info = OperandInfo(T.TENSOR_FLOAT32, shape)
        x = rng.standard_normal(shape).astype(np.float32)
    else:
        code_t = T.TENSOR_QUANT8_ASYMM if dtype == np.uint8 else T.TENSOR_QUANT8_ASYMM_SIGNED
        info = OperandInfo(code_t, shape, 0.5, 3)
        limits = np.iinfo(dtype)
        x = rng.integers(limits.min, int(limits.max) + 1, shape).astype(dtype)
    side = (9 + pads[0] + pads[1] - 3) // 2 + 1
    out = OperandInfo(info.code, (1, side, side, 6), info.scale, info.zero_point)
    padding = [scalar(p) for p in (pads[2], pads[3], pads[0], pads[1])]
    fuse = FuseCode.RELU6 if dtype == np.float32 else FuseCode.RELU
    ins = [info, *padding, scalar(2), scalar(2), scalar(3), scalar(3), scalar(fuse), flag(False)]
    bound, unbound = _bound_and_unbound(code, ins, out, x)
    np.testing.assert_array_equal(bound, unbound)
    # Another shape than the one prepared takes the unbound path.
    bound, unbound = _bound_and_unbound(code, ins, out, x[:, :5, :5])
    assert bound[0].shape == (1, (pads[0] + pads[1]) // 2 + 2, (pads[2] + pads[3]) // 2 + 2, 6)
    np.testing.assert_array_equal(bound, unbound)


def test_a_pointwise_conv_blas_runs_best_runs_a_bound_kernel():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 8, 8, 96), np.float32)  # few pixels: BLAS
    w = rng.standard_normal((40, 1, 1, 96), np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    ins = [
        OperandInfo(T.TENSOR_FLOAT32, x.shape),
        (OperandInfo(T.TENSOR_FLOAT32, w.shape), w),
        (OperandInfo(T.TENSOR_FLOAT32, b.shape), b),
        *(scalar(v) for v in (PaddingCode.VALID, 1, 1, FuseCode.RELU)),
    ]
    out = OperandInfo(T.TENSOR_FLOAT32, (1, 8, 8, 40))
    bound, unbound = _bound_and_unbound(Op.CONV_2D, ins, out, x)
    np.testing.assert_array_equal(bound, unbound)
    want = np.maximum(x.astype(np.float64).reshape(64, 96) @ w.reshape(40, 96).T + b, 0)
    np.testing.assert_allclose(bound[0].reshape(64, 40), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int8])
def test_a_fully_connected_layer_with_constant_weights_runs_a_bound_kernel(dtype):
    rng = np.random.default_rng(np.dtype(dtype).num)
    if dtype == np.float32:
        info = OperandInfo(T.TENSOR_FLOAT32, (3, 10))
        w_info, b_info = OperandInfo(T.TENSOR_FLOAT32, (4, 10)), OperandInfo(T.TENSOR_FLOAT32, (4,))
        x = rng.standard_normal((3, 10)).astype(np.float32)
        w, b = rng.standard_normal((4, 10)).astype(np.float32), np.ones(4, np.float32)
        out = OperandInfo(T.TENSOR_FLOAT32, (3, 4))
    else:
        code = T.TENSOR_QUANT8_ASYMM if dtype == np.uint8 else T.TENSOR_QUANT8_ASYMM_SIGNED
        info = OperandInfo(code, (3, 10), 0.5, 3)
        w_info, b_info = (
            OperandInfo(code, (4, 10), 0.25, 1),
            OperandInfo(T.TENSOR_INT32, (4,), 0.125),
        )
        limits = np.iinfo(dtype)
        x = rng.integers(limits.min, int(limits.max) + 1, (3, 10)).astype(dtype)
        w = rng.integers(limits.min, int(limits.max) + 1, (4, 10)).astype(dtype)
        b = rng.integers(-500, 500, 4).astype(np.int32)
        out = OperandInfo(code, (3, 4), 4.0, 2)
    ins = [info, (w_info, w), (b_info, b), scalar(FuseCode.RELU)]
    bound, unbound = _bound_and_unbound(Op.FULLY_CONNECTED, ins, out, x)
    if dtype == np.float32:  # the packed kernel and BLAS sum in other orders
        np.testing.assert_allclose(bound, unbound, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(bound, unbound)
