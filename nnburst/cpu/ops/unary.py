"""Element-wise unary operations: ABS, EXP, LOG, SIN, SQRT, RSQRT, NEG, CAST,
QUANTIZE, ELU and HARD_SWISH.

Float math runs in float32 and float16 results are rounded from it, exactly
as the reference widens ``_Float16`` to ``float`` for these functions.
TENSOR_INT32 ABS and NEG wrap like C int32 (``-INT32_MIN`` stays
``INT32_MIN``).  CAST ignores quantization and converts values like C++
``static_cast`` with the reference's clamp to [0, 255] for uint8 targets
(float to int truncates toward zero; out-of-range and NaN saturate as on
ARM).  QUANTIZE divides by the output scale in float32, rounds half away
from zero and clamps (one C pass).  Quantized HARD_SWISH reproduces TFLite's 16-bit
fixed-point pipeline bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..._bindings import plan as c_plan
from ...codes import OperandCode, OperationCode
from ...operands import OperandInfo
from ..registry import ExecutionContext, Kernel, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    float_scalar_code,
    op_failed,
    require_dims_like,
    require_operand_counts,
    require_operand_type,
)
from .fixed_point import (
    INT32_MAX,
    INT32_MIN,
    quantize_multiplier,
    round_half_away,
    rounding_divide_by_pot,
)
from .native import quantize_f32
from .requantization import quantized_range

_F32 = np.float32
_INT32 = (OperandCode.TENSOR_INT32,)

_FLOAT_FUNCS: dict[OperationCode, Callable[[np.ndarray], np.ndarray]] = {
    OperationCode.EXP: np.exp,
    OperationCode.LOG: np.log,
    OperationCode.SIN: np.sin,
    OperationCode.SQRT: np.sqrt,
    OperationCode.RSQRT: lambda x: _F32(1) / np.sqrt(x),
}

_TYPES: dict[OperationCode, tuple[OperandCode, ...]] = {
    OperationCode.ABS: FLOAT_TENSOR_CODES + _INT32,
    OperationCode.NEG: FLOAT_TENSOR_CODES + _INT32,
    **{code: FLOAT_TENSOR_CODES for code in _FLOAT_FUNCS},
}


def _validate_same_type(sig: OperationSignature, types: tuple[OperandCode, ...]) -> OperandInfo:
    info = require_operand_type(sig, 0, types, "input")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_dims_like(sig, info)
    return info


# --- ABS, NEG, EXP, LOG, SIN, SQRT, RSQRT ------------------------------------------


def _validate_math(sig: OperationSignature) -> None:
    require_operand_counts(sig, (1,), 1)
    _validate_same_type(sig, _TYPES[sig.code])


def _execute_math(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    out = ctx.output_info(0)
    if out.code == OperandCode.TENSOR_INT32:
        with np.errstate(over="ignore"):
            result = np.abs(x) if ctx.code == OperationCode.ABS else np.negative(x)
        return [result.astype(np.int32, copy=False)]
    x32 = x.astype(_F32)
    with np.errstate(all="ignore"):
        if ctx.code == OperationCode.ABS:
            result = np.abs(x32)
        elif ctx.code == OperationCode.NEG:
            result = np.negative(x32)
        else:
            result = _FLOAT_FUNCS[ctx.code](x32)
    return [result.astype(out.dtype)]


# --- CAST ---------------------------------------------------------------------------

#: types CAST converts between freely (NNAPI 1.2).
_CAST_ANY = FLOAT_TENSOR_CODES + _INT32 + (OperandCode.TENSOR_QUANT8_ASYMM,)
#: types CAST may only copy to the same type (NNAPI 1.3).
_CAST_SAME = (
    OperandCode.TENSOR_BOOL8,
    OperandCode.TENSOR_INT32,
    OperandCode.TENSOR_QUANT16_ASYMM,
    OperandCode.TENSOR_QUANT16_SYMM,
    OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
    OperandCode.TENSOR_QUANT8_SYMM,
)


def _validate_cast(sig: OperationSignature) -> None:
    require_operand_counts(sig, (1,), 1)
    info = require_operand_type(sig, 0, tuple(dict.fromkeys(_CAST_ANY + _CAST_SAME)), "input")
    if info.code in _CAST_ANY:
        require_operand_type(sig, 0, _CAST_ANY, "output", output=True)
    else:
        require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_dims_like(sig, info)


def _float_to_int(x: np.ndarray, lo: int, hi: int, dtype: np.dtype) -> np.ndarray:
    """C ``static_cast`` of floats: truncate toward zero, saturate, NaN -> 0."""
    x = np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=hi, neginf=lo)
    return np.clip(np.trunc(x), lo, hi).astype(dtype)


def _execute_cast(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    src, out = ctx.signature.inputs[0], ctx.output_info(0)
    if out.code == src.code:
        return [x.copy()]
    if out.code in FLOAT_TENSOR_CODES:
        with np.errstate(over="ignore"):  # too large for float16: inf, as in C++
            return [x.astype(out.dtype)]
    lo, hi = (0, 255) if out.code == OperandCode.TENSOR_QUANT8_ASYMM else (INT32_MIN, INT32_MAX)
    if src.code in FLOAT_TENSOR_CODES:
        return [_float_to_int(x, lo, hi, out.dtype)]
    return [np.clip(x.astype(np.int64), lo, hi).astype(out.dtype)]


# --- QUANTIZE -----------------------------------------------------------------------


def _validate_quantize(sig: OperationSignature) -> None:
    require_operand_counts(sig, (1,), 1)
    info = require_operand_type(sig, 0, FLOAT_TENSOR_CODES, "input")
    out = require_operand_type(sig, 0, QUANT8_ASYMM_CODES, "output", output=True)
    if not out.scale > 0:
        raise sig.fail(f"output scale {out.scale} must be positive")
    require_dims_like(sig, info)


def _quantize_numpy(x: np.ndarray, out: OperandInfo) -> np.ndarray:
    """QUANTIZE in numpy: the specification ``native.quantize_f32`` (what runs;
    numpy's dozen passes took 0.2 ms on a 96x96x3 image) is tested against."""
    lo, hi = quantized_range(out)
    with np.errstate(all="ignore"):
        scaled = round_half_away(x.astype(_F32) / _F32(out.scale)) + _F32(out.zero_point)
    # std::min(hi, NaN) keeps hi, so NaN lands on the top of the range.
    result = np.where(np.isnan(scaled), hi, np.clip(scaled, lo, hi))
    return result.astype(out.dtype)


def _execute_quantize(ctx: ExecutionContext) -> list[np.ndarray]:
    out = ctx.output_info(0)
    return [quantize_f32(ctx.input(0), out.scale, out.zero_point, out.dtype)]


def _bind_quantize(sig: OperationSignature, state: object) -> Kernel:
    out = sig.outputs[0]
    scale, zero_point, dtype = out.scale, out.zero_point, out.dtype

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if x is None:
            raise sig.fail("input 0 is required but was omitted")
        return [quantize_f32(x, scale, zero_point, dtype)]

    dims = sig.inputs[0].dimensions or ()
    if sig.inputs[0].code != OperandCode.TENSOR_FLOAT32 or not dims or 0 in dims:
        return kernel
    count = int(np.prod(dims))
    params = c_plan.quantize_params(scale, zero_point, dtype)
    return c_plan.mark(kernel, c_plan.KernelStep(c_plan.QUANTIZE, params, count))


# --- ELU ----------------------------------------------------------------------------


def _validate_elu(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    info = _validate_same_type(sig, FLOAT_TENSOR_CODES)
    require_operand_type(sig, 1, (float_scalar_code(info.code),), "alpha")


def _execute_elu(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0).astype(_F32)
    alpha = _F32(ctx.scalar(1))
    with np.errstate(all="ignore"):
        result = np.maximum(_F32(0), x) + np.minimum(_F32(0), alpha * (np.exp(x) - _F32(1)))
    return [result.astype(ctx.output_info(0).dtype)]


# --- HARD_SWISH ---------------------------------------------------------------------

_INT16_MIN, _INT16_MAX = -(1 << 15), (1 << 15) - 1


def _validate_hard_swish(sig: OperationSignature) -> None:
    require_operand_counts(sig, (1,), 1)
    _validate_same_type(sig, FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES)


def _wrap_int16(x: np.ndarray) -> np.ndarray:
    return ((x + (1 << 15)) & 0xFFFF) - (1 << 15)


def _int16_rounding_high_mul(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` on int16 (values in int64)."""
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    total = ab + nudge
    result = np.where(total >= 0, total >> 15, -((-total) >> 15))  # C division, toward zero
    return np.where((a == _INT16_MIN) & (b == _INT16_MIN), _INT16_MAX, _wrap_int16(result))


def _int16_doubling_high_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """TFLite ``SaturatingDoublingHighMul``: like the above but truncating (SQDMULH)."""
    ab = a * b
    result = np.where(ab >= 0, ab >> 15, -((-ab) >> 15))
    return np.where((a == _INT16_MIN) & (b == _INT16_MIN), _INT16_MAX, _wrap_int16(result))


def _saturating_left_shift16(x: np.ndarray, amount: int) -> np.ndarray:
    return np.clip(x * (1 << amount), _INT16_MIN, _INT16_MAX)


def _int16_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier, then the int32 significand rounded down to int16 (TFLite)."""
    multiplier, exponent = quantize_multiplier(real)
    if multiplier >= INT32_MAX - (1 << 15):
        return _INT16_MAX, exponent
    return (multiplier + (1 << 15)) >> 16, exponent


def _hard_swish_quant(ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
    src, out = ctx.signature.inputs[0], ctx.output_info(0)
    hires_scale = _F32(1.0 / 128.0) * _F32(src.scale)
    out_mult, out_exp = _int16_multiplier(float(hires_scale / _F32(out.scale)))
    relu_mult, relu_exp = _int16_multiplier(float(hires_scale / _F32(3.0 / 32768.0)))
    if out_exp > 0:
        raise op_failed(
            ctx.code,
            "the output scale is too small for the input scale "
            "(the output multiplier exponent must be <= 0)",
        )
    value = x.astype(np.int64) - src.zero_point
    hires = _wrap_int16(value * 128)
    preshift_output = _int16_rounding_high_mul(hires, out_mult)
    reluish = hires
    if relu_exp > 0:
        reluish = _saturating_left_shift16(reluish, relu_exp - 1)
    reluish = _int16_rounding_high_mul(reluish, relu_mult)
    if relu_exp > 0:
        reluish = _saturating_left_shift16(reluish, 1)
    elif relu_exp < 0:
        reluish = rounding_divide_by_pot(reluish, -relu_exp)
    reluish = (reluish + (1 << 15)) >> 1  # [-1, 1] -> [0, 1] in Q0.15
    result = rounding_divide_by_pot(_int16_doubling_high_mul(reluish, preshift_output), -out_exp)
    result = _wrap_int16(result + out.zero_point)  # the reference adds in int16
    lo, hi = quantized_range(out)
    return np.clip(result, lo, hi).astype(out.dtype)


def _execute_hard_swish(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    out = ctx.output_info(0)
    if out.code in QUANT8_ASYMM_CODES:
        return [_hard_swish_quant(ctx, x)]
    x32 = x.astype(_F32)
    with np.errstate(all="ignore"):  # -inf * 0 is NaN, as in C++
        result = x32 * np.minimum(_F32(6), np.maximum(_F32(0), x32 + _F32(3))) / _F32(6)
    return [result.astype(out.dtype)]


def _bind_hard_swish(sig: OperationSignature, state: object) -> Kernel | None:
    """Float32: ``_execute_hard_swish``'s arithmetic in one buffer, without its
    casts (hard-swish is 18 of the 110 operations PP-OCR's classifier runs)."""
    if (
        sig.inputs[0].code != OperandCode.TENSOR_FLOAT32
        or sig.outputs[0].code != OperandCode.TENSOR_FLOAT32
    ):
        return None
    three, six, zero = _F32(3), _F32(6), _F32(0)

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if type(x) is not np.ndarray or x.dtype != np.float32:
            return _execute_hard_swish(ExecutionContext(sig, inputs, state))  # checks and explains
        result = np.add(x, three)
        np.maximum(result, zero, out=result)
        np.minimum(result, six, out=result)
        np.multiply(x, result, out=result)
        np.divide(result, six, out=result)
        return [result]

    return kernel


for _code in _TYPES:
    register(_code, validate=_validate_math, execute=_execute_math)
register(OperationCode.CAST, validate=_validate_cast, execute=_execute_cast)
register(
    OperationCode.QUANTIZE,
    validate=_validate_quantize,
    execute=_execute_quantize,
    bind=_bind_quantize,
)
register(OperationCode.ELU, validate=_validate_elu, execute=_execute_elu)
register(
    OperationCode.HARD_SWISH,
    validate=_validate_hard_swish,
    execute=_execute_hard_swish,
    bind=_bind_hard_swish,
)
