"""The runtime's execution paths, as ``nnburst bench`` runs them (nnburst/tools/benchmarks/runtime_bench.py):
the seeds' ADD+MUL model and a mid-size convolution through sync, async and burst,
in-process and against a driver service process, bursts with polling windows 0
and 50 µs, and the multiprocessing.Pipe baseline of the same bytes."""

from __future__ import annotations

import pytest

from nnburst.tools.benchmarks import runtime_paths
from nnburst.tools.benchmarks.pipe_baseline import pipe_peer
from nnburst.tools.benchmarks.runtime_bench import Mode, Settings, plan
from nnburst.tools.benchmarks.service_process import driver_service

MODES = [mode for mode in plan(Settings()) if mode.path != "pipe"]


@pytest.fixture(scope="module")
def service_device():
    """One driver service for every cross-process benchmark of this module."""
    with driver_service() as device:
        yield device


@pytest.fixture(scope="module")
def workloads():
    return {name: runtime_paths.workload(name) for name in runtime_paths.MODELS}


def _rounds(model: str) -> int:
    return 300 if model == "add-mul" else 30


@pytest.mark.parametrize("mode", MODES, ids=lambda m: f"{m.model}-{m.name.replace(' ', '-')}")
def test_execution_path(benchmark, request, workloads, mode: Mode):
    device = (
        request.getfixturevalue("service_device") if mode.placement == "cross-process" else None
    )
    work = workloads[mode.model]
    with runtime_paths.execution_path(
        work, mode.path, device, polling=mode.polling_us != 0
    ) as execute:
        benchmark.pedantic(execute, rounds=_rounds(mode.model), iterations=1, warmup_rounds=5)


@pytest.mark.parametrize("model", runtime_paths.MODELS)
def test_pipe_baseline(benchmark, workloads, model: str):
    work = workloads[model]
    with pipe_peer(work.request_bytes, work.response_bytes) as round_trip:
        benchmark.pedantic(round_trip, rounds=_rounds(model), iterations=1, warmup_rounds=5)
