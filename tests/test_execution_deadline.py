"""Execution timeouts (set_timeout) stop a running model between operations
with MISSED_DEADLINE, and the compilation stays usable."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import nnburst as nn
from nnburst.cpu import driver as cpu_driver
from nnburst.cpu import executor as cpu_executor
from nnburst.cpu import plan as cpu_plan

from .blocking import SteppingClock

SECOND = 1_000_000_000


def slow_model(layers: int = 40) -> nn.Model:
    """Forty 3×3 convolutions on an 8×8×16 image: forty deadline checks."""
    rng = np.random.default_rng(1)
    T = nn.OperandCode
    model = nn.Model()
    x = first = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (1, 8, 8, 16)))
    for _ in range(layers):
        w = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (16, 3, 3, 16)))
        model.set_operand_value(w, rng.standard_normal((16, 3, 3, 16)).astype(np.float32) * 0.1)
        b = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (16,)))
        model.set_operand_value(b, np.zeros(16, np.float32))
        scalars = [model.add_operand(nn.OperandType(T.INT32)) for _ in range(4)]
        for operand, value in zip(scalars, (nn.PaddingCode.SAME, 1, 1, nn.FuseCode.RELU)):
            model.set_operand_value(operand, np.int32(value))
        y = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (1, 8, 8, 16)))
        model.add_operation(nn.OperationCode.CONV_2D, [x, w, b, *scalars], [y])
        x = y
    model.identify_inputs_and_outputs([first], [x])
    model.finish()
    return model


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SteppingClock:
    """One fake second per deadline check in the CPU driver and executor."""
    fake = SteppingClock(1_000_000_000)
    monkeypatch.setattr(cpu_driver, "time", fake)
    monkeypatch.setattr(cpu_executor, "time", fake)
    return fake


class FrozenClock:
    """Stands in for a module's ``time`` with a clock an hour behind and
    standing still: that module's deadline checks never fire."""

    def __init__(self) -> None:
        self.now = time.monotonic_ns() - 3600 * SECOND

    def monotonic_ns(self) -> int:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.mark.parametrize("measure", [False, True], ids=["bound-to-request", "run-loop"])
def test_a_timeout_stops_a_planned_model_inside_its_c_plan(monkeypatch, measure):
    # The forty convolutions are one C plan, one step of the run loop: the plan
    # reads the deadline itself before each of its steps (csrc/plan.c).  The
    # driver's and run loop's own clocks are frozen here, so a missed deadline
    # can only be the plan's.  With timing measured the plan runs through the
    # run loop's kernel; without, bound to the request's buffers.
    monkeypatch.setattr(cpu_driver, "time", FrozenClock())
    monkeypatch.setattr(cpu_executor, "time", FrozenClock())
    cpu = next(d for d in nn.get_devices() if d.type == nn.DeviceTypeCode.CPU)
    with nn.Compilation(slow_model(), devices=[cpu]) as compilation:
        compilation.finish()
        image = np.random.default_rng(2).standard_normal((1, 8, 8, 16)).astype(np.float32)

        def run(timeout_ns: int) -> np.ndarray:
            out = np.full((1, 8, 8, 16), np.nan, np.float32)
            execution = nn.Execution(compilation)
            execution.set_input(0, image)
            execution.set_output(0, out)
            execution.set_measure_timing(measure)
            execution.set_timeout(timeout_ns)
            execution.compute()
            return out

        expected = run(0)
        assert not np.isnan(expected).any()
        np.testing.assert_array_equal(run(100 * SECOND), expected)
        execution = nn.Execution(compilation)
        execution.set_reusable(True)
        execution.set_input(0, image)
        execution.set_output(0, np.empty_like(image))
        execution.set_measure_timing(measure)
        execution.set_timeout(1)  # passed before the plan's first step
        for _ in range(3):  # the driver binds the plan to the request at the second
            with pytest.raises(nn.NNError, match="inside a C plan") as caught:
                execution.compute()
            assert caught.value.code in (
                nn.ResultCode.MISSED_DEADLINE_TRANSIENT,
                nn.ResultCode.MISSED_DEADLINE_PERSISTENT,
            )
        assert (execution._direct._bound is None) == measure  # the driver's
        execution.close()
        np.testing.assert_array_equal(run(0), expected)  # still usable afterwards


def test_a_timeout_stops_the_execution_between_operations(clock, monkeypatch):
    # The run loop checks the deadline before each of its steps: what stops a
    # model whose operations run in Python (a C plan checks its own steps, above).
    monkeypatch.setattr(cpu_plan, "MIN_RUN", 1 << 30)
    cpu = next(d for d in nn.get_devices() if d.type == nn.DeviceTypeCode.CPU)
    with nn.Compilation(slow_model(), devices=[cpu]) as compilation:
        compilation.finish()
        image = np.ones((1, 8, 8, 16), np.float32)
        out = np.empty((1, 8, 8, 16), np.float32)

        def run(timeout_ns: int) -> int:
            """Runs once; returns how many deadline checks it made."""
            execution = nn.Execution(compilation)
            execution.set_input(0, image)
            execution.set_output(0, out)
            execution.set_timeout(timeout_ns)
            before = clock.reads
            execution.compute()
            return clock.reads - before

        reads = run(100 * SECOND)  # 40 operations, one fake second each: well inside 100 s
        assert reads >= 40
        reads_before = clock.reads
        with pytest.raises(nn.NNError) as caught:
            run(5 * SECOND)
        assert caught.value.code in (
            nn.ResultCode.MISSED_DEADLINE_TRANSIENT,
            nn.ResultCode.MISSED_DEADLINE_PERSISTENT,
        )
        assert clock.reads - reads_before <= 8, "the execution went on after its deadline"
        run(0)  # still usable afterwards
