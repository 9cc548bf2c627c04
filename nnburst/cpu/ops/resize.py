"""RESIZE_BILINEAR.

The output size comes from INT32 width/height or (NNAPI 1.2) FLOAT32/FLOAT16
scale factors, ``floor(size * scale)``.  Sampling follows the reference: the
source coordinate of output pixel ``y`` is ``y * in/out`` (or the align-corners
and half-pixel-centre variants of NNAPI 1.3), its floor and ceiling (clamped
to the image) are the two taps, and the four taps are blended in float32 in the
reference's order.  Quantized results are truncated back to the integer type,
as the reference's ``static_cast`` does.  NCHW data is transposed in and out.
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
    op_failed,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
)
from .window_geometry import from_nhwc, to_nhwc

_LAYOUT, _ALIGN_CORNERS, _HALF_PIXEL = 3, 4, 5


def _validate(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3, 4, 5, 6), 1)
    info = require_operand_type(sig, 0, FLOAT_TENSOR_CODES + QUANT8_ASYMM_CODES, "input")
    require_operand_type(sig, 0, (info.code,), "output", output=True)
    require_operand_rank(sig, 0, (4,), "input")
    scalar = sig.inputs[1].code
    by_scale = (
        OperandCode.FLOAT16 if info.code == OperandCode.TENSOR_FLOAT16 else OperandCode.FLOAT32
    )
    if scalar not in (OperandCode.INT32, by_scale):
        raise sig.fail(
            f"input 1 (output width) has type {scalar.name}; expected INT32 or {by_scale.name}"
        )
    require_operand_type(sig, 1, (scalar,), "output width / width scale")
    require_operand_type(sig, 2, (scalar,), "output height / height scale")
    for i, name in (
        (_LAYOUT, "layout"),
        (_ALIGN_CORNERS, "align_corners"),
        (_HALF_PIXEL, "half_pixel_centers"),
    ):
        if len(sig.inputs) > i:
            require_operand_type(sig, i, (OperandCode.BOOL,), name)
    for i in (1, 2):
        value = constant_scalar(sig, i)
        if value is not None and not value > 0:
            raise sig.fail(f"input {i} (output size or scale) must be positive, got {value}")
    if info.code in QUANT8_ASYMM_CODES:
        out = sig.outputs[0]
        if np.float32(out.scale) != np.float32(info.scale) or out.zero_point != info.zero_point:
            raise sig.fail("the output's scale and zero point must equal the input's")
    align, half = constant_scalar(sig, _ALIGN_CORNERS), constant_scalar(sig, _HALF_PIXEL)
    if align and half:
        raise sig.fail("align_corners and half_pixel_centers cannot both be true")


def _flag(ctx: ExecutionContext, index: int) -> bool:
    return len(ctx.inputs) > index and ctx.has_input(index) and bool(ctx.scalar(index))


def _output_size(ctx: ExecutionContext, in_size: int, index: int) -> int:
    if ctx.signature.inputs[index].code == OperandCode.INT32:
        size = int(ctx.scalar(index))
    else:
        size = math.floor(np.float32(in_size) * np.float32(ctx.scalar(index)))
    if size <= 0:
        raise op_failed(ctx.code, f"output size {size} must be positive")
    return size


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


def _execute(ctx: ExecutionContext) -> list[np.ndarray]:
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


register(OperationCode.RESIZE_BILINEAR, validate=_validate, execute=_execute)
