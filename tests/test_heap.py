"""The CPU driver's malloc policy: freed tensors stay in the heap (nnburst/cpu/heap.py).

Measured by what the policy is for: page faults.  A child process runs 20
"executions" that each allocate, write and free a chain of 0.1-4 MiB tensors;
with glibc's defaults they fault their pages in again every time, with the
policy (``NNBURST_MALLOC`` unset) only the first execution does.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="the policy tunes glibc's malloc only"
)

CHILD = """
import json, resource, numpy as np
from nnburst.cpu.heap import keep_freed_memory
applied = keep_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
sizes = [int(s) for s in np.random.default_rng(0).integers(1 << 17, 1 << 22, 40)]
def run():  # one execution: 40 tensors of 128 KiB-4 MiB, three alive at a time
    alive = []
    for size in sizes:
        alive.append(np.ones(size // 4, np.float32))
        if len(alive) > 3:
            alive.pop(0)
run()  # the first execution faults its pages in
before = faults()
for _ in range(20):
    run()
print(json.dumps({"applied": applied, "faults": faults() - before}))
"""


def child_faults(**env: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_freed_tensors_are_reused_without_page_faults():
    kept = child_faults()
    default = child_faults(NNBURST_MALLOC="default")
    assert (kept["applied"], default["applied"]) == (True, False)
    assert kept["faults"] < 1000, kept  # each execution writes ~20,000 pages
    assert default["faults"] > 20 * max(kept["faults"], 100), (kept, default)


def test_every_cpu_prepared_model_applies_the_policy(monkeypatch):
    """The driver service builds CpuPreparedModel directly, not through CpuDevice:
    the policy must come with the prepared model, or a service never gets it."""
    from nnburst.cpu import driver
    from nnburst.tools.benchmarks.runtime_paths import add_mul_model

    calls: list[int] = []
    monkeypatch.setattr(driver, "keep_freed_memory", lambda: calls.append(1) or True)
    driver.CpuPreparedModel(add_mul_model().model.hal_model)
    assert calls == [1]
