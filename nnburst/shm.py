"""Named POSIX shared-memory segments: create, attach, close, unlink.

Names are ``/nnburst-<creator pid>-<random>``, unique per call, so parallel
tests and processes never collide.  The pid in the name lets any later
nnburst process remove segments whose creator died before anyone attached
(:func:`sweep_stale_segments`), so even a SIGKILL at the worst moment leaves
nothing behind for long.
"""

from __future__ import annotations

import mmap
import os
import re
import secrets
from pathlib import Path

import posix_ipc

from .errors import BadDataError

PREFIX = "/nnburst-"
NAME_PATTERN = re.compile(r"^/nnburst-(\d+)-[0-9a-f]{16}$")
SHM_DIR = Path("/dev/shm")

_swept = False


def unique_name() -> str:
    return f"{PREFIX}{os.getpid()}-{secrets.token_hex(8)}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_segments() -> list[str]:
    """Unlink our segments whose creating process no longer exists."""
    removed: list[str] = []
    try:
        entries = os.listdir(SHM_DIR)
    except OSError:
        return removed
    for entry in entries:
        match = NAME_PATTERN.match("/" + entry)
        if match and not pid_alive(int(match.group(1))):
            try:
                posix_ipc.unlink_shared_memory("/" + entry)
                removed.append("/" + entry)
            except posix_ipc.ExistentialError:
                pass
    return removed


def creator_pid(name: str) -> int:
    match = NAME_PATTERN.match(name)
    if match is None:
        raise BadDataError(f"{name!r} is not an nnburst shared-memory name")
    return int(match.group(1))


class SharedRegion:
    """One mapped segment.  ``close()`` unmaps; ``unlink()`` removes the name."""

    mmap: mmap.mmap | None = None
    name: str = ""
    size: int = 0
    _unlinked: bool = False

    @classmethod
    def create(cls, size: int) -> SharedRegion:
        """A new zero-filled segment of ``size`` bytes, readable only by this user."""
        global _swept
        if not _swept:
            _swept = True
            sweep_stale_segments()
        region = cls()
        region.name = unique_name()
        region.size = size
        shm = posix_ipc.SharedMemory(region.name, posix_ipc.O_CREX, mode=0o600, size=size)
        try:
            region.mmap = mmap.mmap(shm.fd, size)
        except BaseException:
            shm.close_fd()
            region.unlink()
            raise
        shm.close_fd()
        return region

    @classmethod
    def attach(cls, name: str, size: int) -> SharedRegion:
        """Map an existing segment that must hold at least ``size`` bytes."""
        creator_pid(name)  # validates the name
        region = cls()
        region.name = name
        region.size = size
        try:
            shm = posix_ipc.SharedMemory(name)
        except posix_ipc.ExistentialError as exc:
            raise BadDataError(f"shared-memory segment {name} does not exist") from exc
        try:
            actual = os.fstat(shm.fd).st_size
            if actual < size:
                # Mapping past the end would SIGBUS on first touch.
                raise BadDataError(
                    f"segment {name} holds {actual} bytes but the descriptor says {size}"
                )
            region.mmap = mmap.mmap(shm.fd, size)
        finally:
            shm.close_fd()
        return region

    def unlink(self) -> None:
        """Remove the name; mappings stay valid.  Idempotent, ENOENT ignored."""
        if self._unlinked or not self.name:
            return
        self._unlinked = True
        try:
            posix_ipc.unlink_shared_memory(self.name)
        except posix_ipc.ExistentialError:
            pass

    def close(self) -> bool:
        """Unmap.  Returns False when numpy views still export the mapping:
        then it stays mapped until the last view is garbage-collected."""
        if self.mmap is None:
            return True
        try:
            self.mmap.close()
        except BufferError:
            self.mmap = None
            return False
        self.mmap = None
        return True
