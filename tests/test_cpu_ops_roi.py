"""CPU driver: ROI_ALIGN, ROI_POOLING and HEATMAP_MAX_KEYPOINT.

Each is checked against a naive bilinear or max loop per region written here
from the operation's definition and, where the Android conformance specs
publish values, against those known answers.  Validation rejections must be
BAD_DATA; data errors at execution OP_FAILED.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.operands import OperandInfo

from .op_models import rejects, run
from .op_operands import RNG, boolean, f32, fails, fscalar, i32, info, nchw, quant

# --------------------------------------------------------------- ROI_ALIGN


def bilinear(img: np.ndarray, y: float, x: float) -> np.ndarray:
    """Bilinear sample of an HWC image; at or past the last row/column the edge is used."""
    h, w, _ = img.shape
    y0, x0 = int(math.floor(y)), int(math.floor(x))
    if y0 >= h - 1:
        y0, y1, ly = h - 1, h - 1, 0.0
    else:
        y1, ly = y0 + 1, y - y0
    if x0 >= w - 1:
        x0, x1, lx = w - 1, w - 1, 0.0
    else:
        x1, lx = x0 + 1, x - x0
    return (
        (1 - ly) * (1 - lx) * img[y0, x0]
        + (1 - ly) * lx * img[y0, x1]
        + ly * (1 - lx) * img[y1, x0]
        + ly * lx * img[y1, x1]
    )


def naive_roi_align(
    fmap: np.ndarray,
    rois: np.ndarray,
    batches: np.ndarray,
    out_h: int,
    out_w: int,
    ratio_h: float,
    ratio_w: float,
    samp_h: int,
    samp_w: int,
) -> np.ndarray:
    out = np.zeros((len(rois), out_h, out_w, fmap.shape[3]))
    for r, (x1, y1, x2, y2) in enumerate(np.asarray(rois, np.float64)):
        x1, x2, y1, y2 = x1 / ratio_w, x2 / ratio_w, y1 / ratio_h, y2 / ratio_h
        bin_w, bin_h = max(x2 - x1, 1.0) / out_w, max(y2 - y1, 1.0) / out_h
        sw = samp_w if samp_w > 0 else math.ceil(bin_w)
        sh = samp_h if samp_h > 0 else math.ceil(bin_h)
        img = fmap[batches[r]].astype(np.float64)
        for i in range(out_h):
            for j in range(out_w):
                acc = 0.0
                for a in range(sh):
                    for c in range(sw):
                        acc = acc + bilinear(
                            img,
                            y1 + i * bin_h + (a + 0.5) * bin_h / sh,
                            x1 + j * bin_w + (c + 0.5) * bin_w / sw,
                        )
                out[r, i, j] = acc / (sh * sw)
    return out


def roi_align_inputs(
    x: OperandInfo,
    rois: OperandInfo,
    n: int,
    out: tuple[int, int],
    ratios: tuple[float, float],
    samples: tuple[int, int],
    layout: bool,
    scalar: T = T.FLOAT32,
) -> list[Any]:
    return [
        x,
        rois,
        info(T.TENSOR_INT32, n),
        i32(out[0]),
        i32(out[1]),
        fscalar(ratios[0], scalar),
        fscalar(ratios[1], scalar),
        i32(samples[0]),
        i32(samples[1]),
        boolean(layout),
    ]


ROI_IMG1 = np.array(
    [-10, -1, 4, -5, -8, -2, 9, 1, 7, -2, 3, -7, -2, 10, -3, 5], np.float32
).reshape(1, 4, 4, 1)
ROI_BOX1 = np.array([[2, 2, 4, 4], [0, 0, 8, 8], [2, 0, 4, 8], [0, 2, 8, 4]], np.float32)
ROI_OUT1 = np.array(
    [
        0.375,
        5.125,
        -0.375,
        2.875,
        -0.5,
        -0.3125,
        3.1875,
        1.125,
        0.25,
        4.25,
        4.875,
        0.625,
        -0.1875,
        1.125,
        0.9375,
        -2.625,
    ]
).reshape(4, 2, 2, 1)


@pytest.mark.parametrize("layout", [False, True])
def test_roi_align_known_answer_float_and_nchw(layout: bool) -> None:
    feed = nchw(ROI_IMG1) if layout else ROI_IMG1
    out_shape = (4, 1, 2, 2) if layout else (4, 2, 2, 1)
    got = run(
        Op.ROI_ALIGN,
        roi_align_inputs(f32(*feed.shape), f32(4, 4), 4, (2, 2), (2.0, 2.0), (4, 4), layout),
        [f32(*out_shape)],
        feed,
        ROI_BOX1,
        np.zeros(4, np.int32),
    )[0]
    np.testing.assert_allclose(got, nchw(ROI_OUT1) if layout else ROI_OUT1, atol=1e-5)
    # Five regions on batch 2 of 4, different height/width ratios, adaptive height sampling.
    img = np.zeros((4, 4, 4, 1), np.float32)
    img[2] = ROI_IMG1[0]
    boxes = np.array(
        [[1, 2, 2, 4], [0, 0, 4, 8], [1, 0, 2, 8], [0, 2, 4, 4], [0, 0, 0, 0]], np.float32
    )
    got = run(
        Op.ROI_ALIGN,
        roi_align_inputs(f32(4, 4, 4, 1), f32(5, 4), 5, (2, 2), (2.0, 1.0), (0, 4), False),
        [f32(5, 2, 2, 1)],
        img,
        boxes,
        np.full(5, 2, np.int32),
    )[0]
    want = np.concatenate([ROI_OUT1.ravel(), [-7.4375, -3.3125, -6.8125, -3.4375]])
    np.testing.assert_allclose(got.ravel(), want, atol=1e-5)


def test_roi_align_quantized_known_answer() -> None:
    for code, dtype, zp in (
        (T.TENSOR_QUANT8_ASYMM, np.uint8, 128),
        (T.TENSOR_QUANT8_ASYMM_SIGNED, np.int8, 0),
    ):
        rois = info(T.TENSOR_QUANT16_ASYMM, 4, 4, scale=0.125)
        got = run(
            Op.ROI_ALIGN,
            roi_align_inputs(
                info(code, 1, 4, 4, 1, scale=0.25, zp=zp),
                rois,
                4,
                (2, 2),
                (2.0, 2.0),
                (4, 4),
                False,
            ),
            [info(code, 4, 2, 2, 1, scale=0.0625, zp=zp)],
            quant(ROI_IMG1, 0.25, zp, dtype),
            (ROI_BOX1 * 8).astype(np.uint16),
            np.zeros(4, np.int32),
        )[0]
        want = quant(ROI_OUT1, 0.0625, zp, dtype)
        np.testing.assert_allclose(got.astype(int), want.astype(int), atol=1)


def test_roi_align_matches_naive_bilinear_loop() -> None:
    fmap = RNG.normal(size=(2, 7, 9, 3)).astype(np.float32)
    rois = np.array(
        [
            [0.5, 1.0, 14.0, 10.0],
            [3.0, 2.0, 3.5, 2.5],
            [0.0, 0.0, 17.9, 13.9],
            [6.0, 4.0, 16.0, 6.0],
        ],
        np.float32,
    )
    batches = np.array([1, 0, 0, 1], np.int32)
    for samples in ((2, 3), (0, 0), (1, 0)):
        want = naive_roi_align(fmap, rois, batches, 3, 2, 2.0, 2.0, *samples)
        got = run(
            Op.ROI_ALIGN,
            roi_align_inputs(f32(2, 7, 9, 3), f32(4, 4), 4, (3, 2), (2.0, 2.0), samples, False),
            [f32(4, 3, 2, 3)],
            fmap,
            rois,
            batches,
        )[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # float16 tensors take float16 ratio scalars
    got = run(
        Op.ROI_ALIGN,
        roi_align_inputs(
            info(T.TENSOR_FLOAT16, 2, 7, 9, 3),
            info(T.TENSOR_FLOAT16, 4, 4),
            4,
            (3, 2),
            (2.0, 2.0),
            (2, 2),
            False,
            T.FLOAT16,
        ),
        [info(T.TENSOR_FLOAT16, 4, 3, 2, 3)],
        fmap.astype(np.float16),
        rois.astype(np.float16),
        batches,
    )[0]
    want = naive_roi_align(
        fmap.astype(np.float16), rois.astype(np.float16), batches, 3, 2, 2.0, 2.0, 2, 2
    )
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)


def test_roi_align_zero_rois_bad_rois_and_validation() -> None:
    args = roi_align_inputs(f32(1, 4, 4, 1), f32(0, 4), 0, (2, 2), (2.0, 2.0), (4, 4), False)
    got = run(
        Op.ROI_ALIGN,
        args,
        [f32(0, 2, 2, 1)],
        ROI_IMG1,
        np.zeros((0, 4), np.float32),
        np.zeros(0, np.int32),
    )[0]
    assert got.shape == (0, 2, 2, 1)
    args = roi_align_inputs(f32(1, 4, 4, 1), f32(1, 4), 1, (2, 2), (2.0, 2.0), (4, 4), False)
    fails(
        Op.ROI_ALIGN,
        args,
        [f32(1, 2, 2, 1)],
        ROI_IMG1,
        np.array([[0, 0, 9, 4]], np.float32),
        np.zeros(1, np.int32),
        match="outside",
    )
    fails(
        Op.ROI_ALIGN,
        args,
        [f32(1, 2, 2, 1)],
        ROI_IMG1,
        np.array([[4, 0, 2, 4]], np.float32),
        np.zeros(1, np.int32),
        match="inverted",
    )
    fails(
        Op.ROI_ALIGN,
        args,
        [f32(1, 2, 2, 1)],
        ROI_IMG1,
        np.array([[0, 0, 2, 2]], np.float32),
        np.ones(1, np.int32),
        match="batch 1",
    )
    rejects(
        Op.ROI_ALIGN,
        roi_align_inputs(f32(1, 4, 4, 1), f32(1, 4), 1, (0, 2), (2.0, 2.0), (4, 4), False),
        [f32(1, 2, 2, 1)],
        "output_height is 0",
    )
    rejects(
        Op.ROI_ALIGN,
        roi_align_inputs(f32(1, 4, 4, 1), f32(1, 4), 1, (2, 2), (2.0, 2.0), (-1, 4), False),
        [f32(1, 2, 2, 1)],
        "sampling",
    )
    rejects(
        Op.ROI_ALIGN,
        roi_align_inputs(
            info(T.TENSOR_FLOAT16, 1, 4, 4, 1),
            info(T.TENSOR_FLOAT16, 1, 4),
            1,
            (2, 2),
            (2.0, 2.0),
            (4, 4),
            False,
        ),
        [info(T.TENSOR_FLOAT16, 1, 2, 2, 1)],
        "FLOAT32; expected FLOAT16",
    )
    q = info(T.TENSOR_QUANT8_ASYMM, 1, 4, 4, 1, scale=0.25, zp=128)
    rejects(
        Op.ROI_ALIGN,
        roi_align_inputs(
            q, info(T.TENSOR_QUANT16_ASYMM, 1, 4, scale=0.25), 1, (2, 2), (2.0, 2.0), (4, 4), False
        ),
        [q],
        "scale 0.125",
    )
    rejects(
        Op.ROI_ALIGN,
        roi_align_inputs(f32(1, 4, 4, 1), f32(1, 4), 1, (2, 2), (2.0, 2.0), (4, 4), False)[:-1],
        [f32(1, 2, 2, 1)],
        "expected 10",
    )


# --------------------------------------------------------------- ROI_POOLING


def naive_roi_pool(
    fmap: np.ndarray,
    rois: np.ndarray,
    batches: np.ndarray,
    out_h: int,
    out_w: int,
    ratio_h: float,
    ratio_w: float,
    empty: float = 0,
) -> np.ndarray:
    out = np.zeros((len(rois), out_h, out_w, fmap.shape[3]), fmap.dtype)
    h, w = fmap.shape[1:3]
    for r, box in enumerate(np.asarray(rois, np.float64)):
        x1, y1, x2, y2 = (int(math.floor(v + 0.5)) for v in box / np.array([ratio_w, ratio_h] * 2))
        bin_h, bin_w = max(y2 - y1 + 1, 1) / out_h, max(x2 - x1 + 1, 1) / out_w
        for i in range(out_h):
            for j in range(out_w):
                hs, he = int(math.floor(i * bin_h + y1)), int(math.ceil((i + 1) * bin_h + y1))
                ws, we = int(math.floor(j * bin_w + x1)), int(math.ceil((j + 1) * bin_w + x1))
                window = fmap[batches[r], min(hs, h) : min(he, h), min(ws, w) : min(we, w)]
                out[r, i, j] = window.max(axis=(0, 1)) if window.size else empty
    return out


def roi_pool_inputs(
    x: OperandInfo,
    rois: OperandInfo,
    n: int,
    out: tuple[int, int],
    ratios: tuple[float, float],
    layout: bool,
    scalar: T = T.FLOAT32,
) -> list[Any]:
    return [
        x,
        rois,
        info(T.TENSOR_INT32, n),
        i32(out[0]),
        i32(out[1]),
        fscalar(ratios[0], scalar),
        fscalar(ratios[1], scalar),
        boolean(layout),
    ]


@pytest.mark.parametrize("layout", [False, True])
def test_roi_pooling_known_answers(layout: bool) -> None:
    boxes = np.array([[2, 2, 4, 4], [0, 0, 6, 6], [2, 0, 4, 6], [0, 2, 6, 4]], np.float32)
    want = np.array([-2, 9, -2, 3, -1, 9, 10, 5, -1, 9, 10, 3, -2, 9, 7, 3], np.float32).reshape(
        4, 2, 2, 1
    )
    feed = nchw(ROI_IMG1) if layout else ROI_IMG1
    shape = (4, 1, 2, 2) if layout else (4, 2, 2, 1)
    got = run(
        Op.ROI_POOLING,
        roi_pool_inputs(f32(*feed.shape), f32(4, 4), 4, (2, 2), (2.0, 2.0), layout),
        [f32(*shape)],
        feed,
        boxes,
        np.zeros(4, np.int32),
    )[0]
    np.testing.assert_array_equal(got, nchw(want) if layout else want)
    q = info(T.TENSOR_QUANT8_ASYMM_SIGNED, *feed.shape, scale=0.25, zp=-2)
    got = run(
        Op.ROI_POOLING,
        roi_pool_inputs(
            q, info(T.TENSOR_QUANT16_ASYMM, 4, 4, scale=0.125), 4, (2, 2), (2.0, 2.0), layout
        ),
        [info(T.TENSOR_QUANT8_ASYMM_SIGNED, *shape, scale=0.25, zp=-2)],
        quant(feed, 0.25, -2, np.int8),
        (boxes * 8).astype(np.uint16),
        np.zeros(4, np.int32),
    )[0]
    np.testing.assert_array_equal(got, quant(nchw(want) if layout else want, 0.25, -2, np.int8))


def test_roi_pooling_matches_naive_max_loop_and_rejects_requantization() -> None:
    fmap = RNG.normal(size=(2, 6, 8, 2)).astype(np.float32)
    rois = np.array(
        [[0, 0, 15, 11], [3.3, 2.6, 9.1, 7.7], [2, 2, 2, 2], [10, 1, 15.9, 11.9]], np.float32
    )
    batches = np.array([0, 1, 1, 0], np.int32)
    want = naive_roi_pool(fmap, rois, batches, 3, 2, 2.0, 2.0)
    got = run(
        Op.ROI_POOLING,
        roi_pool_inputs(f32(2, 6, 8, 2), f32(4, 4), 4, (3, 2), (2.0, 2.0), False),
        [f32(4, 3, 2, 2)],
        fmap,
        rois,
        batches,
    )[0]
    np.testing.assert_array_equal(got, want)
    q = info(T.TENSOR_QUANT8_ASYMM, 1, 4, 4, 1, scale=0.25, zp=128)
    rejects(
        Op.ROI_POOLING,
        roi_pool_inputs(
            q, info(T.TENSOR_QUANT16_ASYMM, 1, 4, scale=0.125), 1, (2, 2), (2.0, 2.0), False
        ),
        [info(T.TENSOR_QUANT8_ASYMM, 1, 2, 2, 1, scale=0.5, zp=128)],
        "scale and zero point",
    )


# --------------------------------------------------------------- HEATMAP_MAX_KEYPOINT

HEAT1 = np.array(
    [
        -10,
        -1,
        4,
        -5,
        -8,
        -2,
        9,
        1,
        7,
        -2,
        3,
        -7,
        -2,
        2,
        -3,
        5,
        -10,
        -1,
        4,
        -5,
        -8,
        -2,
        9,
        1,
        7,
        -2,
        3,
        -7,
        -2,
        10,
        -3,
        5,
        -10,
        -1,
        4,
        -5,
        -8,
        -2,
        4,
        1,
        7,
        -2,
        3,
        -7,
        -2,
        2,
        -3,
        5,
        -10,
        -1,
        4,
        10,
        -8,
        -2,
        4,
        1,
        7,
        -2,
        3,
        -7,
        -2,
        2,
        -3,
        5,
        -10,
        -56,
        4,
        -5,
        -8,
        -2,
        9,
        1,
        7,
        -2,
        3,
        -7,
        -2,
        2,
        -3,
        5,
        -10,
        -57.827329175,
        4,
        -5,
        -8,
        -2,
        9,
        1,
        7,
        -2,
        3,
        -7,
        -2,
        2,
        -3,
        5,
    ],
    np.float32,
).reshape(6, 4, 4, 1)
HEAT_BOXES1 = np.array(
    [
        [5, 2, 10, 20],
        [1, 7, 30, 10],
        [8, 3, 15, 13],
        [6, 5, 19, 12],
        [5, 2, 10, 20],
        [5, 2, 10, 20],
    ],
    np.float32,
)
HEAT_SCORE1 = [9.071493, 10.00500, 7.187500, 10.00000, 10.689667, 9.000000]
HEAT_POINTS1 = [
    8.224462,
    8.537316,
    11.73000,
    9.625000,
    8.875000,
    9.562500,
    17.37500,
    5.875000,
    9.569672,
    2.000000,
    8.125000,
    8.750000,
]


@pytest.mark.parametrize("layout", [False, True])
def test_heatmap_max_keypoint_known_answers(layout: bool) -> None:
    feed = nchw(HEAT1) if layout else HEAT1
    score, points = run(
        Op.HEATMAP_MAX_KEYPOINT,
        [f32(*feed.shape), f32(6, 4), boolean(layout)],
        [f32(6, 1), f32(6, 1, 2)],
        feed,
        HEAT_BOXES1,
    )
    np.testing.assert_allclose(score.ravel(), HEAT_SCORE1, rtol=1e-5)
    np.testing.assert_allclose(points.ravel(), HEAT_POINTS1, rtol=1e-5)
    h16 = info(T.TENSOR_FLOAT16, *feed.shape)
    score, points = run(
        Op.HEATMAP_MAX_KEYPOINT,
        [h16, info(T.TENSOR_FLOAT16, 6, 4), boolean(layout)],
        [info(T.TENSOR_FLOAT16, 6, 1), info(T.TENSOR_FLOAT16, 6, 1, 2)],
        feed.astype(np.float16),
        HEAT_BOXES1.astype(np.float16),
    )
    np.testing.assert_allclose(score.astype(np.float32).ravel()[:4], HEAT_SCORE1[:4], rtol=2e-3)


def test_heatmap_max_keypoint_many_keypoints_and_quantized() -> None:
    heat = np.array(
        [
            0.19,
            0.61,
            0.49,
            0.01,
            0.98,
            0.65,
            0.64,
            0.70,
            0.76,
            0.55,
            0.83,
            0.19,
            0.46,
            0.03,
            0.67,
            0.71,
            0.17,
            0.23,
            0.89,
            0.08,
            0.96,
            0.65,
            0.52,
            0.40,
            0.36,
            0.80,
            0.55,
            0.89,
            0.58,
            0.29,
            0.27,
            0.69,
            0.66,
            0.06,
            0.51,
            0.26,
            0.96,
            0.38,
            0.41,
            0.89,
            0.88,
            0.46,
            0.96,
            0.73,
            0.54,
            0.64,
            0.84,
            0.74,
            0.51,
            0.41,
            0.13,
            0.19,
            0.52,
            0.21,
            0.50,
            0.75,
            0.89,
            0.89,
            0.20,
            0.58,
            0.70,
            0.13,
            0.29,
            0.39,
            0.91,
            0.06,
            0.93,
            0.34,
            0.80,
            0.87,
            0.59,
            0.67,
            0.57,
            0.85,
            0.24,
            0.25,
            0.76,
            0.34,
            0.37,
            0.11,
            0.00,
            0.29,
            0.30,
            0.77,
            0.34,
            0.57,
            0.48,
            0.76,
            0.93,
            0.18,
            0.64,
            0.12,
            0.67,
            0.47,
            0.56,
            0.50,
            0.48,
            0.99,
            0.46,
            0.66,
            0.98,
            0.06,
            0.10,
            0.66,
            0.66,
            0.91,
            0.67,
            0.23,
            0.40,
            0.37,
            0.17,
            0.35,
            0.48,
            0.98,
            0.47,
            0.49,
            0.56,
            0.18,
            0.75,
            0.29,
            0.04,
            0.23,
            0.42,
            0.55,
            0.38,
            0.07,
            0.71,
            0.80,
        ],
        np.float32,
    ).reshape(2, 4, 4, 4)
    boxes = np.array([[5, 2, 10, 20], [1, 7, 30, 10]], np.float32)
    want_score = [1.020210, 0.890556, 1.007110, 0.945129, 0.987798, 1.073820, 0.930000, 0.8]
    want_points = [
        7.227723,
        4.250000,
        8.090278,
        17.750000,
        8.523379,
        12.589181,
        8.365580,
        10.122508,
        12.431603,
        8.934225,
        4.625000,
        9.239437,
        4.625000,
        7.375000,
        26.375000,
        9.625000,
    ]
    score, points = run(
        Op.HEATMAP_MAX_KEYPOINT,
        [f32(2, 4, 4, 4), f32(2, 4), boolean(False)],
        [f32(2, 4), f32(2, 4, 2)],
        heat,
        boxes,
    )
    np.testing.assert_allclose(score.ravel(), want_score, rtol=1e-5)
    np.testing.assert_allclose(points.ravel(), want_points, rtol=1e-5)
    # Quantized: the float algorithm on dequantized data, requantized.
    qh = quant(heat, 0.01, 0)
    q_score, q_points = run(
        Op.HEATMAP_MAX_KEYPOINT,
        [
            info(T.TENSOR_QUANT8_ASYMM, 2, 4, 4, 4, scale=0.01),
            info(T.TENSOR_QUANT16_ASYMM, 2, 4, scale=0.125),
            boolean(False),
        ],
        [
            info(T.TENSOR_QUANT8_ASYMM, 2, 4, scale=0.01, zp=10),
            info(T.TENSOR_QUANT16_ASYMM, 2, 4, 2, scale=0.125),
        ],
        qh,
        (boxes * 8).astype(np.uint16),
    )
    f_score, f_points = run(
        Op.HEATMAP_MAX_KEYPOINT,
        [f32(2, 4, 4, 4), f32(2, 4), boolean(False)],
        [f32(2, 4), f32(2, 4, 2)],
        qh.astype(np.float32) * np.float32(0.01),
        boxes,
    )
    np.testing.assert_allclose(q_score.astype(int), quant(f_score, 0.01, 10).astype(int), atol=1)
    np.testing.assert_allclose(
        q_points.astype(int), quant(f_points, 0.125, 0, np.uint16).astype(int), atol=1
    )
    rejects(
        Op.HEATMAP_MAX_KEYPOINT,
        [f32(2, 1, 1, 4), f32(2, 4), boolean(False)],
        [f32(2, 4), f32(2, 4, 2)],
        "below 2",
    )
    rejects(
        Op.HEATMAP_MAX_KEYPOINT,
        [f32(2, 4, 4, 4), f32(2, 4), boolean(False)],
        [f32(2, 4), info(T.TENSOR_QUANT16_ASYMM, 2, 4, 2, scale=0.125)],
        "output 1",
    )
    fails(
        Op.HEATMAP_MAX_KEYPOINT,
        [f32(1, 4, 4, 1), f32(1, 4), boolean(False)],
        [f32(1, 1), f32(1, 1, 2)],
        HEAT1[:1],
        np.array([[5, 2, 1, 20]], np.float32),
        match="x2 < x1",
    )
