"""The ONNX mappers' shapes and parameters the node tests leave out, against onnxruntime.

Small hand-built models (onnx.helper), each run by onnxruntime and by nnburst:
MatMul and Gemm of every rank and transposition, Clip bounds, Loop trip counts,
the recurrent layers' directions and initial states.  Each case is chosen so a
wrong mapping gives a different result (unequal sizes on every axis, bounds that
cut, trip counts that stop early)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="nnburst.onnx needs onnx (pip install '.[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")

from onnx import TensorProto, helper  # noqa: E402

from nnburst import onnx as nn_onnx  # noqa: E402

from .test_onnx import _unchecked_model, against_onnxruntime, make_model  # noqa: E402

F32 = TensorProto.FLOAT


def _value(name: str, shape: Any, kind: int = F32) -> Any:
    return helper.make_tensor_value_info(name, kind, shape)


def _floats(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(-2, 2, shape).astype(np.float32)


# -- MatMul: every rank pairing, constant and computed right-hand sides --------------------------

MATMUL_SHAPES = [
    ((3, 4), (4, 5), (3, 5)),
    ((2, 3, 4), (4, 5), (2, 3, 5)),
    ((2, 2, 3, 4), (4, 5), (2, 2, 3, 5)),
    ((4,), (4, 5), (5,)),
    ((3, 4), (4,), (3,)),
    ((2, 3, 4), (4,), (2, 3)),
    ((4,), (2, 4, 5), (2, 5)),
    ((2, 3, 4), (2, 4, 5), (2, 3, 5)),
    ((3, 4), (2, 4, 5), (2, 3, 5)),
    ((2, 1, 3, 4), (3, 4, 5), (2, 3, 3, 5)),
    ((1, 3, 4), (2, 4, 5), (2, 3, 5)),
]


@pytest.mark.parametrize("constant", [False, True], ids=["computed", "constant"])
@pytest.mark.parametrize("a_shape, b_shape, y_shape", MATMUL_SHAPES, ids=str)
def test_matmul_of_every_rank_matches_onnxruntime(a_shape, b_shape, y_shape, constant) -> None:
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    a, b = _floats(rng, a_shape), _floats(rng, b_shape)
    inputs = [_value("a", list(a_shape))]
    if not constant:
        inputs.append(_value("b", list(b_shape)))
    model = make_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        inputs,
        [_value("y", list(y_shape))],
        {"b": b} if constant else {},
    )
    against_onnxruntime(model, {"a": a} if constant else {"a": a, "b": b})


def _codes(model: Any) -> list[str]:
    return [op.code.name for op in nn_onnx.load(model).model.hal_model.main.operations]


def _refused(model: Any) -> str:
    """What the refusal of ``model`` lists (one operation)."""
    with pytest.raises(nn_onnx.UnsupportedModelError) as refusal:
        nn_onnx.load(model)
    (listed,) = refusal.value.unsupported
    return listed


# -- Gemm: transpositions, alpha and beta, every form of C -----------------------------------------

GEMM_C = {
    "none": None,
    "scalar": (),
    "row": (5,),
    "row 2-D": (1, 5),
    "column": (3, 1),
    "full": (3, 5),
}


@pytest.mark.parametrize("c_given", ["constant", "computed"])
@pytest.mark.parametrize("c_shape", list(GEMM_C), ids=str)
@pytest.mark.parametrize(
    "attributes",
    [{"alpha": 0.5, "beta": 2.0}, {"transA": 1}, {"transB": 1, "alpha": -1.5, "beta": 0.25}],
    ids=["alpha beta", "transA", "transB alpha beta"],
)
def test_gemm_matches_onnxruntime(attributes: dict, c_shape: str, c_given: str) -> None:
    if GEMM_C[c_shape] is None and c_given == "computed":
        pytest.skip("no C")
    rng = np.random.default_rng(sorted(GEMM_C).index(c_shape))
    a = _floats(rng, (4, 3) if attributes.get("transA") else (3, 4))
    b = _floats(rng, (5, 4) if attributes.get("transB") else (4, 5))
    inputs, feeds, constants = [_value("a", list(a.shape))], {"a": a}, {"b": b}
    names = ["a", "b"]
    if GEMM_C[c_shape] is not None:
        c = _floats(rng, GEMM_C[c_shape])
        names.append("c")
        if c_given == "constant":
            constants["c"] = c
        else:
            inputs.append(_value("c", list(c.shape)))
            feeds["c"] = c
    model = make_model(
        [helper.make_node("Gemm", names, ["y"], **attributes)],
        inputs,
        [_value("y", [3, 5])],
        constants,
    )
    against_onnxruntime(model, feeds)


@pytest.mark.parametrize("attributes", [{}, {"transB": 1, "alpha": 2.5}], ids=["plain", "transB"])
def test_gemm_of_a_computed_b_matches_onnxruntime(attributes: dict) -> None:
    rng = np.random.default_rng(3)
    a = _floats(rng, (3, 4))
    b = _floats(rng, (5, 4) if attributes else (4, 5))
    model = make_model(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], **attributes)],
        [_value("a", [3, 4]), _value("b", list(b.shape))],
        [_value("y", [3, 5])],
        {"c": _floats(rng, (5,))},
    )
    against_onnxruntime(model, {"a": a, "b": b})


# -- Clip: the bounds one RELU takes, the others, integers past their type's range ---------------

CLIP_BOUNDS = [
    (0.0, None),
    (0.0, 6.0),
    (-1.0, 1.0),
    (1.0, None),
    (0.0, 5.0),
    (1.0, 6.0),
    (-1.0, 2.0),
    (-2.0, 1.0),
    (None, 0.0),
    (None, 1.5),
    (None, None),
    (-0.5, 0.5),
]


def _clip_model(kind: int, bounds: tuple, computed: bool = False, opset: int = 17) -> Any:
    dtype = helper.tensor_dtype_to_np_dtype(kind)
    names, constants, inputs = ["x"], {}, [_value("x", [3, 4], kind)]
    for name, bound in zip(("lo", "hi"), bounds):
        if bound is None:
            names.append("")
            continue
        names.append(name)
        if computed:
            inputs.append(_value(name, [], kind))
        else:
            constants[name] = np.array(bound, dtype)
    while names[-1] == "":
        names.pop()
    return make_model(
        [helper.make_node("Clip", names, ["y"])],
        inputs,
        [_value("y", [3, 4], kind)],
        constants,
        opset,
    )


@pytest.mark.parametrize("bounds", CLIP_BOUNDS, ids=str)
def test_clip_with_constant_bounds_matches_onnxruntime(bounds: tuple) -> None:
    x = np.random.default_rng(4).uniform(-8, 8, (3, 4)).astype(np.float32)
    x.flat[:4] = [0.0, 1.0, -1.0, 6.0]
    model = _clip_model(F32, bounds)
    against_onnxruntime(model, {"x": x})
    relu = {(0.0, None): "RELU", (0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU1"}.get(bounds)
    if relu is not None:  # one operation where NNAPI has it
        assert _codes(model) == [relu]


@pytest.mark.parametrize("bounds", [(0.0, 6.0), (-1.0, None), (None, 2.0)], ids=str)
def test_clip_attributes_of_opset_6_match_onnxruntime(bounds: tuple) -> None:
    x = np.random.default_rng(5).uniform(-8, 8, (3, 4)).astype(np.float32)
    given = {k: v for k, v in zip(("min", "max"), bounds) if v is not None}
    model = make_model(
        [helper.make_node("Clip", ["x"], ["y"], **given)],
        [_value("x", [3, 4])],
        [_value("y", [3, 4])],
        {},
        opset=6,
    )
    against_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("kind", [TensorProto.INT32, TensorProto.INT64], ids=["int32", "int64"])
@pytest.mark.parametrize("bounds", [(0, None), (0, 6), (-1, 1), (-3, 2), (None, -2)], ids=str)
def test_clip_of_integers_matches_onnxruntime(kind: int, bounds: tuple) -> None:
    dtype = helper.tensor_dtype_to_np_dtype(kind)
    x = np.random.default_rng(6).integers(-9, 9, (3, 4)).astype(dtype)
    against_onnxruntime(_clip_model(kind, bounds), {"x": x})


def test_integer_bounds_past_the_type_are_the_types_extremes() -> None:
    """int64 runs as int32: a bound past int32's range clamps nothing more than int32's extreme."""
    x = np.array([[-(2**31), 2**31 - 1, 0, -5]], np.int64)
    model = make_model(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        [_value("x", [1, 4], TensorProto.INT64)],
        [_value("y", [1, 4], TensorProto.INT64)],
        {"lo": np.array(-(2**40), np.int64), "hi": np.array(2**40, np.int64)},
    )
    against_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("bounds", [(-1.0, 2.0), (0.5, None), (None, 0.5)], ids=str)
def test_clip_with_computed_bounds_matches_onnxruntime(bounds: tuple) -> None:
    x = np.random.default_rng(7).uniform(-3, 3, (3, 4)).astype(np.float32)
    feeds = {"x": x}
    feeds.update(
        (n, np.array(b, np.float32)) for n, b in zip(("lo", "hi"), bounds) if b is not None
    )
    against_onnxruntime(_clip_model(F32, bounds, computed=True), feeds)


# -- Loop with scan outputs: how often it runs must be known at load --------------------------------


def _scan_loop(condition: str, starts: Any = True, trip: Any = 3, body_cond: str = "pass") -> Any:
    """A Loop doubling a carried [2] vector and scanning it ``trip`` times: its
    condition ``condition`` ("" none, "constant", "input"), started ``starts``; the
    body's condition passed on ("pass", through two Identities "chain"), set to a
    constant ("true"/"false"), or computed ("computed")."""
    i64, b = TensorProto.INT64, TensorProto.BOOL
    cond_nodes = {
        "pass": [helper.make_node("Identity", ["c_in"], ["c_out"])],
        "chain": [
            helper.make_node("Identity", ["c_in"], ["c_mid"]),
            helper.make_node("Identity", ["c_mid"], ["c_out"]),
        ],
        "true": [
            helper.make_node(
                "Constant", [], ["c_out"], value=helper.make_tensor("t", b, [], [True])
            )
        ],
        "false": [
            helper.make_node(
                "Constant", [], ["c_out"], value=helper.make_tensor("f", b, [], [False])
            )
        ],
        "computed": [helper.make_node("Greater", ["i", "zero"], ["c_out"])],
    }[body_cond]
    body = helper.make_graph(
        [
            *cond_nodes,
            helper.make_node("Mul", ["y_in", "two"], ["y_out"]),
            helper.make_node("Identity", ["y_out"], ["scan"]),
        ],
        "body",
        [_value("i", [], i64), _value("c_in", [], b), _value("y_in", [2])],
        [_value("c_out", [], b), _value("y_out", [2]), _value("scan", [2])],
    )
    constants: dict[str, np.ndarray] = {
        "two": np.array(2, np.float32),
        "zero": np.array(0, np.int64),
        "n": np.array(trip, np.int64),
    }
    inputs = [_value("y0", [2])]
    if condition == "constant":
        constants["c0"] = np.array(starts, np.bool_)
    elif condition == "input":
        inputs.append(_value("c0", [], b))
    return make_model(
        [helper.make_node("Loop", ["n", "c0" if condition else "", "y0"], ["y", "ys"], body=body)],
        inputs,
        [_value("y", [2]), _value("ys", [trip, 2])],
        constants,
    )


@pytest.mark.parametrize(
    "condition, body_cond",
    [("", "pass"), ("constant", "pass"), ("constant", "chain"), ("constant", "true")],
)
def test_a_scan_loop_that_runs_its_trip_count_matches_onnxruntime(
    condition: str, body_cond: str
) -> None:
    model = _scan_loop(condition, body_cond=body_cond)
    against_onnxruntime(model, {"y0": np.array([1.5, -0.25], np.float32)})


@pytest.mark.parametrize(
    "condition, starts, body_cond",
    [
        ("constant", False, "pass"),
        ("constant", True, "false"),
        ("constant", True, "computed"),
        ("input", True, "pass"),
    ],
    ids=["starts false", "body sets false", "body computes it", "condition at run time"],
)
def test_a_scan_loop_that_may_stop_early_is_refused(
    condition: str, starts: bool, body_cond: str
) -> None:
    _refused(_scan_loop(condition, starts, body_cond=body_cond))


# -- Reshape, Flatten, Squeeze, Unsqueeze of every type the mapper moves --------------------------

RESHAPES = [
    ((2, 3), (2, 3)),
    ((), (1,)),
    ((2, 3), (1, 1, 2, 3)),
    ((2, 3), (2, 1, 3)),
    ((2, 3), (2, 3, 1)),
    ((2, 3), (3, 2)),
    ((2, 3), (6,)),
    ((6,), (1, 2, 1, 3)),
]
RESHAPE_TYPES = {
    "float32": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "uint8": TensorProto.UINT8,
    "int8": TensorProto.INT8,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
}


#: Floats and bytes are one RESHAPE whatever the shapes; integers take three routes.
RESHAPE_CASES = [
    (kind, shape, target)
    for kind in RESHAPE_TYPES
    for shape, target in (RESHAPES if kind.startswith("int") and kind != "int8" else RESHAPES[:2])
    + ([] if kind.startswith("int") and kind != "int8" else [RESHAPES[5]])
]


@pytest.mark.parametrize("kind, shape, target", RESHAPE_CASES, ids=str)
def test_reshape_of_every_type_matches_onnxruntime(kind: str, shape: tuple, target: tuple) -> None:
    code = RESHAPE_TYPES[kind]
    dtype = helper.tensor_dtype_to_np_dtype(code)
    rng = np.random.default_rng(8)
    if dtype.kind == "f":
        x = rng.uniform(-5, 5, shape).astype(dtype)
    else:
        info = np.iinfo(dtype if dtype != np.int64 else np.int32)
        x = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    model = make_model(
        [
            helper.make_node("Reshape", ["x", "shape"], ["r"]),
            helper.make_node("Identity", ["r"], ["y"]),
        ],
        [_value("x", list(shape), code)],
        [_value("y", list(target), code)],
        {"shape": np.array(target, np.int64)},
    )
    against_onnxruntime(model, {"x": x})


def test_a_boolean_reshape_that_moves_values_is_refused() -> None:
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [_value("x", [2, 3], TensorProto.BOOL)],
        [_value("y", [3, 2], TensorProto.BOOL)],
        {"shape": np.array([3, 2], np.int64)},
    )
    _refused(model)


# -- QuantizeLinear and DequantizeLinear: constant scales per tensor, per axis, in blocks ---------

QUANT_LAYOUTS = {
    "per tensor": ((), {}),
    "per axis 1": ((4,), {"axis": 1}),
    "per axis 0": ((3,), {"axis": 0}),
    "per axis -1": ((6,), {"axis": -1}),
    "blocks of 2": ((3, 2, 6), {"axis": 1, "block_size": 2}),
    "blocks of 3": ((3, 4, 2), {"axis": 2, "block_size": 3}),
}


@pytest.mark.parametrize(
    "folded, kind",
    [(False, TensorProto.UINT8), (True, TensorProto.INT8)],
    ids=["computed uint8", "constant int8"],
)
@pytest.mark.parametrize("layout", list(QUANT_LAYOUTS))
def test_quantize_then_dequantize_matches_onnxruntime(layout: str, kind: int, folded: bool) -> None:
    shape = (3, 4, 6)
    scale_shape, attributes = QUANT_LAYOUTS[layout]
    dtype = helper.tensor_dtype_to_np_dtype(kind)
    rng = np.random.default_rng(9)
    x = rng.uniform(-6, 6, shape).astype(np.float32)
    scale = rng.uniform(0.02, 0.1, scale_shape).astype(np.float32)
    zero = rng.integers(-20, 20, scale_shape).astype(dtype) if dtype == np.int8 else None
    if zero is None:
        zero = rng.integers(100, 150, scale_shape).astype(dtype)
    constants = {"scale": scale, "zero": zero}
    inputs, feeds = [_value("y", list(shape))], {"y": rng.uniform(-1, 1, shape).astype(np.float32)}
    if folded:
        constants["x"] = x
    else:
        inputs.insert(0, _value("x", list(shape)))
        feeds = {"x": x, **feeds}
    model = make_model(
        [
            helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], **attributes),
            helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["d"], **attributes),
            helper.make_node("Add", ["d", "y"], ["out"]),
        ],
        inputs,
        [_value("out", list(shape))],
        constants,
        opset=21,
    )
    against_onnxruntime(model, feeds)


@pytest.mark.parametrize("kind", [TensorProto.UINT8, TensorProto.INT8], ids=["uint8", "int8"])
def test_a_matmul_integer_too_long_for_float32_sums_is_exact(kind: int) -> None:
    """600 terms of up to 255 x 255 pass 2**24: the left side is split into digits."""
    dtype = helper.tensor_dtype_to_np_dtype(kind)
    info = np.iinfo(dtype)
    rng = np.random.default_rng(10)
    a = rng.integers(info.min, info.max, (3, 600), endpoint=True).astype(dtype)
    a[0] = info.max
    a[1] = info.min
    b = rng.integers(info.min, info.max, (600, 4), endpoint=True).astype(dtype)
    b[:, 0] = info.max
    b[:, 1] = info.min
    model = make_model(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
        [_value("a", [3, 600], kind)],
        [_value("y", [3, 4], TensorProto.INT32)],
        {"b": b},
    )
    against_onnxruntime(model, {"a": a})


# -- convolution windows: auto_pad on odd sizes with strides and dilations -----------------------


def _same_pads(sizes: tuple, kernel: tuple, strides: list, dilations: list, upper: bool) -> list:
    """ONNX's SAME padding (onnxruntime takes no dilation with auto_pad): the total
    each axis needs for ceil(size / stride) outputs, the odd one at the end (UPPER)."""
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begins.append(small if upper else big)
        ends.append(big if upper else small)
    return begins + ends


@pytest.mark.parametrize(
    "attributes",
    [
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
        {"auto_pad": "SAME_LOWER", "strides": [2, 1], "dilations": [1, 2]},
        {"auto_pad": "SAME_UPPER", "dilations": [2, 3]},
        {"auto_pad": "VALID", "strides": [1, 2]},
        {"dilations": [2, 1], "pads": [1, 0, 2, 1]},
        {},
    ],
    ids=str,
)
def test_conv_windows_match_onnxruntime(attributes: dict) -> None:
    rng = np.random.default_rng(11)
    x = _floats(rng, (1, 2, 6, 7))
    w = _floats(rng, (3, 2, 3, 2))

    def conv(**given: Any) -> Any:
        return _unchecked_model(
            [helper.make_node("Conv", ["x", "w"], ["y"], **given)],
            [_value("x", [1, 2, 6, 7])],
            [helper.make_tensor_value_info("y", F32, None)],
            {"w": w},
            17,
        )

    model = conv(**attributes)
    if "dilations" not in attributes or "auto_pad" not in attributes:
        against_onnxruntime(model, {"x": x})
        return
    explicit = {k: v for k, v in attributes.items() if k != "auto_pad"}
    explicit["pads"] = _same_pads(
        (6, 7), (3, 2), attributes.get("strides", [1, 1]), attributes["dilations"],
        attributes["auto_pad"] == "SAME_UPPER",
    )  # fmt: skip
    (want,) = ort.InferenceSession(conv(**explicit).SerializeToString()).run(None, {"x": x})
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        (got,) = run(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# -- BatchNormalization with statistics computed in the graph -----------------------------------


@pytest.mark.parametrize("epsilon", [None, 0.5])
def test_a_batch_norm_of_computed_statistics_matches_onnxruntime(epsilon: float | None) -> None:
    rng = np.random.default_rng(12)
    x = _floats(rng, (2, 3, 4, 5))
    stats = {n: rng.uniform(0.1, 2, (3,)).astype(np.float32) for n in ("s", "b", "m", "v")}
    extra = {} if epsilon is None else {"epsilon": epsilon}
    model = make_model(
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], **extra)],
        [_value("x", [2, 3, 4, 5]), *(_value(n, [3]) for n in stats)],
        [_value("y", [2, 3, 4, 5])],
        {},
    )
    against_onnxruntime(model, {"x": x, **stats})


@pytest.mark.parametrize("half", ["s", "v"])
def test_a_batch_norm_of_float16_statistics_is_refused(half: str) -> None:
    kinds = {n: TensorProto.FLOAT for n in ("s", "b", "m", "v")}
    kinds[half] = TensorProto.FLOAT16
    if half == "s":
        kinds["b"] = TensorProto.FLOAT16
    else:
        kinds["m"] = TensorProto.FLOAT16
    model = make_model(
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
        [_value("x", [2, 3, 4]), *(_value(n, [3], k) for n, k in kinds.items())],
        [_value("y", [2, 3, 4])],
        {},
        opset=15,
    )
    _refused(model)


# -- recurrent layers: the hidden size from R, sequence_lens, shapes refused -------------------


def _rnn(op: str, *, hidden_size: bool = True, lengths: Any = None, **shapes: tuple) -> Any:
    """An RNN, GRU or LSTM (4 steps, batch 2, 3 features, 5 units) with its inputs as
    graph inputs of ``shapes`` (defaults: the right ones)."""
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    want = {
        "x": (4, 2, 3),
        "w": (1, gates * 5, 3),
        "r": (1, gates * 5, 5),
        "b": (1, 2 * gates * 5),
        "h0": (1, 2, 5),
    }
    if op == "LSTM":
        want.update(c0=(1, 2, 5), p=(1, 15))
    want.update(shapes)
    names = ["x", "w", "r", "b", "lengths" if lengths is not None else "", "h0"]
    if op == "LSTM":
        names += ["c0", "p"]
    constants = {}
    if lengths is not None:
        constants["lengths"] = np.asarray(lengths, np.int32)
    node = helper.make_node(op, names, ["y", "y_h"], **({"hidden_size": 5} if hidden_size else {}))
    return _unchecked_model(
        [node],
        [_value(n, list(s)) for n, s in want.items()],
        [_value("y", [4, 1, 2, 5]), _value("y_h", [1, 2, 5])],
        constants,
        14,
    )


def _rnn_feeds(model: Any) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(13)
    shapes = {
        i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in model.graph.input
    }
    return {n: rng.uniform(-0.7, 0.7, s).astype(np.float32) for n, s in shapes.items()}


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize(
    "variant", ["no hidden_size", "full sequence_lens"], ids=["hidden from R", "lengths"]
)
def test_recurrent_layers_match_onnxruntime(op: str, variant: str) -> None:
    if variant == "lengths":
        model = _rnn(op, lengths=[4, 4])
        against_onnxruntime(model, _rnn_feeds(model))
        return
    model, feeds = _rnn(op, hidden_size=False), _rnn_feeds(_rnn(op))
    session = ort.InferenceSession(_rnn(op).SerializeToString())  # it wants hidden_size
    want = session.run(None, feeds)
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        got = run(*feeds.values())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "op, wrong",
    [
        ("RNN", {"w": (1, 5, 4)}),
        ("GRU", {"r": (1, 15, 4)}),
        ("RNN", {"b": (1, 5)}),
        ("GRU", {"h0": (1, 3, 5)}),
        ("LSTM", {"c0": (1, 2, 4)}),
        ("LSTM", {"p": (1, 12)}),
        ("RNN", {"x": (4, 2)}),
    ],
    ids=str,
)
def test_recurrent_inputs_of_other_shapes_are_refused(op: str, wrong: dict) -> None:
    (name,) = wrong
    assert (f"'{name}' of shape" if name != "x" else "rank-2") in _refused(_rnn(op, **wrong))


def test_sequence_lens_of_another_batch_is_refused() -> None:
    assert "'lengths' of shape" in _refused(_rnn("RNN", lengths=[4, 4, 4]))


def test_a_float16_recurrent_layer_is_refused() -> None:
    model = _rnn("GRU")
    for value in model.graph.input:
        value.type.tensor_type.elem_type = TensorProto.FLOAT16
    _refused(model)


# -- Cast from and to bytes (NNAPI's CAST takes no int8 and saturates where C wraps) -------------

BYTE_CASTS = [
    (TensorProto.UINT8, TensorProto.FLOAT),
    (TensorProto.INT8, TensorProto.INT32),
    (TensorProto.UINT8, TensorProto.INT64),
    (TensorProto.INT8, TensorProto.BOOL),
    (TensorProto.FLOAT, TensorProto.INT8),
    (TensorProto.FLOAT, TensorProto.UINT8),
    (TensorProto.INT32, TensorProto.INT8),
    (TensorProto.INT32, TensorProto.UINT8),
    (TensorProto.INT64, TensorProto.INT8),
    (TensorProto.UINT8, TensorProto.UINT8),
]


@pytest.mark.parametrize("source, target", BYTE_CASTS, ids=str)
def test_casts_from_and_to_bytes_match_onnxruntime(source: int, target: int) -> None:
    dtype = helper.tensor_dtype_to_np_dtype(source)
    target_dtype = helper.tensor_dtype_to_np_dtype(target)
    rng = np.random.default_rng(14)
    if dtype.kind == "f":  # in the target's range: beyond it ONNX leaves the result undefined
        info = np.iinfo(target_dtype)
        x = rng.uniform(info.min, info.max, (3, 8)).astype(dtype)
        x.flat[:4] = [info.min, info.max, -0.75, 0.75]
    elif dtype.itemsize == 1:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, (3, 8), endpoint=True).astype(dtype)
        x.flat[:3] = [info.min, info.max, 0]
    else:  # wrapped modulo 256 as C does
        x = rng.integers(-1000, 1000, (3, 8)).astype(dtype)
        x.flat[:6] = [-129, -128, 127, 128, 255, 256]
    model = make_model(
        [helper.make_node("Cast", ["x"], ["y"], to=target)],
        [_value("x", [3, 8], source)],
        [_value("y", [3, 8], target)],
        {},
    )
    against_onnxruntime(model, {"x": x})
