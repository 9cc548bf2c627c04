"""The C paths of quantized ADD/SUB/MUL, SOFTMAX and QUANTIZE, bit exact.

Each is checked with zero tolerance against the numpy steps it replaced
(kept in ``cpu/ops`` as the specification) and, where one is short enough
to write independently, against the Python-int reference of
``test_quant_exact.py``: ADD/SUB/MUL over every pair of input bytes, so the
table C builds is checked whole, and QUANTIZE at exact .5 ties.
"""

from __future__ import annotations

import functools
import zlib
from fractions import Fraction

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.cpu.ops import activation, elementwise, native, unary
from nnburst.cpu.registry import ExecutionContext, OperationSignature
from nnburst.operands import OperandInfo

from .op_models import run
from .test_quant_exact import (
    INT32_MAX,
    INT32_MIN,
    i32,
    ref_activation,
    ref_divide_by_pot,
    ref_high_mul,
    ref_quantize_multiplier,
    round_half_away,
)

QUANT_TYPES = {
    "uint8": (T.TENSOR_QUANT8_ASYMM, np.uint8),
    "int8": (T.TENSOR_QUANT8_ASYMM_SIGNED, np.int8),
}
FUSES = [0, 1, 2, 3]


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """Seeded by the test's id, as in test_quant_exact.py."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def f32(value: float) -> float:
    return float(np.float32(value))


def ref_multiply(x: int, real: float) -> int:
    """MultiplyByQuantizedMultiplier: the left shift saturates to int32 first."""
    significand, shift = ref_quantize_multiplier(real)
    x = max(INT32_MIN, min(INT32_MAX, x * 2 ** max(shift, 0)))
    return ref_divide_by_pot(ref_high_mul(x, significand), max(-shift, 0))


def ref_binary_table(code, a_info, b_info, out, fuse) -> np.ndarray:
    """[a, b] -> output for every pair of 8-bit values, in Python ints."""
    lo, hi = (0, 255) if out.code == T.TENSOR_QUANT8_ASYMM else (-128, 127)
    lo, hi = ref_activation(fuse, f32(out.scale), out.zero_point, lo, hi)
    values = range(0, 256) if out.code == T.TENSOR_QUANT8_ASYMM else range(-128, 128)
    s1, s2, so = f32(a_info.scale), f32(b_info.scale), f32(out.scale)
    if code == Op.MUL:
        real = float(np.float32(s1) * np.float32(s2)) / so
        output = functools.cache(lambda v: ref_multiply(v, real))
        table = [
            [output((a - a_info.zero_point) * (b - b_info.zero_point)) for b in values]
            for a in values
        ]
    else:
        twice_max = 2 * max(s1, s2)
        sign = -1 if code == Op.SUB else 1
        first = {a: ref_multiply((a - a_info.zero_point) * 2**20, s1 / twice_max) for a in values}
        second = {
            b: sign * ref_multiply((b - b_info.zero_point) * 2**20, s2 / twice_max) for b in values
        }
        output = functools.cache(lambda v: ref_multiply(v, twice_max / (2**20 * so)))
        table = [[output(first[a] + second[b]) for b in values] for a in values]
    return np.clip(np.array(table, np.int64) + out.zero_point, lo, hi)


def binary_signature(code, a_info, b_info, out) -> OperationSignature:
    return OperationSignature(code, [a_info, b_info, OperandInfo(T.INT32, ())], [out])


#: (input1 scale, zero point, input2 scale, zero point, output scale, zero
#: point) for uint8; int8 shifts the zero points down by 128.  Dyadic and
#: third scales (ties and non-ties), an output scale small enough to
#: saturate, extreme zero points.
BINARY_CASES = [
    (0.5, 128, 0.25, 100, 1.0, 128),
    (1 / 3, 0, 0.1, 255, 0.2, 10),
    (0.02, 255, 0.02, 0, 0.01, 127),
    (1.0, 7, 0.5, 200, 0.75, 255),
]


@pytest.mark.parametrize("kind", ["uint8", "int8"])
@pytest.mark.parametrize("code", [Op.ADD, Op.SUB, Op.MUL])
@pytest.mark.parametrize("case", range(len(BINARY_CASES)))
def test_quantized_arithmetic_over_every_pair_of_bytes(kind, code, case):
    """The C table (what runs) for every pair of inputs and every activation
    equals the Python-int reference and the numpy steps."""
    qcode, dtype = QUANT_TYPES[kind]
    shift = 0 if kind == "uint8" else 128
    s1, z1, s2, z2, so, zo = BINARY_CASES[case]
    if code == Op.MUL:
        so = max(so, s1 * s2 * 1.5)  # MUL needs an output scale above the product's
    a_info = OperandInfo(qcode, (256, 256), s1, z1 - shift)
    b_info = OperandInfo(qcode, (256, 256), s2, z2 - shift)
    out = OperandInfo(qcode, (256, 256), so, zo - shift)
    values = np.arange(256) - shift
    a = np.repeat(values, 256).reshape(256, 256).astype(dtype)
    b = np.tile(values, 256).reshape(256, 256).astype(dtype)
    sig = binary_signature(code, a_info, b_info, out)
    for fuse in FUSES:
        want = ref_binary_table(code, a_info, b_info, out, fuse)
        assert np.array_equal(elementwise._quant8_numpy(sig, a, b, fuse), want)
        ins = [a_info, b_info, i32(fuse)]
        (got,) = run(code, ins, [out], a, b)
        assert got.dtype == dtype
        assert np.array_equal(got.astype(np.int64), want), np.argwhere(got != want)[:5]


@pytest.mark.parametrize("kind", ["uint8", "int8"])
@pytest.mark.parametrize("code", [Op.ADD, Op.SUB, Op.MUL])
@pytest.mark.parametrize(
    ("shape_a", "shape_b"),
    [
        ((2, 3, 4, 5), (5,)),  # per channel: b repeats along a
        ((1, 1, 1, 5), (2, 3, 4, 5)),  # a repeats: the transposed table
        ((2, 3, 4, 5), (1,)),  # a scalar
        ((2, 3, 4, 5), ()),  # rank 0
        ((3, 1), (1, 4)),  # both broadcast: copies
        ((2, 1, 5), (3, 1)),
        ((0, 5), (5,)),  # empty
    ],
)
def test_quantized_arithmetic_broadcasts_like_numpy(rng, kind, code, shape_a, shape_b):
    qcode, dtype = QUANT_TYPES[kind]
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    a = rng.integers(lo, hi, shape_a, endpoint=True).astype(dtype)
    b = rng.integers(lo, hi, shape_b, endpoint=True).astype(dtype)
    shape = np.broadcast_shapes(shape_a, shape_b)
    a_info = OperandInfo(qcode, shape_a, 0.5, int(lo) + 3)
    b_info = OperandInfo(qcode, shape_b, 0.125, int(hi) - 9)
    out = OperandInfo(qcode, shape, 0.75 if code != Op.MUL else 2.0, int(lo) + 100)
    sig = binary_signature(code, a_info, b_info, out)
    for fuse in FUSES:
        want = elementwise._quant8_numpy(sig, a, b, fuse)
        (got,) = run(code, [a_info, b_info, i32(fuse)], [out], a, b)
        assert got.shape == shape and np.array_equal(got, want)
        # The activation as a model input: no bound kernel, the same table.
        fuse_info = OperandInfo(T.INT32, ())
        (got,) = run(code, [a_info, b_info, fuse_info], [out], a, b, np.array(fuse, np.int32))
        assert np.array_equal(got, want)


def test_quantized_arithmetic_outside_c_keeps_the_numpy_steps(rng):
    """An output multiplier of 2**31 is no shift C takes: numpy runs instead."""
    qcode = T.TENSOR_QUANT8_ASYMM
    a_info = OperandInfo(qcode, (4,), 1.0, 0)
    out = OperandInfo(qcode, (4,), 2.0**-50, 0)
    sig = binary_signature(Op.ADD, a_info, a_info, out)
    assert elementwise._quant8_table(elementwise._quant8_arithmetic(sig, 0)) is None
    a = np.array([0, 0, 1, 3], np.uint8)
    (got,) = run(Op.ADD, [a_info, a_info, i32(0)], [out], a, a)
    assert got.tolist() == elementwise._quant8_numpy(sig, a, a, 0).tolist() == [0, 0, 255, 255]


def test_the_quantized_arithmetic_table_refuses_what_c_cannot_compute():
    with pytest.raises(ValueError, match="refuses"):
        native.QuantBinary(native.QUANT_ADD, np.uint8, (0, 0), 0, (2**30, 31), (0, 255), 20)
    with pytest.raises(ValueError, match="refuses"):
        native.QuantBinary(native.QUANT_MUL, np.int8, (200, 0), 0, (2**30, 0), (-128, 127))
    with pytest.raises(ValueError, match="refuses"):
        native.QuantBinary(native.QUANT_MUL, np.int16, (0, 0), 0, (2**30, 0), (0, 9))
    with pytest.raises(ValueError, match="beyond int32"):
        native.QuantBinary(native.QUANT_MUL, np.uint8, (0, 0), 0, (2**31, 0), (0, 9))
    loop = native.QuantBinary(native.QUANT_MUL, np.uint8, (0, 0), 0, (2**30, 0), (0, 255))
    with pytest.raises(ValueError, match="on uint8, got int8"):
        loop(np.zeros(3, np.int8), np.zeros(3, np.int8))


# --------------------------------------------------------------- SOFTMAX


def softmax_numpy(x: np.ndarray, info: OperandInfo, beta: float, axis: int) -> np.ndarray:
    out = OperandInfo(info.code, info.dimensions, 1 / 256, _zp(info))
    sig = OperationSignature(Op.SOFTMAX, [info, OperandInfo(T.FLOAT32, ())], [out])
    ctx = ExecutionContext(sig, [x, np.float32(beta)])
    moved = np.moveaxis(x, axis, -1)
    return np.moveaxis(activation._softmax_quant8(ctx, moved, beta), -1, axis)


def _zp(info: OperandInfo) -> int:
    return 0 if info.code == T.TENSOR_QUANT8_ASYMM else -128


@pytest.mark.parametrize("kind", ["uint8", "int8"])
@pytest.mark.parametrize(
    ("scale", "beta"),
    [
        (0.1, 1.0),
        (1.0, 1.0),  # a small radius: most of a row counts as exp 0
        (0.00390625, 1.0),
        (0.05, 0.3),
        (2.0**-20, 1e5),
    ],
)
@pytest.mark.parametrize(
    ("shape", "axis"),
    [((1, 10), -1), ((1, 2), -1), ((3, 4, 7), 1), ((2, 1), -1), ((1, 5000), -1)],
)
def test_softmax_equals_the_numpy_fixed_point(rng, kind, scale, beta, shape, axis):
    """Random rows, rows of one repeated value (ties everywhere) and rows at
    the type's extremes; beta constant (a bound kernel) and a model input."""
    qcode, dtype = QUANT_TYPES[kind]
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    info = OperandInfo(qcode, shape, scale, int(lo) + 77)
    out = OperandInfo(qcode, shape, 1 / 256, _zp(info))
    for x in (
        rng.integers(lo, hi, shape, endpoint=True).astype(dtype),
        rng.integers(hi - 3, hi, shape, endpoint=True).astype(dtype),
        np.full(shape, lo, dtype),
        np.where(rng.random(shape) < 0.5, lo, hi).astype(dtype),
    ):
        want = softmax_numpy(x, info, beta, axis)
        beta_const = (OperandInfo(T.FLOAT32, ()), np.array(beta, np.float32))
        axis_const = (OperandInfo(T.INT32, ()), np.array(axis, np.int32))
        (got,) = run(Op.SOFTMAX, [info, beta_const, axis_const], [out], x)
        assert got.dtype == dtype and np.array_equal(got, want)
        beta_input = OperandInfo(T.FLOAT32, ())
        (got,) = run(
            Op.SOFTMAX, [info, beta_input, axis_const], [out], x, np.array(beta, np.float32)
        )
        assert np.array_equal(got, want)


def test_softmax_of_one_row_known_answer():
    """Two equal logits: 128/256 each; one far below the other: 256 -> 255 and 0."""
    info = OperandInfo(T.TENSOR_QUANT8_ASYMM, (1, 2), 1.0, 0)
    out = OperandInfo(T.TENSOR_QUANT8_ASYMM, (1, 2), 1 / 256, 0)
    beta = (OperandInfo(T.FLOAT32, ()), np.array(1.0, np.float32))
    (got,) = run(Op.SOFTMAX, [info, beta], [out], np.array([[9, 9]], np.uint8))
    assert got.tolist() == [[128, 128]]
    (got,) = run(Op.SOFTMAX, [info, beta], [out], np.array([[200, 0]], np.uint8))
    assert got.tolist() == [[255, 0]]


def test_softmax_refuses_a_table_of_the_wrong_size():
    with pytest.raises(ValueError, match="exponentials"):
        native.softmax_quant8(np.zeros((1, 3), np.uint8), np.zeros(255, np.int32), 10)
    with pytest.raises(ValueError, match="exponentials"):
        native.softmax_quant8(np.zeros((1, 3), np.int16), np.zeros(256, np.int32), 10)


# --------------------------------------------------------------- QUANTIZE


def ref_quantize(x: float, scale: float, zero_point: int, lo: int, hi: int) -> int:
    """std::round(x / scale) + zero_point, clamped; NaN to the top."""
    if np.isnan(x):
        return hi
    if np.isinf(x):
        return hi if x > 0 else lo
    with np.errstate(over="ignore"):
        quotient = np.float32(x) / np.float32(scale)  # the reference divides in float32
    if np.isinf(quotient):
        return hi if quotient > 0 else lo
    return max(lo, min(hi, round_half_away(Fraction(float(quotient))) + zero_point))


@pytest.mark.parametrize("kind", ["uint8", "int8"])
@pytest.mark.parametrize("scale", [0.5, 1 / 255, 0.0078125, 3.0])
@pytest.mark.parametrize("count", [1, 7, 8, 9, 1000])  # the C loop's blocks of 8, and a tail
def test_quantize_equals_the_reference_at_ties(rng, kind, scale, count):
    qcode, dtype = QUANT_TYPES[kind]
    lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    zero_point = lo + 100
    # Exact .5 ties (dyadic scales: x / scale is exact), their neighbours,
    # random values, saturation, -0, infinities, NaN, tiny and huge values.
    ties = (rng.integers(-300, 300, count) + 0.5) * scale
    values = np.concatenate(
        [
            ties,
            np.nextafter(ties.astype(np.float32), np.float32(np.inf)),
            np.nextafter(ties.astype(np.float32), np.float32(-np.inf)),
            rng.uniform(-400 * scale, 400 * scale, count),
            [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e38, -3e38, 2.0**23, -(2.0**24)],
        ]
    ).astype(np.float32)
    info = OperandInfo(T.TENSOR_FLOAT32, values.shape)
    out = OperandInfo(qcode, values.shape, scale, zero_point)
    (got,) = run(Op.QUANTIZE, [info], [out], values)
    want = [ref_quantize(float(v), scale, zero_point, lo, hi) for v in values]
    assert got.dtype == dtype and got.astype(np.int64).tolist() == want
    assert np.array_equal(unary._quantize_numpy(values, out), got)
    # float16 input: widened exactly, then the same steps.
    with np.errstate(over="ignore"):  # 3e38 is inf in float16
        half = values.astype(np.float16)
    (got,) = run(Op.QUANTIZE, [OperandInfo(T.TENSOR_FLOAT16, half.shape)], [out], half)
    assert np.array_equal(got, unary._quantize_numpy(half, out))


def test_quantize_refuses_an_unknown_type():
    with pytest.raises(ValueError, match="cannot quantize to int16"):
        native.quantize_f32(np.zeros(3, np.float32), 1.0, 0, np.int16)
