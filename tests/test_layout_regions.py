"""NCHW graphs computed NHWC inside (nnburst/cpu/layout.py).

Each rewrite is checked against the graph as written (a transpose and an
elementwise operation compute the same elements wherever they sit, so the
answers are equal but for the convolutions' own summation order), and for
where the transposes end up.  The guards have cases the rewrite must leave
alone, or would get wrong if it moved a transpose."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from nnburst.codes import FuseCode, OperandCode
from tests.test_cpu_plan_reductions import scalar
from tests.test_graph_optimiser import I32, Graph, Op, compare

T32 = OperandCode.TENSOR_INT32
SHAPE = (1, 3, 6, 5)  # NCHW


def transpose(g: Graph, x: int, perm: Sequence[int], shape: Sequence[int]) -> int:
    out = tuple(shape[p] for p in perm)
    return g.op(Op.TRANSPOSE, [x, g.const(list(perm), T32)], out)


def mean(g: Graph, x: int, axes: Sequence[int], keep: bool, shape: Sequence[int]) -> int:
    out = [1 if a in axes else d for a, d in enumerate(shape)]
    if not keep:
        out = [d for a, d in enumerate(shape) if a not in axes]
    return g.op(Op.MEAN, [x, g.const(list(axes), T32), g.const(int(keep), I32)], out)


def pool(g: Graph, x: int, shape: Sequence[int]) -> int:
    """A 2x2 stride-2 NCHW MAX_POOL_2D without padding."""
    args = [x] + [g.const(v, I32) for v in (0, 0, 0, 0, 2, 2, 2, 2, FuseCode.NONE)]
    args.append(g.const(True, OperandCode.BOOL))
    n, c, h, w = shape
    return g.op(Op.MAX_POOL_2D, args, (n, c, h // 2, w // 2))


def transposes(names: list[str]) -> int:
    return names.count("TRANSPOSE")


def test_an_nchw_block_runs_nhwc_between_two_border_transposes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MobileNetV3's block as ONNX writes it: convolutions, hard-swish, a
    squeeze-excite (MEAN over H, W kept, a scale per channel) and a residual ADD."""
    g = Graph()
    x = g.input(SHAPE)
    a = g.conv(x, SHAPE, 4, nchw=True)
    mid = (1, 4, 6, 5)
    a = g.op(Op.HARD_SWISH, [a], mid)
    squeezed = mean(g, a, (2, 3), True, mid)
    excite = g.op(Op.LOGISTIC, [squeezed], (1, 4, 1, 1))
    scaled = g.binary(Op.MUL, a, excite, mid)
    shifted = g.binary(Op.ADD, scaled, g.const(np.arange(4.0).reshape(4, 1, 1)), mid)
    b = g.conv(shifted, mid, 4, nchw=True)
    residual = g.binary(Op.ADD, shifted, b, mid, FuseCode.RELU6)
    pooled = pool(g, residual, mid)
    g.output(g.op(Op.RELU, [pooled], (1, 4, 3, 2)))
    names = compare(g, monkeypatch)
    assert transposes(names) == 2  # the model's input in, its output out
    assert names.count("CONV_2D") == 2 and names.count("MAX_POOL_2D") == 1


def test_transposes_that_cancel_disappear(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input(SHAPE)
    nhwc = transpose(g, x, (0, 2, 3, 1), SHAPE)
    back = transpose(g, nhwc, (0, 3, 1, 2), (1, 6, 5, 3))
    g.output(g.op(Op.RELU, [back], SHAPE))
    assert compare(g, monkeypatch, exact=True) == ["RELU"]


def test_transposes_that_cancel_into_a_model_output_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input(SHAPE)
    nhwc = transpose(g, x, (0, 2, 3, 1), SHAPE)
    g.output(g.op(Op.RELU, [nhwc], (1, 6, 5, 3)))
    g.output(transpose(g, nhwc, (0, 3, 1, 2), (1, 6, 5, 3)))
    assert transposes(compare(g, monkeypatch, exact=True)) == 2


def test_two_transposes_that_do_not_cancel_become_one(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input(SHAPE)
    first = transpose(g, x, (0, 2, 3, 1), SHAPE)  # (1, 6, 5, 3)
    second = transpose(g, first, (0, 2, 1, 3), (1, 6, 5, 3))  # (1, 5, 6, 3)
    g.output(g.op(Op.RELU, [second], (1, 5, 6, 3)))
    assert compare(g, monkeypatch, exact=True) == ["RELU", "TRANSPOSE"]  # moved to the border


@pytest.mark.parametrize("rank", [1, 3, 4])
def test_constants_are_re_laid_for_every_rank(rank: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A per-channel [C, 1, 1], a [W] and a full [1, C, H, W] operand, each of
    different values along every axis, so a wrong permutation shows."""
    g = Graph()
    x = g.input(SHAPE)
    a = g.conv(x, SHAPE, 4, nchw=True)
    mid = (1, 4, 6, 5)
    shape = {1: (5,), 3: (4, 1, 1), 4: mid}[rank]
    constant = g.const(np.random.default_rng(rank).normal(size=shape))
    b = g.binary(Op.DIV, a, constant, mid)  # a DIV does not fold into the convolution
    g.output(g.conv(b, mid, 2, nchw=True))
    names = compare(g, monkeypatch)
    assert transposes(names) == 2 and "DIV" in names


def test_concatenation_and_pad_map_their_axes(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input(SHAPE)
    a = g.conv(x, SHAPE, 4, nchw=True)
    b = g.conv(x, SHAPE, 2, nchw=True)
    joined = g.op(Op.CONCATENATION, [a, b, g.const(1, I32)], (1, 6, 6, 5))
    rows = g.const([[0, 0], [1, 2], [0, 1], [3, 0]], T32)
    padded = g.op(Op.PAD, [joined, rows], (1, 9, 7, 8))
    g.output(g.conv(padded, (1, 9, 7, 8), 2, nchw=True))
    names = compare(g, monkeypatch)
    assert transposes(names) == 2 and "PAD" in names and "CONCATENATION" in names


# -- guards -----------------------------------------------------------------------------


def test_a_lone_nchw_convolution_stays_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """Input to output: its two transposes would move as much as it does itself."""
    g = Graph()
    g.output(g.conv(g.input(SHAPE), SHAPE, 4, nchw=True))
    assert compare(g, monkeypatch) == ["CONV_2D"]


@pytest.mark.parametrize("guard", ["untransposed other input", "mean dropping axes", "softmax"])
def test_a_transpose_stops_where_moving_it_would_be_wrong(
    guard: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ADD of a transposed and an untransposed value, a MEAN that drops its
    axes and a SOFTMAX (over the last axis, which a transpose moves) keep
    their NCHW operand: the answers stay the graph's."""
    g = Graph()
    x = g.input(SHAPE)
    a = g.conv(x, SHAPE, 4, nchw=True)
    mid = (1, 4, 6, 5)
    if guard == "untransposed other input":
        other = g.input(mid)
        b = g.binary(Op.ADD, a, other, mid)
        g.output(g.conv(b, mid, 2, nchw=True))
    elif guard == "mean dropping axes":
        squeezed = mean(g, a, (2,), False, mid)
        g.output(g.op(Op.RELU, [squeezed], (1, 4, 5)))
        g.output(g.conv(a, mid, 2, nchw=True))
    else:
        soft = g.op(Op.SOFTMAX, [a, scalar(g, 1.0)], mid)
        g.output(g.conv(soft, mid, 2, nchw=True))
    names = compare(g, monkeypatch)
    assert names.count("CONV_2D") == 2


def test_a_transposed_model_output_keeps_its_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """An NCHW value the model returns and reads on: returned NCHW, read NHWC."""
    g = Graph()
    x = g.input(SHAPE)
    a = g.conv(x, SHAPE, 4, nchw=True)
    mid = (1, 4, 6, 5)
    g.output(a)
    g.output(g.conv(g.op(Op.RELU, [a], mid), mid, 2, nchw=True))
    names = compare(g, monkeypatch)
    assert names.count("CONV_2D") == 2
