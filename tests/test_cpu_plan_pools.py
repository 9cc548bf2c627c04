"""Padded float32 MAX_POOL_2D and AVERAGE_POOL_2D in the C plan: scratch filled
with the padding's value (-inf for max, 0 for the average's sums), the input
copied inside, the pool over it: what the bound kernel computes (pad_nhwc,
then nnb_pool_f32), bit for bit, over random windows, strides, paddings and
fused activations, NaN and infinities in the input."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import FuseCode, OperationCode

from .test_cpu_plan import both
from .test_graph_optimiser import I32, Graph

Op = OperationCode


def pool_graph(
    code: OperationCode,
    shape: tuple[int, ...],
    pads: tuple[int, int, int, int],
    stride: tuple[int, int],
    window: tuple[int, int],
    fuse: int,
) -> tuple[Graph, tuple[int, ...]]:
    n, h, w, c = shape
    top, bottom, left, right = pads
    out_h = (h + top + bottom - window[0]) // stride[0] + 1
    out_w = (w + left + right - window[1]) // stride[1] + 1
    out = (n, out_h, out_w, c)
    g = Graph()
    x = g.input(shape)
    shifted = g.binary(Op.ADD, x, g.const(0.5), shape)
    explicit = (left, right, top, bottom, stride[1], stride[0], window[1], window[0], fuse)
    pooled = g.op(code, [shifted, *(g.const(v, I32) for v in explicit)], out)
    g.output(g.binary(Op.MUL, pooled, g.const(2.0), out, FuseCode.NONE))
    return g, out


@pytest.mark.parametrize("seed", range(40))
def test_a_padded_pool_is_one_c_call_with_the_bound_kernels_bits(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(300 + seed)
    code = Op.MAX_POOL_2D if seed % 2 else Op.AVERAGE_POOL_2D
    window = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    pads = tuple(int(rng.integers(0, k)) for k in (window[0], window[0], window[1], window[1]))
    stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    shape = (
        int(rng.integers(1, 3)),
        int(rng.integers(window[0], 7)),
        int(rng.integers(window[1], 7)),
        int(rng.integers(1, 6)),
    )
    fuse = int(rng.choice([FuseCode.NONE, FuseCode.RELU, FuseCode.RELU6]))
    g, _ = pool_graph(code, shape, pads, stride, window, fuse)
    x = rng.uniform(-9, -1, shape).astype(np.float32)  # all negative: a 0 pad would show
    x.flat[:3] = [np.nan, np.inf, -np.inf][: x.size]
    planned, one_by_one = both(g.model(), monkeypatch)
    assert len(planned.main._plan) == 1
    for got, want in zip(planned.run([x]), one_by_one.run([x])):
        np.testing.assert_array_equal(got, want)
