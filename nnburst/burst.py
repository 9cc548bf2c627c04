"""``Burst``: a run of executions of one compilation over Fast Message Queues (``ANeuralNetworksBurst``).

A burst owns an ``ExecutionBurstController`` (the client end of the two
FMQs) and a staging memory.  Burst pools must be shareable memories, so an
execution's numpy buffers are staged (:class:`~nnburst.hal.staging.StagedRequest`)
into that memory, which is kept and grown across executions, and outputs are
copied back; ``Memory`` objects the app binds are used in place and named to
the controller by the ``Memory`` object itself, so ``Memory.close()`` frees
the driver's slot for it.  If the driver cannot configure a burst, or the
controller asks for a fallback, the same staged request goes through
``execute_synchronously``.

A burst on a device in this process has no FMQs: its executions run on the
caller's thread, through the execution's reusable driver execution, as
``compute`` does.  Handing a request to a server thread of the same process
costs more than the whole computation of a small model (the two threads
share one interpreter lock), and buys nothing: the FMQ path exists to reach
another process.

An execution hands the burst one value, a
:class:`~nnburst.hal.staging.BoundRequest` (:meth:`Burst.run`), or, to send
it again in one C call, the request it holds (:meth:`Burst.repeat`); the
burst reads nothing else of the execution.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager

from .checks import require
from .codes import ErrorStatus
from .compilation import Compilation
from .errors import BadDataError, BadStateError, NNError, status_for_exception
from .hal.burst_controller import BurstGuard, ExecutionBurstController, polling_window_us
from .hal.interfaces import IN_PROCESS, ExecutionResult
from .hal.memory import MappedMemory
from .hal.staging import BoundRequest, StagedRequest
from .hal.types import NO_TIMING, Request

__all__ = ["Burst"]

logger = logging.getLogger("nnburst.burst")

_PAGE = 4096


class _InUse:
    """``Burst.using()``: :meth:`Burst._hold` and the release, as one reusable
    context manager (the guard admits one execution at a time, so one object serves)."""

    __slots__ = ("_burst",)

    def __init__(self, burst: Burst) -> None:
        self._burst = burst

    def __enter__(self) -> None:
        self._burst._hold()

    def __exit__(self, *exc: object) -> None:
        self._burst._guard.lock.release()


def _forget_closed_memory(memory: MappedMemory, ref: weakref.ref[Burst]) -> None:
    burst = ref()
    if burst is not None:
        burst._memory_closed(memory)


class Burst:
    """A burst object for one finished compilation; a context manager (``close()`` is idempotent).

    Only one execution may use a burst at a time (``BAD_STATE`` otherwise).
    """

    _closed = True
    _controller: ExecutionBurstController | None = None
    _staging: MappedMemory | None = None
    _in_process = False
    #: the last request staged, kept for the next execution of the same request
    _staged: StagedRequest | None = None

    def __init__(self, compilation: Compilation) -> None:
        require(compilation, "Burst: compilation")
        if not isinstance(compilation, Compilation):
            raise BadDataError(
                f"Burst: expected an nnburst.Compilation, got {type(compilation).__name__}"
            )
        self._prepared = compilation.prepared_for("Burst")
        self._compilation = compilation
        self._guard = BurstGuard()  # held for a whole computation
        self._close_lock = threading.Lock()
        self._memories: weakref.WeakSet[MappedMemory] = weakref.WeakSet()
        self._closed = False
        device = compilation.device
        self._in_process = device is not None and device.hal.location == IN_PROCESS
        self._in_use = _InUse(self)
        self._controller = self.make_controller(polling_window_us(compilation.preference))

    def make_controller(self, polling_window_us: int) -> ExecutionBurstController | None:
        """The controller for this burst's FMQs; None when the device runs in this
        process (see the module docstring) or cannot burst.  A subclass may build
        it otherwise (``nnburst stress`` always uses FMQs, with a short request
        channel under ``--shrink-queues``)."""
        if self.in_process:
            return None
        return self.fmq_controller(polling_window_us)

    def fmq_controller(
        self, polling_window_us: int, **channel_lengths: int
    ) -> ExecutionBurstController | None:
        """A controller over two new FMQs, or None if the driver cannot burst."""
        try:
            return ExecutionBurstController.create(
                self._prepared,
                polling_window_us=polling_window_us,
                owner_guards=True,  # every call is made under this burst's guard
                **channel_lengths,
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

    @property
    def in_process(self) -> bool:
        """The compilation's one device runs in this process."""
        return self._in_process

    @property
    def direct(self) -> bool:
        """Executions run on the caller's thread (no FMQs): see :meth:`using`."""
        return self._controller is None and self._in_process

    # -- one execution -------------------------------------------------------------------
    def using(self) -> AbstractContextManager[None]:
        """Hold the burst for one execution (a context manager): ``BAD_STATE`` if it
        is closed or in use."""
        return self._in_use

    def run_directly(
        self, execute: Callable[[int | None], ExecutionResult], deadline_ns: int | None
    ) -> ExecutionResult:
        """``execute(deadline_ns)`` on the caller's thread, holding the burst: the
        path of a :attr:`direct` burst (``BAD_STATE`` if closed or in use)."""
        self._hold()
        try:
            return execute(deadline_ns)
        finally:
            self._guard.lock.release()

    def _hold(self) -> None:
        """Take the burst's guard for one execution, or raise ``BAD_STATE``.

        The guard's lock is taken here rather than through ``with guard``:
        each Python frame costs a tenth of an in-process execution."""
        lock = self._guard.lock
        if not lock.acquire(blocking=False):
            raise BadStateError(BurstGuard.IN_USE)
        if self._closed:
            lock.release()
            raise BadStateError("burst_compute: the burst is closed")

    def repeat(self, request: Request, deadline_ns: int | None = None) -> ExecutionResult | None:
        """``request`` sent again in one C call, when it is the request this burst
        staged last and its controller is armed for it (see
        ``ExecutionBurstController.arm_repeat``); None, with nothing sent, otherwise.

        The hot path of a repeated ``Execution.burst_compute``: one frame here,
        one in the controller, one in C.  Raises and returns as :meth:`run`."""
        lock = self._guard.lock
        if not lock.acquire(blocking=False):
            raise BadStateError(BurstGuard.IN_USE)
        try:
            if self._closed:
                raise BadStateError("burst_compute: the burst is closed")
            staged = self._staged
            controller = self._controller
            if controller is None or staged is None or staged.original is not request:
                return None
            try:
                repeated = controller.repeat(staged.request, deadline_ns)
            except NNError as exc:
                logger.info("burst execution failed: %s", exc)
                return status_for_exception(exc), [], NO_TIMING
            if repeated is None:
                return None
            status, shapes, timing, copied = repeated
            if not copied and status == ErrorStatus.NONE:
                staged.copy_back()
            return status, shapes, timing
        finally:
            lock.release()

    def armed_for(self, request: Request) -> bool:
        """Whether :meth:`repeat` would send ``request`` in one C call now."""
        staged, controller = self._staged, self._controller
        return (
            controller is not None
            and staged is not None
            and staged.original is request
            and controller.armed_for(staged.request)
        )

    def run(self, bound: BoundRequest) -> ExecutionResult:
        """Run one execution's request through this burst (for ``Execution.burst_compute``).

        Raises before anything runs (the execution can be retried): burst
        closed or in use (``BAD_STATE``), staging failure.  Failures after the
        request was sent come back as a status.
        """
        repeated = self.repeat(bound.request, bound.deadline_ns)
        if repeated is not None:
            return repeated
        self._hold()  # not `with self.using()`: two frames fewer
        try:
            try:
                status, shapes, timing = self._computed(bound)
            except NNError as exc:
                logger.info("burst execution failed: %s", exc)
                return status_for_exception(exc), [], NO_TIMING
            if status == ErrorStatus.NONE:
                assert self._staged is not None
                self._staged.copy_back()
            return status, shapes, timing
        finally:
            self._guard.lock.release()

    def _computed(self, bound: BoundRequest) -> ExecutionResult:
        """``bound`` staged and computed through the controller (its own
        driver's ``execute_synchronously`` without one, or when the packet does
        not fit the channel).  The second computation of one staged request
        arms the controller's C path for the ones after it."""
        repeat = self._staged is not None and self._staged.original is bound.request
        staged = self._staged_for(bound.request)
        request = staged.request
        controller = self._controller
        fallback = controller is None
        if controller is not None:
            status, shapes, timing, fallback = controller.compute(
                request, bound.measure, request.pools, deadline_ns=bound.deadline_ns
            )
            if repeat and not fallback and status == ErrorStatus.NONE:
                controller.arm_repeat(request, request.pools, *staged.copies())
        if fallback:
            status, shapes, timing = bound.with_request(request).execute(self._prepared)
        return status, shapes, timing

    def _staged_for(self, request: Request) -> StagedRequest:
        """``request`` staged into this burst's memory, its buffers' bytes copied in.

        An execution computed many times passes the same request object: its
        staging layout (and the packet the controller builds from it) is kept,
        and only the bytes are copied again."""
        staged = self._staged
        if (
            staged is not None
            and staged.original is request
            and (staged.memory is None or staged.memory is self._staging)
        ):
            staged.copy_in()
            return staged
        staged = self._staged = StagedRequest(request, into=self._ensure_staging)
        for pool in staged.request.pools:
            if pool is not staged.memory:
                self._track(pool)
        return staged

    def _ensure_staging(self, size: int) -> MappedMemory:
        """The staging memory, grown (page-rounded, at least doubled) to ``size`` bytes."""
        if self._staging is not None and self._staging.size >= size:
            return self._staging
        old = self._staging
        grown = max(size, 2 * old.size if old is not None else 0)
        self._staging = MappedMemory.create_shared((grown + _PAGE - 1) // _PAGE * _PAGE)
        if old is not None:
            if self._controller is not None:
                self._controller.free_memory(old)
            old.close()
        return self._staging

    # -- memories ------------------------------------------------------------------------
    def _track(self, memory: MappedMemory) -> None:
        if memory not in self._memories:
            self._memories.add(memory)
            # The callback holds the burst weakly: a memory must not keep a burst alive.
            memory.on_close(self, functools.partial(_forget_closed_memory, ref=weakref.ref(self)))

    def _memory_closed(self, memory: MappedMemory) -> None:
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
        with self._guard.idle():
            self._controller = None
            for memory in list(self._memories):
                memory.forget(self)
            self._memories = weakref.WeakSet()
            self._staged = None
            staging, self._staging = self._staging, None
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
