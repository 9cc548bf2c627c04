"""Verbose logging per component, switched like Android's ``debug.nn.vlog``.

NNAPI turns on verbose logs per component with one property
(``setprop debug.nn.vlog compilation,execution``, or ``all``).  nnburst does
the same with an environment variable read when this module is imported::

    NNBURST_VLOG="compilation,execution" python app.py
    NNBURST_VLOG=all python app.py

Names are separated by spaces, colons or commas; ``all`` or ``1`` means every
component.  Everything sits on the standard :mod:`logging` module: a
component is one or more loggers named ``nnburst.<something>``, and turning
it on sets them to ``DEBUG``.  If the application has not configured logging
(no handler anywhere above ``nnburst``), a stderr handler is added so the
messages show up; otherwise the application's handlers decide.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable

__all__ = [
    "COMPONENTS",
    "ENV_VAR",
    "disable",
    "enable",
    "enabled_components",
    "is_enabled",
    "parse",
]

#: Environment variable holding the component list.
ENV_VAR = "NNBURST_VLOG"

#: Component name -> the loggers it covers.  NNAPI's names first, then nnburst's own.
COMPONENTS: dict[str, tuple[str, ...]] = {
    "model": ("nnburst.model",),  # model building
    "compilation": ("nnburst.compilation",),  # device choice and preparation
    "execution": ("nnburst.execution",),  # executions
    "cpuexe": ("nnburst.cpu",),  # the CPU reference driver running operations
    "manager": ("nnburst.manager", "nnburst.devices"),  # devices and their capabilities
    "burst": ("nnburst.burst",),  # burst controller and server
    "service": ("nnburst.service",),  # the driver-service control channel
}

_FORMAT = "%(asctime)s %(process)d %(threadName)s %(levelname)s %(name)s: %(message)s"

_enabled: frozenset[str] = frozenset()
_handler: logging.Handler | None = None


def parse(spec: str) -> frozenset[str]:
    """The components named in ``spec``; ``all`` or ``1`` means every one.

    Raises:
        ValueError: an unknown component name (the message lists the known ones).
    """
    names = {name for name in re.split(r"[\s,:]+", spec.strip().lower()) if name}
    if names & {"all", "1"}:
        return frozenset(COMPONENTS)
    unknown = sorted(names - set(COMPONENTS))
    if unknown:
        raise ValueError(
            f"unknown logging component(s) {', '.join(unknown)}; "
            f"known: {', '.join(COMPONENTS)}, all"
        )
    return frozenset(names)


def enable(components: str | Iterable[str]) -> None:
    """Verbose logs for these components (a spec string or names), in addition to any already on."""
    global _enabled, _handler
    names = parse(components if isinstance(components, str) else " ".join(components))
    for name in names:
        for logger_name in COMPONENTS[name]:
            logging.getLogger(logger_name).setLevel(logging.DEBUG)
    _enabled = _enabled | names
    root = logging.getLogger("nnburst")
    if names and _handler is None and not root.hasHandlers():
        _handler = logging.StreamHandler()
        _handler.setFormatter(logging.Formatter(_FORMAT))
        root.addHandler(_handler)


def disable() -> None:
    """Every component back to the default level, and the stderr handler (if added) removed."""
    global _enabled, _handler
    for name in _enabled:
        for logger_name in COMPONENTS[name]:
            logging.getLogger(logger_name).setLevel(logging.NOTSET)
    _enabled = frozenset()
    if _handler is not None:
        logging.getLogger("nnburst").removeHandler(_handler)
        _handler = None


def enabled_components() -> frozenset[str]:
    return _enabled


def is_enabled(component: str) -> bool:
    """Cheap check before building an expensive message (NNAPI's ``VLOG_IS_ON``)."""
    return component in _enabled


def _enable_from_environment() -> None:
    spec = os.environ.get(ENV_VAR, "")
    if not spec.strip():
        return
    try:
        enable(spec)
    except ValueError as exc:
        logging.getLogger("nnburst").warning("%s=%r: %s", ENV_VAR, spec, exc)


_enable_from_environment()
