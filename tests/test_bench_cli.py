"""``nnburst bench`` end to end: the runtime paths against the Pipe baseline, its files, Ctrl-C.

Runs are tiny (a few hundredths of a second per mode, a small conv): these
tests check that every mode runs and every output is produced, not speed.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nnburst.tools.benchmarks import (
    burst_latency,
    load,
    peers,
    report,
    runtime_bench,
    runtime_paths,
)
from nnburst.tools.benchmarks.service_process import ServiceError
from nnburst.tools.benchmarks.stats import LatencyStats
from nnburst.tools.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--duration", "0.02", "--conv-size", "8"]
ALL_MODES = [
    "multiprocessing.Pipe",
    "sync in-process",
    "async in-process",
    "burst in-process",  # on the caller's thread: no polling window to vary
    "sync cross-process",
    "async cross-process",
    "burst cross-process poll 0us",
    "burst cross-process poll 50us",
    "burst cross-process poll 200us",
]
PEERS_MISSING = peers.missing()
needs_peers = pytest.mark.skipif(
    PEERS_MISSING is not None, reason=f"onnxruntime/onnx cannot be imported: {PEERS_MISSING}"
)
#: what the command runs by default: nnburst's modes, and the peers when they import
CLI_MODES = (
    ALL_MODES
    if PEERS_MISSING
    else [*ALL_MODES[:4], "onnxruntime in-process", *ALL_MODES[4:], "onnxruntime via Pipe"]
)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (every thread's children), but for
    multiprocessing's resource tracker: the standard library starts it with the
    first spawned process (an earlier test's Pipe baseline) and keeps it for
    the interpreter's life, so it is no bench's leftover."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return [child for child in found if not is_resource_tracker(child)]


def is_resource_tracker(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"multiprocessing.resource_tracker" in command


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def table_rows(out: str, title: str) -> list[str]:
    """The mode names of the table under ``title``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[start + 3 :]:
        if (
            not line.strip()
            or not line[0].isalpha()
            or line.startswith(("interrupted", "Reading:", "onnxruntime peers:"))
            or " modes in " in line
        ):
            break
        rows.append(line.split("  ")[0].strip())
    return rows


def test_the_default_plan_covers_every_path_placement_and_polling_window():
    modes = runtime_bench.plan(runtime_bench.Settings())
    names = {(m.model, m.name) for m in modes}
    assert names == {(model, name) for model in ("add-mul", "conv") for name in ALL_MODES}
    assert [m.path for m in modes[:2]] == ["pipe", "pipe"]  # before any thread or service exists
    default = runtime_bench.Settings()
    assert default.duration and default.iterations is None and len(modes) * default.duration < 20


def test_bench_runs_every_mode_and_writes_json_plot_and_html(capsys, tmp_path):
    files = {name: tmp_path / name for name in ("bench.json", "bench.png", "bench.html")}
    code, out, err = run(
        capsys,
        "bench",
        *TINY,
        "--json",
        str(files["bench.json"]),
        "--plot",
        str(files["bench.png"]),
        "--html",
        str(files["bench.html"]),
    )
    assert code == 0, err
    # The results lead: a two-line intro, then the tables; the key comes after them.
    assert out.startswith("nnburst bench: one execution through each path")
    assert out.splitlines()[3] == "add+mul 3x4 (96 bytes in, 48 bytes out)"
    key = out.index("How to read the tables:")
    assert key > out.index("conv 8x8x16") and key > out.index(" modes in ")
    assert "Baseline: a multiprocessing.Pipe round trip of the same bytes" in out[key:]
    assert [line for line in out.splitlines() if len(line) > 100 and "written to" not in line] == []
    assert table_rows(out, "add+mul 3x4 (96 bytes in, 48 bytes out)") == CLI_MODES
    assert table_rows(out, "conv 8x8x16 (4096 bytes in, 2048 bytes out)") == CLI_MODES
    assert f"{2 * len(CLI_MODES)} modes in" in out and "Traceback" not in err

    document = json.loads(files["bench.json"].read_text())
    assert report.validate(document) == []
    assert document["benchmark"] == "runtime" and document["interrupted"] is False
    assert document["parameters"] == {
        "models": ["add-mul", "conv"],
        "conv_size": 8,
        "iterations": None,
        "duration": 0.02,
        "paths": ["sync", "async", "burst", "onnxruntime"],
        "placements": ["in-process", "cross-process"],
        "pin": False,
        "cpus": None,
        "busy": False,
    }
    assert document["load"] is None and document["peers"]["missing"] == PEERS_MISSING
    rows = document["latency"]
    assert len(rows) == 2 * len(CLI_MODES) and all(row["count"] >= 1 for row in rows)
    for row in rows:
        if row["path"] == "pipe":
            assert row["vs_baseline"] == 1.0
        else:
            assert row["vs_baseline"] > 0
        remote_burst = row["path"] == "burst" and row["placement"] == "cross-process"
        assert (row["polling_us"] is not None) == remote_burst

    page = files["bench.html"].read_text()
    assert page.startswith("<!DOCTYPE html>") and "conv 8x8x16" in page
    assert "burst cross-process poll 50us" in page and "usable_cpus" in page
    assert 'src="http' not in page  # self-contained
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pytest.skip("matplotlib is not installed: no PNG")
    assert files["bench.png"].read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert 'src="data:image/png;base64,iVBOR' in page


def test_selection_options_and_count_bound_run(capsys, tmp_path):
    path = tmp_path / "b.json"
    code, out, err = run(
        capsys,
        "bench",
        "--model",
        "add-mul",
        "--paths",
        "burst,sync",
        "--cross-process",
        "--iterations",
        "7",
        "--pin",
        "--json",
        str(path),
    )
    assert code == 0, err
    document = json.loads(path.read_text())
    assert report.validate(document) == []
    names = [row["name"] for row in document["latency"]]
    assert names == [
        "multiprocessing.Pipe",
        "sync cross-process",
        "burst cross-process poll 0us",
        "burst cross-process poll 50us",
        "burst cross-process poll 200us",
    ]
    assert {row["count"] for row in document["latency"]} == {7}
    assert document["parameters"]["duration"] is None and document["parameters"]["pin"] is True
    if len(os.sched_getaffinity(0)) >= 2:
        assert "pinned to CPU" in out and document["parameters"]["cpus"] is not None


def test_python_dash_m_bench():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nnburst",
            "bench",
            "--model",
            "add-mul",
            "--in-process",
            "--paths",
            "sync",
            "--duration",
            "0.05",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert table_rows(done.stdout, "add+mul 3x4") == ["multiprocessing.Pipe", "sync in-process"]


def test_ctrl_c_mid_run_keeps_the_finished_rows_and_leaves_nothing(capsys, tmp_path, monkeypatch):
    real = runtime_bench.measure
    calls = []

    # The in-process modes take ROUNDS turns each, then the Pipe baseline its first:
    # the next one is sync cross-process's, with the service up and bursts and
    # workers having run.
    interrupt_at = 3 * runtime_bench.ROUNDS + 2

    def interrupted_in_sync_cross_process(*args, **kwargs):
        calls.append(1)
        if len(calls) == interrupt_at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(runtime_bench, "measure", interrupted_in_sync_cross_process)
    services = os.environ.get("NNBURST_SERVICES")
    path = tmp_path / "partial.json"
    code, out, err = run(
        capsys,
        "bench",
        "--model",
        "add-mul",
        "--paths",
        "sync,async,burst",
        *TINY,
        "--json",
        str(path),
        "--html",
        str(tmp_path / "partial.html"),
    )
    assert code == 130, err
    assert table_rows(out, "add+mul 3x4") == ALL_MODES[:4]
    assert "interrupted: 4 modes" in out
    document = json.loads(path.read_text())
    assert report.validate(document) == [] and document["interrupted"] is True
    assert len(document["latency"]) == 4
    assert "Interrupted" in (tmp_path / "partial.html").read_text()
    assert children(os.getpid()) == [] and multiprocessing.active_children() == []
    assert os.environ.get("NNBURST_SERVICES") == services
    # threads and /dev/shm segments: checked by the conftest fixture


def threads(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def test_sigint_to_the_command_stops_it_cleanly(tmp_path):
    """Ctrl-C once the cross-process modes are open, found from outside without
    a guess at this machine's speed: the in-process modes (a runtime worker
    thread among them) have run, then the Pipe baseline's peer and the driver
    service are the run's two child processes.  Each mode measures for 3 s
    in turns of 0.5 s, so the signal lands inside a measurement."""
    path = tmp_path / "partial.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nnburst",
            "bench",
            "--model",
            "add-mul",
            "--paths",  # no onnxruntime peer: importing it writes its own file to $TMPDIR
            "sync,async,burst",
            "--duration",
            "3",
            "--json",
            str(path),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    try:
        deadline = time.monotonic() + 120  # guards against a hang only

        def wait_for(condition, what: str) -> None:
            while not condition():
                assert process.poll() is None, f"the run ended early: {process.communicate()}"
                assert time.monotonic() < deadline, f"{what} never happened"
                time.sleep(0.02)

        wait_for(lambda: len(children(process.pid)) >= 2, "the Pipe peer's and the service's start")
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err
    assert "interrupted:" in out and "Traceback" not in err
    document = json.loads(path.read_text())
    assert report.validate(document) == [] and document["interrupted"] is True
    assert 3 <= len(document["latency"]) < 9  # the in-process rows, and maybe cross-process ones
    deadline = time.monotonic() + 30  # only a guard against a hang: the children exit on their own
    while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_mentioning(str(tmp_path)) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["partial.json"]  # no service directory


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--paths", "sync,fast"], "subset of sync,async,burst"),
        (["--duration", "0"], "positive number of seconds"),
        (["--duration", "soon"], "expected seconds"),
        (["--model", "resnet"], "invalid choice"),
        (["--conv-size", "1"], "from 2 to 512"),
        (["--in-process", "--cross-process"], "not allowed with"),
        (["fmq", "--plot", "x.png"], "--plot applies to the runtime benchmark"),
        (["hal", "--duration", "1"], "--duration applies to the runtime benchmark"),
        (["--stream-items", "10"], "--stream-items applies to nnburst bench fmq"),
        (["--clients", "2"], "--clients applies to nnburst bench clients"),
        (["clients", "--clients", "2,0"], "comma-separated positive client counts"),
        (["clients", "--iterations", "5"], "--iterations does not apply to nnburst bench clients"),
    ],
)
def test_bad_arguments_exit_2_with_usage(capsys, argv, message):
    code, out, err = run(capsys, "bench", *argv)
    assert code == 2 and out == ""
    assert "usage: nnburst bench" in err and message in err and "Traceback" not in err


def test_unwritable_outputs_fail_before_running(capsys, tmp_path):
    for option in ("--json", "--plot", "--html"):
        code, out, err = run(capsys, "bench", option, str(tmp_path / "no" / "dir" / "f"))
        assert code == 1 and out == ""
        assert err.startswith(f"nnburst: error: {option}") and "no directory" in err


def test_hal_and_burst_name_the_hal_level_benchmark(capsys, tmp_path, monkeypatch):
    rows = [
        LatencyStats.from_ns(name, [1000, 2000])
        for name in ("sync in-process", "multiprocessing.Pipe")
    ]
    monkeypatch.setattr(burst_latency, "run", lambda iterations: rows)
    for what in ("hal", "burst"):
        path = tmp_path / f"{what}.json"
        code, out, err = run(capsys, "bench", what, "--iterations", "2", "--json", str(path))
        assert code == 0, err
        assert out.startswith("ADD of two float32 [3, 4] tensors")
        document = json.loads(path.read_text())
        assert report.validate(document) == [] and document["benchmark"] == "burst"


def test_clients_compares_one_service_process_with_one_worker_per_core(capsys, monkeypatch):
    monkeypatch.setattr("nnburst.tools.benchmarks.clients.default_worker_count", lambda: 2)
    code, out, err = run(capsys, "bench", "clients", "--clients", "1,2", "--duration", "0.2")
    assert code == 0, err
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("clients "))
    assert lines[header].split("  ")[-3:] == ["runs/s (all clients)", "p50 µs", "p99 µs"]
    rows = [line.split() for line in lines[header + 2 : header + 6]]
    assert [(int(r[0]), int(r[1])) for r in rows] == [(1, 1), (2, 1), (1, 2), (2, 2)]
    assert all(float(r[2]) > 0 for r in rows)
    assert [line for line in lines if len(line) > 100] == []


def test_validate_checks_runtime_documents():
    result = runtime_bench.Result(
        runtime_bench.Settings(), [], interrupted=True, seconds=0.5, cpus=None
    )
    good = report.build_runtime(result)
    assert report.validate(good) == []
    bad = {
        **good,
        "interrupted": "yes",
        "parameters": {**good["parameters"], "pin": 1},
        "latency": [{"name": "x", "count": 1}],
    }
    problems = report.validate(bad)
    assert any(p.startswith("interrupted:") for p in problems)
    assert "parameters.pin: expected bool, got int" in problems
    assert "latency[0]: missing 'vs_baseline'" in problems
    del bad["seconds"]
    assert any(p.startswith("seconds:") for p in report.validate(bad))
    assert "peers.requested: expected bool, got str" in report.validate(
        {**good, "peers": {**good["peers"], "requested": "yes"}}
    )
    assert "load.pids: expected list, got int" in report.validate(
        {**good, "load": {"processes": 2, "pids": 7}}
    )
    assert "missing 'load'" in report.validate({k: v for k, v in good.items() if k != "load"})


# -- the onnxruntime peers -----------------------------------------------------------------------


@needs_peers
def test_peer_rows_are_checked_against_nnburst_then_timed(capsys, tmp_path, monkeypatch):
    checked = []
    real = peers.check

    def spy(name, got, expected, exact):
        checked.append((name, got.shape, exact))
        return real(name, got, expected, exact)

    monkeypatch.setattr(peers, "check", spy)
    path = tmp_path / "peers.json"
    code, out, err = run(capsys, "bench", "--paths", "sync,onnxruntime", *TINY, "--json", str(path))
    assert code == 0, err
    assert "intra_op_num_threads=1, inter_op_num_threads=1" in out
    assert "transposes to NCHW and" in out and "x ort" in out
    expected = [
        "multiprocessing.Pipe",
        "sync in-process",
        "onnxruntime in-process",
        "sync cross-process",
        "onnxruntime via Pipe",
    ]
    assert table_rows(out, "add+mul 3x4") == expected == table_rows(out, "conv 8x8x16")
    assert out.count("Against onnxruntime (p50): sync in-process is") == 2
    assert checked == [
        ("onnxruntime in-process", (3, 4), True),
        ("onnxruntime in-process", (1, 4, 4, 32), False),
        ("onnxruntime via Pipe", (3, 4), True),
        ("onnxruntime via Pipe", (1, 4, 4, 32), False),
    ]
    document = json.loads(path.read_text())
    assert report.validate(document) == []
    assert document["peers"]["onnxruntime"] and document["peers"]["missing"] is None
    ort = [row for row in document["latency"] if row["path"] == "onnxruntime"]
    assert [row["name"] for row in ort] == [expected[2], expected[2], expected[4], expected[4]]
    assert all(row["count"] >= 1 and row["vs_onnxruntime"] == 1.0 for row in ort)
    assert all(row["vs_onnxruntime"] > 0 for row in document["latency"])
    assert children(os.getpid()) == [] and not list(tmp_path.glob("nnburst-peer-*"))


@needs_peers
def test_a_peer_whose_output_differs_is_a_failure_row(capsys, monkeypatch):
    real = runtime_bench.reference_output
    monkeypatch.setattr(runtime_bench, "reference_output", lambda work: real(work) + 1)
    argv = ["bench", "--model", "add-mul", "--paths", "sync,onnxruntime", *TINY]
    code, out, err = run(capsys, *argv)
    assert code == 1, err
    assert table_rows(out, "add+mul 3x4") == [
        "multiprocessing.Pipe",
        "sync in-process",
        "onnxruntime in-process",
        "sync cross-process",
        "onnxruntime via Pipe",
    ]
    failed = {
        line.split("  ")[0]: line.split("failed: ")[1]
        for line in out.splitlines()
        if line.startswith("onnxruntime")
    }
    why = {
        name: f"{name}: output differs from nnburst's (max |diff| 1; exactly)"
        for name in ("onnxruntime in-process", "onnxruntime via Pipe")
    }
    # The table's line is cut to 100 columns; the summary under it has the whole reason.
    assert failed.keys() == why.keys()
    assert all(why[name].startswith(failed[name].removesuffix("...")) for name in why)
    assert all(f"add-mul {name}: {why[name]}" in " ".join(out.split()) for name in why)
    assert "2 modes failed" in out and children(os.getpid()) == []


def test_without_onnxruntime_the_table_says_so_in_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails, find_spec finds none
    path = tmp_path / "no-peers.json"
    code, out, err = run(
        capsys, "bench", "--model", "add-mul", "--in-process", *TINY, "--json", str(path)
    )
    assert code == 0, err
    assert table_rows(out, "add+mul 3x4") == ALL_MODES[:4]
    lines = out.splitlines()
    assert (
        lines.count(
            "onnxruntime peers: not installed (pip install onnxruntime onnx, or '.[peers]' in nnburst's checkout)"
        )
        == 1
    )
    assert "x ort" not in out and "Peers:" not in out
    document = json.loads(path.read_text())
    assert report.validate(document) == []
    assert document["peers"]["missing"].endswith("no module onnxruntime")
    assert document["peers"]["onnxruntime"] is None


# -- --busy --------------------------------------------------------------------------------------


def load_processes_alive(pids: list[int]) -> list[int]:
    """The pids still running the load's spin loop (a reused pid runs something else)."""
    alive = []
    for pid in pids:
        try:
            if load.SPIN.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                alive.append(pid)
        except OSError:
            pass
    return alive


def test_busy_loads_the_cross_process_rows_and_stops_its_processes(capsys, tmp_path):
    path = tmp_path / "busy.json"
    argv = ["bench", "--busy", "--model", "add-mul", "--paths", "sync,burst", *TINY]
    code, out, err = run(capsys, *argv, "--json", str(path))
    assert code == 0, err
    assert "Busy machine: " in out and "CPU-bound processes (one per CPU" in out
    assert "Busy: the slowest service burst" in out and "goal at most 1.2x" in out
    document = json.loads(path.read_text())
    assert report.validate(document) == [] and document["parameters"]["busy"] is True
    pids = document["load"]["pids"]
    count = document["load"]["processes"]
    # not loaded for the in-process rows, loaded for the Pipe's and the service's
    assert count == os.cpu_count() and len(pids) == count
    assert f"busy: {count} CPU-bound processes at a time, {count} started in all" in out
    loaded = {row["name"]: row["loaded"] for row in document["latency"]}
    assert loaded["multiprocessing.Pipe"] and loaded["sync cross-process"]
    assert not loaded["sync in-process"]
    assert load_processes_alive(pids) == [] and children(os.getpid()) == []


def test_busy_stops_its_load_on_ctrl_c(capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # in the first mode, the Pipe baseline: the load is running

    monkeypatch.setattr(runtime_bench, "measure", interrupted)
    code, out, err = run(capsys, "bench", "--busy", "--model", "add-mul", "--cross-process", *TINY)
    assert code == 130, err
    assert "interrupted: 0 modes" in out
    started = [int(pid) for pid in out.split("(pids ")[1].split(")")[0].split(", ")]
    assert len(started) == os.cpu_count()
    assert load_processes_alive(started) == [] and children(os.getpid()) == []


# -- --model FILE ----------------------------------------------------------------------------------


@pytest.fixture
def relu_tflite(tmp_path) -> Path:
    """A one-RELU .tflite file: the smallest model file LiteRT and nnburst both run."""
    pytest.importorskip("ai_edge_litert", reason="LiteRT (pip install '.[litert]') is the peer")
    import numpy as np

    from .tflite_builder import Tensor, single_op

    path = tmp_path / "relu.tflite"
    path.write_bytes(single_op("RELU", [Tensor((2, 3), np.float32)], [Tensor((2, 3), np.float32)]))
    return path


MODEL_FILE_ROWS = [
    "LiteRT in-process",
    "sync in-process",
    "burst in-process",
    "sync cross-process",
    "burst cross-process",
]


def test_a_model_file_writes_one_json_document_plot_and_page(capsys, tmp_path, relu_tflite):
    files = {name: tmp_path / name for name in ("m.json", "m.png", "m.html")}
    argv = ["bench", "--model", str(relu_tflite), "--iterations", "10"]
    for option, name in (("--json", "m.json"), ("--plot", "m.png"), ("--html", "m.html")):
        argv += [option, str(files[name])]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert out.startswith("relu.tflite: one execution per call; each row ran 10 executions")
    lines = out.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("---"))
    assert [line.split("  ")[0] for line in lines[rule + 1 : rule + 6]] == MODEL_FILE_ROWS
    assert lines[rule + 6].startswith("Reading: ")
    assert [line for line in out.splitlines() if len(line) > 100 and "written to" not in line] == []
    for name in files:
        assert f"written to {files[name]}" in out

    document = json.loads(files["m.json"].read_text())
    assert report.validate(document) == []
    assert document["benchmark"] == "model" and document["peer"] == "LiteRT in-process"
    assert document["parameters"] == {
        "model": str(relu_tflite),
        "iterations": 10,
        "duration": None,
        "turns": runtime_bench.ROUNDS,
    }
    assert document["inputs"] == [{"name": "t0", "shape": [2, 3], "dtype": "float32"}]
    assert [row["name"] for row in document["latency"]] == MODEL_FILE_ROWS
    assert {row["count"] for row in document["latency"]} == {10}  # --iterations bounds each row
    assert document["latency"][0]["vs_peer"] == 1.0 and document["notes"] == []

    assert files["m.png"].read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    page = files["m.html"].read_text()
    assert page.startswith("<!DOCTYPE html>") and "relu.tflite against LiteRT in-process" in page
    assert all(f"<td>{name}</td>" in page for name in MODEL_FILE_ROWS)
    assert "t0 [2, 3] float32" in page and 'src="data:image/png;base64,iVBOR' in page


def test_a_model_file_takes_iterations_and_duration_whichever_ends_first(
    capsys, tmp_path, relu_tflite
):
    path = tmp_path / "m.json"
    argv = ["bench", "--model", str(relu_tflite), "--iterations", "3", "--duration", "60"]
    code, out, err = run(capsys, *argv, "--json", str(path))
    assert code == 0, err
    assert "3 executions, whichever came first" in out
    document = json.loads(path.read_text())
    assert {row["count"] for row in document["latency"]} == {3}
    assert document["parameters"]["duration"] == 60 and document["seconds"] < 60


@pytest.mark.parametrize(
    "option",
    [
        ["--conv-size", "8"],
        ["--paths", "sync"],
        ["--in-process"],
        ["--cross-process"],
        ["--pin"],
        ["--busy"],
        ["--stream-items", "5"],
    ],
)
def test_options_a_model_file_has_no_use_for_are_refused_and_help_says_so(
    capsys, relu_tflite, option
):
    code, out, err = run(capsys, "bench", "--model", str(relu_tflite), *option)
    assert code == 2 and out == ""
    assert f"{option[0]} does not apply to a model file" in err
    if option[0] == "--stream-items":
        assert "fmq streaming test" in bench_help(option[0])  # refused by all but fmq
    else:
        assert "not with a model file" in bench_help(option[0])


def test_help_names_the_file_outputs_and_bounds_for_model_files(capsys):
    from nnburst.tools.benchmarks import model_bench

    for option in ("--iterations", "--plot", "--html"):
        assert "a model file" in bench_help(option)
    default = f"a model file: default {model_bench.DEFAULT_DURATION_S:g}"
    assert default in bench_help("--duration")
    assert main(["bench", "--help"]) == 0  # what argparse prints is these texts
    assert "not with a model file" in capsys.readouterr().out


def bench_help(option: str) -> str:
    """The help text ``nnburst bench --help`` shows for ``option``."""
    commands = next(a for a in build_parser()._actions if a.dest == "command")
    bench = commands.choices["bench"]
    return next(a.help for a in bench._actions if option in a.option_strings)


def test_time_in_turns_splits_a_count_over_the_turns():
    from nnburst.tools.benchmarks import model_bench

    calls = [("a", lambda: None), ("b", lambda: None)]
    samples = model_bench.time_in_turns(calls, None, 10)
    assert {name: ns.size for name, ns in samples.items()} == {"a": 10, "b": 10}
    samples = model_bench.time_in_turns(calls, 0.6, 4)  # fewer than the turns
    assert {name: ns.size for name, ns in samples.items()} == {"a": 4, "b": 4}


# -- --models DIR ----------------------------------------------------------------------------------


def test_models_times_every_file_against_its_runtime_in_one_table(capsys, tmp_path, relu_tflite):
    """A file it cannot load and one whose shapes come from models.json sit in the same
    table; each kind gets its geometric mean."""
    onnx = pytest.importorskip("onnx", reason="ONNX models need onnx")
    pytest.importorskip("onnxruntime", reason="onnxruntime is the ONNX peer")
    from onnx import TensorProto, helper

    directory = tmp_path / "models"
    directory.mkdir()
    relu_tflite.rename(directory / "relu.tflite")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "n"])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, str(directory / "relu.onnx"))
    (directory / "broken.onnx").write_bytes(b"not a model")
    (directory / "models.json").write_text(
        json.dumps({"relu.onnx": {"input_shapes": {"x": [1, 7]}}})
    )
    code, out, err = run(capsys, "bench", "--models", str(directory), "--duration", "0.2")
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()[:1]}
    assert "not loaded: not an ONNX model" in rows["broken.onnx"]
    for name in ("relu.onnx", "relu.tflite"):
        peer, mine, ratio = (float(v) for v in rows[name].split()[1:4])
        assert (
            peer > 0 and mine > 0 and ratio == pytest.approx(mine / peer, rel=0.05)
        )  # printed rounded
    assert "geometric mean, .tflite against LiteRT:" in out
    assert "geometric mean, .onnx against onnxruntime:" in out
    code, _, err = run(capsys, "bench", "--models", str(directory), "--iterations", "3")
    assert code == 2 and "--iterations does not go with --models" in err


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="pinning needs two CPUs")
def test_the_low_level_benchmarks_leave_the_callers_cpus_as_they_were(capsys, monkeypatch):
    """fmq and hal pin this process beside their peer; main() puts it back (a
    test after it, run in the same process, saw one CPU and one BLAS thread)."""
    from nnburst.tools.benchmarks import fmq_pingpong

    def pinned_run(iterations, items):
        fmq_pingpong.pin(0)
        return [LatencyStats.from_ns("fmq", [1000, 2000])], []

    monkeypatch.setattr(fmq_pingpong, "run", pinned_run)
    monkeypatch.setattr(fmq_pingpong, "report", lambda *args: "report")
    before = os.sched_getaffinity(0)
    code, _, err = run(capsys, "bench", "fmq", "--iterations", "2", "--json", os.devnull)
    assert code == 0, err
    assert os.sched_getaffinity(0) == before


def test_a_failing_mode_keeps_the_rows_that_finished(monkeypatch, capsys, tmp_path):
    def no_service(cpu=None):
        raise ServiceError("the driver service exited with code 1 before it listened: boom")

    monkeypatch.setattr(runtime_bench, "driver_service", no_service)
    path = tmp_path / "partial.json"
    argv = ["bench", "--model", "add-mul", "--duration", "0.02", "--paths", "sync"]
    code = main([*argv, "--json", str(path)])
    out, _ = capsys.readouterr()
    assert code == 1
    assert "sync in-process" in out and "multiprocessing.Pipe" in out
    assert "1 modes failed" in out
    assert "add-mul sync cross-process: the driver service exited" in out
    document = json.loads(path.read_text())
    assert report.validate(document) == []
    assert [row["path"] for row in document["latency"]] == ["pipe", "sync"]
    error = "the driver service exited with code 1 before it listened: boom"
    assert document["failures"] == [
        {"model": "add-mul", "mode": "sync cross-process", "error": error}
    ]


def test_the_in_process_rows_name_the_reference_device(monkeypatch):
    chosen = []
    original = runtime_paths.execution_path

    def spy(work, path, device=None, polling=True):
        chosen.append(device)
        return original(work, path, device, polling)

    monkeypatch.setattr(runtime_paths, "execution_path", spy)
    settings = runtime_bench.Settings(
        models=("add-mul",),
        iterations=2,
        duration=None,
        paths=("sync",),
        placements=("in-process",),
    )
    result = runtime_bench.run(settings)
    assert [row.mode.name for row in result.rows] == ["multiprocessing.Pipe", "sync in-process"]
    assert [device.name for device in chosen] == ["nnburst-reference"]
