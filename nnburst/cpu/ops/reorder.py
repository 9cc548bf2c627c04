"""PACK, MIRROR_PAD and REVERSE (NNAPI feature level 6): copies that rearrange
elements, added to NNAPI after 1.3 for transformer models.

Every value is copied, never recomputed, so quantized outputs share the
input's scale and zero point.  The rules follow Android's documentation:

* PACK: input 0 an INT32 axis in [0, rank + 1); inputs 1..n tensors of one
  type and shape; the output has rank + 1 dimensions, n at ``axis``.
* MIRROR_PAD: paddings a [rank, 2] TENSOR_INT32; mode 0 (REFLECT, the edge
  is not repeated, so a padding is at most size − 1) or 1 (SYMMETRIC, the
  edge is repeated, a padding at most the size).
* REVERSE: one axis, given as a TENSOR_INT32 of shape [1].
"""

from __future__ import annotations

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    Fail,
    check_allocation,
    check_paddings,
    constant_ints,
    constant_scalar,
    int_input,
    known_dim,
    require_int_vector,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
    require_same_quantization,
)

_TYPES = (*FLOAT_TENSOR_CODES, OperandCode.TENSOR_INT32, *QUANT8_ASYMM_CODES)
_ANY_RANK = range(1, 64)

# --- PACK ------------------------------------------------------------------------------------


def _validate_pack(sig: OperationSignature) -> None:
    if len(sig.inputs) < 2:
        raise sig.fail(f"expected an axis and at least one tensor, got {len(sig.inputs)} inputs")
    require_operand_counts(sig, (len(sig.inputs),), 1)
    require_operand_type(sig, 0, (OperandCode.INT32,), "axis")
    first = require_operand_type(sig, 1, _TYPES, "input tensor 1")
    for i in range(2, len(sig.inputs)):
        info = require_operand_type(sig, i, (first.code,), f"input tensor {i}")
        if not _same_dims(first.dimensions, info.dimensions):
            raise sig.fail(
                f"input tensor {i} has dimensions {info.dimensions}; "
                f"input tensor 1 has {first.dimensions}"
            )
        if first.code in QUANT8_ASYMM_CODES and (
            info.scale != first.scale or info.zero_point != first.zero_point
        ):
            raise sig.fail(f"input tensor {i} is quantized unlike input tensor 1")
    require_operand_type(sig, 0, (first.code,), "output", output=True)
    require_same_quantization(sig, first)
    axis = constant_scalar(sig, 0)
    if axis is not None and first.rank is not None:
        _check_pack_axis(axis, first.rank, sig.fail)
        out = sig.outputs[0]
        if out.rank is not None and out.rank != first.rank + 1:
            raise sig.fail(
                f"output has rank {out.rank}; packing rank {first.rank} gives {first.rank + 1}"
            )
        count = known_dim(out, axis)
        if count is not None and count != len(sig.inputs) - 1:
            raise sig.fail(
                f"output dimension {axis} is {count}; {len(sig.inputs) - 1} tensors are packed"
            )


def _same_dims(a: tuple[int, ...] | None, b: tuple[int, ...] | None) -> bool:
    """False only when both are known and differ (0 is an unknown dimension)."""
    if a is None or b is None:
        return True
    return len(a) == len(b) and all(x <= 0 or y <= 0 or x == y for x, y in zip(a, b))


def _check_pack_axis(axis: int, rank: int, fail: Fail) -> None:
    if not 0 <= axis <= rank:
        raise fail(f"axis {axis} is out of range [0, {rank + 1})")


def _execute_pack(ctx: ExecutionContext) -> list[np.ndarray]:
    tensors = [ctx.input(i) for i in range(1, len(ctx.inputs))]
    axis = int(ctx.scalar(0))
    _check_pack_axis(axis, tensors[0].ndim, ctx.fail)
    if any(t.shape != tensors[0].shape for t in tensors):
        raise ctx.fail(f"tensors of different shapes {[t.shape for t in tensors]}")
    return [np.stack(tensors, axis=axis)]


# --- MIRROR_PAD ------------------------------------------------------------------------------

REFLECT, SYMMETRIC = 0, 1


def _check_mirror(paddings: np.ndarray, shape: tuple[int, ...], mode: int, fail: Fail) -> None:
    """Each padding must fit the mirrored side: size − 1 (REFLECT) or size (SYMMETRIC)."""
    check_paddings(paddings, len(shape), fail)
    for axis, (size, (before, after)) in enumerate(zip(shape, paddings.tolist())):
        most = size - 1 if mode == REFLECT else size
        if size > 0 and max(before, after) > most:
            kind = "REFLECT" if mode == REFLECT else "SYMMETRIC"
            raise fail(
                f"padding {[before, after]} of axis {axis} (size {size}) exceeds {most} ({kind})"
            )


def _validate_mirror_pad(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 1)
    info = require_operand_type(sig, 0, _TYPES, "input")
    require_operand_rank(sig, 0, _ANY_RANK, "input")
    _require_paddings_matrix(sig)
    require_operand_type(sig, 2, (OperandCode.INT32,), "mode")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_same_quantization(sig, info)
    mode = constant_scalar(sig, 2)
    if mode is not None and mode not in (REFLECT, SYMMETRIC):
        raise sig.fail(f"mode {mode} is neither REFLECT (0) nor SYMMETRIC (1)")
    paddings = constant_ints(sig, 1)
    if paddings is not None and info.dimensions is not None and mode is not None:
        shape = tuple(d if d > 0 else 0 for d in info.dimensions)
        _check_mirror(paddings, shape, mode, sig.fail)


def _require_paddings_matrix(sig: OperationSignature) -> None:
    require_operand_type(sig, 1, (OperandCode.TENSOR_INT32,), "paddings")
    require_operand_rank(sig, 1, (2,), "paddings")


def _execute_mirror_pad(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    paddings = int_input(ctx, 1)
    mode = int(ctx.scalar(2))
    if mode not in (REFLECT, SYMMETRIC):
        raise ctx.fail(f"mode {mode} is neither REFLECT (0) nor SYMMETRIC (1)")
    _check_mirror(paddings, x.shape, mode, ctx.fail)
    check_allocation(ctx.code, [d + int(p.sum()) for d, p in zip(x.shape, paddings)], x.dtype)
    return [np.pad(x, paddings.tolist(), mode="reflect" if mode == REFLECT else "symmetric")]


# --- REVERSE ---------------------------------------------------------------------------------


def _validate_reverse(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    info = require_operand_type(sig, 0, _TYPES, "input")
    require_operand_rank(sig, 0, _ANY_RANK, "input")
    require_int_vector(sig, 1, "axis")
    if known_dim(sig.inputs[1], 0) not in (None, 1):
        raise sig.fail(f"axis must have shape [1], got {sig.inputs[1].dimensions}")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_same_quantization(sig, info)
    axis = constant_ints(sig, 1)
    if axis is not None and info.rank is not None:
        _check_reverse_axis(axis, info.rank, sig.fail)


def _check_reverse_axis(axis: np.ndarray, rank: int, fail: Fail) -> int:
    if axis.shape != (1,):
        raise fail(f"axis must have shape [1], got {list(axis.shape)}")
    if not 0 <= int(axis[0]) < rank:
        raise fail(f"axis {int(axis[0])} is out of range [0, {rank})")
    return int(axis[0])


def _execute_reverse(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    axis = _check_reverse_axis(int_input(ctx, 1), x.ndim, ctx.fail)
    return [np.flip(x, axis).copy()]


register(OperationCode.PACK, validate=_validate_pack, execute=_execute_pack)
register(OperationCode.MIRROR_PAD, validate=_validate_mirror_pad, execute=_execute_mirror_pad)
register(OperationCode.REVERSE, validate=_validate_reverse, execute=_execute_reverse)
