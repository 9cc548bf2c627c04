"""Run a test peer in a thread or in a separate process, the same code either way.

Peer functions live in :mod:`tests.fmq_peer` and take only strings (what a
command line carries: descriptors as hex), so nothing is pickled across the
process boundary.  A peer signals failure by raising; in a process that
becomes a non-zero exit status with the traceback on stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

MODES = ("thread", "process")
REPO = Path(__file__).resolve().parent.parent


class Peer:
    def __init__(
        self,
        mode: str,
        function: str,
        *args: object,
        capture_stdout: bool = False,
        module: str = "tests.fmq_peer",
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        self.mode = mode
        self.function = function
        argv = [str(a) for a in args]
        self.error: BaseException | None = None
        self.process: subprocess.Popen[str] | None = None
        if mode == "process":
            env = dict(os.environ, PYTHONPATH=str(REPO))
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, function, *argv],
                cwd=REPO,
                env=env,
                pass_fds=pass_fds,
                stdout=subprocess.PIPE if capture_stdout else None,
                stderr=subprocess.PIPE,
                text=True,
            )
        elif mode == "thread":
            import importlib

            target = getattr(importlib.import_module(module), function)

            def run() -> None:
                try:
                    target(*argv)
                except BaseException as exc:  # reported by join()
                    self.error = exc

            self.thread = threading.Thread(target=run, name=f"peer-{function}")
            self.thread.start()
        else:
            raise ValueError(mode)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def readline(self) -> str:
        assert self.process is not None and self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def join(self, timeout: float = 30.0) -> None:
        """Wait for the peer; fail the test if it failed or hung."""
        if self.process is not None:
            try:
                _, stderr = self.process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.communicate()
                raise AssertionError(f"peer {self.function} hung") from None
            assert self.process.returncode == 0, f"peer {self.function} failed:\n{stderr}"
        else:
            self.thread.join(timeout)
            assert not self.thread.is_alive(), f"peer {self.function} hung"
            if self.error is not None:
                raise AssertionError(f"peer {self.function} failed: {self.error!r}") from self.error

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.communicate()
