"""Requests on their way from the runtime to a driver.

:class:`BoundRequest` is what an execution hands to whichever path runs it
(a driver's ``execute_synchronously``, a burst, a partitioned plan): the HAL
request over the app's own buffers plus the execution's settings, as one
value.

:class:`StagedRequest` is the one way a request reaches memory another
process can map: a driver outside this process maps only fd-backed
:class:`~nnburst.hal.memory.MappedMemory` pools, so every other pool (a numpy
array, a bytearray) is copied into one shared memory, and copied back once
the driver wrote its outputs.  A burst stages into a memory it keeps across
executions; everyone else stages into a fresh one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import BadDataError
from .interfaces import ExecutionResult, IPreparedModel
from .memory import MappedMemory
from .types import DataLocation, MeasureTiming, Request, RequestArgument, pool_view

__all__ = ["BoundRequest", "StagedRequest"]

#: Staged pools start on cache-line boundaries.
_ALIGN = 64


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


@dataclass(frozen=True)
class BoundRequest:
    """One execution's request and settings, as the runtime passes them down.

    ``deadline_ns`` is absolute (``time.monotonic_ns()``); ``None`` means no
    deadline.  ``loop_timeout_ns`` bounds WHILE loops.
    """

    request: Request
    measure: MeasureTiming = MeasureTiming.NO
    deadline_ns: int | None = None
    loop_timeout_ns: int | None = None

    def with_request(self, request: Request) -> BoundRequest:
        """The same settings for another request (a staged one, a step of a plan)."""
        return dataclasses.replace(self, request=request)

    def execute(self, prepared: IPreparedModel) -> ExecutionResult:
        """Run it through ``prepared.execute_synchronously``."""
        return prepared.execute_synchronously(
            self.request,
            self.measure,
            deadline_ns=self.deadline_ns,
            loop_timeout_ns=self.loop_timeout_ns,
        )


def _staged_regions(request: Request) -> tuple[dict[int, tuple[int, int]], int]:
    """Pool index → (offset, size) in a staging memory for every pool that is not a
    sealed :class:`MappedMemory` (see ``hal/memory.py``), and the bytes they need together."""
    regions: dict[int, tuple[int, int]] = {}
    total = 0
    for index, pool in enumerate(request.pools):
        if not (isinstance(pool, MappedMemory) and pool.sealed):
            size = pool_view(pool).nbytes
            regions[index] = (total, size)
            total = _align(total + size)
    return regions, total


class StagedRequest:
    """``request`` with its non-shared pools copied into one shared memory.

    The staging memory becomes pool 0 of :attr:`request`, followed by the
    original request's shared pools in their order; shared pools are used
    in place.  Outputs reach the caller's buffers with :meth:`copy_back`.

    Args:
        request: the request over the app's buffers.
        into: gives a staging memory the caller keeps, of at least the
            number of bytes it is passed (called only when something must
            be staged); None allocates one that :meth:`close` releases.

    Raises:
        BadDataError: a location lies outside its staged pool (in the
            staging memory it would reach a neighbour's bytes).
        ValueError: ``into`` is too small.
    """

    def __init__(self, request: Request, into: Callable[[int], MappedMemory] | None = None) -> None:
        self.original = request
        self.memory: MappedMemory | None = None
        self._owned = False
        self._regions, total = _staged_regions(request)
        if not self._regions:
            self.request = request
            return
        if into is None:
            self.memory, self._owned = MappedMemory.create_shared(max(total, _ALIGN)), True
        else:
            self.memory = into(total)
            if self.memory.size < total:
                raise ValueError(
                    f"a {self.memory.size}-byte staging memory cannot hold {total} bytes"
                )
        try:
            self.request = self._stage(request, self.memory)
        except BaseException:
            self.close()
            raise

    def copy_in(self) -> None:
        """Copy the caller's staged pools into the staging memory (again).

        A request computed many times is staged once and copied in before
        each computation: its buffers' current bytes are what the driver reads."""
        if self.memory is None:
            return
        staging = self.memory.buffer
        for index, (offset, size) in self._regions.items():
            staging[offset : offset + size] = pool_view(self.original.pools[index])

    def _stage(self, request: Request, memory: MappedMemory) -> Request:
        pools: list[Any] = [memory]
        new_index: dict[int, int] = {}
        for index, pool in enumerate(request.pools):
            if index not in self._regions:
                new_index[index] = len(pools)
                pools.append(pool)
        self.copy_in()

        def move(arg: RequestArgument) -> RequestArgument:
            if arg.has_no_value:
                return arg
            loc = arg.location
            region = self._regions.get(loc.pool_index)
            if region is None:
                index = new_index.get(loc.pool_index)
                if index is None:
                    raise BadDataError(
                        f"location {tuple(loc)} names none of the {len(request.pools)} pools"
                    )
                return RequestArgument(
                    False, DataLocation(index, loc.offset, loc.length), arg.dimensions
                )
            if loc.offset < 0 or loc.length < 0 or loc.offset + loc.length > region[1]:
                raise BadDataError(
                    f"location {tuple(loc)} is outside its pool of {region[1]} bytes"
                )
            return RequestArgument(
                False, DataLocation(0, region[0] + loc.offset, loc.length), arg.dimensions
            )

        return Request([move(a) for a in request.inputs], [move(a) for a in request.outputs], pools)

    def copies(
        self,
    ) -> tuple[list[tuple[memoryview, memoryview]], list[tuple[memoryview, memoryview]]]:
        """The (source, target) byte views :meth:`copy_in` and :meth:`copy_back`
        copy, for a caller that does the copies itself (a burst's C path)."""
        if self.memory is None:
            return [], []
        staging = self.memory.buffer
        regions = self._regions
        views = {
            i: (pool_view(self.original.pools[i]), staging[o : o + n])
            for i, (o, n) in regions.items()
        }
        written = {a.location.pool_index for a in self.original.outputs if not a.has_no_value}
        copies_in = [views[i] for i in sorted(regions)]
        copies_out = [(views[i][1], views[i][0]) for i in sorted(written & regions.keys())]
        return copies_in, copies_out

    def copy_back(self) -> None:
        """Copy every staged pool an output refers to back into the caller's buffer.

        Staged pools were copied in whole, so bytes the driver did not write
        come back unchanged.
        """
        if self.memory is None:
            return
        staging = self.memory.buffer
        written = {a.location.pool_index for a in self.original.outputs if not a.has_no_value}
        for index in written & self._regions.keys():
            offset, size = self._regions[index]
            pool_view(self.original.pools[index])[:] = staging[offset : offset + size]

    def close(self) -> None:
        """Release the staging memory if this request allocated it."""
        if self.memory is not None and self._owned:
            self.memory.close()
        self.memory = None

    def __enter__(self) -> StagedRequest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
