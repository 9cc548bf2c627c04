"""CPU driver: data movement and shapes: CHANNEL_SHUFFLE, EXPAND_DIMS, GATHER,
SLICE, SPLIT, TILE, TOPK_V2, FILL and RANK, and operations on tensors of
unknown rank.

No public conformance vectors exist for these, so every case is checked
against an independent computation: plain numpy in float64, or a scalar
Python loop over the NNAPI formula, written without the driver's helpers.
"""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.codes import ResultCode
from nnburst.cpu.executor import PreparedModel
from nnburst.errors import NNError
from nnburst.operands import OperandInfo

from .op_models import model, rejects, run
from .op_tensors import (
    B8,
    F16,
    F32,
    I32,
    QS8,
    QU8,
    boolean,
    const,
    f16s,
    f32s,
    i32,
    ivec,
    op_fails,
    rand,
    run1,
    seq_reduce,
    t,
)

# --------------------------------------------------------------------------- data movement


@pytest.mark.parametrize("code", [F32, F16, QU8, QS8])
def test_channel_shuffle(code: T) -> None:
    x = rand(code, 2, 3, 12)
    for axis in (-1, 2):
        got = run1(Op.CHANNEL_SHUFFLE, [t(code, 2, 3, 12), i32(3), i32(axis)], t(code, 2, 3, 12), x)
        group = 12 // 3
        want = np.stack([x[..., (c % 3) * group + c // 3] for c in range(12)], axis=-1)
        np.testing.assert_array_equal(got, want)
    y = rand(code, 6, 2)
    got = run1(Op.CHANNEL_SHUFFLE, [t(code, 6, 2), i32(2), i32(0)], t(code, 6, 2), y)
    np.testing.assert_array_equal(got, y[[0, 3, 1, 4, 2, 5]])


def test_channel_shuffle_validation() -> None:
    rejects(Op.CHANNEL_SHUFFLE, [t(F32, 2, 5), i32(2), i32(1)], [t(F32, 2, 5)], "divisible")
    rejects(Op.CHANNEL_SHUFFLE, [t(F32, 2, 4), i32(0), i32(1)], [t(F32, 2, 4)], "positive")
    rejects(Op.CHANNEL_SHUFFLE, [t(F32, 2, 4), i32(2), i32(2)], [t(F32, 2, 4)], "axis")
    rejects(Op.CHANNEL_SHUFFLE, [t(I32, 2, 4), i32(2), i32(1)], [t(I32, 2, 4)], "input 0")
    rejects(
        Op.CHANNEL_SHUFFLE, [t(QU8, 2, 4, zp=1), i32(2), i32(1)], [t(QU8, 2, 4, zp=2)], "zero point"
    )


@pytest.mark.parametrize("code", [F32, I32, QS8])
def test_expand_dims(code: T) -> None:
    x = rand(code, 2, 3)
    for axis, shape in ((0, (1, 2, 3)), (2, (2, 3, 1)), (-1, (2, 3, 1)), (-3, (1, 2, 3))):
        got = run1(Op.EXPAND_DIMS, [t(code, 2, 3), i32(axis)], t(code, *shape), x)
        np.testing.assert_array_equal(got, x.reshape(shape))
    rejects(Op.EXPAND_DIMS, [t(code, 2, 3), i32(3)], [t(code, 2, 3, 1)], "axis")


@pytest.mark.parametrize("code", [F32, F16, I32, QU8, QS8])
def test_gather(code: T) -> None:
    x = rand(code, 3, 4, 2)
    idx = np.array([[3, 0], [1, 1], [2, 3]], dtype=np.int32)
    got = run1(Op.GATHER, [t(code, 3, 4, 2), i32(-2), t(I32, 3, 2)], t(code, 3, 3, 2, 2), x, idx)
    want = np.empty((3, 3, 2, 2), dtype=x.dtype)
    for a in range(3):
        for i in range(3):
            for j in range(2):
                want[a, i, j] = x[a, idx[i, j]]
    np.testing.assert_array_equal(got, want)


def test_gather_index_out_of_range_fails() -> None:
    x = rand(F32, 3, 4)
    op_fails(
        Op.GATHER, [t(F32, 3, 4), i32(0), t(I32, 2)], [t(F32, 2, 4)], x, np.array([0, 3], np.int32)
    )
    op_fails(
        Op.GATHER, [t(F32, 3, 4), i32(1), t(I32, 1)], [t(F32, 3, 1)], x, np.array([-1], np.int32)
    )
    rejects(Op.GATHER, [t(F32, 3, 4), i32(0), ivec(5)], [t(F32, 1, 4)], "indices")
    rejects(Op.GATHER, [t(F32, 3, 4), i32(0), t(F32, 1)], [t(F32, 1, 4)], "input 2")


@pytest.mark.parametrize("code", [F32, F16, QU8, QS8])
def test_pad_v2(code: T) -> None:
    x = rand(code, 2, 3)
    if code in (QU8, QS8):
        value, scalar = 7, i32(7)
    else:
        value, scalar = 1.5, (f32s(1.5) if code == F32 else f16s(1.5))
    pads = const(t(I32, 2, 2), [[1, 0], [2, 3]])
    got = run1(Op.PAD_V2, [t(code, 2, 3), pads, scalar], t(code, 3, 8), x)
    want = np.full((3, 8), value, dtype=x.dtype)
    want[1:, 2:5] = x
    np.testing.assert_array_equal(got, want)


def test_pad_v2_validation() -> None:
    bad = const(t(I32, 2, 2), [[1, -1], [0, 0]])
    rejects(Op.PAD_V2, [t(F32, 2, 3), bad, f32s(0)], [t(F32, 3, 3)], "non-negative")
    pads = const(t(I32, 2, 2), [[0, 0], [0, 0]])
    rejects(Op.PAD_V2, [t(F32, 2, 3), pads, i32(0)], [t(F32, 2, 3)], "pad value")
    rejects(Op.PAD_V2, [t(QU8, 2, 3), pads, f32s(0)], [t(QU8, 2, 3)], "pad value")
    rejects(
        Op.PAD_V2,
        [t(F32, 2, 3), const(t(I32, 3, 2), [[0, 0]] * 3), f32s(0)],
        [t(F32, 2, 3)],
        "shape",
    )


@pytest.mark.parametrize("code", [F32, I32, QU8, QS8])
def test_slice(code: T) -> None:
    x = rand(code, 3, 4, 5)
    got = run1(Op.SLICE, [t(code, 3, 4, 5), ivec(1, 0, 2), ivec(2, -1, 3)], t(code, 2, 4, 3), x)
    np.testing.assert_array_equal(got, x[1:3, 0:4, 2:5])
    empty = run1(Op.SLICE, [t(code, 3, 4, 5), ivec(0, 0, 0), ivec(0, 4, 5)], t(code, 0, 4, 5), x)
    assert empty.shape == (0, 4, 5)


def test_slice_out_of_bounds() -> None:
    x = rand(F32, 3, 4)
    rejects(Op.SLICE, [t(F32, 3, 4), ivec(2, 0), ivec(2, 4)], [t(F32, 2, 4)], "fit")
    op_fails(
        Op.SLICE,
        [t(F32, 3, 4), t(I32, 2), ivec(1, 1)],
        [t(F32, 1, 1)],
        x,
        np.array([-1, 0], np.int32),
    )
    op_fails(
        Op.SLICE,
        [t(F32, 3, 4), ivec(0, 0), t(I32, 2)],
        [t(F32, 0, 0)],
        x,
        np.array([1, 5], np.int32),
    )


@pytest.mark.parametrize("code", [F32, F16, I32, QU8, QS8])
def test_split(code: T) -> None:
    x = rand(code, 2, 6)
    outs = run(Op.SPLIT, [t(code, 2, 6), i32(-1), i32(3)], [t(code, 2, 2)] * 3, x)
    for k, part in enumerate(outs):
        np.testing.assert_array_equal(part, x[:, 2 * k : 2 * k + 2])


def test_split_validation() -> None:
    rejects(Op.SPLIT, [t(F32, 2, 6), i32(1), i32(2)], [t(F32, 2, 3)] * 3, "num_splits")
    rejects(Op.SPLIT, [t(F32, 2, 5), i32(1), i32(2)], [t(F32, 2, 2)] * 2, "evenly")
    rejects(
        Op.SPLIT, [t(QU8, 2, 4), i32(1), i32(2)], [t(QU8, 2, 2), t(QU8, 2, 2, zp=3)], "zero point"
    )


@pytest.mark.parametrize("code", [F32, F16, I32, QU8, QS8])
def test_tile(code: T) -> None:
    x = rand(code, 2, 3)
    got = run1(Op.TILE, [t(code, 2, 3), ivec(2, 1)], t(code, 4, 3), x)
    np.testing.assert_array_equal(got, np.concatenate([x, x]))
    got = run1(Op.TILE, [t(code, 2, 3), ivec(1, 3)], t(code, 2, 9), x)
    np.testing.assert_array_equal(got, np.concatenate([x, x, x], axis=1))
    rejects(Op.TILE, [t(code, 2, 3), ivec(2)], [t(code, 4, 3)], "multiples")


@pytest.mark.parametrize("code", [F32, F16, I32, QU8, QS8])
def test_topk(code: T) -> None:
    x = rand(code, 3, 6)
    x[0] = [1, 9, 3, 2, 9, 0]  # a tie at the top: the larger index comes first
    values, indices = run(Op.TOPK_V2, [t(code, 3, 6), i32(3)], [t(code, 3, 3), t(I32, 3, 3)], x)
    for row, vals, idx in zip(x, values, indices):
        ranked = sorted(range(6), key=lambda i: (row[i], i), reverse=True)[:3]
        np.testing.assert_array_equal(idx, ranked)
        np.testing.assert_array_equal(vals, row[ranked])
    assert list(indices[0, :2]) == [4, 1]


def test_topk_validation() -> None:
    rejects(Op.TOPK_V2, [t(F32, 2, 3), i32(4)], [t(F32, 2, 4), t(I32, 2, 4)], "k")
    rejects(Op.TOPK_V2, [t(F32, 2, 3), i32(1)], [t(F32, 2, 1), t(F32, 2, 1)], "output 1")
    op_fails(
        Op.TOPK_V2,
        [t(F32, 2, 3), OperandInfo(T.INT32, ())],
        [t(F32, 2, 0), t(I32, 2, 0)],
        rand(F32, 2, 3),
        np.array(0, np.int32),
    )


@pytest.mark.parametrize("code,scalar", [(F32, f32s(2.5)), (F16, f16s(-1.25)), (I32, i32(-7))])
def test_fill(code: T, scalar: tuple[OperandInfo, np.ndarray]) -> None:
    got = run1(Op.FILL, [t(I32, 3), scalar], t(code, 0, 0, 0), np.array([2, 1, 3], np.int32))
    assert got.shape == (2, 1, 3) and got.dtype == t(code).dtype
    assert (got == scalar[1]).all()


def test_fill_validation() -> None:
    rejects(Op.FILL, [t(I32, 2), f32s(1)], [t(I32, 2, 2)], "value")
    rejects(Op.FILL, [t(I32, 2), i32(1)], [t(QU8, 2, 2)], "output 0")
    op_fails(Op.FILL, [t(I32, 2), i32(1)], [t(I32, 0, 0)], np.array([2, -1], np.int32))


@pytest.mark.parametrize("shape", [(5,), (2, 3), (1, 2, 3, 4)])
def test_rank(shape: tuple[int, ...]) -> None:
    for code in (F32, QU8, B8, T.TENSOR_QUANT16_SYMM):
        info = t(code, *shape) if code != T.TENSOR_QUANT16_SYMM else OperandInfo(code, shape, 0.5)
        x = np.zeros(shape, dtype=info.dtype)
        got = run1(Op.RANK, [info], OperandInfo(T.INT32, ()), x)
        assert got.shape == () and got.dtype == np.int32 and int(got) == len(shape)
    rejects(Op.RANK, [t(F32, 2)], [t(I32, 1)], "output 0")


# --------------------------------------------------------------------------- dynamic shapes


def test_unknown_ranks_validate_and_run() -> None:
    """Operands of unknown rank or size pass validation; shapes are decided at execution."""
    x = rand(F32, 2, 6)
    got = run1(Op.GATHER, [t(F32), i32(-1), t(I32)], t(F32), x, np.array([5, 0], np.int32))
    np.testing.assert_array_equal(got, x[:, [5, 0]])
    got = run1(Op.REDUCE_SUM, [t(F32), ivec(0), boolean(True)], t(F32), x)
    np.testing.assert_array_equal(got, seq_reduce(x, (0,), False))
    values, indices = run(Op.TOPK_V2, [t(F32), i32(2)], [t(F32), t(I32)], x)
    np.testing.assert_array_equal(values, -np.sort(-x, axis=1)[:, :2])
    parts = run(Op.SPLIT, [t(F32), i32(1), i32(2)], [t(F32), t(F32)], x)
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), x)
    got = run1(Op.CHANNEL_SHUFFLE, [t(F32, 0, 0), i32(2), i32(1)], t(F32, 0, 0), x)
    np.testing.assert_array_equal(got, x[:, [0, 3, 1, 4, 2, 5]])
    got = run1(Op.ARGMIN, [t(F32), OperandInfo(T.INT32, ())], t(I32), x, np.array(0, np.int32))
    np.testing.assert_array_equal(got, np.argmin(x, axis=0))
    got = run1(
        Op.SLICE,
        [t(F32), t(I32), t(I32)],
        t(F32),
        x,
        np.array([1, 2], np.int32),
        np.array([-1, 3], np.int32),
    )
    np.testing.assert_array_equal(got, x[1:, 2:5])
    got = run1(
        Op.PAD_V2, [t(F32), t(I32), f32s(9)], t(F32), x, np.array([[0, 1], [1, 0]], np.int32)
    )
    assert got.shape == (3, 7) and got[2, 0] == 9
    got = run1(
        Op.EXPAND_DIMS, [t(F32), OperandInfo(T.INT32, ())], t(F32), x, np.array(-2, np.int32)
    )
    assert got.shape == (2, 1, 6)
    got = run1(
        Op.RESIZE_NEAREST_NEIGHBOR,
        [t(F32), i32(2), i32(2), boolean(False)],
        t(F32),
        x.reshape(1, 2, 6, 1),
    )
    np.testing.assert_array_equal(got.reshape(2, 2), x[:, [0, 3]])


@pytest.mark.parametrize(
    ("code", "inputs", "output", "feed"),
    [
        (Op.FILL, [t(I32, 2), i32(1)], t(I32, 0, 0), [np.array([16384, 16384], np.int32)]),
        (
            Op.TILE,
            [t(F32, 2, 2), t(I32, 2)],
            t(F32, 0, 0),
            [np.ones((2, 2), np.float32), np.array([1 << 14, 1 << 14], np.int32)],
        ),
        (
            Op.PAD,
            [t(F32, 1, 1), t(I32, 2, 2)],
            t(F32, 0, 0),
            [np.ones((1, 1), np.float32), np.array([[0, 1 << 15], [0, 1 << 15]], np.int32)],
        ),
        (
            Op.RESIZE_NEAREST_NEIGHBOR,
            [
                t(F32, 1, 2, 2, 1),
                OperandInfo(T.INT32, ()),
                OperandInfo(T.INT32, ()),
                boolean(False),
            ],
            t(F32, 0, 0, 0, 0),
            [np.ones((1, 2, 2, 1), np.float32), np.int32(1 << 15), np.int32(1 << 15)],
        ),
        (
            Op.RESIZE_BILINEAR,
            [t(F32, 1, 2, 2, 1), OperandInfo(T.INT32, ()), OperandInfo(T.INT32, ())],
            t(F32, 0, 0, 0, 0),
            [np.ones((1, 2, 2, 1), np.float32), np.int32(1 << 15), np.int32(1 << 15)],
        ),
    ],
)
def test_a_size_read_from_values_is_checked_before_allocating(code, inputs, output, feed) -> None:
    """Issue 15: an 8-byte FILL constant made the driver allocate 1 GB before failing."""
    import tracemalloc

    prepared = PreparedModel(model(code, inputs, [output]))
    tracemalloc.start()
    try:
        with pytest.raises(NNError, match="over the .*-byte limit on one tensor") as info:
            prepared.run(feed)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.code == ResultCode.OP_FAILED
    assert peak < 16 << 20  # nothing near the gigabyte was allocated
