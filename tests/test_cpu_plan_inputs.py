"""The C plan's edges with what a request brings: a RESHAPE whose shape is a model
input (NNAPI's "all tensors as inputs" variants) is the operation's to check at run
time, and inputs whose dtype is equal but not numpy's own instance (views of a
request's memory) still run the plan."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst._bindings import plan as c_plan
from nnburst.codes import FuseCode, OperandCode
from nnburst.codes import OperationCode as Op
from nnburst.errors import NNError
from nnburst.operands import OperandInfo

from .test_cpu_plan_layers import F32, Net, both

TI32 = OperandCode.TENSOR_INT32


def add_reshape_add(shape_is_input: bool) -> Net:
    net = Net(0)
    x = net.input(OperandInfo(F32, (2, 3)))
    one = net.const(OperandInfo(F32, (1,)), np.ones(1))
    y = net.op(Op.ADD, [x, one, net.scalar(FuseCode.NONE)], OperandInfo(F32, (2, 3)))
    if shape_is_input:
        shape = net.input(OperandInfo(TI32, (2,)))
    else:
        shape = net.const(OperandInfo(TI32, (2,)), np.array([3, 2]))
    z = net.op(Op.RESHAPE, [y, shape], OperandInfo(F32, (3, 2)))
    out = net.op(Op.ADD, [z, one, net.scalar(FuseCode.NONE)], OperandInfo(F32, (3, 2)))
    net.output(out)
    return net


def test_a_shape_given_at_run_time_is_checked_then(monkeypatch: pytest.MonkeyPatch) -> None:
    planned, _ = both(add_reshape_add(shape_is_input=True).model(), monkeypatch)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (got,) = planned.run([x, np.array([3, 2], np.int32)])
    np.testing.assert_array_equal(got, (x + 2).reshape(3, 2))
    with pytest.raises(NNError, match="RESHAPE"):
        planned.run([x, np.array([6, 1], np.int32)])  # not the declared [3, 2]


def test_an_equal_dtype_of_another_instance_runs_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    planned, _ = both(add_reshape_add(shape_is_input=False).model(), monkeypatch)
    runs: list[int] = []
    run = c_plan.PlanTable.run
    monkeypatch.setattr(c_plan.PlanTable, "run", lambda table, b: runs.append(1) or run(table, b))
    other = np.dtype(np.float32).newbyteorder("=")
    assert other == np.float32 and other is not np.dtype(np.float32)
    x = np.arange(6, dtype=other).reshape(2, 3)
    (got,) = planned.run([x])
    np.testing.assert_array_equal(got, (x + 2).reshape(3, 2))
    assert runs, "the plan fell back to the operations one by one"
