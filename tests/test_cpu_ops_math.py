"""CPU driver: elementwise and reduction math: comparisons, logical ops, SELECT,
unary math, CAST, QUANTIZE, ELU, HARD_SWISH, ARGMAX/ARGMIN, REDUCE_*,
MAXIMUM/MINIMUM/POW/PRELU, LOG_SOFTMAX and INSTANCE_NORMALIZATION.

No public conformance vectors exist for these, so every case is checked
against an independent computation: plain numpy in float64, or a scalar
Python loop over the NNAPI formula, written without the driver's helpers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.operands import OperandInfo

from .op_models import rejects
from .op_tensors import (
    B8,
    F16,
    F32,
    I32,
    QS8,
    QU8,
    boolean,
    f16s,
    f32s,
    i32,
    ivec,
    op_fails,
    quant,
    rand,
    real,
    run1,
    seq_reduce,
    t,
)

# --------------------------------------------------------------------------- comparisons

COMPARE = {
    Op.EQUAL: np.equal,
    Op.NOT_EQUAL: np.not_equal,
    Op.GREATER: np.greater,
    Op.GREATER_EQUAL: np.greater_equal,
    Op.LESS: np.less,
    Op.LESS_EQUAL: np.less_equal,
}


@pytest.mark.parametrize("op", list(COMPARE))
@pytest.mark.parametrize("code", [F32, F16, I32, B8])
def test_comparisons_broadcast(op: Op, code: T) -> None:
    a = rand(code, 2, 3, 4)
    b = rand(code, 3, 1)
    b[0, 0] = a[0, 0, 0]  # make equality happen at least once
    got = run1(op, [t(code, 2, 3, 4), t(code, 3, 1)], t(B8, 2, 3, 4), a, b)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, COMPARE[op](a, b))


@pytest.mark.parametrize("op", list(COMPARE))
@pytest.mark.parametrize("code", [QU8, QS8])
def test_comparisons_quantized_compare_real_values(op: Op, code: T) -> None:
    # Different scales and zero points per input: only real values are comparable.
    ia = t(code, 3, 4, scale=0.25, zp=3)
    ib = t(code, 4, scale=0.5, zp=-2 if code == QS8 else 10)
    a, b = rand(code, 3, 4), rand(code, 4)
    limits = np.iinfo(a.dtype)
    same = (b.astype(np.int64) - ib.zero_point) * 2 + ia.zero_point  # equal real values
    a[0] = np.clip(same, limits.min, limits.max)
    got = run1(op, [ia, ib], t(B8, 3, 4), a, b)
    np.testing.assert_array_equal(got, COMPARE[op](real(a, ia), real(b, ib)))


def test_comparison_validation() -> None:
    rejects(Op.LESS, [t(F32, 2), t(I32, 2)], [t(B8, 2)], "input 1")
    rejects(Op.LESS, [t(F32, 2), t(F32, 2)], [t(F32, 2)], "output 0")
    rejects(Op.EQUAL, [t(F32, 2, 3), t(F32, 4)], [t(B8, 2, 3)], "broadcast")
    rejects(Op.GREATER, [t(F32, 2)], [t(B8, 2)], "inputs")
    rejects(
        Op.GREATER,
        [t(T.TENSOR_QUANT16_ASYMM, 2), t(T.TENSOR_QUANT16_ASYMM, 2)],
        [t(B8, 2)],
        "input 0",
    )


def test_logical_ops() -> None:
    a, b = rand(B8, 2, 3), rand(B8, 3)
    np.testing.assert_array_equal(
        run1(Op.LOGICAL_AND, [t(B8, 2, 3), t(B8, 3)], t(B8, 2, 3), a, b), a & b
    )
    np.testing.assert_array_equal(
        run1(Op.LOGICAL_OR, [t(B8, 2, 3), t(B8, 3)], t(B8, 2, 3), a, b), a | b
    )
    np.testing.assert_array_equal(run1(Op.LOGICAL_NOT, [t(B8, 2, 3)], t(B8, 2, 3), a), ~a)
    rejects(Op.LOGICAL_AND, [t(F32, 2), t(F32, 2)], [t(B8, 2)], "input 0")
    rejects(Op.LOGICAL_NOT, [t(B8, 2)], [t(F32, 2)], "output 0")


# --------------------------------------------------------------------------- SELECT


@pytest.mark.parametrize("code", [F32, F16, I32])
def test_select(code: T) -> None:
    c, a, b = rand(B8, 2, 3), rand(code, 2, 3), rand(code, 2, 3)
    got = run1(Op.SELECT, [t(B8, 2, 3), t(code, 2, 3), t(code, 2, 3)], t(code, 2, 3), c, a, b)
    np.testing.assert_array_equal(
        got, [[x if k else y for k, x, y in zip(*r)] for r in zip(c, a, b)]
    )


@pytest.mark.parametrize("code", [QU8, QS8])
def test_select_quantized_requantizes_to_output(code: T) -> None:
    ia, ib = t(code, 2, 5, scale=0.5, zp=1), t(code, 2, 5, scale=0.125, zp=-3)
    out = t(code, 2, 5, scale=0.25, zp=4)
    c, a, b = rand(B8, 2, 5), rand(code, 2, 5), rand(code, 2, 5)
    got = run1(Op.SELECT, [t(B8, 2, 5), ia, ib], out, c, a, b)
    want = np.where(c, quant(real(a, ia), out), quant(real(b, ib), out))
    np.testing.assert_array_equal(got, want)


def test_select_shapes() -> None:
    rejects(Op.SELECT, [t(B8, 2, 3), t(F32, 2, 3), t(F32, 3)], [t(F32, 2, 3)], "shape")
    rejects(Op.SELECT, [t(F32, 2), t(F32, 2), t(F32, 2)], [t(F32, 2)], "input 0")
    op_fails(
        Op.SELECT,
        [t(B8, 0), t(F32, 0), t(F32, 0)],
        [t(F32, 0)],
        rand(B8, 2),
        rand(F32, 3),
        rand(F32, 3),
    )


# --------------------------------------------------------------------------- unary math

MATH64 = {
    Op.EXP: np.exp,
    Op.LOG: np.log,
    Op.SIN: np.sin,
    Op.SQRT: np.sqrt,
    Op.RSQRT: lambda x: 1 / np.sqrt(x),
    Op.ABS: np.abs,
    Op.NEG: np.negative,
}


@pytest.mark.parametrize("op", list(MATH64))
@pytest.mark.parametrize("code", [F32, F16])
def test_float_unary(op: Op, code: T) -> None:
    lo = 0.1 if op in (Op.LOG, Op.SQRT, Op.RSQRT) else -3
    x = rand(code, 3, 4, lo=lo, hi=3)
    got = run1(op, [t(code, 3, 4)], t(code, 3, 4), x)
    assert got.dtype == x.dtype
    want = MATH64[op](x.astype(np.float64))
    if code == F32:
        np.testing.assert_allclose(got, want, rtol=3e-7, atol=1e-7)
    else:  # computed in float32 and rounded to half: within half an ulp of half
        np.testing.assert_array_equal(got, want.astype(np.float16))


def test_int_abs_neg_wrap() -> None:
    x = np.array([-5, 0, 7, -(2**31), 2**31 - 1], dtype=np.int32)
    np.testing.assert_array_equal(
        run1(Op.ABS, [t(I32, 5)], t(I32, 5), x), [5, 0, 7, -(2**31), 2**31 - 1]
    )
    np.testing.assert_array_equal(
        run1(Op.NEG, [t(I32, 5)], t(I32, 5), x), [5, 0, -7, -(2**31), -(2**31) + 1]
    )


def test_unary_validation() -> None:
    rejects(Op.EXP, [t(I32, 2)], [t(I32, 2)], "input 0")
    rejects(Op.ABS, [t(F32, 2)], [t(F16, 2)], "output 0")
    rejects(Op.SQRT, [t(F32, 2)], [t(F32, 3)], "dimensions")
    rejects(Op.SIN, [t(F32, 2), t(F32, 2)], [t(F32, 2)], "inputs")


# --------------------------------------------------------------------------- CAST


def test_cast_float_to_int_truncates_and_saturates() -> None:
    x = np.array([-2.7, -0.5, 0.5, 2.7, 300.9, 3e9, np.nan], dtype=np.float32)
    np.testing.assert_array_equal(
        run1(Op.CAST, [t(F32, 7)], t(I32, 7), x), [-2, 0, 0, 2, 300, 2**31 - 1, 0]
    )
    np.testing.assert_array_equal(
        run1(Op.CAST, [t(F32, 7)], t(QU8, 7, scale=3.0), x), [0, 0, 0, 2, 255, 255, 0]
    )


def test_cast_other_pairs() -> None:
    x = np.array([-70000, -3, 0, 100, 1000], dtype=np.int32)
    np.testing.assert_array_equal(run1(Op.CAST, [t(I32, 5)], t(QU8, 5), x), [0, 0, 0, 100, 255])
    np.testing.assert_array_equal(
        run1(Op.CAST, [t(I32, 5)], t(F16, 5), x), [-np.inf, -3, 0, 100, 1000]
    )
    q = np.array([0, 7, 255], dtype=np.uint8)
    np.testing.assert_array_equal(
        run1(Op.CAST, [t(QU8, 3, scale=0.1, zp=9)], t(F32, 3), q), [0.0, 7.0, 255.0]
    )  # quantization is ignored
    h = np.array([1.5, -1e4], dtype=np.float16)
    np.testing.assert_array_equal(run1(Op.CAST, [t(F16, 2)], t(F32, 2), h), [1.5, -1e4])
    b = rand(B8, 4)
    np.testing.assert_array_equal(run1(Op.CAST, [t(B8, 4)], t(B8, 4), b), b)
    s = rand(QS8, 4)
    np.testing.assert_array_equal(run1(Op.CAST, [t(QS8, 4)], t(QS8, 4), s), s)


def test_cast_validation() -> None:
    rejects(Op.CAST, [t(F32, 2)], [t(B8, 2)], "output 0")
    rejects(Op.CAST, [t(B8, 2)], [t(I32, 2)], "output 0")
    rejects(Op.CAST, [t(QS8, 2)], [t(F32, 2)], "output 0")


# --------------------------------------------------------------------------- QUANTIZE


@pytest.mark.parametrize(
    "code,out", [(F32, t(QU8, 8, scale=0.5, zp=10)), (F16, t(QS8, 8, scale=0.25, zp=-3))]
)
def test_quantize(code: T, out: OperandInfo) -> None:
    x = np.array([0.25, -0.25, 1.25, -1.75, 0.0, 1000, -1000, 3.1], dtype=np.float32)
    x = x.astype(np.float16 if code == F16 else np.float32)
    got = run1(Op.QUANTIZE, [t(code, 8)], out, x)
    np.testing.assert_array_equal(got, quant(x.astype(np.float64), out))


def test_quantize_ties_round_away_and_zero_sized() -> None:
    out = t(QS8, 4, scale=1.0, zp=0)
    x = np.array([0.5, -0.5, 2.5, -2.5], dtype=np.float32)
    np.testing.assert_array_equal(run1(Op.QUANTIZE, [t(F32, 4)], out, x), [1, -1, 3, -3])
    empty = run1(Op.QUANTIZE, [t(F32, 0, 3)], t(QU8, 0, 3), np.zeros((0, 3), np.float32))
    assert empty.shape == (0, 3) and empty.dtype == np.uint8
    rejects(Op.QUANTIZE, [t(F32, 2)], [t(I32, 2)], "output 0")
    rejects(Op.QUANTIZE, [t(QU8, 2)], [t(QU8, 2)], "input 0")


# --------------------------------------------------------------------------- ELU, HARD_SWISH


@pytest.mark.parametrize("code", [F32, F16])
def test_elu(code: T) -> None:
    x = rand(code, 2, 5)
    alpha = 0.75
    scalar = f32s(alpha) if code == F32 else f16s(alpha)
    got = run1(Op.ELU, [t(code, 2, 5), scalar], t(code, 2, 5), x)
    x64 = x.astype(np.float64)
    want = np.where(x64 > 0, x64, alpha * np.expm1(x64))
    tol = 1e-6 if code == F32 else 1e-3
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    empty = run1(Op.ELU, [t(code, 0), scalar], t(code, 0), np.zeros(0, x.dtype))
    assert empty.shape == (0,)
    rejects(Op.ELU, [t(F32, 2), f16s(1.0)], [t(F32, 2)], "alpha")


@pytest.mark.parametrize("code", [F32, F16])
def test_hard_swish_float(code: T) -> None:
    x = rand(code, 23, lo=-6, hi=6)
    x[:3] = [-3, 0, 3]
    got = run1(Op.HARD_SWISH, [t(code, 23)], t(code, 23), x)
    x64 = x.astype(np.float64)
    want = (x64 * np.clip(x64 + 3, 0, 6) / 6).astype(x.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-3 if code == F16 else 1e-6, atol=1e-6)
    empty = run1(Op.HARD_SWISH, [t(code, 0)], t(code, 0), np.zeros(0, x.dtype))
    assert empty.shape == (0,)


def _hard_swish_scalar(q: int, src: OperandInfo, out: OperandInfo) -> int:
    """TFLite's quantized hard-swish, one value at a time in plain Python ints."""

    def c_div(a: int, b: int) -> int:
        return -((-a) // b) if (a < 0) != (b < 0) and a % b else a // b

    def clamp16(v: int) -> int:
        return max(-32768, min(32767, v))

    def wrap16(v: int) -> int:
        return (v + 32768) % 65536 - 32768

    def srdhm(a: int, b: int) -> int:
        if a == b == -32768:
            return 32767
        ab = a * b
        return wrap16(c_div(ab + ((1 << 14) if ab >= 0 else 1 - (1 << 14)), 1 << 15))

    def sdhm(a: int, b: int) -> int:
        if a == b == -32768:
            return 32767
        return wrap16(c_div(a * b, 1 << 15))

    def rdbp(x: int, e: int) -> int:
        mask = (1 << e) - 1
        rem, thr = x & mask, (mask >> 1) + (1 if x < 0 else 0)
        return (x >> e) + (1 if rem > thr else 0)

    def mult16(r: float) -> tuple[int, int]:
        sig, exp = math.frexp(r)
        m = int(math.floor(sig * 2**31 + 0.5))
        if m == 2**31:
            m, exp = m // 2, exp + 1
        return (32767 if m >= 2**31 - 1 - 2**15 else (m + 2**15) >> 16), exp

    hires_scale = float(np.float32(1 / 128) * np.float32(src.scale))
    om, oe = mult16(float(np.float32(hires_scale) / np.float32(out.scale)))
    rm, re_ = mult16(float(np.float32(hires_scale) / np.float32(3 / 32768)))
    hires = wrap16((q - src.zero_point) * 128)
    pre = srdhm(hires, om)
    r = hires
    if re_ > 0:
        r = clamp16(r * 2 ** (re_ - 1))
    r = srdhm(r, rm)
    if re_ > 0:
        r = clamp16(r * 2)
    elif re_ < 0:
        r = rdbp(r, -re_)
    r = (r + 32768) >> 1
    v = wrap16(rdbp(sdhm(r, pre), -oe) + out.zero_point)
    limits = np.iinfo(out.dtype)
    return max(int(limits.min), min(int(limits.max), v))


@pytest.mark.parametrize(
    "code,src,out",
    [
        (QU8, (0.05, 120), (0.03, 30)),
        (QS8, (0.1, -5), (0.04, -100)),
        (QU8, (0.5, 128), (0.25, 10)),  # reluish multiplier needs a left shift
        (QS8, (0.001, 0), (0.002, -10)),  # ... and a right shift
    ],
)
def test_hard_swish_quantized(code: T, src: tuple[float, int], out: tuple[float, int]) -> None:
    limits = np.iinfo(np.uint8 if code == QU8 else np.int8)
    x = np.arange(limits.min, limits.max + 1).astype(limits.dtype)
    isrc = t(code, x.size, scale=src[0], zp=src[1])
    iout = t(code, x.size, scale=out[0], zp=out[1])
    got = run1(Op.HARD_SWISH, [isrc], iout, x)
    np.testing.assert_array_equal(got, [_hard_swish_scalar(int(v), isrc, iout) for v in x])
    r = real(x, isrc)
    want = quant(r * np.clip(r + 3, 0, 6) / 6, iout)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


# --------------------------------------------------------------------------- ARGMAX / ARGMIN


@pytest.mark.parametrize("op", [Op.ARGMAX, Op.ARGMIN])
@pytest.mark.parametrize("code", [F32, F16, I32, QU8, QS8])
def test_argmax_argmin(op: Op, code: T) -> None:
    x = rand(code, 3, 4, 5)
    x[1, :, 2] = x[1, 0, 2]  # ties: the first index wins
    pick = np.argmax if op == Op.ARGMAX else np.argmin
    for axis in (1, -1, 0):
        got = run1(op, [t(code, 3, 4, 5), i32(axis)], t(I32), x)
        np.testing.assert_array_equal(got, pick(x, axis=axis))
    assert run1(op, [t(code, 6), i32(0)], t(I32, 1), x.reshape(-1)[:6]).shape == (1,)


def test_argmax_nan_and_validation() -> None:
    x = np.array([[1.0, np.nan, 3.0], [np.nan, 5.0, 9.0]], dtype=np.float32)
    np.testing.assert_array_equal(run1(Op.ARGMAX, [t(F32, 2, 3), i32(1)], t(I32, 2), x), [2, 0])
    rejects(Op.ARGMAX, [t(F32, 2, 3), i32(2)], [t(I32, 2)], "axis")
    rejects(Op.ARGMIN, [t(F32, 2, 3), i32(0)], [t(F32, 3)], "output 0")
    rejects(Op.ARGMIN, [t(B8, 2, 3), i32(0)], [t(I32, 3)], "input 0")
    op_fails(
        Op.ARGMAX, [t(F32, 2, 3), OperandInfo(T.INT32, ())], [t(I32, 2)], x, np.array(-3, np.int32)
    )


# --------------------------------------------------------------------------- REDUCE_*


@pytest.mark.parametrize("op", [Op.REDUCE_SUM, Op.REDUCE_PROD])
@pytest.mark.parametrize("code", [F32, F16])
def test_reduce_sum_prod_sequential(op: Op, code: T) -> None:
    x = rand(code, 3, 4, 5, lo=0.5, hi=1.5) if op == Op.REDUCE_PROD else rand(code, 3, 4, 5) * 50
    x = x.astype(np.float16 if code == F16 else np.float32)
    for axes, keep in (((1,), False), ((-1, 0), True), ((0, 1, 2), False)):
        want = seq_reduce(x, axes, op == Op.REDUCE_PROD)
        shape = (
            want.shape
            if keep
            else tuple(d for i, d in enumerate(x.shape) if i not in {a % 3 for a in axes}) or (1,)
        )
        got = run1(op, [t(code, 3, 4, 5), ivec(*axes), boolean(keep)], t(code), x)
        assert got.shape == shape
        np.testing.assert_array_equal(got, want.reshape(shape))


def test_reduce_prod_zero_beats_infinity() -> None:
    x = np.array([[0.0, np.inf, 2.0], [1e30, 1e30, np.inf], [1e-30, 1e-30, np.inf]], np.float32)
    got = run1(Op.REDUCE_PROD, [t(F32, 3, 3), ivec(1), boolean(False)], t(F32, 3), x)
    np.testing.assert_array_equal(got, [0.0, np.inf, 0.0])  # the last underflows to 0 first


@pytest.mark.parametrize("op", [Op.REDUCE_MAX, Op.REDUCE_MIN])
@pytest.mark.parametrize("code", [F32, F16, QU8, QS8])
def test_reduce_max_min(op: Op, code: T) -> None:
    x = rand(code, 2, 3, 4)
    pick = np.max if op == Op.REDUCE_MAX else np.min
    info = t(code, 2, 3, 4, scale=0.3, zp=5)
    got = run1(op, [info, ivec(-1, 0), boolean(True)], t(code, scale=0.3, zp=5), x)
    np.testing.assert_array_equal(got, pick(x, axis=(0, 2), keepdims=True))
    rejects(
        op,
        [info, ivec(0), boolean(False)],
        [t(code, scale=0.6, zp=5)] if code in (QU8, QS8) else [t(F16 if code == F32 else F32)],
        "output 0",
    )


def test_reduce_max_skips_nan_and_empty_gives_identity() -> None:
    x = np.array([[np.nan, 2.0, -1.0], [np.nan, np.nan, np.nan]], dtype=np.float32)
    got = run1(Op.REDUCE_MAX, [t(F32, 2, 3), ivec(1), boolean(False)], t(F32), x)
    np.testing.assert_array_equal(got, [2.0, np.finfo(np.float32).min])
    e = np.zeros((2, 0), np.float32)
    np.testing.assert_array_equal(
        run1(Op.REDUCE_SUM, [t(F32, 2, 0), ivec(1), boolean(False)], t(F32), e), [0, 0]
    )
    np.testing.assert_array_equal(
        run1(Op.REDUCE_PROD, [t(F32, 2, 0), ivec(1), boolean(False)], t(F32), e), [1, 1]
    )
    np.testing.assert_array_equal(
        run1(Op.REDUCE_MIN, [t(F16, 2, 0), ivec(1), boolean(False)], t(F16), e.astype(np.float16)),
        [65504, 65504],
    )


def test_reduce_all_any() -> None:
    x = rand(B8, 2, 3, 4)
    for op, fn in ((Op.REDUCE_ALL, np.all), (Op.REDUCE_ANY, np.any)):
        got = run1(op, [t(B8, 2, 3, 4), ivec(1, -1), boolean(False)], t(B8), x)
        np.testing.assert_array_equal(got, fn(x, axis=(1, 2)))
        every = run1(op, [t(B8, 2, 3, 4), ivec(0, 1, 2), boolean(False)], t(B8, 1), x)
        np.testing.assert_array_equal(every, [fn(x)])


def test_reduce_validation() -> None:
    rejects(Op.REDUCE_SUM, [t(F32, 1, 2, 3, 4, 5), ivec(0), boolean(False)], [t(F32)], "rank")
    rejects(Op.REDUCE_SUM, [t(F32, 2, 3), ivec(2), boolean(False)], [t(F32)], "axis")
    rejects(Op.REDUCE_SUM, [t(QU8, 2, 3), ivec(0), boolean(False)], [t(QU8)], "input 0")
    rejects(Op.REDUCE_ANY, [t(F32, 2, 3), ivec(0), boolean(False)], [t(F32)], "input 0")
    rejects(Op.REDUCE_MAX, [t(F32, 2, 3), ivec(0), i32(0)], [t(F32)], "keep_dims")
    op_fails(
        Op.REDUCE_MIN,
        [t(F32, 2, 3), t(I32, 1), boolean(False)],
        [t(F32)],
        rand(F32, 2, 3),
        np.array([-3], np.int32),
    )


# --------------------------------------------------------------------------- binary ops


@pytest.mark.parametrize("op", [Op.MAXIMUM, Op.MINIMUM])
@pytest.mark.parametrize("code", [F32, F16, I32])
def test_maximum_minimum(op: Op, code: T) -> None:
    a, b = rand(code, 2, 1, 4), rand(code, 3, 1)
    got = run1(op, [t(code, 2, 1, 4), t(code, 3, 1)], t(code, 2, 3, 4), a, b)
    np.testing.assert_array_equal(got, (np.maximum if op == Op.MAXIMUM else np.minimum)(a, b))


@pytest.mark.parametrize("op", [Op.MAXIMUM, Op.MINIMUM])
@pytest.mark.parametrize("code", [QU8, QS8])
def test_maximum_minimum_quantized(op: Op, code: T) -> None:
    ia, ib = t(code, 3, 4, scale=0.5, zp=7), t(code, 4, scale=0.125, zp=-1)
    out = t(code, 3, 4, scale=0.25, zp=2)
    a, b = rand(code, 3, 4), rand(code, 4)
    got = run1(op, [ia, ib], out, a, b)
    pick = np.maximum if op == Op.MAXIMUM else np.minimum
    np.testing.assert_array_equal(got, pick(quant(real(a, ia), out), quant(real(b, ib), out)))


def test_maximum_nan_returns_first_input() -> None:
    a = np.array([np.nan, 1.0, 5.0], dtype=np.float32)
    b = np.array([2.0, np.nan, 3.0], dtype=np.float32)
    got = run1(Op.MAXIMUM, [t(F32, 3), t(F32, 3)], t(F32, 3), a, b)
    np.testing.assert_array_equal(got, [np.nan, 1.0, 5.0])


@pytest.mark.parametrize("code", [F32, F16])
def test_pow(code: T) -> None:
    base = rand(code, 2, 3, lo=0.1, hi=3)
    exponent = rand(code, 3, lo=-2, hi=2)
    got = run1(Op.POW, [t(code, 2, 3), t(code, 3)], t(code, 2, 3), base, exponent)
    want = np.power(base.astype(np.float64), exponent.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-6 if code == F32 else 1e-3)
    rejects(Op.POW, [t(I32, 2), t(I32, 2)], [t(I32, 2)], "input 0")


@pytest.mark.parametrize("code", [F32, F16])
def test_prelu_float(code: T) -> None:
    x, alpha = rand(code, 2, 3, 4), rand(code, 4, lo=0, hi=1)
    got = run1(Op.PRELU, [t(code, 2, 3, 4), t(code, 4)], t(code, 2, 3, 4), x, alpha)
    np.testing.assert_array_equal(got, np.where(x >= 0, x, x * alpha))


@pytest.mark.parametrize("alpha", [0.2, 1.0, 1e-8, 0.0, -0.5, 2.0])
def test_prelu_edge_values_match_the_definition(alpha: float) -> None:
    """Leaky slopes in (0, 1] take the max(x, x * alpha) path, the rest the select:
    both must give x >= 0 ? x : x * alpha bit for bit, signed zeros, NaN and inf too."""
    x = np.array([-np.inf, -3, -1e-30, -0.0, 0.0, 1e-30, 2, np.inf, np.nan], np.float32)
    slope = np.array([alpha], np.float32)
    got = run1(Op.PRELU, [t(F32, 9), t(F32, 1)], t(F32, 9), x, slope)
    with np.errstate(invalid="ignore"):  # -inf * 0
        want = np.where(x >= 0, x, x * slope)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("code", [QU8, QS8])
def test_prelu_quantized(code: T) -> None:
    zp = 128 if code == QU8 else 0
    ix = t(code, 3, 8, scale=0.1, zp=zp)
    ia = t(code, 8, scale=0.01, zp=zp // 2)
    out = t(code, 3, 8, scale=0.05, zp=zp // 4)
    x, alpha = rand(code, 3, 8), rand(code, 8)
    got = run1(Op.PRELU, [ix, ia], out, x, alpha)
    rx = real(x, ix)
    want = quant(np.where(rx >= 0, rx, rx * real(alpha, ia)), out)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    # Exact points: positive inputs scale by 2 exactly, 0 maps to the output zero point.
    exact = np.array([[zp, zp + 10, zp + 20, zp + 5, zp, zp, zp, zp]] * 3, dtype=x.dtype)
    got = run1(Op.PRELU, [ix, ia], out, exact, alpha)
    np.testing.assert_array_equal(got[0, :4].astype(int) - out.zero_point, [0, 20, 40, 10])


def test_binary_validation() -> None:
    rejects(Op.MAXIMUM, [t(F32, 2), t(F16, 2)], [t(F32, 2)], "input 1")
    rejects(Op.PRELU, [t(I32, 2), t(I32, 2)], [t(I32, 2)], "input 0")
    rejects(Op.MINIMUM, [t(F32, 2, 3), t(F32, 2)], [t(F32, 2, 3)], "broadcast")
    op_fails(Op.MAXIMUM, [t(F32, 0), t(F32, 0)], [t(F32, 0)], rand(F32, 3), rand(F32, 2))


# --------------------------------------------------------------------------- LOG_SOFTMAX


@pytest.mark.parametrize("code", [F32, F16])
def test_log_softmax(code: T) -> None:
    x = rand(code, 2, 3, 5)
    beta = 0.7
    scalar = f32s(beta) if code == F32 else f16s(beta)
    for axis in (-1, 0, 1):
        got = run1(Op.LOG_SOFTMAX, [t(code, 2, 3, 5), scalar, i32(axis)], t(code, 2, 3, 5), x)
        z = x.astype(np.float64) * float(np.asarray(beta, x.dtype))
        want = z - np.log(np.exp(z).sum(axis=axis, keepdims=True))
        np.testing.assert_allclose(
            got, want, rtol=1e-5 if code == F32 else 3e-3, atol=1e-5 if code == F32 else 1e-2
        )
    rejects(Op.LOG_SOFTMAX, [t(F32, 2, 3), f16s(1), i32(0)], [t(F32, 2, 3)], "beta")
    rejects(Op.LOG_SOFTMAX, [t(F32, 2, 3), f32s(1), i32(-3)], [t(F32, 2, 3)], "axis")


# --------------------------------------------------------------------------- INSTANCE_NORMALIZATION


@pytest.mark.parametrize("nchw", [False, True])
def test_instance_normalization_float32(nchw: bool) -> None:
    x = rand(F32, 2, 3, 4, 5)  # NHWC view
    gamma, beta, eps = 1.5, -0.25, 1e-3
    mean = x.astype(np.float64).mean(axis=(1, 2), keepdims=True)
    var = x.astype(np.float64).var(axis=(1, 2), keepdims=True)
    want = (x - mean) * gamma / np.sqrt(var + eps) + beta
    feed = x.transpose(0, 3, 1, 2) if nchw else x
    shape = feed.shape
    got = run1(
        Op.INSTANCE_NORMALIZATION,
        [t(F32, *shape), f32s(gamma), f32s(beta), f32s(eps), boolean(nchw)],
        t(F32, *shape),
        feed,
    )
    if nchw:
        got = got.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_instance_normalization_float16_and_validation() -> None:
    x = rand(F16, 1, 2, 3, 2)
    got = run1(
        Op.INSTANCE_NORMALIZATION,
        [t(F16, 1, 2, 3, 2), f16s(1.0), f16s(0.0), f16s(1e-3), boolean(False)],
        t(F16, 1, 2, 3, 2),
        x,
    )
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(axis=(1, 2), keepdims=True)) / np.sqrt(
        x64.var(axis=(1, 2), keepdims=True) + 1e-3
    )
    np.testing.assert_allclose(got, want, atol=1e-2)
    # Bit-exact against the reference's loop, which works in half precision throughout
    # (only the square root is taken in float32).
    h = np.float16
    exact = np.empty_like(x)
    for b in range(1):
        for c in range(2):
            plane = [x[b, i, j, c] for i in range(2) for j in range(3)]
            mean = h(0)
            for v in plane:
                mean = h(mean + v)
            mean = h(mean / h(6))
            sigma = h(0)
            for v in plane:
                sigma = h(sigma + h(h(v - mean) * h(v - mean)))
            sigma = h(np.sqrt(np.float32(h(sigma / h(6))) + np.float32(h(1e-3))))
            for i in range(2):
                for j in range(3):
                    exact[b, i, j, c] = h(h(h(h(x[b, i, j, c] - mean) * h(1.0)) / sigma) + h(0))
    np.testing.assert_array_equal(got, exact)
    rejects(
        Op.INSTANCE_NORMALIZATION,
        [t(F32, 2, 2, 2), f32s(1), f32s(0), f32s(1e-3), boolean(False)],
        [t(F32, 2, 2, 2)],
        "rank",
    )
    rejects(
        Op.INSTANCE_NORMALIZATION,
        [t(F16, 1, 2, 2, 1), f32s(1), f16s(0), f16s(1e-3), boolean(False)],
        [t(F16, 1, 2, 2, 1)],
        "gamma",
    )
