"""ONNX mappers on the cases their other tests leave out, each against onnxruntime
or a value worked out here: pools computed from their taps (LpPool with p = 1,
a padded max over negative values, a counted-padding 3-D average), pools'
auto_pad, and Upsample's scales (an attribute at opset 7, an input at opset 9)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper

from nnburst import onnx as nn_onnx

from .test_onnx import against_onnxruntime, make_model

RNG = np.random.default_rng(32)


def _pool(op: str, x: tuple[int, ...], **attributes: Any) -> Any:
    return make_model(
        [helper.make_node(op, ["x"], ["y"], **attributes)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"d{i}" for i in range(len(x))])],
        {},
        opset=19,
    )


POOLS = [
    # LpPool with p = 1: a sum of magnitudes, with and without padding
    ("LpPool", (1, 2, 7, 6), {"kernel_shape": [2, 3], "p": 1, "strides": [2, 1]}),
    ("LpPool", (1, 3, 9), {"kernel_shape": [3], "p": 1, "pads": [2, 1], "strides": [2]}),
    ("LpPool", (1, 2, 5, 6), {"kernel_shape": [2, 2], "p": 2, "auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    # a max whose padding must be -inf (every input negative), from its taps
    ("MaxPool", (2, 3, 8, 7), {"kernel_shape": [3, 2], "dilations": [2, 1], "pads": [2, 1, 1, 1]}),
    ("MaxPool", (1, 2, 9), {"kernel_shape": [4], "strides": [3], "pads": [2, 1], "ceil_mode": 1}),
    ("MaxPool", (1, 1, 4, 5, 6), {"kernel_shape": [2, 3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2, 2]}),
    ("MaxPool", (1, 1, 7, 5), {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER", "strides": [1, 2]}),
    ("MaxPool", (1, 2, 7, 6), {"kernel_shape": [2, 3], "dilations": [2, 2], "auto_pad": "VALID", "strides": [1, 2]}),
    # averages counting the explicit padding, from their taps
    ("AveragePool", (1, 2, 5, 4, 6), {"kernel_shape": [3, 2, 3], "pads": [1, 0, 2, 1, 1, 0],
                                      "count_include_pad": 1, "strides": [2, 1, 2]}),
    ("AveragePool", (2, 1, 10), {"kernel_shape": [4], "strides": [3], "pads": [2, 1], "count_include_pad": 1,
                                 "ceil_mode": 1}),
    ("AveragePool", (1, 2, 7, 7), {"kernel_shape": [3, 2], "dilations": [1, 2], "pads": [1, 1, 0, 1]}),
    # NNAPI's own pools with auto_pad
    ("AveragePool", (1, 2, 7, 6), {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("MaxPool", (1, 2, 6, 7), {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ("AveragePool", (1, 1, 6, 7), {"kernel_shape": [2, 3], "auto_pad": "VALID", "strides": [2, 2]}),
    ("AveragePool", (1, 2, 5, 6), {"kernel_shape": [2, 2], "auto_pad": "VALID"}),
]  # fmt: skip


@pytest.mark.parametrize("op,x,attributes", POOLS, ids=range(len(POOLS)))
def test_pools_from_taps_match_onnxruntime(op: str, x: tuple[int, ...], attributes: dict[str, Any]) -> None:  # fmt: skip
    values = RNG.standard_normal(x).astype(np.float32)
    if op == "MaxPool":
        values = -np.abs(values) - 0.5  # a padded 0 would win every window that reaches it
    against_onnxruntime(_pool(op, x, **attributes), {"x": values})


def test_lp_pool_with_p_one_is_the_sum_of_magnitudes() -> None:
    x = np.array([[[1.0, -2.0, 3.0, -4.0, 5.0]]], np.float32)
    model = _pool("LpPool", (1, 1, 5), kernel_shape=[2], p=1, pads=[1, 0])
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        (got,) = run(x)
    np.testing.assert_array_equal(got, [[[1.0, 3.0, 5.0, 7.0, 9.0]]])


def _upsample(x: tuple[int, ...], scales: list[float], opset: int) -> Any:
    inputs = ["x"] if opset < 9 else ["x", "scales"]
    attributes: dict[str, Any] = {"mode": "nearest"}
    if opset < 9:
        attributes["scales"] = scales
    node = helper.make_node("Upsample", inputs, ["y"], **attributes)
    initial = {} if opset < 9 else {"scales": np.array(scales, np.float32)}
    return make_model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d"])],
        initial,
        opset=opset,
    )


@pytest.mark.parametrize("opset", [7, 9])
@pytest.mark.parametrize(
    "scales", [[1.0, 1.0, 2.0, 3.0], [1.0, 1.0, 3.0, 2.0], [2.0, 1.0, 1.0, 3.0]]
)
def test_upsample_repeats_each_pixel_by_its_scale(opset: int, scales: list[float]) -> None:
    """(the last scales a batch axis: not NNAPI's resize, gathered by the scales)"""
    x = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    with nn_onnx.Runner(nn_onnx.load(_upsample(x.shape, scales, opset)), cache_dir=None) as run:
        (got,) = run(x)
    want = x
    for axis, scale in enumerate(scales):
        want = np.repeat(want, int(scale), axis=axis)
    np.testing.assert_array_equal(got, want)


PADS = [
    ("edge", np.float32, (1, 3, 4), [0, 2, 0, 0, 1, 3]),
    ("edge", np.int32, (2, 1, 3), [1, 2, 0, 0, 3, 1]),  # an axis of one element
    ("wrap", np.float32, (2, 3, 4), [0, 2, 5, 1, 4, 3]),
    ("wrap", np.int32, (3, 2), [2, 1, 0, 3]),
]  # fmt: skip


@pytest.mark.parametrize("mode,dtype,shape,pads", PADS, ids=range(len(PADS)))
def test_pads_by_gather_match_onnxruntime(mode: str, dtype: Any, shape: tuple[int, ...],
                                          pads: list[int]) -> None:  # fmt: skip
    kind = {np.int32: TensorProto.INT32, np.float32: TensorProto.FLOAT}
    model = make_model(
        [helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)],
        [helper.make_tensor_value_info("x", kind[dtype], list(shape))],
        [helper.make_tensor_value_info("y", kind[dtype], [f"d{i}" for i in range(len(shape))])],
        {"pads": np.array(pads, np.int64)},
        opset=19,
    )
    if dtype == np.float32:
        x = RNG.standard_normal(shape).astype(dtype)
    else:
        x = RNG.integers(-1000, 1000, shape).astype(dtype)
    against_onnxruntime(model, {"x": x})


@pytest.mark.parametrize(
    "attributes,x,scales",
    [
        (
            {"mode": "linear", "antialias": 1},
            (1, 2, 5, 9),
            [1, 1, 1.6, 0.5],
        ),  # up one axis, down the other
        ({"mode": "cubic", "antialias": 1}, (1, 1, 4, 12), [1, 1, 2.5, 0.75]),
    ],
)
def test_antialiasing_only_widens_a_downscale(attributes: dict[str, Any], x: tuple[int, ...],
                                              scales: list[float]) -> None:  # fmt: skip
    from .test_onnx_resize_pool import _resize

    model = _resize(attributes, x, scales)
    against_onnxruntime(model, {"x": RNG.standard_normal(x).astype(np.float32)})


def test_an_antialiased_downscale_of_up_to_4096_taps_a_row_maps() -> None:
    """Cubic's reach is 2 input positions, times 1 / scale when antialiasing: a
    1/1024 downscale takes 4096 taps a row, the most that maps; 2/2050 is refused."""
    from .test_onnx_resize_pool import _resize

    model = _resize({"mode": "cubic", "antialias": 1}, (1, 1, 1, 2048), sizes=[1, 1, 1, 2])
    against_onnxruntime(model, {"x": RNG.standard_normal((1, 1, 1, 2048)).astype(np.float32)})
    wider = _resize({"mode": "cubic", "antialias": 1}, (1, 1, 1, 2050), sizes=[1, 1, 1, 2])
    with pytest.raises(nn_onnx.UnsupportedModelError, match="rows of over 4096 taps"):
        nn_onnx.load(wider)
