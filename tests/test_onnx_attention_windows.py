"""ONNX Attention's positional masks, known at load (transformer._positional_bias):
left and right windows (opset 25), keys padded per batch (nonpad_kv_seqlen,
opset 24) with and without causality or past keys; against ONNX's reference
(onnxruntime's kernel takes none of them)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from nnburst import onnx as nn_onnx  # noqa: E402

RNG = np.random.default_rng(32)
NAMES = ["Q", "K", "V", "mask", "past_key", "past_value", "nonpad"]


def _model(inputs: dict[str, tuple[int, ...]], attributes: dict[str, Any], opset: int,
           constants: dict[str, np.ndarray]) -> Any:  # fmt: skip
    names = [n if n in inputs or n in constants else "" for n in NAMES]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("Attention", names, ["Y"], **attributes)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


QKV = {"Q": (1, 2, 5, 4), "K": (1, 2, 5, 4), "V": (1, 2, 5, 4)}
LONGER_KEYS = {"Q": (1, 2, 4, 4), "K": (1, 2, 7, 4), "V": (1, 2, 7, 4)}
PADDED = {"Q": (2, 2, 4, 4), "K": (2, 2, 6, 4), "V": (2, 2, 6, 4)}
CASES = [
    (QKV, {"left_window_size": 1}, 25, {}),
    (QKV, {"left_window_size": 0, "right_window_size": 1}, 25, {}),
    (QKV, {"left_window_size": 2, "is_causal": 1}, 25, {}),
    (LONGER_KEYS, {"right_window_size": 0}, 25, {}),
    (LONGER_KEYS, {"left_window_size": 1, "right_window_size": 2}, 25, {}),
    (PADDED, {}, 24, {"nonpad": np.array([3, 5], np.int64)}),
    (PADDED, {"is_causal": 1}, 24, {"nonpad": np.array([4, 6], np.int64)}),
    (PADDED, {"is_causal": 1, "left_window_size": 1}, 25, {"nonpad": np.array([6, 5], np.int64)}),
]


@pytest.mark.parametrize("inputs,attributes,opset,constants", CASES, ids=range(len(CASES)))
def test_attention_masks_match_onnx_reference(inputs: dict, attributes: dict, opset: int,
                                              constants: dict) -> None:  # fmt: skip
    model = _model(inputs, attributes, opset, constants)
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in inputs.items()}
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        (got,) = run(*feeds.values())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
