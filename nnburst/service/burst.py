"""Bursts across a process boundary: the control calls that set one up, the
memory callback, and peer-death handling.  The FMQs themselves are shared
memory; only set-up, memories (as fds) and teardown cross the socket.

Payloads (little-endian):

``CONFIGURE_BURST`` app → service
    ``u32 model id | u32 request-descriptor length | u32 result-descriptor
    length`` then both descriptors' bytes, with the two queue segments as
    fds (SCM_RIGHTS): memfds sealed against shrinking, never named segments,
    so the app cannot shrink a queue under the service.  The driver's
    prepared model starts the server (its polling window is the driver's
    choice).
    Reply: ``i32 status | u32 burst id``.
``GET_MEMORIES`` service → app
    ``u32 burst id | u32 count`` then ``count`` × ``i32`` slot.
    Reply: ``i32 status | u32 count`` then ``count`` × (``u64`` offset,
    ``u64`` size) of the region in its file, with ``count`` fds (SCM_RIGHTS),
    one per slot, in order.
``FREE_MEMORY`` app → service: ``u32 burst id | i32 slot``; empty reply.
``CLOSE_BURST`` app → service: ``u32 burst id``; empty reply.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import logging
import os
import struct
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ..codes import ErrorStatus, ResultCode
from ..errors import BadDataError, BrokenResourceError, NNError
from ..fmq import Descriptor
from ..hal.interfaces import IBurstCallback, IBurstContext, IPreparedModel
from ..hal.memory import MappedMemory, drop_fd
from .wire import MAX_FDS, Connection, Frame

log = logging.getLogger("nnburst.service")

#: Bursts one connection may hold at once (each holds a worker thread and two queues).
MAX_BURSTS_PER_CONNECTION = 64

_CONFIGURE = struct.Struct("<III")
_STATUS_ID = struct.Struct("<iI")
_ID_COUNT = struct.Struct("<II")
_ID_SLOT = struct.Struct("<Ii")
_ID = struct.Struct("<I")
MAX_DESCRIPTOR = 4096


class Kind(enum.IntEnum):
    CONFIGURE_BURST = 10
    GET_MEMORIES = 11
    FREE_MEMORY = 12
    CLOSE_BURST = 13


# -- the service end -----------------------------------------------------------


class MappingBudget:
    """Memories kept mapped at once (each holds one fd): a connection's share,
    within its process's (``parent``), so one client's bursts cannot use up the
    fds every other client needs."""

    def __init__(self, limit: int, parent: MappingBudget | None = None) -> None:
        self.limit = limit
        self.parent = parent
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> None:
        """Reserve ``n`` mappings; NNError (RESOURCE_EXHAUSTED) if they do not fit."""
        with self._lock:
            if self.used + n > self.limit:
                whose = (
                    "one connection's (nnburst serve --max-connection-memories): free some"
                    if self.parent
                    else "the process's (its open-file limit less a reserve): retry later"
                )
                raise NNError(
                    f"{self.used} memories are mapped, and {n} more would pass the limit of "
                    f"{self.limit}, {whose}",
                    ResultCode.RESOURCE_EXHAUSTED_TRANSIENT,
                )
            self.used += n
        if self.parent is not None:
            try:
                self.parent.take(n)
            except BaseException:
                self.give(n, parent=False)
                raise

    def give(self, n: int, parent: bool = True) -> None:
        with self._lock:
            self.used -= n
        if parent and self.parent is not None:
            self.parent.give(n)

    def give_one(self, _memory: MappedMemory) -> None:
        """A budgeted memory's close callback."""
        self.give(1)


class RemoteBurstCallback(IBurstCallback):
    """The app's BurstSlots, reached over the socket.  Memories arrive as fds
    and are mapped here once; the burst owns (and closes) them.  Each mapping
    keeps one fd (the mapping's own) and counts against ``budget`` until closed."""

    transfers_ownership = True

    def __init__(
        self, connection: Connection, burst_id: int, budget: MappingBudget | None = None
    ) -> None:
        self._connection = connection
        self._burst_id = burst_id
        self._budget = budget

    def get_memories(self, slots: Sequence[int]) -> tuple[ErrorStatus, list[Any]]:
        budget = self._budget
        if budget is not None:
            budget.take(len(slots))  # before any fd arrives
        memories: list[MappedMemory] = []
        try:
            for start in range(0, len(slots), MAX_FDS):
                memories += self._fetch(slots[start : start + MAX_FDS])
        except BaseException:
            for memory in memories:
                memory.close()
            if budget is not None:
                budget.give(len(slots))
            raise
        for memory in memories:
            if budget is not None:
                memory.on_close(budget, budget.give_one)
        return ErrorStatus.NONE, memories

    def _fetch(self, slots: Sequence[int]) -> list[MappedMemory]:
        payload = _ID_COUNT.pack(self._burst_id, len(slots)) + struct.pack(
            f"<{len(slots)}i", *slots
        )
        reply = self._connection.call(Kind.GET_MEMORIES, payload)
        fds = reply.fds
        try:
            if len(reply.payload) < _STATUS_ID.size:
                raise NNError("malformed GET_MEMORIES reply", ResultCode.OP_FAILED)
            status, count = _STATUS_ID.unpack_from(reply.payload)
            if status != ErrorStatus.NONE:
                raise NNError(f"the app refused slots {list(slots)}", ResultCode.BAD_DATA)
            if (
                count != len(slots)
                or len(fds) != count
                or len(reply.payload) != _STATUS_ID.size + 16 * count
            ):
                raise NNError("malformed GET_MEMORIES reply", ResultCode.OP_FAILED)
            regions = struct.unpack_from(f"<{2 * count}Q", reply.payload, _STATUS_ID.size)
        except BaseException:
            reply.close_fds()
            raise
        memories: list[MappedMemory] = []
        try:
            for i, fd in enumerate(fds):
                reply.fds = fds[
                    i + 1 :
                ]  # MappedMemory takes this fd; the rest stay the reply's to close
                # MappedMemory checks the region against the file's real size;
                # the fd is closed once mapped (the mapping keeps its own).
                memory = MappedMemory(fd, regions[2 * i + 1], regions[2 * i], require_sealed=True)
                drop_fd(memory)
                memories.append(memory)
        except BaseException:
            reply.close_fds()
            for memory in memories:
                memory.close()
            raise
        return memories


class BurstHost:
    """Serves the burst calls of one app connection, for the prepared models
    ``lookup`` can find by id.  Closing it (or the app dying) ends every burst."""

    def __init__(
        self,
        lookup: Callable[[int], IPreparedModel | None],
        max_channel: Callable[[IPreparedModel], int] | None = None,
        memories: MappingBudget | None = None,
    ) -> None:
        """``max_channel``: the longest queue (datums) a burst on a model may have;
        ``memories``: what all bursts of the connection may keep mapped."""
        self._lookup = lookup
        self._max_channel = max_channel
        self._memories = memories
        self._bursts: dict[int, IBurstContext] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.connection: Connection | None = None

    def handlers(self) -> dict[int, Callable[[Frame], tuple[bytes, Sequence[int]]]]:
        return {
            Kind.CONFIGURE_BURST: self._configure,
            Kind.FREE_MEMORY: self._free_memory,
            Kind.CLOSE_BURST: self._close_burst,
        }

    def _configure(self, frame: Frame) -> tuple[bytes, Sequence[int]]:
        try:
            return self._configure_with(frame, frame.fds)
        finally:
            frame.close_fds()  # attaching dups what it keeps

    def _configure_with(self, frame: Frame, fds: Sequence[int]) -> tuple[bytes, Sequence[int]]:
        if len(fds) != 2:
            raise BadDataError(
                "CONFIGURE_BURST needs the two queue segments as sealed memfds "
                f"(got {len(fds)} fds): a named segment could shrink under the service"
            )
        model_id, request_len, result_len = _CONFIGURE.unpack_from(frame.payload)
        if (
            request_len > MAX_DESCRIPTOR
            or result_len > MAX_DESCRIPTOR
            or len(frame.payload) != _CONFIGURE.size + request_len + result_len
        ):
            raise BadDataError("malformed CONFIGURE_BURST payload")
        model = self._lookup(model_id)
        if model is None:
            raise BadDataError(f"no prepared model {model_id}")
        if self.burst_count >= MAX_BURSTS_PER_CONNECTION:
            raise NNError(
                f"this connection holds {MAX_BURSTS_PER_CONNECTION} bursts, the limit: close some",
                ResultCode.OUT_OF_MEMORY,
            )
        assert self.connection is not None
        request_desc = frame.payload[_CONFIGURE.size : _CONFIGURE.size + request_len]
        result_desc = frame.payload[_CONFIGURE.size + request_len :]
        burst_id = next(self._ids)
        request_channel = dataclasses.replace(Descriptor.from_bytes(request_desc), fd=fds[0])
        result_channel = dataclasses.replace(Descriptor.from_bytes(result_desc), fd=fds[1])
        if request_channel.name or result_channel.name:
            raise BadDataError("CONFIGURE_BURST takes sealed queues only, not named segments")
        _check_distinct_files(fds[0], fds[1])
        if self._max_channel is not None:
            longest = self._max_channel(model)
            for what, channel in (("request", request_channel), ("result", result_channel)):
                if channel.count > longest:
                    raise BadDataError(
                        f"the {what} queue holds {channel.count} datums; a burst on this model "
                        f"needs at most {longest} (nnburst serve --max-burst-channel)"
                    )
        status, server = model.configure_execution_burst(
            RemoteBurstCallback(self.connection, burst_id, self._memories),
            request_channel,
            result_channel,
        )
        if status != ErrorStatus.NONE or server is None:
            return _STATUS_ID.pack(status or ErrorStatus.GENERAL_FAILURE, 0), ()
        with self._lock:
            self._bursts[burst_id] = server
        return _STATUS_ID.pack(ErrorStatus.NONE, burst_id), ()

    def _free_memory(self, frame: Frame) -> tuple[bytes, Sequence[int]]:
        frame.close_fds()
        burst_id, slot = _ID_SLOT.unpack(frame.payload)
        with self._lock:
            server = self._bursts.get(burst_id)
        if server is not None:
            server.free_memory(slot)
        return b"", ()

    def _close_burst(self, frame: Frame) -> tuple[bytes, Sequence[int]]:
        frame.close_fds()
        (burst_id,) = _ID.unpack(frame.payload)
        with self._lock:
            server = self._bursts.pop(burst_id, None)
        if server is not None:
            # Not on this thread: it reads the connection, and the worker may
            # be waiting for a GET_MEMORIES reply that only it can read.
            threading.Thread(target=server.close, name="nnburst-burst-close", daemon=True).start()
        return b"", ()

    def close(self) -> None:
        """End every burst: workers stop, mappings go, the app's waits wake."""
        with self._lock:
            bursts, self._bursts = list(self._bursts.values()), {}
        for server in bursts:
            server.close()

    @property
    def burst_count(self) -> int:
        return len(self._bursts)


def _check_distinct_files(request_fd: int, result_fd: int) -> None:
    """Refuse one file behind both queues: the server would read its own results
    back as requests, and the client could scribble either through the other."""
    request, result = os.fstat(request_fd), os.fstat(result_fd)
    if (request.st_dev, request.st_ino) == (result.st_dev, result.st_ino):
        raise BadDataError(
            "CONFIGURE_BURST got one file for both queues: the request and the result "
            "queue need a segment each"
        )


def serve_bursts(
    connection_socket: Any, lookup: Callable[[int], IPreparedModel | None]
) -> tuple[Connection, BurstHost]:
    """Start serving burst calls on an accepted socket."""
    host = BurstHost(lookup)
    connection = Connection(
        connection_socket,
        host.handlers(),
        on_close=host.close,
        name="nnburst-burst-host",
        start=False,
    )
    host.connection = connection  # before the first request can arrive
    connection.start()
    return connection, host


# -- the app end ---------------------------------------------------------------


class RemoteBurstContext(IBurstContext):
    """The app's handle on a burst served in another process."""

    def __init__(self, client: RemoteBurstClient, burst_id: int) -> None:
        self._client = client
        self.burst_id = burst_id
        self._closed = False
        self._on_death: list[Callable[[], None]] = []

    def link_to_death(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` if the service dies while the burst is open."""
        self._on_death.append(callback)

    def peer_died(self) -> None:
        for callback in self._on_death:
            callback()

    def free_memory(self, slot: int) -> bool:
        """Blocking, as HAL's freeMemory: the next compute must not overtake
        the free and reuse the old memory for this slot.  A finalizer that runs
        inside a send on this connection cannot wait: it posts the free and
        returns False, and the slot must not be reused."""
        if self._closed:
            return True
        message = _ID_SLOT.pack(self.burst_id, slot)
        try:
            return self._client.connection.call_or_post(Kind.FREE_MEMORY, message, timeout=10)
        except (BrokenResourceError, NNError):
            return True  # the service is gone, and the mapping with it

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._client.forget(self.burst_id)
        try:  # posted from a finalizer mid-send: the service ends it soon after
            self._client.connection.call_or_post(Kind.CLOSE_BURST, _ID.pack(self.burst_id), 10)
        except (BrokenResourceError, NNError):
            pass


class RemoteBurstClient:
    """App side of the burst calls on one connection: configures bursts on
    prepared models in the service and answers its memory callbacks."""

    def __init__(self, connection_socket: Any) -> None:
        self._callbacks: dict[int, IBurstCallback] = {}
        self._contexts: weakref.WeakValueDictionary[int, RemoteBurstContext] = (
            weakref.WeakValueDictionary()
        )
        # Reentrant: a burst's finalizer, run by a GC pass inside this lock, forgets its id.
        self._lock = threading.RLock()
        self.connection = Connection(
            connection_socket,
            {Kind.GET_MEMORIES: self._get_memories},
            on_close=self._service_died,
            name="nnburst-burst-client",
        )

    def configure(
        self,
        model_id: int,
        callback: IBurstCallback,
        request_channel: Descriptor,
        result_channel: Descriptor,
    ) -> tuple[ErrorStatus, IBurstContext | None]:
        request, result = request_channel.to_bytes(), result_channel.to_bytes()
        payload = _CONFIGURE.pack(model_id, len(request), len(result)) + request + result
        fds = [request_channel.fd, result_channel.fd]
        if min(fds) < 0:
            log.info("a service maps only sealed queues, passed as fds")
            return ErrorStatus.INVALID_ARGUMENT, None
        try:
            reply = self.connection.call(Kind.CONFIGURE_BURST, payload, fds, timeout=30)
        except BrokenResourceError:
            return ErrorStatus.DEVICE_UNAVAILABLE, None
        except NNError as exc:
            # The service's reason (a queue past its limit, one file for both
            # queues) reaches the app, not only a status.
            raise NNError(f"the service refused the burst: {exc.args[0]}", exc.code) from exc
        status, burst_id = _STATUS_ID.unpack_from(reply.payload)
        if status != ErrorStatus.NONE:
            return ErrorStatus(status), None
        context = RemoteBurstContext(self, burst_id)
        with self._lock:
            self._callbacks[burst_id] = callback
            self._contexts[burst_id] = context
        return ErrorStatus.NONE, context

    @property
    def burst_count(self) -> int:
        """Bursts open on this connection."""
        return len(self._contexts)

    def forget(self, burst_id: int) -> None:
        with self._lock:
            self._callbacks.pop(burst_id, None)
            self._contexts.pop(burst_id, None)

    def _get_memories(self, frame: Frame) -> tuple[bytes, Sequence[int]]:
        frame.close_fds()
        burst_id, count = _ID_COUNT.unpack_from(frame.payload)
        if count > MAX_FDS or len(frame.payload) != _ID_COUNT.size + 4 * count:
            raise BadDataError("malformed GET_MEMORIES payload")
        slots = struct.unpack_from(f"<{count}i", frame.payload, _ID_COUNT.size)
        with self._lock:
            callback = self._callbacks.get(burst_id)
        refused = _STATUS_ID.pack(ErrorStatus.INVALID_ARGUMENT, 0), ()
        if callback is None:
            return refused
        status, memories = callback.get_memories(slots)
        # Only fd-backed memories can cross; a numpy buffer cannot.
        if status != ErrorStatus.NONE or not all(
            isinstance(m, MappedMemory) and not m.closed for m in memories
        ):
            return refused
        regions = struct.pack(
            f"<{2 * len(memories)}Q", *(v for m in memories for v in (m.offset, m.size))
        )
        return _STATUS_ID.pack(ErrorStatus.NONE, len(memories)) + regions, [m.fd for m in memories]

    def _service_died(self) -> None:
        with self._lock:
            contexts = list(self._contexts.values())
        for context in contexts:
            context.peer_died()

    def close(self) -> None:
        self.connection.close()


class RemoteBurstModel:
    """A prepared model in a service process, as far as bursts need it: what
    :meth:`ExecutionBurstController.create` calls."""

    def __init__(self, client: RemoteBurstClient, model_id: int) -> None:
        self._client = client
        self.model_id = model_id

    def configure_execution_burst(
        self, callback: IBurstCallback, request_channel: Descriptor, result_channel: Descriptor
    ) -> tuple[ErrorStatus, IBurstContext | None]:
        return self._client.configure(self.model_id, callback, request_channel, result_channel)
