"""Runs of float32 elementwise operations as one C call (nnburst/cpu/plan.py, csrc/plan.c):
the same values as the operations one by one, and one step of the run loop."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst._bindings import plan as c_plan
from nnburst.codes import FuseCode, OperationCode
from nnburst.cpu import optimise, plan
from nnburst.cpu.executor import PreparedModel
from nnburst.errors import NNError
from nnburst.hal.model import HalModel

from .test_graph_optimiser import Graph

Op = OperationCode
SHAPE = (3, 5)


@pytest.fixture(autouse=True)
def graph_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """The optimiser would turn some of these chains into others; the plan is tested alone."""
    monkeypatch.setattr(optimise, "ENABLED", False)


def both(model: HalModel, monkeypatch: pytest.MonkeyPatch) -> tuple[PreparedModel, PreparedModel]:
    planned = PreparedModel(model)
    with monkeypatch.context() as patch:
        patch.setattr(plan, "MIN_RUN", 1 << 30)
        one_by_one = PreparedModel(model)
    return planned, one_by_one


def special(seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).uniform(-8, 8, SHAPE).astype(np.float32)
    x.flat[:6] = [np.nan, np.inf, -np.inf, -0.0, 3e38, -3.0]
    return x


def every_kind() -> Graph:
    g = Graph()
    x, y = g.input(SHAPE), g.input(SHAPE)
    t = g.binary(Op.ADD, x, y, SHAPE, FuseCode.RELU6)
    t = g.binary(Op.SUB, t, g.const([[0.25]]), SHAPE)  # one element, broadcast
    t = g.binary(Op.MUL, g.const(-1.5), t, SHAPE, FuseCode.RELU1)
    t = g.binary(Op.DIV, y, t, SHAPE, FuseCode.RELU)  # 0 / 0 and y / 0 on the way
    t = g.op(Op.MAXIMUM, [t, x], SHAPE)
    t = g.op(Op.MINIMUM, [y, t], SHAPE)
    t = g.op(Op.RELU, [g.op(Op.RELU6, [g.op(Op.RELU1, [t], SHAPE)], SHAPE)], SHAPE)
    middle = g.op(Op.HARD_SWISH, [g.binary(Op.ADD, x, y, SHAPE)], SHAPE)
    g.output(g.binary(Op.MUL, t, middle, SHAPE))
    return g


def test_a_run_of_every_kind_is_one_step_with_the_same_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    planned, one_by_one = both(every_kind().model(), monkeypatch)
    assert len(planned.main._plan) == 1 and len(one_by_one.main._plan) == 12
    for seed in range(3):
        x, y = special(seed), special(seed + 10)[::-1].copy()
        (got,), (want,) = planned.run([x, y]), one_by_one.run([x, y])
        np.testing.assert_array_equal(got, want)  # NaN where NaN; a zero's sign may differ


def test_results_read_after_the_run_or_returned_leave_it(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x, y = g.input(SHAPE), g.input(SHAPE)
    first = g.output(g.binary(Op.ADD, x, y, SHAPE))  # a model output inside the run
    second = g.binary(Op.MUL, first, y, SHAPE)
    third = g.binary(Op.SUB, second, x, SHAPE)
    stop = g.op(Op.TANH, [third], SHAPE)  # no C step: the run ends here
    g.output(g.binary(Op.ADD, stop, second, SHAPE))  # reads the run's middle
    planned, one_by_one = both(g.model(), monkeypatch)
    codes = [op.signature.code.name for op in planned.main._plan]
    assert codes == ["ADD", "TANH", "ADD"] and len(planned.main._plan[0].outputs) == 3
    x, y = special(1), special(2)
    for got, want in zip(planned.run([x, y]), one_by_one.run([x, y])):
        np.testing.assert_array_equal(got, want)


def test_inputs_of_another_layout_or_type_run_as_the_operations_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    planned, one_by_one = both(every_kind().model(), monkeypatch)
    x = special(4).T.copy().T  # the same values, not C-contiguous
    y = special(5)
    assert not x.flags.c_contiguous
    np.testing.assert_array_equal(planned.run([x, y])[0], one_by_one.run([x, y])[0])
    x64 = special(6).astype(np.float64)
    outcomes = []
    for model in (planned, one_by_one):
        try:
            outcomes.append(model.run([x64, y])[0])
        except Exception as exc:
            outcomes.append(type(exc).__name__)
    if isinstance(outcomes[0], np.ndarray):
        np.testing.assert_array_equal(outcomes[0], outcomes[1])
    else:
        assert outcomes[0] == outcomes[1]


def test_the_c_plan_refuses_tables_that_reach_outside_its_buffers() -> None:
    x = np.ones(4, np.float32)
    out = np.zeros(4, np.float32)

    def run(**fields: int) -> None:
        settings = {"kind": c_plan.ADD, "a": -1, "b": -1, "out": -2, "count": 4}
        settings.update({"a_step": 1, "b_step": 1, **fields})
        step = c_plan.PlanStep(**settings, lo=-np.inf, hi=np.inf)
        c_plan.PlanTable([step], [16, 16], 32).run([x, out])

    run()
    assert list(out) == [2.0] * 4
    for bad in (
        {"out": 20},  # arena bytes 20..36 of 32
        {"a": -3},  # a third tensor of two
        {"count": 5},  # more floats than the tensors hold
        {"kind": 99},
        {"a_step": 2},
        {"out": -1, "a": -1, "a_step": 0},  # written over a broadcast input
        {"a": 0, "out": 8},  # written over its own input, shifted
    ):
        with pytest.raises(NNError, match="refuses its tables"):
            run(**bad)


def test_a_chain_of_200_adds_is_one_c_call(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x, y = g.input(SHAPE), g.input(SHAPE)
    t = x
    for _ in range(200):
        t = g.binary(Op.ADD, t, y, SHAPE)
    g.output(t)
    planned, one_by_one = both(g.model(), monkeypatch)
    assert len(planned.main._plan) == 1
    x, y = special(7), special(8)
    np.testing.assert_array_equal(planned.run([x, y])[0], one_by_one.run([x, y])[0])
