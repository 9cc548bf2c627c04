"""The worker pool's decisions (nnburst/service/workers.py) with fake workers and a fake clock.

tests/test_service_workers.py runs real worker processes; here the pool's
own choices are checked in milliseconds: when a dead worker is replaced,
how long it waits first, what a failed start does, and what closing stops.
Time is counted in whole milliseconds so that boundaries compare exactly.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest

from nnburst.service import workers
from nnburst.service.launch import ServiceStartError


class Clock:
    """``time`` for the pool: sleeping moves it on, then runs the scenario's next step."""

    def __init__(self) -> None:
        self.ms = 0
        self.sleeps: list[float] = []
        self.on_sleep = lambda: None

    def monotonic(self) -> float:
        return self.ms / 1000

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.ms += round(seconds * 1000)
        self.on_sleep()


class FakeWorker:
    def __init__(self, number: int) -> None:
        self.pid = 1000 + number
        self.returncode: int | None = None
        self.terminated = False

    def poll(self) -> int | None:
        return self.returncode

    def terminate(self) -> None:
        self.terminated = True
        self.returncode = -15


class Scenario:
    """A pool of fake workers on a fake clock.  ``starts`` records (ms, worker number);
    ``fail_starts`` makes that many of the next starts raise ServiceStartError."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, count: int = 2) -> None:
        self.clock = Clock()
        self.starts: list[tuple[int, int]] = []
        self.workers: list[FakeWorker] = []
        self.fail_starts = 0
        self.failed: list[int] = []
        self.stopped: list[tuple[FakeWorker, float]] = []
        monkeypatch.setattr(
            workers, "time", SimpleNamespace(monotonic=self.clock.monotonic, sleep=self.clock.sleep)
        )
        monkeypatch.setattr(workers.WorkerPool, "_start", lambda pool: self._start())
        monkeypatch.setattr(
            workers, "stop_process", lambda w, grace=5.0: self.stopped.append((w, grace))
        )
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.pool = workers.WorkerPool("/tmp/unused.sock", self.listener, count, ["--x"])

    def _start(self) -> FakeWorker:
        if self.fail_starts:
            self.fail_starts -= 1
            self.failed.append(self.clock.ms)
            raise ServiceStartError("no")
        worker = FakeWorker(len(self.workers))
        self.workers.append(worker)
        self.starts.append((self.clock.ms, len(self.workers) - 1))
        return worker

    def run(self, script: dict[int, object], until_ms: int) -> None:
        """Serve until ``until_ms``; at each ms of ``script`` (reached by a sleep) kill
        that worker number, or call the callable."""

        def step() -> None:
            for at in [t for t in script if t <= self.clock.ms]:
                action = script.pop(at)
                if callable(action):
                    action()
                else:
                    self.workers[action].returncode = 1  # type: ignore[index]
            if self.clock.ms >= until_ms:
                self.pool.stop()

        self.clock.on_sleep = step
        self.pool.serve_forever()


def test_the_pool_starts_count_workers_and_keeps_them_while_they_live(monkeypatch):
    s = Scenario(monkeypatch, count=3)
    assert s.pool.path == "/tmp/unused.sock"
    assert s.pool._argv == [
        *(sys.executable, "-P", "-m", "nnburst.tools.serve"),
        *("--socket", "/tmp/unused.sock", "--listen-fd", str(s.listener.fileno()), "--x"),
    ]
    assert s.starts == [(0, 0), (0, 1), (0, 2)]
    s.run({}, until_ms=2000)
    assert s.starts == [(0, 0), (0, 1), (0, 2)]
    assert s.clock.sleeps == [0.2] * 10  # it looks every 200 ms


def test_a_worker_that_dies_young_is_replaced_after_the_back_off(monkeypatch):
    s = Scenario(monkeypatch)
    s.run({400: 1}, until_ms=3000)  # dies 400 ms after its start
    assert s.starts == [(0, 0), (0, 1), (1400, 2)]  # seen at 400 ms, 1 s later replaced
    assert s.clock.sleeps.count(workers.RESTART_BACKOFF_S) == 1
    assert workers.RESTART_BACKOFF_S == 1.0
    assert [w.returncode for w in s.pool._workers] == [-15, -15]  # closed at the end
    assert s.pool._workers[1] is s.workers[2]


def test_a_worker_that_dies_old_is_replaced_at_once(monkeypatch):
    s = Scenario(monkeypatch)
    s.run({5000: 0}, until_ms=6000)
    assert s.starts[2:] == [(5000, 2)]
    assert s.pool._workers[0] is s.workers[2]
    assert 1.0 not in s.clock.sleeps


def test_the_back_off_ends_exactly_one_second_after_the_start(monkeypatch):
    young = Scenario(monkeypatch)
    young.run({800: 0}, until_ms=3000)  # seen 800 ms after its start: waits
    assert young.starts[2:] == [(1800, 2)]
    old = Scenario(monkeypatch)
    old.run({1000: 0}, until_ms=3000)  # seen exactly 1 s after its start: does not
    assert old.starts[2:] == [(1000, 2)]


def test_the_back_off_counts_from_the_replacement_s_start(monkeypatch):
    """The replacement started at 5 s dies 400 ms later: it waits again."""
    s = Scenario(monkeypatch)
    s.run({5000: 0, 5400: 2}, until_ms=8000)
    assert s.starts[2:] == [(5000, 2), (6400, 3)]


def test_a_worker_that_cannot_start_is_retried_once_per_back_off(monkeypatch):
    s = Scenario(monkeypatch)
    s.fail_starts = 10**6

    s.run({2000: 0}, until_ms=8000)
    # Seen at 2 s (old: no wait), its start fails at 2 s; the dead worker is seen again
    # 200 ms later, young by the failed start's time: 1 s back-off, and so on.
    assert s.clock.sleeps[:13] == [0.2] * 10 + [0.2, 1.0, 0.2]
    assert s.pool._workers[0] is s.workers[0]  # still the dead one
    assert s.failed == [2000, 3200, 4400, 5600, 6800]  # the stop at 8 s ends the back-off


def test_a_worker_that_starts_again_after_failing_serves_on(monkeypatch, caplog):
    s = Scenario(monkeypatch)
    s.fail_starts = 1
    with caplog.at_level(logging.WARNING, logger="nnburst.service"):
        s.run({2000: 1}, until_ms=5000)
    assert caplog.messages[:3] == [
        "worker 1001 exited with code 1: replacing it",
        "a worker did not start: no",
        "worker 1001 exited with code 1: replacing it",
    ]
    assert s.starts[2:] == [(3200, 2)]  # failed at 2 s, seen at 2.2 s, started at 3.2 s
    assert s.pool._workers == [s.workers[0], s.workers[2]]


def test_stop_during_the_back_off_replaces_nothing(monkeypatch):
    s = Scenario(monkeypatch)
    s.run({400: 1, 1000: s.pool.stop}, until_ms=10_000)
    assert s.starts == [(0, 0), (0, 1)]
    assert s.clock.ms == 1400  # the back-off ran out, then it saw the stop
    assert s.workers[0].terminated and not s.workers[1].terminated  # dead already


def test_close_stops_every_worker_and_closes_the_listener(monkeypatch):
    s = Scenario(monkeypatch, count=3)
    s.workers[1].returncode = 0  # one is gone already
    s.pool.close()
    assert [w.terminated for w in s.workers] == [True, False, True]
    assert s.stopped == [(w, workers.WORKER_STOP_GRACE_S) for w in s.workers]
    assert workers.WORKER_STOP_GRACE_S == 3.0
    assert s.listener.fileno() == -1
    s.pool.serve_forever()  # closed: returns at once
    assert s.clock.sleeps == []


def test_a_pool_whose_worker_fails_to_start_stops_the_others(monkeypatch):
    started: list[FakeWorker] = []

    def start(pool: workers.WorkerPool) -> FakeWorker:
        if len(started) == 2:
            raise ServiceStartError("third")
        started.append(FakeWorker(len(started)))
        return started[-1]

    stopped: list[FakeWorker] = []
    monkeypatch.setattr(workers.WorkerPool, "_start", start)
    monkeypatch.setattr(workers, "stop_process", lambda w, grace=5.0: stopped.append(w))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with pytest.raises(ServiceStartError, match="third"):
        workers.WorkerPool("/tmp/unused.sock", listener, 4, [])
    assert [w.terminated for w in started] == [True, True]
    assert stopped == started
    assert listener.fileno() == -1


class FakeProcess:
    def __init__(self) -> None:
        self.stdout = SimpleNamespace(closed=False)
        self.stdout.close = lambda: setattr(self.stdout, "closed", True)


def _start_with(monkeypatch, listening, fault: str | None):  # type: ignore[no-untyped-def]
    """WorkerPool._start against a fake spawn; returns (result or exception, calls)."""
    calls: dict[str, object] = {}
    process = FakeProcess()

    def spawn(argv, **kwargs):  # type: ignore[no-untyped-def]
        calls["spawn"] = (argv, kwargs)
        return process

    def wait(worker, timeout):  # type: ignore[no-untyped-def]
        calls["wait"] = (worker, timeout)
        listening()

    monkeypatch.setattr(workers, "spawn", spawn)
    monkeypatch.setattr(workers, "wait_listening", wait)
    monkeypatch.setattr(workers, "stop_process", lambda w, grace=5.0: calls.setdefault("stop", w))
    if fault is None:
        monkeypatch.delenv("NNBURST_SERVICE_FAULT", raising=False)
    else:
        monkeypatch.setenv("NNBURST_SERVICE_FAULT", fault)
    pool = object.__new__(workers.WorkerPool)
    pool._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    pool._argv = ["python", "-m", "nnburst.tools.serve"]
    try:
        try:
            return pool._start(), calls, pool._listener.fileno(), process
        except ServiceStartError as exc:
            return exc, calls, pool._listener.fileno(), process
    finally:
        pool._listener.close()


def test_a_worker_inherits_the_listener_and_its_stdout_is_closed_once_it_listens(monkeypatch):
    worker, calls, fd, process = _start_with(monkeypatch, lambda: None, None)
    assert worker is process
    argv, kwargs = calls["spawn"]  # type: ignore[misc]
    assert argv == ["python", "-m", "nnburst.tools.serve"]
    assert kwargs == {"stdout": subprocess.PIPE, "stderr": None, "pass_fds": [fd], "env": None}
    assert calls["wait"] == (process, workers.WORKER_START_TIMEOUT_S)
    assert workers.WORKER_START_TIMEOUT_S == 30.0
    assert process.stdout.closed
    assert "stop" not in calls


def test_a_worker_gets_the_injected_fault(monkeypatch):
    _, calls, _, _ = _start_with(monkeypatch, lambda: None, "execute:sleep=1")
    assert calls["spawn"][1]["env"] == {"NNBURST_SERVICE_FAULT": "execute:sleep=1"}  # type: ignore[index]


def test_a_worker_that_does_not_listen_is_stopped(monkeypatch):
    def never() -> None:
        raise ServiceStartError("did not listen")

    error, calls, _, process = _start_with(monkeypatch, never, None)
    assert isinstance(error, ServiceStartError)
    assert calls["stop"] is process
    assert not process.stdout.closed


def test_the_default_worker_count_is_the_usable_cores(monkeypatch):
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: {0, 2, 5})
    assert workers.default_worker_count() == 3
