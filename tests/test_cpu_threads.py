"""The CPU driver's BLAS thread policy (nnburst/cpu/threads.py), each case in a
fresh process: the policy is applied once per process, at the first prepare."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Prints BLAS's thread counts before and after the CPU driver prepares a model.
_PROBE = """
import os
os.sched_setaffinity(0, range(os.cpu_count()))  # OpenBLAS counts the CPUs it may use
import json, threadpoolctl
from nnburst.cpu.driver import cpu_device
from tests.burst_models import add_model

def blas():
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]

before = blas()
try:
    cpu_device().prepare_model(add_model())
    error = None
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
print(json.dumps({"before": before, "after": blas(), "error": error}))
"""


def _probe(blas_threads: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "NNBURST_BLAS_THREADS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "2"  # BLAS's own default: 2
    env.pop("MKL_NUM_THREADS", None)
    if blas_threads is not None:
        env["NNBURST_BLAS_THREADS"] = blas_threads
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["before"]:
        pytest.skip("numpy has no BLAS threadpoolctl can see")
    return result


def test_one_blas_thread_by_default() -> None:
    result = _probe(None)
    assert result["error"] is None
    assert result["before"] == [2] and result["after"] == [1]


def test_the_environment_asks_for_more_threads_or_none_limited() -> None:
    assert _probe("2")["after"] == [2]
    left_alone = _probe("0")
    assert left_alone["after"] == left_alone["before"] == [2]


def test_a_bad_thread_count_is_a_clear_error() -> None:
    result = _probe("many")
    assert result["error"] is not None
    assert "NNBURST_BLAS_THREADS must be a thread count" in str(result["error"])
