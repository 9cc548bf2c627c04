"""The app side of a burst: owns both FMQs, names memories by slot, sends
request packets and waits for results.

``compute`` is one C call on the hot path: write the packet, wake the
server, spin for the polling window, sleep on the futex, read the whole
result into a preallocated array.  A request too large for the request queue
is not sent: ``fallback=True`` tells the caller to run it synchronously.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from .. import tracing
from ..codes import ErrorStatus, PreferenceCode
from ..errors import (
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
from .types import MeasureTiming, OutputShape, Request, Timing

#: FMQ length of each channel, as Android's kExecutionBurstChannelLength.
CHANNEL_LENGTH = 1024

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
    return POLLING_WINDOW_US[PreferenceCode(preference)]

ComputeResult = tuple[ErrorStatus, list[OutputShape], Timing, bool]


class BurstSlots(IBurstCallback):
    """Memory key → slot, and slot → memory for the server's callback.

    New keys reuse the most recently freed slot first (LIFO), else take the
    next index.  Thread-safe: the server may call ``get_memories`` while the
    app frees memories.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
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

    def free_memory(self, key: Hashable) -> int | None:
        """Forget ``key``; its slot, or None if the key was unknown."""
        with self._lock:
            slot = self._slot_of.pop(key, None)
            if slot is not None:
                self._memories[slot] = None
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
    ) -> ExecutionBurstController:
        """Create both channels and ask the prepared model to serve them.

        Raises:
            NNError: the driver refused to configure the burst (its status,
                converted to a result code).
        """
        requests = MessageQueue(REQUEST_DATUM, channel_length)
        results = MessageQueue(RESULT_DATUM, result_channel_length or channel_length)
        slots = BurstSlots()
        try:
            status, context = prepared_model.configure_execution_burst(
                slots, requests.descriptor, results.descriptor
            )
            if status != ErrorStatus.NONE or context is None:
                raise NNError(
                    f"the driver could not configure a burst ({ErrorStatus(status).name})",
                    result_code_for_status(status if status != ErrorStatus.NONE else ErrorStatus.GENERAL_FAILURE),
                )
        except BaseException:
            requests.close()
            results.close()
            raise
        return cls(requests, results, slots, context, polling_window_us)

    def __init__(
        self,
        requests: MessageQueue,
        results: MessageQueue,
        slots: BurstSlots,
        context: IBurstContext,
        polling_window_us: int,
    ) -> None:
        self._requests = requests
        self._results = results
        self._slots = slots
        self._context = context
        self._in_flight = threading.Lock()
        self._request_buffer = np.zeros(requests.quantum_count, dtype=REQUEST_DATUM)
        self._request_words = self._request_buffer.view("<u4")  # raw copies keep padding zero
        self._result_buffer = np.zeros(results.quantum_count, dtype=RESULT_DATUM)
        self._result_words = self._result_buffer.view("<u4")
        self._round_trip = requests.round_trip(
            results, self._request_buffer, self._result_buffer, max(0, polling_window_us) * 1000
        )
        self._closed = False
        # A context in another process reports its death: tear both channels
        # down so a compute blocked on them returns at once.
        link_to_death = getattr(context, "link_to_death", None)
        if link_to_death is not None:
            link_to_death(_tear_down_on_death(weakref.ref(self)))

    @property
    def slots(self) -> BurstSlots:
        return self._slots

    def compute(
        self, request: Request, measure: MeasureTiming, memory_keys: Sequence[Hashable]
    ) -> ComputeResult:
        """Run ``request`` (whose pools are named by ``memory_keys``) on the burst.

        Returns ``(status, output shapes, timing, fallback)``.  ``fallback`` is
        True only when the request was not sent (too large for the channel):
        the caller runs it through ``execute_synchronously`` instead.

        Raises:
            BadStateError: another execution is in flight on this burst.
            ClosedResourceError: the burst was closed.
        """
        if self._closed:
            raise ClosedResourceError("the burst is closed")
        if not self._in_flight.acquire(blocking=False):
            raise BadStateError("the burst already has an execution in flight")
        try:
            slots = self._slots.get_slots(request.pools, memory_keys)
            words = request_words(request, measure, slots)
            if len(words) > len(self._request_words):
                return ErrorStatus.GENERAL_FAILURE, [], Timing(), True
            self._request_words[: len(words)] = words
            try:
                with tracing.span(tracing.Layer.IPC, tracing.Phase.EXECUTION, "burst round trip"):
                    received = self._round_trip(len(words) // WORDS)
            except (BrokenResourceError, ClosedResourceError):
                return ErrorStatus.DEVICE_UNAVAILABLE, [], Timing(), False
            try:
                status, shapes, timing = parse_result_words(self._result_words[: WORDS * received].tolist())
            except PacketError:
                return ErrorStatus.GENERAL_FAILURE, [], Timing(), False
        finally:
            self._in_flight.release()
        # Drivers must not report shapes or timing with a failure (HAL contract).
        if status not in (ErrorStatus.NONE, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE):
            shapes = []
        if status != ErrorStatus.NONE:
            timing = Timing()
        return status, shapes, timing, False

    def free_memory(self, key: Hashable) -> None:
        """Tell the server a memory is gone; unknown and double frees stay local."""
        slot = self._slots.free_memory(key)
        if slot is not None and not self._closed:
            self._context.free_memory(slot)

    def close(self) -> None:
        """End the burst: the server's worker stops and releases its mappings,
        and a compute blocked in another thread returns DEVICE_UNAVAILABLE."""
        if self._closed:
            return
        self._closed = True
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
