"""NHWC DEPTH_TO_SPACE as one of the C plan's copies (nnburst/cpu/plan.py):
the same bytes as the operation one by one, over random shapes and block
sizes, with and without an explicit NHWC layout flag.  An NCHW one stays
the operation's own step (pose_detection was four plans around its three)."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import FuseCode, OperandCode, OperationCode

from .test_cpu_plan_moves import steps_and_check
from .test_graph_optimiser import I32, Graph

Op = OperationCode


def depth_graph(shape: tuple[int, ...], block: int, layout: bool | None) -> Graph:
    g = Graph()
    x = g.input(shape)
    n, h, w, c = (shape[0], *shape[2:], shape[1]) if layout else shape
    shifted = g.binary(Op.ADD, x, g.const(1.0), shape)
    inputs = [shifted, g.const(block, I32)]
    if layout is not None:
        inputs.append(g.const(layout, OperandCode.BOOL))
    if layout:
        out = (n, c // (block * block), h * block, w * block)
    else:
        out = (n, h * block, w * block, c // (block * block))
    moved = g.op(Op.DEPTH_TO_SPACE, inputs, out)
    g.output(g.binary(Op.MUL, moved, g.const(3.0), out, FuseCode.NONE))
    return g


@pytest.mark.parametrize("seed", range(30))
def test_an_nhwc_depth_to_space_is_one_copy(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(700 + seed)
    block = int(rng.integers(1, 4))
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 5)),
             block * block * int(rng.integers(1, 5)))  # fmt: skip
    x = rng.uniform(-9, 9, shape).astype(np.float32)
    layout = [None, False][seed % 2]
    assert steps_and_check(depth_graph(shape, block, layout), x, monkeypatch) == 1


def test_an_nchw_depth_to_space_stays_the_operation(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(2).uniform(-9, 9, (1, 8, 3, 2)).astype(np.float32)
    assert steps_and_check(depth_graph((1, 8, 3, 2), 2, True), x, monkeypatch) == 3
