"""Load-time evaluation: ONNX nodes whose inputs are all known at load (shape
arithmetic, ``Constant``) computed with numpy, so only real computation
reaches the model.  Each folder registers itself in
:data:`~nnburst.onnx.converter.FOLDERS`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper

from .converter import DTYPES, Converter, Folder, Unsupported, axis_index, folds, tensor_value


@folds("Constant")
def fold_constant(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    if "value" in a:
        return [tensor_value(a["value"])]
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64),
                       ("value_floats", np.float32), ("value_ints", np.int64)):  # fmt: skip
        if key in a:
            return [np.array(a[key], dtype)]
    raise Unsupported("a Constant without a value")


@folds("Shape")
def _fold_shape(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    shape = np.array(c.shape(node.input[0]), np.int64)
    return [shape[a.get("start", 0) : a.get("end", len(shape))]]


def _known(c: Converter, node: onnx.NodeProto) -> list[np.ndarray]:
    return [c.constants[n] if n else np.array([]) for n in node.input]


def _fold_with(function: Callable[..., Any]) -> Folder:
    def folder(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
        return [np.asarray(function(*_known(c, node)))]

    return folder


for _name, _function in (
    ("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply), ("Neg", np.negative),
    ("Equal", np.equal), ("Less", np.less), ("Greater", np.greater), ("Where", np.where),
    ("Min", np.minimum), ("Max", np.maximum), ("Abs", np.abs), ("Sqrt", np.sqrt),
    ("Not", np.logical_not),
    ("And", np.logical_and), ("Or", np.logical_or), ("LessOrEqual", np.less_equal),
    ("GreaterOrEqual", np.greater_equal), ("Floor", np.floor), ("Ceil", np.ceil),
    ("Identity", np.array), ("Sign", np.sign),
):  # fmt: skip
    folds(_name)(_fold_with(_function))


@folds("Mod")
def _fold_mod(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    """fmod=0: the remainder takes the divisor's sign (numpy's mod); fmod=1: the
    dividend's (C's fmod)."""
    x, y = _known(c, node)
    return [np.fmod(x, y) if a.get("fmod", 0) else np.mod(x, y)]


@folds("CastLike")
def _fold_cast_like(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    x, like = _known(c, node)[:2]
    return [x.astype(like.dtype)]


@folds("Expand")
def _fold_expand(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    x, shape = _known(c, node)
    target = np.broadcast_shapes(x.shape, tuple(int(d) for d in shape.reshape(-1)))
    return [np.broadcast_to(x, target).copy()]


@folds("Div")
def _fold_div(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    x, y = _known(c, node)
    if np.issubdtype(x.dtype, np.integer):
        return [np.trunc(x / y).astype(x.dtype)]
    return [x / y]


@folds("EyeLike")
def _fold_eye_like(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    """Ones on diagonal k: it depends on the input's shape only."""
    shape = c.shape(node.input[0])
    dtype = DTYPES.get(a["dtype"]) if "dtype" in a else c.dtype(node.input[0])
    if dtype is None or len(shape) != 2:
        raise Unsupported("a type nnburst cannot hold")
    return [np.eye(shape[0], shape[1], a.get("k", 0), dtype)]


@folds("Size")
def _fold_size(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    return [np.array(int(np.prod(c.shape(node.input[0]))), np.int64)]


@folds("Gather")
def _fold_gather(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    x, indices = _known(c, node)
    return [np.take(x, indices, axis=a.get("axis", 0))]


@folds("Concat")
def _fold_concat(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    return [np.concatenate(_known(c, node), axis=a["axis"])]


@folds("Unsqueeze")
def _fold_unsqueeze(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    values = _known(c, node)
    axes = a.get("axes", values[1].tolist() if len(values) > 1 else [])
    out = values[0]
    rank = out.ndim + len(axes)
    for axis in sorted(axis_index(x, rank) for x in axes):
        out = np.expand_dims(out, axis)
    return [out]


@folds("Squeeze")
def _fold_squeeze(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    values = _known(c, node)
    axes = a.get("axes", values[1].tolist() if len(values) > 1 else None)
    return [np.squeeze(values[0], axis=None if axes is None else tuple(axes))]


@folds("Cast")
def _fold_cast(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    dtype = helper.tensor_dtype_to_np_dtype(a["to"])
    return [_known(c, node)[0].astype(dtype)]


@folds("Reshape")
def _fold_reshape(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    x, shape = _known(c, node)[:2]
    dims = [
        x.shape[i] if d == 0 and not a.get("allowzero", 0) else d
        for i, d in enumerate(shape.tolist())
    ]
    return [x.reshape(dims)]


@folds("Transpose")
def _fold_transpose(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    """Pad amounts exported from PyTorch are reordered by one (a [n, 2] table to [2, n])."""
    return [np.transpose(_known(c, node)[0], a.get("perm"))]


@folds("Range")
def _fold_range(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    start, limit, delta = _known(c, node)
    return [np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)]


@folds("ConstantOfShape")
def _fold_constant_of_shape(
    c: Converter, node: onnx.NodeProto, a: dict[str, Any]
) -> list[np.ndarray]:
    value = tensor_value(a["value"]) if "value" in a else np.zeros(1, np.float32)
    return [np.full(_known(c, node)[0].tolist(), value.reshape(-1)[0], value.dtype)]


@folds("Slice")
def _fold_slice(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    x, starts, ends, *rest = _known(c, node)
    axes = rest[0].tolist() if rest and rest[0].size else list(range(len(starts)))
    steps = rest[1].tolist() if len(rest) > 1 and rest[1].size else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for axis, s, e, step in zip(axes, starts.tolist(), ends.tolist(), steps):
        index[axis] = slice(s, e, step)
    return [x[tuple(index)]]


#: What each reduction gives over no elements at all (ONNX's "empty set" rule;
#: max and min of integers: the type's extremes).
_EMPTY_REDUCTIONS = {
    "ReduceSum": 0.0, "ReduceSumSquare": 0.0, "ReduceL1": 0.0, "ReduceL2": 0.0,
    "ReduceProd": 1.0, "ReduceMax": -np.inf, "ReduceMin": np.inf,
    "ReduceLogSum": -np.inf, "ReduceLogSumExp": -np.inf,
}  # fmt: skip


@folds(*_EMPTY_REDUCTIONS)
def _fold_empty_reduction(
    c: Converter, node: onnx.NodeProto, a: dict[str, Any]
) -> list[np.ndarray]:
    """A reduction of an empty tensor along its empty axis is known at load: the
    reduction's value over nothing (others are computed at run time)."""
    x, *rest = _known(c, node)
    axes = a.get("axes", rest[0].tolist() if rest and rest[0].size else None)
    if x.size or not axes and a.get("noop_with_empty_axes", 0) or x.dtype.kind not in "fi":
        raise Unsupported("not an empty reduction")
    axes = tuple(range(x.ndim)) if not axes else tuple(axis_index(i, x.ndim) for i in axes)
    shape = np.sum(x, axis=axes, keepdims=bool(a.get("keepdims", 1))).shape
    value = _EMPTY_REDUCTIONS[node.op_type]
    if x.dtype.kind == "i" and np.isinf(value):
        value = np.iinfo(x.dtype).min if value < 0 else np.iinfo(x.dtype).max
    return [np.full(shape, value, x.dtype)]
