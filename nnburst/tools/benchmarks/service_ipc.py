"""Burst versus synchronous execution through a driver service process, beside the raw FMQ.

The seeds' ADD+MUL 3×4 model (:func:`.runtime_paths.add_mul_model`) is
compiled for ``nnburst-sample-all`` in a ``nnburst serve``
process and executed through the public runtime, timed call by call:

* ``sync (socket)``: ``Execution.compute``, one EXECUTE frame each way over
  the service's Unix socket, pools passed as fds;
* ``burst poll 0us`` / ``burst poll 50us``: ``burst_compute`` over the
  burst's two FMQs (LOW_POWER: sleep on the futex at once; otherwise spin
  50 µs first);
* ``fmq futex`` / ``fmq poll 50us``: the raw FMQ ping-pong of a 256-byte
  message between two processes (:func:`.fmq_pingpong.fmq_peer`), the floor
  a burst can approach;
* ``in-process sync``: ``compute`` on the in-process CPU reference device,
  no IPC at all: what the runtime and the arithmetic cost by themselves.

The FMQ rows run first (their peer is forked, before any runtime thread
exists), then one service is started for the runtime rows.  The app runs on
CPU 0 and the peer (echo process or service) on CPU 1 when there are two.
Issue 6's goals: burst ≥ 3× faster than sync at p50, and within 2× of the
raw FMQ round trip.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import numpy as np

from ...devices import get_device
from .fmq_pingpong import POLL_NS, fmq_peer, timed
from .runtime_paths import add_mul_model, execution_path
from .service_process import driver_service
from .stats import LatencyStats, latency_table

SYNC = "sync (socket)"
BURST_0 = "burst poll 0us"
BURST_50 = "burst poll 50us"
FMQ_0 = "fmq futex"
FMQ_50 = "fmq poll 50us"
LOCAL = "in-process sync"
MODES = (FMQ_0, FMQ_50, LOCAL, SYNC, BURST_0, BURST_50)
DEFAULT_ITERATIONS = 5000


@contextmanager
def _affinity(cpu: int | None) -> Iterator[None]:
    """Pin this process to ``cpu`` for the block (fmq_peer pins it too: restored after)."""
    previous = os.sched_getaffinity(0)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


def _cpus() -> tuple[int | None, int | None]:
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[0], cpus[1]) if len(cpus) > 1 else (None, None)


@contextmanager
def service_modes() -> Iterator[
    dict[str, Callable[[], AbstractContextManager[Callable[[], object]]]]
]:
    """A service for the run; yields mode name → context manager of one execution."""
    work = add_mul_model()
    _, theirs = _cpus()
    with driver_service(theirs) as device:
        yield {
            SYNC: lambda: execution_path(work, "sync", device),
            BURST_0: lambda: execution_path(work, "burst", device, polling=False),
            BURST_50: lambda: execution_path(work, "burst", device, polling=True),
        }


FMQ_MODES: dict[str, Callable[[], AbstractContextManager[Callable[[], object]]]] = {
    FMQ_0: lambda: fmq_peer(spin_ns=0),
    FMQ_50: lambda: fmq_peer(spin_ns=POLL_NS),
}


def run(iterations: int = DEFAULT_ITERATIONS) -> list[LatencyStats]:
    """One row per mode, all in this run, in :data:`MODES` order."""
    ours, _ = _cpus()
    rows = []
    with _affinity(None):  # fmq_peer pins us to CPU 0; give the affinity back afterwards
        for name, open_peer in FMQ_MODES.items():
            with open_peer() as round_trip:
                rows.append(LatencyStats.from_ns(name, timed(round_trip, iterations)))
    reference = get_device("nnburst-reference")
    with execution_path(add_mul_model(), "sync", reference) as execute, _affinity(ours):
        rows.append(LatencyStats.from_ns(LOCAL, timed(execute, iterations)))
    with service_modes() as modes:
        for name, open_path in modes.items():
            with open_path() as execute, _affinity(ours):
                rows.append(LatencyStats.from_ns(name, timed(execute, iterations)))
    return rows


def goals(rows: list[LatencyStats]) -> list[str]:
    """The issue's two ratios at p50, per polling window."""
    p50 = {r.name: r.p50_us for r in rows}
    lines = []
    for burst, fmq in ((BURST_0, FMQ_0), (BURST_50, FMQ_50)):
        speedup = p50[SYNC] / p50[burst]
        over_fmq = p50[burst] / p50[fmq]
        lines.append(
            f"{burst}: {speedup:.1f}x faster than sync (goal >= 3x: {'met' if speedup >= 3 else 'NOT met'}); "
            f"{over_fmq:.1f}x {fmq} (goal <= 2x: {'met' if over_fmq <= 2 else 'NOT met'})"
        )
    return lines


def spread(runs: list[list[LatencyStats]]) -> list[str]:
    """p50 per mode across runs: median [min .. max]."""
    lines = []
    for k, name in enumerate(MODES):
        values = np.array([rows[k].p50_us for rows in runs])
        lines.append(
            f"{name:<16} p50 {np.median(values):8.2f} µs  [{values.min():.2f} .. {values.max():.2f}]"
        )
    return lines


def main(iterations: int = DEFAULT_ITERATIONS, repeats: int = 3) -> None:
    """Print the table of each run, the goals, and the run-to-run spread of p50."""
    runs = []
    for n in range(repeats):
        rows = run(iterations)
        runs.append(rows)
        print(
            f"run {n + 1}/{repeats}: ADD+MUL 3x4 through a driver service, {iterations} calls per mode"
        )
        print(latency_table(rows, baseline=SYNC, ratio_title="x sync"))
        print("\n".join(goals(rows)))
        print()
    if repeats > 1:
        print(f"p50 over {repeats} runs, median [min .. max]:")
        print("\n".join(spread(runs)))


if __name__ == "__main__":
    main()
