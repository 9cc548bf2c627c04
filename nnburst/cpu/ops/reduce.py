"""ARGMAX, ARGMIN, MEAN and the REDUCE_* family (ALL, ANY, MAX, MIN, PROD, SUM).

ARGMAX/ARGMIN return the first index of the extreme value (the reference
only moves on a strict improvement, so NaNs after the first element are
skipped and a leading NaN wins).  Reductions follow the reference's TFLite
``ReduceGeneric``: every output starts at the identity (lowest/highest
finite value for MAX/MIN, so NaNs are skipped and an empty reduction yields
that value) and accumulates the input in row-major order *in the tensor's own
type*.  SUM and PROD therefore use ``np.add/multiply.accumulate``, which rounds
after every step exactly like the sequential float32/float16 loop (``np.sum``
would sum pairwise and differ).  PROD keeps the reference's rule that a zero
factor gives 0 even against infinity.  Quantized MAX/MIN pick among raw values,
so the output shares the input's scale and zero point.  Reducing every
dimension without keep_dims leaves shape [1].

MEAN sums in float64 and divides once; quantized MEAN averages raw values with
C integer division (toward zero), as the reference does, and so keeps the
input's scale and zero point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    Fail,
    check_declared_output,
    constant_ints,
    constant_scalar,
    int_input,
    normalize_axis,
    require_int_vector,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
    require_same_quantization,
)
from .fixed_point import trunc_div

_INT32 = OperandCode.TENSOR_INT32
_BOOL8 = OperandCode.TENSOR_BOOL8

# --- ARGMAX / ARGMIN ---------------------------------------------------------------

_ARG_TYPES = FLOAT_TENSOR_CODES + (_INT32,) + QUANT8_ASYMM_CODES


def _arg_output_dims(dims: Sequence[int], axis: int) -> tuple[int, ...]:
    kept = tuple(dims[:axis]) + tuple(dims[axis + 1 :])
    return kept if len(dims) > 1 else (1,)


def _validate_arg(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    info = require_operand_type(sig, 0, _ARG_TYPES, "input")
    require_operand_type(sig, 1, (OperandCode.INT32,), "axis")
    require_operand_type(sig, 0, (_INT32,), "output", output=True)
    require_operand_rank(sig, 0, range(1, 64), "input")
    axis = constant_scalar(sig, 1)
    if axis is not None and info.rank is not None:
        normalize_axis(axis, info.rank, sig.fail)


def _execute_arg(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    fail = ctx.fail
    if x.ndim < 1:
        raise fail("the input must have rank 1 or more")
    axis = normalize_axis(int(ctx.scalar(1)), x.ndim, fail)
    shape = _arg_output_dims(x.shape, axis)
    if x.shape[axis] == 0:
        if math.prod(shape) == 0:
            return [np.zeros(shape, dtype=np.int32)]
        raise fail(
            f"cannot take ARG{'MIN' if ctx.code == OperationCode.ARGMIN else 'MAX'} "
            f"over an empty axis {axis}"
        )
    is_min = ctx.code == OperationCode.ARGMIN
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        x = np.where(nan, np.inf if is_min else -np.inf, x)
        index = np.argmin(x, axis=axis) if is_min else np.argmax(x, axis=axis)
        # A NaN at position 0 is never replaced: every comparison with it is false.
        index = np.where(np.take(nan, 0, axis=axis), 0, index)
    else:
        index = np.argmin(x, axis=axis) if is_min else np.argmax(x, axis=axis)
    return [index.astype(np.int32).reshape(shape)]


# --- REDUCE_* -------------------------------------------------------------------

_REDUCE_TYPES: dict[OperationCode, tuple[OperandCode, ...]] = {
    OperationCode.REDUCE_ALL: (_BOOL8,),
    OperationCode.REDUCE_ANY: (_BOOL8,),
    OperationCode.REDUCE_MAX: FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES,
    OperationCode.REDUCE_MIN: FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES,
    OperationCode.REDUCE_PROD: FLOAT_TENSOR_CODES,
    OperationCode.REDUCE_SUM: FLOAT_TENSOR_CODES,
}


def _reduce_axes(axes: np.ndarray, rank: int, fail: Callable[[str], Exception]) -> list[int]:
    return sorted({normalize_axis(int(a), rank, fail) for a in axes.reshape(-1).tolist()})


def _reduced_dims(dims: Sequence[int], axes: list[int], keep_dims: bool) -> tuple[int, ...]:
    if keep_dims:
        return tuple(1 if i in axes else d for i, d in enumerate(dims))
    kept = tuple(d for i, d in enumerate(dims) if i not in axes)
    return kept if kept else (1,)


def _validate_reduce(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 1)
    info = require_operand_type(sig, 0, _REDUCE_TYPES[sig.code], "input")
    require_operand_type(sig, 1, (_INT32,), "axes")
    require_operand_type(sig, 2, (OperandCode.BOOL,), "keep_dims")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_operand_rank(sig, 0, range(1, 5), "input")
    require_operand_rank(sig, 1, (1,), "axes")
    require_same_quantization(sig, info)
    axes = sig.constants.get(1)
    if axes is not None and info.rank is not None:
        _reduce_axes(np.asarray(axes), info.rank, sig.fail)


def _sequential(x: np.ndarray, multiply: bool) -> np.ndarray:
    """Sum or product over the last axis, rounding after each step like the reference loop."""
    if x.shape[-1] == 0:
        return np.full(x.shape[:-1], 1 if multiply else 0, dtype=x.dtype)
    with np.errstate(all="ignore"):
        if not multiply:
            return np.add.accumulate(x, axis=-1)[..., -1]
        prefix = np.multiply.accumulate(x, axis=-1)
    # The reference returns 0 once a factor (or the running product) is 0, even
    # when an infinity follows; plain IEEE multiplication would give NaN there.
    zero = (prefix == 0).any(axis=-1) | (x == 0).any(axis=-1)
    return np.where(zero, x.dtype.type(0), prefix[..., -1])


def _execute_reduce(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    fail = ctx.fail
    axes = _reduce_axes(np.asarray(ctx.input(1)), x.ndim, fail)
    shape = _reduced_dims(x.shape, axes, bool(ctx.scalar(2)))
    code = ctx.code
    if code == OperationCode.REDUCE_ALL:
        result = np.all(x, axis=tuple(axes))
    elif code == OperationCode.REDUCE_ANY:
        result = np.any(x, axis=tuple(axes))
    elif code in (OperationCode.REDUCE_MAX, OperationCode.REDUCE_MIN):
        limits = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype)
        if code == OperationCode.REDUCE_MAX:
            result = np.fmax.reduce(x, axis=tuple(axes), initial=limits.min)
        else:
            result = np.fmin.reduce(x, axis=tuple(axes), initial=limits.max)
    else:
        kept = [i for i in range(x.ndim) if i not in axes]
        reduced = math.prod(x.shape[a] for a in axes)
        # Reduced axes last, in their original order: the reference's row-major walk.
        flat = np.transpose(x, kept + axes).reshape([x.shape[i] for i in kept] + [reduced])
        result = _sequential(flat, code == OperationCode.REDUCE_PROD)
    return [np.asarray(result).astype(ctx.output_info(0).dtype).reshape(shape)]


# --- MEAN -------------------------------------------------------------------------


def _mean_axes(axes: np.ndarray, rank: int, fail: Fail) -> list[int]:
    resolved = []
    for axis in axes.reshape(-1).tolist():
        if not -rank <= axis < rank:
            raise fail(f"axis {axis} is out of range for rank {rank}")
        resolved.append(axis % rank)
    return sorted(set(resolved))


def _mean_shape(shape: Sequence[int], axes: list[int], keep_dims: bool) -> tuple[int, ...]:
    if keep_dims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    kept = tuple(d for i, d in enumerate(shape) if i not in axes)
    return kept if kept else (1,)  # NNAPI: reducing every dimension leaves [1]


def _validate_mean(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 1)
    info = require_operand_type(sig, 0, FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES, "input")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_operand_rank(sig, 0, range(1, 5), "input")
    require_same_quantization(sig, info)
    require_int_vector(sig, 1, "axis")
    require_operand_type(sig, 2, (OperandCode.INT32,), "keep_dims")
    axes = constant_ints(sig, 1)
    rank = sig.inputs[0].rank
    if axes is None or rank is None:
        return
    resolved = _mean_axes(axes, rank, sig.fail)
    keep = constant_scalar(sig, 2)
    dims = info.dimensions if info.is_fully_specified else None
    if dims is not None and keep is not None:
        check_declared_output(sig, _mean_shape(dims, resolved, keep > 0))


def _execute_mean(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    axes = _mean_axes(int_input(ctx, 1), x.ndim, ctx.fail)
    keep = int(ctx.scalar(2)) > 0
    shape = _mean_shape(x.shape, axes, keep)
    out = ctx.output_info(0)
    count = math.prod(x.shape[a] for a in axes)
    if count == 0:
        return [np.zeros(shape, dtype=out.dtype)]
    if out.code in QUANT8_ASYMM_CODES:
        total = x.astype(np.int64).sum(axis=tuple(axes))
        # The reference sums raw values in int32 and divides in C (toward zero).
        mean = trunc_div(total, count)
    else:
        mean = x.astype(np.float64).sum(axis=tuple(axes)) / count
    return [np.asarray(mean).astype(out.dtype).reshape(shape)]


register(OperationCode.ARGMAX, validate=_validate_arg, execute=_execute_arg)
register(OperationCode.ARGMIN, validate=_validate_arg, execute=_execute_arg)
for _code in _REDUCE_TYPES:
    register(_code, validate=_validate_reduce, execute=_execute_reduce)
register(OperationCode.MEAN, validate=_validate_mean, execute=_execute_mean)
