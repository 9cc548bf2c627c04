"""The queue's contract (``csrc/fmq.h``): a handle on a queue in shared
memory, its prepared round trip, and event-flag words.

A deadline here is ``int | None`` (absolute ``time.monotonic_ns()``; None:
none); each wrapper turns None into C's sentinel in one expression.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BadDataError, NNError
from .compiled import ffi, lib
from .status import EAGAIN, EINTR, EINVAL, EOVERFLOW, EPIPE, ETIMEDOUT, error_for

if TYPE_CHECKING:
    from .._native import CData

#: C's "no deadline".  ``None`` becomes this in exactly one expression per call.
_NO_DEADLINE = -1

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
        args = (src, n, read_bit, write_bit, deadline_ns, spin_ns)
        return self._wait(_fmq_write_blocking, "write_blocking", *args) is not None

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
        args = (dst, n, read_bit, write_bit, deadline_ns, spin_ns)
        return self._wait(_fmq_read_blocking, "read_blocking", *args) is not None

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
        args = (dst, max_n, read_bit, write_bit, deadline_ns, spin_ns)
        count = self._wait(_fmq_read_available, "read_available_blocking", *args)
        return 0 if count is None else count

    def _wait(
        self,
        call: Any,
        what: str,
        buffer: CData,
        n: int,
        read_bit: int,
        write_bit: int,
        deadline_ns: int | None,
        spin_ns: int,
    ) -> int | None:
        """A blocking C call's result (>= 0), retried across signals (their
        Python handlers have run by then); None when the deadline passed."""
        deadline = _NO_DEADLINE if deadline_ns is None else deadline_ns
        rc = EINTR
        while rc == EINTR:
            rc = call(self._q, buffer, n, read_bit, write_bit, deadline, spin_ns)
        if rc == ETIMEDOUT:
            return None
        if rc < 0:
            raise self.error(rc, what)
        return int(rc)

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
