"""``nnburst bench``'s default run: the runtime's execution paths against a Pipe baseline.

Every mode is one way an app gets one execution done, timed call by call:
``sync``/``async``/``burst`` (see :mod:`.runtime_paths`) on the in-process
CPU reference driver and on the same driver behind a driver service process,
bursts with polling windows 0, 50 and 200 µs (the LOW_POWER,
FAST_SINGLE_ANSWER and SUSTAINED_SPEED preferences).  The baseline moves the same bytes
over a ``multiprocessing.Pipe`` (:mod:`.pipe_baseline`), so a row's ratio
says what the runtime costs over the plainest IPC a Python app could use.
With onnxruntime installed, the peers of :mod:`.peers` run the same models
in-process and behind a Pipe, and a second ratio compares each row to them.
``busy`` (:mod:`.load`) runs every cross-process row while one CPU-bound
process per CPU spins.

Modes are bounded by a duration or a count each.  The modes of one model
and placement take turns, a slice at a time (:func:`run` says why); the
in-process groups run first, then the cross-process ones, with the Pipe
baselines, against one service.
A Ctrl-C ends the run with the rows finished so far, after every process,
thread and shared-memory segment it opened is closed.
"""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field

import numpy as np
import threadpoolctl

from ...cpu.driver import DEVICE_NAME as CPU_DEVICE
from ...devices import Device, get_device
from ...errors import NNError
from . import facades, peers, runtime_paths, service_process
from .facades import Overhead
from .load import CpuLoad, default_count
from .pipe_baseline import pipe_peer
from .progress import Progress
from .runtime_paths import MODELS, PATHS, Workload
from .service_process import ServiceError, driver_service
from .stats import (
    LATENCY_TITLES,
    WIDTH,
    LatencyStats,
    aligned,
    compared,
    latency_cells,
    ratio_cell,
)

PLACEMENTS = ("in-process", "cross-process")
POLLING_US = (0, 50, 200)  # LOW_POWER, FAST_SINGLE_ANSWER, SUSTAINED_SPEED
BASELINE = "multiprocessing.Pipe"
DEFAULT_DURATION_S = 0.9
#: slices per mode, the modes of a table taking turns (see :func:`run`)
ROUNDS = 6
#: the path of the onnxruntime peer rows (:mod:`.peers`), selectable like nnburst's own paths
PEER = "onnxruntime"
ALL_PATHS = (*PATHS, PEER)


@dataclass(frozen=True)
class Mode:
    """One row of the table: a model through one path, in one place."""

    model: str  # a key of runtime_paths.MODELS
    path: str  # sync, async, burst, "onnxruntime" for the peers, or "pipe" for the baseline
    placement: str  # in-process or cross-process
    polling_us: int | None = None  # bursts only

    @property
    def name(self) -> str:
        if self.path == "pipe":
            return BASELINE
        if self.path == PEER:
            return peers.IN_PROCESS if self.placement == "in-process" else peers.VIA_PIPE
        name = f"{self.path} {self.placement}"
        return name if self.polling_us is None else f"{name} poll {self.polling_us}us"


@dataclass(frozen=True)
class Settings:
    """What one run measures; the defaults are the no-argument ``nnburst bench``, except
    that the command adds the onnxruntime peers to ``paths`` (``ALL_PATHS``): the default
    here is nnburst's own paths, which bench/bench_runtime.py times."""

    models: tuple[str, ...] = MODELS
    conv_size: int = runtime_paths.DEFAULT_CONV_SIZE
    iterations: int | None = None  # per mode; None: bounded by duration only
    duration: float | None = DEFAULT_DURATION_S  # seconds per mode; None: bounded by count only
    paths: tuple[str, ...] = PATHS
    placements: tuple[str, ...] = PLACEMENTS
    pin: bool = False  # pinning the caller starves in-process compute that wakes helper threads
    busy: bool = False  # a CPU-bound process per CPU during the cross-process rows


@dataclass
class Row:
    mode: Mode
    workload: str  # the model's display name, e.g. "conv 32x32x16"
    stats: LatencyStats
    samples_ns: np.ndarray = field(repr=False)
    seconds: float  # wall time of the mode, set-up and warm-up included
    bytes_in: int  # the model's input bytes (what the baseline sends)
    bytes_out: int  # the model's output bytes (what the baseline gets back)


@dataclass
class Result:
    settings: Settings
    rows: list[Row]
    interrupted: bool
    seconds: float
    cpus: tuple[int, int] | None  # (this thread, the other side) when pinned
    #: modes that could not run, with the reason; the other modes still ran
    failures: list[tuple[Mode, str]] = field(default_factory=list)
    #: the peers were asked for but cannot run here (peers.missing()); None otherwise
    peers_missing: str | None = None
    #: every load process ``busy`` started (all stopped when the run returns)
    load_pids: list[int] = field(default_factory=list)
    #: the facades' cost over the Runner on add-mul in-process (:mod:`.facades`)
    facades: list[Overhead] = field(default_factory=list)
    #: why the facade rows did not run (None: they ran or were not asked for)
    facades_failed: str | None = None

    def baseline(self, model: str) -> Row | None:
        return next((r for r in self.rows if r.mode.model == model and r.mode.path == "pipe"), None)

    def peer(self, model: str, placement: str) -> Row | None:
        """The onnxruntime row of ``model`` in ``placement`` (via Pipe: cross-process)."""
        return next(
            (
                r
                for r in self.rows
                if r.mode.model == model and r.mode.path == PEER and r.mode.placement == placement
            ),
            None,
        )


def peers_wanted(settings: Settings) -> bool:
    """The peer rows run: asked for, and onnxruntime and onnx import."""
    return PEER in settings.paths and peers.missing() is None


def plan(settings: Settings) -> list[Mode]:
    """The modes in the order they run: baselines, in-process, cross-process; in each
    placement nnburst's paths, then the onnxruntime peer."""
    with_peers = peers_wanted(settings)
    modes = [Mode(model, "pipe", "cross-process") for model in settings.models]
    for placement in PLACEMENTS:
        if placement not in settings.placements:
            continue
        for model in settings.models:
            for path in PATHS:
                if path not in settings.paths:
                    continue
                if path == "burst" and placement == "cross-process":
                    # In-process bursts run on the caller's thread: no window to vary.
                    modes += [Mode(model, path, placement, polling) for polling in POLLING_US]
                else:
                    modes.append(Mode(model, path, placement))
            if with_peers:
                modes.append(Mode(model, PEER, placement))
    return modes


def measure(
    call: Callable[[], object],
    iterations: int | None,
    duration: float | None,
    tick: Callable[[float], None] = lambda fraction: None,
) -> np.ndarray:
    """Per-call latencies in ns after a short warm-up, until ``iterations`` calls or
    ``duration`` seconds, whichever comes first (at least one call)."""
    if iterations is None and duration is None:
        raise ValueError("a mode needs an iteration count or a duration")
    clock = time.perf_counter_ns
    warm_until = clock() + int(min(0.1 * (duration or 1.0), 0.2) * 1e9)
    for i in range(max(3, min(100, (iterations or 1000) // 10))):
        call()
        if i >= 2 and clock() >= warm_until:
            break
    limit = iterations if iterations is not None else 1 << 62
    start = clock()
    deadline = start + int(duration * 1e9) if duration is not None else 1 << 62
    next_tick = start + 100_000_000
    samples: list[int] = []
    while True:
        before = clock()
        call()
        after = clock()
        samples.append(after - before)
        if len(samples) >= limit or after >= deadline:
            break
        if after >= next_tick:
            next_tick = after + 100_000_000
            done = len(samples) / limit if iterations is not None else 0.0
            if duration is not None:
                done = max(done, (after - start) / (deadline - start))
            tick(done)
    return np.asarray(samples, dtype=np.int64)


def pin_cpus(pin: bool) -> tuple[int, int] | None:
    """The first two CPUs this process may use: this thread on one, the other side on the other."""
    if not pin or not hasattr(os, "sched_getaffinity"):
        return None
    usable = sorted(os.sched_getaffinity(0))
    return (usable[0], usable[1]) if len(usable) >= 2 else None


@contextmanager
def _pinned(cpu: int | None) -> Iterator[None]:
    """Pin the calling thread for the timed loop only; threads started earlier keep their CPUs."""
    if cpu is None:
        yield
        return
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


def groups(modes: list[Mode]) -> list[list[Mode]]:
    """The modes measured in turns: one group per model and placement, in plan order;
    a model's Pipe baseline joins its cross-process group."""
    grouped: dict[tuple[str, str], list[Mode]] = {}
    for mode in modes:
        if mode.path != "pipe":
            grouped.setdefault((mode.model, mode.placement), []).append(mode)
    for mode in modes:
        if mode.path == "pipe":
            grouped.setdefault((mode.model, mode.placement), []).insert(0, mode)
    order = {placement: i for i, placement in enumerate(PLACEMENTS)}
    return [grouped[key] for key in sorted(grouped, key=lambda key: order[key[1]])]


def run(settings: Settings, progress: Progress | None = None) -> Result:
    """Run every mode of ``settings``; a KeyboardInterrupt ends the run early, cleanly.

    The modes of one model and placement take turns: each runs ``rounds`` slices
    of its duration, one mode's slice after another's, so that a machine whose
    speed drifts (a VM's often does, by tens of percent within seconds) slows
    every row of a table alike and the ratios stay true.  With ``busy``, the
    load runs during the cross-process rows (the Pipe baselines included) and
    is stopped for the in-process ones."""
    cpus = pin_cpus(settings.pin)
    ours, theirs = (None, None) if cpus is None else cpus
    peers_missing = peers.missing() if PEER in settings.paths else None
    load = CpuLoad() if settings.busy else None
    workloads: dict[str, Workload] = {}
    rows: list[Row] = []
    started = time.perf_counter()
    interrupted = False
    progress = progress or Progress(0, enabled=False)
    failures: list[tuple[Mode, str]] = []
    facade_rows: list[Overhead] = []
    facades_failed = None
    service = _Service()
    try:
        with ExitStack() as services:
            service.stack = services
            # One BLAS thread, as the service and the onnxruntime peers use: on a small
            # machine a second one only fights the other side of the exchange.
            services.enter_context(threadpoolctl.threadpool_limits(limits=1, user_api="blas"))
            if load is not None:
                services.enter_context(load)  # stopped last, however the run ends
            for group in groups(plan(settings)):
                if load is not None and group[0].placement == "cross-process":
                    load.start()
                elif load is not None:
                    load.stop()
                model = group[0].model
                if model not in workloads:
                    workloads[model] = runtime_paths.workload(model, settings.conv_size)
                _measure_group(
                    group, workloads[model], settings, service, cpus, progress, failures, rows
                )
            if "add-mul" in settings.models and "in-process" in settings.placements:
                if load is not None:
                    load.stop()
                facade_rows, facades_failed = _facades(settings)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
    order = {mode: i for i, mode in enumerate(plan(settings))}
    rows.sort(key=lambda row: order[row.mode])
    return Result(
        settings,
        rows,
        interrupted,
        time.perf_counter() - started,
        cpus,
        failures,
        peers_missing,
        [] if load is None else list(load.pids),
        facade_rows,
        facades_failed,
    )


def _facades(settings: Settings) -> tuple[list[Overhead], str | None]:
    """The facade rows (:mod:`.facades`), or why they could not run (no onnx package:
    nnburst.onnx is an optional extra)."""
    try:
        work = runtime_paths.add_mul_model()
        return facades.measure(work, settings.duration or 1.0, settings.iterations), None
    except ImportError:  # the onnx package is an optional extra, as for the peers
        return [], "facade rows: not run (pip install onnx, or '.[onnx]' in nnburst's checkout)"
    except (NNError, OSError, AssertionError) as exc:
        return [], textwrap.fill(f"facade rows failed: {exc}", 100, subsequent_indent="  ")


@dataclass
class _Service:
    """The driver service of a run: started by the first mode that needs it, kept
    open on ``stack`` until the run ends; if it cannot start, why."""

    stack: ExitStack | None = None
    device: Device | None = None
    failure: str | None = None

    def get(self, theirs: int | None) -> Device:
        """The service's device, started on first use.

        Raises:
            ServiceError: it cannot start (then or earlier)."""
        if self.failure is not None:
            raise ServiceError(self.failure)
        if self.device is None:
            assert self.stack is not None
            try:
                self.device = self.stack.enter_context(driver_service(theirs))
            except ServiceError as exc:
                self.failure = str(exc)
                raise
        return self.device


def _measure_group(
    group: list[Mode],
    work: Workload,
    settings: Settings,
    service: _Service,
    cpus: tuple[int, int] | None,
    progress: Progress,
    failures: list[tuple[Mode, str]],
    rows: list[Row],
) -> None:
    """Open every mode of ``group``, then measure them in turns (see :func:`run`);
    add their rows to ``rows``.

    A mode that cannot open or fails midway becomes a failure; the others go on."""
    ours, theirs = (None, None) if cpus is None else cpus
    with ExitStack() as opened:
        calls: dict[Mode, Callable[[], object]] = {}
        seconds: dict[Mode, float] = {}
        expected = reference_output(work) if any(m.path == PEER for m in group) else None
        for mode in group:
            started = time.perf_counter()
            try:
                remote = mode.placement == "cross-process" and mode.path not in ("pipe", PEER)
                device = service.get(theirs) if remote else None
                calls[mode] = opened.enter_context(_open_mode(mode, work, device, theirs, expected))
            except (ServiceError, NNError, OSError, peers.PeerError) as exc:  # the others run
                failures.append((mode, str(exc)))
            seconds[mode] = time.perf_counter() - started
        samples: dict[Mode, list[np.ndarray]] = {mode: [] for mode in calls}
        duration = None if settings.duration is None else settings.duration / ROUNDS
        try:
            for turn in range(ROUNDS):
                iterations = None
                if settings.iterations is not None:  # the count split exactly over the turns
                    iterations = settings.iterations // ROUNDS + (
                        turn < settings.iterations % ROUNDS
                    )
                    if iterations == 0:
                        break
                for mode, call in list(calls.items()):
                    progress.step(f"{mode.model} {mode.name}")
                    started = time.perf_counter()
                    try:
                        with _pinned(ours):
                            samples[mode].append(
                                measure(call, iterations, duration, progress.advance)
                            )
                    except (NNError, OSError, peers.PeerError) as exc:
                        failures.append((mode, str(exc)))
                        del calls[mode], samples[mode]
                    seconds[mode] += time.perf_counter() - started
        finally:  # also on Ctrl-C: the turns measured so far make the rows
            for mode, parts in samples.items():
                if parts:
                    all_ns = np.concatenate(parts)
                    stats = LatencyStats.from_ns(mode.name, all_ns)
                    row = Row(
                        mode,
                        work.name,
                        stats,
                        all_ns,
                        seconds[mode],
                        work.request_bytes,
                        work.response_bytes,
                    )
                    rows.append(row)


def reference_output(work: Workload) -> np.ndarray:
    """nnburst's output for ``work`` (in-process, synchronous): what the peers must match."""
    with runtime_paths.execution_path(work, "sync", cpu_device()) as call:
        call()
    return work.output.copy()


def _open_mode(
    mode: Mode,
    work: Workload,
    service_device: Device | None,
    theirs: int | None,
    expected: np.ndarray | None,
) -> AbstractContextManager[Callable[[], object]]:
    """What runs one execution of ``mode``: a context manager yielding the call."""
    if mode.path == "pipe":
        return pipe_peer(work.request_bytes, work.response_bytes, theirs)
    if mode.path == PEER:
        assert expected is not None
        if mode.placement == "in-process":
            return peers.in_process(mode.model, work, expected)
        return peers.via_pipe(mode.model, work, expected, theirs)
    device = service_device if mode.placement == "cross-process" else cpu_device()
    return runtime_paths.execution_path(work, mode.path, device, polling=mode.polling_us or 0)


# -- text --------------------------------------------------------------------------------------

#: The issue's goal for --busy: a service burst at most this many times the service's sync p50.
BUSY_GOAL = 1.2


def _bound(settings: Settings) -> str:
    if settings.duration is not None and settings.iterations is not None:
        return f"{settings.duration:g} s or {settings.iterations} executions, whichever comes first"
    if settings.duration is not None:
        return f"{settings.duration:g} s"
    return f"{settings.iterations} executions"


def intro(settings: Settings) -> str:
    """The two lines before the run: what is about to be timed; :func:`key` follows the
    tables, so that the results come first."""
    return (
        "nnburst bench: one execution through each path of the NNAPI runtime, against a\n"
        f"{BASELINE} round trip of the same bytes; {_bound(settings)} per mode "
        "(the key follows the tables)."
    )


def key(settings: Settings, cpus: tuple[int, int] | None) -> str:
    """What the numbers are, in plain words: printed under the tables, and the note
    at the top of the report page."""
    bound = _bound(settings)
    names = {
        "sync": "compute (sync)",
        "async": "start_compute + wait (async)",
        "burst": "burst_compute (burst)",
    }
    lines = [
        _wrapped(
            "How to read the tables: each model runs through "
            + ", ".join(names[p] for p in PATHS if p in settings.paths)
            + ",",
            "",
            "  ",
        )
    ]
    if "in-process" in settings.placements:
        lines.append(f"  in-process: on the {CPU_DEVICE} CPU driver in this process,")
    if "cross-process" in settings.placements:
        lines.append("  cross-process: on the same CPU driver in a driver service process")
        lines.append(f"    ({service_process.DEVICE_NAME}),")
    if "burst" in settings.paths:
        lines.append(
            "bursts to the service with a polling window of 0 (sleep at once), 50 and 200 us"
        )
        lines.append(
            "  (spin first: the LOW_POWER, FAST_SINGLE_ANSWER and SUSTAINED_SPEED preferences;"
        )
        lines.append("  in-process bursts run on the caller's thread, so they have no window).")
    lines.append(
        "numpy's BLAS is limited to 1 thread here and in the service (as onnxruntime's "
        "intra-op threads)."
    )
    lines += [
        f"Baseline: a {BASELINE} round trip of the same bytes (the model's inputs out,",
        "its outputs back) to another process.  'x Pipe' is a row's p50 over the baseline's",
        "(below 1: faster than the Pipe).  Latencies in microseconds; runs: timed executions,",
        "runs/s: executions a second (from the mean).",
    ]
    if peers_wanted(settings):
        lines += _peers_header()
    if settings.busy:
        lines += [
            f"Busy machine: {default_count()} CPU-bound processes (one per CPU, os.cpu_count()) "
            "spin during",
            "  the Pipe baselines and every cross-process row; the in-process rows run without "
            "them.",
        ]
    lines.append(f"Each mode: {bound}, after a short warm-up;")
    lines.append(
        f"  this thread pinned to CPU {cpus[0]}, the other side to CPU {cpus[1]}."
        if cpus
        else "  no CPU pinning."
    )
    return "\n".join(lines)


def _peers_header() -> list[str]:
    v = peers.versions()
    return [
        f"Peers: onnxruntime {v['onnxruntime']} on the same models and constants (graphs built "
        f"with onnx {v['onnx']}),",
        "  outputs checked against nnburst's before timing (add-mul exactly, conv to "
        f"rtol {peers.RTOL:g}): one",
        "  InferenceSession on the CPU provider, intra_op_num_threads=1, inter_op_num_threads=1,",
        "  sequential execution, default graph optimizations.  'onnxruntime in-process' calls",
        "  session.run; 'onnxruntime via Pipe' sends the input bytes to the same session in a",
        "  worker process over a multiprocessing.Pipe and gets the output bytes back (no pickle).",
        "  The conv peer takes and returns NHWC like nnburst: its graph transposes to NCHW and",
        "  back, inside the timed call.  'x ort' is a row's p50 over onnxruntime's in the same",
        "  placement (the Pipe and the cross-process rows: over 'onnxruntime via Pipe').",
    ]


def table(result: Result) -> str:
    """One table per model, each with its own baseline (and peers' column when they ran),
    and under it the table read in a few sentences; no line wider than WIDTH."""
    blocks = []
    for model in result.settings.models:
        rows = [r for r in result.rows if r.mode.model == model]
        failed = [(m, why) for m, why in result.failures if m.model == model]
        if not rows and not failed:
            continue
        base = result.baseline(model)
        with_peers = any(r.mode.path == PEER for r in rows)
        titles = ["mode", *LATENCY_TITLES, "x Pipe"] + (["x ort"] if with_peers else [])
        shown: list[tuple[tuple[int, int, int, int], list[str]]] = []
        for r in rows:
            cells = [r.mode.name, *latency_cells(r.stats), ratio_cell(ratio(r, base))]
            if with_peers:
                cells.append(ratio_cell(peer_ratio(r, result)))
            shown.append((_display_order(r.mode), cells))
        for m, why in failed:
            reason = why.strip().splitlines()[0] if why.strip() else "failed"
            shown.append((_display_order(m), [m.name, f"failed: {reason}"]))
        work = rows[0] if rows else None
        title = (
            f"{work.workload} ({work.bytes_in} bytes in, {work.bytes_out} bytes out)"
            if work
            else model
        )
        lines = [title, *aligned(titles, [cells for _, cells in sorted(shown, key=_first)])]
        reading = _reading(result, rows, base)
        if reading:
            lines.append(reading)
        if result.peers_missing is not None:
            lines.append(peers.NOT_INSTALLED)
        if model == "add-mul":
            lines += _facade_lines(result)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _facade_lines(result: Result) -> list[str]:
    failed = [result.facades_failed] if result.facades_failed else []
    return facades.lines(result.facades) + failed


def _first(item: tuple[tuple[int, int, int, int], list[str]]) -> tuple[int, int, int, int]:
    return item[0]


def _reading(result: Result, rows: list[Row], base: Row | None) -> str:
    """The table in a few sentences: the fastest cross-process burst against the
    synchronous socket path and the Pipe baseline; nnburst against onnxruntime; with
    ``busy``, the slowest service burst against the service's sync path."""
    bursts = [r for r in rows if r.mode.path == "burst" and r.mode.placement == "cross-process"]
    sync = _row(rows, "sync", "cross-process")
    best = min(bursts, key=lambda r: r.stats.p50_us) if bursts else None
    sentences = []
    if best is not None:
        parts = [
            compared(best.stats.p50_us, other.stats.p50_us, name)
            for other, name in ((sync, "sync cross-process"), (base, "the Pipe baseline"))
            if other is not None
        ]
        if parts:
            sentences.append(f"{best.mode.name} is " + " and ".join(parts) + " (p50).")
    ort = []
    local = _row(rows, "sync", "in-process")
    for ours, placement in ((local, "in-process"), (best, "cross-process")):
        peer = _row(rows, PEER, placement)
        if ours is not None and peer is not None:
            ort.append(
                f"{ours.mode.name} is {compared(ours.stats.p50_us, peer.stats.p50_us, peer.mode.name)}"
            )
    if ort:
        sentences.append("Against onnxruntime (p50): " + "; ".join(ort) + ".")
    if result.settings.busy and bursts and sync is not None:
        worst = max(bursts, key=lambda r: r.stats.p50_us)
        times = worst.stats.p50_us / sync.stats.p50_us
        verdict = "met" if times <= BUSY_GOAL else "NOT met"
        sentences.append(
            f"Busy: the slowest service burst ({worst.mode.name}) is {times:.2f}x the service's "
            f"sync path (p50; goal at most {BUSY_GOAL:g}x: {verdict})."
        )
    if not sentences:
        return ""
    # Each sentence hangs under the first's text.
    lines = [_wrapped(sentences[0], "Reading: ", READING_INDENT)]
    lines += [_wrapped(sentence, READING_INDENT, READING_INDENT) for sentence in sentences[1:]]
    return "\n".join(lines)


READING_INDENT = " " * len("Reading: ")


def _wrapped(text: str, first: str, then: str) -> str:
    """``text`` in lines of at most WIDTH, mode names kept whole."""
    return textwrap.fill(
        text, WIDTH, initial_indent=first, subsequent_indent=then, break_on_hyphens=False
    )


def _row(rows: list[Row], path: str, placement: str) -> Row | None:
    return next((r for r in rows if r.mode.path == path and r.mode.placement == placement), None)


def _display_order(mode: Mode) -> tuple[int, int, int, int]:
    if mode.path == "pipe":
        return (0, 0, 0, 0)
    return (
        1,
        PLACEMENTS.index(mode.placement),
        ALL_PATHS.index(mode.path),
        mode.polling_us or 0,
    )


def ratio(row: Row, base: Row | None) -> float | None:
    """A row's p50 over its baseline's (None without a baseline)."""
    return None if base is None else row.stats.p50_us / base.stats.p50_us


def peer_ratio(row: Row, result: Result) -> float | None:
    """A row's p50 over the onnxruntime peer's in the same placement (the Pipe baseline and
    the cross-process rows: onnxruntime via Pipe); None without that peer row."""
    peer = result.peer(row.mode.model, row.mode.placement)
    return None if peer is None else row.stats.p50_us / peer.stats.p50_us


def cpu_device() -> Device:
    """The in-process reference CPU device, named explicitly: a running service must not
    move the "in-process" rows elsewhere."""
    return get_device(CPU_DEVICE)


def summary(result: Result) -> str:
    done = f"{len(result.rows)} modes in {result.seconds:.1f} s"
    if result.failures:
        failed = "\n".join(
            _wrapped(f"{m.model} {m.name}: {why}", "  ", "    ") for m, why in result.failures
        )
        done = f"{done}; {len(result.failures)} modes failed:\n{failed}"
    if result.interrupted:
        done = f"interrupted: {done} (the rows above are the ones that finished)"
    if result.load_pids:
        pids = ", ".join(str(pid) for pid in result.load_pids)
        done += "\n" + _wrapped(
            f"busy: {default_count()} CPU-bound processes at a time, {len(result.load_pids)} "
            f"started in all (pids {pids}); all stopped",
            "",
            "  ",
        )
    return done
