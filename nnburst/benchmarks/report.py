"""The machine-readable result of one ``nnburst bench`` run (``--json FILE``).

Numbers without the machine they came from cannot be compared, so the
document carries the environment next to the rows.  Schema, version 1::

    {
      "schema": "nnburst.bench/1",
      "benchmark": "fmq" | "burst",
      "created": "2025-01-31T12:00:00+00:00",     # UTC, ISO 8601
      "parameters": {"iterations": int, "stream_items": int | null},
      "environment": {
        "nnburst": str,              # nnburst.__version__
        "python": str,               # platform.python_version()
        "implementation": str,       # e.g. "CPython"
        "numpy": str,
        "platform": str,             # platform.platform()
        "machine": str,              # e.g. "x86_64"
        "cpu_count": int | null,     # os.cpu_count()
        "usable_cpus": int | null    # CPUs this process may run on (affinity)
      },
      "latency": [                   # LatencyStats.as_dict(), one per mode
        {"name": str, "count": int, "p50_us": float, "p90_us": float, "p99_us": float,
         "p999_us": float, "mean_us": float, "per_second": float}
      ],
      "throughput": [                # Throughput.as_dict(), one per stream (may be empty)
        {"name": str, "items": int, "seconds": float, "per_second": float}
      ]
    }

:func:`validate` checks a document against this schema; the tests use it.
"""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._version import __version__
from .stats import LatencyStats, Throughput

__all__ = ["SCHEMA", "build", "environment", "validate"]

SCHEMA = "nnburst.bench/1"

_LATENCY_FIELDS = {
    "name": str, "count": int, "p50_us": float, "p90_us": float, "p99_us": float,
    "p999_us": float, "mean_us": float, "per_second": float,
}
_THROUGHPUT_FIELDS = {"name": str, "items": int, "seconds": float, "per_second": float}
_ENVIRONMENT_FIELDS = {
    "nnburst": str, "python": str, "implementation": str, "numpy": str, "platform": str,
    "machine": str, "cpu_count": (int, type(None)), "usable_cpus": (int, type(None)),
}


def environment() -> dict[str, Any]:
    """Where the numbers were measured."""
    try:
        usable: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        usable = None
    return {
        "nnburst": __version__,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
    }


def build(
    benchmark: str,
    latency: Sequence[LatencyStats],
    throughput: Sequence[Throughput] = (),
    *,
    iterations: int,
    stream_items: int | None = None,
) -> dict[str, Any]:
    """The document for one run."""
    return {
        "schema": SCHEMA,
        "benchmark": benchmark,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "parameters": {"iterations": iterations, "stream_items": stream_items},
        "environment": environment(),
        "latency": [row.as_dict() for row in latency],
        "throughput": [row.as_dict() for row in throughput],
    }


def validate(document: Any) -> list[str]:
    """What is wrong with ``document`` against the schema above; empty when it conforms."""
    if not isinstance(document, dict):
        return ["the document is not a JSON object"]
    problems = []
    if document.get("schema") != SCHEMA:
        problems.append(f"schema: expected {SCHEMA!r}, got {document.get('schema')!r}")
    if document.get("benchmark") not in ("fmq", "burst"):
        problems.append(f"benchmark: expected 'fmq' or 'burst', got {document.get('benchmark')!r}")
    try:
        datetime.datetime.fromisoformat(document.get("created", ""))
    except (TypeError, ValueError):
        problems.append(f"created: not an ISO 8601 time: {document.get('created')!r}")
    problems += _check("parameters", document.get("parameters"),
                       {"iterations": int, "stream_items": (int, type(None))})
    problems += _check("environment", document.get("environment"), _ENVIRONMENT_FIELDS)
    for key, fields in (("latency", _LATENCY_FIELDS), ("throughput", _THROUGHPUT_FIELDS)):
        rows = document.get(key)
        if not isinstance(rows, list):
            problems.append(f"{key}: expected a list")
            continue
        for i, row in enumerate(rows):
            problems += _check(f"{key}[{i}]", row, fields)
    return problems


def _check(where: str, value: Any, fields: dict[str, Any]) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: expected an object"]
    problems = [f"{where}: missing {name!r}" for name in fields if name not in value]
    problems += [f"{where}: unexpected {name!r}" for name in value if name not in fields]
    for name, kind in fields.items():
        if name not in value:
            continue
        item = value[name]
        # JSON does not tell 3 from 3.0; a float field accepts an int, never a bool.
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds:
            kinds = (*kinds, int)
        if isinstance(item, bool) or not isinstance(item, kinds):
            problems.append(f"{where}.{name}: expected {_names(kind)}, got {type(item).__name__}")
    return problems


def _names(kind: Any) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
