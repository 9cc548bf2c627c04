"""Arithmetic shared by the CPU operations: fixed-point requantization,
fused activations and padding.

The fixed-point helpers reproduce the integer math of the NNAPI reference
(gemmlowp's ``SaturatingRoundingDoublingHighMul`` and ``RoundingDivideByPOT``)
vectorised over int64 numpy arrays, so quantized results match the reference
bit for bit instead of drifting like a float shortcut would.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...codes import FuseCode, OperandCode, PaddingCode, ResultCode
from ...errors import NNError
from ...operands import OperandInfo
from ..registry import ExecutionContext, OperationSignature

#: The valid fused-activation codes (0..3).
FUSE_CODES = frozenset(int(c) for c in FuseCode)

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


def _trunc_div(a: np.ndarray, d: int) -> np.ndarray:
    """C-style integer division (rounds toward zero)."""
    return np.where(a >= 0, a // d, -((-a) // d))


def saturating_rounding_doubling_high_mul(a: np.ndarray, b: int) -> np.ndarray:
    a = np.asarray(a, dtype=np.int64)
    ab = a * np.int64(b)
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    result = _trunc_div(ab + nudge, 1 << 31)
    if b == INT32_MIN:
        result = np.where(a == INT32_MIN, INT32_MAX, result)
    return result.astype(np.int64)


def rounding_divide_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.int64)
    if exponent <= 0:
        return x
    mask = np.int64((1 << exponent) - 1)
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0).astype(np.int64)
    return (x >> exponent) + (remainder > threshold).astype(np.int64)


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """``x · multiplier · 2**(shift-31)`` rounded as the reference does (int64 out)."""
    left = shift if shift > 0 else 0
    right = -shift if shift < 0 else 0
    x = np.asarray(x, dtype=np.int64) * np.int64(1 << left)
    x = np.clip(x, INT32_MIN, INT32_MAX)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, multiplier), right)


#: A float fused activation as the clamp it is (NONE: unbounded).
FLOAT_ACTIVATION_BOUNDS: dict[int, tuple[float, float]] = {
    FuseCode.NONE: (-np.inf, np.inf),
    FuseCode.RELU: (0.0, np.inf),
    FuseCode.RELU1: (-1.0, 1.0),
    FuseCode.RELU6: (0.0, 6.0),
}


def apply_fused_activation(x: np.ndarray, fuse: int) -> np.ndarray:
    """Fused activation on float data."""
    fuse = FuseCode(fuse)
    if fuse == FuseCode.RELU:
        return np.maximum(x, 0, dtype=x.dtype)
    if fuse == FuseCode.RELU1:
        return np.clip(x, -1, 1).astype(x.dtype)
    if fuse == FuseCode.RELU6:
        return np.clip(x, 0, 6).astype(x.dtype)
    return x


def quantized_range(info: OperandInfo) -> tuple[int, int]:
    """The representable integer range of a quantized operand type."""
    dtype = info.dtype
    limits = np.iinfo(dtype)
    return int(limits.min), int(limits.max)


def dequantize(values: np.ndarray, info: OperandInfo) -> np.ndarray:
    """Real values of a quantized tensor as float32 (per-tensor quantization)."""
    return ((values.astype(np.int32) - info.zero_point) * np.float32(info.scale)).astype(np.float32)


def padding_for_scheme(
    in_size: int, stride: int, filter_size: int, scheme: int, dilation: int = 1
) -> tuple[int, int]:
    """(head, tail) explicit padding for an implicit padding scheme."""
    if PaddingCode(scheme) == PaddingCode.VALID:
        return 0, 0
    effective = (filter_size - 1) * dilation + 1
    out_size = (in_size + stride - 1) // stride
    needed = max(0, (out_size - 1) * stride + effective - in_size)
    return needed // 2, needed - needed // 2


# ---------------------------------------------------------------------------
# Helpers for the windowed (conv/pool), fully connected and recurrent
# operations: shared by conv.py, pooling.py, fully_connected.py,
# recurrent.py and lsh_projection.py.
# ---------------------------------------------------------------------------

#: types a float operation accepts (float16 is computed in float32/64 and cast back).
FLOAT_TENSOR_CODES = (OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16)
#: asymmetric 8-bit quantized tensor types.
QUANT8_ASYMM_CODES = (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED)


def op_failed(code: Any, message: str) -> NNError:
    """An execution-time OP_FAILED error naming the operation."""
    return NNError(f"{getattr(code, 'name', code)}: {message}", ResultCode.OP_FAILED)


#: The most bytes one tensor may take when its size comes from another tensor's
#: *values* (FILL's dims, TILE's multiples, PAD's paddings): eight bytes of a
#: request must not make the driver allocate gigabytes.  ``nnburst serve
#: --max-tensor-bytes`` sets it for a service.
MAX_TENSOR_BYTES = 256 << 20


def pad_constant(x: np.ndarray, paddings: np.ndarray, value: Any, dtype: Any = None) -> np.ndarray:
    """``x`` with ``paddings`` ([rank, 2] before/after counts) of ``value`` around it:
    one buffer, its border filled and ``x`` copied in (``np.pad`` costs ~100 µs of
    Python per call)."""
    before = paddings[:, 0].tolist()
    shape = tuple(d + int(p.sum()) for d, p in zip(x.shape, paddings))
    inner = tuple(slice(b, b + d) for b, d in zip(before, x.shape))
    out = bordered(shape, inner, value, dtype or x.dtype)
    out[inner] = x
    return out


def bordered(
    shape: tuple[int, ...], inner: tuple[slice, ...], value: Any, dtype: Any
) -> np.ndarray:
    """A new ``shape`` array holding ``value`` everywhere outside ``inner`` (whose
    elements are left for the caller to write): filling only the border saves a
    whole pass over the array when the padding is thin."""
    out = np.empty(shape, dtype)
    for axis, (part, size) in enumerate(zip(inner, shape)):
        lead = (slice(None),) * axis
        if part.start:
            out[(*lead, slice(0, part.start))] = value
        if part.stop < size:
            out[(*lead, slice(part.stop, None))] = value
    return out


def check_allocation(code: Any, shape: Collection[int], dtype: Any) -> None:
    """Refuse, before allocating, a ``shape`` tensor over :data:`MAX_TENSOR_BYTES`."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise op_failed(
            code,
            f"a {list(shape)} output would take {nbytes} bytes, over the "
            f"{MAX_TENSOR_BYTES}-byte limit on one tensor",
        )


def require_operand_counts(sig: Any, inputs: Collection[int], outputs: int) -> None:
    """Fail unless the operation has one of ``inputs`` inputs and ``outputs`` outputs."""
    if len(sig.inputs) not in inputs:
        want = " or ".join(str(n) for n in sorted(inputs))
        raise sig.fail(f"expected {want} inputs, got {len(sig.inputs)}")
    if len(sig.outputs) != outputs:
        raise sig.fail(f"expected {outputs} outputs, got {len(sig.outputs)}")


def require_operand_type(
    sig: Any, index: int, allowed: Collection[OperandCode], name: str, output: bool = False
) -> OperandInfo:
    """Fail unless input (or output) ``index`` has one of the ``allowed`` types."""
    info = (sig.outputs if output else sig.inputs)[index]
    if info.code not in allowed:
        kind = "output" if output else "input"
        names = ", ".join(OperandCode(c).name for c in allowed)
        raise sig.fail(f"{kind} {index} ({name}) has type {info.code.name}; expected {names}")
    return info


def require_operand_rank(
    sig: Any, index: int, ranks: Collection[int], name: str, output: bool = False
) -> None:
    """Fail when the operand's rank is known and not one of ``ranks``."""
    info = (sig.outputs if output else sig.inputs)[index]
    if info.dimensions is not None and len(info.dimensions) not in ranks:
        kind = "output" if output else "input"
        want = " or ".join(str(r) for r in sorted(ranks))
        raise sig.fail(f"{kind} {index} ({name}) has rank {len(info.dimensions)}; expected {want}")


def known_dim(info: OperandInfo, axis: int) -> int | None:
    """Dimension ``axis`` when declared (non-zero), else ``None``."""
    dims = info.dimensions
    if dims is None or not -len(dims) <= axis < len(dims) or dims[axis] <= 0:
        return None
    return dims[axis]


def constant_scalar(sig: Any, index: int) -> Any:
    """The Python value of constant scalar input ``index``, ``None`` when not constant."""
    value = sig.constants.get(index)
    return None if value is None else np.asarray(value).item()


def bias_scale_matches(input_scale: float, filter_scale: float, bias_scale: float) -> bool:
    """NNAPI's rule: a quantized bias has scale input_scale·filter_scale (to 1e-6)."""
    product = input_scale * filter_scale
    return abs(product - bias_scale) <= 1e-6 * min(product, bias_scale)


def requantize(
    acc: np.ndarray, multiplier: int, shift: int, out: OperandInfo, fuse: int
) -> np.ndarray:
    """int32 accumulators -> ``out``'s quantized type, fused activation clamped."""
    scaled = multiply_by_quantized_multiplier(acc, multiplier, shift) + out.zero_point
    lo, hi = fused_activation_bounds(fuse, out)  # defined below, with the reference's rounding
    return np.clip(scaled, lo, hi).astype(out.dtype)


def to_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return np.transpose(x, (0, 2, 3, 1)) if nchw else x


def from_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2))) if nchw else x


@dataclass(frozen=True)
class WindowArgs:
    """Input positions of the scalar parameters of a 2-D windowed operation.

    CONV_2D, DEPTHWISE_CONV_2D and the pools share one parameter scheme: after
    the tensors come either a padding code (implicit) or four explicit pads
    (left, right, top, bottom), then stride_w, stride_h, op-specific extras
    (depth multiplier, filter size), the fused activation and, from NNAPI 1.2,
    an optional NCHW flag and optional dilation factors (w, h).
    """

    implicit: bool
    positions: dict[str, int]


def window_args(sig: Any, first: int, extras: tuple[str, ...], dilation: bool) -> WindowArgs:
    """Decide implicit vs explicit padding from the input count and types."""
    n = len(sig.inputs)
    implicit_base = first + 4 + len(extras)
    explicit_base = first + 7 + len(extras)
    implicit = n == implicit_base or (
        n > implicit_base and sig.inputs[implicit_base].code == OperandCode.BOOL
    )
    base = implicit_base if implicit else explicit_base
    allowed = (base, base + 1, base + 3) if dilation else (base, base + 1)
    if n not in allowed:
        counts = sorted(
            {implicit_base, implicit_base + 1, explicit_base, explicit_base + 1}
            | ({implicit_base + 3, explicit_base + 3} if dilation else set())
        )
        raise sig.fail(f"expected {', '.join(map(str, counts))} inputs, got {n}")
    positions: dict[str, int] = {}
    i = first
    if implicit:
        positions["padding_scheme"] = i
        i += 1
    else:
        for name in ("pad_left", "pad_right", "pad_top", "pad_bottom"):
            positions[name] = i
            i += 1
    for name in ("stride_w", "stride_h", *extras, "fuse"):
        positions[name] = i
        i += 1
    if n > base:
        positions["nchw"] = i
    if n > base + 1:
        positions["dilation_w"] = i + 1
        positions["dilation_h"] = i + 2
    return WindowArgs(implicit, positions)


def check_window_arg_types(sig: Any, args: WindowArgs) -> None:
    for name, index in args.positions.items():
        want = OperandCode.BOOL if name == "nchw" else OperandCode.INT32
        require_operand_type(sig, index, (want,), name)


def window_values(args: WindowArgs, value: Callable[[int], Any]) -> dict[str, Any]:
    """Parameter name -> Python value (``None`` where ``value`` does not know it)."""
    values: dict[str, Any] = {"nchw": False, "dilation_w": 1, "dilation_h": 1}
    for name, index in args.positions.items():
        values[name] = value(index)
    return values


def check_window_values(values: dict[str, Any], fail: Callable[[str], Exception]) -> None:
    """Range checks on whatever parameter values are known."""
    for name, v in values.items():
        if v is None or name == "nchw":
            continue
        if name == "padding_scheme":
            if v not in (int(PaddingCode.SAME), int(PaddingCode.VALID)):
                raise fail(f"padding scheme {v} is not SAME (1) or VALID (2)")
        elif name == "fuse":
            if v not in FUSE_CODES:
                raise fail(f"fused activation {v} is not a FuseCode (0..3)")
        elif name.startswith("pad_"):
            if v < 0:
                raise fail(f"{name} is {v}; padding must be >= 0")
        elif v < 1:
            raise fail(f"{name} is {v}; it must be >= 1")


@dataclass(frozen=True)
class Window2D:
    """Resolved padding, strides, dilation and output size for one input size."""

    pad_top: int
    pad_bottom: int
    pad_left: int
    pad_right: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int
    out_h: int
    out_w: int


def resolve_window(
    values: dict[str, Any],
    in_h: int,
    in_w: int,
    filter_h: int,
    filter_w: int,
    fail: Callable[[str], Exception],
) -> Window2D:
    """Explicit padding and output size, as NNAPI's reference computes them."""
    sh, sw = int(values["stride_h"]), int(values["stride_w"])
    dh, dw = int(values["dilation_h"]), int(values["dilation_w"])
    if "padding_scheme" in values:
        pt, pb = padding_for_scheme(in_h, sh, filter_h, values["padding_scheme"], dh)
        pl, pr = padding_for_scheme(in_w, sw, filter_w, values["padding_scheme"], dw)
    else:
        pt, pb = int(values["pad_top"]), int(values["pad_bottom"])
        pl, pr = int(values["pad_left"]), int(values["pad_right"])
    eff_h = (filter_h - 1) * dh + 1
    eff_w = (filter_w - 1) * dw + 1
    span_h = in_h + pt + pb - eff_h
    span_w = in_w + pl + pr - eff_w
    if span_h < 0 or span_w < 0:
        raise fail(
            f"the {filter_h}x{filter_w} window (dilation {dh}x{dw}) does not fit the padded "
            f"{in_h}x{in_w} input"
        )
    return Window2D(pt, pb, pl, pr, sh, sw, dh, dw, span_h // sh + 1, span_w // sw + 1)


def window_view(
    x: np.ndarray, win: Window2D, filter_h: int, filter_w: int, pad_value: Any = 0
) -> np.ndarray:
    """All windows of an NHWC tensor: a [N, out_h, out_w, C, filter_h, filter_w] view.

    The input is padded once; the windows are a strided view of the padded
    copy, so pooling can reduce over them and convolution can reshape them into
    an im2col matrix without any Python loop over output pixels.
    """
    if win.pad_top or win.pad_bottom or win.pad_left or win.pad_right:
        x = np.pad(
            x,
            ((0, 0), (win.pad_top, win.pad_bottom), (win.pad_left, win.pad_right), (0, 0)),
            constant_values=pad_value,
        )
    eff_h = (filter_h - 1) * win.dilation_h + 1
    eff_w = (filter_w - 1) * win.dilation_w + 1
    windows = np.lib.stride_tricks.sliding_window_view(x, (eff_h, eff_w), axis=(1, 2))
    return windows[
        :,
        : (win.out_h - 1) * win.stride_h + 1 : win.stride_h,
        : (win.out_w - 1) * win.stride_w + 1 : win.stride_w,
        :,
        :: win.dilation_h,
        :: win.dilation_w,
    ]


# ---------------------------------------------------------------------------
# Reference rounding, activation bounds and gemmlowp-style fixed point on whole
# arrays.  Appended; shared by elementwise.py, activation.py and
# normalization.py.  Raw int32 fixed-point values are held in int64 arrays so
# intermediate products never overflow; results equal the int32 reference.
# ---------------------------------------------------------------------------


def round_half_away(x: Any) -> np.ndarray:
    """``std::round``: ties go away from zero (``np.rint`` would go to even)."""
    x = np.asarray(x)
    whole = np.trunc(x)
    return whole + np.where(np.abs(x - whole) >= 0.5, np.sign(x), 0).astype(x.dtype)


def fused_activation_bounds(fuse: int, info: OperandInfo) -> tuple[int, int]:
    """Clamp bounds of a fused activation in ``info``'s quantized domain.

    Same as the reference's ``CalculateActivationRange{Uint8,Int8}``: the real
    bound is divided by the float32 scale in float32 and rounded half away from
    zero, so ties and float32 rounding land where the reference puts them.
    """
    qmin, qmax = quantized_range(info)
    scale = np.float32(info.scale)

    def q(v: float) -> int:
        with np.errstate(all="ignore"):
            return info.zero_point + int(round_half_away(np.float32(v) / scale))

    fuse = FuseCode(fuse)
    if fuse == FuseCode.RELU:
        return max(qmin, q(0.0)), qmax
    if fuse == FuseCode.RELU6:
        return max(qmin, q(0.0)), min(qmax, q(6.0))
    if fuse == FuseCode.RELU1:
        return max(qmin, q(-1.0)), min(qmax, q(1.0))
    return qmin, qmax


def wrap_int32(x: np.ndarray) -> np.ndarray:
    """Two's-complement int32 wrap-around of int64 values (C int32 overflow)."""
    x = np.asarray(x, dtype=np.int64)
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def fixed_mul(a: Any, b: Any) -> np.ndarray:
    """``SaturatingRoundingDoublingHighMul`` with both operands arrays."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    x = ab + np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    result = np.where(x >= 0, x >> 31, -((-x) >> 31))
    return np.where((a == INT32_MIN) & (b == INT32_MIN), np.int64(INT32_MAX), result)


def rounding_divide_by_pot_each(x: Any, exponent: Any) -> np.ndarray:
    """``RoundingDivideByPOT`` where the exponent may differ per element."""
    x = np.asarray(x, dtype=np.int64)
    exponent = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << exponent) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + ((x & mask) > threshold)


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
_EXP_BARREL = (
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
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            bit = (remainder >> (fractional_bits + exponent)) & 1
            result = np.where(bit != 0, fixed_mul(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)  # below -32
    return np.where(a == 0, INT32_MAX, result)


def _newton_reciprocal_q2(a: np.ndarray) -> np.ndarray:
    """1/(1+a) for Q0.31 ``a`` in [0, 1), as Q2.29 (three Newton-Raphson steps)."""
    total = a + INT32_MAX
    half_denominator = _trunc_div(total + np.where(total >= 0, 1, -1), 2)  # RoundingHalfSum
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


# ---------------------------------------------------------------------------
# Helpers for the NNAPI 1.2/1.3 element-wise, reduction and data-movement
# operations.  Appended; shared by compare.py, unary.py, binary.py, reduce.py,
# tensor.py, normalization_v2.py and resize_nearest.py.
# ---------------------------------------------------------------------------


def float_scalar_code(tensor_code: OperandCode) -> OperandCode:
    """The scalar type NNAPI pairs with a tensor: FLOAT16 for TENSOR_FLOAT16, else FLOAT32."""
    return OperandCode.FLOAT16 if tensor_code == OperandCode.TENSOR_FLOAT16 else OperandCode.FLOAT32


def normalize_axis(axis: int, rank: int, fail: Callable[[str], Exception]) -> int:
    """An axis in ``[-rank, rank)`` as a non-negative index (``fail`` builds the error)."""
    if not -rank <= axis < rank:
        raise fail(f"axis {axis} is out of range [{-rank}, {rank})")
    return axis % rank


def check_broadcastable(sig: Any, first: int, second: int) -> None:
    """Fail when the declared shapes of two inputs can never broadcast together."""
    a, b = sig.inputs[first].dimensions, sig.inputs[second].dimensions
    if a is None or b is None:
        return
    for x, y in zip(reversed(a), reversed(b)):
        if x > 0 and y > 0 and x != y and x != 1 and y != 1:
            raise sig.fail(
                f"input {first} dimensions {a} and input {second} dimensions {b} "
                "cannot be broadcast together"
            )


def broadcast_shape_or_fail(code: Any, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's (= NNAPI's) broadcast shape, or OP_FAILED when the shapes do not broadcast."""
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise op_failed(code, f"shapes {', '.join(map(str, shapes))} cannot be broadcast") from None


def same_quantization(a: OperandInfo, b: OperandInfo) -> bool:
    """Equal scale (as float32, like the reference stores it) and zero point."""
    return np.float32(a.scale) == np.float32(b.scale) and a.zero_point == b.zero_point


def require_same_quantization(sig: Any, src: OperandInfo, index: int = 0) -> None:
    """Quant8 data only: output ``index`` must carry ``src``'s scale and zero point."""
    out = sig.outputs[index]
    if src.code in QUANT8_ASYMM_CODES and not same_quantization(src, out):
        raise sig.fail(
            f"output {index} scale and zero point ({out.scale}, {out.zero_point}) "
            f"must equal the input's ({src.scale}, {src.zero_point})"
        )


def require_dims_like(sig: Any, src: OperandInfo, index: int = 0) -> None:
    """Fail when output ``index``'s declared dimensions contradict ``src``'s."""
    a, b = src.dimensions, sig.outputs[index].dimensions
    if a is None or not b:
        return
    if len(a) != len(b) or any(x > 0 and y > 0 and x != y for x, y in zip(a, b)):
        raise sig.fail(f"output {index} dimensions {b} differ from the input's {a}")


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


# ---------------------------------------------------------------------------
# Helpers for the NNAPI 1.2/1.3 convolution, ROI, detection and quantized LSTM
# operations.  Appended; shared by conv_v12.py, roi.py, detection.py and
# quantized_lstm.py.
# ---------------------------------------------------------------------------


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


def conv_multiplier(
    input_scale: float, filter_scale: float, output_scale: float
) -> tuple[int, int]:
    """``GetQuantizedConvolutionMultipler`` + ``QuantizeMultiplier`` as the reference does them.

    The input x filter scale product is formed in float32 before it is widened,
    which can move the multiplier by one unit against a pure double product.
    """
    product = float(np.float32(input_scale) * np.float32(filter_scale))
    return quantize_multiplier(product / float(np.float32(output_scale)))


def optional_input(ctx: Any, i: int) -> np.ndarray | None:
    """Input ``i``, or ``None`` when omitted (no value, or a model input given no data)."""
    value = ctx.inputs[i] if i < len(ctx.inputs) else None
    if value is None or np.asarray(value).size == 0:
        return None
    return np.asarray(value)


def maybe_omitted(sig: Any, i: int) -> bool:
    """True when input ``i`` is, or may at execution be, an omitted optional operand."""
    if i in sig.constants:
        return sig.constants[i] is None
    dims = sig.inputs[i].dimensions
    return dims is None or 0 in dims


def require_int_vector(sig: OperationSignature, index: int, name: str) -> None:
    """Input ``index`` must be a TENSOR_INT32 of rank 1 (shapes, axes, paddings)."""
    require_operand_type(sig, index, (OperandCode.TENSOR_INT32,), name)
    require_operand_rank(sig, index, (1,), name)


def constant_ints(sig: OperationSignature, index: int) -> np.ndarray | None:
    """A constant TENSOR_INT32 input as int64, ``None`` when not constant."""
    value = sig.constants.get(index)
    return None if value is None else np.asarray(value, dtype=np.int64)


def int_input(ctx: ExecutionContext, index: int) -> np.ndarray:
    """An integer input widened to int64, so index arithmetic cannot overflow."""
    return np.asarray(ctx.input(index), dtype=np.int64)


#: Makes the exception for a message: ``sig.fail`` (BAD_DATA) or ``ctx.fail`` (OP_FAILED).
Fail = Callable[[str], Exception]


def check_paddings(paddings: np.ndarray, rows: int, fail: Fail) -> np.ndarray:
    """A PAD / SPACE_TO_BATCH paddings tensor: shape [rows, 2], nothing negative."""
    if paddings.shape != (rows, 2):
        raise fail(f"paddings must have shape [{rows}, 2], got {list(paddings.shape)}")
    if (paddings < 0).any():
        raise fail(f"paddings must be non-negative, got {paddings.tolist()}")
    return paddings


# ---------------------------------------------------------------------------
# Per-channel requantization on whole arrays.  Appended; shared by conv.py,
# conv_v12.py and fully_connected.py through windows.py.
# ---------------------------------------------------------------------------


def multiply_by_quantized_multipliers(
    x: Any, multipliers: np.ndarray, shifts: np.ndarray
) -> np.ndarray:
    """``multiply_by_quantized_multiplier`` with one (multiplier, shift) per element.

    ``multipliers`` and ``shifts`` broadcast against ``x`` (per output channel
    along the last axis), so a per-channel requantization is one pass instead
    of one pass per channel; the integer steps are the scalar version's.
    """
    x = np.asarray(x, dtype=np.int64)
    shifts = np.asarray(shifts, dtype=np.int64)
    x = np.clip(x * (np.int64(1) << np.maximum(shifts, 0)), INT32_MIN, INT32_MAX)
    return rounding_divide_by_pot_each(fixed_mul(x, multipliers), np.maximum(-shifts, 0))
