"""TFLite operators → NNAPI operations, the way an NNAPI delegate maps them.

Each builtin operator has one mapper in :data:`MAPPERS`.  A mapper reads the
operator's options, creates the scalar operands NNAPI wants (padding code,
strides, fused activation, ...) and adds one or more operations.  Operators
without a direct NNAPI equivalent are decomposed into ones that have
(LEAKY_RELU → PRELU, SPLIT_V → SLICEs, PACK → RESHAPEs + CONCATENATION).

Conversion is all or nothing: every operator is checked first, and a model
using anything nnburst cannot run fails with one error that lists every
unsupported operator and how often it occurs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..codes import FuseCode, OperandCode, OperationCode, PaddingCode
from ..errors import BadDataError
from ..imported import ModelBuilder, Registry, TensorInfo, UnsupportedModelError, Variable
from ..model import Model, OperandType
from .reader import FlatModel, Operator, Subgraph, Tensor

_FLOAT16_CONSTANTS_ONLY = "float16 tensors are supported as DEQUANTIZE'd constants (fp16 weights)"


# -- TFLite enums (schema values) -------------------------------------------------------------

_ACTIVATIONS = {0: FuseCode.NONE, 1: FuseCode.RELU, 2: FuseCode.RELU1, 3: FuseCode.RELU6}
_ACTIVATION_OPS = {"RELU": FuseCode.RELU, "RELU_N1_TO_1": FuseCode.RELU1, "RELU6": FuseCode.RELU6}
#: operators whose NNAPI operation has a fuse operand
_FUSABLE = frozenset(
    {"ADD", "SUB", "MUL", "DIV", "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV",
     "FULLY_CONNECTED", "AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D"}
)  # fmt: skip
_PADDING = {0: PaddingCode.SAME, 1: PaddingCode.VALID}


class Converter(ModelBuilder):
    """Builds one :class:`~nnburst.model.Model` from one subgraph; the subgraphs an
    IF or WHILE names become referenced models (converted once each)."""

    def __init__(
        self, flat: FlatModel, index: int = 0, models: dict[int, Model] | None = None
    ) -> None:
        self.flat = flat
        self.graph = flat.subgraphs[index]
        self._models = {} if models is None else models
        super().__init__()
        self._operands: dict[int, int] = {}
        #: tensors replaced by a float32 constant (a DEQUANTIZE of fp16 weights)
        self._folded: dict[int, np.ndarray] = {}
        #: operator index → the fuse code it takes over from the activation after it
        self._fuse_into: dict[int, FuseCode] = {}
        self._skip: set[int] = set()  # activations fused into their producer
        self._current = -1
        #: resource variables by name, and the variable each resource tensor names
        self.variables: dict[str, Variable] = {}
        self._resources: dict[int, Variable] = {}
        #: each variable's operand type: its initial value's (quantization included)
        self._variable_types: dict[str, OperandType] = {}
        #: variable tensors (a sequence LSTM's or RNN's state) by tensor index
        self._tensor_variables: dict[int, Variable] = {}

    # -- operands --------------------------------------------------------------------------
    def tensor(self, index: int) -> Tensor:
        if index < 0:  # the reader has checked the rest of the range
            where = f" by operator {self._current}" if self._current >= 0 else ""
            raise BadDataError(f"an omitted tensor (-1) where one is required{where}")
        return self.graph.tensors[index]

    def operand_type(self, t: Tensor, dtype: np.dtype[Any] | None = None) -> OperandType:
        dtype = dtype or t.dtype
        shape = t.shape or (1,)  # NNAPI has no rank-0 tensors: a TFLite scalar is [1]
        if dtype == np.float32:
            return OperandType(OperandCode.TENSOR_FLOAT32, shape)
        if dtype == np.float16:
            return OperandType(OperandCode.TENSOR_FLOAT16, shape)
        if dtype == np.bool_:
            return OperandType(OperandCode.TENSOR_BOOL8, shape)
        if dtype in (np.int32, np.int64):  # int64 constants are narrowed (see operand)
            scale = float(t.scales[0]) if t.scales is not None and not t.per_channel else 0.0
            return OperandType(OperandCode.TENSOR_INT32, shape, scale)
        if t.scales is None:
            raise BadDataError(f"tensor {t.name!r}: {dtype} without quantization parameters")
        if dtype == np.int8 and t.per_channel:
            return OperandType(OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, shape)
        scale, zero_point = float(t.scales[0]), int(t.zero_points[0])  # type: ignore[index]
        if dtype == np.uint8:
            return OperandType(OperandCode.TENSOR_QUANT8_ASYMM, shape, scale, zero_point)
        if dtype == np.int8:
            return OperandType(OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, shape, scale, zero_point)
        if dtype == np.int16:
            return OperandType(OperandCode.TENSOR_QUANT16_SYMM, shape, scale, zero_point)
        raise BadDataError(f"tensor {t.name!r}: no NNAPI operand type for {dtype}")

    def operand(self, index: int, operand_type: OperandType | None = None) -> int:
        """The operand for tensor ``index`` (created on first use; constants get their values)."""
        if index in self._operands:
            return self._operands[index]
        t = self.tensor(index)
        if t.variable and index not in self.graph.inputs:  # an input is the app's to carry
            return self._variable_tensor(index)
        values = self._folded.get(index, t.data)
        if values is not None and values.dtype == np.int64:
            narrowed = values.astype(np.int32)
            if not np.array_equal(narrowed, values):
                raise BadDataError(f"tensor {t.name!r}: int64 values beyond int32")
            values = narrowed
        operand_type = operand_type or self.operand_type(
            t, None if values is None else values.dtype
        )
        operand = self.model.add_operand(operand_type)
        if operand_type.code == OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            assert t.scales is not None
            self.model.set_operand_symm_per_channel_quant_params(
                operand, t.quantized_dimension, t.scales.astype(np.float32).tolist()
            )
        if values is not None:
            self.model.set_operand_value(operand, values.reshape(operand_type.dimensions or (1,)))
        self._operands[index] = operand
        return operand

    def optional(self, index: int) -> int:
        """The operand for an optional input: an omitted one (-1) is NNAPI's omitted
        operand (no value)."""
        if index >= 0:
            return self.operand(index)
        operand = self.model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, ()))
        self.model.set_operand_value(operand, None)
        return operand

    def _variable_tensor(self, index: int) -> int:
        """A variable tensor is state an operator updates in place, kept by LiteRT
        from one Invoke to the next and zero at first: here a variable carried by
        the runner, an extra model input (its value before the call)."""
        t = self.tensor(index)
        if t.dtype != np.float32:
            raise _Unsupported(f"a {t.type_name} variable tensor (float32 state only)")
        name = t.name or f"tensor {index}"
        if name in self.variables:
            name = f"{name} (tensor {index})"
        operand_type = self.operand_type(t)
        operand = self.model.add_operand(operand_type)
        variable = Variable(name, np.zeros(t.shape, np.float32), operand, operand)
        self.variables[name] = self._tensor_variables[index] = variable
        self._variable_types[name] = operand_type
        self._operands[index] = operand
        return operand

    def assign(self, index: int, operand: int) -> None:
        """Variable tensor ``index`` holds ``operand`` from here on (an in-place update):
        operators after this one read it, and it is the variable's value after the call."""
        self.operand(index)
        self._tensor_variables[index].current = self._operands[index] = operand

    def values(self, index: int, what: str) -> np.ndarray:
        """A constant input's values; a non-constant one is an unsupported use."""
        t = self.tensor(index)
        values = self._folded.get(index, t.data)
        if values is None:
            raise _Unsupported(f"a non-constant {what}")
        return values

    def named_subgraph(self, index: int) -> Subgraph:
        """Subgraph ``index``, which an IF, WHILE or CALL_ONCE names."""
        if not 0 < index < len(self.flat.subgraphs):
            raise BadDataError(f"a control-flow operator names subgraph {index}")
        return self.flat.subgraphs[index]

    def subgraph(self, index: int) -> int:
        """A MODEL operand for subgraph ``index`` (for IF and WHILE)."""
        self.named_subgraph(index)
        if index not in self._models:
            self._models[index] = Converter(self.flat, index, self._models).convert()
        operand = self.model.add_operand(OperandType(OperandCode.MODEL))
        self.model.set_operand_value_from_model(operand, self._models[index])
        return operand

    def condition(self, index: int) -> int:
        """An IF/WHILE condition as NNAPI wants it: TENSOR_BOOL8 of shape [1]."""
        t = self.tensor(index)
        if t.shape in ((), (1,)):
            return self.operand(index)
        if np.prod(t.shape) != 1:
            raise _Unsupported("a condition of more than one element")
        return self.reshape_boolean(self.operand(index), t.shape, (1,))

    # -- activations -----------------------------------------------------------------------
    def activation(self, options: Any) -> int:
        """The fuse-code operand for a TFLite fused activation.  LiteRT's kernels apply
        only NONE, RELU, RELU_N1_TO_1 and RELU6 (a fused TANH is silently ignored
        there), so anything else is refused rather than guessed."""
        code = options.FusedActivationFunction() if options is not None else 0
        if code not in _ACTIVATIONS:
            raise _Unsupported(f"fused activation {code}")
        return self.i32(self._fuse_into.get(self._current, _ACTIVATIONS[code]))

    def _plan_fusions(self) -> None:
        """A float RELU/RELU6/RELU_N1_TO_1 whose input comes from an operation with a
        fuse operand (and goes nowhere else) becomes that operation's fused
        activation: one pass less over the tensor, as a delegate would do."""
        producer = {o: op for op in self.graph.operators for o in op.outputs}
        readers = Counter(i for op in self.graph.operators for i in op.inputs if i >= 0)
        for op in self.graph.operators:
            fuse = _ACTIVATION_OPS.get(op.name)
            if fuse is None or not op.inputs:
                continue
            source = producer.get(op.inputs[0])
            if source is None or source.name not in _FUSABLE or readers[op.inputs[0]] != 1:
                continue
            t = self.tensor(op.inputs[0])
            options = source.options
            own = options.FusedActivationFunction() if options is not None else 0
            if t.dtype != np.float32 or own != 0 or op.inputs[0] in self.graph.outputs:
                continue
            self._fuse_into[source.index] = fuse
            self._skip.add(op.index)
            self._operands[op.inputs[0]] = self.operand(op.outputs[0])

    # -- the graph -------------------------------------------------------------------------
    def convert(self) -> Model:
        # The main subgraph checks every subgraph, so one error lists everything.
        if self.graph is self.flat.subgraphs[0]:
            unsupported = sum(
                (_unsupported(g, g is self.graph) for g in self.flat.subgraphs), Counter()
            )
            if unsupported:
                raise UnsupportedModelError(unsupported)
        if self.graph is self.flat.subgraphs[0]:
            try:
                self.declare_variables()
            except _Unsupported as exc:
                raise UnsupportedModelError(Counter({f"CALL_ONCE ({exc})": 1})) from None
        self._fold_constant_weights()
        self._plan_fusions()
        # Every operator is mapped; one that cannot be (an option or a use the table
        # cannot take) is counted and the rest still mapped (the half-built model is
        # dropped), so one error lists all.
        unmapped: Counter[str] = Counter()
        for op in self.graph.operators:
            if op.index in self._skip or (
                op.outputs and all(o in self._folded for o in op.outputs)
            ):
                continue
            self._current = op.index
            try:
                MAPPERS[op.name](self, op)
            except _Unsupported as exc:
                unmapped[f"{op.name} ({exc})"] += 1
            except AttributeError:  # an option read from a missing table
                if op.options is not None:
                    raise
                unmapped[f"{op.name} (no options table)"] += 1
            except IndexError as exc:  # an input, output or dimension the mapper reads
                raise BadDataError(
                    f"operator {op.index} ({op.name}): too few inputs, outputs or dimensions"
                ) from exc
        self._current = -1
        if unmapped:
            raise UnsupportedModelError(unmapped)
        try:
            inputs = [self.operand(i) for i in self.graph.inputs]
            outputs: list[int] = []
            for i in self.graph.outputs:
                outputs.append(self._output(i, outputs))
        except _Unsupported as exc:  # a model output that is a non-float32 variable tensor
            raise UnsupportedModelError(Counter({str(exc): 1})) from None
        for variable in self.used_variables():
            inputs.append(variable.input)
            outputs.append(self._state_output(variable, outputs))
        self.model.identify_inputs_and_outputs(inputs, outputs)
        return self.finish()

    def _state_output(self, variable: Variable, outputs: list[int]) -> int:
        """A variable's value after the call: a copy when the call did not assign it,
        or assigned it a value that is already a model output."""
        if variable.current != variable.input and variable.current not in outputs:
            return variable.current
        return self.copy(variable.current, self._variable_types[variable.name])

    def declare_variables(self) -> None:
        """Find the variables CALL_ONCE initializes: their names and initial values."""
        for op in self.graph.operators:
            if op.name != "CALL_ONCE":
                continue
            init = self.named_subgraph(
                op.options.InitSubgraphIndex() if op.options is not None else 0
            )
            handles = {
                o.outputs[0]: _variable_name(o)
                for o in init.operators
                if o.name == "VAR_HANDLE" and o.outputs
            }
            for o in init.operators:
                if o.name != "ASSIGN_VARIABLE":
                    continue
                if len(o.inputs) != 2 or min(o.inputs) < 0:
                    raise BadDataError(f"an ASSIGN_VARIABLE of {len(o.inputs)} inputs")
                name = handles.get(o.inputs[0])
                initial = init.tensors[o.inputs[1]]
                if name is None or initial.data is None:
                    raise _Unsupported("a variable initialized by a computation, not a constant")
                self.variables[name] = Variable(name, np.array(initial.data))
                self._variable_types[name] = self.operand_type(initial)

    def used_variables(self) -> list[Variable]:
        """The variables the main subgraph reads or assigns, in a fixed order."""
        return [v for v in self.variables.values() if v.input >= 0]

    def variable(self, resource: int) -> Variable:
        variable = self._resources.get(resource)
        if variable is None:
            raise _Unsupported("a resource that no VAR_HANDLE of the main subgraph names")
        if variable.input < 0:
            variable.input = variable.current = self.model.add_operand(
                self._variable_types[variable.name]
            )
        return variable

    def _output(self, index: int, taken: list[int]) -> int:
        """An output operand; one that is also an input (a variable tensor's operand
        may be its value before the call), a constant (a branch that passes a value
        through) or an output already is copied, since NNAPI outputs are distinct
        computed operands."""
        operand = self.operand(index)
        t = self.tensor(index)
        passed = index in self.graph.inputs or t.data is not None or t.variable
        if not passed and operand not in taken:
            return operand
        return self.copy(operand, self.operand_type(t))

    def _fold_constant_weights(self) -> None:
        """What a delegate computes once from constants is computed here once too: a
        DENSIFY of sparse weights (the reader has already expanded them) becomes its
        dense constant, and a DEQUANTIZE of fp16 weights a float32 constant."""
        for op in self.graph.operators:  # in order: a DEQUANTIZE may read a DENSIFY
            if op.name not in ("DENSIFY", "DEQUANTIZE") or not op.inputs or not op.outputs:
                continue  # a malformed one is left to its mapper
            source = self.tensor(op.inputs[0])
            values = self._folded.get(op.inputs[0], source.data)
            if values is None:
                continue
            if op.name == "DENSIFY":
                self._folded[op.outputs[0]] = values
            elif values.dtype == np.float16:
                self._folded[op.outputs[0]] = values.astype(np.float32)


def _unsupported(graph: Subgraph, main: bool) -> Counter[str]:
    """What in ``graph`` (the main subgraph or not) cannot be converted, and how often."""
    found: Counter[str] = Counter()
    for op in graph.operators:
        if op.name not in MAPPERS:
            found[op.name] += 1
            continue
        for i in op.inputs:
            t = graph.tensors[i] if i >= 0 else None
            if (
                t is not None
                and t.dtype == np.float16
                and t.data is None
                and op.name != "DEQUANTIZE"
            ):
                found[f"{op.name} on float16 activations ({_FLOAT16_CONSTANTS_ONLY})"] += 1
                break
    for t in graph.tensors:
        if t.dtype is None and t.type_name != "RESOURCE":
            found[f"{t.type_name} tensors"] += 1
        if t.variable and (not main or t.data is not None):
            found["a variable tensor that has data or is not in the main subgraph"] += 1
    return found


class _Unsupported(Exception):
    """One operator's use that cannot be mapped (the message says which part)."""


# -- mappers ----------------------------------------------------------------------------------

Mapper = Callable[[Converter, Operator], None]
MAPPERS: Registry[Mapper] = Registry()
maps = MAPPERS.maps


def _bias(c: Converter, op: Operator, input_index: int, filter_index: int, channels: int) -> int:
    """The bias operand: TFLite may omit it; NNAPI wants one, with the scale its rules derive."""
    x, w = c.tensor(input_index), c.tensor(filter_index)
    bias = op.inputs[2] if len(op.inputs) > 2 else -1
    if x.dtype == np.float32:
        if bias >= 0:
            return c.operand(bias)
        return c.constant(OperandCode.TENSOR_FLOAT32, np.zeros(channels, np.float32), (channels,))
    values = c.values(bias, "bias").astype(np.int32) if bias >= 0 else np.zeros(channels, np.int32)
    # Per-channel filters: scale 0 (NNAPI derives each channel's); per-tensor: in × filter.
    scale = 0.0 if w.per_channel else float(x.scales[0] * w.scales[0])  # type: ignore[index]
    operand = c.model.add_operand(OperandType(OperandCode.TENSOR_INT32, (channels,), scale))
    c.model.set_operand_value(operand, values)
    return operand


def _conv_tail(c: Converter, o: Any) -> list[int]:
    if o.Padding() not in _PADDING:
        raise _Unsupported(f"padding {o.Padding()}")
    return [c.i32(_PADDING[o.Padding()]), c.i32(o.StrideW()), c.i32(o.StrideH())]


def _dilations(c: Converter, o: Any) -> list[int]:
    return [c.boolean(False), c.i32(o.DilationWFactor()), c.i32(o.DilationHFactor())]


@maps("DENSIFY")
def _densify(c: Converter, op: Operator) -> None:
    # A DENSIFY of a constant is folded before mapping; nothing else has sparse data.
    raise _Unsupported("an input that is not a sparse constant")


@maps("CONV_2D")
def _conv(c: Converter, op: Operator) -> None:
    o = op.options
    channels = c.tensor(op.inputs[1]).shape[0]
    fuse, out = c.activation(o), c.operand(op.outputs[0])
    inputs = [c.operand(op.inputs[0]), c.operand(op.inputs[1])]
    inputs += [_bias(c, op, op.inputs[0], op.inputs[1], channels), *_conv_tail(c, o), fuse]
    c.add(OperationCode.CONV_2D, [*inputs, *_dilations(c, o)], [out])


@maps("DEPTHWISE_CONV_2D")
def _depthwise(c: Converter, op: Operator) -> None:
    o = op.options
    filt = c.tensor(op.inputs[1])
    channels = filt.shape[3]
    multiplier = max(1, channels // max(1, c.tensor(op.inputs[0]).shape[3]))
    fuse, out = c.activation(o), c.operand(op.outputs[0])
    inputs = [c.operand(op.inputs[0]), c.operand(op.inputs[1])]
    inputs += [_bias(c, op, op.inputs[0], op.inputs[1], channels), *_conv_tail(c, o)]
    inputs += [c.i32(multiplier), fuse, *_dilations(c, o)]
    c.add(OperationCode.DEPTHWISE_CONV_2D, inputs, [out])


@maps("TRANSPOSE_CONV")
def _transpose_conv(c: Converter, op: Operator) -> None:
    o = op.options
    shape, weights, x = op.inputs[:3]
    channels = c.tensor(weights).shape[0]
    bias_op = Operator(
        op.index, op.name, [x, weights, op.inputs[3] if len(op.inputs) > 3 else -1], []
    )
    fuse, out = c.activation(o), c.operand(op.outputs[0])
    inputs = [c.operand(x), c.operand(weights), _bias(c, bias_op, x, weights, channels)]
    inputs += [c.ints(c.values(shape, "output shape").tolist()), *_conv_tail(c, o), fuse]
    c.add(OperationCode.TRANSPOSE_CONV_2D, [*inputs, c.boolean(False)], [out])


@maps("FULLY_CONNECTED")
def _fully_connected(c: Converter, op: Operator) -> None:
    o = op.options
    if o is not None and o.WeightsFormat() != 0:
        raise _Unsupported("shuffled weights")
    units = c.tensor(op.inputs[1]).shape[0]
    result = c.tensor(op.outputs[0])
    fuse, out = c.activation(o), c.operand(op.outputs[0])
    x = c.operand(op.inputs[0])
    inputs = [x, c.operand(op.inputs[1]), _bias(c, op, op.inputs[0], op.inputs[1], units), fuse]
    if len(result.shape) == 2:
        c.add(OperationCode.FULLY_CONNECTED, inputs, [out])
        return
    # keep_num_dims: NNAPI's result is [batch, units]; reshape it to the declared shape.
    flat = c.model.add_operand(
        OperandType(c.operand_type(result).code, (int(np.prod(result.shape[:-1])), units),
                    c.operand_type(result).scale, c.operand_type(result).zero_point)
    )  # fmt: skip
    c.add(OperationCode.FULLY_CONNECTED, inputs, [flat])
    c.add(OperationCode.RESHAPE, [flat, c.ints(result.shape)], [out])


def _binary(code: OperationCode) -> Mapper:
    def mapper(c: Converter, op: Operator) -> None:
        fuse, out = c.activation(op.options), c.operand(op.outputs[0])
        c.add(code, [c.operand(op.inputs[0]), c.operand(op.inputs[1]), fuse], [out])

    return mapper


for _name, _code in (("ADD", OperationCode.ADD), ("SUB", OperationCode.SUB),
                     ("MUL", OperationCode.MUL), ("DIV", OperationCode.DIV)):  # fmt: skip
    maps(_name)(_binary(_code))


def _pool(code: OperationCode) -> Mapper:
    def mapper(c: Converter, op: Operator) -> None:
        o = op.options
        fuse, out = c.activation(o), c.operand(op.outputs[0])
        inputs = [c.operand(op.inputs[0]), *_conv_tail(c, o)]
        c.add(code, [*inputs, c.i32(o.FilterWidth()), c.i32(o.FilterHeight()), fuse], [out])

    return mapper


maps("AVERAGE_POOL_2D")(_pool(OperationCode.AVERAGE_POOL_2D))
maps("MAX_POOL_2D")(_pool(OperationCode.MAX_POOL_2D))
maps("L2_POOL_2D")(_pool(OperationCode.L2_POOL_2D))


def _unary(code: OperationCode) -> Mapper:
    def mapper(c: Converter, op: Operator) -> None:
        c.add(code, [c.operand(op.inputs[0])], [c.operand(op.outputs[0])])

    return mapper


for _name, _code in (
    ("LOGISTIC", OperationCode.LOGISTIC), ("TANH", OperationCode.TANH),
    ("RELU", OperationCode.RELU), ("RELU6", OperationCode.RELU6),
    ("RELU_N1_TO_1", OperationCode.RELU1), ("EXP", OperationCode.EXP),
    ("LOG", OperationCode.LOG), ("SQRT", OperationCode.SQRT), ("RSQRT", OperationCode.RSQRT),
    ("ABS", OperationCode.ABS), ("NEG", OperationCode.NEG), ("FLOOR", OperationCode.FLOOR),
    ("SIN", OperationCode.SIN), ("HARD_SWISH", OperationCode.HARD_SWISH),
    ("LOGICAL_NOT", OperationCode.LOGICAL_NOT),
    ("DEQUANTIZE", OperationCode.DEQUANTIZE), ("CAST", OperationCode.CAST),
    ("L2_NORMALIZATION", OperationCode.L2_NORMALIZATION),
):  # fmt: skip
    maps(_name)(_unary(_code))


@maps("QUANTIZE")
def _quantize(c: Converter, op: Operator) -> None:
    """A QUANTIZE of quantized values requantizes (int8 → uint8, a new scale); NNAPI's
    QUANTIZE takes floats only, so it goes through float32 with a DEQUANTIZE."""
    x = c.tensor(op.inputs[0])
    source = c.operand(op.inputs[0])
    if x.dtype not in (np.float32, np.float16):
        floats = c.model.add_operand(c.operand_type(x, np.dtype(np.float32)))
        c.add(OperationCode.DEQUANTIZE, [source], [floats])
        source = floats
    c.add(OperationCode.QUANTIZE, [source], [c.operand(op.outputs[0])])


def _plain_binary(code: OperationCode) -> Mapper:
    def mapper(c: Converter, op: Operator) -> None:
        inputs = [c.operand(op.inputs[0]), c.operand(op.inputs[1])]
        c.add(code, inputs, [c.operand(op.outputs[0])])

    return mapper


for _name, _code in (
    ("MAXIMUM", OperationCode.MAXIMUM), ("MINIMUM", OperationCode.MINIMUM),
    ("PRELU", OperationCode.PRELU), ("POW", OperationCode.POW),
    ("EQUAL", OperationCode.EQUAL), ("NOT_EQUAL", OperationCode.NOT_EQUAL),
    ("LESS", OperationCode.LESS), ("LESS_EQUAL", OperationCode.LESS_EQUAL),
    ("GREATER", OperationCode.GREATER), ("GREATER_EQUAL", OperationCode.GREATER_EQUAL),
    ("LOGICAL_AND", OperationCode.LOGICAL_AND), ("LOGICAL_OR", OperationCode.LOGICAL_OR),
):  # fmt: skip
    maps(_name)(_plain_binary(_code))


@maps("LEAKY_RELU")
def _leaky_relu(c: Converter, op: Operator) -> None:
    """PRELU with a one-element alpha (broadcast), in the input's type."""
    x = c.tensor(op.inputs[0])
    alpha = op.options.Alpha()
    if x.dtype == np.float32:
        slope = c.constant(OperandCode.TENSOR_FLOAT32, np.array([alpha], np.float32), (1,))
    else:  # quantized: alpha as a quantized value of the input's type
        scale = abs(alpha) / 127 if alpha else 1.0
        code = c.operand_type(x).code
        offset = 0 if code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED else 128
        q = np.array([round(alpha / scale) + offset], x.dtype)
        slope = c.model.add_operand(OperandType(code, (1,), scale, offset))
        c.model.set_operand_value(slope, q)
    c.add(OperationCode.PRELU, [c.operand(op.inputs[0]), slope], [c.operand(op.outputs[0])])


@maps("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
def _reshape(c: Converter, op: Operator) -> None:
    """Every shape is static in a converted model: the target is the output's shape."""
    shape = c.tensor(op.outputs[0]).shape or (1,)
    x, out = c.operand(op.inputs[0]), c.operand(op.outputs[0])
    if c.tensor(op.inputs[0]).dtype == np.bool_:
        if np.prod(c.tensor(op.inputs[0]).shape) != 1:
            raise _Unsupported("a boolean tensor of more than one element")
        c.reshape_boolean(x, c.tensor(op.inputs[0]).shape, shape, out)
        return
    c.add(OperationCode.RESHAPE, [x, c.ints(shape)], [out])


@maps("SOFTMAX")
def _softmax(c: Converter, op: Operator) -> None:
    beta = op.options.Beta() if op.options is not None else 1.0
    c.add(OperationCode.SOFTMAX, [c.operand(op.inputs[0]), c.f32(beta)], [c.operand(op.outputs[0])])


@maps("LOG_SOFTMAX")
def _log_softmax(c: Converter, op: Operator) -> None:
    inputs = [c.operand(op.inputs[0]), c.f32(1.0), c.i32(-1)]
    c.add(OperationCode.LOG_SOFTMAX, inputs, [c.operand(op.outputs[0])])


@maps("CONCATENATION")
def _concatenation(c: Converter, op: Operator) -> None:
    o = op.options
    rank = len(c.tensor(op.outputs[0]).shape)
    axis = o.Axis() % rank if rank else 0
    if o is not None and o.FusedActivationFunction():
        raise _Unsupported("a fused activation (LiteRT's kernel ignores it)")
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


def _axes(c: Converter, index: int, rank: int) -> list[int]:
    return sorted({int(a) % rank for a in c.values(index, "axis").reshape(-1)})


@maps("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY")
def _reduce(c: Converter, op: Operator) -> None:
    x = c.tensor(op.inputs[0])
    axes = c.ints(_axes(c, op.inputs[1], len(x.shape)))
    keep = bool(op.options.KeepDims()) if op.options is not None else False
    out = c.operand(op.outputs[0])
    target = out
    if not keep and not c.tensor(op.outputs[0]).shape:
        # Every axis reduced to a TFLite scalar: NNAPI's rank-0 result would not
        # match the [1] operand, so keep the axes and reshape to [1].
        keep = True
        kept = (1,) * len(x.shape)
        target = c.model.add_operand(OperandType(c.operand_type(x).code, kept,
                                                 c.operand_type(x).scale, c.operand_type(x).zero_point))  # fmt: skip
    code = {
        "MEAN": OperationCode.MEAN, "SUM": OperationCode.REDUCE_SUM,
        "REDUCE_MAX": OperationCode.REDUCE_MAX, "REDUCE_MIN": OperationCode.REDUCE_MIN,
        "REDUCE_PROD": OperationCode.REDUCE_PROD, "REDUCE_ANY": OperationCode.REDUCE_ANY,
    }[op.name]  # fmt: skip
    flag = c.i32(int(keep)) if op.name == "MEAN" else c.boolean(keep)
    c.add(code, [c.operand(op.inputs[0]), axes, flag], [target])
    if target != out:
        c.add(OperationCode.RESHAPE, [target, c.ints([1])], [out])


@maps("TRANSPOSE")
def _transpose(c: Converter, op: Operator) -> None:
    perm = c.values(op.inputs[1], "permutation").astype(np.int32)
    inputs = [c.operand(op.inputs[0]), c.ints(perm.tolist())]
    c.add(OperationCode.TRANSPOSE, inputs, [c.operand(op.outputs[0])])


@maps("STRIDED_SLICE")
def _strided_slice(c: Converter, op: Operator) -> None:
    o = op.options
    if o.EllipsisMask() or o.NewAxisMask() or (hasattr(o, "Offset") and o.Offset()):
        raise _Unsupported("ellipsis, new-axis or offset masks")
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


def _resize(code: OperationCode) -> Mapper:
    def mapper(c: Converter, op: Operator) -> None:
        height, width = (int(v) for v in c.values(op.inputs[1], "size").reshape(-1))
        o = op.options
        flags = [c.boolean(bool(o.AlignCorners())), c.boolean(bool(o.HalfPixelCenters()))]
        inputs = [c.operand(op.inputs[0]), c.i32(width), c.i32(height), c.boolean(False), *flags]
        c.add(code, inputs, [c.operand(op.outputs[0])])

    return mapper


maps("RESIZE_BILINEAR")(_resize(OperationCode.RESIZE_BILINEAR))
maps("RESIZE_NEAREST_NEIGHBOR")(_resize(OperationCode.RESIZE_NEAREST_NEIGHBOR))


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


@maps("ARG_MAX", "ARG_MIN")
def _arg(c: Converter, op: Operator) -> None:
    rank = len(c.tensor(op.inputs[0]).shape)
    (axis,) = _axes(c, op.inputs[1], rank)
    out = c.operand(
        op.outputs[0], OperandType(OperandCode.TENSOR_INT32, c.tensor(op.outputs[0]).shape)
    )
    code = OperationCode.ARGMAX if op.name == "ARG_MAX" else OperationCode.ARGMIN
    c.add(code, [c.operand(op.inputs[0]), c.i32(axis)], [out])


@maps("SPLIT")
def _split(c: Converter, op: Operator) -> None:
    x = op.inputs[1]
    rank = len(c.tensor(x).shape)
    (axis,) = _axes(c, op.inputs[0], rank)
    inputs = [c.operand(x), c.i32(axis), c.i32(len(op.outputs))]
    c.add(OperationCode.SPLIT, inputs, [c.operand(o) for o in op.outputs])


@maps("SPLIT_V")
def _split_v(c: Converter, op: Operator) -> None:
    """One SLICE per output: NNAPI's SPLIT cuts equal parts only."""
    x = c.tensor(op.inputs[0])
    (axis,) = _axes(c, op.inputs[2], len(x.shape))
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
    """Each input reshaped to have the new axis, then one CONCATENATION."""
    out = c.tensor(op.outputs[0])
    axis = op.options.Axis() % len(out.shape)
    pieces = []
    for i in op.inputs:
        t = c.tensor(i)
        shape = (*t.shape[:axis], 1, *t.shape[axis:])
        piece = c.model.add_operand(
            OperandType(
                c.operand_type(t).code, shape, c.operand_type(t).scale, c.operand_type(t).zero_point
            )
        )
        c.add(OperationCode.RESHAPE, [c.operand(i), c.ints(shape)], [piece])
        pieces.append(piece)
    c.add(OperationCode.CONCATENATION, [*pieces, c.i32(axis)], [c.operand(op.outputs[0])])


@maps("TILE")
def _tile(c: Converter, op: Operator) -> None:
    inputs = [c.operand(op.inputs[0]), c.operand(op.inputs[1])]
    c.add(OperationCode.TILE, inputs, [c.operand(op.outputs[0])])


@maps("SELECT", "SELECT_V2")
def _select(c: Converter, op: Operator) -> None:
    out = c.tensor(op.outputs[0])
    inputs = []
    for i in op.inputs:
        t = c.tensor(i)
        if t.shape == out.shape:
            inputs.append(c.operand(i))
            continue
        # SELECT_V2 broadcasts; NNAPI's SELECT does not: tile the input to the output's shape.
        padded = (1,) * (len(out.shape) - len(t.shape)) + t.shape
        reshaped = c.model.add_operand(OperandType(c.operand_type(t).code, padded,
                                                   c.operand_type(t).scale, c.operand_type(t).zero_point))  # fmt: skip
        c.add(OperationCode.RESHAPE, [c.operand(i), c.ints(padded)], [reshaped])
        multiples = [o // p for o, p in zip(out.shape, padded)]
        tiled = c.model.add_operand(OperandType(c.operand_type(t).code, out.shape,
                                                c.operand_type(t).scale, c.operand_type(t).zero_point))  # fmt: skip
        c.add(OperationCode.TILE, [reshaped, c.ints(multiples)], [tiled])
        inputs.append(tiled)
    c.add(OperationCode.SELECT, inputs, [c.operand(op.outputs[0])])


@maps("BATCH_MATMUL")
def _batch_matmul(c: Converter, op: Operator) -> None:
    """x @ W with a constant W (NNAPI 1.3 has no BATCH_MATMUL): FULLY_CONNECTED
    over x's rows, between two RESHAPEs."""
    o = op.options
    x, out = c.tensor(op.inputs[0]), c.tensor(op.outputs[0])
    if o is not None and o.AdjX():
        raise _Unsupported("adj_x")
    w = c.values(op.inputs[1], "right-hand side (only a constant one maps to FULLY_CONNECTED)")
    if w.ndim < 2 or any(d != 1 for d in w.shape[:-2]):
        raise _Unsupported("a right-hand side that is not one matrix")
    w2 = w.reshape(w.shape[-2], w.shape[-1])
    weights = w2 if o is not None and o.AdjY() else w2.T  # FULLY_CONNECTED wants [units, depth]
    if x.dtype != np.float32:
        raise _Unsupported(f"{x.dtype} operands")
    units, depth = int(weights.shape[0]), int(weights.shape[1])
    rows = int(np.prod(x.shape[:-1]))
    flat_x = c.model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (rows, depth)))
    c.add(OperationCode.RESHAPE, [c.operand(op.inputs[0]), c.ints((rows, depth))], [flat_x])
    w_operand = c.constant(
        OperandCode.TENSOR_FLOAT32, np.ascontiguousarray(weights, np.float32), (units, depth)
    )
    bias = c.constant(OperandCode.TENSOR_FLOAT32, np.zeros(units, np.float32), (units,))
    flat_out = c.model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (rows, units)))
    c.add(
        OperationCode.FULLY_CONNECTED, [flat_x, w_operand, bias, c.i32(FuseCode.NONE)], [flat_out]
    )
    c.add(OperationCode.RESHAPE, [flat_out, c.ints(out.shape or (1,))], [c.operand(op.outputs[0])])


@maps("IF")
def _if(c: Converter, op: Operator) -> None:
    o = op.options
    inputs = [
        c.condition(op.inputs[0]),
        c.subgraph(o.ThenSubgraphIndex()),
        c.subgraph(o.ElseSubgraphIndex()),
    ]
    inputs += [c.operand(i) for i in op.inputs[1:]]
    c.add(OperationCode.IF, inputs, [c.operand(i) for i in op.outputs])


@maps("WHILE")
def _while(c: Converter, op: Operator) -> None:
    """Every TFLite loop variable is loop-carried: the body returns them all."""
    o = op.options
    cond = c.named_subgraph(o.CondSubgraphIndex())
    if len(cond.outputs) != 1 or cond.tensors[cond.outputs[0]].shape not in ((), (1,)):
        raise _Unsupported("a condition that is not one boolean")
    inputs = [c.subgraph(o.CondSubgraphIndex()), c.subgraph(o.BodySubgraphIndex())]
    inputs += [c.operand(i) for i in op.inputs]
    c.add(OperationCode.WHILE, inputs, [c.operand(i) for i in op.outputs])


def _variable_name(op: Operator) -> str:
    o = op.options
    container = (o.Container() or b"").decode() if o is not None else ""
    shared = (o.SharedName() or b"").decode() if o is not None else ""
    return f"{container}/{shared}" if container else shared


@maps("CALL_ONCE")
def _call_once(c: Converter, op: Operator) -> None:
    """Its initialization is the variables' initial values (``declare_variables``)."""


@maps("VAR_HANDLE")
def _var_handle(c: Converter, op: Operator) -> None:
    name = _variable_name(op)
    if c.graph is not c.flat.subgraphs[0] or name not in c.variables:
        raise _Unsupported(f"variable {name!r} outside the main subgraph or never initialized")
    c._resources[op.outputs[0]] = c.variables[name]


@maps("READ_VARIABLE")
def _read_variable(c: Converter, op: Operator) -> None:
    """The read value is the variable's latest operand: no operation at all."""
    c._operands[op.outputs[0]] = c.variable(op.inputs[0]).current


@maps("ASSIGN_VARIABLE")
def _assign_variable(c: Converter, op: Operator) -> None:
    c.variable(op.inputs[0]).current = c.operand(op.inputs[1])


# -- recurrent layers: NNAPI's sequence operations, state in variable tensors ----------------

#: TFLite activations an LSTM cell takes; NNAPI's LSTM codes are TFLite's own (1 relu,
#: 2 relu1, 3 relu6, 4 tanh).  SIGN_BIT (5) has no NNAPI equivalent, and with NONE (0)
#: LiteRT's kernel leaves the cell's output activation unwritten (a stale scratch buffer).
_LSTM_ACTIVATIONS = frozenset({1, 2, 3, 4})
_NONE, _TANH = 0, 4


def _float_layer(c: Converter, op: Operator, what: str, count: int) -> tuple[Any, list[int]]:
    """The options of a float32 recurrent layer and its ``count`` inputs, trailing
    optional ones (-1) filled in.  A hybrid layer (int8 weights, float input) or
    an integer one computes with quantized arithmetic that NNAPI's float sequence
    operations do not reproduce, so those are refused."""
    if len(op.inputs) > count:
        raise BadDataError(
            f"operator {op.index} ({op.name}): {len(op.inputs)} inputs, {count} at most"
        )
    for i in op.inputs:
        if i >= 0 and c.tensor(i).dtype != np.float32:
            raise _Unsupported(f"{c.tensor(i).type_name} tensors (a hybrid or integer {what})")
    return op.options, op.inputs + [-1] * (count - len(op.inputs))


def _recurrent(
    c: Converter,
    op: Operator,
    code: OperationCode,
    operands: list[int],
    sequences: int,
    states: Sequence[int],
) -> None:
    """Add the layer's operation: its outputs are the first ``sequences`` of the
    operator's, then a new operand per state input (variable tensor), which holds
    that variable's value from here on.  LiteRT keeps state only in variable tensors."""
    for i in states:
        if i < 0 or not c.tensor(i).variable or i in c.graph.inputs:
            raise _Unsupported("a state input that is not a variable tensor of its own")
    if len(op.outputs) < sequences:
        raise BadDataError(
            f"operator {op.index} ({op.name}): {len(op.outputs)} outputs of {sequences}"
        )
    after = [c.model.add_operand(c.operand_type(c.tensor(i))) for i in states]
    c.add(code, operands, [*(c.operand(i) for i in op.outputs[:sequences]), *after])
    for index, operand in zip(states, after):
        c.assign(index, operand)


def _lstm_options(c: Converter, o: Any) -> list[int]:
    """Activation, cell clip and projection clip; LiteRT clips only above 0, NNAPI
    wants 0 for no clipping."""
    code = o.FusedActivationFunction()
    if code == _NONE:
        raise _Unsupported("activation NONE (LiteRT's LSTM computes no defined result with it)")
    if code not in _LSTM_ACTIVATIONS:
        raise _Unsupported(f"fused activation {code}")
    clips = [c.f32(max(0.0, o.CellClip())), c.f32(max(0.0, o.ProjClip()))]
    return [c.i32(code), *clips]


@maps("UNIDIRECTIONAL_SEQUENCE_LSTM")
def _sequence_lstm(c: Converter, op: Operator) -> None:
    """TFLite's 24 inputs are NNAPI's 28 less the four scalars, which come from the
    options (the layer-norm coefficients come last in both).  The two state
    outputs are the variable tensors' new values."""
    o, inputs = _float_layer(c, op, "LSTM", 24)
    if hasattr(o, "DiagonalRecurrentTensors") and o.DiagonalRecurrentTensors():
        raise _Unsupported("diagonal recurrent weights")
    operands = [c.optional(i) for i in inputs[:20]]
    operands += [*_lstm_options(c, o), c.boolean(bool(o.TimeMajor()))]
    operands += [c.optional(i) for i in inputs[20:24]]
    _recurrent(c, op, OperationCode.UNIDIRECTIONAL_SEQUENCE_LSTM, operands, 1, inputs[18:20])


@maps("BIDIRECTIONAL_SEQUENCE_LSTM")
def _bidirectional_lstm(c: Converter, op: Operator) -> None:
    """TFLite's 48 inputs are NNAPI's first 48 (no layer norm: its 8 coefficients
    are omitted); the four state outputs follow the one or two sequence outputs."""
    o, inputs = _float_layer(c, op, "LSTM", 48)
    if o.MergeOutputs() and not o.TimeMajor():
        # Seen on LiteRT 2.3: every batch after the first gets other rows than
        # the same layer computes with separate outputs.
        raise _Unsupported("merged outputs of batch-major sequences (LiteRT's differ)")
    operands = [c.optional(i) for i in inputs]
    operands += [*_lstm_options(c, o), c.boolean(bool(o.MergeOutputs()))]
    operands += [c.boolean(bool(o.TimeMajor())), *(c.optional(-1) for _ in range(8))]
    sequences = 1 if o.MergeOutputs() else 2
    _recurrent(c, op, OperationCode.BIDIRECTIONAL_SEQUENCE_LSTM, operands, sequences, inputs[35:39])


#: TFLite's LSTM kernel types (LSTMKernelType): FULL is the float cell, BASIC the
#: quantized 8/16-bit cell of TensorFlow's BasicLSTMCell.
_BASIC = 1


@maps("LSTM")
def _basic_lstm(c: Converter, op: Operator) -> None:
    """TFLite's quantized basic LSTM cell is NNAPI's QUANTIZED_16BIT_LSTM, as the
    NNAPI delegate maps it: inputs (input, previous output, weights [4H, I+H],
    bias [4H], previous cell state), outputs (output, cell state, two scratch
    tensors).  Its packed weights multiply ``[input, previous output]`` with the
    gates in rows i, g (cell), f, o.  NNAPI's reference rebuilds that matrix from
    the eight weight operands with the recurrent ones in its first H columns
    (``quantized_lstm``): handing it the packed matrix's first H columns as the
    recurrent weights and the rest as the input weights gives back the same
    matrix, so the step computes what LiteRT's does, whatever I and H are.  The
    state travels as model inputs and outputs (the app carries it, as in LiteRT)."""
    o = op.options
    if o.KernelType() != _BASIC:
        raise _Unsupported("a float LSTM cell (the sequence layers are mapped, not the cell)")
    if len(op.inputs) != 5 or len(op.outputs) != 4:
        raise BadDataError(
            f"operator {op.index} ({op.name}): a basic LSTM cell has 5 inputs and 4 outputs, "
            f"not {len(op.inputs)} and {len(op.outputs)}"
        )
    if o.FusedActivationFunction() != _TANH or o.CellClip() or o.ProjClip():
        raise _Unsupported("a basic cell without TANH or with clipping")
    x, previous, packed, packed_bias, cell = (c.tensor(i) for i in op.inputs)
    if (x.dtype, previous.dtype, packed.dtype, packed_bias.dtype, cell.dtype) != (
        np.uint8, np.uint8, np.uint8, np.int32, np.int16
    ):  # fmt: skip
        raise _Unsupported("a basic cell whose tensors are not uint8, int32 and int16")
    weights = c.values(op.inputs[2], "weights")
    bias = c.values(op.inputs[3], "bias")
    units = previous.shape[-1] if previous.shape else 0
    n_input = x.shape[-1] if x.shape else 0
    if weights.shape != (4 * units, n_input + units) or bias.shape != (4 * units,) or not units:
        raise BadDataError(
            f"operator {op.index} ({op.name}): weights {weights.shape} and bias {bias.shape} "
            f"do not fit {n_input} inputs and {units} units"
        )
    scratch = set(op.outputs[2:])
    if scratch & {*c.graph.outputs, *(i for other in c.graph.operators for i in other.inputs)}:
        raise _Unsupported("a basic cell whose scratch outputs are read")
    weight_type = c.operand_type(packed)
    bias_scale = weight_type.scale / 128  # the reference's, to the last bit
    rows = [slice(g * units, (g + 1) * units) for g in (0, 2, 1, 3)]  # NNAPI's i, f, g, o

    def constant(values: np.ndarray, operand_type: OperandType) -> int:
        operand = c.model.add_operand(operand_type)
        c.model.set_operand_value(operand, np.ascontiguousarray(values))
        return operand

    def weight(values: np.ndarray) -> int:
        return constant(
            values,
            OperandType(weight_type.code, values.shape, weight_type.scale, weight_type.zero_point),
        )

    inputs = [weight(weights[r, units:]) for r in rows]
    recurrent = [weight(weights[r, :units]) for r in rows]
    biases = [
        constant(bias[r], OperandType(OperandCode.TENSOR_INT32, (units,), bias_scale)) for r in rows
    ]
    operands = [c.operand(op.inputs[0]), *inputs, *recurrent, *biases]
    operands += [c.operand(op.inputs[4]), c.operand(op.inputs[1])]
    c.add(
        OperationCode.QUANTIZED_16BIT_LSTM,
        operands,
        [c.operand(op.outputs[1]), c.operand(op.outputs[0])],
    )


def _rnn_activation(c: Converter, o: Any) -> int:
    """LiteRT's RNN kernels apply a TANH (the usual one); NNAPI's sequence RNNs take
    a FuseCode, which has none."""
    if o.FusedActivationFunction() == _TANH:
        raise _Unsupported("TANH activation (NNAPI's sequence RNNs take NONE or a RELU)")
    return c.activation(o)


@maps("UNIDIRECTIONAL_SEQUENCE_RNN")
def _sequence_rnn(c: Converter, op: Operator) -> None:
    o, inputs = _float_layer(c, op, "RNN", 5)
    operands = [c.optional(i) for i in inputs]
    operands += [_rnn_activation(c, o), c.i32(int(o.TimeMajor()))]
    _recurrent(c, op, OperationCode.UNIDIRECTIONAL_SEQUENCE_RNN, operands, 1, inputs[4:5])


@maps("BIDIRECTIONAL_SEQUENCE_RNN")
def _bidirectional_rnn(c: Converter, op: Operator) -> None:
    """TFLite's 12 inputs are NNAPI's first 12."""
    o, inputs = _float_layer(c, op, "RNN", 12)
    if inputs[9] >= 0 and inputs[10] < 0 and not o.TimeMajor():
        # Seen on LiteRT 2.3: its backward cell reads the input there, not the aux input.
        raise _Unsupported("an aux input without aux weights over batch-major sequences")
    if inputs[10] >= 0 and o.TimeMajor():
        features = c.tensor(inputs[0]).shape[-1:], c.tensor(inputs[9]).shape[-1:]
        if features[0] != features[1]:
            # Seen on LiteRT 2.3: it steps through the aux input by the input's size.
            raise _Unsupported("aux weights over time-major sequences of another size")
    operands = [c.optional(i) for i in inputs]
    operands += [_rnn_activation(c, o), c.boolean(bool(o.TimeMajor()))]
    operands.append(c.boolean(bool(o.MergeOutputs())))
    sequences = 1 if o.MergeOutputs() else 2
    states = (inputs[4], inputs[8])
    _recurrent(c, op, OperationCode.BIDIRECTIONAL_SEQUENCE_RNN, operands, sequences, states)


@maps("LOCAL_RESPONSE_NORMALIZATION")
def _lrn(c: Converter, op: Operator) -> None:
    o = op.options
    inputs = [c.operand(op.inputs[0]), c.i32(o.Radius()), c.f32(o.Bias()), c.f32(o.Alpha())]
    c.add(
        OperationCode.LOCAL_RESPONSE_NORMALIZATION,
        [*inputs, c.f32(o.Beta())],
        [c.operand(op.outputs[0])],
    )


# -- the model's face -------------------------------------------------------------------------


def describe(graph: Subgraph, indices: Sequence[int]) -> list[TensorInfo]:
    infos = []
    for i in indices:
        t = graph.tensors[i]
        scale = float(t.scales[0]) if t.scales is not None and t.scales.size == 1 else 0.0
        zero_point = (
            int(t.zero_points[0]) if t.zero_points is not None and t.zero_points.size == 1 else 0
        )
        infos.append(
            TensorInfo(t.name, t.shape, t.dtype or np.dtype(np.float32), scale, zero_point)
        )
    return infos


@dataclass
class Converted:
    """A finished model; its first inputs and outputs are the file's, then one
    input and one output per variable (its value before and after a call)."""

    model: Model
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    variables: list[Variable]


def convert(flat: FlatModel) -> Converted:
    """The main subgraph as a finished model, with its inputs and outputs described."""
    graph = flat.subgraphs[0]
    converter = Converter(flat)
    model = converter.convert()
    variables = converter.used_variables()
    return Converted(
        model, describe(graph, graph.inputs), describe(graph, graph.outputs), variables
    )
