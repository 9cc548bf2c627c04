"""The C plan's contract (``csrc/plan.h``): a run of steps (elementwise
loops, convolutions, pools, copies, fills, 8-bit lookups) computed in one C
call over the caller's buffers and an arena of intermediates.  The planner
(``nnburst/cpu/plan.py``) decides the steps; this module builds C's table
once, has C check it against the buffers' sizes, and calls it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import BadDataError, DeadlineExceeded
from .compiled import ffi, lib
from .status import ETIMEDOUT, error_for

ADD, SUB, MUL, DIV = lib.NNB_PLAN_ADD, lib.NNB_PLAN_SUB, lib.NNB_PLAN_MUL, lib.NNB_PLAN_DIV
MAXIMUM, MINIMUM = lib.NNB_PLAN_MAXIMUM, lib.NNB_PLAN_MINIMUM
CLAMP, HARD_SWISH = lib.NNB_PLAN_CLAMP, lib.NNB_PLAN_HARD_SWISH
CONV, DEPTHWISE = lib.NNB_PLAN_CONV, lib.NNB_PLAN_DEPTHWISE
QCONV, QDEPTHWISE = lib.NNB_PLAN_QCONV, lib.NNB_PLAN_QDEPTHWISE
FCONV, FDWCONV = lib.NNB_PLAN_FCONV, lib.NNB_PLAN_FDWCONV
COPY, FILL, POOL = lib.NNB_PLAN_COPY, lib.NNB_PLAN_FILL, lib.NNB_PLAN_POOL
QLOOKUP, PADDED_ADD = lib.NNB_PLAN_QLOOKUP, lib.NNB_PLAN_PADDED_ADD
SOFTMAX_Q8, AVERAGE_Q8 = lib.NNB_PLAN_SOFTMAX_Q8, lib.NNB_PLAN_AVERAGE_Q8
PRELU, QUANTIZE, DEQUANTIZE = lib.NNB_PLAN_PRELU, lib.NNB_PLAN_QUANTIZE, lib.NNB_PLAN_DEQUANTIZE
MEAN, SOFTMAX = lib.NNB_PLAN_MEAN, lib.NNB_PLAN_SOFTMAX
SQRT, LOGISTIC = lib.NNB_PLAN_SQRT, lib.NNB_PLAN_LOGISTIC
RESIZE_BILINEAR, TRANSPOSE_CONV = lib.NNB_PLAN_RESIZE_BILINEAR, lib.NNB_PLAN_TRANSPOSE_CONV
THREADS = lib.NNB_PLAN_THREADS
MAX_RANK = lib.NNB_PLAN_MAX_RANK
#: Every intermediate starts on a cache line (the kernels' vector loads like it).
ALIGN = 64


@dataclass(frozen=True)
class Params:
    """A step's C parameters (``pointer``) and what they point into (``keep``)."""

    pointer: Any
    keep: tuple[Any, ...] = ()


@dataclass(frozen=True)
class PlanStep:
    """One step: ``kind`` over ``a`` (and ``b``) into ``out``.  A reference is an
    arena byte offset (>= 0) or ``-1 - n`` for the n-th buffer of
    :meth:`PlanTable.run`; an elementwise ``*_step`` of 0 broadcasts one value."""

    kind: int
    a: int | None
    out: int
    count: int = 0
    b: int | None = None
    a_step: int = 1
    b_step: int = 1
    lo: float = -np.inf
    hi: float = np.inf
    params: Params | None = field(default=None, compare=False)


def broadcast_params(b_count: int, b_inner: int) -> Params:
    """A binary step's b read per channel: ``b[(k // b_inner) % b_count]``."""
    pointer: Any = ffi.new("nnb_plan_broadcast *")
    pointer.b_count, pointer.b_inner = b_count, b_inner
    return Params(pointer)


def conv_params(
    shape: Any,
    weights: np.ndarray,
    bias: np.ndarray,
    lo: float,
    hi: float,
    path: int,
    source_c: int,
) -> Params:
    """CONV, DEPTHWISE: ``shape`` a ``struct nnb_window_shape *``, ``weights`` and
    ``bias`` float32 C-contiguous, ``source_c`` the input's own channels."""
    pointer: Any = ffi.new("nnb_plan_conv *")
    pointer.shape = shape[0]
    pointer.weights = ffi.from_buffer("float[]", weights)
    pointer.weight_cols = weights.shape[-1]
    pointer.bias = ffi.from_buffer("float[]", bias)
    pointer.source_c = source_c
    pointer.lo, pointer.hi, pointer.path = lo, hi, path
    return Params(pointer, (shape, weights, bias))


def qconv_params(fields: dict[str, Any], batches: int) -> Params:
    """QCONV, QDEPTHWISE: ``fields`` of a packed layer (``QuantConv.plan_fields``)."""
    pointer: Any = ffi.new("nnb_plan_qconv *")
    pointer.layer = fields["layer"]
    pointer.packed = fields["packed"]
    pointer.packed_bytes = fields["packed_bytes"]
    pointer.batches = batches
    pointer.scratch_bytes = fields["scratch_bytes"]
    pointer.path = fields["path"]
    return Params(pointer, (fields["keep"],))


def fconv_params(fields: dict[str, Any], batches: int) -> Params:
    """FCONV, FDWCONV: ``fields`` of a packed float layer (``FloatConv.plan_fields``)."""
    pointer: Any = ffi.new("nnb_plan_fconv *")
    pointer.layer = fields["layer"]
    pointer.packed = fields["packed"]
    pointer.packed_bytes = fields["packed_bytes"]
    pointer.batches = batches
    pointer.scratch_bytes = fields["scratch_bytes"]
    pointer.path = fields["path"]
    return Params(pointer, (fields["keep"],))


def copy_params(
    elem_bytes: int,
    extent: Sequence[int],
    a_stride: Sequence[int],
    out_stride: Sequence[int],
    a_offset: int = 0,
    out_offset: int = 0,
) -> Params:
    """COPY: a block of ``extent`` (at most :data:`MAX_RANK` axes), strides in elements."""
    if not len(extent) == len(a_stride) == len(out_stride) <= MAX_RANK:
        raise BadDataError(f"a copy of rank {len(extent)} (at most {MAX_RANK})")
    pointer: Any = ffi.new("nnb_plan_copy *")
    pointer.rank, pointer.elem_bytes = len(extent), elem_bytes
    for axis, (n, a, o) in enumerate(zip(extent, a_stride, out_stride)):
        pointer.extent[axis], pointer.a_stride[axis], pointer.out_stride[axis] = n, a, o
    pointer.a_offset, pointer.out_offset = a_offset, out_offset
    return Params(pointer)


def fill_params(value: np.ndarray) -> Params:
    """FILL: ``value`` one element of 1, 2, 4 or 8 bytes."""
    raw = value.tobytes()
    pointer: Any = ffi.new("nnb_plan_fill *")
    pointer.value[0 : len(raw)] = list(raw)
    pointer.elem_bytes = len(raw)
    return Params(pointer)


def pool_params(shape: Any, kind: int, counts: np.ndarray | None, lo: float, hi: float) -> Params:
    """POOL: ``counts`` float32, one per output pixel of an image, or None (max)."""
    pointer: Any = ffi.new("nnb_plan_pool *")
    pointer.shape = shape[0]
    pointer.pool_kind = kind
    pointer.counts = ffi.NULL if counts is None else ffi.from_buffer("float[]", counts)
    pointer.lo, pointer.hi = lo, hi
    return Params(pointer, (shape, counts))


def lookup_params(table: np.ndarray, b_count: int) -> Params:
    """QLOOKUP: ``table`` [256, 256] uint8, ``b`` repeating every ``b_count`` bytes."""
    pointer: Any = ffi.new("nnb_plan_lookup *")
    pointer.table = ffi.from_buffer("uint8_t[]", table)
    pointer.b_count = b_count
    return Params(pointer, (table,))


def softmax_params(exps: np.ndarray, radius: int, depth: int, dtype: np.dtype) -> Params:
    """SOFTMAX_Q8: ``exps`` [256] int32 C-contiguous, rows of ``depth`` 8-bit ``dtype``."""
    pointer: Any = ffi.new("nnb_plan_softmax *")
    pointer.exps = ffi.from_buffer("int32_t[]", exps)
    pointer.radius, pointer.depth = radius, depth
    pointer.type = lib.NNB_OUT_INT8 if dtype == np.int8 else lib.NNB_OUT_UINT8
    return Params(pointer, (exps,))


def average_params(shape: Any, dtype: np.dtype, lo: int, hi: int) -> Params:
    """AVERAGE_Q8: ``shape`` a ``struct nnb_window_shape *`` with the pool's pads."""
    pointer: Any = ffi.new("nnb_plan_average *")
    pointer.shape = shape[0]
    pointer.type = lib.NNB_OUT_INT8 if dtype == np.int8 else lib.NNB_OUT_UINT8
    pointer.lo, pointer.hi = lo, hi
    return Params(pointer, (shape,))


def quantize_params(scale: float, zero_point: int, dtype: np.dtype) -> Params:
    """QUANTIZE, DEQUANTIZE: the 8-bit side's ``scale``, ``zero_point`` and ``dtype``."""
    pointer: Any = ffi.new("nnb_plan_quantize *")
    pointer.scale, pointer.zero_point = scale, zero_point
    pointer.type = lib.NNB_OUT_INT8 if dtype == np.int8 else lib.NNB_OUT_UINT8
    return Params(pointer)


def mean_params(outer: int, reduce: int, inner: int) -> Params:
    """MEAN: a [outer, reduce, inner] averaged over its middle axis."""
    pointer: Any = ffi.new("nnb_plan_mean *")
    pointer.outer, pointer.reduce, pointer.inner = outer, reduce, inner
    return Params(pointer)


def softmax_f32_params(depth: int, beta: float) -> Params:
    """SOFTMAX: float32 rows of ``depth``, ``beta`` as the operation widens it."""
    pointer: Any = ffi.new("nnb_plan_softmax_f32 *")
    pointer.depth, pointer.beta = depth, beta
    return Params(pointer)


def resize_params(
    in_shape: Sequence[int], out_hw: Sequence[int], rows: Sequence[np.ndarray],
    columns: Sequence[np.ndarray],
) -> Params:  # fmt: skip
    """RESIZE_BILINEAR: NHWC ``in_shape``, ``rows`` and ``columns`` each (lower
    taps, upper taps, fractions) per output row and column."""
    y0, y1, x0, x1 = (np.ascontiguousarray(t, np.int64) for t in (*rows[:2], *columns[:2]))
    dy, dx = (np.ascontiguousarray(t, np.float32) for t in (rows[2], columns[2]))
    pointer: Any = ffi.new("nnb_plan_resize *")
    pointer.batches, pointer.in_h, pointer.in_w, pointer.channels = in_shape
    pointer.out_h, pointer.out_w = out_hw
    pointer.y0, pointer.y1 = ffi.from_buffer("int64_t[]", y0), ffi.from_buffer("int64_t[]", y1)
    pointer.x0, pointer.x1 = ffi.from_buffer("int64_t[]", x0), ffi.from_buffer("int64_t[]", x1)
    pointer.dy, pointer.dx = ffi.from_buffer("float[]", dy), ffi.from_buffer("float[]", dx)
    return Params(pointer, (y0, y1, x0, x1, dy, dx))


def transpose_conv_params(
    in_shape: Sequence[int], out_hw: Sequence[int], weights: np.ndarray, bias: np.ndarray,
    strides: Sequence[int], pads: Sequence[int], nchw: bool = False,
) -> tuple[Params, int]:  # fmt: skip
    """TRANSPOSE_CONV: NHWC ``in_shape`` (whatever ``nchw``, the layout the step
    reads and writes), ``weights`` float32 [in_c, fh, fw, out_c] and ``bias``
    float32 [out_c]; ``strides`` (h, w), ``pads`` (top, left): where the output
    starts in the canvas.  With the scratch bytes its b needs (0: none)."""
    in_c, fh, fw, out_c = weights.shape
    weights = np.ascontiguousarray(weights, np.float32)
    bias = np.ascontiguousarray(bias, np.float32)
    pointer: Any = ffi.new("nnb_plan_transpose_conv *")
    pointer.batches, pointer.in_h, pointer.in_w, pointer.in_c = in_shape
    pointer.out_h, pointer.out_w = out_hw
    pointer.filter_h, pointer.filter_w, pointer.out_c = fh, fw, out_c
    pointer.stride_h, pointer.stride_w = strides
    pointer.pad_top, pointer.pad_left = pads
    pointer.weights = ffi.from_buffer("float[]", weights)
    pointer.weight_count = weights.size
    pointer.bias = ffi.from_buffer("float[]", bias)
    pointer.narrow, pointer.nchw = int(out_c < NARROW_BELOW), int(nchw)
    return Params(pointer, (weights, bias)), lib.nnb_plan_transpose_conv_scratch(pointer)


#: TRANSPOSE_CONV with fewer output channels than this sums along input rows
#: (a multiply-add along a few out_c costs more in loop than in arithmetic).
NARROW_BELOW = 8


def threads_params(threads: int, min_work: int, slices: int = 1) -> Params:
    """THREADS: the convolutions after it of at least ``min_work`` multiply-adds
    split into ``threads * slices`` runs of rows over up to ``threads`` threads
    (the pool's count caps it)."""
    pointer: Any = ffi.new("nnb_plan_threads *")
    pointer.threads, pointer.slices, pointer.min_work = threads, slices, min_work
    return Params(pointer)


def padded_add_params(channels: int, x_channels: int) -> Params:
    pointer: Any = ffi.new("nnb_plan_padded_add *")
    pointer.channels, pointer.x_channels = channels, x_channels
    return Params(pointer)


class PlanTable:
    """Steps and the size of each buffer, checked by C once, when built (a
    planner bug is a BadDataError here, never a stray write): a run does not
    check them again (csrc/plan.c says why it need not).

    Arenas are kept between runs, one per concurrent caller: a run takes one
    from the pool (a list's pop and append are atomic under the GIL) and
    gives it back, so no arena is allocated once the model is warm.

    ``threads`` > 1 puts a THREADS step first: the convolutions of at least
    ``min_work`` multiply-adds then split their output rows over up to that
    many kernel threads (as many as the process's pool has; see
    :mod:`.threadpool`), with the same results as on one."""

    def __init__(
        self,
        steps: Sequence[PlanStep],
        buffer_bytes: Sequence[int],
        arena_bytes: int,
        threads: int = 1,
        min_work: int = 0,
        slices: int = 1,
    ) -> None:
        if threads > 1:
            head = PlanStep(THREADS, None, 0, params=threads_params(threads, min_work, slices))
            steps = [head, *steps]
        self.threads = threads
        table: Any = ffi.new("nnb_plan_step[]", len(steps))  # its fields are set below
        for entry, step in zip(table, steps):
            entry.kind, entry.out, entry.count = step.kind, step.out, step.count
            if step.a is not None:
                entry.a, entry.a_step = step.a, step.a_step
            if step.b is not None:
                entry.b, entry.b_step = step.b, step.b_step
            entry.lo, entry.hi = step.lo, step.hi
            if step.params is not None:
                entry.params = step.params.pointer
        self._steps = tuple(steps)  # their params stay alive as long as the table
        self._table = table
        self._count = len(steps)
        self.buffer_bytes = tuple(buffer_bytes)
        self._bytes = ffi.new("int64_t[]", list(buffer_bytes))
        self._buffers = len(buffer_bytes)
        #: the buffers some step writes (by position): a bound one must be writable
        self.written = frozenset(-1 - s.out for s in steps if s.out < 0)
        self._arena_bytes = arena_bytes
        self._arenas: list[tuple[np.ndarray, Any]] = []
        rc = lib.nnb_plan_check(table, self._count, arena_bytes, self._bytes, self._buffers)
        if rc:
            raise BadDataError(f"the C plan refuses its tables ({rc}): a step reaches outside")

    def run(self, buffers: Sequence[np.ndarray], deadline_ns: int | None = None) -> None:
        """Run the steps over ``buffers`` (C-contiguous, inputs then outputs, each of
        its ``buffer_bytes``); past ``deadline_ns`` (absolute CLOCK_MONOTONIC ns)
        the run stops between two steps with :class:`DeadlineExceeded`."""
        if len(buffers) != self._buffers:
            raise BadDataError(f"the C plan takes {self._buffers} buffers, got {len(buffers)}")
        arenas = self._arenas
        arena = arenas.pop() if arenas else self._new_arena()
        pointers = ffi.new("void *[]", [ffi.from_buffer(b) for b in buffers])
        try:
            rc = lib.nnb_plan_run(
                self._table, self._count, arena[1], self._arena_bytes, pointers, self._bytes,
                self._buffers, deadline_ns or 0,
            )  # fmt: skip
        finally:
            arenas.append(arena)
        if rc:
            raise _plan_error(rc)

    def bind(self, buffers: Sequence[np.ndarray]) -> BoundPlan:
        """The table over these very ``buffers``, for any number of runs: the
        checks and pointers a :meth:`run` takes every call are taken once."""
        return BoundPlan(self, buffers)

    def _new_arena(self) -> tuple[np.ndarray, Any]:
        memory = np.empty(self._arena_bytes + ALIGN, np.uint8)
        start = -memory.ctypes.data % ALIGN
        arena = memory[start : start + self._arena_bytes]
        return memory, ffi.from_buffer(arena)


def _plan_error(rc: int) -> Exception:
    if rc == ETIMEDOUT:
        return DeadlineExceeded("the execution missed its deadline inside a C plan")
    return error_for(rc, "the C plan")


class BoundPlan:
    """A :class:`PlanTable` run over fixed buffers (a reusable request's own
    inputs and outputs): each is checked once here (count, size, C order,
    outputs writable and apart from every other buffer) and its address
    taken once, so a run is one C call.  The buffers stay exported (held)
    until :meth:`close`.  One run at a time: the arena is its own."""

    def __init__(self, table: PlanTable, buffers: Sequence[np.ndarray]) -> None:
        if len(buffers) != len(table.buffer_bytes):
            raise BadDataError(
                f"the C plan takes {len(table.buffer_bytes)} buffers, got {len(buffers)}"
            )
        spans = []
        for i, (buffer, size) in enumerate(zip(buffers, table.buffer_bytes)):
            if type(buffer) is not np.ndarray or not buffer.flags.c_contiguous:
                raise BadDataError(f"the C plan's buffer {i} is not a C-contiguous array")
            if buffer.nbytes != size:
                raise BadDataError(
                    f"the C plan's buffer {i} holds {buffer.nbytes} bytes, not {size}"
                )
            if i in table.written and not buffer.flags.writeable:
                raise BadDataError(f"the C plan's output buffer {i} is read-only")
            spans.append((buffer.ctypes.data, buffer.ctypes.data + buffer.nbytes))
        for i in table.written:  # an output sharing bytes with another buffer would be read back
            start, end = spans[i]
            for j, (other_start, other_end) in enumerate(spans):
                if j != i and start < other_end and other_start < end and start < end:
                    raise BadDataError(f"the C plan's output buffer {i} overlaps buffer {j}")
        self._table = table
        self._held: list[Any] | None = [ffi.from_buffer(b) for b in buffers]
        self._pointers = ffi.new("void *[]", self._held)
        memory, self._arena = table._new_arena()
        self._memory = memory
        self._run = lib.nnb_plan_run
        self._arguments = (table._table, table._count)
        self._rest = (table._arena_bytes, self._pointers, table._bytes, table._buffers)

    def run(self, deadline_ns: int | None = None) -> None:
        """One run over the bound buffers (see :meth:`PlanTable.run`)."""
        held = self._held  # the buffers stay exported until the call returns
        if held is None:
            raise BadDataError("the C plan's buffers were released")
        steps, count = self._arguments
        arena_bytes, pointers, sizes, buffers = self._rest
        rc = self._run(steps, count, self._arena, arena_bytes, pointers, sizes, buffers,
                       deadline_ns or 0)  # fmt: skip
        if rc:
            raise _plan_error(rc)

    @property
    def c_arguments(self) -> tuple[Any, ...]:
        """``nnb_plan_run``'s arguments but the deadline, for a C caller (the
        burst server's C path); valid while this object is open and alive."""
        if self._held is None:
            raise BadDataError("the C plan's buffers were released")
        steps, count = self._arguments
        return (steps, count, self._arena, *self._rest)

    def close(self) -> None:
        """Release the buffers (a memory mapping can close once nothing holds it)."""
        self._held = None
        self._pointers = ffi.NULL
        self._rest = (0, ffi.NULL, ffi.NULL, 0)


@dataclass(frozen=True)
class KernelStep:
    """What a bound kernel is as one C step: ``kind`` with ``params`` from its
    first input to its output (``b`` its second input for QLOOKUP and
    PADDED_ADD, else ``scratch`` bytes of the arena when not 0).  ``nchw``:
    the step computes NHWC for an NCHW operation, whose input and output
    the planner transposes around it.  ``macs``: not 0 for a step that stands
    for a BLAS matrix product of that many multiply-adds (the planner weighs it).
    ``pad``: (top, bottom, left, right) rows and columns of ``pad_value`` the step
    reads around its NHWC input (the planner fills and copies them into scratch)."""

    kind: int
    params: Params
    count: int = 0
    scratch: int = 0
    lo: float = -np.inf
    hi: float = np.inf
    nchw: bool = False
    macs: int = 0
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    pad_value: float = 0.0


def mark(kernel: Any, step: KernelStep) -> Any:
    """``kernel``, noted as computable by the C plan as ``step``."""
    kernel.plan_step = step
    return kernel


def marked(kernel: Any) -> KernelStep | None:
    """The step :func:`mark` noted on ``kernel``, if any."""
    step = getattr(kernel, "plan_step", None)
    return step if isinstance(step, KernelStep) else None
