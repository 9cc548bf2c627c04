"""``nnburst stress`` end to end, with tiny bounds: the plain run, each fault option, worker
processes through ``python -m nnburst.tools.stress.run``, and the pieces the runs rely on (random
models, invalid packets, the watchdog)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nnburst as nn
from nnburst.cpu.driver import cpu_device
from nnburst.tools.cli import main as cli_main
from nnburst.tools.stress import faults, models, monitor, services
from nnburst.tools.stress import run as stress

from .blocking import wait_until
from .peers import REPO

#: Result codes a call in flight may fail with while its service is killed.
OUTAGE_CODES = {"UNAVAILABLE_DEVICE", "DEAD_OBJECT", "BAD_DATA", "OP_FAILED"}


def run(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "summary.json"
    code = stress.main(["--threads", "2", "--seed", "1", "--json", str(out), *args])
    return code, json.loads(out.read_text())


def assert_clean(summary: dict[str, Any]) -> None:
    assert summary["mismatches"] == 0, summary["details"]
    assert summary["hangs"] == 0, summary["details"]
    assert summary["leak_total"] == 0, summary
    assert summary["unclean"] == {}, summary["details"]
    assert summary["passed"]


def test_plain_run_checks_every_result_on_the_cpu_and_a_service(tmp_path: Path) -> None:
    code, summary = run(tmp_path, "--duration", "1.5")
    assert code == 0
    assert_clean(summary)
    assert summary["errors"] == {}
    assert summary["by_target"]["cpu"] > 0 and summary["by_target"]["service0"] > 0
    assert summary["executions"] == sum(summary["by_target"].values())


def test_count_bounds_the_run(tmp_path: Path) -> None:
    code, summary = run(tmp_path, "--services", "0", "--count", "15", "--duration", "120")
    assert code == 0
    assert 0 < summary["executions"] <= 15
    assert summary["seconds"] < 100  # the count ended it, not the 120 s duration


def test_killed_services_fail_calls_cleanly_and_recover(tmp_path: Path) -> None:
    code, summary = run(tmp_path, "--duration", "8", "--kill-service")
    assert code == 0
    assert_clean(summary)
    assert summary["restarts"] >= 1, summary  # needs a service start under ~3.5 s
    assert summary["unrecovered"] == 0
    assert set(summary["errors"]) <= OUTAGE_CODES, summary["errors"]


def test_mutated_packets_are_all_rejected(tmp_path: Path) -> None:
    code, summary = run(tmp_path, "--duration", "1.5", "--mutate-packets")
    assert code == 0
    assert_clean(summary)
    assert summary["packets_mutated"] > 0 and summary["mutations_accepted"] == 0


def test_memories_freed_mid_burst(tmp_path: Path) -> None:
    code, summary = run(tmp_path, "--duration", "1.5", "--free-memories")
    assert code == 0
    assert_clean(summary)
    assert summary["memories_freed"] > 0 and summary["errors"] == {}


def test_shrunk_queues_fall_back_to_synchronous_executions(tmp_path: Path) -> None:
    code, summary = run(tmp_path, "--duration", "1.5", "--shrink-queues")
    assert code == 0
    assert_clean(summary)
    assert summary["fallbacks"] > 0 and summary["errors"] == {}


def test_worker_processes_through_python_m(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nnburst.tools.stress.run",
            "--duration",
            "1.5",
            "--threads",
            "1",
            "--processes",
            "1",
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "result       PASS" in proc.stdout
    summary = json.loads(out.read_text())
    assert summary["processes"] == 2
    assert_clean(summary)


def test_an_interrupted_run_has_not_passed(tmp_path: Path) -> None:
    """Ctrl-C mid-run: the summary says so and the exit code is 130, not PASS and 0."""
    out = tmp_path / "summary.json"
    # As from a terminal: a test run started in the background (`cmd &` in a
    # script) ignores SIGINT, and its children would inherit that.
    proc = subprocess.Popen(
        [sys.executable, "-m", "nnburst", "stress", "--services", "0", "--threads", "1",
         "--duration", "60", "--json", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        assert "running" in proc.stderr.readline()  # its workers started
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stdout + stderr
    assert "result       INTERRUPTED" in stdout and "PASS" not in stdout
    summary = json.loads(out.read_text())
    assert summary["interrupted"]


def test_bad_options_are_refused() -> None:
    with pytest.raises(SystemExit):
        stress.main(["--kill-service", "--socket", "/nonexistent.sock"])
    with pytest.raises(SystemExit):
        stress.main(["--duration", "0"])


def test_random_models_are_valid_and_computable() -> None:
    rng = np.random.default_rng(3)
    device = nn.Device(cpu_device())
    for _ in range(25):
        spec = models.random_model(rng, max_size=5, max_operations=4)
        with nn.Compilation(spec.model, devices=[device]) as compilation:
            compilation.finish()
            inputs = [rng.uniform(-1, 1, s).astype(np.float32) for s in spec.input_shapes]
            outputs = models.reference(spec, compilation, inputs)
        assert [o.shape for o in outputs] == spec.output_shapes


def test_mutations_never_repeat_the_valid_packet() -> None:
    rng = np.random.default_rng(0)
    valid = np.arange(5 * 6, dtype="<u4").reshape(5, 6)
    valid[:, 0] = [0, 1, 3, 5, 6]
    valid[0, 1] = 5  # the declared packet size
    variants = list(faults.mutations(rng, valid, 200))
    assert len(variants) == 200
    assert not any(v.shape == valid.shape and np.array_equal(v, valid) for v in variants)


def test_the_watchdog_counts_a_hang_and_unblocks_it() -> None:
    stats = monitor.Stats()
    watchdog = monitor.Watchdog(0.2, stats)
    unblocked: list[bool] = []
    try:
        with watchdog.watch("hang", lambda: unblocked.append(True)) as record:
            wait_until(lambda: unblocked, "the watchdog unblocked the hang")
        assert record[3] and unblocked == [True] and stats.hangs == 1
        with watchdog.watch("quick") as record:
            pass
        assert not record[3] and stats.hangs == 1
    finally:
        watchdog.close()


def test_a_target_closes_a_broken_client_as_soon_as_it_reconnects(tmp_path: Path) -> None:
    """Issue 15: a run with --kill-service kept every dead connection (and its fds)
    until the end; a dead connection is now closed as soon as a new one replaces it
    (a client holding nothing reconnects by itself)."""
    from .test_service import ServiceProcess

    path = str(tmp_path / "driver.sock")
    first = ServiceProcess(path)
    target = services.Target("service0", path)
    try:
        assert target.device() is not None
        old = target._client
        assert old is not None
        dead = old.connection
        first.kill()
        wait_until(lambda: dead.broken, "the client notices the service died")
        second = ServiceProcess(path)
        try:
            wait_until(lambda: target.device() is not None, "the target reconnects")
            assert target._client is not None
            assert target._client.connection is not dead
            assert dead._closed  # closed at once, not kept to the end
        finally:
            target.close()
            second.kill()
    finally:
        first.kill()


def test_stress_fails_when_its_service_is_not_there(tmp_path, capsys):
    code = cli_main(["stress", "--socket", str(tmp_path / "missing.sock"), "--duration", "1"])
    _, err = capsys.readouterr()
    assert code == 2
    assert "no driver service answers there" in err
