"""Burst execution against execute_synchronously, in-process and cross-process,
polling window 0 and 50 µs (the same peers as ``nnburst bench burst``)."""

from __future__ import annotations

import pytest

from nnburst.tools.benchmarks import burst_latency


@pytest.mark.parametrize("mode", list(burst_latency.MODES))
def test_burst_round_trip(benchmark, mode):
    with burst_latency.MODES[mode]() as round_trip:
        benchmark.pedantic(round_trip, rounds=500, iterations=4, warmup_rounds=50)
