"""Broadcasting binary operations: ADD, MUL, SUB and DIV (with a fused activation),
MAXIMUM, MINIMUM, POW and PRELU (without); and FLOOR.

Broadcasting is numpy's rule, which is NNAPI's.  Float data (float16
included) is computed in float32, as the reference does, then clamped by the
fused activation.  Quantized ADD/SUB follow the reference's integer scheme: both
inputs are shifted left by 20 bits, scaled to a common ``2 * max(input scales)``
with per-input fixed-point multipliers (SUB negates the second), summed and
requantized to the output.  Quantized MUL requantizes the integer product with
one multiplier ``in1_scale * in2_scale / out_scale``.  Both run as one C table
lookup (``native.QuantBinary``: the output for every pair of input bytes, built
by those steps when the model is prepared); the numpy int64 steps here are what
it is tested against, and run where C refuses the parameters.  TENSOR_INT32
(NNAPI 1.3) wraps like C int32, and DIV floors (0 where the divisor is 0).

Quantized MAXIMUM/MINIMUM first requantize each input to the output's scale and
zero point (NNAPI's ``requantize``: real value in float32, rescaled in double,
rounded half away from zero) and then pick among raw values.  Float
MAXIMUM/MINIMUM return the first input whenever either is NaN, as
``std::max``/``std::min`` do.  POW computes in float32.  Quantized PRELU follows
the reference's integer scheme with two multipliers: ``in_scale / out_scale``
for non-negative inputs and ``in_scale * alpha_scale / out_scale`` for the
product ``(x - zp) * (alpha - zp_alpha)`` of negative ones.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..._bindings import plan as c_plan
from ...codes import FuseCode, OperandCode, OperationCode
from ...extensions import MAX_EXTENDED_RANK
from ...operands import OperandInfo
from ..registry import ExecutionContext, Kernel, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    broadcast_shape_or_fail,
    check_broadcastable,
    constant_scalar,
    op_failed,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
)
from .fixed_point import multiply_by_quantized_multiplier, quantize_multiplier, wrap_int32
from .fused_activation import FLOAT_ACTIVATION_BOUNDS, FUSE_CODES, fused_activation_bounds
from .native import QUANT_ADD, QUANT_MUL, QuantBinary
from .requantization import quantized_range, requantize_reference

_INT32 = (OperandCode.TENSOR_INT32,)
_ADD_LEFT_SHIFT = 20
_RANKS = range(0, 5)
#: ADD, SUB, MUL and DIV: above 4 with the nnburst.rank_above_4 extension.
_EXTENDED_RANKS = range(0, MAX_EXTENDED_RANK + 1)

#: tensor types each operation accepts (NNAPI 1.3 lists).
_TYPES: dict[OperationCode, tuple[OperandCode, ...]] = {
    OperationCode.ADD: FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES + _INT32,
    OperationCode.MUL: FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES + _INT32,
    OperationCode.SUB: FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES + _INT32,
    OperationCode.DIV: FLOAT_TENSOR_CODES + _INT32,
}


def _f32(scale: float) -> float:
    """A scale as the reference holds it: a float32, widened to double."""
    return float(np.float32(scale))


def _static_broadcast_check(sig: OperationSignature) -> None:
    """Reject input shapes that can never broadcast, when both are declared."""
    a, b = sig.inputs[0].dimensions, sig.inputs[1].dimensions
    if a is None or b is None:
        return
    for x, y in zip(reversed(a), reversed(b)):
        if x > 0 and y > 0 and x != y and x != 1 and y != 1:
            raise sig.fail(f"input shapes {a} and {b} cannot be broadcast together")


def _validate_binary(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 1)
    code = sig.code
    first = require_operand_type(sig, 0, _TYPES[code], "input1")
    require_operand_type(sig, 1, (first.code,), "input2")
    require_operand_type(sig, 2, (OperandCode.INT32,), "fused activation")
    require_operand_type(sig, 0, (first.code,), "output", output=True)
    for i, name in ((0, "input1"), (1, "input2")):
        require_operand_rank(sig, i, _EXTENDED_RANKS, name)
    fuse = constant_scalar(sig, 2)
    if fuse is not None and fuse not in FUSE_CODES:
        raise sig.fail(f"fused activation {fuse} is not a FuseCode (0..3)")
    if first.code == OperandCode.TENSOR_INT32 and fuse not in (None, int(FuseCode.NONE)):
        raise sig.fail("a TENSOR_INT32 operation takes no fused activation (it must be NONE)")
    if code == OperationCode.MUL and first.code in QUANT8_ASYMM_CODES:
        in1, in2, out = sig.inputs[0], sig.inputs[1], sig.outputs[0]
        if not np.float32(out.scale) > np.float32(in1.scale) * np.float32(in2.scale):
            raise sig.fail(
                f"output scale {out.scale} must exceed input1 scale x input2 scale "
                f"({in1.scale} x {in2.scale})"
            )
    _static_broadcast_check(sig)


def _broadcast(ctx: ExecutionContext) -> tuple[np.ndarray, np.ndarray]:
    a, b = ctx.input(0), ctx.input(1)
    _check_broadcast(ctx.code, a, b)
    return a, b


def _check_broadcast(code: OperationCode, a: np.ndarray, b: np.ndarray) -> None:
    if a.shape == b.shape:
        return
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise op_failed(code, f"input shapes {a.shape} and {b.shape} cannot be broadcast") from None


def _fuse(ctx: ExecutionContext) -> int:
    fuse = int(ctx.scalar(2))
    if fuse not in FUSE_CODES:
        raise op_failed(ctx.code, f"fused activation {fuse} is not a FuseCode (0..3)")
    return fuse


_FLOAT_OPS: dict[OperationCode, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    OperationCode.ADD: np.add,
    OperationCode.SUB: np.subtract,
    OperationCode.MUL: np.multiply,
    OperationCode.DIV: np.divide,
}


def _execute_float(ctx: ExecutionContext, a: np.ndarray, b: np.ndarray, fuse: int) -> np.ndarray:
    return _float_binary(_FLOAT_OPS[ctx.code], fuse, ctx.output_info(0).dtype, a, b)


def _float_binary(
    ufunc: Callable[[np.ndarray, np.ndarray], np.ndarray],
    fuse: int,
    dtype: np.dtype,
    a: np.ndarray,
    b: np.ndarray,
) -> np.ndarray:
    # The executor runs every operation under np.errstate(all="ignore").
    result = ufunc(a.astype(np.float32, copy=False), b.astype(np.float32, copy=False))
    if fuse != FuseCode.NONE:
        lo, hi = FLOAT_ACTIVATION_BOUNDS[fuse]
        result = np.clip(result, lo, hi, out=result)
    return result.astype(dtype, copy=False)


def _execute_int32(ctx: ExecutionContext, a: np.ndarray, b: np.ndarray, fuse: int) -> np.ndarray:
    if fuse != FuseCode.NONE:
        raise op_failed(ctx.code, "a TENSOR_INT32 operation takes no fused activation")
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    if ctx.code == OperationCode.ADD:
        result = a64 + b64
    elif ctx.code == OperationCode.SUB:
        result = a64 - b64
    elif ctx.code == OperationCode.MUL:
        result = a64 * b64  # exact in int64; wrapped below
    else:
        # NNAPI specifies floor division, and 0 where the divisor is 0.
        zero = b64 == 0
        result = np.where(zero, 0, np.floor_divide(a64, np.where(zero, 1, b64)))
    return wrap_int32(result).astype(np.int32)


def _quant8_arithmetic(sig: OperationSignature, fuse: int) -> tuple[Any, ...]:
    """The arguments of :class:`QuantBinary` for quantized ADD/SUB/MUL with this
    signature's scales and zero points and this activation."""
    in1, in2, out = sig.inputs[0], sig.inputs[1], sig.outputs[0]
    bounds = fused_activation_bounds(fuse, out)
    zero_points = (in1.zero_point, in2.zero_point)
    if sig.code == OperationCode.MUL:
        return QUANT_MUL, out.dtype, zero_points, out.zero_point, _mul_multiplier(sig), bounds
    first, second, output = _add_multipliers(sig)
    return (
        QUANT_ADD, out.dtype, zero_points, out.zero_point, output, bounds, _ADD_LEFT_SHIFT,
        (first, second),
    )  # fmt: skip


def _quant8_table(arguments: tuple[Any, ...]) -> QuantBinary | None:
    """The C table lookup; None where C refuses the parameters (the numpy steps
    below then run)."""
    try:
        return QuantBinary(*arguments)
    except ValueError:
        return None


#: An operation without a constant activation (no bound kernel) builds its
#: table (0.2 ms) once, not every run; a few, as each holds 128 KiB.
_cached_quant8_table = functools.lru_cache(maxsize=16)(_quant8_table)


def _add_multipliers(
    sig: OperationSignature,
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """(input1, input2, output) multipliers of quantized ADD/SUB: both inputs
    scaled to a common ``2 * max(input scales)``, SUB negating the second."""
    in1, in2, out = sig.inputs[0], sig.inputs[1], sig.outputs[0]
    s1, s2, so = _f32(in1.scale), _f32(in2.scale), _f32(out.scale)
    twice_max = 2 * max(s1, s2)
    m1, shift1 = quantize_multiplier(s1 / twice_max)
    m2, shift2 = quantize_multiplier(s2 / twice_max)
    output = quantize_multiplier(twice_max / ((1 << _ADD_LEFT_SHIFT) * so))
    if sig.code == OperationCode.SUB:
        m2 = -m2  # subtracting is adding the negated second input
    return (m1, shift1), (m2, shift2), output


def _mul_multiplier(sig: OperationSignature) -> tuple[int, int]:
    in1, in2, out = sig.inputs[0], sig.inputs[1], sig.outputs[0]
    # float32 product of the scales, widened, then divided in double (as the reference).
    product_scale = float(np.float32(in1.scale) * np.float32(in2.scale))
    return quantize_multiplier(product_scale / _f32(out.scale))


def _add_sub_quant8(sig: OperationSignature, a: np.ndarray, b: np.ndarray, fuse: int) -> np.ndarray:
    """Quantized ADD/SUB in numpy int64: the specification the C table is tested
    against, and what runs where C refuses the parameters."""
    in1, in2, out = sig.inputs[0], sig.inputs[1], sig.outputs[0]
    (m1, shift1), (m2, shift2), (mo, shift_o) = _add_multipliers(sig)
    x1 = (a.astype(np.int64) - in1.zero_point) << _ADD_LEFT_SHIFT
    x2 = (b.astype(np.int64) - in2.zero_point) << _ADD_LEFT_SHIFT
    total = multiply_by_quantized_multiplier(x1, m1, shift1) + multiply_by_quantized_multiplier(
        x2, m2, shift2
    )
    result = multiply_by_quantized_multiplier(total, mo, shift_o) + out.zero_point
    lo, hi = fused_activation_bounds(fuse, out)
    return np.clip(result, lo, hi).astype(out.dtype)


def _mul_quant8(sig: OperationSignature, a: np.ndarray, b: np.ndarray, fuse: int) -> np.ndarray:
    """Quantized MUL in numpy int64 (as :func:`_add_sub_quant8`)."""
    in1, in2, out = sig.inputs[0], sig.inputs[1], sig.outputs[0]
    multiplier, shift = _mul_multiplier(sig)
    prod = (a.astype(np.int64) - in1.zero_point) * (b.astype(np.int64) - in2.zero_point)
    result = multiply_by_quantized_multiplier(prod, multiplier, shift) + out.zero_point
    lo, hi = fused_activation_bounds(fuse, out)
    return np.clip(result, lo, hi).astype(out.dtype)


def _quant8_numpy(sig: OperationSignature, a: np.ndarray, b: np.ndarray, fuse: int) -> np.ndarray:
    if sig.code == OperationCode.MUL:
        return _mul_quant8(sig, a, b, fuse)
    return _add_sub_quant8(sig, a, b, fuse)


def _execute_binary(ctx: ExecutionContext) -> list[np.ndarray]:
    a, b = _broadcast(ctx)
    fuse = _fuse(ctx)
    code = ctx.signature.inputs[0].code
    if code in FLOAT_TENSOR_CODES:
        return [_execute_float(ctx, a, b, fuse)]
    if code == OperandCode.TENSOR_INT32:
        return [_execute_int32(ctx, a, b, fuse)]
    loop = _cached_quant8_table(_quant8_arithmetic(ctx.signature, fuse))
    if loop is None:
        return [_quant8_numpy(ctx.signature, a, b, fuse)]
    return [loop(a, b)]


def _bind_binary(sig: OperationSignature, state: object) -> Kernel | None:
    """Float arithmetic with a constant activation: one ufunc (and a clamp) per run;
    float32 operands need no casts.  Quantized ADD/SUB/MUL: one C call."""
    fuse = constant_scalar(sig, 2)
    if fuse is None or fuse not in FUSE_CODES:
        return None
    if sig.inputs[0].code in QUANT8_ASYMM_CODES:
        return _bind_quant8(sig, fuse)
    if sig.inputs[0].code not in FLOAT_TENSOR_CODES:
        return None
    ufunc = _FLOAT_OPS[sig.code]
    if sig.inputs[0].code != OperandCode.TENSOR_FLOAT32:  # float16: computed in float32
        return _binary_kernel(
            sig, functools.partial(_float_binary, ufunc, fuse, sig.outputs[0].dtype)
        )
    lo, hi = FLOAT_ACTIVATION_BOUNDS[fuse]
    float32_kernel = _binary_kernel(sig, ufunc)
    if fuse == FuseCode.NONE:
        return float32_kernel

    def clamped_float32_kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        result = float32_kernel(inputs)[0]
        np.maximum(result, lo, out=result)
        if hi != np.inf:  # RELU1, RELU6
            np.minimum(result, hi, out=result)
        return [result]

    return clamped_float32_kernel


def _bind_quant8(sig: OperationSignature, fuse: int) -> Kernel | None:
    loop = _quant8_table(_quant8_arithmetic(sig, fuse))
    if loop is None:
        return None
    kernel = _binary_kernel(sig, loop)
    a, b, out = (tuple(i.dimensions or ()) for i in (*sig.inputs[:2], sig.outputs[0]))
    if a != out or not all(d > 0 for d in out) or not _repeats_along(b, out):
        return kernel
    count, b_count = int(np.prod(out)), int(np.prod(b))
    if not b_count or count % b_count:
        return kernel
    step = c_plan.KernelStep(c_plan.QLOOKUP, c_plan.lookup_params(loop.table, b_count), count)
    return c_plan.mark(kernel, step)


def _repeats_along(small: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether ``small`` read over and over is its broadcast to ``shape`` (its shape
    without leading 1s is ``shape``'s tail), as the C lookup reads it."""
    dims = list(small)
    while dims and dims[0] == 1:
        dims.pop(0)
    return not dims or tuple(dims) == shape[len(shape) - len(dims) :]


def _binary_kernel(
    sig: OperationSignature, op: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> Kernel:
    """``op(a, b)`` on the two inputs, once both are present and broadcast (else
    the operation's own error)."""
    code = sig.code

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        a, b = inputs[0], inputs[1]
        if a is None or b is None:
            a, b = _present(sig, inputs)  # raises
        if a.shape != b.shape:
            _check_broadcast(code, a, b)
        return [op(a, b)]

    return kernel


def _present(
    sig: OperationSignature, inputs: Sequence[np.ndarray | None]
) -> tuple[np.ndarray, np.ndarray]:
    a, b = inputs[0], inputs[1]
    if a is None or b is None:
        raise sig.fail(f"input {0 if a is None else 1} is required but was omitted")
    return a, b


def _validate_floor(sig: OperationSignature) -> None:
    require_operand_counts(sig, (1,), 1)
    info = require_operand_type(sig, 0, FLOAT_TENSOR_CODES, "input")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_operand_rank(sig, 0, _RANKS, "input")
    _require_same_dims(sig, sig.inputs[0], sig.outputs[0])


def _require_same_dims(sig: OperationSignature, a: OperandInfo, b: OperandInfo) -> None:
    if a.dimensions is None or b.dimensions is None or not b.dimensions:
        return
    if len(a.dimensions) != len(b.dimensions) or any(
        x > 0 and y > 0 and x != y for x, y in zip(a.dimensions, b.dimensions)
    ):
        raise sig.fail(f"output dimensions {b.dimensions} differ from input {a.dimensions}")


def _execute_floor(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0).astype(np.float32)
    return [np.floor(x).astype(ctx.output_info(0).dtype)]


# --- MAXIMUM, MINIMUM, POW, PRELU: no fused activation -------------------------------


#: tensor types of the binary operations without a fused activation.
_UNFUSED_TYPES: dict[OperationCode, tuple[OperandCode, ...]] = {
    OperationCode.MAXIMUM: FLOAT_TENSOR_CODES + (OperandCode.TENSOR_INT32,) + QUANT8_ASYMM_CODES,
    OperationCode.MINIMUM: FLOAT_TENSOR_CODES + (OperandCode.TENSOR_INT32,) + QUANT8_ASYMM_CODES,
    OperationCode.POW: FLOAT_TENSOR_CODES,
    OperationCode.PRELU: FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES,
}


def _validate_unfused(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    names = ("base", "exponent") if sig.code == OperationCode.POW else ("input0", "input1")
    if sig.code == OperationCode.PRELU:
        names = ("input", "alpha")
    first = require_operand_type(sig, 0, _UNFUSED_TYPES[sig.code], names[0])
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
    pos_mult, pos_shift = quantize_multiplier(float(np.float32(src.scale) / np.float32(out.scale)))
    product = float(np.float32(src.scale) * np.float32(alpha_info.scale))
    neg_mult, neg_shift = quantize_multiplier(product / float(np.float32(out.scale)))
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


def _execute_unfused(ctx: ExecutionContext) -> list[np.ndarray]:
    a, b = ctx.input(0), ctx.input(1)
    shape = broadcast_shape_or_fail(ctx.code, a.shape, b.shape)
    out = ctx.output_info(0)
    if ctx.code in (OperationCode.MAXIMUM, OperationCode.MINIMUM):
        result = _execute_max_min(ctx, a, b)
    elif ctx.code == OperationCode.POW:
        with np.errstate(all="ignore"):
            result = np.power(a.astype(np.float32), b.astype(np.float32))
    elif out.code in QUANT8_ASYMM_CODES:
        result = _execute_prelu_quant(ctx, a, b)
    else:
        result = _prelu_float(a, b)
    if result.shape != shape:
        return [np.broadcast_to(result, shape).astype(out.dtype)]
    return [result.astype(out.dtype, copy=False)]  # a new array already


for _code in _TYPES:
    register(_code, validate=_validate_binary, execute=_execute_binary, bind=_bind_binary)
register(OperationCode.FLOOR, validate=_validate_floor, execute=_execute_floor)
for _code in _UNFUSED_TYPES:
    register(_code, validate=_validate_unfused, execute=_execute_unfused)
