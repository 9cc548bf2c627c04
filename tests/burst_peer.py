"""Service side of the cross-process burst tests (``python -m tests.burst_peer``).

Prepares the test model on the CPU driver and serves bursts on an inherited
socket until the app closes it: a miniature driver service.
"""

from __future__ import annotations

import socket
import sys
import threading

from nnburst.cpu.driver import cpu_device
from nnburst.service.burst import serve_bursts

from .burst_models import add_model, slow


def serve(fd: str, slow_seconds: str = "0", gate: str = "") -> None:
    prepared = cpu_device().prepare_model(add_model())
    if float(slow_seconds) or gate:
        prepared = slow(prepared, float(slow_seconds), gate or None)
    sock = socket.socket(fileno=int(fd))
    done = threading.Event()
    connection, host = serve_bursts(sock, {1: prepared}.get)
    previous = connection.on_close

    def closed() -> None:
        previous()
        done.set()

    connection.on_close = closed
    print("ready", flush=True)
    done.wait()
    connection.close()


if __name__ == "__main__":
    name, *args = sys.argv[1:]
    globals()[name](*args)
