"""EventFlag: sticky bits on a shared 32-bit futex word.

Bits set by :meth:`EventFlag.wake` stay set until a :meth:`EventFlag.wait`
that asks for them consumes them, so a wake that comes before the wait is
never lost.  The top bit is the teardown bit: once set, every wait on the
word ends with an error, which is how a closing queue releases its waiters.
"""

from __future__ import annotations

from typing import Any

from . import deadlines
from ._bindings import EventWord
from .errors import BadDataError, ClosedResourceError


class EventFlag:
    """A view of one futex word; keeps whatever owns the word alive."""

    def __init__(self, word: EventWord, owner: Any, active: list[None] | None = None) -> None:
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
        word = EventWord.on_buffer(buffer, offset, closed=lambda: False)
        return cls(word, word)  # the word keeps the buffer's memory

    def wake(self, bitmask: int) -> None:
        """Set ``bitmask``; wake waiters on any bit that was not already set."""
        if bitmask <= 0 or bitmask > 0xFFFFFFFF:
            raise BadDataError(f"wake needs a non-zero 32-bit mask, got {bitmask:#x}")
        self._enter()
        try:
            self._word.wake(bitmask)
        finally:
            self._active.pop()

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
        return self.wait_until(bitmask, deadlines.after(timeout_ns), retry)

    def wait_until(self, bitmask: int, deadline_ns: int | None, retry: bool = True) -> int:
        """:meth:`wait` with an absolute deadline (``nnburst.deadlines``; None: none)."""
        self._enter()
        try:
            return self._word.wait(bitmask, deadline_ns, retry)
        finally:
            self._active.pop()

    def _enter(self) -> None:
        # Register first, then check: the owner's close() sets closed before
        # it waits for the active calls to drain (see MessageQueue.close).
        self._active.append(None)
        if self._closed():
            self._active.pop()
            raise ClosedResourceError("the queue that owns this event flag is closed")

    @property
    def word(self) -> int:
        """The raw word (for diagnostics and tests)."""
        return self._word.value
