"""Quantized ONNX operators against onnxruntime, bit for bit, on generated models
with random data (nnburst/onnx/ops/quantization.py says how each maps)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from nnburst import onnx as nn_onnx  # noqa: E402

RNG = np.random.default_rng(28)
F32, U8, I8 = np.float32, np.uint8, np.int8
_ONNX = {F32: TensorProto.FLOAT, U8: TensorProto.UINT8, I8: TensorProto.INT8,
         np.int32: TensorProto.INT32}  # fmt: skip


def _model(nodes: list[Any], inputs: dict[str, tuple[Any, list[int]]],
           outputs: dict[str, Any], constants: dict[str, np.ndarray], opset: int = 21) -> Any:  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "q",
        [helper.make_tensor_value_info(n, _ONNX[t], s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, _ONNX[t], None) for n, t in outputs.items()],
        [numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    onnx.checker.check_model(onnx.shape_inference.infer_shapes(model), full_check=True)
    return model


def _exactly_as_onnxruntime(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    ).run(None, feeds)
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        got = run(*feeds.values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g.reshape(w.shape), w)
    return got


def _exactly_as_the_integers(model: Any, feeds: dict[str, np.ndarray], want: np.ndarray) -> None:
    """For uint8 × int8 products: onnxruntime's x86 kernels without VNNI sum pairs of
    products in saturating int16 (pmaddubsw), so its results there are not the
    integers ONNX defines; ``want`` is computed exactly, with onnxruntime's
    requantization arithmetic."""
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        (got,) = run(*feeds.values())
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.reshape(want.shape), want)


def _conv_sums(x: np.ndarray, w: np.ndarray, pads: int) -> np.ndarray:
    """Exact int64 sums of a 2-D NCHW convolution (stride 1)."""
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pads, pads), (pads, pads)))
    m, _, kh, kw = w.shape
    h, wd = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((x.shape[0], m, h, wd), np.int64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,mc->nmhw", x[:, :, i : i + h, j : j + wd], w[:, :, i, j])
    return out


def _bytes(dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [U8, I8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_linear_rounds_half_to_even_and_saturates(dtype: Any, per_axis: bool) -> None:
    shape = (2, 3, 4, 5)
    scale = RNG.uniform(0.01, 0.1, 3 if per_axis else ()).astype(F32)
    zero = _bytes(dtype, (3,) if per_axis else ())
    x = RNG.uniform(-20, 20, shape).astype(F32)
    # exact halves of the scale (ties), and values far beyond the range
    x.reshape(-1)[:40] = (np.arange(40) - 20.5).astype(F32) * (scale.reshape(-1)[0])
    x.reshape(-1)[40:44] = [1e9, -1e9, 3e38, -3e38]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)]
    model = _model(nodes, {"x": (F32, list(shape))}, {"y": dtype}, {"s": scale, "z": zero})
    _exactly_as_onnxruntime(model, {"x": x})


def test_quantize_linear_without_zero_point_is_uint8() -> None:
    x = RNG.uniform(-3, 300, (4, 6)).astype(F32)
    x[0] = np.arange(6) + 0.5  # ties at scale 1
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["y"])]
    model = _model(nodes, {"x": (F32, [4, 6])}, {"y": U8}, {"s": np.array(1.0, F32)})
    _exactly_as_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("dtype", [U8, I8, np.int32])
@pytest.mark.parametrize("per_axis", [False, True])
def test_dequantize_linear(dtype: Any, per_axis: bool) -> None:
    shape = (3, 4, 5)
    scale = RNG.uniform(0.001, 2, 4 if per_axis else ()).astype(F32)
    x = _bytes(dtype, shape) if dtype != np.int32 else RNG.integers(-(2**30), 2**30, shape)
    x = x.astype(dtype)
    zero = (
        _bytes(dtype, (4,) if per_axis else ())
        if dtype != np.int32
        else np.zeros(4 if per_axis else (), np.int32)
    )
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1)]
    model = _model(nodes, {"x": (dtype, list(shape))}, {"y": F32}, {"s": scale, "z": zero})
    _exactly_as_onnxruntime(model, {"x": x})


def test_a_qdq_pair_on_activations_and_folded_weights() -> None:
    """QuantizeLinear → DequantizeLinear around a float Conv whose int8 weights are
    dequantized at load."""
    w = _bytes(I8, (4, 3, 3, 3))
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd"], ["y"], pads=[1, 1, 1, 1]),
    ]
    constants = {"xs": np.array(0.02, F32), "xz": np.array(128, U8), "w": w,
                 "ws": RNG.uniform(0.001, 0.01, 4).astype(F32)}  # fmt: skip
    model = _model(nodes, {"x": (F32, [1, 3, 8, 8])}, {"y": F32}, constants)
    x = RNG.uniform(-3, 3, (1, 3, 8, 8)).astype(F32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        (got,) = run(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # a float Conv's sum order


@pytest.mark.parametrize("spread", [1.0, 0.0, -1.0])
def test_dynamic_quantize_linear(spread: float) -> None:
    x = RNG.uniform(-2, 5, (2, 16, 7)).astype(F32) * spread
    if spread < 0:
        x = np.abs(x) * -1  # all negative: the range is widened to hold 0
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])]
    model = _model(nodes, {"x": (F32, [2, 16, 7])}, {"y": U8, "s": F32, "z": U8}, {})
    _exactly_as_onnxruntime(model, {"x": x})


def _conv_integer_model(x_dtype: Any, w: np.ndarray, zero: Any, w_zero: Any, **attrs: Any) -> Any:
    nodes = [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)]
    constants = {"w": w, "xz": np.array(zero, x_dtype), "wz": np.asarray(w_zero, w.dtype)}
    return _model(nodes, {"x": (x_dtype, [1, w.shape[1], 9, 9])}, {"y": np.int32}, constants)


@pytest.mark.parametrize("w_dtype", [U8, I8])
def test_conv_integer_is_exact(w_dtype: Any) -> None:
    w = _bytes(w_dtype, (6, 4, 3, 3))
    model = _conv_integer_model(U8, w, 131, 3 if w_dtype == U8 else -2, pads=[1, 0, 1, 2],
                                strides=[2, 1])  # fmt: skip
    _exactly_as_onnxruntime(model, {"x": _bytes(U8, (1, 4, 9, 9))})


def test_conv_integer_whose_sums_pass_two_to_the_24_splits_the_input() -> None:
    """512 · 3 · 3 terms of up to 255 · 255: float32 alone would round the sums."""
    w = np.full((2, 512, 3, 3), 255, U8)
    w[1] = _bytes(U8, (512, 3, 3))
    model = _conv_integer_model(U8, w, 0, 0)
    x = np.full((1, 512, 9, 9), 255, U8)
    x[0, :, 4:] = _bytes(U8, (512, 5, 9))
    (got,) = _exactly_as_onnxruntime(model, {"x": x})
    assert got.max() > 2**24


@pytest.mark.parametrize("b_dtype", [U8, I8])
def test_matmul_integer_with_per_column_zero_points(b_dtype: Any) -> None:
    a, b = _bytes(U8, (2, 5, 40)), _bytes(b_dtype, (40, 3))
    b_zero = np.array([1, 4, 0] if b_dtype == U8 else [1, -4, 0], b_dtype)
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])]
    constants = {"b": b, "az": np.array(7, U8), "bz": b_zero}
    model = _model(nodes, {"a": (U8, [2, 5, 40])}, {"y": np.int32}, constants)
    if b_dtype == U8:
        _exactly_as_onnxruntime(model, {"a": a})
    want = (a.astype(np.int64) - 7) @ (b.astype(np.int64) - b_zero.astype(np.int64))
    _exactly_as_the_integers(model, {"a": a}, want.astype(np.int32))


@pytest.mark.parametrize("dtype, w_dtype", [(U8, U8), (I8, I8), (U8, I8)])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv_requantizes_as_onnxruntime(
    dtype: Any, w_dtype: Any, per_channel: bool
) -> None:
    channels = 8
    w = _bytes(w_dtype, (channels, 4, 3, 3))
    w_scale = RNG.uniform(0.002, 0.02, channels if per_channel else ()).astype(F32)
    constants = {
        "xs": np.array(0.05, F32), "xz": np.array(3 if dtype == I8 else 120, dtype),
        "w": w, "ws": w_scale, "wz": np.zeros(channels if per_channel else (), w_dtype),
        "ys": np.array(0.07, F32), "yz": np.array(-5 if dtype == I8 else 131, dtype),
        "b": RNG.integers(-3000, 3000, channels).astype(np.int32),
    }  # fmt: skip
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                              ["y"], pads=[1, 1, 1, 1])]  # fmt: skip
    model = _model(nodes, {"x": (dtype, [1, 4, 10, 10])}, {"y": dtype}, constants)
    x = _bytes(dtype, (1, 4, 10, 10))
    if dtype == w_dtype:
        _exactly_as_onnxruntime(model, {"x": x})
    sums = _conv_sums(x.astype(np.int64) - constants["xz"], w, 1) + constants["b"].reshape(-1, 1, 1)
    multiplier = (np.float32(0.05) * w_scale / np.float32(0.07)).reshape(-1, 1, 1)
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    want = np.rint(sums.astype(F32) * multiplier) + constants["yz"]
    _exactly_as_the_integers(model, {"x": x}, np.clip(want, low, high).astype(dtype))


@pytest.mark.parametrize("dtype", [U8, I8])
def test_qlinear_matmul_requantizes_as_onnxruntime(dtype: Any) -> None:
    b = _bytes(dtype, (16, 6))
    constants = {
        "as": np.array(0.03, F32), "az": np.array(2, dtype), "b": b,
        "bs": np.array(0.011, F32), "bz": np.array(1, dtype),
        "ys": np.array(0.4, F32), "yz": np.array(10, dtype),
    }  # fmt: skip
    nodes = [helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                              ["y"])]  # fmt: skip
    model = _model(nodes, {"a": (dtype, [3, 4, 16])}, {"y": dtype}, constants)
    _exactly_as_onnxruntime(model, {"a": _bytes(dtype, (3, 4, 16))})


def test_dynamic_quantization_into_conv_integer_as_onnxruntime_quantizes_dynamically() -> None:
    """The pattern of onnxruntime's dynamic quantization (ddddocr's): the input's
    scale and zero point are computed at every run and feed ConvInteger."""
    w = _bytes(U8, (5, 3, 3, 3))
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["xs", "ws"], ["scale"]),
        helper.make_node("Mul", ["accf", "scale"], ["y"]),
    ]
    constants = {"w": w, "wz": np.array(120, U8), "ws": np.array(0.013, F32)}
    model = _model(nodes, {"x": (F32, [1, 3, 12, 12])}, {"y": F32}, constants)
    _exactly_as_onnxruntime(model, {"x": RNG.standard_normal((1, 3, 12, 12)).astype(F32)})


def test_qlinear_conv_multiplies_the_scales_in_onnxruntimes_order() -> None:
    """(x_scale · w_scale) / y_scale, not x_scale · (w_scale / y_scale): these scales
    make the two one ulp apart, and -106 · -25 · the product lands on 28.4999…
    one way and 28.5000… the other."""
    constants = {
        "xs": np.array(0.06445307, F32), "xz": np.array(0, I8), "w": np.full((1, 1, 1, 1), -25, I8),
        "ws": np.array(0.01160186, F32), "wz": np.array(0, I8),
        "ys": np.array(0.06953, F32), "yz": np.array(0, I8),
    }  # fmt: skip
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])]
    model = _model(nodes, {"x": (I8, [1, 1, 1, 1])}, {"y": I8}, constants)
    (got,) = _exactly_as_onnxruntime(model, {"x": np.full((1, 1, 1, 1), -106, I8)})
    assert got.item() == 28


# -- bad files stay bad data ----------------------------------------------------------------------


def _every_quantized_operator() -> Any:
    """One small graph with each quantized operator (and onnxruntime's
    DynamicQuantizeLSTM), for the mutants below."""
    constants = {
        "w": _bytes(I8, (4, 3, 3, 3)), "w2": _bytes(I8, (4, 4, 3, 3)), "wz": np.zeros(4, I8), "ws": np.full(4, 0.01, F32),
        "cs": np.array(0.02, F32), "cz": np.array(7, U8), "ys": np.array(0.1, F32),
        "yz": np.array(3, U8), "b": np.arange(4, dtype=np.int32),
        "m": _bytes(U8, (4, 5)), "mz": np.array(2, U8), "ms": np.array(0.5, F32),
        "lw": _bytes(I8, (1, 5, 8)), "lr": _bytes(I8, (1, 2, 8)), "lws": np.array([0.1], F32),
        "lwz": np.zeros(1, I8), "lrs": np.array([0.2], F32), "lrz": np.zeros(1, I8),
    }  # fmt: skip
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"], pads=[1, 1, 1, 1]),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("QuantizeLinear", ["accf", "cs", "cz"], ["q"]),
        helper.make_node(
            "QLinearConv",
            ["q", "cs", "cz", "w2", "ws", "wz", "ys", "yz", "b"],
            ["qc"],
            group=1,
            strides=[2, 2],
            pads=[1, 1, 1, 1],
        ),  # fmt: skip
        helper.make_node("DequantizeLinear", ["qc", "ys", "yz"], ["d"]),
        helper.make_node("Reshape", ["qc", "shape"], ["flat"]),
        helper.make_node(
            "QLinearMatMul", ["flat", "ys", "yz", "m", "ms", "mz", "ys", "yz"], ["mm"]
        ),  # fmt: skip
        helper.make_node("MatMulInteger", ["flat", "m", "yz", "mz"], ["mi"]),
        helper.make_node("Cast", ["mi"], ["mf"], to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["mf", "seq"], ["s"]),
        helper.make_node(
            "DynamicQuantizeLSTM",
            ["s", "lw", "lr", "", "", "", "", "", "lws", "lwz", "lrs", "lrz"],
            ["h"],
            domain="com.microsoft",
            hidden_size=2,
        ),  # fmt: skip
    ]
    constants["shape"] = np.array([4, 4], np.int64)
    constants["seq"] = np.array([4, 1, 5], np.int64)
    graph = helper.make_graph(
        nodes,
        "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         (("d", TensorProto.FLOAT), ("mm", TensorProto.UINT8), ("h", TensorProto.FLOAT))],
        [numpy_helper.from_array(v, k) for k, v in constants.items()],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def test_the_quantized_graph_loads_and_runs() -> None:
    model = _every_quantized_operator()
    x = RNG.standard_normal((1, 3, 4, 4)).astype(F32)
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        d, mm, h = run(x)
    assert d.shape == (1, 4, 2, 2) and mm.shape == (4, 5) and h.shape == (4, 1, 1, 2)


def test_mutated_quantized_graphs_are_bad_data() -> None:
    """Scales, zero points and weights of other shapes and types, other axes and
    block sizes, inputs left out: refused as bad data (or loaded), never another
    exception."""
    from nnburst.errors import BadDataError

    data = _every_quantized_operator().SerializeToString()
    outcomes = {"loaded": 0, "refused": 0}
    for seed in range(250):
        rng = np.random.default_rng(seed)
        model = onnx.load_from_string(data)
        for _ in range(int(rng.integers(1, 3))):
            kind = int(rng.integers(0, 4))
            if kind == 0:
                tensors = model.graph.initializer
                tensor = tensors[int(rng.integers(0, len(tensors)))]
                dtype = numpy_helper.to_array(tensor).dtype
                shape = tuple(int(d) for d in rng.integers(1, 6, int(rng.integers(0, 4))))
                value = rng.integers(-3, 9, shape).astype(dtype)
                tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
            elif kind == 1:
                node = model.graph.node[int(rng.integers(0, len(model.graph.node)))]
                name = str(rng.choice(["axis", "block_size", "group", "hidden_size"]))
                node.attribute.append(helper.make_attribute(name, int(rng.integers(-4, 5))))
            elif kind == 2:
                node = model.graph.node[int(rng.integers(0, len(model.graph.node)))]
                if node.input:
                    node.input[int(rng.integers(0, len(node.input)))] = ""
            else:
                node = model.graph.node[int(rng.integers(0, len(model.graph.node)))]
                node.input.append(str(rng.choice(["x", "ws", "b"])))
        try:
            nn_onnx.load(model.SerializeToString())
            outcomes["loaded"] += 1
        except BadDataError:
            outcomes["refused"] += 1
        except Exception as exc:
            pytest.fail(f"mutant {seed}: {type(exc).__name__}: {exc}")
    assert outcomes["refused"] > 0 and outcomes["loaded"] > 0


@pytest.mark.parametrize("targeted", [False, True])
def test_qlinear_matmul_with_float16_scales_as_onnx_reference_computes_it(targeted: bool) -> None:
    """onnxruntime's CPU kernel takes no float16 scales: ONNX's reference decides (the
    multiplier formed in float16).  The targeted scales give 13 that way, 14 with a
    float32 multiplier."""
    from onnx.reference import ReferenceEvaluator

    f16 = np.float16
    scales = (0.01314, 0.0275, 0.0811) if targeted else (0.03, 0.011, 0.07)
    k, n = (1, 1) if targeted else (16, 6)
    b = np.full((1, 1), 132, U8) if targeted else _bytes(U8, (k, n))
    constants = {"as": np.array(scales[0], f16), "az": np.array(2, U8), "b": b,
                 "bs": np.array(scales[1], f16), "bz": np.array(1, U8),
                 "ys": np.array(scales[2], f16), "yz": np.array(10, U8)}  # fmt: skip
    nodes = [helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                              ["y"])]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "q",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [5, k])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        [numpy_helper.from_array(v, key) for key, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    a = np.full((5, 1), 8, U8) if targeted else _bytes(U8, (5, k))
    (want,) = ReferenceEvaluator(model).run(None, {"a": a})
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        (got,) = run(a)
    np.testing.assert_array_equal(got, want)
    if targeted:
        assert got[0, 0] == 13


def test_matmul_integer_with_a_zero_point_per_row() -> None:
    """ONNX allows one a_zero_point per row of a 2-D A (onnxruntime takes one value):
    the exact integers decide."""
    a, b = _bytes(U8, (5, 8)), _bytes(U8, (8, 3))
    a_zero = np.array([0, 7, 128, 255, 3], U8)
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])]
    model = _model(nodes, {"a": (U8, [5, 8])}, {"y": np.int32}, {"b": b, "az": a_zero})
    want = (a.astype(np.int64) - a_zero.astype(np.int64)[:, None]) @ b.astype(np.int64)
    _exactly_as_the_integers(model, {"a": a}, want.astype(np.int32))
