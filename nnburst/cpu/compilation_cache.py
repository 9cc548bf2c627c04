"""Compilation caching for the CPU driver (``Compilation.set_caching``).

What a compilation costs the CPU driver is its prepare's first three stages
(:mod:`.prepare`): validating every operation, rewriting the graph
(:mod:`.optimise`), ordering the operations and preparing constants
(filters converted, multipliers computed; :mod:`.states`).  The cache
keeps what they make, a :class:`.states.CompiledSubgraph` (the rewritten
graph, the order and the prepared states), so a second compilation of the
same model under the same token starts at binding (:mod:`.bind`).  The
binding stage's output (bound kernels, C plans) holds C pointers and is
made again on every load.

The file is ``<cache dir>/nnburst-cpu-<token hex>.cache``: a small header
with the format number (:data:`FORMAT`), a JSON description of the graph
and the states, a checksum, and one blob holding every array (no pickle:
loading it can never run code; only the CPU operations' own dataclasses are
rebuilt).  As in NNAPI the app guarantees the token is unique to the model;
a cheap structural key (operand types, shapes, operation codes and
connections; not the constants' values) guards against a token reused for a
different model, and a SHA-256 over the description and the blob catches
corruption.  The key also covers the CPU driver's own source
(:func:`code_fingerprint`): states written by other code (another checkout
of the same version, an edited operation) may not fit this code's kernels.
A cache that is of another format, does not match or does not read is
ignored and rewritten; the description is checked as it is read (operand
and operation indexes in range, constants of their operand's type and
size), so a damaged one is refused, never run.  The states themselves are
trusted as the app's own files are: the cache directory is the app's.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import json
import logging
import math
import os
import struct
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..codes import OperandCode, OperationCode
from ..hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from ..operands import ChannelQuant, OperandInfo
from .states import CompiledSubgraph

log = logging.getLogger("nnburst.cpu")

#: The file format; 1 kept the rewritten graph as optional (None: optimise on
#: load) and could not hold per-channel operands.
FORMAT = 2


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


def save_compiled(path: Path, key: str, original: Subgraph, compiled: CompiledSubgraph) -> bool:
    """Write ``compiled`` (made from ``original``) atomically; False, and nothing
    written, if a state cannot be cached."""
    arrays: list[np.ndarray] = []
    try:
        graph = _graph_changes(original, compiled.subgraph, arrays)
        states = [_encode(s, arrays) for s in compiled.states]
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
        {"key": key, "graph": graph, "order": compiled.order, "states": states, "arrays": layout}
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


#: What a damaged or foreign description can raise while it is read.
_UNREADABLE = (
    ValueError,
    KeyError,
    TypeError,
    IndexError,
    AttributeError,
    OverflowError,
    RecursionError,
    MemoryError,
    struct.error,
)


def load_compiled(path: Path, key: str, original: Subgraph) -> CompiledSubgraph | None:
    """The compiled subgraph cached for ``original``, or None when absent, of
    another format or model, or corrupt (logged)."""
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
        if magic != _MAGIC:
            raise ValueError("not a compilation cache")
        if version != FORMAT:
            log.info(
                "compilation cache %s has format %d, this driver writes %d: prepared afresh",
                path,
                version,
                FORMAT,
            )
            return None
        body = _HEADER.size + length
        if body + 32 > len(data):
            raise ValueError("truncated description")
        description = data[_HEADER.size : body]
        blob_start = body + 32 + (-(body + 32) % 64)
        blob = memoryview(data)[blob_start:]
        if _checksum(description, blob) != data[body : body + 32]:
            raise ValueError("checksum mismatch")
        meta = json.loads(description)
        if not isinstance(meta, dict):
            raise ValueError("the description is not an object")
        if meta.get("key") != key:
            log.info("compilation cache %s is for another model or version: ignored", path)
            return None
        arrays = {}
        dtypes: dict[str, np.dtype] = {}
        for i, (dtype, shape, start) in enumerate(meta["arrays"]):
            dt = dtypes.get(dtype)
            if dt is None:
                dt = dtypes[dtype] = np.dtype(dtype)
            if dt.hasobject:
                raise ValueError("object arrays are never cached")
            shape = tuple(int(d) for d in shape)
            if any(d < 0 for d in shape) or int(start) < 0:
                raise ValueError("a negative array extent")
            count = math.prod(shape)
            if int(start) + count * dt.itemsize > len(blob):
                raise ValueError("array outside the cache blob")
            arrays[i] = np.frombuffer(blob, dt, count, int(start)).reshape(shape)
        subgraph = _restore(original, meta["graph"], arrays)
        order = [int(i) for i in meta["order"]]
        if sorted(order) != list(range(len(subgraph.operations))):
            raise ValueError("the cached operation order does not fit the graph")
        states = [_decode(s, arrays) for s in meta["states"]]
        if len(states) != len(order):
            raise ValueError("not one cached state per operation")
        return CompiledSubgraph(subgraph, order, states)
    except (*_UNREADABLE, json.JSONDecodeError) as exc:
        log.warning("compilation cache %s is corrupt (%s): ignored", path, exc)
        return None


# -- the rewritten graph -------------------------------------------------------------


def _graph_changes(
    original: Subgraph, optimised: Subgraph, arrays: list[np.ndarray]
) -> dict[str, Any]:
    """``optimised`` as plain values next to the ``original`` it was made from:
    its operations, and its operands that are not the original's (folded
    weights, computed constants: each the index of its value in ``arrays``)."""
    operands = []
    for index, operand in enumerate(optimised.operands):
        if index < len(original.operands) and operand is original.operands[index]:
            continue
        info = operand.info
        quant = info.channel_quant
        operands.append(
            [
                index,
                int(info.code),
                None if info.dimensions is None else list(info.dimensions),
                info.scale,
                info.zero_point,
                None if quant is None else [quant.channel_dim, list(quant.scales)],
                int(operand.lifetime),
                None if operand.value is None else _append(arrays, operand.value),
                operand.subgraph,
            ]
        )
    operations = [[int(op.code), list(op.inputs), list(op.outputs)] for op in optimised.operations]
    return {"operands": operands, "operations": operations}


def _append(arrays: list[np.ndarray], value: np.ndarray) -> int:
    arrays.append(value)
    return len(arrays) - 1


def _restore(original: Subgraph, cached: Any, arrays: dict[int, np.ndarray]) -> Subgraph:
    """The subgraph :func:`_graph_changes` wrote down, each value checked.

    Raises:
        ValueError: ``cached`` does not describe a rewrite of ``original``.
    """
    operands = list(original.operands)
    for index, code, dims, scale, zero_point, quant, lifetime, value, ref in cached["operands"]:
        info = OperandInfo(
            OperandCode(code),
            None if dims is None else tuple(_count(d) for d in dims),
            float(scale),
            int(zero_point),
            None if quant is None else ChannelQuant(int(quant[0]), tuple(map(float, quant[1]))),
        )
        if value is not None:
            value = arrays[int(value)]
            if value.dtype != info.dtype or value.nbytes != info.byte_size():
                raise ValueError(f"cached constant {index} is not of its operand's type and size")
        operand = Operand(info, Lifetime(lifetime), value, None if ref is None else int(ref))
        if index == len(operands):
            operands.append(operand)
        elif 0 <= index < len(operands):
            operands[index] = operand
        else:
            raise ValueError(f"cached operand {index} of {len(operands)}")
    operations = []
    for code, inputs, outputs in cached["operations"]:
        inputs, outputs = tuple(int(i) for i in inputs), tuple(int(i) for i in outputs)
        if any(not 0 <= i < len(operands) for i in (*inputs, *outputs)):
            raise ValueError("a cached operation names an operand that does not exist")
        operations.append(Operation(OperationCode(code), inputs, outputs))
    return dataclasses.replace(original, operands=operands, operations=operations)


def _count(dimension: Any) -> int:
    if not isinstance(dimension, int) or dimension < 0:
        raise ValueError(f"cached dimension {dimension!r}")
    return dimension
