"""LSTM, RNN and SVDF: one time step each, state passed in and out as operands.

All three are float operations (TENSOR_FLOAT32, and TENSOR_FLOAT16 from
NNAPI 1.2).  They compute in float64 and cast to the output type.

Optional operands (LSTM's CIFG/peephole/projection/layer-norm tensors, the
SVDF bias) may be omitted either as NO_VALUE constants or as model inputs
given no data at execution, so which variant runs is decided at execution.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    constant_scalar,
    op_failed,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
)
from .fused_activation import FUSE_CODES, apply_fused_activation


def _optional(ctx: ExecutionContext, i: int) -> np.ndarray | None:
    """Input ``i`` as float64, or ``None`` when omitted (no value or no data).  A
    float64 input is used as it is, not copied (no operation here writes into
    its inputs): the sequence LSTMs convert their weights once a run, not once a
    time step."""
    value = ctx.inputs[i] if i < len(ctx.inputs) else None
    if value is None or value.size == 0:
        return None
    return np.asarray(value, dtype=np.float64)


def _required(ctx: ExecutionContext, i: int, name: str) -> np.ndarray:
    value = _optional(ctx, i)
    if value is None:
        raise op_failed(ctx.code, f"input {i} ({name}) is required but has no value")
    return value


def _check_shape(
    ctx: ExecutionContext, value: np.ndarray | None, shape: tuple[int, ...], name: str
) -> None:
    if value is not None and value.shape != shape:
        raise op_failed(ctx.code, f"{name} has shape {value.shape}; expected {shape}")


def _maybe_omitted(sig: OperationSignature, i: int) -> bool:
    """True when input ``i`` is, or may at execution be, omitted."""
    if i in sig.constants:
        return sig.constants[i] is None
    dims = sig.inputs[i].dimensions
    return dims is None or 0 in dims


def _check_float_operands(
    sig: OperationSignature, ranks: dict[int, tuple[int, str]], optional: tuple[int, ...] = ()
) -> OperandCode:
    """Same float type everywhere; ranks checked unless the operand may be omitted."""
    code = require_operand_type(sig, 0, FLOAT_TENSOR_CODES, "input").code
    for i, (rank, name) in ranks.items():
        require_operand_type(sig, i, (code,), name)
        if not (i in optional and _maybe_omitted(sig, i)):
            require_operand_rank(sig, i, (rank,), name)
    for j in range(len(sig.outputs)):
        require_operand_type(sig, j, (code,), f"output {j}", output=True)
        require_operand_rank(sig, j, (2,), f"output {j}", output=True)
    return code


def _check_fuse(sig: OperationSignature, i: int, allowed: Collection[int]) -> None:
    require_operand_type(sig, i, (OperandCode.INT32,), "fused activation")
    value = constant_scalar(sig, i)
    if value is not None and value not in allowed:
        raise sig.fail(f"input {i}: activation {value} is not one of {sorted(allowed)}")


def _fused(ctx: ExecutionContext, i: int, allowed: Collection[int]) -> int:
    value = ctx.scalar(i)
    if value not in allowed:
        raise ctx.fail(f"input {i}: activation {value} is not one of {sorted(allowed)}")
    return value


# --------------------------------------------------------------------------- RNN


def _validate_rnn(sig: OperationSignature) -> None:
    require_operand_counts(sig, (6,), 2)
    names = ("input", "weights", "recurrent_weights", "bias", "hidden_state_in")
    _check_float_operands(sig, {i: (1 if i == 3 else 2, n) for i, n in enumerate(names) if i})
    require_operand_rank(sig, 0, (2,), "input")
    _check_fuse(sig, 5, FUSE_CODES)


def _execute_rnn(ctx: ExecutionContext) -> list[np.ndarray]:
    """``h = activation(x·Wᵀ + h_prev·Rᵀ + b)``; both outputs are ``h``."""
    x = _required(ctx, 0, "input")
    w = _required(ctx, 1, "weights")
    r = _required(ctx, 2, "recurrent_weights")
    b = _required(ctx, 3, "bias")
    h = _required(ctx, 4, "hidden_state_in")
    if x.ndim != 2 or w.ndim != 2:
        raise op_failed(ctx.code, "input and weights must be 2-D")
    batch, units = x.shape[0], w.shape[0]
    _check_shape(ctx, w, (units, x.shape[1]), "weights")
    _check_shape(ctx, r, (units, units), "recurrent_weights")
    _check_shape(ctx, b, (units,), "bias")
    _check_shape(ctx, h, (batch, units), "hidden_state_in")
    fuse = _fused(ctx, 5, FUSE_CODES)
    out = apply_fused_activation(x @ w.T + h @ r.T + b, fuse)
    dtype = ctx.output_info(0).dtype
    return [out.astype(dtype), out.astype(ctx.output_info(1).dtype)]


# --------------------------------------------------------------------------- SVDF


def _validate_svdf(sig: OperationSignature) -> None:
    require_operand_counts(sig, (7,), 2)
    names = ("input", "weights_feature", "weights_time", "bias", "state_in")
    _check_float_operands(
        sig, {i: (1 if i == 3 else 2, n) for i, n in enumerate(names) if i}, optional=(3,)
    )
    require_operand_rank(sig, 0, (2,), "input")
    require_operand_type(sig, 5, (OperandCode.INT32,), "rank")
    rank = constant_scalar(sig, 5)
    if rank is not None and rank < 1:
        raise sig.fail(f"rank is {rank}; it must be >= 1")
    _check_fuse(sig, 6, FUSE_CODES)


def _execute_svdf(ctx: ExecutionContext) -> list[np.ndarray]:
    """One SVDF step.

    The state holds, per batch and filter, the last ``memory_size`` feature
    activations (oldest first).  The newest activation goes in the last slot,
    the time weights reduce each filter's memory, ``rank`` filters sum into one
    unit, and the state is then shifted left one slot with a zero shifted in.
    """
    x = _required(ctx, 0, "input")
    wf = _required(ctx, 1, "weights_feature")
    wt = _required(ctx, 2, "weights_time")
    bias = _optional(ctx, 3)
    state = _required(ctx, 4, "state_in")
    rank = ctx.scalar(5)
    if x.ndim != 2 or wf.ndim != 2 or wt.ndim != 2:
        raise op_failed(ctx.code, "input, weights_feature and weights_time must be 2-D")
    batch = x.shape[0]
    filters, memory = wt.shape
    if rank < 1 or filters % rank:
        raise op_failed(ctx.code, f"{filters} filters cannot be split into rank {rank} units")
    units = filters // rank
    _check_shape(ctx, wf, (filters, x.shape[1]), "weights_feature")
    _check_shape(ctx, bias, (units,), "bias")
    _check_shape(ctx, state, (batch, memory * filters), "state_in")
    fuse = _fused(ctx, 6, FUSE_CODES)

    memory_state = state.reshape(batch, filters, memory).copy()
    memory_state[:, :, -1] = x @ wf.T
    per_filter = np.einsum("bfm,fm->bf", memory_state, wt)
    out = per_filter.reshape(batch, units, rank).sum(axis=2)
    if bias is not None:
        out += bias
    out = apply_fused_activation(out, fuse)
    shifted = np.zeros_like(memory_state)
    shifted[:, :, :-1] = memory_state[:, :, 1:]
    return [
        shifted.reshape(batch, memory * filters).astype(ctx.output_info(0).dtype),
        out.astype(ctx.output_info(1).dtype),
    ]


# --------------------------------------------------------------------------- LSTM

# LSTM input positions (NNAPI order).
_INPUT = 0
_W_INPUT, _W_FORGET, _W_CELL, _W_OUTPUT = 1, 2, 3, 4
_R_INPUT, _R_FORGET, _R_CELL, _R_OUTPUT = 5, 6, 7, 8
_PEEP_INPUT, _PEEP_FORGET, _PEEP_OUTPUT = 9, 10, 11
_B_INPUT, _B_FORGET, _B_CELL, _B_OUTPUT = 12, 13, 14, 15
_PROJ_WEIGHTS, _PROJ_BIAS = 16, 17
_OUTPUT_STATE, _CELL_STATE = 18, 19
_ACTIVATION, _CELL_CLIP, _PROJ_CLIP = 20, 21, 22
_LN_INPUT, _LN_FORGET, _LN_CELL, _LN_OUTPUT = 23, 24, 25, 26

_LSTM_NAMES = {
    _INPUT: "input",
    _W_INPUT: "input_to_input_weights",
    _W_FORGET: "input_to_forget_weights",
    _W_CELL: "input_to_cell_weights",
    _W_OUTPUT: "input_to_output_weights",
    _R_INPUT: "recurrent_to_input_weights",
    _R_FORGET: "recurrent_to_forget_weights",
    _R_CELL: "recurrent_to_cell_weights",
    _R_OUTPUT: "recurrent_to_output_weights",
    _PEEP_INPUT: "cell_to_input_weights",
    _PEEP_FORGET: "cell_to_forget_weights",
    _PEEP_OUTPUT: "cell_to_output_weights",
    _B_INPUT: "input_gate_bias",
    _B_FORGET: "forget_gate_bias",
    _B_CELL: "cell_bias",
    _B_OUTPUT: "output_gate_bias",
    _PROJ_WEIGHTS: "projection_weights",
    _PROJ_BIAS: "projection_bias",
    _OUTPUT_STATE: "output_state_in",
    _CELL_STATE: "cell_state_in",
    _LN_INPUT: "input_layer_norm_weights",
    _LN_FORGET: "forget_layer_norm_weights",
    _LN_CELL: "cell_layer_norm_weights",
    _LN_OUTPUT: "output_layer_norm_weights",
}
_LSTM_OPTIONAL = (
    _W_INPUT,
    _R_INPUT,
    _PEEP_INPUT,
    _PEEP_FORGET,
    _PEEP_OUTPUT,
    _B_INPUT,
    _PROJ_WEIGHTS,
    _PROJ_BIAS,
    _LN_INPUT,
    _LN_FORGET,
    _LN_CELL,
    _LN_OUTPUT,
)
_LSTM_RANK1 = (
    _PEEP_INPUT,
    _PEEP_FORGET,
    _PEEP_OUTPUT,
    _B_INPUT,
    _B_FORGET,
    _B_CELL,
    _B_OUTPUT,
    _PROJ_BIAS,
    _LN_INPUT,
    _LN_FORGET,
    _LN_CELL,
    _LN_OUTPUT,
)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # = 1/(1+e^-x) without overflow warnings


#: LSTM's activation parameter uses TFLite's codes: 0 none, 1 relu, 2 relu1,
#: 3 relu6, 4 tanh, 6 sigmoid.
_LSTM_ACTIVATIONS: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    0: lambda x: x,
    1: lambda x: np.maximum(x, 0.0),
    2: lambda x: np.clip(x, -1.0, 1.0),
    3: lambda x: np.clip(x, 0.0, 6.0),
    4: np.tanh,
    6: _sigmoid,
}

#: variance floor of the layer-normalised LSTM (NNAPI 1.2).
_LAYER_NORM_EPSILON = 1e-8


def _validate_lstm(sig: OperationSignature) -> None:
    require_operand_counts(sig, (23, 27), 4)
    tensors = {
        i: (1 if i in _LSTM_RANK1 else 2, _LSTM_NAMES[i])
        for i in range(1, len(sig.inputs))
        if i not in (_ACTIVATION, _CELL_CLIP, _PROJ_CLIP)
    }
    code = _check_float_operands(sig, tensors, optional=_LSTM_OPTIONAL)
    require_operand_rank(sig, 0, (2,), "input")
    _check_fuse(sig, _ACTIVATION, tuple(_LSTM_ACTIVATIONS))
    clip_type = OperandCode.FLOAT16 if code == OperandCode.TENSOR_FLOAT16 else OperandCode.FLOAT32
    for i, name in ((_CELL_CLIP, "cell_clip"), (_PROJ_CLIP, "proj_clip")):
        require_operand_type(sig, i, (clip_type,), name)
        value = constant_scalar(sig, i)
        if value is not None and not value >= 0:
            raise sig.fail(f"{name} is {value}; it must be >= 0 (0 disables clipping)")
    # CIFG (no input gate) omits its three tensors together; peepholes come in sets.
    cifg = [i for i in (_W_INPUT, _R_INPUT, _B_INPUT) if sig.constants.get(i, 0) is None]
    if cifg and len(cifg) != 3:
        raise sig.fail(
            "input_to_input_weights, recurrent_to_input_weights and input_gate_bias "
            "must be all present or all omitted"
        )
    peep = [i for i in (_PEEP_FORGET, _PEEP_OUTPUT) if sig.constants.get(i, 0) is None]
    if len(peep) == 1:
        raise sig.fail(
            "cell_to_forget_weights and cell_to_output_weights must be both present or both omitted"
        )
    if (
        sig.constants.get(_PROJ_WEIGHTS, 0) is None
        and _PROJ_BIAS in sig.constants
        and sig.constants[_PROJ_BIAS] is not None
    ):
        raise sig.fail("projection_bias is given without projection_weights")


def execute_lstm(ctx: ExecutionContext) -> list[np.ndarray]:
    """One LSTM step (CIFG, peephole, projection, clipping, layer norm variants)."""
    # The tensors given a value; an omitted optional operand is simply absent.
    t: dict[int, np.ndarray] = {}
    for i in _LSTM_NAMES:
        value = _optional(ctx, i)
        if value is not None:
            t[i] = value
        elif i not in _LSTM_OPTIONAL:
            raise op_failed(ctx.code, f"input {i} ({_LSTM_NAMES[i]}) is required but has no value")

    x = t[_INPUT]
    if x.ndim != 2 or t[_W_OUTPUT].ndim != 2 or t[_R_OUTPUT].ndim != 2:
        raise op_failed(
            ctx.code, "input, input_to_output_weights and recurrent_to_output_weights must be 2-D"
        )
    batch, n_input = x.shape
    n_cell = t[_W_OUTPUT].shape[0]
    n_output = t[_R_OUTPUT].shape[1]

    cifg = _W_INPUT not in t
    if cifg != (_R_INPUT not in t) or cifg != (_B_INPUT not in t):
        raise op_failed(
            ctx.code,
            "the input gate's weights, recurrent weights and bias must be "
            "all present or all omitted (CIFG)",
        )
    # Peepholes come as a set; with CIFG there is no input gate, so
    # cell_to_input_weights is optional there (and ignored), as in the reference.
    peephole = _PEEP_FORGET in t
    peep_input_ok = (_PEEP_INPUT in t or cifg) if peephole else _PEEP_INPUT not in t
    if peephole != (_PEEP_OUTPUT in t) or not peep_input_ok:
        raise op_failed(ctx.code, "inconsistent set of peephole (cell_to_*) weights")
    projection = _PROJ_WEIGHTS in t
    if _PROJ_BIAS in t and not projection:
        raise op_failed(ctx.code, "projection_bias is given without projection_weights")
    layer_norm = _LN_FORGET in t
    ln_gates = (_LN_FORGET, _LN_CELL, _LN_OUTPUT) + (() if cifg else (_LN_INPUT,))
    if any((i in t) != layer_norm for i in ln_gates) or (_LN_INPUT in t and not layer_norm):
        raise op_failed(ctx.code, "inconsistent set of layer normalization weights")

    expected = {
        _W_INPUT: (n_cell, n_input),
        _W_FORGET: (n_cell, n_input),
        _W_CELL: (n_cell, n_input),
        _W_OUTPUT: (n_cell, n_input),
        _R_INPUT: (n_cell, n_output),
        _R_FORGET: (n_cell, n_output),
        _R_CELL: (n_cell, n_output),
        _R_OUTPUT: (n_cell, n_output),
        _PEEP_INPUT: (n_cell,),
        _PEEP_FORGET: (n_cell,),
        _PEEP_OUTPUT: (n_cell,),
        _B_INPUT: (n_cell,),
        _B_FORGET: (n_cell,),
        _B_CELL: (n_cell,),
        _B_OUTPUT: (n_cell,),
        _PROJ_WEIGHTS: (n_output, n_cell),
        _PROJ_BIAS: (n_output,),
        _OUTPUT_STATE: (batch, n_output),
        _CELL_STATE: (batch, n_cell),
        _LN_INPUT: (n_cell,),
        _LN_FORGET: (n_cell,),
        _LN_CELL: (n_cell,),
        _LN_OUTPUT: (n_cell,),
    }
    for i, shape in expected.items():
        _check_shape(ctx, t.get(i), shape, _LSTM_NAMES[i])
    if not projection and n_output != n_cell:
        raise op_failed(
            ctx.code, f"output size {n_output} != num_units {n_cell} without projection"
        )

    activation = _LSTM_ACTIVATIONS.get(ctx.scalar(_ACTIVATION))
    if activation is None:
        raise op_failed(ctx.code, f"activation {ctx.scalar(_ACTIVATION)} is not supported")
    cell_clip = float(ctx.scalar(_CELL_CLIP))
    proj_clip = float(ctx.scalar(_PROJ_CLIP))
    if not (cell_clip >= 0 and proj_clip >= 0):
        raise op_failed(ctx.code, "cell_clip and proj_clip must be >= 0")

    h_prev, c_prev = t[_OUTPUT_STATE], t[_CELL_STATE]

    def pre_activation(w: int, r: int, bias: int, ln: int, peep: np.ndarray | None) -> np.ndarray:
        z = x @ t[w].T + h_prev @ t[r].T
        if peep is not None:
            z = z + peep
        if layer_norm:
            mean = z.mean(axis=1, keepdims=True)
            variance = np.square(z - mean).mean(axis=1, keepdims=True)
            z = (z - mean) / np.sqrt(variance + _LAYER_NORM_EPSILON) * t[ln]
        return z + t[bias]

    def peep(i: int, cell: np.ndarray) -> np.ndarray | None:
        return cell * t[i] if peephole else None

    forget_gate = _sigmoid(
        pre_activation(_W_FORGET, _R_FORGET, _B_FORGET, _LN_FORGET, peep(_PEEP_FORGET, c_prev))
    )
    if cifg:
        input_gate = 1.0 - forget_gate
    else:
        input_gate = _sigmoid(
            pre_activation(_W_INPUT, _R_INPUT, _B_INPUT, _LN_INPUT, peep(_PEEP_INPUT, c_prev))
        )
    cell_gate = activation(pre_activation(_W_CELL, _R_CELL, _B_CELL, _LN_CELL, None))
    cell = forget_gate * c_prev + input_gate * cell_gate
    if cell_clip > 0:
        cell = np.clip(cell, -cell_clip, cell_clip)
    output_gate = _sigmoid(
        pre_activation(_W_OUTPUT, _R_OUTPUT, _B_OUTPUT, _LN_OUTPUT, peep(_PEEP_OUTPUT, cell))
    )
    output = output_gate * activation(cell)
    if projection:
        output = output @ t[_PROJ_WEIGHTS].T
        if _PROJ_BIAS in t:
            output = output + t[_PROJ_BIAS]
        if proj_clip > 0:
            output = np.clip(output, -proj_clip, proj_clip)

    # The scratch buffer holds the gate values as the reference lays them out:
    # gate-major ([input,] cell, forget, output), each [batch, num_units].
    gates = ([] if cifg else [input_gate]) + [cell_gate, forget_gate, output_gate]
    scratch = np.stack(gates).reshape(batch, len(gates) * n_cell)
    results = (scratch, output, cell, output)
    return [r.astype(ctx.output_info(i).dtype) for i, r in enumerate(results)]


register(OperationCode.RNN, validate=_validate_rnn, execute=_execute_rnn)
register(OperationCode.SVDF, validate=_validate_svdf, execute=_execute_svdf)
register(OperationCode.LSTM, validate=_validate_lstm, execute=execute_lstm)
