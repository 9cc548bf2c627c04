"""The reference's integer arithmetic, bit for bit, on whole numpy arrays.

gemmlowp's fixed point as NNAPI's reference uses it (``SaturatingRoundingDoublingHighMul``,
``RoundingDivideByPOT``, ``MultiplyByQuantizedMultiplier`` and the functions built
from them: exp, logistic, tanh, an inverse square root), the split of a real
multiplier into an int32 significand and a shift, and ``std::round``.  Raw int32
values are held in int64 arrays, so intermediate products never overflow; every
result equals the int32 reference, where a float shortcut would drift.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


def quantize_multiplier(real_multiplier: float) -> tuple[int, int]:
    """Split a positive real multiplier into (int32 significand, shift).

    ``real ≈ significand · 2**(shift - 31)``; ``shift`` may be negative.
    """
    if real_multiplier == 0.0:
        return 0, 0
    significand, shift = math.frexp(real_multiplier)
    q = math.floor(significand * (1 << 31) + 0.5)  # std::round: ties away from zero
    if q == 1 << 31:
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return int(q), int(shift)


def conv_multiplier(
    input_scale: float, filter_scale: float, output_scale: float
) -> tuple[int, int]:
    """``GetQuantizedConvolutionMultipler`` + ``QuantizeMultiplier`` as the reference does them.

    The input x filter scale product is formed in float32 before it is widened,
    which can move the multiplier by one unit against a pure double product.
    """
    product = float(np.float32(input_scale) * np.float32(filter_scale))
    return quantize_multiplier(product / float(np.float32(output_scale)))


def round_half_away(x: Any) -> np.ndarray:
    """``std::round``: ties go away from zero (``np.rint`` would go to even)."""
    x = np.asarray(x)
    whole = np.trunc(x)
    return whole + np.where(np.abs(x - whole) >= 0.5, np.sign(x), 0).astype(x.dtype)


def trunc_div(a: np.ndarray, d: int) -> np.ndarray:
    """C-style integer division (rounds toward zero)."""
    return np.where(a >= 0, a // d, -((-a) // d))


def wrap_int32(x: np.ndarray) -> np.ndarray:
    """Two's-complement int32 wrap-around of int64 values (C int32 overflow)."""
    x = np.asarray(x, dtype=np.int64)
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def fixed_mul(a: Any, b: Any) -> np.ndarray:
    """gemmlowp's ``SaturatingRoundingDoublingHighMul``: ``a · b / 2**31`` rounded to
    nearest (ties up), saturated where ``a == b == INT32_MIN``; either operand may be
    one value or an array."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    x = ab + np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    result = np.where(x >= 0, x >> 31, -((-x) >> 31))
    if b.ndim == 0 and b != INT32_MIN:  # nothing to saturate: skips two passes
        return result
    return np.where((a == INT32_MIN) & (b == INT32_MIN), np.int64(INT32_MAX), result)


def rounding_divide_by_pot(x: Any, exponent: Any) -> np.ndarray:
    """gemmlowp's ``RoundingDivideByPOT``: ``x / 2**exponent`` rounded to nearest, ties
    away from zero.  ``exponent`` (>= 0; a value <= 0 returns ``x``) is one value or
    broadcasts against ``x``, one per element."""
    x = np.asarray(x, dtype=np.int64)
    if np.ndim(exponent) == 0 and exponent <= 0:
        return x
    exponent = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << exponent) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + ((x & mask) > threshold)


def multiply_by_quantized_multiplier(x: Any, multiplier: Any, shift: Any) -> np.ndarray:
    """``x · multiplier · 2**(shift - 31)`` rounded as the reference's
    ``MultiplyByQuantizedMultiplier`` does it, in int64.

    ``multiplier`` and ``shift`` are one pair for all of ``x`` or broadcast against
    it (per output channel along the last axis), so a per-channel requantization
    is one pass instead of one pass per channel.  A left shift that leaves int32
    saturates first, as the int32 pipeline does.
    """
    x = np.asarray(x, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    x = np.clip(x * (np.int64(1) << np.maximum(shift, 0)), INT32_MIN, INT32_MAX)
    return rounding_divide_by_pot(fixed_mul(x, multiplier), np.maximum(-shift, 0))


def saturating_rounding_multiply_by_pot(x: Any, exponent: int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingMultiplyByPOT``: saturating left or rounding right shift."""
    x = np.asarray(x, dtype=np.int64)
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    if exponent == 0:
        return x
    threshold = (1 << (31 - exponent)) - 1
    shifted = np.where(x > threshold, INT32_MAX, x << exponent)
    return np.where(x < -threshold, INT32_MIN, shifted)


def fixed_rescale(x: Any, integer_bits: int, new_integer_bits: int) -> np.ndarray:
    """gemmlowp ``Rescale``: move a raw value from Q(ib) to Q(new_ib)."""
    return saturating_rounding_multiply_by_pot(x, integer_bits - new_integer_bits)


def _exp_on_quarter_interval(a: np.ndarray) -> np.ndarray:
    """exp(a) for Q0.31 ``a`` in [-1/4, 0): Taylor series around -1/8."""
    constant_term = 1895147668  # exp(-1/8)
    one_third = 715827883
    x = a + (1 << 28)  # a + 1/8
    x2 = fixed_mul(x, x)
    x3 = fixed_mul(x2, x)
    x4 = fixed_mul(x2, x2)
    x4_over_4 = saturating_rounding_multiply_by_pot(x4, -2)
    poly = saturating_rounding_multiply_by_pot(fixed_mul(x4_over_4 + x3, one_third) + x2, -1)
    return wrap_int32(constant_term + fixed_mul(constant_term, x + poly))


#: exp(-2**k) in Q0.31 for the barrel shifter of exp_on_negative_values.
EXP_BARREL = (
    (-2, 1672461947),
    (-1, 1302514674),
    (0, 790015084),
    (1, 290630308),
    (2, 39332535),
    (3, 720401),
    (4, 242),
)


def fixed_exp_on_negative_values(a: Any, integer_bits: int) -> np.ndarray:
    """gemmlowp ``exp_on_negative_values``: exp of Q(integer_bits) values <= 0, as Q0.31."""
    a = np.asarray(a, dtype=np.int64)
    fractional_bits = 31 - integer_bits
    one_quarter = 1 << (fractional_bits - 2)
    a_mod_quarter_minus_quarter = (a & (one_quarter - 1)) - one_quarter
    result = _exp_on_quarter_interval(fixed_rescale(a_mod_quarter_minus_quarter, integer_bits, 0))
    remainder = wrap_int32(a_mod_quarter_minus_quarter - a)
    for exponent, multiplier in EXP_BARREL:
        if integer_bits > exponent:
            bit = (remainder >> (fractional_bits + exponent)) & 1
            result = np.where(bit != 0, fixed_mul(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)  # below -32
    return np.where(a == 0, INT32_MAX, result)


def _newton_reciprocal_q2(a: np.ndarray) -> np.ndarray:
    """1/(1+a) for Q0.31 ``a`` in [0, 1), as Q2.29 (three Newton-Raphson steps)."""
    total = a + INT32_MAX
    half_denominator = trunc_div(total + np.where(total >= 0, 1, -1), 2)  # RoundingHalfSum
    x = 1515870810 + fixed_mul(half_denominator, -1010580540)  # 48/17 - 32/17 · d
    for _ in range(3):
        one_minus = (1 << 29) - fixed_mul(half_denominator, x)
        x = wrap_int32(x + saturating_rounding_multiply_by_pot(fixed_mul(x, one_minus), 2))
    return x


def fixed_one_over_one_plus_x(a: Any) -> np.ndarray:
    """gemmlowp ``one_over_one_plus_x_for_x_in_0_1`` (Q0.31 in and out)."""
    x = _newton_reciprocal_q2(np.asarray(a, dtype=np.int64))
    # x/2 exactly, by reading the Q2.29 raw value as Q1.30, then rescaled to Q0.31.
    return saturating_rounding_multiply_by_pot(x, 1)


def fixed_one_minus_x_over_one_plus_x(a: Any) -> np.ndarray:
    """gemmlowp ``one_minus_x_over_one_plus_x_for_x_in_0_1`` (Q0.31 in and out)."""
    x = _newton_reciprocal_q2(np.asarray(a, dtype=np.int64))
    return saturating_rounding_multiply_by_pot(x - (1 << 29), 2)


def fixed_logistic(a: Any, integer_bits: int) -> np.ndarray:
    """gemmlowp ``logistic`` of Q(integer_bits) values, as Q0.31."""
    a = np.asarray(a, dtype=np.int64)
    negative_abs = wrap_int32(np.where(a > 0, -a, a))
    positive = fixed_one_over_one_plus_x(fixed_exp_on_negative_values(negative_abs, integer_bits))
    result = np.where(a > 0, positive, INT32_MAX - positive)
    return np.where(a == 0, 1 << 30, result)


def fixed_tanh(a: Any, integer_bits: int) -> np.ndarray:
    """gemmlowp ``tanh`` of Q(integer_bits) values, as Q0.31."""
    a = np.asarray(a, dtype=np.int64)
    negative_abs = np.where(a < 0, a, wrap_int32(-a))
    # exp(-2|a|): the same raw value read with one more integer bit is 2·(-|a|).
    t = fixed_one_minus_x_over_one_plus_x(
        fixed_exp_on_negative_values(negative_abs, integer_bits + 1)
    )
    result = np.where(a < 0, wrap_int32(-t), t)
    return np.where(a == 0, 0, result)


def calculate_input_radius(integer_bits: int, left_shift: int) -> int:
    """Largest |input| (before rescaling) that does not saturate Q(integer_bits)."""
    max_rescaled = 1.0 * ((1 << integer_bits) - 1) * (1 << (31 - integer_bits)) / (1 << left_shift)
    return int(math.floor(max_rescaled))


def fixed_inv_sqrt_multiplier(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """tflite ``GetInvSqrtQuantizedMultiplierExp`` (reverse shift -1) per element.

    Returns (multiplier, shift) with ``shift <= 0``, such that
    ``1/sqrt(v) ≈ multiplier · 2**(shift - 31)``; used by quantized
    L2_NORMALIZATION.  Inputs 0 and 1 give (INT32_MAX, 0), as the reference:
    for 1 the general computation would reach 2**31, which wraps to a
    negative multiplier and flips the sign of the result.
    """
    original = np.asarray(values, dtype=np.int64)
    x = original.copy()
    shift = np.full(x.shape, 11, dtype=np.int64)
    while True:
        big = x >= (1 << 29)
        if not big.any():
            break
        x = np.where(big, x // 4, x)
        shift += big
    bit_length = np.frexp(x.astype(np.float64))[1].astype(np.int64)
    left_shift_bit_pairs = (32 - bit_length - 1) // 2 - 1
    shift -= left_shift_bit_pairs
    x = x << (2 * left_shift_bit_pairs)
    half_input = saturating_rounding_multiply_by_pot(x >> 1, -1)  # Q3.28
    half_three = (1 << 28) + (1 << 27)
    y = np.full(x.shape, 1 << 28, dtype=np.int64)  # 1.0 in Q3.28
    for _ in range(5):
        y3 = fixed_rescale(fixed_mul(fixed_mul(y, y), y), 9, 3)
        y = fixed_rescale(wrap_int32(fixed_mul(half_three, y) - fixed_mul(half_input, y3)), 6, 3)
    y = fixed_mul(y, 1518500250)  # · sqrt(2)/2
    y = np.where(shift < 0, wrap_int32(y << np.maximum(-shift, 0)), y)
    shift = np.maximum(shift, 0)
    at_most_one = original <= 1
    return np.where(at_most_one, INT32_MAX, y), np.where(at_most_one, 0, -shift)
