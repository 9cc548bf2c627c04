"""Edges of the fixed-point and requantization helpers (cpu/ops/fixed_point.py,
requantization.py, fused_activation.py) the op tests never reach.

Each case is checked against the independent integer reference of
test_quant_exact.py with zero tolerance, and the integer helpers must hand
back integer arrays (the next stage shifts and masks them).
"""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import FuseCode
from nnburst.codes import OperandCode as T
from nnburst.cpu.ops import fixed_point, fused_activation, requantization
from nnburst.operands import OperandInfo

from .test_quant_exact import (
    INT32_MAX,
    INT32_MIN,
    ref_divide_by_pot,
    ref_high_mul,
    ref_quantize_multiplier,
    ref_requantize,
)


@pytest.mark.parametrize(
    ("real", "want"),
    [
        (0.0, (0, 0)),
        (2.0**-33, (0, 0)),  # below 2**-32 the multiplier flushes to zero
        (2.0**-32, (2**30, -31)),
        (4 * (1 - 2.0**-40), (2**30, 3)),  # the carry adds one to a shift that is not 0
    ],
)
def test_quantize_multiplier_edges(real, want):
    assert ref_quantize_multiplier(real) == want
    assert fixed_point.quantize_multiplier(real) == want


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # a*b + nudge is one below a multiple of 2**31 near 2**61: a float
        # division would round it up to the next integer.
        (INT32_MAX, 2**30 + 1),
        (-INT32_MAX, 2**30 + 1),
        (INT32_MAX, -(2**30) - 1),
        # a*b / 2**31 just below -0.5 rounds to -1, exactly -0.5 to 0.
        (-1, 2**30 + 1),
        (-1, 2**30),
        (0, 2**30),
    ],
)
def test_high_mul_exact_near_two_to_the_62_and_below_minus_a_half(a, b):
    got = fixed_point.fixed_mul(np.array([a]), b)
    assert got.dtype == np.int64
    assert got.tolist() == [ref_high_mul(a, b)]


def test_rounding_divide_by_pot_returns_integers():
    got = fixed_point.rounding_divide_by_pot(np.array([5, -5, 7], dtype=np.int64), 1)
    assert got.dtype == np.int64
    assert got.tolist() == [ref_divide_by_pot(v, 1) for v in (5, -5, 7)]


@pytest.mark.parametrize("x", [2**30, -(2**30), 2**29 + 3, -(2**29) - 3])
def test_multiply_by_quantized_multiplier_saturates_the_shifted_input(x):
    """A left shift that leaves int32 saturates first, as the int32 pipeline does."""
    m, s = fixed_point.quantize_multiplier(4.0)
    assert s == 3
    saturated = max(INT32_MIN, min(INT32_MAX, x * 2**s))
    got = fixed_point.multiply_by_quantized_multiplier(np.array([x], dtype=np.int64), m, s)
    assert got.tolist() == [ref_high_mul(saturated, m)]


def test_requantize_returns_the_output_type():
    info = OperandInfo(T.TENSOR_QUANT8_ASYMM_SIGNED, (3,), 1.0, -10)
    m, s = fixed_point.quantize_multiplier(0.5)
    got = requantization.requantize(np.array([3, -3, 1000], dtype=np.int64), m, s, info, 0)
    assert got.dtype == np.int8
    assert got.tolist() == [ref_requantize(3, 0.5) - 10, ref_requantize(-3, 0.5) - 10, 127]


def test_dequantize_known_values():
    info = OperandInfo(T.TENSOR_QUANT8_ASYMM, (3,), 0.5, 128)
    got = requantization.dequantize(np.array([0, 128, 255], dtype=np.uint8), info)
    assert got.dtype == np.float32
    assert got.tolist() == [-64.0, 0.0, 63.5]


def test_round_half_away_keeps_float32():
    got = fixed_point.round_half_away(np.array([0.5, -0.5, 1.5, -2.5, 0.49], dtype=np.float32))
    assert got.dtype == np.float32
    assert got.tolist() == [1.0, -1.0, 2.0, -3.0, 0.0]


@pytest.mark.parametrize("fuse", [FuseCode.NONE, FuseCode.RELU, FuseCode.RELU1, FuseCode.RELU6])
def test_fused_activation_bounds_never_pass_the_type_range(fuse):
    # scale 1/64: RELU6's 6.0 is 384 steps above the zero point, past 255.
    info = OperandInfo(T.TENSOR_QUANT8_ASYMM, (1,), 1 / 64, 200)
    want = {
        FuseCode.NONE: (0, 255),
        FuseCode.RELU: (200, 255),
        FuseCode.RELU1: (136, 255),
        FuseCode.RELU6: (200, 255),
    }[fuse]
    assert fused_activation.fused_activation_bounds(fuse, info) == want
