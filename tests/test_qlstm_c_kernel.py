"""QUANTIZED_16BIT_LSTM on the C kernel (csrc/qlstm.c, gates through qconv's int16
output) against the numpy step, bit for bit.

Constant weights bind the C step; the same weights fed at run time keep the
numpy step (cpu/ops/quantized_lstm.py ``_execute_q16``), so one model of each
over random sizes, weights, biases, scales and states, extremes included,
must agree exactly."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest

from nnburst._bindings.qconv import PATH_PORTABLE, available_paths
from nnburst._bindings.qlstm import QuantLstm16
from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.cpu.ops import quantized_lstm
from nnburst.errors import BadDataError

from .op_models import run
from .op_operands import const, info

Q8 = T.TENSOR_QUANT8_ASYMM


def _case(seed: int) -> tuple[list[Any], list[Any], list[np.ndarray], list[Any]]:
    """Operands with constant weights, the same with weights as inputs, the
    step's feeds, and the outputs' operands."""
    rng = np.random.default_rng(seed)
    batch = int(rng.integers(1, 4))
    units = int(rng.choice([1, 3, 16, 17, 40]))
    size = int(rng.choice([1, 2, 7, 33, 64]))
    ws = float(rng.choice([0.0005, 0.004, 0.05, 0.6]))  # left and right shifts
    zp = int(rng.integers(0, 256))
    weights = []
    for columns in [size] * 4 + [units] * 4:
        low, high = (0, 256) if rng.random() < 0.8 else (int(rng.choice([0, 255])),) * 2
        weights.append(rng.integers(low, max(high, low + 1), (units, columns)))
    bias_range = int(rng.choice([10, 40000, 2**24]))
    biases = [rng.integers(-bias_range, bias_range + 1, units) for _ in range(4)]
    args: list[Any] = [info(Q8, batch, size, scale=1 / 128, zp=128)]
    for w, columns in zip(weights, [size] * 4 + [units] * 4):
        args.append(const(info(Q8, units, columns, scale=ws, zp=zp), w.reshape(-1).tolist()))
    for b in biases:
        args.append(const(info(T.TENSOR_INT32, units, scale=ws / 128), b.tolist()))
    args += [
        info(T.TENSOR_QUANT16_SYMM, batch, units, scale=1 / 2048),
        info(Q8, batch, units, scale=1 / 128, zp=128),
    ]
    runtime = [args[0], *(i for i, _ in args[1:13]), *args[13:]]
    feeds = [np.asarray(value) for _, value in args[1:13]]
    x = rng.integers(0, 256, (batch, size)).astype(np.uint8)
    cell_range = int(rng.choice([2000, 32768]))
    cell = rng.integers(-cell_range, cell_range, (batch, units)).astype(np.int16)
    cell.flat[0] = -32768
    previous = rng.integers(0, 256, (batch, units)).astype(np.uint8)
    outs = [
        info(T.TENSOR_QUANT16_SYMM, batch, units, scale=1 / 2048),
        info(Q8, batch, units, scale=1 / 128, zp=128),
    ]
    return args, runtime, [x, *feeds, cell, previous], outs


@pytest.mark.parametrize("seed", range(40))
def test_the_c_step_equals_the_numpy_step(seed: int) -> None:
    args, runtime, (x, *feeds, cell, previous), outs = _case(seed)
    want = run(Op.QUANTIZED_16BIT_LSTM, runtime, outs, x, *feeds, cell, previous)
    with mock.patch.object(quantized_lstm, "_execute_q16", side_effect=AssertionError("numpy")):
        got = run(Op.QUANTIZED_16BIT_LSTM, args, outs, x, cell, previous)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def _step(path: int, seed: int = 0) -> QuantLstm16:
    rng = np.random.default_rng(seed)
    units, size = 24, 37
    return QuantLstm16(
        rng.integers(-255, 256, (4 * units, units + size)),
        rng.integers(-(2**20), 2**20, 4 * units),
        1 << 30,
        int(rng.integers(-3, 2)),
        quantized_lstm._table(quantized_lstm._logistic16, 3),
        quantized_lstm._table(quantized_lstm._tanh16, 3),
        path,
    )


@pytest.mark.parametrize("path", available_paths())
def test_every_path_gives_the_portable_step(path: int) -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (5, 37)).astype(np.uint8)
    previous = rng.integers(0, 256, (5, 24)).astype(np.uint8)
    cell = rng.integers(-32768, 32768, (5, 24)).astype(np.int16)
    want = _step(PATH_PORTABLE)(x, previous, cell)
    got = _step(path)(x, previous, cell)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_the_step_refuses_inputs_of_another_shape_or_type() -> None:
    step = _step(PATH_PORTABLE)
    x = np.zeros((1, 37), np.uint8)
    previous = np.zeros((1, 24), np.uint8)
    cell = np.zeros((1, 24), np.int16)
    for bad in (
        (x[:, :36], previous, cell),
        (x, previous.astype(np.int8), cell),
        (x, previous, cell.astype(np.int32)),
        (x, np.zeros((2, 24), np.uint8), cell),
        (np.zeros((1, 74), np.uint8)[:, ::2], previous, cell),
    ):
        with pytest.raises(BadDataError, match="quantized LSTM step"):
            step(*bad)
    with pytest.raises(BadDataError, match="LSTM gate"):
        QuantLstm16(np.zeros((6, 9)), np.zeros(6), 1 << 30, 0, np.zeros(65536), np.zeros(65536))
    with pytest.raises(BadDataError, match="tables"):
        QuantLstm16(np.zeros((8, 9)), np.zeros(8), 1 << 30, 0, np.zeros(3), np.zeros(65536))
