"""RESIZE_NEAREST_NEIGHBOR (NNAPI 1.2; align_corners and half_pixel_centers 1.3).

The output size is given either as INT32 width/height or as FLOAT32 (FLOAT16
for float16 data) scale factors, ``floor(size * scale)`` in float32.  Each
output coordinate maps to a source index exactly as the reference computes
it in float32: ``scale = in/out`` (``(in-1)/(out-1)`` with align_corners),
the coordinate is ``x * scale`` (``(x + 0.5) * scale`` with half-pixel
centres), rounded half away from zero with align_corners and floored
otherwise, then clamped to the image.  The values are copied, so quantized
outputs keep the input's scale and zero point.  Zero batches are allowed.
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


def _validate(sig: OperationSignature) -> None:
    require_operand_counts(sig, (4, 5, 6), 1)
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


def _execute(ctx: ExecutionContext) -> list[np.ndarray]:
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


register(OperationCode.RESIZE_NEAREST_NEIGHBOR, validate=_validate, execute=_execute)
