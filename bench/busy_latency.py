"""In-process latency of a model file on a quiet machine and beside busy ones.

Issue 26's goal: beside two processes running numpy matrix products, the
slowest 30-call window's p50 stays within 2x the quiet p50.  The run times
the model's in-process Runner quietly, then again while two other processes
multiply 512x512 float64 matrices in a loop (each with numpy's default BLAS
threads, as an app's neighbours would), and prints both p50s, every busy
window's p50 and the worst one's ratio to the quiet p50.

Where the neighbours run matters as much as what they run.  Linux's
autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) shares
the CPUs fairly between sessions first, then between the threads of one
session.  Other programs started from their own terminal or service manager
are other sessions (``--neighbours-session own``, the default): the model's
one thread then keeps its session's share of the machine.  Started from the
bench's own session (``shared``), the neighbours' BLAS threads and the
model's thread split one share thread by thread, so the model gets about
2 cores / (1 + the neighbours' threads).  Both are worth a row; the run says
which it measured.

    python bench/busy_latency.py /path/to/face_detection_short_range.tflite
    python bench/busy_latency.py MODEL --neighbours-session shared
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import numpy as np

WINDOW = 30
#: Each neighbour: float64 matrix products, forever, until killed.
NEIGHBOUR = (
    "import numpy as np\n"
    "a = np.random.default_rng(0).standard_normal((512, 512))\n"
    "while True:\n"
    "    a = a @ a\n"
    "    a /= np.abs(a).max() or 1.0\n"
)


def _timed(runner, feeds: list[np.ndarray], calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        runner(*feeds)
        times.append((time.perf_counter_ns() - start) / 1000.0)
    return times


def _autogroup() -> str:
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            enabled = f.read().strip() == "1"
    except OSError:
        return "autogroup unknown"
    return "autogroup on" if enabled else "autogroup off (sessions make no difference)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a .tflite or .onnx file with fixed input shapes")
    parser.add_argument("--calls", type=int, default=600, help="calls per phase (default 600)")
    parser.add_argument("--neighbours", type=int, default=2, help="busy processes (default 2)")
    parser.add_argument(
        "--neighbours-session",
        choices=("own", "shared"),
        default="own",
        help="own: each neighbour in a session of its own, as another program is (default); "
        "shared: in this bench's session",
    )
    args = parser.parse_args()

    if args.model.endswith(".onnx"):
        from nnburst.onnx import Runner
    else:
        from nnburst.tflite import Runner

    runner = Runner(args.model)
    rng = np.random.default_rng(0)
    feeds = [
        rng.standard_normal(spec.shape).astype(spec.dtype)
        if np.issubdtype(spec.dtype, np.floating)
        else rng.integers(-5, 5, spec.shape).astype(spec.dtype)
        for spec in runner.inputs
    ]
    _timed(runner, feeds, 50)  # warm up: prepare, caches, BLAS threads
    quiet = statistics.median(_timed(runner, feeds, args.calls))
    neighbours = [
        subprocess.Popen(
            [sys.executable, "-c", NEIGHBOUR],
            start_new_session=args.neighbours_session == "own",
        )
        for _ in range(args.neighbours)
    ]
    try:
        time.sleep(1.0)  # the neighbours are computing
        busy = _timed(runner, feeds, args.calls)
    finally:
        for process in neighbours:
            process.kill()
            process.wait()
        runner.close()
    windows = [
        statistics.median(busy[i : i + WINDOW]) for i in range(0, len(busy) - WINDOW + 1, WINDOW)
    ]
    print(f"model: {args.model}")
    print(f"neighbours: {args.neighbours}, session: {args.neighbours_session}, {_autogroup()}")
    print(f"quiet p50: {quiet:.1f} us; busy p50: {statistics.median(busy):.1f} us")
    print("busy windows' p50 (us): " + " ".join(f"{w:.0f}" for w in windows))
    print(f"slowest {WINDOW}-call window p50 / quiet p50: {max(windows) / quiet:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
