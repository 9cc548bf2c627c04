"""LOG_SOFTMAX and INSTANCE_NORMALIZATION (NNAPI 1.2, float only).

LOG_SOFTMAX: ``(x - max) * beta - log(sum(exp((x - max) * beta)))`` along an
axis.  As in the reference, the shifted logits and the final subtraction are
computed in the tensor's own type (float16 rounds to half) while the
exponentials are taken in double; the sum is accumulated in float64 and
rounded once (the reference rounds after every addition, which only loses
accuracy).

INSTANCE_NORMALIZATION normalises each (batch, channel) plane over height
and width: ``(x - mean) * gamma / sqrt(var + epsilon) + beta``.  The reference
loops in the tensor's own type, so the mean and variance sums are taken with
``np.add.accumulate`` in that type (row-major, rounding after every step),
the square root in float32, and every other step in the tensor's type.
"""

from __future__ import annotations

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    constant_scalar,
    float_scalar_code,
    normalize_axis,
    op_failed,
    require_dims_like,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
)
from .window_geometry import from_nhwc, to_nhwc


def _validate_float_io(sig: OperationSignature) -> OperandCode:
    info = require_operand_type(sig, 0, FLOAT_TENSOR_CODES, "input")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_dims_like(sig, info)
    return float_scalar_code(info.code)


# --- LOG_SOFTMAX ----------------------------------------------------------------------


def _validate_log_softmax(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 1)
    scalar = _validate_float_io(sig)
    require_operand_type(sig, 1, (scalar,), "beta")
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


# --- INSTANCE_NORMALIZATION -----------------------------------------------------------


def _validate_instance_norm(sig: OperationSignature) -> None:
    require_operand_counts(sig, (5,), 1)
    scalar = _validate_float_io(sig)
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


register(OperationCode.LOG_SOFTMAX, validate=_validate_log_softmax, execute=_execute_log_softmax)
register(
    OperationCode.INSTANCE_NORMALIZATION,
    validate=_validate_instance_norm,
    execute=_execute_instance_norm,
)
