"""Service side of the burst C path's cross-process tests
(``python -m tests.burst_fast_peer serve FD``).

Serves bursts of the ADD+MUL model (:mod:`tests.burst_fast_models`)
on an inherited socket until the app closes it, then prints how many
requests its bursts answered in C.
"""

from __future__ import annotations

import socket
import sys
import threading

from nnburst.cpu.driver import cpu_device
from nnburst.service.burst import serve_bursts

from .burst_fast_models import add_mul_model


class _Counting:
    """The prepared model, keeping each burst's worker to count its C answers."""

    def __init__(self) -> None:
        self.model = cpu_device().prepare_model(add_mul_model())
        self.workers: list = []

    def configure_execution_burst(self, *args):  # type: ignore[no-untyped-def]
        status, context = self.model.configure_execution_burst(*args)
        if context is not None:
            self.workers.append(context._worker)
        return status, context


def serve(fd: str) -> None:
    prepared = _Counting()
    sock = socket.socket(fileno=int(fd))
    done = threading.Event()
    connection, _host = serve_bursts(sock, {1: prepared}.get)  # type: ignore[dict-item]
    previous = connection.on_close

    def closed() -> None:
        previous()
        done.set()

    connection.on_close = closed
    print("ready", flush=True)
    done.wait()
    connection.close()
    print("served", sum(w.fast.served for w in prepared.workers), flush=True)


if __name__ == "__main__":
    name, *args = sys.argv[1:]
    globals()[name](*args)
