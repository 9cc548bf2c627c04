"""ADD+MUL 3x4 through a driver service process: sync (socket) vs burst_compute
(polling windows 0 and 50 µs), beside the raw FMQ round trip; the same runs as
nnburst/tools/benchmarks/service_ipc.py."""

from __future__ import annotations

import pytest

from nnburst.tools.benchmarks import service_ipc


@pytest.mark.parametrize("mode", list(service_ipc.FMQ_MODES))
def test_fmq_round_trip(benchmark, mode):
    with service_ipc._affinity(None), service_ipc.FMQ_MODES[mode]() as round_trip:
        benchmark.pedantic(round_trip, rounds=2000, iterations=1, warmup_rounds=100)


@pytest.fixture(scope="module")
def service_modes():
    with service_ipc.service_modes() as modes:
        yield modes


@pytest.mark.parametrize("mode", [service_ipc.SYNC, service_ipc.BURST_0, service_ipc.BURST_50])
def test_service_execution(benchmark, service_modes, mode):
    with service_modes[mode]() as execute:
        benchmark.pedantic(execute, rounds=1000, iterations=1, warmup_rounds=50)
