"""CPU driver: QUANTIZED_16BIT_LSTM and QUANTIZED_LSTM.

Known answers from the Android conformance specs, a real-number model of
the peephole cell, and the refusals and run-time errors by their wording.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.codes import ResultCode
from nnburst.cpu.executor import PreparedModel
from nnburst.errors import NNError
from nnburst.operands import OperandInfo

from .op_models import model, rejects, run
from .op_operands import const, fscalar, i32, info, omitted

# --------------------------------------------------------------- QUANTIZED_16BIT_LSTM

Q16_WEIGHTS = {
    "ii": [146, 250, 235, 171, 10, 218, 171, 108],
    "if": [24, 50, 132, 179, 158, 110, 3, 169],
    "ic": [133, 34, 29, 49, 206, 109, 54, 183],
    "io": [195, 187, 11, 99, 109, 10, 218, 48],
    "ri": [254, 206, 77, 168, 71, 20, 215, 6, 223, 7, 118, 225, 59, 130, 174, 26],
    "rf": [137, 240, 103, 52, 68, 51, 237, 112, 0, 220, 89, 23, 69, 4, 207, 253],
    "rc": [172, 60, 205, 65, 14, 0, 140, 168, 240, 223, 133, 56, 142, 64, 246, 216],
    "ro": [106, 214, 67, 23, 59, 158, 45, 3, 119, 132, 49, 205, 129, 218, 11, 98],
}
Q16_BIAS = {
    "i": [-7876, 13488, -726, 32839],
    "f": [9206, -46884, -11693, -38724],
    "c": [39481, 48624, 48976, -21419],
    "o": [-58999, -17050, -41852, -40538],
}


def q16_lstm_inputs(batch: int, cell_scale: float = 1 / 2048, weights_zp: int = 100) -> list[Any]:
    q8 = T.TENSOR_QUANT8_ASYMM
    ws = 0.00408021
    args: list[Any] = [info(q8, batch, 2, scale=1 / 128, zp=128)]
    for k in ("ii", "if", "ic", "io"):
        args.append(const(info(q8, 4, 2, scale=ws, zp=weights_zp), Q16_WEIGHTS[k]))
    for k in ("ri", "rf", "rc", "ro"):
        args.append(const(info(q8, 4, 4, scale=ws, zp=weights_zp), Q16_WEIGHTS[k]))
    for k in "ifco":
        args.append(const(info(T.TENSOR_INT32, 4, scale=ws / 128), Q16_BIAS[k]))
    args += [
        info(T.TENSOR_QUANT16_SYMM, batch, 4, scale=cell_scale),
        info(q8, batch, 4, scale=1 / 128, zp=128),
    ]
    return args


def test_quantized_16bit_lstm_known_answer() -> None:
    outs = [
        info(T.TENSOR_QUANT16_SYMM, 2, 4, scale=1 / 2048),
        info(T.TENSOR_QUANT8_ASYMM, 2, 4, scale=1 / 128, zp=128),
    ]
    cell, out = run(
        Op.QUANTIZED_16BIT_LSTM,
        q16_lstm_inputs(2),
        outs,
        np.array([[166, 179], [50, 150]], np.uint8),
        np.array([[876, 1034, 955, -909], [761, 1029, 796, -1036]], np.int16),
        np.array([[136, 150, 140, 115], [135, 152, 138, 112]], np.uint8),
    )
    np.testing.assert_array_equal(cell, [[1485, 1177, 1373, -1023], [1019, 1355, 1097, -1235]])
    np.testing.assert_array_equal(out, [[140, 151, 146, 112], [136, 156, 142, 112]])


def test_quantized_16bit_lstm_with_weights_given_at_run_time() -> None:
    """The weights packed per run (model inputs) give what the packing done once
    at prepare time (constants) gives."""
    outs = [
        info(T.TENSOR_QUANT16_SYMM, 2, 4, scale=1 / 2048),
        info(T.TENSOR_QUANT8_ASYMM, 2, 4, scale=1 / 128, zp=128),
    ]
    args = q16_lstm_inputs(2)
    x = np.array([[166, 179], [50, 150]], np.uint8)
    cell = np.array([[876, 1034, 955, -909], [761, 1029, 796, -1036]], np.int16)
    previous = np.array([[136, 150, 140, 115], [135, 152, 138, 112]], np.uint8)
    want = run(Op.QUANTIZED_16BIT_LSTM, args, outs, x, cell, previous)
    feeds = [value for _, value in args[1:13]]
    runtime = [args[0], *(i for i, _ in args[1:13]), *args[13:]]
    got = run(Op.QUANTIZED_16BIT_LSTM, runtime, outs, x, *feeds, cell, previous)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_quantized_16bit_lstm_validation() -> None:
    outs = [
        info(T.TENSOR_QUANT16_SYMM, 1, 4, scale=1 / 2048),
        info(T.TENSOR_QUANT8_ASYMM, 1, 4, scale=1 / 128, zp=128),
    ]
    rejects(Op.QUANTIZED_16BIT_LSTM, q16_lstm_inputs(1, cell_scale=1 / 1024), outs, "2\\*\\*-11")
    args = q16_lstm_inputs(1)
    args[3] = const(info(T.TENSOR_QUANT8_ASYMM, 4, 2, scale=0.00408021, zp=99), Q16_WEIGHTS["ic"])
    rejects(Op.QUANTIZED_16BIT_LSTM, args, outs, "share one scale")
    args = q16_lstm_inputs(1)
    args[0] = info(T.TENSOR_QUANT8_ASYMM, 1, 2, scale=1 / 64, zp=128)
    rejects(Op.QUANTIZED_16BIT_LSTM, args, outs, "scale 1/128")
    rejects(Op.QUANTIZED_16BIT_LSTM, q16_lstm_inputs(1)[:-1], outs, "expected 15 inputs")


@pytest.mark.parametrize("integer_bits", [3, 4, 5, 6])
def test_the_int16_fixed_point_gates_follow_logistic_and_tanh(integer_bits: int) -> None:
    """gemmlowp's 16-bit logistic and tanh (Q0.15 out) over every int16 input, against
    the real functions: within 6 and 12 steps of 2**-15 (their approximation error)."""
    from nnburst.cpu.ops.quantized_lstm import _logistic16, _tanh16

    x = np.arange(-32768, 32768, dtype=np.int64)
    real = x / 2.0 ** (15 - integer_bits)
    logistic = np.clip(np.round(32768 / (1 + np.exp(-real))), -32768, 32767)
    tanh = np.clip(np.round(32768 * np.tanh(real)), -32768, 32767)
    assert np.abs(_logistic16(x, integer_bits) - logistic).max() <= 6
    assert np.abs(_tanh16(x, integer_bits) - tanh).max() <= 12
    assert (
        _logistic16(np.int64(0), integer_bits) == 16384 and _tanh16(np.int64(0), integer_bits) == 0
    )


def _q16_with(changes: dict[int, dict[str, Any]]) -> list[Any]:
    """q16_lstm_inputs(1) with some operands' type changed (``{index: {field: value}}``)."""
    args = q16_lstm_inputs(1)
    for index, fields in changes.items():
        item = args[index]
        if isinstance(item, OperandInfo):
            args[index] = dataclasses.replace(item, **fields)
        else:
            args[index] = (dataclasses.replace(item[0], **fields), item[1])
    return args


@pytest.mark.parametrize(
    "changes, outputs, message",
    [
        ({0: {"scale": 1 / 64}}, {}, "input 0 (input) must have scale 1/128 and zero point 128"),
        ({14: {"zero_point": 0}}, {}, "input 14 (prev_output) must have scale 1/128 and zero point 128"),
        ({i: {"scale": 0.0} for i in range(1, 9)}, {}, "weights need a non-zero scale"),
        ({1: {"zero_point": 99}}, {}, "input 2: all weights must share one scale and zero point"),
        ({2: {"scale": 0.004}}, {}, "input 2: all weights must share one scale and zero point"),
        ({8: {"zero_point": 99}}, {}, "input 8: all weights must share one scale and zero point"),
        ({9: {"scale": 0.001}}, {}, "input 9: bias scale must be weights scale / 128, zero point 0"),
        ({12: {"zero_point": 1}}, {}, "input 12: bias scale must be weights scale / 128, zero point 0"),
        ({13: {"zero_point": 1}}, {}, "input 13 (prev_cell_state) must have scale 2**-11 (4 integer bits) and zero point 0"),
        ({}, {0: {"scale": 1 / 1024}}, "outputs must keep the cell state's and the output's quantization"),
        ({}, {1: {"zero_point": 0}}, "outputs must keep the cell state's and the output's quantization"),
        ({}, {0: {"dimensions": (1, 1, 4)}}, "output 0"),
        ({}, {1: {"dimensions": (4,)}}, "output 1"),
        ({10: {"dimensions": (1, 4)}}, {}, "input 10"),
    ],
)  # fmt: skip
def test_quantized_16bit_lstm_refuses_each_wrong_operand_by_name(
    changes: dict[int, dict[str, Any]], outputs: dict[int, dict[str, Any]], message: str
) -> None:
    outs = [
        info(T.TENSOR_QUANT16_SYMM, 1, 4, scale=1 / 2048),
        info(T.TENSOR_QUANT8_ASYMM, 1, 4, scale=1 / 128, zp=128),
    ]
    for index, fields in outputs.items():
        outs[index] = dataclasses.replace(outs[index], **fields)
    rejects(Op.QUANTIZED_16BIT_LSTM, _q16_with(changes), outs, re.escape(message))


# --------------------------------------------------------------- QUANTIZED_LSTM

QL_W = {
    "ii": [
        64,
        77,
        89,
        -102,
        -115,
        13,
        25,
        38,
        -51,
        64,
        -102,
        89,
        -77,
        64,
        -51,
        -64,
        -51,
        -38,
        -25,
        -13,
    ],
    "if": [
        -77,
        -13,
        38,
        25,
        115,
        -64,
        -25,
        -51,
        38,
        -102,
        -51,
        38,
        -64,
        -51,
        -77,
        38,
        -51,
        -77,
        -64,
        -64,
    ],
    "ic": [
        -51,
        -38,
        -25,
        -13,
        -64,
        64,
        -25,
        -38,
        -25,
        -77,
        77,
        -13,
        -51,
        -38,
        -89,
        89,
        -115,
        -64,
        102,
        77,
    ],
    "io": [
        -102,
        -51,
        -25,
        -115,
        -13,
        -89,
        38,
        -38,
        -102,
        -25,
        77,
        -25,
        51,
        -89,
        -38,
        -64,
        13,
        64,
        -77,
        -51,
    ],
    "ri": [-25, -38, 51, 13, -64, 115, -25, -38, -89, 6, -25, -77],
    "rf": [-64, -38, -64, -25, 77, 51, 115, 38, -13, 25, 64, 25],
    "rc": [-38, 25, 13, -38, 102, -10, -25, 38, 102, -77, -13, 25],
    "ro": [38, -13, 13, -25, -64, -89, -25, -77, -13, -51, -89, -25],
    "bi": [644245, 3221226, 4724464, 8160438],
    "bf": [2147484, -6442451, -4294968, 2147484],
    "bc": [-1073742, 15461883, 5368709, 1717987],
    "bo": [1073742, -214748, 4294968, 2147484],
    "pw": [-25, 51, 3, -51, 25, 127, 77, 20, 18, 51, -102, 51],
    "pb": [0, 0, 0],
    "lni": [3277, 6553, 9830, 16384],
    "lnf": [6553, 6553, 13107, 9830],
    "lnc": [22937, 6553, 9830, 26214],
    "lno": [19660, 6553, 6553, 16384],
}
QL_X = np.array([[90, 102, 13, 26, 38], [102, 13, 26, 51, 64]], np.int8)


def qlstm_inputs(w: dict[str, Any], out_size: int) -> list[Any]:
    units, size = 4, 5
    s8, s16 = T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM

    def c(key: str, i: OperandInfo) -> Any:
        return omitted(i) if w.get(key) is None else const(i, w[key])

    args: list[Any] = [info(T.TENSOR_QUANT8_ASYMM_SIGNED, 2, size, scale=0.0078125)]
    args += [c(k, info(s8, units, size, scale=0.00784314)) for k in ("ii", "if", "ic", "io")]
    args += [c(k, info(s8, units, out_size, scale=0.00784314)) for k in ("ri", "rf", "rc", "ro")]
    args += [omitted(info(s16, units, scale=1.0))] * 3
    args += [c("b" + k, info(T.TENSOR_INT32, units, scale=4.65661e-08)) for k in "ifco"]
    args += [
        c("pw", info(s8, out_size, units, scale=0.00392157)),
        c("pb", info(T.TENSOR_INT32, out_size)),
    ]
    args += [
        info(T.TENSOR_QUANT8_ASYMM_SIGNED, 2, out_size, scale=3.05176e-05),
        info(s16, 2, units, scale=3.05176e-05),
    ]
    args += [c("ln" + k, info(s16, units, scale=3.05182e-05)) for k in "ifco"]
    args += [fscalar(v) for v in (0.0, 0.0, 0.007059, 0.007812, 0.007059, 0.007812)]
    return args + [i32(0), fscalar(0.007)]


def qlstm_outputs(out_size: int) -> list[OperandInfo]:
    state = info(T.TENSOR_QUANT8_ASYMM_SIGNED, 2, out_size, scale=3.05176e-05)
    return [state, info(T.TENSOR_QUANT16_SYMM, 2, 4, scale=3.05176e-05), state]


@pytest.mark.parametrize("case", ["projection", "cifg_projection", "cifg_no_projection"])
def test_quantized_lstm_known_answers(case: str) -> None:
    w = dict(QL_W)
    out_size = 3
    if case.startswith("cifg"):
        for key in ("ii", "ri", "bi", "lni"):
            w[key] = None
    if case == "cifg_no_projection":
        out_size = 4
        w.update(
            pw=None,
            pb=None,
            rf=[-64, -38, -64, -25, 77, 51, 115, 38, -13, 25, 64, 25, 25, 38, -13, 51],
            rc=[-38, 25, 13, -38, 102, -10, -25, 38, 102, -77, -13, 25, 38, -13, 25, 64],
            ro=[38, -13, 13, -25, -64, -89, -25, -77, -13, -51, -89, -25, 13, 64, 25, -38],
        )
    want = {
        "projection": (
            [127, 127, -108, -67, 127, 127],
            [-14650, 8939, 5771, 6715, -11843, 7847, 1508, 12939],
        ),
        "cifg_projection": (
            [127, 127, 127, -128, 127, 127],
            [-11692, 9960, 5491, 8861, -9422, 7726, 2056, 13149],
        ),
        "cifg_no_projection": (
            [-15, 21, 14, 20, -15, 15, 5, 27],
            [-11692, 9960, 5491, 8861, -9422, 7726, 2056, 13149],
        ),
    }[case]
    state, cell, out = run(
        Op.QUANTIZED_LSTM,
        qlstm_inputs(w, out_size),
        qlstm_outputs(out_size),
        QL_X,
        np.zeros((2, out_size), np.int8),
        np.zeros((2, 4), np.int16),
    )
    np.testing.assert_array_equal(out.ravel(), want[0])
    np.testing.assert_array_equal(state, out)
    np.testing.assert_array_equal(cell.ravel(), want[1])


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def _qlstm_peephole_case(
    peephole: bool, zp: int = 3, cell_clip: float = 0.0, projection: int = 0
) -> tuple[list[Any], tuple[np.ndarray, ...]]:
    """A QUANTIZED_LSTM step with peepholes (no layer norm, no CIFG; a cell clip and
    a projection to ``projection`` outputs if asked): the operands, and what the step
    computes in real numbers (float64), quantized."""
    rng = np.random.default_rng(32)
    units, size = 4, 3
    out_size = projection or units
    sx, sh, sw, sr, sp, scell = 1 / 64, 1 / 128, 1 / 256, 1 / 128, 1 / 64, 2.0**-11
    hidden_scale, hidden_zp = (1 / 128, 5) if projection else (sh, -zp)
    s8, s16 = T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM
    w = {g: rng.integers(-60, 61, (units, size)) for g in "ifco"}
    r = {g: rng.integers(-60, 61, (units, out_size)) for g in "ifco"}
    bias = {g: rng.integers(-3000, 3001, units) for g in "ifco"}
    peep = {g: rng.integers(-50, 51, units) * peephole for g in "ifo"}
    x = rng.integers(-100, 101, (2, size)).astype(np.int8)
    h = rng.integers(-100, 101, (2, out_size)).astype(np.int8)
    c = rng.integers(-1500, 1501, (2, units)).astype(np.int16)
    proj_w = rng.integers(-20, 21, (out_size, units))
    proj_b = rng.integers(-200, 201, out_size)
    args: list[Any] = [info(T.TENSOR_QUANT8_ASYMM_SIGNED, 2, size, scale=sx, zp=zp)]
    args += [const(info(s8, units, size, scale=sw), w[g]) for g in "ifco"]
    args += [const(info(s8, units, out_size, scale=sr), r[g]) for g in "ifco"]
    args += [const(info(s16, units, scale=sp), peep[g]) for g in "ifo"]
    args += [const(info(T.TENSOR_INT32, units, scale=sw * sx), bias[g]) for g in "ifco"]
    if projection:
        args += [
            const(info(s8, out_size, units, scale=1 / 128), proj_w),
            const(info(T.TENSOR_INT32, out_size), proj_b),
        ]
    else:
        args += [omitted(info(s8, units, units, scale=1.0)), omitted(info(T.TENSOR_INT32, units))]
    args += [
        info(T.TENSOR_QUANT8_ASYMM_SIGNED, 2, out_size, scale=sh, zp=-zp),
        info(s16, 2, units, scale=scell),
    ]
    args += [omitted(info(s16, units, scale=1.0))] * 4
    # No layer norm: the gates' intermediate scale is the Q3.12 of their arithmetic.
    args += [fscalar(v) for v in (cell_clip, 0.0, 2.0**-12, 2.0**-12, 2.0**-12, 2.0**-12)]
    args += [i32(hidden_zp), fscalar(hidden_scale)]

    xr, hr, cr = (x.astype(float) - zp) * sx, (h.astype(float) + zp) * sh, c * scell

    def pre(g: str) -> np.ndarray:
        return xr @ (w[g] * sw).T + hr @ (r[g] * sr).T + bias[g] * sw * sx

    forget = _sigmoid(pre("f") + peep["f"] * sp * cr)
    input_gate = _sigmoid(pre("i") + peep["i"] * sp * cr)
    cell = forget * cr + input_gate * np.tanh(pre("c"))
    if cell_clip:
        cell = np.clip(cell, -cell_clip, cell_clip)
    out_gate = _sigmoid(pre("o") + peep["o"] * sp * cell)
    hidden = np.clip(np.round(out_gate * np.tanh(cell) / hidden_scale) + hidden_zp, -128, 127)
    if projection:
        real = (hidden - hidden_zp) * hidden_scale @ (proj_w / 128).T + proj_b * hidden_scale / 128
        hidden = np.clip(np.round(real / sh) - zp, -128, 127)
    return args, (x, h, c, np.round(cell / scell), hidden)


@pytest.mark.parametrize(
    "peephole, cell_clip, projection",
    [(True, 0.0, 0), (False, 0.0, 0), (True, 0.25, 0), (True, 0.0, 3), (True, 0.3, 3)],
    ids=["peephole", "no-peephole", "cell-clip", "projection", "clip-and-projection"],
)
def test_quantized_lstm_peepholes_against_a_real_number_model(
    peephole: bool, cell_clip: float, projection: int
) -> None:
    """Each gate sees its peephole weight times the cell state (the previous one for
    the input and forget gates, the new, clipped one for the output gate).  The
    integer step may differ from exact arithmetic by its roundings only: at most 3
    cell-state steps of 2**-11 and one output step."""
    args, (x, h, c, want_cell, want_out) = _qlstm_peephole_case(
        peephole, cell_clip=cell_clip, projection=projection
    )
    out_size = projection or 4
    state = info(T.TENSOR_QUANT8_ASYMM_SIGNED, 2, out_size, scale=1 / 128, zp=-3)
    outs = [state, info(T.TENSOR_QUANT16_SYMM, 2, 4, scale=2.0**-11), state]
    state, cell, out = run(Op.QUANTIZED_LSTM, args, outs, x, h, c)
    assert np.abs(cell.astype(int) - want_cell).max() <= 3
    assert np.abs(out.astype(int) - want_out).max() <= 1
    np.testing.assert_array_equal(state, out)
    if cell_clip:  # the clip binds: some cell values sit on it
        limit = int(cell_clip * 2048)
        assert np.abs(cell).max() == limit and (np.abs(c) > limit).any()
    if peephole and not cell_clip and not projection:  # the peepholes matter
        _, (*_, plain_cell, plain_out) = _qlstm_peephole_case(False)
        assert np.abs(plain_cell - want_cell).max() > 50
        assert np.abs(plain_out - want_out).max() > 3


@pytest.mark.parametrize("shift, accepted", [(-16, False), (-15, True), (-9, True), (-8, False)])
def test_quantized_lstm_cell_state_scale_is_a_power_of_two_from_2_15_to_2_9(
    shift: int, accepted: bool
) -> None:
    args = qlstm_inputs(QL_W, 3)
    args[19] = info(T.TENSOR_QUANT16_SYMM, 2, 4, scale=2.0**shift)
    if accepted:
        PreparedModel(model(Op.QUANTIZED_LSTM, args, qlstm_outputs(3)))
    else:
        message = f"input 19 (cell state) scale {2.0**shift} must be a power of two between"
        rejects(Op.QUANTIZED_LSTM, args, qlstm_outputs(3), re.escape(message))


def test_quantized_lstm_refusals_name_what_is_wrong() -> None:
    w = dict(QL_W, ri=None)
    rejects(
        Op.QUANTIZED_LSTM,
        qlstm_inputs(w, 3),
        qlstm_outputs(3),
        re.escape(
            "input_to_input and recurrent_to_input weights must be both present (LSTM) "
            "or both omitted (CIFG)"
        ),
    )
    args = qlstm_inputs(QL_W, 3)
    args[26] = fscalar(0.0)
    rejects(
        Op.QUANTIZED_LSTM,
        args,
        qlstm_outputs(3),
        re.escape("input 26 (scale) is 0.0; it must be > 0"),
    )
    args = qlstm_inputs(QL_W, 3)
    args[31] = fscalar(-1.0)
    rejects(
        Op.QUANTIZED_LSTM,
        args,
        qlstm_outputs(3),
        re.escape("input 31 (scale) is -1.0; it must be > 0"),
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"ii": None, "ri": None, "lni": None}, "CIFG (no input_to_input weights) omits every input-gate tensor"),
        ({"bf": None}, "gate 'f' needs its input/recurrent weights and bias"),
        ({"bo": None}, "gate 'o' needs its input/recurrent weights and bias"),
        ({"lnc": None}, "layer norm weights must be all present or all omitted"),
    ],
)  # fmt: skip
def test_quantized_lstm_inconsistent_operands_fail_at_run_time(
    change: dict[str, Any], message: str
) -> None:
    prepared = PreparedModel(
        model(Op.QUANTIZED_LSTM, qlstm_inputs(dict(QL_W, **change), 3), qlstm_outputs(3))
    )
    with pytest.raises(NNError, match=re.escape(message)) as err:
        prepared.run([QL_X, np.zeros((2, 3), np.int8), np.zeros((2, 4), np.int16)])
    assert err.value.code == ResultCode.OP_FAILED


def test_quantized_lstm_validation_and_execution_errors() -> None:
    w = dict(QL_W)
    w["ii"] = None  # input weights without recurrent-to-input weights
    rejects(Op.QUANTIZED_LSTM, qlstm_inputs(w, 3), qlstm_outputs(3), "both omitted")
    args = qlstm_inputs(QL_W, 3)
    args[19] = info(T.TENSOR_QUANT16_SYMM, 2, 4, scale=0.001)
    rejects(Op.QUANTIZED_LSTM, args, qlstm_outputs(3), "power of two")
    args = qlstm_inputs(QL_W, 3)
    args[0] = info(T.TENSOR_QUANT8_ASYMM, 2, 5, scale=0.0078125)
    rejects(Op.QUANTIZED_LSTM, args, qlstm_outputs(3), "input 0 has type")
    w = dict(QL_W)
    w["lnc"] = None  # layer norm on some gates only
    prepared = PreparedModel(model(Op.QUANTIZED_LSTM, qlstm_inputs(w, 3), qlstm_outputs(3)))
    with pytest.raises(NNError, match="layer norm") as err:
        prepared.run([QL_X, np.zeros((2, 3), np.int8), np.zeros((2, 4), np.int16)])
    assert err.value.code == ResultCode.OP_FAILED
