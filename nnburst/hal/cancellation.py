"""Stopping an execution whose caller is gone.

A WHILE loop runs until its condition says stop or its loop timeout expires
(up to 15 s), a core all along.  When the app that asked for it has gone
(its connection closed, its burst closed), nobody will read the answer:
the driver that runs the loop asks :func:`cancelled` at every iteration,
and the one that started the execution says, with :func:`cancelled_when`,
what makes it pointless.  The conditions are per thread (an execution runs
on one thread) and looked at most once a millisecond, so a check that costs
a system call (a socket poll) does not slow a tight loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: How often, at most, the conditions are evaluated (ns).
CHECK_INTERVAL_NS = 1_000_000


class _Conditions(threading.local):
    def __init__(self) -> None:
        self.predicates: list[Callable[[], bool]] = []
        self.next_check = 0
        self.cancelled = False


_state = _Conditions()


@contextmanager
def cancelled_when(predicate: Callable[[], bool]) -> Iterator[None]:
    """While in this block, executions on this thread stop once ``predicate()``
    is true (it is called from the executing thread, and must not block)."""
    state = _state
    state.predicates.append(predicate)
    try:
        yield
    finally:
        state.predicates.remove(predicate)
        if not state.predicates:
            state.cancelled = False


def cancelled() -> bool:
    """True once any condition of this thread's :func:`cancelled_when` blocks holds."""
    state = _state
    if not state.predicates:
        return False
    if state.cancelled:
        return True
    now = time.monotonic_ns()
    if now < state.next_check:
        return False
    state.next_check = now + CHECK_INTERVAL_NS
    state.cancelled = any(predicate() for predicate in state.predicates)
    return state.cancelled
