"""Tracing (spans, the Chrome trace file, the summary) and per-component verbose logging."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import nnburst as nn
from nnburst import log, tracing
from nnburst.tools import trace_summary
from nnburst.tracing import Layer, Phase

from .test_model import build_example

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def tracing_off():
    """Every test starts and ends with tracing off and nothing buffered."""
    assert not tracing.enabled()
    yield
    tracing.stop()


def run_example(burst: bool = True) -> None:
    """One compilation, then compute, start_compute and (optionally) burst_compute."""
    with nn.Compilation(build_example()) as compilation:
        compilation.finish()
        out = np.zeros((3, 4), np.float32)

        def execution() -> nn.Execution:
            e = nn.Execution(compilation)
            e.set_input(0, np.ones((3, 4), np.float32))
            e.set_output(0, out)
            return e

        execution().compute()
        with execution().start_compute() as event:
            event.wait()
        if burst:
            with nn.Burst(compilation) as b:
                execution().burst_compute(b)


def names(path: Path) -> list[str]:
    return [e["name"] for e in trace_summary.load(path) if e.get("ph") == "X"]


# -- off ---------------------------------------------------------------------------------------
def test_off_by_default_records_nothing_and_allocates_no_span(tmp_path):
    assert os.environ.get(tracing.ENV_VAR) is None
    first = tracing.span(Layer.RUNTIME, Phase.EXECUTION, "compute")
    assert first is tracing.span(Layer.DRIVER, Phase.COMPUTATION, "x")  # one shared no-op
    assert first is tracing.section("[NN_LA_PE]app")
    run_example(burst=False)
    assert tracing._events == []
    assert tracing.stop() is None
    assert list(tmp_path.iterdir()) == []


# -- recording ---------------------------------------------------------------------------------
def test_runtime_and_driver_spans_land_in_a_chrome_trace(tmp_path):
    path = tmp_path / "trace.json"
    tracing.start(path)
    assert tracing.enabled()
    with tracing.span(Layer.APPLICATION, Phase.EXECUTION, "runInference"):
        run_example()
    assert tracing.stop() == path
    assert not tracing.enabled()

    document = json.loads(path.read_text())
    events = [e for e in document["traceEvents"] if e["ph"] == "X"]
    for event in events:
        assert {"name", "ts", "dur", "pid", "tid"} <= event.keys()
        assert event["dur"] >= 0 and event["pid"] == os.getpid()
    found = {e["name"] for e in events}
    assert {
        "[NN_LA_PE]runInference",
        "[NN_LR_PC]finish",
        "[NN_LD_PC]prepare_model",
        "[NN_LR_PE]compute",
        "[NN_LR_PE]start_compute",
        "[NN_LR_PE]burst_compute",
        "[NN_LD_PCO]execute",
    } <= found
    thread_names = {
        e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"
    }
    assert "MainThread" in thread_names
    # The app span encloses the runtime's, which encloses the driver's compute.
    app = next(e for e in events if e["name"] == "[NN_LA_PE]runInference")
    compute = next(e for e in events if e["name"] == "[NN_LR_PE]compute")
    assert app["ts"] <= compute["ts"] and compute["ts"] + compute["dur"] <= app["ts"] + app["dur"]


def test_section_decorator_and_exceptions(tmp_path):
    path = tmp_path / "t.json"

    @tracing.traced(Layer.APPLICATION, Phase.PREPARATION)
    def build() -> int:
        return 7

    assert build() == 7  # off: nothing recorded, the function still runs
    tracing.start(path)
    assert build() == 7
    with tracing.section("[NN_LA_PT]teardown"), tracing.section("preprocessBitmap"):
        pass
    with pytest.raises(KeyError), tracing.span(Layer.APPLICATION, Phase.RESULTS, "read"):
        raise KeyError("x")
    tracing.stop()
    assert sorted(names(path)) == sorted(
        [
            "[NN_LA_PP]test_section_decorator_and_exceptions.<locals>.build",
            "[NN_LA_PT]teardown",
            "preprocessBitmap",
            "[NN_LA_PR]read",
        ]
    )
    assert tracing.prefix(Layer.IPC, Phase.INPUTS_AND_OUTPUTS) == "[NN_LI_PIO]"


def test_threads_record_concurrently(tmp_path):
    path = tmp_path / "t.json"
    tracing.start(path)
    barrier = threading.Barrier(4)

    def work(i: int) -> None:
        barrier.wait()
        for _ in range(200):
            with tracing.span(Layer.APPLICATION, Phase.EXECUTION, f"worker{i}"):
                pass

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tracing.stop()
    events = [e for e in trace_summary.load(path) if e["ph"] == "X"]
    assert len(events) == 800
    assert len({e["tid"] for e in events}) == 4
    assert trace_summary.summarize(events).cell(Layer.APPLICATION, "execution").count == 800


def test_start_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no directory"):
        tracing.start(tmp_path / "missing" / "t.json")
    tracing.start(tmp_path / "t.json")
    with pytest.raises(RuntimeError, match="already on"):
        tracing.start(tmp_path / "u.json")
    tracing.stop()
    assert tracing.stop() is None


CHILD_SCRIPT = """
import multiprocessing, numpy as np, nnburst as nn
from nnburst import tracing
from tests.test_model import build_example

def child():
    with tracing.span(tracing.Layer.DRIVER, tracing.Phase.COMPUTATION, "in the child"):
        pass

if __name__ == "__main__":
    c = nn.Compilation(build_example()); c.finish()
    e = nn.Execution(c); e.set_input(0, np.ones((3, 4), np.float32))
    e.set_output(0, np.zeros((3, 4), np.float32)); e.compute(); c.close()
    p = multiprocessing.get_context("fork").Process(target=child); p.start(); p.join()
"""


def test_environment_variable_traces_a_whole_process_and_its_children(tmp_path):
    env = {**os.environ, tracing.ENV_VAR: str(tmp_path / "trace-{pid}.json")}
    subprocess.run([sys.executable, "-c", CHILD_SCRIPT], cwd=ROOT, env=env, check=True, timeout=60)
    traces = {frozenset(names(path)) for path in tmp_path.glob("trace-*.json")}
    assert len(traces) == 2  # one file per process, each with its own events only
    (parent,) = [t for t in traces if "[NN_LR_PE]compute" in t]
    assert {"[NN_LR_PC]finish", "[NN_LD_PCO]execute"} <= parent
    assert traces - {parent} == {frozenset({"[NN_LD_PCO]in the child"})}


# -- summarizing -------------------------------------------------------------------------------
def x(name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"name": name, "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_summary_adds_up_buckets():
    events = [
        x("[NN_LA_PE]run", 0, 1000),
        x("[NN_LR_PE]compute", 100, 800),
        x("[NN_LR_PIO]set_input", 100, 100),  # inside compute: Ex. total counts it once
        x("[NN_LR_PE]compute", 150, 100),  # nested in the same bucket: counted once
        x("[NN_LD_PCO]execute", 300, 400),
        x("[NN_LD_PCO]execute", 300, 400, tid=2),  # another thread adds up
        x("[NN_LR_PC]finish", 2000, 500),
        x("preprocessBitmap", 0, 50),  # no prefix: ignored
        x("[NN_LX_PE]unknown layer", 0, 50),
        {"name": "[NN_LR_PE]instant", "ph": "i", "ts": 0},  # not a complete event
        {"name": "[NN_LR_PE]bad", "ph": "X", "ts": "soon", "dur": 5},  # garbled: skipped
    ]
    s = trace_summary.summarize(events)
    assert s.cell(Layer.APPLICATION, "execution") == trace_summary.Cell(1.0, 1)
    assert s.cell(Layer.RUNTIME, "execution") == trace_summary.Cell(0.8, 3)
    assert s.cell(Layer.RUNTIME, "io") == trace_summary.Cell(0.1, 1)
    assert s.cell(Layer.DRIVER, "compute") == trace_summary.Cell(0.8, 2)
    assert s.cell(Layer.IPC, "execution") is None
    assert s.layer_total(Layer.RUNTIME) == trace_summary.Cell(1.3, 4)
    assert s.column_total("execution").ms == 1.0  # the largest layer
    assert s.column_total("total").ms == pytest.approx(1.3)
    assert (s.events, s.ignored) == (7, 2)

    plain = s.as_dict()
    assert plain["rows"]["Runtime"]["compilation"] == {"ms": 0.5, "count": 1}
    assert plain["rows"]["IPC"]["total"] is None
    assert plain["rows"]["Total"]["execution"] == {"ms": 1.0, "count": 1}
    text = trace_summary.format_summary(s)
    for word in ("Application", "Runtime", "IPC", "Driver", "Total", "Ex. total", "Execution"):
        assert word in text


def test_load_accepts_both_json_forms_and_rejects_others(tmp_path):
    events = [x("[NN_LA_PE]run", 0, 10)]
    (tmp_path / "array.json").write_text(json.dumps(events))
    (tmp_path / "object.json").write_text(json.dumps({"traceEvents": events}))
    assert (
        trace_summary.load(tmp_path / "array.json")
        == trace_summary.load(tmp_path / "object.json")
        == events
    )
    (tmp_path / "garbled.json").write_text('{"traceEvents": [')
    (tmp_path / "other.json").write_text('{"hello": 1}')
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    for name in ("garbled.json", "other.json", "binary.json"):
        with pytest.raises(trace_summary.TraceFormatError):
            trace_summary.load(tmp_path / name)


# -- verbose logging ---------------------------------------------------------------------------
@pytest.fixture
def vlog_off():
    yield
    log.disable()


def test_vlog_parse():
    assert log.parse("compilation,execution") == {"compilation", "execution"}
    assert log.parse(" model: cpuexe  manager ") == {"model", "cpuexe", "manager"}
    assert log.parse("all") == log.parse("1") == frozenset(log.COMPONENTS)
    assert log.parse("") == frozenset()
    with pytest.raises(ValueError, match="unknown logging component.*nope.*known: model"):
        log.parse("model,nope")


class Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


def test_vlog_enable_and_disable(vlog_off):
    recorder = Recorder()
    logging.getLogger("nnburst").addHandler(recorder)
    try:
        logging.getLogger("nnburst.cpu").debug("before")
        log.enable("cpuexe")
        assert log.is_enabled("cpuexe") and not log.is_enabled("execution")
        logging.getLogger("nnburst.cpu").debug("during")
        logging.getLogger("nnburst.execution").debug("not this one")
        log.disable()
        assert log.enabled_components() == frozenset()
        logging.getLogger("nnburst.cpu").debug("after")
    finally:
        logging.getLogger("nnburst").removeHandler(recorder)
    assert recorder.messages == ["nnburst.cpu: during"]


def test_vlog_environment_variable_shows_messages_on_stderr():
    script = (
        "import logging, nnburst.log\n"
        "logging.getLogger('nnburst.execution').debug('verbose execution')\n"
        "logging.getLogger('nnburst.model').debug('quiet model')\n"
    )
    env = {**os.environ, log.ENV_VAR: "execution,burst"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "nnburst.execution: verbose execution" in done.stderr
    assert "quiet model" not in done.stderr
    env[log.ENV_VAR] = "bogus"
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "unknown logging component" in done.stderr and "verbose execution" not in done.stderr
