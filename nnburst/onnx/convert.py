"""ONNX graphs → NNAPI operations.

ONNX convolutions and pools are NCHW; NNAPI's have a layout flag, so they
run on NCHW tensors as they are (filters are transposed once, at load).
Shapes are static: ONNX's shape inference gives every intermediate its
shape, and nodes whose inputs are all known at load (shape arithmetic,
``Constant``) are evaluated then, so only real computation reaches the model.
int64 tensors become int32 when their values fit.

As for TFLite, conversion is all or nothing: every node is checked first,
and one :class:`~nnburst.imported.UnsupportedModelError` lists every
unsupported operator (or attribute value) with its count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..codes import FuseCode, OperandCode, OperationCode
from ..errors import BadDataError
from ..imported import ModelBuilder, Registry, TensorInfo, UnsupportedModelError
from ..model import Model, OperandType

#: ONNX TensorProto element types nnburst can hold, as numpy dtypes.
_DTYPES: dict[int, np.dtype[Any]] = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16),
    onnx.TensorProto.INT32: np.dtype(np.int32),
    onnx.TensorProto.INT64: np.dtype(np.int64),
    onnx.TensorProto.UINT8: np.dtype(np.uint8),
    onnx.TensorProto.INT8: np.dtype(np.int8),
    onnx.TensorProto.BOOL: np.dtype(np.bool_),
}


#: Rounds of folding and shape inference (each round can only add constants).
_FOLD_ROUNDS = 4


class _Unsupported(Exception):
    """One node's use that cannot be mapped (the message says which part)."""


def _narrow(values: np.ndarray, name: str) -> np.ndarray:
    """int64 → int32 (NNAPI has no 64-bit integers), refusing values that do not fit."""
    if values.dtype != np.int64:
        return values
    narrowed = values.astype(np.int32)
    if not np.array_equal(narrowed, values):
        raise BadDataError(f"tensor {name!r}: int64 values beyond int32")
    return narrowed


class Converter(ModelBuilder):
    """Builds one :class:`~nnburst.model.Model` from an ONNX graph."""

    def __init__(
        self, model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None
    ) -> None:
        model = _fix_input_shapes(model, dict(input_shapes or {}))
        try:
            model = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        except Exception as exc:  # a graph ONNX itself cannot type
            raise BadDataError(f"ONNX shape inference failed: {exc}") from None
        self.onnx = model
        self.graph = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        super().__init__()
        self.constants: dict[str, np.ndarray] = {
            t.name: numpy_helper.to_array(t) for t in self.graph.initializer
        }
        self.types: dict[str, tuple[np.dtype[Any] | None, tuple[int, ...] | None]] = {}
        for info in (*self.graph.input, *self.graph.value_info, *self.graph.output):
            self.types[info.name] = _type_of(info)
        self._operands: dict[str, int] = {}

    # -- tensors ---------------------------------------------------------------------------
    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.constants:
            return tuple(self.constants[name].shape)
        shape = self.types.get(name, (None, None))[1]
        if shape is None:
            raise _Unsupported("a tensor whose shape depends on the input's values")
        return shape

    def dtype(self, name: str) -> np.dtype[Any]:
        if name in self.constants:
            return self.constants[name].dtype
        dtype = self.types.get(name, (None, None))[0]
        if dtype is None:
            raise _Unsupported(f"tensor {name!r} has a type nnburst cannot hold")
        return dtype

    def operand_type(self, name: str) -> OperandType:
        return _operand_type(self.dtype(name), self.shape(name))

    def operand(self, name: str) -> int:
        if name in self._operands:
            return self._operands[name]
        operand = self.model.add_operand(self.operand_type(name))
        if name in self.constants:
            values = _narrow(self.constants[name], name)
            if values.dtype == np.float64:
                values = values.astype(np.float32)
            self.model.set_operand_value(operand, values.reshape(self.shape(name) or (1,)))
        self._operands[name] = operand
        return operand

    def value(self, name: str, what: str) -> np.ndarray:
        if name not in self.constants:
            raise _Unsupported(f"a computed {what} (only a constant one maps)")
        return self.constants[name]

    def temporary(self, dtype: np.dtype[Any], shape: tuple[int, ...]) -> int:
        return self.model.add_operand(_operand_type(dtype, shape))

    def alias(self, name: str, operand: int) -> None:
        self._operands[name] = operand

    # -- the graph -------------------------------------------------------------------------
    def convert(self) -> Model:
        for _ in range(_FOLD_ROUNDS):  # folding a shape can type more tensors, which can fold
            before = len(self.constants)
            self._fold_constants()
            if len(self.constants) == before:
                break
            self._infer_again()
        unsupported: Counter[str] = Counter()
        for info in (*self.graph.input, *self.graph.output):
            shape = self.types.get(info.name, (None, None))[1]
            if (
                info.name not in self.constants
                and shape is not None
                and 0 in shape
                or info.name in self.constants
                and self.constants[info.name].size == 0
            ):
                unsupported["empty tensors"] += 1
        # One pass over every node: one that cannot be mapped is counted and the
        # rest still mapped (the half-built model is dropped), so one error lists all.
        for node in self.graph.node:
            if node.output and all(o in self.constants for o in node.output):
                continue
            why = _check(self, node)
            if not why:
                try:
                    MAPPERS[node.op_type](self, node, _attributes(node))
                except _Unsupported as exc:
                    why = f"{node.op_type} ({exc})"
            if why:
                unsupported[why] += 1
        if unsupported:
            raise UnsupportedModelError(unsupported)
        inputs = [self.operand(i.name) for i in self.graph.input if i.name not in self.constants]
        taken: set[int] = set()
        outputs = [self._output(o.name, inputs, taken) for o in self.graph.output]
        self.model.identify_inputs_and_outputs(inputs, outputs)
        return self.finish()

    def _output(self, name: str, inputs: Sequence[int], taken: set[int]) -> int:
        """A computed operand for each output: an input, a constant or an operand
        already returned is copied."""
        operand = self.operand(name)
        if name not in self.constants and operand not in inputs and operand not in taken:
            taken.add(operand)
            return operand
        return self.copy(operand, self.operand_type(name))

    def _infer_again(self) -> None:
        """Shape inference over the graph with the folded tensors as initializers."""
        model = onnx.ModelProto.FromString(self.onnx.SerializeToString())
        known = {t.name for t in model.graph.initializer}
        keep = [
            n
            for n in model.graph.node
            if not (n.output and all(o in self.constants for o in n.output))
        ]
        del model.graph.node[:]
        model.graph.node.extend(keep)
        for name, value in self.constants.items():
            if name not in known:
                model.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        try:
            model = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        except Exception:
            return  # keep what the first inference found
        for info in (*model.graph.value_info, *model.graph.output):
            dtype, shape = _type_of(info)
            if shape is not None or info.name not in self.types:
                self.types[info.name] = (dtype, shape)

    def _fold_constants(self) -> None:
        """Evaluate, at load, every node whose inputs are all known (shape arithmetic)."""
        for node in self.graph.node:
            fold = FOLDERS.get(node.op_type)
            if fold is None:
                continue
            inputs = [n for n in node.input if n]
            if node.op_type in ("Shape", "Size"):
                known = inputs[0] in self.constants or self.types.get(inputs[0], (None, None))[1]
                if not known:
                    continue
            elif not all(n in self.constants for n in inputs):
                continue
            try:
                results = fold(self, node, _attributes(node))
            except _Unsupported:
                continue
            for name, value in zip(node.output, results):
                self.constants[name] = np.asarray(value)


def _fix_input_shapes(model: onnx.ModelProto, shapes: dict[str, Sequence[int]]) -> onnx.ModelProto:
    """A copy with every graph input's shape static: ``shapes`` where given, else a
    symbolic first (batch) dimension of 1.  Any other symbolic dimension must be
    given: guessing a sequence length would build a model for the wrong input."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    initializers = {t.name for t in model.graph.initializer}
    unknown = set(shapes) - {i.name for i in model.graph.input}
    if unknown:
        raise BadDataError(f"input_shapes names no input of the model: {sorted(unknown)}")
    for info in model.graph.input:
        if info.name in initializers:
            continue
        if not info.type.HasField("tensor_type"):
            raise UnsupportedModelError(Counter({"sequence, map or optional inputs": 1}))
        if info.name in shapes and not info.type.tensor_type.HasField("shape"):
            info.type.tensor_type.shape.dim.add()  # an input of unknown rank: take the given one
            del info.type.tensor_type.shape.dim[:]
            for _ in shapes[info.name]:
                info.type.tensor_type.shape.dim.add()
        dims = info.type.tensor_type.shape.dim
        if info.name in shapes:
            wanted = [int(d) for d in shapes[info.name]]
            if 0 in wanted:
                raise UnsupportedModelError(Counter({"empty tensors": 1}))
            if len(wanted) != len(dims) or any(d < 1 for d in wanted):
                raise BadDataError(
                    f"input_shapes[{info.name!r}] = {wanted} does not fit rank {len(dims)}"
                )
        else:
            wanted = []
            for i, d in enumerate(dims):
                if d.HasField("dim_value") and d.dim_value > 0:
                    wanted.append(int(d.dim_value))
                elif i == 0:
                    wanted.append(1)
                else:
                    raise BadDataError(
                        f"input {info.name!r} has a dynamic dimension {i} ({d.dim_param or '?'}): "
                        "pass input_shapes={name: shape}"
                    )
        for d, value in zip(dims, wanted):
            d.Clear()
            d.dim_value = value
    return model


def _type_of(info: onnx.ValueInfoProto) -> tuple[np.dtype[Any] | None, tuple[int, ...] | None]:
    t = info.type.tensor_type
    dtype = _DTYPES.get(t.elem_type)
    if not t.HasField("shape"):
        return dtype, None
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value"):
            return dtype, None
        dims.append(int(d.dim_value))
    return dtype, tuple(dims)


def _operand_type(dtype: np.dtype[Any], shape: tuple[int, ...]) -> OperandType:
    dims = shape or (1,)  # NNAPI has no rank-0 tensors
    codes = {
        np.dtype(np.float32): OperandCode.TENSOR_FLOAT32,
        np.dtype(np.float64): OperandCode.TENSOR_FLOAT32,
        np.dtype(np.float16): OperandCode.TENSOR_FLOAT16,
        np.dtype(np.int32): OperandCode.TENSOR_INT32,
        np.dtype(np.int64): OperandCode.TENSOR_INT32,
        np.dtype(np.bool_): OperandCode.TENSOR_BOOL8,
    }
    code = codes.get(np.dtype(dtype))
    if code is None:
        raise _Unsupported(f"{dtype} tensors")
    return OperandType(code, dims)


def _operand_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype an operand of ``dtype`` holds (NNAPI has no 64-bit types)."""
    return {np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.float64): np.dtype(np.float32)}.get(
        np.dtype(dtype), np.dtype(dtype)
    )


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _check(c: Converter, node: onnx.NodeProto) -> str | None:
    if node.domain not in ("", "ai.onnx"):
        return f"{node.domain}.{node.op_type}"
    if node.op_type not in MAPPERS:
        return node.op_type
    for position, name in enumerate((*node.input, *node.output)):
        if not name or node.op_type == "Resize" and position in (1, 2) and name in c.constants:
            continue  # Resize's roi and scales may be empty constants: placeholders
        try:
            c.operand_type(name)
            if 0 in c.shape(name):
                return f"{node.op_type} (empty tensors)"
        except _Unsupported as exc:
            return f"{node.op_type} ({exc})"
    return None


# -- constant folding (load-time evaluation) --------------------------------------------------

Folder = Callable[[Converter, onnx.NodeProto, dict[str, Any]], list[np.ndarray]]
FOLDERS: Registry[Folder] = Registry()
folds = FOLDERS.maps


@folds("Constant")
def _fold_constant(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    if "value" in a:
        return [numpy_helper.to_array(a["value"])]
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64),
                       ("value_floats", np.float32), ("value_ints", np.int64)):  # fmt: skip
        if key in a:
            return [np.array(a[key], dtype)]
    raise _Unsupported("a Constant without a value")


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
):  # fmt: skip
    folds(_name)(_fold_with(_function))


@folds("Div")
def _fold_div(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    x, y = _known(c, node)
    if np.issubdtype(x.dtype, np.integer):
        return [np.trunc(x / y).astype(x.dtype)]
    return [x / y]


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
    for axis in sorted(int(x) % rank for x in axes):
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


@folds("Range")
def _fold_range(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    start, limit, delta = _known(c, node)
    return [np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)]


@folds("ConstantOfShape")
def _fold_constant_of_shape(
    c: Converter, node: onnx.NodeProto, a: dict[str, Any]
) -> list[np.ndarray]:
    value = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
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


# -- mappers ----------------------------------------------------------------------------------

Mapper = Callable[[Converter, onnx.NodeProto, dict[str, Any]], None]
MAPPERS: Registry[Mapper] = Registry()
maps = MAPPERS.maps


def _out(c: Converter, node: onnx.NodeProto, i: int = 0) -> int:
    return c.operand(node.output[i])


def _unary(code: OperationCode) -> Mapper:
    def mapper(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
        c.add(code, [c.operand(node.input[0])], [_out(c, node)])

    return mapper


for _name, _code in (
    ("Relu", OperationCode.RELU), ("Sigmoid", OperationCode.LOGISTIC), ("Tanh", OperationCode.TANH),
    ("Exp", OperationCode.EXP), ("Log", OperationCode.LOG), ("Sqrt", OperationCode.SQRT),
    ("Abs", OperationCode.ABS), ("Neg", OperationCode.NEG), ("Floor", OperationCode.FLOOR),
    ("Sin", OperationCode.SIN), ("Not", OperationCode.LOGICAL_NOT),
    ("HardSwish", OperationCode.HARD_SWISH),
):  # fmt: skip
    maps(_name)(_unary(_code))


def _binary(code: OperationCode, fused: bool) -> Mapper:
    def mapper(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
        kinds = {c.dtype(n).kind for n in node.input[:2]}
        if code == OperationCode.POW and kinds != {"f"}:
            raise _Unsupported("integer operands")
        if code == OperationCode.DIV and "f" not in kinds:
            raise _Unsupported("integer division (NNAPI rounds toward −∞, ONNX toward 0)")
        inputs = [c.operand(node.input[0]), c.operand(node.input[1])]
        if fused:
            inputs.append(c.i32(FuseCode.NONE))
        c.add(code, inputs, [_out(c, node)])

    return mapper


for _name, _code, _fused in (
    ("Add", OperationCode.ADD, True), ("Sub", OperationCode.SUB, True),
    ("Mul", OperationCode.MUL, True), ("Div", OperationCode.DIV, True),
    ("Pow", OperationCode.POW, False), ("PRelu", OperationCode.PRELU, False),
    ("Equal", OperationCode.EQUAL, False), ("Less", OperationCode.LESS, False),
    ("LessOrEqual", OperationCode.LESS_EQUAL, False), ("Greater", OperationCode.GREATER, False),
    ("GreaterOrEqual", OperationCode.GREATER_EQUAL, False), ("And", OperationCode.LOGICAL_AND, False),
    ("Or", OperationCode.LOGICAL_OR, False),
):  # fmt: skip
    maps(_name)(_binary(_code, _fused))


@maps("Max", "Min")
def _max_min(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    if len(node.input) != 2:
        raise _Unsupported(f"{len(node.input)} inputs (two map)")
    code = OperationCode.MAXIMUM if node.op_type == "Max" else OperationCode.MINIMUM
    c.add(code, [c.operand(node.input[0]), c.operand(node.input[1])], [_out(c, node)])


@maps("Identity", "Dropout")
def _identity(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    if node.op_type == "Dropout":
        if len(node.output) > 1 and node.output[1]:
            raise _Unsupported("a mask output")
        training = node.input[2] if len(node.input) > 2 else ""
        if training and (training not in c.constants or bool(c.constants[training].reshape(-1)[0])):
            raise _Unsupported("training mode (random)")
    c.alias(node.output[0], c.operand(node.input[0]))


def _clamp(c: Converter, x: int, out: int, dtype: np.dtype[Any], shape: tuple[int, ...],
           lo: float | None, hi: float | None) -> None:  # fmt: skip
    """``out = min(max(x, lo), hi)``, as one RELU-family operation where one fits."""
    fused: dict[tuple[float | None, float | None], OperationCode] = {
        (0.0, None): OperationCode.RELU,
        (0.0, 6.0): OperationCode.RELU6,
        (-1.0, 1.0): OperationCode.RELU1,
    }
    code = fused.get((lo, hi))
    if code is not None and dtype == np.float32:
        c.add(code, [x], [out])
        return
    if lo is not None:
        low = c.floats(np.array([lo])) if dtype == np.float32 else c.ints([int(lo)])
        target = out if hi is None else c.temporary(dtype, shape)
        c.add(OperationCode.MAXIMUM, [x, low], [target])
        x = target
    if hi is not None:
        high = c.floats(np.array([hi])) if dtype == np.float32 else c.ints([int(hi)])
        c.add(OperationCode.MINIMUM, [x, high], [out])
    elif lo is None:
        c.add(OperationCode.RESHAPE, [x, c.ints(shape or (1,))], [out])


@maps("Clip")
def _clip(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    bounds = [a.get("min"), a.get("max")]
    for i in (1, 2):
        if len(node.input) > i and node.input[i]:
            bounds[i - 1] = float(c.value(node.input[i], "clip bound").reshape(-1)[0])
    lo, hi = (None if b is None else float(b) for b in bounds)
    name = node.input[0]
    _clamp(c, c.operand(name), _out(c, node), c.dtype(name), c.shape(name), lo, hi)


@maps("LeakyRelu")
def _leaky_relu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    slope = c.floats(np.array([a.get("alpha", 0.01)]))
    c.add(OperationCode.PRELU, [c.operand(node.input[0]), slope], [_out(c, node)])


@maps("HardSigmoid")
def _hard_sigmoid(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """max(0, min(1, alpha·x + beta)): MUL, ADD, then the clamp."""
    name = node.input[0]
    shape, dtype = c.shape(name), c.dtype(name)
    scaled, shifted = c.temporary(dtype, shape), c.temporary(dtype, shape)
    none = c.i32(FuseCode.NONE)
    c.add(
        OperationCode.MUL,
        [c.operand(name), c.floats(np.array([a.get("alpha", 0.2)])), none],
        [scaled],
    )
    c.add(OperationCode.ADD, [scaled, c.floats(np.array([a.get("beta", 0.5)])), none], [shifted])
    _clamp(c, shifted, _out(c, node), dtype, shape, 0.0, 1.0)


def _spatial(
    c: Converter, node: onnx.NodeProto, a: dict[str, Any], kernel: Sequence[int]
) -> list[int]:
    """pad_left, pad_right, pad_top, pad_bottom, stride_w, stride_h for a 2-D NCHW window."""
    x = c.shape(node.input[0])
    if len(x) != 4 or len(kernel) != 2:
        raise _Unsupported("a window that is not 2-D")
    strides = list(a.get("strides", [1, 1]))
    dilations = list(a.get("dilations", [1, 1]))
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for size, k, s, d in zip(x[2:], kernel, strides, dilations):
            total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if auto == "SAME_UPPER" else (big, small))
        (top, bottom), (left, right) = pads
    elif auto == "VALID":
        top = bottom = left = right = 0
    else:
        top, left, bottom, right = list(a.get("pads", [0, 0, 0, 0]))
    return [
        c.i32(left),
        c.i32(right),
        c.i32(top),
        c.i32(bottom),
        c.i32(strides[1]),
        c.i32(strides[0]),
    ]


@maps("Conv")
def _conv(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """CONV_2D, DEPTHWISE_CONV_2D or GROUPED_CONV_2D, NCHW through the layout flag.
    A constant filter is laid out once; a computed one (a graph input, or a value
    computed in the graph) is TRANSPOSE'd at every execution, ungrouped only."""
    w_shape = c.shape(node.input[1])
    if len(w_shape) != 4 or c.dtype(node.input[0]) != np.float32:
        raise _Unsupported("a convolution that is not 2-D float32")
    out_channels, per_group, kh, kw = w_shape
    group = a.get("group", 1)
    in_channels = c.shape(node.input[0])[1]
    constant = node.input[1] in c.constants
    w = c.value(node.input[1], "filter").astype(np.float32) if constant else None
    has_bias = len(node.input) > 2 and node.input[2]
    bias = c.operand(node.input[2]) if has_bias else c.floats(np.zeros(out_channels, np.float32))
    window = _spatial(c, node, a, a.get("kernel_shape", [kh, kw]))
    dilations = list(a.get("dilations", [1, 1]))
    x, out, none, nchw = (
        c.operand(node.input[0]),
        _out(c, node),
        c.i32(FuseCode.NONE),
        c.boolean(True),
    )
    dilation = [c.i32(dilations[1]), c.i32(dilations[0])]
    if group == 1:
        filt = (  # OIHW → NNAPI's [out, h, w, in]
            c.floats(w.transpose(0, 2, 3, 1))
            if w is not None
            else _transposed(c, c.operand(node.input[1]), w_shape, [0, 2, 3, 1])
        )
        c.add(OperationCode.CONV_2D, [x, filt, bias, *window, none, nchw, *dilation], [out])
    elif w is None:
        raise _Unsupported("a computed filter of a grouped convolution")
    elif group == in_channels and per_group == 1:
        filt = c.floats(w.transpose(1, 2, 3, 0))  # [out, 1, h, w] → [1, h, w, out]
        multiplier = c.i32(out_channels // in_channels)
        inputs = [x, filt, bias, *window, multiplier, none, nchw, *dilation]
        c.add(OperationCode.DEPTHWISE_CONV_2D, inputs, [out])
    else:
        if dilations != [1, 1]:
            raise _Unsupported("a dilated grouped convolution")
        filt = c.floats(w.transpose(0, 2, 3, 1))
        inputs = [x, filt, bias, *window, c.i32(group), none, nchw]
        c.add(OperationCode.GROUPED_CONV_2D, inputs, [out])


def _transposed(c: Converter, source: int, shape: Sequence[int], perm: Sequence[int]) -> int:
    """A float32 ``source`` of ``shape``, TRANSPOSE'd by ``perm`` at every execution."""
    out = c.temporary(np.dtype(np.float32), tuple(shape[p] for p in perm))
    c.add(OperationCode.TRANSPOSE, [source, c.ints(perm)], [out])
    return out


def _scaled(c: Converter, source: int, shape: tuple[int, ...], factor: float) -> int:
    """A float32 ``source`` of ``shape`` times ``factor``, at every execution."""
    out = c.temporary(np.dtype(np.float32), shape)
    c.add(OperationCode.MUL, [source, c.floats(np.array([factor])), c.i32(FuseCode.NONE)], [out])
    return out


@maps("ConvTranspose")
def _conv_transpose(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """TRANSPOSE_CONV_2D with explicit padding, NCHW through the layout flag.  The
    output size is the inferred one; the padding that gives it is split as ONNX
    splits it (given pads first, else by auto_pad), and output_padding becomes a
    smaller (possibly negative) trailing pad."""
    x, w_shape = c.shape(node.input[0]), c.shape(node.input[1])
    if len(x) != 4 or len(w_shape) != 4 or c.dtype(node.input[0]) != np.float32:
        raise _Unsupported("a transposed convolution that is not 2-D float32")
    if a.get("group", 1) != 1 or list(a.get("dilations", [1, 1])) != [1, 1]:
        raise _Unsupported("groups or dilations")
    kernel = w_shape[2:]
    strides = list(a.get("strides", [1, 1]))
    out = c.shape(node.output[0])
    auto = _text(a.get("auto_pad"), "NOTSET")
    pads = list(a.get("pads", [0, 0, 0, 0]))
    begins = []
    for axis in range(2):
        total = (x[2 + axis] - 1) * strides[axis] + kernel[axis] - out[2 + axis]
        if auto == "NOTSET" and "output_shape" not in a:
            begin = pads[axis]
        elif auto == "SAME_UPPER":
            begin = total // 2
        else:  # SAME_LOWER, or an output_shape without auto_pad
            begin = total - total // 2
        if begin < 0:
            raise _Unsupported("a negative leading pad")
        begins.append((begin, total - begin))
    (top, bottom), (left, right) = begins
    if node.input[1] in c.constants:
        w = c.value(node.input[1], "filter").astype(np.float32)
        filt = c.floats(w.transpose(1, 2, 3, 0))  # [in, out, h, w] → NNAPI's [out, h, w, in]
    else:
        filt = _transposed(c, c.operand(node.input[1]), w_shape, [1, 2, 3, 0])
    has_bias = len(node.input) > 2 and node.input[2]
    bias = c.operand(node.input[2]) if has_bias else c.floats(np.zeros(w_shape[1], np.float32))
    scalars = [c.i32(v) for v in (left, right, top, bottom, strides[1], strides[0])]
    inputs = [c.operand(node.input[0]), filt, bias, *scalars, c.i32(FuseCode.NONE), c.boolean(True)]
    c.add(OperationCode.TRANSPOSE_CONV_2D, inputs, [_out(c, node)])


def _pool(code: OperationCode) -> Mapper:
    def mapper(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
        if a.get("ceil_mode", 0) or a.get("dilations", [1, 1]) != [1, 1]:
            raise _Unsupported("ceil_mode or dilations")
        if a.get("count_include_pad", 0) and any(a.get("pads", [0])):
            raise _Unsupported("count_include_pad with padding")
        if len(node.output) > 1 and node.output[1]:
            raise _Unsupported("the indices output")
        kernel = list(a["kernel_shape"])
        window = _spatial(c, node, a, kernel)
        inputs = [c.operand(node.input[0]), *window, c.i32(kernel[1]), c.i32(kernel[0])]
        c.add(code, [*inputs, c.i32(FuseCode.NONE), c.boolean(True)], [_out(c, node)])

    return mapper


maps("MaxPool")(_pool(OperationCode.MAX_POOL_2D))
maps("AveragePool")(_pool(OperationCode.AVERAGE_POOL_2D))


@maps("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    axes = c.ints(list(range(2, len(c.shape(node.input[0])))))
    x, out = c.operand(node.input[0]), _out(c, node)
    if node.op_type == "GlobalAveragePool":
        c.add(OperationCode.MEAN, [x, axes, c.i32(1)], [out])
    else:
        c.add(OperationCode.REDUCE_MAX, [x, axes, c.boolean(True)], [out])


@maps("BatchNormalization")
def _batch_norm(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Inference form: x·s + b with s = scale/√(var+ε), b = B − mean·s, per channel (axis 1)."""
    if len(node.output) > 1 and any(node.output[1:]):
        raise _Unsupported("training outputs")
    scale, bias, mean, var = (c.value(n, "statistic").astype(np.float64) for n in node.input[1:5])
    s = scale / np.sqrt(var + a.get("epsilon", 1e-5))
    b = bias - mean * s
    rank = len(c.shape(node.input[0]))
    shape = (len(s),) + (1,) * (rank - 2)
    scaled = c.temporary(np.dtype(np.float32), c.shape(node.input[0]))
    none = c.i32(FuseCode.NONE)
    c.add(OperationCode.MUL, [c.operand(node.input[0]), c.floats(s.reshape(shape)), none], [scaled])
    c.add(OperationCode.ADD, [scaled, c.floats(b.reshape(shape)), none], [_out(c, node)])


def _fully_connected(c: Converter, source: int, x_shape: tuple[int, ...], weights: int,
                     bias: int, units: int, out: int, out_shape: tuple[int, ...]) -> None:  # fmt: skip
    """x [..., K] times ``weights`` [N, K]ᵀ plus ``bias`` (operands), reshaped around
    FULLY_CONNECTED when needed."""
    depth = x_shape[-1]
    rows = int(np.prod(x_shape[:-1]))
    if len(x_shape) != 2:
        flat = c.temporary(np.dtype(np.float32), (rows, depth))
        c.add(OperationCode.RESHAPE, [source, c.ints((rows, depth))], [flat])
        source = flat
    inputs = [source, weights, bias, c.i32(FuseCode.NONE)]
    if len(out_shape) == 2:
        c.add(OperationCode.FULLY_CONNECTED, inputs, [out])
        return
    result = c.temporary(np.dtype(np.float32), (rows, units))
    c.add(OperationCode.FULLY_CONNECTED, inputs, [result])
    c.add(OperationCode.RESHAPE, [result, c.ints(out_shape or (1,))], [out])


def _weights_rows(c: Converter, name: str, transposed: bool, scale: float = 1.0) -> tuple[int, int]:
    """A 2-D right-hand side (times ``scale``) as FULLY_CONNECTED's [units, depth]
    operand, and its units: a constant is laid out once, a computed one TRANSPOSE'd
    at every run (``transposed``: it is already [units, depth])."""
    if name in c.constants:
        w = c.value(name, "right-hand side").astype(np.float32) * np.float32(scale)
        if w.ndim != 2:
            raise _Unsupported("a right-hand side that is not one matrix")
        rows = w if transposed else w.T
        return c.floats(rows), rows.shape[0]
    shape = c.shape(name)
    if len(shape) != 2 or c.dtype(name) != np.float32:
        raise _Unsupported("a computed right-hand side that is not one float32 matrix")
    source = c.operand(name)
    if scale != 1.0:
        source = _scaled(c, source, shape, scale)
    if transposed:
        return source, shape[0]
    return _transposed(c, source, shape, [1, 0]), shape[1]


@maps("MatMul")
def _matmul(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    if c.dtype(node.input[0]) != np.float32 or len(c.shape(node.input[0])) < 2:
        raise _Unsupported("a left-hand side that is not a float32 matrix")
    weights, units = _weights_rows(c, node.input[1], transposed=False)
    bias = c.floats(np.zeros(units, np.float32))
    x, out_shape = node.input[0], c.shape(node.output[0])
    _fully_connected(c, c.operand(x), c.shape(x), weights, bias, units, _out(c, node), out_shape)


@maps("Gemm")
def _gemm(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """alpha·A'·B' + beta·C: FULLY_CONNECTED, its bias when C is one constant row,
    else an ADD of C after it; a transposed A is TRANSPOSE'd first."""
    x, x_shape = c.operand(node.input[0]), c.shape(node.input[0])
    if len(x_shape) != 2 or c.dtype(node.input[0]) != np.float32:
        raise _Unsupported("an A that is not one float32 matrix")
    if a.get("transA", 0):
        x, x_shape = _transposed(c, x, x_shape, [1, 0]), x_shape[::-1]
    transposed = bool(a.get("transB", 0))
    weights, units = _weights_rows(c, node.input[1], transposed, a.get("alpha", 1.0))
    bias_row = np.zeros(units, np.float32)
    added = None  # an operand added after the product
    beta = np.float32(a.get("beta", 1.0))
    if len(node.input) > 2 and node.input[2]:
        name = node.input[2]
        if name in c.constants:
            given = c.value(name, "C").astype(np.float32) * beta
            if given.size in (1, units) and given.ndim <= 1 or given.shape == (1, units):
                bias_row = np.broadcast_to(given.reshape(-1), (units,)).copy()
            else:
                added = c.floats(given)
        elif beta == 1:
            added = c.operand(name)
        else:
            added = _scaled(c, c.operand(name), c.shape(name), float(beta))
    out_shape = c.shape(node.output[0])
    target = _out(c, node) if added is None else c.temporary(np.dtype(np.float32), out_shape)
    _fully_connected(c, x, x_shape, weights, c.floats(bias_row), units, target, out_shape)
    if added is not None:
        c.add(OperationCode.ADD, [target, added, c.i32(FuseCode.NONE)], [_out(c, node)])


@maps("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Shapes are static: the target is the inferred output shape."""
    shape = c.shape(node.output[0]) or (1,)
    if len(shape) > 4 or len(c.shape(node.input[0])) > 4:
        raise _Unsupported("a tensor of rank over 4")
    if c.dtype(node.input[0]) not in (np.float32, np.float16):
        raise _Unsupported(
            f"{c.dtype(node.input[0])} tensors (NNAPI's RESHAPE takes floats and quantized)"
        )
    c.add(OperationCode.RESHAPE, [c.operand(node.input[0]), c.ints(shape)], [_out(c, node)])


@maps("Transpose")
def _transpose(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    rank = len(c.shape(node.input[0]))
    perm = list(a.get("perm", range(rank - 1, -1, -1)))
    c.add(OperationCode.TRANSPOSE, [c.operand(node.input[0]), c.ints(perm)], [_out(c, node)])


@maps("Concat")
def _concat(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    rank = len(c.shape(node.output[0]))
    inputs = [c.operand(n) for n in node.input if n]
    c.add(OperationCode.CONCATENATION, [*inputs, c.i32(a["axis"] % rank)], [_out(c, node)])


@maps("Softmax", "LogSoftmax")
def _softmax(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    rank = len(c.shape(node.input[0]))
    axis = a.get("axis", -1 if c.opset >= 13 else 1) % rank
    if c.opset < 13 and axis != rank - 1:
        raise _Unsupported("a pre-13 softmax over more than the last axis")
    code = OperationCode.SOFTMAX if node.op_type == "Softmax" else OperationCode.LOG_SOFTMAX
    c.add(code, [c.operand(node.input[0]), c.f32(1.0), c.i32(axis)], [_out(c, node)])


_REDUCTIONS = {
    "ReduceMean": OperationCode.MEAN, "ReduceMax": OperationCode.REDUCE_MAX,
    "ReduceMin": OperationCode.REDUCE_MIN, "ReduceSum": OperationCode.REDUCE_SUM,
    "ReduceProd": OperationCode.REDUCE_PROD,
}  # fmt: skip


@maps(*_REDUCTIONS)
def _reduce(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    _reduction(c, node, a, _REDUCTIONS[node.op_type], c.operand(node.input[0]), _out(c, node))


def _reduction(c: Converter, node: onnx.NodeProto, a: dict[str, Any], code: OperationCode,
               source: int, out: int) -> None:  # fmt: skip
    """``code`` over the node's axes (attribute or input) of ``source``, into ``out``."""
    rank = len(c.shape(node.input[0]))
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = c.value(node.input[1], "axes").tolist()
    if axes is None or len(axes) == 0:
        if a.get("noop_with_empty_axes", 0):
            raise _Unsupported("noop_with_empty_axes")
        axes = list(range(rank))
    axes = sorted({int(x) % rank for x in axes})
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
        raise _Unsupported(f"{c.dtype(node.input[0])} tensors")
    before, code, after = _COMPOSED_REDUCTIONS[node.op_type]
    source = c.operand(node.input[0])
    if before is not None:
        each = c.temporary(np.dtype(np.float32), c.shape(node.input[0]))
        extra = [source, c.i32(FuseCode.NONE)] if before == OperationCode.MUL else []
        c.add(before, [source, *extra], [each])
        source = each
    out = _out(c, node)
    if after is None:
        _reduction(c, node, a, code, source, out)
        return
    total = c.temporary(np.dtype(np.float32), c.shape(node.output[0]))
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
        raise _Unsupported(f"{c.dtype(name)} tensors")
    rank = len(shape)
    axes = list(range(a.get("axis", -1) % rank, rank))
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    none = c.i32(FuseCode.NONE)
    x = c.operand(name)
    centred = x
    if node.op_type == "LayerNormalization":
        has_mean = len(node.output) > 1 and node.output[1]
        mean = _out(c, node, 1) if has_mean else c.temporary(f32, kept)
        c.add(OperationCode.MEAN, [x, c.ints(axes), c.i32(1)], [mean])
        centred = c.temporary(f32, shape)
        c.add(OperationCode.SUB, [x, mean, none], [centred])
    squares = c.temporary(f32, shape)
    c.add(OperationCode.MUL, [centred, centred, none], [squares])
    variance = c.temporary(f32, kept)
    c.add(OperationCode.MEAN, [squares, c.ints(axes), c.i32(1)], [variance])
    shifted = c.temporary(f32, kept)
    epsilon = c.floats(np.array([a.get("epsilon", 1e-5)], np.float32))
    c.add(OperationCode.ADD, [variance, epsilon, none], [shifted])
    wants_inverse = node.op_type == "LayerNormalization" and len(node.output) > 2 and node.output[2]
    inverse = _out(c, node, 2) if wants_inverse else c.temporary(f32, kept)
    c.add(OperationCode.RSQRT, [shifted], [inverse])
    normalized = c.temporary(f32, shape)
    c.add(OperationCode.MUL, [centred, inverse, none], [normalized])
    has_bias = node.op_type == "LayerNormalization" and len(node.input) > 2 and node.input[2]
    scaled = c.temporary(f32, shape) if has_bias else _out(c, node)
    c.add(OperationCode.MUL, [normalized, c.operand(node.input[1]), none], [scaled])
    if has_bias:
        c.add(OperationCode.ADD, [scaled, c.operand(node.input[2]), none], [_out(c, node)])


@maps("Pad")
def _pad(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    mode = a.get("mode", b"constant")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
        raise _Unsupported(f"mode {mode!r}")
    pads = a.get("pads")
    if pads is None:
        pads = c.value(node.input[1], "pads").tolist()
    if len(node.input) > 3 and node.input[3]:
        raise _Unsupported("axes")
    rank = len(c.shape(node.input[0]))
    paddings = np.array([[pads[i], pads[i + rank]] for i in range(rank)], np.int32)
    if (paddings < 0).any():
        raise _Unsupported("negative pads")
    value = a.get("value", 0.0)
    if len(node.input) > 2 and node.input[2]:
        value = float(c.value(node.input[2], "pad value").reshape(-1)[0])
    inputs = [
        c.operand(node.input[0]),
        c.constant(OperandCode.TENSOR_INT32, paddings, paddings.shape),
    ]
    if value == 0:
        c.add(OperationCode.PAD, inputs, [_out(c, node)])
        return
    fill = c.f32(value) if c.dtype(node.input[0]) == np.float32 else c.i32(int(value))
    c.add(OperationCode.PAD_V2, [*inputs, fill], [_out(c, node)])


@maps("Gather")
def _gather(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    rank = len(c.shape(node.input[0]))
    axis = c.i32(a.get("axis", 0) % rank)
    indices = node.input[1]
    size = c.shape(node.input[0])[a.get("axis", 0) % rank]
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
    c.add(OperationCode.GATHER, [c.operand(node.input[0]), axis, where], [_out(c, node)])


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
        axis %= len(shape)
        if step <= 0:
            raise _Unsupported("a negative step")
        size = shape[axis]
        s = max(0, min(size, s + size if s < 0 else s))
        e = max(0, min(size, e + size if e < 0 else e))
        begin[axis], end[axis], stride[axis] = s, e, step
    inputs = [c.operand(node.input[0]), c.ints(begin), c.ints(end), c.ints(stride)]
    c.add(OperationCode.STRIDED_SLICE, [*inputs, c.i32(0), c.i32(0), c.i32(0)], [_out(c, node)])


@maps("Cast", "CastLike")
def _cast(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """CastLike's second input only names the type, which the output carries."""
    c.add(OperationCode.CAST, [c.operand(node.input[0])], [_out(c, node)])


def _like(c: Converter, name: str, value: float) -> int:
    """A one-element constant of ``name``'s type (broadcast by the operation)."""
    operand = c.model.add_operand(_operand_type(c.dtype(name), (1,)))
    c.model.set_operand_value(operand, np.full(1, value, _operand_dtype(c.dtype(name))))
    return operand


def _float_input(c: Converter, node: onnx.NodeProto) -> tuple[str, tuple[int, ...]]:
    name = node.input[0]
    if c.dtype(name) != np.float32:
        raise _Unsupported(f"{c.dtype(name)} operands")
    return name, c.shape(name)


@maps("Expand")
def _expand(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    name = node.input[0]
    _broadcast(c, name, c.shape(node.output[0]), _out(c, node))


def _broadcast(c: Converter, name: str, shape: tuple[int, ...], out: int | None = None) -> int:
    """``name`` broadcast to ``shape`` (into ``out``, or a new operand): x + (-0.0) of
    that shape (which keeps every value, -0.0 and NaN included), x + 0 for integers,
    x OR false for booleans."""
    dtype = c.dtype(name)
    target = c.temporary(dtype, shape) if out is None else out
    if dtype == np.bool_:
        falses = c.constant(OperandCode.TENSOR_BOOL8, np.zeros(shape, np.bool_), shape)
        c.add(OperationCode.LOGICAL_OR, [c.operand(name), falses], [target])
        return target
    zeros = c.model.add_operand(_operand_type(dtype, shape))
    filler = -0.0 if np.issubdtype(dtype, np.floating) else 0
    c.model.set_operand_value(zeros, np.full(shape, filler, _operand_dtype(dtype)))
    c.add(OperationCode.ADD, [c.operand(name), zeros, c.i32(FuseCode.NONE)], [target])
    return target


@maps("Reciprocal")
def _reciprocal(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    name, _ = _float_input(c, node)
    c.add(
        OperationCode.DIV,
        [_like(c, name, 1.0), c.operand(name), c.i32(FuseCode.NONE)],
        [_out(c, node)],
    )


@maps("Cos")
def _cos(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """cos x = sin(x + π/2)."""
    name, shape = _float_input(c, node)
    shifted = c.temporary(np.dtype(np.float32), shape)
    c.add(
        OperationCode.ADD,
        [c.operand(name), _like(c, name, np.pi / 2), c.i32(FuseCode.NONE)],
        [shifted],
    )
    c.add(OperationCode.SIN, [shifted], [_out(c, node)])


@maps("Ceil")
def _ceil(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """ceil x = −floor(−x)."""
    name, shape = _float_input(c, node)
    negated, floored = (
        c.temporary(np.dtype(np.float32), shape),
        c.temporary(np.dtype(np.float32), shape),
    )
    c.add(OperationCode.NEG, [c.operand(name)], [negated])
    c.add(OperationCode.FLOOR, [negated], [floored])
    c.add(OperationCode.NEG, [floored], [_out(c, node)])


@maps("Softplus", "Softsign")
def _soft(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """softplus x = log(1 + eˣ); softsign x = x / (1 + |x|)."""
    name, shape = _float_input(c, node)
    f32 = np.dtype(np.float32)
    inner, plus_one = c.temporary(f32, shape), c.temporary(f32, shape)
    first = OperationCode.EXP if node.op_type == "Softplus" else OperationCode.ABS
    c.add(first, [c.operand(name)], [inner])
    c.add(OperationCode.ADD, [inner, _like(c, name, 1.0), c.i32(FuseCode.NONE)], [plus_one])
    if node.op_type == "Softplus":
        c.add(OperationCode.LOG, [plus_one], [_out(c, node)])
    else:
        c.add(OperationCode.DIV, [c.operand(name), plus_one, c.i32(FuseCode.NONE)], [_out(c, node)])


@maps("Elu")
def _elu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    name, _ = _float_input(c, node)
    c.add(OperationCode.ELU, [c.operand(name), c.f32(a.get("alpha", 1.0))], [_out(c, node)])


@maps("Sum", "Mean")
def _sum(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """A chain of ADDs (then a MUL by 1/n for Mean)."""
    names = [n for n in node.input if n]
    out = c.shape(node.output[0])
    dtype = c.dtype(names[0])
    if node.op_type == "Mean" and dtype != np.float32:
        raise _Unsupported(f"{dtype} operands")
    total = c.operand(names[0])
    last = len(names) - 1
    for i, name in enumerate(names[1:], start=1):
        final = i == last and node.op_type == "Sum"
        target = _out(c, node) if final else c.temporary(dtype, out)
        c.add(OperationCode.ADD, [total, c.operand(name), c.i32(FuseCode.NONE)], [target])
        total = target
    if node.op_type == "Mean":
        c.add(
            OperationCode.MUL,
            [total, _like(c, names[0], 1.0 / len(names)), c.i32(FuseCode.NONE)],
            [_out(c, node)],
        )
    elif last == 0:
        c.add(
            OperationCode.ADD, [total, _like(c, names[0], 0), c.i32(FuseCode.NONE)], [_out(c, node)]
        )


@maps("Tile")
def _tile(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    repeats = c.value(node.input[1], "repeats").tolist()
    c.add(OperationCode.TILE, [c.operand(node.input[0]), c.ints(repeats)], [_out(c, node)])


@maps("Split")
def _split(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """One SLICE per output (NNAPI's SPLIT cuts equal parts only, and takes no bool)."""
    shape = c.shape(node.input[0])
    axis = a.get("axis", 0) % len(shape)
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


@maps("ArgMax", "ArgMin")
def _arg(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    if a.get("select_last_index", 0):
        raise _Unsupported("select_last_index")
    shape = c.shape(node.input[0])
    axis = a.get("axis", 0) % len(shape)
    code = OperationCode.ARGMAX if node.op_type == "ArgMax" else OperationCode.ARGMIN
    if not a.get("keepdims", 1):
        c.add(code, [c.operand(node.input[0]), c.i32(axis)], [_out(c, node)])
        return
    reduced = c.temporary(
        np.dtype(np.int32), tuple(d for i, d in enumerate(shape) if i != axis) or (1,)
    )
    c.add(code, [c.operand(node.input[0]), c.i32(axis)], [reduced])
    c.add(OperationCode.EXPAND_DIMS, [reduced, c.i32(axis)], [_out(c, node)])


@maps("DepthToSpace", "SpaceToDepth")
def _depth_space(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    mode = a.get("mode", b"DCR")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "DCR":
        raise _Unsupported(f"mode {mode!r}")
    code = (
        OperationCode.DEPTH_TO_SPACE
        if node.op_type == "DepthToSpace"
        else OperationCode.SPACE_TO_DEPTH
    )
    inputs = [c.operand(node.input[0]), c.i32(a["blocksize"]), c.boolean(True)]
    c.add(code, inputs, [_out(c, node)])


@maps("LRN")
def _lrn(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """ONNX divides alpha by the window size; NNAPI's radius is half the window."""
    size = a["size"]
    if size % 2 == 0:
        raise _Unsupported("an even window")
    alpha = a.get("alpha", 1e-4) / size
    inputs = [c.operand(node.input[0]), c.i32(size // 2), c.f32(a.get("bias", 1.0)), c.f32(alpha)]
    c.add(
        OperationCode.LOCAL_RESPONSE_NORMALIZATION,
        [*inputs, c.f32(a.get("beta", 0.75)), c.i32(1)],
        [_out(c, node)],
    )


@maps("Where")
def _where(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """SELECT, whose three inputs have one shape: the others are broadcast to it."""
    shape = c.shape(node.output[0])
    inputs = [c.operand(n) if c.shape(n) == shape else _broadcast(c, n, shape) for n in node.input]
    c.add(OperationCode.SELECT, inputs, [_out(c, node)])


@maps("Trilu")
def _trilu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """The upper (or lower) triangle from diagonal k, zeros elsewhere: a SELECT with a
    constant mask of the input's shape."""
    name = node.input[0]
    shape, dtype = c.shape(name), c.dtype(name)
    if len(shape) < 2 or dtype not in (np.float32, np.int32, np.int64):
        raise _Unsupported(f"a rank-{len(shape)} {dtype} input")
    k = 0
    if len(node.input) > 1 and node.input[1]:
        k = int(c.value(node.input[1], "diagonal k").reshape(-1)[0])
    rows, columns = np.indices(shape[-2:])
    keep = columns - rows >= k if a.get("upper", 1) else columns - rows <= k
    mask = np.broadcast_to(keep, shape)
    zeros = c.model.add_operand(_operand_type(dtype, shape))
    c.model.set_operand_value(zeros, np.zeros(shape, _operand_dtype(dtype)))
    selector = c.constant(OperandCode.TENSOR_BOOL8, np.ascontiguousarray(mask), shape)
    c.add(OperationCode.SELECT, [selector, c.operand(name), zeros], [_out(c, node)])


def _outer_names(graph: onnx.GraphProto) -> set[str]:
    """The names a subgraph reads from the scopes around it."""
    produced = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    used: set[str] = set()
    for node in graph.node:
        used.update(n for n in node.input if n)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                used |= _outer_names(attribute.g)
        produced.update(node.output)
    used.update(o.name for o in graph.output)
    return used - produced


def _branch(c: Converter, graph: onnx.GraphProto, captured: Sequence[str]) -> int:
    """A MODEL operand for an If branch: its outer-scope constants become its own
    initializers, the other values it reads become its inputs (``captured``, in order)."""
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(c.dtype(n)), c.shape(n))
        for n in captured
    ]
    constants = [
        numpy_helper.from_array(np.asarray(c.constants[n]), n)
        for n in sorted(_outer_names(graph))
        if n in c.constants
    ]
    sub = helper.make_graph(
        list(graph.node), graph.name or "branch", inputs, list(graph.output),
        [*graph.initializer, *constants], value_info=list(graph.value_info),
    )  # fmt: skip
    model = helper.make_model(sub, opset_imports=list(c.onnx.opset_import))
    model.ir_version = c.onnx.ir_version
    operand = c.model.add_operand(OperandType(OperandCode.MODEL))
    c.model.set_operand_value_from_model(operand, Converter(model).convert())
    return operand


@maps("If")
def _if(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """NNAPI's IF takes its branches as models with explicit inputs: the values
    the ONNX branches read from around them."""
    then_branch, else_branch = a["then_branch"], a["else_branch"]
    outer = _outer_names(then_branch) | _outer_names(else_branch)
    captured = sorted(n for n in outer if n not in c.constants)
    branches = [_branch(c, then_branch, captured), _branch(c, else_branch, captured)]
    inputs = [_condition(c, node.input[0]), *branches, *(c.operand(n) for n in captured)]
    c.add(OperationCode.IF, inputs, [c.operand(o) for o in node.output])


def _condition(c: Converter, name: str) -> int:
    """An If condition as NNAPI wants it, TENSOR_BOOL8 of shape [1]."""
    shape = c.shape(name)
    if int(np.prod(shape)) != 1:
        raise _Unsupported("a condition of more than one element")
    if len(shape) <= 1:
        return c.operand(name)
    return c.reshape_boolean(c.operand(name), shape, (1,))


# -- the model's face -------------------------------------------------------------------------


def describe(c: Converter, names: Sequence[str]) -> list[TensorInfo]:
    return [TensorInfo(n, c.shape(n), c.dtype(n)) for n in names]


def convert(
    model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None
) -> tuple[Model, list[TensorInfo], list[TensorInfo]]:
    """The graph as a finished model, with its inputs (initializers excluded) and outputs."""
    c = Converter(model, input_shapes)
    finished = c.convert()
    inputs = [i.name for i in c.graph.input if i.name not in c.constants]
    return finished, describe(c, inputs), describe(c, [o.name for o in c.graph.output])


#: ONNX Resize (mode, coordinate transformation[, nearest mode]) → NNAPI's
#: (align_corners, half_pixel_centers); anything else is refused, not approximated.
_RESIZE_LINEAR = {
    "asymmetric": (False, False),
    "align_corners": (True, False),
    "half_pixel": (False, True),
}
_RESIZE_NEAREST = {("asymmetric", "floor"): (False, False)}


def _text(value: Any, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


@maps("Resize")
def _resize(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """2-D NCHW resizes through NNAPI's layout flag; the output size is the inferred one."""
    x, out = c.shape(node.input[0]), c.shape(node.output[0])
    if len(x) != 4 or x[:2] != out[:2]:
        raise _Unsupported("a resize of other than the two spatial axes of a 4-D tensor")
    mode = _text(a.get("mode"), "nearest")
    transform = _text(a.get("coordinate_transformation_mode"), "half_pixel")
    if (
        a.get("antialias", 0)
        or a.get("exclude_outside", 0)
        or a.get("keep_aspect_ratio_policy", b"stretch") not in (b"stretch", "stretch")
    ):
        raise _Unsupported("antialias, exclude_outside or an aspect-ratio policy")
    if mode == "linear":
        flags = _RESIZE_LINEAR.get(transform)
        code = OperationCode.RESIZE_BILINEAR
    elif mode == "nearest":
        flags = _RESIZE_NEAREST.get((transform, _text(a.get("nearest_mode"), "round_prefer_floor")))
        code = OperationCode.RESIZE_NEAREST_NEIGHBOR
    else:
        flags = None
    if flags is None:
        raise _Unsupported(f"mode {mode} with {transform} coordinates")
    if c.dtype(node.input[0]) != np.float32:
        raise _Unsupported(f"{c.dtype(node.input[0])} images")
    scales = node.input[2] if len(node.input) > 2 else ""
    if scales and c.value(scales, "scales").size:
        # ONNX maps coordinates with the scale itself; NNAPI with the size ratio.
        factors = c.value(scales, "scales").astype(np.float64)[2:]
        if any(abs(size * f - round(size * f)) > 1e-6 for size, f in zip(x[2:], factors)):
            raise _Unsupported("scales that do not give whole output sizes")
    align, half = flags
    inputs = [c.operand(node.input[0]), c.i32(out[3]), c.i32(out[2]), c.boolean(True)]
    c.add(code, [*inputs, c.boolean(align), c.boolean(half)], [_out(c, node)])
