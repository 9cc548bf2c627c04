"""nnburst.onnx: ONNX graphs converted to NNAPI operations, checked against onnxruntime,
and ONNX's own backend node tests driven through nnburst.onnx.backend."""

from __future__ import annotations

import collections
import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="nnburst.onnx needs onnx (pip install '.[onnx]')")
ort = pytest.importorskip(
    "onnxruntime", reason="onnxruntime (pip install '.[peers]') is the reference"
)

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from nnburst import onnx as nn_onnx  # noqa: E402
from nnburst.errors import BadDataError  # noqa: E402

from .model_cache import wheel_directory, wheel_member  # noqa: E402
from .peers import REPO  # noqa: E402

RNG = np.random.default_rng(11)


def make_model(
    nodes: list[Any],
    inputs: list[Any],
    outputs: list[Any],
    initializers: dict[str, np.ndarray],
    opset: int = 17,
) -> Any:
    model = _unchecked_model(nodes, inputs, outputs, initializers, opset)
    onnx.checker.check_model(model)
    return model


def _unchecked_model(nodes: list[Any], inputs: list[Any], outputs: list[Any],
                     initializers: dict[str, np.ndarray], opset: int = 18) -> Any:  # fmt: skip
    """make_model without ONNX's checker: a model it would reject."""
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        outputs,
        [numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def against_onnxruntime(model: Any, feeds: dict[str, np.ndarray], **load: Any) -> None:
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    with nn_onnx.Runner(nn_onnx.load(model, **load), cache_dir=None) as run:
        got = run(*feeds.values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_a_small_cnn_with_batch_norm_depthwise_and_gemm_matches_onnxruntime() -> None:
    f32 = np.float32
    weights = {
        "W": RNG.standard_normal((8, 3, 3, 3)).astype(f32), "B": RNG.standard_normal(8).astype(f32),
        "DW": RNG.standard_normal((8, 1, 3, 3)).astype(f32),
        "GW": RNG.standard_normal((8, 4, 1, 1)).astype(f32),
        "sc": RNG.uniform(0.5, 1.5, 8).astype(f32), "bi": RNG.standard_normal(8).astype(f32),
        "me": RNG.standard_normal(8).astype(f32), "va": RNG.uniform(0.5, 1.5, 8).astype(f32),
        "G": RNG.standard_normal((5, 8)).astype(f32), "GB": RNG.standard_normal(5).astype(f32),
    }  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "sc", "bi", "me", "va"], ["bn"]),
        helper.make_node("Clip", ["bn"], ["r"], min=0.0, max=6.0)
        if False
        else helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("Conv", ["r", "DW"], ["dw"], group=8, auto_pad="SAME_UPPER"),
        helper.make_node("Conv", ["dw", "GW"], ["gc"], group=2),
        helper.make_node("HardSigmoid", ["gc"], ["hs"]),
        helper.make_node("MaxPool", ["hs"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["mp"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["fl"]),
        helper.make_node("Gemm", ["fl", "G", "GB"], ["y"], transB=1),
        helper.make_node("Softmax", ["y"], ["p"], axis=-1),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, ["batch", 5])],
        weights,
    )
    loaded = nn_onnx.load(model)
    assert [(i.name, i.shape) for i in loaded.inputs] == [("x", (1, 3, 16, 16))]  # the batch is 1
    codes = [op.code.name for op in loaded.model.hal_model.main.operations]
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "GROUPED_CONV_2D", "FULLY_CONNECTED"} <= set(codes)
    against_onnxruntime(model, {"x": RNG.standard_normal((1, 3, 16, 16)).astype(f32)})


def test_shape_arithmetic_is_folded_at_load() -> None:
    """Shape → Gather → Concat → Reshape: evaluated once, a single RESHAPE is left."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])],
        {
            "zero": np.array(0, np.int64),
            "axes": np.array([0], np.int64),
            "minus_one": np.array([-1], np.int64),
        },
    )
    codes = [op.code.name for op in nn_onnx.load(model).model.hal_model.main.operations]
    assert codes == ["RESHAPE"]
    against_onnxruntime(model, {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32)})


def test_pad_amounts_reordered_by_a_transpose_are_folded_at_load() -> None:
    """PyTorch's padding: a [begin, end] row per axis, transposed and flattened into
    ONNX's order; Pad takes only constant amounts, so the Transpose must fold."""
    model = make_model(
        [
            helper.make_node("Transpose", ["table"], ["by_side"]),
            helper.make_node("Reshape", ["by_side", "flat"], ["pads"]),
            helper.make_node("Pad", ["x", "pads"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 8])],
        {"table": np.array([[0, 1], [2, 3]], np.int64), "flat": np.array([-1], np.int64)},
    )
    against_onnxruntime(model, {"x": RNG.standard_normal((2, 3)).astype(np.float32)})


def test_unsupported_operators_are_listed_with_counts() -> None:
    """Every operator and attribute value nnburst cannot run, in one error, with counts."""
    nodes = [
        helper.make_node("Einsum", ["x", "x"], ["e"], equation="abcd,abcd->abcd"),
        helper.make_node("Einsum", ["e", "e"], ["f"], equation="abcd,abcd->abcd"),
        helper.make_node(
            "Resize",
            ["f", "", "scales"],
            ["y"],
            coordinate_transformation_mode="tf_crop_and_resize",
        ),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])],
        {"scales": np.array([1.0, 1.0, 2.0, 2.0], np.float32)},
    )
    with pytest.raises(nn_onnx.UnsupportedModelError) as info:
        nn_onnx.load(model)
    assert info.value.unsupported == {
        "Einsum": 2,
        "Resize (tf_crop_and_resize without a roi)": 1,
    }


def test_dynamic_dimensions_need_input_shapes() -> None:
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "time"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "time"])],
        {},
    )
    with pytest.raises(BadDataError, match="dynamic dimension 1 \\(time\\): pass input_shapes"):
        nn_onnx.load(model)
    against_onnxruntime(
        model, {"x": RNG.standard_normal((1, 7)).astype(np.float32)}, input_shapes={"x": (1, 7)}
    )
    with pytest.raises(BadDataError, match="names no input"):
        nn_onnx.load(model, {"nope": (1, 2)})


def test_every_operator_family_is_imported_by_convert() -> None:
    """A family module convert.py leaves out registers nothing, and its
    operators would be refused as unknown."""
    from nnburst.onnx import ops

    convert = importlib.import_module(
        "nnburst.onnx.convert"
    )  # the package's convert is the function
    families = {module.__name__.rsplit(".", 1)[-1] for module in convert.FAMILIES}
    modules = {module.name for module in pkgutil.iter_modules(ops.__path__)}
    assert modules - {"building"} <= families


def test_not_an_onnx_file_is_bad_data(tmp_path) -> None:
    with pytest.raises(BadDataError, match="not an ONNX model"):
        nn_onnx.load(b"\xff\x00 certainly not protobuf \x01\x02")
    with pytest.raises(BadDataError, match="cannot read"):
        nn_onnx.load(tmp_path / "missing.onnx")


# -- real models --------------------------------------------------------------------------------

REAL = [
    ("openwakeword", "0.5.1", "openwakeword/resources/models/embedding_model.onnx", {}),
    ("openwakeword", "0.5.1", "openwakeword/resources/models/alexa_v0.1.onnx", {}),
    ("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": (1, 3, 48, 192)}),
    # a detector (PP-OCRv4 text detection, DBNet): ConvTranspose, Resize, HardSigmoid
    ("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", {"x": (1, 3, 160, 224)}),
]  # fmt: skip


@pytest.mark.parametrize(
    "package,version,member,shapes", REAL, ids=[r[2].split("/")[-1] for r in REAL]
)
def test_real_models_match_onnxruntime(
    package: str, version: str, member: str, shapes: dict[str, Any]
) -> None:
    model = onnx.load(str(wheel_member(package, version, member)))
    loaded = nn_onnx.load(model, shapes)
    feeds = {i.name: RNG.uniform(-1, 1, i.shape).astype(i.dtype) for i in loaded.inputs}
    against_onnxruntime(model, feeds, input_shapes=shapes)


# -- ONNX's backend node tests --------------------------------------------------------------------

#: Node tests that pass today, by name (onnx 1.22.0's data; see docs/onnx-node-tests.md):
#: each must keep passing.  A refusal cannot hide a regression among the refusals.
PASSING = [
    line
    for line in (Path(__file__).parent / "onnx_node_tests_passing.txt").read_text().splitlines()
    if line and not line.startswith("#")
]
#: The count as a floor: the pinned tests pass, so at least this many do.
MIN_PASSING = 1133


def test_the_pinned_node_tests_are_distinct_and_as_many_as_the_floor() -> None:
    assert len(set(PASSING)) == len(PASSING) == MIN_PASSING


#: One node test per mapping that composes NNAPI operations or transposes a computed
#: operand: each must pass, not merely be refused.
MUST_PASS = [
    "test_layer_normalization_4d_axis1",
    "test_rms_normalization_3d_axis2_epsilon",
    "test_reduce_l1_keep_dims_example",
    "test_reduce_l2_do_not_keepdims_example",
    "test_reduce_log_sum_desc_axes",
    "test_reduce_sum_square_keepdims_example",
    "test_basic_conv_with_padding",
    "test_matmul_2d",
    "test_gemm_default_no_bias",
    "test_gemm_all_attributes",
    "test_tril_neg",
    "test_triu_one_row",
    "test_where_example",
    "test_expand_dim_changed",
    "test_convtranspose",
    "test_convtranspose_pads",
    "test_convtranspose_autopad_same",
    "test_batchnorm_example",
    "test_clip_default_min",
    "test_depthtospace_crd_mode_example",
    "test_round",
    "test_sinh",
    "test_mod_mixed_sign_int32",
    "test_reflect_pad",
    "test_constant_pad_axes",
    "test_gather_elements_negative_indices",
    "test_scatter_elements_with_duplicate_indices",
    "test_scatternd_multiply",
    "test_argmax_keepdims_random_select_last_index",
    "test_top_k_smallest",
    "test_group_normalization_example",
    "test_matmul_bcast",
    "test_matmul_1d_3d",
    "test_lstm_with_initial_bias",  # weights and biases cut per gate by SLICE (graph inputs)
    "test_lstm_batchwise",
    "test_causal_conv_with_state_b1_c1_degenerate_expanded",  # a 1-D Conv over a height of 1
    "test_nllloss_NCd1d2_with_weight_reduction_mean",
    "test_sce_mean_weight_ii_4d_log_prob",
    "test_reduce_sum_empty_set",  # an empty input frozen, its reduction folded
    "test_reduce_l2_default_axes_keepdims_example",  # an empty axes constant
    "test_less_equal_int8",
    "test_maxpool_2d_uint8",
    "test_simple_rnn_bidirectional",
    "test_gru_batchwise",
]


@pytest.mark.timeout(900)
def test_onnx_node_tests_pass_or_say_unsupported() -> None:
    """ONNX's backend test runner drives nnburst over the onnx 1.22.0 node tests
    (later wheels ship no data): no test may get a wrong answer."""
    from nnburst.onnx.backend import run_node_tests

    outcomes = run_node_tests(
        wheel_directory("onnx", "1.22.0", "onnx/backend/test/data/node").parent
    )
    wrong = {name: why for name, why in outcomes.items() if why.startswith("wrong")}
    assert not wrong, list(wrong.items())[:20]
    regressed = {name: outcomes.get(name, "not run") for name in PASSING}
    regressed = {name: why for name, why in regressed.items() if why != "pass"}
    assert not regressed, f"{len(regressed)} pinned node tests no longer pass: {regressed}"
    passed = sum(1 for why in outcomes.values() if why == "pass")
    assert passed >= MIN_PASSING, (passed, collections.Counter(outcomes.values()))
    assert {name: outcomes.get(name) for name in MUST_PASS} == dict.fromkeys(MUST_PASS, "pass")


def test_nnburst_run_and_bench_take_an_onnx_file(tmp_path, capsys, monkeypatch) -> None:
    from nnburst.tools.cli import main

    monkeypatch.setenv("HOME", str(tmp_path))  # the compilation cache goes under it
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        {},
    )
    path = tmp_path / "relu.onnx"
    path.write_bytes(model.SerializeToString())
    value = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.save(tmp_path / "x.npy", value)
    assert main(["run", str(path), "--input", str(tmp_path / "x.npy")]) == 0
    assert "y: [2, 3] float32 sum 12" in capsys.readouterr().out
    assert main(["bench", "--model", str(path), "--duration", "0.05"]) == 0
    out = capsys.readouterr().out
    for row in (
        "onnxruntime in-process",
        "onnxruntime via Pipe",
        "sync in-process",
        "burst in-process",
        "sync cross-process",
        "burst cross-process",
    ):
        assert row in out
    assert "not timed" not in out


def test_if_branches_become_referenced_models_like_onnxruntime() -> None:
    """openWakeWord's hey_jarvis (ONNX): an If whose branches read outer values."""
    path = wheel_member(
        "openwakeword", "0.5.1", "openwakeword/resources/models/hey_jarvis_v0.1.onnx"
    )
    model = onnx.load(str(path))
    loaded = nn_onnx.load(model)
    assert "IF" in [op.code.name for op in loaded.model.hal_model.main.operations]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    scores = []
    with nn_onnx.Runner(loaded, cache_dir=None) as run:
        for seed, spread in enumerate((1e-6, 0.1, 1.0, 20.0)):
            x = (
                np.random.default_rng(seed)
                .normal(0, spread, loaded.inputs[0].shape)
                .astype(np.float32)
            )
            (got,) = run(x)
            (want,) = session.run(None, {loaded.inputs[0].name: x})
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
            scores.append(float(got.reshape(-1)[0]))
    assert min(scores) < 0.01 and max(scores) > 0.9  # both branches taken


def _branches(
    then: list[Any], then_shape: list[Any], other: list[Any], other_shape: list[Any], out: str
) -> dict[str, Any]:
    """An If's two branches, each ending in ``out`` + "_then" or "_else"."""
    return {
        f"{side}_branch": helper.make_graph(
            nodes,
            side,
            [],
            [helper.make_tensor_value_info(f"{out}_{side}", TensorProto.FLOAT, shape)],
        )
        for side, nodes, shape in (("then", then, then_shape), ("else", other, other_shape))
    }


@pytest.mark.parametrize("shape", [(1, 3), (2, 3), (3,)])
def test_an_if_on_shapes_alone_is_replaced_by_its_taken_branch_like_onnxruntime(
    shape: tuple[int, ...],
) -> None:
    """PyTorch's "squeeze if axis 0 is 1" and "unsqueeze unless rank 2" (a Not): the
    branches give different shapes, which no NNAPI IF can, but the condition is known
    at load.  Every branch names a value "t": each inlined one must stay its own."""
    f32 = TensorProto.FLOAT
    squeeze = _branches(
        [helper.make_node("Squeeze", ["x", "zero"], ["t"]), helper.make_node("Neg", ["t"], ["a_then"])],
        [3],
        [helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Neg", ["t"], ["a_else"])],
        [None] * len(shape),
        "a",
    )  # fmt: skip
    unsqueeze = _branches(
        [helper.make_node("Unsqueeze", ["x", "zero"], ["t"]), helper.make_node("Abs", ["t"], ["b_then"])],
        [1, 3],
        [helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Abs", ["t"], ["b_else"])],
        [None] * len(shape),
        "b",
    )  # fmt: skip
    model = make_model(
        [
            helper.make_node("Shape", ["x"], ["dims"]),
            helper.make_node("Gather", ["dims", "zero"], ["first"]),
            helper.make_node("Equal", ["first", "one"], ["single"]),
            helper.make_node("If", ["single"], ["a"], **squeeze),
            helper.make_node("Size", ["dims"], ["rank"]),
            helper.make_node("Equal", ["rank", "two"], ["matrix"]),
            helper.make_node("Not", ["matrix"], ["not_matrix"]),
            helper.make_node("If", ["not_matrix"], ["b"], **unsqueeze),
            helper.make_node("Add", ["a", "b"], ["y"]),
        ],
        # Dimensions named, not given: onnxruntime refuses a Squeeze of 3 even untaken.
        [helper.make_tensor_value_info("x", f32, [f"d{i}" for i in range(len(shape))])],
        [helper.make_tensor_value_info("y", f32, [None, 3])],
        {"zero": np.array([0], np.int64), "one": np.array([1], np.int64), "two": np.array(2, np.int64)},
    )  # fmt: skip
    loaded = nn_onnx.load(model, {"x": shape})
    assert "IF" not in [op.code.name for op in loaded.model.hal_model.main.operations]
    against_onnxruntime(
        model, {"x": RNG.standard_normal(shape).astype(np.float32)}, input_shapes={"x": shape}
    )


@pytest.mark.parametrize(
    ("attributes", "operation"),
    [
        ({"mode": "linear"}, "RESIZE_BILINEAR"),  # half_pixel by default
        ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, "RESIZE_BILINEAR"),
        ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, "RESIZE_BILINEAR"),
        (
            {
                "mode": "nearest",
                "coordinate_transformation_mode": "asymmetric",
                "nearest_mode": "floor",
            },
            "RESIZE_NEAREST_NEIGHBOR",
        ),
        # no NNAPI flags compute these the same: tables built at load (test_onnx_resize.py)
        ({"mode": "nearest"}, "GATHER"),  # round_prefer_floor on half_pixel
        ({"mode": "cubic"}, "FULLY_CONNECTED"),
    ],
)
def test_resize_maps_to_nnapis_resize_only_where_it_computes_the_same(
    attributes: dict[str, str], operation: str
) -> None:
    model = make_model(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], **attributes)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 8])],
        {"scales": np.array([1, 1, 2, 2], np.float32)},
    )
    codes = {op.code.name for op in nn_onnx.load(model).model.hal_model.main.operations}
    assert operation in codes
    against_onnxruntime(model, {"x": RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)})


def _loop_body(nodes: list[Any], carried: list[Any], outputs: list[Any]) -> Any:
    """A Loop body: (iteration, condition, *carried) → (condition, *outputs)."""
    return helper.make_graph(
        nodes,
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
            *carried,
        ],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), *outputs],
    )


def test_a_for_loop_with_a_scan_output_becomes_a_while_like_onnxruntime() -> None:
    """A constant trip count and no condition: the scan output's length is known, each
    row written by the body; the body reads an outer input and gathers by iteration."""
    f32 = TensorProto.FLOAT
    body = _loop_body(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Gather", ["table", "i"], ["row"], axis=0),
            helper.make_node("Mul", ["y_in", "w"], ["m"]),
            helper.make_node("Add", ["m", "row"], ["y_out"]),
            helper.make_node("Relu", ["y_out"], ["scan"]),
        ],
        [helper.make_tensor_value_info("y_in", f32, [3])],
        [
            helper.make_tensor_value_info("y_out", f32, [3]),
            helper.make_tensor_value_info("scan", f32, [3]),
        ],
    )
    model = make_model(
        [helper.make_node("Loop", ["n", "", "y0"], ["y", "ys"], body=body)],
        [helper.make_tensor_value_info(n, f32, [3]) for n in ("y0", "w")],
        [
            helper.make_tensor_value_info("y", f32, [3]),
            helper.make_tensor_value_info("ys", f32, [4, 3]),
        ],
        {"n": np.array(4, np.int64), "table": RNG.standard_normal((4, 3)).astype(np.float32)},
    )
    loaded = nn_onnx.load(model)
    assert [op.code.name for op in loaded.model.hal_model.main.operations] == ["WHILE"]
    feeds = {"y0": np.array([1, -2, 3], np.float32), "w": np.array([0.5, 1.5, -1], np.float32)}
    against_onnxruntime(model, feeds)


@pytest.mark.parametrize(("limit", "trips"), [(100.0, 50), (100.0, 3), (-1.0, 50)])
def test_a_while_loop_stops_on_its_condition_or_trip_count_like_onnxruntime(
    limit: float, trips: int
) -> None:
    """Double x while its sum stays under a limit, at most ``trips`` times (both inputs
    at run time), counting the iterations in an int64."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    body = _loop_body(
        [
            helper.make_node("Mul", ["x_in", "two"], ["x_out"]),
            helper.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "limit"], ["c_out"]),
            helper.make_node("Add", ["k_in", "i"], ["k_out"]),
        ],
        [helper.make_tensor_value_info("x_in", f32, [2, 2]), helper.make_tensor_value_info("k_in", i64, [])],
        [helper.make_tensor_value_info("x_out", f32, [2, 2]), helper.make_tensor_value_info("k_out", i64, [])],
    )  # fmt: skip
    model = make_model(
        [
            helper.make_node("ReduceSum", ["x0"], ["s0"], keepdims=0),
            helper.make_node("Less", ["s0", "limit"], ["c0"]),
            helper.make_node("Loop", ["n", "c0", "x0", "k0"], ["x", "k"], body=body),
        ],
        [
            helper.make_tensor_value_info("x0", f32, [2, 2]),
            helper.make_tensor_value_info("limit", f32, []),
            helper.make_tensor_value_info("n", i64, []),
        ],
        [
            helper.make_tensor_value_info("x", f32, [2, 2]),
            helper.make_tensor_value_info("k", i64, []),
        ],
        {"two": np.array(2, np.float32), "k0": np.array(0, np.int64)},
    )
    feeds = {
        "x0": np.array([[1, 2], [0.5, 0.25]], np.float32),
        "limit": np.array(limit, np.float32),
        "n": np.array(trips, np.int64),
    }
    against_onnxruntime(model, feeds)


def test_a_loop_whose_scan_length_depends_on_the_input_is_unsupported() -> None:
    body = _loop_body(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Identity", ["y_in"], ["y_out"])],
        [helper.make_tensor_value_info("y_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y_out", TensorProto.FLOAT, [1])] * 2,
    )  # fmt: skip
    model = make_model(
        [helper.make_node("Loop", ["n", "", "y0"], ["y", "ys"], body=body)],
        [helper.make_tensor_value_info("y0", TensorProto.FLOAT, [1]), helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]), helper.make_tensor_value_info("ys", TensorProto.FLOAT, [3, 1])],
        {},
    )  # fmt: skip
    with pytest.raises(nn_onnx.UnsupportedModelError, match="scan outputs whose length depends"):
        nn_onnx.load(model)


def test_silero_vad_carries_its_lstm_state_and_takes_either_rate_branch_like_onnxruntime() -> None:
    """Silero VAD (op18, its LSTM unrolled): an If on the sample rate at run time
    (both branches taken), 1-D convolutions, and the state fed back call after call."""
    path = wheel_member("silero-vad", "6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx")
    model = onnx.load(str(path))
    loaded = nn_onnx.load(model, {"input": (1, 512), "state": (2, 1, 128)})
    assert "IF" in [op.code.name for op in loaded.model.hal_model.main.operations]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    t = np.arange(512 * 4) / 16000
    # Its own generator: the input must not depend on which tests ran before.
    noise = np.random.default_rng(11).standard_normal(t.size)
    audio = np.sin(2 * np.pi * 220 * t) * (t > 0.05) + 0.1 * noise
    with nn_onnx.Runner(loaded, cache_dir=None) as run:
        for rate in (16000, 8000):
            state = np.zeros((2, 1, 128), np.float32)
            for chunk in audio.astype(np.float32).reshape(4, 1, 512):
                sr = np.array(rate, np.int64)
                got = run(chunk, sr, state)
                want = session.run(None, {"input": chunk, "sr": sr, "state": state})
                # ONNX's backend tests' rtol: the LSTM cell state sums 512-sample
                # convolutions in float32, so summation order moves it (by up to
                # 1.5e-4 relative here; onnx's ReferenceEvaluator differs from
                # onnxruntime too, by up to 2e-6 absolute).
                for g, w in zip(got, want):
                    np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-5)
                # Both sides go on from onnxruntime's state: each call is checked at
                # this tolerance, not float32 rounding compounded over the calls.
                state = want[1]


def test_silero_vad_with_its_if_on_the_rate_and_ifs_on_shapes_matches_onnxruntime() -> None:
    """Silero VAD's own model (opset 16): an If on the sample rate given at run time
    (an NNAPI IF, both branches taken), and inside each branch Ifs on shapes alone
    (replaced by the branch they take at load).  256 samples a call: the 8 kHz
    branch fails on 512 (in onnxruntime too), and an IF needs both branches."""
    path = wheel_member("silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx")
    model = onnx.load(str(path))
    loaded = nn_onnx.load(model, {"input": (1, 256), "state": (2, 1, 128)})
    assert [op.code.name for op in loaded.model.hal_model.main.operations] == ["EQUAL", "IF"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(12)
    with nn_onnx.Runner(loaded, cache_dir=None) as run:
        for rate in (16000, 8000):
            t = np.arange(256 * 4) / rate
            audio = np.sin(2 * np.pi * 220 * t) * (t > 0.02) + 0.1 * rng.standard_normal(t.size)
            state = np.zeros((2, 1, 128), np.float32)
            for chunk in audio.astype(np.float32).reshape(4, 1, 256):
                feeds = {"input": chunk, "state": state, "sr": np.array(rate, np.int64)}
                got = run(*(feeds[i.name] for i in loaded.inputs))
                want = session.run(None, feeds)
                for g, w in zip(got, want):  # the tolerance of the op18 model's test above
                    assert g.shape == w.shape
                    np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-5)
                state = want[1]  # each call checked from onnxruntime's state


def if_on_an_input_model() -> Any:
    """``y = x if flag else x[:1]``: branches of different shapes, which an NNAPI IF
    cannot hold, on a boolean input."""
    then_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["kept"])],
        "then",
        [],
        [helper.make_tensor_value_info("kept", TensorProto.FLOAT, [2, 3])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Gather", ["x", "zero"], ["row"], axis=0)],
        "else",
        [],
        [helper.make_tensor_value_info("row", TensorProto.FLOAT, [1, 3])],
    )
    return make_model(
        [helper.make_node("If", ["flag"], ["y"], then_branch=then_branch, else_branch=else_branch)],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 3])],
        {"zero": np.array([0], np.int64)},
    )


@pytest.mark.parametrize("flag", [True, False])
def test_an_input_fixed_at_load_decides_an_if_like_onnxruntime(flag: bool) -> None:
    model = if_on_an_input_model()
    with pytest.raises(nn_onnx.UnsupportedModelError, match="If"):
        nn_onnx.load(model)  # the flag at run time: two branches an IF cannot hold
    loaded = nn_onnx.load(model, constants={"flag": flag})
    assert [i.name for i in loaded.inputs] == ["x"]
    assert "IF" not in [op.code.name for op in loaded.model.hal_model.main.operations]
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x, "flag": np.array(flag)})
    with nn_onnx.Runner(loaded, cache_dir=None) as run:
        (got,) = run(x)
    np.testing.assert_array_equal(got, want)
    other = nn_onnx.load(model, constants={"flag": not flag})
    assert other.digest != loaded.digest  # a compilation cache must not mix them up


def test_constants_that_name_no_input_or_do_not_fit_it_are_refused() -> None:
    model = if_on_an_input_model()
    with pytest.raises(BadDataError, match="no input 'flags'.*'x', 'flag'"):
        nn_onnx.load(model, constants={"flags": True})
    with pytest.raises(BadDataError, match=r"'flag' is declared with shape \[\]; got \[2\]"):
        nn_onnx.load(model, constants={"flag": [True, False]})
    with pytest.raises(BadDataError, match="'x' cannot be 'abc'"):
        nn_onnx.load(model, constants={"x": "abc"})


def test_silero_vad_in_512_sample_chunks_with_its_rate_fixed_at_load_matches_onnxruntime() -> None:
    """The chunk size silero-vad is used with at 16 kHz.  Its 8 kHz branch cannot
    take 512 samples (onnxruntime fails in it too), so the rate is fixed at load
    and only the 16 kHz branch is built."""
    path = wheel_member("silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx")
    model = onnx.load(str(path))
    shapes = {"input": (1, 512), "state": (2, 1, 128)}
    with pytest.raises(nn_onnx.UnsupportedModelError):
        nn_onnx.load(model, shapes)
    loaded = nn_onnx.load(model, shapes, constants={"sr": 16000})
    assert [i.name for i in loaded.inputs] == ["input", "state"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(13)
    t = np.arange(512 * 4) / 16000
    audio = np.sin(2 * np.pi * 220 * t) * (t > 0.02) + 0.1 * rng.standard_normal(t.size)
    state = np.zeros((2, 1, 128), np.float32)
    with nn_onnx.Runner(loaded, cache_dir=None) as run:
        for chunk in audio.astype(np.float32).reshape(4, 1, 512):
            got = run(chunk, state)
            want = session.run(None, {"input": chunk, "state": state, "sr": np.array(16000)})
            for g, w in zip(got, want):  # the tolerance of the silero tests above
                assert g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-5)
            state = want[1]


@pytest.mark.parametrize(
    ("axis", "exclusive", "reverse"), [(0, 0, 0), (1, 1, 0), (-1, 0, 1), (2, 1, 1)]
)
def test_cumsum_along_a_constant_axis_matches_onnxruntime_infinities_included(
    axis: int, exclusive: int, reverse: int
) -> None:
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    x[0, 1, 2] = np.inf  # a triangle-of-ones MATMUL would make NaNs of it
    model = make_model(
        [helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
        {"axis": np.array(axis, np.int64)},
    )
    against_onnxruntime(model, {"x": x})


@pytest.mark.parametrize(("axis", "constant_values"), [(-1, True), (0, False), (1, True)])
def test_one_hot_with_a_constant_depth_matches_onnxruntime(
    axis: int, constant_values: bool
) -> None:
    """Negative indices count from the end; out-of-range ones give the off value."""
    values = np.array([-2.5, 7], np.float32)
    out = [2, 3]
    out.insert(axis % 3, 4)
    inputs = [helper.make_tensor_value_info("i", TensorProto.INT64, [2, 3])]
    if not constant_values:
        inputs.append(helper.make_tensor_value_info("v", TensorProto.FLOAT, [2]))
    model = make_model(
        [helper.make_node("OneHot", ["i", "depth", "v"], ["y"], axis=axis)],
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        {"depth": np.array(4, np.int64), **({"v": values} if constant_values else {})},
    )
    feeds = {"i": np.array([[1, -1, 0], [3, 9, -5]], np.int64)}
    against_onnxruntime(model, feeds if constant_values else {**feeds, "v": values})


def test_two_1d_convolutions_of_one_input_match_onnxruntime() -> None:
    """Both reshape the input to a height of 1: one reshaped operand serves them."""
    f32 = np.float32
    model = make_model(
        [
            helper.make_node("Conv", ["x", "W1"], ["a"], pads=[1, 1]),
            helper.make_node("Conv", ["x", "W2", "B2"], ["b"], strides=[2]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8])],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4, 8]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 2, 4]),
        ],
        {
            "W1": RNG.standard_normal((4, 3, 3)).astype(f32),
            "W2": RNG.standard_normal((2, 3, 1)).astype(f32),
            "B2": RNG.standard_normal(2).astype(f32),
        },
    )
    against_onnxruntime(model, {"x": RNG.standard_normal((1, 3, 8)).astype(f32)})


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((2, 3, 4), (2, 4, 5)), ((4,), (2, 4, 5)), ((2, 1, 3, 4), (3, 4, 2)), ((3, 4), (4,))],
)
def test_matmul_by_constant_stacks_lays_them_out_at_load_like_onnxruntime(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...]
) -> None:
    """A constant right-hand side needs no TRANSPOSE (nor SLICE) at run time."""
    a = RNG.standard_normal(a_shape).astype(np.float32)
    b = RNG.standard_normal(b_shape).astype(np.float32)
    out = np.matmul(a, b).shape
    model = make_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        {"b": b},
    )
    codes = {op.code.name for op in nn_onnx.load(model).model.hal_model.main.operations}
    assert "TRANSPOSE" not in codes
    against_onnxruntime(model, {"a": a})


@pytest.mark.parametrize("exclusive", [0, 1])
def test_cumsum_along_an_axis_of_one_element_matches_onnxruntime(exclusive: int) -> None:
    """One piece: a CONCATENATION of one tensor."""
    model = make_model(
        [helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 3])],
        {"axis": np.array(1, np.int64)},
    )
    against_onnxruntime(model, {"x": RNG.standard_normal((2, 1, 3)).astype(np.float32)})


def test_edge_padding_of_nothing_is_the_input_itself() -> None:
    model = make_model(
        [
            helper.make_node("Pad", ["x", "pads"], ["p"], mode="edge"),
            helper.make_node("Relu", ["p"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        {"pads": np.zeros(4, np.int64)},
    )
    codes = [op.code.name for op in nn_onnx.load(model).model.hal_model.main.operations]
    assert codes == ["RELU"]
    against_onnxruntime(model, {"x": RNG.standard_normal((2, 3)).astype(np.float32)})


@pytest.mark.parametrize(
    ("node", "initializers", "why"),
    [
        (
            helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=5),
            {"s": np.ones(3, np.float32)},
            "LayerNormalization (axis 5 of a rank-2 tensor)",
        ),
        (
            helper.make_node("CumSum", ["x", "axis"], ["y"]),
            {"axis": np.array(-3, np.int64)},
            "CumSum (axis -3 of a rank-2 tensor)",
        ),
    ],
)
def test_an_axis_out_of_range_is_unsupported_not_wrapped(
    node: Any, initializers: dict[str, np.ndarray], why: str
) -> None:
    model = make_model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializers,
    )
    with pytest.raises(nn_onnx.UnsupportedModelError) as info:
        nn_onnx.load(model)
    assert info.value.unsupported == {why: 1}


#: LSTM test sizes: time steps, batch, input features, hidden units.
_STEPS, _BATCH, _FEATURES, _UNITS = 4, 2, 3, 5


def _lstm_model(
    rng: np.random.Generator,
    direction: str,
    outputs: tuple[str, ...] = ("Y", "Y_h", "Y_c"),
    *,
    layout: int = 0,
    constant: bool = True,
    extras: bool = True,
    values: dict[str, np.ndarray] | None = None,
    **attributes: Any,
) -> tuple[Any, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """An LSTM node, its weights initializers (``constant``) or inputs, with B,
    initial_h, initial_c and P when ``extras``; the model, its feeds and the
    weights and states (random unless ``values`` gives them)."""
    directions = 2 if direction == "bidirectional" else 1
    batch_first = (_BATCH, _STEPS) if layout else (_STEPS, _BATCH)
    state = [_BATCH, directions, _UNITS] if layout else [directions, _BATCH, _UNITS]
    shapes = {
        "W": [directions, 4 * _UNITS, _FEATURES], "R": [directions, 4 * _UNITS, _UNITS],
        "B": [directions, 8 * _UNITS], "initial_h": state, "initial_c": state,
        "P": [directions, 3 * _UNITS],
    }  # fmt: skip
    names = ["W", "R", "B", "initial_h", "initial_c", "P"] if extras else ["W", "R"]
    if values is None:
        values = {n: rng.uniform(-1, 1, shapes[n]).astype(np.float32) for n in names}
    node = helper.make_node(
        "LSTM",
        ["x", "W", "R", *(["B", "", "initial_h", "initial_c", "P"] if extras else [])],
        list(outputs),
        hidden_size=_UNITS,
        direction=direction,
        **({"layout": 1} if layout else {}),
        **attributes,
    )
    y = [*batch_first, directions, _UNITS] if layout else [_STEPS, directions, _BATCH, _UNITS]
    out_shapes = {"Y": y, "Y_h": state, "Y_c": state}
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*batch_first, _FEATURES])]
    feeds = {"x": rng.standard_normal((*batch_first, _FEATURES)).astype(np.float32)}
    if not constant:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n]) for n in names]
        feeds.update((n, values[n]) for n in names)
    model = make_model(
        [node],
        inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, out_shapes[o]) for o in outputs if o],
        values if constant else {},
        opset=14,
    )
    return model, feeds, values


@pytest.mark.parametrize(
    ("direction", "constant", "extras", "outputs", "activations"),
    [
        ("forward", True, True, ("Y", "Y_h", "Y_c"), None),
        ("forward", False, False, ("", "Y_h"), None),
        ("forward", True, False, ("Y", "", "Y_c"), ["Sigmoid", "Relu", "Relu"]),
        ("reverse", True, True, ("Y",), None),
        ("reverse", False, True, ("Y", "Y_h", "Y_c"), ["Sigmoid", "Sigmoid", "Sigmoid"]),
        ("bidirectional", True, False, ("Y", "Y_h", "Y_c"), None),
        ("bidirectional", False, True, ("Y", "Y_h", "Y_c"), None),
        ("bidirectional", True, True, ("", "", "Y_c"), ["Sigmoid", "Tanh", "Tanh"] * 2),
    ],
)
def test_lstm_matches_onnxruntime(
    direction: str,
    constant: bool,
    extras: bool,
    outputs: tuple[str, ...],
    activations: list[str] | None,
) -> None:
    """UNIDIRECTIONAL_SEQUENCE_LSTM per direction: gates reordered, biases summed,
    peepholes and initial states cut per direction, the reverse one run on the
    input reversed in time; weights constant or computed (graph inputs)."""
    rng = np.random.default_rng(14)
    model, feeds, _ = _lstm_model(
        rng,
        direction,
        outputs,
        constant=constant,
        extras=extras,
        **({"activations": activations} if activations else {}),
    )
    against_onnxruntime(model, feeds)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_a_batch_first_lstm_matches_onnxruntime_on_its_time_major_twin(direction: str) -> None:
    """layout 1 (onnxruntime refuses it): the same weights in a layout-0 model run
    by onnxruntime on the transposed input and states, its outputs transposed back."""
    rng = np.random.default_rng(15)
    model, feeds, values = _lstm_model(rng, direction, layout=1)
    twin_values = dict(values)
    for name in ("initial_h", "initial_c"):
        twin_values[name] = np.ascontiguousarray(values[name].transpose(1, 0, 2))
    twin, _, _ = _lstm_model(rng, direction, values=twin_values)
    x = np.ascontiguousarray(feeds["x"].transpose(1, 0, 2))
    session = ort.InferenceSession(twin.SerializeToString(), providers=["CPUExecutionProvider"])
    y, y_h, y_c = session.run(None, {"x": x})
    want = [y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), y_c.transpose(1, 0, 2)]
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        got = run(feeds["x"])
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("attributes", "lengths", "why"),
    [
        ({"clip": 1.0}, None, "clip or input_forget"),
        ({"input_forget": 1}, None, "clip or input_forget"),
        (
            {"activations": ["Sigmoid", "Tanh", "Relu"]},
            None,
            "activations Sigmoid, Tanh, Relu (Sigmoid and one of Tanh, Relu, Sigmoid twice map)",
        ),
        (
            {"activations": ["HardSigmoid", "Tanh", "Tanh"], "activation_alpha": [0.2]},
            None,
            "activations with parameters, or not three per direction",
        ),
        ({}, np.array([_STEPS, _STEPS - 1], np.int32), "sequence_lens shorter than the sequence"),
        ({}, "computed", "a computed sequence_lens (only a constant one maps)"),
    ],
)
def test_an_lstm_nnapi_would_compute_otherwise_is_unsupported(
    attributes: dict[str, Any], lengths: Any, why: str
) -> None:
    rng = np.random.default_rng(16)
    model, _, _ = _lstm_model(rng, "forward", ("Y",), extras=False, **attributes)
    if lengths is not None:
        model.graph.node[0].input.extend(["", "lengths"])
        if isinstance(lengths, str):
            info = helper.make_tensor_value_info("lengths", TensorProto.INT32, [_BATCH])
            model.graph.input.append(info)
        else:
            model.graph.initializer.append(numpy_helper.from_array(lengths, "lengths"))
    with pytest.raises(nn_onnx.UnsupportedModelError) as info:
        nn_onnx.load(model)
    assert info.value.unsupported == {f"LSTM ({why})": 1}


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_losses_with_constant_targets_match_onnxruntime(
    op: str, weighted: bool, reduction: str
) -> None:
    """An ignored target adds nothing, even where x holds -inf."""
    rng = np.random.default_rng(21)
    x = rng.standard_normal((3, 5, 2, 4)).astype(np.float32)
    target = rng.integers(0, 5, (3, 2, 4)).astype(np.int64)
    target[0, 1, 2] = target[2, 0, 0] = -1
    x[0, 0, 1, 2] = -np.inf
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
    feeds = {"x": x}
    names = ["x", "target"]
    if weighted:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [5]))
        feeds["w"] = rng.uniform(0.5, 2.0, 5).astype(np.float32)
        names.append("w")
    loss_shape = target.shape if reduction == "none" else []
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, loss_shape)]
    if op == "SoftmaxCrossEntropyLoss":
        outputs.append(helper.make_tensor_value_info("log_prob", TensorProto.FLOAT, x.shape))
    node = helper.make_node(
        op, names, [o.name for o in outputs], reduction=reduction, ignore_index=-1
    )
    model = make_model([node], inputs, outputs, {"target": target}, opset=13)
    against_onnxruntime(model, feeds)


def test_a_loss_target_out_of_range_is_unsupported() -> None:
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "target"], ["loss"])
    model = make_model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        {"target": np.array([0, 3], np.int64)},
        opset=13,
    )
    with pytest.raises(nn_onnx.UnsupportedModelError) as info:
        nn_onnx.load(model)
    assert info.value.unsupported == {"NegativeLogLikelihoodLoss (targets out of range)": 1}


@pytest.mark.parametrize(
    "op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSum", "ReduceL2"]
)
def test_reductions_of_nothing_and_over_empty_axes_match_onnxruntime(op: str) -> None:
    """An empty constant reduced along its empty axis is the reduction's value over
    nothing; an empty axes constant reduces every axis."""
    x = RNG.uniform(0.5, 2.0, (2, 1, 4)).astype(np.float32)
    nodes = [
        helper.make_node(op, ["empty", "axis"], ["nothing"], keepdims=1),
        helper.make_node("Add", ["nothing", "x"], ["y"]),
        helper.make_node(op, ["x", "no_axes"], ["all"], keepdims=1),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape),
            helper.make_tensor_value_info("all", TensorProto.FLOAT, [1, 1, 1]),
        ],
        {
            "empty": np.zeros((2, 0, 4), np.float32),
            "axis": np.array([1], np.int64),
            "no_axes": np.zeros(0, np.int64),
        },
        opset=18,
    )
    against_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_byte_tensors_compare_and_pick_like_onnxruntime(dtype: type) -> None:
    """int8 and uint8 run as quantized operands of scale 1: comparisons, Max, Min,
    Clip, Where and MaxPool give the integers themselves, the type's extremes included."""
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, (1, 2, 4, 4), endpoint=True).astype(dtype)
    y = RNG.integers(info.min, info.max, (4,), endpoint=True).astype(dtype)
    x.flat[:2], y[:2] = [info.min, info.max], [info.max, info.min]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [
        helper.make_node("Greater", ["x", "y"], ["greater"]),
        helper.make_node("LessOrEqual", ["x", "y"], ["less_equal"]),
        helper.make_node("Max", ["x", "y"], ["max"]),
        helper.make_node("Min", ["x", "y", "x"], ["min"]),
        helper.make_node("Clip", ["x", "low", "high"], ["clipped"]),
        helper.make_node("Where", ["greater", "y", "x"], ["picked"]),
        helper.make_node("MaxPool", ["x"], ["pooled"], kernel_shape=[2, 2], pads=[1, 1, 0, 0]),
    ]
    shapes = {"greater": x.shape, "less_equal": x.shape, "max": x.shape, "min": x.shape,
              "clipped": x.shape, "picked": x.shape, "pooled": (1, 2, 4, 4)}  # fmt: skip
    outputs = [
        helper.make_tensor_value_info(
            n, TensorProto.BOOL if n in ("greater", "less_equal") else elem, s
        )
        for n, s in shapes.items()
    ]
    model = make_model(
        nodes,
        [
            helper.make_tensor_value_info("x", elem, x.shape),
            helper.make_tensor_value_info("y", elem, y.shape),
        ],  # fmt: skip
        outputs,
        {"low": np.array(info.min // 2 + 3, dtype), "high": np.array(info.max // 2, dtype)},
    )
    against_onnxruntime(model, {"x": x, "y": y})


def test_byte_arithmetic_is_unsupported() -> None:
    """NNAPI's quantized ADD saturates where ONNX's int8 Add wraps around."""
    node = helper.make_node("Add", ["x", "x"], ["y"])
    info = [helper.make_tensor_value_info(n, TensorProto.INT8, [4]) for n in "xy"]
    with pytest.raises(nn_onnx.UnsupportedModelError) as error:
        nn_onnx.load(make_model([node], info[:1], info[1:], {}))
    assert error.value.unsupported == {"Add (int8 tensors)": 1}


def _recurrent_model(op: str, attributes: dict[str, Any], values: dict[str, np.ndarray],
                     fed: list[str], layout: int) -> Any:  # fmt: skip
    """An RNN or GRU node on ``values`` (x, w, r, b, h0 of time-major shapes), ``fed``
    as graph inputs and the rest initializers, in ``layout``."""
    steps, batch, _ = values["x"].shape
    dirs, _, hidden = values["r"].shape
    if layout == 1:
        values = {
            **values,
            "x": values["x"].transpose(1, 0, 2),
            "h0": values["h0"].transpose(1, 0, 2),
        }
    y_shape = (steps, dirs, batch, hidden) if layout == 0 else (batch, steps, dirs, hidden)
    node = helper.make_node(
        op, ["x", "w", "r", "b", "", "h0"], ["y", "y_h"], hidden_size=hidden, layout=layout,
        **attributes,
    )  # fmt: skip
    return make_model(
        [node],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, values[n].shape) for n in fed],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape),
            helper.make_tensor_value_info("y_h", TensorProto.FLOAT, values["h0"].shape),
        ],
        {n: v for n, v in values.items() if n not in fed},
        opset=14,
    )


@pytest.mark.parametrize(
    ("op", "attributes", "layout"),
    [
        ("RNN", {}, 0),
        ("RNN", {"direction": "bidirectional", "activations": ["Relu", "Sigmoid"]}, 0),
        ("RNN", {"direction": "reverse"}, 1),
        ("GRU", {}, 0),
        ("GRU", {"linear_before_reset": 1, "direction": "bidirectional"}, 0),
        ("GRU", {"linear_before_reset": 1, "activations": ["Sigmoid", "Relu"]}, 1),
    ],
)
@pytest.mark.parametrize("constant", [False, True])
def test_rnn_and_gru_unrolled_match_onnxruntime(
    op: str, attributes: dict[str, Any], layout: int, constant: bool
) -> None:
    """Each step's gates from FULLY_CONNECTED, with the bias blocks and initial state
    where ONNX puts them (weights as constants, or as graph inputs).  onnxruntime
    runs no batch-first layout: there, its time-major twin is the reference."""
    rng = np.random.default_rng(17)
    steps, batch, size, hidden = 4, 2, 3, 5
    gates = 3 if op == "GRU" else 1
    dirs = 2 if attributes.get("direction") == "bidirectional" else 1
    values = {
        "x": rng.standard_normal((steps, batch, size)).astype(np.float32),
        "w": rng.uniform(-0.6, 0.6, (dirs, gates * hidden, size)).astype(np.float32),
        "r": rng.uniform(-0.6, 0.6, (dirs, gates * hidden, hidden)).astype(np.float32),
        "b": rng.uniform(-0.6, 0.6, (dirs, 2 * gates * hidden)).astype(np.float32),
        "h0": rng.standard_normal((dirs, batch, hidden)).astype(np.float32),
    }
    fed = ["x", "h0"] if constant else list(values)
    twin = _recurrent_model(op, attributes, values, fed, 0)
    session = ort.InferenceSession(twin.SerializeToString(), providers=["CPUExecutionProvider"])
    y, y_h = session.run(None, {n: values[n] for n in fed})
    feeds = {n: values[n].transpose(1, 0, 2) if layout and n in ("x", "h0") else values[n]
             for n in fed}  # fmt: skip
    model = _recurrent_model(op, attributes, values, fed, layout)
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        got = run(*feeds.values())
    if layout:
        y, y_h = y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2)
    for g, w in zip(got, (y, y_h)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_a_gru_with_parameterized_activations_is_unsupported() -> None:
    node = helper.make_node(
        "GRU", ["x", "w", "r"], ["y"], hidden_size=2,
        activations=["HardSigmoid", "Tanh"], activation_alpha=[0.2],
    )  # fmt: skip
    model = make_model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 1, 1, 2])],
        {"w": np.zeros((1, 6, 2), np.float32), "r": np.zeros((1, 6, 2), np.float32)},
    )
    with pytest.raises(nn_onnx.UnsupportedModelError) as info:
        nn_onnx.load(model)
    why = "GRU (activations with parameters, or not one set per direction)"
    assert info.value.unsupported == {why: 1}


def test_an_integer_clip_to_the_int64_extremes_clamps_nothing_more_like_onnxruntime() -> None:
    """int64 runs as int32: a bound past its range is no bound, not a wrapped one."""
    info = np.iinfo(np.int64)
    model = make_model(
        [
            helper.make_node("Clip", ["x", "zero", "top"], ["y"]),
            helper.make_node("Clip", ["x", "bottom", "three"], ["z"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info(n, TensorProto.INT64, [4]) for n in "yz"],
        {
            "zero": np.array(0, np.int64),
            "top": np.array(info.max, np.int64),
            "bottom": np.array(info.min, np.int64),
            "three": np.array(3, np.int64),
        },  # fmt: skip
    )
    against_onnxruntime(model, {"x": np.array([-5, 0, 3, 7], np.int64)})


@pytest.mark.parametrize(
    ("node", "why"),
    [
        (helper.make_node("DepthToSpace", ["x"], ["y"]), "no attribute 'blocksize'"),
        (
            helper.make_node("DepthToSpace", ["x"], ["y"], blocksize="2"),
            "attribute 'blocksize' of another type than INT",
        ),
        (helper.make_node("If", ["flag"], ["y"]), "no attribute 'else_branch'"),
        (helper.make_node("Loop", ["n", "", "x"], ["y"]), "no attribute 'body'"),
        (helper.make_node("CumSum", ["x"], ["y"]), r"1 inputs \(its schema takes 2 to 2\)"),
        (helper.make_node("Gather", ["x", ""], ["y"]), "no input 'indices'"),
    ],
)
def test_a_node_breaking_its_schema_is_bad_data_not_a_crash(node: Any, why: str) -> None:
    model = _unchecked_model(
        [node],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        {"n": np.array(2, np.int64)},
    )
    with pytest.raises(BadDataError, match=f"not a valid ONNX model: {node.op_type} 'y' has {why}"):
        nn_onnx.load(model)


def test_constants_numpy_cannot_fold_are_left_to_the_mappers_not_a_crash() -> None:
    """A Transpose repeating an axis and an empty reduction over a repeated axis."""
    model = _unchecked_model(
        [
            helper.make_node("Transpose", ["c"], ["t"], perm=[0, 0]),
            helper.make_node("ReduceSum", ["empty", "axes"], ["s"]),
            helper.make_node("Add", ["x", "t"], ["u"]),
            helper.make_node("Add", ["u", "s"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        {
            "c": np.ones((2, 2), np.float32),
            "empty": np.zeros((2, 0), np.float32),
            "axes": np.array([1, 1], np.int64),
        },
    )
    with pytest.raises(
        nn_onnx.UnsupportedModelError, match="Transpose.*ReduceSum|ReduceSum.*Transpose"
    ):
        nn_onnx.load(model)


def _f32(name: str, shape: list[int] | None) -> Any:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


@pytest.mark.parametrize(
    ("node", "x_shape", "initializers", "why", "y_shape"),
    [
        (
            helper.make_node("LSTM", ["x", "W", "R", "", "", "h"], ["y"], hidden_size=2),
            [3, 1, 2],
            {"W": np.zeros((1, 8, 2)), "R": np.zeros((1, 8, 2)), "h": np.zeros((1, 1, 3))},
            "LSTM ('h' of shape [1, 1, 3], not [1, 1, 2])",
            None,
        ),
        (
            helper.make_node(
                "GRU", ["x", "W", "R", "B"], ["y"], direction="bidirectional", hidden_size=2
            ),
            [3, 1, 2],
            {"W": np.zeros((2, 6, 2)), "R": np.zeros((2, 6, 2)), "B": np.zeros((1, 12))},
            "GRU ('B' of shape [1, 12], not [2, 12])",
            None,
        ),
        (
            helper.make_node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["y"]),
            [2, 3],
            {"t": np.array([0, 2], np.int64), "w": np.ones(2)},
            "NegativeLogLikelihoodLoss (a target or weight of a shape that does not fit the scores)",
            None,
        ),
        (
            helper.make_node("ReverseSequence", ["x", "lengths"], ["y"]),
            [3, 2],
            {"lengths": np.array([1, 2, 3], np.int64)},
            "ReverseSequence (not one sequence length per batch entry)",
            None,
        ),
        (
            helper.make_node("ScatterND", ["x", "i", "u"], ["y"]),
            [2, 3],
            {"i": np.array([[0, 1, 0]], np.int64), "u": np.zeros(1)},
            "ScatterND (indices or updates of shapes that do not fit the data)",
            None,
        ),
        (
            helper.make_node("MatMul", ["x", "b"], ["y"]),
            [2, 3, 4],
            {"b": np.zeros((2, 5, 6))},
            "MatMul (shapes [2, 3, 4] and [2, 5, 6] (no matrix product))",
            [2, 3, 6],
        ),
        (
            helper.make_node("BatchNormalization", ["x", "s", "s", "s", "s"], ["y"]),
            [3],
            {"s": np.ones(3)},
            "BatchNormalization (statistics that are not one per channel (axis 1))",
            [3],
        ),
    ],
)
def test_inputs_of_shapes_that_do_not_fit_are_unsupported_not_a_crash(
    node: Any,
    x_shape: list[int],
    initializers: dict[str, np.ndarray],
    why: str,
    y_shape: list[int] | None,
) -> None:
    """Weights, states, targets or indices whose shapes the node's others contradict."""
    values = {
        k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in initializers.items()
    }
    model = _unchecked_model([node], [_f32("x", x_shape)], [_f32("y", y_shape)], values)
    with pytest.raises(nn_onnx.UnsupportedModelError) as info:
        nn_onnx.load(model)
    assert info.value.unsupported == {why: 1}


def test_a_loop_whose_body_does_not_match_it_is_unsupported_not_a_crash() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["o"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [])],
        [_f32("o", [1])],
    )
    model = _unchecked_model(
        [helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)],
        [_f32("x", [1])],
        [_f32("y", [1])],
        {"n": np.array(3, np.int64)},
    )
    with pytest.raises(nn_onnx.UnsupportedModelError, match="a body whose inputs or outputs"):
        nn_onnx.load(model)


def _nnburst_run(tmp_path: Any, *args: str) -> subprocess.CompletedProcess[str]:
    home = dict(os.environ, HOME=str(tmp_path))  # the compilation cache goes under it
    return subprocess.run(
        [sys.executable, "-m", "nnburst", "run", *args],
        env=home, cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_nnburst_run_takes_symbolic_shapes_from_the_inputs_or_an_option(tmp_path) -> None:
    """A model with a dynamic dimension runs from the CLI: the .npy files' shapes
    fix it, or --input-shape does."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "samples"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "samples"])
    model = make_model(
        [helper.make_node("Mul", ["x", "two"], ["y"])], [x], [y], {"two": np.float32([2])}
    )
    path = tmp_path / "double.onnx"
    path.write_bytes(model.SerializeToString())
    chunk = np.arange(512, dtype=np.float32).reshape(1, 512)
    np.save(tmp_path / "chunk.npy", chunk)

    refused = _nnburst_run(tmp_path, str(path))
    assert refused.returncode == 1 and "dynamic dimension" in refused.stderr

    given = _nnburst_run(tmp_path, str(path), "--input", str(tmp_path / "chunk.npy"))
    assert given.returncode == 0, given.stderr
    assert f"[1, 512] float32 sum {float(chunk.sum() * 2):.6g}" in given.stdout

    shaped = _nnburst_run(tmp_path, str(path), "--input-shape", "x=1,300")
    assert shaped.returncode == 0, shaped.stderr
    assert "[1, 300] float32 sum 0" in shaped.stdout

    wrong = _nnburst_run(tmp_path, str(path), "--input-shape", "audio=1,300")
    assert wrong.returncode == 1 and "names no input of the model: ['audio']" in wrong.stderr
    bad = _nnburst_run(tmp_path, str(path), "--input-shape", "x=1,-3")
    assert bad.returncode == 2 and "expected NAME=D,D" in bad.stderr

    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [1])
    scaled = make_model([helper.make_node("Mul", ["x", "k"], ["y"])], [x, k], [y], {})
    (tmp_path / "scale.onnx").write_bytes(scaled.SerializeToString())
    fixed = _nnburst_run(
        tmp_path, str(tmp_path / "scale.onnx"), "--constant", "k=3",
        "--input", str(tmp_path / "chunk.npy"),
    )  # fmt: skip
    assert fixed.returncode == 0, fixed.stderr
    assert f"sum {float(chunk.sum() * 3):.6g}" in fixed.stdout
    unfixed = _nnburst_run(
        tmp_path, str(tmp_path / "scale.onnx"), "--input", str(tmp_path / "chunk.npy")
    )
    assert unfixed.returncode == 1 and "takes 2 inputs (x, k), got 1 --input" in unfixed.stderr

    np.save(tmp_path / "wide.npy", chunk.astype(np.float64))
    cast = _nnburst_run(tmp_path, str(path), "--input", str(tmp_path / "wide.npy"))
    assert cast.returncode == 1 and "'x' takes float32, got float64" in cast.stderr
    assert "Traceback" not in cast.stderr


# -- external data ----------------------------------------------------------------------------


def _with_external_weights(directory: Any, location: str = "weights.bin") -> tuple[Any, np.ndarray]:
    """y = x + w, w's 16 floats kept in ``directory/location`` (as onnx.save writes big models)."""
    from onnx import external_data_helper

    w = np.arange(16, dtype=np.float32).reshape(4, 4)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [x], [y], {"w": w})
    external_data_helper.convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location=location, size_threshold=0
    )
    onnx.save_model(model, str(directory / "model.onnx"))  # writes directory/location too
    return model, w


def test_external_data_is_read_only_when_asked_and_only_beside_the_model(
    tmp_path, monkeypatch
) -> None:
    """A model's bytes naming `weights.bin` read nothing from the current directory."""
    model, w = _with_external_weights(tmp_path)
    path = tmp_path / "model.onnx"
    x = np.ones((4, 4), np.float32)
    monkeypatch.chdir(tmp_path)  # where onnx's own loader would look for bytes
    for source in (path.read_bytes(), model):
        with pytest.raises(BadDataError, match="reads no file"):
            nn_onnx.load(source)
    with pytest.raises(BadDataError, match=r"external_data=True\) reads it"):
        nn_onnx.load(path)
    with nn_onnx.Runner(nn_onnx.load(path, external_data=True), cache_dir=None) as run:
        np.testing.assert_array_equal(run(x)[0], x + w)
    session = nn_onnx.InferenceSession(str(path))  # as onnxruntime: beside the model
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x + w)


@pytest.mark.parametrize("escape", ["up", "absolute", "symlink"])
def test_external_data_outside_the_models_directory_is_refused(tmp_path, escape: str) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.full(16, 7, np.float32).tobytes())
    directory = tmp_path / "model"
    directory.mkdir()
    location = {"up": "../secret.bin", "absolute": str(secret), "symlink": "link.bin"}[escape]
    if escape == "symlink":
        (directory / "link.bin").symlink_to(secret)
    _with_external_weights(directory)
    model = onnx.load(str(directory / "model.onnx"), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    (directory / "model.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(BadDataError, match="is not a file in the model's directory"):
        nn_onnx.load(directory / "model.onnx", external_data=True)


def test_external_data_of_the_wrong_size_is_bad_data(tmp_path) -> None:
    _with_external_weights(tmp_path)
    (tmp_path / "weights.bin").write_bytes(b"\0" * 10)
    with pytest.raises(BadDataError, match="holds 10 of its 64 bytes"):
        nn_onnx.load(tmp_path / "model.onnx", external_data=True)


@pytest.mark.parametrize("op", ["Expand", "ConstantOfShape"])
def test_a_huge_folded_constant_is_refused_before_it_is_allocated(op: str) -> None:
    """A 200-byte model asking for 60000x60000 floats grew a process to 24 GB."""
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    one = np.ones((1, 1), np.float32)
    node, constants = {
        "Expand": (helper.make_node("Expand", ["one", "shape"], ["big"]), {"one": one, "shape": np.int64([60000, 60000])}),
        "ConstantOfShape": (helper.make_node("ConstantOfShape", ["shape"], ["big"]), {"shape": np.int64([60000, 60000])}),
    }[op]  # fmt: skip
    model = _unchecked_model(
        [node, helper.make_node("Add", ["x", "big"], ["y"])], [x], [y], constants
    )
    with pytest.raises(BadDataError, match="a constant of 3600000000 elements, over the"):
        nn_onnx.load(model)


def test_nnburst_bench_takes_symbolic_shapes_and_constants_for_a_model_file(tmp_path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "samples"])
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "samples"])
    model = make_model([helper.make_node("Mul", ["x", "k"], ["y"])], [x, k], [y], {})
    path = tmp_path / "scale.onnx"
    path.write_bytes(model.SerializeToString())
    home = dict(os.environ, HOME=str(tmp_path))
    bench = [sys.executable, "-m", "nnburst", "bench", "--model", str(path), "--iterations", "5"]
    result = subprocess.run(
        [*bench, "--constant", "k=3", "--input-shape", "x=1,16"],
        env=home, cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "sync in-process" in result.stdout and "onnxruntime in-process" in result.stdout
    refused = subprocess.run(
        [sys.executable, "-m", "nnburst", "bench", "--model", "add-mul", "--constant", "k=3"],
        env=home, cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert refused.returncode == 2 and "--constant applies to a model file" in refused.stderr
