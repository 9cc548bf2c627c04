"""The app side of a burst: owns both FMQs, names memories by slot, sends
request packets and waits for results.

``compute`` is one C call on the hot path: write the packet, wake the
server, spin for the polling window, sleep on the futex, read the whole
result into a preallocated array.  A request too large for the request queue
is not sent: ``fallback=True`` tells the caller to run it synchronously.
A request computed again and again is armed (:meth:`arm_repeat`) and then
sent by :meth:`repeat` in one C call that also copies the caller's buffers
in and out (``nnb_burst_repeat``).

Deadlines: HAL 1.2 burst packets carry none, so the server runs every
request to its end; the controller bounds only its own wait.  A result that
misses the deadline is ``MISSED_DEADLINE_TRANSIENT`` and stays owed: the next
``compute`` reads and drops it before sending (waiting for it within its own
deadline), so results and requests never get out of step.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import numpy as np

from .. import deadlines, tracing
from .._bindings.burst_fast import ANSWERED, BurstRepeat
from ..codes import ErrorStatus, PreferenceCode
from ..errors import (
    BadDataError,
    BadStateError,
    BrokenResourceError,
    ClosedResourceError,
    NNError,
    PacketError,
    result_code_for_status,
)
from ..fmq import MessageQueue
from .interfaces import IBurstCallback, IBurstContext, SupportsBursts
from .packets import REQUEST_DATUM, RESULT_DATUM, WORDS, parse_result_words, request_words
from .spin import WARM_UP, SpinPolicy
from .types import MeasureTiming, OutputShape, Request, Timing

#: FMQ length of each channel, as Android's kExecutionBurstChannelLength.
log = logging.getLogger("nnburst.burst")

CHANNEL_LENGTH = 1024
#: How long a computation without a deadline waits for its result before the
#: burst is declared dead (``DEVICE_UNAVAILABLE``, burst closed): a live but
#: wedged server must not block an app forever.  As ``EXECUTE`` on a service.
WAIT_LIMIT_S = 300.0

#: How long each end of a burst spins (µs) before sleeping on the futex, by
#: execution preference.  Android 11 uses 50 µs, 0 for LOW_POWER.
#: SUSTAINED_SPEED (successive frames, the burst use case) spins longer: a
#: Python driver's per-request work runs 40–100 µs, and a window shorter than
#: the peer's work means a futex sleep, and waking an idle vCPU costs ~100 µs.
POLLING_WINDOW_US = {
    PreferenceCode.LOW_POWER: 0,
    PreferenceCode.FAST_SINGLE_ANSWER: 50,
    PreferenceCode.SUSTAINED_SPEED: 200,
}


def polling_window_us(preference: PreferenceCode) -> int:
    """The spin window both ends of a burst use for ``preference``."""
    return POLLING_WINDOW_US[PreferenceCode(preference)]


class BurstGuard:
    """One execution at a time on a burst: a second one is ``BAD_STATE`` at once,
    never queued (as ``ANeuralNetworksExecution_burstCompute``).  The runtime's
    ``Burst`` and the controller share this one rule and message."""

    IN_USE = "the burst is in use by another execution"

    def __init__(self) -> None:
        #: the lock itself, for a hot path that takes it without a frame per
        #: step (``Burst.using``): acquire without blocking, raise ``IN_USE``.
        self.lock = threading.Lock()

    def __enter__(self) -> None:
        if not self.lock.acquire(blocking=False):
            raise BadStateError(self.IN_USE)

    def __exit__(self, *exc: object) -> None:
        self.lock.release()

    @contextmanager
    def idle(self) -> Iterator[None]:
        """Wait until no execution uses the burst, and keep it so (for teardown)."""
        with self.lock:
            yield


ComputeResult = tuple[ErrorStatus, list[OutputShape], Timing, bool]


class BurstSlots(IBurstCallback):
    """Memory key → slot, and slot → memory for the server's callback.

    New keys reuse the most recently freed slot first (LIFO), else take the
    next index.  Thread-safe: the server may call ``get_memories`` while the
    app frees memories.
    """

    def __init__(self) -> None:
        # Reentrant: a memory's finalizer, run by a GC pass inside get_slots, frees its slot.
        self._lock = threading.RLock()
        self._slot_of: dict[Hashable, int] = {}
        self._memories: list[Any] = []  # by slot; None when free
        self._free: list[int] = []

    def get_slots(self, memories: Sequence[Any], keys: Sequence[Hashable]) -> list[int]:
        if len(memories) != len(keys):
            raise ValueError(f"{len(memories)} memories but {len(keys)} keys")
        slots = []
        with self._lock:
            for memory, key in zip(memories, keys):
                slot = self._slot_of.get(key)
                if slot is None:
                    if self._free:
                        slot = self._free.pop()
                    else:
                        slot = len(self._memories)
                        self._memories.append(None)
                    self._slot_of[key] = slot
                    self._memories[slot] = memory
                slots.append(slot)
        return slots

    def slot_of(self, key: Hashable) -> int | None:
        """The slot ``key`` holds, or None."""
        with self._lock:
            return self._slot_of.get(key)

    def free_memory(self, key: Hashable, reuse: bool = True) -> int | None:
        """Forget ``key``; its slot, or None if the key was unknown.  A slot
        the server may still hold (``reuse=False``) is retired for good."""
        with self._lock:
            slot = self._slot_of.pop(key, None)
            if slot is not None:
                self._memories[slot] = None
                if reuse:
                    self._free.append(slot)
        return slot

    def get_memories(self, slots: Sequence[int]) -> tuple[ErrorStatus, list[Any]]:
        with self._lock:
            memories = [self._memories[s] if 0 <= s < len(self._memories) else None for s in slots]
        if any(m is None for m in memories):
            return ErrorStatus.INVALID_ARGUMENT, []
        return ErrorStatus.NONE, memories

    def __len__(self) -> int:
        return len(self._slot_of)


def _tear_down_on_death(controller: weakref.ref[ExecutionBurstController]) -> Callable[[], None]:
    def peer_died() -> None:
        alive = controller()
        if alive is not None:
            alive._requests.tear_down()
            alive._results.tear_down()

    return peer_died


class ExecutionBurstController:
    """One burst, from the app's side.  A context manager; ``close`` is idempotent."""

    _closed = True

    @classmethod
    def create(
        cls,
        prepared_model: SupportsBursts,
        polling_window_us: int = 0,
        channel_length: int = CHANNEL_LENGTH,
        result_channel_length: int | None = None,
        wait_limit_s: float = WAIT_LIMIT_S,
        owner_guards: bool = False,
    ) -> ExecutionBurstController:
        """Create both channels and ask the prepared model to serve them
        (``owner_guards``: see :meth:`__init__`).

        Raises:
            NNError: the driver refused to configure the burst (its status,
                converted to a result code).
        """
        # Sealed memfd segments: a driver in another process maps them, and a
        # segment we could shrink under it would make its accesses fault.
        requests = MessageQueue(REQUEST_DATUM, channel_length, sealed=True)
        results = MessageQueue(RESULT_DATUM, result_channel_length or channel_length, sealed=True)
        slots = BurstSlots()
        try:
            status, context = prepared_model.configure_execution_burst(
                slots, requests.descriptor, results.descriptor
            )
            if status != ErrorStatus.NONE or context is None:
                raise NNError(
                    f"the driver could not configure a burst ({ErrorStatus(status).name})",
                    result_code_for_status(
                        status if status != ErrorStatus.NONE else ErrorStatus.GENERAL_FAILURE
                    ),
                )
        except BaseException:
            requests.close()
            results.close()
            raise
        return cls(requests, results, slots, context, polling_window_us, wait_limit_s, owner_guards)

    def __init__(
        self,
        requests: MessageQueue,
        results: MessageQueue,
        slots: BurstSlots,
        context: IBurstContext,
        polling_window_us: int,
        wait_limit_s: float = WAIT_LIMIT_S,
        owner_guards: bool = False,
    ) -> None:
        """``owner_guards``: the owner takes a :class:`BurstGuard` of its own
        around every call here, because it does more under the same rule (the
        runtime's ``Burst`` stages its pools): the controller then takes none,
        one lock fewer per execution.  Otherwise :meth:`compute`,
        :meth:`repeat` and :meth:`send_packet` each take the controller's."""
        self._requests = requests
        self._results = results
        self._slots = slots
        self._context = context
        guard = None if owner_guards else BurstGuard()
        self._guard: AbstractContextManager[None] = guard or contextlib.nullcontext()
        #: the guard's lock, for repeat's hot path; None when the owner guards
        self._lock = None if guard is None else guard.lock
        self._owed = False  # a result that missed its deadline is still to come
        self._wait_limit_ns = int(wait_limit_s * 1e9)
        self._request_buffer = np.zeros(requests.quantum_count, dtype=REQUEST_DATUM)
        self._request_words = self._request_buffer.view("<u4")  # raw copies keep padding zero
        self._result_buffer = np.zeros(results.quantum_count, dtype=RESULT_DATUM)
        self._result_words = self._result_buffer.view("<u4")
        self._last_packet: tuple[Request, MeasureTiming, list[int], np.ndarray] | None = None
        self._last_result: tuple[bytes, tuple[ErrorStatus, list[OutputShape], Timing] | None]
        self._last_result = (b"", None)
        #: the request :meth:`repeat` sends, its packet, its C call and expected result
        self._repeat: tuple[Request, np.ndarray, BurstRepeat, ComputeResult] | None = None
        #: the words the request buffer holds (the round trip never writes it):
        #: a repeated packet is not copied in again
        self._staged: Any = None
        self._spin = SpinPolicy(max(0, polling_window_us) * 1000, WARM_UP)
        self._round_trip = requests.round_trip(
            results, self._request_buffer, self._result_buffer, self._spin.window_ns
        )
        self._closed = False
        # A context in another process reports its death: tear both channels
        # down so a compute blocked on them returns at once.
        context.link_to_death(_tear_down_on_death(weakref.ref(self)))

    @property
    def slots(self) -> BurstSlots:
        return self._slots

    def compute(
        self,
        request: Request,
        measure: MeasureTiming,
        memory_keys: Sequence[Hashable],
        deadline_ns: int | None = None,
    ) -> ComputeResult:
        """Run ``request`` (whose pools are named by ``memory_keys``) on the burst.

        Returns ``(status, output shapes, timing, fallback)``.  ``fallback`` is
        True only when the request was not sent (too large for the channel):
        the caller runs it through ``execute_synchronously`` instead.
        ``deadline_ns`` (absolute ``time.monotonic_ns()``) bounds the wait for
        the result: past it the status is ``MISSED_DEADLINE_TRANSIENT``.

        Raises:
            BadStateError: another execution is in flight on this burst.
            ClosedResourceError: the burst was closed.
        """
        if self._closed:
            raise ClosedResourceError("the burst is closed")
        with self._guard:
            slots = self._slots.get_slots(request.pools, memory_keys)
            words = self._packet(request, measure, slots)
            if len(words) > len(self._request_words):
                return ErrorStatus.GENERAL_FAILURE, [], Timing(), True
            wait_limited = deadline_ns is None
            if wait_limited:  # still an absolute deadline: the wedged-server limit
                deadline_ns = time.monotonic_ns() + self._wait_limit_ns
            try:
                with tracing.span(tracing.Layer.IPC, tracing.Phase.EXECUTION, "burst round trip"):
                    received = self._exchange(words, deadline_ns)
            except (BrokenResourceError, ClosedResourceError):
                return ErrorStatus.DEVICE_UNAVAILABLE, [], Timing(), False
            return self._outcome(received, wait_limited)

    def arm_repeat(
        self,
        request: Request,
        memory_keys: Sequence[Hashable],
        copies_in: Sequence[tuple[memoryview, memoryview]],
        copies_out: Sequence[tuple[memoryview, memoryview]],
    ) -> bool:
        """Let :meth:`repeat` send ``request`` again in one C call, copying
        ``copies_in`` (source, target) before and ``copies_out`` after.

        Only a request this burst just computed without timing, answered with
        a plain success, is armed (False otherwise): its packet is the last
        one sent, and an answer equal to the last one needs no parsing.  Any
        other use of the channels (another request, a freed memory, a raw
        packet) disarms it."""
        if self._repeat is not None and self._repeat[0] is request:
            return True
        last, (result_words, parsed) = self._last_packet, self._last_result
        if (
            self._closed
            or last is None
            or last[0] is not request
            or last[1] != MeasureTiming.NO
            or parsed is None
            or parsed[0] != ErrorStatus.NONE
            or self._slots.get_slots(request.pools, memory_keys) != last[2]
        ):
            return False
        words = last[3]
        binding = BurstRepeat(
            self._round_trip,
            len(words) // WORDS,
            result_words,
            copies_in,
            copies_out,
            self._spin,
            self._wait_limit_ns,
        )
        self._repeat = (request, words, binding, (*parsed, True))
        return True

    def armed_for(self, request: Request) -> bool:
        """Whether :meth:`repeat` would send ``request`` now."""
        armed = self._repeat
        return armed is not None and armed[0] is request and not self._owed and not self._closed

    def repeat(self, request: Request, deadline_ns: int | None = None) -> ComputeResult | None:
        """:meth:`compute` of the armed request (see :meth:`arm_repeat`); None,
        with nothing sent, when ``request`` is not armed.  The result's last
        field says whether the outputs were copied back here (the answer was
        the expected one): otherwise the caller copies them as after
        :meth:`compute`."""
        armed = self._repeat
        if armed is None or armed[0] is not request or self._owed:
            return None
        if self._closed:
            raise ClosedResourceError("the burst is closed")
        lock = self._lock
        if lock is not None and not lock.acquire(blocking=False):
            raise BadStateError(BurstGuard.IN_USE)
        try:
            _, words, binding, expected = armed
            if deadline_ns is not None and deadlines.passed(deadline_ns):
                return ErrorStatus.MISSED_DEADLINE_TRANSIENT, [], Timing(), False
            if words is not self._staged:
                self._request_words[: len(words)] = words
                self._staged = words
            try:
                # No deadline: 0, the wedged-server limit from now (C reads the clock).
                received = binding(deadline_ns or 0)
            except (BrokenResourceError, ClosedResourceError):
                return ErrorStatus.DEVICE_UNAVAILABLE, [], Timing(), False
            if received == ANSWERED:
                return expected
            self._owed = received == 0
            return self._outcome(received, deadline_ns is None)
        finally:
            if lock is not None:
                lock.release()

    @property
    def repeated(self) -> int:
        """Executions of the armed request answered in one C call (statistics, tests)."""
        armed = self._repeat
        return 0 if armed is None else armed[2].answered

    def _outcome(self, received: int, wait_limited: bool) -> ComputeResult:
        """What a round trip that read ``received`` datums (see :meth:`_exchange`)
        gives the caller; a wait the wedged-server limit ended closes the burst."""
        if received > 0:
            try:
                status, shapes, timing = self._result(received)
            except PacketError:
                return ErrorStatus.GENERAL_FAILURE, [], Timing(), False
        if received <= 0 and not wait_limited:
            return ErrorStatus.MISSED_DEADLINE_TRANSIENT, [], Timing(), False
        if received <= 0:
            log.warning(
                "no burst result within %.0f s: the driver is wedged; closing the burst",
                self._wait_limit_ns / 1e9,
            )
            self.close()
            return ErrorStatus.DEVICE_UNAVAILABLE, [], Timing(), False
        # Drivers must not report shapes or timing with a failure (HAL contract).
        if status not in (ErrorStatus.NONE, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE):
            shapes = []
        if status != ErrorStatus.NONE:
            timing = Timing()
        return status, shapes, timing, False

    def _packet(self, request: Request, measure: MeasureTiming, slots: list[int]) -> np.ndarray:
        """The request packet's words; the last one is kept, as executions of one
        request repeat it (same request object, measure and slots)."""
        last = self._last_packet
        if last is not None and last[0] is request and last[1] == measure and last[2] == slots:
            return last[3]
        words = np.array(request_words(request, measure, slots), dtype="<u4")
        self._last_packet = (request, measure, slots, words)
        return words

    def _result(self, received: int) -> tuple[ErrorStatus, list[OutputShape], Timing]:
        """The parsed result packet of ``received`` datums; a repeat of the last
        packet is recognised by its words, which costs less than parsing them."""
        words = self._result_words[: WORDS * received].tobytes()
        last_words, last = self._last_result
        if words == last_words and last is not None:
            return last
        parsed = parse_result_words(memoryview(words).cast("I"))  # native: little-endian only
        self._last_result = (words, parsed)
        return parsed

    def send_packet(self, packet: np.ndarray, deadline_ns: int | None = None) -> np.ndarray:
        """Send ``packet`` exactly as given and return the raw ``RESULT_DATUM`` rows the
        server answered (a copy; empty if none came by the deadline).

        VTS's ``sendPacket``: for tests of how a server treats packets that
        ``compute`` would never send.  ``packet`` is ``REQUEST_DATUM`` rows or
        their 32-bit words (six per datum).

        Raises:
            BadDataError: neither form, or too long for the request channel.
            BadStateError: another execution is in flight on this burst.
            ClosedResourceError, BrokenResourceError: the burst or its server is gone.
        """
        if packet.dtype not in (REQUEST_DATUM, np.dtype("<u4")):
            raise BadDataError(
                f"a packet is REQUEST_DATUM rows or uint32 words, got {packet.dtype}"
            )
        words = np.ascontiguousarray(packet).view("<u4").reshape(-1)
        if len(words) % WORDS or len(words) > len(self._request_words):
            raise BadDataError(
                f"{len(words)} words are not a packet of at most {len(self._request_buffer)} datums"
            )
        if self._closed:
            raise ClosedResourceError("the burst is closed")
        with self._guard:
            self._staged = None  # the caller may have changed its array since
            received = self._exchange(words, deadline_ns)
            # Copied as words: a structured copy would not keep the padding bytes.
            return self._result_words[: WORDS * max(received, 0)].copy().view(RESULT_DATUM)

    def _exchange(self, words: Any, deadline_ns: int | None) -> int:
        """Send ``words`` and read the reply into the result buffer; its length in
        datums, 0 if it missed the deadline (then it is owed), -1 if nothing was sent."""
        if self._owed:
            # The previous request's late result: drop it before sending.
            if (
                deadlines.passed(deadline_ns)
                or self._results.read_available_until(self._result_buffer, deadline_ns) == 0
            ):
                return -1
            self._owed = False
        if deadlines.passed(deadline_ns):
            return -1
        if words is not self._staged:
            self._request_words[: len(words)] = words
            self._staged = words
        repeat = self._repeat
        if repeat is not None:
            repeat[2].flush()  # its waits reach the policy first
        spin = self._spin.next_window()
        start = time.monotonic_ns()
        received = self._round_trip(len(words) // WORDS, deadline_ns, spin)
        self._spin.record(spin, time.monotonic_ns() - start)
        if repeat is not None:
            repeat[2].flush()  # and it takes the policy's window from here
        self._owed = received == 0
        return received

    def free_memory(self, key: Hashable) -> None:
        """Tell the server a memory is gone; unknown and double frees stay local.

        The server hears of it first: only then is the slot free for another
        memory, so a request naming the reused slot cannot overtake the free
        and find the old memory still cached."""
        slot = self._slots.slot_of(key)
        if slot is None:
            return
        self._repeat = None  # its packet may name the slot, soon another memory's
        released = self._closed or self._context.free_memory(slot)
        self._slots.free_memory(key, reuse=released)

    def close(self) -> None:
        """End the burst: the server's worker stops and releases its mappings,
        and a compute blocked in another thread returns DEVICE_UNAVAILABLE."""
        if self._closed:
            return
        self._closed = True
        self._repeat = None
        self._results.tear_down()  # wakes a compute waiting for a result
        try:
            self._context.close()
        finally:
            self._requests.close()
            self._results.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> ExecutionBurstController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
