"""Float32 CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED on the packed kernels of ``csrc/fconv.c``.

The weights, bias and fused clamp of a layer are packed once, when its model
is prepared (:class:`FloatConv`), into the 16-channel panels the kernel
reads; a run checks the input and calls C, which reads the input in place,
keeps 6 pixels x 16 channels of sums in registers over every tap and clamps
them as it stores them: no im2col copy, no separate pass for the bias or
the activation (a layer on under 8 input channels: a filter row a tap).  A
depthwise layer (depth multiplier 1) reads its input rows in place (its
channels a multiple of 8) or padded in a ring of rows in the scratch, and 8
output pixels x 8 channels share each input vector a row loads.  Whether a layer runs here or on BLAS is the caller's
choice (``cpu/ops/conv.py`` measures per shape).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import BadDataError
from .compiled import ffi, lib
from .status import layer_error

#: Paths of ``nnb_fconv_run``: the best this CPU runs, or one build of the kernel.
PATH_BEST = lib.NNB_FCONV_BEST
PATH_PORTABLE = lib.NNB_FCONV_PORTABLE
PATH_AVX2 = lib.NNB_FCONV_AVX2

#: The geometry of a fully connected layer: one pixel, one tap.
_ONE_PIXEL = {
    "pad_top": 0,
    "pad_left": 0,
    "stride_h": 1,
    "stride_w": 1,
    "dilation_h": 1,
    "dilation_w": 1,
    "out_h": 1,
    "out_w": 1,
}
_WINDOW_FIELDS = tuple(_ONE_PIXEL)


def available_paths() -> list[int]:
    """The kernel paths this build and CPU run (the portable one always)."""
    return [p for p in (PATH_PORTABLE, PATH_AVX2) if lib.nnb_fconv_path(p) == p]


def vector_path() -> bool:
    """Whether this CPU runs the vector kernel (the portable one is the oracle
    and the fallback, not faster than the route it would replace)."""
    return lib.nnb_fconv_path(PATH_BEST) != PATH_PORTABLE


class FloatConv:
    """One float32 convolution (or fully connected layer, its 1x1 case) with
    everything but the input fixed and its weights packed.

    Safe to call from several threads: each call has its own scratch.
    """

    __slots__ = (
        "in_hwc",
        "out_hwc",
        "_layer",
        "_packed",
        "_packed_pointer",
        "_scratch",
        "_path",
        "_run",
    )

    def __init__(
        self,
        in_hwc: tuple[int, int, int],
        weights: np.ndarray,
        filter_hw: tuple[int, int],
        bias: np.ndarray,
        win: Any | None,
        bounds: tuple[float, float],
        path: int = PATH_BEST,
        depthwise: bool = False,
    ) -> None:
        """``weights`` [FH*FW*C, O] (rows in (i, j, c) order), or [FH*FW, C] for a
        ``depthwise`` layer (depth multiplier 1), ``bias`` [O];
        ``win`` (a ``Window2D``) None for a fully connected layer; ``bounds``
        the fused activation's clamp."""
        in_h, in_w, in_c = in_hwc
        depth_out = int(bias.shape[0])
        if win is None:
            if (in_h, in_w) != (1, 1) or filter_hw != (1, 1):
                raise BadDataError(f"fully connected input {in_hwc} is not one pixel")
            geometry = dict(_ONE_PIXEL)
        else:
            geometry = {name: int(getattr(win, name)) for name in _WINDOW_FIELDS}
        k = filter_hw[0] * filter_hw[1] * (1 if depthwise else in_c)
        if weights.shape != (k, depth_out):
            raise BadDataError(f"float conv weights {weights.shape} for {k} -> {depth_out}")
        self.in_hwc = (in_h, in_w, in_c)
        self.out_hwc = (geometry["out_h"], geometry["out_w"], depth_out)
        self._layer = ffi.new(
            "struct nnb_fconv *",
            {
                "in_h": in_h,
                "in_w": in_w,
                "in_c": in_c,
                "filter_h": filter_hw[0],
                "filter_w": filter_hw[1],
                **geometry,
                "out_c": depth_out,
                "lo": float(bounds[0]),
                "hi": float(bounds[1]),
            },
        )
        packed_bytes, scratch_bytes, pack, self._run = (
            (lib.nnb_fdwconv_packed_bytes, lib.nnb_fdwconv_scratch_bytes,
             lib.nnb_fdwconv_pack, lib.nnb_fdwconv_run)
            if depthwise
            else (lib.nnb_fconv_packed_bytes, lib.nnb_fconv_scratch_bytes,
                  lib.nnb_fconv_pack, lib.nnb_fconv_run)
        )  # fmt: skip
        size = packed_bytes(self._layer)
        scratch = scratch_bytes(self._layer)
        if size < 0 or scratch < 0:
            raise layer_error(int(min(size, scratch)), "float conv")
        w = np.ascontiguousarray(weights, dtype=np.float32)
        b = np.ascontiguousarray(bias, dtype=np.float32)
        self._packed = np.empty(size // 4, np.float32)
        rc = pack(
            self._layer,
            ffi.from_buffer("float[]", w),
            ffi.from_buffer("float[]", b),
            ffi.from_buffer(self._packed),
            size,
        )
        if rc:
            raise layer_error(rc, "float conv pack")
        self._packed.flags.writeable = False
        self._packed_pointer = ffi.from_buffer(self._packed)
        self._scratch, self._path = int(scratch), path

    def plan_fields(self) -> dict[str, Any]:
        """What the C plan (``_bindings/plan.py``) needs to run this layer itself;
        ``keep`` (this object) must outlive the plan's pointers into it."""
        return {
            "layer": self._layer,
            "packed": self._packed_pointer,
            "packed_bytes": self._packed.nbytes,
            "scratch_bytes": self._scratch,
            "path": self._path,
            "keep": self,
        }

    def fits(self, x: np.ndarray) -> bool:
        """Whether ``x`` is an input this layer takes as it is: [N, H, W, C]
        float32, C-contiguous."""
        return (
            type(x) is np.ndarray
            and x.dtype == np.float32
            and x.shape[1:] == self.in_hwc
            and x.flags.c_contiguous
        )

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The output [N, OH, OW, O] for ``x`` [N, H, W, C] (checked: C trusts the sizes)."""
        if not self.fits(x):
            raise BadDataError(f"float conv prepared for [N, {self.in_hwc}] float32, got {x!r:.80}")
        batches = x.shape[0]
        out = np.empty((batches, *self.out_hwc), np.float32)
        if out.size == 0:
            return out
        scratch = np.empty(-(-self._scratch // 8), np.int64)  # pointer-aligned
        rc = self._run(
            self._layer,
            self._packed_pointer,
            self._packed.nbytes,
            ffi.from_buffer("float[]", x),
            batches,
            ffi.from_buffer("float[]", out),
            ffi.from_buffer(scratch),
            scratch.nbytes,
            self._path,
        )
        if rc:
            raise layer_error(rc, "float conv")
        return out
