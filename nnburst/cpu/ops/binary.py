"""Broadcasting binary operations of NNAPI 1.2: MAXIMUM, MINIMUM, POW, PRELU.

Broadcasting is numpy's rule, which is NNAPI's.  Quantized MAXIMUM/MINIMUM
first requantize each input to the output's scale and zero point (NNAPI's
``requantize``: real value in float32, rescaled in double, rounded half away
from zero) and then pick among raw values.  Float MAXIMUM/MINIMUM return the
first input whenever either is NaN, as ``std::max``/``std::min`` do.  POW
computes in float32.  Quantized PRELU follows the reference's integer
scheme with two multipliers: ``in_scale / out_scale`` for non-negative
inputs and ``in_scale * alpha_scale / out_scale`` for the product
``(x - zp) * (alpha - zp_alpha)`` of negative ones.
"""

from __future__ import annotations

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    broadcast_shape_or_fail,
    check_broadcastable,
    require_operand_counts,
    require_operand_type,
)
from .fixed_point import multiply_by_quantized_multiplier, quantize_multiplier
from .requantization import quantized_range, requantize_reference

_F32 = np.float32

_TYPES: dict[OperationCode, tuple[OperandCode, ...]] = {
    OperationCode.MAXIMUM: FLOAT_TENSOR_CODES + (OperandCode.TENSOR_INT32,) + QUANT8_ASYMM_CODES,
    OperationCode.MINIMUM: FLOAT_TENSOR_CODES + (OperandCode.TENSOR_INT32,) + QUANT8_ASYMM_CODES,
    OperationCode.POW: FLOAT_TENSOR_CODES,
    OperationCode.PRELU: FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES,
}


def _validate(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    names = ("base", "exponent") if sig.code == OperationCode.POW else ("input0", "input1")
    if sig.code == OperationCode.PRELU:
        names = ("input", "alpha")
    first = require_operand_type(sig, 0, _TYPES[sig.code], names[0])
    require_operand_type(sig, 1, (first.code,), names[1])
    require_operand_type(sig, 0, (first.code,), "output", output=True)
    check_broadcastable(sig, 0, 1)


def _execute_max_min(ctx: ExecutionContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = ctx.output_info(0)
    pick = np.minimum if ctx.code == OperationCode.MINIMUM else np.maximum
    if out.code in QUANT8_ASYMM_CODES:
        a = requantize_reference(a, ctx.signature.inputs[0], out)
        b = requantize_reference(b, ctx.signature.inputs[1], out)
        return pick(a, b)
    result = pick(a, b)
    if out.code in FLOAT_TENSOR_CODES:
        # std::max(a, b) / std::min(a, b) hand back ``a`` when either is NaN.  numpy
        # already returns a NaN ``a``; only where ``b`` is NaN must ``a`` be put back
        # (one pass over ``b``, often a small constant, instead of three over both).
        b_nan = np.isnan(b)
        if b_nan.any():
            result = np.where(b_nan, a, result)
    return result


def _execute_prelu_quant(ctx: ExecutionContext, x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    src, alpha_info = ctx.signature.inputs[0], ctx.signature.inputs[1]
    out = ctx.output_info(0)
    # float32 quotient/product of the scales, widened to double, as the reference.
    pos_mult, pos_shift = quantize_multiplier(float(_F32(src.scale) / _F32(out.scale)))
    product = float(_F32(src.scale) * _F32(alpha_info.scale))
    neg_mult, neg_shift = quantize_multiplier(product / float(_F32(out.scale)))
    value = x.astype(np.int64) - src.zero_point
    scaled_alpha = alpha.astype(np.int64) - alpha_info.zero_point
    positive = multiply_by_quantized_multiplier(value, pos_mult, pos_shift)
    negative = multiply_by_quantized_multiplier(value * scaled_alpha, neg_mult, neg_shift)
    result = np.where(value >= 0, positive, negative) + out.zero_point
    lo, hi = quantized_range(out)
    return np.clip(result, lo, hi)


def _prelu_float(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x >= 0 ? x : x * alpha, in the tensor's own type (float16 products round to half).

    With every alpha in (0, 1] (leaky ReLUs) that is max(x, x * alpha) exactly,
    -0, NaN and infinities included: two passes instead of three.  Only a small
    alpha (a scalar, one per channel) is checked for it; a large one costs more
    to check than it saves."""
    product = a * b
    if b.size <= 4096 and product.shape == a.shape and ((b > 0) & (b <= 1)).all():
        return np.maximum(a, product, out=product)
    return np.where(a >= 0, a, product)


def _execute(ctx: ExecutionContext) -> list[np.ndarray]:
    a, b = ctx.input(0), ctx.input(1)
    shape = broadcast_shape_or_fail(ctx.code, a.shape, b.shape)
    out = ctx.output_info(0)
    if ctx.code in (OperationCode.MAXIMUM, OperationCode.MINIMUM):
        result = _execute_max_min(ctx, a, b)
    elif ctx.code == OperationCode.POW:
        with np.errstate(all="ignore"):
            result = np.power(a.astype(_F32), b.astype(_F32))
    elif out.code in QUANT8_ASYMM_CODES:
        result = _execute_prelu_quant(ctx, a, b)
    else:
        result = _prelu_float(a, b)
    if result.shape != shape:
        return [np.broadcast_to(result, shape).astype(out.dtype)]
    return [result.astype(out.dtype, copy=False)]  # a new array already


for _code in _TYPES:
    register(_code, validate=_validate, execute=_execute)
