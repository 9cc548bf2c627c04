"""Quantized arithmetic, bit exact: known answers with zero tolerance.

The op tests elsewhere compare quantized results with a float computation
and allow one step either way, so a requantization that rounds ties the
wrong way passes them.  Here an integer reference written independently of
``nnburst/cpu/ops`` (plain Python ints and ``Fraction``, loops, no numpy
arithmetic) states the NNAPI/TFLite semantics and every output must equal it
exactly:

- accumulate ``(x - x_zp) * (w - w_zp)`` in integers, add the int32 bias;
- real multiplier ``in_scale * w_scale / out_scale`` (in double), split into
  a 31-bit significand rounded half away from zero and a power-of-two shift;
- ``SaturatingRoundingDoublingHighMul``: ``a*b / 2**31`` rounded half up
  (toward +inf), saturating ``INT32_MIN * INT32_MIN``;
- ``RoundingDivideByPOT``: ``x / 2**e`` rounded half away from zero;
- add the output zero point, clamp to the fused activation's range;
- quantized average pool: ``sum / count`` over the unpadded window, rounded
  half away from zero, no requantization.

Scales are dyadic (exact in float32 and double), so the multiplier is the
same whichever precision the scales were held in.  Inputs are built so that
many results are exact .5 ties: round-half-even, a float multiplier or a
truncating division each change at least one output.
"""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.cpu.ops import fixed_point, native, requantization
from nnburst.operands import OperandInfo

from .op_models import run

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """Random data seeded by the test's own id: the same values whatever
    order or subset of tests runs (a shared generator would hand each test
    different data depending on what ran before it)."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


# --------------------------------------------------------------- the reference


def round_half_away(value: Fraction) -> int:
    """Nearest integer; an exact .5 goes away from zero (C's std::round)."""
    floor = math.floor(value)
    frac = value - floor
    if frac > Fraction(1, 2) or (frac == Fraction(1, 2) and value > 0):
        return floor + 1
    return floor


def ref_quantize_multiplier(real: float) -> tuple[int, int]:
    """(significand, shift) with real ≈ significand · 2**(shift - 31) and
    significand in [2**30, 2**31): normalise by halving/doubling, not frexp."""
    if real == 0:
        return 0, 0
    exact = Fraction(real)
    shift = 0
    while exact >= 1:
        exact /= 2
        shift += 1
    while exact < Fraction(1, 2):
        exact *= 2
        shift -= 1
    significand = round_half_away(exact * 2**31)
    if significand == 2**31:  # rounding carried into the next power of two
        significand, shift = 2**30, shift + 1
    if shift < -31:
        return 0, 0
    return significand, shift


def ref_high_mul(a: int, b: int) -> int:
    if a == b == INT32_MIN:
        return INT32_MAX
    return math.floor(Fraction(a * b, 2**31) + Fraction(1, 2))


def ref_divide_by_pot(x: int, exponent: int) -> int:
    return round_half_away(Fraction(x, 2**exponent))


def ref_requantize(acc: int, real: float) -> int:
    significand, shift = ref_quantize_multiplier(real)
    left, right = max(shift, 0), max(-shift, 0)
    return ref_divide_by_pot(ref_high_mul(acc * 2**left, significand), right)


def ref_activation(fuse: int, scale: float, zero_point: int, lo: int, hi: int) -> tuple[int, int]:
    def q(v: float) -> int:
        return zero_point + round_half_away(Fraction(v) / Fraction(scale))

    if fuse == 1:
        return max(lo, q(0)), hi
    if fuse == 2:
        return max(lo, q(-1)), min(hi, q(1))
    if fuse == 3:
        return max(lo, q(0)), min(hi, q(6))
    return lo, hi


def ref_conv(x, x_zp, w, w_zp, bias, real, out_zp, out_range, stride, pads, depth_multiplier=None):
    """NHWC conv (or depthwise when depth_multiplier is set) in Python ints.

    pads = (top, bottom, left, right); padded positions add nothing."""
    n, h, wd, c = x.shape
    fh, fw = w.shape[1], w.shape[2]
    out_c = w.shape[3] if depth_multiplier else w.shape[0]
    oh = (h + pads[0] + pads[1] - fh) // stride[0] + 1
    ow = (wd + pads[2] + pads[3] - fw) // stride[1] + 1
    out = np.zeros((n, oh, ow, out_c), dtype=np.int64)
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                for oc in range(out_c):
                    acc = int(bias[oc])
                    for di in range(fh):
                        for dj in range(fw):
                            y, xx = i * stride[0] - pads[0] + di, j * stride[1] - pads[2] + dj
                            if not (0 <= y < h and 0 <= xx < wd):
                                continue
                            if depth_multiplier:
                                ic = oc // depth_multiplier
                                acc += (int(x[b, y, xx, ic]) - x_zp) * (
                                    int(w[0, di, dj, oc]) - w_zp
                                )
                            else:
                                for ic in range(c):
                                    acc += (int(x[b, y, xx, ic]) - x_zp) * (
                                        int(w[oc, di, dj, ic]) - w_zp
                                    )
                    value = ref_requantize(acc, real) + out_zp
                    out[b, i, j, oc] = min(max(value, out_range[0]), out_range[1])
    return out


# --------------------------------------------------------------- helpers


def i32(value: int):
    return OperandInfo(T.INT32, ()), np.array(value, dtype=np.int32)


def const(info: OperandInfo, value) -> tuple[OperandInfo, np.ndarray]:
    return info, np.asarray(value, dtype=info.dtype).reshape(info.dimensions)


def real_multiplier(in_scale: float, w_scale: float, out_scale: float) -> float:
    return in_scale * w_scale / out_scale


def ties_hit(acc_values, real: float) -> int:
    """How many accumulators land exactly on a .5 after scaling."""
    return sum(1 for a in acc_values if (Fraction(a) * Fraction(real)).denominator == 2)


def near(
    rng: np.random.Generator, zero_point: int, span: int, shape: tuple[int, ...], dtype
) -> np.ndarray:
    """Values within ``span`` of the zero point, so results stay mostly in
    range and the rounding, not the clamp, decides them."""
    limits = np.iinfo(dtype)
    lo, hi = max(int(limits.min), zero_point - span), min(int(limits.max), zero_point + span)
    return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)


def assert_mostly_unclamped(want: np.ndarray, out_range: tuple[int, int], fuse: int) -> None:
    """Half the outputs (a quarter under an activation) must be strictly
    inside the clamp range, or the case would test the clamp, not rounding."""
    inside = np.count_nonzero((want > out_range[0]) & (want < out_range[1]))
    need = want.size // 2 if fuse == 0 else want.size // 4
    assert inside >= need, f"only {inside} of {want.size} outputs escape the clamp"


QUANT_TYPES = {
    "uint8": (T.TENSOR_QUANT8_ASYMM, np.uint8),
    "int8": (T.TENSOR_QUANT8_ASYMM_SIGNED, np.int8),
}


# --------------------------------------------------------------- the helpers themselves


@pytest.mark.parametrize(
    "real",
    [
        0.5,
        0.25,
        1.0,
        1.5,
        2.0,
        1 / 3,
        0.1,
        0.75,
        3.0e-5,
        2.0**-32,
        2.0**-31,
        1 - 2.0**-40,
        7.25,
        255.0,
    ],
)
def test_quantize_multiplier_matches_the_reference(real):
    assert fixed_point.quantize_multiplier(real) == ref_quantize_multiplier(real)


def test_quantize_multiplier_carries_a_significand_that_rounds_up_to_two_to_the_31():
    assert fixed_point.quantize_multiplier(1 - 2.0**-40) == (2**30, 1)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, 2**30),
        (-1, 2**30),
        (3, 2**30),
        (-3, 2**30),
        (5, 2**30),
        (-5, 2**30),  # exact .5
        (INT32_MIN, INT32_MIN),
        (INT32_MIN, INT32_MAX),
        (INT32_MAX, INT32_MAX),
        (INT32_MAX, INT32_MIN),
        (12345, 1518500250),
        (-12345, 1518500250),
        (0, INT32_MIN),
        (1, 1),
        (-1, 1),
    ],
)
def test_saturating_rounding_doubling_high_mul_exact(a, b):
    got = fixed_point.fixed_mul(np.array([a], dtype=np.int64), b)
    assert int(got[0]) == ref_high_mul(a, b)


def test_high_mul_rounds_negative_ties_toward_plus_infinity():
    # gemmlowp's nudge: -0.5 -> 0 and -1.5 -> -1, but +0.5 -> 1.
    got = fixed_point.fixed_mul(np.array([-1, -3, 1, 3], dtype=np.int64), 2**30)
    assert got.tolist() == [0, -1, 1, 2]


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 5, 31])
def test_rounding_divide_by_pot_ties_away_from_zero(exponent):
    values = list(range(-40, 41)) + [INT32_MIN, INT32_MAX, 2**exponent // 2, -(2**exponent // 2)]
    got = fixed_point.rounding_divide_by_pot(np.array(values, dtype=np.int64), exponent)
    assert got.tolist() == [ref_divide_by_pot(v, exponent) for v in values]


def test_rounding_divide_by_pot_known_ties():
    got = fixed_point.rounding_divide_by_pot(
        np.array([1, -1, 3, -3, 5, -5, 2, -2], dtype=np.int64), 1
    )
    assert got.tolist() == [1, -1, 2, -2, 3, -3, 1, -1]


@pytest.mark.parametrize("real", [0.25, 0.5, 0.375, 1.5, 3.0, 1 / 3, 0.0625 / 0.375])
def test_multiply_by_quantized_multiplier_exact_over_a_range_with_ties(real):
    values = list(range(-300, 301)) + [2**20 + 2, -(2**20) - 2, 65538, -65538]
    m, s = fixed_point.quantize_multiplier(real)
    got = fixed_point.multiply_by_quantized_multiplier(np.array(values, dtype=np.int64), m, s)
    assert got.tolist() == [ref_requantize(v, real) for v in values]


def test_requantize_known_ties_and_activation_clamp():
    # real multiplier 0.25: 2.5 -> 3, -2.5 -> -3, 0.5 -> 1, -0.5 -> -1 (half-even gives 2, -2, 0, 0).
    info = OperandInfo(T.TENSOR_QUANT8_ASYMM, (6,), 1.0, 100)
    m, s = fixed_point.quantize_multiplier(0.25)
    acc = np.array([10, -10, 2, -2, 1000, -1000], dtype=np.int64)
    assert requantization.requantize(acc, m, s, info, 0).tolist() == [103, 97, 101, 99, 255, 0]
    assert requantization.requantize(acc, m, s, info, 3).tolist() == [
        103,
        100,
        101,
        100,
        106,
        100,
    ]  # RELU6


@pytest.mark.parametrize("dtype, zero_point", [(np.uint8, 100), (np.int8, -3)])
def test_the_c_requantization_equals_the_reference(dtype, zero_point):
    """``native.requantize_f32`` (what quantized convolutions and fully connected
    layers run) against the Python-int reference: ties, saturation of the left
    shift, bias beyond int32, per-channel and per-tensor multipliers, clamps."""
    reals = [0.25, 1 / 3, 1.5, 3.0, 2.0**-20, 1000.0]
    pairs = [fixed_point.quantize_multiplier(r) for r in reals]
    multipliers = np.array([m for m, _ in pairs], np.int64)
    shifts = np.array([sh for _, sh in pairs], np.int64)
    sums = list(range(-300, 301, 7)) + [2**23, -(2**23), 2**20 + 2, -(2**20) - 2, 0]
    acc = np.array([[v] * len(reals) for v in sums], np.float32)
    bias = np.array([0, 5, -5, 2**31, -(2**31) - 9, 1], np.int64)  # beyond int32 saturates
    qmin, qmax = np.iinfo(dtype).min, np.iinfo(dtype).max
    for lo, hi in ((qmin, qmax), (zero_point, qmax), (qmin + 10, qmax - 10)):
        got = native.requantize_f32(acc, bias, multipliers, shifts, zero_point, (lo, hi), dtype)
        assert got.dtype == dtype
        want = [
            [
                min(hi, max(lo, zero_point + ref_requantize(int(v) + int(b), r)))
                for v, b, r in zip(row, bias, reals)
            ]
            for row in acc
        ]
        assert got.tolist() == want
    # One multiplier for every channel.
    m, sh = fixed_point.quantize_multiplier(1 / 3)
    got = native.requantize_f32(acc, bias, np.array([m]), np.array([sh]), 0, (qmin, qmax), dtype)
    want = [
        [min(qmax, max(qmin, ref_requantize(int(v) + int(b), 1 / 3))) for v, b in zip(row, bias)]
        for row in acc
    ]
    assert got.tolist() == want


def test_the_c_requantization_refuses_what_it_cannot_store():
    acc, bias = np.zeros((2, 3), np.float32), np.zeros(3, np.int64)
    one = (np.array([2**30]), np.array([0]))
    with pytest.raises(ValueError, match="cannot requantize to int16"):
        native.requantize_f32(acc, bias, *one, 0, (0, 10), np.int16)
    with pytest.raises(ValueError, match="cannot requantize to uint8 within"):
        native.requantize_f32(acc, bias, *one, 0, (-1, 10), np.uint8)
    with pytest.raises(ValueError, match="with shifts"):
        native.requantize_f32(acc, bias, np.array([2**30]), np.array([31]), 0, (0, 9), np.uint8)
    with pytest.raises(ValueError, match="2 multipliers and 2 shifts for 3 channels"):
        native.requantize_f32(acc, bias, np.ones(2), np.zeros(2), 0, (0, 9), np.uint8)


# --------------------------------------------------------------- CONV_2D


def test_conv_known_answer_with_ties():
    """1x1 conv, real multiplier 0.25: accumulators 2, 6, 10, 14, -2, -6,
    -10, -14 are the ties ±0.5, ±1.5, ±2.5, ±3.5."""
    q = T.TENSOR_QUANT8_ASYMM
    x = np.array([2, 6, 10, 14, 0, 0, 0, 0], dtype=np.uint8).reshape(1, 2, 4, 1)
    ins = [
        OperandInfo(q, (1, 2, 4, 1), 0.5, 0),
        const(OperandInfo(q, (1, 1, 1, 1), 0.5, 0), [[[[1]]]]),
        const(OperandInfo(T.TENSOR_INT32, (1,), 0.25), [0]),
        i32(0),
        i32(0),
        i32(0),
        i32(0),
        i32(1),
        i32(1),
        i32(0),
    ]
    (got,) = run(Op.CONV_2D, ins, [OperandInfo(q, (1, 2, 4, 1), 1.0, 128)], x)
    assert got.reshape(-1).tolist() == [129, 130, 131, 132, 128, 128, 128, 128]
    ins[2] = const(OperandInfo(T.TENSOR_INT32, (1,), 0.25), [-16])  # acc = x - 16
    (got,) = run(Op.CONV_2D, ins, [OperandInfo(q, (1, 2, 4, 1), 1.0, 128)], x)
    # (2-16)/4=-3.5 -> -4, -2.5 -> -3, -1.5 -> -2, -0.5 -> -1, -16/4 = -4
    assert got.reshape(-1).tolist() == [124, 125, 126, 127, 124, 124, 124, 124]


@pytest.mark.parametrize("kind", ["uint8", "int8"])
@pytest.mark.parametrize(
    ("in_scale", "w_scale", "out_scale", "fuse", "stride", "pads", "span"),
    [
        (
            0.5,
            0.5,
            1.0,
            0,
            (1, 1),
            (1, 1, 1, 1),
            8,
        ),  # multiplier 1/4: a quarter of results are ties
        (0.25, 0.5, 0.25, 0, (2, 1), (0, 1, 1, 0), 6),  # 1/2
        (0.5, 0.125, 0.75, 0, (1, 2), (1, 0, 0, 1), 16),  # 1/12 (not dyadic)
        (0.5, 0.125, 0.09375, 3, (1, 2), (1, 0, 0, 1), 4),  # 2/3, RELU6
        (1.0, 1.0, 0.0625, 1, (1, 1), (0, 0, 0, 0), 1),  # 16: a left shift, RELU
        (0.0625, 0.25, 4.0, 0, (1, 1), (1, 1, 0, 0), 96),  # 1/256
        (0.25, 0.25, 0.03125, 2, (1, 1), (1, 1, 0, 0), 3),  # 2, RELU1
        (0.5, 0.5, 1.0, 0, (1, 1), (1, 1, 1, 1), 200),  # full range: the clamp at both ends
    ],
)
def test_conv_matches_the_integer_reference_exactly(
    rng, kind, in_scale, w_scale, out_scale, fuse, stride, pads, span
):
    code, dtype = QUANT_TYPES[kind]
    lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    x_zp, w_zp, out_zp = (lo + 120, lo + 131, lo + 127)
    x = near(rng, x_zp, span, (2, 5, 4, 3), dtype)
    w = near(rng, w_zp, span, (4, 3, 2, 3), dtype)
    bias = np.array([1, -1, 2, -3], dtype=np.int32)
    real = real_multiplier(in_scale, w_scale, out_scale)
    ins = [
        OperandInfo(code, x.shape, in_scale, x_zp),
        const(OperandInfo(code, w.shape, w_scale, w_zp), w),
        const(OperandInfo(T.TENSOR_INT32, (4,), in_scale * w_scale), bias),
        i32(pads[2]),
        i32(pads[3]),
        i32(pads[0]),
        i32(pads[1]),
        i32(stride[1]),
        i32(stride[0]),
        i32(fuse),
    ]
    out_range = ref_activation(fuse, out_scale, out_zp, lo, hi)
    want = ref_conv(x, x_zp, w, w_zp, bias, real, out_zp, out_range, stride, pads)
    if span < 200:
        assert_mostly_unclamped(want, out_range, fuse)
    (got,) = run(Op.CONV_2D, ins, [OperandInfo(code, want.shape, out_scale, out_zp)], x)
    assert got.dtype == dtype
    assert np.array_equal(got.astype(np.int64), want), np.argwhere(got.astype(np.int64) != want)[:5]


def test_conv_inputs_are_built_to_hit_ties(rng):
    """The random conv inputs above do reach exact .5 ties (else the test
    could not tell half-even from half-away)."""
    x = rng.integers(0, 255, 4000, endpoint=True)
    assert ties_hit(x - 120, 0.25) > 500


# --------------------------------------------------------------- DEPTHWISE_CONV_2D


@pytest.mark.parametrize("kind", ["uint8", "int8"])
@pytest.mark.parametrize(
    ("out_scale", "fuse", "span"),
    [(1.0, 0, 12), (0.375, 0, 12), (0.5, 1, 12), (0.125, 3, 3), (0.0625, 2, 3)],
)
def test_depthwise_matches_the_integer_reference_exactly(rng, kind, out_scale, fuse, span):
    code, dtype = QUANT_TYPES[kind]
    lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    x_zp, w_zp, out_zp = lo + 128, lo + 100, lo + 130
    x = near(rng, x_zp, span, (1, 5, 5, 2), dtype)
    w = near(rng, w_zp, span, (1, 3, 3, 4), dtype)  # depth multiplier 2
    bias = np.array([7, -7, 4 * span, -4 * span - 1], dtype=np.int32)
    in_scale, w_scale = 0.5, 0.25
    ins = [
        OperandInfo(code, x.shape, in_scale, x_zp),
        const(OperandInfo(code, w.shape, w_scale, w_zp), w),
        const(OperandInfo(T.TENSOR_INT32, (4,), in_scale * w_scale), bias),
        i32(1),
        i32(0),
        i32(0),
        i32(1),
        i32(2),
        i32(1),
        i32(2),
        i32(fuse),
    ]
    real = real_multiplier(in_scale, w_scale, out_scale)
    out_range = ref_activation(fuse, out_scale, out_zp, lo, hi)
    want = ref_conv(
        x, x_zp, w, w_zp, bias, real, out_zp, out_range, (1, 2), (0, 1, 1, 0), depth_multiplier=2
    )
    assert_mostly_unclamped(want, out_range, fuse)
    (got,) = run(Op.DEPTHWISE_CONV_2D, ins, [OperandInfo(code, want.shape, out_scale, out_zp)], x)
    assert np.array_equal(got.astype(np.int64), want), np.argwhere(got.astype(np.int64) != want)[:5]


# --------------------------------------------------------------- FULLY_CONNECTED


def ref_fully_connected(x, x_zp, w, w_zp, bias, real, out_zp, out_range):
    out = np.zeros((x.shape[0], w.shape[0]), dtype=np.int64)
    for b in range(x.shape[0]):
        for u in range(w.shape[0]):
            acc = int(bias[u]) + sum(
                (int(x[b, k]) - x_zp) * (int(w[u, k]) - w_zp) for k in range(x.shape[1])
            )
            value = ref_requantize(acc, real) + out_zp
            out[b, u] = min(max(value, out_range[0]), out_range[1])
    return out


@pytest.mark.parametrize("kind", ["uint8", "int8"])
@pytest.mark.parametrize(
    ("out_scale", "fuse", "span"),
    [(1.0, 0, 10), (0.75, 0, 10), (0.5, 1, 10), (0.0625, 3, 3), (0.015625, 2, 3)],
)
def test_fully_connected_matches_the_integer_reference_exactly(rng, kind, out_scale, fuse, span):
    code, dtype = QUANT_TYPES[kind]
    lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    x_zp, w_zp, out_zp = lo + 127, lo + 129, lo + 125
    x = near(rng, x_zp, span, (4, 6), dtype)
    w = near(rng, w_zp, span, (5, 6), dtype)
    bias = np.array([0, 1, -1, 20, -20], dtype=np.int32)
    in_scale, w_scale = 0.25, 0.5
    ins = [
        OperandInfo(code, x.shape, in_scale, x_zp),
        const(OperandInfo(code, w.shape, w_scale, w_zp), w),
        const(OperandInfo(T.TENSOR_INT32, (5,), in_scale * w_scale), bias),
        i32(fuse),
    ]
    real = real_multiplier(in_scale, w_scale, out_scale)
    out_range = ref_activation(fuse, out_scale, out_zp, lo, hi)
    want = ref_fully_connected(x, x_zp, w, w_zp, bias, real, out_zp, out_range)
    assert_mostly_unclamped(want, out_range, fuse)
    (got,) = run(Op.FULLY_CONNECTED, ins, [OperandInfo(code, want.shape, out_scale, out_zp)], x)
    assert np.array_equal(got.astype(np.int64), want), (got, want)


def test_fully_connected_known_answer_ties():
    q = T.TENSOR_QUANT8_ASYMM
    x = np.array([[1, 3, 5, 7]], dtype=np.uint8).reshape(4, 1)
    ins = [
        OperandInfo(q, (4, 1), 0.5, 0),
        const(OperandInfo(q, (2, 1), 1.0, 0), [[1], [3]]),
        const(OperandInfo(T.TENSOR_INT32, (2,), 0.5), [0, -30]),
        i32(0),
    ]
    (got,) = run(Op.FULLY_CONNECTED, ins, [OperandInfo(q, (4, 2), 1.0, 50)], x)
    # Multiplier 0.5 needs no right shift, so only the high mul rounds, and
    # it rounds ties up: unit 0, x/2 = 0.5, 1.5, 2.5, 3.5 -> 1, 2, 3, 4;
    # unit 1, (3x - 30)/2 = -13.5, -10.5, -7.5, -4.5 -> -13, -10, -7, -4.
    assert got.tolist() == [[51, 37], [52, 40], [53, 43], [54, 46]]


# --------------------------------------------------------------- AVERAGE_POOL_2D


def ref_average_pool(x, filt, stride, pads, out_range):
    n, h, wd, c = x.shape
    oh = (h + pads[0] + pads[1] - filt[0]) // stride[0] + 1
    ow = (wd + pads[2] + pads[3] - filt[1]) // stride[1] + 1
    out = np.zeros((n, oh, ow, c), dtype=np.int64)
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                for ch in range(c):
                    cells = [
                        int(x[b, y, xx, ch])
                        for y in range(i * stride[0] - pads[0], i * stride[0] - pads[0] + filt[0])
                        for xx in range(j * stride[1] - pads[2], j * stride[1] - pads[2] + filt[1])
                        if 0 <= y < h and 0 <= xx < wd
                    ]
                    value = round_half_away(Fraction(sum(cells), len(cells)))
                    out[b, i, j, ch] = min(max(value, out_range[0]), out_range[1])
    return out


@pytest.mark.parametrize("kind", ["uint8", "int8"])
@pytest.mark.parametrize(
    ("filt", "stride", "pads", "fuse"),
    [
        ((2, 2), (2, 2), (0, 0, 0, 0), 0),
        ((3, 2), (1, 1), (1, 1, 1, 0), 0),
        ((2, 4), (1, 2), (1, 0, 2, 1), 3),
        ((1, 2), (1, 1), (0, 0, 0, 1), 2),
    ],
)
def test_average_pool_matches_the_integer_reference_exactly(rng, kind, filt, stride, pads, fuse):
    code, dtype = QUANT_TYPES[kind]
    lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    x = rng.integers(lo, hi, (1, 5, 6, 3), endpoint=True).astype(dtype)
    info = OperandInfo(code, x.shape, 0.5, lo + 128)
    ins = [
        info,
        i32(pads[2]),
        i32(pads[3]),
        i32(pads[0]),
        i32(pads[1]),
        i32(stride[1]),
        i32(stride[0]),
        i32(filt[1]),
        i32(filt[0]),
        i32(fuse),
    ]
    want = ref_average_pool(x, filt, stride, pads, ref_activation(fuse, 0.5, lo + 128, lo, hi))
    (got,) = run(Op.AVERAGE_POOL_2D, ins, [OperandInfo(code, want.shape, 0.5, lo + 128)], x)
    assert np.array_equal(got.astype(np.int64), want), np.argwhere(got.astype(np.int64) != want)[:5]


def test_average_pool_known_ties():
    x = np.array([1, 2, 3, 4, -1, -2, -3, -4], dtype=np.int8).reshape(1, 1, 8, 1)
    info = OperandInfo(T.TENSOR_QUANT8_ASYMM_SIGNED, x.shape, 1.0, 0)
    # VALID, stride 2, filter 2 wide: 1.5 -> 2, 3.5 -> 4, -1.5 -> -2, -3.5 -> -4
    ins = [info, i32(2), i32(2), i32(1), i32(2), i32(1), i32(0)]
    (got,) = run(Op.AVERAGE_POOL_2D, ins, [OperandInfo(info.code, (1, 1, 4, 1), 1.0, 0)], x)
    assert got.reshape(-1).tolist() == [2, 4, -2, -4]
