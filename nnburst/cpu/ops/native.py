"""The C loops of ``csrc/kernels.c``, called with numpy arrays.

Each wrapper checks what C cannot (dtypes, contiguity, that the arrays'
sizes agree) and hands the rest to C, which checks that every window lies
inside the (padded) input before it reads.  CONV_2D pads with zeros inside
its loop; the depthwise wrapper makes a padded copy (see window_loops.h
for why); pools take an input their operation padded (with -inf or 0).
"""

from __future__ import annotations

import errno
from typing import Any

import numpy as np

from ..._bindings import ffi, lib
from .common import Window2D
from .windows import pad_nhwc

#: Output channels per vector in the C convolution: its weights have a
#: multiple of this many columns (zeros past the last channel).
TILE = 16
POOL_MAX = lib.NNB_POOL_MAX
POOL_SUM = lib.NNB_POOL_SUM


def _window_shape(
    x: np.ndarray, filter_hw: tuple[int, int], win: Window2D, out_c: int, padded: bool = False
) -> Any:
    """The C struct for ``x`` [N, H, W, C]; ``padded``: C adds ``win``'s zero padding
    (otherwise its pads are 0: ``x`` has them already)."""
    n, in_h, in_w, in_c = x.shape
    return ffi.new(
        "struct nnb_window_shape *",
        {
            "batches": n,
            "in_h": in_h,
            "in_w": in_w,
            "in_c": in_c,
            "filter_h": filter_hw[0],
            "filter_w": filter_hw[1],
            "stride_h": win.stride_h,
            "stride_w": win.stride_w,
            "dilation_h": win.dilation_h,
            "dilation_w": win.dilation_w,
            "pad_top": win.pad_top if padded else 0,
            "pad_bottom": win.pad_bottom if padded else 0,
            "pad_left": win.pad_left if padded else 0,
            "pad_right": win.pad_right if padded else 0,
            "out_h": win.out_h,
            "out_w": win.out_w,
            "out_c": out_c,
        },
    )


def _floats(array: np.ndarray) -> Any:
    return ffi.from_buffer("float[]", array)


def _run_loop(
    loop: Any,
    what: str,
    source: np.ndarray,
    shape: Any,
    weights: np.ndarray,
    bias: np.ndarray,
    bounds: tuple[float, float],
    out: np.ndarray,
    path: int,
    win: Window2D,
) -> np.ndarray:
    """``out`` filled by one of the C convolution loops (``nnb_conv_f32``,
    ``nnb_depthwise_conv_f32``: the same arguments), or the error its code means."""
    if out.size == 0:
        return out
    rc = loop(
        _floats(source),
        shape,
        _floats(weights),
        weights.shape[-1],
        _floats(bias),
        *bounds,
        _floats(out),
        path,
    )
    if rc == -errno.ENOTSUP:
        raise ValueError(f"{what} path {path} is not built or not supported by this CPU")
    if rc == -errno.ENOMEM:
        raise MemoryError(f"{what}: no memory for the row of zeros its padding reads")
    if rc:
        raise ValueError(f"{what} window {win} does not fit the input {source.shape}")
    return out


def conv_f32(
    x: np.ndarray,
    weights: np.ndarray,
    filter_hw: tuple[int, int],
    bias: np.ndarray,
    win: Window2D,
    lo: float = -np.inf,
    hi: float = np.inf,
    path: int = 0,
) -> np.ndarray:
    """CONV_2D: ``x`` [N, H, W, C] (unpadded: C reads zeros for ``win``'s
    padding), ``weights`` [FH*FW*C, columns] with columns a multiple of
    :data:`TILE`, ``bias`` [depth_out] -> [N, OH, OW, depth_out], clamped to
    [lo, hi].  ``path`` 0 runs the fastest loop this CPU has; tests pick each
    one (``lib.NNB_CONV_*``)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bias = np.ascontiguousarray(bias, dtype=np.float32)
    n, in_h, in_w, depth_in = x.shape
    depth_out = bias.shape[0]
    if (
        weights.dtype != np.float32
        or weights.ndim != 2
        or not weights.flags.c_contiguous
        or weights.shape[0] != filter_hw[0] * filter_hw[1] * depth_in
        or weights.shape[1] < depth_out
        or weights.shape[1] % TILE
    ):
        raise ValueError(f"conv weights {weights.shape} do not fit {depth_in} -> {depth_out}")
    shape = _window_shape(x, filter_hw, win, depth_out, padded=True)
    out = np.empty((n, win.out_h, win.out_w, depth_out), np.float32)
    return _run_loop(lib.nnb_conv_f32, "conv", x, shape, weights, bias, (lo, hi), out, path, win)


def depthwise_conv_f32(
    x: np.ndarray,
    weights: np.ndarray,
    bias: np.ndarray,
    win: Window2D,
    lo: float = -np.inf,
    hi: float = np.inf,
    path: int = 0,
) -> np.ndarray:
    """DEPTHWISE_CONV_2D (depth multiplier 1): ``x`` [N, H, W, C] (unpadded:
    this pads it with zeros as ``win`` says), ``weights`` [FH, FW, columns]
    with columns a multiple of :data:`TILE` (zeros past C), ``bias`` [C] ->
    [N, OH, OW, C], clamped to [lo, hi].  ``path`` as for :func:`conv_f32`."""
    n, in_h, in_w, depth = x.shape
    if (
        weights.dtype != np.float32
        or weights.ndim != 3
        or weights.shape[2] < depth
        or weights.shape[2] % TILE
    ):
        raise ValueError(f"depthwise weights {weights.shape} do not fit {depth} channels")
    weights = np.ascontiguousarray(weights)
    filter_h, filter_w, columns = weights.shape
    if depth < TILE:  # C loads whole 16-channel tiles: a narrow input gets zero channels
        wide = np.zeros((n, in_h, in_w, TILE), np.float32)
        wide[..., :depth] = x
        x = wide
    source = np.ascontiguousarray(pad_nhwc(x, win, np.float32))
    padded_bias = np.zeros(columns, np.float32)
    padded_bias[:depth] = bias
    shape = _window_shape(source, (filter_h, filter_w), win, depth)
    out = np.empty((n, win.out_h, win.out_w, depth), np.float32)
    loop = lib.nnb_depthwise_conv_f32
    return _run_loop(
        loop, "depthwise", source, shape, weights, padded_bias, (lo, hi), out, path, win
    )


def pool_f32(
    padded: np.ndarray, filter_hw: tuple[int, int], win: Window2D, kind: int
) -> np.ndarray:
    """Max (:data:`POOL_MAX`, NaN-propagating as ``np.maximum``) or sum
    (:data:`POOL_SUM`) over each window: ``padded`` [N, H, W, C] -> [N, OH, OW, C]."""
    padded = np.ascontiguousarray(padded, dtype=np.float32)
    n, _, _, channels = padded.shape
    out = np.empty((n, win.out_h, win.out_w, channels), np.float32)
    if out.size == 0:
        return out
    rc = lib.nnb_pool_f32(
        _floats(padded), _window_shape(padded, filter_hw, win, channels), kind, _floats(out)
    )
    if rc:
        raise ValueError(f"pool window {win} (kind {kind}) does not fit the input {padded.shape}")
    return out


def add_padded_channels_f32(a: np.ndarray, x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``clamp(a + x zero-padded after its last axis to a's, lo, hi)`` in one pass:
    PAD then ADD without the padded copy (see ``nnburst/cpu/fusion.py``)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if a.ndim == 0 or a.shape[:-1] != x.shape[:-1] or x.shape[-1] > a.shape[-1]:
        raise _unpaddable(a, x)
    out = np.empty_like(a)
    channels = a.shape[-1]
    if out.size and lib.nnb_add_padded_channels_f32(
        _floats(a), _floats(x), a.size // channels, channels, x.shape[-1], lo, hi, _floats(out)
    ):
        raise _unpaddable(a, x)
    return out


def _unpaddable(a: np.ndarray, x: np.ndarray) -> ValueError:
    return ValueError(f"cannot add {x.shape} padded on its last axis to {a.shape}")
