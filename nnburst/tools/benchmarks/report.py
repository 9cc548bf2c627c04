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

The default run (``"benchmark": "runtime"``, the runtime's paths against a
Pipe baseline) extends it: the same top-level keys plus ``interrupted``, its
own ``parameters``, and latency rows that say what each row measured::

    {
      "schema": "nnburst.bench/1",
      "benchmark": "runtime",
      "created": ..., "environment": {...},    # as above
      "interrupted": bool,           # Ctrl-C: the rows are the ones that finished
      "seconds": float,              # wall time of the whole run
      "parameters": {
        "models": [str],             # "add-mul", "conv"
        "conv_size": int,            # the conv input is [1, conv_size, conv_size, 16]
        "iterations": int | null,    # per mode; null: bounded by duration
        "duration": float | null,    # seconds per mode; null: bounded by iterations
        "paths": [str],              # "sync", "async", "burst", "onnxruntime" (the peers)
        "placements": [str],         # "in-process", "cross-process"
        "pin": bool,
        "cpus": [int, int] | null,   # (timing thread, other side) when pinned
        "busy": bool                 # --busy: a CPU-bound process per CPU, cross-process rows
      },
      "peers": {                     # the onnxruntime peers (nnburst/tools/benchmarks/peers.py)
        "requested": bool,           # "onnxruntime" in paths
        "missing": str | null,       # why they did not run (not installed); null: they could
        "onnxruntime": str | null,   # versions, null when not installed
        "onnx": str | null,
        "session": {...}             # how the sessions are configured (peers.SESSION)
      },
      "load": {                      # --busy only, else null
        "processes": int,            # os.cpu_count() spinning processes
        "pids": [int]                # every load process started (all stopped at the end)
      } | null,
      "latency": [                   # LatencyStats.as_dict() plus:
        {..., "model": str,          # "add-mul" | "conv"
         "workload": str,            # e.g. "conv 32x32x16"
         "path": str,                # "sync" | "async" | "burst" | "onnxruntime" | "pipe"
         "placement": str,           # "in-process" | "cross-process" (onnxruntime via Pipe)
         "polling_us": int | null,   # bursts: 0, 50 or 200
         "bytes_in": int, "bytes_out": int,
         "seconds": float,           # wall time of the mode, set-up included
         "vs_baseline": float | null,  # p50 over the same model's Pipe p50
         "vs_onnxruntime": float | null,  # p50 over the onnxruntime row of the same
                                          # placement (in-process, or via Pipe)
         "loaded": bool}             # ran while the --busy load spun
      ],
      "failures": [                  # modes that could not run (or a peer whose output
        {"model": str, "mode": str, "error": str}   # differs from nnburst's); the others did
      ],
      "facades": [                   # add-mul in-process through the facades (facades.py)
        {"facade": str, "runner_us": float, "facade_us": float, "added_us": float}
      ],
      "throughput": []
    }

``nnburst bench --model FILE.tflite|.onnx`` (``"benchmark": "model"``, one model
file on every path against its own runtime, :mod:`.model_bench`)::

    {
      "schema": "nnburst.bench/1",
      "benchmark": "model",
      "created": ..., "environment": {...},    # as above
      "seconds": float,              # wall time of the whole run, loading included
      "parameters": {
        "model": str,                # the file, as given
        "iterations": int | null,    # per row; null: bounded by duration
        "duration": float | null,    # seconds per row; null: bounded by iterations
        "turns": int                 # slices each row's time is cut into, rows alternating
      },
      "inputs": [                    # the random inputs every row ran on
        {"name": str, "shape": [int], "dtype": str}
      ],
      "peer": str,                   # the row the ratios compare to: "LiteRT in-process"
                                     # or "onnxruntime in-process" (may not have run)
      "latency": [                   # LatencyStats.as_dict() plus:
        {..., "vs_peer": float | null}   # p50 over the peer's p50; null: no peer row
      ],
      "notes": [str],                # a path that was not timed, and why
      "throughput": []
    }

:func:`validate` checks a document against this schema; the tests use it.
"""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._version import __version__
from . import load, peers
from .runtime_bench import PEER, Result, peer_ratio, ratio
from .stats import LatencyStats, Throughput

if TYPE_CHECKING:
    from .model_bench import Result as ModelResult

__all__ = ["SCHEMA", "build", "build_model", "build_runtime", "environment", "validate"]

SCHEMA = "nnburst.bench/1"

_LATENCY_FIELDS = {
    "name": str,
    "count": int,
    "p50_us": float,
    "p90_us": float,
    "p99_us": float,
    "p999_us": float,
    "mean_us": float,
    "per_second": float,
}
_RUNTIME_ROW_FIELDS = {
    **_LATENCY_FIELDS,
    "model": str,
    "workload": str,
    "path": str,
    "placement": str,
    "polling_us": (int, type(None)),
    "bytes_in": int,
    "bytes_out": int,
    "seconds": float,
    "vs_baseline": (float, type(None)),
    "vs_onnxruntime": (float, type(None)),
    "loaded": bool,
}
_MODEL_ROW_FIELDS = {**_LATENCY_FIELDS, "vs_peer": (float, type(None))}
_MODEL_PARAMETERS = {
    "model": str,
    "iterations": (int, type(None)),
    "duration": (float, type(None)),
    "turns": int,
}
_INPUT_FIELDS = {"name": str, "shape": list, "dtype": str}
_FACADE_FIELDS = {"facade": str, "runner_us": float, "facade_us": float, "added_us": float}
_RUNTIME_PARAMETERS = {
    "models": list,
    "conv_size": int,
    "iterations": (int, type(None)),
    "duration": (float, type(None)),
    "paths": list,
    "placements": list,
    "pin": bool,
    "cpus": (list, type(None)),
    "busy": bool,
}
_PEERS_FIELDS = {
    "requested": bool,
    "missing": (str, type(None)),
    "onnxruntime": (str, type(None)),
    "onnx": (str, type(None)),
    "session": dict,
}
_LOAD_FIELDS = {"processes": int, "pids": list}
_FAILURE_FIELDS = {"model": str, "mode": str, "error": str}
_THROUGHPUT_FIELDS = {"name": str, "items": int, "seconds": float, "per_second": float}
_ENVIRONMENT_FIELDS = {
    "nnburst": str,
    "python": str,
    "implementation": str,
    "numpy": str,
    "platform": str,
    "machine": str,
    "cpu_count": (int, type(None)),
    "usable_cpus": (int, type(None)),
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


def build_runtime(result: Result) -> dict[str, Any]:
    """The document for the default run (:mod:`.runtime_bench`), finished or interrupted."""
    settings = result.settings
    rows = []
    for row in result.rows:
        mode = row.mode
        rows.append(
            {
                **row.stats.as_dict(),
                "model": mode.model,
                "workload": row.workload,
                "path": mode.path,
                "placement": mode.placement,
                "polling_us": mode.polling_us,
                "bytes_in": row.bytes_in,
                "bytes_out": row.bytes_out,
                "seconds": row.seconds,
                "vs_baseline": ratio(row, result.baseline(mode.model)),
                "vs_onnxruntime": peer_ratio(row, result),
                "loaded": settings.busy and mode.placement == "cross-process",
            }
        )
    return {
        "schema": SCHEMA,
        "benchmark": "runtime",
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "interrupted": result.interrupted,
        "seconds": result.seconds,
        "parameters": {
            "models": list(settings.models),
            "conv_size": settings.conv_size,
            "iterations": settings.iterations,
            "duration": settings.duration,
            "paths": list(settings.paths),
            "placements": list(settings.placements),
            "pin": settings.pin,
            "cpus": None if result.cpus is None else list(result.cpus),
            "busy": settings.busy,
        },
        "peers": {
            "requested": PEER in settings.paths,
            "missing": result.peers_missing,
            **peers.versions(),
            "session": dict(peers.SESSION),
        },
        "load": (
            {"processes": load.default_count(), "pids": list(result.load_pids)}
            if settings.busy
            else None
        ),
        "environment": environment(),
        "latency": rows,
        "failures": [
            {"model": mode.model, "mode": mode.name, "error": error}
            for mode, error in result.failures
        ],
        "facades": [vars(row) for row in result.facades],
        "throughput": [],
    }


def build_model(result: ModelResult) -> dict[str, Any]:
    """The document for ``bench --model FILE`` (:mod:`.model_bench`)."""
    peer = result.row(result.peer)
    return {
        "schema": SCHEMA,
        "benchmark": "model",
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "seconds": result.wall_seconds,
        "parameters": {
            "model": result.path,
            "iterations": result.iterations,
            "duration": result.seconds,
            "turns": result.turns,
        },
        "inputs": [
            {"name": i.name, "shape": list(i.shape), "dtype": str(i.dtype)} for i in result.inputs
        ],
        "peer": result.peer,
        "environment": environment(),
        "latency": [
            {**row.as_dict(), "vs_peer": None if peer is None else row.p50_us / peer.p50_us}
            for row in result.rows
        ],
        "notes": list(result.notes),
        "throughput": [],
    }


def validate(document: Any) -> list[str]:
    """What is wrong with ``document`` against the schema above; empty when it conforms."""
    if not isinstance(document, dict):
        return ["the document is not a JSON object"]
    problems = []
    if document.get("schema") != SCHEMA:
        problems.append(f"schema: expected {SCHEMA!r}, got {document.get('schema')!r}")
    runtime = document.get("benchmark") == "runtime"
    model = document.get("benchmark") == "model"
    if document.get("benchmark") not in ("fmq", "burst", "runtime", "model"):
        problems.append(
            "benchmark: expected 'fmq', 'burst', 'runtime' or 'model', "
            f"got {document.get('benchmark')!r}"
        )
    try:
        datetime.datetime.fromisoformat(document.get("created", ""))
    except (TypeError, ValueError):
        problems.append(f"created: not an ISO 8601 time: {document.get('created')!r}")
    if runtime or model:
        seconds = document.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            problems.append(f"seconds: expected float, got {seconds!r}")
    if runtime:
        problems += _check("parameters", document.get("parameters"), _RUNTIME_PARAMETERS)
        if not isinstance(document.get("interrupted"), bool):
            problems.append(f"interrupted: expected bool, got {document.get('interrupted')!r}")
    elif model:
        problems += _check("parameters", document.get("parameters"), _MODEL_PARAMETERS)
        problems += _check_list("inputs", document.get("inputs"), _INPUT_FIELDS)
        if not isinstance(document.get("peer"), str):
            problems.append(f"peer: expected str, got {document.get('peer')!r}")
        notes = document.get("notes")
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            problems.append("notes: expected a list of strings")
    else:
        problems += _check(
            "parameters",
            document.get("parameters"),
            {"iterations": int, "stream_items": (int, type(None))},
        )
    known = {"schema", "benchmark", "created", "parameters", "environment", "latency", "throughput"}
    if model:
        known |= {"seconds", "inputs", "peer", "notes"}
    if runtime:
        known |= {"interrupted", "seconds", "failures", "peers", "load", "facades"}
        problems += _check_list("facades", document.get("facades", []), _FACADE_FIELDS)
        problems += _check("peers", document.get("peers"), _PEERS_FIELDS)
        if "load" not in document:
            problems.append("missing 'load'")
        elif document["load"] is not None:
            problems += _check("load", document.get("load"), _LOAD_FIELDS)
        failures = document.get("failures")
        if not isinstance(failures, list):
            problems.append("failures: expected a list")
        else:
            for i, failure in enumerate(failures):
                problems += _check(f"failures[{i}]", failure, _FAILURE_FIELDS)
    problems += [f"unexpected {key!r}" for key in document if key not in known]
    problems += _check("environment", document.get("environment"), _ENVIRONMENT_FIELDS)
    row_fields = _RUNTIME_ROW_FIELDS if runtime else _MODEL_ROW_FIELDS if model else _LATENCY_FIELDS
    for key, fields in (("latency", row_fields), ("throughput", _THROUGHPUT_FIELDS)):
        problems += _check_list(key, document.get(key), fields)
    return problems


def _check_list(where: str, rows: Any, fields: dict[str, Any]) -> list[str]:
    if not isinstance(rows, list):
        return [f"{where}: expected a list"]
    return [
        problem for i, row in enumerate(rows) for problem in _check(f"{where}[{i}]", row, fields)
    ]


def _check(where: str, value: Any, fields: dict[str, Any]) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: expected an object"]
    problems = [f"{where}: missing {name!r}" for name in fields if name not in value]
    problems += [f"{where}: unexpected {name!r}" for name in value if name not in fields]
    for name, kind in fields.items():
        if name not in value:
            continue
        item = value[name]
        # JSON does not tell 3 from 3.0; a float field accepts an int, a bool only a bool field.
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds:
            kinds = (*kinds, int)
        if (isinstance(item, bool) and bool not in kinds) or not isinstance(item, kinds):
            problems.append(f"{where}.{name}: expected {_names(kind)}, got {type(item).__name__}")
    return problems


def _names(kind: Any) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
