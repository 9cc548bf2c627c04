"""Indexing: Gather with its element and N-d forms, the scatters,
ReverseSequence and OneHot.  Positions known at load become one GATHER of
constant indices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from ...codes import FuseCode, OperationCode
from ..converter import Converter, Unsupported, axis_index, maps
from .building import apply, filled, int_tensor, output_of, reshaped, text


@maps("Gather")
def _gather(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    rank = len(c.shape(node.input[0]))
    along = axis_index(a.get("axis", 0), rank)
    axis = c.i32(along)
    indices = node.input[1]
    size = c.shape(node.input[0])[along]
    if indices in c.constants:
        c.constants[indices] = c.constants[indices] % size  # ONNX counts negatives from the end
        where = c.operand(indices)
    else:  # computed: indices < 0 ? indices + size : indices
        shape = c.shape(indices)
        int32 = np.dtype(np.int32)
        negative = c.temporary(np.dtype(np.bool_), shape)
        shifted, where = c.temporary(int32, shape), c.temporary(int32, shape)
        c.add(OperationCode.LESS, [c.operand(indices), c.ints([0])], [negative])
        c.add(
            OperationCode.ADD, [c.operand(indices), c.ints([size]), c.i32(FuseCode.NONE)], [shifted]
        )
        c.add(OperationCode.SELECT, [negative, shifted, c.operand(indices)], [where])
    data, out = c.operand(node.input[0]), c.shape(node.output[0])
    if c.shape(indices):
        c.add(OperationCode.GATHER, [data, axis, where], [output_of(c, node)])
        return
    # A scalar index drops the axis; NNAPI's (a [1] tensor) keeps it, of length 1.
    kept = (*out[:along], 1, *out[along:])
    dtype = c.dtype(node.output[0])
    gathered = apply(c, OperationCode.GATHER, [data, axis, where], dtype, kept)
    reshaped(c, gathered, dtype, kept, out, node.output[0])


def _gathered(c: Converter, sources: Sequence[str], positions: np.ndarray,
              out: int | None = None) -> int:  # fmt: skip
    """The elements at ``positions`` (flat indices into ``sources``, each flattened and
    laid end to end) as one GATHER; the positions' shape is the result's.  Indices
    known at load make every gather, scatter and reversal one of these."""
    dtype = c.dtype(sources[0])
    if dtype not in (np.float32, np.float16) or any(c.dtype(n) != dtype for n in sources):
        raise Unsupported(f"{dtype} data (NNAPI reshapes floats only)")
    flats = []
    for name in sources:
        size = int(np.prod(c.shape(name)))
        flats.append(
            apply(c, OperationCode.RESHAPE, [c.operand(name), c.ints([size])], dtype, (size,))
        )
    total = sum(int(np.prod(c.shape(n))) for n in sources)
    source = flats[0]
    if len(flats) > 1:
        source = apply(c, OperationCode.CONCATENATION, [*flats, c.i32(0)], dtype, (total,))
    where = int_tensor(c, positions if positions.ndim else positions.reshape(1))
    return apply(c, OperationCode.GATHER, [source, c.i32(0), where], dtype, positions.shape, out)


def _indices(c: Converter, name: str, size: int | Sequence[int]) -> np.ndarray:
    """Constant indices, negatives counted from the end, refused when out of range."""
    values = np.asarray(c.value(name, "indices")).astype(np.int64)
    sizes = np.asarray(size)
    if ((values < -sizes) | (values >= sizes)).any():
        raise Unsupported("indices out of range")
    return values % sizes


@maps("GatherElements")
def _gather_elements(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    shape = c.shape(node.input[0])
    axis = axis_index(a.get("axis", 0), len(shape))
    where = _indices(c, node.input[1], shape[axis])
    ids = np.arange(int(np.prod(shape))).reshape(shape)
    _gathered(c, node.input[:1], np.take_along_axis(ids, where, axis), output_of(c, node))


@maps("GatherND")
def _gather_nd(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    shape = c.shape(node.input[0])
    batch = a.get("batch_dims", 0)
    depth = c.shape(node.input[1])[-1]
    where = _indices(c, node.input[1], shape[batch : batch + depth])
    ids = np.arange(int(np.prod(shape))).reshape(shape)
    lead = int(np.prod(shape[:batch]))
    inner = ids.reshape(lead, *shape[batch:])
    rows = where.reshape(lead, -1, depth)
    picked = np.stack([inner[b][tuple(rows[b].T)] for b in range(lead)])
    positions = picked.reshape(c.shape(node.output[0]))
    _gathered(c, node.input[:1], positions, output_of(c, node))


@maps("ScatterElements", "Scatter", "ScatterND")
def _scatter(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """With constant indices every output element knows which updates reach it.
    No reduction: one GATHER from data and updates laid end to end (the last update
    wins).  A reduction: data, then one round per update an element receives, each a
    GATHER of its next update (or of the operation's identity) and the operation."""
    data, updates = node.input[0], node.input[2]
    shape, dtype = c.shape(data), c.dtype(data)
    size = int(np.prod(shape))
    update_ids = np.arange(int(np.prod(c.shape(updates)))).reshape(c.shape(updates))
    targets = np.arange(size).reshape(shape)
    indices_shape = c.shape(node.input[1])
    if node.op_type == "ScatterND":
        depth = indices_shape[-1] if indices_shape else len(shape) + 1
        if depth > len(shape) or c.shape(updates) != (*indices_shape[:-1], *shape[depth:]):
            raise Unsupported("indices or updates of shapes that do not fit the data")
        where = _indices(c, node.input[1], shape[:depth])
        target_of = np.stack([targets[tuple(i)] for i in where.reshape(-1, depth)])
        pairs = zip(target_of.reshape(-1), update_ids.reshape(-1))
    else:
        axis = axis_index(a.get("axis", 0), len(shape))
        if c.shape(updates) != indices_shape or len(indices_shape) != len(shape):
            raise Unsupported("indices and updates of different shapes or ranks")
        where = _indices(c, node.input[1], shape[axis])
        coordinates: list[np.ndarray] = list(np.indices(where.shape))
        coordinates[axis] = where
        pairs = zip(targets[tuple(coordinates)].reshape(-1), update_ids.reshape(-1))
    received: list[list[int]] = [[] for _ in range(size)]
    for target, update in pairs:
        received[int(target)].append(int(update))
    reduction = text(a.get("reduction"), "none")
    if reduction == "none":
        positions = np.array([r[-1] + size if r else i for i, r in enumerate(received)])
        _gathered(c, [data, updates], positions.reshape(shape), output_of(c, node))
        return
    operations = {
        "add": (OperationCode.ADD, 0.0),
        "mul": (OperationCode.MUL, 1.0),
        "max": (OperationCode.MAXIMUM, -np.inf),
        "min": (OperationCode.MINIMUM, np.inf),
    }
    if reduction not in operations:
        raise Unsupported(f"reduction {reduction!r}")
    code, identity = operations[reduction]
    if dtype not in (np.float32, np.float16):
        raise Unsupported(f"{dtype} data")
    rounds = max(len(r) for r in received)
    padded = update_ids.size  # the identity's position, after the updates
    total = c.operand(data)
    flat = apply(c, OperationCode.RESHAPE, [c.operand(updates), c.ints([padded])], dtype, (padded,))
    extended = apply(
        c,
        OperationCode.CONCATENATION,
        [flat, filled(c, dtype, (1,), identity), c.i32(0)],
        dtype,
        (padded + 1,),
    )
    for k in range(rounds):
        positions = np.array([r[k] if k < len(r) else padded for r in received]).reshape(shape)
        picked = apply(
            c, OperationCode.GATHER, [extended, c.i32(0), int_tensor(c, positions)], dtype, shape
        )
        target = output_of(c, node) if k == rounds - 1 else None
        total = apply(c, code, [total, picked], dtype, shape, target)


@maps("ReverseSequence")
def _reverse_sequence(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Each batch entry's first sequence_lens[b] steps reversed: one GATHER."""
    shape = c.shape(node.input[0])
    batch_axis, time_axis = a.get("batch_axis", 1), a.get("time_axis", 0)
    if len(shape) < 2 or {batch_axis, time_axis} != {0, 1}:
        raise Unsupported(f"batch axis {batch_axis} and time axis {time_axis}")
    lengths = c.value(node.input[1], "sequence lengths").astype(np.int64)
    if lengths.shape != (shape[batch_axis],):
        raise Unsupported("not one sequence length per batch entry")
    ids = np.moveaxis(
        np.arange(int(np.prod(shape))).reshape(shape), (batch_axis, time_axis), (0, 1)
    )
    flipped = ids.copy()
    for b, length in enumerate(lengths.tolist()):
        if not 0 <= length <= shape[time_axis]:
            raise Unsupported("sequence lengths out of range")
        flipped[b, :length] = ids[b, :length][::-1]
    positions = np.moveaxis(flipped, (0, 1), (batch_axis, time_axis))
    _gathered(c, node.input[:1], positions, output_of(c, node))


@maps("OneHot")
def _one_hot(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """A constant depth: EQUAL of the indices (negatives counted from the end)
    against 0 … depth − 1 on a new first axis, SELECT of the on and off values,
    then a TRANSPOSE moving that axis where ONNX wants it."""
    indices, values = node.input[0], node.input[2]
    if c.dtype(indices).kind not in "iu":
        raise Unsupported(f"{c.dtype(indices)} indices (integers map)")
    depth = int(c.value(node.input[1], "depth").reshape(-1)[0])
    shape, out, dtype = c.shape(indices), c.shape(node.output[0]), c.dtype(node.output[0])
    axis = axis_index(a.get("axis", -1), len(out))
    first = (depth, *shape)  # the new axis first: EQUAL broadcasts over leading axes
    boolean, int32 = np.dtype(np.bool_), np.dtype(np.int32)
    where = c.operand(indices)
    negative = apply(c, OperationCode.LESS, [where, c.ints([0])], boolean, shape)
    shifted = apply(c, OperationCode.ADD, [where, c.ints([depth])], int32, shape)
    where = apply(c, OperationCode.SELECT, [negative, shifted, where], int32, shape)
    positions = np.arange(depth, dtype=np.int32).reshape(depth, *[1] * len(shape))
    hot = apply(c, OperationCode.EQUAL, [where, int_tensor(c, positions)], boolean, first)
    # on, off: one element each, broadcast to the whole
    if values in c.constants:
        choices = [filled(c, dtype, first, c.constants[values].reshape(-1)[k]) for k in (1, 0)]
    else:
        filler = filled(c, dtype, first, -0.0)  # x + (-0.0) keeps every x
        choices = []
        for k in (1, 0):
            inputs = [c.operand(values), c.ints([k]), c.ints([1])]
            element = apply(c, OperationCode.SLICE, inputs, dtype, (1,))
            choices.append(apply(c, OperationCode.ADD, [element, filler], dtype, first))
    if axis == 0:
        c.add(OperationCode.SELECT, [hot, *choices], [output_of(c, node)])
        return
    chosen = apply(c, OperationCode.SELECT, [hot, *choices], dtype, first)
    perm = [*range(1, axis + 1), 0, *range(axis + 1, len(out))]
    c.add(OperationCode.TRANSPOSE, [chosen, c.ints(perm)], [output_of(c, node)])
