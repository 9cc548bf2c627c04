"""Reductions and normalizations: softmax, the Reduce operators, ArgMax/ArgMin
and TopK, CumSum, the losses, and batch, layer, instance, group, mean-variance,
Lp and local response normalization."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from ...codes import FuseCode, OperationCode
from ..converter import Converter, Unsupported, axis_index, maps
from .building import (
    apply,
    filled,
    float_input,
    int_tensor,
    like,
    output_of,
    reversed_along,
    text,
    unreversed,
)


@maps("BatchNormalization")
def _batch_norm(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Inference form: x·s + b with s = scale/√(var+ε), b = B − mean·s, per channel (axis 1)."""
    if len(node.output) > 1 and any(node.output[1:]) or a.get("training_mode", 0):
        raise Unsupported("training mode")
    shape = c.shape(node.input[0])
    if len(shape) < 2 or any(c.shape(n) != shape[1:2] for n in node.input[1:5]):
        raise Unsupported("statistics that are not one per channel (axis 1)")
    if any(n not in c.constants for n in node.input[1:5]):
        _batch_norm_computed(c, node, a)
        return
    scale, bias, mean, var = (c.value(n, "statistic").astype(np.float64) for n in node.input[1:5])
    s = scale / np.sqrt(var + a.get("epsilon", 1e-5))
    b = bias - mean * s
    rank = len(c.shape(node.input[0]))
    shape = (len(s),) + (1,) * (rank - 2)
    scaled = c.temporary(np.dtype(np.float32), c.shape(node.input[0]))
    none = c.i32(FuseCode.NONE)
    c.add(OperationCode.MUL, [c.operand(node.input[0]), c.floats(s.reshape(shape)), none], [scaled])
    c.add(OperationCode.ADD, [scaled, c.floats(b.reshape(shape)), none], [output_of(c, node)])


def _batch_norm_computed(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Statistics computed in the graph (or graph inputs): s = scale·rsqrt(var + ε),
    then (x − mean)·s + B, the [C] vectors reshaped to [C, 1, …] to broadcast on axis 1."""
    name = node.input[0]
    shape, f32 = c.shape(name), np.dtype(np.float32)
    if c.dtype(name) != np.float32 or any(c.dtype(n) != np.float32 for n in node.input[1:5]):
        raise Unsupported("statistics that are not float32")
    channels = shape[1]
    column = (channels,) + (1,) * (len(shape) - 2)
    scale, bias, mean, var = (c.operand(n) for n in node.input[1:5])
    epsilon = c.floats(np.array([a.get("epsilon", 1e-5)]))
    shifted = apply(c, OperationCode.ADD, [var, epsilon], f32, (channels,))
    inverse = apply(c, OperationCode.RSQRT, [shifted], f32, (channels,))
    factor = apply(c, OperationCode.MUL, [scale, inverse], f32, (channels,))
    columns = [
        apply(c, OperationCode.RESHAPE, [v, c.ints(column)], f32, column)
        for v in (mean, factor, bias)
    ]
    centred = apply(c, OperationCode.SUB, [c.operand(name), columns[0]], f32, shape)
    scaled = apply(c, OperationCode.MUL, [centred, columns[1]], f32, shape)
    apply(c, OperationCode.ADD, [scaled, columns[2]], f32, shape, output_of(c, node))


@maps("Softmax", "LogSoftmax")
def _softmax(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    rank = len(c.shape(node.input[0]))
    axis = axis_index(a.get("axis", -1 if c.opset >= 13 else 1), rank)
    if c.opset < 13 and axis != rank - 1:
        raise Unsupported("a pre-13 softmax over more than the last axis")
    code = OperationCode.SOFTMAX if node.op_type == "Softmax" else OperationCode.LOG_SOFTMAX
    c.add(code, [c.operand(node.input[0]), c.f32(1.0), c.i32(axis)], [output_of(c, node)])


_REDUCTIONS = {
    "ReduceMean": OperationCode.MEAN, "ReduceMax": OperationCode.REDUCE_MAX,
    "ReduceMin": OperationCode.REDUCE_MIN, "ReduceSum": OperationCode.REDUCE_SUM,
    "ReduceProd": OperationCode.REDUCE_PROD,
}  # fmt: skip


@maps(*_REDUCTIONS)
def _reduce(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    code, x, out = _REDUCTIONS[node.op_type], c.operand(node.input[0]), output_of(c, node)
    if node.op_type not in ("ReduceMax", "ReduceMin") or c.dtype(node.input[0]) != np.float32:
        _reduction(c, node, a, code, x, out)
        return
    # NNAPI starts a float max (min) from the lowest (highest) finite value, so a slice
    # of −∞ (+∞) alone would give that value; ONNX gives the infinity.
    f32, boolean = np.dtype(np.float32), np.dtype(np.bool_)
    infinity = -np.inf if node.op_type == "ReduceMax" else np.inf
    shape = c.shape(node.input[0])
    # At the kept dimensions throughout: NNAPI reshapes no booleans.
    axes, kept = _axes(c, node, a), {**a, "keepdims": 1}
    kept_shape = tuple(1 if i in axes else d for i, d in enumerate(shape)) or (1,)
    extreme = c.temporary(f32, kept_shape)
    _reduction(c, node, kept, code, x, extreme)
    infinite = apply(c, OperationCode.EQUAL, [x, filled(c, f32, (1,), infinity)], boolean, shape)
    only_infinite = c.temporary(boolean, kept_shape)
    _reduction(c, node, kept, OperationCode.REDUCE_ALL, infinite, only_infinite)
    inputs = [only_infinite, filled(c, f32, kept_shape, infinity), extreme]
    out_shape = c.shape(node.output[0]) or (1,)
    if tuple(out_shape) == kept_shape:
        apply(c, OperationCode.SELECT, inputs, f32, out_shape, out)
        return
    chosen = apply(c, OperationCode.SELECT, inputs, f32, kept_shape)
    c.add(OperationCode.RESHAPE, [chosen, c.ints(list(out_shape))], [out])


def _axes(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[int]:
    """The node's reduced axes (attribute or input), sorted; all of them when none is given."""
    rank = len(c.shape(node.input[0]))
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = c.value(node.input[1], "axes").tolist()
    if axes is None or len(axes) == 0:
        if a.get("noop_with_empty_axes", 0):
            raise Unsupported("noop_with_empty_axes")
        axes = list(range(rank))
    return sorted({axis_index(x, rank) for x in axes})


def _reduction(c: Converter, node: onnx.NodeProto, a: dict[str, Any], code: OperationCode,
               source: int, out: int) -> None:  # fmt: skip
    """``code`` over the node's axes (attribute or input) of ``source``, into ``out``."""
    rank = len(c.shape(node.input[0]))
    axes = _axes(c, node, a)
    keep = bool(a.get("keepdims", 1))
    target = out
    if not keep and len(axes) == rank:  # a scalar: keep the axes, then reshape to [1]
        keep = True
        target = c.temporary(c.dtype(node.input[0]), (1,) * rank)
    flag = c.i32(int(keep)) if code == OperationCode.MEAN else c.boolean(keep)
    c.add(code, [source, c.ints(axes), flag], [target])
    if target != out:
        c.add(OperationCode.RESHAPE, [target, c.ints([1])], [out])


#: name -> (operation on each element first, the reduction, operation on the result)
_COMPOSED_REDUCTIONS = {
    "ReduceL1": (OperationCode.ABS, OperationCode.REDUCE_SUM, None),
    "ReduceL2": (OperationCode.MUL, OperationCode.REDUCE_SUM, OperationCode.SQRT),
    "ReduceSumSquare": (OperationCode.MUL, OperationCode.REDUCE_SUM, None),
    "ReduceLogSum": (None, OperationCode.REDUCE_SUM, OperationCode.LOG),
    "ReduceLogSumExp": (OperationCode.EXP, OperationCode.REDUCE_SUM, OperationCode.LOG),
}


@maps(*_COMPOSED_REDUCTIONS)
def _composed_reduction(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """The reductions NNAPI lacks, as an elementwise step, a sum and a last step.
    ReduceLogSumExp sums exp(x) directly, as ONNX's reference does (no max shift)."""
    if c.dtype(node.input[0]) != np.float32:
        raise Unsupported(f"{c.dtype(node.input[0])} tensors")
    before, code, after = _COMPOSED_REDUCTIONS[node.op_type]
    source, f32 = c.operand(node.input[0]), np.dtype(np.float32)
    if before is not None:
        inputs = [source, source] if before == OperationCode.MUL else [source]
        source = apply(c, before, inputs, f32, c.shape(node.input[0]))
    out = output_of(c, node)
    if after is None:
        _reduction(c, node, a, code, source, out)
        return
    total = c.temporary(f32, c.shape(node.output[0]))
    _reduction(c, node, a, code, source, total)
    c.add(after, [total], [out])


@maps("LayerNormalization", "RMSNormalization")
def _normalization(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """(x - mean) / sqrt(var + epsilon) * scale + bias over the axes from ``axis`` on
    (RMSNormalization: x / sqrt(mean(x²) + epsilon) * scale), from MEAN, SUB, MUL,
    ADD and RSQRT; the optional Mean and InvStdDev outputs come out on the way."""
    name = node.input[0]
    shape, f32 = c.shape(name), np.dtype(np.float32)
    if c.dtype(name) != np.float32:
        raise Unsupported(f"{c.dtype(name)} tensors")
    rank = len(shape)
    axes = list(range(axis_index(a.get("axis", -1), rank), rank))
    layer = node.op_type == "LayerNormalization"
    mean = output_of(c, node, 1) if layer and len(node.output) > 1 and node.output[1] else None
    inverse = output_of(c, node, 2) if layer and len(node.output) > 2 and node.output[2] else None
    normalized = _standardized(
        c, c.operand(name), shape, axes, a.get("epsilon", 1e-5), layer, mean, inverse
    )
    has_bias = layer and len(node.input) > 2 and node.input[2]
    scaled = apply(
        c, OperationCode.MUL, [normalized, c.operand(node.input[1])], f32, shape,
        None if has_bias else output_of(c, node),
    )  # fmt: skip
    if has_bias:
        apply(
            c, OperationCode.ADD, [scaled, c.operand(node.input[2])], f32, shape, output_of(c, node)
        )


@maps("ArgMax", "ArgMin")
def _arg(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """ARGMAX/ARGMIN give the first extreme; select_last_index runs them on the axis
    reversed (a GATHER) and maps each index i back to n − 1 − i."""
    shape = c.shape(node.input[0])
    axis = axis_index(a.get("axis", 0), len(shape))
    code = OperationCode.ARGMAX if node.op_type == "ArgMax" else OperationCode.ARGMIN
    x = c.operand(node.input[0])
    int32 = np.dtype(np.int32)
    reduced_shape = tuple(d for i, d in enumerate(shape) if i != axis) or (1,)
    keep, last = a.get("keepdims", 1), a.get("select_last_index", 0)
    if last:
        x = reversed_along(c, x, axis, c.dtype(node.input[0]), shape)
    found = output_of(c, node) if not keep and not last else c.temporary(int32, reduced_shape)
    c.add(code, [x, c.i32(axis)], [found])
    if last:
        target = output_of(c, node) if not keep else None
        found = unreversed(c, found, shape[axis], reduced_shape, target)
    if keep:
        c.add(OperationCode.EXPAND_DIMS, [found, c.i32(axis)], [output_of(c, node)])


@maps("LRN")
def _lrn(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """ONNX divides alpha by the window size; NNAPI's radius is half the window."""
    size = a["size"]
    if size % 2 == 0:
        raise Unsupported("an even window")
    alpha = a.get("alpha", 1e-4) / size
    inputs = [c.operand(node.input[0]), c.i32(size // 2), c.f32(a.get("bias", 1.0)), c.f32(alpha)]
    c.add(
        OperationCode.LOCAL_RESPONSE_NORMALIZATION,
        [*inputs, c.f32(a.get("beta", 0.75)), c.i32(1)],
        [output_of(c, node)],
    )


def _moments(c: Converter, x: int, shape: tuple[int, ...], axes: Sequence[int],
             centre: bool = True, mean: int | None = None) -> tuple[int, int]:  # fmt: skip
    """x − mean(x) (x itself unless ``centre``) and the mean of its squares over
    ``axes``, kept (float32); the mean goes into ``mean`` when given."""
    f32 = np.dtype(np.float32)
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    centred = x
    if centre:
        mean = apply(c, OperationCode.MEAN, [x, c.ints(axes), c.i32(1)], f32, kept, mean)
        centred = apply(c, OperationCode.SUB, [x, mean], f32, shape)
    squares = apply(c, OperationCode.MUL, [centred, centred], f32, shape)
    variance = apply(c, OperationCode.MEAN, [squares, c.ints(axes), c.i32(1)], f32, kept)
    return centred, variance


def _standardized(c: Converter, x: int, shape: tuple[int, ...], axes: Sequence[int],
                  epsilon: float, centre: bool = True, mean: int | None = None,
                  inverse: int | None = None) -> int:  # fmt: skip
    """(x − mean)·rsqrt(mean((x − mean)²) + ε) over ``axes`` (float32), through
    _moments; the rsqrt goes into ``inverse`` when given (LayerNormalization's
    outputs)."""
    f32 = np.dtype(np.float32)
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    centred, variance = _moments(c, x, shape, axes, centre, mean)
    shifted = apply(c, OperationCode.ADD, [variance, c.floats(np.array([epsilon]))], f32, kept)
    inverse = apply(c, OperationCode.RSQRT, [shifted], f32, kept, inverse)
    return apply(c, OperationCode.MUL, [centred, inverse], f32, shape)


def _per_channel(
    c: Converter, node: onnx.NodeProto, normalized: int, shape: tuple[int, ...]
) -> None:
    """normalized·scale + B, the [C] scale and B (inputs 1 and 2) broadcast along axis 1."""
    f32 = np.dtype(np.float32)
    column = (shape[1],) + (1,) * (len(shape) - 2)
    scale, bias = (
        apply(c, OperationCode.RESHAPE, [c.operand(n), c.ints(column)], f32, column)
        for n in node.input[1:3]
    )
    scaled = apply(c, OperationCode.MUL, [normalized, scale], f32, shape)
    apply(c, OperationCode.ADD, [scaled, bias], f32, shape, output_of(c, node))


@maps("InstanceNormalization")
def _instance_norm(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Each (batch, channel) standardized over its spatial axes, then scaled per channel
    (NNAPI's INSTANCE_NORMALIZATION takes one scalar scale, not a vector)."""
    name, shape = float_input(c, node)
    if len(shape) < 3 or len(shape) > 4:
        raise Unsupported(f"a rank-{len(shape)} input")
    axes = list(range(2, len(shape)))
    normalized = _standardized(c, c.operand(name), shape, axes, a.get("epsilon", 1e-5))
    _per_channel(c, node, normalized, shape)


@maps("GroupNormalization")
def _group_norm(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """The channels reshaped into [N, groups, rest], standardized over rest, reshaped
    back and scaled per channel (opset 21's [C] scale and bias)."""
    name, shape = float_input(c, node)
    groups = a["num_groups"]
    if len(shape) < 3 or len(shape) > 4 or groups < 1 or shape[1] % groups:
        raise Unsupported(f"a rank-{len(shape)} input or uneven groups")
    if c.shape(node.input[1]) != (shape[1],) or c.shape(node.input[2]) != (shape[1],):
        raise Unsupported("a per-group scale (before opset 21)")
    f32 = np.dtype(np.float32)
    grouped_shape = (shape[0], groups, int(np.prod(shape[1:])) // groups)
    grouped = apply(
        c, OperationCode.RESHAPE, [c.operand(name), c.ints(grouped_shape)], f32, grouped_shape
    )
    normalized = _standardized(c, grouped, grouped_shape, [2], a.get("epsilon", 1e-5))
    back = apply(c, OperationCode.RESHAPE, [normalized, c.ints(shape)], f32, shape)
    _per_channel(c, node, back, shape)


@maps("MeanVarianceNormalization")
def _mean_variance_norm(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """(x − mean) / (√variance + 1e-9) over ``axes`` (default 0, 2, 3), as ONNX's
    function defines it (ε after the root)."""
    name, shape = float_input(c, node)
    f32 = np.dtype(np.float32)
    axes = sorted({axis_index(x, len(shape)) for x in a.get("axes", [0, 2, 3])})
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    centred, variance = _moments(c, c.operand(name), shape, axes)
    deviation = apply(c, OperationCode.SQRT, [variance], f32, kept)
    shifted = apply(c, OperationCode.ADD, [deviation, c.floats(np.array([1e-9]))], f32, kept)
    apply(c, OperationCode.DIV, [centred, shifted], f32, shape, output_of(c, node))


@maps("LpNormalization")
def _lp_norm(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """x / ‖x‖ₚ along ``axis``: the norm is sum|x| (p = 1) or √(sum x²) (p = 2); a
    zero vector stays zero (its norm is taken as 1)."""
    name, shape = float_input(c, node)
    p, axis = a.get("p", 2), axis_index(a.get("axis", -1), len(shape))
    if p not in (1, 2):
        raise Unsupported(f"p = {p}")
    f32, x = np.dtype(np.float32), c.operand(name)
    kept = tuple(1 if i == axis else d for i, d in enumerate(shape))
    if p == 1:
        each = apply(c, OperationCode.ABS, [x], f32, shape)
    else:
        each = apply(c, OperationCode.MUL, [x, x], f32, shape)
    total = apply(c, OperationCode.REDUCE_SUM, [each, c.ints([axis]), c.boolean(True)], f32, kept)
    norm = total if p == 1 else apply(c, OperationCode.SQRT, [total], f32, kept)
    zero = apply(c, OperationCode.EQUAL, [norm, like(c, name, 0.0)], np.dtype(np.bool_), kept)
    safe = apply(c, OperationCode.SELECT, [zero, filled(c, f32, kept, 1.0), norm], f32, kept)
    apply(c, OperationCode.DIV, [x, safe], f32, shape, output_of(c, node))


@maps("Hardmax")
def _hardmax(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """1 at the first maximum along ``axis``, 0 elsewhere: ARGMAX, EQUAL against the
    axis's positions, SELECT."""
    name, shape = float_input(c, node)
    rank = len(shape)
    axis = axis_index(a.get("axis", -1 if c.opset >= 13 else 1), rank)
    if c.opset < 13 and axis != rank - 1:
        raise Unsupported("a pre-13 hardmax over more than the last axis")
    int32, f32 = np.dtype(np.int32), np.dtype(np.float32)
    reduced = tuple(d for i, d in enumerate(shape) if i != axis) or (1,)
    found = apply(c, OperationCode.ARGMAX, [c.operand(name), c.i32(axis)], int32, reduced)
    kept = tuple(1 if i == axis else d for i, d in enumerate(shape))
    found = apply(c, OperationCode.EXPAND_DIMS, [found, c.i32(axis)], int32, kept)
    positions = np.arange(shape[axis]).reshape([-1 if i == axis else 1 for i in range(rank)])
    hit = apply(
        c, OperationCode.EQUAL, [found, int_tensor(c, positions)], np.dtype(np.bool_), shape
    )
    ones, zeros = filled(c, f32, shape, 1.0), filled(c, f32, shape, 0.0)
    c.add(OperationCode.SELECT, [hit, ones, zeros], [output_of(c, node)])


@maps("TopK")
def _top_k(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """TOPK_V2 on the last axis.  It orders equal values by descending index, ONNX by
    ascending, so it runs on the axis reversed (a GATHER) and each index i maps back
    to n − 1 − i; the smallest k are the largest of −x."""
    name = node.input[0]
    shape, dtype = c.shape(name), c.dtype(name)
    axis = axis_index(a.get("axis", -1), len(shape))
    if axis != len(shape) - 1:
        raise Unsupported("an axis other than the last")
    if dtype not in (np.float32, np.int32, np.int64):
        raise Unsupported(f"{dtype} data")
    k = int(c.value(node.input[1], "k").reshape(-1)[0])
    n, int32 = shape[axis], np.dtype(np.int32)
    out_shape = shape[:-1] + (k,)
    x = reversed_along(c, c.operand(name), axis, dtype, shape)
    smallest = not a.get("largest", 1)
    if smallest:
        x = apply(c, OperationCode.NEG, [x], dtype, shape)
    wants_values = bool(node.output[0])
    values = (
        output_of(c, node, 0) if wants_values and not smallest else c.temporary(dtype, out_shape)
    )
    found = c.temporary(int32, out_shape)
    c.add(OperationCode.TOPK_V2, [x, c.i32(k)], [values, found])
    if smallest and wants_values:
        c.add(OperationCode.NEG, [values], [output_of(c, node, 0)])
    if len(node.output) > 1 and node.output[1]:
        unreversed(c, found, n, out_shape, output_of(c, node, 1))


#: The most steps CumSum unrolls into (one SLICE and one ADD each).
_MAX_CUMSUM_STEPS = 256


@maps("CumSum")
def _cum_sum(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Running sums along a constant axis, one ADD per step (each position SLICE'd,
    the sums laid back together by CONCATENATION).  Exact where a MATMUL with a
    triangle of ones is not: its zeros turn an infinity into NaN."""
    name = node.input[0]
    shape, dtype = c.shape(name), c.dtype(name)
    axis = axis_index(c.value(node.input[1], "axis").reshape(-1)[0], len(shape))
    length = shape[axis]
    if dtype not in (np.float32, np.float16):
        raise Unsupported(f"{dtype} data (NNAPI's CONCATENATION takes floats)")
    if length > _MAX_CUMSUM_STEPS:
        raise Unsupported(f"an axis of more than {_MAX_CUMSUM_STEPS} elements")
    piece = (*shape[:axis], 1, *shape[axis + 1 :])
    exclusive, total = a.get("exclusive", 0), None
    sums: dict[int, int] = {}
    for k in reversed(range(length)) if a.get("reverse", 0) else range(length):
        if exclusive:
            sums[k] = filled(c, dtype, piece, 0) if total is None else total
        begin = [k if axis_ == axis else 0 for axis_ in range(len(shape))]
        step = apply(
            c, OperationCode.SLICE, [c.operand(name), c.ints(begin), c.ints(piece)], dtype, piece
        )
        total = step if total is None else apply(c, OperationCode.ADD, [total, step], dtype, piece)
        sums.setdefault(k, total)
    pieces = [sums[k] for k in range(length)]
    c.add(OperationCode.CONCATENATION, [*pieces, c.i32(axis)], [output_of(c, node)])


@maps("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
def _loss(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Constant targets (int64 in ONNX, so known at load) make the picks one GATHER
    of known positions: −x[n, t, d…] (SoftmaxCrossEntropyLoss: of LOG_SOFTMAX(x) along
    the classes), times weight[t] (a GATHER too).  An ignored target picks a zero
    laid after the values instead, so it adds nothing, and weighs nothing in a mean,
    whatever x holds there.  The mean divides by the summed weights, as ONNX does."""
    name, target = node.input[:2]
    weight = node.input[2] if len(node.input) > 2 else ""
    shape, f32 = c.shape(name), np.dtype(np.float32)
    if c.dtype(name) != f32 or len(shape) < 2 or len(shape) > 4:
        raise Unsupported(f"{c.dtype(name)} scores of rank {len(shape)} (float32, 2 to 4 map)")
    reduction = text(a.get("reduction"), "mean")
    if reduction not in ("none", "sum", "mean"):
        raise Unsupported(f"reduction {reduction!r}")
    labels = np.asarray(c.value(target, "target")).astype(np.int64)
    batch, classes = shape[:2]
    if labels.shape != (batch, *shape[2:]) or weight and c.shape(weight) != (classes,):
        raise Unsupported("a target or weight of a shape that does not fit the scores")
    inner = int(np.prod(shape[2:]))
    ignored = labels == a["ignore_index"] if "ignore_index" in a else np.zeros(labels.shape, bool)
    kept = labels[~ignored]
    if ((kept < 0) | (kept >= classes)).any():
        raise Unsupported("targets out of range")
    x = c.operand(name)
    if node.op_type == "SoftmaxCrossEntropyLoss":
        log_prob = output_of(c, node, 1) if len(node.output) > 1 and node.output[1] else None
        x = apply(c, OperationCode.LOG_SOFTMAX, [x, c.f32(1.0), c.i32(1)], f32, shape, log_prob)
    rows = labels.reshape(batch, inner)
    flat = (np.arange(batch)[:, None] * classes + rows) * inner + np.arange(inner)[None, :]
    positions = np.where(ignored.reshape(batch, inner), batch * classes * inner, flat)
    summed = reduction != "none"
    picks = positions.reshape(-1) if summed else positions.reshape(labels.shape)
    out = output_of(c, node)
    picked = _or_zero(c, x, shape, picks)
    weights = None
    if weight:
        if c.dtype(weight) != f32:
            raise Unsupported(f"{c.dtype(weight)} weights")
        chosen = np.where(ignored, classes, labels).reshape(picks.shape)
        weights = _or_zero(c, c.operand(weight), c.shape(weight), chosen)
    losses = apply(
        c, OperationCode.NEG, [picked], f32, picks.shape, None if summed or weights else out
    )
    if weights is not None:
        losses = apply(
            c, OperationCode.MUL, [losses, weights], f32, picks.shape, None if summed else out
        )
    if not summed:
        return
    total_axes, keep = c.ints([0]), c.boolean(True)
    if reduction == "sum":
        c.add(OperationCode.REDUCE_SUM, [losses, total_axes, keep], [out])
        return
    total = apply(c, OperationCode.REDUCE_SUM, [losses, total_axes, keep], f32, (1,))
    if weights is not None:
        count = apply(c, OperationCode.REDUCE_SUM, [weights, total_axes, keep], f32, (1,))
    else:
        count = c.floats(np.array([np.count_nonzero(~ignored)], np.float32))
    apply(c, OperationCode.DIV, [total, count], f32, (1,), out)


def _or_zero(c: Converter, source: int, shape: tuple[int, ...], positions: np.ndarray) -> int:
    """The float32 elements of ``source`` at flat ``positions``, where the position
    one past the last picks a zero (one GATHER from the values and a zero laid after)."""
    f32, size = np.dtype(np.float32), int(np.prod(shape))
    flat = apply(c, OperationCode.RESHAPE, [source, c.ints([size])], f32, (size,))
    padded = apply(
        c, OperationCode.CONCATENATION, [flat, c.floats(np.zeros(1)), c.i32(0)], f32, (size + 1,)
    )
    where = int_tensor(c, positions if positions.ndim else positions.reshape(1))
    return apply(c, OperationCode.GATHER, [padded, c.i32(0), where], f32, positions.shape or (1,))
