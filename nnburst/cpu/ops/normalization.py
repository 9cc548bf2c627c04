"""L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION and INSTANCE_NORMALIZATION.

L2 and local response normalisation work on 1-D slices along one axis (the
last by default; NNAPI 1.2 adds the axis parameter and ranks below 4).  Float
data is computed in float64 and cast back, within a few ULP of the float32
reference.  Quantized L2 normalisation follows the reference's integer path:
the sum of squared centred values gets a fixed-point inverse square root
(Newton-Raphson in Q3.28), which scales ``128·x`` into the fixed output format
(scale 1/128, centred on 128).

INSTANCE_NORMALIZATION (float only) normalises each (batch, channel) plane over
height and width: ``(x - mean) * gamma / sqrt(var + epsilon) + beta``.  The
reference loops in the tensor's own type, so the mean and variance sums are
taken with ``np.add.accumulate`` in that type (row-major, rounding after every
step), the square root in float32, and every other step in the tensor's type.
"""

from __future__ import annotations

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    constant_scalar,
    float_scalar_code,
    op_failed,
    require_dims_like,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
)
from .fixed_point import fixed_inv_sqrt_multiplier, fixed_mul, rounding_divide_by_pot
from .window_geometry import from_nhwc, to_nhwc

_SIGNED = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
#: smallest L2 norm divided by, so an all-zero slice normalises to zero.
_L2_EPSILON = 1e-6


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
    require_dims_like(sig, info)
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
    require_dims_like(sig, info)
    require_operand_type(sig, 1, (OperandCode.INT32,), "radius")
    scalar = float_scalar_code(info.code)
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


# --- INSTANCE_NORMALIZATION -----------------------------------------------------------


def _validate_instance_norm(sig: OperationSignature) -> None:
    require_operand_counts(sig, (5,), 1)
    info = require_operand_type(sig, 0, FLOAT_TENSOR_CODES, "input")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_dims_like(sig, info)
    scalar = float_scalar_code(info.code)
    require_operand_rank(sig, 0, (4,), "input")
    for index, name in ((1, "gamma"), (2, "beta"), (3, "epsilon")):
        require_operand_type(sig, index, (scalar,), name)
    require_operand_type(sig, 4, (OperandCode.BOOL,), "layout")


def _plane_sum(v: np.ndarray) -> np.ndarray:
    """Sum over [N, H*W, C]'s middle axis, in order and in v's own type."""
    if v.shape[1] == 0:
        return np.zeros((v.shape[0], 1, v.shape[2]), dtype=v.dtype)
    return np.add.accumulate(v, axis=1)[:, -1:, :]


def _execute_instance_norm(ctx: ExecutionContext) -> list[np.ndarray]:
    nchw = bool(ctx.scalar(4))
    if ctx.input(0).ndim != 4:
        raise op_failed(ctx.code, f"the input must have rank 4, got {ctx.input(0).ndim}")
    x = to_nhwc(ctx.input(0), nchw)
    t = x.dtype.type
    gamma, beta, epsilon = (t(ctx.scalar(i)) for i in (1, 2, 3))
    n, h, w, c = x.shape
    planes = x.reshape(n, h * w, c)
    count = t(h * w)
    with np.errstate(all="ignore"):
        mean = _plane_sum(planes) / count
        centred = planes - mean
        variance = _plane_sum(centred * centred) / count
        sigma = np.sqrt(variance.astype(np.float32) + np.float32(epsilon)).astype(t)
        result = (centred * gamma / sigma + beta).astype(x.dtype)
    return [from_nhwc(result.reshape(n, h, w, c), nchw)]


register(OperationCode.L2_NORMALIZATION, validate=_validate_l2, execute=_execute_l2)
register(OperationCode.LOCAL_RESPONSE_NORMALIZATION, validate=_validate_lrn, execute=_execute_lrn)
register(
    OperationCode.INSTANCE_NORMALIZATION,
    validate=_validate_instance_norm,
    execute=_execute_instance_norm,
)
