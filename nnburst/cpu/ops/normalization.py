"""L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION.

Both normalise 1-D slices along one axis (the last by default; NNAPI 1.2 adds
the axis parameter and ranks below 4).  Float data is computed in float64 and
cast back, within a few ULP of the float32 reference.  Quantized L2
normalisation follows the reference's integer path: the sum of squared centred
values gets a fixed-point inverse square root (Newton-Raphson in Q3.28), which
scales ``128·x`` into the fixed output format (scale 1/128, centred on 128).
"""

from __future__ import annotations

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    constant_scalar,
    op_failed,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
)
from .fixed_point import fixed_inv_sqrt_multiplier, fixed_mul, rounding_divide_by_pot

_SIGNED = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
#: smallest L2 norm divided by, so an all-zero slice normalises to zero.
_L2_EPSILON = 1e-6


def _require_same_dims(sig: OperationSignature) -> None:
    a, b = sig.inputs[0].dimensions, sig.outputs[0].dimensions
    if a is None or b is None or not b:
        return
    if len(a) != len(b) or any(x > 0 and y > 0 and x != y for x, y in zip(a, b)):
        raise sig.fail(f"output dimensions {b} differ from input {a}")


def _validate_axis(sig: OperationSignature, index: int) -> None:
    """Optional INT32 axis at ``index``, in [-rank, rank) when known."""
    if len(sig.inputs) <= index:
        return
    require_operand_type(sig, index, (OperandCode.INT32,), "axis")
    axis = constant_scalar(sig, index)
    rank = sig.inputs[0].rank
    if axis is not None and rank is not None and not -rank <= axis < rank:
        raise sig.fail(f"axis {axis} is out of range for rank {rank}")


def _axis(ctx: ExecutionContext, index: int, ndim: int) -> int:
    axis = int(ctx.scalar(index)) if len(ctx.inputs) > index and ctx.has_input(index) else -1
    if not -ndim <= axis < ndim:
        raise op_failed(ctx.code, f"axis {axis} is out of range for rank {ndim}")
    return axis % ndim


# --- L2_NORMALIZATION ---------------------------------------------------------------


def _validate_l2(sig: OperationSignature) -> None:
    require_operand_counts(sig, (1, 2), 1)
    info = require_operand_type(sig, 0, FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES, "input")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_operand_rank(sig, 0, range(1, 5), "input")
    _require_same_dims(sig)
    if info.code in QUANT8_ASYMM_CODES:
        out = sig.outputs[0]
        zero_point = 0 if info.code == _SIGNED else 128
        if np.float32(out.scale) != np.float32(1.0 / 128) or out.zero_point != zero_point:
            raise sig.fail(
                f"a quantized output must have scale 1/128 and zero point {zero_point}, "
                f"got {out.scale} and {out.zero_point}"
            )
    _validate_axis(sig, 1)


def _l2_quant8(ctx: ExecutionContext, x: np.ndarray, last_axis: bool) -> np.ndarray:
    """Integer L2 normalisation over the last axis of (moved) raw 8-bit data."""
    info = ctx.signature.inputs[0]
    out = ctx.output_info(0)
    centred = x.astype(np.int64) - info.zero_point
    squares = (centred * centred).sum(axis=-1, keepdims=True)
    multiplier, shift = fixed_inv_sqrt_multiplier(squares)  # shift <= 0
    if info.code == _SIGNED and last_axis:
        # The reference's int8 kernel folds the ·128 into the shift instead.
        total = shift + 7
        scaled = fixed_mul(centred << np.maximum(total, 0), multiplier)
        value = rounding_divide_by_pot(scaled, np.maximum(-total, 0))
    else:
        value = rounding_divide_by_pot(fixed_mul(centred * 128, multiplier), -shift)
    if info.code != _SIGNED:
        value = value + 128
    limits = np.iinfo(out.dtype)
    return np.clip(value, limits.min, limits.max).astype(out.dtype)


def _execute_l2(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    axis = _axis(ctx, 1, x.ndim)
    moved = np.moveaxis(x, axis, -1)
    if ctx.signature.inputs[0].code in QUANT8_ASYMM_CODES:
        result = _l2_quant8(ctx, moved, last_axis=axis == x.ndim - 1)
    else:
        v = moved.astype(np.float64)
        norm = np.maximum(np.sqrt((v * v).sum(axis=-1, keepdims=True)), _L2_EPSILON)
        result = (v / norm).astype(ctx.output_info(0).dtype)
    return [np.ascontiguousarray(np.moveaxis(result, -1, axis))]


# --- LOCAL_RESPONSE_NORMALIZATION ---------------------------------------------


def _validate_lrn(sig: OperationSignature) -> None:
    require_operand_counts(sig, (5, 6), 1)
    info = require_operand_type(sig, 0, FLOAT_TENSOR_CODES, "input")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_operand_rank(sig, 0, range(1, 5), "input")
    _require_same_dims(sig)
    require_operand_type(sig, 1, (OperandCode.INT32,), "radius")
    scalar = OperandCode.FLOAT16 if info.code == OperandCode.TENSOR_FLOAT16 else OperandCode.FLOAT32
    for i, name in ((2, "bias"), (3, "alpha"), (4, "beta")):
        require_operand_type(sig, i, (scalar,), name)
    radius = constant_scalar(sig, 1)
    if radius is not None and radius < 0:
        raise sig.fail(f"radius must be >= 0, got {radius}")
    _validate_axis(sig, 5)


def _execute_lrn(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    radius = int(ctx.scalar(1))
    if radius < 0:
        raise op_failed(ctx.code, f"radius must be >= 0, got {radius}")
    bias, alpha, beta = (float(np.float32(ctx.scalar(i))) for i in (2, 3, 4))
    axis = _axis(ctx, 5, x.ndim)
    v = np.moveaxis(x, axis, -1).astype(np.float64)
    depth = v.shape[-1]
    # Window sums over [c - radius, c + radius], clipped to the slice: one
    # vectorised pass per window offset (a window never needs to exceed the slice).
    reach = min(radius, max(depth - 1, 0))
    padded = np.pad(v * v, [(0, 0)] * (v.ndim - 1) + [(reach, reach)])
    window = np.zeros_like(v)
    for offset in range(2 * reach + 1):
        window += padded[..., offset : offset + depth]
    with np.errstate(all="ignore"):
        result = v * np.power(bias + alpha * window, -beta)
    result = result.astype(ctx.output_info(0).dtype)
    return [np.ascontiguousarray(np.moveaxis(result, -1, axis))]


register(OperationCode.L2_NORMALIZATION, validate=_validate_l2, execute=_execute_l2)
register(OperationCode.LOCAL_RESPONSE_NORMALIZATION, validate=_validate_lrn, execute=_execute_lrn)
