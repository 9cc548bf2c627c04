"""Identities the graph optimiser must not drop: the constant on the wrong side
of a SUB or DIV (0 - x, 1 / x), and a neutral constant that broadcasts x to a
larger shape (x + zeros of the output's shape is not x).  Each is compared with
the graph as written, and the operation must still be there."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import OperationCode

from .test_graph_optimiser import Graph, compare

Op = OperationCode


@pytest.mark.parametrize(
    "code, neutral", [(Op.SUB, 0.0), (Op.DIV, 1.0)], ids=["zero minus x", "one over x"]
)
def test_a_neutral_constant_first_is_not_an_identity(
    code: OperationCode, neutral: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    x = g.input((2, 6))
    reversed_op = g.binary(code, g.const(neutral), x, (2, 6))
    g.output(g.binary(Op.MUL, reversed_op, x, (2, 6)))
    assert compare(g, monkeypatch, exact=True) == [code.name, "MUL"]


@pytest.mark.parametrize(
    "code, neutral", [(Op.SUB, 0.0), (Op.DIV, 1.0)], ids=["x minus zero", "x over one"]
)
def test_a_neutral_constant_second_is_an_identity(
    code: OperationCode, neutral: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    x = g.input((2, 6))
    same = g.binary(code, x, g.const(neutral), (2, 6))
    g.output(g.binary(Op.MUL, same, x, (2, 6)))
    assert compare(g, monkeypatch, exact=True) == ["MUL"]


@pytest.mark.parametrize("x_shape", [(6,), (1, 6)], ids=["lower rank", "same rank"])
@pytest.mark.parametrize("code", [Op.ADD, Op.MUL])
def test_a_neutral_constant_that_broadcasts_x_up_is_kept(
    code: OperationCode, x_shape: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    neutral = np.zeros((3, 6)) if code == Op.ADD else np.ones((3, 6))
    g = Graph()
    x = g.input(x_shape)
    widened = g.binary(code, x, g.const(neutral), (3, 6))
    g.output(g.binary(Op.ADD, widened, g.input((3, 6)), (3, 6)))
    assert compare(g, monkeypatch, exact=True) == [code.name, "ADD"]
