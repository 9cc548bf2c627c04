"""RELU, RELU1, RELU6, LOGISTIC, TANH, SOFTMAX and LOG_SOFTMAX.

Float data (float16 included) is computed in float32 like the reference;
softmax sums in float64, which only moves results closer to the exact value.
Quantized RELUs clamp raw values, since input and output share scale and zero
point.  Quantized LOGISTIC, TANH and SOFTMAX reproduce the reference's integer
pipeline: the centred input is rescaled to a Q4.27 (Q5.26 for softmax)
fixed-point value with a fixed-point multiplier, the function is evaluated in
gemmlowp fixed point and the Q0.31 result is rounded into the fixed output
format (scale 1/256 for LOGISTIC and SOFTMAX, 1/128 centred on 0 for TANH).
Signed 8-bit data uses the same arithmetic shifted by 128.

LOG_SOFTMAX (float only): ``(x - max) * beta - log(sum(exp((x - max) * beta)))``
along an axis.  As in the reference, the shifted logits and the final
subtraction are computed in the tensor's own type (float16 rounds to half)
while the exponentials are taken in double; the sum is accumulated in float64
and rounded once (the reference rounds after every addition, which only loses
accuracy).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from ..._bindings import plan as c_plan
from ...codes import FuseCode, OperandCode, OperationCode
from ...errors import NNError
from ...extensions import MAX_EXTENDED_RANK
from ...operands import OperandInfo
from ..registry import ExecutionContext, Kernel, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    constant_scalar,
    float_scalar_code,
    normalize_axis,
    op_failed,
    require_dims_like,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
)
from .fixed_point import (
    calculate_input_radius,
    fixed_exp_on_negative_values,
    fixed_logistic,
    fixed_mul,
    fixed_one_over_one_plus_x,
    fixed_rescale,
    fixed_tanh,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    wrap_int32,
)
from .fused_activation import fused_activation_bounds
from .native import softmax_quant8
from .requantization import same_quantization

_TYPES = FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES
_SIGNED = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED

_RELU_FUSE = {
    OperationCode.RELU: FuseCode.RELU,
    OperationCode.RELU1: FuseCode.RELU1,
    OperationCode.RELU6: FuseCode.RELU6,
}

#: (scale, zero point for QUANT8_ASYMM) the output of these must have.
_FIXED_OUTPUT = {
    OperationCode.LOGISTIC: (1.0 / 256, 0),
    OperationCode.SOFTMAX: (1.0 / 256, 0),
    OperationCode.TANH: (1.0 / 128, 128),
}


def _validate_tensor_io(sig: OperationSignature) -> OperandInfo:
    """Checks shared by every activation: types, rank <= 4 (higher with the
    nnburst.rank_above_4 extension), output like input."""
    info = require_operand_type(sig, 0, _TYPES, "input")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_operand_rank(sig, 0, range(0, MAX_EXTENDED_RANK + 1), "input")
    require_dims_like(sig, info)
    out = sig.outputs[0]
    if info.code in QUANT8_ASYMM_CODES:
        if sig.code in _FIXED_OUTPUT:
            scale, zero_point = _FIXED_OUTPUT[sig.code]
            if info.code == _SIGNED:
                zero_point -= 128
            if np.float32(out.scale) != np.float32(scale) or out.zero_point != zero_point:
                raise sig.fail(
                    f"a quantized output must have scale {scale} and zero point {zero_point}, "
                    f"got {out.scale} and {out.zero_point}"
                )
        elif not same_quantization(info, out):
            raise sig.fail("the output's scale and zero point must equal the input's")
    return info


def _validate_unary(sig: OperationSignature) -> None:
    require_operand_counts(sig, (1,), 1)
    _validate_tensor_io(sig)


# --- RELU / RELU1 / RELU6 -------------------------------------------------------


def _execute_relu(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    info = ctx.signature.inputs[0]
    out = ctx.output_info(0)
    fuse = _RELU_FUSE[ctx.code]
    if info.code in QUANT8_ASYMM_CODES:
        lo, hi = fused_activation_bounds(fuse, info)
        return [np.clip(x, lo, hi).astype(out.dtype)]
    if x.dtype == out.dtype == np.float32:  # one pass, no copies
        if fuse == FuseCode.RELU:
            return [np.maximum(x, np.float32(0))]
        return [np.minimum(np.maximum(x, np.float32(-1 if fuse == FuseCode.RELU1 else 0)),
                           np.float32(1 if fuse == FuseCode.RELU1 else 6))]  # fmt: skip
    x = x.astype(np.float32)
    if fuse == FuseCode.RELU:
        y = np.maximum(x, np.float32(0))
    elif fuse == FuseCode.RELU1:
        y = np.clip(x, np.float32(-1), np.float32(1))
    else:
        y = np.clip(x, np.float32(0), np.float32(6))
    return [y.astype(out.dtype)]


# --- LOGISTIC / TANH ----------------------------------------------------------


def _input_rescaling(code: OperationCode, real: float) -> tuple[int, int]:
    """(multiplier, left shift) for a real multiplier that must exceed 1."""
    multiplier, shift = quantize_multiplier(real)
    if real <= 1.0 or shift < 0:
        raise op_failed(code, f"input scale is too small (rescaling multiplier {real} <= 1)")
    return multiplier, shift


def _quant8_sigmoid_like(ctx: ExecutionContext) -> np.ndarray:
    """LOGISTIC/TANH on 8-bit data via a Q4.27 fixed-point evaluation."""
    info = ctx.signature.inputs[0]
    out = ctx.output_info(0)
    integer_bits = 4
    real = float(np.float32(info.scale)) * float(1 << (31 - integer_bits))
    multiplier, left_shift = _input_rescaling(ctx.code, real)
    radius = calculate_input_radius(integer_bits, left_shift)
    centred = ctx.input(0).astype(np.int64) - info.zero_point
    rescaled = multiply_by_quantized_multiplier(centred, multiplier, left_shift)
    if ctx.code == OperationCode.LOGISTIC:
        # Q0.31 -> Q23.8: the 1/256-scaled uint8 value.
        value = rounding_divide_by_pot(fixed_logistic(rescaled, integer_bits), 23)
    else:
        # Q0.31 -> Q24.7, recentred on 128.
        value = rounding_divide_by_pot(fixed_tanh(rescaled, integer_bits), 24) + 128
    value = np.minimum(value, 255)
    value = np.where(centred <= -radius, 0, np.where(centred >= radius, 255, value))
    if info.code == _SIGNED:
        value = value - 128
    return value.astype(out.dtype)


def _execute_logistic_tanh(ctx: ExecutionContext) -> list[np.ndarray]:
    info = ctx.signature.inputs[0]
    if info.code in QUANT8_ASYMM_CODES:
        return [_quant8_sigmoid_like(ctx)]
    x = ctx.input(0).astype(np.float32)
    with np.errstate(over="ignore"):
        if ctx.code == OperationCode.LOGISTIC:
            y = np.float32(1) / (np.float32(1) + np.exp(-x))
        else:
            y = np.tanh(x)
    return [y.astype(ctx.output_info(0).dtype)]


# --- SOFTMAX --------------------------------------------------------------------


def _validate_softmax(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2, 3), 1)
    info = _validate_tensor_io(sig)
    require_operand_type(sig, 1, (float_scalar_code(info.code),), "beta")
    beta = constant_scalar(sig, 1)
    if beta is not None and not beta > 0:
        raise sig.fail(f"beta must be positive, got {beta}")
    rank = sig.inputs[0].rank
    if rank is not None and rank == 0:
        raise sig.fail("input must have rank 1 to 4")
    if len(sig.inputs) == 3:
        require_operand_type(sig, 2, (OperandCode.INT32,), "axis")
        axis = constant_scalar(sig, 2)
        if axis is not None and rank is not None and not -rank <= axis < rank:
            raise sig.fail(f"axis {axis} is out of range for rank {rank}")


def _softmax_axis(ctx: ExecutionContext, ndim: int) -> int:
    axis = int(ctx.scalar(2)) if len(ctx.inputs) > 2 and ctx.has_input(2) else -1
    if not -ndim <= axis < ndim:
        raise op_failed(ctx.code, f"axis {axis} is out of range for rank {ndim}")
    return axis % ndim


_DIFF_BITS, _ACCUM_BITS = 5, 12


def _softmax_rescaling(scale: float, beta: float) -> tuple[int, int, int]:
    """(multiplier, left shift, radius): a difference from the row's maximum
    times the multiplier is Q5.26; one more than ``radius`` steps below it
    counts as exp 0.  OP_FAILED when beta times the scale is too small."""
    real = min(
        float(np.float32(beta)) * float(np.float32(scale)) * float(1 << (31 - _DIFF_BITS)),
        float((1 << 31) - 1),
    )
    multiplier, left_shift = _input_rescaling(OperationCode.SOFTMAX, real)
    return multiplier, left_shift, calculate_input_radius(_DIFF_BITS, left_shift)


@functools.lru_cache(maxsize=64)
def _softmax_exps(scale: float, beta: float) -> tuple[np.ndarray, int]:
    """The Q0.31 exponential of each of the 256 differences an 8-bit row can
    have from its maximum (read-only), and the radius: all that depends on
    the input.  Computed by the numpy steps of :func:`_softmax_quant8`, so the
    C loop looking them up agrees with them bit for bit."""
    multiplier, left_shift, radius = _softmax_rescaling(scale, beta)
    diff = -np.arange(256, dtype=np.int64)
    exps = fixed_exp_on_negative_values(
        multiply_by_quantized_multiplier(diff, multiplier, left_shift), _DIFF_BITS
    ).astype(np.int32)
    exps.flags.writeable = False
    return exps, radius


def _softmax_quant8(ctx: ExecutionContext, x: np.ndarray, beta: float) -> np.ndarray:
    """Softmax over the last axis of raw 8-bit data, in the reference's fixed
    point, numpy int64: the specification ``native.softmax_quant8`` (what runs)
    is tested against."""
    info = ctx.signature.inputs[0]
    out = ctx.output_info(0)
    diff_bits, accum_bits = _DIFF_BITS, _ACCUM_BITS
    multiplier, left_shift, radius = _softmax_rescaling(info.scale, beta)
    diff_min = -radius
    raw = x.astype(np.int64)
    diff = raw - raw.max(axis=-1, keepdims=True)
    inside = diff >= diff_min
    exps = fixed_exp_on_negative_values(
        multiply_by_quantized_multiplier(diff, multiplier, left_shift), diff_bits
    )
    in_accum = np.where(inside, fixed_rescale(exps, 0, accum_bits), 0)
    sum_of_exps = wrap_int32(in_accum.sum(axis=-1, keepdims=True))
    # Normalise the sum to [1, 2) and take its reciprocal in Q0.31.
    headroom_plus_one = 32 - np.frexp(sum_of_exps.astype(np.float64))[1].astype(np.int64)
    bits_over_unit = accum_bits - headroom_plus_one
    shifted_minus_one = ((sum_of_exps << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31)
    scale = fixed_one_over_one_plus_x(shifted_minus_one)
    value = rounding_divide_by_pot(fixed_mul(scale, exps), bits_over_unit + 31 - 8)
    if info.code == _SIGNED:
        value = value - 128
    qmin, qmax = np.iinfo(out.dtype).min, np.iinfo(out.dtype).max
    return np.where(inside, np.clip(value, qmin, qmax), qmin).astype(out.dtype)


def _softmax_last_axis(
    x: np.ndarray, axis: int, last: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """``last`` (a softmax over the last axis) applied along ``axis``."""
    if axis == x.ndim - 1:
        return last(x)
    return np.ascontiguousarray(np.moveaxis(last(np.moveaxis(x, axis, -1)), -1, axis))


def _execute_softmax(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    beta = float(ctx.scalar(1))
    if x.ndim == 0:
        raise op_failed(ctx.code, "input must have rank 1 to 4")
    axis = _softmax_axis(ctx, x.ndim)
    if x.size == 0:
        return [np.zeros(x.shape, ctx.output_info(0).dtype)]
    info = ctx.signature.inputs[0]
    if info.code in QUANT8_ASYMM_CODES:
        exps, radius = _softmax_exps(info.scale, beta)
        return [_softmax_last_axis(x, axis, lambda v: softmax_quant8(v, exps, radius))]
    v = np.moveaxis(x, axis, -1).astype(np.float64)
    with np.errstate(over="ignore", under="ignore"):
        e = np.exp((v - v.max(axis=-1, keepdims=True)) * np.float64(np.float32(beta)))
        result = (e / e.sum(axis=-1, keepdims=True)).astype(ctx.output_info(0).dtype)
    return [np.ascontiguousarray(np.moveaxis(result, -1, axis))]


def _bind_softmax(sig: OperationSignature, state: object) -> Kernel | None:
    """Quantized SOFTMAX with a constant beta and axis: the exponentials are
    looked up once, and a run is one C call (the numpy fixed point took
    0.4-0.8 ms even on a [1, 2] tensor)."""
    info = sig.inputs[0]
    beta = constant_scalar(sig, 1)
    axis = constant_scalar(sig, 2) if len(sig.inputs) > 2 else -1
    if info.code not in QUANT8_ASYMM_CODES or beta is None or axis is None:
        return None
    axis = int(axis)
    try:
        exps, radius = _softmax_exps(info.scale, float(beta))
    except NNError:  # beta times the scale too small: execute says so at run time
        return None
    dtype = sig.outputs[0].dtype

    def last(v: np.ndarray) -> np.ndarray:
        return softmax_quant8(v, exps, radius)

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if x is None or x.ndim == 0 or not -x.ndim <= axis < x.ndim:
            return _execute_softmax(ExecutionContext(sig, inputs))  # raises
        if x.size == 0:
            return [np.zeros(x.shape, dtype)]
        return [_softmax_last_axis(x, axis % x.ndim, last)]

    dims = tuple(info.dimensions or ())
    if not dims or not all(d > 0 for d in dims) or axis % len(dims) != len(dims) - 1:
        return kernel
    table = np.ascontiguousarray(exps, dtype=np.int32)
    params = c_plan.softmax_params(table, radius, dims[-1], info.dtype)
    return c_plan.mark(kernel, c_plan.KernelStep(c_plan.SOFTMAX_Q8, params, int(np.prod(dims))))


# --- LOG_SOFTMAX ----------------------------------------------------------------------


def _validate_log_softmax(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 1)
    info = require_operand_type(sig, 0, FLOAT_TENSOR_CODES, "input")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_dims_like(sig, info)
    require_operand_type(sig, 1, (float_scalar_code(info.code),), "beta")
    require_operand_type(sig, 2, (OperandCode.INT32,), "axis")
    require_operand_rank(sig, 0, range(1, 64), "input")
    axis, rank = constant_scalar(sig, 2), sig.inputs[0].rank
    if axis is not None and rank is not None:
        normalize_axis(axis, rank, sig.fail)


def _execute_log_softmax(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    t = x.dtype.type
    axis = normalize_axis(int(ctx.scalar(2)), x.ndim, ctx.fail)
    if x.size == 0:
        return [x.copy()]
    with np.errstate(all="ignore"):
        shifted = (x - np.max(x, axis=axis, keepdims=True)) * t(ctx.scalar(1))
        total = np.exp(shifted.astype(np.float64)).sum(axis=axis, keepdims=True).astype(t)
        log_sum = np.log(total.astype(np.float64)).astype(t)
        return [(shifted - log_sum).astype(x.dtype)]


for _code in _RELU_FUSE:
    register(_code, validate=_validate_unary, execute=_execute_relu)
register(OperationCode.LOGISTIC, validate=_validate_unary, execute=_execute_logistic_tanh)
register(OperationCode.TANH, validate=_validate_unary, execute=_execute_logistic_tanh)
register(
    OperationCode.SOFTMAX, validate=_validate_softmax, execute=_execute_softmax, bind=_bind_softmax
)
register(OperationCode.LOG_SOFTMAX, validate=_validate_log_softmax, execute=_execute_log_softmax)
