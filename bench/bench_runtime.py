"""The runtime's execution paths on the seeds' ADD+MUL model and a mid-size
convolution (the same runs as nnburst/benchmarks/runtime_paths.py)."""

from __future__ import annotations

import pytest

from nnburst.benchmarks import runtime_paths


@pytest.mark.parametrize("path", runtime_paths.PATHS)
@pytest.mark.parametrize("model", list(runtime_paths.MODELS))
def test_execution_path(benchmark, model, path):
    with runtime_paths.execution_path(model, path) as execute:
        rounds = 300 if model.startswith("add") else 20
        benchmark.pedantic(execute, rounds=rounds, iterations=1, warmup_rounds=5)
