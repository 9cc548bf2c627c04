"""The binding layer: the only module that calls the compiled ``nnburst._native``.

Typed wrappers for the C contracts of ``csrc/``: the queue and its event
flag (``fmq.h``: :class:`QueueHandle`, :class:`RoundTrip`,
:class:`EventWord`) and the CPU kernels (``kernels.h``: :class:`ConvKernel`,
:class:`Requantize`, the one-shot functions below).  Every C status goes
through one table, :func:`error_for`, into an ``NNError`` subclass; and a
deadline is ``int | None`` (absolute ``time.monotonic_ns()``, see
``nnburst/deadlines.py``) everywhere above, turned into C's "no deadline"
sentinel here and nowhere else.

Hot paths (a burst's round trip is a few µs): C functions are bound once to
module globals or to a prepared object, a wrapper returns on the success
test before anything else, and errors are built only when they happen.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

try:
    from . import _native  # compiled by cffi at build time; typed by _native.pyi
except ImportError as exc:  # the usual cause: a source checkout shadows the installed package
    _here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    raise ImportError(
        f"nnburst's compiled module is missing from {_here}/nnburst: this is a source "
        "checkout without a build (Python looks in the current directory first). Run from "
        "another directory to use the installed nnburst, or build this checkout with "
        "`pip install -e .`"
    ) from exc
from .codes import ResultCode
from .errors import (
    BadDataError,
    BrokenResourceError,
    ClosedResourceError,
    CorruptQueueError,
    DeadlineExceeded,
    NNError,
    OutOfMemoryError,
    UnsupportedError,
)

if TYPE_CHECKING:
    from ._native import CData

ffi = _native.ffi
lib = _native.lib

# -- status: one table for every C return --------------------------------------

EAGAIN: int = lib.NNB_EAGAIN
ETIMEDOUT: int = lib.NNB_ETIMEDOUT
EINTR: int = lib.NNB_EINTR
EINVAL: int = lib.NNB_EINVAL
EPROTO: int = lib.NNB_EPROTO
EOVERFLOW: int = lib.NNB_EOVERFLOW
EPIPE: int = lib.NNB_EPIPE
EBADF: int = lib.NNB_EBADF
ENOTSUP: int = lib.NNB_ENOTSUP
ENOMEM: int = lib.NNB_ENOMEM
ENOSYS: int = lib.NNB_ENOSYS

#: C status -> (exception, what it means).  EAGAIN, EOVERFLOW and EINTR are
#: outcomes the wrappers below answer themselves (False, None, a retry); they
#: reach this table only where they cannot happen.
_ERRORS: dict[int, tuple[type[NNError], str]] = {
    EPROTO: (CorruptQueueError, "the shared queue header or counters are corrupt"),
    EBADF: (ClosedResourceError, "the queue was closed"),
    EPIPE: (BrokenResourceError, "the peer closed or tore down the queue"),
    EINVAL: (BadDataError, "invalid argument"),
    ETIMEDOUT: (DeadlineExceeded, "timed out"),
    ENOTSUP: (UnsupportedError, "not built or not supported by this CPU"),
    ENOMEM: (OutOfMemoryError, "out of memory"),
    ENOSYS: (UnsupportedError, "not available in this C library"),
    EAGAIN: (NNError, "would block"),
    EOVERFLOW: (NNError, "the reader was overrun"),
    EINTR: (NNError, "interrupted by a signal"),
}


def error_for(
    rc: int,
    what: str,
    *,
    closed_locally: bool = False,
    detail: str | None = None,
    code: ResultCode | None = None,
) -> NNError:
    """The exception for C status ``rc`` returned by ``what``.

    ``closed_locally``: the caller closed the queue, so a teardown (-EPIPE)
    is its own doing (``ClosedResourceError``), not the peer's.  ``detail``
    replaces the table's phrase; ``code`` its result code (a kernel that
    refuses its arguments at run time is an operation that failed)."""
    if rc == EPIPE and closed_locally:
        rc = EBADF
    cls, phrase = _ERRORS.get(rc, (NNError, f"failed with errno {-rc}"))
    return cls(f"{what}: {detail or phrase}", code)


#: C's "no deadline".  ``None`` becomes this in exactly one expression per call.
_NO_DEADLINE = -1

# -- the queue (fmq.h) --------------------------------------------------------

FLAVOR_SYNCHRONIZED: int = lib.NNB_FLAVOR_SYNCHRONIZED
FLAVOR_UNSYNCHRONIZED: int = lib.NNB_FLAVOR_UNSYNCHRONIZED
HAS_EVFLAG: int = lib.NNB_FMQ_HAS_EVFLAG
EF_NOT_FULL: int = lib.NNB_EF_NOT_FULL
EF_NOT_EMPTY: int = lib.NNB_EF_NOT_EMPTY
EF_TEARDOWN: int = lib.NNB_EF_TEARDOWN

READ_OFFSET: int = lib.NNB_FMQ_READ_OFFSET
WRITE_OFFSET: int = lib.NNB_FMQ_WRITE_OFFSET
RING_OFFSET: int = lib.NNB_FMQ_RING_OFFSET

_fmq_write = lib.nnb_fmq_write
_fmq_read = lib.nnb_fmq_read
_fmq_write_blocking = lib.nnb_fmq_write_blocking
_fmq_read_blocking = lib.nnb_fmq_read_blocking
_fmq_read_available = lib.nnb_fmq_read_available_blocking
_fmq_round_trip = lib.nnb_fmq_round_trip
_evflag_wake = lib.nnb_evflag_wake
_evflag_wait = lib.nnb_evflag_wait


def required_bytes(quantum: int, count: int) -> int:
    """Shared memory needed by a queue; 0 when the size would overflow."""
    return int(lib.nnb_fmq_required_bytes(quantum, count))


def pointer(array: Any, writable: bool = False) -> CData:
    """A C pointer to a buffer's first byte; keep the buffer alive while it is used."""
    return ffi.from_buffer(array, require_writable=writable)


def release(cdata: CData) -> None:
    """Let go of a :func:`pointer` now rather than when it is collected."""
    ffi.release(cdata)


class QueueHandle:
    """This process's C handle (``nnb_fmq_t``) on a queue in a mapping.

    The wrappers answer what C's status means for a queue: ``False``/``None``
    /``0`` where libfmq's calls do (no room, not enough data, an overrun
    reader, the deadline), the table's exception otherwise.  Pointers come
    from :func:`pointer`; the caller checks sizes against its arrays.
    """

    __slots__ = ("closed", "word", "_q", "_handle", "_base", "_regions", "_hook")

    def __init__(
        self,
        mapping: Any,
        size: int,
        quantum: int,
        count: int,
        flavor: int,
        event_flag: bool,
        *,
        create: bool,
        reset: bool = False,
    ) -> None:
        """Format ``mapping`` as an empty queue (``create``) or attach to the one
        in it, checking its header against what the caller was promised."""
        self.closed = False
        self._hook: CData | None = None
        self._handle = ffi.new("char[]", lib.nnb_fmq_handle_bytes())
        self._q = ffi.cast("nnb_fmq_t *", self._handle)
        self._base = ffi.from_buffer(mapping, require_writable=True)
        self._regions = ffi.new("nnb_region_t[2]")
        flags = HAS_EVFLAG if event_flag else 0
        if create:
            rc = lib.nnb_fmq_create(self._q, self._base, size, quantum, count, flavor, flags)
        else:
            rc = lib.nnb_fmq_attach(
                self._q, self._base, size, quantum, count, flavor, flags, int(reset)
            )
        if rc:
            ffi.release(self._base)
            raise error_for(rc, "attach" if not create else "create")
        word = lib.nnb_fmq_evflag_word(self._q)
        #: the queue's event-flag word, if it has one
        self.word = EventWord(word, self, self._is_closed) if event_flag else None

    def _is_closed(self) -> bool:
        return self.closed

    def error(self, rc: int, what: str) -> NNError:
        return error_for(rc, what, closed_locally=self.closed)

    def _count(self, n: int, what: str) -> int:
        if n < 0:
            raise self.error(n, what)
        return int(n)

    def available_to_read(self) -> int:
        return self._count(lib.nnb_fmq_available_to_read(self._q), "available_to_read")

    def available_to_write(self) -> int:
        return self._count(lib.nnb_fmq_available_to_write(self._q), "available_to_write")

    # -- copies -------------------------------------------------------------

    def write(self, src: CData, n: int) -> bool:
        """All ``n`` elements or nothing; False: no room, or more than the ring holds."""
        rc = _fmq_write(self._q, src, n)
        if rc == 0:
            return True
        if rc in (EAGAIN, EINVAL):
            return False
        raise self.error(rc, "write")

    def read(self, dst: CData, n: int) -> bool:
        """False: fewer there, more than the ring holds, or an unsynchronized
        reader was overrun (it resumes at the newest half)."""
        rc = _fmq_read(self._q, dst, n)
        if rc == 0:
            return True
        if rc in (EAGAIN, EINVAL, EOVERFLOW):
            return False
        raise self.error(rc, "read")

    def write_until(
        self,
        src: CData,
        n: int,
        read_bit: int,
        write_bit: int,
        deadline_ns: int | None,
        spin_ns: int,
    ) -> bool:
        """Blocking write; False when ``deadline_ns`` passed first."""
        deadline = _NO_DEADLINE if deadline_ns is None else deadline_ns
        rc = EINTR
        while rc == EINTR:  # a signal: its Python handler has run; go on
            rc = _fmq_write_blocking(self._q, src, n, read_bit, write_bit, deadline, spin_ns)
        if rc == 0:
            return True
        if rc == ETIMEDOUT:
            return False
        raise self.error(rc, "write_blocking")

    def read_until(
        self,
        dst: CData,
        n: int,
        read_bit: int,
        write_bit: int,
        deadline_ns: int | None,
        spin_ns: int,
    ) -> bool:
        """Blocking read of exactly ``n``; False when ``deadline_ns`` passed first."""
        deadline = _NO_DEADLINE if deadline_ns is None else deadline_ns
        rc = EINTR
        while rc == EINTR:
            rc = _fmq_read_blocking(self._q, dst, n, read_bit, write_bit, deadline, spin_ns)
        if rc == 0:
            return True
        if rc == ETIMEDOUT:
            return False
        raise self.error(rc, "read_blocking")

    def read_available_until(
        self,
        dst: CData,
        max_n: int,
        read_bit: int,
        write_bit: int,
        deadline_ns: int | None,
        spin_ns: int,
    ) -> int:
        """Wait for one element, read all there are (up to ``max_n``); 0 at the deadline."""
        deadline = _NO_DEADLINE if deadline_ns is None else deadline_ns
        rc = EINTR
        while rc == EINTR:
            rc = _fmq_read_available(self._q, dst, max_n, read_bit, write_bit, deadline, spin_ns)
        if rc > 0:
            return int(rc)
        if rc == ETIMEDOUT:
            return 0
        raise self.error(rc, "read_available_blocking")

    # -- zero copy ----------------------------------------------------------

    def _granted(
        self, rc: int, what: str, refused: tuple[int, ...]
    ) -> list[tuple[int, int]] | None:
        if rc in refused:
            return None
        if rc:
            raise self.error(rc, what)
        return [(r.offset_bytes, r.count) for r in self._regions if r.count]

    def begin_write(self, n: int) -> list[tuple[int, int]] | None:
        """(byte offset in the ring, element count) of each granted part; None: no room."""
        rc = lib.nnb_fmq_begin_write(self._q, n, self._regions)
        return self._granted(rc, "begin_write", (EAGAIN, EINVAL))

    def begin_read(self, n: int) -> list[tuple[int, int]] | None:
        """As :meth:`begin_write`; None: fewer there, or the reader was overrun."""
        rc = lib.nnb_fmq_begin_read(self._q, n, self._regions)
        return self._granted(rc, "begin_read", (EAGAIN, EINVAL, EOVERFLOW))

    def commit_write(self, n: int) -> bool:
        """False: more than was granted."""
        rc = lib.nnb_fmq_commit_write(self._q, n)
        if rc == EINVAL:
            return False
        if rc:
            raise self.error(rc, "commit_write")
        return True

    def commit_read(self, n: int) -> bool:
        """False: more than was granted, or a writer overran them meanwhile."""
        rc = lib.nnb_fmq_commit_read(self._q, n)
        if rc in (EINVAL, EOVERFLOW):
            return False
        if rc:
            raise self.error(rc, "commit_read")
        return True

    # -- closing from another thread -----------------------------------------

    def shut_down(self, tear_down: bool) -> None:
        """Refuse every new call (-EBADF); ``tear_down`` also sets the teardown
        bit, ending blocked calls here and in the peer.  Closed first, so
        those calls report ``ClosedResourceError``."""
        self.closed = True
        if tear_down and self.word is not None:
            _evflag_wake(self.word.cdata, EF_TEARDOWN)
        lib.nnb_fmq_shutdown(self._q)

    def calls_inside(self) -> int:
        """Calls still inside the C core on this handle; unmap only at 0."""
        return int(lib.nnb_fmq_calls_inside(self._q))

    def release(self) -> None:
        """Give up the mapping's buffer (after :meth:`shut_down`, none inside)."""
        ffi.release(self._base)

    def set_read_hook(self, hook: Callable[[], None] | None) -> None:
        """Test hook: ``hook()`` runs in the middle of every later read's copy
        (``nnb_fmq_set_read_hook``); None removes it."""
        if hook is None:
            lib.nnb_fmq_set_read_hook(self._q, ffi.NULL, ffi.NULL)
            self._hook = None
            return
        self._hook = ffi.callback("void(void *)", lambda _ctx: hook())
        lib.nnb_fmq_set_read_hook(self._q, self._hook, ffi.NULL)


class RoundTrip:
    """``rt(n, deadline_ns, spin_ns)``: send ``request[:n]`` on one queue, then
    wait for a reply on another and read all of it into ``reply``; returns
    the reply's length, 0 if it did not come by ``deadline_ns`` (the request
    went out), -1 if the request could not be written by then.

    One C call (``nnb_fmq_round_trip``) on a struct filled once: queues,
    buffers and capacities do not change between round trips, so a call
    passes four arguments.  The hot path of a burst's client and server.
    """

    __slots__ = ("_requests", "_replies", "_buffers", "_struct", "_capacity", "_spin", "_keep")

    def __init__(
        self,
        requests: QueueHandle,
        replies: QueueHandle,
        request: np.ndarray,
        reply: np.ndarray,
        spin_ns: int,
        keep: object = None,
    ) -> None:
        """``request``/``reply``: C-contiguous arrays of the queues' elements
        (the caller checks); ``keep``: what must outlive this (the queues' owners)."""
        self._requests, self._replies, self._keep = requests, replies, keep
        self._capacity = request.size
        self._spin = spin_ns
        self._buffers = (ffi.from_buffer(request), ffi.from_buffer(reply, require_writable=True))
        self._struct = ffi.new(
            "nnb_round_trip_t *",
            {
                "requests": requests._q,
                "request": self._buffers[0],
                "request_capacity": request.size,
                "replies": replies._q,
                "reply": self._buffers[1],
                "reply_capacity": reply.size,
            },
        )

    def __call__(self, n: int, deadline_ns: int | None = None, spin_ns: int | None = None) -> int:
        """Round trip of ``request[:n]``; ``spin_ns`` overrides the spin window
        given at creation for this call (a caller's adaptive policy)."""
        spin = self._spin if spin_ns is None else spin_ns
        try:
            rc: int = _fmq_round_trip(
                self._struct, n, _NO_DEADLINE if deadline_ns is None else deadline_ns, spin
            )
        except OverflowError:  # a negative n does not fit the C uint64_t
            rc = EINVAL
        if rc > 0:
            return rc
        return self._settle(rc, n, deadline_ns, spin)

    def _settle(self, rc: int, n: int, deadline_ns: int | None, spin: int) -> int:
        """What a round trip that brought no reply means."""
        wrote = self._struct.wrote
        if rc == EINVAL and not 0 <= n <= self._capacity:
            raise BadDataError(f"cannot send {n} elements from a {self._capacity}-element request")
        if rc == EINTR and not wrote:
            return self(n, deadline_ns, spin)  # nothing went out: start again
        if rc == EINTR:
            # A signal's Python handler has run; the request is out: keep waiting.
            reply, capacity = self._buffers[1], self._struct.reply_capacity
            return self._replies.read_available_until(
                reply, capacity, EF_NOT_FULL, EF_NOT_EMPTY, deadline_ns, spin
            )
        if rc == ETIMEDOUT:
            return 0 if wrote else -1
        raise (self._replies if wrote else self._requests).error(rc, "round trip")


class EventWord:
    """A futex word of sticky bits in shared memory (``nnb_evflag_*``)."""

    __slots__ = ("cdata", "_keep", "_closed")

    def __init__(self, cdata: CData, keep: object, closed: Callable[[], bool]) -> None:
        """``keep``: what owns the word's memory; ``closed()``: whether its
        owner was closed here (a teardown then is ours, not the peer's)."""
        self.cdata = cdata
        self._keep = keep
        self._closed = closed

    @classmethod
    def on_buffer(cls, buffer: Any, offset: int, closed: Callable[[], bool]) -> EventWord:
        """The word at ``offset`` of a writable buffer (4-byte aligned)."""
        cdata = ffi.from_buffer(buffer, require_writable=True)
        if offset < 0 or offset + 4 > len(cdata):
            raise BadDataError(f"offset {offset} is outside the {len(cdata)}-byte buffer")
        word = ffi.cast("uint32_t *", cdata + offset)
        if int(ffi.cast("uintptr_t", word)) % 4:
            raise BadDataError("the event-flag word must be 4-byte aligned")
        return cls(word, cdata, closed)

    def wake(self, bits: int) -> None:
        rc = _evflag_wake(self.cdata, bits)
        if rc:
            raise error_for(rc, "EventFlag.wake")

    def wait(self, bits: int, deadline_ns: int | None, retry: bool) -> int:
        """Consume and return pending bits of ``bits``; 0 at the deadline (and,
        without ``retry``, after a spurious wake)."""
        seen = ffi.new("uint32_t *")
        deadline = _NO_DEADLINE if deadline_ns is None else deadline_ns
        rc = EINTR
        while rc == EINTR:  # the signal's Python handler has run: wait again
            rc = _evflag_wait(self.cdata, bits, deadline, int(retry), seen)
        if rc == 0:
            return int(seen[0])
        if rc == ETIMEDOUT or (rc != EPIPE and not retry):
            return 0
        raise error_for(rc, "EventFlag.wait", closed_locally=self._closed())

    @property
    def value(self) -> int:
        return int(self.cdata[0])

    @property
    def address(self) -> int:
        """Where the word is in this process (tests find a futex sleeper by it)."""
        return int(ffi.cast("uintptr_t", self.cdata))


# -- the kernels (kernels.h) -------------------------------------------------

CONV_BEST: int = lib.NNB_CONV_BEST
CONV_PORTABLE: int = lib.NNB_CONV_PORTABLE
CONV_AVX2: int = lib.NNB_CONV_AVX2
CONV_AVX512: int = lib.NNB_CONV_AVX512
POOL_MAX: int = lib.NNB_POOL_MAX
POOL_SUM: int = lib.NNB_POOL_SUM
QUANT_ADD: int = lib.NNB_QUANT_ADD
QUANT_MUL: int = lib.NNB_QUANT_MUL
#: The 8-bit types the quantized kernels write, by numpy dtype.
OUT_TYPES: dict[np.dtype, int] = {
    np.dtype(np.uint8): lib.NNB_OUT_UINT8,
    np.dtype(np.int8): lib.NNB_OUT_INT8,
}

_FAILED = ResultCode.OP_FAILED  # a kernel refusing at run time: the operation failed


def _floats(array: np.ndarray) -> CData:
    return ffi.from_buffer("float[]", array)


def _bytes(array: np.ndarray) -> CData:
    return ffi.from_buffer("uint8_t[]", array)


def window_shape(fields: dict[str, int]) -> CData:
    """A ``struct nnb_window_shape`` (batches, in_h, ..., out_c) to pass a kernel."""
    return ffi.new("struct nnb_window_shape *", fields)


class ConvKernel:
    """``nnb_conv_f32`` or ``nnb_depthwise_conv_f32`` with everything but the
    input and output fixed (shape, weights, bias, clamp, path).  The arrays
    are kept alive here; calls share them read-only, so threads may too."""

    __slots__ = ("_loop", "_arguments", "_path", "_what", "_invalid", "_arrays")

    def __init__(
        self,
        depthwise: bool,
        shape: CData,
        weights: np.ndarray,
        bias: np.ndarray,
        lo: float,
        hi: float,
        path: int,
        what: str,
        invalid: str,
    ) -> None:
        """``weights`` and ``bias`` float32 and C-contiguous; ``invalid``: the
        message if C finds the shape's windows outside the input."""
        self._loop = lib.nnb_depthwise_conv_f32 if depthwise else lib.nnb_conv_f32
        self._arrays = (weights, bias)
        self._arguments = (shape, _floats(weights), weights.shape[-1], _floats(bias), lo, hi)
        self._path, self._what, self._invalid = path, what, invalid

    def __call__(self, source: np.ndarray, out: np.ndarray) -> None:
        """``out`` for ``source``, both float32 C-contiguous of the shape's sizes."""
        rc = self._loop(_floats(source), *self._arguments, _floats(out), self._path)
        if rc:
            what = f"{self._what} path {self._path}" if rc == ENOTSUP else self._what
            detail = self._invalid if rc == EINVAL else None
            if rc == ENOMEM:
                detail = "no memory for the row of zeros its padding reads"
            raise error_for(rc, what, detail=detail, code=_FAILED)


def pool_f32(padded: np.ndarray, shape: CData, kind: int, out: np.ndarray, window: object) -> None:
    """``nnb_pool_f32`` of ``kind`` (:data:`POOL_MAX`, :data:`POOL_SUM`);
    ``window`` names the window in an error."""
    rc = lib.nnb_pool_f32(_floats(padded), shape, kind, _floats(out))
    if rc:
        detail = f"window {window} (kind {kind}) does not fit the input {padded.shape}"
        raise error_for(rc, "pool", detail=detail, code=_FAILED)


def add_padded_channels_f32(
    a: np.ndarray, x: np.ndarray, lo: float, hi: float, out: np.ndarray
) -> None:
    """``nnb_add_padded_channels_f32`` over ``a``'s pixels (float32, C-contiguous)."""
    channels = a.shape[-1]
    rc = lib.nnb_add_padded_channels_f32(
        _floats(a), _floats(x), a.size // channels, channels, x.shape[-1], lo, hi, _floats(out)
    )
    if rc:
        detail = f"cannot add {x.shape} padded on its last axis to {a.shape}"
        raise error_for(rc, "add padded channels", detail=detail, code=_FAILED)


class Requantize:
    """``nnb_requantize_f32`` with everything but the sums and output fixed."""

    __slots__ = ("_arguments", "_arrays", "_invalid")

    def __init__(
        self,
        bias: np.ndarray,
        multipliers: np.ndarray,
        shifts: np.ndarray,
        zero_point: int,
        bounds: tuple[int, int],
        dtype: np.dtype,
    ) -> None:
        """``bias``, ``multipliers``, ``shifts``: C-contiguous int64 (one
        multiplier and shift for all channels, or one per channel)."""
        self._arrays = (bias, multipliers, shifts)  # kept alive for the pointers
        self._arguments = (
            ffi.from_buffer("int64_t[]", bias),
            ffi.from_buffer("int64_t[]", multipliers),
            ffi.from_buffer("int64_t[]", shifts),
            int(multipliers.size != 1),
            zero_point,
            *bounds,
            OUT_TYPES[dtype],
        )
        self._invalid = f"cannot requantize to {dtype} within {bounds}"

    def __call__(self, acc: np.ndarray, channels: int, out: np.ndarray) -> None:
        rc = lib.nnb_requantize_f32(
            _floats(acc), acc.size // channels, channels, *self._arguments, ffi.from_buffer(out)
        )
        if rc:
            raise error_for(rc, "requantize", detail=self._invalid, code=_FAILED)


def quant_binary_table(fields: dict[str, int], table: np.ndarray) -> None:
    """Fill ``table`` [256, 256] uint8 by ``nnb_quant_binary_table``.

    Raises:
        BadDataError: a value beyond int32, or parameters C refuses.
    """
    try:
        params = ffi.new("struct nnb_quant_binary *", fields)
    except OverflowError as exc:
        raise BadDataError(f"quantized arithmetic parameters beyond int32: {exc}") from None
    rc = lib.nnb_quant_binary_table(params, _bytes(table))
    if rc:
        detail = f"C refuses quantized arithmetic with {fields}"
        raise error_for(rc, "quantized arithmetic", detail=detail)


def quant_binary_lookup(a: np.ndarray, b: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:
    """``out[i] = table[a[i] * 256 + b[i % b.size]]`` (all uint8-sized, C-contiguous)."""
    rc = lib.nnb_quant_binary_lookup(
        _bytes(a), a.size, _bytes(b), b.size, _bytes(table), _bytes(out)
    )
    if rc:
        detail = f"quantized arithmetic failed on {a.shape} and {b.shape}"
        raise error_for(rc, "quantized arithmetic", detail=detail, code=_FAILED)


def softmax_quant8(x: np.ndarray, exps: np.ndarray, radius: int, out: np.ndarray) -> None:
    """``nnb_softmax_quant8`` over the last axis of 8-bit ``x`` (type of :data:`OUT_TYPES`)."""
    depth = x.shape[-1]
    rc = lib.nnb_softmax_quant8(
        ffi.from_buffer(x),
        x.size // depth,
        depth,
        ffi.from_buffer("int32_t[]", exps),
        radius,
        OUT_TYPES[x.dtype],
        ffi.from_buffer(out),
    )
    if rc:
        detail = f"softmax of {x.dtype} {x.shape} refused"
        raise error_for(rc, "softmax", detail=detail, code=_FAILED)


def quantize_f32(x: np.ndarray, scale: float, zero_point: int, out: np.ndarray) -> None:
    """``nnb_quantize_f32`` of float32 ``x`` into ``out`` (uint8 or int8; any
    other type is C's -EINVAL)."""
    out_type = OUT_TYPES.get(out.dtype, 0)
    rc = lib.nnb_quantize_f32(_floats(x), x.size, scale, zero_point, out_type, ffi.from_buffer(out))
    if rc:
        raise error_for(rc, "quantize", detail=f"cannot quantize to {out.dtype}", code=_FAILED)


def keep_freed_memory(mmap_threshold: int, trim_threshold: int) -> None:
    """Raise malloc's thresholds (``nnb_keep_freed_memory``).

    Raises:
        UnsupportedError: not glibc; BadDataError: a value malloc refuses.
    """
    rc = lib.nnb_keep_freed_memory(mmap_threshold, trim_threshold)
    if rc:
        raise error_for(rc, "keep_freed_memory")
