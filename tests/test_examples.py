"""Every script in examples/ runs as a newcomer would run it and prints what it promises.

Each runs in its own interpreter from an empty working directory (so nothing
but the installed package is importable) and must exit 0 with its result
lines on stdout and nothing on stderr. The in-process examples see no driver
service (``NNBURST_SERVICES`` empty), so a service someone left running on
the default socket cannot change where they run; the service example starts
and stops its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: script -> lines its stdout must contain (results the script itself asserted first)
EXPECTED = {
    "sync_compute.py": ["device: nnburst-reference", "output shape: (2, 4)", "sync compute: OK"],
    "async_compute.py": ["both executions queued", "[ 64. 125. 216.]]", "async compute: OK"],
    "burst.py": ["200 computations each way", "burst_compute:", "burst: OK"],
    "memory_pools.py": [
        "part 1, shared-memory pools",
        "part 2, a MemoryDesc memory",
        "memory pools: OK",
    ],
    "service_device.py": [
        "device: nnburst-sample-all",
        "burst_compute (FMQ):",
        "service stopped (exit code 0); socket removed: True",
        "service device: OK",
    ],
}


def run_example(name: str, cwd: Path, services: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("NNBURST_SERVICES", None)
    if services is not None:
        env["NNBURST_SERVICES"] = services
    env["PYTHONDEVMODE"] = "1"  # unclosed files and sockets print ResourceWarnings on stderr
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_every_example_is_listed_here():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


def test_every_example_says_what_it_shows_and_how_to_run_it():
    for name in EXPECTED:
        source = (EXAMPLES / name).read_text(encoding="utf-8")
        assert source.startswith('"""'), f"{name}: no module docstring"
        docstring = source.split('"""')[1]
        assert f"python examples/{name}" in docstring, (
            f"{name}: the docstring does not say how to run it"
        )


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n != "service_device.py"))
def test_in_process_example_runs(name, tmp_path):
    result = run_example(name, tmp_path, services="")
    assert result.returncode == 0, result.stderr
    for line in EXPECTED[name]:
        assert line in result.stdout, f"{name}: {line!r} missing from:\n{result.stdout}"
    assert result.stderr == ""


@pytest.fixture(scope="module")
def service_example(tmp_path_factory):
    """The service example, run once: it starts a service process of its own."""
    return run_example(
        "service_device.py", tmp_path_factory.mktemp("service_example"), services=None
    )


def test_service_example_runs_on_a_service_device_and_stops_the_service(service_example):
    assert service_example.returncode == 0, service_example.stderr
    for line in EXPECTED["service_device.py"]:
        assert line in service_example.stdout, f"{line!r} missing from:\n{service_example.stdout}"
    assert "Traceback" not in service_example.stderr


def test_service_example_leaves_nothing_unclosed(service_example):
    assert service_example.stderr == ""
