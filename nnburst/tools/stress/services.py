"""The driver services ``nnburst stress`` runs against: started, reconnected, and
(``--kill-service``) killed and restarted while bursts use them."""

from __future__ import annotations

import contextlib
import random
import subprocess
import threading
import time

import nnburst as nn
from nnburst.cpu.driver import cpu_device
from nnburst.errors import NNError
from nnburst.service.launch import (
    ServiceStartError,
    start_service,
    stop_process,
)
from nnburst.service.remote import ServiceClient

from .monitor import Budget, Stats

#: The service device that accepts every operation the CPU driver runs.
SERVICE_DEVICE = "nnburst-sample-all"
SERVICE_START_TIMEOUT_S = 20.0


# -- services -----------------------------------------------------------------------------------


class ServiceProcess:
    """``nnburst serve`` on one socket, in its own session (a Ctrl-C in
    the terminal reaches only us, and we stop it); restartable on the same path."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.process: subprocess.Popen[str] | None = None
        self.pids: list[int] = []
        self.start_s = 0.0  # how long the last start took: a loaded machine takes seconds
        self.start()

    def start(self) -> None:
        began = time.monotonic()
        try:
            process, stderr = start_service(self.path, timeout=SERVICE_START_TIMEOUT_S)
        except ServiceStartError as exc:
            raise RuntimeError(f"the driver service on {self.path} did not start: {exc}") from None
        stderr.close()  # its later warnings are not the stress run's to print
        self.process = process
        self.pids.append(process.pid)
        assert process.stdout is not None
        process.stdout.close()  # it prints one line only
        self.start_s = time.monotonic() - began

    def kill(self) -> None:
        """SIGKILL: the worst way to die (no chance to clean up)."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        """SIGTERM (the service unlinks its socket), SIGKILL if it does not go."""
        if self.process is not None:
            stop_process(self.process)


class Target:
    """Where executions run: the in-process CPU device or one service (reconnected when it broke)."""

    def __init__(self, name: str, path: str | None = None) -> None:
        self.name = name
        self.path = path
        self.successes = 0
        self._lock = threading.Lock()
        self._client: ServiceClient | None = None
        self._device: nn.Device | None = nn.Device(cpu_device()) if path is None else None

    def device(self) -> nn.Device | None:
        """The device now; None while the service is unreachable (being restarted)."""
        if self.path is None:
            return self._device
        with self._lock:
            if self._client is not None and not self._client.broken:
                return self._device
            if self._client is not None:
                # Broken for good: close it now (its socket and burst channels), or a
                # run with --kill-service keeps every dead connection's fds to the end.
                # Bursts still holding it fail as they would anyway: the peer is gone.
                with contextlib.suppress(Exception):
                    self._client.close()
                self._client, self._device = None, None
            try:
                client = ServiceClient(self.path)
            except OSError:
                return None
            try:
                hal = next(d for d in client.devices(timeout=2.0) if d.name == SERVICE_DEVICE)
            except (NNError, OSError, StopIteration, ValueError):
                client.close()
                return None
            self._client, self._device = client, nn.Device(hal)
            return self._device

    def succeeded(self) -> None:
        with self._lock:
            self.successes += 1

    def close(self) -> None:
        with self._lock:
            client, self._client, self._device = self._client, None, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


# -- killing services ---------------------------------------------------------------------------


class ServiceKiller:
    """Kills a random service at random times and restarts it on the same socket; waits for
    an execution to succeed on it again before the next kill, and counts restarts that never
    saw one (``unrecovered``). A kill needs time left for a restart and a reconnection:
    at least 2.5 s and twice the slowest start seen, so a loaded machine is not counted
    as a service that never came back."""

    def __init__(
        self,
        services: list[ServiceProcess],
        targets: dict[str, Target],
        budget: Budget,
        stats: Stats,
        seed: int,
    ) -> None:
        self.services = services
        self.targets = targets
        self.budget = budget
        self.stats = stats
        self.rng = random.Random(seed)
        self.pending: list[tuple[Target, int]] = []  # (target, its successes at restart)
        self.thread = threading.Thread(target=self._run, name="nnburst-stress-killer", daemon=True)

    def _run(self) -> None:
        while self.budget.running():
            if self.budget.stop.wait(self.rng.uniform(0.2, 1.0)):
                return
            recovery_s = max(2.5, 2 * max(s.start_s for s in self.services))
            if self.budget.remaining_s() < recovery_s or any(
                t.successes <= n for t, n in self.pending
            ):
                continue  # leave time to recover; one outage at a time
            self.pending.clear()
            service = self.rng.choice(self.services)
            target = self.targets[service.path]
            try:
                service.restart()
            except RuntimeError as exc:
                self.stats.note(f"restart failed: {exc}")
                continue
            self.stats.add("restarts")
            self.pending.append((target, target.successes))

    def finish(self) -> None:
        self.stats.unrecovered = sum(1 for t, n in self.pending if t.successes <= n)
