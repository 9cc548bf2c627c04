"""HAL interfaces as abstract base classes.

A driver is anything implementing :class:`IDevice`; the runtime talks to an
in-process CPU driver and to a proxy for a driver in a service process through
exactly these methods.  The burst interfaces follow HAL 1.2.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..codes import ErrorStatus, PreferenceCode, PriorityCode
from .model import HalModel
from .types import Capabilities, DeviceType, MeasureTiming, OutputShape, Request, Timing

if TYPE_CHECKING:
    from ..fmq import Descriptor

ExecutionResult = tuple[ErrorStatus, list[OutputShape], Timing]

#: :attr:`IDevice.location` of a device running in the caller's process.
IN_PROCESS = "in-process"


class IBurstCallback(abc.ABC):
    """Client side of a burst: hands the server the memory behind a slot."""

    #: True when every memory :meth:`get_memories` returns is the caller's to
    #: close (mapped afresh from an fd, as in a service); False when the
    #: memories stay the app's (an in-process burst).
    transfers_ownership: bool = False

    @abc.abstractmethod
    def get_memories(self, slots: Sequence[int]) -> tuple[ErrorStatus, list[Any]]:
        """Memories for ``slots`` (same order); ``INVALID_ARGUMENT`` and ``[]`` if any is unknown."""


class IBurstContext(abc.ABC):
    """Server side of a burst, owned by the client: freeing it ends the burst."""

    @abc.abstractmethod
    def free_memory(self, slot: int) -> bool:
        """Forget the memory cached for ``slot``; unknown slots are ignored.

        Returns True once the slot may name another memory.  False means the
        free is only on its way (the server could still use the old memory for
        it), so the client must retire the slot instead of reusing it.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Stop the worker and release every cached mapping; idempotent."""

    def link_to_death(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` if the server's process dies while the burst is open.

        An in-process context cannot die on its own, so the default never
        calls it; a context in a service process overrides this.
        """
        del callback  # nothing to watch: it would never be called


class IBurstExecutorWithCache(abc.ABC):
    """What a burst server executes with: a prepared model plus a slot → memory cache.

    The server never calls it concurrently.
    """

    @abc.abstractmethod
    def is_cache_entry_present(self, slot: int) -> bool: ...

    @abc.abstractmethod
    def add_cache_entry(self, memory: Any, slot: int) -> None: ...

    @abc.abstractmethod
    def remove_cache_entry(self, slot: int) -> None: ...

    @abc.abstractmethod
    def execute(
        self, request: Request, slots: Sequence[int], measure: MeasureTiming
    ) -> ExecutionResult:
        """Run ``request`` whose pool indexes refer to ``slots``."""


class IExecution(abc.ABC):
    """One request bound to a prepared model, computed any number of times.

    As NNAPI AIDL's ``IExecution``: the driver validates the request and sets
    up its buffers once, so a reusable execution pays only for computing.
    The request's pools must stay valid while the execution is used.
    """

    @abc.abstractmethod
    def compute(self, deadline_ns: int | None = None) -> ExecutionResult:
        """Run the bound request once; never raises for a bad request, returns a status."""

    def close(self) -> None:  # noqa: B027 - optional, with nothing to release by default
        """Release what the execution holds; idempotent.  Nothing by default."""


class IPreparedModel(abc.ABC):
    def create_reusable_execution(
        self, request: Request, measure: MeasureTiming, loop_timeout_ns: int | None = None
    ) -> IExecution:
        """Bind ``request`` once for many computations.

        The default submits the whole request to :meth:`execute_synchronously`
        on every call; drivers override it to do their per-request work once.
        """
        return _ResubmittedExecution(self, request, measure, loop_timeout_ns)

    def failure_reason(self) -> str | None:
        """Why the latest failed execution failed, when the driver keeps it.

        The HAL reports only a status; an in-process driver can say more, and
        the runtime puts it in its error.  With executions running at once it
        names one of the latest failures.  None by default (a driver in
        another process logs the reason there)."""
        return None

    @abc.abstractmethod
    def execute_synchronously(
        self,
        request: Request,
        measure: MeasureTiming,
        *,
        deadline_ns: int | None = None,
        loop_timeout_ns: int | None = None,
    ) -> ExecutionResult:
        """Run one request; never raises for a bad request, returns a status.

        ``deadline_ns`` (absolute ``time.monotonic_ns()``) and
        ``loop_timeout_ns`` are HAL 1.3's execution deadline and WHILE loop
        timeout; drivers without them may ignore them."""

    @abc.abstractmethod
    def configure_execution_burst(
        self,
        callback: IBurstCallback,
        request_channel: Descriptor,
        result_channel: Descriptor,
    ) -> tuple[ErrorStatus, IBurstContext | None]:
        """Start serving bursts on the two FMQs described."""


class _ResubmittedExecution(IExecution):
    """A reusable execution for drivers with no cheaper way: one full request per call."""

    def __init__(
        self,
        prepared: IPreparedModel,
        request: Request,
        measure: MeasureTiming,
        loop_timeout_ns: int | None,
    ) -> None:
        self._prepared = prepared
        self._request = request
        self._measure = measure
        self._loop_timeout_ns = loop_timeout_ns

    def compute(self, deadline_ns: int | None = None) -> ExecutionResult:
        return self._prepared.execute_synchronously(
            self._request,
            self._measure,
            deadline_ns=deadline_ns,
            loop_timeout_ns=self._loop_timeout_ns,
        )


class SupportsBursts(Protocol):
    """What a burst controller needs of a prepared model, wherever it runs."""

    def configure_execution_burst(
        self, callback: IBurstCallback, request_channel: Descriptor, result_channel: Descriptor
    ) -> tuple[ErrorStatus, IBurstContext | None]: ...


class IDevice(abc.ABC):
    name: str
    type: DeviceType
    version_string: str
    feature_level: int
    #: What reaching the device costs per call, in microseconds, on top of its
    #: execution time: 0 in this process; a service's measured round trip.
    reach_us: float = 0.0
    #: Where the device runs, for people: "in-process", or e.g. "service /run/…/driver.sock".
    location: str = IN_PROCESS
    #: The nnburst extensions the device accepts (:mod:`nnburst.extensions`), as
    #: NNAPI devices list theirs; the partitioner sends an operation that uses one
    #: only to a device that declares it.
    extensions: tuple[str, ...] = ()

    @property
    def available(self) -> bool:
        """False once the device is gone for good (its service died); in-process
        devices always are."""
        return True

    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities: ...

    @abc.abstractmethod
    def get_supported_operations(self, model: HalModel) -> list[bool]:
        """One flag per operation of ``model.main``, in order."""

    @abc.abstractmethod
    def prepare_model(
        self,
        model: HalModel,
        preference: PreferenceCode = PreferenceCode.FAST_SINGLE_ANSWER,
        priority: PriorityCode = PriorityCode.MEDIUM,
        deadline_ns: int | None = None,
        cache: Any = None,
    ) -> IPreparedModel:
        """Compile ``model``; raises :class:`nnburst.NNError` on failure."""
