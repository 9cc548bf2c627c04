"""Quantized values: their range, their real values, and real values or other
quantizations moved onto them, rounded where the reference rounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...operands import OperandInfo
from .fixed_point import multiply_by_quantized_multiplier, round_half_away
from .fused_activation import fused_activation_bounds


def quantized_range(info: OperandInfo) -> tuple[int, int]:
    """The representable integer range of a quantized operand type."""
    dtype = info.dtype
    limits = np.iinfo(dtype)
    return int(limits.min), int(limits.max)


def dequantize(values: np.ndarray, info: OperandInfo) -> np.ndarray:
    """Real values of a quantized tensor as float32 (per-tensor quantization)."""
    return ((values.astype(np.int32) - info.zero_point) * np.float32(info.scale)).astype(np.float32)


def quantize_float32(real: Any, info: OperandInfo) -> np.ndarray:
    """The reference's ``convertFloat32ToQuant``: ``round(x / scale + zero_point)``.

    Done in float32 (the reference's arithmetic) and rounded half away from
    zero, so box coordinates and scores land on the same integers.
    """
    with np.errstate(all="ignore"):
        scaled = np.asarray(real, dtype=np.float32) / np.float32(info.scale) + np.float32(
            info.zero_point
        )
    lo, hi = quantized_range(info)
    return np.clip(round_half_away(scaled), lo, hi).astype(info.dtype)


def requantize(
    acc: np.ndarray, multiplier: int, shift: int, out: OperandInfo, fuse: int
) -> np.ndarray:
    """int32 accumulators -> ``out``'s quantized type, fused activation clamped."""
    scaled = multiply_by_quantized_multiplier(acc, multiplier, shift) + out.zero_point
    lo, hi = fused_activation_bounds(fuse, out)
    return np.clip(scaled, lo, hi).astype(out.dtype)


def requantize_reference(values: np.ndarray, src: OperandInfo, dst: OperandInfo) -> np.ndarray:
    """NNAPI's ``requantize<T>``: raw ``src`` values moved to ``dst``'s quantization.

    The real value is formed in float32 (an int times the float32 scale), then
    divided by the new scale and offset by the new zero point in double,
    clamped to the type and rounded half away from zero.
    """
    real = (values.astype(np.int32) - np.int32(src.zero_point)).astype(np.float32) * np.float32(
        src.scale
    )
    moved = real.astype(np.float64) / float(np.float32(dst.scale)) + dst.zero_point
    lo, hi = quantized_range(dst)
    return np.clip(round_half_away(moved), lo, hi).astype(dst.dtype)


def same_quantization(a: OperandInfo, b: OperandInfo) -> bool:
    """Equal scale (as float32, like the reference stores it) and zero point."""
    return np.float32(a.scale) == np.float32(b.scale) and a.zero_point == b.zero_point


def bias_scale_matches(input_scale: float, filter_scale: float, bias_scale: float) -> bool:
    """NNAPI's rule: a quantized bias has scale input_scale·filter_scale (to 1e-6)."""
    product = input_scale * filter_scale
    return abs(product - bias_scale) <= 1e-6 * min(product, bias_scale)
