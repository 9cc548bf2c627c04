"""``Burst``: a run of executions of one compilation over Fast Message Queues (``ANeuralNetworksBurst``).

A burst owns an ``ExecutionBurstController`` (the client end of the two
FMQs) and a *staging* memory.  Burst pools must be shareable memories, so
numpy inputs are copied into the staging memory (reused and grown across
executions) and outputs copied back; ``Memory`` objects the app binds are used
in place and named to the controller by the ``Memory`` object itself, so
``Memory.close()`` frees the driver's slot for it.  If the controller cannot be
created, or asks for a fallback, the same staged request goes through
``execute_synchronously``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from .codes import ErrorStatus
from .compilation import Compilation
from .errors import BadDataError, BadStateError, NNError, status_for_exception
from .hal.burst_controller import polling_window_us
from .hal.interfaces import ExecutionResult
from .hal.types import NO_TIMING, DataLocation, Request, RequestArgument
from .memory import Memory
from .model import require

if TYPE_CHECKING:
    from .execution import Argument, Execution

__all__ = ["Burst"]

logger = logging.getLogger("nnburst.burst")


_ALIGN = 64  # staged arguments start on cache-line boundaries
_PAGE = 4096


def _align(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _forget_closed_memory(memory: Memory, ref: weakref.ref[Burst]) -> None:
    burst = ref()
    if burst is not None:
        burst._memory_closed(memory)


class Burst:
    """A burst object for one finished compilation; a context manager (``close()`` is idempotent).

    Only one execution may use a burst at a time (``BAD_STATE`` otherwise).
    """

    _closed = True
    _controller: Any = None
    _staging: Memory | None = None

    def __init__(self, compilation: Compilation) -> None:
        require(compilation, "Burst: compilation")
        if not isinstance(compilation, Compilation):
            raise BadDataError(
                f"Burst: expected an nnburst.Compilation, got {type(compilation).__name__}"
            )
        self._prepared = compilation._check_ready("Burst")
        self._compilation = compilation
        self._lock = threading.Lock()  # held for a whole computation
        self._close_lock = threading.Lock()
        self._staging_bytes: np.ndarray | None = None
        self._memories: weakref.WeakSet[Memory] = weakref.WeakSet()
        self._closed = False
        window = polling_window_us(compilation.preference)
        self._controller = self._create_controller(window)

    def _create_controller(self, polling_window_us: int) -> Any:
        try:
            from .hal.burst_controller import ExecutionBurstController
        except ImportError:
            logger.info("no burst controller available: bursts run through execute_synchronously")
            return None
        try:
            return ExecutionBurstController.create(
                self._prepared, polling_window_us=polling_window_us
            )
        except NNError as exc:
            # As the NN runtime: a driver that cannot burst still executes, just not over FMQs.
            logger.info(
                "the driver could not configure a burst (%s): falling back to execute_synchronously",
                exc,
            )
            return None

    @property
    def compilation(self) -> Compilation:
        return self._compilation

    @property
    def closed(self) -> bool:
        return self._closed

    # -- one execution -------------------------------------------------------------------
    def _compute(self, execution: Execution) -> ExecutionResult:
        """Run ``execution`` through this burst.

        Raises before anything runs (the execution can be retried): burst
        closed or in use (``BAD_STATE``), staging memory failure.  Failures
        after the request was sent come back as a status.
        """
        from .execution import execute_prepared

        if not self._lock.acquire(blocking=False):
            raise BadStateError("burst_compute: the burst is in use by another execution")
        try:
            if self._closed:
                raise BadStateError("burst_compute: the burst is closed")
            request, keys, copy_back = self._stage(execution)
            measure = execution._measure_timing
            try:
                fallback = self._controller is None
                if not fallback:
                    status, shapes, timing, fallback = self._controller.compute(
                        request, measure, keys
                    )
                if fallback:
                    status, shapes, timing = execute_prepared(
                        self._prepared,
                        request,
                        measure,
                        execution._deadline(),
                        execution._loop_timeout_ns,
                    )
            except NNError as exc:
                logger.info("burst execution failed: %s", exc)
                return status_for_exception(exc), [], NO_TIMING
            if status == ErrorStatus.NONE:
                self._copy_back(copy_back, shapes)
            return status, shapes, timing
        finally:
            self._lock.release()

    def _stage(
        self, execution: Execution
    ) -> tuple[Request, list[Any], list[tuple[int, Argument, int]]]:
        """The execution's request over shareable pools: staging memory first, then the app's memories."""
        arguments = [*execution._inputs, *execution._outputs]
        offsets: list[int] = []
        total = 0
        for arg in arguments:
            assert arg is not None
            if arg.omitted or arg.memory is not None:
                offsets.append(-1)
                continue
            start = _align(total, _ALIGN)
            offsets.append(start)
            total = start + arg.length
        pools: list[Any] = []
        keys: list[Any] = []
        if total:
            staging = self._ensure_staging(total)
            pools.append(staging)
            keys.append(staging)
        memory_index: dict[int, int] = {}
        request_args: list[RequestArgument] = []
        copy_back: list[tuple[int, Argument, int]] = []
        n_inputs = len(execution._inputs)
        for position, (arg, offset) in enumerate(zip(arguments, offsets)):
            assert arg is not None
            if arg.omitted:
                request_args.append(RequestArgument(has_no_value=True))
                continue
            if arg.memory is not None:
                index = memory_index.get(id(arg.memory))
                if index is None:
                    index = memory_index[id(arg.memory)] = len(pools)
                    pools.append(arg.memory)
                    keys.append(arg.memory)
                    self._track(arg.memory)
                request_args.append(
                    RequestArgument(False, DataLocation(index, arg.offset, arg.length), arg.dims)
                )
                continue
            if position < n_inputs and arg.length:
                assert self._staging_bytes is not None
                self._staging_bytes[offset : offset + arg.length] = _bytes_of(arg)
            elif position >= n_inputs:
                copy_back.append((position - n_inputs, arg, offset))
            request_args.append(
                RequestArgument(False, DataLocation(0, offset, arg.length), arg.dims)
            )
        request = Request(request_args[:n_inputs], request_args[n_inputs:], pools)
        return request, keys, copy_back

    def _ensure_staging(self, size: int) -> Memory:
        if self._staging is not None and self._staging.size >= size:
            return self._staging
        old = self._staging
        new = Memory.create_shared(_align(max(size, 2 * old.size if old else 0), _PAGE))
        self._staging, self._staging_bytes = new, np.frombuffer(memoryview(new.buffer), np.uint8)
        if old is not None:
            self._release_staging(old)
        return new

    def _release_staging(self, staging: Memory) -> None:
        if self._controller is not None:
            self._controller.free_memory(staging)
        staging.close()

    def _copy_back(self, copy_back: list[tuple[int, Argument, int]], shapes: list[Any]) -> None:
        assert self._staging_bytes is not None or not copy_back
        for i, arg, offset in copy_back:
            n = arg.length
            if i < len(shapes) and arg.dtype is not None:
                # Only the bytes the driver wrote: the rest of the app's buffer stays untouched.
                n = min(n, math.prod(shapes[i].dimensions) * arg.dtype.itemsize)
            if n <= 0:
                continue
            assert self._staging_bytes is not None
            if arg.array is not None:
                target = arg.array.reshape(-1).view(np.uint8)
            else:
                assert arg.buffer is not None
                target = np.frombuffer(arg.buffer, np.uint8)
            target[:n] = self._staging_bytes[offset : offset + n]

    # -- memories ------------------------------------------------------------------------
    def _track(self, memory: Memory) -> None:
        if memory not in self._memories:
            self._memories.add(memory)
            # The callback holds the burst weakly: a memory must not keep a burst alive.
            memory.on_close(self, functools.partial(_forget_closed_memory, ref=weakref.ref(self)))

    def _memory_closed(self, memory: Memory) -> None:
        self._memories.discard(memory)
        controller = self._controller
        if controller is not None and not self._closed:
            controller.free_memory(memory)

    # -- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        """End the burst: stop the controller (and the driver's burst thread), release the staging memory.

        A computation in progress on another thread is woken (it fails with
        ``UNAVAILABLE_DEVICE``) and waited for before the staging memory goes.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        controller = self._controller
        if controller is not None:
            controller.close()  # first: wakes a compute blocked on the result queue
        with self._lock:
            self._controller = None
            for memory in list(self._memories):
                memory.forget(self)
            self._memories = weakref.WeakSet()
            staging, self._staging = self._staging, None
            self._staging_bytes = None
            if staging is not None:
                staging.close()

    def __enter__(self) -> Burst:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._closed:
            with contextlib.suppress(Exception):  # never raise from a finalizer
                self.close()


def _bytes_of(arg: Argument) -> np.ndarray:
    data = arg.data()
    if isinstance(data, np.ndarray):
        return data.reshape(-1).view(np.uint8)
    return np.frombuffer(data, np.uint8)
