"""The shared mapping behind a HAL memory pool.

A :class:`MappedMemory` is an fd-backed mapping.  The fd is what crosses a
process boundary (SCM_RIGHTS), so a driver in another process maps the very
same pages; nothing is copied and, because memfd regions have no name,
nothing can be left behind in ``/dev/shm``.

A mapping whose file shrinks faults (SIGBUS) on its next access, and a
fault kills the whole process.  So memories nnburst creates are sealed
against shrinking (``F_SEAL_SHRINK``), and a driver service maps a client's
fd only if it carries that seal (``require_sealed``): a peer can then never
make the service fault.  Unsealed memories (an app's own fd) reach a service
copied into sealed staging memory instead.

It lives in the HAL because both ends of a pool need it: the runtime's
``nnburst.Memory`` adds the NDK's state on top (descriptors, initialisation),
while a driver that receives a pool as an fd maps it with this class alone.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from ..codes import ResultCode
from ..errors import BadDataError, BadStateError, NNError
from ..shm import sealed_against_shrinking, sealed_memfd

__all__ = ["PROT_READ", "PROT_WRITE", "MappedMemory", "drop_fd"]

PROT_READ = mmap.PROT_READ
PROT_WRITE = mmap.PROT_WRITE

_M = TypeVar("_M", bound="MappedMemory")


class MappedMemory:
    """A mapped shared region; a context manager whose ``close()`` is idempotent.

    ``close()`` first calls every callback registered with :meth:`on_close`
    (a burst frees the slot it gave the memory, as
    ``ANeuralNetworksMemory_free`` does).
    """

    _mmap: mmap.mmap | None = None
    _view: memoryview | None = None
    _fd: int = -1
    _closed: bool = True
    #: the file cannot shrink (``F_SEAL_SHRINK``): safe to map in another process
    sealed: bool = False

    def __init__(
        self,
        fd: int,
        size: int,
        offset: int = 0,
        prot: int = PROT_READ | PROT_WRITE,
        require_sealed: bool = False,
    ) -> None:
        """Map ``size`` bytes of ``fd`` at ``offset``; takes ownership of ``fd``.

        ``require_sealed``: refuse (``BadDataError``) an fd whose file may
        shrink: what a process must do with an fd from a peer it does not trust.
        """
        self._lock = threading.Lock()
        self._on_close: weakref.WeakKeyDictionary[Any, Callable[[MappedMemory], None]] = (
            weakref.WeakKeyDictionary()
        )
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
        page = mmap.ALLOCATIONGRANULARITY
        aligned = offset - offset % page
        skip = offset - aligned
        self.sealed = sealed_against_shrinking(fd)
        if require_sealed and not self.sealed:
            self.close()
            raise BadDataError(
                "the memory's file is not sealed against shrinking (F_SEAL_SHRINK): "
                "a driver outside the app's process maps only sealed memories"
            )
        try:
            file_size = os.fstat(fd).st_size
            if offset + size > file_size:
                raise BadDataError(
                    f"memory region [{offset}, {offset + size}) exceeds the file's {file_size} bytes"
                )
            access = mmap.ACCESS_WRITE if prot & PROT_WRITE else mmap.ACCESS_READ
            self._mmap = mmap.mmap(fd, skip + size, access=access, offset=aligned)
        except OSError as exc:
            self.close()
            raise NNError(f"cannot map memory: {exc}", ResultCode.UNMAPPABLE) from exc
        except BaseException:
            self.close()
            raise
        self._closed = False
        self._view = memoryview(self._mmap)[skip : skip + size]

    @classmethod
    def create_shared(cls: type[_M], size: int) -> _M:
        """Anonymous shared memory of ``size`` bytes (a memfd)."""
        if size <= 0:
            raise BadDataError(f"memory size must be positive, got {size}")
        return cls(sealed_memfd("nnburst-memory", size), size)

    @classmethod
    def from_fd(cls: type[_M], size: int, prot: int, fd: int, offset: int) -> _M:
        """Map part of a caller's fd; the caller keeps its fd (we dup it)."""
        if fd < 0:
            raise BadDataError(f"invalid file descriptor {fd}")
        try:
            own = os.dup(fd)
        except OSError as exc:
            raise BadDataError(f"invalid file descriptor {fd}: {exc}") from exc
        return cls(own, size, offset, prot)

    @property
    def fd(self) -> int:
        self._check_open()
        if self._fd < 0:
            raise BadStateError("this memory's fd was closed once it was mapped (drop_fd)")
        return self._fd

    @property
    def buffer(self) -> memoryview:
        """Writable view of the whole region (read-only if mapped without PROT_WRITE)."""
        self._check_open()
        assert self._view is not None
        return self._view

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise BadStateError("memory is closed")

    def on_close(self, owner: Any, callback: Callable[[MappedMemory], None]) -> None:
        """Call ``callback(self)`` at close while ``owner`` is alive (burst slot release)."""
        with self._lock:
            self._on_close[owner] = callback

    def forget(self, owner: Any) -> None:
        """Drop ``owner``'s close callback."""
        with self._lock:
            self._on_close.pop(owner, None)

    def close(self) -> None:
        lock = getattr(self, "_lock", None)  # absent only if __init__ never ran
        if lock is not None:
            with lock:
                callbacks = list(self._on_close.values())
                self._on_close.clear()
            for callback in callbacks:
                callback(self)
        self._closed = True
        if self._view is not None:
            self._view.release()
            self._view = None
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

    def __enter__(self: _M) -> _M:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._closed or self._fd >= 0:
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"fd={self._fd}"
        return f"<{type(self).__name__} size={getattr(self, 'size', 0)} {state}>"


def drop_fd(memory: MappedMemory) -> None:
    """Close ``memory``'s fd and keep its mapping (which holds a duplicate of its
    own): a driver that only reads and writes a peer's memory, and never passes
    it on, then holds one fd per memory, not two."""
    if memory._fd >= 0:
        os.close(memory._fd)
        memory._fd = -1
