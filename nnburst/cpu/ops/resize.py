"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR.

The output size comes from INT32 width/height or (NNAPI 1.2) FLOAT32/FLOAT16
scale factors, ``floor(size * scale)`` in float32.  Each output coordinate maps
to a source coordinate exactly as the reference computes it in float32:
``scale = in/out`` (``(in-1)/(out-1)`` with align_corners), the coordinate is
``x * scale`` (``(x + 0.5) * scale`` with half-pixel centres: bilinear subtracts
the 0.5 again).  NCHW data is transposed in and out.

Bilinear: the coordinate's floor and ceiling (clamped to the image) are the two
taps, and the four taps are blended in float32 in the reference's order;
quantized results are truncated back to the integer type, as the reference's
``static_cast`` does.  Nearest neighbour: the coordinate is rounded half away
from zero with align_corners and floored otherwise, then clamped; the values are
copied, so quantized outputs keep the input's scale and zero point.  Zero batches
are allowed.
"""

from __future__ import annotations

import math

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    check_allocation,
    constant_scalar,
    float_scalar_code,
    op_failed,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
    require_same_quantization,
)
from .fixed_point import round_half_away
from .window_geometry import from_nhwc, to_nhwc

_F32 = np.float32
_LAYOUT, _ALIGN_CORNERS, _HALF_PIXEL = 3, 4, 5
#: input counts: RESIZE_BILINEAR's layout flag is optional (NNAPI 1.0 had three inputs).
_COUNTS = {
    OperationCode.RESIZE_BILINEAR: (3, 4, 5, 6),
    OperationCode.RESIZE_NEAREST_NEIGHBOR: (4, 5, 6),
}


def _validate(sig: OperationSignature) -> None:
    require_operand_counts(sig, _COUNTS[sig.code], 1)
    info = require_operand_type(sig, 0, FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES, "input")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_operand_rank(sig, 0, (4,), "input")
    require_same_quantization(sig, info)
    scale_code = float_scalar_code(info.code)
    size_code = sig.inputs[1].code
    if size_code not in (OperandCode.INT32, scale_code):
        raise sig.fail(
            f"input 1 (output width or width scale) has type {size_code.name}; "
            f"expected INT32 or {scale_code.name}"
        )
    require_operand_type(sig, 2, (size_code,), "output height or height scale")
    for index, name in (
        (_LAYOUT, "layout"),
        (_ALIGN_CORNERS, "align_corners"),
        (_HALF_PIXEL, "half_pixel_centers"),
    ):
        if index < len(sig.inputs):
            require_operand_type(sig, index, (OperandCode.BOOL,), name)
    for index in (1, 2):
        value = constant_scalar(sig, index)
        if value is not None and not value > 0:
            raise sig.fail(f"input {index} (output size or scale) must be positive, got {value}")
    if constant_scalar(sig, _ALIGN_CORNERS) and constant_scalar(sig, _HALF_PIXEL):
        raise sig.fail("align_corners and half_pixel_centers cannot both be true")


def _flag(ctx: ExecutionContext, index: int) -> bool:
    return index < len(ctx.inputs) and ctx.has_input(index) and bool(ctx.scalar(index))


def _output_size(ctx: ExecutionContext, in_size: int, index: int) -> int:
    if ctx.signature.inputs[index].code == OperandCode.INT32:
        size = int(ctx.scalar(index))
    else:
        size = math.floor(_F32(in_size) * _F32(ctx.scalar(index)))
    if size <= 0:
        raise op_failed(ctx.code, f"the output size {size} must be positive")
    return size


# --- RESIZE_BILINEAR --------------------------------------------------------------------


def _taps(out_size: int, in_size: int, align: bool, half: bool) -> tuple[np.ndarray, ...]:
    """(lower index, upper index, fraction) of every output coordinate, in float32."""
    if align and out_size > 1:
        scale = np.float32(in_size - 1) / np.float32(out_size - 1)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    pos = np.arange(out_size, dtype=np.float32)
    if half:
        source = (pos + np.float32(0.5)) * scale - np.float32(0.5)
    else:
        source = pos * scale
    lower = np.maximum(np.floor(source).astype(np.int64), 0)
    upper = np.minimum(np.ceil(source).astype(np.int64), in_size - 1)
    return lower, upper, (source - lower.astype(np.float32)).astype(np.float32)


def _execute_bilinear(ctx: ExecutionContext) -> list[np.ndarray]:
    nchw = _flag(ctx, _LAYOUT)
    align, half = _flag(ctx, _ALIGN_CORNERS), _flag(ctx, _HALF_PIXEL)
    x = to_nhwc(ctx.input(0), nchw)
    if x.ndim != 4:
        raise op_failed(ctx.code, f"input must have rank 4, got {x.ndim}")
    _, in_h, in_w, _ = x.shape
    if in_h <= 0 or in_w <= 0:
        raise op_failed(ctx.code, "input height and width must be positive")
    out_w = _output_size(ctx, in_w, 1)
    out_h = _output_size(ctx, in_h, 2)
    check_allocation(ctx.code, (x.shape[0], out_h, out_w, x.shape[3]), np.float32)
    y0, y1, dy = _taps(out_h, in_h, align, half)
    x0, x1, dx = _taps(out_w, in_w, align, half)
    one = np.float32(1)
    dy = dy[None, :, None, None]
    dx = dx[None, None, :, None]
    v = x.astype(np.float32)
    rows0, rows1 = v[:, y0], v[:, y1]
    blended = (
        rows0[:, :, x0] * (one - dy) * (one - dx)
        + rows1[:, :, x0] * dy * (one - dx)
        + rows0[:, :, x1] * (one - dy) * dx
        + rows1[:, :, x1] * dy * dx
    )
    out_dtype = ctx.output_info(0).dtype
    if np.issubdtype(out_dtype, np.integer):
        limits = np.iinfo(out_dtype)
        blended = np.clip(np.trunc(blended), limits.min, limits.max)
    return [from_nhwc(blended.astype(out_dtype), nchw)]


# --- RESIZE_NEAREST_NEIGHBOR ------------------------------------------------------------


def _source_index(out_size: int, in_size: int, align: bool, half: bool) -> np.ndarray:
    """Source row (or column) of every output row, in the reference's float32 math."""
    if align and out_size > 1:
        scale = _F32(in_size - 1) / _F32(out_size - 1)
    else:
        scale = _F32(in_size) / _F32(out_size)
    position = np.arange(out_size, dtype=_F32)
    if half:
        position = position + _F32(0.5)
    coordinate = position * scale
    index = round_half_away(coordinate) if align else np.floor(coordinate)
    index = np.minimum(index.astype(np.int64), in_size - 1)
    return np.maximum(index, 0) if half else index


def _execute_nearest(ctx: ExecutionContext) -> list[np.ndarray]:
    nchw = _flag(ctx, _LAYOUT)
    align, half = _flag(ctx, _ALIGN_CORNERS), _flag(ctx, _HALF_PIXEL)
    if align and half:
        raise op_failed(ctx.code, "align_corners and half_pixel_centers cannot both be true")
    x = ctx.input(0)
    if x.ndim != 4:
        raise op_failed(ctx.code, f"the input must have rank 4, got {x.ndim}")
    x = to_nhwc(x, nchw)
    _, in_h, in_w, channels = x.shape
    if in_h <= 0 or in_w <= 0 or channels <= 0:
        raise op_failed(ctx.code, f"height, width and depth must be positive, got {x.shape}")
    out_w = _output_size(ctx, in_w, 1)
    out_h = _output_size(ctx, in_h, 2)
    check_allocation(ctx.code, (x.shape[0], out_h, out_w, x.shape[3]), x.dtype)
    rows = _source_index(out_h, in_h, align, half)
    cols = _source_index(out_w, in_w, align, half)
    result = x[:, rows][:, :, cols]
    return [from_nhwc(np.ascontiguousarray(result), nchw)]


register(OperationCode.RESIZE_BILINEAR, validate=_validate, execute=_execute_bilinear)
register(OperationCode.RESIZE_NEAREST_NEIGHBOR, validate=_validate, execute=_execute_nearest)
