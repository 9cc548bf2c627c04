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

from .errors import BadDataError, BadStateError, NNError
from .codes import ResultCode

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
