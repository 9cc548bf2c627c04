"""Shape and layout: reshapes, concatenation, padding, transposes, slices,
gathers, the depth/space and batch/space rearrangements, splits, PACK,
MIRROR_PAD, REVERSE_V2 and TILE."""

from __future__ import annotations

import numpy as np

from ...codes import OperandCode, OperationCode
from ..converter import Converter, Unsupported, constant_axes, maps
from ..reader import Operator


@maps("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
def _reshape(c: Converter, op: Operator) -> None:
    """Every shape is static in a converted model: the target is the output's shape."""
    shape = c.tensor(op.outputs[0]).shape or (1,)
    x, out = c.operand(op.inputs[0]), c.operand(op.outputs[0])
    if c.tensor(op.inputs[0]).dtype == np.bool_:
        if np.prod(c.tensor(op.inputs[0]).shape) != 1:
            raise Unsupported("a boolean tensor of more than one element")
        c.reshape_boolean(x, c.tensor(op.inputs[0]).shape, shape, out)
        return
    c.add(OperationCode.RESHAPE, [x, c.ints(shape)], [out])


@maps("CONCATENATION")
def _concatenation(c: Converter, op: Operator) -> None:
    o = op.options
    rank = len(c.tensor(op.outputs[0]).shape)
    axis = o.Axis() % rank if rank else 0
    if o is not None and o.FusedActivationFunction():
        raise Unsupported("a fused activation (LiteRT's kernel ignores it)")
    inputs = [c.operand(i) for i in op.inputs]
    c.add(OperationCode.CONCATENATION, [*inputs, c.i32(axis)], [c.operand(op.outputs[0])])


@maps("PAD", "PADV2")
def _pad(c: Converter, op: Operator) -> None:
    paddings = c.values(op.inputs[1], "paddings").astype(np.int32)
    inputs = [
        c.operand(op.inputs[0]),
        c.constant(OperandCode.TENSOR_INT32, paddings, paddings.shape),
    ]
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        value = c.values(op.inputs[2], "pad value").reshape(-1)[0]
        x = c.tensor(op.inputs[0])
        if x.dtype == np.float32:
            inputs.append(c.f32(float(value)))
        else:
            inputs.append(c.i32(int(value)))
        c.add(OperationCode.PAD_V2, inputs, [c.operand(op.outputs[0])])
        return
    c.add(OperationCode.PAD, inputs, [c.operand(op.outputs[0])])


@maps("TRANSPOSE")
def _transpose(c: Converter, op: Operator) -> None:
    perm = c.values(op.inputs[1], "permutation").astype(np.int32)
    inputs = [c.operand(op.inputs[0]), c.ints(perm.tolist())]
    c.add(OperationCode.TRANSPOSE, inputs, [c.operand(op.outputs[0])])


@maps("STRIDED_SLICE")
def _strided_slice(c: Converter, op: Operator) -> None:
    o = op.options
    if o.EllipsisMask() or o.NewAxisMask() or (hasattr(o, "Offset") and o.Offset()):
        raise Unsupported("ellipsis, new-axis or offset masks")
    begin, end, strides = (c.values(i, "slice bound").astype(np.int32) for i in op.inputs[1:4])
    inputs = [c.operand(op.inputs[0]), c.ints(begin.tolist()), c.ints(end.tolist())]
    inputs += [c.ints(strides.tolist()), c.i32(o.BeginMask()), c.i32(o.EndMask())]
    c.add(
        OperationCode.STRIDED_SLICE,
        [*inputs, c.i32(o.ShrinkAxisMask())],
        [c.operand(op.outputs[0])],
    )


@maps("SLICE")
def _slice(c: Converter, op: Operator) -> None:
    begin = c.values(op.inputs[1], "begin").astype(np.int32)
    size = c.values(op.inputs[2], "size").astype(np.int32)
    inputs = [c.operand(op.inputs[0]), c.ints(begin.tolist()), c.ints(size.tolist())]
    c.add(OperationCode.SLICE, inputs, [c.operand(op.outputs[0])])


@maps("GATHER")
def _gather(c: Converter, op: Operator) -> None:
    rank = len(c.tensor(op.inputs[0]).shape)
    axis = op.options.Axis() % rank if op.options is not None else 0
    inputs = [c.operand(op.inputs[0]), c.i32(axis), c.operand(op.inputs[1])]
    c.add(OperationCode.GATHER, inputs, [c.operand(op.outputs[0])])


@maps("SPACE_TO_DEPTH", "DEPTH_TO_SPACE")
def _space_depth(c: Converter, op: Operator) -> None:
    code = OperationCode[op.name]
    inputs = [c.operand(op.inputs[0]), c.i32(op.options.BlockSize()), c.boolean(False)]
    c.add(code, inputs, [c.operand(op.outputs[0])])


@maps("BATCH_TO_SPACE_ND", "SPACE_TO_BATCH_ND")
def _batch_space(c: Converter, op: Operator) -> None:
    block = c.values(op.inputs[1], "block shape").astype(np.int32)
    inputs = [c.operand(op.inputs[0]), c.ints(block.tolist())]
    if op.name == "SPACE_TO_BATCH_ND":
        pads = c.values(op.inputs[2], "paddings").astype(np.int32)
        inputs.append(c.constant(OperandCode.TENSOR_INT32, pads, pads.shape))
    c.add(OperationCode[op.name], [*inputs, c.boolean(False)], [c.operand(op.outputs[0])])


@maps("SPLIT")
def _split(c: Converter, op: Operator) -> None:
    x = op.inputs[1]
    rank = len(c.tensor(x).shape)
    (axis,) = constant_axes(c, op.inputs[0], rank)
    inputs = [c.operand(x), c.i32(axis), c.i32(len(op.outputs))]
    c.add(OperationCode.SPLIT, inputs, [c.operand(o) for o in op.outputs])


@maps("SPLIT_V")
def _split_v(c: Converter, op: Operator) -> None:
    """One SLICE per output: NNAPI's SPLIT cuts equal parts only."""
    x = c.tensor(op.inputs[0])
    (axis,) = constant_axes(c, op.inputs[2], len(x.shape))
    start = 0
    for output in op.outputs:
        size = list(c.tensor(output).shape)
        begin = [0] * len(x.shape)
        begin[axis] = start
        start += size[axis]
        inputs = [c.operand(op.inputs[0]), c.ints(begin), c.ints(size)]
        c.add(OperationCode.SLICE, inputs, [c.operand(output)])


@maps("PACK")
def _pack(c: Converter, op: Operator) -> None:
    """NNAPI's PACK (feature level 6): the axis first, then the tensors."""
    axis = op.options.Axis() % len(c.tensor(op.outputs[0]).shape)
    inputs = [c.i32(axis), *(c.operand(i) for i in op.inputs)]
    c.add(OperationCode.PACK, inputs, [c.operand(op.outputs[0])])


@maps("MIRROR_PAD")
def _mirror_pad(c: Converter, op: Operator) -> None:
    """NNAPI's MIRROR_PAD (feature level 6); both number REFLECT 0 and SYMMETRIC 1."""
    paddings = c.values(op.inputs[1], "paddings").astype(np.int32)
    mode = op.options.Mode() if op.options is not None else 0
    inputs = [
        c.operand(op.inputs[0]),
        c.constant(OperandCode.TENSOR_INT32, paddings, paddings.shape),
        c.i32(mode),
    ]
    c.add(OperationCode.MIRROR_PAD, inputs, [c.operand(op.outputs[0])])


@maps("REVERSE_V2")
def _reverse(c: Converter, op: Operator) -> None:
    """NNAPI's REVERSE (feature level 6) takes one axis: one REVERSE per axis given."""
    rank = len(c.tensor(op.inputs[0]).shape)
    axes = constant_axes(c, op.inputs[1], rank)
    x, out = c.operand(op.inputs[0]), c.operand(op.outputs[0])
    if not axes:
        raise Unsupported("REVERSE_V2 of no axis")
    source = x
    for n, axis in enumerate(axes):
        target = (
            out
            if n == len(axes) - 1
            else c.model.add_operand(c.operand_type(c.tensor(op.outputs[0])))
        )
        c.add(OperationCode.REVERSE, [source, c.ints([axis])], [target])
        source = target


@maps("TILE")
def _tile(c: Converter, op: Operator) -> None:
    inputs = [c.operand(op.inputs[0]), c.operand(op.inputs[1])]
    c.add(OperationCode.TILE, inputs, [c.operand(op.outputs[0])])
