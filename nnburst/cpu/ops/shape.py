"""Data-movement operations: RESHAPE, SQUEEZE, TRANSPOSE, CONCATENATION,
DEPTH_TO_SPACE, SPACE_TO_DEPTH, BATCH_TO_SPACE_ND, SPACE_TO_BATCH_ND, PAD and
STRIDED_SLICE.

Each is a numpy reshape/transpose/pad/gather; the values are copied, never
recomputed, so quantized data keeps its raw values and the output must share
the input's scale and zero point.  The exceptions follow the reference:
CONCATENATION requantizes inputs whose quantization differs from the output's
(NNAPI 1.2) and padding is the logical zero (the zero point for quantized
data).  Parameters may arrive as constants (checked at validation) or as
run-time tensors (checked at execution, failing with OP_FAILED).  The 4-D block
operations take NNAPI 1.2's optional NCHW flag.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...codes import OperandCode, OperationCode
from ...extensions import MAX_EXTENDED_RANK
from ...operands import OperandInfo
from ..registry import ExecutionContext, Kernel, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    Fail,
    check_allocation,
    check_declared_output,
    check_paddings,
    constant_ints,
    constant_scalar,
    int_input,
    op_failed,
    require_int_vector,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
)
from .fixed_point import round_half_away
from .padding import pad_constant
from .window_geometry import from_nhwc, to_nhwc

_DATA_TYPES = FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES
_INT32 = OperandCode.TENSOR_INT32
_UP_TO_4 = range(0, 5)
#: RESHAPE, SQUEEZE, TRANSPOSE, CONCATENATION, STRIDED_SLICE, PAD: above 4 with nnburst.rank_above_4.
_EXTENDED_RANKS = range(0, MAX_EXTENDED_RANK + 1)


# --- shared helpers -------------------------------------------------------------


def _validate_data(
    sig: OperationSignature, ranks: Sequence[int] = _UP_TO_4, same_quant: bool = True
) -> OperandInfo:
    """Input 0 is a data tensor of an allowed rank; output 0 has its type (and quantization)."""
    info = require_operand_type(sig, 0, _DATA_TYPES, "input")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_operand_rank(sig, 0, ranks, "input")
    out = sig.outputs[0]
    if (
        same_quant
        and info.code in QUANT8_ASYMM_CODES
        and (np.float32(out.scale) != np.float32(info.scale) or out.zero_point != info.zero_point)
    ):
        raise sig.fail(
            f"the output's scale and zero point ({out.scale}, {out.zero_point}) must "
            f"equal the input's ({info.scale}, {info.zero_point})"
        )
    return info


def _known_dims(info: OperandInfo) -> tuple[int, ...] | None:
    """The declared dimensions when all of them are known, else ``None``."""
    return info.dimensions if info.is_fully_specified else None


def _layout_flag(ctx: ExecutionContext, index: int) -> bool:
    return len(ctx.inputs) > index and ctx.has_input(index) and bool(ctx.scalar(index))


def _validate_layout(sig: OperationSignature, index: int) -> None:
    if len(sig.inputs) > index:
        require_operand_type(sig, index, (OperandCode.BOOL,), "layout")


def _nhwc_dims(sig: OperationSignature, layout_index: int) -> tuple[int, ...] | None:
    """Declared input dims in NHWC order, when known and the layout is constant."""
    dims = _known_dims(sig.inputs[0])
    if dims is None or len(dims) != 4:
        return None
    nchw = False
    if len(sig.inputs) > layout_index:
        if layout_index not in sig.constants:
            return None
        nchw = bool(constant_scalar(sig, layout_index))
    return (dims[0], dims[2], dims[3], dims[1]) if nchw else dims


def _zero_value(info: OperandInfo) -> int:
    """The stored value of a real 0: the zero point for quantized data."""
    return info.zero_point if info.code in QUANT8_ASYMM_CODES else 0


# --- RESHAPE --------------------------------------------------------------------


def _reshape_target(shape: np.ndarray, count: int, fail: Fail) -> tuple[int, ...]:
    if shape.ndim != 1:
        raise fail(f"the shape must be 1-D, got rank {shape.ndim}")
    if (shape < -1).any() or (shape == -1).sum() > 1:
        raise fail(f"shape {shape.tolist()} may hold non-negative sizes and at most one -1")
    known = int(np.prod(shape[shape != -1]))
    dims = shape.tolist()
    if -1 in dims:
        if known == 0 or count % known:
            raise fail(f"cannot infer the -1 in shape {dims} for {count} elements")
        dims[dims.index(-1)] = count // known
    elif known != count:
        raise fail(f"shape {dims} holds {known} elements, the input has {count}")
    return tuple(int(d) for d in dims)


def _validate_reshape(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    _validate_data(sig, _EXTENDED_RANKS)
    require_int_vector(sig, 1, "shape")
    require_operand_rank(sig, 0, _EXTENDED_RANKS, "output", output=True)
    shape = constant_ints(sig, 1)
    if shape is None:
        return
    if len(shape) > MAX_EXTENDED_RANK:
        raise sig.fail(
            f"shape {shape.tolist()} has rank {len(shape)}; at most {MAX_EXTENDED_RANK} is supported"
        )
    dims = _known_dims(sig.inputs[0])
    if dims is not None:
        check_declared_output(sig, _reshape_target(shape, math.prod(dims), sig.fail))
    elif (shape < -1).any() or (shape == -1).sum() > 1:
        raise sig.fail(f"shape {shape.tolist()} may hold non-negative sizes and at most one -1")


def _execute_reshape(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    target = _reshape_target(int_input(ctx, 1), x.size, ctx.fail)
    return [np.array(x.reshape(target))]  # a copy: never alias an input or constant


def _bind_reshape(sig: OperationSignature, state: object) -> Kernel | None:
    """A constant shape and a declared input size: the target is resolved once
    (resolving it took ~10 small numpy calls, ~15 us, per run)."""
    shape = constant_ints(sig, 1)
    dims = _known_dims(sig.inputs[0])
    if shape is None or dims is None:
        return None
    count = math.prod(dims)
    target = _reshape_target(shape, count, sig.fail)  # validate accepted it

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if type(x) is np.ndarray and x.size == count:
            return [np.array(x.reshape(target))]
        return _execute_reshape(ExecutionContext(sig, inputs))

    return kernel


# --- SQUEEZE --------------------------------------------------------------------


def _squeeze_axes(shape: Sequence[int], axes: np.ndarray | None, fail: Fail) -> list[int]:
    rank = len(shape)
    if axes is None:
        return [i for i, d in enumerate(shape) if d == 1]
    resolved = []
    for axis in axes.reshape(-1).tolist():
        if not -rank <= axis < rank:
            raise fail(f"squeeze axis {axis} is out of range for rank {rank}")
        axis %= rank
        if shape[axis] != 1:
            raise fail(f"cannot squeeze axis {axis} of size {shape[axis]}")
        resolved.append(axis)
    return sorted(set(resolved))


def _squeezed(shape: Sequence[int], axes: list[int]) -> tuple[int, ...]:
    kept = tuple(d for i, d in enumerate(shape) if i not in axes)
    return kept if kept else (1,)  # NNAPI: squeezing every dimension leaves [1]


def _validate_squeeze(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    _validate_data(sig, _EXTENDED_RANKS)
    require_int_vector(sig, 1, "squeeze dims")
    dims = _known_dims(sig.inputs[0])
    omitted = 1 in sig.constants and sig.constants[1] is None
    axes = None if omitted else constant_ints(sig, 1)
    if dims is not None and (omitted or axes is not None):
        check_declared_output(sig, _squeezed(dims, _squeeze_axes(dims, axes, sig.fail)))


def _execute_squeeze(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    axes = int_input(ctx, 1) if ctx.has_input(1) else None
    resolved = _squeeze_axes(x.shape, axes, ctx.fail)
    return [np.array(x.reshape(_squeezed(x.shape, resolved)))]


# --- TRANSPOSE ------------------------------------------------------------------


def _permutation(perm: np.ndarray | None, rank: int, fail: Fail) -> list[int]:
    if perm is None:
        return list(range(rank - 1, -1, -1))
    values = perm.reshape(-1).tolist()
    if sorted(values) != list(range(rank)):
        raise fail(f"perm {values} is not a permutation of the {rank} input dimensions")
    return values


def _validate_transpose(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    _validate_data(sig, _EXTENDED_RANKS)
    require_int_vector(sig, 1, "perm")
    perm = constant_ints(sig, 1)
    rank = sig.inputs[0].rank
    if perm is not None and rank is not None:
        order = _permutation(perm, rank, sig.fail)
        dims = _known_dims(sig.inputs[0])
        if dims is not None:
            check_declared_output(sig, [dims[i] for i in order])


def _execute_transpose(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    perm = int_input(ctx, 1) if ctx.has_input(1) else None
    order = _permutation(perm, x.ndim, ctx.fail)
    return [np.array(np.transpose(x, order), order="C")]


# --- CONCATENATION -------------------------------------------------------------------


def _validate_concat(sig: OperationSignature) -> None:
    if len(sig.inputs) < 2 or len(sig.outputs) != 1:
        raise sig.fail(
            f"expected at least 2 inputs (tensors and axis) and 1 output, got "
            f"{len(sig.inputs)} and {len(sig.outputs)}"
        )
    n = len(sig.inputs) - 1
    first = require_operand_type(sig, 0, _DATA_TYPES, "input")
    for i in range(1, n):
        require_operand_type(sig, i, (first.code,), f"input tensor {i}")
    require_operand_type(sig, 0, (first.code,), "output", output=True)
    require_operand_type(sig, n, (OperandCode.INT32,), "axis")
    ranks = {info.rank for info in sig.inputs[:n] if info.rank is not None}
    if len(ranks) > 1:
        raise sig.fail(f"input tensors have different ranks {sorted(ranks)}")
    for i in range(n):
        require_operand_rank(sig, i, _EXTENDED_RANKS[1:], f"input tensor {i}")
    axis = constant_scalar(sig, n)
    if axis is None or not ranks:
        return
    rank = ranks.pop()
    if not -rank <= axis < rank:
        raise sig.fail(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    reference = sig.inputs[0].dimensions
    for i in range(1, n):
        dims = sig.inputs[i].dimensions
        if dims is None or reference is None:
            continue
        for d, (a, b) in enumerate(zip(reference, dims)):
            if d != axis and a > 0 and b > 0 and a != b:
                raise sig.fail(
                    f"input tensor {i} has dimensions {dims}, incompatible with "
                    f"{reference} outside axis {axis}"
                )


def _requantize(x: np.ndarray, src: OperandInfo, dst: OperandInfo) -> np.ndarray:
    """Move raw values to ``dst``'s quantization in float32, as the reference does."""
    if np.float32(src.scale) == np.float32(dst.scale) and src.zero_point == dst.zero_point:
        return x
    scale = np.float32(src.scale) * (np.float32(1) / np.float32(dst.scale))
    bias = np.float32(-src.zero_point) * scale
    value = round_half_away(x.astype(np.float32) * scale + bias) + dst.zero_point
    limits = np.iinfo(dst.dtype)
    return np.clip(value, limits.min, limits.max).astype(dst.dtype)


def _execute_concat(ctx: ExecutionContext) -> list[np.ndarray]:
    n = len(ctx.inputs) - 1
    arrays = [ctx.input(i) for i in range(n)]
    rank = arrays[0].ndim
    axis = int(ctx.scalar(n))
    if not -rank <= axis < rank:
        raise op_failed(ctx.code, f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    for i, a in enumerate(arrays[1:], start=1):
        if a.ndim != rank or any(
            d != axis and x != y for d, (x, y) in enumerate(zip(arrays[0].shape, a.shape))
        ):
            raise op_failed(
                ctx.code,
                f"input {i} shape {a.shape} does not match {arrays[0].shape} outside axis {axis}",
            )
    out = ctx.output_info(0)
    if out.code in QUANT8_ASYMM_CODES:
        arrays = [_requantize(a, ctx.signature.inputs[i], out) for i, a in enumerate(arrays)]
    return [np.concatenate(arrays, axis=axis).astype(out.dtype, copy=False)]


# --- DEPTH_TO_SPACE / SPACE_TO_DEPTH --------------------------------------------------


def _validate_block_op(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2, 3), 1)
    _validate_data(sig, ranks=(4,))
    require_operand_type(sig, 1, (OperandCode.INT32,), "block size")
    _validate_layout(sig, 2)
    block = constant_scalar(sig, 1)
    if block is None:
        return
    if block < 1:
        raise sig.fail(f"block size must be >= 1, got {block}")
    dims = _nhwc_dims(sig, 2)
    if dims is not None:
        _block_check(sig.code, dims, block, sig.fail)


def _block_check(code: OperationCode, nhwc: Sequence[int], block: int, fail: Fail) -> None:
    _, h, w, c = nhwc
    if code == OperationCode.DEPTH_TO_SPACE and c % (block * block):
        raise fail(f"depth {c} is not divisible by block_size^2 = {block * block}")
    if code == OperationCode.SPACE_TO_DEPTH and (h % block or w % block):
        raise fail(f"height {h} and width {w} must be divisible by block size {block}")


def _execute_block_op(ctx: ExecutionContext) -> list[np.ndarray]:
    nchw = _layout_flag(ctx, 2)
    x = to_nhwc(ctx.input(0), nchw)
    block = int(ctx.scalar(1))
    fail = ctx.fail
    if x.ndim != 4:
        raise fail(f"input must have rank 4, got {x.ndim}")
    if block < 1:
        raise fail(f"block size must be >= 1, got {block}")
    _block_check(ctx.code, x.shape, block, fail)
    n, h, w, c = x.shape
    if ctx.code == OperationCode.DEPTH_TO_SPACE:
        depth = c // (block * block)
        y = x.reshape(n, h, w, block, block, depth).transpose(0, 1, 3, 2, 4, 5)
        y = y.reshape(n, h * block, w * block, depth)
    else:
        y = x.reshape(n, h // block, block, w // block, block, c).transpose(0, 1, 3, 2, 4, 5)
        y = y.reshape(n, h // block, w // block, block * block * c)
    return [from_nhwc(np.array(y, order="C"), nchw)]


# --- BATCH_TO_SPACE_ND / SPACE_TO_BATCH_ND ---------------------------------------------


def _check_block_shape(block: np.ndarray, fail: Fail) -> tuple[int, int]:
    if block.shape != (2,):
        raise fail(f"block shape must be a 2-element vector, got shape {block.shape}")
    if (block < 1).any():
        raise fail(f"block sizes must be >= 1, got {block.tolist()}")
    return int(block[0]), int(block[1])


def _validate_batch_to_space(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2, 3), 1)
    _validate_data(sig, ranks=(4,))
    require_int_vector(sig, 1, "block shape")
    _validate_layout(sig, 2)
    block = constant_ints(sig, 1)
    if block is None:
        return
    b0, b1 = _check_block_shape(block, sig.fail)
    dims = _nhwc_dims(sig, 2)
    if dims is not None and dims[0] % (b0 * b1):
        raise sig.fail(f"batch {dims[0]} is not divisible by the block size product {b0 * b1}")


def _execute_batch_to_space(ctx: ExecutionContext) -> list[np.ndarray]:
    nchw = _layout_flag(ctx, 2)
    x = to_nhwc(ctx.input(0), nchw)
    fail = ctx.fail
    b0, b1 = _check_block_shape(int_input(ctx, 1), fail)
    if x.ndim != 4:
        raise fail(f"input must have rank 4, got {x.ndim}")
    batch, h, w, c = x.shape
    if batch % (b0 * b1):
        raise fail(f"batch {batch} is not divisible by the block size product {b0 * b1}")
    n = batch // (b0 * b1)
    # Input batch (i * b1 + j) * n + b holds the pixels at offset (i, j) of each block.
    y = x.reshape(b0, b1, n, h, w, c).transpose(2, 3, 0, 4, 1, 5).reshape(n, h * b0, w * b1, c)
    return [from_nhwc(np.array(y, order="C"), nchw)]


def _validate_space_to_batch(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3, 4), 1)
    _validate_data(sig, ranks=(4,))
    require_int_vector(sig, 1, "block shape")
    require_operand_type(sig, 2, (_INT32,), "paddings")
    require_operand_rank(sig, 2, (2,), "paddings")
    _validate_layout(sig, 3)
    block, paddings = constant_ints(sig, 1), constant_ints(sig, 2)
    if paddings is not None:
        check_paddings(paddings, 2, sig.fail)
    if block is None:
        return
    b0, b1 = _check_block_shape(block, sig.fail)
    dims = _nhwc_dims(sig, 3)
    if dims is not None and paddings is not None:
        _space_to_batch_check(dims, (b0, b1), paddings, sig.fail)


def _space_to_batch_check(
    nhwc: Sequence[int], block: tuple[int, int], paddings: np.ndarray, fail: Fail
) -> tuple[int, int]:
    padded_h = nhwc[1] + int(paddings[0].sum())
    padded_w = nhwc[2] + int(paddings[1].sum())
    if padded_h % block[0] or padded_w % block[1]:
        raise fail(f"padded size {padded_h}x{padded_w} is not divisible by block {list(block)}")
    return padded_h, padded_w


def _execute_space_to_batch(ctx: ExecutionContext) -> list[np.ndarray]:
    nchw = _layout_flag(ctx, 3)
    x = to_nhwc(ctx.input(0), nchw)
    fail = ctx.fail
    if x.ndim != 4:
        raise fail(f"input must have rank 4, got {x.ndim}")
    b0, b1 = _check_block_shape(int_input(ctx, 1), fail)
    paddings = check_paddings(int_input(ctx, 2), 2, fail)
    padded_h, padded_w = _space_to_batch_check(x.shape, (b0, b1), paddings, fail)
    padded = np.pad(
        x,
        ((0, 0), tuple(paddings[0]), tuple(paddings[1]), (0, 0)),
        constant_values=_zero_value(ctx.signature.inputs[0]),
    )
    n, c = x.shape[0], x.shape[3]
    y = padded.reshape(n, padded_h // b0, b0, padded_w // b1, b1, c).transpose(2, 4, 0, 1, 3, 5)
    y = y.reshape(b0 * b1 * n, padded_h // b0, padded_w // b1, c)
    return [from_nhwc(np.array(y, order="C"), nchw)]


# --- PAD --------------------------------------------------------------------------


def _validate_pad(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    _validate_data(sig, ranks=_EXTENDED_RANKS[1:])
    require_operand_type(sig, 1, (_INT32,), "paddings")
    require_operand_rank(sig, 1, (2,), "paddings")
    paddings = constant_ints(sig, 1)
    rank = sig.inputs[0].rank
    if paddings is None or rank is None:
        return
    check_paddings(paddings, rank, sig.fail)
    dims = _known_dims(sig.inputs[0])
    if dims is not None:
        check_declared_output(sig, [d + int(p.sum()) for d, p in zip(dims, paddings)])


def _execute_pad(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    paddings = check_paddings(int_input(ctx, 1), x.ndim, ctx.fail)
    check_allocation(ctx.code, [d + int(p.sum()) for d, p in zip(x.shape, paddings)], x.dtype)
    value = _zero_value(ctx.signature.inputs[0])
    return [pad_constant(x, paddings, value)]


# --- STRIDED_SLICE ----------------------------------------------------------------


def _clamped_index(index: int, dim: int, positive_stride: bool) -> int:
    """NNAPI's ClampedIndex: resolve a negative index and clamp it to the axis."""
    if positive_stride:
        if index >= dim:
            return dim
        return min(max(index, -dim), dim) % dim
    if index < -dim:
        return -1
    return min(max(index, -dim), dim - 1) % dim


def _slice_indices(
    shape: Sequence[int],
    begin: np.ndarray,
    end: np.ndarray,
    strides: np.ndarray,
    masks: tuple[int, int, int],
    fail: Fail,
) -> tuple[list[np.ndarray], list[int]]:
    """Per-axis indices to gather, and the axes to drop (shrink_axis_mask)."""
    rank = len(shape)
    for name, vec in (("begin", begin), ("end", end), ("strides", strides)):
        if vec.shape != (rank,):
            raise fail(f"{name} must have {rank} elements, got shape {vec.shape}")
    begin_mask, end_mask, shrink_mask = masks
    indices, dropped = [], []
    for axis, dim in enumerate(shape):
        stride = int(strides[axis])
        if stride == 0:
            raise fail(f"stride of axis {axis} is 0")
        positive = stride > 0
        if dim == 0:
            first = last = 0
        else:
            first = (
                (0 if positive else dim - 1)
                if begin_mask & (1 << axis)
                else _clamped_index(int(begin[axis]), dim, positive)
            )
            last = (
                (dim if positive else -1)
                if end_mask & (1 << axis)
                else _clamped_index(int(end[axis]), dim, positive)
            )
        picked = np.arange(first, last, stride, dtype=np.int64)
        if shrink_mask & (1 << axis):
            if not positive or len(picked) != 1:
                raise fail(
                    f"shrunk axis {axis} must select exactly one element with a positive "
                    f"stride, got {len(picked)} with stride {stride}"
                )
            dropped.append(axis)
        indices.append(picked)
    return indices, dropped


def _validate_strided_slice(sig: OperationSignature) -> None:
    require_operand_counts(sig, (7,), 1)
    _validate_data(sig, ranks=_EXTENDED_RANKS[1:])
    for i, name in ((1, "begin"), (2, "end"), (3, "strides")):
        require_int_vector(sig, i, name)
    for i, name in ((4, "begin_mask"), (5, "end_mask"), (6, "shrink_axis_mask")):
        require_operand_type(sig, i, (OperandCode.INT32,), name)
    rank = sig.inputs[0].rank
    for i, name in ((1, "begin"), (2, "end"), (3, "strides")):
        dims = sig.inputs[i].dimensions
        if rank is not None and dims and dims[0] > 0 and dims[0] != rank:
            raise sig.fail(f"{name} has {dims[0]} elements; the input has rank {rank}")
    strides = constant_ints(sig, 3)
    if strides is not None and (strides == 0).any():
        raise sig.fail(f"strides must be non-zero, got {strides.tolist()}")
    begin, end = constant_ints(sig, 1), constant_ints(sig, 2)
    masks = [constant_scalar(sig, i) for i in (4, 5, 6)]
    dims = _known_dims(sig.inputs[0])
    if dims is None or begin is None or end is None or strides is None or None in masks:
        return
    indices, dropped = _slice_indices(
        dims, begin, end, strides, (masks[0], masks[1], masks[2]), sig.fail
    )
    kept = [len(ix) for axis, ix in enumerate(indices) if axis not in dropped]
    check_declared_output(sig, kept or [1])


def _execute_strided_slice(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    masks = (int(ctx.scalar(4)), int(ctx.scalar(5)), int(ctx.scalar(6)))
    indices, dropped = _slice_indices(
        x.shape, int_input(ctx, 1), int_input(ctx, 2), int_input(ctx, 3), masks, ctx.fail
    )
    y = x[np.ix_(*indices)]
    kept = [n for axis, n in enumerate(y.shape) if axis not in dropped]
    return [np.ascontiguousarray(y.reshape(kept or [1]))]


register(
    OperationCode.RESHAPE,
    validate=_validate_reshape,
    execute=_execute_reshape,
    bind=_bind_reshape,
)
register(OperationCode.SQUEEZE, validate=_validate_squeeze, execute=_execute_squeeze)
register(OperationCode.TRANSPOSE, validate=_validate_transpose, execute=_execute_transpose)
register(OperationCode.CONCATENATION, validate=_validate_concat, execute=_execute_concat)
register(OperationCode.DEPTH_TO_SPACE, validate=_validate_block_op, execute=_execute_block_op)
register(OperationCode.SPACE_TO_DEPTH, validate=_validate_block_op, execute=_execute_block_op)
register(
    OperationCode.BATCH_TO_SPACE_ND,
    validate=_validate_batch_to_space,
    execute=_execute_batch_to_space,
)
register(
    OperationCode.SPACE_TO_BATCH_ND,
    validate=_validate_space_to_batch,
    execute=_execute_space_to_batch,
)
register(OperationCode.PAD, validate=_validate_pad, execute=_execute_pad)
register(
    OperationCode.STRIDED_SLICE, validate=_validate_strided_slice, execute=_execute_strided_slice
)
