"""The kernel threads (``csrc/threadpool.h``): one C pool per process, as
large as the largest count anyone holds now.  ``nnburst/cpu/threads.py``
decides the counts; a plan's THREADS step says how many of them its steps
use (at most the pool's)."""

from __future__ import annotations

import threading
from collections import Counter

from ..errors import BadDataError
from .compiled import lib

#: The most threads a step may use, the caller included.
MAX_THREADS = lib.NNB_THREADS_MAX

_lock = threading.Lock()
_held: Counter[int] = Counter()


def _apply() -> None:
    """Size the pool to the largest count held (lock held): 1 joins every worker."""
    wanted = max((count for count, n in _held.items() if n > 0), default=1)
    if lib.nnb_threads_count() != wanted:
        rc = lib.nnb_threads_set(wanted)
        if rc:
            raise BadDataError(f"the kernel threads refuse a count of {wanted} ({rc})")


class Hold:
    """A claim on ``count`` kernel threads (the caller's included) until
    :meth:`release`; the pool shrinks back once nobody holds more."""

    def __init__(self, count: int) -> None:
        if not 1 <= count <= MAX_THREADS:
            raise BadDataError(f"a kernel thread count from 1 to {MAX_THREADS}, got {count}")
        self.count = count
        self._released = False
        with _lock:
            _held[count] += 1
            _apply()

    def release(self) -> None:
        """Give the claim back (idempotent); workers past the new largest count are joined."""
        with _lock:
            if self._released:
                return
            self._released = True
            _held[self.count] -= 1
            _apply()


def pool_count() -> int:
    """The threads a step may use now, the caller included."""
    return lib.nnb_threads_count()


def workers_alive() -> int:
    """The worker threads that exist now (started lazily, at a parallel step)."""
    return lib.nnb_threads_alive()
