"""Sequence RNN and LSTM layers (NNAPI 1.2, state outputs from 1.3):
UNIDIRECTIONAL_SEQUENCE_RNN, BIDIRECTIONAL_SEQUENCE_RNN,
UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM.

Each op unrolls one cell over the time axis (a Python loop over time steps;
every step is vectorised over the batch).  Batch-major data is transposed to
time-major and back.  The backward direction walks the same time steps in
reverse and writes each output at its own time position.

The LSTM cell is the LSTM operation's own (``recurrent.py``), run through a
one-step execution context, so the sequence ops share its CIFG, peephole,
projection, clipping and layer-norm semantics.  The auxiliary input of the
bidirectional ops (cross-linking) multiplies its own weights and adds to the
gates exactly like the input does, so it is fed to the cell as extra input
columns: ``[x, aux]`` times ``[W, W_aux]``.  States are carried in float32
between steps, as the reference computes float16 models in float32 too.

The RNN cell is ``h = activation(x·Wᵀ [+ aux·W_auxᵀ] + h·Rᵀ + b)`` in float64.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from ...codes import OperandCode, OperationCode
from ...operands import OperandInfo
from ..registry import ExecutionContext, Kernel, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    constant_scalar,
    float_scalar_code,
    maybe_omitted,
    op_failed,
    optional_input,
    require_operand_rank,
)
from .fused_activation import FUSE_CODES, apply_fused_activation
from .recurrent import _sigmoid, execute_lstm

#: LSTM activation codes (TFLite's): none, relu, relu1, relu6, tanh, sigmoid.
_LSTM_ACTIVATIONS = (0, 1, 2, 3, 4, 6)
_F32 = OperandInfo(OperandCode.TENSOR_FLOAT32, None)


# --------------------------------------------------------------- shared helpers


def _check(
    sig: OperationSignature,
    counts: Sequence[int],
    outputs: Sequence[int],
    kinds: dict[int, str],
    optional: Sequence[int] = (),
) -> OperandCode:
    """Operand counts, types and ranks.

    ``kinds`` maps each input to "t1"/"t2"/"t3" (tensor of rank 1/2/3 of the
    input's float type), "int", "bool" or "float" (scalar of the matching float
    type).  Ranks of ``optional`` inputs are only checked when present.
    """
    if len(sig.inputs) not in counts:
        raise sig.fail(f"expected {' or '.join(map(str, counts))} inputs, got {len(sig.inputs)}")
    if len(sig.outputs) not in outputs:
        raise sig.fail(f"expected {' or '.join(map(str, outputs))} outputs, got {len(sig.outputs)}")
    code = sig.inputs[0].code
    if code not in FLOAT_TENSOR_CODES:
        raise sig.fail(
            f"input 0 (input) has type {code.name}; expected TENSOR_FLOAT32 or TENSOR_FLOAT16"
        )
    want = {"int": OperandCode.INT32, "bool": OperandCode.BOOL, "float": float_scalar_code(code)}
    for i, kind in kinds.items():
        if i >= len(sig.inputs):
            continue
        expected = want.get(kind, code)
        if sig.inputs[i].code != expected:
            raise sig.fail(
                f"input {i} has type {sig.inputs[i].code.name}; expected {expected.name}"
            )
        if kind.startswith("t") and not (i in optional and maybe_omitted(sig, i)):
            require_operand_rank(sig, i, (int(kind[1]),), f"input {i}")
    for j, info in enumerate(sig.outputs):
        if info.code != code:
            raise sig.fail(f"output {j} has type {info.code.name}; expected {code.name}")
    return code


def _check_choice(sig: OperationSignature, i: int, allowed: Collection[int], name: str) -> None:
    value = constant_scalar(sig, i)
    if value is not None and int(value) not in allowed:
        raise sig.fail(f"input {i} ({name}) is {value}; expected one of {sorted(allowed)}")


def _time_major(x: np.ndarray, time_major: bool, code: OperationCode, name: str) -> np.ndarray:
    """A 3-D sequence as [time, batch, features]."""
    if x.ndim != 3:
        raise op_failed(code, f"{name} has rank {x.ndim}; expected 3")
    return x if time_major else x.transpose(1, 0, 2)


def _restore(y: np.ndarray, time_major: bool) -> np.ndarray:
    return y if time_major else np.ascontiguousarray(y.transpose(1, 0, 2))


def _steps(length: int, backward: bool) -> range:
    return range(length - 1, -1, -1) if backward else range(length)


# --------------------------------------------------------------- RNN


def _rnn_sequence(
    ctx: ExecutionContext,
    x: np.ndarray,
    aux: np.ndarray | None,
    w: np.ndarray,
    w_aux: np.ndarray | None,
    r: np.ndarray,
    b: np.ndarray,
    h: np.ndarray,
    fuse: int,
    backward: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Run one direction over time-major ``x``; returns (outputs [T, B, U], last state)."""
    steps, batch, _ = x.shape
    units = w.shape[0]
    shapes = {
        "weights": (w.shape, (units, x.shape[2])),
        "recurrent_weights": (r.shape, (units, units)),
        "bias": (b.shape, (units,)),
        "hidden_state": (h.shape, (batch, units)),
    }
    if aux is not None and w_aux is not None:
        shapes["aux_weights"] = (w_aux.shape, (units, aux.shape[2]))
    for name, (got, want) in shapes.items():
        if got != want:
            raise op_failed(ctx.code, f"{name} has shape {got}; expected {want}")
    out = np.empty((steps, batch, units))
    for t in _steps(steps, backward):
        z = x[t] @ w.T + h @ r.T + b
        if aux is not None and w_aux is not None:
            z = z + aux[t] @ w_aux.T
        h = apply_fused_activation(z, fuse)
        out[t] = h
    return out, h


def _fused(ctx: ExecutionContext, i: int) -> int:
    fuse = int(ctx.scalar(i))
    if fuse not in FUSE_CODES:
        raise op_failed(ctx.code, f"fused activation {fuse} is not a FuseCode (0..3)")
    return fuse


def _float(ctx: ExecutionContext, i: int, name: str) -> np.ndarray:
    value = optional_input(ctx, i)
    if value is None:
        raise op_failed(ctx.code, f"input {i} ({name}) is required but has no value")
    return value.astype(np.float64)


def _validate_uni_rnn(sig: OperationSignature) -> None:
    _check(sig, (7,), (1, 2), {0: "t3", 1: "t2", 2: "t2", 3: "t1", 4: "t2", 5: "int", 6: "int"})
    _check_choice(sig, 5, FUSE_CODES, "fused activation")
    _check_choice(sig, 6, (0, 1), "time_major")


def _execute_uni_rnn(ctx: ExecutionContext) -> list[np.ndarray]:
    time_major = int(ctx.scalar(6))
    if time_major not in (0, 1):
        raise op_failed(ctx.code, f"time_major is {time_major}; expected 0 or 1")
    x = _time_major(_float(ctx, 0, "input"), bool(time_major), ctx.code, "input")
    out, h = _rnn_sequence(
        ctx,
        x,
        None,
        _float(ctx, 1, "weights"),
        None,
        _float(ctx, 2, "recurrent_weights"),
        _float(ctx, 3, "bias"),
        _float(ctx, 4, "hidden_state"),
        _fused(ctx, 5),
        backward=False,
    )
    dtype = ctx.output_info(0).dtype
    results = [_restore(out, bool(time_major)).astype(dtype)]
    if len(ctx.signature.outputs) == 2:
        results.append(h.astype(dtype))
    return results


_BI_RNN_KINDS = {
    0: "t3",
    1: "t2",
    2: "t2",
    3: "t1",
    4: "t2",
    5: "t2",
    6: "t2",
    7: "t1",
    8: "t2",
    9: "t3",
    10: "t2",
    11: "t2",
    12: "int",
    13: "bool",
    14: "bool",
}


def _validate_bi_rnn(sig: OperationSignature) -> None:
    _check(sig, (15,), (1, 2, 3, 4), _BI_RNN_KINDS, optional=(9, 10, 11))
    _check_choice(sig, 12, FUSE_CODES, "fused activation")
    merge = constant_scalar(sig, 14)
    if merge is not None:
        allowed = (1, 3) if merge else (2, 4)
        if len(sig.outputs) not in allowed:
            raise sig.fail(
                f"with merge_outputs={bool(merge)} expected {allowed[0]} or "
                f"{allowed[1]} outputs, got {len(sig.outputs)}"
            )
    omitted = [sig.constants.get(i, 0) is None for i in (9, 10, 11)]  # NO_VALUE operands
    if omitted[0] and not (omitted[1] and omitted[2]):
        raise sig.fail("aux weights are given without an aux input")
    if omitted[1] != omitted[2]:
        raise sig.fail("fw and bw aux weights must be both present or both omitted")


def _execute_bi_rnn(ctx: ExecutionContext) -> list[np.ndarray]:
    time_major, merge = bool(ctx.scalar(13)), bool(ctx.scalar(14))
    n_out = len(ctx.signature.outputs)
    if n_out not in ((1, 3) if merge else (2, 4)):
        raise op_failed(ctx.code, f"{n_out} outputs do not match merge_outputs={merge}")
    x = _time_major(_float(ctx, 0, "input"), time_major, ctx.code, "input")
    aux_in = optional_input(ctx, 9)
    fw_aux_w, bw_aux_w = optional_input(ctx, 10), optional_input(ctx, 11)
    aux = (
        None
        if aux_in is None
        else _time_major(aux_in.astype(np.float64), time_major, ctx.code, "aux_input")
    )
    if (fw_aux_w is None) != (bw_aux_w is None) or (aux is None and fw_aux_w is not None):
        raise op_failed(ctx.code, "unsupported combination of aux input and aux weights")
    if aux is not None and aux.shape[:2] != x.shape[:2]:
        raise op_failed(
            ctx.code, f"aux input {aux.shape} and input {x.shape} differ in time or batch"
        )
    fw_aux = None if fw_aux_w is None else fw_aux_w.astype(np.float64)
    bw_aux = None if bw_aux_w is None else bw_aux_w.astype(np.float64)
    fuse = _fused(ctx, 12)
    # Parallel linking: the aux input replaces the input of the backward cell.
    bw_x = aux if aux is not None and fw_aux is None else x
    fw_out, fw_h = _rnn_sequence(
        ctx,
        x,
        aux,
        _float(ctx, 1, "fw_weights"),
        fw_aux,
        _float(ctx, 2, "fw_recurrent_weights"),
        _float(ctx, 3, "fw_bias"),
        _float(ctx, 4, "fw_hidden_state"),
        fuse,
        backward=False,
    )
    bw_out, bw_h = _rnn_sequence(
        ctx,
        bw_x,
        aux,
        _float(ctx, 5, "bw_weights"),
        bw_aux,
        _float(ctx, 6, "bw_recurrent_weights"),
        _float(ctx, 7, "bw_bias"),
        _float(ctx, 8, "bw_hidden_state"),
        fuse,
        backward=True,
    )
    dtype = ctx.output_info(0).dtype
    if merge:
        results = [_restore(np.concatenate([fw_out, bw_out], axis=2), time_major)]
    else:
        results = [_restore(fw_out, time_major), _restore(bw_out, time_major)]
    if n_out in (3, 4):
        results += [fw_h, bw_h]
    return [r.astype(dtype) for r in results]


# --------------------------------------------------------------- LSTM

# Positions in the LSTM operation's 27 inputs (see recurrent.py).
_GATES = 4  # input, forget, cell, output
_ACT, _CELL_CLIP, _PROJ_CLIP = 20, 21, 22
#: LSTM-op inputs that are optional (may be omitted).
_LSTM_OPTIONAL = (1, 5, 9, 10, 11, 12, 16, 17, 23, 24, 25, 26)
_LSTM_RANK1 = (9, 10, 11, 12, 13, 14, 15, 17, 23, 24, 25, 26)


class _Cell:
    """One direction of an LSTM layer: the 27 inputs of one LSTM step, minus x and states."""

    def __init__(
        self,
        ctx: ExecutionContext,
        tensors: Sequence[int],
        states: tuple[int, int],
        layer_norm: Sequence[int],
        scalars: tuple[int, int, int],
        aux_weights: Sequence[int] | None = None,
    ) -> None:
        self.ctx = ctx
        get = [optional_input(ctx, i) for i in tensors]  # LSTM inputs 1..17
        if aux_weights is not None:
            aux = [optional_input(ctx, i) for i in aux_weights]
            for g in range(_GATES):
                w, a = get[g], aux[g]
                if (w is None) != (a is None):
                    raise op_failed(
                        ctx.code,
                        "aux weights must be given exactly for the gates that have input weights",
                    )
                if w is not None and a is not None:
                    if a.ndim != 2 or w.ndim != 2 or a.shape[0] != w.shape[0]:
                        raise op_failed(
                            ctx.code, f"aux weights {a.shape} do not match input weights {w.shape}"
                        )
                    get[g] = np.concatenate([w, a], axis=1)
        # float64 once here: the cell (recurrent.py) computes in float64 and would
        # otherwise convert every weight again at every time step
        self.weights = [None if w is None else np.asarray(w, np.float64) for w in get]
        h, c = optional_input(ctx, states[0]), optional_input(ctx, states[1])
        if h is None or c is None:
            raise op_failed(ctx.code, "the input activation and cell states are required")
        self.h: np.ndarray = h
        self.c: np.ndarray = c
        self.layer_norm = [
            None if w is None else np.asarray(w, np.float64)
            for w in (optional_input(ctx, i) for i in layer_norm)
        ]
        self.scalars = [np.asarray(ctx.input(i)) for i in scalars]

    def run(self, x: np.ndarray, backward: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unroll over time-major ``x``; returns (outputs [T, B, O], last h, last c)."""
        signature = OperationSignature(self.ctx.code, [_F32] * 27, [_F32] * 4)
        h, c = self.h, self.c
        if x.shape[0] == 0:
            raise op_failed(self.ctx.code, "the sequence has no time steps")
        outputs: dict[int, np.ndarray] = {}
        for t in _steps(x.shape[0], backward):
            inputs = [x[t], *self.weights, h, c, *self.scalars, *self.layer_norm]
            _, h, c, outputs[t] = execute_lstm(ExecutionContext(signature, inputs))
        return np.stack([outputs[t] for t in range(x.shape[0])]), h, c


def _lstm_kinds(count: int, bidirectional: bool) -> dict[int, str]:
    kinds: dict[int, str] = {0: "t3"}
    if not bidirectional:
        for i in range(1, 20):
            kinds[i] = "t1" if i in _LSTM_RANK1 else "t2"
        kinds.update({20: "int", 21: "float", 22: "float", 23: "bool"})
        kinds.update({i: "t1" for i in range(24, count)})
        return kinds
    for base in (0, 17):  # fw 1..17, bw 18..34
        for i in range(1, 18):
            kinds[base + i] = "t1" if i in _LSTM_RANK1 else "t2"
    kinds.update({i: "t2" for i in range(35, 39)})
    kinds[39] = "t3"
    kinds.update({i: "t2" for i in range(40, 48)})
    kinds.update({48: "int", 49: "float", 50: "float", 51: "bool", 52: "bool"})
    kinds.update({i: "t1" for i in range(53, count)})
    return kinds


def _validate_lstm_clips(sig: OperationSignature, act: int, clips: Sequence[int]) -> None:
    _check_choice(sig, act, _LSTM_ACTIVATIONS, "activation")
    for i in clips:
        value = constant_scalar(sig, i)
        if value is not None and not value >= 0:
            raise sig.fail(f"input {i} (clip) is {value}; it must be >= 0 (0 disables clipping)")


def _validate_uni_lstm(sig: OperationSignature) -> None:
    optional = (*_LSTM_OPTIONAL[:8], 24, 25, 26, 27)
    _check(sig, (28,), (1, 3), _lstm_kinds(28, False), optional=optional)
    _validate_lstm_clips(sig, _ACT, (_CELL_CLIP, _PROJ_CLIP))


def _execute_uni_lstm(ctx: ExecutionContext) -> list[np.ndarray]:
    time_major = bool(ctx.scalar(23))
    x = _time_major(ctx.input(0), time_major, ctx.code, "input")
    cell = _Cell(ctx, range(1, 18), (18, 19), range(24, 28), (20, 21, 22))
    out, h, c = cell.run(x, backward=False)
    dtype = ctx.output_info(0).dtype
    results = [_restore(out, time_major)]
    if len(ctx.signature.outputs) == 3:
        results += [h, c]
    return [r.astype(dtype) for r in results]


def _validate_bi_lstm(sig: OperationSignature) -> None:
    optional = (
        1,
        5,
        9,
        10,
        11,
        12,
        16,
        17,
        18,
        22,
        26,
        27,
        28,
        29,
        33,
        34,
        *range(39, 48),
        *range(53, 61),
    )
    _check(sig, (61,), (1, 2, 5, 6), _lstm_kinds(61, True), optional=optional)
    _validate_lstm_clips(sig, 48, (49, 50))
    merge = constant_scalar(sig, 51)
    if merge is not None:
        allowed = (1, 5) if merge else (2, 6)
        if len(sig.outputs) not in allowed:
            raise sig.fail(
                f"with merge_outputs={bool(merge)} expected {allowed[0]} or "
                f"{allowed[1]} outputs, got {len(sig.outputs)}"
            )


def _execute_bi_lstm(ctx: ExecutionContext) -> list[np.ndarray]:
    merge, time_major = bool(ctx.scalar(51)), bool(ctx.scalar(52))
    n_out = len(ctx.signature.outputs)
    if n_out not in ((1, 5) if merge else (2, 6)):
        raise op_failed(ctx.code, f"{n_out} outputs do not match merge_outputs={merge}")
    x = _time_major(ctx.input(0), time_major, ctx.code, "input")
    aux_in = optional_input(ctx, 39)
    aux = None if aux_in is None else _time_major(aux_in, time_major, ctx.code, "aux_input")
    has_fw_aux = any(optional_input(ctx, i) is not None for i in range(40, 44))
    has_bw_aux = any(optional_input(ctx, i) is not None for i in range(44, 48))
    if has_fw_aux != has_bw_aux or (has_fw_aux and aux is None):
        raise op_failed(ctx.code, "unsupported combination of aux input and aux weights")
    if aux is not None and aux.shape[:2] != x.shape[:2]:
        raise op_failed(
            ctx.code, f"aux input {aux.shape} and input {x.shape} differ in time or batch"
        )
    cross = has_fw_aux
    scalars = (48, 49, 50)
    fw = _Cell(
        ctx, range(1, 18), (35, 36), range(53, 57), scalars, range(40, 44) if cross else None
    )
    bw = _Cell(
        ctx, range(18, 35), (37, 38), range(57, 61), scalars, range(44, 48) if cross else None
    )
    if cross:
        assert aux is not None  # checked above: aux weights need an aux input
        fw_x = np.concatenate([x, aux], axis=2)
        bw_x = fw_x
    else:
        fw_x = x
        bw_x = aux if aux is not None else x  # parallel linking feeds aux to the backward cell
    fw_out, fw_h, fw_c = fw.run(fw_x, backward=False)
    bw_out, bw_h, bw_c = bw.run(bw_x, backward=True)
    if merge:
        results = [_restore(np.concatenate([fw_out, bw_out], axis=2), time_major)]
    else:
        results = [_restore(fw_out, time_major), _restore(bw_out, time_major)]
    if n_out in (5, 6):
        results += [fw_h, fw_c, bw_h, bw_c]
    dtype = ctx.output_info(0).dtype
    return [r.astype(dtype) for r in results]


register(
    OperationCode.UNIDIRECTIONAL_SEQUENCE_RNN, validate=_validate_uni_rnn, execute=_execute_uni_rnn
)
register(
    OperationCode.BIDIRECTIONAL_SEQUENCE_RNN, validate=_validate_bi_rnn, execute=_execute_bi_rnn
)
#: Inputs a bound LSTM layer needs omitted: peepholes, projection, layer norms.
_PLAIN_OMITTED = (9, 10, 11, 16, 17, 24, 25, 26, 27)
_TANH = 4


def _bind_uni_lstm(sig: OperationSignature, state: object) -> Kernel | None:
    """The plain float32 LSTM layer (constant weights and biases of all four
    gates, tanh, no peephole, projection, clipping or layer norm: silero-vad's)
    with its gates' weights side by side, so a time step is two matrix
    products and the gates' elementwise work instead of eight products and
    the cell's per-step checks (300 µs of silero-vad's run).  The products sum
    in BLAS's order for the wider matrix: a float32 rounding from the cell's."""
    constants = sig.constants
    if sig.inputs[0].code != OperandCode.TENSOR_FLOAT32 or len(sig.outputs) not in (1, 3):
        return None
    found = [constants.get(i) for i in (1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 14, 15)]
    tensors = [t for t in found if t is not None and t.dtype == np.float32]
    if len(tensors) != len(found):
        return None
    for i in _PLAIN_OMITTED:
        if i < len(sig.inputs) and (i not in constants or constants[i] is not None):
            return None
    if [constants.get(i) for i in (_ACT, _CELL_CLIP, _PROJ_CLIP)] != [_TANH, 0, 0]:
        return None
    time_major = constants.get(23)
    if time_major is None:
        return None
    weights, recurrent, biases = tensors[:4], tensors[4:8], tensors[8:]
    units = biases[0].shape[0]
    if any(w.ndim != 2 or w.shape[0] != units for w in weights + recurrent):
        return None
    if any(r.shape[1] != units for r in recurrent) or any(b.shape != (units,) for b in biases):
        return None
    features = weights[0].shape[1]
    if any(w.shape[1] != features for w in weights):
        return None
    w_all = np.ascontiguousarray(np.concatenate(weights).T)  # [features, 4 * units]
    r_all = np.ascontiguousarray(np.concatenate(recurrent).T)  # [units, 4 * units]
    b_all = np.concatenate(biases)
    major = bool(time_major)
    states = len(sig.outputs) == 3
    dtype = sig.outputs[0].dtype

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x, h, c = inputs[0], inputs[18], inputs[19]
        if (
            not isinstance(x, np.ndarray)
            or not isinstance(h, np.ndarray)
            or not isinstance(c, np.ndarray)
            or x.ndim != 3
            or x.dtype != np.float32
            or x.shape[2] != features
            or h.dtype != np.float32
            or c.dtype != np.float32
            or h.shape != (x.shape[1 if major else 0], units)
            or c.shape != h.shape
            or x.shape[0 if major else 1] == 0
        ):
            return _execute_uni_lstm(ExecutionContext(sig, inputs))  # checks and explains
        steps = _time_major(x, major, sig.code, "input")
        outputs = np.empty((steps.shape[0], steps.shape[1], units), np.float32)
        for t in range(steps.shape[0]):
            z = steps[t] @ w_all + h @ r_all
            z = z + b_all
            input_gate = _sigmoid(z[:, :units])
            forget_gate = _sigmoid(z[:, units : 2 * units])
            cell_gate = np.tanh(z[:, 2 * units : 3 * units])
            output_gate = _sigmoid(z[:, 3 * units :])
            c = forget_gate * c + input_gate * cell_gate
            h = output_gate * np.tanh(c)
            outputs[t] = h
        results = [_restore(outputs, major)] + ([h, c] if states else [])
        return [r.astype(dtype) for r in results]

    return kernel


register(
    OperationCode.UNIDIRECTIONAL_SEQUENCE_LSTM,
    validate=_validate_uni_lstm,
    execute=_execute_uni_lstm,
    bind=_bind_uni_lstm,
)
register(
    OperationCode.BIDIRECTIONAL_SEQUENCE_LSTM, validate=_validate_bi_lstm, execute=_execute_bi_lstm
)
