"""Requests whose buffers a driver in another process can map.

A driver outside this process maps only fd-backed :class:`~nnburst.Memory`
pools.  :class:`StagedRequest` copies every other pool into one shared
memory (both the service client and partitioned plans use it) and copies
outputs back afterwards.
"""

from __future__ import annotations

from ..errors import BadDataError
from ..memory import Memory
from .types import DataLocation, Request, RequestArgument, pool_view

__all__ = ["StagedRequest"]


class StagedRequest:
    """A request whose non-``Memory`` pools are copied into one shared memory.

    For the runtime: a service maps only fd-backed pools, so user buffers are
    staged here before ``execute_synchronously`` and outputs copied back with
    :meth:`copy_back`.  ``Memory`` pools are used in place.

    Raises:
        BadDataError: a location lies outside its (staged) pool.
    """

    def __init__(self, request: Request) -> None:
        self.original = request
        self.memory: Memory | None = None
        self._regions: dict[int, tuple[int, int]] = {}  # original pool -> (offset, size) in the staging memory
        total = 0
        for index, pool in enumerate(request.pools):
            if not isinstance(pool, Memory):
                size = pool_view(pool).nbytes
                self._regions[index] = (total, size)
                total += (size + 63) // 64 * 64
        if not self._regions:
            self.request = request
            return
        self.memory = Memory.create_shared(max(total, 64))
        for index, (offset, size) in self._regions.items():
            self.memory.buffer[offset : offset + size] = pool_view(request.pools[index])
        # A staged pool's index now names the staging memory; locations move by the pool's offset in it.
        pools = [self.memory if i in self._regions else p for i, p in enumerate(request.pools)]

        def move(arg: RequestArgument) -> RequestArgument:
            region = self._regions.get(arg.location.pool_index)
            if arg.has_no_value or region is None:
                return arg
            loc = arg.location
            if loc.offset < 0 or loc.length < 0 or loc.offset + loc.length > region[1]:
                # Checked here: in the staging memory it would reach a neighbour's bytes.
                raise BadDataError(f"location {tuple(loc)} is outside its pool of {region[1]} bytes")
            return RequestArgument(False, DataLocation(loc.pool_index, region[0] + loc.offset, loc.length), arg.dimensions)

        try:
            self.request = Request([move(a) for a in request.inputs], [move(a) for a in request.outputs], pools)
        except BaseException:
            self.close()
            raise

    def copy_back(self) -> None:
        """Copy every staged pool an output refers to back into the caller's buffer."""
        if self.memory is None:
            return
        written = {a.location.pool_index for a in self.original.outputs if not a.has_no_value}
        for index in written & self._regions.keys():
            offset, size = self._regions[index]
            pool_view(self.original.pools[index])[:] = self.memory.buffer[offset : offset + size]

    def close(self) -> None:
        if self.memory is not None:
            self.memory.close()
            self.memory = None

    def __enter__(self) -> StagedRequest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
