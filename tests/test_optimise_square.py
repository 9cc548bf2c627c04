"""POW(x, 2) as MUL(x, x) (nnburst/cpu/optimise.py): the same bits, specials
too; an exponent that is not 2 everywhere, or 2 as the base, stays a POW."""

from __future__ import annotations

import numpy as np
import pytest

from .test_graph_optimiser import Graph, Op, compare, prepared

SHAPE = (3, 129)


def pow_graph(exponent: object, base_constant: bool = False) -> Graph:
    g = Graph()
    x = g.input(SHAPE)
    if base_constant:
        g.output(g.op(Op.POW, [g.const(exponent), x], SHAPE))
    else:
        g.output(g.op(Op.POW, [x, g.const(exponent)], SHAPE))
    return g


@pytest.mark.parametrize("exponent", [[2.0], [[2.0]], np.full(SHAPE, 2.0)], ids=["1", "1x1", "all"])
def test_a_square_is_a_product(exponent: object, monkeypatch: pytest.MonkeyPatch) -> None:
    assert compare(pow_graph(exponent), monkeypatch, exact=True) == ["MUL"]


def test_specials_square_as_powf_does(monkeypatch: pytest.MonkeyPatch) -> None:
    g = pow_graph([2.0])
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32) * 1e19
    x.flat[:6] = [np.nan, np.inf, -np.inf, -0.0, 3e38, 1e-30]
    got = prepared(g.model(), True, monkeypatch).run([x])[0]
    want = prepared(g.model(), False, monkeypatch).run([x])[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", ["3", "mixed", "base"])
def test_other_powers_stay(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    exponent = {"3": [3.0], "mixed": np.array([2.0, 3.0] * 64 + [2.0], np.float32), "base": [2.0]}
    g = pow_graph(exponent[case], base_constant=case == "base")
    assert compare(g, monkeypatch, exact=True) == ["POW"]
