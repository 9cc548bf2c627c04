"""ONNX graphs → NNAPI operations.

ONNX convolutions and pools are NCHW; NNAPI's have a layout flag, so they
run on NCHW tensors as they are (filters are transposed once, at load).
Shapes are static: ONNX's shape inference gives every intermediate its
shape, and nodes whose inputs are all known at load (shape arithmetic,
``Constant``) are evaluated then, so only real computation reaches the model; an
``If`` whose condition is so evaluated becomes the branch it takes.
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


#: Rounds of folding and shape inference (each round can only add constants, or
#: inline If branches: an If on shapes the branch of another gives takes a round).
_FOLD_ROUNDS = 16  # Silero VAD takes 7


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


def _axis(value: int, rank: int) -> int:
    """An axis (attribute or constant input) as 0 … rank − 1, negatives counted from
    the end; one outside [-rank, rank) is refused, not wrapped onto another axis."""
    if not -rank <= int(value) < rank:
        raise _Unsupported(f"axis {int(value)} of a rank-{rank} tensor")
    return int(value) % rank


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
        #: sequences, maps and optionals: refused by name
        self.containers: set[str] = set()
        for info in (*self.graph.input, *self.graph.value_info, *self.graph.output):
            self.types[info.name] = _type_of(info)
            if info.type.WhichOneof("value") not in ("tensor_type", None):
                self.containers.add(info.name)
        self._operands: dict[str, int] = {}
        #: the operands holding named constants' values (an output must be computed)
        self._constant_operands: set[int] = set()

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
        if name in self.containers:
            raise _Unsupported(f"{name!r} is a sequence, map or optional, not a tensor")
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
            self._constant_operands.add(operand)
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
            inlined = self._inline_decided_ifs()  # before folding: a branch's Constants fold
            self._fold_constants()
            if len(self.constants) == before and not inlined:
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
        constant = operand in self._constant_operands
        if not constant and operand not in inputs and operand not in taken:
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
            if node.op_type in ("Shape", "Size", "EyeLike"):
                known = inputs and (
                    inputs[0] in self.constants or self.types.get(inputs[0], (None, None))[1]
                )
                if not known:
                    continue
            elif not all(n in self.constants for n in inputs):
                continue
            try:
                results = fold(self, node, _attributes(node))
            except (_Unsupported, ArithmeticError, IndexError, TypeError, ValueError):
                continue  # numpy refusing the node's values: left to its mapper, or _check
            for name, value in zip(node.output, results):
                self.constants[name] = np.asarray(value)

    def _inline_decided_ifs(self) -> bool:
        """Put the taken branch of each If whose condition folded (one on shapes, say
        "squeeze if this axis is 1") in its place: its branches may give different
        shapes, which an NNAPI IF cannot.  Branch names that another part of the
        graph uses are renamed, so the branch's values do not capture them."""
        given = list(self.graph.node)
        decided = [self._taken_branch(node) for node in given]
        if not any(decided):
            return False
        nodes: list[onnx.NodeProto] = []
        for i, (node, branch) in enumerate(zip(given, decided)):
            if branch is None:
                nodes.append(node)
                continue
            used = _names([*nodes, *given[i + 1 :]]) | set(self.constants)
            used |= {v.name for v in (*self.graph.input, *self.graph.output)}
            renames: dict[str, str] = {}
            for name in sorted(_local_names(branch) & used):
                renames[name] = f"{name}/{node.output[0]}"
                while renames[name] in used:
                    renames[name] += "'"
            branch = _renamed(branch, renames)
            for t in branch.initializer:
                self.constants[t.name] = numpy_helper.to_array(t)
            outputs = [helper.make_node("Identity", [b.name], [o])
                       for b, o in zip(branch.output, node.output)]  # fmt: skip
            nodes += [*branch.node, *outputs]
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        return True

    def _taken_branch(self, node: onnx.NodeProto) -> onnx.GraphProto | None:
        """The branch an If takes when its condition is one value known at load (a
        malformed If is left to _check)."""
        if node.op_type != "If" or not node.input or node.input[0] not in self.constants:
            return None
        condition, branches = self.constants[node.input[0]], _attributes(node)
        if condition.size != 1 or not {"then_branch", "else_branch"} <= branches.keys():
            return None
        return branches["then_branch" if condition.item() else "else_branch"]


def _local_names(graph: onnx.GraphProto) -> set[str]:
    """The values a graph defines itself (not those of its subgraphs)."""
    names = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    return names | {o for n in graph.node for o in n.output if o}


def _names(nodes: Sequence[onnx.NodeProto]) -> set[str]:
    """Every value name the nodes and their subgraphs define or read."""
    names: set[str] = set()
    for node in nodes:
        names.update((*node.input, *node.output))
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                names |= _local_names(attribute.g) | {o.name for o in attribute.g.output}
                names |= _names(attribute.g.node)
    return names - {""}


def _renamed(graph: onnx.GraphProto, renames: Mapping[str, str]) -> onnx.GraphProto:
    """A copy of ``graph`` with values renamed, in its subgraphs too unless one
    defines a value of that name itself."""
    if not renames:
        return graph
    graph = onnx.GraphProto.FromString(graph.SerializeToString())
    for value in (*graph.input, *graph.output, *graph.initializer, *graph.value_info):
        value.name = renames.get(value.name, value.name)
    for node in graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                inner = {k: v for k, v in renames.items() if k not in _local_names(attribute.g)}
                attribute.g.CopyFrom(_renamed(attribute.g, inner))
    return graph


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
    for info in (*model.graph.value_info, *model.graph.output):  # -1 (as Paddle writes): unknown
        for d in info.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value < 0:
                d.Clear()
    return model


def _type_of(info: onnx.ValueInfoProto) -> tuple[np.dtype[Any] | None, tuple[int, ...] | None]:
    t = info.type.tensor_type
    dtype = _DTYPES.get(t.elem_type)
    if not t.HasField("shape"):
        return dtype, None
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:  # unknown (or an inference slip)
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
    if code is not None:
        return OperandType(code, dims)
    byte = _BYTES.get(np.dtype(dtype))
    if byte is None:
        raise _Unsupported(f"{dtype} tensors")
    return OperandType(byte, dims, 1.0, 0)


#: int8 and uint8 as quantized operands of scale 1 and zero point 0, whose values
#: are the integers: only for the operations that give those integers exactly
#: (comparisons, picks among the values), not for arithmetic (NNAPI's saturates,
#: ONNX's wraps around).
_BYTES = {
    np.dtype(np.int8): OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
    np.dtype(np.uint8): OperandCode.TENSOR_QUANT8_ASYMM,
}
_BYTE_OPERATORS = frozenset(
    ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Max", "Min", "MaxPool",
     "Clip", "Identity", "Where")
)  # fmt: skip


def _operand_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype an operand of ``dtype`` holds (NNAPI has no 64-bit types)."""
    return {np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.float64): np.dtype(np.float32)}.get(
        np.dtype(dtype), np.dtype(dtype)
    )


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


#: Inputs that may be empty constants: Resize's roi and scales, a reduction's axes
#: (none: every axis), CastLike's example of the type.
_PLACEHOLDERS = {
    "Resize": (1, 2), "CastLike": (1,),
    **dict.fromkeys(("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                     "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                     "ReduceLogSumExp"), (1,)),
}  # fmt: skip


def _check(c: Converter, node: onnx.NodeProto) -> str | None:
    if node.domain not in ("", "ai.onnx"):
        return f"{node.domain}.{node.op_type}"
    if node.op_type not in MAPPERS:
        return node.op_type
    broken = _malformed(node, c.opset)
    if broken:
        label = node.name or ", ".join(node.output)
        raise BadDataError(f"not a valid ONNX model: {node.op_type} {label!r} has {broken}")
    for position, name in enumerate((*node.input, *node.output)):
        if not name or position in _PLACEHOLDERS.get(node.op_type, ()) and name in c.constants:
            continue  # may be an empty constant, read at load (or not at all)
        if node.op_type == "If" and position >= len(node.input):
            continue  # typed from the converted branches
        try:
            if c.dtype(name) in _BYTES and node.op_type not in _BYTE_OPERATORS:
                return f"{node.op_type} ({c.dtype(name)} tensors)"
            c.operand_type(name)
            if 0 in c.shape(name):
                return f"{node.op_type} (empty tensors)"
        except _Unsupported as exc:
            return f"{node.op_type} ({exc})"
    return None


def _malformed(node: onnx.NodeProto, opset: int) -> str | None:
    """How ``node`` breaks its operator's schema at ``opset``, if it does: inputs or
    outputs it cannot have, a required input or attribute left out, an attribute of
    another type.  The mappers take the schema as given."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset)
    except onnx.defs.SchemaError:  # not defined at this opset: the mapper decides
        return None
    for kind, names, low, high in (
        ("inputs", node.input, schema.min_input, schema.max_input),
        ("outputs", node.output, schema.min_output, schema.max_output),
    ):
        if not low <= len(names) <= high:
            return f"{len(names)} {kind} (its schema takes {low} to {high})"
    single = onnx.defs.OpSchema.FormalParameterOption.Single
    for formal, name in zip(schema.inputs, node.input):
        if not name and formal.option == single:
            return f"no input {formal.name!r} (a required input)"
    for attribute in node.attribute:
        wanted = schema.attributes.get(attribute.name)
        if wanted is None:
            continue
        kind = str(wanted.type).rsplit(".", 1)[-1]  # "AttrType.INT": AttributeProto's name
        if onnx.AttributeProto.AttributeType.Name(attribute.type) != kind:
            return f"attribute {attribute.name!r} of another type than {kind}"
    given = {attribute.name for attribute in node.attribute}
    missing = sorted(n for n, a in schema.attributes.items() if a.required and n not in given)
    return f"no attribute {missing[0]!r} (a required one)" if missing else None


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
    ("Not", np.logical_not),
):  # fmt: skip
    folds(_name)(_fold_with(_function))


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
    dtype = _DTYPES.get(a["dtype"]) if "dtype" in a else c.dtype(node.input[0])
    if dtype is None or len(shape) != 2:
        raise _Unsupported("a type nnburst cannot hold")
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
    for axis in sorted(_axis(x, rank) for x in axes):
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
        raise _Unsupported("not an empty reduction")
    axes = tuple(range(x.ndim)) if not axes else tuple(_axis(i, x.ndim) for i in axes)
    shape = np.sum(x, axis=axes, keepdims=bool(a.get("keepdims", 1))).shape
    value = _EMPTY_REDUCTIONS[node.op_type]
    if x.dtype.kind == "i" and np.isinf(value):
        value = np.iinfo(x.dtype).min if value < 0 else np.iinfo(x.dtype).max
    return [np.full(shape, value, x.dtype)]


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
    """A chain of MAXIMUMs (MINIMUMs); one input is the input itself, max(x, x)."""
    names = [n for n in node.input if n]
    if len(names) == 1:
        names = names * 2
    code = OperationCode.MAXIMUM if node.op_type == "Max" else OperationCode.MINIMUM
    _chain(c, code, names, c.dtype(node.output[0]), _out(c, node))


def _chain(c: Converter, code: OperationCode, names: Sequence[str], dtype: np.dtype[Any],
           out: int | None = None) -> int:  # fmt: skip
    """``code`` over ``names`` left to right, each step of the shape its operands
    broadcast to, the last into ``out`` (one name: its operand as it is)."""
    total, shape = c.operand(names[0]), c.shape(names[0])
    for i, name in enumerate(names[1:], start=2):
        shape = tuple(np.broadcast_shapes(shape, c.shape(name)))
        target = out if i == len(names) else None
        total = _apply(c, code, [total, c.operand(name)], dtype, shape, target)
    return total


@maps("Identity", "Dropout")
def _identity(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    if node.op_type == "Dropout":
        training = node.input[2] if len(node.input) > 2 else ""
        if training and (training not in c.constants or bool(c.constants[training].reshape(-1)[0])):
            raise _Unsupported("training mode (random)")
        if len(node.output) > 1 and node.output[1]:  # inference keeps every element
            c.constants[node.output[1]] = np.ones(c.shape(node.input[0]), np.bool_)
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

    def bound(value: float | None) -> int | None:
        if value is None:
            return None
        if dtype.kind in "iu":  # within the operand's range (int64 runs as int32)
            info = np.iinfo(_operand_dtype(dtype))
            value = min(max(value, info.min), info.max)
        return _full(c, dtype, (1,), value)

    _bounded(c, x, out, dtype, shape, bound(lo), bound(hi))


def _bounded(c: Converter, x: int, out: int, dtype: np.dtype[Any], shape: tuple[int, ...],
             low: int | None, high: int | None) -> None:  # fmt: skip
    """``out = min(max(x, low), high)`` with bound operands (which broadcast): a
    MAXIMUM, then a MINIMUM, for the bounds given (a copy for none)."""
    if low is not None:
        target = out if high is None else c.temporary(dtype, shape)
        c.add(OperationCode.MAXIMUM, [x, low], [target])
        x = target
    if high is not None:
        c.add(OperationCode.MINIMUM, [x, high], [out])
    elif low is None:
        c.add(OperationCode.RESHAPE, [x, c.ints(shape or (1,))], [out])


@maps("Clip")
def _clip(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Constant bounds fold into _clamp; computed ones (one-element tensors) are
    _bounded by the bound operands."""
    name = node.input[0]
    given = [node.input[i] if len(node.input) > i else "" for i in (1, 2)]
    if any(n and n not in c.constants for n in given):
        shape, dtype = c.shape(name), c.dtype(name)
        for bound in given:
            if bound and (c.dtype(bound) != dtype or int(np.prod(c.shape(bound))) != 1):
                raise _Unsupported("a computed bound that is not one element of the input's type")
        low, high = (c.operand(bound) if bound else None for bound in given)
        _bounded(c, c.operand(name), _out(c, node), dtype, shape, low, high)
        return
    bounds = [a.get("min"), a.get("max")]
    for i, bound in enumerate(given):
        if bound:
            bounds[i] = float(c.value(bound, "clip bound").reshape(-1)[0])
    lo, hi = (None if b is None else float(b) for b in bounds)
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
    if len(w_shape) == 3 and c.dtype(node.input[0]) == np.float32:
        _conv_1d(c, node, a)
        return
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


def _conv_1d(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """A 1-D convolution is a 2-D one over a height of 1: its input, filter and
    output get that axis (a reshape each), the attributes their height's values.
    Another 1-D convolution of the same input reuses its reshape (an operand has
    one writer)."""
    tall = []
    for name in (*node.input[:2], node.output[0]):
        shape = c.shape(name)
        tall_name, tall_shape = f"{name}/2d", (*shape[:2], 1, *shape[2:])
        tall.append(tall_name)
        if tall_name in c.types:
            continue
        c.types[tall_name] = (c.dtype(name), tall_shape)
        if name in c.constants:
            c.constants[tall_name] = c.constants[name].reshape(tall_shape)
        elif name != node.output[0]:
            _reshaped(c, c.operand(name), c.dtype(name), shape, tall_shape, tall_name)
    x, w, y = tall
    flat = {"kernel_shape": 1, "strides": 1, "dilations": 1}
    attributes = {k: [flat[k], *v] if k in flat else v for k, v in a.items()}
    if "pads" in a:
        attributes["pads"] = [0, a["pads"][0], 0, a["pads"][1]]
    _conv(c, helper.make_node("Conv", [x, w, *node.input[2:]], [y]), attributes)
    _reshaped(c, c.operand(y), c.dtype(y), c.shape(y), c.shape(node.output[0]), node.output[0])


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
    if len(node.output) > 1 and any(node.output[1:]) or a.get("training_mode", 0):
        raise _Unsupported("training mode")
    shape = c.shape(node.input[0])
    if len(shape) < 2 or any(c.shape(n) != shape[1:2] for n in node.input[1:5]):
        raise _Unsupported("statistics that are not one per channel (axis 1)")
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
    c.add(OperationCode.ADD, [scaled, c.floats(b.reshape(shape)), none], [_out(c, node)])


def _batch_norm_computed(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Statistics computed in the graph (or graph inputs): s = scale·rsqrt(var + ε),
    then (x − mean)·s + B, the [C] vectors reshaped to [C, 1, …] to broadcast on axis 1."""
    name = node.input[0]
    shape, f32 = c.shape(name), np.dtype(np.float32)
    if c.dtype(name) != np.float32 or any(c.dtype(n) != np.float32 for n in node.input[1:5]):
        raise _Unsupported("statistics that are not float32")
    channels = shape[1]
    column = (channels,) + (1,) * (len(shape) - 2)
    scale, bias, mean, var = (c.operand(n) for n in node.input[1:5])
    epsilon = c.floats(np.array([a.get("epsilon", 1e-5)]))
    shifted = _apply(c, OperationCode.ADD, [var, epsilon], f32, (channels,))
    inverse = _apply(c, OperationCode.RSQRT, [shifted], f32, (channels,))
    factor = _apply(c, OperationCode.MUL, [scale, inverse], f32, (channels,))
    columns = [
        _apply(c, OperationCode.RESHAPE, [v, c.ints(column)], f32, column)
        for v in (mean, factor, bias)
    ]
    centred = _apply(c, OperationCode.SUB, [c.operand(name), columns[0]], f32, shape)
    scaled = _apply(c, OperationCode.MUL, [centred, columns[1]], f32, shape)
    _apply(c, OperationCode.ADD, [scaled, columns[2]], f32, shape, _out(c, node))


def _fully_connected(c: Converter, source: int, x_shape: tuple[int, ...], weights: int,
                     out: int, out_shape: tuple[int, ...], bias: int | None = None) -> None:  # fmt: skip
    """x [..., K] times ``weights`` [N, K]ᵀ plus ``bias`` (operands; zeros if None),
    reshaped around FULLY_CONNECTED when needed."""
    depth, units = x_shape[-1], out_shape[-1]
    rows = int(np.prod(x_shape[:-1]))
    if bias is None:
        bias = c.floats(np.zeros(units, np.float32))
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
    if c.dtype(node.input[0]) != np.float32 or c.dtype(node.input[1]) != np.float32:
        raise _Unsupported("operands that are not float32")
    a_shape, b_shape = c.shape(node.input[0]), c.shape(node.input[1])
    if not a_shape or not b_shape or a_shape[-1] != b_shape[-2 if len(b_shape) > 1 else 0]:
        raise _Unsupported(f"shapes {list(a_shape)} and {list(b_shape)} (no matrix product)")
    if len(a_shape) < 2 or len(b_shape) != 2:
        _batched_matmul(c, node)
        return
    weights, _ = _weights_rows(c, node.input[1], transposed=False)
    x, out_shape = node.input[0], c.shape(node.output[0])
    _fully_connected(c, c.operand(x), c.shape(x), weights, _out(c, node), out_shape)


def _batched_matmul(c: Converter, node: onnx.NodeProto) -> None:
    """Vectors and stacks of matrices (broadcast over the leading axes), one
    FULLY_CONNECTED per pair of matrices (NNAPI 1.3 has no BATCH_MATMUL): each side
    flattened to rows, each matrix a SLICE of them (the left side unsliced when it is
    one matrix), the right one TRANSPOSE'd to [N, K] (laid out at load when it is a
    constant); the products CONCATENATED and reshaped to the output."""
    f32 = np.dtype(np.float32)
    a_shape, b_shape = c.shape(node.input[0]), c.shape(node.input[1])
    if len(a_shape) > 4 or len(b_shape) > 4:
        raise _Unsupported("a tensor of rank over 4")
    a_mats = (1, *a_shape) if len(a_shape) == 1 else a_shape
    b_mats = (*b_shape, 1) if len(b_shape) == 1 else b_shape
    (m, k), n = a_mats[-2:], b_mats[-1]
    batch = np.broadcast_shapes(a_mats[:-2], b_mats[:-2])
    pairs = list(np.ndindex(*batch))
    if len(pairs) > 64:
        raise _Unsupported(f"{len(pairs)} matrix products")
    a_count, b_count = int(np.prod(a_mats[:-2])), int(np.prod(b_mats[:-2]))
    a_ids = np.broadcast_to(np.arange(a_count).reshape(a_mats[:-2]), batch)
    b_ids = np.broadcast_to(np.arange(b_count).reshape(b_mats[:-2]), batch)

    def rows(name: str, mats: tuple[int, ...]) -> int:
        flat = (int(np.prod(mats[:-1])), mats[-1])
        return _apply(c, OperationCode.RESHAPE, [c.operand(name), c.ints(flat)], f32, flat)

    def matrix(source: int, i: int, size: tuple[int, int]) -> int:
        begin = c.ints([i * size[0], 0])
        return _apply(c, OperationCode.SLICE, [source, begin, c.ints(size)], f32, size)

    a_rows = rows(node.input[0], a_mats)
    if node.input[1] in c.constants:  # each matrix as FULLY_CONNECTED's [N, K], once
        b = c.value(node.input[1], "right-hand side").reshape(-1, k, n)
        weights = [c.floats(b[j].T) for j in range(b_count)]
    else:
        b_rows = rows(node.input[1], b_mats)
        weights = [
            _transposed(c, matrix(b_rows, j, (k, n)), (k, n), [1, 0]) for j in range(b_count)
        ]
    zeros = c.floats(np.zeros(n, np.float32))
    products = []
    for index in pairs:
        i, j = int(a_ids[index]), int(b_ids[index])
        left = a_rows if a_count == 1 else matrix(a_rows, i, (m, k))
        inputs = [left, weights[j], zeros, c.i32(FuseCode.NONE)]
        products.append(_apply(c, OperationCode.FULLY_CONNECTED, inputs, f32, (m, n)))
    stacked = products[0]
    if len(products) > 1:
        stacked = _apply(
            c, OperationCode.CONCATENATION, [*products, c.i32(0)], f32, (m * len(products), n)
        )
    out_shape = c.shape(node.output[0]) or (1,)
    c.add(OperationCode.RESHAPE, [stacked, c.ints(out_shape)], [_out(c, node)])


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
    bias = None  # zeros
    added = None  # an operand added after the product
    beta = np.float32(a.get("beta", 1.0))
    if len(node.input) > 2 and node.input[2]:
        name = node.input[2]
        if name in c.constants:
            given = c.value(name, "C").astype(np.float32) * beta
            if given.size in (1, units) and given.ndim <= 1 or given.shape == (1, units):
                bias = c.floats(np.broadcast_to(given.reshape(-1), (units,)))
            else:
                added = c.floats(given)
        elif beta == 1:
            added = c.operand(name)
        else:
            added = _scaled(c, c.operand(name), c.shape(name), float(beta))
    out_shape = c.shape(node.output[0])
    target = _out(c, node) if added is None else c.temporary(np.dtype(np.float32), out_shape)
    _fully_connected(c, x, x_shape, weights, target, out_shape, bias)
    if added is not None:
        c.add(OperationCode.ADD, [target, added, c.i32(FuseCode.NONE)], [_out(c, node)])


@maps("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Shapes are static: the target is the inferred output shape."""
    name = node.input[0]
    _reshaped(
        c, c.operand(name), c.dtype(name), c.shape(name), c.shape(node.output[0]), node.output[0]
    )


def _reshaped(c: Converter, source: int, dtype: np.dtype[Any], shape: tuple[int, ...],
              target: tuple[int, ...], name: str | None = None) -> int:  # fmt: skip
    """``source`` with the ``target`` shape, into tensor ``name`` (a new operand if
    None): the same operand where NNAPI's shapes agree (a scalar is [1]), RESHAPE for
    floats, an ADD broadcasting zeros for integers when only leading ones are added."""
    target, trimmed = target or (1,), shape or (1,)
    if len(shape) > 4 or len(target) > 4:
        raise _Unsupported("a tensor of rank over 4")
    if trimmed == target:
        if name is not None:
            c.alias(name, source)
        return source
    out = c.operand(name) if name is not None else c.temporary(dtype, target)
    if dtype in (np.float32, np.float16):
        c.add(OperationCode.RESHAPE, [source, c.ints(target)], [out])
    elif (
        dtype.kind in "iu"
        and target[len(target) - len(trimmed) :] == trimmed
        and all(d == 1 for d in target[: len(target) - len(trimmed)])
    ):
        _apply(c, OperationCode.ADD, [source, _full(c, dtype, target, 0)], dtype, target, out)
    else:
        raise _Unsupported(f"{dtype} tensors (NNAPI's RESHAPE takes floats and quantized)")
    return out


@maps("Transpose")
def _transpose(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    rank = len(c.shape(node.input[0]))
    perm = list(a.get("perm", range(rank - 1, -1, -1)))
    c.add(OperationCode.TRANSPOSE, [c.operand(node.input[0]), c.ints(perm)], [_out(c, node)])


@maps("Concat")
def _concat(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    rank = len(c.shape(node.output[0]))
    inputs = [c.operand(n) for n in node.input if n]
    c.add(OperationCode.CONCATENATION, [*inputs, c.i32(_axis(a["axis"], rank))], [_out(c, node)])


@maps("Softmax", "LogSoftmax")
def _softmax(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    rank = len(c.shape(node.input[0]))
    axis = _axis(a.get("axis", -1 if c.opset >= 13 else 1), rank)
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
    axes = sorted({_axis(x, rank) for x in axes})
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
    source, f32 = c.operand(node.input[0]), np.dtype(np.float32)
    if before is not None:
        inputs = [source, source] if before == OperationCode.MUL else [source]
        source = _apply(c, before, inputs, f32, c.shape(node.input[0]))
    out = _out(c, node)
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
        raise _Unsupported(f"{c.dtype(name)} tensors")
    rank = len(shape)
    axes = list(range(_axis(a.get("axis", -1), rank), rank))
    layer = node.op_type == "LayerNormalization"
    mean = _out(c, node, 1) if layer and len(node.output) > 1 and node.output[1] else None
    inverse = _out(c, node, 2) if layer and len(node.output) > 2 and node.output[2] else None
    normalized = _standardized(
        c, c.operand(name), shape, axes, a.get("epsilon", 1e-5), layer, mean, inverse
    )
    has_bias = layer and len(node.input) > 2 and node.input[2]
    scaled = _apply(
        c, OperationCode.MUL, [normalized, c.operand(node.input[1])], f32, shape,
        None if has_bias else _out(c, node),
    )  # fmt: skip
    if has_bias:
        _apply(c, OperationCode.ADD, [scaled, c.operand(node.input[2])], f32, shape, _out(c, node))


@maps("Pad")
def _pad(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """PAD or PAD_V2 for a constant fill; a computed fill is SELECT'd in around the
    zero-padded input; edge, reflect and wrap are a GATHER per padded axis with the
    source indices numpy's pad gives."""
    mode = _text(a.get("mode"), "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise _Unsupported(f"mode {mode!r}")
    pads = a.get("pads")
    if pads is None:
        pads = c.value(node.input[1], "pads").tolist()
    shape = c.shape(node.input[0])
    rank = len(shape)
    if len(node.input) > 3 and node.input[3]:  # pads for these axes only
        axes = [_axis(x, rank) for x in c.value(node.input[3], "axes").tolist()]
        full = [0] * (2 * rank)
        for i, axis in enumerate(axes):
            full[axis], full[axis + rank] = pads[i], pads[i + len(axes)]
        pads = full
    paddings = np.array([[pads[i], pads[i + rank]] for i in range(rank)], np.int32)
    if (paddings < 0).any():
        raise _Unsupported("negative pads")
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
        padded = _apply(c, OperationCode.PAD, inputs, dtype, out_shape)
        inside = np.zeros(out_shape, np.bool_)
        inside[tuple(slice(p[0], p[0] + n) for p, n in zip(paddings, shape))] = True
        mask = c.constant(OperandCode.TENSOR_BOOL8, inside, out_shape)
        fill = _broadcast(c, fill_name, out_shape)
        c.add(OperationCode.SELECT, [mask, padded, fill], [_out(c, node)])
        return
    if value == 0:
        c.add(OperationCode.PAD, inputs, [_out(c, node)])
        return
    fill = c.f32(value) if c.dtype(node.input[0]) == np.float32 else c.i32(int(value))
    c.add(OperationCode.PAD_V2, [*inputs, fill], [_out(c, node)])


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
        raise _Unsupported("reflect pads as long as the axis")
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
        target = _out(c, node) if axis == padded[-1] else None
        x = _apply(
            c,
            OperationCode.GATHER,
            [x, c.i32(axis), c.ints(indices.tolist())],
            dtype,
            tuple(shape),
            target,
        )


@maps("Gather")
def _gather(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    rank = len(c.shape(node.input[0]))
    along = _axis(a.get("axis", 0), rank)
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
        c.add(OperationCode.GATHER, [data, axis, where], [_out(c, node)])
        return
    # A scalar index drops the axis; NNAPI's (a [1] tensor) keeps it, of length 1.
    kept = (*out[:along], 1, *out[along:])
    dtype = c.dtype(node.output[0])
    gathered = _apply(c, OperationCode.GATHER, [data, axis, where], dtype, kept)
    _reshaped(c, gathered, dtype, kept, out, node.output[0])


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
        axis = _axis(axis, len(shape))
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
    return _full(c, c.dtype(name), (1,), value)


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
    if dtype == np.bool_:
        falses = _full(c, dtype, shape, False)
        return _apply(c, OperationCode.LOGICAL_OR, [c.operand(name), falses], dtype, shape, out)
    zeros = _full(c, dtype, shape, -0.0 if np.issubdtype(dtype, np.floating) else 0)
    return _apply(c, OperationCode.ADD, [c.operand(name), zeros], dtype, shape, out)


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
    if node.op_type == "Mean":
        total = _chain(c, OperationCode.ADD, names, dtype)
        factor = _like(c, names[0], 1.0 / len(names))
        _apply(c, OperationCode.MUL, [total, factor], dtype, out, _out(c, node))
    elif len(names) > 1:
        _chain(c, OperationCode.ADD, names, dtype, _out(c, node))
    else:  # one input: + 0, a copy (the output must be computed)
        zero = _like(c, names[0], 0)
        _apply(c, OperationCode.ADD, [c.operand(names[0]), zero], dtype, out, _out(c, node))


@maps("Tile")
def _tile(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    repeats = c.value(node.input[1], "repeats").tolist()
    c.add(OperationCode.TILE, [c.operand(node.input[0]), c.ints(repeats)], [_out(c, node)])


@maps("Split")
def _split(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """One SLICE per output (NNAPI's SPLIT cuts equal parts only, and takes no bool)."""
    shape = c.shape(node.input[0])
    axis = _axis(a.get("axis", 0), len(shape))
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
    """ARGMAX/ARGMIN give the first extreme; select_last_index runs them on the axis
    reversed (a GATHER) and maps each index i back to n − 1 − i."""
    shape = c.shape(node.input[0])
    axis = _axis(a.get("axis", 0), len(shape))
    code = OperationCode.ARGMAX if node.op_type == "ArgMax" else OperationCode.ARGMIN
    x = c.operand(node.input[0])
    int32 = np.dtype(np.int32)
    reduced_shape = tuple(d for i, d in enumerate(shape) if i != axis) or (1,)
    keep, last = a.get("keepdims", 1), a.get("select_last_index", 0)
    if last:
        x = _reversed(c, x, axis, c.dtype(node.input[0]), shape)
    found = _out(c, node) if not keep and not last else c.temporary(int32, reduced_shape)
    c.add(code, [x, c.i32(axis)], [found])
    if last:
        target = _out(c, node) if not keep else None
        found = _unreversed(c, found, shape[axis], reduced_shape, target)
    if keep:
        c.add(OperationCode.EXPAND_DIMS, [found, c.i32(axis)], [_out(c, node)])


def _reversed(c: Converter, x: int, axis: int, dtype: np.dtype[Any], shape: tuple[int, ...]) -> int:
    """``x`` with ``axis`` reversed (a GATHER): an operation that picks the first of
    equal values then picks the last; _unreversed maps its indices back."""
    backwards = c.ints(np.arange(shape[axis])[::-1].tolist())
    return _apply(c, OperationCode.GATHER, [x, c.i32(axis), backwards], dtype, shape)


def _unreversed(c: Converter, found: int, n: int, shape: tuple[int, ...],
                out: int | None = None) -> int:  # fmt: skip
    """Indices ``found`` along an axis of ``n`` reversed, as indices along the axis: n − 1 − i."""
    return _apply(c, OperationCode.SUB, [c.ints([n - 1]), found], np.dtype(np.int32), shape, out)


@maps("DepthToSpace", "SpaceToDepth")
def _depth_space(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """NCHW through the layout flag.  CRD order (channel, then block offset) is DCR
    after a GATHER of the channels into block-offset-major order."""
    mode = _text(a.get("mode"), "DCR")
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
        x = _apply(
            c,
            OperationCode.GATHER,
            [x, c.i32(1), c.ints(order.tolist())],
            c.dtype(node.input[0]),
            shape,
        )
    elif mode != "DCR":
        raise _Unsupported(f"mode {mode!r}")
    inputs = [x, c.i32(a["blocksize"]), c.boolean(True)]
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
    zeros = _full(c, dtype, shape, 0)
    selector = c.constant(OperandCode.TENSOR_BOOL8, np.ascontiguousarray(mask), shape)
    c.add(OperationCode.SELECT, [selector, c.operand(name), zeros], [_out(c, node)])


def _apply(c: Converter, code: OperationCode, inputs: Sequence[int], dtype: np.dtype[Any],
           shape: tuple[int, ...], out: int | None = None) -> int:  # fmt: skip
    """``code`` on ``inputs`` into ``out`` (a new operand of ``dtype`` and ``shape`` if None);
    ADD, SUB, MUL and DIV get their NONE activation."""
    target = c.temporary(dtype, shape) if out is None else out
    fused = code in (OperationCode.ADD, OperationCode.SUB, OperationCode.MUL, OperationCode.DIV)
    c.add(code, [*inputs, c.i32(FuseCode.NONE)] if fused else list(inputs), [target])
    return target


def _full(c: Converter, dtype: np.dtype[Any], shape: tuple[int, ...], value: float) -> int:
    """A constant of ``shape`` filled with ``value`` (SELECT wants whole shapes)."""
    operand = c.model.add_operand(_operand_type(dtype, shape))
    c.model.set_operand_value(operand, np.full(shape or (1,), value, _operand_dtype(dtype)))
    return operand


@maps("Xor")
def _xor(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """a xor b = a ≠ b, for booleans."""
    inputs = [c.operand(node.input[0]), c.operand(node.input[1])]
    c.add(OperationCode.NOT_EQUAL, inputs, [_out(c, node)])


@maps("IsNaN")
def _is_nan(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """NaN is the one value not equal to itself."""
    x = c.operand(node.input[0])
    c.add(OperationCode.NOT_EQUAL, [x, x], [_out(c, node)])


@maps("IsInf")
def _is_inf(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """EQUAL to +inf and/or -inf, as detect_positive and detect_negative ask."""
    name = node.input[0]
    if c.dtype(name).kind != "f":
        raise _Unsupported(f"{c.dtype(name)} tensors")
    shape, x = c.shape(name), c.operand(name)
    wanted = [
        v
        for v, on in ((np.inf, a.get("detect_positive", 1)), (-np.inf, a.get("detect_negative", 1)))
        if on
    ]
    if not wanted:
        raise _Unsupported("neither sign detected")
    hits = []
    for value in wanted:
        target = _out(c, node) if len(wanted) == 1 else None
        hits.append(
            _apply(
                c,
                OperationCode.EQUAL,
                [x, _like(c, name, value)],
                np.dtype(np.bool_),
                shape,
                target,
            )
        )
    if len(hits) == 2:
        c.add(OperationCode.LOGICAL_OR, hits, [_out(c, node)])


@maps("Celu")
def _celu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """celu x = α·elu(x/α)."""
    name, shape = _float_input(c, node)
    alpha, f32 = a.get("alpha", 1.0), np.dtype(np.float32)
    scaled = _apply(c, OperationCode.DIV, [c.operand(name), _like(c, name, alpha)], f32, shape)
    elu = _apply(c, OperationCode.ELU, [scaled, c.f32(1.0)], f32, shape)
    _apply(c, OperationCode.MUL, [elu, _like(c, name, alpha)], f32, shape, _out(c, node))


@maps("Selu")
def _selu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """selu x = γ·elu(x; α)."""
    name, shape = _float_input(c, node)
    f32 = np.dtype(np.float32)
    alpha = a.get("alpha", 1.67326319217681884765625)
    gamma = a.get("gamma", 1.05070102214813232421875)
    elu = _apply(c, OperationCode.ELU, [c.operand(name), c.f32(alpha)], f32, shape)
    _apply(c, OperationCode.MUL, [elu, _like(c, name, gamma)], f32, shape, _out(c, node))


@maps("ThresholdedRelu")
def _thresholded_relu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """x where x > α, else 0: a SELECT."""
    name, shape = _float_input(c, node)
    x = c.operand(name)
    above = _apply(
        c,
        OperationCode.GREATER,
        [x, _like(c, name, a.get("alpha", 1.0))],
        np.dtype(np.bool_),
        shape,
    )
    zeros = _full(c, np.dtype(np.float32), shape, 0.0)
    c.add(OperationCode.SELECT, [above, x, zeros], [_out(c, node)])


@maps("Shrink")
def _shrink(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """x − bias above λ, x + bias below −λ, 0 between: two SELECTs."""
    name, shape = _float_input(c, node)
    f32, boolean = np.dtype(np.float32), np.dtype(np.bool_)
    lambd, bias = a.get("lambd", 0.5), a.get("bias", 0.0)
    x = c.operand(name)
    above = _apply(c, OperationCode.GREATER, [x, _like(c, name, lambd)], boolean, shape)
    below = _apply(c, OperationCode.LESS, [x, _like(c, name, -lambd)], boolean, shape)
    lowered = _apply(c, OperationCode.SUB, [x, _like(c, name, bias)], f32, shape)
    raised = _apply(c, OperationCode.ADD, [x, _like(c, name, bias)], f32, shape)
    low = _apply(c, OperationCode.SELECT, [below, raised, _full(c, f32, shape, 0.0)], f32, shape)
    c.add(OperationCode.SELECT, [above, lowered, low], [_out(c, node)])


@maps("Sign")
def _sign(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """1 above 0, −1 below, else x·0 (0 stays 0, NaN stays NaN): two SELECTs."""
    name, shape = _float_input(c, node)
    f32, boolean = np.dtype(np.float32), np.dtype(np.bool_)
    x = c.operand(name)
    positive = _apply(c, OperationCode.GREATER, [x, _like(c, name, 0.0)], boolean, shape)
    negative = _apply(c, OperationCode.LESS, [x, _like(c, name, 0.0)], boolean, shape)
    rest = _apply(c, OperationCode.MUL, [x, _like(c, name, 0.0)], f32, shape)
    low = _apply(c, OperationCode.SELECT, [negative, _full(c, f32, shape, -1.0), rest], f32, shape)
    c.add(OperationCode.SELECT, [positive, _full(c, f32, shape, 1.0), low], [_out(c, node)])


@maps("Cosh", "Sinh")
def _cosh_sinh(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """(eˣ ± e⁻ˣ)/2.  Near 0 sinh's difference cancels, so there (|x| < 1/64) it is
    x + x³/6, whose next term is below float32's precision."""
    name, shape = _float_input(c, node)
    f32, x = np.dtype(np.float32), c.operand(name)
    grown = _apply(c, OperationCode.EXP, [x], f32, shape)
    negated = _apply(c, OperationCode.NEG, [x], f32, shape)
    shrunk = _apply(c, OperationCode.EXP, [negated], f32, shape)
    if node.op_type == "Cosh":
        total = _apply(c, OperationCode.ADD, [grown, shrunk], f32, shape)
        _apply(c, OperationCode.MUL, [total, _like(c, name, 0.5)], f32, shape, _out(c, node))
        return
    difference = _apply(c, OperationCode.SUB, [grown, shrunk], f32, shape)
    far = _apply(c, OperationCode.MUL, [difference, _like(c, name, 0.5)], f32, shape)
    square = _apply(c, OperationCode.MUL, [x, x], f32, shape)
    sixth = _apply(c, OperationCode.MUL, [square, _like(c, name, 1 / 6)], f32, shape)
    cube = _apply(c, OperationCode.MUL, [sixth, x], f32, shape)
    near = _apply(c, OperationCode.ADD, [x, cube], f32, shape)
    size = _apply(c, OperationCode.ABS, [x], f32, shape)
    small = _apply(c, OperationCode.LESS, [size, _like(c, name, 1 / 64)], np.dtype(np.bool_), shape)
    c.add(OperationCode.SELECT, [small, near, far], [_out(c, node)])


@maps("Tan")
def _tan(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """tan x = sin x / sin(x + π/2)."""
    name, shape = _float_input(c, node)
    f32, x = np.dtype(np.float32), c.operand(name)
    sine = _apply(c, OperationCode.SIN, [x], f32, shape)
    shifted = _apply(c, OperationCode.ADD, [x, _like(c, name, np.pi / 2)], f32, shape)
    cosine = _apply(c, OperationCode.SIN, [shifted], f32, shape)
    _apply(c, OperationCode.DIV, [sine, cosine], f32, shape, _out(c, node))


@maps("Round")
def _round(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Half to even: f = floor x and d = x − f (both exact); f + 1 where d > ½, or
    d = ½ and f is odd (floor(f/2) ≠ f/2), else f."""
    name, shape = _float_input(c, node)
    f32, boolean, x = np.dtype(np.float32), np.dtype(np.bool_), c.operand(name)
    floor = _apply(c, OperationCode.FLOOR, [x], f32, shape)
    fraction = _apply(c, OperationCode.SUB, [x, floor], f32, shape)
    half = _like(c, name, 0.5)
    above = _apply(c, OperationCode.GREATER, [fraction, half], boolean, shape)
    tie = _apply(c, OperationCode.EQUAL, [fraction, half], boolean, shape)
    halved = _apply(c, OperationCode.MUL, [floor, half], f32, shape)
    halved_floor = _apply(c, OperationCode.FLOOR, [halved], f32, shape)
    odd = _apply(c, OperationCode.NOT_EQUAL, [halved, halved_floor], boolean, shape)
    odd_tie = _apply(c, OperationCode.LOGICAL_AND, [tie, odd], boolean, shape)
    up = _apply(c, OperationCode.LOGICAL_OR, [above, odd_tie], boolean, shape)
    ceiling = _apply(c, OperationCode.ADD, [floor, _like(c, name, 1.0)], f32, shape)
    c.add(OperationCode.SELECT, [up, ceiling, floor], [_out(c, node)])


@maps("Swish")
def _swish(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """x·σ(αx)."""
    name, shape = _float_input(c, node)
    f32, x = np.dtype(np.float32), c.operand(name)
    alpha = a.get("alpha", 1.0)
    scaled = (
        _apply(c, OperationCode.MUL, [x, _like(c, name, alpha)], f32, shape) if alpha != 1 else x
    )
    gate = _apply(c, OperationCode.LOGISTIC, [scaled], f32, shape)
    _apply(c, OperationCode.MUL, [x, gate], f32, shape, _out(c, node))


@maps("Mish")
def _mish(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """x·tanh(log(1 + eˣ))."""
    name, shape = _float_input(c, node)
    f32, x = np.dtype(np.float32), c.operand(name)
    grown = _apply(c, OperationCode.EXP, [x], f32, shape)
    plus_one = _apply(c, OperationCode.ADD, [grown, _like(c, name, 1.0)], f32, shape)
    softplus = _apply(c, OperationCode.LOG, [plus_one], f32, shape)
    gate = _apply(c, OperationCode.TANH, [softplus], f32, shape)
    _apply(c, OperationCode.MUL, [x, gate], f32, shape, _out(c, node))


@maps("Gelu")
def _gelu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """The tanh form, ½x(1 + tanh(√(2/π)(x + 0.044715x³))); the exact form needs
    erf, which NNAPI lacks."""
    if _text(a.get("approximate"), "none") != "tanh":
        raise _Unsupported("the erf form (NNAPI has no erf)")
    name, shape = _float_input(c, node)
    f32, x = np.dtype(np.float32), c.operand(name)
    square = _apply(c, OperationCode.MUL, [x, x], f32, shape)
    cube = _apply(c, OperationCode.MUL, [square, x], f32, shape)
    term = _apply(c, OperationCode.MUL, [cube, _like(c, name, 0.044715)], f32, shape)
    inner = _apply(c, OperationCode.ADD, [x, term], f32, shape)
    scaled = _apply(c, OperationCode.MUL, [inner, _like(c, name, np.sqrt(2 / np.pi))], f32, shape)
    gate = _apply(c, OperationCode.TANH, [scaled], f32, shape)
    plus_one = _apply(c, OperationCode.ADD, [gate, _like(c, name, 1.0)], f32, shape)
    half = _apply(c, OperationCode.MUL, [x, _like(c, name, 0.5)], f32, shape)
    _apply(c, OperationCode.MUL, [half, plus_one], f32, shape, _out(c, node))


@maps("Mod")
def _mod(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Integers only (a float remainder through a quotient would not be exact).
    NNAPI's integer DIV floors, so r = x − y·⌊x/y⌋ has the divisor's sign (fmod=0);
    fmod=1 wants the dividend's: where r ≠ 0 and the signs of r and x differ, r − y."""
    x_name, y_name = node.input[:2]
    if c.dtype(x_name).kind not in "iu" or c.dtype(y_name) != c.dtype(x_name):
        raise _Unsupported(f"{c.dtype(x_name)} operands (integers map)")
    shape, i32, boolean = c.shape(node.output[0]), np.dtype(np.int32), np.dtype(np.bool_)
    x, y = c.operand(x_name), c.operand(y_name)
    quotient = _apply(c, OperationCode.DIV, [x, y], i32, shape)
    product = _apply(c, OperationCode.MUL, [quotient, y], i32, shape)
    if not a.get("fmod", 0):
        _apply(c, OperationCode.SUB, [x, product], i32, shape, _out(c, node))
        return
    rest = _apply(c, OperationCode.SUB, [x, product], i32, shape)
    zero = c.ints([0])
    rest_negative = _apply(c, OperationCode.LESS, [rest, zero], boolean, shape)
    x_negative = _apply(c, OperationCode.LESS, [x, zero], boolean, c.shape(x_name))
    differ = _apply(c, OperationCode.NOT_EQUAL, [rest_negative, x_negative], boolean, shape)
    nonzero = _apply(c, OperationCode.NOT_EQUAL, [rest, zero], boolean, shape)
    fix = _apply(c, OperationCode.LOGICAL_AND, [differ, nonzero], boolean, shape)
    fixed = _apply(c, OperationCode.SUB, [rest, y], i32, shape)
    c.add(OperationCode.SELECT, [fix, fixed, rest], [_out(c, node)])


def _gathered(c: Converter, sources: Sequence[str], positions: np.ndarray,
              out: int | None = None) -> int:  # fmt: skip
    """The elements at ``positions`` (flat indices into ``sources``, each flattened and
    laid end to end) as one GATHER; the positions' shape is the result's.  Indices
    known at load make every gather, scatter and reversal one of these."""
    dtype = c.dtype(sources[0])
    if dtype not in (np.float32, np.float16) or any(c.dtype(n) != dtype for n in sources):
        raise _Unsupported(f"{dtype} data (NNAPI reshapes floats only)")
    flats = []
    for name in sources:
        size = int(np.prod(c.shape(name)))
        flats.append(
            _apply(c, OperationCode.RESHAPE, [c.operand(name), c.ints([size])], dtype, (size,))
        )
    total = sum(int(np.prod(c.shape(n))) for n in sources)
    source = flats[0]
    if len(flats) > 1:
        source = _apply(c, OperationCode.CONCATENATION, [*flats, c.i32(0)], dtype, (total,))
    where = _int_tensor(c, positions if positions.ndim else positions.reshape(1))
    return _apply(c, OperationCode.GATHER, [source, c.i32(0), where], dtype, positions.shape, out)


def _int_tensor(c: Converter, values: np.ndarray) -> int:
    array = np.ascontiguousarray(values, np.int32)
    return c.constant(OperandCode.TENSOR_INT32, array, array.shape)


def _indices(c: Converter, name: str, size: int | Sequence[int]) -> np.ndarray:
    """Constant indices, negatives counted from the end, refused when out of range."""
    values = np.asarray(c.value(name, "indices")).astype(np.int64)
    sizes = np.asarray(size)
    if ((values < -sizes) | (values >= sizes)).any():
        raise _Unsupported("indices out of range")
    return values % sizes


@maps("GatherElements")
def _gather_elements(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    shape = c.shape(node.input[0])
    axis = _axis(a.get("axis", 0), len(shape))
    where = _indices(c, node.input[1], shape[axis])
    ids = np.arange(int(np.prod(shape))).reshape(shape)
    _gathered(c, node.input[:1], np.take_along_axis(ids, where, axis), _out(c, node))


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
    _gathered(c, node.input[:1], positions, _out(c, node))


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
            raise _Unsupported("indices or updates of shapes that do not fit the data")
        where = _indices(c, node.input[1], shape[:depth])
        target_of = np.stack([targets[tuple(i)] for i in where.reshape(-1, depth)])
        pairs = zip(target_of.reshape(-1), update_ids.reshape(-1))
    else:
        axis = _axis(a.get("axis", 0), len(shape))
        if c.shape(updates) != indices_shape or len(indices_shape) != len(shape):
            raise _Unsupported("indices and updates of different shapes or ranks")
        where = _indices(c, node.input[1], shape[axis])
        coordinates: list[np.ndarray] = list(np.indices(where.shape))
        coordinates[axis] = where
        pairs = zip(targets[tuple(coordinates)].reshape(-1), update_ids.reshape(-1))
    received: list[list[int]] = [[] for _ in range(size)]
    for target, update in pairs:
        received[int(target)].append(int(update))
    reduction = _text(a.get("reduction"), "none")
    if reduction == "none":
        positions = np.array([r[-1] + size if r else i for i, r in enumerate(received)])
        _gathered(c, [data, updates], positions.reshape(shape), _out(c, node))
        return
    operations = {
        "add": (OperationCode.ADD, 0.0),
        "mul": (OperationCode.MUL, 1.0),
        "max": (OperationCode.MAXIMUM, -np.inf),
        "min": (OperationCode.MINIMUM, np.inf),
    }
    if reduction not in operations:
        raise _Unsupported(f"reduction {reduction!r}")
    code, identity = operations[reduction]
    if dtype not in (np.float32, np.float16):
        raise _Unsupported(f"{dtype} data")
    rounds = max(len(r) for r in received)
    padded = update_ids.size  # the identity's position, after the updates
    total = c.operand(data)
    flat = _apply(
        c, OperationCode.RESHAPE, [c.operand(updates), c.ints([padded])], dtype, (padded,)
    )
    extended = _apply(
        c,
        OperationCode.CONCATENATION,
        [flat, _full(c, dtype, (1,), identity), c.i32(0)],
        dtype,
        (padded + 1,),
    )
    for k in range(rounds):
        positions = np.array([r[k] if k < len(r) else padded for r in received]).reshape(shape)
        picked = _apply(
            c, OperationCode.GATHER, [extended, c.i32(0), _int_tensor(c, positions)], dtype, shape
        )
        target = _out(c, node) if k == rounds - 1 else None
        total = _apply(c, code, [total, picked], dtype, shape, target)


@maps("ReverseSequence")
def _reverse_sequence(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Each batch entry's first sequence_lens[b] steps reversed: one GATHER."""
    shape = c.shape(node.input[0])
    batch_axis, time_axis = a.get("batch_axis", 1), a.get("time_axis", 0)
    if len(shape) < 2 or {batch_axis, time_axis} != {0, 1}:
        raise _Unsupported(f"batch axis {batch_axis} and time axis {time_axis}")
    lengths = c.value(node.input[1], "sequence lengths").astype(np.int64)
    if lengths.shape != (shape[batch_axis],):
        raise _Unsupported("not one sequence length per batch entry")
    ids = np.moveaxis(
        np.arange(int(np.prod(shape))).reshape(shape), (batch_axis, time_axis), (0, 1)
    )
    flipped = ids.copy()
    for b, length in enumerate(lengths.tolist()):
        if not 0 <= length <= shape[time_axis]:
            raise _Unsupported("sequence lengths out of range")
        flipped[b, :length] = ids[b, :length][::-1]
    positions = np.moveaxis(flipped, (0, 1), (batch_axis, time_axis))
    _gathered(c, node.input[:1], positions, _out(c, node))


def _moments(c: Converter, x: int, shape: tuple[int, ...], axes: Sequence[int],
             centre: bool = True, mean: int | None = None) -> tuple[int, int]:  # fmt: skip
    """x − mean(x) (x itself unless ``centre``) and the mean of its squares over
    ``axes``, kept (float32); the mean goes into ``mean`` when given."""
    f32 = np.dtype(np.float32)
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    centred = x
    if centre:
        mean = _apply(c, OperationCode.MEAN, [x, c.ints(axes), c.i32(1)], f32, kept, mean)
        centred = _apply(c, OperationCode.SUB, [x, mean], f32, shape)
    squares = _apply(c, OperationCode.MUL, [centred, centred], f32, shape)
    variance = _apply(c, OperationCode.MEAN, [squares, c.ints(axes), c.i32(1)], f32, kept)
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
    shifted = _apply(c, OperationCode.ADD, [variance, c.floats(np.array([epsilon]))], f32, kept)
    inverse = _apply(c, OperationCode.RSQRT, [shifted], f32, kept, inverse)
    return _apply(c, OperationCode.MUL, [centred, inverse], f32, shape)


def _per_channel(
    c: Converter, node: onnx.NodeProto, normalized: int, shape: tuple[int, ...]
) -> None:
    """normalized·scale + B, the [C] scale and B (inputs 1 and 2) broadcast along axis 1."""
    f32 = np.dtype(np.float32)
    column = (shape[1],) + (1,) * (len(shape) - 2)
    scale, bias = (
        _apply(c, OperationCode.RESHAPE, [c.operand(n), c.ints(column)], f32, column)
        for n in node.input[1:3]
    )
    scaled = _apply(c, OperationCode.MUL, [normalized, scale], f32, shape)
    _apply(c, OperationCode.ADD, [scaled, bias], f32, shape, _out(c, node))


@maps("InstanceNormalization")
def _instance_norm(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Each (batch, channel) standardized over its spatial axes, then scaled per channel
    (NNAPI's INSTANCE_NORMALIZATION takes one scalar scale, not a vector)."""
    name, shape = _float_input(c, node)
    if len(shape) < 3 or len(shape) > 4:
        raise _Unsupported(f"a rank-{len(shape)} input")
    axes = list(range(2, len(shape)))
    normalized = _standardized(c, c.operand(name), shape, axes, a.get("epsilon", 1e-5))
    _per_channel(c, node, normalized, shape)


@maps("GroupNormalization")
def _group_norm(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """The channels reshaped into [N, groups, rest], standardized over rest, reshaped
    back and scaled per channel (opset 21's [C] scale and bias)."""
    name, shape = _float_input(c, node)
    groups = a["num_groups"]
    if len(shape) < 3 or len(shape) > 4 or groups < 1 or shape[1] % groups:
        raise _Unsupported(f"a rank-{len(shape)} input or uneven groups")
    if c.shape(node.input[1]) != (shape[1],) or c.shape(node.input[2]) != (shape[1],):
        raise _Unsupported("a per-group scale (before opset 21)")
    f32 = np.dtype(np.float32)
    grouped_shape = (shape[0], groups, int(np.prod(shape[1:])) // groups)
    grouped = _apply(
        c, OperationCode.RESHAPE, [c.operand(name), c.ints(grouped_shape)], f32, grouped_shape
    )
    normalized = _standardized(c, grouped, grouped_shape, [2], a.get("epsilon", 1e-5))
    back = _apply(c, OperationCode.RESHAPE, [normalized, c.ints(shape)], f32, shape)
    _per_channel(c, node, back, shape)


@maps("MeanVarianceNormalization")
def _mean_variance_norm(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """(x − mean) / (√variance + 1e-9) over ``axes`` (default 0, 2, 3), as ONNX's
    function defines it (ε after the root)."""
    name, shape = _float_input(c, node)
    f32 = np.dtype(np.float32)
    axes = sorted({_axis(x, len(shape)) for x in a.get("axes", [0, 2, 3])})
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    centred, variance = _moments(c, c.operand(name), shape, axes)
    deviation = _apply(c, OperationCode.SQRT, [variance], f32, kept)
    shifted = _apply(c, OperationCode.ADD, [deviation, c.floats(np.array([1e-9]))], f32, kept)
    _apply(c, OperationCode.DIV, [centred, shifted], f32, shape, _out(c, node))


@maps("LpNormalization")
def _lp_norm(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """x / ‖x‖ₚ along ``axis``: the norm is sum|x| (p = 1) or √(sum x²) (p = 2); a
    zero vector stays zero (its norm is taken as 1)."""
    name, shape = _float_input(c, node)
    p, axis = a.get("p", 2), _axis(a.get("axis", -1), len(shape))
    if p not in (1, 2):
        raise _Unsupported(f"p = {p}")
    f32, x = np.dtype(np.float32), c.operand(name)
    kept = tuple(1 if i == axis else d for i, d in enumerate(shape))
    if p == 1:
        each = _apply(c, OperationCode.ABS, [x], f32, shape)
    else:
        each = _apply(c, OperationCode.MUL, [x, x], f32, shape)
    total = _apply(c, OperationCode.REDUCE_SUM, [each, c.ints([axis]), c.boolean(True)], f32, kept)
    norm = total if p == 1 else _apply(c, OperationCode.SQRT, [total], f32, kept)
    zero = _apply(c, OperationCode.EQUAL, [norm, _like(c, name, 0.0)], np.dtype(np.bool_), kept)
    safe = _apply(c, OperationCode.SELECT, [zero, _full(c, f32, kept, 1.0), norm], f32, kept)
    _apply(c, OperationCode.DIV, [x, safe], f32, shape, _out(c, node))


@maps("Hardmax")
def _hardmax(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """1 at the first maximum along ``axis``, 0 elsewhere: ARGMAX, EQUAL against the
    axis's positions, SELECT."""
    name, shape = _float_input(c, node)
    rank = len(shape)
    axis = _axis(a.get("axis", -1 if c.opset >= 13 else 1), rank)
    if c.opset < 13 and axis != rank - 1:
        raise _Unsupported("a pre-13 hardmax over more than the last axis")
    int32, f32 = np.dtype(np.int32), np.dtype(np.float32)
    reduced = tuple(d for i, d in enumerate(shape) if i != axis) or (1,)
    found = _apply(c, OperationCode.ARGMAX, [c.operand(name), c.i32(axis)], int32, reduced)
    kept = tuple(1 if i == axis else d for i, d in enumerate(shape))
    found = _apply(c, OperationCode.EXPAND_DIMS, [found, c.i32(axis)], int32, kept)
    positions = np.arange(shape[axis]).reshape([-1 if i == axis else 1 for i in range(rank)])
    hit = _apply(
        c, OperationCode.EQUAL, [found, _int_tensor(c, positions)], np.dtype(np.bool_), shape
    )
    ones, zeros = _full(c, f32, shape, 1.0), _full(c, f32, shape, 0.0)
    c.add(OperationCode.SELECT, [hit, ones, zeros], [_out(c, node)])


@maps("TopK")
def _top_k(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """TOPK_V2 on the last axis.  It orders equal values by descending index, ONNX by
    ascending, so it runs on the axis reversed (a GATHER) and each index i maps back
    to n − 1 − i; the smallest k are the largest of −x."""
    name = node.input[0]
    shape, dtype = c.shape(name), c.dtype(name)
    axis = _axis(a.get("axis", -1), len(shape))
    if axis != len(shape) - 1:
        raise _Unsupported("an axis other than the last")
    if dtype not in (np.float32, np.int32, np.int64):
        raise _Unsupported(f"{dtype} data")
    k = int(c.value(node.input[1], "k").reshape(-1)[0])
    n, int32 = shape[axis], np.dtype(np.int32)
    out_shape = shape[:-1] + (k,)
    x = _reversed(c, c.operand(name), axis, dtype, shape)
    smallest = not a.get("largest", 1)
    if smallest:
        x = _apply(c, OperationCode.NEG, [x], dtype, shape)
    wants_values = bool(node.output[0])
    values = _out(c, node, 0) if wants_values and not smallest else c.temporary(dtype, out_shape)
    found = c.temporary(int32, out_shape)
    c.add(OperationCode.TOPK_V2, [x, c.i32(k)], [values, found])
    if smallest and wants_values:
        c.add(OperationCode.NEG, [values], [_out(c, node, 0)])
    if len(node.output) > 1 and node.output[1]:
        _unreversed(c, found, n, out_shape, _out(c, node, 1))


@maps("CenterCropPad")
def _center_crop_pad(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """A centred SLICE where the input is longer than the target, then a centred PAD
    where shorter (the odd element at the end in both)."""
    shape, dtype = c.shape(node.input[0]), c.dtype(node.input[0])
    rank = len(shape)
    target = [int(t) for t in c.value(node.input[1], "shape").tolist()]
    axes = [_axis(x, rank) for x in a.get("axes", range(rank))]
    begin, size, pads = [0] * rank, list(shape), np.zeros((rank, 2), np.int32)
    for axis, want in zip(axes, target):
        if shape[axis] > want:
            begin[axis], size[axis] = (shape[axis] - want) // 2, want
        elif shape[axis] < want:
            before = (want - shape[axis]) // 2
            pads[axis] = before, want - shape[axis] - before
    x = _apply(
        c,
        OperationCode.SLICE,
        [c.operand(node.input[0]), c.ints(begin), c.ints(size)],
        dtype,
        tuple(size),
        None if pads.any() else _out(c, node),
    )
    if pads.any():
        paddings = c.constant(OperandCode.TENSOR_INT32, pads, pads.shape)
        c.add(OperationCode.PAD, [x, paddings], [_out(c, node)])


#: The most steps CumSum unrolls into (one SLICE and one ADD each).
_MAX_CUMSUM_STEPS = 256


@maps("CumSum")
def _cum_sum(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Running sums along a constant axis, one ADD per step (each position SLICE'd,
    the sums laid back together by CONCATENATION).  Exact where a MATMUL with a
    triangle of ones is not: its zeros turn an infinity into NaN."""
    name = node.input[0]
    shape, dtype = c.shape(name), c.dtype(name)
    axis = _axis(c.value(node.input[1], "axis").reshape(-1)[0], len(shape))
    length = shape[axis]
    if dtype not in (np.float32, np.float16):
        raise _Unsupported(f"{dtype} data (NNAPI's CONCATENATION takes floats)")
    if length > _MAX_CUMSUM_STEPS:
        raise _Unsupported(f"an axis of more than {_MAX_CUMSUM_STEPS} elements")
    piece = (*shape[:axis], 1, *shape[axis + 1 :])
    exclusive, total = a.get("exclusive", 0), None
    sums: dict[int, int] = {}
    for k in reversed(range(length)) if a.get("reverse", 0) else range(length):
        if exclusive:
            sums[k] = _full(c, dtype, piece, 0) if total is None else total
        begin = [k if axis_ == axis else 0 for axis_ in range(len(shape))]
        step = _apply(
            c, OperationCode.SLICE, [c.operand(name), c.ints(begin), c.ints(piece)], dtype, piece
        )
        total = step if total is None else _apply(c, OperationCode.ADD, [total, step], dtype, piece)
        sums.setdefault(k, total)
    pieces = [sums[k] for k in range(length)]
    c.add(OperationCode.CONCATENATION, [*pieces, c.i32(axis)], [_out(c, node)])


@maps("OneHot")
def _one_hot(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """A constant depth: EQUAL of the indices (negatives counted from the end)
    against 0 … depth − 1 on a new first axis, SELECT of the on and off values,
    then a TRANSPOSE moving that axis where ONNX wants it."""
    indices, values = node.input[0], node.input[2]
    if c.dtype(indices).kind not in "iu":
        raise _Unsupported(f"{c.dtype(indices)} indices (integers map)")
    depth = int(c.value(node.input[1], "depth").reshape(-1)[0])
    shape, out, dtype = c.shape(indices), c.shape(node.output[0]), c.dtype(node.output[0])
    axis = _axis(a.get("axis", -1), len(out))
    first = (depth, *shape)  # the new axis first: EQUAL broadcasts over leading axes
    boolean, int32 = np.dtype(np.bool_), np.dtype(np.int32)
    where = c.operand(indices)
    negative = _apply(c, OperationCode.LESS, [where, c.ints([0])], boolean, shape)
    shifted = _apply(c, OperationCode.ADD, [where, c.ints([depth])], int32, shape)
    where = _apply(c, OperationCode.SELECT, [negative, shifted, where], int32, shape)
    positions = np.arange(depth, dtype=np.int32).reshape(depth, *[1] * len(shape))
    hot = _apply(c, OperationCode.EQUAL, [where, _int_tensor(c, positions)], boolean, first)
    # on, off: one element each, broadcast to the whole
    if values in c.constants:
        choices = [_full(c, dtype, first, c.constants[values].reshape(-1)[k]) for k in (1, 0)]
    else:
        filler = _full(c, dtype, first, -0.0)  # x + (-0.0) keeps every x
        choices = []
        for k in (1, 0):
            inputs = [c.operand(values), c.ints([k]), c.ints([1])]
            element = _apply(c, OperationCode.SLICE, inputs, dtype, (1,))
            choices.append(_apply(c, OperationCode.ADD, [element, filler], dtype, first))
    if axis == 0:
        c.add(OperationCode.SELECT, [hot, *choices], [_out(c, node)])
        return
    chosen = _apply(c, OperationCode.SELECT, [hot, *choices], dtype, first)
    perm = [*range(1, axis + 1), 0, *range(axis + 1, len(out))]
    c.add(OperationCode.TRANSPOSE, [chosen, c.ints(perm)], [_out(c, node)])


# -- losses -----------------------------------------------------------------------------------


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
        raise _Unsupported(f"{c.dtype(name)} scores of rank {len(shape)} (float32, 2 to 4 map)")
    reduction = _text(a.get("reduction"), "mean")
    if reduction not in ("none", "sum", "mean"):
        raise _Unsupported(f"reduction {reduction!r}")
    labels = np.asarray(c.value(target, "target")).astype(np.int64)
    batch, classes = shape[:2]
    if labels.shape != (batch, *shape[2:]) or weight and c.shape(weight) != (classes,):
        raise _Unsupported("a target or weight of a shape that does not fit the scores")
    inner = int(np.prod(shape[2:]))
    ignored = labels == a["ignore_index"] if "ignore_index" in a else np.zeros(labels.shape, bool)
    kept = labels[~ignored]
    if ((kept < 0) | (kept >= classes)).any():
        raise _Unsupported("targets out of range")
    x = c.operand(name)
    if node.op_type == "SoftmaxCrossEntropyLoss":
        log_prob = _out(c, node, 1) if len(node.output) > 1 and node.output[1] else None
        x = _apply(c, OperationCode.LOG_SOFTMAX, [x, c.f32(1.0), c.i32(1)], f32, shape, log_prob)
    rows = labels.reshape(batch, inner)
    flat = (np.arange(batch)[:, None] * classes + rows) * inner + np.arange(inner)[None, :]
    positions = np.where(ignored.reshape(batch, inner), batch * classes * inner, flat)
    summed = reduction != "none"
    picks = positions.reshape(-1) if summed else positions.reshape(labels.shape)
    out = _out(c, node)
    picked = _or_zero(c, x, shape, picks)
    weights = None
    if weight:
        if c.dtype(weight) != f32:
            raise _Unsupported(f"{c.dtype(weight)} weights")
        chosen = np.where(ignored, classes, labels).reshape(picks.shape)
        weights = _or_zero(c, c.operand(weight), c.shape(weight), chosen)
    losses = _apply(
        c, OperationCode.NEG, [picked], f32, picks.shape, None if summed or weights else out
    )
    if weights is not None:
        losses = _apply(
            c, OperationCode.MUL, [losses, weights], f32, picks.shape, None if summed else out
        )
    if not summed:
        return
    total_axes, keep = c.ints([0]), c.boolean(True)
    if reduction == "sum":
        c.add(OperationCode.REDUCE_SUM, [losses, total_axes, keep], [out])
        return
    total = _apply(c, OperationCode.REDUCE_SUM, [losses, total_axes, keep], f32, (1,))
    if weights is not None:
        count = _apply(c, OperationCode.REDUCE_SUM, [weights, total_axes, keep], f32, (1,))
    else:
        count = c.floats(np.array([np.count_nonzero(~ignored)], np.float32))
    _apply(c, OperationCode.DIV, [total, count], f32, (1,), out)


def _or_zero(c: Converter, source: int, shape: tuple[int, ...], positions: np.ndarray) -> int:
    """The float32 elements of ``source`` at flat ``positions``, where the position
    one past the last picks a zero (one GATHER from the values and a zero laid after)."""
    f32, size = np.dtype(np.float32), int(np.prod(shape))
    flat = _apply(c, OperationCode.RESHAPE, [source, c.ints([size])], f32, (size,))
    padded = _apply(
        c, OperationCode.CONCATENATION, [flat, c.floats(np.zeros(1)), c.i32(0)], f32, (size + 1,)
    )
    where = _int_tensor(c, positions if positions.ndim else positions.reshape(1))
    return _apply(c, OperationCode.GATHER, [padded, c.i32(0), where], f32, positions.shape or (1,))


# -- recurrent layers -------------------------------------------------------------------------

#: ONNX activation names → the LSTM operation's activation codes (TFLite's).  NNAPI
#: takes one activation for the cell input and the output, and its gates are sigmoids.
_LSTM_ACTIVATIONS = {"Tanh": 4, "Relu": 1, "Sigmoid": 6}
#: The ONNX gate block (i, o, f, c order) of each of NNAPI's input, forget, cell, output.
_LSTM_GATES = (0, 2, 3, 1)
#: The ONNX peephole block (i, o, f order) of each of NNAPI's input, forget, output.
_LSTM_PEEPHOLES = (0, 2, 1)


@maps("LSTM")
def _lstm(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """One UNIDIRECTIONAL_SEQUENCE_LSTM per direction, its weights cut per gate
    (at load from constants, by SLICE otherwise) and its two biases summed.  The
    reverse direction runs forward over the input reversed in time (a GATHER) and
    its output is reversed back; ``layout`` 1 (batch first) is time_major false.
    The directions' outputs are stacked into Y, Y_h and Y_c."""
    x, w, r, b, lengths, h0, c0, p = (*node.input, *[""] * 8)[:8]
    backwards, layout, (steps, batch, size, hidden) = _recurrent(c, node, a, 4)
    codes = _lstm_activations(a, len(backwards))
    if a.get("clip") is not None or a.get("input_forget", 0):
        raise _Unsupported("clip or input_forget")
    f32 = np.dtype(np.float32)
    sequence = (steps, batch, hidden) if layout == 0 else (batch, steps, hidden)
    wants_states = any(node.output[1:3])
    results: list[list[int]] = [[], [], []]  # Y, Y_h, Y_c per direction
    for d, backward in enumerate(backwards):
        source = c.operand(x)
        if backward:  # the time axis: 0, or 1 batch first
            source = _reversed(c, source, layout, f32, c.shape(x))
        weights = [_piece(c, w, (d, g * hidden, 0), (1, hidden, size)) for g in _LSTM_GATES]
        recurrent = [_piece(c, r, (d, g * hidden, 0), (1, hidden, hidden)) for g in _LSTM_GATES]
        if p:
            peepholes = [_piece(c, p, (d, g * hidden), (1, hidden)) for g in _LSTM_PEEPHOLES]
        else:
            peepholes = [_omitted(c, 1) for _ in range(3)]
        biases = [_gate_bias(c, b, d, (g, g + 4), hidden) for g in _LSTM_GATES]  # Wb + Rb
        states = [_initial_state(c, s, d, layout, (batch, hidden)) for s in (h0, c0)]
        inputs = [
            source, *weights, *recurrent, *peepholes, *biases, _omitted(c, 2), _omitted(c, 1),
            *states, c.i32(codes[d]), c.f32(0.0), c.f32(0.0), c.boolean(layout == 0),
            *[_omitted(c, 1) for _ in range(4)],
        ]  # fmt: skip
        outputs = [c.temporary(f32, sequence)]
        if wants_states:
            outputs += [c.temporary(f32, (batch, hidden)) for _ in range(2)]
        c.add(OperationCode.UNIDIRECTIONAL_SEQUENCE_LSTM, inputs, outputs)
        if backward:
            outputs[0] = _reversed(c, outputs[0], layout, f32, sequence)
        for k, operand in enumerate(outputs):
            results[k].append(operand)
    for k, name in enumerate(node.output[:3]):
        if name:
            shape = sequence if k == 0 else (batch, hidden)
            axis = 1 + layout if k == 0 else layout
            _stacked(c, results[k], shape, axis, name)


#: The most steps RNN and GRU unroll into (some ten operations each).
_MAX_UNROLLED_STEPS = 256
#: ONNX activation names → the NNAPI operation each is (without parameters).
_GATE_ACTIVATIONS = {
    "Tanh": OperationCode.TANH, "Relu": OperationCode.RELU, "Sigmoid": OperationCode.LOGISTIC,
}  # fmt: skip


@maps("RNN", "GRU")
def _unrolled_rnn(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Unrolled over the (static) sequence, one step after another, per direction:
    each gate FULLY_CONNECTED on x_t (bias Wb + Rb) plus FULLY_CONNECTED on h, then
    its activation (NNAPI's RNN takes no Tanh, and has no GRU).  GRU: z, r and h̃
    gates, h̃ from (r ⊙ h)·Rhᵀ, or with linear_before_reset from r ⊙ (h·Rhᵀ + Rbh);
    h = (1 − z) ⊙ h̃ + z ⊙ h.  The reverse direction walks the steps backwards."""
    x, w, r, b, lengths, h0 = (*node.input, *[""] * 6)[:6]
    gru = node.op_type == "GRU"
    backwards, layout, (steps, batch, size, hidden) = _recurrent(c, node, a, 3 if gru else 1)
    directions = len(backwards)
    names = [_text(n, "") for n in a.get("activations", [])]
    per = 2 if gru else 1
    names = names or (["Sigmoid", "Tanh"] if gru else ["Tanh"]) * directions
    if "activation_alpha" in a or "activation_beta" in a or len(names) != per * directions:
        raise _Unsupported("activations with parameters, or not one set per direction")
    if any(n not in _GATE_ACTIVATIONS for n in names) or a.get("clip") is not None:
        raise _Unsupported(f"clip or activations {', '.join(names)} (Tanh, Relu, Sigmoid map)")
    if steps > _MAX_UNROLLED_STEPS:
        raise _Unsupported(f"a sequence of more than {_MAX_UNROLLED_STEPS} steps")
    reset_first = bool(a.get("linear_before_reset", 0))
    f32, state = np.dtype(np.float32), (batch, hidden)
    gates, ones = 3 if gru else 1, c.floats(np.ones(1))
    states: dict[tuple[int, int], int] = {}  # h after each step, by (step, direction)
    for d, backward in enumerate(backwards):
        acts = [_GATE_ACTIVATIONS[n] for n in names[per * d : per * d + per]]
        f, g = acts[0], acts[-1]
        weights = [_piece(c, w, (d, k * hidden, 0), (1, hidden, size)) for k in range(gates)]
        recurrent = [_piece(c, r, (d, k * hidden, 0), (1, hidden, hidden)) for k in range(gates)]
        # h̃ with linear_before_reset: Rbh goes with h·Rhᵀ, inside the reset
        biases = [
            _gate_bias(c, b, d, (k,) if gru and k == 2 and reset_first else (k, k + gates), hidden)
            for k in range(gates)
        ]
        inner = _gate_bias(c, b, d, (gates + 2,), hidden) if gru and reset_first else None
        h = _initial_state(c, h0, d, layout, state)
        for t in reversed(range(steps)) if backward else range(steps):
            begin = (t, 0, 0) if layout == 0 else (0, t, 0)
            cut = (1, batch, size) if layout == 0 else (batch, 1, size)
            xs = (_piece(c, x, begin, cut, (batch, size)), (batch, size))
            pre = [
                _gate(c, xs, state, weights[k], biases[k], h, recurrent[k])
                for k in range(min(gates, 2))
            ]
            if not gru:
                h = _apply(c, f, pre[:1], f32, state)
            else:
                z = _apply(c, f, pre[:1], f32, state)
                reset = _apply(c, f, pre[1:], f32, state)
                if reset_first:
                    own = _gate(c, xs, state, weights[2], biases[2])
                    carried = _gate(c, (h, state), state, recurrent[2], inner)
                    gated = _apply(c, OperationCode.MUL, [reset, carried], f32, state)
                    candidate = _apply(c, OperationCode.ADD, [own, gated], f32, state)
                else:
                    reset_h = _apply(c, OperationCode.MUL, [reset, h], f32, state)
                    candidate = _gate(c, xs, state, weights[2], biases[2], reset_h, recurrent[2])
                candidate = _apply(c, g, [candidate], f32, state)
                keep = _apply(c, OperationCode.SUB, [ones, z], f32, state)
                new = _apply(c, OperationCode.MUL, [keep, candidate], f32, state)
                old = _apply(c, OperationCode.MUL, [z, h], f32, state)
                h = _apply(c, OperationCode.ADD, [new, old], f32, state)
            states[t, d] = h
    if node.output[0]:  # Y: [steps, directions, batch, hidden], or batch first
        every = [states[t, d] for t in range(steps) for d in range(directions)]
        _stacked(c, every, state, layout, node.output[0])
    if len(node.output) > 1 and node.output[1]:  # Y_h: the last step of each direction
        last = [states[0 if backward else steps - 1, d] for d, backward in enumerate(backwards)]
        _stacked(c, last, state, layout, node.output[1])


def _gate(c: Converter, x: tuple[int, tuple[int, int]], state: tuple[int, int], weights: int,
          bias: int | None, h: int | None = None, recurrent: int | None = None) -> int:  # fmt: skip
    """x·Wᵀ + bias (``x``: an operand and its [batch, size]), plus h·Rᵀ when given:
    [batch, hidden] (``state``)."""
    f32 = np.dtype(np.float32)
    own = c.temporary(f32, state)
    _fully_connected(c, x[0], x[1], weights, own, state, bias)
    if h is None or recurrent is None:
        return own
    carried = c.temporary(f32, state)
    _fully_connected(c, h, state, recurrent, carried, state)
    return _apply(c, OperationCode.ADD, [own, carried], f32, state)


def _recurrent(
    c: Converter, node: onnx.NodeProto, a: dict[str, Any], gates: int
) -> tuple[list[bool], int, tuple[int, int, int, int]]:
    """What LSTM, RNN and GRU (of ``gates`` gates) share: (whether each direction
    runs backwards, layout, (steps, batch, input size, hidden size)), refusing what none of them
    maps: another direction or layout, non-float32 data, inputs of other shapes
    than X and the hidden size give, sequence_lens shorter than the sequence."""
    x, r, lengths = node.input[0], node.input[2], (*node.input, "", "", "", "", "")[4]
    direction = _text(a.get("direction"), "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise _Unsupported(f"direction {direction!r}")
    layout = a.get("layout", 0)
    if layout not in (0, 1) or c.dtype(x) != np.float32:
        raise _Unsupported(f"layout {layout} or {c.dtype(x)} tensors")
    x_shape = c.shape(x)
    if len(x_shape) != 3:
        raise _Unsupported(f"a rank-{len(x_shape)} input (X is [steps, batch, features])")
    (steps, batch), size = x_shape[:2] if layout == 0 else x_shape[1::-1], x_shape[2]
    directions = 2 if direction == "bidirectional" else 1
    hidden = a.get("hidden_size", c.shape(r)[-1] if c.shape(r) else 0)
    state = (directions, batch, hidden) if layout == 0 else (batch, directions, hidden)
    wanted = {  # each input's shape, by position (initial_c and P: LSTM's)
        1: (directions, gates * hidden, size), 2: (directions, gates * hidden, hidden),
        3: (directions, 2 * gates * hidden), 4: (batch,), 5: state, 6: state,
        7: (directions, 3 * hidden),
    }  # fmt: skip
    for position, name in enumerate(node.input):
        if name and position in wanted and c.shape(name) != wanted[position]:
            shape = list(c.shape(name))
            raise _Unsupported(f"{name!r} of shape {shape}, not {list(wanted[position])}")
    if lengths and (c.value(lengths, "sequence_lens") != steps).any():
        raise _Unsupported("sequence_lens shorter than the sequence")
    return [direction == "reverse", True][:directions], layout, (steps, batch, size, hidden)


def _lstm_activations(a: dict[str, Any], directions: int) -> list[int]:
    """The LSTM operation's activation code per direction: ONNX's f must be
    Sigmoid and its g and h one activation NNAPI has, without parameters."""
    names = [_text(n, "") for n in a.get("activations", [])]
    if not names:
        return [_LSTM_ACTIVATIONS["Tanh"]] * directions
    if "activation_alpha" in a or "activation_beta" in a or len(names) != 3 * directions:
        raise _Unsupported("activations with parameters, or not three per direction")
    codes = []
    for f, g, h in zip(names[::3], names[1::3], names[2::3]):
        if f != "Sigmoid" or g != h or g not in _LSTM_ACTIVATIONS:
            raise _Unsupported(
                f"activations {f}, {g}, {h} (Sigmoid and one of Tanh, Relu, Sigmoid twice map)"
            )
        codes.append(_LSTM_ACTIVATIONS[g])
    return codes


def _piece(c: Converter, name: str, begin: Sequence[int], size: Sequence[int],
           shape: tuple[int, ...] | None = None) -> int:  # fmt: skip
    """The block of float32 tensor ``name`` at ``begin`` of ``size``, as ``shape``
    (default: without its leading axis): cut at load from a constant, SLICE'd and
    reshaped at every run otherwise."""
    f32, sliced_shape = np.dtype(np.float32), tuple(size)
    shape = sliced_shape[1:] if shape is None else shape
    if name in c.constants:
        block = c.constants[name][tuple(slice(i, i + n) for i, n in zip(begin, size))]
        return c.floats(block.reshape(shape))
    if c.dtype(name) != np.float32:
        raise _Unsupported(f"{c.dtype(name)} weights or states")
    inputs = [c.operand(name), c.ints(begin), c.ints(size)]
    sliced = _apply(c, OperationCode.SLICE, inputs, f32, sliced_shape)
    return _reshaped(c, sliced, f32, sliced_shape, shape)


def _gate_bias(c: Converter, b: str, d: int, blocks: Sequence[int], hidden: int) -> int:
    """The sum of B's ``blocks`` (of ``hidden`` each) for direction ``d``: summed at
    load from a constant, ADD'ed at every run otherwise (zeros without B)."""
    f32 = np.dtype(np.float32)
    if not b:
        return _full(c, f32, (hidden,), 0)
    if b in c.constants:
        rows = c.constants[b][d].astype(np.float32)
        return c.floats(sum(rows[k * hidden : (k + 1) * hidden] for k in blocks))
    parts = [_piece(c, b, (d, k * hidden), (1, hidden)) for k in blocks]
    total = parts[0]
    for part in parts[1:]:
        total = _apply(c, OperationCode.ADD, [total, part], f32, (hidden,))
    return total


def _initial_state(c: Converter, name: str, d: int, layout: int, shape: tuple[int, int]) -> int:
    """Direction ``d``'s initial state (``shape``, [batch, hidden]) from ``name``
    ([directions, batch, hidden], batch first for layout 1); zeros without it."""
    if not name:
        return _full(c, np.dtype(np.float32), shape, 0)
    batch, hidden = shape
    if layout == 0:
        return _piece(c, name, (d, 0, 0), (1, batch, hidden), shape)
    return _piece(c, name, (0, d, 0), (batch, 1, hidden), shape)


def _omitted(c: Converter, rank: int) -> int:
    """An optional float32 operand left out (NO_VALUE)."""
    operand = c.model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (0,) * rank))
    c.model.set_operand_value(operand, None)
    return operand


def _stacked(c: Converter, parts: Sequence[int], shape: tuple[int, ...], axis: int,
             name: str) -> None:  # fmt: skip
    """Float32 ``parts`` of ``shape`` stacked on a new ``axis`` (several: in the parts'
    order, major first), into tensor ``name``: a CONCATENATION along ``axis`` lays them
    out as the stack, a RESHAPE gives it the stack's shape."""
    f32, joined = (
        np.dtype(np.float32),
        (*shape[:axis], shape[axis] * len(parts), *shape[axis + 1 :]),
    )
    source = parts[0]
    if len(parts) > 1:
        source = _apply(c, OperationCode.CONCATENATION, [*parts, c.i32(axis)], f32, joined)
    _reshaped(c, source, f32, joined, c.shape(name), name)


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


def _value_info(c: Converter, name: str, as_name: str | None = None) -> onnx.ValueInfoProto:
    """A typed subgraph input for the outer value ``name`` (called ``as_name`` there)."""
    dtype = helper.np_dtype_to_tensor_dtype(c.dtype(name))
    return helper.make_tensor_value_info(as_name or name, dtype, c.shape(name))


def _referenced(
    c: Converter,
    graph: onnx.GraphProto,
    inputs: Sequence[onnx.ValueInfoProto],
    nodes: Sequence[onnx.NodeProto] = (),
    outputs: Sequence[onnx.ValueInfoProto] | None = None,
) -> tuple[int, list[tuple[np.dtype[Any], tuple[int, ...]]]]:
    """A MODEL operand for a subgraph (an If branch, a Loop body) taking ``inputs``,
    with ``nodes`` after its own and ``outputs`` in place of its own: the outer-scope
    constants it reads become its initializers."""
    constants = [
        numpy_helper.from_array(np.asarray(c.constants[n]), n)
        for n in sorted(_outer_names(graph))
        if n in c.constants
    ]
    sub = helper.make_graph(
        [*graph.node, *nodes], graph.name or "subgraph", list(inputs),
        list(graph.output if outputs is None else outputs),
        [*graph.initializer, *constants], value_info=list(graph.value_info),
    )  # fmt: skip
    model = helper.make_model(sub, opset_imports=list(c.onnx.opset_import))
    model.ir_version = c.onnx.ir_version
    operand, converter = c.model.add_operand(OperandType(OperandCode.MODEL)), Converter(model)
    try:
        c.model.set_operand_value_from_model(operand, converter.convert())
    except UnsupportedModelError as exc:  # listed under the If or Loop node
        raise _Unsupported(f"a subgraph using {exc.listed}") from None
    return operand, [(converter.dtype(o.name), converter.shape(o.name)) for o in sub.output]


@maps("If")
def _if(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """NNAPI's IF takes its branches as models with explicit inputs: the values
    the ONNX branches read from around them."""
    then_branch, else_branch = a["then_branch"], a["else_branch"]
    outer = _outer_names(then_branch) | _outer_names(else_branch)
    captured = [_value_info(c, n) for n in sorted(outer) if n not in c.constants]
    (then_model, types), (else_model, others) = (
        _referenced(c, then_branch, captured), _referenced(c, else_branch, captured),
    )  # fmt: skip
    untyped = [n for n in node.output if c.types.get(n, (None, None))[1] is None]
    for name, kind, other in zip(node.output, types, others):
        if kind != other:
            raise _Unsupported("branches whose outputs differ in type or shape")
        if name in untyped:  # ONNX could not merge the branches' shapes
            c.types[name] = kind
    if untyped:  # so the nodes after the If are typed too
        kept = [v for v in c.graph.value_info if v.name not in untyped]
        del c.graph.value_info[:]
        c.graph.value_info.extend([*kept, *(_value_info(c, n) for n in untyped)])
        c._infer_again()
    inputs = [_condition(c, node.input[0]), then_model, else_model]
    inputs += [c.operand(v.name) for v in captured]
    c.add(OperationCode.IF, inputs, [c.operand(o) for o in node.output])


def _condition(c: Converter, name: str) -> int:
    """An If condition as NNAPI wants it, TENSOR_BOOL8 of shape [1]."""
    shape = c.shape(name)
    if int(np.prod(shape)) != 1:
        raise _Unsupported("a condition of more than one element")
    if len(shape) <= 1:
        return c.operand(name)
    return c.reshape_boolean(c.operand(name), shape, (1,))


@maps("Loop")
def _loop(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """NNAPI's WHILE, whose condition is a model of its own.  The loop values are the
    carried values and a buffer per scan output (WHILE's outputs), the iteration
    number and the condition (carried, not returned), then the trip count and the
    values the body reads from around it (read only).  The condition model is
    ``i < trip count and cond``; the body model is ONNX's body plus ``i + 1`` and,
    per scan output, a SELECT writing its row ``i``."""
    body = a["body"]
    trip, cond = (*node.input, "", "")[:2]
    if trip in c.constants and int(c.constants[trip].reshape(-1)[0]) >= 2**31 - 1:
        trip = ""  # "no limit": the loop timeout ends a loop long before
    if not trip and not cond:
        raise _Unsupported("no trip count and no condition (a loop that never ends)")
    carried, prefix = list(node.input[2:]), f"{node.output[0]}/loop."
    if len(body.input) != 2 + len(carried) or len(body.output) != len(node.output) + 1:
        raise _Unsupported("a body whose inputs or outputs do not match the loop's")
    iteration, flag = (i.name for i in body.input[:2])
    rows = [o.name for o in body.output[1 + len(carried) :]]
    scans = list(node.output[len(carried) :])
    count = _iterations(c, trip, cond, body) if scans else 0
    buffers = [f"{prefix}scan{k}" for k in range(len(scans))]
    inputs = [
        *(_value_info(c, n, v.name) for n, v in zip(carried, body.input[2:])),
        *(_value_info(c, n, b) for n, b in zip(scans, buffers)),
        helper.make_tensor_value_info(iteration, onnx.TensorProto.INT64, []),
        helper.make_tensor_value_info(flag, onnx.TensorProto.BOOL, []),
        *([_value_info(c, trip, f"{prefix}trip")] if trip else []),
        *(_value_info(c, n) for n in sorted(_outer_names(body)) if n not in c.constants),
    ]
    for scan in scans:
        if c.shape(scan)[:1] != (count,):
            raise _Unsupported(f"scan output {scan!r} longer or shorter than the loop")
    # The body, then i + 1 and each scan buffer with row i written.
    one, following = f"{prefix}one", f"{prefix}next"
    extra = [
        helper.make_node("Constant", [], [one], value=numpy_helper.from_array(np.array(1, np.int64))),
        helper.make_node("Add", [iteration, one], [following]),
    ]  # fmt: skip
    for scan, row, buffer in zip(scans, rows, buffers):
        shape = c.shape(scan)
        positions = np.arange(count, dtype=np.int64).reshape(count, *[1] * (len(shape) - 1))
        extra += [
            helper.make_node("Constant", [], [f"{buffer}.at"], value=numpy_helper.from_array(positions)),
            helper.make_node("Equal", [f"{buffer}.at", iteration], [f"{buffer}.here"]),
            helper.make_node("Where", [f"{buffer}.here", row, buffer], [f"{buffer}.next"]),
        ]  # fmt: skip
    named = onnx.ValueInfoProto
    outputs = [
        *body.output[1 : 1 + len(carried)],
        *(named(name=f"{b}.next") for b in buffers),
        named(name=following),
        body.output[0],
    ]
    body_model, _ = _referenced(c, body, inputs, extra, outputs)
    # The condition: i < trip count, and the carried condition when there is one.
    tests = [f"{prefix}below"] if trip else []
    checks = [helper.make_node("Less", [iteration, f"{prefix}trip"], tests)] if trip else []
    if cond and trip:
        checks.append(helper.make_node("And", [tests[0], flag], [f"{prefix}go"]))
    result = checks[-1].output[0] if checks else flag
    condition, _ = _referenced(
        c, onnx.GraphProto(name="condition"), inputs, checks,
        [helper.make_tensor_value_info(result, onnx.TensorProto.BOOL, [])],
    )  # fmt: skip
    true = c.constant(OperandCode.TENSOR_BOOL8, np.ones(1, np.bool_), (1,))
    values = [c.operand(n) for n in carried]
    values += [_full(c, c.dtype(s), c.shape(s), 0) for s in scans]
    values += [c.ints([0]), _condition(c, cond) if cond else true]
    values += [c.operand(trip)] if trip else []
    values += [c.operand(v.name) for v in inputs[len(values) :]]  # what the body reads
    results = [
        c.operand(o) if o else c.temporary(c.dtype(n), c.shape(n))
        for o, n in zip(node.output, [*carried, *scans])
    ]
    c.add(OperationCode.WHILE, [condition, body_model, *values], results)


def _iterations(c: Converter, trip: str, cond: str, body: onnx.GraphProto) -> int:
    """How often a loop with scan outputs runs, which must be known at load: a
    constant trip count (as _loop took it: none when it means "no limit"), and a
    condition that starts true and stays so (none, or the body passing it on
    unchanged or setting it to a constant true)."""
    if trip not in c.constants or cond and cond not in c.constants:
        raise _Unsupported("scan outputs whose length depends on the input's values")
    if cond:
        made = {o: n for n in body.node for o in n.output}
        name = body.output[0].name
        while name in made and made[name].op_type == "Identity":
            name = made[name].input[0]
        constant = made.get(name)
        stays = name == body.input[1].name or (
            constant is not None
            and constant.op_type == "Constant"
            and bool(_fold_constant(c, constant, _attributes(constant))[0].all())
        )
        if not stays or not bool(c.constants[cond].reshape(-1)[0]):
            raise _Unsupported("scan outputs of a loop that may stop early")
    return int(c.constants[trip].reshape(-1)[0])


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
