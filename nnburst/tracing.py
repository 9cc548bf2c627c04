"""Trace events per layer and phase, NNAPI-systrace style, written as Chrome trace-event JSON.

NNAPI names every trace section ``[NN_<layer>_<phase>]<detail>`` (e.g.
``[NN_LR_PE]compute``) so that a parser can add up the time spent in each
layer (Application, Runtime, IPC, Driver) and phase of a model's life.  This
module keeps those names and that contract, and writes the events as
complete (``"ph": "X"``) Chrome trace events, which Perfetto's UI
(ui.perfetto.dev) and ``chrome://tracing`` load as they are;
``nnburst trace summarize FILE`` prints the per-layer × per-phase table.

Tracing is off by default and then costs one module-level bool check per
span, with nothing allocated.  Turn it on with ``NNBURST_TRACE=path.json``
in the environment (written when the process exits; child processes trace
too, so put ``{pid}`` in the path, replaced by the process id, or they
overwrite each other's file), or in code::

    tracing.start("trace.json")
    with tracing.span(Layer.APPLICATION, Phase.EXECUTION, "runInferenceModel"):
        execution.compute()
    tracing.stop()          # writes trace.json

Timestamps come from ``time.monotonic_ns()`` (CLOCK_MONOTONIC), which every
process on the machine shares, so the files of a driver process and of its
app can be merged.
"""

from __future__ import annotations

import atexit
import functools
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeGuard, TypeVar

__all__ = [
    "LAYERS",
    "call",
    "Layer",
    "Phase",
    "Summary",
    "TraceFormatError",
    "enabled",
    "format_summary",
    "load",
    "prefix",
    "section",
    "span",
    "start",
    "stop",
    "summarize",
    "traced",
]

#: Environment variable naming the file to trace into (``{pid}`` is replaced).
ENV_VAR = "NNBURST_TRACE"

#: Events kept in memory at most; later ones are counted as dropped, not stored.
MAX_EVENTS = 1_000_000


# Layer and Phase are plain string constants, not enums: on Python 3.11 reading an
# enum member costs more than the whole disabled span, and spans sit on hot paths.


class Layer:
    """Component in the stack, top to bottom; upper layers' spans enclose lower layers'."""

    APPLICATION = "LA"
    RUNTIME = "LR"
    IPC = "LI"
    DRIVER = "LD"


#: Layer code -> row title, top to bottom.
LAYERS: dict[str, str] = {
    Layer.APPLICATION: "Application",
    Layer.RUNTIME: "Runtime",
    Layer.IPC: "IPC",
    Layer.DRIVER: "Driver",
}


class Phase:
    """Stage of a model's life; the four execution sub-phases nest inside ``EXECUTION``."""

    INITIALIZATION = "PI"
    PREPARATION = "PP"  # building the model
    COMPILATION = "PC"  # preparing it for a device (the driver's prepareModel)
    EXECUTION = "PE"
    INPUTS_AND_OUTPUTS = "PIO"
    COMPUTATION = "PCO"
    RESULTS = "PR"
    TERMINATION = "PT"


_PHASES = frozenset(
    value for name, value in vars(Phase).items() if name.isupper() and isinstance(value, str)
)


def prefix(layer: str, phase: str) -> str:
    """The name prefix of a (layer, phase) bucket, e.g. ``[NN_LA_PE]``."""
    return f"[NN_{layer}_{phase}]"


# -- recording ---------------------------------------------------------------------------------

T = TypeVar("T")
_enabled = False  # the one check a span makes when tracing is off
_lock = threading.Lock()
_events: list[dict[str, Any]] = []
_thread_names: dict[int, str] = {}
_dropped = 0
_path: Path | None = None
_pattern = ""  # the path as given, before {pid} is replaced


def enabled() -> bool:
    """Whether spans are being recorded now."""
    return _enabled


def start(path: str | os.PathLike[str]) -> None:
    """Record spans from now on; :func:`stop` writes them to ``path``.

    Raises:
        RuntimeError: tracing is already on.
        OSError: the file's directory does not exist.
    """
    global _enabled, _path, _pattern, _dropped
    pattern = os.fspath(path)
    target = Path(pattern.replace("{pid}", str(os.getpid())))
    if not target.parent.is_dir():
        raise FileNotFoundError(f"cannot trace to {target}: no directory {target.parent}")
    with _lock:
        if _enabled:
            raise RuntimeError(f"tracing is already on (to {_path})")
        _events.clear()
        _thread_names.clear()
        _dropped = 0
        _path, _pattern, _enabled = target, pattern, True


def _after_fork_in_child() -> None:
    """A forked child traces on, into its own file, without its parent's events."""
    global _lock, _path, _dropped
    _lock = threading.Lock()  # another thread may have held it at the fork
    if _enabled:
        _events.clear()
        _thread_names.clear()
        _dropped = 0
        _path = Path(_pattern.replace("{pid}", str(os.getpid())))


os.register_at_fork(after_in_child=_after_fork_in_child)


def stop() -> Path | None:
    """Stop recording and write the trace file; returns its path (``None`` if tracing was off).

    Spans still open when tracing stops are left out.
    """
    global _enabled, _path
    with _lock:
        if not _enabled:
            return None
        _enabled = False
        path, _path = _path, None
        events = list(_events)
        threads = dict(_thread_names)
        dropped = _dropped
        _events.clear()
    if path is None:
        return None
    pid = os.getpid()
    metadata = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "nnburst"}},
    ] + [
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
        for tid, name in threads.items()
    ]
    document = {
        "traceEvents": metadata + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": "nnburst.tracing",
            "clock": "CLOCK_MONOTONIC",
            "dropped": dropped,
        },
    }
    # Write then rename, so a reader never sees half a file.
    temporary = path.with_name(f".{path.name}.{pid}.tmp")
    with open(temporary, "w", encoding="utf-8") as out:
        json.dump(document, out, separators=(",", ":"))
    os.replace(temporary, path)
    return path


def _record(name: str, start_ns: int, end_ns: int) -> None:
    global _dropped
    thread = threading.current_thread()
    tid = threading.get_native_id()
    event = {
        "name": name,
        "cat": "nnburst",
        "ph": "X",
        "ts": start_ns / 1000,
        "dur": (end_ns - start_ns) / 1000,
        "pid": os.getpid(),
        "tid": tid,
    }
    with _lock:
        if not _enabled:
            return
        if len(_events) >= MAX_EVENTS:
            _dropped += 1
            return
        _events.append(event)
        if tid not in _thread_names:
            _thread_names[tid] = thread.name


class _Span:
    """One timed section; recorded on exit, whether or not an exception passes through."""

    __slots__ = ("_name", "_start_ns")

    def __init__(self, name: str) -> None:
        self._name = name
        self._start_ns = 0

    def __enter__(self) -> _Span:
        self._start_ns = time.monotonic_ns()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _record(self._name, self._start_ns, time.monotonic_ns())


class _NoSpan:
    """What :func:`span` returns while tracing is off: a shared object that does nothing."""

    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SPAN = _NoSpan()


def span(layer: str, phase: str, detail: str) -> _Span | _NoSpan:
    """A context manager timing one section named ``[NN_<layer>_<phase>]<detail>``.

    ``layer`` and ``phase`` are :class:`Layer` and :class:`Phase` constants.
    """
    if not _enabled:
        return _NO_SPAN
    return _Span(f"[NN_{layer}_{phase}]{detail}")


def call(layer: str, phase: str, detail: str, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` inside a :func:`span`: for hot paths, where tracing
    off then costs one call instead of a ``with`` block's three."""
    if not _enabled:
        return function(*args)
    with _Span(f"[NN_{layer}_{phase}]{detail}"):
        return function(*args)


def section(name: str) -> _Span | _NoSpan:
    """A context manager timing a section with a ready-made name (``"[NN_LA_PE]runInference"``).

    Names without an ``[NN_…]`` prefix are kept in the file but left out of the summary,
    as the NNAPI parser does with an app's other systrace sections.
    """
    if not _enabled:
        return _NO_SPAN
    return _Span(name)


F = TypeVar("F", bound=Callable[..., Any])


def traced(layer: str, phase: str, detail: str | None = None) -> Callable[[F], F]:
    """Decorator form of :func:`span`; ``detail`` defaults to the function's qualified name."""

    def decorate(function: F) -> F:
        name = f"[NN_{layer}_{phase}]{detail or function.__qualname__}"

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _enabled:
                return function(*args, **kwargs)
            with _Span(name):
                return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def _start_from_environment() -> None:
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    try:
        start(path)
    except (OSError, RuntimeError) as exc:
        import logging

        logging.getLogger("nnburst").warning("%s=%s: tracing stays off: %s", ENV_VAR, path, exc)
        return
    atexit.register(stop)
    # multiprocessing children leave through os._exit, skipping atexit but running
    # finalizers; a child drops the finalizers it inherits, so each one registers anew.
    from multiprocessing import util

    def write_at_exit(_: object = None) -> None:
        util.Finalize(None, stop, exitpriority=0)

    write_at_exit()
    util.register_after_fork(_fork_token, write_at_exit)


class _ForkToken:
    """Something multiprocessing can hold a weak reference to."""


_fork_token = _ForkToken()


# -- summarizing -------------------------------------------------------------------------------


class TraceFormatError(ValueError):
    """The file is not a Chrome trace-event JSON document."""


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


_start_from_environment()
