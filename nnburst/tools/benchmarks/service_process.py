"""A driver service process for one benchmark run: the cross-process side of ``nnburst bench``.

The service runs in its own session (``start_new_session``), so a Ctrl-C in
the terminal reaches only the benchmark, which then stops the service
itself: nothing is left behind, whichever way the run ends.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from ...devices import Device, get_devices
from ...service.launch import ServiceStartError, start_service, stop_process
from ...service.remote import disconnect_all

#: The service device that accepts every operation (the CPU reference driver behind a socket).
DEVICE_NAME = "nnburst-sample-all"


class ServiceError(RuntimeError):
    """The service could not be started or did not offer its device."""


@contextmanager
def driver_service(cpu: int | None = None, threads: int = 1) -> Iterator[Device]:
    """Start ``nnburst serve`` on a private socket and yield its all-operations
    device; ``cpu`` pins the service to that CPU, ``threads`` is its ``--threads``."""
    directory = tempfile.mkdtemp(prefix="nnburst-bench-")
    path = os.path.join(directory, "service", "driver.sock")
    previous = os.environ.get("NNBURST_SERVICES")
    try:
        process, stderr = start_service(path, ("--threads", str(threads)), cpu=cpu)
    except BaseException as exc:  # a Ctrl-C while it starts included
        shutil.rmtree(directory, ignore_errors=True)
        if isinstance(exc, ServiceStartError):
            raise ServiceError(str(exc)) from None
        raise
    try:
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
        stop_process(process)
        stderr.close()
        shutil.rmtree(directory, ignore_errors=True)
