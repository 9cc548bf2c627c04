"""A busy machine for ``nnburst bench --busy``: one CPU-bound process per CPU.

The issue asks how the paths behave when every core has something else to
run ("a service burst is never slower than 1.2x the service's synchronous
path"): spinning windows and futex wake-ups then compete with the load for
the CPU.  Each load process is a bare ``python -c 'while True: pass'``,
started from a neutral directory in its own session (a Ctrl-C in the
terminal is the bench's, which stops them) and with the parent-death signal
of :mod:`nnburst.service.launch`, so a bench killed outright leaves none
behind.  :class:`CpuLoad` stops them on exit, however the run ends.
"""

from __future__ import annotations

import os
import subprocess
import sys

from ...service.launch import spawn, stop_process

SPIN = "while True: pass"


def default_count() -> int:
    return os.cpu_count() or 1


class CpuLoad:
    """Up to ``count`` spinning processes, started and stopped as the run needs them."""

    def __init__(self, count: int | None = None) -> None:
        self.count = default_count() if count is None else count
        #: every load process this object started, running or not (for the report)
        self.pids: list[int] = []
        self._running: list[subprocess.Popen[str]] = []

    @property
    def running(self) -> bool:
        return bool(self._running)

    def start(self) -> None:
        """Start the load if it is not running."""
        if self._running:
            return
        try:
            for _ in range(self.count):
                process = spawn([sys.executable, "-P", "-S", "-c", SPIN])
                self._running.append(process)
                self.pids.append(process.pid)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every load process and reap it (SIGTERM, SIGKILL after a grace period)."""
        running, self._running = self._running, []
        for process in running:
            if process.poll() is None:
                process.terminate()
        for process in running:
            stop_process(process, grace=2.0)

    def __enter__(self) -> CpuLoad:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
