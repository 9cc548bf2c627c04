"""The kernels' contract (``csrc/kernels.h``): the CPU driver's C loops,
called with numpy arrays the caller checked (dtypes, contiguity, sizes).

A kernel that refuses its arguments at run time is an operation that
failed: its errors keep ``OP_FAILED`` whatever their class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..codes import ResultCode
from ..errors import BadDataError
from .compiled import ffi, lib
from .status import EINVAL, ENOMEM, ENOTSUP, error_for

if TYPE_CHECKING:
    from .._native import CData

CONV_BEST: int = lib.NNB_CONV_BEST
CONV_PORTABLE: int = lib.NNB_CONV_PORTABLE
CONV_AVX2: int = lib.NNB_CONV_AVX2
CONV_AVX512: int = lib.NNB_CONV_AVX512
POOL_MAX: int = lib.NNB_POOL_MAX
POOL_SUM: int = lib.NNB_POOL_SUM
QUANT_ADD: int = lib.NNB_QUANT_ADD
QUANT_MUL: int = lib.NNB_QUANT_MUL
#: The 8-bit types the quantized kernels write, by numpy dtype.
OUT_TYPES: dict[np.dtype, int] = {
    np.dtype(np.uint8): lib.NNB_OUT_UINT8,
    np.dtype(np.int8): lib.NNB_OUT_INT8,
}

_FAILED = ResultCode.OP_FAILED  # a kernel refusing at run time: the operation failed


def _floats(array: np.ndarray) -> CData:
    return ffi.from_buffer("float[]", array)


def _bytes(array: np.ndarray) -> CData:
    return ffi.from_buffer("uint8_t[]", array)


def window_shape(fields: dict[str, int]) -> CData:
    """A ``struct nnb_window_shape`` (batches, in_h, ..., out_c) to pass a kernel."""
    return ffi.new("struct nnb_window_shape *", fields)


class ConvKernel:
    """``nnb_conv_f32`` or ``nnb_depthwise_conv_f32`` with everything but the
    input and output fixed (shape, weights, bias, clamp, path).  The arrays
    are kept alive here; calls share them read-only, so threads may too."""

    __slots__ = ("_loop", "_arguments", "_path", "_what", "_invalid", "_arrays")

    def __init__(
        self,
        depthwise: bool,
        shape: CData,
        weights: np.ndarray,
        bias: np.ndarray,
        lo: float,
        hi: float,
        path: int,
        what: str,
        invalid: str,
    ) -> None:
        """``weights`` and ``bias`` float32 and C-contiguous; ``invalid``: the
        message if C finds the shape's windows outside the input."""
        self._loop = lib.nnb_depthwise_conv_f32 if depthwise else lib.nnb_conv_f32
        self._arrays = (weights, bias)
        self._arguments = (shape, _floats(weights), weights.shape[-1], _floats(bias), lo, hi)
        self._path, self._what, self._invalid = path, what, invalid

    def __call__(self, source: np.ndarray, out: np.ndarray) -> None:
        """``out`` for ``source``, both float32 C-contiguous of the shape's sizes."""
        rc = self._loop(_floats(source), *self._arguments, _floats(out), self._path)
        if rc:
            what = f"{self._what} path {self._path}" if rc == ENOTSUP else self._what
            detail = self._invalid if rc == EINVAL else None
            if rc == ENOMEM:
                detail = "no memory for the row of zeros its padding reads"
            raise error_for(rc, what, detail=detail, code=_FAILED)


def pool_f32(padded: np.ndarray, shape: CData, kind: int, out: np.ndarray, window: object) -> None:
    """``nnb_pool_f32`` of ``kind`` (:data:`POOL_MAX`, :data:`POOL_SUM`);
    ``window`` names the window in an error."""
    rc = lib.nnb_pool_f32(_floats(padded), shape, kind, _floats(out))
    if rc:
        detail = f"window {window} (kind {kind}) does not fit the input {padded.shape}"
        raise error_for(rc, "pool", detail=detail, code=_FAILED)


def add_padded_channels_f32(
    a: np.ndarray, x: np.ndarray, lo: float, hi: float, out: np.ndarray
) -> None:
    """``nnb_add_padded_channels_f32`` over ``a``'s pixels (float32, C-contiguous)."""
    channels = a.shape[-1]
    rc = lib.nnb_add_padded_channels_f32(
        _floats(a), _floats(x), a.size // channels, channels, x.shape[-1], lo, hi, _floats(out)
    )
    if rc:
        detail = f"cannot add {x.shape} padded on its last axis to {a.shape}"
        raise error_for(rc, "add padded channels", detail=detail, code=_FAILED)


class Requantize:
    """``nnb_requantize_f32`` with everything but the sums and output fixed."""

    __slots__ = ("_arguments", "_arrays", "_invalid")

    def __init__(
        self,
        bias: np.ndarray,
        multipliers: np.ndarray,
        shifts: np.ndarray,
        zero_point: int,
        bounds: tuple[int, int],
        dtype: np.dtype,
    ) -> None:
        """``bias``, ``multipliers``, ``shifts``: C-contiguous int64 (one
        multiplier and shift for all channels, or one per channel)."""
        self._arrays = (bias, multipliers, shifts)  # kept alive for the pointers
        self._arguments = (
            ffi.from_buffer("int64_t[]", bias),
            ffi.from_buffer("int64_t[]", multipliers),
            ffi.from_buffer("int64_t[]", shifts),
            int(multipliers.size != 1),
            zero_point,
            *bounds,
            OUT_TYPES[dtype],
        )
        self._invalid = f"cannot requantize to {dtype} within {bounds}"

    def __call__(self, acc: np.ndarray, channels: int, out: np.ndarray) -> None:
        rc = lib.nnb_requantize_f32(
            _floats(acc), acc.size // channels, channels, *self._arguments, ffi.from_buffer(out)
        )
        if rc:
            raise error_for(rc, "requantize", detail=self._invalid, code=_FAILED)


def quant_binary_table(fields: dict[str, int], table: np.ndarray) -> None:
    """Fill ``table`` [256, 256] uint8 by ``nnb_quant_binary_table``.

    Raises:
        BadDataError: a value beyond int32, or parameters C refuses.
    """
    try:
        params = ffi.new("struct nnb_quant_binary *", fields)
    except OverflowError as exc:
        raise BadDataError(f"quantized arithmetic parameters beyond int32: {exc}") from None
    rc = lib.nnb_quant_binary_table(params, _bytes(table))
    if rc:
        detail = f"C refuses quantized arithmetic with {fields}"
        raise error_for(rc, "quantized arithmetic", detail=detail)


def quant_binary_lookup(a: np.ndarray, b: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:
    """``out[i] = table[a[i] * 256 + b[i % b.size]]`` (all uint8-sized, C-contiguous)."""
    rc = lib.nnb_quant_binary_lookup(
        _bytes(a), a.size, _bytes(b), b.size, _bytes(table), _bytes(out)
    )
    if rc:
        detail = f"quantized arithmetic failed on {a.shape} and {b.shape}"
        raise error_for(rc, "quantized arithmetic", detail=detail, code=_FAILED)


def softmax_quant8(x: np.ndarray, exps: np.ndarray, radius: int, out: np.ndarray) -> None:
    """``nnb_softmax_quant8`` over the last axis of 8-bit ``x`` (type of :data:`OUT_TYPES`)."""
    depth = x.shape[-1]
    rc = lib.nnb_softmax_quant8(
        ffi.from_buffer(x),
        x.size // depth,
        depth,
        ffi.from_buffer("int32_t[]", exps),
        radius,
        OUT_TYPES[x.dtype],
        ffi.from_buffer(out),
    )
    if rc:
        detail = f"softmax of {x.dtype} {x.shape} refused"
        raise error_for(rc, "softmax", detail=detail, code=_FAILED)


def quantize_f32(x: np.ndarray, scale: float, zero_point: int, out: np.ndarray) -> None:
    """``nnb_quantize_f32`` of float32 ``x`` into ``out`` (uint8 or int8; any
    other type is C's -EINVAL)."""
    out_type = OUT_TYPES.get(out.dtype, 0)
    rc = lib.nnb_quantize_f32(_floats(x), x.size, scale, zero_point, out_type, ffi.from_buffer(out))
    if rc:
        raise error_for(rc, "quantize", detail=f"cannot quantize to {out.dtype}", code=_FAILED)


def keep_freed_memory(mmap_threshold: int, trim_threshold: int) -> None:
    """Raise malloc's thresholds (``nnb_keep_freed_memory``).

    Raises:
        UnsupportedError: not glibc; BadDataError: a value malloc refuses.
    """
    rc = lib.nnb_keep_freed_memory(mmap_threshold, trim_threshold)
    if rc:
        raise error_for(rc, "keep_freed_memory")
