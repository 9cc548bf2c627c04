"""Deadlines: one representation below the public calls.

The public calls take what the NDK and libfmq take, a relative timeout or
duration in ns (0: no bound).  Each converts it once, on entry, with
:func:`after`, to an absolute deadline: ``int`` nanoseconds of
``time.monotonic_ns()`` (CLOCK_MONOTONIC, the clock the C core's waits
read), or ``None`` for none.  Every layer below passes that value on
unchanged, to the C call and to every retry after a signal; only
``nnburst._bindings`` turns ``None`` into C's sentinel.
"""

from __future__ import annotations

import time

from .errors import BadDataError


def after(timeout_ns: int) -> int | None:
    """The deadline ``timeout_ns`` from now; None for 0 (no bound)."""
    if timeout_ns < 0:
        raise BadDataError(f"timeout must not be negative, got {timeout_ns}")
    return time.monotonic_ns() + timeout_ns if timeout_ns else None


def passed(deadline_ns: int | None) -> bool:
    """Whether ``deadline_ns`` is behind us (never, for None)."""
    return deadline_ns is not None and time.monotonic_ns() >= deadline_ns


def seconds_left(deadline_ns: int, slack_s: float = 0.0) -> float:
    """What is left of ``deadline_ns`` plus ``slack_s``, for a wait that takes
    seconds (a socket's, a condition's); never negative."""
    return max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9) + slack_s
