"""``nnburst trace summarize``: total time per layer and phase of a trace file.

Reads the Chrome trace-event JSON that :mod:`nnburst.tracing` writes (or any
trace whose spans carry NNAPI's ``[NN_<layer>_<phase>]`` prefix) and adds up
the wall-clock time each layer spent in each phase, overlapping spans of one
thread counted once: NNAPI's timing-summary table.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

from ..tracing import LAYERS, Phase


class TraceFormatError(ValueError):
    """The file is not a Chrome trace-event JSON document."""


_PHASES = frozenset(
    value for name, value in vars(Phase).items() if name.isupper() and isinstance(value, str)
)
_NAME = re.compile(r"^\[NN_(L[A-Z])_(P[A-Z]{1,2})\]")

#: The summary's columns: key, title, and the phases whose time the column adds up.
COLUMNS: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("initialization", "Initialization", frozenset({Phase.INITIALIZATION})),
    ("preparation", "Preparation", frozenset({Phase.PREPARATION})),
    ("compilation", "Compilation", frozenset({Phase.COMPILATION})),
    ("io", "I/O", frozenset({Phase.INPUTS_AND_OUTPUTS})),
    ("compute", "Compute", frozenset({Phase.COMPUTATION})),
    ("results", "Results", frozenset({Phase.RESULTS})),
    (
        "execution",
        "Ex. total",
        frozenset(
            {
                Phase.EXECUTION,
                Phase.INPUTS_AND_OUTPUTS,
                Phase.COMPUTATION,
                Phase.RESULTS,
            }
        ),
    ),
    ("termination", "Termination", frozenset({Phase.TERMINATION})),
)
#: Columns whose sum is a layer's total (the execution sub-phases are inside "execution").
_TOTALLED = ("initialization", "preparation", "compilation", "execution", "termination")


@dataclass(frozen=True)
class Cell:
    """Wall-clock time covered by a bucket's spans (overlaps counted once) and how many spans."""

    ms: float
    count: int


@dataclass(frozen=True)
class Summary:
    """Per-layer × per-column cells; a missing cell means no span fell in it."""

    cells: dict[tuple[str, str], Cell]  # (layer code, column key)
    events: int  # spans with an [NN_…] prefix
    ignored: int  # complete spans without one

    def cell(self, layer: str, column: str) -> Cell | None:
        return self.cells.get((layer, column))

    def layer_total(self, layer: str) -> Cell | None:
        parts = [c for key in _TOTALLED if (c := self.cells.get((layer, key))) is not None]
        if not parts:
            return None
        return Cell(sum(c.ms for c in parts), sum(c.count for c in parts))

    def column_total(self, column: str) -> Cell | None:
        """The largest layer: layers nest, so the top one's time already holds the rest."""
        if column == "total":
            parts = [t for layer in LAYERS if (t := self.layer_total(layer)) is not None]
        else:
            parts = [c for layer in LAYERS if (c := self.cells.get((layer, column))) is not None]
        return max(parts, key=lambda c: c.ms, default=None)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``: ms and count per layer and column, ``null`` where empty."""

        def plain(cell: Cell | None) -> dict[str, float | int] | None:
            return None if cell is None else {"ms": round(cell.ms, 6), "count": cell.count}

        keys = [key for key, _, _ in COLUMNS]
        rows: dict[str, dict[str, Any]] = {}
        for layer, title in LAYERS.items():
            row = {key: plain(self.cells.get((layer, key))) for key in keys}
            row["total"] = plain(self.layer_total(layer))
            rows[title] = row
        rows["Total"] = {key: plain(self.column_total(key)) for key in [*keys, "total"]}
        return {
            "unit": "ms",
            "columns": [*keys, "total"],
            "rows": rows,
            "events": self.events,
            "ignored": self.ignored,
        }


def load(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The events of a trace file: the JSON object form (``traceEvents``) or the bare array form.

    Raises:
        OSError: the file cannot be read.
        TraceFormatError: it is not trace-event JSON.
    """
    with open(path, encoding="utf-8") as source:
        try:
            document = json.load(source)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TraceFormatError(f"{os.fspath(path)}: not JSON: {exc}") from None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise TraceFormatError(
            f"{os.fspath(path)}: not a Chrome trace (expected a list or an object with 'traceEvents')"
        )
    return [event for event in events if isinstance(event, dict)]


def _covered(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals, so nested or overlapping spans count once."""
    total, end = 0.0, -math.inf
    for lo, hi in sorted(intervals):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


def _complete_spans(events: Iterable[dict[str, Any]]) -> Iterator[tuple[str, Any, float, float]]:
    for event in events:
        if event.get("ph") != "X":
            continue
        name, ts, dur = event.get("name"), event.get("ts"), event.get("dur", 0)
        if not isinstance(name, str) or not _number(ts) or not _number(dur) or dur < 0:
            continue
        yield name, (event.get("pid"), event.get("tid")), float(ts), float(ts) + float(dur)


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def summarize(events: Iterable[dict[str, Any]]) -> Summary:
    """Total time per layer and phase column; spans on different threads add up."""
    spans: dict[tuple[str, str], dict[Any, list[tuple[float, float]]]] = {}
    counts: dict[tuple[str, str], int] = {}
    recognised = ignored = 0
    for name, thread, lo, hi in _complete_spans(events):
        match = _NAME.match(name)
        layer, phase = match.groups() if match else ("", "")
        if layer not in LAYERS or phase not in _PHASES:
            ignored += 1
            continue
        recognised += 1
        for key, _, phases in COLUMNS:
            if phase in phases:
                spans.setdefault((layer, key), {}).setdefault(thread, []).append((lo, hi))
                counts[(layer, key)] = counts.get((layer, key), 0) + 1
    cells = {
        bucket: Cell(
            sum(_covered(intervals) for intervals in by_thread.values()) / 1000, counts[bucket]
        )
        for bucket, by_thread in spans.items()
    }
    return Summary(cells, recognised, ignored)


def format_summary(summary: Summary) -> str:
    """The seeds' timing-summary table (ms, wall clock), then the same layout with span counts."""
    titles = [title for _, title, _ in COLUMNS] + ["Total"]
    keys = [key for key, _, _ in COLUMNS] + ["total"]
    widths = [max(len(t), 9) for t in titles]
    label = max(len(title) for title in LAYERS.values()) + 2

    # "Execution" spans its four columns, as in NNAPI's table.
    first, last = keys.index("io"), keys.index("execution")
    indent = label + sum(widths[:first]) + 2 * first
    group = sum(widths[first : last + 1]) + 2 * (last - first)

    def table(value: Callable[[Cell], str]) -> list[str]:
        header = " " * label + "  ".join(f"{t:>{w}}" for t, w in zip(titles, widths))
        lines = [
            (" " * indent + f"{'Execution':^{group}}").rstrip(),
            " " * indent + "-" * group,
            header,
        ]
        lines.append("-" * len(header))
        for layer, title in LAYERS.items():
            cells = [
                summary.cell(layer, k) if k != "total" else summary.layer_total(layer) for k in keys
            ]
            lines.append(_row(title, label, cells, widths, value))
        lines.append(_row("Total", label, [summary.column_total(k) for k in keys], widths, value))
        return lines

    rule = "=" * len(table(str)[2])
    lines = [rule, "Timing summary (total time, ms wall-clock)", ""]
    lines += table(lambda c: f"{c.ms:.2f}")
    lines += ["", "Span counts", ""]
    lines += table(lambda c: str(c.count))
    lines += [
        rule,
        "Ex. total covers execution and its I/O, Compute and Results sub-phases; a layer's Total adds",
        "its phases; the Total row is the largest layer (layers nest); '-' means no span.",
        f"{summary.events} spans summarized, {summary.ignored} without an [NN_…] prefix ignored.",
    ]
    return "\n".join(lines)


def _row(
    title: str,
    label: int,
    cells: list[Cell | None],
    widths: list[int],
    value: Callable[[Cell], str],
) -> str:
    text = "  ".join(f"{'-' if c is None else value(c):>{w}}" for c, w in zip(cells, widths))
    return f"{title:<{label}}{text}"
