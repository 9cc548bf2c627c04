"""What ``nnburst stress`` counts and bounds: the counters, the run's budget, the
watchdog that turns a blocked call into a counted hang, and the leak check."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# -- counters -----------------------------------------------------------------------------------


@dataclass
class Stats:
    """Every counter of a run; thread-safe updates, JSON in and out (children report these)."""

    executions: int = 0
    by_target: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    unclean: Counter[str] = field(default_factory=Counter)
    mismatches: int = 0
    hangs: int = 0
    sessions: int = 0
    fallbacks: int = 0
    memories_freed: int = 0
    packets_mutated: int = 0
    mutations_accepted: int = 0
    restarts: int = 0
    unrecovered: int = 0
    leaks: dict[str, int] = field(
        default_factory=lambda: {"shm": 0, "processes": 0, "threads": 0, "fds": 0}
    )
    details: list[str] = field(default_factory=list)
    processes: int = 1
    seconds: float = 0.0
    interrupted: bool = False

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def count(self, table: str, key: str, n: int = 1) -> None:
        with self._lock:
            getattr(self, table)[key] += n

    def note(self, what: str) -> None:
        """Keep the first few failure descriptions for the report."""
        with self._lock:
            if len(self.details) < 20 and what not in self.details:
                self.details.append(what)

    @property
    def leak_total(self) -> int:
        return sum(self.leaks.values())

    @property
    def passed(self) -> bool:
        return not (
            self.mismatches
            or self.hangs
            or self.leak_total
            or self.unclean
            or self.mutations_accepted
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "executions": self.executions,
            "by_target": dict(self.by_target),
            "errors": dict(self.errors),
            "unclean": dict(self.unclean),
            "mismatches": self.mismatches,
            "hangs": self.hangs,
            "leaks": dict(self.leaks),
            "leak_total": self.leak_total,
            "sessions": self.sessions,
            "fallbacks": self.fallbacks,
            "memories_freed": self.memories_freed,
            "packets_mutated": self.packets_mutated,
            "mutations_accepted": self.mutations_accepted,
            "restarts": self.restarts,
            "unrecovered": self.unrecovered,
            "details": self.details,
            "processes": self.processes,
            "seconds": round(self.seconds, 3),
            "interrupted": self.interrupted,
            "passed": self.passed,
        }

    def merge(self, doc: dict[str, Any]) -> None:
        """Add a child's summary (its JSON) to this one."""
        with self._lock:
            for name in (
                "executions",
                "mismatches",
                "hangs",
                "sessions",
                "fallbacks",
                "memories_freed",
                "packets_mutated",
                "mutations_accepted",
                "processes",
            ):
                setattr(self, name, getattr(self, name) + int(doc.get(name, 0)))
            for table in ("by_target", "errors", "unclean"):
                getattr(self, table).update({k: int(v) for k, v in doc.get(table, {}).items()})
            for kind, n in doc.get("leaks", {}).items():
                self.leaks[kind] = self.leaks.get(kind, 0) + int(n)
            self.details.extend(doc.get("details", [])[: max(0, 20 - len(self.details))])


# -- bounds and the watchdog --------------------------------------------------------------------


class Budget:
    """How many executions are left and until when: every loop asks before it works."""

    def __init__(self, count: int, duration: float) -> None:
        self.deadline = time.monotonic() + duration
        self._left = count
        self._lock = threading.Lock()
        self.stop = threading.Event()

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()

    def running(self) -> bool:
        if self.stop.is_set() or time.monotonic() >= self.deadline:
            self.stop.set()
            return False
        return True

    def take(self) -> bool:
        """One more execution, if the count and the time allow it."""
        with self._lock:
            if self._left <= 0 or not self.running():
                self.stop.set()
                return False
            self._left -= 1
            return True


class Watchdog:
    """Flags a watched call that outlives the timeout as a hang and calls its ``unblock``
    (closing its burst), so a stuck call is counted and released, not waited on."""

    def __init__(self, timeout: float, stats: Stats) -> None:
        self.timeout = timeout
        self._stats = stats
        self._calls: dict[int, list[Any]] = {}  # id -> [start, what, unblock, flagged]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="nnburst-stress-watchdog", daemon=True
        )
        self._thread.start()

    @contextlib.contextmanager
    def watch(self, what: str, unblock: Callable[[], None] | None = None) -> Iterator[list[Any]]:
        """Yields the call's record; ``record[3]`` is True if it was flagged as a hang."""
        record: list[Any] = [time.monotonic(), what, unblock, False]
        with self._lock:
            self._calls[id(record)] = record
        try:
            yield record
        finally:
            with self._lock:
                self._calls.pop(id(record), None)

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            now = time.monotonic()
            with self._lock:
                overdue = [
                    r for r in self._calls.values() if not r[3] and now - r[0] > self.timeout
                ]
                for record in overdue:
                    record[3] = True
            for _, what, unblock, _ in overdue:
                self._stats.add("hangs")
                self._stats.note(f"hang: {what} took more than {self.timeout:g} s")
                if unblock is not None:
                    with contextlib.suppress(Exception):
                        unblock()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)


# -- leaks --------------------------------------------------------------------------------------


_SEGMENT = re.compile(r"^nnburst-(\d+)-[0-9a-f]{16}$")


def _segments(pids: set[int]) -> set[str]:
    try:
        entries = os.listdir("/dev/shm")
    except OSError:
        return set()
    return {e for e in entries if (m := _SEGMENT.match(e)) and int(m.group(1)) in pids}


def _live_children() -> set[int]:
    """Our child processes that are running (not zombies waiting to be reaped)."""
    children: set[int] = set()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            children.add(int(entry))
    return children


class LeakCheck:
    """What the run left behind: shm segments of ours or our children, live children,
    threads, file descriptors (against a snapshot taken before the run)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.segments = _segments({self.pid})
        self.children = _live_children()
        self.threads = set(threading.enumerate())
        self.fds = len(os.listdir("/proc/self/fd"))

    def measure(self, child_pids: set[int], stats: Stats) -> None:
        gc.collect()
        end = time.monotonic() + 2.0  # threads just told to stop may need a moment
        while time.monotonic() < end:
            threads = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]
            if not threads:
                break
            time.sleep(0.05)
        segments = _segments({self.pid} | child_pids) - self.segments
        children = _live_children() - self.children
        fds = len(os.listdir("/proc/self/fd")) - self.fds
        stats.leaks = {
            "shm": len(segments),
            "processes": len(children),
            "threads": len(threads),
            "fds": max(0, fds),
        }
        for what in (
            *sorted(segments),
            *(f"pid {p}" for p in sorted(children)),
            *(t.name for t in threads),
        ):
            stats.note(f"leak: {what}")
