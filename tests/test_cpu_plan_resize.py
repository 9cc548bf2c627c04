"""Float32 RESIZE_BILINEAR as a C plan step against the operation one by one:
the same bits (the same float32 terms in the same order) over random sizes,
given as sizes or scales, with each of align_corners and half_pixel_centers;
an NCHW resize computes NHWC inside a layout region (nnburst/cpu/layout.py)."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import FuseCode, OperandCode, OperationCode
from nnburst.hal.model import Lifetime, Operand
from nnburst.operands import OperandInfo

from .test_cpu_plan import both
from .test_graph_optimiser import I32, Graph, compare

Op = OperationCode


def flag(g: Graph, value: bool) -> int:
    return g.const(value, OperandCode.BOOL)


def scale(g: Graph, value: float) -> int:
    info = OperandInfo(OperandCode.FLOAT32, ())
    return g._add(Operand(info, Lifetime.CONSTANT_COPY, np.array(value, np.float32)))


@pytest.mark.parametrize("seed", range(36))
def test_a_resize_is_one_c_step_with_the_operations_bits(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(500 + seed)
    n, h, w, c = (int(v) for v in rng.integers(1, [3, 7, 7, 5]))
    align, half = [(False, False), (True, False), (False, True)][seed % 3]
    g = Graph()
    x = g.input((n, h, w, c))
    shifted = g.binary(Op.ADD, x, g.const(0.5), (n, h, w, c))
    if seed % 2:
        sw, sh = float(rng.choice([0.5, 1.5, 2.0, 3.3])), float(rng.choice([0.75, 2.0, 2.6]))
        out_h, out_w = (
            int(np.floor(np.float32(h) * np.float32(sh))),
            int(np.floor(np.float32(w) * np.float32(sw))),
        )
        if out_h < 1 or out_w < 1:
            pytest.skip("a scale below one pixel")
        sizes = [scale(g, sw), scale(g, sh)]
    else:
        out_h, out_w = (int(v) for v in rng.integers(1, 12, 2))
        sizes = [g.const(out_w, I32), g.const(out_h, I32)]
    out = (n, out_h, out_w, c)
    inputs = [shifted, *sizes, flag(g, False), flag(g, align), flag(g, half)]
    resized = g.op(Op.RESIZE_BILINEAR, inputs, out)
    g.output(g.binary(Op.MUL, resized, g.const(2.0), out, FuseCode.NONE))
    feed = rng.uniform(-50, 50, (n, h, w, c)).astype(np.float32)
    planned, one_by_one = both(g.model(), monkeypatch)
    assert len(planned.main._plan) == 1
    (got,), (want,) = planned.run([feed]), one_by_one.run([feed])
    np.testing.assert_array_equal(got, want)


def test_an_nchw_resize_runs_nhwc_between_convolutions(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    shape = (1, 3, 6, 5)
    a = g.conv(g.input(shape), shape, 4, nchw=True)
    inputs = [a, g.const(9, I32), g.const(11, I32), flag(g, True)]
    resized = g.op(Op.RESIZE_BILINEAR, inputs, (1, 4, 11, 9))
    g.output(g.conv(resized, (1, 4, 11, 9), 2, nchw=True))
    names = compare(g, monkeypatch)
    assert names.count("TRANSPOSE") == 2 and "RESIZE_BILINEAR" in names


@pytest.mark.parametrize("seed", range(24))
def test_a_nearest_resize_by_whole_factors_is_copies(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole factors and, every third case, a size the copies cannot make (3/2),
    which stays numpy's; align_corners picks other rows (numpy's too), and
    half_pixel_centers the same ones for whole factors."""
    rng = np.random.default_rng(700 + seed)
    n, h, w, c = (int(v) for v in rng.integers(1, [3, 6, 6, 5]))
    sy, sx = (int(v) for v in rng.integers(1, 4, 2))
    out_h, out_w = h * sy, w * sx
    whole = seed % 3 != 2
    if not whole:
        out_h, out_w = h * 3 // 2 + 1, w * 3 // 2 + 1
    half, align = seed % 4 == 3, seed % 4 == 1
    g = Graph()
    x = g.input((n, h, w, c))
    shifted = g.binary(Op.ADD, x, g.const(0.5), (n, h, w, c))
    out = (n, out_h, out_w, c)
    inputs = [shifted, g.const(out_w, I32), g.const(out_h, I32), flag(g, False)]
    inputs += [flag(g, align), flag(g, half)]
    resized = g.op(Op.RESIZE_NEAREST_NEIGHBOR, inputs, out)
    g.output(g.binary(Op.MUL, resized, g.const(2.0), out, FuseCode.NONE))
    feed = rng.uniform(-50, 50, (n, h, w, c)).astype(np.float32)
    planned, one_by_one = both(g.model(), monkeypatch)
    if whole and not align:
        assert len(planned.main._plan) == 1
    (got,), (want,) = planned.run([feed]), one_by_one.run([feed])
    np.testing.assert_array_equal(got, want)
