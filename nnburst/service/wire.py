"""The control channel between an app and a driver process: framed messages
on a Unix-domain stream socket, file descriptors passed with SCM_RIGHTS.

Frame layout (little-endian), then ``length`` payload bytes::

    u32 length | u16 kind | u16 flags | u64 call id

``flags`` bit 0 marks a reply (``call id`` names the call it answers), bit 1
an error reply (payload: a u32 result code and a UTF-8 message).  Payload
layouts are defined next to each kind (see :mod:`nnburst.service.burst`);
every one is explicit ``struct`` packing or raw numpy bytes, never pickle.
Everything read is validated: lengths, counts and fd numbers are bounded
before anything is allocated.  A frame's buffer grows as its bytes arrive
(a header alone declaring 64 MiB costs nothing), and a service shares one
:class:`ReceiveBudget` among its connections: a frame that would take the
bytes being received past it is read and dropped, and its caller gets
``OUT_OF_MEMORY``; the connection and every other client go on.

A :class:`Connection` runs one reader thread that hands replies to the
waiting caller and requests to the handler registered for their kind.  When
the peer goes away (EOF, reset), every pending and future call fails with
:class:`~nnburst.errors.BrokenResourceError` and ``on_close`` runs: that is
how peer death reaches bursts blocked on shared-memory queues.

Finalizers send too (a released model, a closed burst or memory), and a
garbage-collection pass can run them in the middle of a send, on the thread
that holds the send lock.  Such a thread must not wait for its own lock: a
one-way message is deferred and goes out when the send under way finishes,
and a cleanup that would wait for a reply posts instead
(:meth:`Connection.call_or_post`).
"""

from __future__ import annotations

import array
import collections
import itertools
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..codes import ResultCode
from ..errors import BadDataError, BrokenResourceError, NNError

log = logging.getLogger("nnburst.service")

HEADER = struct.Struct("<IHHQ")
MAX_PAYLOAD = 64 * 1024 * 1024
MAX_FDS = 253  # SCM_MAX_FD
FLAG_REPLY = 1
FLAG_ERROR = 2
_ERROR = struct.Struct("<I")
#: A frame's buffer starts this big (or at its length, if smaller) and doubles
#: as bytes arrive; frames this small never ask the budget (control calls).
FIRST_CHUNK = 64 * 1024


class ReceiveBudget:
    """Bytes of frame payloads being received at once, across every connection
    of one process: many clients each sending a big frame slowly must not add
    up to more memory than this."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def take(self, n: int) -> bool:
        """Reserve ``n`` bytes; False (nothing reserved) if that would pass the limit."""
        with self._lock:
            if self._used + n > self.limit:
                return False
            self._used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self._used -= n


class FrameRefused(Exception):
    """A frame was read and dropped (over the receive budget): its caller gets an
    error reply and the connection goes on."""

    def __init__(self, kind: int, call_id: int, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.call_id = call_id


@dataclass
class Frame:
    kind: int
    flags: int
    call_id: int
    payload: bytes
    fds: list[int] = field(default_factory=list)
    #: bytes of a :class:`ReceiveBudget` this frame's payload holds until it is handled
    reserved: int = 0

    def close_fds(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def send_frame(sock: socket.socket, frame: Frame) -> None:
    if len(frame.payload) > MAX_PAYLOAD or len(frame.fds) > MAX_FDS:
        raise BadDataError(f"frame too large: {len(frame.payload)} bytes, {len(frame.fds)} fds")
    data = HEADER.pack(len(frame.payload), frame.kind, frame.flags, frame.call_id) + frame.payload
    sent = socket.send_fds(sock, [data], frame.fds) if frame.fds else sock.send(data)
    if sent < len(data):
        sock.sendall(memoryview(data)[sent:])


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes, read into one buffer: a frame costs its size once (joining
    chunks held it twice while the peer dribbled it in)."""
    buffer = bytearray(n)
    view = memoryview(buffer)
    got = 0
    while got < n:
        received = sock.recv_into(view[got:])
        if not received:
            raise EOFError("the peer closed the connection")
        got += received
    view.release()
    return buffer  # type: ignore[return-value]  # bytes-like; bytes(buffer) would copy it


def _recv_growing(sock: socket.socket, n: int, budget: ReceiveBudget | None) -> tuple[bytes, int]:
    """``n`` bytes into a buffer that grows (doubling) as they arrive, so a
    peer that declares a big frame and sends little holds little.  Returns the
    buffer and what it reserved from ``budget`` (past the first chunk).  Raises
    FrameRefused (after reading the rest of the frame) when the budget is out."""
    buffer = bytearray(min(n, FIRST_CHUNK))
    reserved = 0
    got = 0
    try:
        while got < n:
            if got == len(buffer):
                grown = min(n, 2 * len(buffer))
                if budget is not None:
                    if not budget.take(grown - len(buffer)):
                        _discard(sock, n - got)
                        raise FrameRefused(
                            0,
                            0,
                            f"the service is receiving {budget.used} bytes from its clients, "
                            f"near its {budget.limit}-byte limit: this {n}-byte message was "
                            "dropped; retry later",
                        )
                    reserved += grown - len(buffer)
                buffer.extend(bytes(grown - len(buffer)))
            with memoryview(buffer) as view:
                received = sock.recv_into(view[got:])
            if not received:
                raise EOFError("the peer closed the connection")
            got += received
    except BaseException:
        if budget is not None:
            budget.give(reserved)
        raise
    return buffer, reserved  # type: ignore[return-value]  # bytes-like; bytes() would copy


def _discard(sock: socket.socket, n: int) -> None:
    """Read and drop ``n`` bytes (a refused frame's rest) in small pieces."""
    scratch = bytearray(min(n, FIRST_CHUNK))
    with memoryview(scratch) as view:
        while n > 0:
            received = sock.recv_into(view[: min(n, len(scratch))])
            if not received:
                raise EOFError("the peer closed the connection")
            n -= received


def recv_frame(
    sock: socket.socket, max_payload: int = MAX_PAYLOAD, budget: ReceiveBudget | None = None
) -> Frame:
    """Read one frame.  Raises EOFError when the peer is gone, BadDataError
    when the header is invalid (the connection must then be dropped), and
    FrameRefused when ``budget`` has no room for its payload (the frame was
    read and dropped; the connection can go on)."""
    fds = array.array("i")
    data, ancillary, msg_flags, _ = sock.recvmsg(
        HEADER.size, socket.CMSG_SPACE(MAX_FDS * fds.itemsize)
    )
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    received = list(fds)
    try:
        if not data:
            raise EOFError("the peer closed the connection")
        if msg_flags & socket.MSG_CTRUNC:
            raise BadDataError("too many file descriptors in one frame")
        if len(data) < HEADER.size:
            data += _recv_exactly(sock, HEADER.size - len(data))
        length, kind, flags, call_id = HEADER.unpack(data)
        if length > max_payload:
            raise BadDataError(f"frame payload of {length} bytes exceeds {max_payload}")
        payload, reserved = _recv_growing(sock, length, budget) if length else (b"", 0)
    except FrameRefused as exc:
        for fd in received:
            os.close(fd)
        raise FrameRefused(kind, call_id, str(exc)) from None
    except BaseException:
        for fd in received:
            os.close(fd)
        raise
    return Frame(kind, flags, call_id, payload, received, reserved)


Handler = Callable[[Frame], tuple[bytes, Sequence[int]]]


class Connection:
    """Calls in both directions over one socket; see the module docstring.

    Handlers run on the reader thread and must not call back over the same
    connection (the reply could never be read).  A handler returns
    ``(payload, fds)``; it raises NNError to send an error reply.  The fds it
    returns are sent (duplicated into the peer) and stay the handler's.
    """

    def __init__(
        self,
        sock: socket.socket,
        handlers: dict[int, Handler] | None = None,
        on_close: Callable[[], None] | None = None,
        name: str = "nnburst-connection",
        start: bool = True,
        max_payload: int = MAX_PAYLOAD,
        budget: ReceiveBudget | None = None,
    ) -> None:
        """``max_payload``: the largest frame the peer may send (a bigger one drops
        it); ``budget``: the process's bytes in flight, shared with other connections."""
        self.sock = sock
        self.max_payload = max_payload
        self.budget = budget
        self.handlers = dict(handlers or {})
        self.on_close = on_close
        self._send_lock = threading.Lock()
        self._sender: int | None = None  # the thread inside a send, if any
        self._deferred: collections.deque[Frame] = collections.deque()
        self._ids = itertools.count(1)
        self._pending: dict[int, list[Frame | BaseException | None]] = {}
        # Reentrant: a finalizer run by a GC pass inside this lock may make a call.
        self._pending_lock = threading.RLock()
        self._done = threading.Condition(self._pending_lock)
        self._closed = False
        self._broken: BaseException | None = None
        #: ``time.monotonic()`` when the peer last sent a frame (an idle peer's is old)
        self.last_heard = time.monotonic()
        self._reader = threading.Thread(target=self._read_loop, name=name, daemon=True)
        if start:
            self._reader.start()

    def start(self) -> None:
        """Start reading (for owners that must finish wiring handlers first)."""
        self._reader.start()

    @property
    def broken(self) -> bool:
        return self._broken is not None

    def sending_here(self) -> bool:
        """True on a thread that is in the middle of a send on this connection:
        only a finalizer run by a GC pass gets here, and it must not wait."""
        return self._sender == threading.get_ident()

    def _send(self, frame: Frame) -> None:
        with self._send_lock:
            self._sender = threading.get_ident()
            try:
                # What finalizers deferred was sent first, in the peer's eyes: a
                # posted FREE_MEMORY must not arrive after the answer to a call
                # made after it (see ExecutionBurstServer's cache limit).
                while self._deferred:
                    send_frame(self.sock, self._deferred.popleft())
                send_frame(self.sock, frame)
            finally:
                self._sender = None
        self._flush_deferred()

    def _flush_deferred(self) -> None:
        """Send what finalizers deferred, unless another thread is sending: that
        thread flushes when it is done (it checks after releasing the lock, and a
        frame is queued before anyone tries the lock, so none is stranded)."""
        while self._deferred and self._send_lock.acquire(blocking=False):
            try:
                self._sender = threading.get_ident()
                while self._deferred:
                    send_frame(self.sock, self._deferred.popleft())
            finally:
                self._sender = None
                self._send_lock.release()

    def call(
        self, kind: int, payload: bytes = b"", fds: Sequence[int] = (), timeout: float | None = None
    ) -> Frame:
        """Send a request and wait for its reply (or peer death, or ``timeout``).

        Raises:
            BrokenResourceError: the peer is gone.
            NNError: the peer answered with an error (its result code).
        """
        if self.sending_here():
            raise RuntimeError(
                "a call from inside a send on the same connection (a finalizer run by "
                "garbage collection) would wait on itself; post a one-way message instead"
            )
        call_id = next(self._ids)
        slot: list[Frame | BaseException | None] = [None]
        with self._pending_lock:
            if self._broken is not None:
                raise BrokenResourceError(f"connection lost: {self._broken}")
            self._pending[call_id] = slot
        try:
            self._send(Frame(kind, 0, call_id, payload, list(fds)))
            with self._done:
                if not self._done.wait_for(lambda: slot[0] is not None, timeout):
                    raise NNError(
                        f"no reply to call {kind} within {timeout} s",
                        ResultCode.MISSED_DEADLINE_TRANSIENT,
                    )
        except OSError as exc:
            raise BrokenResourceError(f"connection lost: {exc}") from exc
        finally:
            with self._pending_lock:
                self._pending.pop(call_id, None)
        reply = slot[0]
        if isinstance(reply, BaseException):
            raise BrokenResourceError(f"connection lost: {reply}") from reply
        assert isinstance(reply, Frame)
        if reply.flags & FLAG_ERROR:
            reply.close_fds()
            (code,) = _ERROR.unpack_from(reply.payload)
            message = reply.payload[_ERROR.size :].decode(errors="replace")
            raise NNError(
                message,
                ResultCode(code) if code in ResultCode._value2member_map_ else ResultCode.OP_FAILED,
            )
        return reply

    def call_or_post(self, kind: int, payload: bytes, timeout: float) -> bool:
        """A call whose reply carries nothing: from a finalizer inside a send on this
        thread (:meth:`sending_here`) the same message goes one-way instead.  True if
        the peer answered, False if it was only posted."""
        if self.sending_here():
            self.notify(kind, payload)
            return False
        self.call(kind, payload, timeout=timeout)
        return True

    def notify(self, kind: int, payload: bytes = b"") -> None:
        """A one-way message (call id 0: no reply expected).  Safe from a finalizer:
        inside a send on this thread it is deferred until that send is done."""
        frame = Frame(kind, 0, 0, payload)
        if self.sending_here():
            self._deferred.append(frame)
            return
        try:
            self._send(frame)
        except OSError as exc:
            raise BrokenResourceError(f"connection lost: {exc}") from exc

    def _read_loop(self) -> None:
        reason: BaseException = EOFError("closed")
        try:
            while True:
                try:
                    frame = recv_frame(self.sock, self.max_payload, self.budget)
                except FrameRefused as exc:
                    self.last_heard = time.monotonic()
                    self._refuse(exc)
                    continue
                self.last_heard = time.monotonic()
                try:
                    if frame.flags & FLAG_REPLY:
                        self._deliver(frame)
                    else:
                        self._serve(frame)
                finally:
                    if self.budget is not None and frame.reserved:
                        self.budget.give(frame.reserved)
                    frame.reserved = 0
        except (EOFError, OSError, BadDataError) as exc:
            reason = exc
        finally:
            self._break(reason)

    def _refuse(self, refused: FrameRefused) -> None:
        """Answer a frame dropped over the receive budget with OUT_OF_MEMORY."""
        log.warning("dropped a message: %s", refused)
        if refused.call_id:
            payload = _ERROR.pack(int(ResultCode.OUT_OF_MEMORY)) + str(refused).encode()
            self._send(Frame(refused.kind, FLAG_REPLY | FLAG_ERROR, refused.call_id, payload))

    def _deliver(self, frame: Frame) -> None:
        with self._done:
            slot = self._pending.get(frame.call_id)
            if slot is None:
                frame.close_fds()  # a reply nobody waits for (timed out)
                return
            slot[0] = frame
            self._done.notify_all()

    def _serve(self, frame: Frame) -> None:
        handler = self.handlers.get(frame.kind)
        reply_fds: Sequence[int] = ()
        try:
            if handler is None:
                frame.close_fds()
                raise BadDataError(f"unknown request kind {frame.kind}")
            payload, reply_fds = handler(frame)
            flags = FLAG_REPLY
        except NNError as exc:
            payload, flags = _ERROR.pack(int(exc.code)) + str(exc).encode(), FLAG_REPLY | FLAG_ERROR
        except (ValueError, struct.error) as exc:  # a malformed payload
            payload, flags = (
                _ERROR.pack(int(ResultCode.BAD_DATA)) + str(exc).encode(),
                FLAG_REPLY | FLAG_ERROR,
            )
        except Exception as exc:  # a handler bug must not kill the connection
            log.exception("handler for kind %d failed", frame.kind)
            payload, flags = (
                _ERROR.pack(int(ResultCode.OP_FAILED)) + str(exc).encode(),
                FLAG_REPLY | FLAG_ERROR,
            )
        if frame.call_id:
            self._send(Frame(frame.kind, flags, frame.call_id, payload, list(reply_fds)))

    def _break(self, reason: BaseException) -> None:
        with self._done:
            self._broken = reason
            for slot in self._pending.values():
                slot[0] = reason
            self._done.notify_all()
        if self.on_close is not None:
            try:
                self.on_close()
            except Exception:
                log.exception("on_close handler failed")

    def close(self) -> None:
        """Shut the socket down (the peer sees EOF) and join the reader."""
        if self._closed:
            return
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if threading.current_thread() is not self._reader and self._reader.is_alive():
            self._reader.join(5)
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
