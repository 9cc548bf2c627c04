"""Compilation caching for the CPU driver (``Compilation.set_caching``).

What a compilation costs the CPU driver is validating every operation,
ordering them, rewriting the graph (:mod:`.optimise`) and preparing
constants (filters converted, multipliers computed).  The cache keeps the
rewritten graph, the order and the prepared states, so a second
compilation of the same model under the same token skips all four.

The file is ``<cache dir>/nnburst-cpu-<token hex>.cache``: a small header,
a JSON description of the states, a checksum, and one blob holding every
array (no pickle: loading it can never run code; only the CPU operations'
own dataclasses are rebuilt).  As in
NNAPI the app guarantees the token is unique to the model; a cheap structural
key (operand types, shapes, operation codes and connections; not the
constants' values) guards against a token reused for a different model, and
a SHA-256 over the description and the blob catches corruption.  The key
also covers the CPU driver's own source (:func:`code_fingerprint`): states
written by other code (another checkout of the same version, an edited
operation) may not fit this code's kernels.  A cache that does not match or
does not read is ignored and rewritten.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import json
import logging
import os
import struct
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..hal.model import HalModel

log = logging.getLogger("nnburst.cpu")

FORMAT = 1


def cache_path(cache_dir: str | os.PathLike[str], token: bytes) -> Path:
    return Path(cache_dir) / f"nnburst-cpu-{token.hex()}.cache"


@functools.cache
def code_fingerprint() -> str:
    """SHA-256 of the CPU driver's sources, which decide what a prepared state
    holds and how kernels read it (hashed once per process, ~1 ms)."""
    digest = hashlib.sha256()
    for source in sorted(Path(__file__).parent.rglob("*.py")):
        digest.update(source.relative_to(Path(__file__).parent).as_posix().encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()


def structure_key(model: HalModel) -> str:
    """A hash of the model's structure (not its constant values) and of the code
    that prepares it."""
    parts: list[Any] = [FORMAT, __version__, code_fingerprint(), model.relax_float32_to_float16]
    for subgraph in model.subgraphs():
        for operand in subgraph.operands:
            info, value, quant = operand.info, operand.value, operand.info.channel_quant
            parts.append(
                (
                    int(info.code),
                    info.dimensions,
                    info.scale,
                    info.zero_point,
                    quant and (quant.channel_dim, quant.scales),
                    int(operand.lifetime),
                    None if value is None else (value.shape, value.dtype.num),
                    operand.subgraph,
                )
            )
        parts.extend((int(op.code), op.inputs, op.outputs) for op in subgraph.operations)
        parts.append((subgraph.input_indexes, subgraph.output_indexes))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


# -- prepared states as JSON + arrays --------------------------------------------


def _encode(value: Any, arrays: list[np.ndarray]) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        arrays.append(value)
        return {"array": len(arrays) - 1}
    if isinstance(value, np.generic):
        arrays.append(np.asarray(value))
        return {"scalar": len(arrays) - 1}
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [_encode(v, arrays) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: _encode(v, arrays) for k, v in value.items()}}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {
            "dataclass": f"{cls.__module__}:{cls.__qualname__}",
            "fields": {
                f.name: _encode(getattr(value, f.name), arrays) for f in dataclasses.fields(value)
            },
        }
    raise TypeError(f"cannot cache a prepared state of type {type(value).__name__}")


def _decode(value: Any, arrays: dict[int, np.ndarray]) -> Any:
    if not isinstance(value, dict):
        return value
    if "array" in value:
        return arrays[int(value["array"])]
    if "scalar" in value:
        return arrays[int(value["scalar"])][()]
    if "list" in value:
        return [_decode(v, arrays) for v in value["list"]]
    if "tuple" in value:
        return tuple(_decode(v, arrays) for v in value["tuple"])
    if "dict" in value:
        return {k: _decode(v, arrays) for k, v in value["dict"].items()}
    if "dataclass" in value:
        cls = _dataclass(value["dataclass"])
        try:
            return cls(**{k: _decode(v, arrays) for k, v in value["fields"].items()})
        except TypeError as exc:
            raise ValueError(f"cached {cls.__name__} does not fit: {exc}") from exc
    raise ValueError(f"unknown cached value {value!r}")


def _dataclass(name: str) -> type:
    """Only the CPU operations' own dataclasses may be rebuilt from a cache."""
    module_name, _, qualname = name.partition(":")
    if not module_name.startswith("nnburst.cpu.ops.") or "." in qualname:
        raise ValueError(f"{name} is not a CPU driver state")
    cls = getattr(importlib.import_module(module_name), qualname, None)
    if not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
        raise ValueError(f"{name} is not a dataclass")
    return cls


# -- files ---------------------------------------------------------------------------


# File layout: b"NNBC" | u32 format | u64 description length | description
# (UTF-8 JSON) | 32-byte checksum (see _checksum) | padding to 64 |
# blob (every array, 64-byte aligned, offsets in the description).
_MAGIC = b"NNBC"


def _checksum(description: bytes, blob: bytes | bytearray | memoryview) -> bytes:
    """SHA-256 of the description and CRC-32 of the blob: corruption, not
    tampering, is the threat, and CRC-32 runs at memory speed on big weights."""
    return hashlib.sha256(description + zlib.crc32(blob).to_bytes(4, "little")).digest()


_HEADER = struct.Struct("<4sIQ")


def save(
    path: Path, key: str, order: list[int], states: list[Any], graph: dict[str, Any] | None = None
) -> bool:
    """Write the cache atomically; False (and nothing written) if a state cannot be cached.

    ``graph``: the rewritten main subgraph (:func:`.optimise.changes`), so that a
    cached compilation skips the graph optimiser too."""
    arrays: list[np.ndarray] = []
    try:
        encoded = [_encode(s, arrays) for s in states]
        encoded_graph = _encode(graph, arrays)
    except TypeError as exc:
        log.info("compilation not cached: %s", exc)
        return False
    layout, offset = [], 0
    for a in arrays:
        offset = -(-offset // 64) * 64
        layout.append((a.dtype.str, a.shape, offset))
        offset += a.nbytes
    blob = bytearray(offset)
    for a, (_, _, start) in zip(arrays, layout):
        blob[start : start + a.nbytes] = np.ascontiguousarray(a).tobytes()
    description = json.dumps(
        {"key": key, "order": order, "states": encoded, "graph": encoded_graph, "arrays": layout}
    ).encode()
    checksum = _checksum(description, blob)
    head = _HEADER.pack(_MAGIC, FORMAT, len(description)) + description + checksum
    padding = bytes(-len(head) % 64)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
            f.write(head + padding)
            f.write(blob)
        os.replace(f.name, path)
    except OSError as exc:
        log.info("compilation cache not written: %s", exc)
        return False
    return True


def load(path: Path, key: str) -> tuple[list[int], list[Any]] | None:
    """(operation order, prepared states), or None when absent, stale or corrupt."""
    cached = load_compilation(path, key)
    return None if cached is None else (cached[0], cached[1])


def load_compilation(
    path: Path, key: str
) -> tuple[list[int], list[Any], dict[str, Any] | None] | None:
    """(operation order, prepared states, rewritten graph or None), or None when
    absent, stale or corrupt."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("compilation cache %s unreadable (%s): ignored", path, exc)
        return None
    try:
        if len(data) < _HEADER.size:
            raise ValueError("truncated header")
        magic, version, length = _HEADER.unpack_from(data)
        if magic != _MAGIC or version != FORMAT:
            raise ValueError("not a cache of this format")
        body = _HEADER.size + length
        if body + 32 > len(data):
            raise ValueError("truncated description")
        description = data[_HEADER.size : body]
        blob_start = body + 32 + (-(body + 32) % 64)
        blob = memoryview(data)[blob_start:]
        if _checksum(description, blob) != data[body : body + 32]:
            raise ValueError("checksum mismatch")
        meta = json.loads(description)
        if meta.get("key") != key:
            log.info("compilation cache %s is for another model or version: ignored", path)
            return None
        arrays = {}
        for i, (dtype, shape, start) in enumerate(meta["arrays"]):
            dt = np.dtype(dtype)
            if dt.hasobject:
                raise ValueError("object arrays are never cached")
            count = int(np.prod(shape, dtype=np.int64))
            if start < 0 or start + count * dt.itemsize > len(blob):
                raise ValueError("array outside the cache blob")
            arrays[i] = np.frombuffer(blob, dt, count, start).reshape(shape)
        graph = _decode(meta.get("graph"), arrays)
        if graph is not None and not isinstance(graph, dict):
            raise ValueError("the cached graph is not a description of one")
        order = [int(i) for i in meta["order"]]
        return order, [_decode(s, arrays) for s in meta["states"]], graph
    except (ValueError, KeyError, TypeError, struct.error, json.JSONDecodeError) as exc:
        log.warning("compilation cache %s is corrupt (%s): ignored", path, exc)
        return None
