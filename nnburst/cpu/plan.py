"""Runs of operations as one C call (``csrc/plan.c``): no Python between them.

The run loop costs about a microsecond per operation before any
arithmetic (picking the arguments, calling the kernel, checking and
storing its result) and a bound kernel as much again around its C call;
a small model is mostly that.  At prepare time each run of at least
:data:`MIN_RUN` consecutive operations the C plan computes becomes one
step of the run loop: a table of C steps over the run's inputs, its
outputs and an arena of its intermediates.  What the C plan computes:

- float32 elementwise ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, RELU, RELU1,
  RELU6, HARD_SWISH (each input the output's shape or one element);
- every bound kernel marked as a C step (``_bindings.plan.mark``): the
  float32 CONV_2D and DEPTHWISE_CONV_2D loops (an NCHW one between two
  transposing copies), the int32 quantized convolutions and fully
  connected layers, float32 pools (padded in scratch first), the PAD + ADD pair of
  :mod:`.fusion`;
- MIRROR_PAD padding one axis (a copy, then each side's block read backwards)
  and GATHER of constant indices (a copy per index);
- float32 SQRT (sqrtf: numpy's bits) and LOGISTIC (expf in float32, where
  numpy's own vector exp may round differently: within a float32 rounding);
- float32 NHWC RESIZE_BILINEAR (its taps worked out here as the operation
  does; each output the same float32 terms in the same order);
- RESIZE_NEAREST_NEIGHBOR by whole factors (one copy reading each pixel
  again for every place in the repeated block, when the operation's own
  source indices are k // factor);
- float32 TRANSPOSE_CONV_2D of constant filter and bias (a C loop: its sums
  in another order than the operation's matrix product, within float32
  rounding);
- float32 MEAN over a block of neighbouring axes and float32 SOFTMAX over
  the last axis (in double, as the operations compute them: the sums' order
  may differ from numpy's pairwise one, within a float32 rounding);
- the moves, from their constant parameters: RESHAPE, SQUEEZE and
  EXPAND_DIMS (the same bytes under another shape), CONCATENATION (of
  inputs quantized as the output), SLICE, STRIDED_SLICE, TRANSPOSE, PAD and
  NHWC DEPTH_TO_SPACE.

Each step calls the kernel the operation's bound path calls, with the same
arguments, so the results are the operations' bit for bit (the elementwise
loops compute what numpy computes: only a zero's sign may differ after a
MAXIMUM, MINIMUM or clamp, as between numpy's own loops).  Intermediates
share the arena by lifetime; arenas are kept between runs.  An input of
another dtype or shape than prepared runs the operations one by one, as
before; an operation the plan does not compute stays a step of its own.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._bindings import plan as c_plan
from ..codes import FuseCode, OperandCode, OperationCode
from ..hal.model import Lifetime, Subgraph
from ..operands import OperandInfo
from . import threads
from .ops.fused_activation import FLOAT_ACTIVATION_BOUNDS
from .ops.resize import _source_index, _taps
from .ops.shape import _slice_indices  # the operations' own index rules
from .ops.tensor import _slice_bounds
from .ops.window_geometry import transpose_conv_paddings
from .registry import ExecutionContext

logger = logging.getLogger("nnburst.compilation.plan")

#: Shorter runs gain too little over the loop to pay for a C call's set-up.  A
#: run holding an operation without a bound kernel (a MEAN, a float SOFTMAX: numpy
#: through the registry, 20-80 µs) needs one operation fewer, and so does a run
#: that is the whole subgraph (a burst's C path needs the model to be one plan).
MIN_RUN = 2
#: A 1x1 float convolution that runs as one BLAS matrix product on its own
#: joins a plan (as the C loop) when it has at most this many multiply-adds:
#: below it the run loop's time around BLAS costs more than the C loop loses.
BLAS_MACS_IN_PLAN = 1 << 21

_BINARY = {
    OperationCode.ADD: c_plan.ADD,
    OperationCode.SUB: c_plan.SUB,
    OperationCode.MUL: c_plan.MUL,
    OperationCode.DIV: c_plan.DIV,
    OperationCode.MAXIMUM: c_plan.MAXIMUM,
    OperationCode.MINIMUM: c_plan.MINIMUM,
}
_CLAMPS = {
    OperationCode.RELU: FuseCode.RELU,
    OperationCode.RELU1: FuseCode.RELU1,
    OperationCode.RELU6: FuseCode.RELU6,
}
_ONE_SCALE_8BIT = (
    OperandCode.TENSOR_QUANT8_ASYMM,
    OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
    OperandCode.TENSOR_QUANT8_SYMM,
)
_UNARY = (OperationCode.HARD_SWISH, OperationCode.PRELU)
#: Binary operations whose inputs may trade places (float, bit for bit).
_COMMUTATIVE = (OperationCode.ADD, OperationCode.MUL)
_WITH_FUSE = (OperationCode.ADD, OperationCode.SUB, OperationCode.MUL, OperationCode.DIV)
#: 8-bit in, 8-bit out, each output byte a function of its input byte alone.
_BYTE_FUNCTIONS = (OperationCode.LOGISTIC, OperationCode.TANH)
_VIEWS = (OperationCode.RESHAPE, OperationCode.SQUEEZE, OperationCode.EXPAND_DIMS)
_F32 = OperandCode.TENSOR_FLOAT32
_CONSTANT = (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE)


class _Scratch:
    """Arena bytes one step uses and no other reads (compared by identity)."""

    def __init__(self, size: int) -> None:
        self.size = size


_Ref = int | _Scratch  # an operand index, or scratch


@dataclasses.dataclass(frozen=True)
class _Step:
    """One C step before the arena is laid out: references are operands or scratch."""

    kind: int
    a: _Ref | None
    out: _Ref
    count: int = 0
    b: _Ref | None = None
    a_step: int = 1
    b_step: int = 1
    lo: float = -np.inf
    hi: float = np.inf
    params: c_plan.Params | None = None


@dataclasses.dataclass(frozen=True)
class _Lowered:
    """An operation as C steps, or (``view``) its output as its input's bytes."""

    steps: tuple[_Step, ...] = ()
    view: tuple[int, int] | None = None  # (output, input)


def plan(operations: list[Any], subgraph: Subgraph) -> list[Any]:
    """``operations`` (the executor's prepared operations, in order) with each run of
    :data:`MIN_RUN` or more plannable ones replaced by one operation running them in C."""
    lowered = [_lower(op, subgraph) for op in operations]
    result: list[Any] = []
    position = 0
    while position < len(operations):
        end = position
        while end < len(operations) and lowered[end] is not None:
            end += 1
        unbound = any(op.kernel is None for op in operations[position:end])
        # A run that is the whole subgraph is planned one operation shorter: a
        # one-operation model is then one C plan, which a burst server
        # answers in C (a repeated request), and costs the loop no more.
        whole = end - position == len(operations)
        if end - position >= (max(1, MIN_RUN - 1) if unbound or whole else MIN_RUN):
            later = {i for op in operations[end:] for i in op.inputs}
            run = operations[position:end]
            result.append(_run(run, lowered[position:end], subgraph, later))  # type: ignore[arg-type]
            position = end
        else:
            result.append(operations[position])
            position += 1
    return result


def _info(subgraph: Subgraph, index: int) -> OperandInfo:
    return subgraph.operands[index].info


def _static(info: OperandInfo) -> bool:
    return info.is_fully_specified and all(d > 0 for d in info.dimensions or ())


def _count(subgraph: Subgraph, index: int) -> int:
    return math.prod(_info(subgraph, index).dimensions or ())


def _constant(subgraph: Subgraph, index: int) -> Any:
    operand = subgraph.operands[index]
    return operand.value if operand.lifetime in _CONSTANT else None


def _lower(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """``op`` as C steps, or None when the C plan does not compute it."""
    if len(op.outputs) != 1 or not op.inputs:
        return None
    infos = [_info(subgraph, i) for i in (op.inputs[0], op.outputs[0])]
    if not all(_static(i) for i in infos):
        return None
    code = op.signature.code
    try:
        step = c_plan.marked(op.kernel)
        if step is not None:
            if step.macs > BLAS_MACS_IN_PLAN:
                return None  # BLAS's matrix product, a step of its own, is faster
            return _kernel_step(op, subgraph, step)
        lowering = _LOWERINGS.get(code)
        if lowering is not None:
            return lowering(op, subgraph)
    except (ValueError, TypeError, IndexError, OverflowError):  # parameters it does not take
        return None
    return None


def _elementwise(op: Any, subgraph: Subgraph) -> _Lowered | None:
    code = op.signature.code
    tensors = list(
        op.inputs[:2] if code in _BINARY or code == OperationCode.PRELU else op.inputs[:1]
    )
    out = _info(subgraph, op.outputs[0])
    dims = tuple(out.dimensions or ())
    if out.code != _F32:
        return None
    count = math.prod(dims)
    for index in tensors:
        info = _info(subgraph, index)
        if info.code != _F32 or not _static(info):
            return None
    if len(tensors) == 2 and _count(subgraph, tensors[0]) != count and code in _COMMUTATIVE:
        tensors.reverse()  # the full operand first: only b may repeat
    if _count(subgraph, tensors[0]) not in (count, 1) or len(_dims(subgraph, tensors[0])) > len(
        dims
    ):
        return None
    broadcast = None
    if len(tensors) == 2 and _count(subgraph, tensors[1]) not in (count, 1):
        if _count(subgraph, tensors[0]) != count:
            return None
        pattern = _per_channel(_dims(subgraph, tensors[1]), dims)
        if pattern is None:
            return None
        broadcast = c_plan.broadcast_params(*pattern)
    elif len(tensors) == 2 and len(_dims(subgraph, tensors[1])) > len(dims):
        return None
    if code == OperationCode.PRELU and broadcast is None:
        if _count(subgraph, tensors[0]) != count:
            return None
        broadcast = (
            c_plan.broadcast_params(1, count)
            if _count(subgraph, tensors[1]) == 1
            else c_plan.broadcast_params(count, 1)
        )
    lo, hi = -np.inf, np.inf
    if code in _WITH_FUSE:
        fuse = _constant(subgraph, op.inputs[2])
        bounds = None if fuse is None else FLOAT_ACTIVATION_BOUNDS.get(int(fuse))
        if bounds is None:
            return None
        lo, hi = bounds
    elif code in _CLAMPS:
        lo, hi = FLOAT_ACTIVATION_BOUNDS[_CLAMPS[code]]
    if code in _BINARY:
        kind = _BINARY[code]
    elif code in _CLAMPS:
        kind = c_plan.CLAMP
    elif code == OperationCode.PRELU:
        kind = c_plan.PRELU
    else:
        kind = c_plan.HARD_SWISH
    a = tensors[0]
    b = tensors[1] if len(tensors) > 1 else None
    step = _Step(
        kind,
        a,
        op.outputs[0],
        count,
        b=b,
        a_step=int(_count(subgraph, a) == count),
        b_step=int(b is not None and _count(subgraph, b) == count),
        lo=lo,
        hi=hi,
        params=broadcast,
    )
    return _Lowered((step,))


def _dims(subgraph: Subgraph, index: int) -> tuple[int, ...]:
    return tuple(_info(subgraph, index).dimensions or ())


def _per_channel(small: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(b_count, b_inner) when ``small`` broadcast to ``shape`` is one block of its
    axes repeated (a per-channel operand, NHWC or NCHW), else None."""
    if len(small) > len(shape):
        return None
    padded = (1,) * (len(shape) - len(small)) + small
    kept = [axis for axis, d in enumerate(padded) if d != 1]
    if not kept or kept != list(range(kept[0], kept[-1] + 1)):
        return None
    if any(padded[axis] != shape[axis] for axis in kept):
        return None
    return math.prod(shape[kept[0] : kept[-1] + 1]), math.prod(shape[kept[-1] + 1 :])


def _kernel_step(op: Any, subgraph: Subgraph, step: c_plan.KernelStep) -> _Lowered | None:
    """A bound kernel's step, between two transposes for an NCHW operation."""
    x, y = op.inputs[0], op.outputs[0]
    b: _Ref | None = None
    if step.kind in (c_plan.QLOOKUP, c_plan.PADDED_ADD):
        b = op.inputs[1]
    elif step.scratch:
        b = _Scratch(step.scratch)
    if any(step.pad):
        return _padded_step(x, y, step, subgraph)
    if not step.nchw:
        return _Lowered(
            (_Step(step.kind, x, y, step.count, b, lo=step.lo, hi=step.hi, params=step.params),)
        )
    x_info, y_info = _info(subgraph, x), _info(subgraph, y)
    n, c, h, w = x_info.dimensions or ()
    _, oc, oh, ow = y_info.dimensions or ()
    x_nhwc, y_nhwc = _Scratch(n * h * w * c * 4), _Scratch(n * oh * ow * oc * 4)
    to_nhwc = _transposing(4, (n, h, w, c), (c * h * w, w, 1, h * w))
    to_nchw = _transposing(4, (n, oc, oh, ow), (oh * ow * oc, 1, ow * oc, oc))
    return _Lowered(
        (
            _Step(c_plan.COPY, x, x_nhwc, params=to_nhwc),
            _Step(
                step.kind, x_nhwc, y_nhwc, step.count, b, lo=step.lo, hi=step.hi, params=step.params
            ),
            _Step(c_plan.COPY, y_nhwc, y, params=to_nchw),
        )
    )


def _padded_step(x: int, y: int, step: c_plan.KernelStep, subgraph: Subgraph) -> _Lowered | None:
    """A step reading NHWC ``x`` padded: scratch filled with the padding's value,
    ``x`` copied inside it, the step over the scratch."""
    if step.nchw or step.scratch or _info(subgraph, x).code != _F32:
        return None
    n, h, w, c = _dims(subgraph, x)
    top, bottom, left, right = step.pad
    tall, wide = h + top + bottom, w + left + right
    padded = _Scratch(n * tall * wide * c * 4)
    fill = c_plan.fill_params(np.asarray(step.pad_value, np.float32))
    inside = c_plan.copy_params(
        4, (n, h, w * c), (h * w * c, w * c, 1), (tall * wide * c, wide * c, 1), 0,
        (top * wide + left) * c,
    )  # fmt: skip
    return _Lowered(
        (
            _Step(c_plan.FILL, None, padded, n * tall * wide * c, params=fill),
            _Step(c_plan.COPY, x, padded, params=inside),
            _Step(step.kind, padded, y, step.count, lo=step.lo, hi=step.hi, params=step.params),
        )
    )


def _transposing(elem: int, extent: Sequence[int], a_stride: Sequence[int]) -> c_plan.Params:
    """A copy of a block of ``extent`` read at ``a_stride`` into a contiguous output."""
    return c_plan.copy_params(elem, extent, a_stride, _strides(extent))


def _strides(shape: Sequence[int]) -> list[int]:
    """C-order strides, in elements."""
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return strides[::-1]


def _same_bytes(a: OperandInfo, b: OperandInfo) -> bool:
    """Whether two operands' stored values mean the same (type and quantization)."""
    return (
        a.code == b.code
        and np.float32(a.scale) == np.float32(b.scale)
        and a.zero_point == b.zero_point
    )


def _view(op: Any, subgraph: Subgraph) -> _Lowered | None:
    x, y = op.inputs[0], op.outputs[0]
    if any(i >= 0 and _constant(subgraph, i) is None for i in op.inputs[1:]):
        return None  # a shape or axes given at run time: the operation checks it then
    if not _same_bytes(_info(subgraph, x), _info(subgraph, y)):
        return None
    if _count(subgraph, x) != _count(subgraph, y):
        return None
    return _Lowered(view=(y, x))


def _concatenation(op: Any, subgraph: Subgraph) -> _Lowered | None:
    inputs, y = op.inputs[:-1], op.outputs[0]
    axis = _constant(subgraph, op.inputs[-1])
    out = _info(subgraph, y)
    shape = tuple(out.dimensions or ())
    if axis is None or not shape or len(shape) > c_plan.MAX_RANK:
        return None
    axis = int(axis) % len(shape)
    outer = math.prod(shape[:axis])
    out_inner = math.prod(shape[axis:])
    steps, offset = [], 0
    for x in inputs:
        info = _info(subgraph, x)
        dims = tuple(info.dimensions or ())
        if not _static(info) or not _same_bytes(info, out) or len(dims) != len(shape):
            return None
        inner = math.prod(dims[axis:])
        params = c_plan.copy_params(
            out.dtype.itemsize, (outer, inner), (inner, 1), (out_inner, 1), 0, offset
        )
        steps.append(_Step(c_plan.COPY, x, y, params=params))
        offset += inner
    if offset != out_inner:
        return None
    return _Lowered(tuple(steps))


def _slice(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """SLICE and STRIDED_SLICE: one strided copy (every axis's indices a progression)."""
    x, y = op.inputs[0], op.outputs[0]
    info = _info(subgraph, x)
    shape = tuple(info.dimensions or ())
    if not _same_bytes(info, _info(subgraph, y)) or len(shape) > c_plan.MAX_RANK:
        return None
    constants = [_constant(subgraph, i) for i in op.inputs[1:]]
    if any(c is None for c in constants):
        return None

    def fail(message: str) -> ValueError:
        return ValueError(message)

    starts: list[int] = []
    steps: list[int] = []
    extents: list[int] = []
    if op.signature.code == OperationCode.SLICE:
        for bound in _slice_bounds(shape, np.asarray(constants[0]), np.asarray(constants[1]), fail):
            starts.append(bound.start)
            steps.append(1)
            extents.append(bound.stop - bound.start)
    else:
        begin, end, strides = (np.asarray(c) for c in constants[:3])
        masks = (int(constants[3]), int(constants[4]), int(constants[5]))
        indices, _ = _slice_indices(shape, begin, end, strides, masks, fail)
        for axis, picked in enumerate(indices):
            starts.append(int(picked[0]) if len(picked) else 0)
            steps.append(int(strides[axis]))
            extents.append(len(picked))
    if 0 in extents or math.prod(extents) != _count(subgraph, y):
        return None
    in_strides = _strides(shape)
    offset = sum(s * k for s, k in zip(starts, in_strides))
    a_stride = [st * k for st, k in zip(steps, in_strides)]
    params = c_plan.copy_params(
        info.dtype.itemsize, extents, a_stride, _strides(extents), offset, 0
    )
    return _Lowered((_Step(c_plan.COPY, x, y, params=params),))


def _transpose(op: Any, subgraph: Subgraph) -> _Lowered | None:
    x, y = op.inputs[0], op.outputs[0]
    info = _info(subgraph, x)
    shape = tuple(info.dimensions or ())
    perm = _constant(subgraph, op.inputs[1]) if len(op.inputs) > 1 else None
    if perm is None or not _same_bytes(info, _info(subgraph, y)) or len(shape) > c_plan.MAX_RANK:
        return None
    perm = [int(p) % len(shape) for p in np.asarray(perm).reshape(-1)]
    if sorted(perm) != list(range(len(shape))):
        return None
    in_strides = _strides(shape)
    extent = [shape[p] for p in perm]
    if tuple(extent) != tuple(_info(subgraph, y).dimensions or ()):
        return None
    params = _transposing(info.dtype.itemsize, extent, [in_strides[p] for p in perm])
    return _Lowered((_Step(c_plan.COPY, x, y, params=params),))


def _depth_to_space(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """NHWC DEPTH_TO_SPACE: one copy, the input read as [n, h, w, block, block,
    depth] with the two middle axes swapped (what the operation's reshape,
    transpose and reshape compute).  NCHW stays the operation's."""
    x, y = op.inputs[0], op.outputs[0]
    info, out = _info(subgraph, x), _info(subgraph, y)
    block = _constant(subgraph, op.inputs[1])
    if len(op.inputs) > 2:
        layout = _constant(subgraph, op.inputs[2])
        if layout is None or bool(layout):
            return None  # NCHW, or a layout known only at run time
    shape = tuple(info.dimensions or ())
    if block is None or len(shape) != 4 or not _same_bytes(info, out):
        return None
    block = int(np.asarray(block).reshape(()))
    n, h, w, c = shape
    if block < 1 or c % (block * block):
        return None
    depth = c // (block * block)
    if tuple(out.dimensions or ()) != (n, h * block, w * block, depth):
        return None
    # the input's strides over the output's axes [n, h, block_i, w, block_j, depth]
    a_stride = [h * w * c, w * c, block * depth, c, depth, 1]
    extent = [n, h, block, w, block, depth]
    params = _transposing(info.dtype.itemsize, extent, a_stride)
    return _Lowered((_Step(c_plan.COPY, x, y, params=params),))


def _pad(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """PAD: the output filled with the padding's value, then the input copied inside."""
    x, y = op.inputs[0], op.outputs[0]
    info, out = _info(subgraph, x), _info(subgraph, y)
    shape, out_shape = tuple(info.dimensions or ()), tuple(out.dimensions or ())
    paddings = _constant(subgraph, op.inputs[1])
    if paddings is None or not _same_bytes(info, out) or len(shape) > c_plan.MAX_RANK:
        return None
    rows = np.asarray(paddings).reshape(-1, 2)
    if rows.shape[0] != len(shape) or (rows < 0).any():
        return None
    if tuple(d + int(r.sum()) for d, r in zip(shape, rows)) != out_shape:
        return None
    zero = info.zero_point if info.code != _F32 else 0
    value = np.asarray(zero, dtype=info.dtype)
    out_strides = _strides(out_shape)
    offset = sum(int(r[0]) * k for r, k in zip(rows, out_strides))
    copy = c_plan.copy_params(info.dtype.itemsize, shape, _strides(shape), out_strides, 0, offset)
    count = math.prod(out_shape)
    return _Lowered(
        (
            _Step(c_plan.FILL, None, y, count, params=c_plan.fill_params(value)),
            _Step(c_plan.COPY, x, y, params=copy),
        )
    )


def _run(
    operations: list[Any], lowered: list[_Lowered], subgraph: Subgraph, later: set[int]
) -> Any:
    """One prepared operation computing ``operations`` (a run of plannable ones)."""
    exported = later | set(subgraph.output_indexes)

    def leaves(index: int) -> bool:
        return index in exported or subgraph.operands[index].lifetime != Lifetime.TEMPORARY_VARIABLE

    # Views: an output nobody outside reads is its input's bytes; else a copy.
    alias: dict[int, int] = {}
    steps: list[_Step] = []
    for low in lowered:
        if low.view is not None:
            y, x = low.view
            x = alias.get(x, x)
            if leaves(y):
                size = _count(subgraph, y) * _info(subgraph, y).dtype.itemsize
                params = c_plan.copy_params(1, (size,), (1,), (1,))
                steps.append(_Step(c_plan.COPY, x, y, params=params))
            else:
                alias[y] = x
            continue
        for step in low.steps:
            steps.append(
                dataclasses.replace(
                    step,
                    a=alias.get(step.a, step.a) if isinstance(step.a, int) else step.a,
                    b=alias.get(step.b, step.b) if isinstance(step.b, int) else step.b,
                )
            )
    written = {s.out for s in steps if isinstance(s.out, int)}
    inputs: list[int] = []
    for step in steps:
        for ref in (step.a, step.b):
            if isinstance(ref, int) and ref not in written and ref not in inputs:
                inputs.append(ref)
    outputs = [i for op in operations for i in op.outputs if leaves(i)]
    for index in outputs:
        if index not in written:  # a view that leaves was copied; nothing else is unwritten
            return _unplanned(operations)
    tensors = inputs + outputs
    refs: dict[Any, int] = {index: -1 - n for n, index in enumerate(tensors)}
    arena = _lay_out(steps, refs, subgraph)
    entries = [
        c_plan.PlanStep(
            kind=s.kind,
            a=None if s.a is None else refs[s.a],
            out=refs[s.out],
            count=s.count,
            b=None if s.b is None else refs[s.b],
            a_step=s.a_step,
            b_step=s.b_step,
            lo=s.lo,
            hi=s.hi,
            params=s.params,
        )
        for s in steps
    ]
    infos = [_info(subgraph, i) for i in tensors]
    sizes = [math.prod(i.dimensions or ()) * i.dtype.itemsize for i in infos]
    table = c_plan.PlanTable(
        entries, sizes, arena, threads.plan_threads(), threads.MIN_WORK, threads.SLICES
    )
    fallback = _one_by_one(operations, subgraph, inputs, outputs)
    kernel = _kernel(table, infos, len(inputs), fallback)
    logger.debug(
        "plan: %d operations (%s) as one C call of %d steps, arena %d bytes",
        len(operations),
        ", ".join(sorted({op.signature.code.name for op in operations})),
        len(steps),
        arena,
    )
    return dataclasses.replace(
        operations[0],
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        kernel=kernel,
        output_infos=tuple(
            (i, _info(subgraph, i), _info(subgraph, i).dtype, _info(subgraph, i).dimensions)
            for i in outputs
        ),
    )


def _unplanned(operations: list[Any]) -> Any:
    raise AssertionError(f"a planned run left an output unwritten: {operations}")


def _lay_out(steps: list[_Step], refs: dict[Any, int], subgraph: Subgraph) -> int:
    """Arena offsets for every intermediate and scratch in ``refs``; the arena's size.
    Each lives from the first step writing it to the last reading it; a block is
    reused once its value is dead (first fit, every block 64-byte aligned)."""
    first: dict[Any, int] = {}
    last: dict[Any, int] = {}
    for position, step in enumerate(steps):
        for ref in (step.a, step.b, step.out):
            if ref is None or ref in refs:
                continue
            first.setdefault(ref, position)
            last[ref] = position
    free: list[tuple[int, int]] = []  # (offset, size)
    end = 0
    dying: dict[int, list[Any]] = {}
    for ref, position in last.items():
        dying.setdefault(position, []).append(ref)
    born: dict[int, list[Any]] = {}
    for ref, position in first.items():
        born.setdefault(position, []).append(ref)
    sizes: dict[Any, int] = {}
    for position in range(len(steps)):
        for ref in born.get(position, []):
            size = (
                ref.size
                if isinstance(ref, _Scratch)
                else _count(subgraph, ref) * _info(subgraph, ref).dtype.itemsize
            )
            size = -(-size // c_plan.ALIGN) * c_plan.ALIGN
            sizes[ref] = size
            for k, (offset, room) in enumerate(free):
                if room >= size:
                    refs[ref] = offset
                    free[k] = (offset + size, room - size)
                    break
            else:
                refs[ref] = end
                end += size
        for ref in dying.get(position, []):
            free.append((refs[ref], sizes[ref]))
        free.sort()
    return end


def _kernel(
    table: c_plan.PlanTable,
    infos: list[OperandInfo],
    input_count: int,
    fallback: Callable[[Sequence[np.ndarray | None]], list[np.ndarray]],
) -> Callable[[Sequence[np.ndarray | None]], list[np.ndarray]]:
    shapes = [tuple(info.dimensions or ()) for info in infos]
    dtypes = [info.dtype for info in infos]
    expected = list(zip(shapes[:input_count], dtypes[:input_count]))
    results = list(zip(shapes[input_count:], dtypes[input_count:]))

    def kernel(
        inputs: Sequence[np.ndarray | None], deadline_ns: int | None = None
    ) -> list[np.ndarray]:
        arrays: list[np.ndarray] = []
        for x, (shape, dtype) in zip(inputs, expected):
            if type(x) is not np.ndarray or x.shape != shape:
                return fallback(inputs)
            if x.dtype is not dtype and x.dtype != dtype:  # a request's views: equal dtypes
                return fallback(inputs)
            arrays.append(x if x.flags.c_contiguous else np.ascontiguousarray(x))
        outputs = [np.empty(shape, dtype) for shape, dtype in results]
        if deadline_ns is None:
            table.run([*arrays, *outputs])
        else:
            table.run([*arrays, *outputs], deadline_ns)
        return outputs

    #: for the executor: the table, to bind to a request's buffers, and each
    #: buffer's (shape, dtype); a planned kernel also takes the deadline.
    kernel.plan_table = table  # type: ignore[attr-defined]
    kernel.plan_buffers = (*expected, *results)  # type: ignore[attr-defined]
    return kernel


def _one_by_one(
    operations: list[Any], subgraph: Subgraph, inputs: list[int], outputs: list[int]
) -> Callable[[Sequence[np.ndarray | None]], list[np.ndarray]]:
    """The run's operations one after another, as the run loop would (for inputs
    of another dtype or shape than the plan's: their kernels check and explain)."""
    constants = {
        i: operand.value
        for i, operand in enumerate(subgraph.operands)
        if operand.lifetime in _CONSTANT
    }

    def run(values: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        known: dict[int, Any] = {**constants, **dict(zip(inputs, values))}
        for op in operations:
            arguments = [known.get(i) for i in op.inputs]
            if op.kernel is not None:
                results = op.kernel(arguments)
            else:
                results = op.registration.execute(
                    ExecutionContext(op.signature, arguments, op.state)
                )
            for index, result in zip(op.outputs, results):
                known[index] = result
        return [known[i] for i in outputs]

    return run


def _byte_function(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """A quantized LOGISTIC or TANH as a lookup of its 256 answers, each computed by
    the operation itself at prepare (its fixed point cost ~0.3 ms a run in numpy).
    The table is QLOOKUP's [a, b] one with b the input again: row a holds f(a)."""
    x, y = op.inputs[0], op.outputs[0]
    info, out = _info(subgraph, x), _info(subgraph, y)
    if info.dtype not in (np.int8, np.uint8) or out.dtype != info.dtype or len(op.inputs) != 1:
        return None
    every = np.arange(256, dtype=np.uint8).view(info.dtype).reshape(1, 256)
    if op.kernel is not None:
        (answers,) = op.kernel([every])
    else:
        (answers,) = op.registration.execute(ExecutionContext(op.signature, [every], op.state))
    answers = np.asarray(answers)
    if answers.dtype != out.dtype or answers.size != 256:
        return None
    rows = np.repeat(answers.reshape(256).view(np.uint8), 256)
    table = np.ascontiguousarray(rows.reshape(256, 256))
    count = _count(subgraph, x)
    params = c_plan.lookup_params(table, count)
    return _Lowered((_Step(c_plan.QLOOKUP, x, y, count, b=x, params=params),))


def _dequantize(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """8-bit (one scale) to float32: ``float32(q - zero_point) * float32(scale)``."""
    x, y = op.inputs[0], op.outputs[0]
    info = _info(subgraph, x)
    if info.code not in _ONE_SCALE_8BIT or _info(subgraph, y).code != _F32:
        return None
    count = _count(subgraph, x)
    params = c_plan.quantize_params(info.scale, info.zero_point, info.dtype)
    return _Lowered((_Step(c_plan.DEQUANTIZE, x, y, count, params=params),))


def _mean(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """A float32 MEAN over axes that make one block (size-1 axes between them
    count as reduced): [outer, reduce, inner] averaged over its middle."""
    x, y = op.inputs[0], op.outputs[0]
    axes, keep = (_constant(subgraph, i) for i in op.inputs[1:3])
    if axes is None or keep is None or len(op.inputs) != 3:
        return None
    if _info(subgraph, x).code != _F32 or _info(subgraph, y).code != _F32:
        return None
    shape = _dims(subgraph, x)
    rank = len(shape)
    reduced = {int(a) % rank for a in np.asarray(axes).reshape(-1)} if rank else set()
    if not reduced or any(not -rank <= int(a) < rank for a in np.asarray(axes).reshape(-1)):
        return None
    first, last = min(reduced), max(reduced)
    if any(shape[k] != 1 and k not in reduced for k in range(first, last + 1)):
        return None
    outer, inner = math.prod(shape[:first]), math.prod(shape[last + 1 :])
    reduce = math.prod(shape[first : last + 1])
    if outer * inner != _count(subgraph, y):
        return None
    params = c_plan.mean_params(outer, reduce, inner)
    step = _Step(c_plan.MEAN, x, y, outer * inner, b=_Scratch(inner * 8), params=params)
    return _Lowered((step,))


def _softmax(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """A float32 SOFTMAX over the last axis (or one after which every axis is 1)."""
    x, y = op.inputs[0], op.outputs[0]
    beta = _constant(subgraph, op.inputs[1])
    axis = _constant(subgraph, op.inputs[2]) if len(op.inputs) > 2 else -1
    if beta is None or axis is None or _info(subgraph, x).code != _F32:
        return None
    shape = _dims(subgraph, x)
    if not shape or not -len(shape) <= int(axis) < len(shape):
        return None
    axis = int(axis) % len(shape)
    if any(d != 1 for d in shape[axis + 1 :]) or _info(subgraph, y).code != _F32:
        return None
    beta = float(np.float64(np.float32(beta)))  # what the operation computes with
    params = c_plan.softmax_f32_params(shape[axis], beta)
    return _Lowered((_Step(c_plan.SOFTMAX, x, y, _count(subgraph, x), params=params),))


#: A GATHER of more constant indices than this stays numpy's one take.
MAX_GATHER_COPIES = 16


def _mirror_pad(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """MIRROR_PAD of one axis: the input copied inside, then each side read
    backwards from the edge (REFLECT skips the edge row, SYMMETRIC repeats it)."""
    x, y = op.inputs[0], op.outputs[0]
    info, out = _info(subgraph, x), _info(subgraph, y)
    shape, out_shape = _dims(subgraph, x), _dims(subgraph, y)
    paddings, mode = _constant(subgraph, op.inputs[1]), _constant(subgraph, op.inputs[2])
    if paddings is None or mode is None or int(mode) not in (0, 1) or not _same_bytes(info, out):
        return None
    rows = np.asarray(paddings).reshape(-1, 2)
    padded = [axis for axis in range(len(shape)) if rows[axis].any()]
    if len(shape) > c_plan.MAX_RANK or rows.shape[0] != len(shape) or len(padded) > 1:
        return None
    if tuple(d + int(r.sum()) for d, r in zip(shape, rows)) != out_shape or (rows < 0).any():
        return None
    elem, in_strides, out_strides = info.dtype.itemsize, _strides(shape), _strides(out_shape)
    before = int(rows[padded[0]][0]) if padded else 0
    offset = before * out_strides[padded[0]] if padded else 0
    steps = [
        _Step(
            c_plan.COPY,
            x,
            y,
            params=c_plan.copy_params(elem, shape, in_strides, out_strides, 0, offset),
        )
    ]
    if padded:
        axis, (before, after) = padded[0], (int(v) for v in rows[padded[0]])
        size, edge = shape[axis], 1 - int(mode)  # REFLECT leaves the edge row out
        if max(before, after) > size - edge:
            return None
        stride = in_strides[axis]
        backwards = [(-k if a == axis else k) for a, k in enumerate(in_strides)]
        for extent, first, out_at in (
            (before, before - 1 + edge, 0),
            (after, size - 1 - edge, before + size),
        ):
            if extent:
                block = [extent if a == axis else d for a, d in enumerate(shape)]
                params = c_plan.copy_params(
                    elem, block, backwards, out_strides, first * stride, out_at * out_strides[axis]
                )
                steps.append(_Step(c_plan.COPY, x, y, params=params))
    return _Lowered(tuple(steps))


def _gather(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """GATHER of constant indices: [outer, index, inner] blocks copied one by one."""
    x, y = op.inputs[0], op.outputs[0]
    axis, indices = _constant(subgraph, op.inputs[1]), _constant(subgraph, op.inputs[2])
    info = _info(subgraph, x)
    shape = _dims(subgraph, x)
    if axis is None or indices is None or not shape or not _same_bytes(info, _info(subgraph, y)):
        return None
    axis = int(axis) % len(shape)
    picks = [int(i) for i in np.asarray(indices).reshape(-1)]
    if not picks or len(picks) > MAX_GATHER_COPIES or not all(0 <= i < shape[axis] for i in picks):
        return None
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
    if outer * len(picks) * inner != _count(subgraph, y):
        return None
    elem = info.dtype.itemsize
    steps = []
    for j, pick in enumerate(picks):
        params = c_plan.copy_params(
            elem,
            (outer, inner),
            (shape[axis] * inner, 1),
            (len(picks) * inner, 1),
            pick * inner,
            j * inner,
        )
        steps.append(_Step(c_plan.COPY, x, y, params=params))
    return _Lowered(tuple(steps))


_FLOAT_UNARY = {OperationCode.SQRT: c_plan.SQRT, OperationCode.LOGISTIC: c_plan.LOGISTIC}


def _float_unary(op: Any, subgraph: Subgraph) -> _Lowered | None:
    x, y = op.inputs[0], op.outputs[0]
    if len(op.inputs) != 1 or _info(subgraph, x).code != _F32:
        return None
    if _info(subgraph, y).code != _F32 or _count(subgraph, x) != _count(subgraph, y):
        return None
    kind = _FLOAT_UNARY[op.signature.code]
    return _Lowered((_Step(kind, x, y, _count(subgraph, x)),))


def _resize_setup(
    op: Any, subgraph: Subgraph
) -> tuple[tuple[int, ...], tuple[int, ...], bool, bool] | None:
    """(input shape, output shape, align_corners, half_pixel_centers) of an NHWC
    resize whose flags are constant and whose output size is its output operand's."""
    x, y = op.inputs[0], op.outputs[0]
    flags = []
    for position in (3, 4, 5):  # layout, align_corners, half_pixel_centers
        if position >= len(op.inputs) or op.inputs[position] < 0:
            flags.append(False)
            continue
        operand = subgraph.operands[op.inputs[position]]
        if operand.lifetime == Lifetime.NO_VALUE:
            flags.append(False)
            continue
        value = _constant(subgraph, op.inputs[position])
        if value is None:
            return None
        flags.append(bool(value))
    nchw, align, half = flags
    shape, out = _dims(subgraph, x), _dims(subgraph, y)
    if nchw or len(shape) != 4 or len(out) != 4 or out[0] != shape[0] or out[3] != shape[3]:
        return None
    for position, in_size, size in ((1, shape[2], out[2]), (2, shape[1], out[1])):
        given = _constant(subgraph, op.inputs[position])
        if given is None:
            return None
        if _info(subgraph, op.inputs[position]).code == OperandCode.INT32:
            wanted = int(given)
        else:  # a scale, as the operation turns it into a size
            wanted = math.floor(np.float32(in_size) * np.float32(given))
        if wanted != size:
            return None
    return shape, out, align, half


def _resize_bilinear(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """A float32 NHWC RESIZE_BILINEAR with constant flags, its output size the
    output operand's: the taps of every output row and column, then one step."""
    x, y = op.inputs[0], op.outputs[0]
    if _info(subgraph, x).code != _F32 or _info(subgraph, y).code != _F32:
        return None
    setup = _resize_setup(op, subgraph)
    if setup is None:
        return None
    shape, out, align, half = setup
    rows = _taps(out[1], shape[1], align, half)
    columns = _taps(out[2], shape[2], align, half)
    params = c_plan.resize_params(shape, out[1:3], rows, columns)
    return _Lowered((_Step(c_plan.RESIZE_BILINEAR, x, y, math.prod(out), params=params),))


def _resize_nearest(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """RESIZE_NEAREST_NEIGHBOR that repeats each pixel sy x sx times (the source
    rows and columns the operation picks are k // sy and k // sx): one copy
    reading the input as [n, h, sy, w, sx, c] with the repeats' strides 0."""
    x, y = op.inputs[0], op.outputs[0]
    if not _same_bytes(_info(subgraph, x), _info(subgraph, y)):
        return None
    setup = _resize_setup(op, subgraph)
    if setup is None:
        return None
    (n, h, w, c), (_, out_h, out_w, _), align, half = setup
    if out_h % h or out_w % w:
        return None
    sy, sx = out_h // h, out_w // w
    rows, columns = _source_index(out_h, h, align, half), _source_index(out_w, w, align, half)
    if not (
        np.array_equal(rows, np.arange(out_h) // sy)
        and np.array_equal(columns, np.arange(out_w) // sx)
    ):
        return None
    extent = (n, h, sy, w, sx, c)
    params = _transposing(_info(subgraph, x).dtype.itemsize, extent, (h * w * c, w * c, 0, c, 0, 1))
    return _Lowered((_Step(c_plan.COPY, x, y, params=params),))


def _transpose_conv(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """A float32 TRANSPOSE_CONV_2D whose filter, bias and parameters are constant
    (the weights as the operation laid them out at prepare): one step, NCHW or
    NHWC as the operation's layout flag says."""
    state = op.state  # the operation's prepared _MatmulState (ops/transposed_conv.py)
    x, y = op.inputs[0], op.outputs[0]
    if state.values is None or state.bias is None:
        return None
    filt = state.weights
    if filt is None or filt.requant is not None or filt.weights.dtype != np.float32:
        return None
    if _info(subgraph, x).code != _F32 or _info(subgraph, y).code != _F32:
        return None
    values = state.values
    nchw = bool(values["nchw"])
    x_dims, y_dims = _dims(subgraph, x), _dims(subgraph, y)
    if len(x_dims) != 4 or len(y_dims) != 4:
        return None
    if nchw:
        x_dims, y_dims = (tuple(d[i] for i in (0, 2, 3, 1)) for d in (x_dims, y_dims))
    (n, h, w, c), (batches, oh, ow, oc) = x_dims, y_dims
    depth_out, fh, fw, depth_in = filt.shape
    if (depth_in, depth_out, batches) != (c, oc, n):
        return None
    sh, sw = int(values["stride_h"]), int(values["stride_w"])
    wanted = None
    if "padding_scheme" in values:
        wanted = _constant(subgraph, op.inputs[3])
        if wanted is None or np.asarray(wanted).size != 4:
            return None
        wanted = np.asarray(wanted).reshape(-1)
    top, bottom, left, right = transpose_conv_paddings(values, wanted, nchw, (fh, fw))
    full_h, full_w = (h - 1) * sh + fh, (w - 1) * sw + fw
    if (full_h - top - bottom, full_w - left - right) != (oh, ow) or min(top, left) < 0:
        return None
    bounds = FLOAT_ACTIVATION_BOUNDS.get(int(values["fuse"]))
    bias = np.ascontiguousarray(state.bias, np.float32)
    if bounds is None or bias.shape != (depth_out,):
        return None
    weights = np.ascontiguousarray(filt.weights.reshape(depth_in, fh, fw, depth_out))
    params, scratch_bytes = c_plan.transpose_conv_params(
        (n, h, w, c), (oh, ow), weights, bias, (sh, sw), (top, left), nchw
    )
    scratch = _Scratch(scratch_bytes) if scratch_bytes else None
    count = n * oh * ow * oc
    step = _Step(c_plan.TRANSPOSE_CONV, x, y, count, scratch, lo=bounds[0], hi=bounds[1],
                 params=params)  # fmt: skip
    return _Lowered((step,))


def _unary_by_type(op: Any, subgraph: Subgraph) -> _Lowered | None:
    """LOGISTIC, SQRT, TANH: the float function, or the 8-bit one's byte table."""
    code = op.signature.code
    if code in _FLOAT_UNARY and _info(subgraph, op.inputs[0]).code == _F32:
        return _float_unary(op, subgraph)
    return _byte_function(op, subgraph) if code in _BYTE_FUNCTIONS else None


#: How each operation the C plan computes becomes steps (a bound kernel aside).
_LOWERINGS: dict[int, Callable[[Any, Subgraph], _Lowered | None]] = {
    **dict.fromkeys((*_BINARY, *_CLAMPS, *_UNARY), _elementwise),
    **dict.fromkeys(_VIEWS, _view),
    **dict.fromkeys((*_FLOAT_UNARY, *_BYTE_FUNCTIONS), _unary_by_type),
    OperationCode.CONCATENATION: _concatenation,
    OperationCode.SLICE: _slice,
    OperationCode.STRIDED_SLICE: _slice,
    OperationCode.TRANSPOSE: _transpose,
    OperationCode.DEPTH_TO_SPACE: _depth_to_space,
    OperationCode.PAD: _pad,
    OperationCode.DEQUANTIZE: _dequantize,
    OperationCode.MIRROR_PAD: _mirror_pad,
    OperationCode.GATHER: _gather,
    OperationCode.RESIZE_BILINEAR: _resize_bilinear,
    OperationCode.RESIZE_NEAREST_NEIGHBOR: _resize_nearest,
    OperationCode.MEAN: _mean,
    OperationCode.SOFTMAX: _softmax,
    OperationCode.TRANSPOSE_CONV_2D: _transpose_conv,
}
