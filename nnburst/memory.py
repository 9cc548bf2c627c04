"""Shared memory regions apps and drivers exchange (``ANeuralNetworksMemory``).

A :class:`Memory` is an fd-backed mapping.  The fd is what crosses a process
boundary (SCM_RIGHTS), so a driver in another process maps the very same
pages; nothing is copied and, because memfd regions have no name, nothing can
be left behind in ``/dev/shm``.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .codes import ResultCode
from .errors import BadDataError, BadStateError, NNError

PROT_READ = mmap.PROT_READ
PROT_WRITE = mmap.PROT_WRITE


class Memory:
    """A mapped shared region; a context manager whose ``close()`` is idempotent.

    ``Memory.close()`` also tells every burst that cached this memory to free
    its slot, as ``ANeuralNetworksMemory_free`` does.
    """

    _mmap: mmap.mmap | None = None
    _fd: int = -1
    _closed: bool = True
    #: Set by :meth:`from_desc`: the descriptor this memory was allocated for.
    desc: MemoryDesc | None = None
    #: False until a memory from a descriptor holds data (an output or a copy wrote it).
    initialized: bool = True

    def __init__(self, fd: int, size: int, offset: int = 0, prot: int = PROT_READ | PROT_WRITE) -> None:
        """Map ``size`` bytes of ``fd`` at ``offset``; takes ownership of ``fd``."""
        if size <= 0:
            os.close(fd)
            raise BadDataError(f"memory size must be positive, got {size}")
        if offset < 0:
            os.close(fd)
            raise BadDataError(f"memory offset must not be negative, got {offset}")
        self._fd = fd
        self.size = size
        self.offset = offset
        self.prot = prot
        self._lock = threading.Lock()
        self._on_close: weakref.WeakKeyDictionary[Any, Callable[[Memory], None]] = weakref.WeakKeyDictionary()
        page = mmap.ALLOCATIONGRANULARITY
        aligned = offset - offset % page
        self._skip = offset - aligned
        try:
            file_size = os.fstat(fd).st_size
            if offset + size > file_size:
                raise BadDataError(
                    f"memory region [{offset}, {offset + size}) exceeds the file's {file_size} bytes"
                )
            access = mmap.ACCESS_WRITE if prot & PROT_WRITE else mmap.ACCESS_READ
            self._mmap = mmap.mmap(fd, self._skip + size, access=access, offset=aligned)
        except OSError as exc:
            self.close()
            raise NNError(f"cannot map memory: {exc}", ResultCode.UNMAPPABLE) from exc
        except BaseException:
            self.close()
            raise
        self._closed = False
        self._view = memoryview(self._mmap)[self._skip : self._skip + size]

    @classmethod
    def create_shared(cls, size: int) -> Memory:
        """Anonymous shared memory of ``size`` bytes (a memfd)."""
        if size <= 0:
            raise BadDataError(f"memory size must be positive, got {size}")
        fd = os.memfd_create("nnburst-memory", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
        except OSError:
            os.close(fd)
            raise
        return cls(fd, size)

    @classmethod
    def from_fd(cls, size: int, prot: int, fd: int, offset: int) -> Memory:
        """Map part of a caller's fd; the caller keeps its fd (we dup it)."""
        if fd < 0:
            raise BadDataError(f"invalid file descriptor {fd}")
        try:
            own = os.dup(fd)
        except OSError as exc:
            raise BadDataError(f"invalid file descriptor {fd}: {exc}") from exc
        return cls(own, size, offset, prot)

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

    @property
    def fd(self) -> int:
        self._check_open()
        return self._fd

    @property
    def buffer(self) -> memoryview:
        """Writable view of the whole region (read-only if mapped without PROT_WRITE)."""
        self._check_open()
        return self._view

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise BadStateError("memory is closed")

    def on_close(self, owner: Any, callback: Callable[[Memory], None]) -> None:
        """Call ``callback(self)`` at close while ``owner`` is alive (burst slot release)."""
        with self._lock:
            self._on_close[owner] = callback

    def forget(self, owner: Any) -> None:
        with self._lock:
            self._on_close.pop(owner, None)

    def close(self) -> None:
        with getattr(self, "_lock", threading.Lock()):
            callbacks = list(self._on_close.values()) if hasattr(self, "_on_close") else []
            if hasattr(self, "_on_close"):
                self._on_close.clear()
        for callback in callbacks:
            callback(self)
        self._closed = True
        view = getattr(self, "_view", None)
        if view is not None:
            view.release()
            self._view = None  # type: ignore[assignment]
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:
                # numpy arrays still view the mapping; it is unmapped when they go.
                pass
            self._mmap = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._closed or self._fd >= 0:
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"fd={self._fd}"
        return f"<Memory size={getattr(self, 'size', 0)} {state}>"


def _quant_key(info: Any) -> tuple[Any, ...]:
    return (info.code, info.scale, info.zero_point, info.channel_quant)


def _combine(a: tuple[int, ...] | None, b: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The most specific dimensions compatible with both (0: unknown; None: unknown rank).

    Raises:
        ValueError: ranks or known values differ.
    """
    if a is None:
        return b
    if b is None:
        return a
    if len(a) != len(b):
        raise ValueError(f"ranks differ: {a} and {b}")
    out = []
    for x, y in zip(a, b):
        if x and y and x != y:
            raise ValueError(f"{a} and {b} differ")
        out.append(x or y)
    return tuple(out)


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

    def add_input_role(self, compilation: Any, index: int, frequency: float) -> None:
        """This memory may be input ``index`` of executions of ``compilation``."""
        self._add_role(compilation, True, index, frequency)

    def add_output_role(self, compilation: Any, index: int, frequency: float) -> None:
        """This memory may be output ``index`` of executions of ``compilation``."""
        self._add_role(compilation, False, index, frequency)

    def _add_role(self, compilation: Any, is_input: bool, index: Any, frequency: Any) -> None:
        from .compilation import Compilation

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
                self._dims = _combine(self._dims, dims)
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
                self._dims = _combine(self._dims, dims)
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
        if not self._info.is_scalar and (not self._dims or any(d <= 0 for d in self._dims)):
            return None
        count = 1
        for d in self._dims:
            count *= d
        return count * self._info.dtype.itemsize

    def close(self) -> None:
        """Nothing to release; present so descriptors work as context managers like the rest."""

    def __enter__(self) -> MemoryDesc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
