"""The TFLite converter's core: one subgraph's tensors as NNAPI operands, the
folding done before mapping (fp16 and sparse constants, activations fused into
their producer), resource and state variables, and the check that lists
everything a model uses that cannot be converted.

:class:`Converter` maps each operator through :data:`MAPPERS`, which the
operator families of :mod:`.ops` fill; :mod:`.convert` imports those, so the
registry is full before any model is converted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from ..codes import FuseCode, OperandCode
from ..errors import BadDataError
from ..imported import ModelBuilder, Registry, UnsupportedModelError, Variable
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
            raise Unsupported(f"a {t.type_name} variable tensor (float32 state only)")
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
            raise Unsupported(f"a non-constant {what}")
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
            raise Unsupported("a condition of more than one element")
        return self.reshape_boolean(self.operand(index), t.shape, (1,))

    # -- activations -----------------------------------------------------------------------
    def activation(self, options: Any) -> int:
        """The fuse-code operand for a TFLite fused activation.  LiteRT's kernels apply
        only NONE, RELU, RELU_N1_TO_1 and RELU6 (a fused TANH is silently ignored
        there), so anything else is refused rather than guessed."""
        code = options.FusedActivationFunction() if options is not None else 0
        if code not in _ACTIVATIONS:
            raise Unsupported(f"fused activation {code}")
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
            except Unsupported as exc:
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
            except Unsupported as exc:
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
        except Unsupported as exc:  # a model output that is a non-float32 variable tensor
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
                o.outputs[0]: variable_name(o)
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
                    raise Unsupported("a variable initialized by a computation, not a constant")
                self.variables[name] = Variable(name, np.array(initial.data))
                self._variable_types[name] = self.operand_type(initial)

    def used_variables(self) -> list[Variable]:
        """The variables the main subgraph reads or assigns, in a fixed order."""
        return [v for v in self.variables.values() if v.input >= 0]

    def variable(self, resource: int) -> Variable:
        variable = self._resources.get(resource)
        if variable is None:
            raise Unsupported("a resource that no VAR_HANDLE of the main subgraph names")
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


class Unsupported(Exception):
    """One operator's use that cannot be mapped (the message says which part)."""


# -- the registry: mappers (ops/) by operator name ----------------------------------------------

Mapper = Callable[[Converter, Operator], None]
MAPPERS: Registry[Mapper] = Registry()
maps = MAPPERS.maps


def constant_axes(c: Converter, index: int, rank: int) -> list[int]:
    return sorted({int(a) % rank for a in c.values(index, "axis").reshape(-1)})


def variable_name(op: Operator) -> str:
    o = op.options
    container = (o.Container() or b"").decode() if o is not None else ""
    shared = (o.SharedName() or b"").decode() if o is not None else ""
    return f"{container}/{shared}" if container else shared
