"""The ``nnburst`` command end to end: devices, bench --json, trace summarize, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nnburst import tracing
from nnburst.cpu.driver import FEATURE_LEVEL
from nnburst.cpu.registry import registered_codes
from nnburst.tools import trace_summary
from nnburst.tools.benchmarks import burst_latency, report
from nnburst.tools.benchmarks.stats import LatencyStats
from nnburst.tools.cli import main

from .test_tracing import run_example

ROOT = Path(__file__).resolve().parent.parent


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- devices -----------------------------------------------------------------------------------
def test_devices_table(capsys):
    code, out, err = run(capsys, "devices")
    assert code == 0 and err == ""
    header, rule, *rows = out.splitlines()
    assert header.split()[:3] == ["name", "type", "version"] and set(rule) <= {"-", " "}
    (cpu,) = [row for row in rows if row.startswith("nnburst-reference")]
    assert " CPU " in cpu and cpu.endswith("in-process")
    assert f" {len(registered_codes())} " in cpu


def test_devices_json(capsys):
    code, out, _ = run(capsys, "devices", "--json")
    assert code == 0
    (cpu,) = [d for d in json.loads(out) if d["name"] == "nnburst-reference"]
    assert cpu == {
        "name": "nnburst-reference",
        "type": "CPU",
        "version": cpu["version"],
        "feature_level": FEATURE_LEVEL,
        "operations": len(registered_codes()),
        "where": "in-process",
    }


def test_python_dash_m_devices():
    done = subprocess.run(
        [sys.executable, "-m", "nnburst", "devices"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "nnburst-reference" in done.stdout


# -- bench -------------------------------------------------------------------------------------
def test_bench_fmq_json_follows_the_documented_schema(capsys, tmp_path):
    path = tmp_path / "bench.json"
    argv = ["fmq", "--iterations", "200", "--stream-items", "20000", "--json", str(path)]
    code, out, err = run(capsys, "bench", *argv)
    assert code == 0, err
    assert "multiprocessing.Pipe" in out and f"results written to {path}" in out
    document = json.loads(path.read_text())
    assert report.validate(document) == []
    assert document["benchmark"] == "fmq"
    assert document["parameters"] == {"iterations": 200, "stream_items": 20000}
    assert document["environment"]["cpu_count"] == os.cpu_count()
    latency = {row["name"]: row for row in document["latency"]}
    assert latency["multiprocessing.Pipe"]["count"] == 200
    assert {row["items"] for row in document["throughput"]} == {20000}


def test_bench_burst_json(capsys, tmp_path, monkeypatch):
    # The CLI's part only: the burst benchmark itself is exercised by bench/ and its own tests.
    rows = [
        LatencyStats.from_ns(name, [1000, 2000, 3000])
        for name in ("sync in-process", "multiprocessing.Pipe")
    ]
    monkeypatch.setattr(burst_latency, "run", lambda iterations: rows)
    path = tmp_path / "bench.json"
    code, out, err = run(capsys, "bench", "burst", "--iterations", "3", "--json", str(path))
    assert code == 0, err
    assert out.startswith("ADD of two float32 [3, 4] tensors") and "sync in-process" in out
    document = json.loads(path.read_text())
    assert report.validate(document) == []
    assert document["benchmark"] == "burst" and document["throughput"] == []
    assert document["parameters"] == {"iterations": 3, "stream_items": None}
    assert document["latency"] == [row.as_dict() for row in rows]


def test_bench_without_json_prints_the_table(capsys):
    code, out, _ = run(capsys, "bench", "fmq", "--iterations", "100", "--stream-items", "5000")
    assert code == 0 and "fmq futex" in out and "results written" not in out


def test_validate_reports_schema_problems():
    good = report.build("fmq", [], iterations=1, stream_items=2)
    assert report.validate(good) == []
    bad = {**good, "schema": "x", "latency": [{"name": "a", "count": True}], "extra": 1}
    problems = report.validate(bad)
    assert any(p.startswith("schema:") for p in problems)
    assert "latency[0].count: expected int, got bool" in problems
    assert "latency[0]: missing 'p50_us'" in problems
    assert report.validate([]) == ["the document is not a JSON object"]


def test_bench_json_to_a_bad_path_fails_before_running(capsys, tmp_path):
    code, out, err = run(capsys, "bench", "--json", str(tmp_path / "no" / "such" / "dir.json"))
    assert code == 1 and out == ""
    assert err.startswith("nnburst: error: --json") and "no directory" in err
    code, _, err = run(capsys, "bench", "--json", str(tmp_path))
    assert code == 1 and "is a directory" in err


# -- trace summarize ---------------------------------------------------------------------------
def test_trace_round_trips_through_the_summarizer(capsys, tmp_path):
    path = tmp_path / "trace.json"
    tracing.start(path)
    with tracing.span(tracing.Layer.APPLICATION, tracing.Phase.EXECUTION, "run"):
        run_example()
    tracing.stop()

    code, out, err = run(capsys, "trace", "summarize", str(path))
    assert code == 0 and err == ""
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()}
    for layer in ("Application", "Runtime", "IPC", "Driver", "Total"):
        assert layer in rows
    assert "Ex. total" in out and "Compilation" in out

    code, out, _ = run(capsys, "trace", "summarize", str(path), "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary == trace_summary.summarize(trace_summary.load(path)).as_dict()
    runtime = summary["rows"]["Runtime"]
    assert runtime["execution"]["count"] == 3  # compute, start_compute, burst_compute
    assert runtime["compilation"]["count"] == 1
    assert summary["rows"]["Driver"]["compute"]["count"] == 3
    assert summary["rows"]["Application"]["execution"]["count"] == 1
    # An in-process burst runs on the caller's thread: no FMQ round trip to trace.
    assert summary["rows"]["IPC"]["execution"] is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the trace"),
        ("{not json", "not JSON"),
        ('{"hello": []}', "not a Chrome trace"),
        ("", "not JSON"),
    ],
)
def test_trace_summarize_bad_files(capsys, tmp_path, content, message):
    path = tmp_path / "trace.json"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "trace", "summarize", str(path))
    assert code == 1 and out == ""
    assert err.startswith("nnburst: error: ") and message in err
    assert "Traceback" not in err


def test_bad_arguments_exit_with_usage(capsys):
    for argv in (
        ["bench", "--iterations", "0"],
        ["bench", "--iterations", "many"],
        ["trace"],
        ["frobnicate"],
        [],
    ):
        code, _, err = run(capsys, *argv)
        assert code == 2, argv
        assert "usage: nnburst" in err and "Traceback" not in err
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "devices" in out and "trace" in out


@pytest.mark.parametrize("command", [["run"], ["bench", "--model"]])
def test_an_onnx_file_without_the_onnx_extra_is_a_one_line_error(
    capsys, monkeypatch, tmp_path, command
):
    """Found trying it as a stranger: `nnburst run x.onnx` after `pip install .` printed
    a traceback.  The ImportError's advice is now the whole error."""
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx raises ImportError
    monkeypatch.delitem(sys.modules, "nnburst.onnx", raising=False)
    path = tmp_path / "model.onnx"
    path.write_bytes(b"not read")
    code, out, err = run(capsys, *command, str(path))
    assert code == 1 and out == ""
    assert (
        "pip install onnx (or pip install '.[onnx]' in nnburst's checkout)" in err
        and "Traceback" not in err
    )
