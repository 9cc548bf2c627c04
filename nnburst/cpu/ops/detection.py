"""Box operations of detection models (NNAPI 1.2): AXIS_ALIGNED_BBOX_TRANSFORM,
BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS and DETECTION_POSTPROCESSING.

Boxes are float32 internally, whatever their operand type: quantized boxes
are TENSOR_QUANT16_ASYMM (or QUANT16_SYMM anchors) with scale 0.125, and are
converted to float32 and back the way the reference converts them
(``quantize_float32``), so a box lands on the same 1/8 pixel.

Non-max suppression is greedy and order-sensitive: the reference keeps the
candidates of one class in an array, repeatedly swaps the best remaining one
to the front (the first best on ties) and swaps suppressed ones to the back.
``_greedy_nms`` replays exactly that, so ties and the output order match; the
IoU tests of one round are vectorised.  Sorts the reference does with
``std::sort`` (unstable) are done stably here.

Output sizes of BOX_WITH_NMS_LIMIT and GENERATE_PROPOSALS depend on the data
(possibly zero boxes).  DETECTION_POSTPROCESSING has fixed-size outputs
padded with zeros plus a count of valid detections per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

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
    require_operand_rank,
)
from .requantization import dequantize, quantize_float32, same_quantization
from .window_geometry import to_nhwc

F32 = np.float32
_INT32 = OperandCode.TENSOR_INT32
_QUANT16 = OperandCode.TENSOR_QUANT16_ASYMM


# --------------------------------------------------------------- shared helpers


def _expect(
    sig: OperationSignature,
    inputs: Sequence[OperandCode],
    outputs: Sequence[OperandCode],
    names: Sequence[str],
) -> None:
    """Exact operand counts and types (``names`` name the inputs in messages)."""
    if len(sig.inputs) != len(inputs):
        raise sig.fail(f"expected {len(inputs)} inputs, got {len(sig.inputs)}")
    if len(sig.outputs) != len(outputs):
        raise sig.fail(f"expected {len(outputs)} outputs, got {len(sig.outputs)}")
    for kind, infos, codes in (("input", sig.inputs, inputs), ("output", sig.outputs, outputs)):
        for i, (info, code) in enumerate(zip(infos, codes)):
            if info.code != code:
                name = f" ({names[i]})" if kind == "input" else ""
                raise sig.fail(f"{kind} {i}{name} has type {info.code.name}; expected {code.name}")


def _check_eighth(sig: OperationSignature, info: OperandInfo, name: str) -> None:
    """Quantized box coordinates use scale 0.125 and zero point 0."""
    if np.float32(info.scale) != np.float32(0.125) or info.zero_point != 0:
        raise sig.fail(
            f"{name} must have scale 0.125 and zero point 0, got {info.scale} and {info.zero_point}"
        )


def _as_float(values: np.ndarray, info: OperandInfo) -> np.ndarray:
    """float32 real values of a float or quantized tensor (the reference's conversion)."""
    if info.code in (*QUANT8_ASYMM_CODES, _QUANT16, OperandCode.TENSOR_QUANT16_SYMM):
        return dequantize(values, info)
    return values.astype(np.float32)


def _from_float(values: np.ndarray, info: OperandInfo) -> np.ndarray:
    """float32 values written to an output of any float or quantized type."""
    if info.code in FLOAT_TENSOR_CODES:
        return values.astype(info.dtype)
    return quantize_float32(values, info)


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Intersection over union of each of ``boxes`` with ``box`` ([x1, y1, x2, y2]), float32."""
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    area_box = (box[2] - box[0]) * (box[3] - box[1])
    w = np.maximum(np.minimum(boxes[:, 2], box[2]) - np.maximum(boxes[:, 0], box[0]), F32(0))
    h = np.maximum(np.minimum(boxes[:, 3], box[3]) - np.maximum(boxes[:, 1], box[1]), F32(0))
    inter = w * h
    with np.errstate(all="ignore"):
        return inter / (area + area_box - inter)


#: Given (candidate indices, their IoU with the box just selected), return which
#: candidates are suppressed; may lower their scores first (soft NMS).
Suppress = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _greedy_nms(
    scores: np.ndarray, boxes: np.ndarray, candidates: Sequence[int], limit: int, suppress: Suppress
) -> list[int]:
    """Select up to ``limit`` (all when negative) of ``candidates``, best score first.

    ``scores`` and ``boxes`` are indexed by candidate index.  Each round the
    first best remaining candidate is swapped to the front and every other
    remaining candidate is either kept or swapped to the back, exactly like the
    reference's in-place loop, so the next round sees the same order.
    """
    order = list(candidates)
    start, end = 0, len(order)
    if limit < 0:
        limit = end
    while start < end and start < limit:
        best = start + int(np.argmax(scores[np.asarray(order[start:end])]))
        order[start], order[best] = order[best], order[start]
        rest = np.asarray(order[start + 1 : end], dtype=np.int64)
        if rest.size:
            gone = set(rest[suppress(rest, _iou(boxes[order[start]], boxes[rest]))].tolist())
            i = start + 1
            while i < end:
                if order[i] in gone:
                    end -= 1
                    order[i], order[end] = order[end], order[i]
                else:
                    i += 1
        start += 1
    return order[:start]


def _hard(threshold: float) -> Suppress:
    return lambda _, iou: iou >= F32(threshold)


def _by_score(indices: Sequence[int] | np.ndarray, scores: np.ndarray) -> list[int]:
    """Indices sorted by descending score (stable)."""
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size == 0:
        return []
    return idx[np.argsort(-scores[idx], kind="stable")].tolist()


def _transform(boxes: np.ndarray, deltas: np.ndarray, image: np.ndarray) -> np.ndarray:
    """Apply [dx, dy, dw, dh] deltas to corner boxes and clip to the image, in float32.

    ``boxes`` [M, 4], ``deltas`` [M, K, 4], ``image`` [M, 2] = (height, width).
    """
    w = (boxes[:, 2] - boxes[:, 0])[:, None]
    h = (boxes[:, 3] - boxes[:, 1])[:, None]
    cx = ((boxes[:, 0] + boxes[:, 2]) / F32(2))[:, None]
    cy = ((boxes[:, 1] + boxes[:, 3]) / F32(2))[:, None]
    with np.errstate(over="ignore"):
        new_w = np.exp(deltas[..., 2]) * w
        new_h = np.exp(deltas[..., 3]) * h
    new_x = cx + deltas[..., 0] * w
    new_y = cy + deltas[..., 1] * h
    img_h, img_w = image[:, 0, None], image[:, 1, None]
    zero = F32(0)
    out = np.stack(
        [
            np.minimum(np.maximum(new_x - new_w / F32(2), zero), img_w),
            np.minimum(np.maximum(new_y - new_h / F32(2), zero), img_h),
            np.minimum(np.maximum(new_x + new_w / F32(2), zero), img_w),
            np.minimum(np.maximum(new_y + new_h / F32(2), zero), img_h),
        ],
        axis=-1,
    )
    return out.astype(np.float32)


def _require_ordered(code: OperationCode, boxes: np.ndarray, what: str) -> None:
    bad = (boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3])
    if bad.any():
        i = int(np.argmax(bad))
        raise op_failed(code, f"{what} {i} {boxes[i].tolist()} has x2 < x1 or y2 < y1")


# --------------------------------------------------------------- AXIS_ALIGNED_BBOX_TRANSFORM


def _validate_bbox(sig: OperationSignature) -> None:
    if not sig.inputs:
        raise sig.fail("expected 4 inputs, got 0")
    roi = sig.inputs[0]
    names = ("rois", "deltas", "batch_indices", "image_info")
    if roi.code in FLOAT_TENSOR_CODES:
        _expect(sig, (roi.code, roi.code, _INT32, roi.code), (roi.code,), names)
    elif roi.code == _QUANT16:
        delta = sig.inputs[1].code if len(sig.inputs) > 1 else None
        if delta not in QUANT8_ASYMM_CODES:
            raise sig.fail(
                "input 1 (deltas) must be TENSOR_QUANT8_ASYMM(_SIGNED) for quantized rois"
            )
        _expect(sig, (_QUANT16, delta, _INT32, _QUANT16), (_QUANT16,), names)
        _check_eighth(sig, roi, "rois")
        _check_eighth(sig, sig.inputs[3], "image_info")
        _check_eighth(sig, sig.outputs[0], "output")
    else:
        raise sig.fail(f"input 0 (rois) has unsupported type {roi.code.name}")
    for i, rank in enumerate((2, 2, 1, 2)):
        require_operand_rank(sig, i, (rank,), names[i])
    require_operand_rank(sig, 0, (2,), "output", output=True)
    if known_dim(roi, 1) not in (None, 4):
        raise sig.fail(f"rois have {known_dim(roi, 1)} columns; expected 4")
    width = known_dim(sig.inputs[1], 1)
    if width is not None and width % 4:
        raise sig.fail(f"deltas have {width} columns; expected a multiple of 4")
    if known_dim(sig.inputs[3], 1) not in (None, 2):
        raise sig.fail("image_info must be [batches, 2]")


def _execute_bbox(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    rois, deltas, batches, image = (ctx.input(i) for i in range(4))
    batches = batches.reshape(-1)
    if (
        rois.ndim != 2
        or rois.shape[1] != 4
        or deltas.ndim != 2
        or deltas.shape[1] % 4
        or deltas.shape[1] == 0
        or deltas.shape[0] != rois.shape[0]
        or batches.shape[0] != rois.shape[0]
        or image.ndim != 2
        or image.shape[1] != 2
        or image.shape[0] == 0
    ):
        raise op_failed(
            ctx.code,
            f"shapes rois {rois.shape}, deltas {deltas.shape}, batch "
            f"indices {batches.shape}, image_info {image.shape} do not agree",
        )
    boxes = _as_float(rois, sig.inputs[0])
    if ((batches < 0) | (batches >= image.shape[0])).any():
        raise op_failed(ctx.code, f"batch index out of range [0, {image.shape[0]})")
    _require_ordered(ctx.code, boxes, "roi")
    d = _as_float(deltas, sig.inputs[1]).reshape(rois.shape[0], deltas.shape[1] // 4, 4)
    sizes = _as_float(image, sig.inputs[3])[batches]
    out = _transform(boxes, d, sizes).reshape(deltas.shape)
    return [_from_float(out, ctx.output_info(0))]


# --------------------------------------------------------------- BOX_WITH_NMS_LIMIT

_NMS_NAMES = (
    "scores",
    "rois",
    "batch_indices",
    "score_threshold",
    "max_detections",
    "nms_kernel",
    "iou_threshold",
    "sigma",
    "nms_score_threshold",
)


def _validate_box_nms(sig: OperationSignature) -> None:
    if not sig.inputs:
        raise sig.fail("expected 9 inputs, got 0")
    score = sig.inputs[0]
    i32 = OperandCode.INT32
    if score.code in FLOAT_TENSOR_CODES:
        f = float_scalar_code(score.code)
        _expect(
            sig,
            (score.code, score.code, _INT32, f, i32, i32, f, f, f),
            (score.code, score.code, _INT32, _INT32),
            _NMS_NAMES,
        )
    elif score.code in QUANT8_ASYMM_CODES:
        f = OperandCode.FLOAT32
        _expect(
            sig,
            (score.code, _QUANT16, _INT32, f, i32, i32, f, f, f),
            (score.code, _QUANT16, _INT32, _INT32),
            _NMS_NAMES,
        )
        _check_eighth(sig, sig.inputs[1], "rois")
        _check_eighth(sig, sig.outputs[1], "output rois")
        if not same_quantization(score, sig.outputs[0]):
            raise sig.fail("output scores must have the input scores' scale and zero point")
    else:
        raise sig.fail(f"input 0 (scores) has unsupported type {score.code.name}")
    for i, rank in enumerate((2, 2, 1)):
        require_operand_rank(sig, i, (rank,), _NMS_NAMES[i])
    for i, rank in enumerate((1, 2, 1, 1)):
        require_operand_rank(sig, i, (rank,), f"output {i}", output=True)
    classes, width = known_dim(score, 1), known_dim(sig.inputs[1], 1)
    if classes is not None and classes < 2:
        raise sig.fail(f"scores have {classes} classes; at least 2 (background + 1) are needed")
    if classes is not None and width is not None and width != 4 * classes:
        raise sig.fail(f"rois have {width} columns; expected 4 x {classes} classes")
    kernel = constant_scalar(sig, 5)
    if kernel is not None and kernel not in (0, 1, 2):
        raise sig.fail(f"nms_kernel is {kernel}; expected 0 (hard), 1 (linear) or 2 (gaussian)")


def _soft(
    kernel: int, iou_threshold: float, sigma: float, scores: np.ndarray, score_threshold: float
) -> Suppress:
    """Lower the candidates' scores by the NMS kernel, then drop those below the threshold."""
    thr, sig_, low = F32(iou_threshold), F32(sigma), F32(score_threshold)

    def suppress(rest: np.ndarray, iou: np.ndarray) -> np.ndarray:
        if kernel == 0:
            factor = np.where(iou < thr, F32(1), F32(0))
        elif kernel == 1:
            factor = np.where(iou < thr, F32(1), F32(1) - iou)
        else:
            with np.errstate(all="ignore"):
                factor = np.exp(-iou * iou / sig_)
        scores[rest] = scores[rest] * factor.astype(np.float32)
        return scores[rest] < low

    return suppress


def _execute_box_nms(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    scores_in, rois, batches = ctx.input(0), ctx.input(1), ctx.input(2).reshape(-1)
    if scores_in.ndim != 2 or rois.ndim != 2:
        raise op_failed(ctx.code, "scores and rois must be 2-D")
    num_rois, classes = scores_in.shape
    if rois.shape != (num_rois, 4 * classes) or batches.shape != (num_rois,) or classes < 2:
        raise op_failed(
            ctx.code,
            f"shapes scores {scores_in.shape}, rois {rois.shape}, batch "
            f"indices {batches.shape} do not agree",
        )
    score_threshold, max_detections = float(ctx.scalar(3)), int(ctx.scalar(4))
    kernel = int(ctx.scalar(5))
    if kernel not in (0, 1, 2):
        raise op_failed(ctx.code, f"unsupported NMS kernel {kernel}")
    iou_threshold, sigma, nms_threshold = (float(ctx.scalar(i)) for i in (6, 7, 8))

    scores = _as_float(scores_in, sig.inputs[0]).reshape(-1)  # lowered in place by soft NMS
    boxes = _as_float(rois, sig.inputs[1]).reshape(-1, 4)  # box of (roi b, class c) = b*C + c
    suppress = _soft(kernel, iou_threshold, sigma, scores, nms_threshold)
    picked: list[int] = []  # flat (roi * classes + class) indices
    out_batches: list[int] = []
    start = 0
    while start < num_rois:  # boxes of one batch are consecutive
        stop = start + 1
        while stop < num_rois and batches[stop] == batches[start]:
            stop += 1
        count = stop - start
        # The reference checks the first `count` boxes of the batch's block.
        _require_ordered(ctx.code, boxes[start * classes : start * classes + count], "roi")
        kept: list[int] = []
        for c in range(1, classes):  # class 0 is background
            cand = [
                b * classes + c
                for b in range(start, stop)
                if scores[b * classes + c] > F32(score_threshold)
            ]
            kept += _greedy_nms(scores, boxes, cand, max_detections, suppress)
        kept = _by_score(kept, scores)
        if 0 <= max_detections < len(kept):
            kept = kept[:max_detections]
        kept.sort(key=lambda i: (i % classes, -float(scores[i])))
        picked += kept
        out_batches += [int(batches[start])] * len(kept)
        start = stop

    idx = np.asarray(picked, dtype=np.int64)
    out_scores = _from_float(scores[idx], ctx.output_info(0))
    out_rois = rois.reshape(-1, 4)[idx].astype(ctx.output_info(1).dtype)  # copied raw
    return [
        out_scores,
        out_rois.reshape(-1, 4),
        (idx % classes).astype(np.int32),
        np.asarray(out_batches, dtype=np.int32),
    ]


# --------------------------------------------------------------- GENERATE_PROPOSALS

_GP_NAMES = (
    "scores",
    "deltas",
    "anchors",
    "image_info",
    "height_ratio",
    "width_ratio",
    "pre_nms_max",
    "post_nms_max",
    "iou_threshold",
    "min_size",
    "layout",
)


def _validate_proposals(sig: OperationSignature) -> None:
    if not sig.inputs:
        raise sig.fail("expected 11 inputs, got 0")
    score = sig.inputs[0]
    i32, boolean = OperandCode.INT32, OperandCode.BOOL
    if score.code in FLOAT_TENSOR_CODES:
        t, f = score.code, float_scalar_code(score.code)
        _expect(sig, (t, t, t, t, f, f, i32, i32, f, f, boolean), (t, t, _INT32), _GP_NAMES)
    elif score.code in QUANT8_ASYMM_CODES:
        t, f = score.code, OperandCode.FLOAT32
        _expect(
            sig,
            (t, t, OperandCode.TENSOR_QUANT16_SYMM, _QUANT16, f, f, i32, i32, f, f, boolean),
            (t, _QUANT16, _INT32),
            _GP_NAMES,
        )
        if np.float32(sig.inputs[2].scale) != np.float32(0.125):
            raise sig.fail(f"anchors must have scale 0.125, got {sig.inputs[2].scale}")
        _check_eighth(sig, sig.inputs[3], "image_info")
        _check_eighth(sig, sig.outputs[1], "output rois")
        if not same_quantization(score, sig.outputs[0]):
            raise sig.fail("output scores must have the input scores' scale and zero point")
    else:
        raise sig.fail(f"input 0 (scores) has unsupported type {score.code.name}")
    for i, rank in enumerate((4, 4, 2, 2)):
        require_operand_rank(sig, i, (rank,), _GP_NAMES[i])
    for i, rank in enumerate((1, 2, 1)):
        require_operand_rank(sig, i, (rank,), f"output {i}", output=True)
    if known_dim(sig.inputs[2], 1) not in (None, 4):
        raise sig.fail("anchors must be [num_anchors, 4]")
    if known_dim(sig.inputs[3], 1) not in (None, 2):
        raise sig.fail("image_info must be [batches, 2]")


def _execute_proposals(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    nchw = bool(ctx.scalar(10))
    scores_in, deltas_in = ctx.input(0), ctx.input(1)
    if scores_in.ndim != 4 or deltas_in.ndim != 4:
        raise op_failed(ctx.code, "scores and deltas must be 4-D")
    scores = _as_float(to_nhwc(scores_in, nchw), sig.inputs[0])
    deltas = _as_float(to_nhwc(deltas_in, nchw), sig.inputs[1])
    anchors = _as_float(ctx.input(2), sig.inputs[2])
    image = _as_float(ctx.input(3), sig.inputs[3])
    n, height, width, num_anchors = scores.shape
    if (
        deltas.shape != (n, height, width, num_anchors * 4)
        or anchors.shape != (num_anchors, 4)
        or image.shape != (n, 2)
    ):
        raise op_failed(
            ctx.code,
            f"shapes scores {scores.shape}, deltas {deltas.shape}, anchors "
            f"{anchors.shape}, image_info {image.shape} do not agree",
        )
    stride_h, stride_w = F32(ctx.scalar(4)), F32(ctx.scalar(5))
    pre_nms, post_nms = int(ctx.scalar(6)), int(ctx.scalar(7))
    iou_threshold, min_size = float(ctx.scalar(8)), F32(ctx.scalar(9))

    # Every anchor at every feature-map position, in NHWC order.
    shift_h = np.arange(height, dtype=np.float32) * stride_h
    shift_w = np.arange(width, dtype=np.float32) * stride_w
    shifts = np.zeros((height, width, 1, 4), dtype=np.float32)
    shifts[..., 0] = shifts[..., 2] = shift_w[None, :, None]
    shifts[..., 1] = shifts[..., 3] = shift_h[:, None, None]
    anchor_boxes = (anchors[None, None] + shifts).reshape(-1, 4)
    _require_ordered(ctx.code, anchor_boxes, "anchor")
    total = anchor_boxes.shape[0]

    out_scores: list[np.ndarray] = []
    out_rois: list[np.ndarray] = []
    out_batches: list[int] = []
    for b in range(n):
        boxes = _transform(
            anchor_boxes, deltas[b].reshape(total, 1, 4), np.broadcast_to(image[b], (total, 2))
        )[:, 0]
        score = scores[b].reshape(-1)
        select = np.arange(total)
        if 0 < pre_nms < total:
            select = np.asarray(_by_score(select, score))[:pre_nms]
        w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
        keep = (
            (w > min_size)
            & (h > min_size)
            & (boxes[:, 0] + w / F32(2) < image[b, 1])
            & (boxes[:, 1] + h / F32(2) < image[b, 0])
        )
        select = select[keep[select]]
        chosen = _greedy_nms(
            score, boxes, select.tolist(), post_nms if post_nms > 0 else -1, _hard(iou_threshold)
        )
        out_scores.append(score[chosen])
        out_rois.append(boxes[chosen].reshape(-1, 4))
        out_batches += [b] * len(chosen)
    return [
        _from_float(np.concatenate(out_scores), ctx.output_info(0)),
        _from_float(np.concatenate(out_rois), ctx.output_info(1)),
        np.asarray(out_batches, dtype=np.int32),
    ]


# --------------------------------------------------------------- DETECTION_POSTPROCESSING

_DP_NAMES = (
    "scores",
    "deltas",
    "anchors",
    "scale_y",
    "scale_x",
    "scale_h",
    "scale_w",
    "use_regular_nms",
    "max_detections",
    "max_classes_per_detection",
    "max_detections_per_class",
    "score_threshold",
    "iou_threshold",
    "background_in_label",
)


def _dp_check(values: dict[str, Any], fail: Callable[[str], Exception]) -> None:
    """Range checks of whatever parameter values are known (None = unknown)."""

    def known(name: str) -> Any:
        return values.get(name)

    for name in ("scale_y", "scale_x", "scale_h", "scale_w"):
        if known(name) is not None and not known(name) > 0:
            raise fail(f"{name} is {known(name)}; it must be > 0")
    for name in ("score_threshold", "iou_threshold"):
        if known(name) is not None and not known(name) >= 0:
            raise fail(f"{name} is {known(name)}; it must be >= 0")
    counts = ["max_detections"]
    if known("use_regular_nms") is not None:
        counts.append(
            "max_detections_per_class" if known("use_regular_nms") else "max_classes_per_detection"
        )
    for name in counts:
        if known(name) is not None and known(name) <= 0:
            raise fail(f"{name} is {known(name)}; it must be > 0")


def _validate_detection(sig: OperationSignature) -> None:
    if not sig.inputs:
        raise sig.fail("expected 14 inputs, got 0")
    t = sig.inputs[0].code
    if t not in FLOAT_TENSOR_CODES:
        raise sig.fail(f"input 0 (scores) has unsupported type {t.name}")
    f, i32, boolean = float_scalar_code(t), OperandCode.INT32, OperandCode.BOOL
    _expect(
        sig,
        (t, t, t, f, f, f, f, boolean, i32, i32, i32, f, f, boolean),
        (t, t, _INT32, _INT32),
        _DP_NAMES,
    )
    for i, rank in enumerate((3, 3, 2)):
        require_operand_rank(sig, i, (rank,), _DP_NAMES[i])
    for i, rank in enumerate((2, 3, 2, 1)):
        require_operand_rank(sig, i, (rank,), f"output {i}", output=True)
    _dp_check(
        {name: constant_scalar(sig, i) for i, name in enumerate(_DP_NAMES) if i >= 3}, sig.fail
    )
    classes, encoding = known_dim(sig.inputs[0], 2), known_dim(sig.inputs[1], 2)
    if classes is not None and classes < 2:
        raise sig.fail(f"scores have {classes} classes; at least 2 (background + 1) are needed")
    if encoding is not None and encoding < 4:
        raise sig.fail(f"box encoding length {encoding} is below 4")
    if known_dim(sig.inputs[2], 1) not in (None, 4):
        raise sig.fail("anchors must be [num_anchors, 4]")


def _execute_detection(ctx: ExecutionContext) -> list[np.ndarray]:
    values = {name: ctx.scalar(i) for i, name in enumerate(_DP_NAMES) if i >= 3}
    fail = ctx.fail
    _dp_check(values, fail)
    scores = ctx.input(0).astype(np.float32)
    deltas = ctx.input(1).astype(np.float32)
    anchors = ctx.input(2).astype(np.float32)
    if scores.ndim != 3 or deltas.ndim != 3 or anchors.ndim != 2:
        raise fail("scores, deltas and anchors must be 3-D, 3-D and 2-D")
    n, num_anchors, classes = scores.shape
    if (
        deltas.shape[:2] != (n, num_anchors)
        or deltas.shape[2] < 4
        or anchors.shape != (num_anchors, 4)
        or classes < 2
    ):
        raise fail(
            f"shapes scores {scores.shape}, deltas {deltas.shape}, anchors "
            f"{anchors.shape} do not agree"
        )
    sy, sx, sh, sw = (F32(values[k]) for k in ("scale_y", "scale_x", "scale_h", "scale_w"))
    regular = bool(values["use_regular_nms"])
    max_det = int(values["max_detections"])
    max_classes = int(values["max_classes_per_detection"])
    max_per_class = int(values["max_detections_per_class"])
    threshold = F32(values["score_threshold"])
    suppress = _hard(float(values["iou_threshold"]))
    label_shift = 0 if values["background_in_label"] else 1

    # Decode: anchors are [ctr_y, ctr_x, h, w], deltas [dy, dx, dh, dw]; boxes [y1, x1, y2, x2].
    d = deltas[..., :4]
    y = anchors[:, 0] + anchors[:, 2] * d[..., 0] / sy
    x = anchors[:, 1] + anchors[:, 3] * d[..., 1] / sx
    with np.errstate(over="ignore"):
        half_h = anchors[:, 2] * np.exp(d[..., 2] / sh) * F32(0.5)
        half_w = anchors[:, 3] * np.exp(d[..., 3] / sw) * F32(0.5)
    decoded = np.stack([y - half_h, x - half_w, y + half_h, x + half_w], axis=-1)
    # IoU is symmetric in the two axes, so [y1, x1, y2, x2] boxes work as corners as they are.

    out_classes = min(classes - 1, max_classes)
    size = max_det if regular else max_det * max(out_classes, 0)
    out_scores = np.zeros((n, size), dtype=np.float32)
    out_boxes = np.zeros((n, size, 4), dtype=np.float32)
    out_labels = np.zeros((n, size), dtype=np.int32)
    counts = np.zeros((n,), dtype=np.int32)
    for b in range(n):
        score, boxes = scores[b], decoded[b]
        if regular:
            flat = score.reshape(-1)  # index a*C + c
            expanded = np.repeat(boxes, classes, axis=0)
            kept: list[int] = []
            for c in range(1, classes):
                cand = [
                    a * classes + c for a in range(num_anchors) if flat[a * classes + c] > threshold
                ]
                kept += _greedy_nms(flat, expanded, cand, max_per_class, suppress)
            kept = _by_score(kept, flat)[:max_det]
            k = len(kept)
            idx = np.asarray(kept, dtype=np.int64)
            out_scores[b, :k] = flat[idx]
            out_boxes[b, :k] = boxes[idx // classes]
            out_labels[b, :k] = idx % classes - label_shift
            counts[b] = k
        else:
            best = score[:, 1:].max(axis=1)
            cand = [a for a in range(num_anchors) if best[a] > threshold]
            kept = _greedy_nms(best, boxes, cand, max_det, suppress)
            for j, a in enumerate(kept):
                order = np.argsort(-score[a, 1:], kind="stable")[:out_classes] + 1
                rows = slice(j * out_classes, (j + 1) * out_classes)
                out_scores[b, rows] = score[a, order]
                out_boxes[b, rows] = boxes[a]
                out_labels[b, rows] = order - label_shift
            counts[b] = len(kept) * out_classes
    dtype = ctx.output_info(0).dtype
    return [
        out_scores.astype(dtype),
        out_boxes.astype(ctx.output_info(1).dtype),
        out_labels,
        counts,
    ]


register(OperationCode.AXIS_ALIGNED_BBOX_TRANSFORM, validate=_validate_bbox, execute=_execute_bbox)
register(OperationCode.BOX_WITH_NMS_LIMIT, validate=_validate_box_nms, execute=_execute_box_nms)
register(OperationCode.GENERATE_PROPOSALS, validate=_validate_proposals, execute=_execute_proposals)
register(
    OperationCode.DETECTION_POSTPROCESSING, validate=_validate_detection, execute=_execute_detection
)
