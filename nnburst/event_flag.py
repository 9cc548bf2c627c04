"""EventFlag: sticky bits on a shared 32-bit futex word.

Bits set by :meth:`EventFlag.wake` stay set until a :meth:`EventFlag.wait`
that asks for them consumes them, so a wake that comes before the wait is
never lost.  The top bit is the teardown bit: once set, every wait on the
word ends with an error, which is how a closing queue releases its waiters.
"""

from __future__ import annotations

import time
from typing import Any

from ._bindings import EINTR, EPIPE, ETIMEDOUT, error_for, ffi, lib
from .errors import BadDataError, ClosedResourceError


def deadline_for(timeout_ns: int) -> int:
    """Absolute CLOCK_MONOTONIC deadline for a timeout where 0 means forever."""
    if timeout_ns < 0:
        raise BadDataError(f"timeout must not be negative, got {timeout_ns}")
    return -1 if timeout_ns == 0 else time.monotonic_ns() + timeout_ns


class EventFlag:
    """A view of one futex word; keeps whatever owns the word alive."""

    def __init__(self, word: Any, owner: Any, active: list[None] | None = None) -> None:
        self._word = word
        self._owner = owner  # the queue or buffer the word lives in
        # The owner's list of calls in flight: its close() waits for them to
        # leave the C core before unmapping the word.
        self._active = [] if active is None else active

    def _closed(self) -> bool:
        return bool(getattr(self._owner, "closed", False))

    @classmethod
    def on_buffer(cls, buffer: Any, offset: int = 0) -> EventFlag:
        """An event flag on a 4-byte aligned word inside a writable buffer
        (e.g. a shared-memory mapping both processes see)."""
        cdata = ffi.from_buffer(buffer, require_writable=True)
        if offset < 0 or offset + 4 > len(cdata):
            raise BadDataError(f"offset {offset} is outside the {len(cdata)}-byte buffer")
        word = ffi.cast("uint32_t *", cdata + offset)
        if int(ffi.cast("uintptr_t", word)) % 4:
            raise BadDataError("the event-flag word must be 4-byte aligned")
        return cls(word, cdata)

    def wake(self, bitmask: int) -> None:
        """Set ``bitmask``; wake waiters on any bit that was not already set."""
        if bitmask <= 0 or bitmask > 0xFFFFFFFF:
            raise BadDataError(f"wake needs a non-zero 32-bit mask, got {bitmask:#x}")
        self._enter()
        try:
            rc = lib.nnb_evflag_wake(self._word, bitmask)
        finally:
            self._active.pop()
        if rc:
            raise error_for(rc, "EventFlag.wake")

    def wait(self, bitmask: int, timeout_ns: int = 0, retry: bool = True) -> int:
        """Wait for any bit of ``bitmask`` and consume it.

        Returns the bits seen, or 0 when ``timeout_ns`` (0 = forever) ran out
        (or, with ``retry=False``, after a spurious wake).  A bit already
        pending returns at once, even with an expired timeout.

        Raises:
            ClosedResourceError / BrokenResourceError: the teardown bit is set.
        """
        if bitmask <= 0 or bitmask > 0xFFFFFFFF:
            raise BadDataError(f"wait needs a non-zero 32-bit mask, got {bitmask:#x}")
        deadline = deadline_for(timeout_ns)
        seen = ffi.new("uint32_t *")
        self._enter()
        try:
            while True:
                rc = lib.nnb_evflag_wait(self._word, bitmask, deadline, int(retry), seen)
                if rc != EINTR:
                    break  # on EINTR the signal's Python handler has run: retry
        finally:
            self._active.pop()
        if rc == 0:
            return int(seen[0])
        if rc == ETIMEDOUT or (rc != EPIPE and not retry):
            return 0
        raise error_for(rc, "EventFlag.wait", closed_locally=self._closed())

    def _enter(self) -> None:
        # Register first, then check: the owner's close() sets closed before
        # it waits for the active calls to drain (see MessageQueue._recheck_open).
        self._active.append(None)
        if self._closed():
            self._active.pop()
            raise ClosedResourceError("the queue that owns this event flag is closed")

    @property
    def word(self) -> int:
        """The raw word (for diagnostics and tests)."""
        return int(self._word[0])
