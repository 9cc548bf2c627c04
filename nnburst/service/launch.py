"""Starting nnburst's own child processes: the driver service and other Python workers.

Two newcomer traps live here, so every tool starts its children the same way:

* ``python -m`` puts the current directory first on ``sys.path``.  Run from a
  source checkout, a child would import the checkout's ``./nnburst`` (which
  has no compiled module) instead of the installed package, and die.  Children
  run with ``-P`` (no unsafe path entry) from a neutral working directory.
* A child that fails must say why in the parent: its stderr goes to an
  unlinked temporary file, and the tail of it is part of the parent's error.
"""

from __future__ import annotations

import ctypes
import functools
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import IO

from . import fault_hook

__all__ = [
    "SERVICE_MODULE",
    "ServiceStartError",
    "child_env",
    "child_python",
    "neutral_cwd",
    "spawn",
    "start_service",
    "stop_process",
    "wait_listening",
]

#: How long a service may take to print its ``listening on`` line.
START_TIMEOUT_S = 20.0
#: How much of a failed child's stderr an error message repeats.
TAIL_LINES = 12


class ServiceStartError(RuntimeError):
    """The driver service exited or stayed silent before it listened; the message has its stderr."""


#: The service program (``nnburst serve``), started by module name: a tool the
#: library runs as a process and never imports.
SERVICE_MODULE = "nnburst.tools.serve"


def child_python(module: str, *args: str) -> list[str]:
    """The command that runs ``python -m module args`` against the *installed* nnburst."""
    return [sys.executable, "-P", "-m", module, *args]


def child_env() -> dict[str, str]:
    """Our environment, with this process's nnburst importable (a checkout run with
    ``PYTHONPATH`` stays one) and no test fault switched on by accident."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.path.dirname(package)
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    env.pop(fault_hook.ENV_VAR, None)
    return env


def neutral_cwd() -> str:
    """A directory with no ``nnburst`` folder in it, for children to start in."""
    return tempfile.gettempdir()


def spawn(
    argv: Sequence[str],
    *,
    stdout: int | IO[bytes] | None = subprocess.DEVNULL,
    stderr: int | IO[bytes] | None = subprocess.DEVNULL,
    pass_fds: Sequence[int] = (),
    cpu: int | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[str]:
    """Start one of our children: no stdin, our environment (:func:`child_env`), a
    neutral working directory, its own session (a Ctrl-C in the terminal is the
    parent's, which stops its children itself) and death with this process.
    ``cpu`` pins it before it starts any thread; ``env`` adds to its environment."""
    process = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        text=True,
        env={**child_env(), **(env or {})},
        cwd=neutral_cwd(),
        pass_fds=tuple(pass_fds),
        start_new_session=True,
        preexec_fn=functools.partial(_die_with_parent, os.getpid()),
    )
    if cpu is not None:
        try:
            os.sched_setaffinity(process.pid, {cpu})
        except OSError:
            stop_process(process)
            raise
    return process


def _tail(stream: IO[bytes] | None, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a child's captured stderr, for an error message."""
    if stream is None:
        return ""
    try:
        stream.seek(0)
        text = stream.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def start_service(
    path: str,
    extra_args: Sequence[str] = (),
    cpu: int | None = None,
    timeout: float = START_TIMEOUT_S,
) -> tuple[subprocess.Popen[str], IO[bytes]]:
    """Start ``nnburst serve --socket path`` in its own session and wait until it listens.

    Returns the process and the file its stderr goes to (close it after the
    process ends).  ``cpu`` pins the service before it starts its threads.

    Raises:
        ServiceStartError: it exited or did not listen within ``timeout``;
            the message quotes the end of its stderr.
    """
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 -- outlives this call: the caller closes it
    process = spawn(
        child_python(SERVICE_MODULE, "--socket", path, *extra_args),
        stdout=subprocess.PIPE,
        stderr=stderr,
        cpu=cpu,
    )
    try:
        wait_listening(process, timeout)
    except BaseException as exc:
        stop_process(process)
        why = _tail(stderr)
        stderr.close()
        if isinstance(exc, ServiceStartError):
            raise ServiceStartError(f"{exc}\n{why}" if why else str(exc)) from None
        raise
    return process, stderr


def _die_with_parent(parent: int) -> None:
    """In the child before exec: SIGTERM when the thread that started us ends, so a
    parent killed with SIGKILL leaves no service behind (its own session means no
    terminal signal reaches it).  Linux's PR_SET_PDEATHSIG; nothing elsewhere.  A
    parent that died before the setting took effect ends the child at once."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


_PR_SET_PDEATHSIG = 1


def wait_listening(process: subprocess.Popen[str], timeout: float) -> None:
    """Return once ``process`` printed its ``listening on`` line on its stdout."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServiceStartError(f"the driver service did not listen within {timeout:g} s")
        ready, _, _ = select.select([process.stdout], [], [], min(left, 0.1))
        if not ready:
            continue
        line = process.stdout.readline()
        if line.startswith("listening on"):
            return
        if not line:  # stdout closed: it exited
            code = process.wait()
            raise ServiceStartError(
                f"the driver service exited with code {code} before it listened:"
            )


def stop_process(process: subprocess.Popen[str], grace: float = 5.0) -> None:
    """SIGTERM (the service closes its clients and unlinks its socket), SIGKILL after
    ``grace`` seconds; closes our end of its stdout."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()
