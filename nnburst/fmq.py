"""Fast Message Queue: a lock-free SPSC ring of numpy elements in shared memory.

A :class:`MessageQueue` owns (or attaches to) one POSIX shared-memory
segment laid out by the C core (``csrc/fmq.h``).  Another process
attaches from the queue's :class:`Descriptor`, a small explicit byte string.

Segment lifetime (the rule this module keeps):

* The creator owns the name and unlinks it in ``close()``.
* A synchronized queue has exactly one peer, so the attacher unlinks the name
  as soon as it has mapped the segment.  From then on nothing can be left in
  ``/dev/shm`` whichever process dies.
* An unsynchronized queue keeps its name while the creator lives (more
  readers may come); an attacher that closes after the creator died unlinks
  it.
* A segment whose creator died before anyone attached is removed by the next
  nnburst process that creates a queue (see :mod:`nnburst.shm`).

Closing either side of a synchronized queue sets the teardown bit: every
thread blocked on the queue, in this process or the peer's, wakes with
:class:`~nnburst.errors.ClosedResourceError` (you closed it) or
:class:`~nnburst.errors.BrokenResourceError` (the peer did).
"""

from __future__ import annotations

import enum
import json
import os
import re
import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from . import deadlines, shm
from ._bindings import (
    EF_NOT_EMPTY,
    EF_NOT_FULL,
    EF_TEARDOWN,
    FLAVOR_SYNCHRONIZED,
    FLAVOR_UNSYNCHRONIZED,
    HAS_EVFLAG,
    RING_OFFSET,
    QueueHandle,
    RoundTrip,
    pointer,
    release,
    required_bytes,
)
from .errors import BadDataError, BadStateError, ClosedResourceError, NNError
from .event_flag import EventFlag

if TYPE_CHECKING:
    from ._bindings import CData

__all__ = [
    "FMQ_NOT_EMPTY",
    "FMQ_NOT_FULL",
    "Descriptor",
    "EventFlag",
    "Flavor",
    "MessageQueue",
    "RoundTrip",
    "Transaction",
]

FMQ_NOT_FULL = EF_NOT_FULL
FMQ_NOT_EMPTY = EF_NOT_EMPTY

#: How long close() waits for calls in other threads to leave the C core.
_CLOSE_DRAIN_S = 2.0
_CLOSED = "the queue is closed"
_NO_ARRAY: tuple[Any, Any, int] = (None, None, 0)

# Closing while another thread is inside a call: the C core counts the calls
# inside each handle, and after nnb_fmq_shutdown() refuses new ones with
# -EBADF (ClosedResourceError); close() wakes blocked calls with the teardown
# bit and unmaps only when none is left inside.  EventFlag calls, made from
# Python on the queue's word, are counted in the queue's ``_active`` list.


class Flavor(enum.IntEnum):
    SYNCHRONIZED_READ_WRITE = FLAVOR_SYNCHRONIZED
    UNSYNCHRONIZED_WRITE = FLAVOR_UNSYNCHRONIZED


# Descriptor wire layout, little-endian:
#   magic "NBQD", version u16, flavor u8, flags u8, quantum u32, reserved u32,
#   count u64, segment size u64, creator pid u32, name length u16,
#   dtype length u16, then the name (ASCII) and the dtype (JSON of numpy's
#   portable dtype description).
_DESCRIPTOR = struct.Struct("<4sHBBIIQQIHH")
_DESCRIPTOR_MAGIC = b"NBQD"
_DESCRIPTOR_VERSION = 1


def _encode_dtype(dtype: np.dtype) -> Any:
    """A JSON-able description of a dtype that keeps explicit offsets, so
    union-like layouts (overlapping fields, as the burst datums) survive."""
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return {"subarray": _encode_dtype(base), "shape": list(shape)}
    if dtype.names is not None:
        fields = dtype.fields
        assert fields is not None
        return {
            "names": list(dtype.names),
            "formats": [_encode_dtype(fields[name][0]) for name in dtype.names],
            "offsets": [int(fields[name][1]) for name in dtype.names],
            "itemsize": dtype.itemsize,
        }
    return dtype.str


#: What ``dtype.str`` gives for the plain kinds a queue may carry, and all a
#: descriptor may name: numpy reads other strings as aliases or Python literals.
_PLAIN_DTYPE = re.compile(r"[<>|=][biufcVSU][0-9]{1,6}")


def _decode_dtype(obj: Any, depth: int = 0) -> np.dtype:
    if depth > 8:
        raise ValueError("element type nests too deeply")
    if isinstance(obj, str):
        if not _PLAIN_DTYPE.fullmatch(obj):
            raise ValueError(
                f"element type {obj!r} cannot cross a process boundary "
                "(only plain numpy type strings, such as '<f4')"
            )
        dtype = np.dtype(obj)
        return dtype
    if isinstance(obj, dict) and "subarray" in obj:
        shape = tuple(int(n) for n in obj["shape"])
        return np.dtype((_decode_dtype(obj["subarray"], depth + 1), shape))
    if isinstance(obj, dict):
        return np.dtype(
            {
                "names": [str(n) for n in obj["names"]],
                "formats": [_decode_dtype(f, depth + 1) for f in obj["formats"]],
                "offsets": [int(o) for o in obj["offsets"]],
                "itemsize": int(obj["itemsize"]),
            }
        )
    raise ValueError(f"unknown element type description {obj!r}")


def _dtype_to_json(dtype: np.dtype) -> bytes:
    return json.dumps(_encode_dtype(dtype), separators=(",", ":")).encode()


def _dtype_from_json(raw: bytes) -> np.dtype:
    try:
        return _decode_dtype(json.loads(raw.decode()))
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        UnicodeDecodeError,
        RecursionError,
    ) as exc:
        raise BadDataError(f"descriptor has an invalid element type: {exc}") from exc


@dataclass(frozen=True)
class Descriptor:
    """Everything another process needs to attach to a queue."""

    name: str
    flavor: Flavor
    dtype: np.dtype
    count: int
    size: int
    has_event_flag: bool
    creator_pid: int
    #: a sealed queue's segment fd, in this process only: it is not part of
    #: the bytes, and travels beside them (SCM_RIGHTS).  -1 for a named queue.
    fd: int = field(default=-1, compare=False, repr=False)

    @property
    def quantum(self) -> int:
        return self.dtype.itemsize

    def to_bytes(self) -> bytes:
        name = self.name.encode("ascii")
        dtype = _dtype_to_json(self.dtype)
        header = _DESCRIPTOR.pack(
            _DESCRIPTOR_MAGIC,
            _DESCRIPTOR_VERSION,
            int(self.flavor),
            HAS_EVFLAG if self.has_event_flag else 0,
            self.quantum,
            0,
            self.count,
            self.size,
            self.creator_pid,
            len(name),
            len(dtype),
        )
        return header + name + dtype

    @classmethod
    def from_bytes(cls, data: bytes) -> Descriptor:
        """Parse and validate; raises BadDataError naming what is wrong."""
        data = bytes(data)
        if len(data) < _DESCRIPTOR.size:
            raise BadDataError(
                f"descriptor truncated: {len(data)} bytes, header needs {_DESCRIPTOR.size}"
            )
        (
            magic,
            version,
            flavor,
            flags,
            quantum,
            reserved,
            count,
            size,
            pid,
            name_len,
            dtype_len,
        ) = _DESCRIPTOR.unpack_from(data)
        if magic != _DESCRIPTOR_MAGIC:
            raise BadDataError(f"not an FMQ descriptor (magic {magic!r})")
        if version != _DESCRIPTOR_VERSION:
            raise BadDataError(f"unsupported descriptor version {version}")
        if flavor not in (Flavor.SYNCHRONIZED_READ_WRITE, Flavor.UNSYNCHRONIZED_WRITE):
            raise BadDataError(f"unknown queue flavor {flavor}")
        if flags & ~HAS_EVFLAG or reserved:
            raise BadDataError(f"unknown descriptor flags {flags:#x}/{reserved:#x}")
        if len(data) != _DESCRIPTOR.size + name_len + dtype_len:
            raise BadDataError(
                f"descriptor is {len(data)} bytes but its fields need {_DESCRIPTOR.size + name_len + dtype_len}"
            )
        if not 0 < pid < 2**31:
            raise BadDataError(f"descriptor creator pid {pid} is not a process id")
        if quantum == 0 or count == 0:
            raise BadDataError(
                f"descriptor has quantum {quantum} and count {count}; both must be positive"
            )
        if size != required_bytes(quantum, count):
            raise BadDataError(
                f"descriptor size {size} does not match {count} elements of {quantum} bytes"
            )
        name_end = _DESCRIPTOR.size + name_len
        try:
            name = data[_DESCRIPTOR.size : name_end].decode("ascii")
        except UnicodeDecodeError as exc:
            raise BadDataError("descriptor segment name is not ASCII") from exc
        if name and not shm.NAME_PATTERN.match(name):
            raise BadDataError(f"descriptor names {name!r}, not an nnburst segment")
        dtype = _dtype_from_json(data[name_end:])
        if dtype.itemsize != quantum:
            raise BadDataError(
                f"element type is {dtype.itemsize} bytes but the quantum is {quantum}"
            )
        return cls(name, Flavor(flavor), dtype, count, size, bool(flags & HAS_EVFLAG), pid)


class Transaction:
    """A zero-copy grant: one or two numpy views into the ring (two when it wraps).

    The views alias shared memory: write into them between ``begin_write``
    and ``commit_write``, read them between ``begin_read`` and ``commit_read``.
    """

    __slots__ = ("regions", "count")

    def __init__(self, regions: tuple[np.ndarray, ...], count: int) -> None:
        self.regions = regions
        self.count = count

    def __len__(self) -> int:
        return self.count

    def copy_to(self, data: np.ndarray, start: int = 0) -> None:
        """Copy ``data`` into the granted slots from index ``start``."""
        _copy_across(self.regions, np.asarray(data).reshape(-1), start, into=True)

    def copy_from(self, start: int = 0, n: int | None = None) -> np.ndarray:
        """Copy ``n`` granted slots out, from index ``start``."""
        n = self.count - start if n is None else n
        out = np.empty(n, dtype=self.regions[0].dtype)
        _copy_across(self.regions, out, start, into=False)
        return out


def _copy_across(regions: tuple[np.ndarray, ...], data: np.ndarray, start: int, into: bool) -> None:
    total = sum(len(r) for r in regions)
    if start < 0 or start + len(data) > total:
        raise BadDataError(f"slots [{start}, {start + len(data)}) are outside the {total} granted")
    done = 0
    for region in regions:
        if start >= len(region):
            start -= len(region)
            continue
        take = min(len(region) - start, len(data) - done)
        if into:
            region[start : start + take] = data[done : done + take]
        else:
            data[done : done + take] = region[start : start + take]
        done += take
        start = 0


class MessageQueue:
    """A single-producer/single-consumer queue of ``dtype`` elements.

    Non-blocking calls return ``False``/``None`` when they cannot complete,
    exactly like libfmq; blocking calls take a timeout in ns (0 = forever).
    Every C call runs without the GIL.
    """

    _closed = True
    _region: shm.SharedRegion | None = None

    def __init__(
        self,
        dtype: Any,
        count: int,
        flavor: Flavor = Flavor.SYNCHRONIZED_READ_WRITE,
        event_flag: bool = True,
        sealed: bool = False,
    ) -> None:
        """``sealed``: the segment is a memfd sealed against shrinking, attached
        from its fd (``descriptor.fd``) instead of a name: what a queue shared
        with a process that must not trust us (a driver service) needs."""
        dtype = np.dtype(dtype)
        if dtype.hasobject or dtype.itemsize == 0:
            raise BadDataError(f"element type {dtype} cannot live in shared memory")
        flavor = Flavor(flavor)
        if count <= 0:
            raise BadDataError(f"queue length must be positive, got {count}")
        size = required_bytes(dtype.itemsize, count)
        if size == 0:
            raise BadDataError(
                f"{count} elements of {dtype.itemsize} bytes overflow the queue size"
            )
        region = shm.SharedRegion.create_sealed(size) if sealed else shm.SharedRegion.create(size)
        try:
            self._bind(region, dtype, count, flavor, event_flag, creator=True, reset=False)
        except BaseException:
            region.close()
            region.unlink()
            raise

    @classmethod
    def attach(cls, descriptor: Descriptor | bytes, reset_pointers: bool = False) -> MessageQueue:
        """Attach to a queue another process (or thread) created.

        Raises:
            BadDataError: the descriptor is malformed, its segment is missing
                or smaller than it claims, or the segment's header disagrees.
        """
        if not isinstance(descriptor, Descriptor):
            descriptor = Descriptor.from_bytes(descriptor)
        if descriptor.name:
            region = shm.SharedRegion.attach(descriptor.name, descriptor.size)
        elif descriptor.fd < 0:
            raise BadDataError("the descriptor is of a sealed queue: attaching needs its fd")
        else:
            try:
                fd = os.dup(descriptor.fd)
            except OSError as exc:
                raise BadDataError(f"invalid queue segment fd {descriptor.fd}: {exc}") from exc
            region = shm.SharedRegion.from_fd(fd, descriptor.size)
            region.close_fd()  # mapped: the fd has done its job
        queue = cls.__new__(cls)
        try:
            queue._bind(
                region,
                descriptor.dtype,
                descriptor.count,
                descriptor.flavor,
                descriptor.has_event_flag,
                creator=False,
                reset=reset_pointers,
                creator_pid=descriptor.creator_pid,
            )
        except BaseException:
            region.close()
            raise
        if descriptor.flavor == Flavor.SYNCHRONIZED_READ_WRITE:
            region.unlink()  # both ends are mapped: the name has done its job
        return queue

    def _bind(
        self,
        region: shm.SharedRegion,
        dtype: np.dtype,
        count: int,
        flavor: Flavor,
        event_flag: bool,
        *,
        creator: bool,
        reset: bool,
        creator_pid: int | None = None,
    ) -> None:
        self._region = region
        self.dtype = dtype
        self.flavor = flavor
        self._count = count
        self._creator = creator
        self._creator_pid = os.getpid() if creator_pid is None else creator_pid
        self._active: list[None] = []  # EventFlag calls in flight on our word
        try:
            self._native = QueueHandle(
                region.mmap,
                region.size,
                dtype.itemsize,
                count,
                flavor,
                event_flag,
                create=creator,
                reset=reset,
            )
        except NNError as exc:
            raise BadDataError(
                f"shared segment {region.name} does not hold the queue the descriptor describes"
            ) from exc
        assert region.mmap is not None
        self._ring = np.frombuffer(region.mmap, dtype=dtype, count=count, offset=RING_OFFSET)
        word = self._native.word
        self._event_flag = EventFlag(word, self, self._active) if word is not None else None
        self._can_block = event_flag and flavor == Flavor.SYNCHRONIZED_READ_WRITE
        # One-entry caches (array, C pointer, element count) of the last
        # caller arrays: the hot path reuses the same message and out arrays,
        # and looking a pointer up again costs more than the C call it feeds.
        self._src: tuple[Any, Any, int] = _NO_ARRAY
        self._dst: tuple[Any, Any, int] = _NO_ARRAY
        self._closed = False
        self._blocking_ready = self._can_block  # open and able to block: one check on hot paths

    # -- properties -------------------------------------------------------

    @property
    def descriptor(self) -> Descriptor:
        self._check_open()
        assert self._region is not None
        return Descriptor(
            self._region.name,
            self.flavor,
            self.dtype,
            self._count,
            self._region.size,
            self._event_flag is not None,
            self._creator_pid,
            self._region.fd,
        )

    @property
    def quantum_size(self) -> int:
        return self.dtype.itemsize

    @property
    def quantum_count(self) -> int:
        return self._count

    @property
    def event_flag(self) -> EventFlag | None:
        return self._event_flag

    @property
    def closed(self) -> bool:
        return self._closed

    def is_valid(self) -> bool:
        return not self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedResourceError(_CLOSED)

    def _check_blocking(self) -> None:
        if self._closed:
            raise ClosedResourceError(_CLOSED)
        if self.flavor != Flavor.SYNCHRONIZED_READ_WRITE:
            raise BadStateError("blocking calls need a synchronized queue")
        if self._event_flag is None:
            raise BadStateError("blocking calls need a queue created with an event flag")

    def _source(self, items: Any) -> tuple[Any, CData, int]:
        """(array, C pointer, count) of what to write; cached for reused arrays."""
        src = self._src
        if items is src[0]:
            return src
        array = self._as_elements(items)
        src = (array, pointer(array), array.size)
        if array is items:
            self._src = src
        return src

    def _target(self, out: np.ndarray) -> tuple[Any, CData, int]:
        """(array, C pointer, count) of an out array; cached, callers reuse one."""
        dst = self._dst
        if out is dst[0]:
            return dst
        if (
            type(out) is not np.ndarray
            or out.dtype != self.dtype
            or not out.flags.c_contiguous
            or not out.flags.writeable
        ):
            raise BadDataError(f"out must be a writable C-contiguous numpy array of {self.dtype}")
        self._dst = (out, pointer(out), out.size)
        return self._dst

    def _forget_arrays(self) -> None:
        for _, cdata, _ in (self._src, self._dst):
            if cdata is not None:
                release(cdata)
        self._src = self._dst = _NO_ARRAY

    def _as_elements(self, items: Any) -> np.ndarray:
        """Items as a contiguous array of our dtype, without copying if it already is."""
        if type(items) is np.ndarray and items.dtype == self.dtype and items.flags.c_contiguous:
            return items
        array = np.ascontiguousarray(items, dtype=self.dtype)
        return array.reshape(-1) if array.ndim != 1 else array

    # -- counts -----------------------------------------------------------

    def available_to_read(self) -> int:
        """Elements readable now; more than the capacity means an unsynchronized
        reader was overrun (its next read fails once and resyncs)."""
        self._check_open()
        return self._native.available_to_read()

    def available_to_write(self) -> int:
        self._check_open()
        return self._native.available_to_write()

    # -- non-blocking -----------------------------------------------------

    def write(self, items: Any) -> bool:
        """Write all of ``items`` or nothing; False if there is not room."""
        src = self._src
        _, cdata, n = src if items is src[0] else self._source(items)
        return self._native.write(cdata, n)

    def read(self, n: int) -> np.ndarray | None:
        """Read exactly ``n`` elements, or None if fewer are there (or an
        unsynchronized reader was overrun: it resumes at the newest half)."""
        out = np.empty(n, dtype=self.dtype)
        return out if self.read_into(out) else None

    def read_into(self, out: np.ndarray) -> bool:
        """Fill ``out`` (a contiguous array of our dtype) or leave it untouched."""
        dst = self._dst
        _, cdata, n = dst if out is dst[0] else self._target(out)
        return self._native.read(cdata, n)

    # -- blocking ---------------------------------------------------------
    #
    # The public calls take libfmq's timeout_ns (0 = forever) and convert it
    # once (nnburst.deadlines); the *_until forms take that absolute deadline
    # (None: none), for callers that hold one already (a burst).  Each pair
    # repeats its few lines rather than one calling the other: a Python call
    # costs as much as the C call's bookkeeping.

    def write_blocking(
        self,
        items: Any,
        timeout_ns: int = 0,
        read_notification: int = FMQ_NOT_FULL,
        write_notification: int = FMQ_NOT_EMPTY,
        spin_ns: int = 0,
    ) -> bool:
        """Write all of ``items``, waiting for room; wakes ``write_notification``.

        Returns False without blocking when ``items`` exceeds the capacity, and
        False when ``timeout_ns`` (0 = forever) runs out.

        Raises:
            ClosedResourceError / BrokenResourceError: the queue was closed
                (by you / by the peer) while waiting or before.
        """
        return self.write_until(
            items, deadlines.after(timeout_ns), read_notification, write_notification, spin_ns
        )

    def write_until(
        self,
        items: Any,
        deadline_ns: int | None,
        read_notification: int = FMQ_NOT_FULL,
        write_notification: int = FMQ_NOT_EMPTY,
        spin_ns: int = 0,
    ) -> bool:
        """:meth:`write_blocking` until the absolute ``deadline_ns``."""
        if not self._blocking_ready:
            self._check_blocking()
        src = self._src
        _, cdata, n = src if items is src[0] else self._source(items)
        if n > self._count:
            return False
        return self._native.write_until(
            cdata, n, read_notification, write_notification, deadline_ns, spin_ns
        )

    def read_blocking(
        self,
        n: int,
        timeout_ns: int = 0,
        read_notification: int = FMQ_NOT_FULL,
        write_notification: int = FMQ_NOT_EMPTY,
        spin_ns: int = 0,
        out: np.ndarray | None = None,
    ) -> np.ndarray | None:
        """Read exactly ``n`` elements, waiting for them; wakes ``read_notification``.

        ``out`` is a preallocated array of ``n`` elements to fill and return.
        ``spin_ns`` polls (in C, without the GIL) for that long before
        sleeping on the futex.  Returns None without blocking when ``n``
        exceeds the capacity, and None when ``timeout_ns`` (0 = forever) runs
        out.

        Raises:
            ClosedResourceError / BrokenResourceError: as for write_blocking.
        """
        return self.read_until(
            n, deadlines.after(timeout_ns), read_notification, write_notification, spin_ns, out
        )

    def read_until(
        self,
        n: int,
        deadline_ns: int | None,
        read_notification: int = FMQ_NOT_FULL,
        write_notification: int = FMQ_NOT_EMPTY,
        spin_ns: int = 0,
        out: np.ndarray | None = None,
    ) -> np.ndarray | None:
        """:meth:`read_blocking` until the absolute ``deadline_ns``."""
        if not self._blocking_ready:
            self._check_blocking()
        if out is None:
            out = np.empty(n, dtype=self.dtype)
            cdata = pointer(out)
        else:
            dst = self._dst
            _, cdata, size = dst if out is dst[0] else self._target(out)
            if size != n:
                raise BadDataError(f"out holds {out.size} elements, not {n}")
        if n > self._count:
            return None
        done = self._native.read_until(
            cdata, n, read_notification, write_notification, deadline_ns, spin_ns
        )
        return out if done else None

    def read_available_blocking(
        self,
        out: np.ndarray,
        timeout_ns: int = 0,
        read_notification: int = FMQ_NOT_FULL,
        write_notification: int = FMQ_NOT_EMPTY,
        spin_ns: int = 0,
    ) -> int:
        """Wait for at least one element, then read all that are there (up to
        ``len(out)``) into ``out``; returns the count, 0 on timeout.

        This receives a message of unknown length that the peer wrote with
        one write, in one call: how burst packets are read.
        """
        return self.read_available_until(
            out, deadlines.after(timeout_ns), read_notification, write_notification, spin_ns
        )

    def read_available_until(
        self,
        out: np.ndarray,
        deadline_ns: int | None,
        read_notification: int = FMQ_NOT_FULL,
        write_notification: int = FMQ_NOT_EMPTY,
        spin_ns: int = 0,
    ) -> int:
        """:meth:`read_available_blocking` until the absolute ``deadline_ns``."""
        if not self._blocking_ready:
            self._check_blocking()
        dst = self._dst
        _, cdata, size = dst if out is dst[0] else self._target(out)
        return self._native.read_available_until(
            cdata, size, read_notification, write_notification, deadline_ns, spin_ns
        )

    def round_trip(
        self, reply_queue: MessageQueue, request: np.ndarray, reply: np.ndarray, spin_ns: int = 0
    ) -> RoundTrip:
        """A prepared request/response exchange over fixed buffers: the hot
        path of a burst client or server, one C call per round trip.

        ``rt(n, deadline_ns=None, spin_ns=None)`` sends ``request[:n]`` on this
        queue and reads the whole reply from ``reply_queue`` into ``reply``;
        see :class:`nnburst._bindings.RoundTrip`.  Closing either queue makes
        calls fail with ClosedResourceError; the C core refuses them before
        touching memory."""
        self._check_blocking()
        reply_queue._check_blocking()
        for name, queue, array in (("request", self, request), ("reply", reply_queue, reply)):
            if (
                type(array) is not np.ndarray
                or array.dtype != queue.dtype
                or not array.flags.c_contiguous
            ):
                raise BadDataError(f"{name} must be a C-contiguous numpy array of {queue.dtype}")
        if not reply.flags.writeable:
            raise BadDataError("reply must be writable")
        return RoundTrip(
            self._native, reply_queue._native, request, reply, spin_ns, keep=(self, reply_queue)
        )

    # -- zero copy --------------------------------------------------------

    def _transaction(self, n: int, granted: list[tuple[int, int]]) -> Transaction:
        quantum = self.dtype.itemsize
        views = []
        for offset_bytes, count in granted:
            first = offset_bytes // quantum
            views.append(self._ring[first : first + count])
        return Transaction(tuple(views), n)

    def begin_write(self, n: int) -> Transaction | None:
        """Grant ``n`` slots to fill in place; None if there is not room."""
        self._check_open()
        if n < 0:
            raise BadDataError(f"cannot write {n} elements")
        granted = self._native.begin_write(n)
        return None if granted is None else self._transaction(n, granted)

    def commit_write(self, n: int) -> bool:
        """Publish ``n`` slots filled since ``begin_write`` (at most as many as granted)."""
        self._check_open()
        return self._native.commit_write(n)

    def begin_read(self, n: int) -> Transaction | None:
        """Grant read access to the next ``n`` elements in place; None if fewer are there."""
        self._check_open()
        if n < 0:
            raise BadDataError(f"cannot read {n} elements")
        granted = self._native.begin_read(n)
        return None if granted is None else self._transaction(n, granted)

    def commit_read(self, n: int) -> bool:
        """Release ``n`` elements read since ``begin_read``.  False if more than
        granted, or if an unsynchronized writer overran them meanwhile."""
        self._check_open()
        return self._native.commit_read(n)

    # -- lifetime ---------------------------------------------------------

    def tear_down(self) -> None:
        """Set the teardown bit: wake every waiter on this queue, in both
        processes, with an error.  What a watchdog calls when the peer dies."""
        if self._event_flag is not None and not self._closed:
            self._event_flag.wake(EF_TEARDOWN)

    def close(self) -> None:
        """Tear down (synchronized queues, or the creator of an unsynchronized
        one), wait for calls in other threads to leave, unmap, and unlink the
        name if we own it.  Idempotent."""
        if self._closed:
            return
        # Closed first, so every waiter the teardown wakes reports
        # ClosedResourceError ("you closed it"), not a broken peer.  The
        # mapping stays valid until no call is left inside.
        self._closed = True
        self._blocking_ready = False
        native = self._native
        native.shut_down(tear_down=self.flavor == Flavor.SYNCHRONIZED_READ_WRITE or self._creator)
        region = self._region
        assert region is not None
        region.close_fd()  # a sealed segment's fd: not needed to keep the mapping
        end = time.monotonic() + _CLOSE_DRAIN_S
        while (self._active or native.calls_inside()) and time.monotonic() < end:
            time.sleep(0.0002)
        if not self._active and not native.calls_inside():
            # Nothing is inside the C core: safe to unmap.  numpy views the
            # caller still holds keep the pages mapped until they go.
            self._forget_arrays()
            native.release()
            self._ring = None  # type: ignore[assignment]
            region.close()
        if self._creator or not shm.pid_alive(self._creator_pid):
            region.unlink()

    def __enter__(self) -> MessageQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._closed:
            self.close()

    def __repr__(self) -> str:
        region = self._region
        state = "closed" if self._closed or region is None else region.name
        return f"<MessageQueue {self.flavor.name} {self._count} x {self.dtype} {state}>"
