"""The ONNX converter's core: the graph loaded with static shapes, folded at
load, checked node by node and handed to the mappers.

:class:`Converter` holds the tensors (types, shapes, constants, operands) and runs
the passes.  It reads two registries by operator name: :data:`FOLDERS` (filled by
:mod:`.folding`) and :data:`MAPPERS` (filled by the operator families of
:mod:`.ops`); :mod:`.convert` imports those, so both are full before any model
is converted.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..codes import FuseCode, OperandCode, OperationCode
from ..cpu.ops import arguments  # the limit on one tensor
from ..errors import BadDataError
from ..imported import ModelBuilder, Registry, UnsupportedModelError
from ..model import Model, OperandType

#: ONNX TensorProto element types nnburst can hold, as numpy dtypes.
DTYPES: dict[int, np.dtype[Any]] = {
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


class Unsupported(Exception):
    """One node's use that cannot be mapped (the message says which part)."""


def _narrow(values: np.ndarray, name: str) -> np.ndarray:
    """int64 → int32 (NNAPI has no 64-bit integers), refusing values that do not fit."""
    if values.dtype != np.int64:
        return values
    narrowed = values.astype(np.int32)
    if not np.array_equal(narrowed, values):
        raise BadDataError(f"tensor {name!r}: int64 values beyond int32")
    return narrowed


def axis_index(value: int, rank: int) -> int:
    """An axis (attribute or constant input) as 0 … rank − 1, negatives counted from
    the end; one outside [-rank, rank) is refused, not wrapped onto another axis."""
    if not -rank <= int(value) < rank:
        raise Unsupported(f"axis {int(value)} of a rank-{rank} tensor")
    return int(value) % rank


class Converter(ModelBuilder):
    """Builds one :class:`~nnburst.model.Model` from an ONNX graph."""

    def __init__(
        self, model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None
    ) -> None:
        model = _fix_input_shapes(model, dict(input_shapes or {}))
        _rewrite(model.graph)
        try:
            model = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        except Exception as exc:  # a graph ONNX itself cannot type
            raise BadDataError(f"ONNX shape inference failed: {exc}") from None
        self.onnx = model
        self.graph = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        super().__init__()
        self.constants: dict[str, np.ndarray] = {
            t.name: tensor_value(t) for t in self.graph.initializer
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
        #: int32 tensor operands and their shapes, for :meth:`add`
        self._int32: dict[int, tuple[int, ...]] = {}

    # -- tensors ---------------------------------------------------------------------------
    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.constants:
            return tuple(self.constants[name].shape)
        shape = self.types.get(name, (None, None))[1]
        if shape is None:
            raise Unsupported("a tensor whose shape depends on the input's values")
        return shape

    def dtype(self, name: str) -> np.dtype[Any]:
        if name in self.constants:
            return self.constants[name].dtype
        dtype = self.types.get(name, (None, None))[0]
        if name in self.containers:
            raise Unsupported(f"{name!r} is a sequence, map or optional, not a tensor")
        if dtype is None:
            raise Unsupported(f"tensor {name!r} has a type nnburst cannot hold")
        return dtype

    def operand_type(self, name: str) -> OperandType:
        return operand_type_of(self.dtype(name), self.shape(name))

    def operand(self, name: str) -> int:
        if name in self._operands:
            return self._operands[name]
        operand = self.model.add_operand(self.operand_type(name))
        if operand_dtype(self.dtype(name)) == np.int32:
            self._int32[operand] = self.shape(name) or (1,)
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
            raise Unsupported(f"a computed {what} (only a constant one maps)")
        return self.constants[name]

    def temporary(self, dtype: np.dtype[Any], shape: tuple[int, ...]) -> int:
        operand = self.model.add_operand(operand_type_of(dtype, shape))
        if operand_dtype(dtype) == np.int32:
            self._int32[operand] = shape or (1,)
        return operand

    def add(self, code: OperationCode, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        """An operation; int32 data through one that moves values without arithmetic
        but that NNAPI defines for floats only (RESHAPE, TRANSPOSE, CONCATENATION, ...)
        goes through it as two float32 halves, each exact: high = v floor-divided by
        2¹⁶, low = v − 2¹⁶·high; the moved halves are put back together in int32."""
        data = _FLOAT_ONLY_MOVES.get(code)
        if data is None or len(outputs) != 1 or outputs[0] not in self._int32:
            super().add(code, inputs, outputs)
            return
        positions = range(len(inputs) - 1) if data < 0 else range(data, data + 1)
        if not all(inputs[i] in self._int32 for i in positions):
            super().add(code, inputs, outputs)  # not int32 data: NNAPI's validation says
            return
        f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
        unit, none = self.ints([1 << 16]), self.i32(FuseCode.NONE)
        halves: list[list[int]] = [list(inputs), list(inputs)]
        for i in positions:
            shape = self._int32[inputs[i]]
            high = self.temporary(i32, shape)
            super().add(OperationCode.DIV, [inputs[i], unit, none], [high])
            back, low = self.temporary(i32, shape), self.temporary(i32, shape)
            super().add(OperationCode.MUL, [high, unit, none], [back])
            super().add(OperationCode.SUB, [inputs[i], back, none], [low])
            for half, value in zip(halves, (high, low)):
                half[i] = self.temporary(f32, shape)
                super().add(OperationCode.CAST, [value], [half[i]])
        target = self._int32[outputs[0]]
        moved = []
        for half in halves:
            as_float, as_int = self.temporary(f32, target), self.temporary(i32, target)
            super().add(code, half, [as_float])
            super().add(OperationCode.CAST, [as_float], [as_int])
            moved.append(as_int)
        scaled = self.temporary(i32, target)
        super().add(OperationCode.MUL, [moved[0], unit, none], [scaled])
        super().add(OperationCode.ADD, [scaled, moved[1], none], [outputs[0]])

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
                    MAPPERS[node.op_type](self, node, node_attributes(node))
                except Unsupported as exc:
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
            self._check_fold_size(node)
            try:
                results = fold(self, node, node_attributes(node))
            except (Unsupported, ArithmeticError, IndexError, TypeError, ValueError):
                continue  # numpy refusing the node's values: left to its mapper, or _check
            for name, value in zip(node.output, results):
                self.constants[name] = np.asarray(value)

    def _check_fold_size(self, node: onnx.NodeProto) -> None:
        """Refuse, before numpy allocates it, a folded tensor over the CPU driver's
        limit on one tensor: a 200-byte model can ask for Expand to [60000, 60000]."""
        elements = self._fold_elements(node)
        if elements is not None:
            check_constant_size(f"{node.op_type} {node.name or ', '.join(node.output)!r}", elements)

    def _fold_elements(self, node: onnx.NodeProto) -> int | None:
        """How many elements folding ``node`` makes: from its inputs for the
        operators that make more than they are given (a graph's value_info may
        claim any shape), else as shape inference says (None: unknown)."""
        known: list[np.ndarray] = [self.constants[n] for n in node.input if n in self.constants]

        def ints(k: np.ndarray) -> list[int]:  # a shape or repeats: a few values
            return [int(v) for v in k.reshape(-1)[:64]]

        try:
            if node.op_type == "ConstantOfShape" and known:
                return math.prod(ints(known[0]))
            if node.op_type == "Expand" and len(known) == 2:
                return math.prod(np.broadcast_shapes(known[0].shape, tuple(ints(known[1]))))
            if node.op_type == "Tile" and len(known) == 2:
                return known[0].size * math.prod(ints(known[1]))
            if node.op_type == "Range" and len(known) == 3:
                start, limit, delta = (float(k.reshape(-1)[0]) for k in known)
                return max(0, math.ceil((limit - start) / delta))
        except (ValueError, ZeroDivisionError, OverflowError, TypeError):
            return None  # the folder refuses these values itself
        shape = self.types.get(node.output[0], (None, None))[1] if node.output else None
        return math.prod(shape) if shape is not None and min(shape, default=0) >= 0 else None

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
                self.constants[t.name] = tensor_value(t)
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
        condition, branches = self.constants[node.input[0]], node_attributes(node)
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
                        "pass input_shapes={name: shape} (nnburst run: --input FILE.npy or "
                        "--input-shape NAME=D,D,...)"
                    )
        for d, value in zip(dims, wanted):
            d.Clear()
            d.dim_value = value
    for info in (*model.graph.value_info, *model.graph.output):  # -1 (as Paddle writes): unknown
        for d in info.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value < 0:
                d.Clear()
    for info in model.graph.output:  # a symbolic output shape says nothing inference cannot,
        dims = info.type.tensor_type.shape.dim  # and may have the wrong rank (ddddocr's)
        if any(not d.HasField("dim_value") for d in dims):
            info.type.tensor_type.ClearField("shape")
    return model


def _type_of(info: onnx.ValueInfoProto) -> tuple[np.dtype[Any] | None, tuple[int, ...] | None]:
    t = info.type.tensor_type
    dtype = DTYPES.get(t.elem_type)
    if not t.HasField("shape"):
        return dtype, None
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:  # unknown (or an inference slip)
            return dtype, None
        dims.append(int(d.dim_value))
    return dtype, tuple(dims)


def operand_type_of(dtype: np.dtype[Any], shape: tuple[int, ...]) -> OperandType:
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
        raise Unsupported(f"{dtype} tensors")
    return OperandType(byte, dims, 1.0, 0)


#: The operations that move values without arithmetic which NNAPI defines for floats
#: (and quantized) only, with the position of their data input (-1: every input but
#: the last, CONCATENATION's).  PAD is here for its zero fill only (zero halves).
_FLOAT_ONLY_MOVES = {
    OperationCode.RESHAPE: 0, OperationCode.TRANSPOSE: 0, OperationCode.SQUEEZE: 0,
    OperationCode.STRIDED_SLICE: 0, OperationCode.PAD: 0, OperationCode.CONCATENATION: -1,
    OperationCode.DEPTH_TO_SPACE: 0, OperationCode.SPACE_TO_DEPTH: 0,
    OperationCode.BATCH_TO_SPACE_ND: 0, OperationCode.SPACE_TO_BATCH_ND: 0,
}  # fmt: skip


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
     "Clip", "Identity", "Where", "Cast", "CastLike",
     # moves: the integers go through as they are (quantized at scale 1, zero point 0)
     "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Slice", "Split",
     "Gather", "Tile", "Expand", "DepthToSpace", "SpaceToDepth",
     # quantized ONNX (ops/quantization.py): its arithmetic reads the integers exactly
     "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "ConvInteger",
     "MatMulInteger", "QLinearConv", "QLinearMatMul")
)  # fmt: skip


def operand_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype an operand of ``dtype`` holds (NNAPI has no 64-bit types)."""
    return {np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.float64): np.dtype(np.float32)}.get(
        np.dtype(dtype), np.dtype(dtype)
    )


def node_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


#: Inputs that may be empty constants: Resize's roi and scales, a reduction's axes
#: (none: every axis), CastLike's example of the type.
_PLACEHOLDERS = {
    "Resize": (1, 2), "CastLike": (1,),
    **dict.fromkeys(("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                     "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                     "ReduceLogSumExp"), (1,)),
}  # fmt: skip


def check_constant_size(what: str, elements: int) -> None:
    """Refuse, before numpy allocates it, a constant the importer would make over
    the CPU driver's limit on one tensor (8-byte elements counted)."""
    if elements * 8 > arguments.MAX_TENSOR_BYTES:
        raise BadDataError(
            f"{what}: a constant of {elements} elements, over the "
            f"{arguments.MAX_TENSOR_BYTES}-byte limit on one tensor"
        )


def tensor_value(tensor: onnx.TensorProto) -> np.ndarray:
    """A tensor's values; one whose data does not fit its type and dimensions (or
    that has none) is bad data, not numpy's ValueError."""
    try:
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as exc:
        raise BadDataError(f"not a valid ONNX model: tensor {tensor.name!r}: {exc}") from None


def _check(c: Converter, node: onnx.NodeProto) -> str | None:
    if node.domain not in ("", "ai.onnx"):
        return f"{node.domain}.{node.op_type}"
    if node.op_type not in MAPPERS:  # (protobuf gives a non-UTF-8 name as bytes)
        return str(node.op_type) or "a node without an operator type"
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
        except Unsupported as exc:
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


# -- the registries: folders (folding.py) and mappers (ops/), by operator name ------------

Folder = Callable[[Converter, onnx.NodeProto, dict[str, Any]], list[np.ndarray]]
FOLDERS: Registry[Folder] = Registry()
folds = FOLDERS.maps


Mapper = Callable[[Converter, onnx.NodeProto, dict[str, Any]], None]
MAPPERS: Registry[Mapper] = Registry()
maps = MAPPERS.maps


# Nodes of another domain that are a standard operation in disguise (onnxruntime's
# com.microsoft.DynamicQuantizeLSTM), by "domain.op_type": each gives the standard
# nodes to put in its place, and may add initializers.  Rewritten before shape
# inference, which then types what they produce.
Rewrite = Callable[[onnx.GraphProto, onnx.NodeProto], list[onnx.NodeProto]]
REWRITES: Registry[Rewrite] = Registry()
rewrites = REWRITES.maps


def _rewrite(graph: onnx.GraphProto) -> None:
    if not any(f"{n.domain}.{n.op_type}" in REWRITES for n in graph.node):
        return
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        rewrite = REWRITES.get(f"{node.domain}.{node.op_type}")
        nodes += rewrite(graph, node) if rewrite is not None else [node]
    del graph.node[:]
    graph.node.extend(nodes)
