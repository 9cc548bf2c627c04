"""The driver side of a burst: a worker thread serving requests from an FMQ.

One worker per burst.  It waits for a request packet (spinning in C for the
polling window, then sleeping on the futex, GIL released throughout),
validates and deserializes it, makes sure every pool slot it names is cached
(asking the client's callback once for all unknown slots), executes, and
writes the result packet, which is also where it starts waiting for the next
request: one C call per execution.

It replies to *every* request: a malformed packet gets ``GENERAL_FAILURE``
with no shapes and no timing, and the worker keeps serving.

A request repeated with the same packet bytes is answered in C once armed
(:meth:`_Worker.arm`, ``csrc/burst_fast.c``): C compares each packet with
the armed one, runs the model's C plan over buffers this module validated,
writes the result and waits for the next, and hands anything else back here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._bindings.burst_fast import BurstFastPath
from ..codes import ErrorStatus
from ..errors import (
    BrokenResourceError,
    ClosedResourceError,
    NNError,
    PacketError,
    status_for_exception,
)
from ..fmq import Descriptor, MessageQueue
from . import cancellation
from .interfaces import (
    ExecutionResult,
    IBurstCallback,
    IBurstContext,
    IBurstExecutorWithCache,
    IExecution,
    IPreparedModel,
)
from .memory import MappedMemory
from .packets import (
    ERROR_RESULT_WORDS,
    REQUEST_DATUM,
    RESULT_DATUM,
    WORDS,
    parse_request_words,
    result_words,
)
from .spin import WARM_UP, SpinPolicy
from .types import MeasureTiming, Request, Timing

log = logging.getLogger("nnburst.burst")

#: Memories one burst may cache at once; a request naming more is refused.
MAX_CACHED_SLOTS = 256
#: How long closing waits for the worker to finish an execution in progress.
JOIN_TIMEOUT_S = 10.0


class DefaultBurstExecutorWithCache(IBurstExecutorWithCache):
    """Executes through the prepared model's reusable executions, with the
    pools cached by slot so they are mapped once per burst, not per execution.

    A burst mostly repeats one request: the worker hands back the same parsed
    request object for identical packets, and the driver's execution of it
    (validated, its buffers mapped) is kept until the request or a cached
    slot changes."""

    def __init__(self, prepared_model: IPreparedModel) -> None:
        self._model = prepared_model
        self._cache: dict[int, Any] = {}
        #: (request, its slots, measure) and the driver's execution of it
        self._last: tuple[Request, list[int], MeasureTiming, IExecution] | None = None

    def is_cache_entry_present(self, slot: int) -> bool:
        return slot in self._cache

    def add_cache_entry(self, memory: Any, slot: int) -> None:
        self._forget_execution()
        self._cache[slot] = memory

    def remove_cache_entry(self, slot: int) -> None:
        self._forget_execution()
        self._cache.pop(slot, None)

    def _execution_for(
        self, request: Request, slots: Sequence[int], measure: MeasureTiming
    ) -> IExecution | None:
        """The execution :meth:`execute` keeps for this very request, if any."""
        last = self._last
        if last is not None and last[0] is request and last[1] == slots and last[2] == measure:
            return last[3]
        return None

    def _forget_execution(self) -> None:
        last, self._last = self._last, None
        if last is not None:
            last[3].close()

    def execute(
        self, request: Request, slots: Sequence[int], measure: MeasureTiming
    ) -> ExecutionResult:
        last = self._last
        if last is not None and last[0] is request and last[1] == slots and last[2] == measure:
            return last[3].compute()
        self._forget_execution()
        try:
            request.pools = [self._cache[slot] for slot in slots]
        except KeyError:  # a slot the callback could not resolve
            return ErrorStatus.INVALID_ARGUMENT, [], Timing()
        execution = self._model.create_reusable_execution(request, measure)
        self._last = (request, list(slots), measure, execution)
        return execution.compute()


def _channel(channel: Descriptor | bytes | MessageQueue, dtype: np.dtype) -> MessageQueue:
    """Attach to a channel the client created; it must carry ``dtype`` and an event flag."""
    queue = channel if isinstance(channel, MessageQueue) else MessageQueue.attach(channel)
    if queue.dtype != dtype or queue.event_flag is None:
        queue.close()
        raise ValueError(f"a burst channel needs {dtype} elements and an event flag")
    return queue


class ExecutionBurstServer(IBurstContext):
    """Serves one burst; ``close()`` (or dropping the last reference) ends it."""

    _worker: _Worker | None = None

    @classmethod
    def create(
        cls,
        callback: IBurstCallback,
        request_channel: Descriptor | bytes | MessageQueue,
        result_channel: Descriptor | bytes | MessageQueue,
        executor_or_prepared_model: IBurstExecutorWithCache | IPreparedModel,
        polling_window_us: int = 0,
        max_cached_slots: int = MAX_CACHED_SLOTS,
    ) -> ExecutionBurstServer:
        """Attach to the client's two FMQs and start the worker; it caches at most
        ``max_cached_slots`` memories (a request naming more is refused).

        Raises:
            ValueError / BadDataError: a channel is invalid (wrong element
                type, no event flag, bad descriptor).
        """
        if callback is None or executor_or_prepared_model is None:
            raise ValueError("a burst needs a callback and an executor or prepared model")
        executor = (
            executor_or_prepared_model
            if isinstance(executor_or_prepared_model, IBurstExecutorWithCache)
            else DefaultBurstExecutorWithCache(executor_or_prepared_model)
        )
        requests = _channel(request_channel, REQUEST_DATUM)
        try:
            results = _channel(result_channel, RESULT_DATUM)
        except BaseException:
            requests.close()
            raise
        return cls(
            _Worker(callback, requests, results, executor, polling_window_us, max_cached_slots)
        )

    def __init__(self, worker: _Worker) -> None:
        self._worker = worker
        worker.thread.start()

    def free_memory(self, slot: int) -> bool:
        """The client no longer needs ``slot``; unknown slots are ignored."""
        worker = self._worker
        if worker is not None:
            worker.free_memory(slot)
        return True  # the worker drops it before it next reads the cache

    def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()

    @property
    def closed(self) -> bool:
        return self._worker is None

    def __enter__(self) -> ExecutionBurstServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class _Worker:
    """Everything the worker thread touches.  Kept apart from the context so
    the thread holds no reference to it: dropping the context closes the burst."""

    def __init__(
        self,
        callback: IBurstCallback,
        requests: MessageQueue,
        results: MessageQueue,
        executor: IBurstExecutorWithCache,
        polling_window_us: int,
        max_cached_slots: int = MAX_CACHED_SLOTS,
    ) -> None:
        self.callback = callback
        self.max_cached_slots = max_cached_slots
        self.requests = requests
        self.results = results
        self.executor = executor
        self.spin_ns = max(0, int(polling_window_us)) * 1000
        #: guards ``freed`` only, never held across a call to anyone: the
        #: thread that delivers free_memory may be the one that must read the
        #: reply to the worker's get_memories round trip.
        self.lock = threading.Lock()
        #: slots the client freed, applied by the worker before it next looks
        #: at the cache (the client's free is acknowledged at once, and the
        #: client reuses a slot only after that acknowledgement).
        self.freed: list[int] = []
        self.owned: dict[int, Any] = {}  # memories the callback handed over to us
        self.warned = False  # a refusal was logged as a warning already
        self.stopping = False  # set by stop(); the worker ends at its next request
        self.cached: set[int] = set()  # slots whose memory the executor caches
        self.request_buffer = np.zeros(requests.quantum_count, dtype=REQUEST_DATUM)
        self.result_buffer = np.zeros(results.quantum_count, dtype=RESULT_DATUM)
        # Packets are handled as raw words (see packets.py): cheaper than
        # structured views, and a structured assignment would copy field by
        # field and leave stale padding bytes behind.
        self.request_words = self.request_buffer.view("<u4")
        self.result_words = self.result_buffer.view("<u4")
        self.last_request: tuple[bytes, Any] = (b"", None)  # (packet bytes, parsed)
        #: the C loop that answers repeats of one request (see :meth:`arm`)
        self.fast = BurstFastPath()
        self.spin = SpinPolicy(0)  # the serving thread's, once it runs
        self.last_result: tuple[Any, list[int]] = (None, [])  # (status/shapes/timing, words)
        self.thread = threading.Thread(target=self.run, name="nnburst-burst-server", daemon=True)

    def run(self) -> None:
        # A stopped burst's execution in progress (a WHILE loop) stops too.
        with cancellation.cancelled_when(lambda: self.stopping):
            self.serve()

    def serve(self) -> None:
        spin = self.spin = SpinPolicy(self.spin_ns, WARM_UP)
        try:
            n = self.requests.read_available_until(self.request_buffer, None, spin_ns=self.spin_ns)
            reply_and_wait = self.results.round_trip(
                self.requests, self.result_buffer, self.request_buffer, self.spin_ns
            )
            fast = self.fast
            fast.bind(reply_and_wait)
            # The stop flag is checked on every request, not only through the
            # queues' teardown bit: that bit lives in memory the client can
            # write, and a client that keeps the queue full (or one file behind
            # both queues, read back as requests) never lets the worker wait.
            while not self.stopping:
                datums = self.respond(n)
                window = spin.next_window()
                start = time.monotonic_ns()
                n = reply_and_wait(datums, None, window)  # no deadline: the client's to end
                spin.record(window, time.monotonic_ns() - start)
                while fast.packet:  # armed: repeats of it are answered in C
                    # C waits with the policy's window for as many waits as
                    # the policy holds it (a probe: one; closed: the pause,
                    # sleeping at once), and comes back after them or after a
                    # wait that missed, for the policy to record every wait:
                    # hits too, or a window closed by misses never reopens.
                    window, waits = spin.window_run()
                    try:
                        n = fast.serve(n, window, waits)
                    finally:  # a torn-down serve's waits count too
                        spin.record_run(window, fast.waits, fast.waited_ns, fast.missed_ns)
                    if not fast.waits:
                        break  # a packet C did not serve: Python's
        except (ClosedResourceError, BrokenResourceError):
            pass  # torn down by either side: the burst is over
        except NNError as exc:
            log.error("burst worker stopped: %s", exc)
        finally:
            self.release()

    def respond(self, n: int) -> int:
        """Serve the ``n``-datum packet in ``request_buffer``; leave the result in
        ``result_buffer`` and return its length in datums."""
        # The packet's bytes, never a list of Python ints (36 bytes a word, not 4):
        # a long packet must cost its own size, once.
        packet = self.request_words[: WORDS * n].tobytes()
        # C left this packet to us: whatever was armed may no longer hold.
        if self.fast.packet:
            self.fast.clear()
        # A burst mostly repeats one request layout: comparing the bytes with
        # the last parsed packet costs far less than parsing them again, and a
        # repeat that succeeds is armed for C.
        repeated = packet == self.last_request[0]
        try:
            if repeated:
                request, slots, measure = self.last_request[1]
            else:
                # Native 32-bit words: the "<u4" view above is native on every
                # platform nnburst builds for (little-endian).
                request, slots, measure = parse_request_words(memoryview(packet).cast("I"))
                self.last_request = (packet, (request, slots, measure))
        except PacketError as exc:
            log.debug("malformed request packet: %s", exc)
            words = ERROR_RESULT_WORDS
        else:
            self.cache_slots(slots)
            try:
                status, shapes, timing = self.executor.execute(request, slots, measure)
            except Exception as exc:  # a driver bug must not kill the burst
                log.exception("burst execution failed")
                status, shapes, timing = status_for_exception(exc), [], Timing()
            result = (status, shapes, timing)
            if result == self.last_result[0]:
                words = self.last_result[1]
            else:
                words = result_words(status, shapes, timing)
                self.last_result = (result, words)
            if len(words) > len(self.result_words):
                words = ERROR_RESULT_WORDS  # the 2-datum failure packet always fits
            elif repeated and status == ErrorStatus.NONE:
                self.arm(packet, request, slots, measure, words)
        self.result_words[: len(words)] = words
        return len(words) // WORDS

    def arm(
        self,
        packet: bytes,
        request: Request,
        slots: Sequence[int],
        measure: MeasureTiming,
        words: list[int],
    ) -> None:
        """Let C answer repeats of ``packet`` (served twice in a row here, the
        second time with ``words``) when the driver's execution of it is one
        C plan over buffers it validated.

        Not for pools that could shrink under the mapping (an unsealed
        memfd): C would fault where Python's path fails the same way only
        because it maps them per request too; such bursts keep that path."""
        executor = self.executor
        if not self.fast.bound or not isinstance(executor, DefaultBurstExecutorWithCache):
            return
        execution = executor._execution_for(request, slots, measure)
        plan_of = getattr(execution, "burst_plan", None)
        if plan_of is None:
            return
        for pool in request.pools:
            if isinstance(pool, MappedMemory) and (pool.closed or not pool.sealed):
                return
        bound = plan_of()
        if bound is None:
            return
        with self.lock:
            if self.freed:  # a free came in since the cache was read: serve it first
                return
            self.fast.arm(packet, words, measure == MeasureTiming.YES, bound.plan, bound.copies)

    def cache_slots(self, slots: Sequence[int]) -> None:
        """Apply the client's frees, then fetch every unknown slot with one
        callback call (sorted, unique), holding no lock meanwhile.

        On failure nothing is added: the executor then rejects the request
        with INVALID_ARGUMENT because a slot is missing.  A slot freed while
        its memory was being fetched is not cached: the client let go of it.

        The cache limit is checked after the fetch, not before: a free the
        client posted (from a finalizer, without waiting) can reach us after
        a request that names a new slot, but never after the client answers
        the fetch, so the frees applied then are all the client has sent."""
        self.apply_frees()
        unknown = sorted({s for s in slots if not self.executor.is_cache_entry_present(s)})
        if not unknown:
            return
        if len(unknown) > self.max_cached_slots:
            self.refuse_over_limit()  # could never fit: fetch nothing
            return
        try:
            status, memories = self.callback.get_memories(unknown)
        except NNError as exc:
            # Once per burst: a client refusing slots on every request must not flood the log.
            log.log(
                logging.DEBUG if self.warned else logging.WARNING, "burst callback failed: %s", exc
            )
            self.warned = True
            return
        if status != ErrorStatus.NONE or len(memories) != len(unknown):
            log.debug("callback refused slots %s: %s", unknown, status)
            return
        owned = self.callback.transfers_ownership
        with self.lock:
            freed_meanwhile = set(self.freed)
        self.apply_frees()  # every free the client sent before it answered
        if len(self.cached) + len(set(unknown) - freed_meanwhile) > self.max_cached_slots:
            if owned:
                for memory in memories:
                    memory.close()
            self.refuse_over_limit()
            return
        for slot, memory in zip(unknown, memories):
            if slot in freed_meanwhile:
                if owned:
                    memory.close()
                continue
            self.executor.add_cache_entry(memory, slot)
            self.cached.add(slot)
            if owned:
                self.owned[slot] = memory

    def refuse_over_limit(self) -> None:
        """Log (once as a warning) that a request named too many memories."""
        # Each cached memory holds a mapping (and, from a service client, an
        # fd): a client that never frees must not exhaust them.
        log.log(
            logging.DEBUG if self.warned else logging.WARNING,
            "a burst names more than %d memories without freeing any: refused",
            self.max_cached_slots,
        )
        self.warned = True

    def free_memory(self, slot: int) -> None:
        """Record that the client freed ``slot``; the worker drops it before it
        next uses the cache.  Never waits for the worker."""
        with self.lock:
            self.freed.append(slot)
            self.fast.disarm()  # C must not serve a request naming it

    def apply_frees(self) -> None:
        """Drop every freed slot from the cache and close what we owned (worker thread)."""
        with self.lock:
            freed, self.freed = self.freed, []
        for slot in freed:
            self.executor.remove_cache_entry(slot)
            self.cached.discard(slot)
            memory = self.owned.pop(slot, None)
            if memory is not None:
                memory.close()

    def stop(self) -> None:
        """Tell the worker to stop, wake it with the teardown bit, join it,
        release everything.  The worker stops whatever the client wrote: it
        checks the flag before each request, and an execution in progress (a
        WHILE loop) is cancelled."""
        self.stopping = True
        self.fast.stop()
        self.requests.tear_down()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(JOIN_TIMEOUT_S)
            if self.thread.is_alive():
                # The worker releases everything itself when its execution ends.
                log.error("burst worker did not stop within %.0f s", JOIN_TIMEOUT_S)
                return
        self.release()

    def release(self) -> None:
        """Close both channels and every mapping the burst cached.  Idempotent;
        called once the worker has stopped (or by the worker itself)."""
        self.fast.stop()
        self.fast.clear()
        self.apply_frees()
        owned, self.owned = self.owned, {}
        for slot in owned:
            self.executor.remove_cache_entry(slot)
        for memory in owned.values():
            memory.close()
        self.requests.close()
        self.results.close()
