"""A model of one operation the C plan computes is one plan (nnburst/cpu/plan.py:
a run that is the whole subgraph is planned one operation shorter), so a burst
server answers its repeats in C, with the Python path's results, as it does
for the two-operation ADD+MUL model."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import ErrorStatus, OperationCode
from nnburst.cpu import plan as cpu_plan
from nnburst.cpu.driver import cpu_device
from nnburst.hal.burst_controller import ExecutionBurstController
from nnburst.hal.types import DataLocation, MeasureTiming, Request, RequestArgument
from nnburst.memory import Memory

from .burst_models import NBYTES, SHAPE, binary_model


def burst_run(code: OperationCode, repeats: int) -> tuple[int, bool]:
    """``repeats`` executions through a burst (results checked); (answered in C, planned)."""
    prepared = cpu_device().prepare_model(binary_model(code))
    memory = Memory.create_shared(3 * NBYTES)
    try:
        whole = np.frombuffer(memory.buffer, np.float32)
        a, b, out = (whole[12 * i : 12 * (i + 1)].reshape(SHAPE) for i in range(3))
        request = Request(
            [
                RequestArgument(False, DataLocation(0, 0, NBYTES)),
                RequestArgument(False, DataLocation(0, NBYTES, NBYTES)),
            ],
            [RequestArgument(False, DataLocation(0, 2 * NBYTES, NBYTES))],
            [memory],
        )
        rng = np.random.default_rng(0)
        numpy_op = {OperationCode.ADD: np.add, OperationCode.MUL: np.multiply}[code]
        with ExecutionBurstController.create(prepared, polling_window_us=50) as controller:
            for _ in range(repeats):
                a[:] = rng.standard_normal(SHAPE, np.float32)
                b[:] = rng.standard_normal(SHAPE, np.float32)
                status, _, _, fallback = controller.compute(request, MeasureTiming.NO, [memory])
                assert (status, fallback) == (ErrorStatus.NONE, False)
                np.testing.assert_array_equal(out, numpy_op(a, b))
            served = controller._context._worker.fast.served
        planned = prepared.executor.main.plan_table is not None
        del a, b, out, whole
    finally:
        memory.close()
    return served, planned


@pytest.mark.parametrize("code", [OperationCode.ADD, OperationCode.MUL])
def test_a_one_operation_model_is_one_plan_and_its_repeats_are_answered_in_c(code) -> None:
    assert burst_run(code, 50) == (48, True)  # the first two through Python, then armed


def test_a_one_operation_model_follows_min_run(monkeypatch) -> None:
    """Planning off (as the tests comparing the plan with the loop turn it off): Python serves."""
    monkeypatch.setattr(cpu_plan, "MIN_RUN", 1 << 30)
    assert burst_run(OperationCode.ADD, 10) == (0, False)
