"""Execution timeouts (set_timeout) stop a running model between operations
with MISSED_DEADLINE, and the compilation stays usable."""

from __future__ import annotations

import time

import numpy as np
import pytest

import nnburst as nn


def slow_model(layers: int = 40) -> nn.Model:
    """Forty 3×3 convolutions on a 64×64×16 image: long enough to time out."""
    rng = np.random.default_rng(1)
    T = nn.OperandCode
    model = nn.Model()
    x = first = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (1, 64, 64, 16)))
    for _ in range(layers):
        w = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (16, 3, 3, 16)))
        model.set_operand_value(w, rng.standard_normal((16, 3, 3, 16)).astype(np.float32) * 0.1)
        b = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (16,)))
        model.set_operand_value(b, np.zeros(16, np.float32))
        scalars = [model.add_operand(nn.OperandType(T.INT32)) for _ in range(4)]
        for operand, value in zip(scalars, (nn.PaddingCode.SAME, 1, 1, nn.FuseCode.RELU)):
            model.set_operand_value(operand, np.int32(value))
        y = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (1, 64, 64, 16)))
        model.add_operation(nn.OperationCode.CONV_2D, [x, w, b, *scalars], [y])
        x = y
    model.identify_inputs_and_outputs([first], [x])
    model.finish()
    return model


def test_a_timeout_stops_the_execution_between_operations():
    cpu = next(d for d in nn.get_devices() if d.type == nn.DeviceTypeCode.CPU)
    with nn.Compilation(slow_model(), devices=[cpu]) as compilation:
        compilation.finish()
        image = np.ones((1, 64, 64, 16), np.float32)
        out = np.empty((1, 64, 64, 16), np.float32)

        def run(timeout_ns: int) -> float:
            execution = nn.Execution(compilation)
            execution.set_input(0, image)
            execution.set_output(0, out)
            execution.set_timeout(timeout_ns)
            start = time.monotonic()
            execution.compute()
            return time.monotonic() - start

        full = run(0)
        with pytest.raises(nn.NNError) as caught:
            run(max(1, int(full * 1e9 / 4)))  # a quarter of what the model needs
        assert caught.value.code in (nn.ResultCode.MISSED_DEADLINE_TRANSIENT, nn.ResultCode.MISSED_DEADLINE_PERSISTENT)
        run(0)  # still usable afterwards
