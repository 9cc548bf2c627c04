"""Recurrent layers: LSTM as NNAPI's sequence LSTM per direction; RNN and GRU
unrolled over their static sequence into gates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from ...codes import OperandCode, OperationCode
from ...model import OperandType
from ..converter import Converter, Unsupported, maps
from .building import apply, filled, reshaped, reversed_along, text
from .convolution import fully_connected

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
        raise Unsupported("clip or input_forget")
    f32 = np.dtype(np.float32)
    sequence = (steps, batch, hidden) if layout == 0 else (batch, steps, hidden)
    wants_states = any(node.output[1:3])
    results: list[list[int]] = [[], [], []]  # Y, Y_h, Y_c per direction
    for d, backward in enumerate(backwards):
        source = c.operand(x)
        if backward:  # the time axis: 0, or 1 batch first
            source = reversed_along(c, source, layout, f32, c.shape(x))
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
            outputs[0] = reversed_along(c, outputs[0], layout, f32, sequence)
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
    names = [text(n, "") for n in a.get("activations", [])]
    per = 2 if gru else 1
    names = names or (["Sigmoid", "Tanh"] if gru else ["Tanh"]) * directions
    if "activation_alpha" in a or "activation_beta" in a or len(names) != per * directions:
        raise Unsupported("activations with parameters, or not one set per direction")
    if any(n not in _GATE_ACTIVATIONS for n in names) or a.get("clip") is not None:
        raise Unsupported(f"clip or activations {', '.join(names)} (Tanh, Relu, Sigmoid map)")
    if steps > _MAX_UNROLLED_STEPS:
        raise Unsupported(f"a sequence of more than {_MAX_UNROLLED_STEPS} steps")
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
                h = apply(c, f, pre[:1], f32, state)
            else:
                z = apply(c, f, pre[:1], f32, state)
                reset = apply(c, f, pre[1:], f32, state)
                if reset_first:
                    own = _gate(c, xs, state, weights[2], biases[2])
                    carried = _gate(c, (h, state), state, recurrent[2], inner)
                    gated = apply(c, OperationCode.MUL, [reset, carried], f32, state)
                    candidate = apply(c, OperationCode.ADD, [own, gated], f32, state)
                else:
                    reset_h = apply(c, OperationCode.MUL, [reset, h], f32, state)
                    candidate = _gate(c, xs, state, weights[2], biases[2], reset_h, recurrent[2])
                candidate = apply(c, g, [candidate], f32, state)
                keep = apply(c, OperationCode.SUB, [ones, z], f32, state)
                new = apply(c, OperationCode.MUL, [keep, candidate], f32, state)
                old = apply(c, OperationCode.MUL, [z, h], f32, state)
                h = apply(c, OperationCode.ADD, [new, old], f32, state)
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
    fully_connected(c, x[0], x[1], weights, own, state, bias)
    if h is None or recurrent is None:
        return own
    carried = c.temporary(f32, state)
    fully_connected(c, h, state, recurrent, carried, state)
    return apply(c, OperationCode.ADD, [own, carried], f32, state)


def _recurrent(
    c: Converter, node: onnx.NodeProto, a: dict[str, Any], gates: int
) -> tuple[list[bool], int, tuple[int, int, int, int]]:
    """What LSTM, RNN and GRU (of ``gates`` gates) share: (whether each direction
    runs backwards, layout, (steps, batch, input size, hidden size)), refusing what none of them
    maps: another direction or layout, non-float32 data, inputs of other shapes
    than X and the hidden size give, sequence_lens shorter than the sequence."""
    x, r, lengths = node.input[0], node.input[2], (*node.input, "", "", "", "", "")[4]
    direction = text(a.get("direction"), "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise Unsupported(f"direction {direction!r}")
    layout = a.get("layout", 0)
    if layout not in (0, 1) or c.dtype(x) != np.float32:
        raise Unsupported(f"layout {layout} or {c.dtype(x)} tensors")
    x_shape = c.shape(x)
    if len(x_shape) != 3:
        raise Unsupported(f"a rank-{len(x_shape)} input (X is [steps, batch, features])")
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
            raise Unsupported(f"{name!r} of shape {shape}, not {list(wanted[position])}")
    if lengths and (c.value(lengths, "sequence_lens") != steps).any():
        raise Unsupported("sequence_lens shorter than the sequence")
    return [direction == "reverse", True][:directions], layout, (steps, batch, size, hidden)


def _lstm_activations(a: dict[str, Any], directions: int) -> list[int]:
    """The LSTM operation's activation code per direction: ONNX's f must be
    Sigmoid and its g and h one activation NNAPI has, without parameters."""
    names = [text(n, "") for n in a.get("activations", [])]
    if not names:
        return [_LSTM_ACTIVATIONS["Tanh"]] * directions
    if "activation_alpha" in a or "activation_beta" in a or len(names) != 3 * directions:
        raise Unsupported("activations with parameters, or not three per direction")
    codes = []
    for f, g, h in zip(names[::3], names[1::3], names[2::3]):
        if f != "Sigmoid" or g != h or g not in _LSTM_ACTIVATIONS:
            raise Unsupported(
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
        raise Unsupported(f"{c.dtype(name)} weights or states")
    inputs = [c.operand(name), c.ints(begin), c.ints(size)]
    sliced = apply(c, OperationCode.SLICE, inputs, f32, sliced_shape)
    return reshaped(c, sliced, f32, sliced_shape, shape)


def _gate_bias(c: Converter, b: str, d: int, blocks: Sequence[int], hidden: int) -> int:
    """The sum of B's ``blocks`` (of ``hidden`` each) for direction ``d``: summed at
    load from a constant, ADD'ed at every run otherwise (zeros without B)."""
    f32 = np.dtype(np.float32)
    if not b:
        return filled(c, f32, (hidden,), 0)
    if b in c.constants:
        rows = c.constants[b][d].astype(np.float32)
        return c.floats(sum(rows[k * hidden : (k + 1) * hidden] for k in blocks))
    parts = [_piece(c, b, (d, k * hidden), (1, hidden)) for k in blocks]
    total = parts[0]
    for part in parts[1:]:
        total = apply(c, OperationCode.ADD, [total, part], f32, (hidden,))
    return total


def _initial_state(c: Converter, name: str, d: int, layout: int, shape: tuple[int, int]) -> int:
    """Direction ``d``'s initial state (``shape``, [batch, hidden]) from ``name``
    ([directions, batch, hidden], batch first for layout 1); zeros without it."""
    if not name:
        return filled(c, np.dtype(np.float32), shape, 0)
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
        source = apply(c, OperationCode.CONCATENATION, [*parts, c.i32(axis)], f32, joined)
    reshaped(c, source, f32, joined, c.shape(name), name)
