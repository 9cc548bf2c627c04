"""Named POSIX shared-memory segments: create, attach, close, unlink.

Names are ``/nnburst-<creator pid>-<random>``, unique per call, so parallel
tests and processes never collide.  The pid in the name lets any later
nnburst process remove segments whose creator died before anyone attached
(:func:`sweep_stale_segments`), so even a SIGKILL at the worst moment leaves
nothing behind for long.

With ``NNBURST_SHM_TAG`` set (lowercase letters) names are
``/nnburst-<tag>-<pid>-<random>``: mutation-testing runs (tools/mutants) tag
theirs, and the test suite's leak guard counts only segments of its own tag,
so a crashed mutant's leftovers are never reported as a normal run's leaks.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import re
import secrets
from pathlib import Path

import posix_ipc

from .errors import BadDataError

PREFIX = "/nnburst-"
NAME_PATTERN = re.compile(r"^/nnburst-(?:(?P<tag>[a-z]+)-)?(?P<pid>\d+)-[0-9a-f]{16}$")
TAG_ENV = "NNBURST_SHM_TAG"
SHM_DIR = Path("/dev/shm")

_swept = False


def name_tag() -> str:
    """This process's tag for new segment names ("" for none)."""
    tag = os.environ.get(TAG_ENV, "")
    if tag and not re.fullmatch("[a-z]+", tag):
        raise ValueError(f"{TAG_ENV}={tag!r}: expected lowercase letters only")
    return tag


def unique_name() -> str:
    tag = name_tag()
    return f"{PREFIX}{tag + '-' if tag else ''}{os.getpid()}-{secrets.token_hex(8)}"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists; False for what cannot be a pid (0 and
    negatives would name process groups, and huge values overflow kill())."""
    if not 0 < pid < 2**31:
        return False
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
        if match and not pid_alive(int(match.group("pid"))):
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
    return int(match.group("pid"))


def sealed_memfd(name: str, size: int) -> int:
    """A new zero-filled memfd of ``size`` bytes that can never shrink (``F_SEAL_SHRINK``).

    A mapping whose file shrinks faults (SIGBUS) on its next access; what we
    share with a process that must not trust us is created this way."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def sealed_against_shrinking(fd: int) -> bool:
    """Whether ``fd``'s file carries ``F_SEAL_SHRINK`` (safe to map from a peer)."""
    try:
        return bool(fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK)
    except OSError:  # not a memfd (a file, a pipe...): nothing stops it shrinking
        return False


class SharedRegion:
    """One mapped segment.  ``close()`` unmaps; ``unlink()`` removes the name.

    A *sealed* region is a memfd instead of a named segment: it has no name
    (``name == ""``), reaches another process as an fd (``fd``), and cannot
    shrink (``F_SEAL_SHRINK``), so a peer can never make our accesses fault.
    """

    mmap: mmap.mmap | None = None
    name: str = ""
    size: int = 0
    #: the memfd of a sealed region (-1 for a named one); closed by ``close()``
    fd: int = -1
    _unlinked: bool = False

    @classmethod
    def create_sealed(cls, size: int) -> SharedRegion:
        """A new zero-filled memfd region of ``size`` bytes, sealed against shrinking."""
        region = cls()
        region.size = size
        fd = sealed_memfd("nnburst-fmq", size)
        try:
            region.mmap = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        region.fd = fd
        return region

    @classmethod
    def from_fd(cls, fd: int, size: int) -> SharedRegion:
        """Map a peer's sealed region of at least ``size`` bytes; takes ``fd``.

        Raises:
            BadDataError: the fd's file may shrink (not sealed) or is too small.
        """
        region = cls()
        region.size = size
        region.fd = fd
        try:
            if not sealed_against_shrinking(fd):
                raise BadDataError(
                    "a queue segment passed as an fd must be a memfd sealed against shrinking"
                )
            actual = os.fstat(fd).st_size
            if actual < size:
                raise BadDataError(
                    f"the segment holds {actual} bytes but the descriptor says {size}"
                )
            region.mmap = mmap.mmap(fd, size)
        except BaseException:
            region.close()
            raise
        return region

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

    def close_fd(self) -> None:
        """Close a sealed region's fd (the mapping stays).  Idempotent."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def close(self) -> bool:
        """Unmap (and close a sealed region's fd).  Returns False when numpy views
        still export the mapping: then it stays mapped until the last view is
        garbage-collected."""
        self.close_fd()
        if self.mmap is None:
            return True
        try:
            self.mmap.close()
        except BufferError:
            self.mmap = None
            return False
        self.mmap = None
        return True
