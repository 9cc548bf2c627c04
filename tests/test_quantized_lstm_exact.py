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
