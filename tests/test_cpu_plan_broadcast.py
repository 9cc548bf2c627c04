"""The C plan's one-element operands: every binary kind, the broadcast operand on
either side, the same bits as the operations one by one (csrc/plan.c steps a
one-element operand by 0, the other by 1)."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import FuseCode, OperationCode
from nnburst.cpu import optimise

from .test_cpu_plan import SHAPE, both, special
from .test_graph_optimiser import Graph

Op = OperationCode
BINARY = [Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MAXIMUM, Op.MINIMUM]


@pytest.fixture(autouse=True)
def graph_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(optimise, "ENABLED", False)


@pytest.mark.parametrize("side", ["a", "b"])
@pytest.mark.parametrize("code", BINARY, ids=[c.name for c in BINARY])
def test_a_one_element_operand_is_broadcast_on_either_side(
    code: OperationCode, side: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    x, y = g.input(SHAPE), g.input(SHAPE)
    first = g.binary(Op.ADD, x, y, SHAPE)
    one = g.const([[-2.5]])  # one element, rank 2
    pair = [first, one] if side == "b" else [one, first]
    fused = code in (Op.ADD, Op.SUB, Op.MUL, Op.DIV)
    out = g.binary(code, *pair, SHAPE) if fused else g.op(code, pair, SHAPE)
    g.output(g.binary(Op.MUL, out, y, SHAPE, FuseCode.NONE))
    planned, one_by_one = both(g.model(), monkeypatch)
    assert len(planned.main._plan) == 1 and len(one_by_one.main._plan) == 3  # one C call
    feeds = [special(1), np.random.default_rng(2).uniform(-8, 8, SHAPE).astype(np.float32)]
    for got, want in zip(planned.run(feeds), one_by_one.run(feeds)):
        np.testing.assert_array_equal(got, want)
