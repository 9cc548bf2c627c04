"""ONNX Attention (opset 23), Erf and exact Gelu, against onnxruntime and math.erf."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from nnburst import onnx as nn_onnx  # noqa: E402
from nnburst.codes import OperationCode  # noqa: E402

from .test_onnx import against_onnxruntime, make_model  # noqa: E402

RNG = np.random.default_rng(28)
F = TensorProto.FLOAT


def _attention(
    inputs: dict[str, tuple[int, ...]], outputs: dict[str, int], **attributes: Any
) -> Any:
    names = ["Q", "K", "V", "mask", "past_key", "past_value"]
    node_inputs = [n if n in inputs else "" for n in names]
    while node_inputs[-1] == "":
        node_inputs.pop()
    out_names = ["Y", "present_key", "present_value", "qk"]
    node_outputs = [n if n in outputs else "" for n in out_names]
    while node_outputs[-1] == "":
        node_outputs.pop()
    types = {"mask": TensorProto.BOOL} if attributes.pop("bool_mask", False) else {}
    return make_model(
        [helper.make_node("Attention", node_inputs, node_outputs, **attributes)],
        [helper.make_tensor_value_info(n, types.get(n, F), list(s)) for n, s in inputs.items()],
        [
            helper.make_tensor_value_info(n, F, [f"{n}{i}" for i in range(r)])
            for n, r in outputs.items()
        ],
        {},
        opset=23,
    )


def _feeds(inputs: dict[str, tuple[int, ...]], bool_mask: bool = False) -> dict[str, np.ndarray]:
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in inputs.items()}
    if bool_mask and "mask" in feeds:
        feeds["mask"] = RNG.random(inputs["mask"]) > 0.3
        feeds["mask"][..., 0] = True  # no row masked entirely
    return feeds


CASES = [
    ({"Q": (2, 3, 4, 8), "K": (2, 3, 6, 8), "V": (2, 3, 6, 5)}, {"Y": 4}, {}),
    ({"Q": (1, 4, 16), "K": (1, 6, 16), "V": (1, 6, 8)}, {"Y": 3}, {"q_num_heads": 2, "kv_num_heads": 2}),
    ({"Q": (2, 6, 3, 8), "K": (2, 2, 5, 8), "V": (2, 2, 5, 8)}, {"Y": 4}, {"is_causal": 1}),  # grouped
    ({"Q": (1, 2, 4, 8), "K": (1, 2, 4, 8), "V": (1, 2, 4, 8), "mask": (4, 4)}, {"Y": 4}, {"scale": 0.3}),
    ({"Q": (1, 2, 4, 8), "K": (1, 2, 4, 8), "V": (1, 2, 4, 8), "mask": (1, 2, 4, 4)}, {"Y": 4},
     {"bool_mask": True}),
    ({"Q": (1, 2, 3, 4), "K": (1, 2, 2, 4), "V": (1, 2, 2, 4), "past_key": (1, 2, 5, 4), "past_value": (1, 2, 5, 4)},
     {"Y": 4, "present_key": 4, "present_value": 4}, {"is_causal": 1}),
    # (mode 0 with a softcap is left out: onnxruntime gives the raw product, ONNX's reference
    # and node tests the softcapped one, which nnburst follows)
    ({"Q": (1, 2, 4, 8), "K": (1, 2, 6, 8), "V": (1, 2, 6, 8)}, {"Y": 4, "qk": 4},
     {"softcap": 2.0, "qk_matmul_output_mode": 3}),
    ({"Q": (1, 2, 4, 8), "K": (1, 2, 6, 8), "V": (1, 2, 6, 8)}, {"Y": 4, "qk": 4}, {}),
]  # fmt: skip


@pytest.mark.parametrize("inputs,outputs,attributes", CASES, ids=range(len(CASES)))
def test_attention_matches_onnxruntime(inputs: dict, outputs: dict, attributes: dict) -> None:
    bool_mask = bool(attributes.get("bool_mask"))
    model = _attention(inputs, outputs, **attributes)
    codes = [op.code for op in nn_onnx.load(model).model.hal_model.main.operations]
    assert codes.count(OperationCode.BATCH_MATMUL) == 2
    against_onnxruntime(model, _feeds(inputs, bool_mask))


def test_attention_of_float16_is_refused_by_name() -> None:
    model = make_model(
        [helper.make_node("Attention", ["Q", "K", "V"], ["Y"])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT16, [1, 2, 3, 4]) for n in "QKV"],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, [1, 2, 3, 4])],
        {},
        opset=23,
    )
    with pytest.raises(nn_onnx.UnsupportedModelError, match=r"Attention \(float16 operands\)"):
        nn_onnx.load(model)


def _unary(op: str, **attributes: Any) -> Any:
    return make_model(
        [helper.make_node(op, ["x"], ["y"], **attributes)],
        [helper.make_tensor_value_info("x", F, [4001])],
        [helper.make_tensor_value_info("y", F, [4001])],
        {},
        opset=20,
    )


def test_erf_is_within_float32_rounding_of_math_erf() -> None:
    x = np.concatenate([np.linspace(-6, 6, 3001), np.geomspace(1e-6, 0.6, 1000)]).astype(np.float32)
    with nn_onnx.Runner(nn_onnx.load(_unary("Erf")), cache_dir=None) as run:
        (got,) = run(x)
    want = np.array([math.erf(float(v)) for v in x])
    error = np.abs(got - want)
    assert (error <= 3e-7 + 2e-6 * np.abs(want)).all(), float(error.max())
    assert (np.abs(got[x < 0.5] - want[x < 0.5]) <= 1e-6 * np.abs(want[x < 0.5]) + 1e-12).all()


def test_exact_gelu_matches_onnxruntime() -> None:
    x = np.linspace(-8, 8, 4001).astype(np.float32)
    against_onnxruntime(_unary("Gelu"), {"x": x})


@pytest.mark.parametrize(
    "shape,attributes",
    [((2, 3, 5, 8), {"interleaved": 1}), ((2, 5, 24), {"num_heads": 2, "rotary_embedding_dim": 8})],
)
def test_rotary_embedding_matches_onnxruntime(shape: tuple[int, ...], attributes: dict) -> None:
    half = attributes.get("rotary_embedding_dim", shape[-1]) // 2
    angles = RNG.uniform(0, 6.3, (16, half))
    model = make_model(
        [helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "ids"], ["y"], **attributes)],
        [helper.make_tensor_value_info("x", F, list(shape))],
        [helper.make_tensor_value_info("y", F, list(shape))],
        {
            "cos": np.cos(angles).astype(np.float32),
            "sin": np.sin(angles).astype(np.float32),
            "ids": RNG.integers(0, 16, (2, 5)).astype(np.int64),
        },
        opset=23,
    )
    against_onnxruntime(model, {"x": RNG.standard_normal(shape).astype(np.float32)})


def test_a_row_masked_entirely_attends_to_nothing() -> None:
    """ONNX's rule: such a row's output (and its softmax) is 0, not NaN."""
    inputs = {"Q": (1, 1, 3, 4), "K": (1, 1, 5, 4), "V": (1, 1, 5, 4), "mask": (3, 5)}
    model = _attention(inputs, {"Y": 4, "qk": 4}, bool_mask=True, qk_matmul_output_mode=3)
    feeds = _feeds(inputs)
    feeds["mask"] = np.array([[1, 0, 1, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], bool)
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        y, probabilities = run(*feeds.values())
    assert (y[0, 0, 1] == 0).all() and (probabilities[0, 0, 1] == 0).all()
    scores = feeds["Q"][0, 0] @ feeds["K"][0, 0].T / 2  # scale 1/sqrt(4)
    kept = np.exp(np.where(feeds["mask"], scores, -np.inf))
    for row in (0, 2):
        weights = kept[row] / kept[row].sum()
        np.testing.assert_allclose(probabilities[0, 0, row], weights, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(y[0, 0, row], weights @ feeds["V"][0, 0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,infinity", [("ReduceMax", -np.inf), ("ReduceMin", np.inf)])
def test_a_max_of_minus_infinities_is_minus_infinity(op: str, infinity: float) -> None:
    """NNAPI's REDUCE_MAX starts from the lowest float; ONNX's (masks, attention's
    expanded graphs) must see −∞ (and ReduceMin +∞)."""
    model = make_model(
        [helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=0)],
        [helper.make_tensor_value_info("x", F, [3, 4])],
        [helper.make_tensor_value_info("y", F, [3])],
        {},
    )
    lowest = np.finfo(np.float32).min * np.sign(-infinity)
    x = np.array([[infinity] * 4, [1, infinity, 2, 0], [lowest] * 4], np.float32)
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        (y,) = run(x)
    assert y[0] == infinity and y[1] == (2 if infinity < 0 else 0) and y[2] == lowest
