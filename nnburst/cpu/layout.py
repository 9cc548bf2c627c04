"""NCHW graphs computed NHWC inside: transposes only at a layout region's border.

The CPU kernels compute windows (convolutions, pools) on NHWC data; an ONNX
model is NCHW, so every such operation used to transpose its input in and
its output back: PP-OCR's classifier moved each feature map three times
per layer.  Here, at prepare time, each float32 NCHW windowed operation
becomes TRANSPOSE -> the operation on NHWC -> TRANSPOSE, and transposes are
then pushed forward through the operations that do not care about layout
(an NCHW resize becomes the same sandwich):

* two transposes in a row compose: undone when they cancel, else one;
* an elementwise operation (unary, or binary with numpy broadcasting) whose
  tensor inputs are all the same transpose of something, or constants
  (re-laid: a constant of lower rank is first given its broadcast's leading
  ones), computes on the untransposed inputs and is transposed after;
* MEAN keeping its dimensions, CONCATENATION and PAD the same, their axes
  mapped through the permutation.

Nothing changes a value: a transpose moves bytes, an elementwise operation
gives the same element wherever it sits.  What is left are the transposes at
the region's borders (the model's input, an operation that needs its
layout); one that moves only axes of size 1 is a RESHAPE.  The result is
kept only when it moves fewer elements through transposes than the graph as
written (whose NCHW windows transpose their input and output each run).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from ..codes import OperandCode, OperationCode
from ..errors import NNError
from ..hal.model import Lifetime, Operand, Operation
from ..operands import SCALAR_CODES
from .ops.window_geometry import window_args

if TYPE_CHECKING:
    from .optimise import _Graph

_F32 = OperandCode.TENSOR_FLOAT32
_CONSTANT = (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE)
#: Windowed operations: (position of the first scalar parameter, extras, dilation).
_WINDOWED = {
    OperationCode.CONV_2D: (3, (), True),
    OperationCode.DEPTHWISE_CONV_2D: (3, ("depth_multiplier",), True),
    OperationCode.MAX_POOL_2D: (1, ("filter_w", "filter_h"), False),
    OperationCode.AVERAGE_POOL_2D: (1, ("filter_w", "filter_h"), False),
    OperationCode.L2_POOL_2D: (1, ("filter_w", "filter_h"), False),
}
#: Each output element a function of the same element of each input (broadcast).
_ELEMENTWISE = frozenset(
    {
        OperationCode.ADD,
        OperationCode.SUB,
        OperationCode.MUL,
        OperationCode.DIV,
        OperationCode.MAXIMUM,
        OperationCode.MINIMUM,
        OperationCode.POW,
        OperationCode.PRELU,
        OperationCode.HARD_SWISH,
        OperationCode.RELU,
        OperationCode.RELU1,
        OperationCode.RELU6,
        OperationCode.LOGISTIC,
        OperationCode.TANH,
        OperationCode.ABS,
        OperationCode.EXP,
        OperationCode.NEG,
        OperationCode.SQRT,
        OperationCode.RSQRT,
        OperationCode.FLOOR,
    }
)
_PADS = (OperationCode.PAD, OperationCode.PAD_V2, OperationCode.MIRROR_PAD)
#: Resizes: NCHW when their input 3 is true (their sizes and flags do not move).
_RESIZES = (OperationCode.RESIZE_BILINEAR, OperationCode.RESIZE_NEAREST_NEIGHBOR)
_RESIZE_LAYOUT = 3
TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
#: A bound on the pushing rounds (each round moves a transpose later in a finite graph).
_MAX_ROUNDS = 10_000


def nhwc_regions(graph: _Graph) -> bool:
    """Rewrite ``graph`` (already optimised otherwise) as above; whether it is
    better for it.  When it is not, ``graph`` must be dropped by the caller."""
    before = _moved_elements(graph, counting_nchw=True)
    expanded = 0
    for position in range(len(graph.operations)):
        expanded += _expand(graph, position)
    pushed = len(graph.rewrites)
    rounds = 0
    changed = True
    while changed and rounds < _MAX_ROUNDS:
        changed = False
        position = 0
        while position < len(graph.operations):
            op = graph.operations[position]
            if op is not None and op.code == OperationCode.TRANSPOSE:
                changed |= _merge_twins(graph, position)
                for reader in list(graph.readers.get(op.outputs[0], [])):
                    if graph.operations[position] is None:
                        break
                    if _push(graph, position, reader):
                        changed = True
                        rounds += 1
                _drop_if_dead(graph, position)
            position += 1
    for position in range(len(graph.operations)):
        _as_reshape(graph, position)
    after = _moved_elements(graph, counting_nchw=False)
    notes = Counter(graph.rewrites[pushed:])
    graph.rewrites[pushed:] = [
        f"{expanded} NCHW windows computed NHWC, then "
        + ", ".join(f"{note} x{count}" for note, count in sorted(notes.items()))
        + f": {before} -> {after} elements transposed a run"
    ]
    return after < before


# -- questions ------------------------------------------------------------------------


def _dims(graph: _Graph, index: int) -> tuple[int, ...]:
    return tuple(graph.info(index).dimensions or ())


def _perm(graph: _Graph, op: Operation) -> tuple[int, ...] | None:
    """A TRANSPOSE's constant permutation, None when not constant or not one."""
    if op.code != OperationCode.TRANSPOSE or len(op.inputs) != 2:
        return None
    value = graph.constant(op.inputs[1])
    rank = len(_dims(graph, op.inputs[0]))
    if value is None or value.size != rank:
        return None
    perm = tuple(int(p) % rank if rank else 0 for p in value.reshape(-1))
    return perm if sorted(perm) == list(range(rank)) else None


def _tensor(graph: _Graph, index: int) -> bool:
    return graph.info(index).code not in SCALAR_CODES


def _temporary(graph: _Graph, index: int) -> bool:
    return graph.operands[index].lifetime == Lifetime.TEMPORARY_VARIABLE and (
        index not in graph.outputs
    )


def _moved_elements(graph: _Graph, counting_nchw: bool) -> int:
    """Elements a run moves through TRANSPOSEs (and, ``counting_nchw``, through
    the transposes inside each NCHW window operation)."""
    total = 0
    for op in graph.operations:
        if op is None:
            continue
        if op.code == OperationCode.TRANSPOSE:
            total += math.prod(_dims(graph, op.outputs[0]))
        elif counting_nchw and _nchw_position(graph, op) is not None:
            total += math.prod(_dims(graph, op.inputs[0])) + math.prod(_dims(graph, op.outputs[0]))
    return total


def _nchw_position(graph: _Graph, op: Operation) -> int | None:
    """The input position of a float32 windowed operation's NCHW flag when set
    and the shapes are static rank 4; else None."""
    shape = _WINDOWED.get(op.code)
    if op.code in _RESIZES and len(op.outputs) == 1:
        shape = (0, (), False)  # its layout flag is input 3
    if shape is None or len(op.outputs) != 1:
        return None
    first, extras, dilation = shape
    x, y = graph.info(op.inputs[0]), graph.info(op.outputs[0])
    if x.code != _F32 or y.code != _F32 or not x.is_fully_specified or not y.is_fully_specified:
        return None
    if len(x.dimensions or ()) != 4 or len(y.dimensions or ()) != 4:
        return None
    if op.code in _RESIZES:
        position: int | None = _RESIZE_LAYOUT
    else:
        try:
            args = window_args(graph.signature(op), first, extras, dilation=dilation)
        except NNError:  # its validation refuses it: left alone
            return None
        position = args.positions.get("nchw")
    if position is None or position >= len(op.inputs) or not graph.scalar(op.inputs[position]):
        return None
    return position


# -- changes --------------------------------------------------------------------------


def _temp(graph: _Graph, like: int, dims: tuple[int, ...]) -> int:
    info = graph.info(like)
    graph.operands.append(
        Operand(
            type(info)(info.code, dims, info.scale, info.zero_point),
            Lifetime.TEMPORARY_VARIABLE,
        )
    )
    return len(graph.operands) - 1


def _ints(graph: _Graph, values: tuple[int, ...]) -> int:
    return graph.add_constant(np.array(values, np.int32), OperandCode.TENSOR_INT32)


def _transpose(graph: _Graph, x: int, perm: tuple[int, ...], y: int) -> Operation:
    return Operation(OperationCode.TRANSPOSE, (x, _ints(graph, perm)), (y,))


def _expand(graph: _Graph, position: int) -> int:
    """An NCHW windowed operation as TRANSPOSE, the operation on NHWC, TRANSPOSE."""
    op = graph.operations[position]
    if op is None:
        return 0
    flag = _nchw_position(graph, op)
    if flag is None:
        return 0
    x, y = op.inputs[0], op.outputs[0]
    nhwc_in = _temp(graph, x, tuple(_dims(graph, x)[p] for p in TO_NHWC))
    nhwc_out = _temp(graph, y, tuple(_dims(graph, y)[p] for p in TO_NHWC))
    inputs = list(op.inputs)
    inputs[0] = nhwc_in
    inputs[flag] = graph.add_constant(np.array(False), OperandCode.BOOL)
    graph.set(position, _transpose(graph, x, TO_NHWC, nhwc_in))
    graph.add_after(position, Operation(op.code, tuple(inputs), (nhwc_out,)))
    graph.add_after(position, _transpose(graph, nhwc_out, TO_NCHW, y))
    return 1


def _drop_if_dead(graph: _Graph, position: int) -> None:
    op = graph.operations[position]
    if op is not None and not graph.readers.get(op.outputs[0]) and _temporary(graph, op.outputs[0]):
        graph.set(position, None)


def _merge_twins(graph: _Graph, position: int) -> bool:
    """Other TRANSPOSEs of the same value by the same permutation: read this one's."""
    op = graph.operations[position]
    assert op is not None
    perm, merged = _perm(graph, op), False
    for other in list(graph.readers.get(op.inputs[0], [])):
        twin = graph.operations[other]
        if other == position or twin is None or _perm(graph, twin) != perm or perm is None:
            continue
        if twin.inputs[0] != op.inputs[0] or not _temporary(graph, twin.outputs[0]):
            continue
        _read_instead(graph, twin.outputs[0], op.outputs[0])
        graph.set(other, None)
        graph.rewrites.append("TRANSPOSE twins merged")
        merged = True
    return merged


def _read_instead(graph: _Graph, old: int, new: int) -> None:
    """Every reader of ``old`` reads ``new``."""
    for later in list(graph.readers.get(old, [])):
        reading = graph.operations[later]
        assert reading is not None
        inputs = tuple(new if i == old else i for i in reading.inputs)
        graph.set(later, Operation(reading.code, inputs, reading.outputs))


def _push(graph: _Graph, position: int, reader: int) -> bool:
    """Move the TRANSPOSE at ``position`` past operation ``reader``, if it can."""
    transpose, op = graph.operations[position], graph.operations[reader]
    if transpose is None or op is None or len(op.outputs) != 1:
        return False
    perm = _perm(graph, transpose)
    if perm is None:
        return False
    if op.code == OperationCode.TRANSPOSE:
        return _compose(graph, position, reader, perm)
    if op.code in _ELEMENTWISE:
        inputs = _untransposed(graph, op.inputs, perm)
        if inputs is None:
            return False
    elif op.code == OperationCode.MEAN:
        inputs = _mean(graph, op, perm)
    elif op.code == OperationCode.CONCATENATION:
        inputs = _concatenation(graph, op, perm)
    elif op.code in _PADS:
        inputs = _pad(graph, op, perm)
    else:
        return False
    if inputs is None:
        return False
    y = op.outputs[0]
    if len(_dims(graph, y)) != len(perm):
        return False
    inverse = tuple(int(i) for i in np.argsort(perm))
    w = _temp(graph, y, tuple(_dims(graph, y)[p] for p in inverse))
    graph.set(reader, Operation(op.code, tuple(inputs), (w,)))
    graph.add_after(reader, _transpose(graph, w, perm, y))
    graph.rewrites.append(f"TRANSPOSE moved past {op.code.name}")
    return True


def _compose(graph: _Graph, position: int, reader: int, perm: tuple[int, ...]) -> bool:
    """TRANSPOSE(TRANSPOSE(u, p), q): u itself when they cancel, else one TRANSPOSE."""
    transpose, op = graph.operations[position], graph.operations[reader]
    assert transpose is not None and op is not None
    second = _perm(graph, op)
    if second is None:
        return False
    u, y = transpose.inputs[0], op.outputs[0]
    composed = tuple(perm[q] for q in second)
    if composed == tuple(range(len(composed))):
        if not _temporary(graph, y):
            return False
        _read_instead(graph, y, u)
        graph.set(reader, None)
        graph.rewrites.append("TRANSPOSE pair cancelled")
    else:
        graph.set(reader, _transpose(graph, u, composed, y))
        graph.rewrites.append("TRANSPOSE pair as one TRANSPOSE")
    return True


def _untransposed(
    graph: _Graph, inputs: tuple[int, ...], perm: tuple[int, ...]
) -> list[int] | None:
    """``inputs`` with each tensor the value it is ``perm`` of: a transpose's input,
    or a constant re-laid; None when a tensor is neither (or does not broadcast)."""
    rank = len(perm)
    inverse = tuple(int(i) for i in np.argsort(perm))
    result = []
    for index in inputs:
        if not _tensor(graph, index):
            result.append(index)
            continue
        value = graph.constant(index)
        if value is not None:
            if value.ndim > rank or value.dtype != np.float32:
                return None
            full = value.reshape((1,) * (rank - value.ndim) + value.shape)
            result.append(graph.add_constant(np.ascontiguousarray(np.transpose(full, inverse))))
            continue
        found = graph.producer(index)
        if found is None or _perm(graph, found[1]) != perm or graph.info(index).code != _F32:
            return None
        result.append(found[1].inputs[0])
    return result


def _mean(graph: _Graph, op: Operation, perm: tuple[int, ...]) -> list[int] | None:
    """MEAN(x, axes, keep): with its dimensions kept, its axes map through ``perm``."""
    if len(op.inputs) != 3 or not graph.scalar(op.inputs[2]):
        return None
    axes = graph.constant(op.inputs[1])
    found = graph.producer(op.inputs[0])
    if axes is None or found is None or _perm(graph, found[1]) != perm:
        return None
    rank = len(perm)
    mapped = sorted({perm[int(a) % rank] for a in axes.reshape(-1)})
    return [found[1].inputs[0], _ints(graph, tuple(mapped)), op.inputs[2]]


def _concatenation(graph: _Graph, op: Operation, perm: tuple[int, ...]) -> list[int] | None:
    axis = graph.scalar(op.inputs[-1])
    tensors = _untransposed(graph, op.inputs[:-1], perm)
    if axis is None or tensors is None:
        return None
    mapped = perm[int(axis) % len(perm)]
    return [*tensors, graph.add_constant(np.array(mapped, np.int32), OperandCode.INT32)]


def _pad(graph: _Graph, op: Operation, perm: tuple[int, ...]) -> list[int] | None:
    """PAD, PAD_V2, MIRROR_PAD: the paddings' rows move with their axes."""
    rows = graph.constant(op.inputs[1])
    found = graph.producer(op.inputs[0])
    if rows is None or found is None or _perm(graph, found[1]) != perm:
        return None
    if graph.info(op.inputs[0]).code != _F32 or rows.size != 2 * len(perm):
        return None
    rows = rows.reshape(len(perm), 2)
    moved = np.empty_like(rows)
    for axis, p in enumerate(perm):
        moved[p] = rows[axis]
    padding = graph.add_constant(moved, graph.info(op.inputs[1]).code)
    return [found[1].inputs[0], padding, *op.inputs[2:]]


def _as_reshape(graph: _Graph, position: int) -> None:
    """A TRANSPOSE moving only axes of size 1 keeps the bytes' order: a RESHAPE."""
    op = graph.operations[position]
    if op is None:
        return
    perm = _perm(graph, op)
    if perm is None:
        return
    dims = _dims(graph, op.inputs[0])
    kept = [p for p in perm if dims[p] != 1]
    if kept != sorted(kept):
        return
    y = op.outputs[0]
    shape = _ints(graph, _dims(graph, y))
    graph.set(position, Operation(OperationCode.RESHAPE, (op.inputs[0], shape), (y,)))
