"""A driver service process for one benchmark run: the cross-process side of ``nnburst bench``.

The service runs in its own session (``start_new_session``), so a Ctrl-C in
the terminal reaches only the benchmark, which then stops the service
itself: nothing is left behind, whichever way the run ends.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ..devices import Device, get_devices

#: The service device that accepts every operation (the CPU reference driver behind a socket).
DEVICE_NAME = "nnburst-sample-all"
START_TIMEOUT_S = 10.0


class ServiceError(RuntimeError):
    """The service could not be started or did not offer its device."""


def _wait_listening(process: subprocess.Popen[str], timeout: float) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.1)
        if ready:
            line = process.stdout.readline()
            if line.startswith("listening on"):
                return
            if not line:  # it exited
                break
    raise ServiceError(f"the driver service did not start (exit code {process.poll()})")


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()  # SIGTERM: the service closes its connections and unlinks its socket
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()


@contextmanager
def driver_service(cpu: int | None = None) -> Iterator[Device]:
    """Start ``python -m nnburst.service.driver`` on a private socket and yield its
    all-operations device; ``cpu`` pins the service to that CPU."""
    from ..service.remote import disconnect_all

    directory = tempfile.mkdtemp(prefix="nnburst-bench-")
    path = os.path.join(directory, "service", "driver.sock")
    previous = os.environ.get("NNBURST_SERVICES")
    process = subprocess.Popen(
        [sys.executable, "-m", "nnburst.service.driver", "--socket", path],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        if cpu is not None:
            os.sched_setaffinity(process.pid, {cpu})  # before it starts its threads: they inherit it
        _wait_listening(process, START_TIMEOUT_S)
        os.environ["NNBURST_SERVICES"] = path
        device = next((d for d in get_devices() if d.name == DEVICE_NAME), None)
        if device is None:
            raise ServiceError(f"the driver service at {path} offers no {DEVICE_NAME}")
        yield device
    finally:
        if previous is None:
            os.environ.pop("NNBURST_SERVICES", None)
        else:
            os.environ["NNBURST_SERVICES"] = previous
        disconnect_all()
        _stop(process)
        shutil.rmtree(directory, ignore_errors=True)
