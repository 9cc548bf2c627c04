"""Many apps, one driver service: ``nnburst bench clients``.

Each client is its own process (one connection, as an app has) running
bursts of the add+mul model on the service's ``sample-all`` device for a
fixed time.  All start together (a go file they poll for, once every one has
its burst open); each reports its burst count and latencies as one JSON line.
The table compares a service in one process with one worker per core, for
each client count: total bursts per second, and the p50 / p99 latency over
every burst of every client.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...service.launch import child_python, spawn, start_service, stop_process
from ...service.workers import default_worker_count
from .stats import aligned

DEFAULT_CLIENTS = (1, 8, 32)
DEFAULT_SECONDS = 2.0
#: How long all clients together may take to import, connect and compile.
READY_TIMEOUT_S = 120.0
DEVICE = "nnburst-sample-all"


@dataclass
class Result:
    clients: int
    workers: int
    bursts_per_s: float
    p50_us: float
    p99_us: float


def _client(socket_path: str, go_file: str, seconds: float) -> None:
    """One app: open a burst, say so, wait for the go file, run bursts for ``seconds``."""
    os.environ["NNBURST_SERVICES"] = socket_path
    import nnburst as nn

    from .runtime_paths import add_mul_model

    work = add_mul_model()
    device = next(d for d in nn.get_devices() if d.name == DEVICE)
    compilation = nn.Compilation(work.model, devices=[device])
    compilation.finish()
    with compilation, nn.Burst(compilation) as burst, nn.Execution(compilation) as execution:
        execution.set_reusable(True)
        for i, value in enumerate(work.inputs):
            execution.set_input(i, value)
        execution.set_output(0, work.output)
        execution.burst_compute(burst)  # the first one maps the memories
        print("ready", flush=True)
        while not os.path.exists(go_file):
            time.sleep(0.001)
        samples = []
        end = time.perf_counter() + seconds
        while (now := time.perf_counter()) < end:
            execution.burst_compute(burst)
            samples.append(time.perf_counter() - now)
    print(json.dumps({"samples_us": [round(s * 1e6, 1) for s in samples]}), flush=True)


def _run_clients(socket_path: str, count: int, seconds: float, workdir: str) -> list[float]:
    """Every burst latency (µs) of ``count`` clients run together."""
    go_file = f"{socket_path}.go-{count}"  # one per service and client count
    command = child_python(
        "nnburst.tools.benchmarks.clients", "--client", socket_path, go_file, str(seconds)
    )
    clients = [spawn(command, stdout=subprocess.PIPE, stderr=None) for _ in range(count)]
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        for client in clients:
            assert client.stdout is not None
            ready, _, _ = select.select(
                [client.stdout], [], [], max(0, deadline - time.monotonic())
            )
            if not ready or client.stdout.readline().strip() != "ready":
                raise RuntimeError("a benchmark client did not open its burst")
        open(go_file, "w").close()
        samples: list[float] = []
        for client in clients:
            out, _ = client.communicate(timeout=seconds + READY_TIMEOUT_S)
            samples += json.loads(out)["samples_us"]
        return samples
    finally:
        for client in clients:
            stop_process(client)


def run(
    clients: Sequence[int] = DEFAULT_CLIENTS,
    seconds: float = DEFAULT_SECONDS,
    workers: Sequence[int] | None = None,
) -> list[Result]:
    """For each worker count (default: 1 and one per core) and client count, one measurement."""
    worker_counts = list(workers or dict.fromkeys((1, default_worker_count())))
    results = []
    with tempfile.TemporaryDirectory(prefix="nnburst-clients-") as workdir:
        for count in worker_counts:
            path = os.path.join(workdir, f"service-{count}.sock")
            service, stderr = start_service(path, ["--workers", str(count)])
            try:
                for n in clients:
                    samples = np.array(_run_clients(path, n, seconds, workdir))
                    results.append(
                        Result(
                            n,
                            count,
                            len(samples) / seconds,
                            float(np.percentile(samples, 50)),
                            float(np.percentile(samples, 99)),
                        )
                    )
            finally:
                stop_process(service)
                stderr.close()
    return results


def table(results: Sequence[Result]) -> str:
    """The other bench tables' words: a run is one burst execution, runs/s all clients' sum."""
    titles = ["clients", "service workers", "runs/s (all clients)", "p50 µs", "p99 µs"]
    rows = [
        [
            str(r.clients),
            str(r.workers),
            f"{r.bursts_per_s:.0f}",
            f"{r.p50_us:.1f}",
            f"{r.p99_us:.1f}",
        ]
        for r in results
    ]
    return "\n".join(aligned(titles, rows))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nnburst.tools.benchmarks.clients")
    parser.add_argument("--client", nargs=3, metavar=("SOCKET", "GO_FILE", "SECONDS"))
    args = parser.parse_args(argv)
    if args.client:
        socket_path, go_file, seconds = args.client
        _client(socket_path, go_file, float(seconds))
        return 0
    print(table(run()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
