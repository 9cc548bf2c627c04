"""Tensors for the CPU operation tests checked against plain numpy: types by code,
constants, random and quantized values, and the failure an execution must raise."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.codes import ResultCode
from nnburst.cpu.executor import PreparedModel
from nnburst.errors import NNError
from nnburst.operands import OperandInfo

from .op_models import model, run

RNG = np.random.default_rng(1234)

F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
QU8, QS8, B8 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_BOOL8


def t(code: T, *dims: int, scale: float = 0.0, zp: int = 0) -> OperandInfo:
    """A tensor type; no dimensions means unknown rank (as the runtime stores it)."""
    if code in (QU8, QS8) and scale == 0.0:
        scale = 0.5
    return OperandInfo(code, dims or None, scale, zp)


def const(info: OperandInfo, value: Any) -> tuple[OperandInfo, np.ndarray]:
    return info, np.asarray(value, dtype=info.dtype).reshape(info.dimensions)


def i32(value: int) -> tuple[OperandInfo, np.ndarray]:
    return const(OperandInfo(T.INT32, ()), value)


def f32s(value: float) -> tuple[OperandInfo, np.ndarray]:
    return const(OperandInfo(T.FLOAT32, ()), value)


def f16s(value: float) -> tuple[OperandInfo, np.ndarray]:
    return const(OperandInfo(T.FLOAT16, ()), value)


def boolean(value: bool) -> tuple[OperandInfo, np.ndarray]:
    return const(OperandInfo(T.BOOL, ()), value)


def ivec(*values: int) -> tuple[OperandInfo, np.ndarray]:
    return const(OperandInfo(I32, (len(values),)), list(values))


def run1(code: Op, inputs: list[Any], output: OperandInfo, *feed: Any) -> np.ndarray:
    return run(code, inputs, [output], *feed)[0]


def op_fails(code: Op, inputs: list[Any], outputs: list[OperandInfo], *feed: Any) -> None:
    prepared = PreparedModel(model(code, inputs, outputs))
    with pytest.raises(NNError) as info:
        prepared.run(list(feed))
    assert info.value.code == ResultCode.OP_FAILED


def rand(code: T, *shape: int, lo: float = -4, hi: float = 4) -> np.ndarray:
    if code in (F32, F16):
        return RNG.uniform(lo, hi, shape).astype(np.float32 if code == F32 else np.float16)
    if code == I32:
        return RNG.integers(-50, 50, shape, dtype=np.int32)
    if code == QU8:
        return RNG.integers(0, 256, shape, dtype=np.uint8)
    if code == QS8:
        return RNG.integers(-128, 128, shape, dtype=np.int8)
    return RNG.integers(0, 2, shape).astype(bool)


def real(q: np.ndarray, info: OperandInfo) -> np.ndarray:
    return (q.astype(np.float64) - info.zero_point) * info.scale


def quant(x: np.ndarray, info: OperandInfo) -> np.ndarray:
    """Round half away from zero (scalar Python, independent of the driver), clamp."""
    limits = np.iinfo(info.dtype)
    flat = [math.copysign(math.floor(abs(v) + 0.5), v) for v in np.ravel(x / info.scale)]
    q = np.asarray(flat).reshape(np.shape(x)) + info.zero_point
    return np.clip(q, limits.min, limits.max).astype(info.dtype)


def seq_reduce(x: np.ndarray, axes: tuple[int, ...], multiply: bool) -> np.ndarray:
    """The reference's walk: one accumulator per output, input in row-major order."""
    rank = x.ndim
    axes = tuple(a % rank for a in axes)
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    acc = np.full(out_shape, 1 if multiply else 0, dtype=x.dtype)
    for index in np.ndindex(*x.shape):
        o = tuple(0 if i in axes else v for i, v in enumerate(index))
        a, b = acc[o], x[index]
        if multiply:
            acc[o] = 0 if a == 0 or b == 0 else x.dtype.type(a * b)
        else:
            acc[o] = x.dtype.type(a + b)
    return acc
