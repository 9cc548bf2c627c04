"""ONNX mappers where mutation testing found the other tests blind (issue 32,
fifth pass), each against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper

from .test_onnx import against_onnxruntime, make_model

RNG = np.random.default_rng(33)


@pytest.mark.parametrize("axes", [[3], [2], [2, 3]], ids=str)
def test_a_crop_and_resize_of_some_axes_keeps_the_others_whole(axes: list[int]) -> None:
    """tf_crop_and_resize with ``axes`` (opset 18): the roi gives the crop of those
    axes only; every other axis is taken whole, from 0 to 1."""
    x = (1, 2, 4, 5)
    sizes = {2: 6, 3: 7}
    roi = {2: (0.25, 0.75), 3: (0.1, 0.8)}
    starts = [roi[a][0] for a in axes]
    ends = [roi[a][1] for a in axes]
    out = [sizes[a] if a in axes else d for a, d in enumerate(x)]
    model = make_model(
        [helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode="linear", axes=axes,
                          coordinate_transformation_mode="tf_crop_and_resize",
                          extrapolation_value=-3.0)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        {"roi": np.array(starts + ends, np.float32),
         "sizes": np.array([sizes[a] for a in axes], np.int64)},
        opset=18,
    )  # fmt: skip
    against_onnxruntime(model, {"x": RNG.standard_normal(x).astype(np.float32)})
