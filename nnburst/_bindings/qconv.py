"""Quantized CONV_2D and FULLY_CONNECTED on the int32 C kernels of ``csrc/qconv.c``.

The float route sums ``(x - x_zp)·w`` in float32 on a shifted copy of the
input and requantizes in a second pass; these kernels sum in int32
registers and requantize each tile of outputs before it leaves them, with
NNAPI's fixed-point rounding, so the result is the reference's bit for bit.
A layer is packed once when its model is prepared (:class:`QuantConv`); a
run checks the input and calls C.  A layer the kernels cannot sum exactly
(:class:`NotExactError`) keeps the float route.
"""

from __future__ import annotations

import errno
from typing import Any, NamedTuple

import numpy as np

from ..errors import BadDataError, NNError
from .compiled import ffi, lib
from .status import layer_error

#: Paths of ``nnb_qconv_run``: the best this CPU runs, or one build of the loop.
PATH_BEST = lib.NNB_QCONV_BEST
PATH_PORTABLE = lib.NNB_QCONV_PORTABLE
PATH_AVX2 = lib.NNB_QCONV_AVX2

#: The most taps nnb_qdwconv_run takes (DW_MAX_TAPS in csrc/qconv.c: its list of
#: tap pixels lives on the stack); a larger window is left to the numpy kernels.
_DEPTHWISE_MAX_TAPS = 256

_TYPES = {np.dtype(np.uint8): lib.NNB_QCONV_UINT8, np.dtype(np.int8): lib.NNB_QCONV_INT8}
#: Output types: the 8-bit ones, and int16 of a dense layer (a quantized LSTM's gates).
_OUT_TYPES: dict[np.dtype, int] = {**_TYPES, np.dtype(np.int16): lib.NNB_QCONV_INT16}


class _Window(NamedTuple):
    """The geometry fields of the CPU driver's ``Window2D`` the kernels read."""

    pad_top: int
    pad_left: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int
    out_h: int
    out_w: int


_ONE_PIXEL = _Window(0, 0, 1, 1, 1, 1, 1, 1)


class NotExactError(BadDataError):
    """A layer whose sums could leave int32, or whose weights or multipliers the
    kernels do not take: its caller keeps the float route."""


def available_paths() -> list[int]:
    """The kernel paths this build and CPU run (the portable one always)."""
    return [p for p in (PATH_PORTABLE, PATH_AVX2) if lib.nnb_qconv_path(p) == p]


def vector_path() -> bool:
    """Whether this CPU runs a vector path.  Without one the operations keep
    the float route: its C loops are vectorised with portable vector types,
    and the portable int32 loop (the oracle) measured 2.5-12x slower than
    them."""
    return lib.nnb_qconv_path(PATH_BEST) != PATH_PORTABLE


def _error(rc: int, what: str) -> NNError:
    """The status table's error, but for the one status only these kernels return."""
    if rc == -errno.ERANGE:
        return NotExactError(f"{what}: sums could leave int32 or weights leave int16")
    return layer_error(rc, what)


class QuantConv:
    """One quantized convolution (or fully connected layer, its 1x1 case) with
    everything but the input fixed and its weights packed.

    Safe to call from several threads: each call has its own scratch.
    """

    __slots__ = (
        "_run",
        "in_hwc",
        "out_hwc",
        "in_dtype",
        "out_dtype",
        "_layer",
        "_packed",
        "_packed_pointer",
        "_scratch",
        "_path",
        "depthwise",
    )

    def __init__(
        self,
        in_hwc: tuple[int, int, int],
        weights: np.ndarray,
        filter_hw: tuple[int, int],
        bias: np.ndarray,
        requant: tuple[np.ndarray, np.ndarray],
        win: Any | None,
        in_type: tuple[Any, int],
        out_type: tuple[Any, int],
        bounds: tuple[int, int],
        path: int = PATH_BEST,
        depthwise: bool = False,
    ) -> None:
        """``weights`` [FH*FW*C, O] integers already minus the filter's zero point
        (rows in (i, j, c) order), or [FH*FW, C] for a ``depthwise`` layer (depth
        multiplier 1), ``bias`` [O], ``requant`` (multipliers, shifts)
        with O entries or one; ``win`` None for a fully connected layer;
        ``in_type``/``out_type`` (dtype, zero point); ``bounds`` the clamp.
        NotExactError for a layer these kernels cannot compute exactly."""
        in_h, in_w, in_c = in_hwc
        depth_out = int(bias.shape[0])
        self.depthwise = depthwise
        self.in_dtype, self.out_dtype = np.dtype(in_type[0]), np.dtype(out_type[0])
        if self.in_dtype not in _TYPES or self.out_dtype not in _OUT_TYPES:
            raise NotExactError(f"quantized conv of {self.in_dtype} to {self.out_dtype}")
        if depthwise and filter_hw[0] * filter_hw[1] > _DEPTHWISE_MAX_TAPS:
            raise NotExactError(f"a depthwise window of {filter_hw[0]}x{filter_hw[1]} taps")
        if win is None:  # fully connected: one pixel, one tap
            if (in_h, in_w) != (1, 1) or filter_hw != (1, 1):
                raise BadDataError(f"fully connected input {in_hwc} is not one pixel")
            win = _ONE_PIXEL
        self.in_hwc = (in_h, in_w, in_c)
        self.out_hwc = (win.out_h, win.out_w, depth_out)
        self._layer = ffi.new(
            "struct nnb_qconv *",
            {
                "in_h": in_h,
                "in_w": in_w,
                "in_c": in_c,
                "filter_h": filter_hw[0],
                "filter_w": filter_hw[1],
                "stride_h": win.stride_h,
                "stride_w": win.stride_w,
                "dilation_h": win.dilation_h,
                "dilation_w": win.dilation_w,
                "pad_top": win.pad_top,
                "pad_left": win.pad_left,
                "out_h": win.out_h,
                "out_w": win.out_w,
                "out_c": depth_out,
                "input_type": _TYPES[self.in_dtype],
                "input_zero_point": in_type[1],
                "output_type": _OUT_TYPES[self.out_dtype],
                "output_zero_point": out_type[1],
                "lo": bounds[0],
                "hi": bounds[1],
            },
        )
        packed_bytes, scratch_bytes, pack, self._run = (
            (lib.nnb_qdwconv_packed_bytes, lib.nnb_qdwconv_scratch_bytes,
             lib.nnb_qdwconv_pack, lib.nnb_qdwconv_run)
            if depthwise
            else (lib.nnb_qconv_packed_bytes, lib.nnb_qconv_scratch_bytes,
                  lib.nnb_qconv_pack, lib.nnb_qconv_run)
        )  # fmt: skip
        size = packed_bytes(self._layer)
        scratch = scratch_bytes(self._layer)
        if size < 0 or scratch < 0:
            raise _error(int(min(size, scratch)), "quantized conv")
        k = filter_hw[0] * filter_hw[1] * (1 if depthwise else in_c)
        multipliers, shifts = (np.asarray(a).reshape(-1) for a in requant)
        if weights.shape != (k, depth_out) or multipliers.size not in (1, depth_out):
            raise BadDataError(f"quantized conv weights {weights.shape} for {k} -> {depth_out}")
        if not (_fits_int32(weights) and _fits_int32(bias) and _fits_int32(multipliers)):
            raise NotExactError("quantized conv weights, bias or multipliers beyond int32")
        arrays = [
            np.ascontiguousarray(a, dtype=np.int32) for a in (weights, bias, multipliers, shifts)
        ]
        self._packed = np.empty(size // 4, np.int32)  # int32-aligned, as C reads it
        w, b, m, s = (ffi.from_buffer("int32_t[]", a) for a in arrays)
        per_channel = int(multipliers.size != 1)
        packed = ffi.from_buffer(self._packed)
        rc = pack(self._layer, w, b, m, s, per_channel, packed, size)
        if rc:
            raise _error(rc, "quantized conv pack")
        self._packed.flags.writeable = False
        self._packed_pointer = ffi.from_buffer(self._packed)
        self._scratch, self._path = int(scratch), path

    def plan_fields(self) -> dict[str, Any]:
        """What the C plan (``_bindings/plan.py``) needs to run this layer itself."""
        return {
            "layer": self._layer,
            "packed": self._packed_pointer,
            "packed_bytes": self._packed.nbytes,
            "scratch_bytes": self._scratch,
            "path": self._path,
            "keep": self,
        }

    def fits(self, x: np.ndarray) -> bool:
        """Whether ``x`` is an input this layer takes as it is: [N, H, W, C], C-contiguous."""
        return (
            type(x) is np.ndarray
            and x.dtype == self.in_dtype
            and x.shape[1:] == self.in_hwc
            and x.flags.c_contiguous
        )

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The output [N, OH, OW, O] for ``x`` [N, H, W, C] (checked: C trusts the sizes)."""
        if not self.fits(x):
            raise BadDataError(
                f"quantized conv prepared for [N, {self.in_hwc}] {self.in_dtype}, got {x!r:.80}"
            )
        batches = x.shape[0]
        out = np.empty((batches, *self.out_hwc), self.out_dtype)
        if out.size == 0:
            return out
        scratch = np.empty(-(-self._scratch // 2), np.int16)
        rc = self._run(
            self._layer,
            self._packed_pointer,
            self._packed.nbytes,
            ffi.from_buffer(x),
            batches,
            ffi.from_buffer(out),
            ffi.from_buffer(scratch),
            scratch.nbytes,
            self._path,
        )
        if rc:
            raise _error(rc, "quantized conv")
        return out


def _fits_int32(a: np.ndarray) -> bool:
    return a.size == 0 or (int(a.min()) >= -(2**31) and int(a.max()) < 2**31)
