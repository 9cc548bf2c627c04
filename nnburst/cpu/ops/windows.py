"""Padding, window views, im2col and the conv epilogue shared by the conv and pool kernels.

At the sizes NNAPI models run, numpy's per-call overhead is comparable to
the arithmetic: ``np.pad`` and ``sliding_window_view`` + slicing each cost
tens of µs.  So the input is padded by writing it into one preallocated
buffer, windows are one ``as_strided`` view with the channels innermost
(contiguous rows for the im2col copy), and pools reduce tap by tap, which
numpy does far faster than a reduction over a strided window axis.

Quantized kernels multiply in floating point because BLAS has no integer
matmul: every product and partial sum is an integer, so the result is exact
while the largest possible ``sum |x - x_zp| · |w - w_zp|`` stays below the
mantissa (2**24 for float32, 2**53 for float64).  :func:`exact_dtype` picks
float32 when that bound allows it, float64 otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...codes import FuseCode
from ...operands import OperandInfo
from .arguments import Fail, constant_scalar, known_dim
from .fixed_point import multiply_by_quantized_multiplier
from .fused_activation import fused_activation_bounds
from .native import requantize_f32
from .padding import bordered
from .requantization import quantized_range
from .window_geometry import (
    Window2D,
    WindowArgs,
    check_window_values,
    resolve_window,
    window_values,
)


@dataclass
class WindowPlan:
    """A windowed operation's scalar parameters and, when the input size is declared,
    its resolved window: worked out once per prepared model, not per execution."""

    values: dict[str, Any]
    #: the input (height, width) ``window`` was resolved for.
    in_hw: tuple[int, int] | None = None
    window: Window2D | None = None

    def resolve(self, in_h: int, in_w: int, filter_h: int, filter_w: int, fail: Fail) -> Window2D:
        if self.window is not None and self.in_hw == (in_h, in_w):
            return self.window
        return resolve_window(self.values, in_h, in_w, filter_h, filter_w, fail)


def constant_plan(
    sig: Any, args: WindowArgs, filter_hw: Callable[[dict[str, Any]], tuple[int, int] | None]
) -> WindowPlan | None:
    """The plan when every scalar parameter is constant (else ``None``); the window is
    resolved too when ``filter_hw(values)`` and the input's height and width are known."""
    values = window_values(args, lambda i: constant_scalar(sig, i))
    if any(v is None for v in values.values()):
        return None
    values["nchw"] = bool(values["nchw"])
    inp = sig.inputs[0]
    nchw = values["nchw"]
    in_h, in_w = known_dim(inp, 2 if nchw else 1), known_dim(inp, 3 if nchw else 2)
    size = filter_hw(values)
    if size is None or in_h is None or in_w is None:
        return WindowPlan(values)
    try:
        window = resolve_window(values, in_h, in_w, *size, ValueError)
    except ValueError:  # reported when it executes, as OP_FAILED
        return WindowPlan(values)
    return WindowPlan(values, (in_h, in_w), window)


def runtime_plan(ctx: Any, args: WindowArgs) -> WindowPlan:
    """The plan from the values the scalar inputs have in this execution."""
    values = window_values(args, ctx.scalar)
    check_window_values(values, ctx.fail)
    values["nchw"] = bool(values["nchw"])
    return WindowPlan(values)


def pad_nhwc(
    x: np.ndarray, win: Window2D, dtype: Any, fill: Any = 0, offset: int = 0
) -> np.ndarray:
    """``x - offset`` as ``dtype`` with ``win``'s border filled with ``fill``: one new buffer.

    Returns ``x`` itself when there is nothing to pad, subtract or convert.
    """
    n, h, w, c = x.shape
    if not (win.pad_top or win.pad_bottom or win.pad_left or win.pad_right):
        if offset:
            return np.subtract(x, offset, dtype=dtype)
        return x.astype(dtype, copy=False)
    shape = (n, h + win.pad_top + win.pad_bottom, w + win.pad_left + win.pad_right, c)
    rows, columns = slice(win.pad_top, win.pad_top + h), slice(win.pad_left, win.pad_left + w)
    padded = bordered(shape, (slice(0, n), rows, columns, slice(0, c)), fill, dtype)
    inner = padded[:, rows, columns]
    if offset:
        np.subtract(x, offset, out=inner, dtype=dtype)
    else:
        inner[...] = x
    return padded


def windows(padded: np.ndarray, win: Window2D, filter_h: int, filter_w: int) -> np.ndarray:
    """All windows of a padded NHWC tensor: a read-only [N, OH, OW, FH, FW, C] view."""
    sn, sh, sw, sc = padded.strides
    shape = (padded.shape[0], win.out_h, win.out_w, filter_h, filter_w, padded.shape[3])
    strides = (
        sn,
        sh * win.stride_h,
        sw * win.stride_w,
        sh * win.dilation_h,
        sw * win.dilation_w,
        sc,
    )
    return as_strided(padded, shape, strides, writeable=False)


def im2col(padded: np.ndarray, win: Window2D, filter_h: int, filter_w: int) -> np.ndarray:
    """One row per output pixel, columns in (FH, FW, C) order: [N·OH·OW, FH·FW·C]."""
    view = windows(padded, win, filter_h, filter_w)
    return view.reshape(-1, filter_h * filter_w * padded.shape[3])


Reducer = Callable[..., np.ndarray]


def _reduce_axis(
    x: np.ndarray, axis: int, taps: int, stride: int, dilation: int, size: int, op: Reducer
) -> np.ndarray:
    """``op`` over ``taps`` strided slices of ``x`` along ``axis``; a new array."""
    span = (size - 1) * stride + 1
    index: list[slice] = [slice(None)] * x.ndim

    def tap(i: int) -> np.ndarray:
        index[axis] = slice(i * dilation, i * dilation + span, stride)
        return x[tuple(index)]

    if taps == 1:
        return tap(0).copy()
    acc = op(tap(0), tap(1))
    for i in range(2, taps):
        op(acc, tap(i), out=acc)
    return acc


def reduce_windows(
    padded: np.ndarray, win: Window2D, filter_h: int, filter_w: int, op: Reducer
) -> np.ndarray:
    """``op`` (``np.maximum`` or ``np.add``) over every window: [N, OH, OW, C].

    Separable: rows first, then columns, so FH + FW passes instead of FH · FW.
    """
    rows = _reduce_axis(padded, 1, filter_h, win.stride_h, win.dilation_h, win.out_h, op)
    return _reduce_axis(rows, 2, filter_w, win.stride_w, win.dilation_w, win.out_w, op)


def exact_dtype(inp: OperandInfo, weight_abs_sums: np.ndarray) -> type[np.floating[Any]]:
    """float32 when every quantized accumulator of ``inp`` fits its mantissa, else float64.

    ``weight_abs_sums``: per output channel, ``sum |w - w_zp|`` over what it accumulates.
    """
    lo, hi = quantized_range(inp)
    largest_input = max(inp.zero_point - lo, hi - inp.zero_point)
    bound = largest_input * float(np.max(weight_abs_sums, initial=0.0))
    return np.float32 if bound < 2**24 else np.float64


def activate(acc: np.ndarray, fuse: int) -> np.ndarray:
    """Fused activation on float accumulators, in place."""
    if fuse == FuseCode.RELU:
        np.maximum(acc, 0, out=acc)
    elif fuse == FuseCode.RELU1:
        np.clip(acc, -1, 1, out=acc)
    elif fuse == FuseCode.RELU6:
        np.clip(acc, 0, 6, out=acc)
    return acc


def biased(acc: np.ndarray, bias: np.ndarray | None, fuse: int) -> np.ndarray:
    """Float sums with their ``bias`` (None: all zeros, nothing to add) and fused
    activation, in place."""
    if bias is not None:
        acc += bias
    return activate(acc, fuse)


def conv_output(
    acc: np.ndarray,
    bias: np.ndarray,
    requant: tuple[np.ndarray, np.ndarray] | None,
    out: OperandInfo,
    fuse: int,
    bounds: tuple[int, int] | None = None,
) -> np.ndarray:
    """Bias and fused activation (float) or requantization (quantized): ``out``'s values.

    ``acc`` is [..., depth_out] and may be overwritten; ``requant`` holds the
    per-channel (or one-element) multipliers and shifts, ``None`` for float;
    ``bounds`` is the fused clamp when already known.
    """
    if requant is None:
        return biased(acc, bias if bias.any() else None, fuse).astype(out.dtype, copy=False)
    lo, hi = bounds if bounds is not None else fused_activation_bounds(fuse, out)
    if acc.dtype == np.float32 and out.dtype in (np.uint8, np.int8):
        return requantize_f32(acc, bias, *requant, out.zero_point, (lo, hi), out.dtype)
    total = acc.astype(np.int64)  # exact: integer-valued sums (see exact_dtype)
    total += bias
    scaled = multiply_by_quantized_multiplier(total, *requant)
    scaled += out.zero_point
    return np.clip(scaled, lo, hi).astype(out.dtype)
