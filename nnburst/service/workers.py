"""Serving on every core: one listening socket, several worker processes.

A worker is an ordinary single-process service that accepts from a listening
socket it inherits instead of binding its own.  A connection, with its
prepared models and bursts, lives in the worker that accepted it, so workers
share nothing; the kernel gives each connect to one worker.  One Python
process is one interpreter lock, so this is what lets many clients use many
cores.

The supervisor binds the socket, starts the workers, replaces one that dies
(its clients see the service die, as with any service death; the others
are not touched) and, when asked to stop, stops them.  Workers die with it
(``launch.spawn``).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
from collections.abc import Sequence

from . import fault_hook
from .launch import (
    SERVICE_MODULE,
    ServiceStartError,
    child_python,
    spawn,
    stop_process,
    wait_listening,
)

log = logging.getLogger("nnburst.service")

#: How long a worker may take to start listening.
WORKER_START_TIMEOUT_S = 30.0
#: How long a worker may take to close its clients when the service stops.
WORKER_STOP_GRACE_S = 3.0
#: A worker that dies sooner than this after its start is replaced only after this long
#: (a worker that cannot start must not turn the supervisor into a fork loop).
RESTART_BACKOFF_S = 1.0


def default_worker_count() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


class WorkerPool:
    """``count`` workers serving ``listener``; each runs the service program
    (``launch.SERVICE_MODULE``) with ``worker_args`` plus the inherited socket's fd."""

    def __init__(
        self, path: str, listener: socket.socket, count: int, worker_args: Sequence[str]
    ) -> None:
        self.path = path
        self._listener = listener
        self._argv = child_python(
            SERVICE_MODULE,
            "--socket",
            path,
            "--listen-fd",
            str(listener.fileno()),
            *worker_args,
        )
        # A plain flag, not an Event: stop() runs in signal handlers (see Service.stop).
        self._stop_requested = False
        self._workers: list[subprocess.Popen[str]] = []
        self._started: list[float] = []
        try:
            for _ in range(count):
                self._workers.append(self._start())
                self._started.append(time.monotonic())
        except BaseException:
            self.close()
            raise

    def _start(self) -> subprocess.Popen[str]:
        # stderr is ours: a worker's warnings are the service's warnings.  Injected
        # faults (see ``fault_hook``) are the workers' to act on.
        faults = os.environ.get(fault_hook.ENV_VAR)
        worker = spawn(
            self._argv,
            stdout=subprocess.PIPE,
            stderr=None,
            pass_fds=[self._listener.fileno()],
            env={fault_hook.ENV_VAR: faults} if faults else None,
        )
        try:
            wait_listening(worker, WORKER_START_TIMEOUT_S)
        except BaseException:
            stop_process(worker)
            raise
        assert worker.stdout is not None
        worker.stdout.close()  # it prints its one line only
        return worker

    def stop(self) -> None:
        """Ask :meth:`serve_forever` to end (safe from a signal handler: no lock)."""
        self._stop_requested = True

    def serve_forever(self) -> None:
        """Replace dead workers until :meth:`stop`; then stop them all."""
        try:
            while not self._stop_requested:
                time.sleep(0.2)
                for i, worker in enumerate(self._workers):
                    if worker.poll() is None:
                        continue
                    log.warning(
                        "worker %d exited with code %s: replacing it", worker.pid, worker.returncode
                    )
                    if time.monotonic() - self._started[i] < RESTART_BACKOFF_S:
                        time.sleep(RESTART_BACKOFF_S)
                    if self._stop_requested:
                        break
                    try:
                        self._workers[i] = self._start()
                    except (ServiceStartError, OSError) as exc:
                        log.warning("a worker did not start: %s", exc)
                    self._started[i] = time.monotonic()
        finally:
            self.close()

    def close(self) -> None:
        """Stop every worker (SIGTERM to all first, then SIGKILL to any that stay) and
        close our copy of the listening socket; the path is the caller's."""
        self._stop_requested = True
        for worker in self._workers:
            if worker.poll() is None:
                worker.terminate()
        for worker in self._workers:
            # Within the 5 s a supervisor is itself given to stop (launch.stop_process).
            stop_process(worker, grace=WORKER_STOP_GRACE_S)
        self._listener.close()
