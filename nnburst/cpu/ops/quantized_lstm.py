"""QUANTIZED_16BIT_LSTM (NNAPI 1.2) and QUANTIZED_LSTM (NNAPI 1.3): one integer LSTM step.

Both are pure integer arithmetic, so they are reproduced bit for bit: int32
matmul accumulators requantized with fixed-point multipliers, and gates
computed with gemmlowp's 16-bit fixed-point ``logistic`` and ``tanh``.  The
16-bit fixed-point kernels below (``_q16_*``) are the int16 counterparts of
the int32 helpers in ``fixed_point.py``: products round at bit 15 instead of 31,
and gemmlowp's int32 constants are rescaled to 16 bits the way gemmlowp does
it (a rounding shift right by 16).  Raw values are held in int64 numpy arrays;
where the reference lets an int16 wrap around, ``_wrap16`` does the same.

QUANTIZED_16BIT_LSTM follows the reference's layout exactly: the eight
weight matrices are packed into one ``[4·outputSize, outputSize + inputSize]``
matrix with the recurrent weights in the first columns, and multiplied with
``[input, previous output]`` in that order (the packing and the activation
order disagree, but that is what the reference, and hence every conformance
result, computes).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._bindings.qlstm import QuantLstm16
from ...codes import OperandCode, OperationCode
from ...errors import BadDataError
from ..registry import ExecutionContext, Kernel, OperationSignature, register
from .arguments import (
    constant_scalar,
    maybe_omitted,
    op_failed,
    optional_input,
    require_operand_rank,
)
from .fixed_point import (
    EXP_BARREL,
    INT32_MAX,
    fixed_inv_sqrt_multiplier,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    trunc_div,
    wrap_int32,
)

F32 = np.float32
_Q8A = OperandCode.TENSOR_QUANT8_ASYMM
_Q8S = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
_Q8SYMM = OperandCode.TENSOR_QUANT8_SYMM
_Q16 = OperandCode.TENSOR_QUANT16_SYMM
_I32 = OperandCode.TENSOR_INT32

# --------------------------------------------------------------- 16-bit fixed point


def _wrap16(x: np.ndarray) -> np.ndarray:
    """Two's-complement int16 wrap-around of int64 values."""
    return ((np.asarray(x, dtype=np.int64) + 32768) & 0xFFFF) - 32768


def _sat16(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -32768, 32767)


def _const16(value: int) -> int:
    """gemmlowp's int32 constant rescaled for an int16 raw type."""
    return int(rounding_divide_by_pot(np.asarray(value, dtype=np.int64), 16))


def _mul16(a: Any, b: Any) -> np.ndarray:
    """int16 ``SaturatingRoundingDoublingHighMul``: (a·b·2 + 2**15) >> 16, saturated."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    result = trunc_div(ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14)), 1 << 15)
    return np.where((a == -32768) & (b == -32768), 32767, result)


def _pot16(x: np.ndarray, exponent: int) -> np.ndarray:
    """int16 ``SaturatingRoundingMultiplyByPOT``."""
    x = np.asarray(x, dtype=np.int64)
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    if exponent == 0:
        return x
    threshold = (1 << (15 - exponent)) - 1
    return np.where(x > threshold, 32767, np.where(x < -threshold, -32768, _wrap16(x << exponent)))


def _exp_quarter16(a: np.ndarray) -> np.ndarray:
    """exp(a) for Q0.15 ``a`` in [-1/4, 0): Taylor series around -1/8."""
    constant = _const16(1895147668)  # exp(-1/8)
    one_third = _const16(715827883)
    x = _wrap16(a + (1 << 12))  # a + 1/8
    x2 = _mul16(x, x)
    x3 = _mul16(x2, x)
    x4 = _mul16(x2, x2)
    poly = _pot16(_wrap16(_mul16(_wrap16(_pot16(x4, -2) + x3), one_third) + x2), -1)
    return _sat16(constant + _mul16(constant, _wrap16(x + poly)))


def _exp_negative16(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp ``exp_on_negative_values`` of int16 Q(integer_bits) values <= 0, as Q0.15."""
    a = np.asarray(a, dtype=np.int64)
    fractional_bits = 15 - integer_bits
    quarter = 1 << (fractional_bits - 2)
    mod_quarter = _wrap16((a & (quarter - 1)) - quarter)
    result = _exp_quarter16(_pot16(mod_quarter, integer_bits))
    remainder = _wrap16(mod_quarter - a)
    for exponent, multiplier in EXP_BARREL:
        if integer_bits > exponent:
            bit = (remainder >> (fractional_bits + exponent)) & 1
            result = np.where(bit != 0, _mul16(result, _const16(multiplier)), result)
    if integer_bits > 5:
        result = np.where(a < _const16(-(1 << (36 - integer_bits))), 0, result)
    return np.where(a == 0, 32767, result)


def _newton16(a: np.ndarray) -> np.ndarray:
    """1/(1+a) for Q0.15 ``a`` in [0, 1] as Q2.13 (three Newton-Raphson steps)."""
    total = np.asarray(a, dtype=np.int64) + 32767
    half = trunc_div(total + np.where(total >= 0, 1, -1), 2)  # RoundingHalfSum(a, 1)
    x = _wrap16(_const16(1515870810) + _mul16(half, _const16(-1010580540)))  # 48/17 - 32/17·d
    for _ in range(3):
        one_minus = _wrap16((1 << 13) - _mul16(half, x))
        x = _wrap16(x + _pot16(_mul16(x, one_minus), 2))
    return x


def _logistic16(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp ``logistic`` of int16 Q(integer_bits) values, as Q0.15."""
    a = np.asarray(a, dtype=np.int64)
    negative_abs = np.where(a > 0, _wrap16(-a), a)
    positive = _pot16(_newton16(_exp_negative16(negative_abs, integer_bits)), 1)
    result = np.where(a > 0, positive, 32767 - positive)
    return np.where(a == 0, _const16(1 << 30), result)


def _tanh16(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp ``tanh`` of int16 Q(integer_bits) values, as Q0.15."""
    a = np.asarray(a, dtype=np.int64)
    negative_abs = np.where(a < 0, a, _wrap16(-a))
    # exp(-2|a|): the same raw value read with one more integer bit is 2·(-|a|).
    t = _pot16(_wrap16(_newton16(_exp_negative16(negative_abs, integer_bits + 1)) - (1 << 13)), 2)
    return np.where(a == 0, 0, np.where(a < 0, _wrap16(-t), t))


@functools.cache
def _table(function: Callable[[np.ndarray, int], np.ndarray], integer_bits: int) -> np.ndarray:
    """``function(x, integer_bits)`` for every int16 ``x``, computed once: a step
    then looks its gates up (their fixed-point passes, ~60 numpy calls each,
    cost milliseconds a step on a hundred units)."""
    table = function(np.arange(-32768, 32768, dtype=np.int64), integer_bits)
    table.flags.writeable = False
    return table


def _looked_up(
    function: Callable[[np.ndarray, int], np.ndarray], a: np.ndarray, integer_bits: int
) -> np.ndarray:
    """``function(a, integer_bits)`` for int16-range ``a``, from :func:`_table`."""
    return _table(function, integer_bits)[np.asarray(a, dtype=np.int64) + 32768]


# --------------------------------------------------------------- shared checks


def _expect_types(
    sig: OperationSignature, inputs: Sequence[OperandCode], outputs: Sequence[OperandCode]
) -> None:
    if len(sig.inputs) != len(inputs):
        raise sig.fail(f"expected {len(inputs)} inputs, got {len(sig.inputs)}")
    if len(sig.outputs) != len(outputs):
        raise sig.fail(f"expected {len(outputs)} outputs, got {len(sig.outputs)}")
    for kind, infos, codes in (("input", sig.inputs, inputs), ("output", sig.outputs, outputs)):
        for i, (info, code) in enumerate(zip(infos, codes)):
            if info.code != code:
                raise sig.fail(f"{kind} {i} has type {info.code.name}; expected {code.name}")


def _checked_log2(x: float) -> int | None:
    """log2(x) when x is (within 1e-3 in the exponent) a power of two, else None."""
    if not x > 0:
        return None
    exact = float(F32(math.log(x)) * (F32(1.0) / F32(math.log(2.0))))
    rounded = round(exact)
    return int(rounded) if abs(exact - rounded) < 1e-3 else None


# --------------------------------------------------------------- QUANTIZED_16BIT_LSTM


def _validate_q16(sig: OperationSignature) -> None:
    _expect_types(sig, (_Q8A, *[_Q8A] * 8, *[_I32] * 4, _Q16, _Q8A), (_Q16, _Q8A))
    for i in range(15):
        require_operand_rank(sig, i, (1,) if 9 <= i <= 12 else (2,), f"input {i}")
    for j in range(2):
        require_operand_rank(sig, j, (2,), f"output {j}", output=True)
    for i, name in ((0, "input"), (14, "prev_output")):
        info = sig.inputs[i]
        if info.scale != 1 / 128 or info.zero_point != 128:
            raise sig.fail(f"input {i} ({name}) must have scale 1/128 and zero point 128")
    weights = sig.inputs[1]
    if weights.scale == 0:
        raise sig.fail("weights need a non-zero scale")
    for i in range(2, 9):
        if (sig.inputs[i].scale, sig.inputs[i].zero_point) != (weights.scale, weights.zero_point):
            raise sig.fail(f"input {i}: all weights must share one scale and zero point")
    for i in range(9, 13):
        if (
            F32(sig.inputs[i].scale) != F32(F32(weights.scale) / F32(128))
            or sig.inputs[i].zero_point
        ):
            raise sig.fail(f"input {i}: bias scale must be weights scale / 128, zero point 0")
    cell = sig.inputs[13]
    if cell.zero_point or _checked_log2(cell.scale) != -11:
        raise sig.fail(
            "input 13 (prev_cell_state) must have scale 2**-11 (4 integer bits) and zero point 0"
        )
    out_cell, out = sig.outputs
    if (F32(out_cell.scale), out_cell.zero_point) != (F32(cell.scale), 0) or (
        out.scale,
        out.zero_point,
    ) != (1 / 128, 128):
        raise sig.fail("outputs must keep the cell state's and the output's quantization")


@dataclass
class _Packed:
    """QUANTIZED_16BIT_LSTM's weights as the reference packs them, zero point
    taken out, in a float type whose sums with any input are exact integers
    (so BLAS multiplies them); the packed bias; the sums' rescale."""

    weights: np.ndarray  # [4·units, units + input_size]
    bias: np.ndarray  # int64 [4·units]
    multiplier: int
    shift: int


def _pack_q16(
    sig: OperationSignature, weights_of: Callable[[int], np.ndarray], units: int, input_size: int
) -> _Packed:
    """Pack the eight weight operands and four biases (``weights_of(i)``: input
    ``i``'s values), checking their shapes."""
    weights = np.zeros((4 * units, units + input_size), dtype=np.int64)
    bias = np.zeros(4 * units, dtype=np.int64)
    # Gate order of the packed matrix: input, cell (modulation), forget, output.
    for g, (w_in, w_rec, b) in enumerate(((1, 5, 9), (3, 7, 11), (2, 6, 10), (4, 8, 12))):
        wi, wr, bi = weights_of(w_in), weights_of(w_rec), weights_of(b).reshape(-1)
        if wi.shape != (units, input_size) or wr.shape != (units, units) or bi.shape != (units,):
            raise op_failed(
                sig.code,
                f"gate {g} weights {wi.shape}/{wr.shape}, bias {bi.shape} "
                f"do not fit {units} units and {input_size} inputs",
            )
        rows = slice(g * units, (g + 1) * units)
        weights[rows, :units] = wr
        weights[rows, units:] = wi
        bias[rows] = bi
    weights -= sig.inputs[1].zero_point
    # |input - 128| <= 128: float32 holds every sum below 2^24 exactly.
    largest = 128 * int(np.abs(weights).sum(axis=1).max(initial=0))
    exact = np.float32 if largest < 1 << 24 else np.float64
    multiplier, shift = quantize_multiplier(4096.0 * float(F32(sig.inputs[9].scale)))
    return _Packed(weights.astype(exact), bias, multiplier, shift)


def _prepare_q16(sig: OperationSignature) -> _Packed | None:
    """Packed once when every weight and bias is a constant of a declared shape.
    The gate tables (~60 ms, once per process) are built here too, so that the
    first execution does not pay for them."""
    _table(_logistic16, 3)
    _table(_tanh16, 3)
    values = [sig.constants.get(i) for i in range(13)]
    first = values[1]
    if first is None or any(v is None for v in values[1:]):
        return None
    units, input_size = first.shape
    return _pack_q16(sig, lambda i: np.asarray(values[i]), units, input_size)


def _bind_q16(sig: OperationSignature, packed: _Packed | None) -> Kernel | None:
    """Constant weights: each step is one C call (``_bindings/qlstm.py``: the gate
    sums in exact int32, the cell update in C) where ``_execute_q16`` took a
    float BLAS product and ~40 numpy passes; None for weights the C kernel cannot
    sum exactly, which keep ``_execute_q16``."""
    if packed is None:
        return None
    try:
        step = QuantLstm16(
            packed.weights.astype(np.int64),
            packed.bias,
            packed.multiplier,
            packed.shift,
            _table(_logistic16, 3),
            _table(_tanh16, 3),
        )
    except BadDataError:  # NotExactError: sums that could leave int32
        return None

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x, prev_cell, prev_out = inputs[0], inputs[13], inputs[14]
        if (
            type(x) is np.ndarray
            and type(prev_cell) is np.ndarray
            and type(prev_out) is np.ndarray
            and x.dtype == np.uint8
            and prev_out.dtype == np.uint8
            and prev_cell.dtype == np.int16
            and x.ndim == 2
            and x.shape[1] == step.input_size
            and prev_out.shape == prev_cell.shape == (x.shape[0], step.units)
        ):
            cell, out = step(
                np.ascontiguousarray(x),
                np.ascontiguousarray(prev_out),
                np.ascontiguousarray(prev_cell),
            )
            return [cell, out]
        return _execute_q16(ExecutionContext(sig, inputs, packed))  # checks and explains

    return kernel


def _execute_q16(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    x = ctx.input(0).astype(np.int64)
    prev_cell = ctx.input(13).astype(np.int64)
    prev_out = ctx.input(14).astype(np.int64)
    if (
        x.ndim != 2
        or prev_out.ndim != 2
        or prev_cell.shape != prev_out.shape
        or x.shape[0] != prev_out.shape[0]
    ):
        raise op_failed(
            ctx.code,
            f"input {x.shape}, prev_output {prev_out.shape} and "
            f"prev_cell_state {prev_cell.shape} do not agree",
        )
    batches, input_size = x.shape
    units = prev_out.shape[1]
    packed: _Packed | None = ctx.state
    if packed is None or packed.weights.shape != (4 * units, units + input_size):
        packed = _pack_q16(sig, ctx.input, units, input_size)
    concat = np.concatenate([x, prev_out], axis=1) - 128
    sums = concat.astype(packed.weights.dtype) @ packed.weights.T  # exact integers
    acc = wrap_int32(sums.astype(np.int64) + packed.bias)
    gates = _sat16(multiply_by_quantized_multiplier(acc, packed.multiplier, packed.shift))

    def gate(g: int) -> np.ndarray:
        return gates[:, g * units : (g + 1) * units]

    input_gate = _looked_up(_logistic16, gate(0), 3)
    modulation = _looked_up(_tanh16, gate(1), 3)
    forget_gate = _looked_up(_logistic16, gate(2), 3)
    output_gate = _looked_up(_logistic16, gate(3), 3)
    # Cell state has 4 integer bits; products of Q0.15 gates stay in their own formats.
    state = _sat16(_pot16(_mul16(input_gate, modulation), -4) + _mul16(forget_gate, prev_cell))
    activation = _mul16(output_gate, _looked_up(_tanh16, _pot16(state, 1), 3))
    output = np.clip(rounding_divide_by_pot(activation, 8), -128, 127) + 128
    return [state.astype(np.int16), output.reshape(batches, units).astype(np.uint8)]


# --------------------------------------------------------------- QUANTIZED_LSTM

# Input positions.
_X = 0
_W = {"i": 1, "f": 2, "c": 3, "o": 4}
_R = {"i": 5, "f": 6, "c": 7, "o": 8}
_PEEP = {"i": 9, "f": 10, "o": 11}
_BIAS = {"i": 12, "f": 13, "c": 14, "o": 15}
_PROJ_W, _PROJ_B, _PREV_OUT, _PREV_CELL = 16, 17, 18, 19
_LN = {"i": 20, "f": 21, "c": 22, "o": 23}
_CELL_CLIP, _PROJ_CLIP = 24, 25
_INTERMEDIATE = {"i": 26, "f": 27, "c": 28, "o": 29}
_HIDDEN_ZP, _HIDDEN_SCALE = 30, 31
_QLSTM_OPTIONAL = (1, 5, 9, 10, 11, 12, 16, 17, 20, 21, 22, 23)

_QLSTM_TYPES = (
    _Q8S,
    *[_Q8SYMM] * 8,
    *[_Q16] * 3,
    *[_I32] * 4,
    _Q8SYMM,
    _I32,
    _Q8S,
    _Q16,
    *[_Q16] * 4,
    *[OperandCode.FLOAT32] * 6,
    OperandCode.INT32,
    OperandCode.FLOAT32,
)


def _validate_qlstm(sig: OperationSignature) -> None:
    _expect_types(sig, _QLSTM_TYPES, (_Q8S, _Q16, _Q8S))
    ranks = {_X: 2, _PROJ_W: 2, _PROJ_B: 1, _PREV_OUT: 2, _PREV_CELL: 2}
    ranks.update({i: 2 for i in (*_W.values(), *_R.values())})
    ranks.update({i: 1 for i in (*_PEEP.values(), *_BIAS.values(), *_LN.values())})
    for i, rank in ranks.items():
        if not (i in _QLSTM_OPTIONAL and maybe_omitted(sig, i)):
            require_operand_rank(sig, i, (rank,), f"input {i}")
    for j, rank in enumerate((2, 2, 2)):
        require_operand_rank(sig, j, (rank,), f"output {j}", output=True)
    cell = sig.inputs[_PREV_CELL]
    shift = _checked_log2(cell.scale)
    if shift is None or not -15 <= shift <= -9:
        raise sig.fail(
            f"input 19 (cell state) scale {cell.scale} must be a power of two "
            "between 2**-15 and 2**-9"
        )
    omitted = {i for i in _QLSTM_OPTIONAL if sig.constants.get(i, 0) is None}
    cifg = {_W["i"], _R["i"]} & omitted
    if len(cifg) == 1:
        raise sig.fail(
            "input_to_input and recurrent_to_input weights must be both present "
            "(LSTM) or both omitted (CIFG)"
        )
    for i in (*_INTERMEDIATE.values(), _HIDDEN_SCALE):
        value = constant_scalar(sig, i)
        if value is not None and not value > 0:
            raise sig.fail(f"input {i} (scale) is {value}; it must be > 0")


class _QLstm:
    """One QUANTIZED_LSTM step; see the module docstring for the arithmetic."""

    def __init__(self, ctx: ExecutionContext) -> None:
        self.ctx = ctx
        self.info = ctx.signature.inputs
        self.t = {i: optional_input(ctx, i) for i in range(24)}
        self.x = self._required(_X)
        self.h = self._required(_PREV_OUT)
        self.c = self._required(_PREV_CELL)
        self.batches, self.input_size = self.x.shape
        self.units = self._required(_W["o"]).shape[0]
        self.outputs = self._required(_R["o"]).shape[1]
        self.cifg = self.t[_W["i"]] is None
        self.layer_norm = self.t[_LN["f"]] is not None
        self.peephole = self.t[_PEEP["f"]] is not None
        self._check_shapes()
        shift = _checked_log2(self.info[_PREV_CELL].scale)
        if shift is None or not -15 <= shift <= -9:
            raise self._fail("the cell state scale must be a power of two in [2**-15, 2**-9]")
        self.cell_shift = shift

    def _fail(self, message: str) -> Exception:
        return op_failed(self.ctx.code, message)

    def _required(self, i: int) -> np.ndarray:
        value = self.t[i] if i in self.t else optional_input(self.ctx, i)
        if value is None:
            raise self._fail(f"input {i} is required but has no value")
        return value.astype(np.int64)

    def _check_shapes(self) -> None:
        n, u, o = self.input_size, self.units, self.outputs
        gates = ("f", "c", "o") if self.cifg else ("i", "f", "c", "o")
        want = {
            _X: (self.batches, n),
            _PREV_OUT: (self.batches, o),
            _PREV_CELL: (self.batches, u),
            _PROJ_W: (o, u),
            _PROJ_B: (o,),
        }
        for g in gates:
            want.update({_W[g]: (u, n), _R[g]: (u, o), _BIAS[g]: (u,)})
        want.update({_PEEP[g]: (u,) for g in _PEEP})
        want.update({_LN[g]: (u,) for g in _LN})
        for i, shape in want.items():
            value = self.t.get(i)
            if value is not None and value.shape != shape:
                raise self._fail(f"input {i} has shape {value.shape}; expected {shape}")
        for g in gates:
            if self.t[_W[g]] is None or self.t[_R[g]] is None or self.t[_BIAS[g]] is None:
                raise self._fail(f"gate '{g}' needs its input/recurrent weights and bias")
        if self.cifg and (
            self.t[_R["i"]] is not None
            or self.t[_BIAS["i"]] is not None
            or self.t[_PEEP["i"]] is not None
            or self.t[_LN["i"]] is not None
        ):
            raise self._fail("CIFG (no input_to_input weights) omits every input-gate tensor")
        peep = [self.t[_PEEP[g]] is not None for g in ("f", "o")]
        if peep[0] != peep[1] or (not self.cifg and (self.t[_PEEP["i"]] is not None) != peep[0]):
            raise self._fail("peephole weights must be all present or all omitted")
        norms = [self.t[_LN[g]] is not None for g in gates]
        if any(norms) != all(norms):
            raise self._fail("layer norm weights must be all present or all omitted")
        if self.t[_PROJ_W] is None and self.outputs != self.units:
            raise self._fail(f"output size {self.outputs} != {self.units} units without projection")

    def _scale(self, i: int) -> F32:
        return F32(self.info[i].scale)

    def _matmul(
        self,
        acc: np.ndarray,
        values: np.ndarray,
        zero_point: int,
        i: int,
        effective: np.float32,
        bias: np.ndarray | None,
    ) -> np.ndarray:
        """Accumulate ``values · weights[i]ᵀ`` rescaled, into the int16 gate ``acc``."""
        w = self.t[i].astype(np.int64)  # type: ignore[union-attr]
        eff_bias = -zero_point * w.sum(axis=1)
        if bias is not None:
            eff_bias = eff_bias + bias
        m, s = quantize_multiplier(float(effective))
        total = wrap_int32(values @ w.T + eff_bias)
        return _sat16(multiply_by_quantized_multiplier(total, m, s) + acc)

    def gate(self, g: str, cell: np.ndarray) -> np.ndarray:
        """Pre-activation of gate ``g`` (Q3.12) through matmuls, peephole and layer norm."""
        inter = F32(self.ctx.scalar(_INTERMEDIATE[g]))
        bias = self.t[_BIAS[g]].astype(np.int64)  # type: ignore[union-attr]
        x_info, h_info = self.info[_X], self.info[_PREV_OUT]
        # The gate bias enters through layer norm when there is one, else the matmul.
        acc = np.zeros((self.batches, self.units), dtype=np.int64)
        acc = self._matmul(
            acc,
            self.x,
            x_info.zero_point,
            _W[g],
            self._scale(_W[g]) * F32(x_info.scale) / inter,
            None if self.layer_norm else bias,
        )
        acc = self._matmul(
            acc,
            self.h,
            h_info.zero_point,
            _R[g],
            self._scale(_R[g]) * F32(h_info.scale) / inter,
            None,
        )
        if self.peephole and g in _PEEP:
            effective = F32(2.0**self.cell_shift * float(self._scale(_PEEP[g])) / float(inter))
            m, s = quantize_multiplier(float(effective))
            product = self.t[_PEEP[g]].astype(np.int64) * cell  # type: ignore[union-attr]
            acc = _sat16(multiply_by_quantized_multiplier(product, m, s) + acc)
        if self.layer_norm:
            acc = self._layer_norm(acc, g, bias)
        return acc

    def _layer_norm(self, x: np.ndarray, g: str, bias: np.ndarray) -> np.ndarray:
        """TFLite's integer layer normalisation of each batch row (Q3.12 in and out)."""
        weights = self.t[_LN[g]].astype(np.int64)  # type: ignore[union-attr]
        scale_a, scale_b = quantize_multiplier(float(self._scale(_LN[g])))
        n = self.units
        mean = trunc_div(x.sum(axis=1) * 1024, n)
        variance = (x * x).sum(axis=1) * ((1 << 20) // n) - mean * mean
        variance = trunc_div(variance, 1 << 20)
        guard = max(1, int(10000 * float(self._scale(_LN[g]))))
        variance = np.where(variance < 1, guard, variance)
        inv, inv_shift = fixed_inv_sqrt_multiplier(variance)
        inv = np.where(variance <= 1, INT32_MAX, inv)
        inv_shift = np.where(variance <= 1, 0, inv_shift)
        rescaled = multiply_by_quantized_multiplier(
            1024 * x - mean[:, None], inv[:, None], inv_shift[:, None]
        )
        val3 = wrap_int32(wrap_int32(rescaled * weights) + bias)
        val4 = trunc_div(val3 + np.where(val3 > 0, 512, -512), 1024)
        return _sat16(multiply_by_quantized_multiplier(val4, scale_a, scale_b + 12))

    def step(self) -> list[np.ndarray]:
        ctx = self.ctx
        prev_cell = self.c
        forget = _logistic16(self.gate("f", prev_cell), 3)
        modulation = _tanh16(self.gate("c", prev_cell), 3)
        if self.cifg:
            input_gate = 32767 - forget
        else:
            input_gate = _logistic16(self.gate("i", prev_cell), 3)
        cell = _wrap16(rounding_divide_by_pot(forget * prev_cell, 15))
        cell = _sat16(
            cell + _wrap16(rounding_divide_by_pot(input_gate * modulation, 30 + self.cell_shift))
        )
        cell_clip = float(ctx.scalar(_CELL_CLIP))
        if cell_clip > 0:
            clip = int(np.clip(F32(cell_clip) / self._scale(_PREV_CELL), -32768, 32767))
            cell = np.clip(cell, -clip, clip)
        output_gate = _logistic16(self.gate("o", cell), 3)

        hidden_zp = int(ctx.scalar(_HIDDEN_ZP))
        hidden_scale = F32(ctx.scalar(_HIDDEN_SCALE))
        effective = F32(2.0**-15 / float(hidden_scale) * 2.0**-15)
        m, s = quantize_multiplier(float(effective))
        tanh_bits = self.cell_shift + 15
        hidden = multiply_by_quantized_multiplier(output_gate * _tanh16(cell, tanh_bits), m, s)
        hidden = np.clip(hidden + hidden_zp, -128, 127)

        out_info = self.info[_PREV_OUT]
        proj_w = self.t[_PROJ_W]
        if proj_w is not None:
            proj = proj_w.astype(np.int64)
            bias = self.t[_PROJ_B]
            eff_bias = -hidden_zp * proj.sum(axis=1)
            if bias is not None:
                eff_bias = eff_bias + bias.astype(np.int64)
            pm, ps = quantize_multiplier(
                float(self._scale(_PROJ_W) * hidden_scale / F32(out_info.scale))
            )
            total = wrap_int32(hidden @ proj.T + eff_bias)
            output = np.clip(
                multiply_by_quantized_multiplier(total, pm, ps) + out_info.zero_point, -128, 127
            )
            proj_clip = float(ctx.scalar(_PROJ_CLIP))
            if proj_clip > 0:
                limit = int(np.clip(F32(proj_clip) / self._scale(_PROJ_W), -128, 127))
                output = np.clip(output, -limit, limit)
        else:
            output = hidden
        output = output.astype(np.int8)
        return [output, cell.astype(np.int16), output.copy()]


def _execute_qlstm(ctx: ExecutionContext) -> list[np.ndarray]:
    return _QLstm(ctx).step()


register(
    OperationCode.QUANTIZED_16BIT_LSTM,
    validate=_validate_q16,
    execute=_execute_q16,
    prepare=_prepare_q16,
    bind=_bind_q16,
)
register(OperationCode.QUANTIZED_LSTM, validate=_validate_qlstm, execute=_execute_qlstm)
