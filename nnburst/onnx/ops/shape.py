"""Shape and layout: reshapes, transposes, concatenation, padding, slices,
tiles, splits and the depth/space rearrangements."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from ...codes import OperandCode, OperationCode
from ..converter import Converter, Unsupported, axis_index, maps
from .building import apply, broadcast, filled, output_of, reshaped, text


@maps("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Shapes are static: the target is the inferred output shape."""
    name = node.input[0]
    reshaped(
        c, c.operand(name), c.dtype(name), c.shape(name), c.shape(node.output[0]), node.output[0]
    )


@maps("Transpose")
def _transpose(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    rank = len(c.shape(node.input[0]))
    perm = list(a.get("perm", range(rank - 1, -1, -1)))
    c.add(OperationCode.TRANSPOSE, [c.operand(node.input[0]), c.ints(perm)], [output_of(c, node)])


@maps("Concat")
def _concat(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    rank = len(c.shape(node.output[0]))
    inputs = [c.operand(n) for n in node.input if n]
    c.add(
        OperationCode.CONCATENATION,
        [*inputs, c.i32(axis_index(a["axis"], rank))],
        [output_of(c, node)],
    )


@maps("Pad")
def _pad(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """PAD or PAD_V2 for a constant fill; a computed fill is SELECT'd in around the
    zero-padded input; edge, reflect and wrap are a GATHER per padded axis with the
    source indices numpy's pad gives."""
    mode = text(a.get("mode"), "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise Unsupported(f"mode {mode!r}")
    pads = a.get("pads")
    if pads is None:
        pads = c.value(node.input[1], "pads").tolist()
    shape = c.shape(node.input[0])
    rank = len(shape)
    if len(node.input) > 3 and node.input[3]:  # pads for these axes only
        axes = [axis_index(x, rank) for x in c.value(node.input[3], "axes").tolist()]
        full = [0] * (2 * rank)
        for i, axis in enumerate(axes):
            full[axis], full[axis + rank] = pads[i], pads[i + len(axes)]
        pads = full
    paddings = np.array([[pads[i], pads[i + rank]] for i in range(rank)], np.int32)
    if (paddings < 0).any():
        raise Unsupported("negative pads")
    reflectable = all(int(p.max()) < n for p, n in zip(paddings, shape))
    if mode == "reflect" and reflectable and c.dtype(node.input[0]).kind in "fi":
        # NNAPI's MIRROR_PAD (feature level 6): REFLECT leaves the edge out as ONNX does
        pads = c.constant(OperandCode.TENSOR_INT32, paddings, paddings.shape)
        inputs = [c.operand(node.input[0]), pads, c.i32(0)]
        c.add(OperationCode.MIRROR_PAD, inputs, [output_of(c, node)])
        return
    if mode != "constant":
        _pad_by_gather(c, node, paddings, mode)
        return
    value = a.get("value", 0.0)
    fill_name = node.input[2] if len(node.input) > 2 else ""
    computed = fill_name and fill_name not in c.constants
    if fill_name and not computed:
        value = float(c.value(fill_name, "pad value").reshape(-1)[0])
    inputs = [
        c.operand(node.input[0]),
        c.constant(OperandCode.TENSOR_INT32, paddings, paddings.shape),
    ]
    if computed:
        out_shape, dtype = c.shape(node.output[0]), c.dtype(node.input[0])
        padded = apply(c, OperationCode.PAD, inputs, dtype, out_shape)
        inside = np.zeros(out_shape, np.bool_)
        inside[tuple(slice(p[0], p[0] + n) for p, n in zip(paddings, shape))] = True
        mask = c.constant(OperandCode.TENSOR_BOOL8, inside, out_shape)
        fill = broadcast(c, fill_name, out_shape)
        c.add(OperationCode.SELECT, [mask, padded, fill], [output_of(c, node)])
        return
    if value == 0:
        c.add(OperationCode.PAD, inputs, [output_of(c, node)])
        return
    fill = c.f32(value) if c.dtype(node.input[0]) == np.float32 else c.i32(int(value))
    c.add(OperationCode.PAD_V2, [*inputs, fill], [output_of(c, node)])


def _padded_positions(size: int, before: int, after: int, mode: str) -> np.ndarray:
    """The source index of each position of an axis padded by edge, wrap or reflect."""
    positions = np.arange(-before, size + after)
    if mode == "edge" or size == 1:
        return np.clip(positions, 0, size - 1)
    if mode == "wrap":
        return positions % size
    folded = positions % (2 * size - 2)  # reflect: 0 … size−1 … 1, repeating
    return np.where(folded >= size, 2 * size - 2 - folded, folded)


def _pad_by_gather(c: Converter, node: onnx.NodeProto, paddings: np.ndarray, mode: str) -> None:
    """Edge, reflect or wrap padding: each padded axis GATHERs its source indices."""
    shape, dtype = list(c.shape(node.input[0])), c.dtype(node.input[0])
    if mode == "reflect" and any(p.max() >= n for p, n in zip(paddings, shape) if p.any()):
        raise Unsupported("reflect pads as long as the axis")
    x = c.operand(node.input[0])
    padded = [axis for axis in range(len(shape)) if paddings[axis].any()]
    if not padded:  # the input itself, as Identity
        c.alias(node.output[0], x)
        return
    for axis in padded:
        indices = _padded_positions(
            shape[axis], int(paddings[axis][0]), int(paddings[axis][1]), mode
        )
        shape[axis] = len(indices)
        target = output_of(c, node) if axis == padded[-1] else None
        x = apply(
            c,
            OperationCode.GATHER,
            [x, c.i32(axis), c.ints(indices.tolist())],
            dtype,
            tuple(shape),
            target,
        )


@maps("Slice")
def _slice(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    shape = c.shape(node.input[0])
    starts = c.value(node.input[1], "starts").tolist()
    ends = c.value(node.input[2], "ends").tolist()
    axes = (
        c.value(node.input[3], "axes").tolist()
        if len(node.input) > 3 and node.input[3]
        else list(range(len(starts)))
    )
    steps = (
        c.value(node.input[4], "steps").tolist()
        if len(node.input) > 4 and node.input[4]
        else [1] * len(starts)
    )
    begin, end, stride = [0] * len(shape), list(shape), [1] * len(shape)
    for axis, s, e, step in zip(axes, starts, ends, steps):
        axis = axis_index(axis, len(shape))
        if step <= 0:
            raise Unsupported("a negative step")
        size = shape[axis]
        s = max(0, min(size, s + size if s < 0 else s))
        e = max(0, min(size, e + size if e < 0 else e))
        begin[axis], end[axis], stride[axis] = s, e, step
    inputs = [c.operand(node.input[0]), c.ints(begin), c.ints(end), c.ints(stride)]
    c.add(
        OperationCode.STRIDED_SLICE, [*inputs, c.i32(0), c.i32(0), c.i32(0)], [output_of(c, node)]
    )


@maps("Expand")
def _expand(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    name = node.input[0]
    broadcast(c, name, c.shape(node.output[0]), output_of(c, node))


@maps("Tile")
def _tile(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    repeats = c.value(node.input[1], "repeats").tolist()
    c.add(OperationCode.TILE, [c.operand(node.input[0]), c.ints(repeats)], [output_of(c, node)])


@maps("Split")
def _split(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """One SLICE per output (NNAPI's SPLIT cuts equal parts only, and takes no bool)."""
    shape = c.shape(node.input[0])
    axis = axis_index(a.get("axis", 0), len(shape))
    start = 0
    for output in node.output:
        size = list(c.shape(output))
        begin = [0] * len(shape)
        begin[axis] = start
        start += size[axis]
        c.add(
            OperationCode.SLICE,
            [c.operand(node.input[0]), c.ints(begin), c.ints(size)],
            [c.operand(output)],
        )


@maps("DepthToSpace", "SpaceToDepth")
def _depth_space(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """NCHW through the layout flag.  CRD order (channel, then block offset) is DCR
    after a GATHER of the channels into block-offset-major order."""
    mode = text(a.get("mode"), "DCR")
    code = (
        OperationCode.DEPTH_TO_SPACE
        if node.op_type == "DepthToSpace"
        else OperationCode.SPACE_TO_DEPTH
    )
    x = c.operand(node.input[0])
    if mode == "CRD" and node.op_type == "DepthToSpace":
        shape, block = c.shape(node.input[0]), a["blocksize"]
        groups = shape[1] // (block * block)
        order = np.arange(shape[1]).reshape(groups, block * block).T.reshape(-1)
        x = apply(
            c,
            OperationCode.GATHER,
            [x, c.i32(1), c.ints(order.tolist())],
            c.dtype(node.input[0]),
            shape,
        )
    elif mode != "DCR":
        raise Unsupported(f"mode {mode!r}")
    inputs = [x, c.i32(a["blocksize"]), c.boolean(True)]
    c.add(code, inputs, [output_of(c, node)])


@maps("Trilu")
def _trilu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """The upper (or lower) triangle from diagonal k, zeros elsewhere: a SELECT with a
    constant mask of the input's shape."""
    name = node.input[0]
    shape, dtype = c.shape(name), c.dtype(name)
    if len(shape) < 2 or dtype not in (np.float32, np.int32, np.int64):
        raise Unsupported(f"a rank-{len(shape)} {dtype} input")
    k = 0
    if len(node.input) > 1 and node.input[1]:
        k = int(c.value(node.input[1], "diagonal k").reshape(-1)[0])
    rows, columns = np.indices(shape[-2:])
    keep = columns - rows >= k if a.get("upper", 1) else columns - rows <= k
    mask = np.broadcast_to(keep, shape)
    zeros = filled(c, dtype, shape, 0)
    selector = c.constant(OperandCode.TENSOR_BOOL8, np.ascontiguousarray(mask), shape)
    c.add(OperationCode.SELECT, [selector, c.operand(name), zeros], [output_of(c, node)])


@maps("CenterCropPad")
def _center_crop_pad(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """A centred SLICE where the input is longer than the target, then a centred PAD
    where shorter (the odd element at the end in both)."""
    shape, dtype = c.shape(node.input[0]), c.dtype(node.input[0])
    rank = len(shape)
    target = [int(t) for t in c.value(node.input[1], "shape").tolist()]
    axes = [axis_index(x, rank) for x in a.get("axes", range(rank))]
    begin, size, pads = [0] * rank, list(shape), np.zeros((rank, 2), np.int32)
    for axis, want in zip(axes, target):
        if shape[axis] > want:
            begin[axis], size[axis] = (shape[axis] - want) // 2, want
        elif shape[axis] < want:
            before = (want - shape[axis]) // 2
            pads[axis] = before, want - shape[axis] - before
    x = apply(
        c,
        OperationCode.SLICE,
        [c.operand(node.input[0]), c.ints(begin), c.ints(size)],
        dtype,
        tuple(size),
        None if pads.any() else output_of(c, node),
    )
    if pads.any():
        paddings = c.constant(OperandCode.TENSOR_INT32, pads, pads.shape)
        c.add(OperationCode.PAD, [x, paddings], [output_of(c, node)])
