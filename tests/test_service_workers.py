"""A service on several cores: a supervisor and its worker processes.

Each connection lives in one worker; a worker that dies costs only its own
clients, and the supervisor replaces it; stopping the supervisor stops them all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from nnburst.codes import ErrorStatus
from nnburst.errors import NNError
from nnburst.service import remote

from .blocking import children, sleeping_service_process, wait_until
from .peers import REPO
from .test_service import ServiceProcess, add_model, device, run_add


def _serves(path: str) -> None:
    """A fresh connection prepares and runs ADD: some worker accepted it."""
    client = remote.ServiceClient(path)
    try:
        prepared = device(client, "nnburst-sample-all").prepare_model(add_model())
        status, outputs = run_add(prepared)
        assert status == ErrorStatus.NONE
        assert np.all(outputs[0] == 3.0)
    finally:
        client.close()


@pytest.fixture
def pool(tmp_path):
    proc = ServiceProcess(str(tmp_path / "s.sock"), args=("--workers", "2"))
    yield proc
    proc.kill()


def test_the_supervisor_starts_the_workers_and_they_serve(pool):
    assert len(children(pool.pid)) == 2
    for _ in range(4):
        _serves(pool.path)


def test_a_dead_worker_costs_only_its_clients_and_is_replaced(tmp_path):
    pool = ServiceProcess(
        str(tmp_path / "s.sock"),
        env={"NNBURST_SERVICE_FAULT": "execute:sleep=1"},
        args=("--workers", "2"),
    )
    bystanders = [remote.ServiceClient(pool.path) for _ in range(6)]
    holder = remote.ServiceClient(pool.path)
    try:
        for client in bystanders:
            client.devices()  # each connection is now owned by one worker
        prepared = device(holder, "nnburst-sample-all").prepare_model(add_model())
        killed: list[int] = []

        def kill_the_worker_inside_the_execute() -> None:
            wait_until(lambda: sleeping_service_process(pool.pid), "the execute reached a worker")
            killed.append(sleeping_service_process(pool.pid) or 0)
            os.kill(killed[0], signal.SIGKILL)

        killer = threading.Thread(target=kill_the_worker_inside_the_execute, daemon=True)
        killer.start()
        status, _ = run_add(prepared)
        killer.join()
        assert killed[0] != pool.pid  # a worker, not the supervisor
        assert status == ErrorStatus.DEVICE_UNAVAILABLE  # the model died with its worker
        wait_until(lambda: killed[0] not in children(pool.pid), "the supervisor reaped the worker")
        wait_until(lambda: len(children(pool.pid)) == 2, "the supervisor replaced the worker")
        # Holding no model, each bystander answers: through the survivor, or a new connection.
        for client in bystanders:
            client.call(remote.Kind.GET_DEVICES, b"", timeout=10).close_fds()
        _serves(pool.path)
        assert pool.alive()
    finally:
        for client in (*bystanders, holder):
            client.close()
        pool.kill()


def test_sigterm_stops_every_worker_and_unlinks_the_socket(pool):
    workers = children(pool.pid)
    assert pool.stop() == 0
    assert not os.path.exists(pool.path)
    for pid in workers:
        wait_until(
            lambda pid=pid: not os.path.exists(f"/proc/{pid}/stat") or _zombie(pid),
            "a worker exited",
        )


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--workers", "-1", "--workers must be 0 or more"),
        ("--idle-timeout", "0", "--idle-timeout must be a positive"),
        ("--max-tensor-bytes", "0", "--max-tensor-bytes must be at least 1"),
        ("--max-models", "0", "--max-models must be at least 1"),
        ("--max-model-bytes", "-5", "--max-model-bytes must be at least 1"),
        ("--max-frame-bytes", "0", "--max-frame-bytes must be at least 1"),
        ("--max-cached-memories", "0", "--max-cached-memories must be at least 1"),
    ],
)
def test_bad_serve_options_exit_2_with_a_message(option: str, value: str, message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "nnburst.tools.serve", option, value],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert message in result.stderr


def test_no_worker_outlives_a_supervisor_killed_while_it_stops(tmp_path):
    """SIGTERM then SIGKILL to the supervisor: each worker gets a SIGTERM from it and
    one more from its parent's death.  A second signal once deadlocked a worker in its
    own handler (Event.set re-entered) and left it running forever."""
    for attempt in range(3):
        pool = ServiceProcess(str(tmp_path / f"s{attempt}.sock"), args=("--workers", "2"))
        workers = children(pool.pid)
        assert len(workers) == 2
        os.kill(pool.pid, signal.SIGTERM)
        time.sleep(0.02 * attempt)
        os.kill(pool.pid, signal.SIGKILL)
        pool.proc.communicate()
        for pid in workers:
            wait_until(lambda pid=pid: not _running(pid), f"worker {pid} exited", timeout=15)


def _running(pid: int) -> bool:
    try:
        return not _zombie(pid)
    except FileNotFoundError:
        return False


def _stops_when_reentered(stop) -> bool:
    """Call ``stop`` with a second call injected at every line it runs, as a second
    signal's handler would run in the middle of the first: True if it returned."""
    depth = [0]

    def tracer(frame, event, arg):
        if event == "line" and depth[0] == 0:
            depth[0] += 1
            try:
                stop()
            finally:
                depth[0] -= 1
        return tracer

    def run() -> None:
        sys.settrace(tracer)
        try:
            stop()
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    return not thread.is_alive()


def test_stop_is_safe_to_reenter_from_a_second_signal(tmp_path):
    """A worker got SIGTERM from its supervisor and then from its parent's death:
    the second handler ran inside the first one's Event.set, waited for the lock the
    first held, and the worker never exited.  stop() now takes no lock."""
    from nnburst.service.driver import Service, listen
    from nnburst.service.workers import WorkerPool

    service = Service(str(tmp_path / "a.sock"), [])
    try:
        assert _stops_when_reentered(service.stop)
    finally:
        service.close()
    pool = WorkerPool(str(tmp_path / "b.sock"), listen(str(tmp_path / "b.sock")), 0, [])
    try:
        assert _stops_when_reentered(pool.stop)
    finally:
        pool.close()


def test_workers_get_the_supervisors_options(tmp_path):
    """A worker is started with the supervisor's own command line (then its share
    of the connections): a limit given to `nnburst serve` holds in every worker."""
    pool = ServiceProcess(str(tmp_path / "s.sock"), args=("--workers", "2", "--max-models", "1"))
    client = remote.ServiceClient(pool.path)
    try:
        sample_all = device(client, "nnburst-sample-all")
        kept = sample_all.prepare_model(add_model())
        with pytest.raises(NNError, match="1 prepared models, the limit"):
            sample_all.prepare_model(add_model())
        kept.close()
    finally:
        client.close()
        pool.kill()
