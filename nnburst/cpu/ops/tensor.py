"""Data-movement operations of NNAPI 1.2/1.3: CHANNEL_SHUFFLE, EXPAND_DIMS,
GATHER, PAD_V2, SLICE, SPLIT, TILE, TOPK_V2, FILL and RANK.

Values are copied, never recomputed, so quantized outputs must share the
input's scale and zero point.  Parameters may be constants (checked at
validation, BAD_DATA) or run-time tensors (checked at execution, OP_FAILED);
an out-of-range index never reaches numpy.  Two reference details matter:
TOPK_V2 orders equal values by descending index, and PAD_V2's INT32 pad value
for quantized data is stored through an 8-bit cast (wrapping like the
reference's byte read).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...codes import OperandCode, OperationCode
from ...extensions import MAX_EXTENDED_RANK
from ...operands import OperandInfo
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    Fail,
    check_allocation,
    check_paddings,
    constant_ints,
    constant_scalar,
    float_scalar_code,
    int_input,
    known_dim,
    normalize_axis,
    op_failed,
    require_dims_like,
    require_int_vector,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
    require_same_quantization,
)
from .padding import pad_constant

_INT32 = OperandCode.TENSOR_INT32
_SCALAR_INT = OperandCode.INT32
_MOVE_TYPES = FLOAT_TENSOR_CODES + (_INT32,) + QUANT8_ASYMM_CODES
_NO_INT_TYPES = FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES
_ANY_RANK = range(1, 64)


def _validate_data(
    sig: OperationSignature,
    types: Sequence[OperandCode],
    ranks: Sequence[int] = _ANY_RANK,
    outputs: Sequence[int] = (0,),
) -> OperandInfo:
    """Input 0 is a data tensor; the given outputs share its type and quantization."""
    info = require_operand_type(sig, 0, tuple(types), "input")
    require_operand_rank(sig, 0, ranks, "input")
    for i in outputs:
        require_operand_type(sig, i, (info.code,), "output", output=True)
        require_same_quantization(sig, info, i)
    return info


def _constant_axis(sig: OperationSignature, index: int, extra: int = 0) -> int | None:
    """The constant axis at input ``index`` resolved against rank (+ ``extra``), if known."""
    axis, rank = constant_scalar(sig, index), sig.inputs[0].rank
    if axis is None or rank is None:
        return None
    return normalize_axis(axis, rank + extra, sig.fail)


# --- CHANNEL_SHUFFLE ------------------------------------------------------------------


def _check_groups(groups: int, channels: int | None, fail: Fail) -> None:
    if groups <= 0:
        raise fail(f"num_groups must be positive, got {groups}")
    if channels is not None and channels % groups:
        raise fail(f"the channel dimension {channels} is not divisible by num_groups {groups}")


def _validate_channel_shuffle(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 1)
    info = _validate_data(sig, _NO_INT_TYPES, range(1, 5))
    require_operand_type(sig, 1, (_SCALAR_INT,), "num_groups")
    require_operand_type(sig, 2, (_SCALAR_INT,), "axis")
    require_dims_like(sig, info)
    axis = _constant_axis(sig, 2)
    groups = constant_scalar(sig, 1)
    if groups is not None:
        channels = None if axis is None else known_dim(info, axis)
        _check_groups(groups, channels, sig.fail)


def _execute_channel_shuffle(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    axis = normalize_axis(int(ctx.scalar(2)), x.ndim, ctx.fail)
    groups = int(ctx.scalar(1))
    channels = x.shape[axis]
    _check_groups(groups, channels, ctx.fail)
    outer, inner = x.shape[:axis], x.shape[axis + 1 :]
    # output channel k * groups + g = input channel g * group_size + k
    grouped = x.reshape(outer + (groups, channels // groups) + inner)
    shuffled = np.swapaxes(grouped, axis, axis + 1)
    return [np.ascontiguousarray(shuffled).reshape(x.shape)]


# --- EXPAND_DIMS ----------------------------------------------------------------------


def _validate_expand_dims(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    _validate_data(sig, _MOVE_TYPES)
    require_operand_type(sig, 1, (_SCALAR_INT,), "axis")
    _constant_axis(sig, 1, extra=1)


def _execute_expand_dims(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    axis = normalize_axis(int(ctx.scalar(1)), x.ndim + 1, ctx.fail)
    return [np.expand_dims(x, axis).copy()]


# --- GATHER ---------------------------------------------------------------------------


def _validate_gather(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 1)
    info = _validate_data(sig, _MOVE_TYPES)
    require_operand_type(sig, 1, (_SCALAR_INT,), "axis")
    require_operand_type(sig, 2, (_INT32,), "indices")
    axis = _constant_axis(sig, 1)
    indices = constant_ints(sig, 2)
    if axis is not None and indices is not None and indices.size:
        size = known_dim(info, axis)
        if indices.min() < 0 or (size is not None and indices.max() >= size):
            raise sig.fail(f"indices must be in [0, {size}) for axis {axis}")


def _execute_gather(ctx: ExecutionContext) -> list[np.ndarray]:
    x, indices = ctx.input(0), int_input(ctx, 2)
    axis = normalize_axis(int(ctx.scalar(1)), x.ndim, ctx.fail)
    size = x.shape[axis]
    if indices.size and (indices.min() < 0 or indices.max() >= size):
        bad = indices[(indices < 0) | (indices >= size)].reshape(-1)[0]
        raise op_failed(ctx.code, f"index {bad} is out of range [0, {size}) on axis {axis}")
    return [np.take(x, indices, axis=axis)]


# --- PAD_V2 ---------------------------------------------------------------------------


def _pad_value_code(code: OperandCode) -> OperandCode:
    return _SCALAR_INT if code in QUANT8_ASYMM_CODES else float_scalar_code(code)


def _validate_pad(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 1)
    # above rank 4 with the nnburst.rank_above_4 extension
    info = _validate_data(sig, _NO_INT_TYPES, range(1, MAX_EXTENDED_RANK + 1))
    require_operand_type(sig, 1, (_INT32,), "paddings")
    require_operand_rank(sig, 1, (2,), "paddings")
    require_operand_type(sig, 2, (_pad_value_code(info.code),), "pad value")
    paddings = constant_ints(sig, 1)
    if paddings is not None and info.rank is not None:
        check_paddings(paddings, info.rank, sig.fail)


def _execute_pad(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    paddings = check_paddings(int_input(ctx, 1), x.ndim, ctx.fail)
    out = ctx.output_info(0)
    check_allocation(ctx.code, [d + int(p.sum()) for d, p in zip(x.shape, paddings)], out.dtype)
    value = ctx.input(2)
    if out.code in QUANT8_ASYMM_CODES:
        value = np.asarray(value, dtype=np.int64) & 0xFF  # the reference reads one byte
    pad_value = np.asarray(value).astype(out.dtype)
    return [pad_constant(x, paddings, pad_value, out.dtype)]


# --- SLICE ----------------------------------------------------------------------------


def _slice_bounds(
    shape: Sequence[int], begin: np.ndarray, size: np.ndarray, fail: Fail
) -> list[slice]:
    rank = len(shape)
    if begin.shape != (rank,) or size.shape != (rank,):
        raise fail(
            f"begin {list(begin.shape)} and size {list(size.shape)} must both have shape [{rank}]"
        )
    bounds = []
    for dim, b, s in zip(shape, begin.tolist(), size.tolist()):
        if s == -1:
            s = dim - b
        if b < 0 or s < 0 or b + s > dim:
            raise fail(
                f"slice begin {begin.tolist()} size {size.tolist()} does not fit "
                f"shape {tuple(shape)}"
            )
        bounds.append(slice(b, b + s))
    return bounds


def _validate_slice(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 1)
    info = _validate_data(sig, _MOVE_TYPES)
    require_int_vector(sig, 1, "begin")
    require_int_vector(sig, 2, "size")
    begin, size = constant_ints(sig, 1), constant_ints(sig, 2)
    if begin is not None and size is not None and info.is_fully_specified:
        _slice_bounds(tuple(info.dimensions or ()), begin, size, sig.fail)


def _execute_slice(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    bounds = _slice_bounds(x.shape, int_input(ctx, 1), int_input(ctx, 2), ctx.fail)
    return [x[tuple(bounds)].copy()]


# --- SPLIT ----------------------------------------------------------------------------


def _validate_split(sig: OperationSignature) -> None:
    if len(sig.inputs) != 3:
        raise sig.fail(f"expected 3 inputs, got {len(sig.inputs)}")
    if not sig.outputs:
        raise sig.fail("expected at least one output")
    info = _validate_data(sig, _MOVE_TYPES, outputs=range(len(sig.outputs)))
    require_operand_type(sig, 1, (_SCALAR_INT,), "axis")
    require_operand_type(sig, 2, (_SCALAR_INT,), "num_splits")
    axis = _constant_axis(sig, 1)
    splits = constant_scalar(sig, 2)
    if splits is not None:
        if splits != len(sig.outputs):
            raise sig.fail(
                f"num_splits is {splits} but the operation has {len(sig.outputs)} outputs"
            )
        size = None if axis is None else known_dim(info, axis)
        if size and size % splits:
            raise sig.fail(f"axis {axis} of size {size} does not split evenly into {splits}")


def _execute_split(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    axis = normalize_axis(int(ctx.scalar(1)), x.ndim, ctx.fail)
    splits = int(ctx.scalar(2))
    if splits != len(ctx.signature.outputs):
        raise op_failed(
            ctx.code,
            f"num_splits is {splits} but the operation has {len(ctx.signature.outputs)} outputs",
        )
    if x.shape[axis] % splits:
        raise op_failed(
            ctx.code, f"axis {axis} of size {x.shape[axis]} does not split evenly into {splits}"
        )
    return [part.copy() for part in np.split(x, splits, axis=axis)]


# --- TILE -----------------------------------------------------------------------------


def _check_multiples(multiples: np.ndarray, rank: int, fail: Fail) -> list[int]:
    if multiples.shape != (rank,):
        raise fail(f"multiples must have shape [{rank}], got {list(multiples.shape)}")
    if (multiples < 0).any():
        raise fail(f"multiples must be non-negative, got {multiples.tolist()}")
    return multiples.tolist()


def _validate_tile(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    info = _validate_data(sig, _MOVE_TYPES)
    require_int_vector(sig, 1, "multiples")
    multiples = constant_ints(sig, 1)
    if multiples is not None and info.rank is not None:
        _check_multiples(multiples, info.rank, sig.fail)


def _execute_tile(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    multiples = _check_multiples(int_input(ctx, 1), x.ndim, ctx.fail)
    check_allocation(ctx.code, [d * int(m) for d, m in zip(x.shape, multiples)], x.dtype)
    return [np.tile(x, multiples)]


# --- TOPK_V2 --------------------------------------------------------------------------


def _validate_topk(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 2)
    info = _validate_data(sig, _MOVE_TYPES)
    require_operand_type(sig, 1, (_SCALAR_INT,), "k")
    require_operand_type(sig, 1, (_INT32,), "indices output", output=True)
    k = constant_scalar(sig, 1)
    last = None if not info.dimensions else info.dimensions[-1]
    if k is not None and (k <= 0 or (last and k > last)):
        raise sig.fail(f"k must be in [1, {last or 'last dimension'}], got {k}")


def _execute_topk(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    k = int(ctx.scalar(1))
    if x.ndim < 1 or not 0 < k <= x.shape[-1]:
        raise op_failed(ctx.code, f"k must be in [1, {x.shape[-1] if x.ndim else 0}], got {k}")
    positions = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    # Ascending by (value, index); the last k reversed are the largest, ties by larger index.
    order = np.lexsort((positions, x), axis=-1)[..., ::-1][..., :k]
    values = np.take_along_axis(x, order, axis=-1)
    return [values, order.astype(np.int32)]


# --- FILL -----------------------------------------------------------------------------

_FILL_TYPES = FLOAT_TENSOR_CODES + (_INT32,)


def _validate_fill(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    out = require_operand_type(sig, 0, _FILL_TYPES, "output", output=True)
    require_int_vector(sig, 0, "dims")
    value_code = _SCALAR_INT if out.code == _INT32 else float_scalar_code(out.code)
    require_operand_type(sig, 1, (value_code,), "value")
    dims = constant_ints(sig, 0)
    if dims is not None and (dims < 0).any():
        raise sig.fail(f"dims must be non-negative, got {dims.tolist()}")


def _execute_fill(ctx: ExecutionContext) -> list[np.ndarray]:
    dims = int_input(ctx, 0)
    if dims.ndim != 1 or (dims < 0).any():
        raise op_failed(
            ctx.code, f"dims must be a vector of non-negative sizes, got {dims.tolist()}"
        )
    out = ctx.output_info(0)
    check_allocation(ctx.code, dims.tolist(), out.dtype)
    return [np.full(tuple(dims.tolist()), ctx.input(1), dtype=out.dtype)]


# --- RANK -----------------------------------------------------------------------------

_RANK_TYPES = (
    OperandCode.TENSOR_FLOAT16,
    OperandCode.TENSOR_FLOAT32,
    OperandCode.TENSOR_INT32,
    OperandCode.TENSOR_QUANT8_ASYMM,
    OperandCode.TENSOR_QUANT16_SYMM,
    OperandCode.TENSOR_BOOL8,
    OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL,
    OperandCode.TENSOR_QUANT16_ASYMM,
    OperandCode.TENSOR_QUANT8_SYMM,
    OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
)


def _validate_rank(sig: OperationSignature) -> None:
    require_operand_counts(sig, (1,), 1)
    require_operand_type(sig, 0, _RANK_TYPES, "input")
    require_operand_type(sig, 0, (_SCALAR_INT,), "output", output=True)


def _execute_rank(ctx: ExecutionContext) -> list[np.ndarray]:
    return [np.array(ctx.input(0).ndim, dtype=np.int32)]


register(
    OperationCode.CHANNEL_SHUFFLE,
    validate=_validate_channel_shuffle,
    execute=_execute_channel_shuffle,
)
register(OperationCode.EXPAND_DIMS, validate=_validate_expand_dims, execute=_execute_expand_dims)
register(OperationCode.GATHER, validate=_validate_gather, execute=_execute_gather)
register(OperationCode.PAD_V2, validate=_validate_pad, execute=_execute_pad)
register(OperationCode.SLICE, validate=_validate_slice, execute=_execute_slice)
register(OperationCode.SPLIT, validate=_validate_split, execute=_execute_split)
register(OperationCode.TILE, validate=_validate_tile, execute=_execute_tile)
register(OperationCode.TOPK_V2, validate=_validate_topk, execute=_execute_topk)
register(OperationCode.FILL, validate=_validate_fill, execute=_execute_fill)
register(OperationCode.RANK, validate=_validate_rank, execute=_execute_rank)
