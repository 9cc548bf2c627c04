"""ROI_ALIGN, ROI_POOLING and HEATMAP_MAX_KEYPOINT (NNAPI 1.2).

Regions of interest are ``[x1, y1, x2, y2]`` in image coordinates; a height
and width ratio maps them onto the feature map.  The coordinate arithmetic is
done in float32, step for step as the reference does it, because sampling
positions, bin edges and (for quantized ROI_ALIGN) the rounded bilinear
weights all depend on float32 rounding.  Float data is then accumulated in
float64; quantized ROI_ALIGN accumulates integers and requantizes with the
reference's fixed-point multiplier, so it matches bit for bit.

The loops are over regions (and, for ROI_POOLING, over the output bins of one
region); everything inside a region is vectorised.
"""

from __future__ import annotations

import numpy as np

from ...codes import OperandCode, OperationCode
from ...operands import OperandInfo
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    constant_scalar,
    float_scalar_code,
    known_dim,
    op_failed,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
)
from .fixed_point import multiply_by_quantized_multiplier, quantize_multiplier, round_half_away
from .requantization import dequantize, quantize_float32, quantized_range, same_quantization
from .window_geometry import from_nhwc, to_nhwc

_QUANT16 = OperandCode.TENSOR_QUANT16_ASYMM
#: ROI_ALIGN's quantized bilinear weights are integers in units of 1/255.
_WEIGHT_SCALE = np.float32(1.0) / np.float32(255.0)

F32 = np.float32


def _check_box_quantization(sig: OperationSignature, info: OperandInfo, name: str) -> None:
    """Quantized boxes are TENSOR_QUANT16_ASYMM with scale 0.125 and zero point 0."""
    if info.code == _QUANT16 and (np.float32(info.scale) != np.float32(0.125) or info.zero_point):
        raise sig.fail(
            f"{name} must have scale 0.125 and zero point 0, got {info.scale} and {info.zero_point}"
        )


def _validate_roi(sig: OperationSignature, count: int) -> OperandInfo:
    """Operand checks shared by ROI_ALIGN (10 inputs) and ROI_POOLING (8 inputs)."""
    require_operand_counts(sig, (count,), 1)
    inp = require_operand_type(sig, 0, (*FLOAT_TENSOR_CODES, *QUANT8_ASYMM_CODES), "input")
    quantized = inp.code in QUANT8_ASYMM_CODES
    rois = require_operand_type(sig, 1, (_QUANT16,) if quantized else (inp.code,), "rois")
    require_operand_type(sig, 2, (OperandCode.TENSOR_INT32,), "batch_indices")
    require_operand_type(sig, 0, (inp.code,), "output", output=True)
    scalar_float = OperandCode.FLOAT32 if quantized else float_scalar_code(inp.code)
    names = ["output_height", "output_width", "height_ratio", "width_ratio"]
    types = [OperandCode.INT32, OperandCode.INT32, scalar_float, scalar_float]
    if count == 10:
        names += ["height_sampling_ratio", "width_sampling_ratio"]
        types += [OperandCode.INT32, OperandCode.INT32]
    for i, (name, code) in enumerate(zip(names, types), start=3):
        require_operand_type(sig, i, (code,), name)
    require_operand_type(sig, count - 1, (OperandCode.BOOL,), "layout")
    require_operand_rank(sig, 0, (4,), "input")
    require_operand_rank(sig, 1, (2,), "rois")
    require_operand_rank(sig, 2, (1,), "batch_indices")
    require_operand_rank(sig, 0, (4,), "output", output=True)
    if known_dim(rois, 1) not in (None, 4):
        raise sig.fail(f"rois have {known_dim(rois, 1)} columns; expected 4")
    _check_box_quantization(sig, rois, "rois")
    if quantized and (inp.scale <= 0 or sig.outputs[0].scale <= 0):
        raise sig.fail("quantized input and output need a positive scale")
    for i, name in enumerate(names, start=3):
        value = constant_scalar(sig, i)
        if value is None:
            continue
        if "sampling" in name and value < 0:
            raise sig.fail(f"{name} is {value}; it must be >= 0 (0 means adaptive)")
        if "sampling" not in name and not value > 0:
            raise sig.fail(f"{name} is {value}; it must be > 0")
    return inp


def _scalars(ctx: ExecutionContext) -> tuple[int, int, float, float]:
    """Output size and (positive) ratios, checked at execution."""
    out_h, out_w = int(ctx.scalar(3)), int(ctx.scalar(4))
    ratio_h, ratio_w = float(ctx.scalar(5)), float(ctx.scalar(6))
    if out_h <= 0 or out_w <= 0 or not (ratio_h > 0 and ratio_w > 0):
        raise op_failed(
            ctx.code,
            f"output size {out_h}x{out_w} and ratios {ratio_h}, {ratio_w} must all be positive",
        )
    return out_h, out_w, ratio_h, ratio_w


def _regions(
    ctx: ExecutionContext, ratio_h: float, ratio_w: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(feature map NHWC, float32 rois scaled to the map [R, 4], batch index per roi).

    Fails on a batch index out of range, a negative, non-finite or out-of-map
    corner, or a region with x2 < x1 or y2 < y1, as the reference does.
    """
    sig = ctx.signature
    nchw = bool(ctx.scalar(len(ctx.inputs) - 1))
    fmap = ctx.input(0)
    if fmap.ndim != 4:
        raise op_failed(ctx.code, f"input has rank {fmap.ndim}; expected 4")
    fmap = to_nhwc(fmap, nchw)
    rois = ctx.input(1)
    batches = ctx.input(2).reshape(-1)
    if rois.ndim != 2 or rois.shape[1] != 4 or batches.shape[0] != rois.shape[0]:
        raise op_failed(
            ctx.code,
            f"rois {rois.shape} and batch indices {batches.shape} must be "
            "[num_rois, 4] and [num_rois]",
        )
    n, height, width, _ = fmap.shape
    if min(n, height, width) <= 0:
        raise op_failed(ctx.code, f"empty feature map {fmap.shape}")
    if sig.inputs[1].code == _QUANT16:
        boxes = rois.astype(np.float32) * F32(0.125)  # convertQuantToFloat32
    else:
        boxes = rois.astype(np.float32)
    scale = np.array([F32(1) / F32(ratio_w), F32(1) / F32(ratio_h)] * 2, dtype=np.float32)
    scaled = boxes * scale
    limits = np.array([width, height, width, height], dtype=np.float32)
    bad = (
        (batches < 0)
        | (batches >= n)
        | ~np.isfinite(boxes).all(axis=1)
        | (boxes < 0).any(axis=1)
        | (scaled > limits).any(axis=1)
        | (boxes[:, 0] > boxes[:, 2])
        | (boxes[:, 1] > boxes[:, 3])
    )
    if bad.any():
        r = int(np.argmax(bad))
        raise op_failed(
            ctx.code,
            f"roi {r} {boxes[r].tolist()} (batch {int(batches[r])}) is "
            f"outside the {n}x{height}x{width} feature map or inverted",
        )
    return fmap, scaled, batches.astype(np.int64)


# --------------------------------------------------------------- ROI_ALIGN


def _validate_align(sig: OperationSignature) -> None:
    _validate_roi(sig, 10)


def _axis_samples(
    start: np.float32, end: np.float32, out: int, ratio: int, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Sampling positions along one axis, as [out, ratio] (low index, high index, frac, 1-frac).

    Also returns the sampling ratio used (the adaptive ``ceil(bin size)`` when 0).
    """
    length = max(F32(end - start), F32(1.0))
    step = F32(length / F32(out))
    if ratio <= 0:
        ratio = int(np.ceil(step))
    bin_size = F32(step / F32(ratio))
    bins = step * np.arange(out, dtype=np.float32)[:, None] + start
    pos = (bins + bin_size / F32(2)) + bin_size * np.arange(ratio, dtype=np.float32)[None, :]
    low = np.floor(pos).astype(np.int64)
    frac = (pos - low.astype(np.float32)).astype(np.float32)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    frac = np.where(edge, F32(0), frac).astype(np.float32)
    return low, high, frac, (F32(1) - frac).astype(np.float32), ratio


def _execute_align(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    out_h, out_w, ratio_h, ratio_w = _scalars(ctx)
    sampling_h, sampling_w = int(ctx.scalar(7)), int(ctx.scalar(8))
    if sampling_h < 0 or sampling_w < 0:
        raise op_failed(ctx.code, "sampling ratios must be >= 0")
    nchw = bool(ctx.scalar(9))
    fmap, scaled, batches = _regions(ctx, ratio_h, ratio_w)
    _, height, width, depth = fmap.shape
    inp, out = sig.inputs[0], ctx.output_info(0)
    quantized = inp.code in QUANT8_ASYMM_CODES
    values = fmap.astype(np.int64) - inp.zero_point if quantized else fmap.astype(np.float64)
    result = np.zeros(
        (scaled.shape[0], out_h, out_w, depth), dtype=np.int64 if quantized else np.float64
    )
    lo, hi = quantized_range(out) if quantized else (0, 0)
    for r, (x1, y1, x2, y2) in enumerate(scaled):
        image = values[batches[r]]
        ya, yb, dy1, dy2, ratio_y = _axis_samples(y1, y2, out_h, sampling_h, height)
        xa, xb, dx1, dx2, ratio_x = _axis_samples(x1, x2, out_w, sampling_w, width)
        acc = np.zeros((out_h, out_w, depth), dtype=result.dtype)
        # One sampling row at a time: arrays are [out_h, out_w, ratio_x(, depth)].
        for k in range(ratio_y):
            rows_a, rows_b = ya[:, k, None, None], yb[:, k, None, None]
            wy_a, wy_b = dy2[:, k, None, None], dy1[:, k, None, None]
            corners = (
                (rows_a, xa, wy_a * dx2),
                (rows_a, xb, wy_a * dx1),
                (rows_b, xa, wy_b * dx2),
                (rows_b, xb, wy_b * dx1),
            )
            for rows, cols, weight in corners:
                if quantized:  # weights rounded to units of 1/255 as the reference does
                    weight = round_half_away(weight / _WEIGHT_SCALE).astype(np.int64)
                acc += (weight[..., None] * image[rows, cols[None]]).sum(axis=2)
        count = ratio_y * ratio_x
        if quantized:
            real = F32(F32(F32(inp.scale) * _WEIGHT_SCALE) / F32(out.scale)) / F32(count)
            if not 0 <= real < 1:
                raise op_failed(ctx.code, f"requantization multiplier {real} is not below 1")
            m, shift = quantize_multiplier(float(real))
            raw = multiply_by_quantized_multiplier(acc, m, shift) + out.zero_point
            result[r] = np.clip(raw, lo, hi)
        else:
            result[r] = acc / count
    return [from_nhwc(result.astype(out.dtype), nchw)]


# --------------------------------------------------------------- ROI_POOLING


def _validate_pooling(sig: OperationSignature) -> None:
    inp = _validate_roi(sig, 8)
    if inp.code in QUANT8_ASYMM_CODES and not same_quantization(inp, sig.outputs[0]):
        raise sig.fail("output scale and zero point must equal the input's")


def _bin_edges(start: int, end: int, out: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer [start, end) of each bin along one axis (floor start, ceil end)."""
    length = F32(max(end - start + 1, 1))  # regions under one pixel count as one
    step = F32(length / F32(out))
    j = np.arange(out + 1, dtype=np.float32)
    edges = step * j + F32(start)
    lows = np.minimum(np.floor(edges[:-1]).astype(np.int64), size)
    highs = np.minimum(np.ceil(edges[1:]).astype(np.int64), size)
    return lows, highs


def _execute_pooling(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    out_h, out_w, ratio_h, ratio_w = _scalars(ctx)
    nchw = bool(ctx.scalar(7))
    fmap, scaled, batches = _regions(ctx, ratio_h, ratio_w)
    _, height, width, depth = fmap.shape
    inp = sig.inputs[0]
    empty = inp.zero_point if inp.code in QUANT8_ASYMM_CODES else 0
    result = np.empty((scaled.shape[0], out_h, out_w, depth), dtype=fmap.dtype)
    corners = round_half_away(scaled)  # std::round
    for r, (x1, y1, x2, y2) in enumerate(corners.astype(np.int64)):
        image = fmap[batches[r]]
        h_lo, h_hi = _bin_edges(int(y1), int(y2), out_h, height)
        w_lo, w_hi = _bin_edges(int(x1), int(x2), out_w, width)
        for i in range(out_h):
            for j in range(out_w):
                window = image[h_lo[i] : h_hi[i], w_lo[j] : w_hi[j]]
                if window.size:
                    result[r, i, j] = window.max(axis=(0, 1))
                else:
                    result[r, i, j] = empty
    return [from_nhwc(result.astype(ctx.output_info(0).dtype), nchw)]


# --------------------------------------------------------------- HEATMAP_MAX_KEYPOINT


def _validate_heatmap(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 2)
    heat = require_operand_type(sig, 0, (*FLOAT_TENSOR_CODES, *QUANT8_ASYMM_CODES), "heatmap")
    quantized = heat.code in QUANT8_ASYMM_CODES
    box_code = _QUANT16 if quantized else heat.code
    boxes = require_operand_type(sig, 1, (box_code,), "boxes")
    require_operand_type(sig, 2, (OperandCode.BOOL,), "layout")
    require_operand_type(sig, 0, (heat.code,), "scores", output=True)
    keypoints = require_operand_type(sig, 1, (box_code,), "keypoints", output=True)
    require_operand_rank(sig, 0, (4,), "heatmap")
    require_operand_rank(sig, 1, (2,), "boxes")
    require_operand_rank(sig, 0, (2,), "scores", output=True)
    require_operand_rank(sig, 1, (3,), "keypoints", output=True)
    _check_box_quantization(sig, boxes, "boxes")
    _check_box_quantization(sig, keypoints, "keypoints")
    if quantized and (heat.scale <= 0 or sig.outputs[0].scale <= 0):
        raise sig.fail("quantized heatmap and scores need a positive scale")
    if known_dim(boxes, 1) not in (None, 4):
        raise sig.fail(f"boxes have {known_dim(boxes, 1)} columns; expected 4")
    nchw = constant_scalar(sig, 2)
    if nchw is not None:
        size_h, size_w = known_dim(heat, 2 if nchw else 1), known_dim(heat, 3 if nchw else 2)
        if None not in (size_h, size_w) and size_h != size_w:
            raise sig.fail(f"heatmaps are {size_h}x{size_w}; they must be square")
        if size_w is not None and size_w < 2:
            raise sig.fail(f"heatmap size {size_w} is below 2")


def _solve_delta(
    grid: np.ndarray, max_score: np.ndarray, atol: float, rtol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quadratic (Taylor) refinement of each maximum from its 3x3 neighbourhood, in float32.

    Returns (delta_x, delta_y, refined score); where the Hessian is singular
    the maximum is kept as is.
    """
    g = grid
    two, half, quarter = F32(2), F32(2), F32(4)
    b0 = -(g[..., 1, 2] - g[..., 1, 0]) / half
    b1 = -(g[..., 2, 1] - g[..., 0, 1]) / half
    a00 = g[..., 1, 0] - two * g[..., 1, 1] + g[..., 1, 2]
    a01 = (g[..., 2, 2] - g[..., 2, 0] - g[..., 0, 2] + g[..., 0, 0]) / quarter
    a11 = g[..., 0, 1] - two * g[..., 1, 1] + g[..., 2, 1]
    cross = a00 * a11
    det = cross - a01 * a01
    solvable = ~(np.abs(det) < (F32(atol) + F32(rtol) * cross))
    with np.errstate(all="ignore"):
        d0 = (a11 * b0 - a01 * b1) / det
        d1 = (a00 * b1 - a01 * b0) / det
        biggest = np.maximum(np.abs(d0), np.abs(d1))
        clip = biggest > F32(1.5)
        factor = np.where(clip, F32(1.5) / biggest, F32(1)).astype(np.float32)
        d0 = np.where(clip, d0 * factor, d0)
        d1 = np.where(clip, d1 * factor, d1)
        score = (
            g[..., 1, 1]
            - b0 * d0
            - b1 * d1
            + ((a00 * d0 + a01 * d1) * d0 + (a01 * d0 + a11 * d1) * d1) / two
        )
    zero = F32(0)
    return (
        np.where(solvable, d0, zero).astype(np.float32),
        np.where(solvable, d1, zero).astype(np.float32),
        np.where(solvable, score, max_score).astype(np.float32),
    )


def _execute_heatmap(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    nchw = bool(ctx.scalar(2))
    heat, boxes = ctx.input(0), ctx.input(1)
    if heat.ndim != 4 or boxes.ndim != 2 or boxes.shape[1] != 4:
        raise op_failed(ctx.code, f"heatmap {heat.shape} / boxes {boxes.shape} have wrong rank")
    heat = to_nhwc(heat, nchw)
    num_boxes, size, size_w, keypoints = heat.shape
    if size != size_w or size < 2 or boxes.shape[0] != num_boxes:
        raise op_failed(
            ctx.code,
            f"heatmaps {heat.shape} must be square, at least 2x2, one per "
            f"box ({boxes.shape[0]} boxes)",
        )
    heat_info, box_info = sig.inputs[0], sig.inputs[1]
    if heat_info.code in QUANT8_ASYMM_CODES:
        heat = dequantize(heat, heat_info)
        boxes = dequantize(boxes, box_info)
    heat = heat.astype(np.float32)
    boxes = boxes.astype(np.float32)
    if ((boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3])).any():
        raise op_failed(ctx.code, "a box has x2 < x1 or y2 < y1")

    flat = heat.transpose(0, 3, 1, 2).reshape(num_boxes, keypoints, size * size)
    index = np.argmax(flat, axis=2)  # first maximum, as the reference's strict '<' scan
    max_score = np.take_along_axis(flat, index[..., None], axis=2)[..., 0]
    row, col = index // size, index % size
    offsets = np.arange(-1, 2)
    rows = row[..., None] + offsets
    cols = col[..., None] + offsets
    # Mirror out-of-range neighbours back inside (needs size >= 2).
    rows = np.where(rows < 0, 1, np.where(rows >= size, size - 2, rows))
    cols = np.where(cols < 0, 1, np.where(cols >= size, size - 2, cols))
    flat_index = rows[..., :, None] * size + cols[..., None, :]  # [B, K, 3, 3]
    grid = np.take_along_axis(flat, flat_index.reshape(num_boxes, keypoints, 9), axis=2)
    grid = grid.reshape(num_boxes, keypoints, 3, 3)
    tol = 1e-3 if heat_info.code == OperandCode.TENSOR_FLOAT16 else 1e-5
    dx, dy, score = _solve_delta(grid, max_score, tol, tol)

    x1, y1, x2, y2 = (boxes[:, i, None] for i in range(4))
    rel_x = (col.astype(np.float32) + dx + F32(0.5)) / F32(size)
    rel_y = (row.astype(np.float32) + dy + F32(0.5)) / F32(size)
    points = np.stack([rel_x * (x2 - x1) + x1, rel_y * (y2 - y1) + y1], axis=-1)
    score_info, point_info = ctx.output_info(0), ctx.output_info(1)
    if score_info.code in QUANT8_ASYMM_CODES:
        return [quantize_float32(score, score_info), quantize_float32(points, point_info)]
    return [score.astype(score_info.dtype), points.astype(point_info.dtype)]


register(OperationCode.ROI_ALIGN, validate=_validate_align, execute=_execute_align)
register(OperationCode.ROI_POOLING, validate=_validate_pooling, execute=_execute_pooling)
register(OperationCode.HEATMAP_MAX_KEYPOINT, validate=_validate_heatmap, execute=_execute_heatmap)
