"""ONNX Resize in every mode and pools with ceil_mode, dilations, 1-D/3-D windows
and LpPool, against onnxruntime on random inputs and sizes no node test uses."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper

from nnburst import onnx as nn_onnx

from .test_onnx import against_onnxruntime, make_model

RNG = np.random.default_rng(28)


def _resize(attributes: dict[str, Any], x: tuple[int, ...], scales: list[float] | None = None,
            sizes: list[int] | None = None, roi: list[float] | None = None) -> Any:  # fmt: skip
    initial: dict[str, np.ndarray] = {}
    names = ["x", "", "", ""]
    if roi is not None:
        initial["roi"], names[1] = np.array(roi, np.float32), "roi"
    if scales is not None:
        initial["scales"], names[2] = np.array(scales, np.float32), "scales"
    if sizes is not None:
        initial["sizes"], names[3] = np.array(sizes, np.int64), "sizes"
    while names[-1] == "":
        names.pop()
    node = helper.make_node("Resize", names, ["y"], **attributes)
    return make_model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"d{i}" for i in range(len(x))])],
        initial,
        opset=19,
    )


RESIZES = [
    ({"mode": "cubic"}, (1, 2, 5, 7), [1, 1, 1.6, 2.3], None, None),
    ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, (1, 1, 6, 6), [1, 1, 0.5, 1.5], None, None),
    ({"mode": "cubic", "antialias": 1}, (1, 3, 9, 11), None, [1, 3, 4, 5], None),
    ({"mode": "linear", "antialias": 1}, (2, 1, 10, 7), [1, 1, 0.4, 0.6], None, None),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, (1, 2, 5, 1), None, [1, 2, 3, 1], None),
    ({"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, (1, 1, 4, 6), [1, 1, 1.7, 0.7], None, None),
    ({"mode": "nearest"}, (1, 2, 5, 6), [1, 1, 1.5, 0.5], None, None),  # half_pixel, round_prefer_floor
    ({"mode": "nearest", "nearest_mode": "ceil", "coordinate_transformation_mode": "align_corners"},
     (1, 1, 4, 5), None, [1, 1, 7, 3], None),
    ({"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}, (1, 1, 3, 4), [1, 1, 2, 3], None, None),
    ({"mode": "nearest", "keep_aspect_ratio_policy": "not_larger", "axes": [2, 3]}, (1, 1, 6, 8), None, [3, 7], None),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 2.5},
     (1, 1, 5, 5), None, [1, 1, 4, 6], [0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3]),
    ({"mode": "linear"}, (3, 8), None, [5, 8], None),  # a rank-2 tensor, not an image
]  # fmt: skip


@pytest.mark.parametrize("attributes,x,scales,sizes,roi", RESIZES, ids=range(len(RESIZES)))
def test_resize_modes_match_onnxruntime(attributes: dict[str, Any], x: tuple[int, ...],
                                        scales: Any, sizes: Any, roi: Any) -> None:  # fmt: skip
    model = _resize(attributes, x, scales, sizes, roi)
    against_onnxruntime(model, {"x": RNG.standard_normal(x).astype(np.float32)})


def test_a_resize_that_cannot_be_computed_is_refused_by_name() -> None:
    model = _resize(
        {"mode": "nearest", "coordinate_transformation_mode": "tf_crop_and_resize"},
        (1, 1, 4, 4), sizes=[1, 1, 3, 3], roi=[0, 0, -0.5, 0, 1, 1, 1, 1],
    )  # fmt: skip
    with pytest.raises(nn_onnx.UnsupportedModelError, match="nearest tf_crop_and_resize"):
        nn_onnx.load(model)


def _pool(op: str, x: tuple[int, ...], **attributes: Any) -> Any:
    return make_model(
        [helper.make_node(op, ["x"], ["y"], **attributes)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"d{i}" for i in range(len(x))])],
        {},
        opset=19,
    )


POOLS = [
    ("MaxPool", (1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("AveragePool", (1, 2, 7, 6), {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [1, 0, 0, 1], "ceil_mode": 1}),
    ("AveragePool", (1, 1, 6, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                   "count_include_pad": 1, "ceil_mode": 1}),
    ("MaxPool", (1, 2, 9, 9), {"kernel_shape": [2, 2], "dilations": [2, 3]}),
    ("AveragePool", (2, 3, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("MaxPool", (1, 1, 5, 6, 4), {"kernel_shape": [2, 2, 2], "strides": [1, 2, 1], "ceil_mode": 1}),
    ("AveragePool", (1, 2, 4, 5, 6), {"kernel_shape": [2, 3, 2], "dilations": [1, 2, 2], "pads": [0, 1, 1, 1, 0, 1]}),
    ("LpPool", (1, 2, 6, 6), {"kernel_shape": [3, 3], "p": 3, "strides": [2, 2]}),
    ("LpPool", (1, 2, 8), {"kernel_shape": [2], "pads": [1, 1]}),
]  # fmt: skip


@pytest.mark.parametrize("op,x,attributes", POOLS, ids=range(len(POOLS)))
def test_pools_match_onnxruntime(op: str, x: tuple[int, ...], attributes: dict[str, Any]) -> None:
    model = _pool(op, x, **attributes)
    against_onnxruntime(model, {"x": RNG.standard_normal(x).astype(np.float32)})


def test_a_2d_ceil_mode_pool_stays_one_nnapi_pool() -> None:
    model = _pool("AveragePool", (1, 2, 7, 8), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    codes = [op.code.name for op in nn_onnx.load(model).model.hal_model.main.operations]
    assert codes == ["AVERAGE_POOL_2D"]
