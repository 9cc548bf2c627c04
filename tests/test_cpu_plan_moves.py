"""MIRROR_PAD and GATHER as the C plan's copies (nnburst/cpu/plan.py): the
same bytes as the operations one by one, over random shapes, sides, modes
and indices.  Paddings on two axes, or indices the operation refuses, stay
the operation's own step (which explains them)."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import FuseCode, OperandCode, OperationCode
from nnburst.cpu.executor import PreparedModel
from nnburst.errors import NNError

from .test_cpu_plan import both
from .test_graph_optimiser import I32, Graph

Op = OperationCode
T32 = OperandCode.TENSOR_INT32


def steps_and_check(g: Graph, x: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> int:
    planned, one_by_one = both(g.model(), monkeypatch)
    for got, want in zip(planned.run([x]), one_by_one.run([x])):
        np.testing.assert_array_equal(got, want)
    return len(planned.main._plan)


def mirror_graph(shape: tuple[int, ...], rows: list[list[int]], mode: int) -> Graph:
    g = Graph()
    x = g.input(shape)
    shifted = g.binary(Op.ADD, x, g.const(1.0), shape)
    out = tuple(d + sum(r) for d, r in zip(shape, rows))
    padded = g.op(Op.MIRROR_PAD, [shifted, g.const(rows, T32), g.const(mode, I32)], out)
    g.output(g.binary(Op.MUL, padded, g.const(3.0), out, FuseCode.NONE))
    return g


@pytest.mark.parametrize("seed", range(40))
def test_a_mirror_pad_of_one_axis_is_copies(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 5))
    shape = tuple(int(d) for d in rng.integers(2, 7, rank))
    mode = seed % 2  # REFLECT, SYMMETRIC
    axis = int(rng.integers(rank))
    most = shape[axis] - 1 + mode
    rows = [[0, 0] for _ in shape]
    rows[axis] = [int(rng.integers(0, most + 1)), int(rng.integers(0, most + 1))]
    x = rng.uniform(-9, 9, shape).astype(np.float32)
    assert steps_and_check(mirror_graph(shape, rows, mode), x, monkeypatch) == 1


def test_a_mirror_pad_of_two_axes_stays_the_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(1).uniform(-9, 9, (3, 4)).astype(np.float32)
    assert steps_and_check(mirror_graph((3, 4), [[1, 2], [0, 3]], 1), x, monkeypatch) == 3


def gather_graph(shape: tuple[int, ...], axis: int, indices: np.ndarray) -> Graph:
    g = Graph()
    x = g.input(shape)
    shifted = g.binary(Op.ADD, x, g.const(1.0), shape)
    at = axis % len(shape)
    out = shape[:at] + indices.shape + shape[at + 1 :]
    taken = g.op(Op.GATHER, [shifted, g.const(axis, I32), g.const(indices, T32)], out)
    g.output(g.binary(Op.MUL, taken, g.const(3.0), out, FuseCode.NONE))
    return g


@pytest.mark.parametrize("seed", range(30))
def test_a_gather_of_constant_indices_is_copies(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(50 + seed)
    rank = int(rng.integers(1, 5))
    shape = tuple(int(d) for d in rng.integers(1, 6, rank))
    axis = int(rng.integers(rank))
    indices = rng.integers(0, shape[axis], rng.integers(1, 4, int(rng.integers(1, 3))))
    x = rng.uniform(-9, 9, shape).astype(np.float32)
    g = gather_graph(shape, axis - rank if seed % 2 else axis, indices.astype(np.int32))
    assert steps_and_check(g, x, monkeypatch) == 1


def test_a_gather_of_many_indices_stays_numpys_take(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(2).uniform(-9, 9, (40, 3)).astype(np.float32)
    indices = np.arange(39, -1, -1, dtype=np.int32)
    assert steps_and_check(gather_graph((40, 3), 0, indices), x, monkeypatch) == 3


def test_a_gather_index_out_of_range_is_refused_as_before() -> None:
    g = gather_graph((4, 3), 0, np.array([1, 4], np.int32))
    with pytest.raises(NNError, match="indices must be in"):
        PreparedModel(g.model())
