"""A model's in-process p50 on 1 and on more kernel threads, against LiteRT.

Issue 27: one kernel thread by default, more as an option.  The run builds
one nnburst Runner per thread count (``threads=N``: its convolutions split
by output rows, ``nnburst/cpu/threads.py``) and, when ai_edge_litert is
installed, one LiteRT Interpreter per count (``num_threads=N``, XNNPACK),
then times them interleaved: round after round, each variant runs a short
burst of calls, so a neighbour's load falls on all of them alike.  Prints
each variant's p50 and p90 (µs), its p50 against nnburst's on one thread,
and the process's CPU time per call (every thread's: a second thread's
hand-offs and spinning show there even when the machine is too busy for
the wall time to gain).

    python bench/threads.py /tmp/perf2/pose_detection.tflite --threads 1 2
    python bench/threads.py model.tflite --min-work 0 100000 400000 --threads 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from nnburst.cpu import threads as kernel_threads
from nnburst.tflite import Runner


def _litert(path: str, count: int) -> Callable[[list[np.ndarray]], object] | None:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return None
    interpreter = Interpreter(model_path=path, num_threads=count)
    interpreter.allocate_tensors()
    inputs = [d["index"] for d in interpreter.get_input_details()]

    def run(feeds: list[np.ndarray]) -> object:
        for index, value in zip(inputs, feeds):
            interpreter.set_tensor(index, value)
        interpreter.invoke()
        return None

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a .tflite file with fixed input shapes")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--min-work",
        type=int,
        nargs="+",
        default=[kernel_threads.MIN_WORK],
        help="the split threshold(s) to try for each count above 1 (multiply-adds)",
    )
    parser.add_argument("--slices", type=int, default=kernel_threads.SLICES)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=10, help="calls per variant per round")
    parser.add_argument("--no-litert", action="store_true")
    args = parser.parse_args()

    kernel_threads.SLICES = args.slices
    variants: dict[str, Callable[[list[np.ndarray]], object]] = {}
    runners = []
    for count in args.threads:
        for min_work in args.min_work if count > 1 else [kernel_threads.MIN_WORK]:
            kernel_threads.MIN_WORK = min_work  # read when the plans are built
            runner = Runner(args.model, threads=count, cache_dir=None)
            runners.append(runner)
            name = f"nnburst threads={count}" + (
                f" min_work={min_work}" if count > 1 and len(args.min_work) > 1 else ""
            )
            variants[name] = lambda feeds, r=runner: r(*feeds)
    if not args.no_litert:
        for count in args.threads:
            run = _litert(args.model, count)
            if run is not None:
                variants[f"LiteRT num_threads={count}"] = run
    rng = np.random.default_rng(0)
    spec = runners[0].inputs
    feeds = [
        rng.uniform(0, 1, s.shape).astype(s.dtype)
        if np.issubdtype(s.dtype, np.floating)
        else rng.integers(-5, 5, s.shape).astype(s.dtype)
        for s in spec
    ]
    for run in variants.values():  # warm up
        for _ in range(5):
            run(feeds)
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, float] = dict.fromkeys(variants, 0.0)  # process CPU seconds, all threads
    for _ in range(args.rounds):
        for name, run in variants.items():
            used = time.process_time()
            for _ in range(args.calls):
                start = time.perf_counter_ns()
                run(feeds)
                times[name].append((time.perf_counter_ns() - start) / 1000.0)
            cpu[name] += time.process_time() - used
    base = statistics.median(next(iter(times.values())))
    load = os.getloadavg()[0]
    print(f"{os.path.basename(args.model)}: {args.rounds} rounds x {args.calls} calls, "
          f"load average {load:.1f} on {os.cpu_count()} cores")  # fmt: skip
    for name, values in times.items():
        p50 = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1]
        cpu_us = cpu[name] / len(values) * 1e6
        print(
            f"  {name:28s} p50 {p50:8.0f} us  p90 {p90:8.0f} us  {p50 / base:5.2f}x  "
            f"CPU {cpu_us:8.0f} us/call"
        )
    for runner in runners:
        runner.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
