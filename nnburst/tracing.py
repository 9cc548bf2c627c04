"""Trace events per layer and phase, NNAPI-systrace style, written as Chrome trace-event JSON.

NNAPI names every trace section ``[NN_<layer>_<phase>]<detail>`` (e.g.
``[NN_LR_PE]compute``) so that a parser can add up the time spent in each
layer (Application, Runtime, IPC, Driver) and phase of a model's life.  This
module keeps those names and that contract, and writes the events as
complete (``"ph": "X"``) Chrome trace events, which Perfetto's UI
(ui.perfetto.dev) and ``chrome://tracing`` load as they are;
``nnburst trace summarize FILE`` (:mod:`nnburst.tools.trace_summary`) prints
the per-layer × per-phase table.

Tracing is off by default and then costs one module-level bool check per
span, with nothing allocated.  Turn it on with ``NNBURST_TRACE=path.json``
in the environment (written when the process exits; child processes trace
too, so put ``{pid}`` in the path, replaced by the process id, or they
overwrite each other's file), or in code::

    tracing.start("trace.json")
    with tracing.span(Layer.APPLICATION, Phase.EXECUTION, "runInferenceModel"):
        execution.compute()
    tracing.stop()          # writes trace.json

Timestamps come from ``time.monotonic_ns()`` (CLOCK_MONOTONIC), which every
process on the machine shares, so the files of a driver process and of its
app can be merged.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

__all__ = [
    "LAYERS",
    "call",
    "Layer",
    "Phase",
    "enabled",
    "prefix",
    "section",
    "span",
    "start",
    "stop",
    "traced",
]

#: Environment variable naming the file to trace into (``{pid}`` is replaced).
ENV_VAR = "NNBURST_TRACE"

#: Events kept in memory at most; later ones are counted as dropped, not stored.
MAX_EVENTS = 1_000_000


# Layer and Phase are plain string constants, not enums: on Python 3.11 reading an
# enum member costs more than the whole disabled span, and spans sit on hot paths.


class Layer:
    """Component in the stack, top to bottom; upper layers' spans enclose lower layers'."""

    APPLICATION = "LA"
    RUNTIME = "LR"
    IPC = "LI"
    DRIVER = "LD"


#: Layer code -> row title, top to bottom.
LAYERS: dict[str, str] = {
    Layer.APPLICATION: "Application",
    Layer.RUNTIME: "Runtime",
    Layer.IPC: "IPC",
    Layer.DRIVER: "Driver",
}


class Phase:
    """Stage of a model's life; the four execution sub-phases nest inside ``EXECUTION``."""

    INITIALIZATION = "PI"
    PREPARATION = "PP"  # building the model
    COMPILATION = "PC"  # preparing it for a device (the driver's prepareModel)
    EXECUTION = "PE"
    INPUTS_AND_OUTPUTS = "PIO"
    COMPUTATION = "PCO"
    RESULTS = "PR"
    TERMINATION = "PT"


def prefix(layer: str, phase: str) -> str:
    """The name prefix of a (layer, phase) bucket, e.g. ``[NN_LA_PE]``."""
    return f"[NN_{layer}_{phase}]"


# -- recording ---------------------------------------------------------------------------------

T = TypeVar("T")
_enabled = False  # the one check a span makes when tracing is off
_lock = threading.Lock()
_events: list[dict[str, Any]] = []
_thread_names: dict[int, str] = {}
_dropped = 0
_path: Path | None = None
_pattern = ""  # the path as given, before {pid} is replaced


def enabled() -> bool:
    """Whether spans are being recorded now."""
    return _enabled


def start(path: str | os.PathLike[str]) -> None:
    """Record spans from now on; :func:`stop` writes them to ``path``.

    Raises:
        RuntimeError: tracing is already on.
        OSError: the file's directory does not exist.
    """
    global _enabled, _path, _pattern, _dropped
    pattern = os.fspath(path)
    target = Path(pattern.replace("{pid}", str(os.getpid())))
    if not target.parent.is_dir():
        raise FileNotFoundError(f"cannot trace to {target}: no directory {target.parent}")
    with _lock:
        if _enabled:
            raise RuntimeError(f"tracing is already on (to {_path})")
        _events.clear()
        _thread_names.clear()
        _dropped = 0
        _path, _pattern, _enabled = target, pattern, True


def _after_fork_in_child() -> None:
    """A forked child traces on, into its own file, without its parent's events."""
    global _lock, _path, _dropped
    _lock = threading.Lock()  # another thread may have held it at the fork
    if _enabled:
        _events.clear()
        _thread_names.clear()
        _dropped = 0
        _path = Path(_pattern.replace("{pid}", str(os.getpid())))


os.register_at_fork(after_in_child=_after_fork_in_child)


def stop() -> Path | None:
    """Stop recording and write the trace file; returns its path (``None`` if tracing was off).

    Spans still open when tracing stops are left out.
    """
    global _enabled, _path
    with _lock:
        if not _enabled:
            return None
        _enabled = False
        path, _path = _path, None
        events = list(_events)
        threads = dict(_thread_names)
        dropped = _dropped
        _events.clear()
    if path is None:
        return None
    pid = os.getpid()
    metadata = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "nnburst"}},
    ] + [
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
        for tid, name in threads.items()
    ]
    document = {
        "traceEvents": metadata + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": "nnburst.tracing",
            "clock": "CLOCK_MONOTONIC",
            "dropped": dropped,
        },
    }
    # Write then rename, so a reader never sees half a file.
    temporary = path.with_name(f".{path.name}.{pid}.tmp")
    with open(temporary, "w", encoding="utf-8") as out:
        json.dump(document, out, separators=(",", ":"))
    os.replace(temporary, path)
    return path


def _record(name: str, start_ns: int, end_ns: int) -> None:
    global _dropped
    thread = threading.current_thread()
    tid = threading.get_native_id()
    event = {
        "name": name,
        "cat": "nnburst",
        "ph": "X",
        "ts": start_ns / 1000,
        "dur": (end_ns - start_ns) / 1000,
        "pid": os.getpid(),
        "tid": tid,
    }
    with _lock:
        if not _enabled:
            return
        if len(_events) >= MAX_EVENTS:
            _dropped += 1
            return
        _events.append(event)
        if tid not in _thread_names:
            _thread_names[tid] = thread.name


class _Span:
    """One timed section; recorded on exit, whether or not an exception passes through."""

    __slots__ = ("_name", "_start_ns")

    def __init__(self, name: str) -> None:
        self._name = name
        self._start_ns = 0

    def __enter__(self) -> _Span:
        self._start_ns = time.monotonic_ns()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _record(self._name, self._start_ns, time.monotonic_ns())


class _NoSpan:
    """What :func:`span` returns while tracing is off: a shared object that does nothing."""

    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SPAN = _NoSpan()


def span(layer: str, phase: str, detail: str) -> _Span | _NoSpan:
    """A context manager timing one section named ``[NN_<layer>_<phase>]<detail>``.

    ``layer`` and ``phase`` are :class:`Layer` and :class:`Phase` constants.
    """
    if not _enabled:
        return _NO_SPAN
    return _Span(f"[NN_{layer}_{phase}]{detail}")


def call(layer: str, phase: str, detail: str, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` inside a :func:`span`: for hot paths, where tracing
    off then costs one call instead of a ``with`` block's three."""
    if not _enabled:
        return function(*args)
    with _Span(f"[NN_{layer}_{phase}]{detail}"):
        return function(*args)


def section(name: str) -> _Span | _NoSpan:
    """A context manager timing a section with a ready-made name (``"[NN_LA_PE]runInference"``).

    Names without an ``[NN_…]`` prefix are kept in the file but left out of the summary,
    as the NNAPI parser does with an app's other systrace sections.
    """
    if not _enabled:
        return _NO_SPAN
    return _Span(name)


F = TypeVar("F", bound=Callable[..., Any])


def traced(layer: str, phase: str, detail: str | None = None) -> Callable[[F], F]:
    """Decorator form of :func:`span`; ``detail`` defaults to the function's qualified name."""

    def decorate(function: F) -> F:
        name = f"[NN_{layer}_{phase}]{detail or function.__qualname__}"

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _enabled:
                return function(*args, **kwargs)
            with _Span(name):
                return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def _start_from_environment() -> None:
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    try:
        start(path)
    except (OSError, RuntimeError) as exc:
        import logging

        logging.getLogger("nnburst").warning("%s=%s: tracing stays off: %s", ENV_VAR, path, exc)
        return
    atexit.register(stop)
    # multiprocessing children leave through os._exit, skipping atexit but running
    # finalizers; a child drops the finalizers it inherits, so each one registers anew.
    from multiprocessing import util

    def write_at_exit(_: object = None) -> None:
        util.Finalize(None, stop, exitpriority=0)

    write_at_exit()
    util.register_after_fork(_fork_token, write_at_exit)


class _ForkToken:
    """Something multiprocessing can hold a weak reference to."""


_fork_token = _ForkToken()


_start_from_environment()
