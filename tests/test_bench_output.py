"""What ``nnburst bench`` prints and writes, from made-up rows: widths, words, the page.

The end-to-end runs are in test_bench_cli.py; these build results by hand, so
that a table can be given the widest numbers and the closest ratios.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from nnburst.imported import TensorInfo
from nnburst.tools.benchmarks import html_report, model_bench, report, runtime_bench
from nnburst.tools.benchmarks.runtime_bench import Mode, Result, Row, Settings
from nnburst.tools.benchmarks.stats import WIDTH, LatencyStats, compared, latency_table

ALL = runtime_bench.Settings(paths=runtime_bench.ALL_PATHS, busy=True)


def row(mode: Mode, p50_us: float, slow_us: float = 0.0, count: int = 100) -> Row:
    """A row whose p50 is ``p50_us``; ``slow_us`` adds one slow tail sample."""
    samples = np.full(count, int(p50_us * 1000), np.int64)
    if slow_us:
        samples[-1] = int(slow_us * 1000)
    return Row(
        mode,
        f"{mode.model} workload",
        LatencyStats.from_ns(mode.name, samples),
        samples,
        1.0,
        96,
        48,
    )


def result(p50: dict[str, float], settings: Settings = ALL, slow_us: float = 0.0) -> Result:
    """Every mode of ``settings`` and the onnxruntime peers (whether or not they are
    installed here), with the p50 named for it (by mode name), else 100 µs."""
    modes = [m for m in runtime_bench.plan(settings) if m.path != runtime_bench.PEER]
    modes += [
        Mode(model, runtime_bench.PEER, placement)
        for model in settings.models
        for placement in runtime_bench.PLACEMENTS
    ]
    rows = [row(mode, p50.get(mode.name, 100.0), slow_us) for mode in modes]
    failures = [(Mode("conv", "async", "in-process"), "OP_FAILED: " + "a long reason " * 20)]
    return Result(settings, rows, False, 12.5, (0, 1), failures, None, list(range(4000, 4040)))


def test_runtime_tables_and_readings_fit_100_columns_with_the_widest_numbers():
    # Seconds-long tails, a million runs: the widest cells a table will see.
    wide = result({}, slow_us=12_345_678.9)
    wide.rows = [
        Row(r.mode, r.workload, r.stats.__class__(**{**r.stats.as_dict(), "count": 1_000_000}),
            r.samples_ns, r.seconds, r.bytes_in, r.bytes_out)
        for r in wide.rows
    ]  # fmt: skip
    text = "\n".join(
        [
            runtime_bench.intro(wide.settings),
            runtime_bench.table(wide),
            runtime_bench.summary(wide),
            runtime_bench.key(wide.settings, (0, 1)),
            runtime_bench.key(Settings(iterations=100_000), (10, 11)),
        ]
    )
    too_wide = [line for line in text.splitlines() if len(line) > WIDTH]
    assert too_wide == []
    assert "failed: OP_FAILED" in text and "Busy: the slowest service burst" in text


def test_other_latency_tables_fit_100_columns_too():
    rows = [
        LatencyStats.from_ns(name, [1000, 2000, 12_345_678_900])
        for name in ("burst cross-process poll 200us", "multiprocessing.Pipe")
    ]
    table = latency_table(rows, baseline="multiprocessing.Pipe", ratio_title="x Pipe")
    assert max(len(line) for line in table.splitlines()) <= WIDTH


@pytest.mark.parametrize(
    ("time", "other", "words"),
    [
        (1.0, 1.0, "as fast as sync"),
        (0.97, 1.0, "as fast as sync"),  # 1.03x: rounds to 1.0
        (1.04, 1.0, "as fast as sync"),  # once "1.0x slower"
        (1.3, 1.0, "1.3x slower than sync"),
        (1.0, 2.0, "2.0x faster than sync"),
        (1.0, 1.06, "1.1x faster than sync"),
    ],
)
def test_compared_says_faster_slower_or_as_fast(time, other, words):
    assert compared(time, other, "sync") == words


def test_no_sentence_says_one_times_slower_or_faster():
    for factor in np.linspace(0.9, 1.1, 201):
        words = compared(float(factor), 1.0, "x")
        assert not re.search(r"\b1\.0x", words), (factor, words)


def test_a_burst_as_fast_as_the_sync_path_reads_as_fast():
    text = runtime_bench.table(
        result(
            {"sync cross-process": 100.0, "burst cross-process poll 0us": 104.0},
            Settings(models=("add-mul",)),
        )
    )
    assert "1.0x" not in text
    assert "is as fast as sync cross-process" in " ".join(text.split())


def test_every_latency_table_uses_one_vocabulary():
    runtime = runtime_bench.table(result({}, Settings(models=("add-mul",))))
    plain = latency_table([LatencyStats.from_ns("a", [1000])], baseline="a")
    for table in (runtime, plain):
        header = next(line for line in table.splitlines() if line.startswith("mode"))
        assert header.split()[:7] == ["mode", "runs", "p50", "µs", "p90", "µs", "p99"]
        assert "runs/s" in header and "exec/s" not in header and "msg/s" not in header
    columns = [title for _, title in html_report._COLUMNS]
    assert "runs" in columns and "runs/s" in columns


def test_the_report_page_shows_values_for_people_not_python_reprs():
    document = report.build_runtime(result({}, Settings(iterations=5, duration=None)))
    page = html_report.render(document, "key", None)
    run = page[page.index("<h2>Run</h2>") :]
    assert "None" not in run and "[" not in run and "True" not in run and "False" not in run
    assert "<td>models</td><td>add-mul, conv</td>" in run
    assert "<td>duration</td><td>—</td>" in run and "<td>cpus</td><td>0, 1</td>" in run
    assert "<td>pin</td><td>no</td>" in run
    assert html_report.shown(None) == "—" and html_report.shown([]) == "—"


def model_result(names: list[str], notes: list[str], peer: str = model_bench.LITERT):
    samples = {name: np.array([1000, 2000, 12_345_678_900] * 10, np.int64) for name in names}
    return model_bench.Result(
        "/some/where/a_model_file_with_a_rather_long_name_v2_int8_quantized.tflite",
        peer,
        [TensorInfo("input_1", (1, 224, 224, 3), np.dtype(np.int8))],
        2.0,
        1_000_000,
        [LatencyStats.from_ns(name, ns) for name, ns in samples.items()],
        samples,
        notes,
        3.5,
    )


def test_a_model_file_table_fits_100_columns_and_reads_in_one_vocabulary():
    names = [model_bench.LITERT, "sync in-process", "burst in-process", "sync cross-process"]
    why = "burst cross-process: not timed, its outputs differ from LiteRT in-process's " * 2
    text = model_bench.text(model_result(names, [why]))
    assert [line for line in text.splitlines() if len(line) > WIDTH] == []
    assert "x LiteRT" in text and "runs/s" in text and "msg/s" not in text
    assert "Reading: sync in-process is as fast as LiteRT in-process (p50)." in text


def test_a_model_file_without_its_peer_still_makes_a_document_and_a_page():
    names = ["sync in-process", "burst in-process"]
    result = model_result(names, ["LiteRT in-process: not installed (pip install '.[litert]')"])
    document = report.build_model(result)
    assert report.validate(document) == []
    assert [row["vs_peer"] for row in document["latency"]] == [None, None]
    page = html_report.render(document, model_bench.head(result), None)
    assert "<td>—</td>" in page and "None" not in page and "not installed" in page
    assert "input_1 [1, 224, 224, 3] int8" in page
    bad = {**document, "inputs": [{"name": "x"}], "notes": "none"}
    assert report.validate(bad) == [
        "inputs[0]: missing 'shape'",
        "inputs[0]: missing 'dtype'",
        "notes: expected a list of strings",
    ]
