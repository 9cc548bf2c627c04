"""Memories apps and drivers exchange (``ANeuralNetworksMemory``).

:class:`Memory` is the HAL's fd-backed :class:`~nnburst.hal.memory.MappedMemory`
plus what the NDK adds to it: memories allocated for a :class:`MemoryDesc`
(which start without data) and ``Memory.copy``.  Everything about the mapping
itself (sharing by fd, nothing left in ``/dev/shm``) is the HAL class's.
"""

from __future__ import annotations

import threading
from typing import Any

from .codes import ResultCode
from .compilation import Compilation
from .errors import BadDataError, BadStateError, NNError
from .hal.memory import PROT_READ as PROT_READ
from .hal.memory import PROT_WRITE as PROT_WRITE
from .hal.memory import MappedMemory
from .operands import merge_dimensions

__all__ = ["PROT_READ", "PROT_WRITE", "Memory", "MemoryDesc"]


class Memory(MappedMemory):
    """A mapped shared region; a context manager whose ``close()`` is idempotent.

    ``Memory.close()`` also tells every burst that cached this memory to free
    its slot, as ``ANeuralNetworksMemory_free`` does.
    """

    #: Set by :meth:`from_desc`: the descriptor this memory was allocated for.
    desc: MemoryDesc | None = None
    #: False until a memory from a descriptor holds data (an output or a copy wrote it).
    initialized: bool = True

    @classmethod
    def from_desc(cls, desc: MemoryDesc) -> Memory:
        """A memory for the roles of a finished :class:`MemoryDesc` (``createFromDesc``).

        The CPU device keeps such memories as plain shared memory, so they
        need fully specified dimensions.  They start uninitialized: using one
        as an input before an execution or :meth:`copy` wrote it is
        ``BAD_DATA``.

        Raises:
            NNError: ``UNEXPECTED_NULL``, ``BAD_DATA`` (not a descriptor),
                ``BAD_STATE`` (descriptor not finished), ``OP_FAILED``
                (dimensions not fully specified).
        """
        if desc is None:
            raise NNError("Memory.from_desc: desc is None", ResultCode.UNEXPECTED_NULL)
        if not isinstance(desc, MemoryDesc):
            raise BadDataError(
                f"Memory.from_desc: expected a MemoryDesc, got {type(desc).__name__}"
            )
        if not desc.finished:
            raise BadStateError("Memory.from_desc: the descriptor is not finished")
        size = desc.byte_size
        if size is None:
            raise NNError(
                f"Memory.from_desc: dimensions {desc.dimensions} are not fully specified; "
                "the CPU device cannot allocate such a memory",
                ResultCode.OP_FAILED,
            )
        memory = cls.create_shared(size)
        memory.desc = desc
        memory.initialized = False
        return memory

    @staticmethod
    def copy(src: Memory, dst: Memory) -> None:
        """Copy the whole of ``src`` into ``dst`` (``ANeuralNetworksMemory_copy``); sizes must match.

        Raises:
            NNError: ``UNEXPECTED_NULL``; ``BAD_DATA`` for different sizes,
                dimensions or an uninitialized source; ``BAD_STATE`` if closed.
        """
        if src is None or dst is None:
            raise NNError("Memory.copy: a memory is None", ResultCode.UNEXPECTED_NULL)
        if not isinstance(src, Memory) or not isinstance(dst, Memory):
            raise BadDataError("Memory.copy: expected two nnburst.Memory objects")
        if src.size != dst.size:
            raise BadDataError(f"Memory.copy: sizes differ ({src.size} and {dst.size} bytes)")
        if not src.initialized:
            raise BadDataError("Memory.copy: the source memory holds no data yet")
        src_dims = src.desc.dimensions if src.desc is not None else None
        dst_dims = dst.desc.dimensions if dst.desc is not None else None
        if src_dims is not None and dst_dims is not None and src_dims != dst_dims:
            raise BadDataError(f"Memory.copy: dimensions differ ({src_dims} and {dst_dims})")
        if dst.buffer.readonly:
            raise BadDataError("Memory.copy: the destination is read-only")
        if src is not dst:
            dst.buffer[:] = src.buffer
        dst.initialized = True


def _quant_key(info: Any) -> tuple[Any, ...]:
    return (info.code, info.scale, info.zero_point, info.channel_quant)


class MemoryDesc:
    """Describes a memory by the inputs and outputs it will be used for (``ANeuralNetworksMemoryDesc``).

    Every role must have the same operand type; dimensions from the roles and
    :meth:`set_dimensions` are combined and must agree.
    """

    def __init__(self) -> None:
        self._roles: list[tuple[Any, bool, int, float]] = []
        self._info: Any = None  # the roles' OperandInfo
        self._dims: tuple[int, ...] | None = None
        self._finished = False
        self._lock = threading.Lock()

    def add_input_role(self, compilation: Compilation, index: int, frequency: float) -> None:
        """This memory may be input ``index`` of executions of ``compilation``."""
        self._add_role(compilation, True, index, frequency)

    def add_output_role(self, compilation: Compilation, index: int, frequency: float) -> None:
        """This memory may be output ``index`` of executions of ``compilation``."""
        self._add_role(compilation, False, index, frequency)

    def _add_role(self, compilation: Any, is_input: bool, index: Any, frequency: Any) -> None:
        what = f"MemoryDesc.add_{'input' if is_input else 'output'}_role"
        if compilation is None:
            raise NNError(f"{what}: compilation is None", ResultCode.UNEXPECTED_NULL)
        with self._lock:
            if self._finished:
                raise BadStateError(f"{what}: the descriptor is finished")
            if not isinstance(compilation, Compilation):
                raise BadDataError(f"{what}: expected an nnburst.Compilation")
            if not compilation.finished:
                raise BadStateError(f"{what}: the compilation is not finished")
            infos = compilation.model.input_types if is_input else compilation.model.output_types
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(infos):
                raise BadDataError(f"{what}: index {index!r} out of range ({len(infos)} operands)")
            if not isinstance(frequency, (int, float)) or not 0.0 < frequency <= 1.0:
                raise BadDataError(f"{what}: frequency must be in (0, 1], got {frequency!r}")
            if any(r[0] is compilation and r[1] == is_input and r[2] == index for r in self._roles):
                raise BadDataError(f"{what}: this role was already added")
            info = infos[index]
            if self._info is not None and _quant_key(info) != _quant_key(self._info):
                raise BadDataError(
                    f"{what}: operand type {info.code.name} differs from the other roles'"
                )
            dims = () if info.is_scalar else info.dimensions
            try:
                self._dims = merge_dimensions(self._dims, dims)
            except ValueError as exc:
                raise BadDataError(f"{what}: incompatible dimensions: {exc}") from None
            self._info = info
            self._roles.append((compilation, is_input, index, float(frequency)))

    def set_dimensions(self, dimensions: Any) -> None:
        """Refine the memory's dimensions (0 = unknown); must agree with every role."""
        if dimensions is None:
            raise NNError(
                "MemoryDesc.set_dimensions: dimensions is None", ResultCode.UNEXPECTED_NULL
            )
        with self._lock:
            if self._finished:
                raise BadStateError("MemoryDesc.set_dimensions: the descriptor is finished")
            try:
                dims = tuple(int(d) for d in dimensions)
            except (TypeError, ValueError):
                raise BadDataError(
                    f"MemoryDesc.set_dimensions: {dimensions!r} are not integers"
                ) from None
            if any(d < 0 for d in dims):
                raise BadDataError(f"MemoryDesc.set_dimensions: negative dimension in {dims}")
            try:
                self._dims = merge_dimensions(self._dims, dims)
            except ValueError as exc:
                raise BadDataError(
                    f"MemoryDesc.set_dimensions: incompatible dimensions: {exc}"
                ) from None

    def finish(self) -> None:
        """Freeze the descriptor; it needs at least one role."""
        with self._lock:
            if self._finished:
                raise BadStateError("MemoryDesc.finish: already finished")
            if not self._roles:
                raise BadDataError("MemoryDesc.finish: no input or output role was added")
            self._finished = True

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def dimensions(self) -> tuple[int, ...] | None:
        return self._dims

    @property
    def operand_info(self) -> Any:
        """The roles' common ``OperandInfo`` (None before the first role)."""
        return self._info

    def has_role(self, compilation: Any, is_input: bool, index: int) -> bool:
        return any(r[0] is compilation and r[1] == is_input and r[2] == index for r in self._roles)

    @property
    def byte_size(self) -> int | None:
        """Bytes a memory for this descriptor needs; None while dimensions are not fully known."""
        if self._info is None or self._dims is None:
            return None
        return self._info.byte_size(self._dims)

    def close(self) -> None:
        """Nothing to release; present so descriptors work as context managers like the rest."""

    def __enter__(self) -> MemoryDesc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
