"""Quantized DEPTHWISE_CONV_2D with a depth multiplier above 1 on the int32
kernels (cpu/ops/conv.py's _int32_kernel): output channel c*m + k reads
input channel c, so the kernel runs a multiplier-1 layer on the input's
channels repeated m times.  It must give the float route's bytes."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest

from nnburst._bindings.qconv import QuantConv, vector_path
from nnburst.codes import FuseCode, PaddingCode
from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.cpu.executor import PreparedModel
from nnburst.cpu.ops import conv
from nnburst.operands import ChannelQuant, OperandInfo

from .op_models import model


def _scalar(value: int) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.INT32, ()), np.int32(value)


def _depthwise_model(
    rng: np.random.Generator, c: int, multiplier: int, stride: int, per_channel: bool
) -> tuple[Any, np.ndarray]:
    o = c * multiplier
    x_info = OperandInfo(T.TENSOR_QUANT8_ASYMM_SIGNED, (2, 9, 11, c), 0.05, -7)
    if per_channel:
        scales = tuple(float(s) for s in rng.uniform(0.001, 0.02, o))
        w_info = OperandInfo(
            T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (1, 3, 3, o), channel_quant=ChannelQuant(3, scales)
        )
        w = rng.integers(-127, 128, (1, 3, 3, o)).astype(np.int8)
        b_info = OperandInfo(T.TENSOR_INT32, (o,), 0.0)
    else:
        w_info = OperandInfo(T.TENSOR_QUANT8_ASYMM_SIGNED, (1, 3, 3, o), 0.01, 3)
        w = rng.integers(-128, 128, (1, 3, 3, o)).astype(np.int8)
        b_info = OperandInfo(T.TENSOR_INT32, (o,), 0.05 * 0.01)
    b = rng.integers(-3000, 3000, o).astype(np.int32)
    out_h, out_w = -(-9 // stride), -(-11 // stride)
    out = OperandInfo(T.TENSOR_QUANT8_ASYMM_SIGNED, (2, out_h, out_w, o), 0.03, 4)
    ins = [x_info, (w_info, w), (b_info, b), _scalar(PaddingCode.SAME), _scalar(stride),
           _scalar(stride), _scalar(multiplier), _scalar(FuseCode.RELU6)]  # fmt: skip
    x = rng.integers(-128, 128, (2, 9, 11, c)).astype(np.int8)
    return model(Op.DEPTHWISE_CONV_2D, ins, [out]), x


@pytest.mark.skipif(not vector_path(), reason="the operation binds the kernel on a vector path")
@pytest.mark.parametrize(
    ("c", "multiplier", "stride", "per_channel"),
    [(3, 2, 1, True), (5, 4, 2, False), (1, 17, 1, True), (8, 3, 1, False)],
)
def test_depth_multiplier_runs_the_int32_kernel_and_matches_the_float_route(
    c: int, multiplier: int, stride: int, per_channel: bool
) -> None:
    hal_model, x = _depthwise_model(
        np.random.default_rng(c * multiplier), c, multiplier, stride, per_channel
    )
    calls = []
    original = QuantConv.__call__

    def counted(self: QuantConv, value: np.ndarray) -> np.ndarray:
        calls.append(value.shape)
        return original(self, value)

    with mock.patch.object(QuantConv, "__call__", counted):
        (got,) = PreparedModel(hal_model).run([x])
    assert calls == [(2, 9, 11, c * multiplier)]
    with mock.patch.object(conv, "_int32_kernel", return_value=None):
        (want,) = PreparedModel(hal_model).run([x])
    np.testing.assert_array_equal(got, want)
