"""Cross-process round trip of a 256-byte message: FMQ modes against baselines.

Every benchmark drives the same peers as ``nnburst bench fmq`` (see
nnburst/tools/benchmarks/fmq_pingpong.py), so the two report comparable numbers.
"""

from __future__ import annotations

import pytest

from nnburst.tools.benchmarks import fmq_pingpong


@pytest.mark.parametrize("mode", list(fmq_pingpong.ROUND_TRIP_MODES))
def test_round_trip(benchmark, mode):
    with fmq_pingpong.ROUND_TRIP_MODES[mode]() as round_trip:
        benchmark.pedantic(round_trip, rounds=2000, iterations=10, warmup_rounds=100)


def test_stream_64_byte_elements(benchmark):
    benchmark.pedantic(fmq_pingpong.fmq_stream, args=(200_000, fmq_pingpong.POLL_NS), rounds=5)
