"""The C plan's float MEAN and SOFTMAX steps (csrc/plan.c) against the
operations one by one, over random shapes, axes and betas: the plan sums in
double in the axes' order where numpy sums pairwise, so the two may differ
by a float32 rounding, no more.  A MEAN whose axes are not one block, or a
SOFTMAX over an inner axis, stays the operation's own step."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import FuseCode, OperandCode, OperationCode
from nnburst.hal.model import Lifetime, Operand
from nnburst.operands import OperandInfo

from .test_cpu_plan import both
from .test_graph_optimiser import I32, Graph

Op = OperationCode
T32 = OperandCode.TENSOR_INT32
ULPS = 3e-7  # relative: two float32 roundings and a little


def mean_graph(shape: tuple[int, ...], axes: list[int], keep: bool) -> Graph:
    g = Graph()
    x = g.input(shape)
    shifted = g.binary(Op.ADD, x, g.const(0.25), shape)
    rank = len(shape)
    reduced = {a % rank for a in axes}
    out = [1 if a in reduced else d for a, d in enumerate(shape)]
    if not keep:
        out = [d for a, d in enumerate(shape) if a not in reduced]
    m = g.op(Op.MEAN, [shifted, g.const(axes, T32), g.const(int(keep), I32)], out)
    g.output(g.binary(Op.MUL, m, g.const(2.0), out, FuseCode.NONE))
    return g


def block_of_axes(rng: np.random.Generator) -> tuple[tuple[int, ...], list[int]]:
    rank = int(rng.integers(1, 5))
    shape = tuple(int(d) for d in rng.integers(1, 8, rank))
    first = int(rng.integers(0, rank))
    last = int(rng.integers(first, rank))
    axes = [a - rank if rng.integers(2) else a for a in range(first, last + 1)]
    return shape, axes


def check(g: Graph, monkeypatch: pytest.MonkeyPatch, feeds: list[np.ndarray]) -> int:
    """How many steps the planned run loop takes, after comparing it to op by op."""
    planned, one_by_one = both(g.model(), monkeypatch)
    for got, want in zip(planned.run(feeds), one_by_one.run(feeds)):
        np.testing.assert_allclose(got, want, rtol=ULPS, atol=0)
    return len(planned.main._plan)


@pytest.mark.parametrize("seed", range(40))
def test_mean_over_a_block_of_axes_is_one_c_call(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(seed)
    shape, axes = block_of_axes(rng)
    g = mean_graph(shape, axes, bool(seed % 2))
    x = rng.uniform(-1000, 1000, shape).astype(np.float32)
    assert check(g, monkeypatch, [x]) == 1


def test_a_long_mean_and_size_one_axes_inside_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """4,000 values summed (the order shows if the sums were float32), and
    axes 1 and 3 of [2, 1000, 1, 4] around a size-1 axis: one block."""
    rng = np.random.default_rng(5)
    shape = (2, 1000, 1, 4)
    x = (rng.uniform(0, 1, shape) * 1e4 + 1e6).astype(np.float32)
    assert check(mean_graph(shape, [1, 3], True), monkeypatch, [x]) == 1


def test_a_mean_over_axes_apart_stays_the_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(6)
    shape = (3, 4, 5)
    x = rng.uniform(-9, 9, shape).astype(np.float32)
    assert check(mean_graph(shape, [0, 2], False), monkeypatch, [x]) == 3


def scalar(g: Graph, value: float) -> int:
    """A FLOAT32 scalar constant (Graph.const makes tensors of floats)."""
    info = OperandInfo(OperandCode.FLOAT32, ())
    return g._add(Operand(info, Lifetime.CONSTANT_COPY, np.array(value, np.float32)))


def softmax_graph(shape: tuple[int, ...], beta: float, axis: int | None) -> Graph:
    g = Graph()
    x = g.input(shape)
    shifted = g.binary(Op.SUB, x, g.const(0.5), shape)
    inputs = [shifted, scalar(g, beta)]
    if axis is not None:
        inputs.append(g.const(axis, I32))
    soft = g.op(Op.SOFTMAX, inputs, shape)
    g.output(g.op(Op.RELU, [soft], shape))
    return g


@pytest.mark.parametrize("seed", range(30))
def test_softmax_over_the_last_axis_is_one_c_call(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(100 + seed)
    rank = int(rng.integers(1, 5))
    shape = tuple(int(d) for d in rng.integers(1, 9, rank))
    beta = float(rng.choice([1.0, 0.5, 1e-3, 3.7]))
    axis = [None, -1, rank - 1][seed % 3]
    x = rng.uniform(-60, 60, shape).astype(np.float32)
    x.flat[0] = [np.nan, np.inf, -np.inf, 80.0, 0.0][seed % 5]
    assert check(softmax_graph(shape, beta, axis), monkeypatch, [x]) == 1


def test_a_softmax_over_an_inner_axis_stays_the_operations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = np.random.default_rng(7).uniform(-5, 5, (2, 3, 4)).astype(np.float32)
    assert check(softmax_graph((2, 3, 4), 1.0, 1), monkeypatch, [x]) == 3


def test_a_softmax_alone_is_a_c_call_and_an_add_alone_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An operation without a bound kernel is worth a C call of its own; a
    bound one is not (an EXP, which the plan does not compute, between them)."""
    g = Graph()
    soft = g.op(Op.SOFTMAX, [g.input((2, 5)), scalar(g, 1.0)], (2, 5))
    exp = g.op(Op.EXP, [soft], (2, 5))
    g.output(g.binary(Op.ADD, exp, g.const(1.0), (2, 5)))
    feeds = [np.random.default_rng(8).uniform(-5, 5, (2, 5)).astype(np.float32)]
    assert check(g, monkeypatch, feeds) == 3
    planned, _ = both(g.model(), monkeypatch)
    first, _, last = (op.kernel for op in planned.main._plan)
    # plan.py's C call carries its table (and keeps working under mutmut's renamed functions)
    assert hasattr(first, "plan_table")
    assert not hasattr(last, "plan_table")


@pytest.mark.parametrize("code", [Op.SQRT, Op.LOGISTIC], ids=["SQRT", "LOGISTIC"])
def test_square_roots_and_logistics_are_c_steps(
    code: OperationCode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQRT bit for bit (sqrtf rounds as numpy does); LOGISTIC within a rounding
    (expf against numpy's vector exp), negative, NaN and infinite inputs too."""
    rng = np.random.default_rng(9)
    shape = (7, 33)
    g = Graph()
    x = g.input(shape)
    shifted = g.binary(Op.SUB, x, g.const(0.5), shape)
    g.output(g.binary(Op.MUL, g.op(code, [shifted], shape), g.const(2.0), shape))
    feed = rng.uniform(-100, 100, shape).astype(np.float32)
    feed.flat[:5] = [np.nan, np.inf, -np.inf, 0.5, 1e-30]
    planned, one_by_one = both(g.model(), monkeypatch)
    assert len(planned.main._plan) == 1
    (got,), (want,) = planned.run([feed]), one_by_one.run([feed])
    if code == Op.SQRT:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=ULPS, atol=0)
