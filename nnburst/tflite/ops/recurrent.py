"""Recurrent layers: NNAPI's sequence LSTMs and RNNs, their state in variable
tensors, and TFLite's quantized basic LSTM cell as QUANTIZED_16BIT_LSTM."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...codes import OperandCode, OperationCode
from ...errors import BadDataError
from ...model import OperandType
from ..converter import Converter, Unsupported, maps
from ..reader import Operator

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
            raise Unsupported(f"{c.tensor(i).type_name} tensors (a hybrid or integer {what})")
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
            raise Unsupported("a state input that is not a variable tensor of its own")
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
        raise Unsupported("activation NONE (LiteRT's LSTM computes no defined result with it)")
    if code not in _LSTM_ACTIVATIONS:
        raise Unsupported(f"fused activation {code}")
    clips = [c.f32(max(0.0, o.CellClip())), c.f32(max(0.0, o.ProjClip()))]
    return [c.i32(code), *clips]


@maps("UNIDIRECTIONAL_SEQUENCE_LSTM")
def _sequence_lstm(c: Converter, op: Operator) -> None:
    """TFLite's 24 inputs are NNAPI's 28 less the four scalars, which come from the
    options (the layer-norm coefficients come last in both).  The two state
    outputs are the variable tensors' new values."""
    o, inputs = _float_layer(c, op, "LSTM", 24)
    if hasattr(o, "DiagonalRecurrentTensors") and o.DiagonalRecurrentTensors():
        raise Unsupported("diagonal recurrent weights")
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
        raise Unsupported("merged outputs of batch-major sequences (LiteRT's differ)")
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
        raise Unsupported("a float LSTM cell (the sequence layers are mapped, not the cell)")
    if len(op.inputs) != 5 or len(op.outputs) != 4:
        raise BadDataError(
            f"operator {op.index} ({op.name}): a basic LSTM cell has 5 inputs and 4 outputs, "
            f"not {len(op.inputs)} and {len(op.outputs)}"
        )
    if o.FusedActivationFunction() != _TANH or o.CellClip() or o.ProjClip():
        raise Unsupported("a basic cell without TANH or with clipping")
    x, previous, packed, packed_bias, cell = (c.tensor(i) for i in op.inputs)
    if (x.dtype, previous.dtype, packed.dtype, packed_bias.dtype, cell.dtype) != (
        np.uint8, np.uint8, np.uint8, np.int32, np.int16
    ):  # fmt: skip
        raise Unsupported("a basic cell whose tensors are not uint8, int32 and int16")
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
        raise Unsupported("a basic cell whose scratch outputs are read")
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
        raise Unsupported("TANH activation (NNAPI's sequence RNNs take NONE or a RELU)")
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
        raise Unsupported("an aux input without aux weights over batch-major sequences")
    if inputs[10] >= 0 and o.TimeMajor():
        features = c.tensor(inputs[0]).shape[-1:], c.tensor(inputs[9]).shape[-1:]
        if features[0] != features[1]:
            # Seen on LiteRT 2.3: it steps through the aux input by the input's size.
            raise Unsupported("aux weights over time-major sequences of another size")
    operands = [c.optional(i) for i in inputs]
    operands += [_rnn_activation(c, o), c.boolean(bool(o.TimeMajor()))]
    operands.append(c.boolean(bool(o.MergeOutputs())))
    sequences = 1 if o.MergeOutputs() else 2
    states = (inputs[4], inputs[8])
    _recurrent(c, op, OperationCode.BIDIRECTIONAL_SEQUENCE_RNN, operands, sequences, states)
