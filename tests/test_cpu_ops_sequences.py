"""CPU driver: UNIDIRECTIONAL/BIDIRECTIONAL_SEQUENCE_RNN and _LSTM.

Each sequence operation is checked against repeated single RNN/LSTM steps
computed here in numpy, and, where the Android conformance specs publish
values, against those known answers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.cpu.executor import PreparedModel
from nnburst.operands import OperandInfo

from .op_models import OMITTED, model, rejects, run
from .op_operands import boolean, const, f32, fscalar, i32, info, omitted

# --------------------------------------------------------------- sequence RNN


def rnn_step(
    x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray, h: np.ndarray, fuse: int
) -> np.ndarray:
    """One step of the RNN operation itself (the 1.0 op), as the reference for the sequences."""
    batch, units = h.shape
    out = run(
        Op.RNN,
        [
            f32(*x.shape),
            const(f32(*w.shape), w),
            const(f32(*r.shape), r),
            const(f32(units), b),
            f32(batch, units),
            i32(fuse),
        ],
        [f32(batch, units), f32(batch, units)],
        x,
        h,
    )
    return out[1]


def rnn_sequence(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray,
    h: np.ndarray,
    fuse: int,
    backward: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Time-major x; repeated single steps (reversed for the backward direction)."""
    out = np.zeros((x.shape[0], h.shape[0], w.shape[0]), np.float32)
    steps = range(x.shape[0] - 1, -1, -1) if backward else range(x.shape[0])
    for t in steps:
        h = rnn_step(x[t], w, r, b, h, fuse)
        out[t] = h
    return out, h


def rnn_params(rng: np.random.Generator, units: int, size: int) -> tuple[np.ndarray, ...]:
    return (
        rng.normal(size=(units, size)).astype(np.float32) * 0.5,
        rng.normal(size=(units, units)).astype(np.float32) * 0.5,
        rng.normal(size=units).astype(np.float32),
    )


@pytest.mark.parametrize("time_major", [0, 1])
def test_unidirectional_sequence_rnn_is_repeated_rnn_steps(time_major: int) -> None:
    rng = np.random.default_rng(21)
    steps, batch, size, units = 4, 2, 3, 5
    x = rng.normal(size=(steps, batch, size)).astype(np.float32)
    w, r, b = rnn_params(rng, units, size)
    h0 = rng.normal(size=(batch, units)).astype(np.float32)
    want, last = rnn_sequence(x, w, r, b, h0, 1)
    feed = x if time_major else x.transpose(1, 0, 2).copy()
    out_dims = (steps, batch, units) if time_major else (batch, steps, units)
    got = run(
        Op.UNIDIRECTIONAL_SEQUENCE_RNN,
        [
            f32(*feed.shape),
            const(f32(units, size), w),
            const(f32(units, units), r),
            const(f32(units), b),
            f32(batch, units),
            i32(1),
            i32(time_major),
        ],
        [f32(*out_dims), f32(batch, units)],
        feed,
        h0,
    )
    np.testing.assert_allclose(
        got[0], want if time_major else want.transpose(1, 0, 2), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(got[1], last, rtol=1e-5, atol=1e-5)
    rejects(
        Op.UNIDIRECTIONAL_SEQUENCE_RNN,
        [
            f32(*feed.shape),
            const(f32(units, size), w),
            const(f32(units, units), r),
            const(f32(units), b),
            f32(batch, units),
            i32(1),
            i32(2),
        ],
        [f32(*out_dims)],
        "time_major",
    )


def bi_rnn_inputs(
    x: OperandInfo,
    fw: tuple[np.ndarray, ...],
    bw: tuple[np.ndarray, ...],
    batch: int,
    aux: Any,
    fw_aux: Any,
    bw_aux: Any,
    fuse: int,
    time_major: bool,
    merge: bool,
) -> list[Any]:
    def cell(p: tuple[np.ndarray, ...]) -> list[Any]:
        w, r, b = p
        return [
            const(f32(*w.shape), w),
            const(f32(*r.shape), r),
            const(f32(*b.shape), b),
            f32(batch, w.shape[0]),
        ]

    return [
        x,
        *cell(fw),
        *cell(bw),
        aux,
        fw_aux,
        bw_aux,
        i32(fuse),
        boolean(time_major),
        boolean(merge),
    ]


def test_bidirectional_sequence_rnn_is_forward_plus_reversed_backward() -> None:
    rng = np.random.default_rng(22)
    steps, batch, size, aux_size = 3, 2, 4, 3
    x = rng.normal(size=(steps, batch, size)).astype(np.float32)
    fw, bw = rnn_params(rng, 3, size), rnn_params(rng, 2, size)
    h_fw = rng.normal(size=(batch, 3)).astype(np.float32)
    h_bw = rng.normal(size=(batch, 2)).astype(np.float32)
    no_aux = [
        omitted(f32(steps, batch, aux_size)),
        omitted(f32(3, aux_size)),
        omitted(f32(2, aux_size)),
    ]
    fw_out, fw_last = rnn_sequence(x, *fw, h_fw, 0)
    bw_out, bw_last = rnn_sequence(x, *bw, h_bw, 0, backward=True)
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        bi_rnn_inputs(f32(steps, batch, size), fw, bw, batch, *no_aux, 0, True, False),
        [f32(steps, batch, 3), f32(steps, batch, 2), f32(batch, 3), f32(batch, 2)],
        x,
        h_fw,
        h_bw,
    )
    for g, w in zip(got, (fw_out, bw_out, fw_last, bw_last)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    # merged, batch-major
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        bi_rnn_inputs(f32(batch, steps, size), fw, bw, batch, *no_aux, 0, False, True),
        [f32(batch, steps, 5)],
        x.transpose(1, 0, 2).copy(),
        h_fw,
        h_bw,
    )[0]
    np.testing.assert_allclose(
        got, np.concatenate([fw_out, bw_out], 2).transpose(1, 0, 2), rtol=1e-5, atol=1e-5
    )
    # cross-linking: aux weights act like extra input columns
    aux = rng.normal(size=(steps, batch, aux_size)).astype(np.float32)
    fw_aux = rng.normal(size=(3, aux_size)).astype(np.float32)
    bw_aux = rng.normal(size=(2, aux_size)).astype(np.float32)
    xa = np.concatenate([x, aux], axis=2)
    fw_cat = (np.concatenate([fw[0], fw_aux], 1), fw[1], fw[2])
    bw_cat = (np.concatenate([bw[0], bw_aux], 1), bw[1], bw[2])
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        bi_rnn_inputs(
            f32(steps, batch, size),
            fw,
            bw,
            batch,
            f32(steps, batch, aux_size),
            const(f32(3, aux_size), fw_aux),
            const(f32(2, aux_size), bw_aux),
            0,
            True,
            False,
        ),
        [f32(steps, batch, 3), f32(steps, batch, 2)],
        x,
        h_fw,
        h_bw,
        aux,
    )
    np.testing.assert_allclose(got[0], rnn_sequence(xa, *fw_cat, h_fw, 0)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        got[1], rnn_sequence(xa, *bw_cat, h_bw, 0, backward=True)[0], rtol=1e-5, atol=1e-5
    )
    # parallel linking: the aux input feeds the backward cell instead of the input
    bw_p = rnn_params(rng, 2, aux_size)
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        bi_rnn_inputs(
            f32(steps, batch, size),
            fw,
            bw_p,
            batch,
            f32(steps, batch, aux_size),
            *no_aux[1:],
            0,
            True,
            False,
        ),
        [f32(steps, batch, 3), f32(steps, batch, 2)],
        x,
        h_fw,
        h_bw,
        aux,
    )
    np.testing.assert_allclose(
        got[1], rnn_sequence(aux, *bw_p, h_bw, 0, backward=True)[0], rtol=1e-5, atol=1e-5
    )
    rejects(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        bi_rnn_inputs(f32(steps, batch, size), fw, bw, batch, *no_aux, 0, True, True),
        [f32(steps, batch, 3), f32(steps, batch, 2)],
        "merge_outputs=True",
    )
    rejects(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        bi_rnn_inputs(
            f32(steps, batch, size),
            fw,
            bw,
            batch,
            no_aux[0],
            const(f32(3, aux_size), fw_aux),
            no_aux[2],
            0,
            True,
            False,
        ),
        [f32(steps, batch, 3), f32(steps, batch, 2)],
        "aux weights",
    )


# --------------------------------------------------------------- sequence LSTM


class LstmParams:
    """Weights of one LSTM direction, in the LSTM operation's input order (1..17, 23..26)."""

    def __init__(
        self,
        rng: np.random.Generator,
        size: int,
        units: int,
        out: int,
        cifg: bool = False,
        peephole: bool = False,
        projection: bool = False,
        layer_norm: bool = False,
    ) -> None:
        def m(*shape: int) -> np.ndarray:
            return (rng.normal(size=shape) * 0.4).astype(np.float32)

        gates = "fco" if cifg else "ifco"
        self.units, self.out = units, out
        self.w = {g: m(units, size) if g in gates else None for g in "ifco"}
        self.r = {g: m(units, out) if g in gates else None for g in "ifco"}
        self.p = {g: m(units) if peephole and (g != "i" or not cifg) else None for g in "ifo"}
        self.b = {g: m(units) if g in gates else None for g in "ifco"}
        self.proj = (m(out, units), m(out)) if projection else (None, None)
        self.ln = {g: m(units) + 1 if layer_norm and g in gates else None for g in "ifco"}

    def tensors(self, extra_cols: int = 0, aux: dict[str, np.ndarray] | None = None) -> list[Any]:
        """Constants (or omitted operands) for LSTM inputs 1..17."""

        def c(v: np.ndarray | None, *dims: int) -> Any:
            return omitted(f32(*dims)) if v is None else const(f32(*v.shape), v)

        w = (
            self.w
            if aux is None
            else {
                g: None if v is None else np.concatenate([v, aux[g]], 1) for g, v in self.w.items()
            }
        )
        return (
            [c(w[g], self.units, 1) for g in "ifco"]
            + [c(self.r[g], self.units, 1) for g in "ifco"]
            + [c(self.p[g], self.units) for g in "ifo"]
            + [c(self.b[g], self.units) for g in "ifco"]
            + [c(self.proj[0], self.out, self.units), c(self.proj[1], self.out)]
        )

    def norms(self) -> list[Any]:
        return [
            omitted(f32(self.units)) if self.ln[g] is None else const(f32(self.units), self.ln[g])
            for g in "ifco"
        ]


def lstm_sequence(
    x: np.ndarray,
    p: LstmParams,
    h: np.ndarray,
    c: np.ndarray,
    act: int,
    clips: tuple[float, float],
    backward: bool = False,
    aux: dict[str, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Time-major x through repeated single steps of the LSTM operation."""
    batch = x.shape[1]
    steps = range(x.shape[0] - 1, -1, -1) if backward else range(x.shape[0])
    out = np.zeros((x.shape[0], batch, p.out), np.float32)
    scratch = 3 if p.w["i"] is None else 4
    lstm = PreparedModel(
        model(
            Op.LSTM,
            [
                f32(batch, x.shape[2]),
                *p.tensors(aux=aux),
                f32(batch, p.out),
                f32(batch, p.units),
                i32(act),
                fscalar(clips[0]),
                fscalar(clips[1]),
                *p.norms(),
            ],
            [
                f32(batch, scratch * p.units),
                f32(batch, p.out),
                f32(batch, p.units),
                f32(batch, p.out),
            ],
        )
    )
    for t in steps:
        _, h, c, o = lstm.run([x[t], h, c])
        out[t] = o
    return out, h, c


LSTM_VARIANTS = [
    dict(),
    dict(cifg=True, peephole=True),
    dict(projection=True, layer_norm=True),
    dict(cifg=True, peephole=True, projection=True, layer_norm=True),
]


@pytest.mark.parametrize("variant", range(len(LSTM_VARIANTS)))
def test_unidirectional_sequence_lstm_is_repeated_lstm_steps(variant: int) -> None:
    rng = np.random.default_rng(30 + variant)
    steps, batch, size, units = 3, 2, 3, 4
    opts = LSTM_VARIANTS[variant]
    out_size = 2 if opts.get("projection") else units
    p = LstmParams(rng, size, units, out_size, **opts)
    x = rng.normal(size=(steps, batch, size)).astype(np.float32)
    h0 = rng.normal(size=(batch, out_size)).astype(np.float32)
    c0 = rng.normal(size=(batch, units)).astype(np.float32)
    clips = (0.0, 0.0) if variant % 2 == 0 else (2.0, 0.5)
    want, h, c = lstm_sequence(x, p, h0, c0, 4, clips)
    for time_major in (True, False):
        feed = x if time_major else x.transpose(1, 0, 2).copy()
        dims = (steps, batch, out_size) if time_major else (batch, steps, out_size)
        got = run(
            Op.UNIDIRECTIONAL_SEQUENCE_LSTM,
            [
                f32(*feed.shape),
                *p.tensors(),
                f32(batch, out_size),
                f32(batch, units),
                i32(4),
                fscalar(clips[0]),
                fscalar(clips[1]),
                boolean(time_major),
                *p.norms(),
            ],
            [f32(*dims), f32(batch, out_size), f32(batch, units)],
            feed,
            h0,
            c0,
        )
        np.testing.assert_allclose(
            got[0], want if time_major else want.transpose(1, 0, 2), rtol=1e-5, atol=1e-5
        )
        np.testing.assert_allclose(got[1], h, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[2], c, rtol=1e-5, atol=1e-5)


def bi_lstm_inputs(
    x: OperandInfo,
    fw: LstmParams,
    bw: LstmParams,
    batch: int,
    aux: Any,
    fw_aux: list[Any],
    bw_aux: list[Any],
    merge: bool,
    time_major: bool,
    clips: tuple[float, float] = (0.0, 0.0),
) -> list[Any]:
    return [
        x,
        *fw.tensors(),
        *bw.tensors(),
        f32(batch, fw.out),
        f32(batch, fw.units),
        f32(batch, bw.out),
        f32(batch, bw.units),
        aux,
        *fw_aux,
        *bw_aux,
        i32(4),
        fscalar(clips[0]),
        fscalar(clips[1]),
        boolean(merge),
        boolean(time_major),
        *fw.norms(),
        *bw.norms(),
    ]


def test_bidirectional_sequence_lstm_is_forward_plus_reversed_backward() -> None:
    rng = np.random.default_rng(40)
    steps, batch, size, aux_size = 3, 2, 3, 2
    fw = LstmParams(rng, size, 4, 4, peephole=True)
    bw = LstmParams(rng, size, 3, 2, cifg=True, projection=True, layer_norm=True)
    x = rng.normal(size=(steps, batch, size)).astype(np.float32)
    states = [rng.normal(size=(batch, n)).astype(np.float32) for n in (4, 4, 2, 3)]
    no_aux = omitted(f32(steps, batch, aux_size))
    no_w = [omitted(f32(4, aux_size))] * 4
    fw_out, fw_h, fw_c = lstm_sequence(x, fw, states[0], states[1], 4, (0.0, 0.0))
    bw_out, bw_h, bw_c = lstm_sequence(x, bw, states[2], states[3], 4, (0.0, 0.0), backward=True)
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_LSTM,
        bi_lstm_inputs(f32(steps, batch, size), fw, bw, batch, no_aux, no_w, no_w, False, True),
        [
            f32(steps, batch, 4),
            f32(steps, batch, 2),
            f32(batch, 4),
            f32(batch, 4),
            f32(batch, 2),
            f32(batch, 3),
        ],
        x,
        *states,
    )
    for g, w in zip(got, (fw_out, bw_out, fw_h, fw_c, bw_h, bw_c)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_LSTM,
        bi_lstm_inputs(f32(batch, steps, size), fw, bw, batch, no_aux, no_w, no_w, True, False),
        [f32(batch, steps, 6)],
        x.transpose(1, 0, 2).copy(),
        *states,
    )[0]
    np.testing.assert_allclose(
        got, np.concatenate([fw_out, bw_out], 2).transpose(1, 0, 2), rtol=1e-5, atol=1e-5
    )
    # cross-linking: the aux input multiplies its own weights in every gate
    aux = rng.normal(size=(steps, batch, aux_size)).astype(np.float32)
    fw_aux = {g: rng.normal(size=(4, aux_size)).astype(np.float32) for g in "ifco"}
    bw_aux = {g: rng.normal(size=(3, aux_size)).astype(np.float32) for g in "fco"}
    aux_consts = (
        [const(f32(4, aux_size), fw_aux[g]) for g in "ifco"],
        [omitted(f32(3, aux_size))] + [const(f32(3, aux_size), bw_aux[g]) for g in "fco"],
    )
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_LSTM,
        bi_lstm_inputs(
            f32(steps, batch, size),
            fw,
            bw,
            batch,
            f32(steps, batch, aux_size),
            *aux_consts,
            False,
            True,
        ),
        [f32(steps, batch, 4), f32(steps, batch, 2)],
        x,
        *states,
        aux,
    )
    xa = np.concatenate([x, aux], axis=2)
    np.testing.assert_allclose(
        got[0],
        lstm_sequence(xa, fw, states[0], states[1], 4, (0, 0), aux=fw_aux)[0],
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_allclose(
        got[1],
        lstm_sequence(xa, bw, states[2], states[3], 4, (0, 0), backward=True, aux=bw_aux)[0],
        rtol=1e-5,
        atol=1e-5,
    )
    # parallel linking: aux replaces the backward cell's input
    bw_p = LstmParams(rng, aux_size, 3, 3)
    states_p = states[:2] + [rng.normal(size=(batch, 3)).astype(np.float32)] * 2
    got = run(
        Op.BIDIRECTIONAL_SEQUENCE_LSTM,
        bi_lstm_inputs(
            f32(steps, batch, size),
            fw,
            bw_p,
            batch,
            f32(steps, batch, aux_size),
            no_w,
            no_w,
            False,
            True,
        ),
        [f32(steps, batch, 4), f32(steps, batch, 3)],
        x,
        *states_p,
        aux,
    )
    np.testing.assert_allclose(
        got[1],
        lstm_sequence(aux, bw_p, states_p[2], states_p[3], 4, (0, 0), backward=True)[0],
        rtol=1e-5,
        atol=1e-5,
    )
    rejects(
        Op.BIDIRECTIONAL_SEQUENCE_LSTM,
        bi_lstm_inputs(f32(steps, batch, size), fw, bw, batch, no_aux, no_w, no_w, False, True),
        [f32(steps, batch, 4)],
        "merge_outputs=False",
    )


def test_sequence_lstm_validation_and_float16() -> None:
    rng = np.random.default_rng(50)
    p = LstmParams(rng, 3, 4, 4)
    base = [
        f32(2, 1, 3),
        *p.tensors(),
        f32(1, 4),
        f32(1, 4),
        i32(4),
        fscalar(0.0),
        fscalar(0.0),
        boolean(True),
        *p.norms(),
    ]
    rejects(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, base[:-1], [f32(2, 1, 4)], "expected 28")
    bad = list(base)
    bad[20] = i32(5)
    rejects(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, bad, [f32(2, 1, 4)], "activation")
    bad = list(base)
    bad[21] = fscalar(-1.0)
    rejects(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, bad, [f32(2, 1, 4)], "clip")
    rejects(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, [f32(2, 3), *base[1:]], [f32(2, 1, 4)], "rank 2")
    rejects(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, base, [f32(2, 1, 4), f32(1, 4)], "expected 1 or 3")
    # float16: every tensor and both clips in half precision
    h = [
        (info(T.TENSOR_FLOAT16, *a[0].dimensions), a[1])
        if isinstance(a, tuple) and a[0].code == T.TENSOR_FLOAT32 and a[1] is not OMITTED
        else a
        for a in base[1:18]
    ]
    h = [
        (info(T.TENSOR_FLOAT16, *a[0].dimensions), a[1].astype(np.float16))
        if a[1] is not OMITTED
        else (info(T.TENSOR_FLOAT16, *a[0].dimensions), OMITTED)
        for a in h
    ]
    x = rng.normal(size=(2, 1, 3)).astype(np.float32)
    s = np.zeros((1, 4), np.float32)
    got = run(
        Op.UNIDIRECTIONAL_SEQUENCE_LSTM,
        [
            info(T.TENSOR_FLOAT16, 2, 1, 3),
            *h,
            info(T.TENSOR_FLOAT16, 1, 4),
            info(T.TENSOR_FLOAT16, 1, 4),
            i32(4),
            fscalar(0.0, T.FLOAT16),
            fscalar(0.0, T.FLOAT16),
            boolean(True),
            *[omitted(info(T.TENSOR_FLOAT16, 4))] * 4,
        ],
        [info(T.TENSOR_FLOAT16, 2, 1, 4)],
        x.astype(np.float16),
        s.astype(np.float16),
        s.astype(np.float16),
    )[0]
    want = lstm_sequence(x, p, s, s, 4, (0.0, 0.0))[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, atol=5e-3)


def test_unidirectional_sequence_lstm_known_answer_layer_norm_peephole_projection() -> None:
    """The conformance spec's 3-step LSTM (layer norm, peephole, projection)."""
    w = {
        "ii": [
            0.5,
            0.6,
            0.7,
            -0.8,
            -0.9,
            0.1,
            0.2,
            0.3,
            -0.4,
            0.5,
            -0.8,
            0.7,
            -0.6,
            0.5,
            -0.4,
            -0.5,
            -0.4,
            -0.3,
            -0.2,
            -0.1,
        ],
        "if": [
            -0.6,
            -0.1,
            0.3,
            0.2,
            0.9,
            -0.5,
            -0.2,
            -0.4,
            0.3,
            -0.8,
            -0.4,
            0.3,
            -0.5,
            -0.4,
            -0.6,
            0.3,
            -0.4,
            -0.6,
            -0.5,
            -0.5,
        ],
        "ic": [
            -0.4,
            -0.3,
            -0.2,
            -0.1,
            -0.5,
            0.5,
            -0.2,
            -0.3,
            -0.2,
            -0.6,
            0.6,
            -0.1,
            -0.4,
            -0.3,
            -0.7,
            0.7,
            -0.9,
            -0.5,
            0.8,
            0.6,
        ],
        "io": [
            -0.8,
            -0.4,
            -0.2,
            -0.9,
            -0.1,
            -0.7,
            0.3,
            -0.3,
            -0.8,
            -0.2,
            0.6,
            -0.2,
            0.4,
            -0.7,
            -0.3,
            -0.5,
            0.1,
            0.5,
            -0.6,
            -0.4,
        ],
        "ri": [-0.2, -0.3, 0.4, 0.1, -0.5, 0.9, -0.2, -0.3, -0.7, 0.05, -0.2, -0.6],
        "rf": [-0.5, -0.3, -0.5, -0.2, 0.6, 0.4, 0.9, 0.3, -0.1, 0.2, 0.5, 0.2],
        "rc": [-0.3, 0.2, 0.1, -0.3, 0.8, -0.08, -0.2, 0.3, 0.8, -0.6, -0.1, 0.2],
        "ro": [0.3, -0.1, 0.1, -0.2, -0.5, -0.7, -0.2, -0.6, -0.1, -0.4, -0.7, -0.2],
        "pi": [0.05, 0.1, 0.25, 0.15],
        "pf": [-0.02, -0.15, -0.25, -0.03],
        "po": [0.1, -0.1, -0.5, 0.05],
        "bi": [0.03, 0.15, 0.22, 0.38],
        "bf": [0.1, -0.3, -0.2, 0.1],
        "bc": [-0.05, 0.72, 0.25, 0.08],
        "bo": [0.05, -0.01, 0.2, 0.1],
        "pw": [-0.1, 0.2, 0.01, -0.2, 0.1, 0.5, 0.3, 0.08, 0.07, 0.2, -0.4, 0.2],
        "lni": [0.1, 0.2, 0.3, 0.5],
        "lnf": [0.2, 0.2, 0.4, 0.3],
        "lnc": [0.7, 0.2, 0.3, 0.8],
        "lno": [0.6, 0.2, 0.2, 0.5],
    }
    x = np.array(
        [
            0.7,
            0.8,
            0.1,
            0.2,
            0.3,
            0.3,
            0.2,
            0.9,
            0.8,
            0.1,
            0.8,
            0.1,
            0.2,
            0.4,
            0.5,
            0.1,
            0.5,
            0.2,
            0.4,
            0.2,
            0.2,
            0.7,
            0.7,
            0.1,
            0.7,
            0.6,
            0.9,
            0.2,
            0.5,
            0.7,
        ],
        np.float32,
    ).reshape(3, 2, 5)
    args = [f32(3, 2, 5)]
    args += [const(f32(4, 5), w["i" + g]) for g in "ifco"]
    args += [const(f32(4, 3), w["r" + g]) for g in "ifco"]
    args += [const(f32(4), w["p" + g]) for g in "ifo"]
    args += [const(f32(4), w["b" + g]) for g in "ifco"]
    args += [
        const(f32(3, 4), w["pw"]),
        f32(0),
        f32(2, 3),
        f32(2, 4),
        i32(4),
        fscalar(0.0),
        fscalar(0.0),
        boolean(True),
    ]
    args += [const(f32(4), w["ln" + g]) for g in "ifco"]
    out, h, c = run(
        Op.UNIDIRECTIONAL_SEQUENCE_LSTM,
        args,
        [f32(3, 2, 3), f32(2, 3), f32(2, 4)],
        x,
        np.zeros(0, np.float32),
        np.zeros((2, 3), np.float32),
        np.zeros((2, 4), np.float32),
    )
    golden = [
        0.024407668039203,
        0.128027379512787,
        -0.001709178090096,
        -0.006924282759428,
        0.084874063730240,
        0.063444979488850,
        0.013764165341854,
        0.140751048922539,
        0.039583537727594,
        -0.004039138555527,
        0.139963015913963,
        0.072681039571762,
        -0.004592306911945,
        0.155278354883194,
        0.083737745881081,
        0.007527053356171,
        0.161902531981468,
        0.056137066334486,
    ]
    np.testing.assert_allclose(out.ravel(), golden, atol=1e-5)
    np.testing.assert_allclose(h.ravel(), golden[-6:], atol=1e-5)
    np.testing.assert_allclose(
        c.ravel(),
        [
            -0.742560744285583,
            0.579139292240143,
            0.114988230168819,
            0.649957716464996,
            -0.686565399169922,
            0.548869132995605,
            0.173138767480850,
            0.587379336357117,
        ],
        atol=1e-5,
    )
