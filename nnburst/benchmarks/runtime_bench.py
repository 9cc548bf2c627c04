"""``nnburst bench``'s default run: the runtime's execution paths against a Pipe baseline.

Every mode is one way an app gets one execution done, timed call by call:
``sync``/``async``/``burst`` (see :mod:`.runtime_paths`) on the in-process
CPU reference driver and on the same driver behind a driver service process,
bursts with polling windows 0, 50 and 200 µs (the LOW_POWER,
FAST_SINGLE_ANSWER and SUSTAINED_SPEED preferences).  The baseline moves the same bytes
over a ``multiprocessing.Pipe`` (:mod:`.pipe_baseline`), so a row's ratio
says what the runtime costs over the plainest IPC a Python app could use.

Modes run one after another, bounded by a duration or a count each.  The
baselines run first (before the service and the runtime start any thread),
then the in-process modes, then the cross-process ones against one service.
A Ctrl-C ends the run with the rows finished so far, after every process,
thread and shared-memory segment it opened is closed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..cpu.driver import DEVICE_NAME as CPU_DEVICE
from ..devices import Device, get_device
from ..errors import NNError
from . import runtime_paths, service_process
from .pipe_baseline import pipe_peer
from .progress import Progress
from .runtime_paths import MODELS, PATHS, Workload
from .service_process import ServiceError, driver_service
from .stats import LatencyStats

PLACEMENTS = ("in-process", "cross-process")
POLLING_US = (0, 50, 200)  # LOW_POWER, FAST_SINGLE_ANSWER, SUSTAINED_SPEED
BASELINE = "multiprocessing.Pipe"
DEFAULT_DURATION_S = 0.9


@dataclass(frozen=True)
class Mode:
    """One row of the table: a model through one path, in one place."""

    model: str  # a key of runtime_paths.MODELS
    path: str  # sync, async, burst, or "pipe" for the baseline
    placement: str  # in-process or cross-process
    polling_us: int | None = None  # bursts only

    @property
    def name(self) -> str:
        if self.path == "pipe":
            return BASELINE
        name = f"{self.path} {self.placement}"
        return name if self.polling_us is None else f"{name} poll {self.polling_us}us"


@dataclass(frozen=True)
class Settings:
    """What one run measures; the defaults are the no-argument ``nnburst bench``."""

    models: tuple[str, ...] = MODELS
    conv_size: int = runtime_paths.DEFAULT_CONV_SIZE
    iterations: int | None = None  # per mode; None: bounded by duration only
    duration: float | None = DEFAULT_DURATION_S  # seconds per mode; None: bounded by count only
    paths: tuple[str, ...] = PATHS
    placements: tuple[str, ...] = PLACEMENTS
    pin: bool = False  # pinning the caller starves in-process compute that wakes helper threads


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

    def baseline(self, model: str) -> Row | None:
        return next((r for r in self.rows if r.mode.model == model and r.mode.path == "pipe"), None)


def plan(settings: Settings) -> list[Mode]:
    """The modes in the order they run: baselines, in-process, cross-process."""
    modes = [Mode(model, "pipe", "cross-process") for model in settings.models]
    for placement in PLACEMENTS:
        if placement not in settings.placements:
            continue
        for model in settings.models:
            for path in PATHS:
                if path not in settings.paths:
                    continue
                if path == "burst":
                    modes += [Mode(model, path, placement, polling) for polling in POLLING_US]
                else:
                    modes.append(Mode(model, path, placement))
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


def run(settings: Settings, progress: Progress | None = None) -> Result:
    """Run every mode of ``settings``; a KeyboardInterrupt ends the run early, cleanly."""
    cpus = pin_cpus(settings.pin)
    ours, theirs = (None, None) if cpus is None else cpus
    modes = plan(settings)
    workloads: dict[str, Workload] = {}
    rows: list[Row] = []
    started = time.perf_counter()
    interrupted = False
    progress = progress or Progress(0, enabled=False)
    failures: list[tuple[Mode, str]] = []
    service_failure: str | None = None
    try:
        with ExitStack() as services:
            service_device = None
            for mode in modes:
                progress.step(f"{mode.model} {mode.name}")
                remote = mode.placement == "cross-process" and mode.path != "pipe"
                if remote and service_failure is not None:
                    failures.append((mode, service_failure))
                    continue
                try:
                    work = workloads.get(mode.model)
                    if work is None:
                        work = workloads[mode.model] = runtime_paths.workload(
                            mode.model, settings.conv_size
                        )
                    if remote and service_device is None:
                        service_device = services.enter_context(driver_service(theirs))
                    rows.append(
                        _measure_mode(mode, work, settings, service_device, ours, theirs, progress)
                    )
                except ServiceError as exc:  # no service: no cross-process mode can run
                    service_failure = str(exc)
                    failures.append((mode, service_failure))
                except (NNError, OSError) as exc:  # this mode failed; the others still run
                    failures.append((mode, str(exc)))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
    return Result(settings, rows, interrupted, time.perf_counter() - started, cpus, failures)


def _measure_mode(
    mode: Mode,
    work: Workload,
    settings: Settings,
    service_device: Device | None,
    ours: int | None,
    theirs: int | None,
    progress: Progress,
) -> Row:
    started = time.perf_counter()
    if mode.path == "pipe":
        opened = pipe_peer(work.request_bytes, work.response_bytes, theirs)
    else:
        device = service_device if mode.placement == "cross-process" else cpu_device()
        opened = runtime_paths.execution_path(work, mode.path, device, polling=mode.polling_us or 0)
    with opened as call, _pinned(ours):
        samples = measure(call, settings.iterations, settings.duration, progress.advance)
    stats = LatencyStats.from_ns(mode.name, samples)
    return Row(
        mode,
        work.name,
        stats,
        samples,
        time.perf_counter() - started,
        work.request_bytes,
        work.response_bytes,
    )


# -- text --------------------------------------------------------------------------------------


def header(settings: Settings, cpus: tuple[int, int] | None) -> str:
    """What the numbers are, in plain words, before they come."""
    if settings.duration is not None and settings.iterations is not None:
        bound = (
            f"{settings.duration:g} s or {settings.iterations} executions, whichever comes first"
        )
    elif settings.duration is not None:
        bound = f"{settings.duration:g} s"
    else:
        bound = f"{settings.iterations} executions"
    names = {
        "sync": "compute (sync)",
        "async": "start_compute + wait (async)",
        "burst": "burst_compute (burst)",
    }
    lines = [
        "nnburst bench: how long one execution takes through each path of the NNAPI runtime.",
        "Each model runs through "
        + ", ".join(names[p] for p in PATHS if p in settings.paths)
        + ",",
    ]
    if "in-process" in settings.placements:
        lines.append(f"  in-process: on the {CPU_DEVICE} CPU driver in this process,")
    if "cross-process" in settings.placements:
        lines.append("  cross-process: on the same CPU driver in a driver service process")
        lines.append(f"    ({service_process.DEVICE_NAME}),")
    if "burst" in settings.paths:
        lines.append(
            "bursts with a polling window of 0 (sleep at once), 50 and 200 us (spin first;"
        )
        lines.append("  the LOW_POWER, FAST_SINGLE_ANSWER and SUSTAINED_SPEED preferences).")
    lines += [
        f"Baseline: a {BASELINE} round trip of the same bytes (the model's inputs out,",
        "its outputs back) to another process.  'x Pipe' is a row's p50 over the baseline's",
        "(below 1: faster than the Pipe).  Latencies in microseconds; exec/s from the mean.",
        f"Each mode: {bound}, after a short warm-up; "
        + (
            f"this thread pinned to CPU {cpus[0]}, the other side to CPU {cpus[1]}."
            if cpus
            else "no CPU pinning."
        ),
    ]
    return "\n".join(lines)


def table(result: Result) -> str:
    """One table per model, each with its own baseline."""
    blocks = []
    for model in result.settings.models:
        rows = [r for r in result.rows if r.mode.model == model]
        if not rows:
            continue
        base = result.baseline(model)
        width = max(len(r.mode.name) for r in rows)
        top = (
            f"{'mode':<{width}}  {'runs':>7} {'p50':>9} {'p90':>9} {'p99':>9} {'p99.9':>9} "
            f"{'exec/s':>9} {'x Pipe':>7}"
        )
        first = rows[0]
        title = f"{first.workload} ({first.bytes_in} bytes in, {first.bytes_out} bytes out)"
        lines = [title, top, "-" * len(top)]
        for r in sorted(rows, key=_display_order):
            s = r.stats
            times = ratio(r, base)
            shown = f"{'-':>7}" if times is None else f"{times:7.2f}"
            lines.append(
                f"{r.mode.name:<{width}}  {s.count:7d} {s.p50_us:9.1f} {s.p90_us:9.1f} "
                f"{s.p99_us:9.1f} {s.p999_us:9.1f} {s.per_second:9.0f} {shown}"
            )
        reading = _reading(rows, base)
        if reading:
            lines.append(reading)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _reading(rows: list[Row], base: Row | None) -> str:
    """The table in one line: the fastest cross-process burst against the synchronous
    socket path and the Pipe baseline."""
    bursts = [r for r in rows if r.mode.path == "burst" and r.mode.placement == "cross-process"]
    sync = next(
        (r for r in rows if r.mode.path == "sync" and r.mode.placement == "cross-process"), None
    )
    if not bursts:
        return ""
    best = min(bursts, key=lambda r: r.stats.p50_us)
    parts = []
    if sync is not None:
        parts.append(
            f"{sync.stats.p50_us / best.stats.p50_us:.1f}x faster than the sync socket path"
        )
    if base is not None:
        parts.append(f"{best.stats.p50_us / base.stats.p50_us:.2f}x the Pipe baseline")
    if not parts:
        return ""
    return f"Reading: {best.mode.name} is " + ", ".join(parts) + " (p50)."


def _display_order(row: Row) -> tuple[int, int, int, int]:
    mode = row.mode
    if mode.path == "pipe":
        return (0, 0, 0, 0)
    return (1, PLACEMENTS.index(mode.placement), PATHS.index(mode.path), mode.polling_us or 0)


def ratio(row: Row, base: Row | None) -> float | None:
    """A row's p50 over its baseline's (None without a baseline)."""
    return None if base is None else row.stats.p50_us / base.stats.p50_us


def cpu_device() -> Device:
    """The in-process reference CPU device, named explicitly: a running service must not
    move the "in-process" rows elsewhere."""
    return get_device(CPU_DEVICE)


def summary(result: Result) -> str:
    done = f"{len(result.rows)} modes in {result.seconds:.1f} s"
    if result.failures:
        failed = "\n".join(f"  {m.model} {m.name}: {why}" for m, why in result.failures)
        done = f"{done}; {len(result.failures)} modes failed:\n{failed}"
    if result.interrupted:
        return f"interrupted: {done} (the rows above are the ones that finished)"
    return done
