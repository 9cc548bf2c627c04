"""The leaky-ReLU rewrite (optimise._leaky_relu) takes MAXIMUM(x, a·x) only: a
MINIMUM of the same two is min(x, a·x), which no PRELU computes.  Built with
test_graph_optimiser's Graph; each case runs optimised and as written."""

from __future__ import annotations

import pytest

from nnburst.codes import OperationCode

from .test_graph_optimiser import Graph, compare

Op = OperationCode


@pytest.mark.parametrize("mul_first", [False, True], ids=["x first", "product first"])
def test_a_minimum_of_x_and_a_times_x_is_not_a_leaky_relu(
    mul_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    x = g.input((2, 5))
    scaled = g.binary(Op.MUL, x, g.const(0.25), (2, 5))
    g.output(g.op(Op.MINIMUM, [scaled, x] if mul_first else [x, scaled], (2, 5)))
    assert compare(g, monkeypatch, exact=True) == ["MUL", "MINIMUM"]
