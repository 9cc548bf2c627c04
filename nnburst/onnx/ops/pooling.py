"""ONNX MaxPool, AveragePool and LpPool.

A 2-D pool without dilations is NNAPI's MAX_POOL_2D / AVERAGE_POOL_2D (NCHW
through the layout flag).  ``ceil_mode`` adds the windows that overhang the
end: extra padding after the input, which both NNAPI pools leave out of a
window (ONNX's rule: an overhanging window's average counts only what it
covers); ``count_include_pad`` pads the zeros explicitly first, so the average
counts them.

Any other pool (1-D or 3-D windows, dilations, LpPool) is computed from its
taps: the input padded once (PAD_V2 with −∞ for a max, 0 otherwise), one
STRIDED_SLICE per position in the window, combined by MAXIMUM or ADD, and an
average divided by each output's count of covered elements (a constant worked
out at load).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import onnx

from ...codes import FuseCode, OperandCode, OperationCode
from ..converter import Converter, Unsupported, maps
from .building import apply, filled, output_of, text

#: The most window positions the tap decomposition builds (one slice each).
_MAX_TAPS = 128


def _pads(x: tuple[int, ...], kernel: list[int], strides: list[int], dilations: list[int],
          a: dict[str, Any]) -> list[tuple[int, int]]:  # fmt: skip
    """(before, after) padding of each spatial axis, auto_pad resolved."""
    auto = text(a.get("auto_pad"), "NOTSET")
    dims = len(kernel)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for size, k, s, d in zip(x, kernel, strides, dilations):
            total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if auto == "SAME_UPPER" else (big, small))
        return pads
    if auto == "VALID":
        return [(0, 0)] * dims
    given = list(a.get("pads", [0] * 2 * dims))
    return [(int(given[i]), int(given[i + dims])) for i in range(dims)]


@maps("MaxPool", "AveragePool", "LpPool")
def _pool(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    if len(node.output) > 1 and node.output[1]:
        raise Unsupported("the indices output")
    name = node.input[0]
    x, out = c.shape(name), c.shape(node.output[0])
    kernel = [int(k) for k in a["kernel_shape"]]
    dims = len(kernel)
    if len(x) != dims + 2 or len(out) != len(x):
        raise Unsupported(f"a {dims}-D window over a rank-{len(x)} tensor")
    strides = [int(s) for s in a.get("strides", [1] * dims)]
    dilations = [int(d) for d in a.get("dilations", [1] * dims)]
    pads = _pads(x[2:], kernel, strides, dilations, a)
    # ceil_mode's overhanging windows, from the output size ONNX inferred.
    overhang = [
        max(0, (o - 1) * s + (k - 1) * d + 1 - (size + before + after))
        for o, s, k, d, size, (before, after) in zip(
            out[2:], strides, kernel, dilations, x[2:], pads
        )
    ]
    include = bool(a.get("count_include_pad", 0)) and node.op_type == "AveragePool"
    dtype = c.dtype(name)
    if dtype != np.float32 and not (node.op_type == "MaxPool" and dtype in (np.uint8, np.int8)):
        raise Unsupported(f"{dtype} images")
    if node.op_type != "LpPool" and dims == 2 and dilations == [1, 1]:
        _nnapi_pool(c, node, kernel, strides, pads, overhang, include)
        return
    if dtype != np.float32:
        raise Unsupported(f"{dtype} images with this window")
    _pool_by_taps(c, node, a, kernel, strides, dilations, pads, overhang, include)


def _nnapi_pool(c: Converter, node: onnx.NodeProto, kernel: list[int], strides: list[int],
                pads: list[tuple[int, int]], overhang: list[int], include: bool) -> None:  # fmt: skip
    source, x = c.operand(node.input[0]), c.shape(node.input[0])
    if include and any(p for pair in pads for p in pair):
        padded = (*x[:2], *(n + b + e for n, (b, e) in zip(x[2:], pads)))
        paddings = np.array([[0, 0], [0, 0], *pads], np.int32)
        source = apply(c, OperationCode.PAD, [source, c.constant(OperandCode.TENSOR_INT32, paddings, (4, 2))],
                       np.dtype(np.float32), padded)  # fmt: skip
        pads = [(0, 0), (0, 0)]
    (top, bottom), (left, right) = pads
    window = [left, right + overhang[1], top, bottom + overhang[0], strides[1], strides[0]]
    code = OperationCode.MAX_POOL_2D if node.op_type == "MaxPool" else OperationCode.AVERAGE_POOL_2D
    inputs = [source, *(c.i32(v) for v in window), c.i32(kernel[1]), c.i32(kernel[0])]
    c.add(code, [*inputs, c.i32(FuseCode.NONE), c.boolean(True)], [output_of(c, node)])


def _covered(size: int, out: int, k: int, s: int, d: int, before: int, after: int,
             include: bool) -> np.ndarray:  # fmt: skip
    """How many of each output's taps along one axis fall on the input (with the
    explicit padding when ``include``)."""
    low, high = (-before, size + after) if include else (0, size)
    starts = np.arange(out) * s - before
    taps = starts[:, None] + np.arange(k)[None, :] * d
    return ((taps >= low) & (taps < high)).sum(axis=1)


def _pool_by_taps(c: Converter, node: onnx.NodeProto, a: dict[str, Any], kernel: list[int],
                  strides: list[int], dilations: list[int], pads: list[tuple[int, int]],
                  overhang: list[int], include: bool) -> None:  # fmt: skip
    f32 = np.dtype(np.float32)
    x, out = c.shape(node.input[0]), c.shape(node.output[0])
    taps = math.prod(kernel)
    if taps > _MAX_TAPS:
        raise Unsupported(f"a window of {taps} positions")
    kind = node.op_type
    p = int(a.get("p", 2))
    ends = [(b, e + o) for (b, e), o in zip(pads, overhang)]
    padded_shape = (*x[:2], *(n + b + e for n, (b, e) in zip(x[2:], ends)))
    source = c.operand(node.input[0])
    if any(v for pair in ends for v in pair):
        paddings = np.array([[0, 0], [0, 0], *ends], np.int32)
        fill = c.f32(-np.inf if kind == "MaxPool" else 0.0)
        paddings_operand = c.constant(OperandCode.TENSOR_INT32, paddings, paddings.shape)
        source = apply(c, OperationCode.PAD_V2, [source, paddings_operand, fill], f32, padded_shape)
    if kind == "LpPool" and p != 1:
        power = filled(c, f32, (1,), float(p))
        source = apply(c, OperationCode.POW, [apply(c, OperationCode.ABS, [source], f32, padded_shape), power],
                       f32, padded_shape)  # fmt: skip
    elif kind == "LpPool":
        source = apply(c, OperationCode.ABS, [source], f32, padded_shape)
    rank = len(x)
    total: int | None = None
    for offsets in itertools.product(*(range(k) for k in kernel)):
        begin = [0, 0, *(t * d for t, d in zip(offsets, dilations))]
        end = [x[0], x[1], *(b + (o - 1) * s + 1 for b, o, s in zip(begin[2:], out[2:], strides))]
        step = [1, 1, *strides]
        inputs = [source, c.ints(begin), c.ints(end), c.ints(step), c.i32(0), c.i32(0), c.i32(0)]
        tap = apply(c, OperationCode.STRIDED_SLICE, inputs, f32, out)
        if total is None:
            total = tap
        elif kind == "MaxPool":
            total = apply(c, OperationCode.MAXIMUM, [total, tap], f32, out)
        else:
            total = apply(c, OperationCode.ADD, [total, tap], f32, out)
    assert total is not None
    target = output_of(c, node)
    if kind == "MaxPool":
        c.add(OperationCode.MUL, [total, filled(c, f32, (1,), 1.0), c.i32(FuseCode.NONE)], [target])
    elif kind == "AveragePool":
        counts = np.ones((1,) * rank, np.float64)
        for axis in range(2, rank):
            i = axis - 2
            along = _covered(
                x[axis], out[axis], kernel[i], strides[i], dilations[i], *pads[i], include
            )
            counts = counts * along.reshape((1,) * axis + (-1,) + (1,) * (rank - axis - 1))
        reciprocal = (1.0 / np.maximum(counts, 1)).astype(np.float32)
        c.add(OperationCode.MUL, [total, c.floats(reciprocal), c.i32(FuseCode.NONE)], [target])
    elif p == 1:
        c.add(OperationCode.MUL, [total, filled(c, f32, (1,), 1.0), c.i32(FuseCode.NONE)], [target])
    else:
        c.add(OperationCode.POW, [total, filled(c, f32, (1,), 1.0 / p)], [target])
