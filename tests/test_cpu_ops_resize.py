"""CPU driver: RESIZE_NEAREST_NEIGHBOR, and the checks RESIZE_BILINEAR shares with it.

No public conformance vectors exist for these, so every case is checked
against an independent computation: plain numpy in float64, or a scalar
Python loop over the NNAPI formula, written without the driver's helpers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.operands import OperandInfo

from .op_models import rejects
from .op_tensors import (
    F16,
    F32,
    QS8,
    QU8,
    boolean,
    f16s,
    f32s,
    i32,
    op_fails,
    rand,
    run1,
    t,
)

# --------------------------------------------------------------------------- RESIZE_NEAREST


def _nearest_index(out_size: int, in_size: int, align: bool, half: bool) -> list[int]:
    f = np.float32
    scale = f(in_size - 1) / f(out_size - 1) if align and out_size > 1 else f(in_size) / f(out_size)
    result = []
    for i in range(out_size):
        c = (f(i) + f(0.5)) * scale if half else f(i) * scale
        v = math.floor(abs(c) + 0.5) if align else math.floor(c)
        v = min(v, in_size - 1)
        result.append(max(v, 0) if half else v)
    return result


def test_resize_nearest_known_values() -> None:
    x = np.array([3, 6, 9, 12], dtype=np.float32).reshape(1, 2, 2, 1)
    cases = {
        (False, False): [3, 3, 6, 3, 3, 6, 9, 9, 12],
        (True, False): [3, 6, 6, 9, 12, 12, 9, 12, 12],
        (False, True): [3, 6, 6, 9, 12, 12, 9, 12, 12],
    }
    for (align, half), want in cases.items():
        got = run1(
            Op.RESIZE_NEAREST_NEIGHBOR,
            [t(F32, 1, 2, 2, 1), i32(3), i32(3), boolean(False), boolean(align), boolean(half)],
            t(F32, 1, 3, 3, 1),
            x,
        )
        np.testing.assert_array_equal(got.reshape(-1), want)


@pytest.mark.parametrize("code", [F32, F16, QU8, QS8])
@pytest.mark.parametrize("flags", [(), (False, False), (True, False), (False, True)])
def test_resize_nearest(code: T, flags: tuple[bool, ...]) -> None:
    x = rand(code, 2, 3, 5, 2)
    align, half = (flags + (False, False))[:2]
    out_h, out_w = 7, 3
    extra = [boolean(f) for f in flags]
    got = run1(
        Op.RESIZE_NEAREST_NEIGHBOR,
        [t(code, 2, 3, 5, 2), i32(out_w), i32(out_h), boolean(False), *extra],
        t(code, 2, out_h, out_w, 2),
        x,
    )
    rows, cols = _nearest_index(out_h, 3, align, half), _nearest_index(out_w, 5, align, half)
    np.testing.assert_array_equal(got, x[:, rows][:, :, cols])
    # NCHW, resizing by scale (FLOAT16 scale for float16 data).
    scalar = f16s if code == F16 else f32s
    nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    got = run1(
        Op.RESIZE_NEAREST_NEIGHBOR,
        [t(code, 2, 2, 3, 5), scalar(1.5), scalar(2.0), boolean(True), *extra],
        t(code, 2, 2, 6, 7),
        nchw,
    )
    rows, cols = _nearest_index(6, 3, align, half), _nearest_index(7, 5, align, half)
    np.testing.assert_array_equal(got, nchw[:, :, rows][:, :, :, cols])


def test_resize_nearest_zero_batch_and_validation() -> None:
    empty = np.zeros((0, 2, 2, 1), np.float32)
    got = run1(
        Op.RESIZE_NEAREST_NEIGHBOR,
        [t(F32, 0, 2, 2, 1), i32(4), i32(4), boolean(False)],
        t(F32, 0, 4, 4, 1),
        empty,
    )
    assert got.shape == (0, 4, 4, 1)
    base = [t(F32, 1, 2, 2, 1), i32(4), i32(4)]
    rejects(Op.RESIZE_NEAREST_NEIGHBOR, base, [t(F32, 1, 4, 4, 1)], "inputs")
    rejects(
        Op.RESIZE_NEAREST_NEIGHBOR,
        [*base, boolean(False), boolean(True), boolean(True)],
        [t(F32, 1, 4, 4, 1)],
        "align_corners",
    )
    rejects(
        Op.RESIZE_NEAREST_NEIGHBOR,
        [t(F16, 1, 2, 2, 1), f32s(2), f32s(2), boolean(False)],
        [t(F16, 1, 4, 4, 1)],
        "input 1",
    )
    rejects(
        Op.RESIZE_NEAREST_NEIGHBOR,
        [t(QU8, 1, 2, 2, 1), i32(4), i32(4), boolean(False)],
        [t(QU8, 1, 4, 4, 1, zp=9)],
        "zero point",
    )
    rejects(
        Op.RESIZE_NEAREST_NEIGHBOR,
        [t(F32, 2, 2, 1), i32(4), i32(4), boolean(False)],
        [t(F32, 4, 4, 1)],
        "rank",
    )
    op_fails(
        Op.RESIZE_NEAREST_NEIGHBOR,
        [t(F32, 1, 2, 2, 1), OperandInfo(T.INT32, ()), i32(4), boolean(False)],
        [t(F32, 1, 4, 0, 1)],
        np.ones((1, 2, 2, 1), np.float32),
        np.array(0, np.int32),
    )


def test_resize_bilinear_validation() -> None:
    """RESIZE_BILINEAR shares the nearest-neighbour checks, with its layout flag optional."""
    base = [t(QU8, 1, 2, 2, 1), i32(4), i32(4)]
    rejects(Op.RESIZE_BILINEAR, base[:2], [t(QU8, 1, 4, 4, 1)], "inputs")
    rejects(Op.RESIZE_BILINEAR, base, [t(QU8, 1, 4, 4, 1, zp=9)], "zero point")
    rejects(
        Op.RESIZE_BILINEAR,
        [*base, boolean(False), boolean(True), boolean(True)],
        [t(QU8, 1, 4, 4, 1)],
        "align_corners",
    )
    rejects(
        Op.RESIZE_BILINEAR,
        [t(F16, 1, 2, 2, 1), f32s(2), f32s(2)],
        [t(F16, 1, 4, 4, 1)],
        "input 1",
    )
