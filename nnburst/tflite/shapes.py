"""Shapes settled at load: new input shapes carried through the graph, and the
arithmetic on shapes folded to constants.

NNAPI models have static shapes, and so does a converted TFLite model.  A file
records every tensor's shape for one input shape (its placeholder, often
[1, 1] where the signature says [-1, -1]); LiteRT recomputes them all when
an input is resized.  :func:`settle` does the same before conversion: with
``input_shapes`` each operator's output shape follows from its inputs', and
an operator whose rule is not known here is refused rather than guessed.

What depends on shapes alone (a SHAPE, then the slicing, packing and
arithmetic on its integers that feeds a RESHAPE) is computed here too and
becomes a constant, as a delegate would see it: NNAPI has no SHAPE.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..codes import PaddingCode
from ..errors import BadDataError
from ..imported import UnsupportedModelError
from .converter import Unsupported
from .ops.custom import transpose_conv_options
from .reader import FlatModel, Operator, Subgraph

__all__ = ["InputShapes", "settle"]

Shape = tuple[int, ...]
#: Input shapes by input name, or by tensor index (as LiteRT's Interpreter names inputs).
InputShapes = Mapping[str, Sequence[int]] | Mapping[int, Sequence[int]]

_SAME, _VALID = 0, 1  # tflite.Padding


class _Graph:
    """One subgraph's tensors while their shapes and constant values settle."""

    def __init__(self, graph: Subgraph) -> None:
        self.graph = graph
        self.shapes: dict[int, Shape] = {t.index: t.shape for t in graph.tensors}
        self.values: dict[int, np.ndarray] = {}

    def shape(self, index: int) -> Shape:
        return self.shapes[index]

    def constant(self, index: int) -> np.ndarray | None:
        if index < 0:
            return None
        if index in self.values:
            return self.values[index]
        return self.graph.tensors[index].data


class _NoRule(Exception):
    """No output-shape rule for this operator."""


def settle(
    flat: FlatModel,
    input_shapes: InputShapes | None = None,
    strict: bool = True,
) -> FlatModel:
    """``flat`` with the main subgraph's inputs at ``input_shapes`` (input name or
    tensor index → shape), every shape after them recomputed, and shape
    arithmetic folded to constants in every subgraph.

    ``strict``: a dimension the file's shape signature fixes (not -1) must keep
    its size and the rank must stay, as LiteRT's strict resize wants; otherwise
    any shape is tried (LiteRT's plain resize), and the operators decide.

    Raises:
        BadDataError: ``input_shapes`` names no input, or gives a shape that does
            not fit it or that an operator cannot take.
        UnsupportedModelError: a changed shape reaches an operator whose output
            shape nnburst cannot work out.
    """
    given: dict[str | int, Sequence[int]] = dict(input_shapes.items()) if input_shapes else {}
    wanted = _wanted_shapes(flat.subgraphs[0], given, strict)
    subgraphs = [
        _settle(g, wanted if number == 0 else {}) for number, g in enumerate(flat.subgraphs)
    ]
    return FlatModel(subgraphs, flat.description)


def _wanted_shapes(
    graph: Subgraph, given: dict[str | int, Sequence[int]], strict: bool
) -> dict[int, Shape]:
    by_name = {graph.tensors[i].name: i for i in graph.inputs}
    wanted: dict[int, Shape] = {}
    for key, value in given.items():
        index = by_name.get(key) if isinstance(key, str) else key
        if index not in graph.inputs:
            names = [graph.tensors[i].name for i in graph.inputs]
            raise BadDataError(
                f"input_shapes names no input of the model: {key!r} (its inputs: {names})"
            )
        t = graph.tensors[index]
        try:
            shape = tuple(int(d) for d in value)
        except (TypeError, ValueError):
            raise BadDataError(f"input_shapes[{key!r}] = {value!r} is not a shape") from None
        if (strict and len(shape) != len(t.shape)) or any(d < 1 for d in shape):
            raise BadDataError(
                f"input_shapes[{key!r}] = {list(shape)} does not fit input {t.name!r} of rank "
                f"{len(t.shape)} (shape signature {list(t.signature or t.shape)})"
            )
        if strict and t.signature is not None:
            for axis, (size, fixed) in enumerate(zip(shape, t.signature)):
                if fixed != -1 and size != fixed:
                    raise BadDataError(
                        f"input_shapes[{key!r}] = {list(shape)}: dimension {axis} of input "
                        f"{t.name!r} is fixed at {fixed} (shape signature {list(t.signature)}); "
                        "only its -1 dimensions may change"
                    )
        if shape != t.shape:
            wanted[index] = shape
    return wanted


def _settle(graph: Subgraph, wanted: dict[int, Shape]) -> Subgraph:
    g = _Graph(graph)
    g.shapes.update(wanted)
    changed = set(wanted)
    kept: list[Operator] = []
    unknown: Counter[str] = Counter()
    for op in graph.operators:
        moved = any(i in changed for i in op.inputs if i >= 0)
        if _fold(g, op):
            changed.update(o for o in op.outputs if g.shapes[o] != graph.tensors[o].shape)
            continue
        kept.append(op)
        if not moved:
            continue
        try:
            shapes = _infer(g, op)
        except _NoRule:
            unknown[f"{op.name} (its output shape for new input shapes)"] += 1
            continue
        except Unsupported as exc:
            unknown[f"{op.name} ({exc})"] += 1
            continue
        except (IndexError, ValueError, ZeroDivisionError, AttributeError, TypeError) as exc:
            raise BadDataError(
                f"operator {op.index} ({op.name}) cannot take the new input shapes "
                f"{[list(g.shapes[i]) for i in op.inputs if i >= 0]}: {exc}"
            ) from None
        if len(shapes) != len(op.outputs):
            raise BadDataError(f"operator {op.index} ({op.name}): {len(op.outputs)} outputs")
        for o, shape in zip(op.outputs, shapes):
            if any(d < 1 for d in shape):
                raise BadDataError(
                    f"operator {op.index} ({op.name}) cannot take the new input shapes "
                    f"{[list(g.shapes[i]) for i in op.inputs if i >= 0]}: its output would be "
                    f"{list(shape)}"
                )
            g.shapes[o] = shape
            changed.add(o)
    if unknown:
        raise UnsupportedModelError(unknown)
    if len(kept) == len(graph.operators) and not changed:
        return graph
    tensors = [
        dataclasses.replace(t, shape=g.shapes[t.index], data=g.values.get(t.index, t.data))
        for t in graph.tensors
    ]
    return dataclasses.replace(graph, tensors=tensors, operators=kept)


# -- folding: integer arithmetic on constants and shapes ------------------------------------


def _fold(g: _Graph, op: Operator) -> bool:
    """Compute ``op`` now when it depends on shapes and constant integers alone."""
    rule = _FOLDS.get(op.name)
    if rule is None or len(op.outputs) != 1 or not op.inputs or min(op.inputs) < 0:
        return False
    out = g.graph.tensors[op.outputs[0]]
    if out.dtype is None or out.dtype.kind not in "iu" or out.variable:
        return False
    if op.outputs[0] in g.graph.outputs:
        return False
    if op.name != "SHAPE":
        constants = [g.constant(i) for i in op.inputs]
        if any(c is None or c.dtype.kind not in "iub" or c.size > MAX_FOLDED for c in constants):
            return False
        if _folded_size(op, constants) > MAX_FOLDED:
            return False  # not shape arithmetic: left to run (a FILL of a huge shape)
    try:
        value = np.asarray(rule(g, op))
    except (_NoRule, IndexError, ValueError, TypeError, AttributeError, ZeroDivisionError):
        return False  # left to the operator's mapper, which says what is wrong
    g.values[op.outputs[0]] = value.astype(out.dtype)
    g.shapes[op.outputs[0]] = value.shape
    return True


#: The most elements a folded tensor may have: shapes and the arithmetic on
#: them are a few integers, and a bad file must not make load allocate much.
MAX_FOLDED = 1 << 16


def _folded_size(op: Operator, constants: list[np.ndarray | None]) -> int:
    """How many elements folding ``op`` would make (at most, for a slice)."""
    if op.name == "FILL":
        dims = constants[0]
        assert dims is not None
        return math.prod(max(int(d), 0) for d in dims.reshape(-1)) if dims.size < 8 else 1 << 62
    if op.name in ("ADD", "SUB", "MUL", "FLOOR_DIV", "MAXIMUM", "MINIMUM"):
        try:
            return math.prod(np.broadcast_shapes(*(c.shape for c in constants if c is not None)))
        except ValueError:
            return 0  # left to fail in the fold, and so to the mapper
    return sum(c.size for c in constants if c is not None)


def _c(g: _Graph, index: int) -> np.ndarray:
    value = g.constant(index)
    assert value is not None
    return value


def _strided_slice(g: _Graph, op: Operator) -> np.ndarray:
    return _sliced(_c(g, op.inputs[0]), g, op)


def _sliced(x: np.ndarray, g: _Graph, op: Operator) -> np.ndarray:
    """``x`` cut as STRIDED_SLICE cuts it (numpy's slices clamp as TFLite's do)."""
    o = op.options
    if o is None or o.EllipsisMask() or o.NewAxisMask() or o.Offset():
        raise _NoRule
    begin, end, strides = (_constant(g, i).reshape(-1).tolist() for i in op.inputs[1:4])
    index: list[Any] = []
    for axis in range(len(begin)):
        if o.ShrinkAxisMask() >> axis & 1:
            index.append(int(begin[axis]))
            continue
        start = None if o.BeginMask() >> axis & 1 else int(begin[axis])
        stop = None if o.EndMask() >> axis & 1 else int(end[axis])
        index.append(slice(start, stop, int(strides[axis])))
    return x[tuple(index)]


def _pack(g: _Graph, op: Operator) -> np.ndarray:
    axis = op.options.Axis() if op.options is not None else 0
    return np.stack([_c(g, i) for i in op.inputs], axis=axis)


def _binary(function: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def fold(g: _Graph, op: Operator) -> np.ndarray:
        a, b = (_c(g, i).astype(np.int64) for i in op.inputs[:2])
        return function(a, b)

    return fold


def _reduce_prod(g: _Graph, op: Operator) -> np.ndarray:
    x = _c(g, op.inputs[0])
    axes = tuple(int(a) for a in _c(g, op.inputs[1]).reshape(-1))
    keep = bool(op.options.KeepDims()) if op.options is not None else False
    return np.prod(x.astype(np.int64), axis=axes, keepdims=keep)


_FOLDS: dict[str, Callable[[_Graph, Operator], np.ndarray]] = {
    "SHAPE": lambda g, op: np.array(g.shape(op.inputs[0]), np.int64),
    "STRIDED_SLICE": _strided_slice,
    "PACK": _pack,
    "CONCATENATION": lambda g, op: np.concatenate(
        [_c(g, i) for i in op.inputs], axis=op.options.Axis() if op.options is not None else 0
    ),
    "GATHER": lambda g, op: np.take(
        _c(g, op.inputs[0]), _c(g, op.inputs[1]), axis=op.options.Axis() if op.options else 0
    ),
    "SLICE": lambda g, op: _c(g, op.inputs[0])[
        tuple(
            slice(int(b), None if int(s) == -1 else int(b) + int(s))
            for b, s in zip(_c(g, op.inputs[1]).reshape(-1), _c(g, op.inputs[2]).reshape(-1))
        )
    ],
    "RESHAPE": lambda g, op: _c(g, op.inputs[0]).reshape(g.graph.tensors[op.outputs[0]].shape),
    "EXPAND_DIMS": lambda g, op: np.expand_dims(_c(g, op.inputs[0]), int(_c(g, op.inputs[1]).reshape(-1)[0])),
    "SQUEEZE": lambda g, op: _c(g, op.inputs[0]).reshape(g.graph.tensors[op.outputs[0]].shape),
    "CAST": lambda g, op: _c(g, op.inputs[0]),
    "ADD": _binary(np.add),
    "SUB": _binary(np.subtract),
    "MUL": _binary(np.multiply),
    "FLOOR_DIV": _binary(np.floor_divide),
    "MAXIMUM": _binary(np.maximum),
    "MINIMUM": _binary(np.minimum),
    "REDUCE_PROD": _reduce_prod,
    "FILL": lambda g, op: np.full(tuple(int(d) for d in _c(g, op.inputs[0]).reshape(-1)), _c(g, op.inputs[1]).reshape(-1)[0]),
}  # fmt: skip


# -- output shapes --------------------------------------------------------------------------

_SAME_SHAPE = frozenset(
    {"ABS", "CAST", "CEIL", "COS", "DEQUANTIZE", "ELU", "EXP", "FLOOR", "GELU", "HARD_SWISH",
     "L2_NORMALIZATION", "LEAKY_RELU", "LOCAL_RESPONSE_NORMALIZATION", "LOG", "LOG_SOFTMAX",
     "LOGICAL_NOT", "LOGISTIC", "NEG", "QUANTIZE", "RELU", "RELU6", "RELU_0_TO_1", "RELU_N1_TO_1",
     "ROUND", "RSQRT", "SIGN", "SIN", "SOFTMAX", "SQRT", "SQUARE", "TANH", "ZEROS_LIKE"}
)  # fmt: skip
_BROADCAST = frozenset(
    {"ADD", "DIV", "EQUAL", "FLOOR_DIV", "FLOOR_MOD", "GREATER", "GREATER_EQUAL", "LESS",
     "LESS_EQUAL", "LOGICAL_AND", "LOGICAL_OR", "MAXIMUM", "MINIMUM", "MUL", "NOT_EQUAL", "POW",
     "PRELU", "SQUARED_DIFFERENCE", "SUB", "SELECT_V2"}
)  # fmt: skip
_REDUCTIONS = frozenset({"MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY"})


def _infer(g: _Graph, op: Operator) -> list[Shape]:
    s = [g.shape(i) if i >= 0 else () for i in op.inputs]
    name, o = op.name, op.options
    if name in _SAME_SHAPE:
        return [s[0]]
    if name in _BROADCAST:
        return [tuple(np.broadcast_shapes(*s))]
    if name in _REDUCTIONS:
        rank = len(s[0])
        axes = {int(a) % rank for a in _constant(g, op.inputs[1]).reshape(-1)}
        keep = bool(o.KeepDims()) if o is not None else False
        return [tuple(1 if a in axes else d for a, d in enumerate(s[0]) if keep or a not in axes)]
    rule = _RULES.get(name)
    if rule is None:
        raise _NoRule
    return rule(g, op, s)


def _constant(g: _Graph, index: int) -> np.ndarray:
    value = g.constant(index)
    if value is None:
        raise _NoRule
    return value


def _window(size: int, kernel: int, stride: int, dilation: int, padding: int) -> int:
    if stride < 1 or dilation < 1:
        raise ValueError(f"stride {stride}, dilation {dilation}")
    if padding == _SAME:
        return -(-size // stride)
    return (size - (kernel - 1) * dilation - 1) // stride + 1


def _conv(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    o = op.options
    n, h, w, _ = s[0]
    kh, kw = s[1][1], s[1][2]
    channels = s[1][3] if op.name == "DEPTHWISE_CONV_2D" else s[1][0]
    out_h = _window(h, kh, o.StrideH(), o.DilationHFactor(), o.Padding())
    out_w = _window(w, kw, o.StrideW(), o.DilationWFactor(), o.Padding())
    return [(n, out_h, out_w, channels)]


def _pool(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    o = op.options
    n, h, w, c = s[0]
    out_h = _window(h, o.FilterHeight(), o.StrideH(), 1, o.Padding())
    out_w = _window(w, o.FilterWidth(), o.StrideW(), 1, o.Padding())
    return [(n, out_h, out_w, c)]


def _fully_connected(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    units, depth = s[1]
    if op.options is not None and op.options.KeepNumDims():
        return [(*s[0][:-1], units)]
    rows, rest = divmod(math.prod(s[0]), depth)
    if rest:
        raise ValueError(f"{math.prod(s[0])} elements are no whole number of rows of {depth}")
    return [(rows, units)]


def _batch_matmul(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    a, b = s[0], s[1]
    if op.options is not None and op.options.AdjX():
        a = (*a[:-2], a[-1], a[-2])
    if op.options is not None and op.options.AdjY():
        b = (*b[:-2], b[-1], b[-2])
    if a[-1] != b[-2]:
        raise ValueError(f"inner dimensions {a[-1]} and {b[-2]} differ")
    batch = np.broadcast_shapes(a[:-2], b[:-2])
    return [(*batch, a[-2], b[-1])]


def _reshape(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    target = None
    if len(op.inputs) > 1 and op.inputs[1] >= 0:
        target = _constant(g, op.inputs[1]).reshape(-1).tolist()
    elif op.options is not None and op.options.NewShapeLength():
        target = op.options.NewShapeAsNumpy().tolist()
    if target is None:
        raise _NoRule
    return [_reshaped(s[0], target)]


def _reshaped(shape: Shape, target: list[int]) -> Shape:
    total = math.prod(shape)
    if target.count(-1) > 1:
        raise ValueError(f"target {target} has more than one -1")
    known = math.prod(d for d in target if d != -1)
    if -1 in target:
        if known == 0 or total % known:
            raise ValueError(f"{total} elements do not fill {target}")
        target = [total // known if d == -1 else d for d in target]
    if math.prod(target) != total:
        raise ValueError(f"{total} elements do not fill {target}")
    return tuple(int(d) for d in target)


def _expand_dims(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    axis = int(_constant(g, op.inputs[1]).reshape(-1)[0])
    axis = axis % (len(s[0]) + 1)
    return [(*s[0][:axis], 1, *s[0][axis:])]


def _squeeze(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    rank = len(s[0])
    dims = (
        op.options.SqueezeDimsAsNumpy().tolist()
        if op.options and op.options.SqueezeDimsLength()
        else []
    )
    axes = {d % rank for d in dims} if dims else {a for a, d in enumerate(s[0]) if d == 1}
    if any(s[0][a] != 1 for a in axes):
        raise ValueError(f"squeezes a dimension that is not 1 from {list(s[0])}")
    return [tuple(d for a, d in enumerate(s[0]) if a not in axes)]


def _transpose(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    perm = _constant(g, op.inputs[1]).reshape(-1).tolist()
    return [tuple(s[0][p] for p in perm)]


def _concatenation(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    rank = len(s[0])
    axis = op.options.Axis() % rank
    for shape in s[1:]:
        if len(shape) != rank or any(
            a != b for k, (a, b) in enumerate(zip(shape, s[0])) if k != axis
        ):
            raise ValueError(f"inputs {[list(x) for x in s]} differ beside axis {axis}")
    return [(*s[0][:axis], sum(x[axis] for x in s), *s[0][axis + 1 :])]


def _pad(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    pads = _constant(g, op.inputs[1]).reshape(-1, 2)
    return [tuple(int(d + a + b) for d, (a, b) in zip(s[0], pads))]


def _resize(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    h, w = (int(d) for d in _constant(g, op.inputs[1]).reshape(-1))
    return [(s[0][0], h, w, s[0][3])]


def _strided_slice_shape(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    stand_in = np.broadcast_to(np.zeros((), np.uint8), s[0])  # zero strides: no memory
    return [_sliced(stand_in, g, op).shape]


def _slice_shape(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    begin = _constant(g, op.inputs[1]).reshape(-1).tolist()
    size = _constant(g, op.inputs[2]).reshape(-1).tolist()
    return [tuple(d - b if n == -1 else n for d, b, n in zip(s[0], begin, size))]


def _gather(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    axis = (op.options.Axis() if op.options is not None else 0) % len(s[0])
    return [(*s[0][:axis], *s[1], *s[0][axis + 1 :])]


def _split(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    x = s[1]
    axis = int(_constant(g, op.inputs[0]).reshape(-1)[0]) % len(x)
    parts = len(op.outputs)
    if x[axis] % parts:
        raise ValueError(f"{x[axis]} does not split into {parts}")
    piece = (*x[:axis], x[axis] // parts, *x[axis + 1 :])
    return [piece] * parts


def _pack_shape(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    axis = op.options.Axis() % (len(s[0]) + 1)
    return [(*s[0][:axis], len(s), *s[0][axis:])]


def _tile(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    multiples = _constant(g, op.inputs[1]).reshape(-1).tolist()
    return [tuple(int(d * m) for d, m in zip(s[0], multiples))]


def _arg(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    axis = int(_constant(g, op.inputs[1]).reshape(-1)[0]) % len(s[0])
    return [tuple(d for a, d in enumerate(s[0]) if a != axis)]


def _space_to_depth(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    b = op.options.BlockSize()
    n, h, w, c = s[0]
    if op.name == "SPACE_TO_DEPTH":
        if h % b or w % b:
            raise ValueError(f"{h}x{w} is not a multiple of the block {b}")
        return [(n, h // b, w // b, c * b * b)]
    if c % (b * b):
        raise ValueError(f"depth {c} is not a multiple of {b * b}")
    return [(n, h * b, w * b, c // (b * b))]


def _transpose_conv_bias(g: _Graph, op: Operator, s: list[Shape]) -> list[Shape]:
    """MediaPipe's transposed convolution: SAME gives ``size * stride``, VALID
    ``(size - 1) * stride + kernel`` (TFLite's builtin takes its shape as an input)."""
    padding, stride_w, stride_h = transpose_conv_options(op)
    n, h, w, _ = s[0]
    out_c, kh, kw = s[1][:3]
    if padding == PaddingCode.SAME:
        return [(n, h * stride_h, w * stride_w, out_c)]
    return [(n, (h - 1) * stride_h + kh, (w - 1) * stride_w + kw, out_c)]


_RULES: dict[str, Callable[[_Graph, Operator, list[Shape]], list[Shape]]] = {
    "TRANSPOSE_CONV": lambda g, op, s: [tuple(int(d) for d in _constant(g, op.inputs[0]))],
    "CUSTOM:Convolution2DTransposeBias": _transpose_conv_bias,
    "CONV_2D": _conv,
    "DEPTHWISE_CONV_2D": _conv,
    "AVERAGE_POOL_2D": _pool,
    "MAX_POOL_2D": _pool,
    "L2_POOL_2D": _pool,
    "FULLY_CONNECTED": _fully_connected,
    "BATCH_MATMUL": _batch_matmul,
    "RESHAPE": _reshape,
    "EXPAND_DIMS": _expand_dims,
    "SQUEEZE": _squeeze,
    "TRANSPOSE": _transpose,
    "CONCATENATION": _concatenation,
    "PAD": _pad,
    "PADV2": _pad,
    "RESIZE_BILINEAR": _resize,
    "RESIZE_NEAREST_NEIGHBOR": _resize,
    "STRIDED_SLICE": _strided_slice_shape,
    "SLICE": _slice_shape,
    "GATHER": _gather,
    "SPLIT": _split,
    "PACK": _pack_shape,
    "TILE": _tile,
    "ARG_MAX": _arg,
    "ARG_MIN": _arg,
    "SPACE_TO_DEPTH": _space_to_depth,
    "DEPTH_TO_SPACE": _space_to_depth,
}
