"""Service side of the burst C path's and spin policy's cross-process tests
(``python -m tests.burst_spin_peer serve FD PREFERENCE``).

Serves bursts of the ADD+MUL model (one C plan: repeats are answered in C)
prepared with PREFERENCE (its polling window) on an inherited socket until
the app closes it, then prints what its bursts' C loops did and what the
bursts left behind: ``served S spun P accounted A threads T fds F``, where
``accounted`` is the waits the servers' spin policies were told of, and
``threads``/``fds`` are the burst threads still alive and the fds open
beyond those before the first burst.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

from nnburst.codes import PreferenceCode
from nnburst.cpu.driver import cpu_device
from nnburst.service.burst import serve_bursts

from .burst_fast_models import add_mul_model


class _Counting:
    """The prepared model, keeping each burst's worker to read its counters."""

    def __init__(self, preference: PreferenceCode) -> None:
        self.model = cpu_device().prepare_model(add_mul_model(), preference=preference)
        self.workers: list = []

    def configure_execution_burst(self, *args):  # type: ignore[no-untyped-def]
        status, context = self.model.configure_execution_burst(*args)
        if context is not None:
            self.workers.append(context._worker)
        return status, context


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _burst_threads() -> int:
    return sum(t.name == "nnburst-burst-server" for t in threading.enumerate())


def serve(fd: str, preference: str) -> None:
    prepared = _Counting(PreferenceCode[preference])
    sock = socket.socket(fileno=int(fd))
    done = threading.Event()
    connection, _host = serve_bursts(sock, {1: prepared}.get)  # type: ignore[dict-item]
    previous = connection.on_close

    def closed() -> None:
        previous()
        done.set()

    connection.on_close = closed
    fds = _fds()
    print("ready", flush=True)
    done.wait()
    connection.close()
    deadline = time.monotonic() + 10
    while _burst_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    workers = prepared.workers
    print(
        "served",
        sum(w.fast.served for w in workers),
        "spun",
        sum(w.fast.spun for w in workers),
        "accounted",
        sum(w.spin.waits for w in workers),
        "threads",
        _burst_threads(),
        "fds",
        _fds() - fds + 1,  # the connection's socket was open before; it is closed now
        flush=True,
    )


if __name__ == "__main__":
    name, *args = sys.argv[1:]
    globals()[name](*args)
