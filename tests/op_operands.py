"""Operands for the CPU operation tests: typed infos, constants, omitted inputs, quantized
values, and the failure an execution must raise."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.codes import ResultCode
from nnburst.cpu.executor import PreparedModel
from nnburst.errors import NNError
from nnburst.operands import ChannelQuant, OperandInfo

from .op_models import OMITTED, model


def info(
    code: T, *dims: int, scale: float = 0.0, zp: int = 0, channel: ChannelQuant | None = None
) -> OperandInfo:
    return OperandInfo(code, dims, scale, zp, channel)


def f32(*dims: int) -> OperandInfo:
    return OperandInfo(T.TENSOR_FLOAT32, dims)


def i32(value: int) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.INT32, ()), np.array(value, dtype=np.int32)


def fscalar(value: float, code: T = T.FLOAT32) -> tuple[OperandInfo, np.ndarray]:
    dtype = np.float16 if code == T.FLOAT16 else np.float32
    return OperandInfo(code, ()), np.array(value, dtype=dtype)


def boolean(value: bool) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.BOOL, ()), np.array(value)


def const(i: OperandInfo, value: Any) -> tuple[OperandInfo, np.ndarray]:
    return i, np.asarray(value).astype(i.dtype).reshape(i.dimensions)


def omitted(i: OperandInfo) -> tuple[OperandInfo, object]:
    return i, OMITTED


def fails(
    code: Op, inputs: list[Any], outputs: list[OperandInfo], *feed: Any, match: str = ""
) -> None:
    prepared = PreparedModel(model(code, inputs, outputs))
    with pytest.raises(NNError, match=match) as err:
        prepared.run(list(feed))
    assert err.value.code == ResultCode.OP_FAILED


def quant(values: Any, scale: float, zp: int, dtype: Any = np.uint8) -> np.ndarray:
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    q = np.floor(np.asarray(values, dtype=np.float64) / scale + 0.5) + zp
    return np.clip(q, lo, hi).astype(dtype)


def nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


RNG = np.random.default_rng(1234)
