"""Tests without wall-clock assumptions: blocked threads and a fake clock.

A test that must act while another thread sleeps in a futex (a blocking
read, an event-flag wait) polls ``/proc`` until the kernel says the thread
is inside ``futex()`` on that very word.  Polling has a generous deadline
that only guards against a hang; nothing is assumed about how fast the
machine is.  Code that checks deadlines reads a :class:`SteppingClock`
instead of the real one, so "times out after N checks" is exact.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

HANG_GUARD_SECONDS = 30.0


def word_address(event_flag: Any) -> int:
    """The address of an EventFlag's futex word in this process."""
    return int(event_flag._word.address)


def futex_word(thread: threading.Thread | int) -> int | None:
    """The futex address a thread (or the main thread of a process id) is
    sleeping on, or None if it is not in futex()."""
    task = (
        f"/proc/self/task/{thread.native_id}"
        if isinstance(thread, threading.Thread)
        else f"/proc/{thread}"
    )
    try:
        with open(f"{task}/wchan") as f:
            if "futex" not in f.read():
                return None
        with open(f"{task}/syscall") as f:
            fields = f.read().split()
    except OSError:  # the thread is gone
        return None
    if len(fields) < 2 or fields[0] in ("running", "-1"):
        return None
    return int(fields[1], 16)


def wait_until_blocked_on(thread: threading.Thread, address: int) -> None:
    """Return once ``thread`` sleeps in futex() on ``address``."""
    deadline = time.monotonic() + HANG_GUARD_SECONDS
    while futex_word(thread) != address:
        assert thread.is_alive(), "the thread ended instead of blocking"
        assert time.monotonic() < deadline, "the thread never blocked on the word"
        time.sleep(0.001)


def wait_until_in_futex(thread: threading.Thread | int) -> None:
    """Return once a thread, or a process's main thread, sleeps in futex()
    on any word (a peer process maps the queue at its own address)."""
    deadline = time.monotonic() + HANG_GUARD_SECONDS
    while futex_word(thread) is None:
        assert time.monotonic() < deadline, "the peer never blocked"
        time.sleep(0.001)


def sleeping_threads(pid: int) -> int:
    """How many threads of process ``pid`` are inside a nanosleep (time.sleep)."""
    count = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/wchan") as f:
                count += "nanosleep" in f.read()
        except OSError:
            pass
    return count


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (a service's workers)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def sleeping_service_process(pid: int) -> int | None:
    """The process of a service (one of its workers, else ``pid`` itself) with a
    thread in time.sleep, or None: the one inside an injected ``hang`` or ``sleep``
    fault.  Workers first: a supervisor sleeps between its checks on them."""
    workers = children(pid)
    return next((p for p in (workers or [pid]) if sleeping_threads(p) > 0), None)


def wait_until(condition: Any, what: str, timeout: float = HANG_GUARD_SECONDS) -> None:
    """Poll ``condition`` until true; the deadline only guards against a hang."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: still not true after {timeout} s"
        time.sleep(0.002)


class SteppingClock:
    """Stands in for a module's ``time``: every ``monotonic_ns()`` read moves
    time on by ``step_ns`` (from the real clock's value at creation), so a
    deadline passes after a known number of reads; the rest of ``time`` is
    the real module."""

    def __init__(self, step_ns: int) -> None:
        self.step_ns = step_ns
        self.now = time.monotonic_ns()
        self.reads = 0
        self._lock = threading.Lock()

    def monotonic_ns(self) -> int:
        with self._lock:
            self.now += self.step_ns
            self.reads += 1
            return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)
