"""CPU driver: elementwise, activation, normalization, lookup and shape operations.

Validation must reject malformed operations with BAD_DATA, execution must turn
data-dependent problems into OP_FAILED, and results are compared with
expectations computed independently in numpy (including the reference's
rounding of quantized ties).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nnburst as nn
from nnburst.codes import OperandCode, OperationCode, ResultCode
from nnburst.cpu.driver import cpu_device
from nnburst.cpu.executor import PreparedModel
from nnburst.errors import BadDataError, NNError
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.operands import OperandInfo

F32 = OperandCode.TENSOR_FLOAT32
I32 = OperandCode.TENSOR_INT32
Q8 = OperandCode.TENSOR_QUANT8_ASYMM
QS8 = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
OMITTED = object()
#: an input fed at execution rather than stored in the model.
RUNTIME = None


def t(
    code: OperandCode, dims: tuple[int, ...] | None, scale: float = 0.0, zp: int = 0
) -> OperandInfo:
    return OperandInfo(code, dims, scale, zp)


def s(code: OperandCode = OperandCode.INT32) -> OperandInfo:
    return OperandInfo(code, ())


def model(
    code: OperationCode, inputs: list[tuple[OperandInfo, Any]], outputs: list[OperandInfo]
) -> HalModel:
    """A one-operation model; each input is a constant, RUNTIME (a model input) or OMITTED."""
    operands: list[Operand] = []
    model_inputs: list[int] = []
    for info, value in inputs:
        if value is RUNTIME:
            model_inputs.append(len(operands))
            operands.append(Operand(info, Lifetime.SUBGRAPH_INPUT))
        elif value is OMITTED:
            operands.append(Operand(info, Lifetime.NO_VALUE))
        else:
            array = np.asarray(value, dtype=info.dtype).reshape(info.dimensions)
            operands.append(Operand(info, Lifetime.CONSTANT_COPY, array))
    outs = []
    for info in outputs:
        outs.append(len(operands))
        operands.append(Operand(info, Lifetime.SUBGRAPH_OUTPUT))
    operation = Operation(code, tuple(range(len(inputs))), tuple(outs))
    return HalModel(Subgraph(operands, [operation], tuple(model_inputs), tuple(outs)))


def run(
    code: OperationCode,
    inputs: list[tuple[OperandInfo, Any]],
    outputs: list[OperandInfo],
    *values: Any,
) -> list[np.ndarray]:
    feeds = [
        np.asarray(v, dtype=info.dtype)
        for v, (info, _) in zip(values, [i for i in inputs if i[1] is RUNTIME])
    ]
    return PreparedModel(model(code, inputs, outputs)).run(feeds)


def rejects(
    code: OperationCode, inputs: list[tuple[OperandInfo, Any]], outputs: list[OperandInfo]
) -> None:
    with pytest.raises(BadDataError):
        PreparedModel(model(code, inputs, outputs))


def fails_at_run(
    code: OperationCode,
    inputs: list[tuple[OperandInfo, Any]],
    outputs: list[OperandInfo],
    *values: Any,
) -> None:
    with pytest.raises(NNError) as info:
        run(code, inputs, outputs, *values)
    assert info.value.code == ResultCode.OP_FAILED


# --- arithmetic -------------------------------------------------------------------


def test_add_float_broadcasts_from_trailing_dims_with_relu() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 1, 3) - 3
    b = np.array([[0.5], [-1.0], [2.0], [-4.0]], dtype=np.float32)
    (out,) = run(
        OperationCode.ADD,
        [(t(F32, (2, 1, 3)), RUNTIME), (t(F32, (4, 1)), RUNTIME), (s(), 1)],
        [t(F32, (0, 0, 0))],
        a,
        b,
    )
    np.testing.assert_array_equal(out, np.maximum(a + b, 0))
    assert out.shape == (2, 4, 3)


def test_sub_and_div_float_with_relu1_and_relu6() -> None:
    a = np.array([[-3.0, 0.5, 9.0]], dtype=np.float32)
    b = np.array([[2.0], [-0.5]], dtype=np.float32)
    (diff,) = run(
        OperationCode.SUB,
        [(t(F32, (1, 3)), RUNTIME), (t(F32, (2, 1)), RUNTIME), (s(), 2)],
        [t(F32, (2, 3))],
        a,
        b,
    )
    np.testing.assert_array_equal(diff, np.clip(a - b, -1, 1))
    (quot,) = run(
        OperationCode.DIV,
        [(t(F32, (1, 3)), RUNTIME), (t(F32, (2, 1)), RUNTIME), (s(), 3)],
        [t(F32, (2, 3))],
        a,
        b,
    )
    np.testing.assert_array_equal(quot, np.clip(a / b, 0, 6))


def test_add_quant8_ties_round_away_from_zero() -> None:
    # Power-of-two scales make the fixed-point path exact, leaving only the final
    # rounding: the reference's RoundingDivideByPOT sends halves away from zero.
    x = np.array([129, 127, 131, 125, 128], dtype=np.uint8)  # centred: 1 -1 3 -3 0
    y = np.full(5, 128, dtype=np.uint8)
    (out,) = run(
        OperationCode.ADD,
        [(t(Q8, (5,), 1.0, 128), RUNTIME), (t(Q8, (5,), 1.0, 128), RUNTIME), (s(), 0)],
        [t(Q8, (5,), 2.0, 100)],
        x,
        y,
    )
    centred = x.astype(int) - 128
    expected = 100 + np.sign(centred) * np.floor(np.abs(centred) / 2 + 0.5)
    np.testing.assert_array_equal(out, expected)  # 0.5 -> 1, -0.5 -> -1


def test_mul_quant8_ties_round_half_up() -> None:
    # MUL's single multiplier goes through SaturatingRoundingDoublingHighMul,
    # whose ties round up: +0.5 -> 1 but -0.5 -> 0.
    x = np.array([129, 127, 131, 125], dtype=np.uint8)  # centred: 1 -1 3 -3
    y = np.full(4, 129, dtype=np.uint8)  # centred: 1
    (out,) = run(
        OperationCode.MUL,
        [(t(Q8, (4,), 1.0, 128), RUNTIME), (t(Q8, (4,), 1.0, 128), RUNTIME), (s(), 0)],
        [t(Q8, (4,), 2.0, 100)],
        x,
        y,
    )
    product = (x.astype(int) - 128) * (y.astype(int) - 128)
    np.testing.assert_array_equal(out, 100 + np.floor(product / 2 + 0.5))


def test_sub_quant8_broadcast_matches_real_arithmetic() -> None:
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, size=(3, 4), dtype=np.uint8)
    y = rng.integers(0, 256, size=(4,), dtype=np.uint8)
    (out,) = run(
        OperationCode.SUB,
        [(t(Q8, (3, 4), 0.5, 120), RUNTIME), (t(Q8, (4,), 0.25, 10), RUNTIME), (s(), 0)],
        [t(Q8, (3, 4), 1.0, 128)],
        x,
        y,
    )
    real = (x.astype(float) - 120) * 0.5 - (y.astype(float) - 10) * 0.25
    expected = np.clip(np.sign(real) * np.floor(np.abs(real) + 0.5) + 128, 0, 255)
    np.testing.assert_array_equal(out, expected)  # quarter-steps: every tie is exact


def test_int32_arithmetic_wraps_and_divides_by_floor() -> None:
    a = np.array([7, -7, 2**31 - 1, -5], dtype=np.int32)
    b = np.array([2, 2, 1, -2], dtype=np.int32)
    ins = [(t(I32, (4,)), RUNTIME), (t(I32, (4,)), RUNTIME), (s(), 0)]
    (total,) = run(OperationCode.ADD, ins, [t(I32, (4,))], a, b)
    assert total.tolist() == [9, -5, -(2**31), -7]
    (quot,) = run(OperationCode.DIV, ins, [t(I32, (4,))], a, b)
    assert quot.tolist() == [3, -4, 2**31 - 1, 2]


def test_floor_float() -> None:
    x = np.array([-1.5, -0.0, 0.3, 2.0, 2.7], dtype=np.float32)
    (out,) = run(OperationCode.FLOOR, [(t(F32, (5,)), RUNTIME)], [t(F32, (5,))], x)
    np.testing.assert_array_equal(out, np.floor(x))


def test_arithmetic_validation_rejections() -> None:
    a, b, out = t(F32, (2, 2)), t(F32, (2, 2)), t(F32, (2, 2))
    rejects(OperationCode.ADD, [(a, RUNTIME), (b, RUNTIME)], [out])  # no activation
    rejects(OperationCode.ADD, [(a, RUNTIME), (b, RUNTIME), (s(), 4)], [out])  # FuseCode 4
    rejects(OperationCode.ADD, [(a, RUNTIME), (t(Q8, (2, 2), 1.0, 0), RUNTIME), (s(), 0)], [out])
    rejects(OperationCode.ADD, [(a, RUNTIME), (t(F32, (2, 3)), RUNTIME), (s(), 0)], [out])
    rejects(
        OperationCode.DIV,
        [(t(Q8, (2,), 1.0, 0), RUNTIME), (t(Q8, (2,), 1.0, 0), RUNTIME), (s(), 0)],
        [t(Q8, (2,), 1.0, 0)],
    )  # DIV has no quant8
    rejects(
        OperationCode.ADD,
        [(t(I32, (2,)), RUNTIME), (t(I32, (2,)), RUNTIME), (s(), 1)],
        [t(I32, (2,))],
    )  # int32 takes no activation
    # quant8 MUL needs output_scale > input1_scale * input2_scale
    rejects(
        OperationCode.MUL,
        [(t(Q8, (2,), 0.5, 0), RUNTIME), (t(Q8, (2,), 0.5, 0), RUNTIME), (s(), 0)],
        [t(Q8, (2,), 0.25, 0)],
    )
    rejects(OperationCode.FLOOR, [(t(Q8, (2,), 1.0, 0), RUNTIME)], [t(Q8, (2,), 1.0, 0)])


def test_arithmetic_execution_errors_are_op_failed() -> None:
    ins = [(t(F32, (0,)), RUNTIME), (t(F32, (0,)), RUNTIME), (s(), 0)]
    fails_at_run(OperationCode.ADD, ins, [t(F32, (0,))], np.ones(3), np.ones(4))
    # (TENSOR_INT32 DIV by zero is no error: NNAPI gives 0, see the conformance answers at the end of this file.)


# --- activations --------------------------------------------------------------------


def test_relu_family_float_ranges() -> None:
    x = np.array([-7.0, -1.5, -0.5, 0.0, 0.5, 1.5, 6.5], dtype=np.float32)
    for code, lo, hi in (
        (OperationCode.RELU, 0, np.inf),
        (OperationCode.RELU1, -1, 1),
        (OperationCode.RELU6, 0, 6),
    ):
        (out,) = run(code, [(t(F32, (7,)), RUNTIME)], [t(F32, (7,))], x)
        np.testing.assert_array_equal(out, np.clip(x, lo, hi))


def test_relu1_quant8_bounds_round_ties_away_from_zero() -> None:
    # scale 2: the bounds ±1 sit exactly half-way, std::round makes them zp ± 1.
    x = np.arange(120, 137, dtype=np.uint8)
    (out,) = run(
        OperationCode.RELU1, [(t(Q8, (17,), 2.0, 128), RUNTIME)], [t(Q8, (17,), 2.0, 128)], x
    )
    np.testing.assert_array_equal(out, np.clip(x, 127, 129))
    (out6,) = run(
        OperationCode.RELU6, [(t(Q8, (17,), 0.5, 125), RUNTIME)], [t(Q8, (17,), 0.5, 125)], x
    )
    np.testing.assert_array_equal(out6, np.clip(x, 125, 137))


@pytest.mark.parametrize("code,signed", [(Q8, False), (QS8, True)])
def test_logistic_and_tanh_quant8_track_the_real_functions(code: OperandCode, signed: bool) -> None:
    offset = 128 if signed else 0
    raw = np.arange(256).astype(np.int64) - offset
    dtype = np.int8 if signed else np.uint8
    x = raw.astype(dtype)
    real = (np.arange(256) - 100) * 0.07  # zero point 100 - offset
    (sig,) = run(
        OperationCode.LOGISTIC,
        [(t(code, (256,), 0.07, 100 - offset), RUNTIME)],
        [t(code, (256,), 1 / 256, -offset)],
        x,
    )
    want = np.clip(np.round(256 / (1 + np.exp(-real))), 0, 255) - offset
    assert np.abs(sig.astype(int) - want).max() <= 1
    (th,) = run(
        OperationCode.TANH,
        [(t(code, (256,), 0.07, 100 - offset), RUNTIME)],
        [t(code, (256,), 1 / 128, 128 - offset)],
        x,
    )
    want = np.clip(np.round(128 * np.tanh(real)) + 128, 0, 255) - offset
    assert np.abs(th.astype(int) - want).max() <= 1


def test_softmax_float_axis_and_quant8() -> None:
    x = np.random.default_rng(1).normal(size=(2, 3, 4)).astype(np.float32)
    (out,) = run(
        OperationCode.SOFTMAX,
        [(t(F32, (2, 3, 4)), RUNTIME), (s(OperandCode.FLOAT32), 0.5), (s(), 1)],
        [t(F32, (2, 3, 4))],
        x,
    )
    e = np.exp(0.5 * (x - x.max(axis=1, keepdims=True)))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    q = np.array([[1, 2, 3, 4, 5], [255, 254, 253, 252, 251]], dtype=np.uint8)
    (qout,) = run(
        OperationCode.SOFTMAX,
        [(t(Q8, (2, 5), 0.5, 0), RUNTIME), (s(OperandCode.FLOAT32), 1.0)],
        [t(Q8, (2, 5), 1 / 256, 0)],
        q,
    )
    real = 0.5 * q.astype(float)
    e = np.exp(real - real.max(axis=1, keepdims=True))
    want = np.round(256 * e / e.sum(axis=1, keepdims=True))
    assert np.abs(qout.astype(int) - want).max() <= 1


def test_activation_validation_rejections() -> None:
    rejects(OperationCode.LOGISTIC, [(t(Q8, (4,), 0.5, 0), RUNTIME)], [t(Q8, (4,), 0.5, 0)])
    rejects(OperationCode.TANH, [(t(Q8, (4,), 0.5, 0), RUNTIME)], [t(Q8, (4,), 1 / 128, 0)])
    rejects(OperationCode.RELU, [(t(Q8, (4,), 0.5, 0), RUNTIME)], [t(Q8, (4,), 0.5, 3)])
    rejects(OperationCode.RELU, [(t(I32, (4,)), RUNTIME)], [t(I32, (4,))])
    rank9 = (1,) * 9  # rank 5 to 8 is the nnburst.rank_above_4 extension
    rejects(OperationCode.RELU6, [(t(F32, rank9), RUNTIME)], [t(F32, rank9)])
    rejects(
        OperationCode.SOFTMAX,
        [(t(F32, (2, 2)), RUNTIME), (s(OperandCode.FLOAT32), 0.0)],
        [t(F32, (2, 2))],
    )  # beta must be positive
    rejects(
        OperationCode.SOFTMAX,
        [(t(F32, (2, 2)), RUNTIME), (s(OperandCode.FLOAT32), 1.0), (s(), 2)],
        [t(F32, (2, 2))],
    )  # axis out of range
    rejects(
        OperationCode.L2_NORMALIZATION, [(t(Q8, (1, 4), 0.1, 0), RUNTIME)], [t(Q8, (1, 4), 0.1, 0)]
    )  # output must be scale 1/128, zero point 128


# --- normalization, lookup, dequantize, resize ------------------------------------


def test_l2_normalization_and_lrn_float() -> None:
    x = np.random.default_rng(2).normal(size=(2, 5)).astype(np.float32)
    x[1] = 0
    (out,) = run(OperationCode.L2_NORMALIZATION, [(t(F32, (2, 5)), RUNTIME)], [t(F32, (2, 5))], x)
    norm = np.sqrt((x.astype(float) ** 2).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(out[0], x[0] / norm[0], rtol=1e-6)
    np.testing.assert_array_equal(out[1], 0)  # an all-zero slice normalises to zero
    (lrn,) = run(
        OperationCode.LOCAL_RESPONSE_NORMALIZATION,
        [
            (t(F32, (1, 1, 2, 5)), RUNTIME),
            (s(), 1),
            (s(OperandCode.FLOAT32), 1.0),
            (s(OperandCode.FLOAT32), 0.5),
            (s(OperandCode.FLOAT32), 0.75),
        ],
        [t(F32, (1, 1, 2, 5))],
        x.reshape(1, 1, 2, 5),
    )
    sq = np.pad(x.astype(float) ** 2, ((0, 0), (1, 1)))
    window = sq[:, :-2] + sq[:, 1:-1] + sq[:, 2:]
    np.testing.assert_allclose(lrn.reshape(2, 5), x / (1.0 + 0.5 * window) ** 0.75, rtol=1e-6)


def test_lookups() -> None:
    values = np.arange(12, dtype=np.float32).reshape(4, 3)
    (rows,) = run(
        OperationCode.EMBEDDING_LOOKUP,
        [(t(I32, (3,)), RUNTIME), (t(F32, (4, 3)), values)],
        [t(F32, (3, 3))],
        [3, 0, 3],
    )
    np.testing.assert_array_equal(rows, values[[3, 0, 3]])
    fails_at_run(
        OperationCode.EMBEDDING_LOOKUP,
        [(t(I32, (2,)), RUNTIME), (t(F32, (4, 3)), values)],
        [t(F32, (2, 3))],
        [1, 4],
    )
    out, hits = run(
        OperationCode.HASHTABLE_LOOKUP,
        [(t(I32, (3,)), RUNTIME), (t(I32, (4,)), [-5, 2, 9, 40]), (t(F32, (4, 3)), values)],
        [t(F32, (3, 3)), t(Q8, (3,), 1.0, 0)],
        [9, 7, -5],
    )
    np.testing.assert_array_equal(out, [values[2], [0, 0, 0], values[0]])
    assert hits.tolist() == [1, 0, 1]


def test_dequantize_is_exact_float32() -> None:
    x = np.array([0, 1, 127, 200, 255], dtype=np.uint8)
    (out,) = run(OperationCode.DEQUANTIZE, [(t(Q8, (5,), 0.1, 127), RUNTIME)], [t(F32, (5,))], x)
    np.testing.assert_array_equal(
        out, (x.astype(np.int32) - 127).astype(np.float32) * np.float32(0.1)
    )


def test_resize_bilinear_nchw_matches_nhwc() -> None:
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(1, 3, 4, 2)
    (nhwc,) = run(
        OperationCode.RESIZE_BILINEAR,
        [(t(F32, (1, 3, 4, 2)), RUNTIME), (s(), 6), (s(), 5)],
        [t(F32, (1, 5, 6, 2))],
        x,
    )
    (nchw,) = run(
        OperationCode.RESIZE_BILINEAR,
        [(t(F32, (1, 2, 3, 4)), RUNTIME), (s(), 6), (s(), 5), (s(OperandCode.BOOL), True)],
        [t(F32, (1, 2, 5, 6))],
        x.transpose(0, 3, 1, 2),
    )
    np.testing.assert_array_equal(nchw, nhwc.transpose(0, 3, 1, 2))
    # Source row of output row 1 is 1 * 3/5 = 0.6: 40% of row 0 plus 60% of row 1.
    np.testing.assert_allclose(nhwc[0, 1, 0], 0.4 * x[0, 0, 0] + 0.6 * x[0, 1, 0], rtol=1e-6)
    np.testing.assert_allclose(nhwc[0, 4, 5], x[0, 2, 3], rtol=1e-6)  # clamped to the last pixel


# --- shape operations ------------------------------------------------------------------


def test_strided_slice_masks_and_negative_strides() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    ins = [
        (t(F32, (2, 3, 4)), RUNTIME),
        (t(I32, (3,)), [1, -1, 0]),
        (t(I32, (3,)), [2, 0, 3]),
        (t(I32, (3,)), [1, -1, 2]),
        (s(), 0b100),
        (s(), 0b000),
        (s(), 0b001),
    ]
    (out,) = run(OperationCode.STRIDED_SLICE, ins, [t(F32, (2, 2))], x)
    np.testing.assert_array_equal(out, x[1, -1:0:-1, 0::2])
    bad = [*ins[:3], (t(I32, (3,)), [1, 0, 1]), *ins[4:]]
    rejects(OperationCode.STRIDED_SLICE, bad, [t(F32, (2, 2))])  # zero stride


def test_block_rearrangements_round_trip() -> None:
    x = np.arange(2 * 4 * 6 * 3, dtype=np.float32).reshape(2, 4, 6, 3)
    (deep,) = run(
        OperationCode.SPACE_TO_DEPTH,
        [(t(F32, (2, 4, 6, 3)), RUNTIME), (s(), 2)],
        [t(F32, (2, 2, 3, 12))],
        x,
    )
    assert deep[0, 0, 0].tolist() == [*x[0, 0, 0], *x[0, 0, 1], *x[0, 1, 0], *x[0, 1, 1]]
    (back,) = run(
        OperationCode.DEPTH_TO_SPACE,
        [(t(F32, (2, 2, 3, 12)), RUNTIME), (s(), 2)],
        [t(F32, (2, 4, 6, 3))],
        deep,
    )
    np.testing.assert_array_equal(back, x)
    nchw = x.transpose(0, 3, 1, 2)
    (batched,) = run(
        OperationCode.SPACE_TO_BATCH_ND,
        [
            (t(F32, (2, 3, 4, 6)), RUNTIME),
            (t(I32, (2,)), [2, 3]),
            (t(I32, (2, 2)), [[1, 1], [0, 3]]),
            (s(OperandCode.BOOL), True),
        ],
        [t(F32, (12, 3, 3, 3))],
        nchw,
    )
    padded = np.pad(nchw, ((0, 0), (0, 0), (1, 1), (0, 3)))
    np.testing.assert_array_equal(batched[(1 * 3 + 2) * 2 + 1], padded[1, :, 1::2, 2::3])
    (unbatched,) = run(
        OperationCode.BATCH_TO_SPACE_ND,
        [(t(F32, (12, 3, 3, 3)), RUNTIME), (t(I32, (2,)), [2, 3]), (s(OperandCode.BOOL), True)],
        [t(F32, (2, 3, 6, 9))],
        batched,
    )
    np.testing.assert_array_equal(unbatched, padded)


def test_concat_quant8_requantizes_differing_inputs() -> None:
    a = np.array([[0, 10, 255]], dtype=np.uint8)
    b = np.array([[100, 101, 103]], dtype=np.uint8)
    (out,) = run(
        OperationCode.CONCATENATION,
        [(t(Q8, (1, 3), 0.5, 0), RUNTIME), (t(Q8, (1, 3), 1.0, 100), RUNTIME), (s(), 0)],
        [t(Q8, (2, 3), 0.5, 0)],
        a,
        b,
    )
    assert out.tolist() == [[0, 10, 255], [0, 2, 6]]


def test_signed_mean_divides_toward_zero_and_keeps_the_quantization() -> None:
    """Quantized MEAN divides raw sums as C does (toward zero), into the input's quantization."""
    x = t(QS8, (2, 2), 0.5, 0)
    axis, keep = (t(I32, (1,)), [1]), (s(), 0)
    (mean,) = run(
        OperationCode.MEAN,
        [(x, RUNTIME), axis, keep],
        [t(QS8, (2,), 0.5, 0)],
        np.array([[-3, -2], [3, 2]], dtype=np.int8),
    )
    assert mean.tolist() == [-2, 2]  # -5 / 2 and 5 / 2; a floor division gives -3
    rejects(OperationCode.MEAN, [(x, RUNTIME), axis, keep], [t(QS8, (2,), 0.5, 1)])
    rejects(OperationCode.MEAN, [(x, RUNTIME), axis, keep], [t(QS8, (2,), 0.25, 0)])


def test_pad_mean_squeeze_reshape_transpose() -> None:
    q = np.array([[1, 2], [3, 5]], dtype=np.uint8)
    (padded,) = run(
        OperationCode.PAD,
        [(t(Q8, (2, 2), 0.5, 7), RUNTIME), (t(I32, (2, 2)), [[0, 1], [2, 0]])],
        [t(Q8, (3, 4), 0.5, 7)],
        q,
    )
    assert padded.tolist() == [[7, 7, 1, 2], [7, 7, 3, 5], [7, 7, 7, 7]]  # zero point padding
    (mean,) = run(
        OperationCode.MEAN,
        [(t(Q8, (2, 2), 0.5, 7), RUNTIME), (t(I32, (1,)), [1]), (s(), 0)],
        [t(Q8, (2,), 0.5, 7)],
        q,
    )
    assert mean.tolist() == [1, 4]  # (1+2)//2 and (3+5)//2: integer division, no rounding
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 1, 3)
    (sq,) = run(
        OperationCode.SQUEEZE,
        [(t(F32, (1, 2, 1, 3)), RUNTIME), (t(I32, (0,)), OMITTED)],
        [t(F32, (2, 3))],
        x,
    )
    np.testing.assert_array_equal(sq, x.reshape(2, 3))
    (re,) = run(
        OperationCode.RESHAPE,
        [(t(F32, (1, 2, 1, 3)), RUNTIME), (t(I32, (2,)), RUNTIME)],
        [t(F32, (0, 0))],
        x,
        np.array([3, -1], dtype=np.int32),
    )
    np.testing.assert_array_equal(re, x.reshape(3, 2))
    (tr,) = run(
        OperationCode.TRANSPOSE,
        [(t(F32, (1, 2, 1, 3)), RUNTIME), (t(I32, (4,)), [3, 1, 0, 2])],
        [t(F32, (3, 2, 1, 1))],
        x,
    )
    np.testing.assert_array_equal(tr, x.transpose(3, 1, 0, 2))
    fails_at_run(
        OperationCode.RESHAPE,
        [(t(F32, (1, 2, 1, 3)), RUNTIME), (t(I32, (2,)), RUNTIME)],
        [t(F32, (0, 0))],
        x,
        np.array([4, -1], dtype=np.int32),
    )


def test_reshape_to_a_constant_shape_runs_a_bound_kernel() -> None:
    """The target is resolved once; the result is a copy, and an input of
    another size takes the unbound path and its error."""
    prepared = PreparedModel(
        model(
            OperationCode.RESHAPE,
            [(t(F32, (1, 2, 2, 3)), RUNTIME), (t(I32, (2,)), [-1, 4])],
            [t(F32, (3, 4))],
        )
    )
    (operation,) = prepared.main.operations
    assert operation.kernel is not None
    x = np.arange(12, dtype=np.float32).reshape(1, 2, 2, 3)
    (out,) = prepared.run([x])
    np.testing.assert_array_equal(out, x.reshape(3, 4))
    assert not np.shares_memory(out, x)
    with pytest.raises(NNError, match="cannot infer the -1"):
        operation.kernel([np.zeros((1, 5), np.float32), np.array([-1, 4], np.int32)])


def test_shape_validation_rejections() -> None:
    x = t(F32, (1, 2, 2, 4))
    rejects(OperationCode.RESHAPE, [(x, RUNTIME), (t(I32, (2,)), [-1, -1])], [t(F32, (4, 4))])
    rejects(OperationCode.RESHAPE, [(x, RUNTIME), (t(I32, (2,)), [3, 5])], [t(F32, (3, 5))])
    rejects(OperationCode.SPACE_TO_DEPTH, [(x, RUNTIME), (s(), 0)], [x])
    rejects(OperationCode.DEPTH_TO_SPACE, [(x, RUNTIME), (s(), 3)], [x])  # 4 % 9 != 0
    rejects(
        OperationCode.PAD, [(x, RUNTIME), (t(I32, (4, 2)), [[0, 0], [-1, 0], [0, 0], [0, 0]])], [x]
    )
    rejects(OperationCode.TRANSPOSE, [(x, RUNTIME), (t(I32, (4,)), [0, 1, 1, 2])], [x])
    rejects(OperationCode.CONCATENATION, [(x, RUNTIME), (x, RUNTIME), (s(), 4)], [x])
    rejects(OperationCode.SQUEEZE, [(x, RUNTIME), (t(I32, (1,)), [1])], [x])  # dim 1 is 2
    rejects(OperationCode.MEAN, [(x, RUNTIME), (t(I32, (1,)), [5]), (s(), 1)], [x])
    rejects(OperationCode.BATCH_TO_SPACE_ND, [(x, RUNTIME), (t(I32, (2,)), [0, 1])], [x])
    rejects(
        OperationCode.SPACE_TO_BATCH_ND,
        [(x, RUNTIME), (t(I32, (2,)), [2, 2]), (t(I32, (2, 2)), [[0, 0], [0, -1]])],
        [x],
    )
    q, q_other = t(Q8, (2, 2), 0.5, 3), t(Q8, (2, 2), 0.5, 4)
    rejects(OperationCode.TRANSPOSE, [(q, RUNTIME), (t(I32, (2,)), [1, 0])], [q_other])


# --- conformance answers through the public runtime (issue 15) -----------------------


def run_one(code: nn.OperationCode, inputs: list[tuple[nn.OperandType, np.ndarray]], out_type):  # type: ignore[no-untyped-def]
    model = nn.Model()
    operands = [model.add_operand(t) for t, _ in inputs]
    out = model.add_operand(out_type)
    model.add_operation(code, operands, [out])
    model.identify_inputs_and_outputs(operands, [out])
    model.finish()
    with nn.Compilation(model, [nn.Device(cpu_device())]) as compilation:
        compilation.finish()
        result = np.zeros(out_type.dimensions, np.dtype(_DTYPES[out_type.code]))
        with nn.Execution(compilation) as execution:
            for i, (_, value) in enumerate(inputs):
                execution.set_input(i, value)
            execution.set_output(0, result)
            execution.compute()
    return result


_DTYPES = {
    nn.OperandCode.TENSOR_QUANT8_ASYMM: np.uint8,
    nn.OperandCode.TENSOR_QUANT8_ASYMM_SIGNED: np.int8,
    nn.OperandCode.TENSOR_INT32: np.int32,
}


@pytest.mark.parametrize(
    ("code", "zero_point", "value", "expected"),
    [
        # One element normalises to ±1: -1 is 0 (uint8) / -128 (int8), +1 saturates at 255 / 127.
        (nn.OperandCode.TENSOR_QUANT8_ASYMM, 128, 127, 0),
        (nn.OperandCode.TENSOR_QUANT8_ASYMM, 128, 0, 0),
        (nn.OperandCode.TENSOR_QUANT8_ASYMM, 128, 129, 255),
        (nn.OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, 0, -1, -128),
        (nn.OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, 0, 1, 127),
    ],
)
def test_quantized_l2_normalization_of_one_element_keeps_its_sign(
    code, zero_point, value, expected
):
    """An input whose sum of squares is 1 once made its multiplier overflow to
    -2**31: -1 came out as +1."""
    dtype = _DTYPES[code]
    t = nn.OperandType(code, (1, 1), scale=1 / 128, zero_point=zero_point)
    out = run_one(nn.OperationCode.L2_NORMALIZATION, [(t, np.array([[value]], dtype))], t)
    assert out.tolist() == [[expected]]


def test_int32_division_by_zero_gives_zero():
    t = nn.OperandType(nn.OperandCode.TENSOR_INT32, (4,))
    fuse = nn.OperandType(nn.OperandCode.INT32)
    a = np.array([7, -7, 5, 0], np.int32)
    b = np.array([2, 2, 0, 0], np.int32)
    out = run_one(nn.OperationCode.DIV, [(t, a), (t, b), (fuse, np.int32(0))], t)
    assert out.tolist() == [3, -4, 0, 0]  # floor division; 0 where the divisor is 0
