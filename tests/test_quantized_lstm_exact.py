"""QUANTIZED_LSTM's clips and saturations, exactly.

A step is checked against a real-number model of the LSTM (float64, quantized
at the end) within one output step, and its integer parts exactly: the
projection clip and the cell clip are functions of the unclipped step's
integers (for one step the cell state feeds no gate before it is clipped), so a
step with a clip must equal the same step without it, clipped by the limit the
test computes itself (the clip over the operand's scale, truncated, at most the
type's largest value, applied symmetrically around 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.operands import OperandInfo

from .op_models import OMITTED, run

UNITS, SIZE, OUT = 4, 3, 3
S8, S16, Q8 = T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
SX, SW, SR = 1 / 64, 1 / 64, 1 / 128  # input, input weights, recurrent weights
CELL_SCALE = 2.0**-11
PROJ_SCALE = 1 / 32  # projection weights: large, so the projected output saturates


def _info(code: T, *dims: int, scale: float = 0.0, zp: int = 0) -> OperandInfo:
    return OperandInfo(code, dims, scale, zp)


def _const(i: OperandInfo, value: Any) -> tuple[OperandInfo, np.ndarray]:
    return i, np.asarray(value).astype(i.dtype).reshape(i.dimensions)


def _scalar(value: float) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.FLOAT32, ()), np.array(value, np.float32)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


class Case:
    """One LSTM step (no CIFG, peepholes or layer norm), its operands and its
    real-number result."""

    def __init__(
        self,
        seed: int,
        *,
        projection: bool,
        hidden_scale: float,
        out_scale: float,
        out_zp: int,
        cell: np.ndarray | None = None,
    ) -> None:
        rng = np.random.default_rng(seed)
        self.projection = projection
        self.out_size = OUT if projection else UNITS
        self.hidden_scale, self.out_scale, self.out_zp = hidden_scale, out_scale, out_zp
        self.hidden_zp = 2 if projection else out_zp
        self.w = {g: rng.integers(-100, 101, (UNITS, SIZE)) for g in "ifco"}
        self.r = {g: rng.integers(-100, 101, (UNITS, self.out_size)) for g in "ifco"}
        self.bias = {g: rng.integers(-2000, 2001, UNITS) for g in "ifco"}
        self.proj_w = rng.integers(-127, 128, (OUT, UNITS))
        self.proj_b = rng.integers(-3000, 3001, OUT)
        self.x = rng.integers(-128, 128, (3, SIZE)).astype(np.int8)
        self.h = rng.integers(-128, 128, (3, self.out_size)).astype(np.int8)
        if cell is None:
            cell = rng.integers(-12000, 12001, (3, UNITS))
        self.c = np.asarray(cell).astype(np.int16)

    def operands(self, cell_clip: float = 0.0, proj_clip: float = 0.0) -> list[Any]:
        units, out = UNITS, self.out_size
        args: list[Any] = [_info(Q8, 3, SIZE, scale=SX, zp=-1)]
        args += [_const(_info(S8, units, SIZE, scale=SW), self.w[g]) for g in "ifco"]
        args += [_const(_info(S8, units, out, scale=SR), self.r[g]) for g in "ifco"]
        args += [(_info(S16, units, scale=1.0), OMITTED)] * 3
        args += [_const(_info(T.TENSOR_INT32, units), self.bias[g]) for g in "ifco"]
        if self.projection:
            args += [
                _const(_info(S8, OUT, units, scale=PROJ_SCALE), self.proj_w),
                _const(_info(T.TENSOR_INT32, OUT), self.proj_b),
            ]
        else:
            args += [(_info(S8, units, units, scale=1.0), OMITTED)]
            args += [(_info(T.TENSOR_INT32, units), OMITTED)]
        args += [
            _info(Q8, 3, out, scale=self.out_scale, zp=self.out_zp),
            _info(S16, 3, units, scale=CELL_SCALE),
        ]
        args += [(_info(S16, units, scale=1.0), OMITTED)] * 4
        args += [_scalar(v) for v in (cell_clip, proj_clip, *[2.0**-12] * 4)]
        args += [(OperandInfo(T.INT32, ()), np.array(self.hidden_zp, np.int32))]
        return args + [_scalar(self.hidden_scale)]

    def run(self, cell_clip: float = 0.0, proj_clip: float = 0.0) -> tuple[np.ndarray, ...]:
        """(output, cell state) of the step."""
        state = _info(Q8, 3, self.out_size, scale=self.out_scale, zp=self.out_zp)
        outs = [state, _info(S16, 3, UNITS, scale=CELL_SCALE), state]
        state, cell, out = run(
            Op.QUANTIZED_LSTM, self.operands(cell_clip, proj_clip), outs, self.x, self.h, self.c
        )
        np.testing.assert_array_equal(state, out)
        return out.astype(int), cell.astype(int)

    def real(self, cell_clip: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(output before any projection clip, cell state, hidden state), as
        float64 arithmetic quantized at the end."""
        xr = (self.x.astype(float) + 1) * SX
        hr = (self.h.astype(float) - self.out_zp) * self.out_scale
        cr = self.c * CELL_SCALE

        def pre(g: str) -> np.ndarray:
            return xr @ (self.w[g] * SW).T + hr @ (self.r[g] * SR).T + self.bias[g] * SW * SX

        cell = _sigmoid(pre("f")) * cr + _sigmoid(pre("i")) * np.tanh(pre("c"))
        cell = np.clip(cell, -16, 32767 * CELL_SCALE)  # the int16 cell state saturates
        if cell_clip:
            cell = np.clip(cell, -cell_clip, cell_clip)
        hidden = _sigmoid(pre("o")) * np.tanh(cell)
        hq = np.clip(np.round(hidden / self.hidden_scale) + self.hidden_zp, -128, 127)
        out = hq
        if self.projection:
            hidden_real = (hq - self.hidden_zp) * self.hidden_scale
            real = hidden_real @ (self.proj_w * PROJ_SCALE).T
            real += self.proj_b * self.hidden_scale * PROJ_SCALE
            out = np.clip(np.round(real / self.out_scale) + self.out_zp, -128, 127)
        return out, np.round(cell / CELL_SCALE), hq


def _projection_case() -> Case:
    return Case(5, projection=True, hidden_scale=1 / 128, out_scale=1 / 64, out_zp=3)


@pytest.mark.parametrize("proj_clip", [0.3, 0.9, 1.7, 100.0])
def test_the_projection_clip_bounds_the_output_around_zero(proj_clip: float) -> None:
    """The limit is the clip over the projection weights' scale (NNAPI and TFLite
    divide by that scale, not the output's), truncated, at most 127: 9, 28, 54
    and 127 here, applied to the output with its zero point (-limit..limit)."""
    case = _projection_case()
    unclipped, cell = case.run()
    want, want_cell, _ = case.real()
    assert np.abs(unclipped - want).max() <= 1
    assert np.abs(cell - want_cell).max() <= 3
    # Both ends saturate without a clip: every limit below binds on both sides.
    assert unclipped.min() == -128 and unclipped.max() == 127
    limit = min(127, int(np.float32(proj_clip) / np.float32(PROJ_SCALE)))
    assert limit == {0.3: 9, 0.9: 28, 1.7: 54, 100.0: 127}[proj_clip]
    clipped, clipped_cell = case.run(proj_clip=proj_clip)
    np.testing.assert_array_equal(clipped, np.clip(unclipped, -limit, limit))
    np.testing.assert_array_equal(clipped_cell, cell)
    assert (unclipped < -limit).any()  # at 127 only -128 is clipped (to -127)
    assert limit == 127 or (unclipped > limit).any()


def test_no_projection_clip_leaves_the_output_alone() -> None:
    case = _projection_case()
    unclipped, _ = case.run()
    np.testing.assert_array_equal(case.run(proj_clip=0.0)[0], unclipped)


def test_the_hidden_state_saturates_at_both_ends_of_int8() -> None:
    """A hidden scale of 2**-10: o·tanh(c) of ±0.5 is ±512 steps, far past int8."""
    case = Case(5, projection=False, hidden_scale=2.0**-10, out_scale=2.0**-10, out_zp=-4)
    out, cell = case.run()
    want, want_cell, _ = case.real()
    assert np.abs(cell - want_cell).max() <= 3
    assert np.abs(out - want).max() <= 1
    assert (want == -128).sum() >= 2 and (want == 127).sum() >= 2
    np.testing.assert_array_equal(out[want == -128], -128)
    np.testing.assert_array_equal(out[want == 127], 127)


def test_the_hidden_state_before_a_projection_saturates_too() -> None:
    """The projection reads the saturated int8 hidden state, not the wider value."""
    case = Case(11, projection=True, hidden_scale=2.0**-11, out_scale=1 / 16, out_zp=0)
    out, _ = case.run()
    want, _, hidden = case.real()
    assert (hidden == -128).any() and (hidden == 127).any()
    assert np.abs(out - want).max() <= 1


@pytest.mark.parametrize("cell_clip", [2.5, 15.9, 100.0])
def test_the_cell_clip_is_symmetric_and_at_most_32767(cell_clip: float) -> None:
    """The previous cell state sits at -16 (int16's -32768 at 2**-11) with the
    forget gate open: the new state saturates at -32768 without a clip; a clip
    past 16 still clips it to -32767 (the limit is at most 32767, on both sides)."""
    rng = np.random.default_rng(3)
    prev = rng.integers(-32768, 32768, (3, UNITS))
    prev[:, 0], prev[:, 1] = -32768, 32767
    case = Case(13, projection=False, hidden_scale=1 / 128, out_scale=1 / 128, out_zp=0, cell=prev)
    case.bias["f"] = np.full(UNITS, 30000)  # forget gate ~1: the previous state carries over
    case.w["f"] = case.w["f"] // 8
    case.r["f"] = case.r["f"] // 8
    _, unclipped = case.run()
    _, want_cell, _ = case.real()
    # The forget gate's Q0.15 rounding, times a state near 16, is a few steps.
    assert np.abs(unclipped - want_cell).max() <= 6
    assert unclipped.min() == -32768 and unclipped.max() >= 32000
    limit = min(32767, int(np.float32(cell_clip) / np.float32(CELL_SCALE)))
    _, clipped = case.run(cell_clip=cell_clip)
    np.testing.assert_array_equal(clipped, np.clip(unclipped, -limit, limit))
    assert clipped.min() == -limit


# -- QUANTIZED_16BIT_LSTM at saturation, against LiteRT ------------------------------------------


def _saturating_basic_cell(units: int = 4, n_input: int = 3) -> bytes:
    """TFLite's quantized basic LSTM cell whose output gate is wide open (bias near
    the Q3.12 gates' top) and forget gate open: with a large cell state the output
    o·tanh(c) rounds to 128/128, one past int8's top, and must stop at 127 (255
    with the zero point 128); with a large negative state it is -127.99 -> -128 (0)."""
    from .tflite_builder import Tensor, graph, options, schema

    rng = np.random.default_rng(41)
    q8 = {"scale": 1 / 128, "zero_point": 128}
    cell = {"scale": 2.0**-11, "zero_point": 0}
    w_scale = 0.01
    packed = rng.integers(120, 141, (4 * units, n_input + units)).astype(np.uint8)
    bias = rng.integers(-2000, 2001, 4 * units)
    top = int(7.5 / (w_scale / 128))  # a gate pre-activation of 7.5
    bias[2 * units : 4 * units] = top  # forget (third) and output (fourth) gates
    tensors = [
        Tensor((2, n_input), np.uint8, **q8),
        Tensor((2, units), np.uint8, **q8),
        Tensor(packed.shape, np.uint8, packed, scale=w_scale, zero_point=130),
        Tensor((4 * units,), np.int32, bias.astype(np.int32), scale=w_scale / 128, zero_point=0),
        Tensor((2, units), np.int16, **cell),
        Tensor((2, units), np.uint8, **q8),
        Tensor((2, units), np.int16, **cell),
        Tensor((2, n_input + units), np.uint8, **q8),
        Tensor((2, 4 * units), np.int16, scale=2.0**-12, zero_point=0),
    ]
    o = options(schema.LSTMOptionsT, fusedActivationFunction=schema.ActivationFunctionType.TANH,
                kernelType=1)  # fmt: skip
    return graph(tensors, [("LSTM", [0, 1, 2, 3, 4], [5, 6, 7, 8], o, 2)], [0, 1, 4], [5, 6])


def test_quantized_16bit_lstm_output_saturates_like_litert() -> None:
    pytest.importorskip("ai_edge_litert")
    from nnburst import tflite

    from .tflite_builder import run_litert_calls

    model = _saturating_basic_cell()
    rng = np.random.default_rng(43)
    cells = np.array([[16000, 15000, -16000, -15000], [14000, -14000, 16383, -16384]], np.int16)
    calls = [
        [
            rng.integers(0, 256, (2, 3)).astype(np.uint8),
            rng.integers(0, 256, (2, 4)).astype(np.uint8),
            cells,
        ]
    ]
    ((want_out, want_cell),) = run_litert_calls(model, calls)
    with tflite.Runner(tflite.load(model), cache_dir=None) as run:
        got_out, got_cell = run(*calls[0])
    # the output saturates at both ends: LiteRT's 255 and 0 where the state is large
    assert (want_out == 255).sum() >= 3 and (want_out == 0).sum() >= 3
    assert np.abs(got_out.astype(int) - want_out).max() <= 1
    np.testing.assert_array_equal(got_out[want_out == 255], 255)
    assert np.abs(got_cell.astype(int) - want_cell).max() <= 2


# -- the int16 fixed-point helpers, bit for bit -------------------------------------------------
# A scalar reference of gemmlowp's int16 fixed-point arithmetic, one Python int at a
# time, written from its definitions: SaturatingRoundingDoublingHighMul,
# RoundingDivideByPOT, SaturatingRoundingMultiplyByPOT, the Taylor series of exp on
# [-1/4, 0), the barrel shifter of exp_on_negative_values, the Newton-Raphson
# 1/(1+x) and (1-x)/(1+x).  FixedPoint + and - on int16 wrap; AddSaturatingIf16Bit
# saturates.

I16_MIN, I16_MAX = -32768, 32767


def _w16(x: int) -> int:
    return (x + 32768) % 65536 - 32768


def _srdhm(a: int, b: int) -> int:
    if a == b == I16_MIN:
        return I16_MAX
    ab = a * b
    nudged = ab + ((1 << 14) if ab >= 0 else 1 - (1 << 14))
    return _w16(_div_toward_zero(nudged, 1 << 15))


def _div_toward_zero(x: int, d: int) -> int:
    return abs(x) // d * (1 if x >= 0 else -1)


def _rdbpot(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if (x & mask) > threshold else 0)


def _srmbpot(x: int, exponent: int) -> int:
    if exponent < 0:
        return _rdbpot(x, -exponent)
    if exponent == 0:
        return x
    threshold = (1 << (15 - exponent)) - 1
    if x > threshold:
        return I16_MAX
    if x < -threshold:
        return I16_MIN
    return _w16(x << exponent)


def _c16(raw32: int) -> int:
    return _rdbpot(raw32, 16)


def _exp_small(a: int) -> int:
    """exp(a), a in [-1/4, 0), Q0.15."""
    constant, third = _c16(1895147668), _c16(715827883)
    x = _w16(a + (1 << 12))
    x2 = _srdhm(x, x)
    x3, x4 = _srdhm(x2, x), _srdhm(x2, x2)
    poly = _srmbpot(_w16(_srdhm(_w16(_srmbpot(x4, -2) + x3), third) + x2), -1)
    return max(I16_MIN, min(I16_MAX, constant + _srdhm(constant, _w16(x + poly))))


_BARREL = {-2: 1672461947, -1: 1302514674, 0: 790015084, 1: 290630308, 2: 39332535,
           3: 720401, 4: 242}  # fmt: skip


def _exp_neg(a: int, integer_bits: int) -> int:
    fractional = 15 - integer_bits
    quarter = 1 << (fractional - 2)
    mod_quarter = _w16((a & (quarter - 1)) - quarter)
    result = _exp_small(_srmbpot(mod_quarter, integer_bits))
    remainder = _w16(mod_quarter - a)
    for exponent in range(-2, 5):
        if integer_bits > exponent and remainder & (1 << (fractional + exponent)):
            result = _srdhm(result, _c16(_BARREL[exponent]))
    if integer_bits > 5 and a < _c16(-(1 << (36 - integer_bits))):
        result = 0
    return I16_MAX if a == 0 else result


def _newton(a: int) -> int:
    """1/(1+a) for Q0.15 a in [0, 1], Q2.13."""
    total = a + I16_MAX
    half = _div_toward_zero(total + (1 if total >= 0 else -1), 2)
    x = _w16(_c16(1515870810) + _srdhm(half, _c16(-1010580540)))
    for _ in range(3):
        x = _w16(x + _srmbpot(_srdhm(x, _w16((1 << 13) - _srdhm(half, x))), 2))
    return x


def _ref_logistic(a: int, integer_bits: int) -> int:
    if a == 0:
        return _c16(1 << 30)
    positive = _srmbpot(_newton(_exp_neg(_w16(-a) if a > 0 else a, integer_bits)), 1)
    return positive if a > 0 else _w16(I16_MAX - positive)


def _ref_tanh(a: int, integer_bits: int) -> int:
    if a == 0:
        return 0
    n = a if a < 0 else _w16(-a)
    t = _srmbpot(_w16(_newton(_exp_neg(n, integer_bits + 1)) - (1 << 13)), 2)
    return _w16(-t) if a < 0 else t


#: Every 61st int16 value and the edges.
SAMPLES = np.array(sorted({*range(-32768, 32768, 61), -32768, -32767, -1, 0, 1, 32766, 32767}))


@pytest.mark.parametrize("integer_bits", range(7))
def test_int16_logistic_and_tanh_are_gemmlowps_bit_for_bit(integer_bits: int) -> None:
    from nnburst.cpu.ops import quantized_lstm as q

    logistic = q._logistic16(SAMPLES, integer_bits)
    tanh = q._tanh16(SAMPLES, integer_bits)
    want_logistic = [_ref_logistic(int(a), integer_bits) for a in SAMPLES]
    want_tanh = [_ref_tanh(int(a), integer_bits) for a in SAMPLES]
    np.testing.assert_array_equal(logistic, want_logistic)
    np.testing.assert_array_equal(tanh, want_tanh)
    # and the reference is the real functions, to a few steps of 2**-15
    real = SAMPLES * 2.0 ** (integer_bits - 15)
    assert np.abs(np.array(want_logistic) / 32768 - 1 / (1 + np.exp(-real))).max() < 2e-4
    assert np.abs(np.array(want_tanh) / 32768 - np.tanh(real)).max() < 4e-4


def test_int16_products_and_power_of_two_scalings_bit_for_bit() -> None:
    from nnburst.cpu.ops import quantized_lstm as q

    rng = np.random.default_rng(17)
    # edges: -32768 squared, and 5 * -3277 = -(2**15 - 16383), where the negative nudge decides
    a = np.concatenate([rng.integers(-32768, 32768, 4000), [-32768, -32768, 32767, -1, 1, 0, 5]])
    b = np.concatenate([rng.integers(-32768, 32768, 4000), [-32768, 32767, 32767, 1, -1, 5, -3277]])
    np.testing.assert_array_equal(q._mul16(a, b), [_srdhm(int(x), int(y)) for x, y in zip(a, b)])
    for exponent in (-4, -1, 0, 1, 2, 5):
        limit = (1 << (15 - max(exponent, 0))) - 1  # the last values that do not saturate
        x = np.concatenate([a, [limit, -limit, limit + 1, -limit - 1]])
        want = [_srmbpot(int(v), exponent) for v in x]
        np.testing.assert_array_equal(q._pot16(x, exponent), want)
    np.testing.assert_array_equal(
        q._wrap16(np.array([32768, -32769, 65535, 5])), [-32768, 32767, -1, 5]
    )


@pytest.mark.parametrize("integer_bits", range(8))
def test_int16_exp_on_negative_values_bit_for_bit(integer_bits: int) -> None:
    from nnburst.cpu.ops import quantized_lstm as q

    a = SAMPLES[SAMPLES <= 0]
    want = [_exp_neg(int(v), integer_bits) for v in a]
    np.testing.assert_array_equal(q._exp_negative16(a, integer_bits), want)


def test_int16_one_over_one_plus_x_and_the_exp_series_bit_for_bit() -> None:
    from nnburst.cpu.ops import quantized_lstm as q

    a = SAMPLES[SAMPLES >= 0]
    np.testing.assert_array_equal(q._newton16(a), [_newton(int(v)) for v in a])
    quarter = np.arange(-8192, 0)
    np.testing.assert_array_equal(q._exp_quarter16(quarter), [_exp_small(int(v)) for v in quarter])
