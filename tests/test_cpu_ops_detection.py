"""CPU driver: the detection operations: AXIS_ALIGNED_BBOX_TRANSFORM,
BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS and DETECTION_POSTPROCESSING.

Each is checked against an independent numpy computation written here from
the operation's definition (a plain greedy NMS, box decoding) and, where the
Android conformance specs publish values, against those known answers.
Validation rejections must be BAD_DATA; data errors at execution OP_FAILED.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.cpu.executor import PreparedModel
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.operands import OperandInfo

from .op_models import rejects, run
from .op_operands import boolean, const, f32, fails, fscalar, i32, info, quant

# --------------------------------------------------------------- AXIS_ALIGNED_BBOX_TRANSFORM


def naive_bbox_transform(
    rois: np.ndarray, deltas: np.ndarray, batches: np.ndarray, image: np.ndarray
) -> np.ndarray:
    out = np.zeros(deltas.shape)
    for r, (x1, y1, x2, y2) in enumerate(np.asarray(rois, np.float64)):
        h_img, w_img = image[batches[r]]
        w, h, cx, cy = x2 - x1, y2 - y1, (x1 + x2) / 2, (y1 + y2) / 2
        for c in range(deltas.shape[1] // 4):
            dx, dy, dw, dh = deltas[r, 4 * c : 4 * c + 4]
            nx, ny, nw, nh = cx + dx * w, cy + dy * h, math.exp(dw) * w, math.exp(dh) * h
            box = [nx - nw / 2, ny - nh / 2, nx + nw / 2, ny + nh / 2]
            limits = [w_img, h_img, w_img, h_img]
            out[r, 4 * c : 4 * c + 4] = [min(max(v, 0), m) for v, m in zip(box, limits)]
    return out


BBOX_ROIS = np.array(
    [
        [100, 150, 400, 430],
        [120, 60, 122, 61],
        [10, 20, 20, 50],
        [50, 120, 150, 250],
        [400, 100, 1000, 2000],
    ],
    np.float32,
)
BBOX_DELTAS = np.array(
    [
        0.2,
        0.2,
        0.1,
        0.1,
        0.3,
        -0.1,
        -0.2,
        0.1,
        -0.5,
        0.2,
        0.2,
        -0.5,
        -0.1,
        -0.1,
        2.5,
        3,
        -0.5,
        -0.5,
        1,
        1,
        0.5,
        0.5,
        -1.5,
        -1.2,
        0.2,
        0.2,
        -3,
        -4,
        1,
        -0.5,
        0.3,
        0.5,
        0.3,
        -0.2,
        1.1,
        -0.8,
        0.1,
        0.05,
        -0.5,
        -0.5,
    ],
    np.float32,
).reshape(5, 8)


def test_bbox_transform_float_and_quantized() -> None:
    batches = np.array([0, 1, 2, 2, 3], np.int32)
    image = np.array([[512, 512], [128, 256], [256, 256], [1024, 512]], np.float32)
    args = [f32(5, 4), f32(5, 8), info(T.TENSOR_INT32, 5), f32(4, 2)]
    got = run(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM, args, [f32(5, 8)], BBOX_ROIS, BBOX_DELTAS, batches, image
    )[0]
    # Known answer (first box, unclipped) and the definition everywhere.
    np.testing.assert_allclose(
        got[0, :4], [144.224350, 191.276062, 475.775635, 500.723938], rtol=1e-6
    )
    want = naive_bbox_transform(BBOX_ROIS, BBOX_DELTAS, batches, image)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    h = [
        info(T.TENSOR_FLOAT16, 5, 4),
        info(T.TENSOR_FLOAT16, 5, 8),
        info(T.TENSOR_INT32, 5),
        info(T.TENSOR_FLOAT16, 4, 2),
    ]
    got16 = run(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        h,
        [info(T.TENSOR_FLOAT16, 5, 8)],
        BBOX_ROIS.astype(np.float16),
        BBOX_DELTAS.astype(np.float16),
        batches,
        image.astype(np.float16),
    )[0]
    np.testing.assert_allclose(got16.astype(np.float32), want, rtol=5e-3, atol=0.5)
    q16 = dict(scale=0.125)
    qargs = [
        info(T.TENSOR_QUANT16_ASYMM, 5, 4, **q16),
        info(T.TENSOR_QUANT8_ASYMM_SIGNED, 5, 8, scale=0.05, zp=-2),
        info(T.TENSOR_INT32, 5),
        info(T.TENSOR_QUANT16_ASYMM, 4, 2, **q16),
    ]
    qd = quant(BBOX_DELTAS, 0.05, -2, np.int8)
    got = run(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        qargs,
        [info(T.TENSOR_QUANT16_ASYMM, 5, 8, **q16)],
        (BBOX_ROIS * 8).astype(np.uint16),
        qd,
        batches,
        (image * 8).astype(np.uint16),
    )[0]
    want = naive_bbox_transform(BBOX_ROIS, (qd.astype(np.float64) + 2) * 0.05, batches, image)
    np.testing.assert_allclose(
        got.astype(int), quant(want, 0.125, 0, np.uint16).astype(int), atol=1
    )


def test_bbox_transform_errors_and_zero_rois() -> None:
    args = [f32(0, 4), f32(0, 8), info(T.TENSOR_INT32, 0), f32(1, 2)]
    got = run(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        args,
        [f32(0, 8)],
        np.zeros((0, 4), np.float32),
        np.zeros((0, 8), np.float32),
        np.zeros(0, np.int32),
        np.array([[8, 8]], np.float32),
    )[0]
    assert got.shape == (0, 8)
    args = [f32(1, 4), f32(1, 4), info(T.TENSOR_INT32, 1), f32(1, 2)]
    fails(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        args,
        [f32(1, 4)],
        np.array([[1, 1, 2, 2]], np.float32),
        np.zeros((1, 4), np.float32),
        np.array([1], np.int32),
        np.array([[8, 8]], np.float32),
        match="batch index",
    )
    fails(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        args,
        [f32(1, 4)],
        np.array([[3, 1, 2, 2]], np.float32),
        np.zeros((1, 4), np.float32),
        np.array([0], np.int32),
        np.array([[8, 8]], np.float32),
        match="x2 < x1",
    )
    q = info(T.TENSOR_QUANT16_ASYMM, 1, 4, scale=0.125)
    rejects(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        [q, f32(1, 4), info(T.TENSOR_INT32, 1), info(T.TENSOR_QUANT16_ASYMM, 1, 2, scale=0.125)],
        [q],
        "deltas",
    )
    rejects(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        [
            q,
            info(T.TENSOR_QUANT8_ASYMM, 1, 4, scale=0.1),
            info(T.TENSOR_INT32, 1),
            info(T.TENSOR_QUANT16_ASYMM, 1, 2, scale=0.5),
        ],
        [q],
        "image_info must have scale",
    )


# --------------------------------------------------------------- BOX_WITH_NMS_LIMIT


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union


def greedy(
    scores: dict[int, float], boxes: dict[int, np.ndarray], limit: int, update: Any
) -> list[tuple[int, float]]:
    """Plain greedy NMS: take the best, rescore or drop the rest, repeat.

    ``update(score, iou)`` is the new score of a remaining box, or None to drop it.
    """
    pending = dict(scores)
    chosen: list[tuple[int, float]] = []
    while pending and (limit < 0 or len(chosen) < limit):
        best = max(pending, key=lambda k: pending[k])
        chosen.append((best, pending.pop(best)))
        for k in list(pending):
            new = update(pending[k], box_iou(boxes[k], boxes[best]))
            if new is None:
                del pending[k]
            else:
                pending[k] = new
    return chosen


def hard_nms(threshold: float) -> Any:
    return lambda score, iou: None if iou >= threshold else score


def naive_box_nms(
    scores: np.ndarray,
    rois: np.ndarray,
    batches: np.ndarray,
    threshold: float,
    max_det: int,
    kernel: int,
    iou_thr: float,
    sigma: float,
    low: float,
) -> list[tuple[float, list[float], int, int]]:
    fn = [
        lambda iou: 1.0 if iou < iou_thr else 0.0,
        lambda iou: 1.0 if iou < iou_thr else 1.0 - iou,
        lambda iou: math.exp(-iou * iou / sigma),
    ][kernel]
    out = []
    for b in dict.fromkeys(batches.tolist()):
        rows = np.flatnonzero(batches == b)
        found = []
        for c in range(1, scores.shape[1]):
            cand = {r: float(scores[r, c]) for r in rows if scores[r, c] > threshold}
            boxes = {r: rois[r, 4 * c : 4 * c + 4].astype(np.float64) for r in cand}
            soft = lambda s, iou: None if s * fn(iou) < low else s * fn(iou)  # noqa: E731
            found += [(s, c, r) for r, s in greedy(cand, boxes, max_det, soft)]
        found.sort(key=lambda t: -t[0])
        if max_det >= 0:
            found = found[:max_det]
        found.sort(key=lambda t: (t[1], -t[0]))
        out += [(s, rois[r, 4 * c : 4 * c + 4].tolist(), c, b) for s, c, r in found]
    return out


NMS_SCORES = np.array(
    [
        0.90,
        0.95,
        0.75,
        0.80,
        0.70,
        0.85,
        0.60,
        0.90,
        0.95,
        0.90,
        0.65,
        0.90,
        0.80,
        0.85,
        0.80,
        0.60,
        0.60,
        0.20,
        0.60,
        0.80,
        0.40,
        0.90,
        0.55,
        0.60,
        0.90,
        0.75,
        0.70,
        0.80,
        0.70,
        0.85,
        0.90,
        0.95,
        0.75,
        0.80,
        0.85,
        0.80,
        0.60,
        0.90,
        0.95,
        0.60,
        0.60,
        0.20,
        0.50,
        0.90,
        0.80,
        0.90,
        0.75,
        0.70,
        0.90,
        0.65,
        0.90,
        0.90,
        0.55,
        0.60,
        0.60,
        0.80,
        0.40,
    ]
).reshape(19, 3)
_NMS_BASE = [1, 2, 3, 4, 5, 6, 7, 8, 9, 2, 1, 5, 3, 6, 0, 9, 4, 8, 7]


def nms_rois() -> np.ndarray:
    """The conformance spec's 19 boxes x 3 classes (class 1 and 2 boxes are equal)."""
    rows = []
    for r, s in enumerate(_NMS_BASE):
        lo, hi = (s - 1, s + 9) if r < 9 else (s, s + 10)
        if s == 0 and r == 14:
            rows.append([0, 0, 1, 1, 0, 0, 2, 2, 0, 0, 2, 2])
            continue
        rows.append([s, s, s + 9, s + 9, lo, lo, hi, hi, lo, lo, hi, hi])
    return np.array(rows, np.float32)


def nms_inputs(
    score: OperandInfo,
    rois: OperandInfo,
    n: int,
    threshold: float,
    max_det: int,
    kernel: int,
    iou: float,
    sigma: float,
    low: float,
    scalar: T = T.FLOAT32,
) -> list[Any]:
    return [
        score,
        rois,
        info(T.TENSOR_INT32, n),
        fscalar(threshold, scalar),
        i32(max_det),
        i32(kernel),
        fscalar(iou, scalar),
        fscalar(sigma, scalar),
        fscalar(low, scalar),
    ]


def nms_outputs(score: T, box: T, scale: float = 0.0, zp: int = 0) -> list[OperandInfo]:
    box_scale = 0.125 if box == T.TENSOR_QUANT16_ASYMM else 0.0
    return [
        info(score, 0, scale=scale, zp=zp),
        info(box, 0, 4, scale=box_scale),
        info(T.TENSOR_INT32, 0),
        info(T.TENSOR_INT32, 0),
    ]


def test_box_with_nms_limit_hard_known_answers() -> None:
    rois = nms_rois()
    batches = np.array([0] * 9 + [1] * 10, np.int32)
    scores, boxes, classes, out_batches = run(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(19, 3), f32(19, 12), 19, 0.3, -1, 0, 0.4, 1.0, 0.3),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        NMS_SCORES.astype(np.float32),
        rois,
        batches,
    )
    np.testing.assert_allclose(
        scores, [0.95, 0.85, 0.75, 0.95, 0.7, 0.95, 0.9, 0.85, 0.75, 0.95, 0.8, 0.7], rtol=1e-6
    )
    np.testing.assert_array_equal(
        boxes.ravel(),
        [
            0,
            0,
            10,
            10,
            4,
            4,
            14,
            14,
            8,
            8,
            18,
            18,
            2,
            2,
            12,
            12,
            8,
            8,
            18,
            18,
            1,
            1,
            11,
            11,
            0,
            0,
            2,
            2,
            5,
            5,
            15,
            15,
            9,
            9,
            19,
            19,
            3,
            3,
            13,
            13,
            0,
            0,
            2,
            2,
            9,
            9,
            19,
            19,
        ],
    )
    np.testing.assert_array_equal(classes, [1, 1, 1, 2, 2, 1, 1, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(out_batches, [0] * 5 + [1] * 7)
    # max_detections = 5 per image, batch ids 1 and 3, quantized (signed and unsigned) scores
    for code, dtype, zp in (
        (T.TENSOR_QUANT8_ASYMM, np.uint8, 0),
        (T.TENSOR_QUANT8_ASYMM_SIGNED, np.int8, -128),
    ):
        scores, boxes, classes, out_batches = run(
            Op.BOX_WITH_NMS_LIMIT,
            nms_inputs(
                info(code, 19, 3, scale=0.01, zp=zp),
                info(T.TENSOR_QUANT16_ASYMM, 19, 12, scale=0.125),
                19,
                0.3,
                5,
                0,
                0.4,
                1.0,
                0.3,
            ),
            nms_outputs(code, T.TENSOR_QUANT16_ASYMM, 0.01, zp),
            quant(NMS_SCORES, 0.01, zp, dtype),
            (rois * 8).astype(np.uint16),
            np.array([1] * 9 + [3] * 10, np.int32),
        )
        want = quant([0.95, 0.85, 0.75, 0.95, 0.7, 0.95, 0.9, 0.85, 0.95, 0.8], 0.01, zp, dtype)
        np.testing.assert_array_equal(scores, want)
        np.testing.assert_array_equal(
            boxes.ravel() / 8,
            [
                0,
                0,
                10,
                10,
                4,
                4,
                14,
                14,
                8,
                8,
                18,
                18,
                2,
                2,
                12,
                12,
                8,
                8,
                18,
                18,
                1,
                1,
                11,
                11,
                0,
                0,
                2,
                2,
                5,
                5,
                15,
                15,
                3,
                3,
                13,
                13,
                0,
                0,
                2,
                2,
            ],
        )
        np.testing.assert_array_equal(classes, [1, 1, 1, 2, 2, 1, 1, 1, 2, 2])
        np.testing.assert_array_equal(out_batches, [1] * 5 + [3] * 5)


@pytest.mark.parametrize("kernel", [0, 1, 2])
def test_box_with_nms_limit_matches_naive_greedy(kernel: int) -> None:
    rng = np.random.default_rng(kernel)
    n, classes = 24, 4
    xy = rng.uniform(0, 20, size=(n, classes, 2))
    wh = rng.uniform(2, 10, size=(n, classes, 2))
    rois = np.concatenate([xy, xy + wh], axis=2).reshape(n, classes * 4).astype(np.float32)
    scores = rng.uniform(0, 1, size=(n, classes)).astype(np.float32)
    batches = np.array([0] * 10 + [2] * 14, np.int32)
    args = (0.2, 6, kernel, 0.35, 0.6, 0.25)
    got = run(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(n, classes), f32(n, classes * 4), n, *args),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        scores,
        rois,
        batches,
    )
    want = naive_box_nms(scores, rois, batches, *args)
    assert len(got[0]) == len(want) > 0
    np.testing.assert_allclose(got[0], [w[0] for w in want], rtol=1e-5)
    np.testing.assert_array_equal(got[1], np.array([w[1] for w in want], np.float32))
    np.testing.assert_array_equal(got[2], [w[2] for w in want])
    np.testing.assert_array_equal(got[3], [w[3] for w in want])
    # float16 with float16 scalars gives the same selection
    h = run(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(
            info(T.TENSOR_FLOAT16, n, classes),
            info(T.TENSOR_FLOAT16, n, classes * 4),
            n,
            *args,
            scalar=T.FLOAT16,
        ),
        nms_outputs(T.TENSOR_FLOAT16, T.TENSOR_FLOAT16),
        scores.astype(np.float16),
        rois.astype(np.float16),
        batches,
    )
    assert h[0].dtype == np.float16 and len(h[0]) >= 1


def test_box_with_nms_limit_zero_output_and_validation() -> None:
    scores = np.array([[0.9, 0.1, 0.2], [0.8, 0.15, 0.25]], np.float32)
    rois = np.tile(np.array([1, 1, 10, 10], np.float32), (2, 3))
    got = run(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(2, 3), f32(2, 12), 2, 0.3, -1, 0, 0.4, 1.0, 0.3),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        scores,
        rois,
        np.zeros(2, np.int32),
    )
    assert [g.shape for g in got] == [(0,), (0, 4), (0,), (0,)]
    rejects(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(2, 3), f32(2, 12), 2, 0.3, -1, 3, 0.4, 1.0, 0.3),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        "nms_kernel",
    )
    rejects(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(2, 3), f32(2, 8), 2, 0.3, -1, 0, 0.4, 1.0, 0.3),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        "rois have 8 columns",
    )
    rejects(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(2, 3), f32(2, 12), 2, 0.3, -1, 0, 0.4, 1.0, 0.3, scalar=T.FLOAT16),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        "FLOAT16; expected FLOAT32",
    )
    q = info(T.TENSOR_QUANT8_ASYMM, 2, 3, scale=0.01)
    rejects(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(
            q, info(T.TENSOR_QUANT16_ASYMM, 2, 12, scale=0.125), 2, 0.3, -1, 0, 0.4, 1.0, 0.3
        ),
        nms_outputs(T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT16_ASYMM, 0.02),
        "output scores",
    )
    fails(
        Op.BOX_WITH_NMS_LIMIT,
        nms_inputs(f32(2, 3), f32(2, 12), 2, 0.3, -1, 0, 0.4, 1.0, 0.3),
        nms_outputs(T.TENSOR_FLOAT32, T.TENSOR_FLOAT32),
        scores,
        np.tile(np.array([10, 1, 1, 10], np.float32), (2, 3)),
        np.zeros(2, np.int32),
        match="x2 < x1",
    )


def test_zero_sized_boxes_flow_through_roi_align_and_transpose_conv() -> None:
    """BOX_WITH_NMS_LIMIT keeps nothing; ROI_ALIGN and TRANSPOSE_CONV_2D see zero batches."""
    for quantized in (False, True):
        if quantized:
            s = dict(scale=0.1, zp=128)
            t_score, t_roi, t_map = (
                info(T.TENSOR_QUANT8_ASYMM, 1, 2, **s),
                info(T.TENSOR_QUANT16_ASYMM, 1, 8, scale=0.125),
                info(T.TENSOR_QUANT8_ASYMM, 1, 1, 1, 1, **s),
            )
            t_w = info(T.TENSOR_QUANT8_ASYMM, 2, 3, 3, 1, **s)
            t_b = info(T.TENSOR_INT32, 2, scale=0.01)
            score_v, roi_v = quant([[0.9, 0.1]], 0.1, 128), np.array([[8] * 4 + [0] * 4], np.uint16)
            roi_out = info(T.TENSOR_QUANT16_ASYMM, 0, 4, scale=0.125)
            fmap_out = info(T.TENSOR_QUANT8_ASYMM, 0, 2, 2, 1, **s)
            out = info(T.TENSOR_QUANT8_ASYMM, 0, 5, 5, 2, **s)
            score_out = info(T.TENSOR_QUANT8_ASYMM, 0, **s)
            feed = np.array([[[[138]]]], np.uint8)
        else:
            t_score, t_roi, t_map = f32(1, 2), f32(1, 8), f32(1, 1, 1, 1)
            t_w, t_b = f32(2, 3, 3, 1), f32(2)
            score_v = np.array([[0.9, 0.1]], np.float32)
            roi_v = np.array([[1, 1, 10, 10, 0, 0, 10, 10]], np.float32)
            roi_out, fmap_out, out, score_out = f32(0, 4), f32(0, 2, 2, 1), f32(0, 5, 5, 2), f32(0)
            feed = np.ones((1, 1, 1, 1), np.float32)
        operands = [
            Operand(t_score, Lifetime.CONSTANT_COPY, score_v),
            Operand(t_roi, Lifetime.CONSTANT_COPY, roi_v),
            Operand(info(T.TENSOR_INT32, 1), Lifetime.CONSTANT_COPY, np.zeros(1, np.int32)),
            *[
                Operand(a, Lifetime.CONSTANT_COPY, v)
                for a, v in (
                    fscalar(0.3),
                    i32(-1),
                    i32(0),
                    fscalar(0.4),
                    fscalar(1.0),
                    fscalar(0.3),
                )
            ],
            Operand(score_out, Lifetime.SUBGRAPH_OUTPUT),  # 9
            Operand(roi_out, Lifetime.TEMPORARY_VARIABLE),  # 10
            Operand(info(T.TENSOR_INT32, 0), Lifetime.SUBGRAPH_OUTPUT),  # 11
            Operand(info(T.TENSOR_INT32, 0), Lifetime.TEMPORARY_VARIABLE),  # 12
            Operand(t_map, Lifetime.SUBGRAPH_INPUT),  # 13
            *[
                Operand(a, Lifetime.CONSTANT_COPY, v)
                for a, v in (  # 14..20
                    i32(2),
                    i32(2),
                    fscalar(2.0),
                    fscalar(2.0),
                    i32(4),
                    i32(4),
                    boolean(False),
                )
            ],
            Operand(fmap_out, Lifetime.TEMPORARY_VARIABLE),  # 21
            Operand(t_w, Lifetime.CONSTANT_COPY, np.ones((2, 3, 3, 1), t_w.dtype)),  # 22
            Operand(t_b, Lifetime.CONSTANT_COPY, np.zeros(2, t_b.dtype)),  # 23
            *[
                Operand(a, Lifetime.CONSTANT_COPY, v)
                for a, v in (  # 24..29
                    const(info(T.TENSOR_INT32, 4), [0, 5, 5, 2]),
                    i32(2),
                    i32(2),
                    i32(2),
                    i32(0),
                    boolean(False),
                )
            ],
            Operand(out, Lifetime.SUBGRAPH_OUTPUT),  # 30
        ]
        ops = [
            Operation(Op.BOX_WITH_NMS_LIMIT, tuple(range(9)), (9, 10, 11, 12)),
            Operation(Op.ROI_ALIGN, (13, 10, 12, *range(14, 21)), (21,)),
            Operation(Op.TRANSPOSE_CONV_2D, (21, 22, 23, *range(24, 30)), (30,)),
        ]
        prepared = PreparedModel(HalModel(Subgraph(operands, ops, (13,), (9, 11, 30))))
        scores, classes, result = prepared.run([feed])
        assert scores.shape == (0,) and classes.shape == (0,) and result.shape == (0, 5, 5, 2)


# --------------------------------------------------------------- GENERATE_PROPOSALS


def naive_proposals(
    scores: np.ndarray,
    deltas: np.ndarray,
    anchors: np.ndarray,
    image: np.ndarray,
    stride: tuple[float, float],
    pre: int,
    post: int,
    iou: float,
    min_size: float,
) -> list[tuple[float, list[float], int]]:
    """scores NHWC [N, H, W, A], deltas [N, H, W, A*4]."""
    n, h, w, a = scores.shape
    out = []
    for b in range(n):
        boxes, sc = [], []
        for y in range(h):
            for x in range(w):
                for k in range(a):
                    anchor = anchors[k] + [x * stride[1], y * stride[0]] * 2
                    d = deltas[b, y, x, 4 * k : 4 * k + 4].reshape(1, 4)
                    boxes.append(
                        naive_bbox_transform(anchor[None], d, np.zeros(1, int), image[b : b + 1])[0]
                    )
                    sc.append(float(scores[b, y, x, k]))
        order = sorted(range(len(sc)), key=lambda i: -sc[i])
        if 0 < pre < len(order):
            order = order[:pre]
        keep = {}
        for i in order:
            bw, bh = boxes[i][2] - boxes[i][0], boxes[i][3] - boxes[i][1]
            if (
                bw > min_size
                and bh > min_size
                and boxes[i][0] + bw / 2 < image[b, 1]
                and boxes[i][1] + bh / 2 < image[b, 0]
            ):
                keep[i] = sc[i]
        chosen = greedy(keep, dict(enumerate(boxes)), post if post > 0 else -1, hard_nms(iou))
        out += [(s, list(boxes[i]), b) for i, s in chosen]
    return out


def proposals_inputs(
    code: T,
    dims: tuple[int, int, int, int],
    anchors: int,
    layout: bool,
    params: tuple[float, float, int, int, float, float],
) -> list[Any]:
    n, h, w, a = dims
    quantized = code != T.TENSOR_FLOAT32
    score_dims = (n, a, h, w) if layout else dims
    delta_dims = (n, 4 * a, h, w) if layout else (n, h, w, 4 * a)
    s = dict(scale=0.01, zp=-3) if quantized else {}
    anchor_info = (
        info(T.TENSOR_QUANT16_SYMM, anchors, 4, scale=0.125) if quantized else f32(anchors, 4)
    )
    image_info = info(T.TENSOR_QUANT16_ASYMM, n, 2, scale=0.125) if quantized else f32(n, 2)
    sh, sw, pre, post, iou, min_size = params
    return [
        info(code, *score_dims, **s),
        info(code, *delta_dims, **s),
        anchor_info,
        image_info,
        fscalar(sh),
        fscalar(sw),
        i32(pre),
        i32(post),
        fscalar(iou),
        fscalar(min_size),
        boolean(layout),
    ]


@pytest.mark.parametrize("layout", [False, True])
def test_generate_proposals_matches_naive(layout: bool) -> None:
    rng = np.random.default_rng(7)
    n, h, w, a = 2, 3, 4, 2
    scores = rng.uniform(0, 1, size=(n, h, w, a)).astype(np.float32)
    deltas = rng.uniform(-0.4, 0.4, size=(n, h, w, 4 * a)).astype(np.float32)
    anchors = np.array([[0, 0, 16, 16], [-8, -4, 24, 20]], np.float32)
    image = np.array([[40, 60], [32, 32]], np.float32)
    params = (8.0, 8.0, 20, 6, 0.5, 2.0)
    feed = (
        np.ascontiguousarray(scores.transpose(0, 3, 1, 2)) if layout else scores,
        np.ascontiguousarray(deltas.transpose(0, 3, 1, 2)) if layout else deltas,
    )
    got = run(
        Op.GENERATE_PROPOSALS,
        proposals_inputs(T.TENSOR_FLOAT32, (n, h, w, a), a, layout, params),
        [f32(0), f32(0, 4), info(T.TENSOR_INT32, 0)],
        *feed,
        anchors,
        image,
    )
    want = naive_proposals(scores, deltas, anchors, image, (8.0, 8.0), 20, 6, 0.5, 2.0)
    assert len(got[0]) == len(want) > 2
    np.testing.assert_allclose(got[0], [x[0] for x in want], rtol=1e-6)
    np.testing.assert_allclose(got[1], [x[1] for x in want], rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(got[2], [x[2] for x in want])


def test_generate_proposals_quantized_and_validation() -> None:
    rng = np.random.default_rng(8)
    n, h, w, a = 1, 2, 3, 2
    qs = rng.integers(-128, 128, size=(n, h, w, a)).astype(np.int8)
    qd = rng.integers(-40, 40, size=(n, h, w, 4 * a)).astype(np.int8)
    anchors = np.array([[0, 0, 16, 16], [-8, -4, 24, 20]], np.float32)
    image = np.array([[40, 60]], np.float32)
    params = (8.0, 8.0, -1, -1, 0.5, 1.0)
    code = T.TENSOR_QUANT8_ASYMM_SIGNED
    got = run(
        Op.GENERATE_PROPOSALS,
        proposals_inputs(code, (n, h, w, a), a, False, params),
        [
            info(code, 0, scale=0.01, zp=-3),
            info(T.TENSOR_QUANT16_ASYMM, 0, 4, scale=0.125),
            info(T.TENSOR_INT32, 0),
        ],
        qs,
        qd,
        (anchors * 8).astype(np.int16),
        (image * 8).astype(np.uint16),
    )
    real_s = (qs.astype(np.float32) + 3) * np.float32(0.01)
    real_d = (qd.astype(np.float32) + 3) * np.float32(0.01)
    want = naive_proposals(real_s, real_d, anchors, image, (8.0, 8.0), -1, -1, 0.5, 1.0)
    np.testing.assert_array_equal(got[0], quant([x[0] for x in want], 0.01, -3, np.int8))
    np.testing.assert_allclose(
        got[1].astype(int), quant([x[1] for x in want], 0.125, 0, np.uint16).astype(int), atol=1
    )
    bad = proposals_inputs(code, (n, h, w, a), a, False, params)
    bad[2] = info(T.TENSOR_QUANT16_SYMM, a, 4, scale=0.25)
    rejects(
        Op.GENERATE_PROPOSALS,
        bad,
        [
            info(code, 0, scale=0.01, zp=-3),
            info(T.TENSOR_QUANT16_ASYMM, 0, 4, scale=0.125),
            info(T.TENSOR_INT32, 0),
        ],
        "anchors must have scale",
    )
    rejects(
        Op.GENERATE_PROPOSALS,
        proposals_inputs(T.TENSOR_FLOAT32, (n, h, w, a), a, False, params)[:-1],
        [f32(0), f32(0, 4), info(T.TENSOR_INT32, 0)],
        "expected 11 inputs",
    )


# --------------------------------------------------------------- DETECTION_POSTPROCESSING


def naive_detection(
    scores: np.ndarray,
    deltas: np.ndarray,
    anchors: np.ndarray,
    scales: tuple[float, float, float, float],
    regular: bool,
    max_det: int,
    max_classes: int,
    per_class: int,
    threshold: float,
    iou: float,
    background: bool,
) -> list[list[tuple[float, list[float], int]]]:
    sy, sx, sh, sw = scales
    result = []
    for b in range(scores.shape[0]):
        boxes = {}
        for k, (cy, cx, ah, aw) in enumerate(anchors.astype(np.float64)):
            dy, dx, dh, dw = deltas[b, k, :4]
            y, x = cy + ah * dy / sy, cx + aw * dx / sx
            hh, hw = ah * math.exp(dh / sh) / 2, aw * math.exp(dw / sw) / 2
            boxes[k] = np.array([y - hh, x - hw, y + hh, x + hw])
        shift = 0 if background else 1
        found: list[tuple[float, list[float], int]] = []
        if regular:
            for c in range(1, scores.shape[2]):
                cand = {k: float(scores[b, k, c]) for k in boxes if scores[b, k, c] > threshold}
                found += [
                    (s, list(boxes[k]), c - shift)
                    for k, s in greedy(cand, boxes, per_class, hard_nms(iou))
                ]
            found = sorted(found, key=lambda t: -t[0])[:max_det]
        else:
            best = {k: float(scores[b, k, 1:].max()) for k in boxes}
            cand = {k: s for k, s in best.items() if s > threshold}
            for k, _ in greedy(cand, boxes, max_det, hard_nms(iou)):
                top = np.argsort(-scores[b, k, 1:], kind="stable")[:max_classes] + 1
                found += [(float(scores[b, k, c]), list(boxes[k]), int(c) - shift) for c in top]
        result.append(found)
    return result


@pytest.mark.parametrize("regular", [True, False])
def test_detection_postprocessing_matches_naive(regular: bool) -> None:
    rng = np.random.default_rng(11)
    n, anchors_n, classes = 2, 12, 4
    scores = rng.uniform(0, 1, size=(n, anchors_n, classes)).astype(np.float32)
    deltas = rng.uniform(-1, 1, size=(n, anchors_n, 5)).astype(np.float32)
    anchors = np.concatenate(
        [rng.uniform(2, 10, size=(anchors_n, 2)), rng.uniform(2, 6, size=(anchors_n, 2))], axis=1
    ).astype(np.float32)
    scales = (10.0, 10.0, 5.0, 5.0)
    max_det, max_classes, per_class = 5, 2, 3
    args = [
        f32(n, anchors_n, classes),
        f32(n, anchors_n, 5),
        f32(anchors_n, 4),
        *[fscalar(s) for s in scales],
        boolean(regular),
        i32(max_det),
        i32(max_classes),
        i32(per_class),
        fscalar(0.3),
        fscalar(0.4),
        boolean(False),
    ]
    size = max_det if regular else max_det * max_classes
    got = run(
        Op.DETECTION_POSTPROCESSING,
        args,
        [f32(n, size), f32(n, size, 4), info(T.TENSOR_INT32, n, size), info(T.TENSOR_INT32, n)],
        scores,
        deltas,
        anchors,
    )
    want = naive_detection(
        scores, deltas, anchors, scales, regular, max_det, max_classes, per_class, 0.3, 0.4, False
    )
    for b in range(n):
        k = len(want[b])
        assert got[3][b] == k > 0
        np.testing.assert_allclose(got[0][b, :k], [x[0] for x in want[b]], rtol=1e-6)
        np.testing.assert_allclose(got[1][b, :k], [x[1] for x in want[b]], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(got[2][b, :k], [x[2] for x in want[b]])
        assert not got[0][b, k:].any() and not got[1][b, k:].any()


def test_detection_postprocessing_validation() -> None:
    base = [
        f32(1, 3, 3),
        f32(1, 3, 4),
        f32(3, 4),
        *[fscalar(1.0)] * 4,
        boolean(True),
        i32(2),
        i32(1),
        i32(2),
        fscalar(0.3),
        fscalar(0.5),
        boolean(False),
    ]
    outs = [f32(1, 2), f32(1, 2, 4), info(T.TENSOR_INT32, 1, 2), info(T.TENSOR_INT32, 1)]
    bad = list(base)
    bad[3] = fscalar(0.0)
    rejects(Op.DETECTION_POSTPROCESSING, bad, outs, "scale_y is 0")
    bad = list(base)
    bad[10] = i32(0)
    rejects(Op.DETECTION_POSTPROCESSING, bad, outs, "max_detections_per_class is 0")
    rejects(Op.DETECTION_POSTPROCESSING, [f32(1, 3, 1), *base[1:]], outs, "at least 2")
    rejects(
        Op.DETECTION_POSTPROCESSING,
        [info(T.TENSOR_QUANT8_ASYMM, 1, 3, 3, scale=0.1), *base[1:]],
        outs,
        "unsupported type",
    )
