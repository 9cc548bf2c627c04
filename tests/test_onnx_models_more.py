"""Models from wheels that need quantized ONNX or int32 data through shape
operations (issue 28): ddddocr's dynamically quantized OCR model and magika's
content-type model, against onnxruntime; and int32 reshapes and byte casts on
generated models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from nnburst import onnx as nn_onnx  # noqa: E402

from .model_cache import wheel_member  # noqa: E402

RNG = np.random.default_rng(2028)


def _session(model: Any) -> Any:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3  # ddddocr declares its output's rank wrongly: ort warns
    data = model.SerializeToString() if not isinstance(model, str | Path) else str(model)
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


# -- ddddocr --------------------------------------------------------------------------------------


def _ddddocr() -> Any:
    return onnx.load(str(wheel_member("ddddocr", "1.6.1", "ddddocr/common_old.onnx")))


def test_ddddocr_quantized_ocr_reads_what_onnxruntime_reads() -> None:
    """21 DynamicQuantizeLinear → ConvInteger layers, a com.microsoft.DynamicQuantizeLSTM
    and a MatMulInteger.  The quantized arithmetic is exact (next test), but
    onnxruntime's Sigmoid (an approximation of its own) differs from NNAPI's
    LOGISTIC in the last bits, and each layer's dynamic quantization can turn
    such a difference into one step of its scale; its LSTM also quantizes the input
    and hidden state at every step, which nnburst's float LSTM does not.  So: the
    logits within 1.5 % of their range, and the same character at every step."""
    model = _ddddocr()
    shapes = {"input1": (1, 1, 64, 160)}
    with nn_onnx.Runner(nn_onnx.load(model, shapes), cache_dir=None) as run:
        for x in (RNG.uniform(0, 1, shapes["input1"]), np.zeros(shapes["input1"])):
            x = x.astype(np.float32)
            (want,) = _session(model).run(None, {"input1": x})
            (got,) = run(x)
            assert got.shape == want.shape == (20, 1, 8210)
            assert np.abs(got - want).max() <= 0.015 * np.abs(want).max()
            assert np.array_equal(got.argmax(-1), want.argmax(-1))


def test_ddddocr_quantized_layers_are_bit_exact_up_to_the_first_sigmoid() -> None:
    model = _ddddocr()
    typed = onnx.shape_inference.infer_shapes(model)
    kinds = {v.name: v.type.tensor_type.elem_type for v in typed.graph.value_info}
    names = ["input1_quantized", "input1_scale", "input1_zero_point", "392_quantized",
             "390_output_quantized", "390", "140_quantized", "140_scale"]  # fmt: skip
    del model.graph.output[:]
    model.graph.output.extend(helper.make_tensor_value_info(n, kinds[n], None) for n in names)
    x = RNG.uniform(-1, 1, (1, 1, 64, 96)).astype(np.float32)
    want = _session(model).run(None, {"input1": x})
    with nn_onnx.Runner(nn_onnx.load(model, {"input1": x.shape}), cache_dir=None) as run:
        got = run(x)
    for name, g, w in zip(names, got, want):
        assert g.dtype == w.dtype, name
        np.testing.assert_array_equal(g.reshape(w.shape), w, err_msg=name)


# -- magika ---------------------------------------------------------------------------------------


def _magika_features(content: bytes) -> np.ndarray:
    """magika 1.0.3's input for a file: its first and last 1,024 bytes (after
    stripping whitespace), padded with the token 256."""
    stripped = content.strip()
    begin = list(stripped[:1024]) + [256] * max(0, 1024 - len(stripped))
    end = [256] * max(0, 1024 - len(stripped)) + list(stripped[-1024:])
    return np.array([begin + end], np.int32)


def test_magika_content_type_model_matches_onnxruntime_on_real_files() -> None:
    """Its int32 bytes are reshaped, broadcast and compared against every byte value
    (a one-hot); the rest is float."""
    path = wheel_member("magika", "1.0.3", "magika/models/standard_v3_3/model.onnx")
    sources = [Path(__file__).read_bytes(), Path(nn_onnx.__file__).read_bytes(),
               bytes(RNG.integers(0, 256, 5000, dtype=np.uint8)), b"%PDF-1.4\n" + b"\x00" * 40]  # fmt: skip
    batch = np.concatenate([_magika_features(s) for s in sources])
    loaded = nn_onnx.load(str(path), {"bytes": batch.shape})
    (want,) = _session(path).run(None, {"bytes": batch})
    with nn_onnx.Runner(loaded, cache_dir=None) as run:
        (got,) = run(batch)
    # Probabilities: the short, padded file's are flat (0.03 each) after a layer norm
    # of nearly equal values, E[x²] − E[x]², whose cancellation shows the order of
    # the sums (3e-4 apart); the others agree to 1e-5.
    np.testing.assert_allclose(got[:3], want[:3], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3)
    assert np.array_equal(got.argmax(-1), want.argmax(-1))


# -- int32 data through shape operations, bytes through Cast --------------------------------------


@pytest.mark.parametrize(
    "shape, target",
    [
        ((2, 6), (2, 6, 1)),
        ((2, 6), (1, 2, 1, 6)),
        ((2, 6), (3, 4)),
        ((2, 3, 4), (6, 4)),
        ((4,), (2, 2)),
        ((2, 1, 3), (2, 3)),
    ],  # fmt: skip
)
def test_int32_reshapes_keep_every_value(shape: tuple[int, ...], target: tuple[int, ...]) -> None:
    """Extremes included: a detour through float32 alone would round them."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT32, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(np.array(target, np.int64), "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.integers(-(2**31), 2**31, shape, dtype=np.int64).astype(np.int32)
    x.reshape(-1)[:3] = [-(2**31), 2**31 - 1, 2**24 + 1]
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        (got,) = run(x)
    np.testing.assert_array_equal(got, x.reshape(target))


@pytest.mark.parametrize(
    "source, target",
    [
        (np.float32, np.uint8),
        (np.float32, np.int8),
        (np.int32, np.uint8),
        (np.int32, np.int8),
        (np.uint8, np.float32),
        (np.int8, np.int32),
        (np.bool_, np.uint8),
        (np.uint8, np.bool_),
        (np.bool_, np.float32),
        (np.float32, np.bool_),
    ],  # fmt: skip
)
def test_casts_to_and_from_bytes_and_booleans_match_onnxruntime(source: Any, target: Any) -> None:
    kinds = {np.float32: TensorProto.FLOAT, np.int32: TensorProto.INT32, np.uint8: TensorProto.UINT8,
             np.int8: TensorProto.INT8, np.bool_: TensorProto.BOOL}  # fmt: skip
    nodes = [helper.make_node("Cast", ["x"], ["y"], to=kinds[target])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", kinds[source], [3, 7])],
        [helper.make_tensor_value_info("y", kinds[target], [3, 7])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if source == np.float32:  # in range: ONNX leaves float → byte overflow undefined
        low, high = (-128, 127) if target == np.int8 else (0, 255)
        x = RNG.uniform(low, high, (3, 7)).astype(np.float32)
        x[0, :3] = [0.0, -0.7 if low else 0.7, high - 0.2]
    elif source == np.int32:  # wraps around, as C does
        x = RNG.integers(-100_000, 100_000, (3, 7)).astype(np.int32)
    elif source == np.bool_:
        x = RNG.integers(0, 2, (3, 7)).astype(np.bool_)
    else:
        info = np.iinfo(source)
        x = RNG.integers(info.min, info.max + 1, (3, 7)).astype(source)
    (want,) = _session(model).run(None, {"x": x})
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        (got,) = run(x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_int32_data_through_transpose_concat_slice_squeeze_and_pad() -> None:
    """NNAPI defines these for floats only: the converter moves int32 data as two
    exact float32 halves."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
        helper.make_node("Concat", ["t", "k"], ["c"], axis=1),
        helper.make_node("Slice", ["c", "starts", "ends", "axes", "steps"], ["s"]),
        helper.make_node("Unsqueeze", ["s", "u"], ["e"]),
        helper.make_node("Squeeze", ["e", "u"], ["q"]),
        helper.make_node("Pad", ["q", "pads"], ["y"]),
    ]
    constants = {
        "k": RNG.integers(-(2**31), 2**31, (4, 1, 3), dtype=np.int64).astype(np.int32),
        "starts": np.array([1, 0], np.int64), "ends": np.array([4, 3], np.int64),
        "axes": np.array([0, 2], np.int64), "steps": np.array([2, 2], np.int64),
        "u": np.array([1], np.int64), "pads": np.array([0, 1, 0, 0, 2, 0], np.int64),
    }  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT32, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.integers(-(2**31), 2**31, (2, 3, 4), dtype=np.int64).astype(np.int32)
    x.reshape(-1)[:4] = [-(2**31), 2**31 - 1, 2**24 + 1, -(2**24) - 1]
    (want,) = _session(model).run(None, {"x": x})
    with nn_onnx.Runner(nn_onnx.load(model), cache_dir=None) as run:
        (got,) = run(x)
    np.testing.assert_array_equal(got, want)


# -- models quantized by onnxruntime's own tool ---------------------------------------------------


@pytest.mark.parametrize("activations, weights", [("QUInt8", "QUInt8"), ("QInt8", "QInt8"),
                                                  ("QUInt8", "QInt8")])  # fmt: skip
def test_a_cnn_quantized_by_onnxruntime_quantize_static_is_exact(
    tmp_path: Path, activations: str, weights: str
) -> None:
    """QOperator format (QLinearConv with per-channel int8 filters and int32 bias,
    QLinearMatMul with per-column zero points): the integers ONNX defines, to the
    bit, as ONNX's reference computes them.  onnxruntime agrees for int8
    activations; with uint8 ones its x86 kernels without VNNI saturate pairs of
    products in int16 (see test_onnx_quantized.py)."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    from onnx.reference import ReferenceEvaluator

    f32 = np.float32
    weights_of = {"W1": RNG.standard_normal((8, 3, 3, 3)).astype(f32) * 0.3,
                  "B1": RNG.standard_normal(8).astype(f32) * 0.1,
                  "W2": RNG.standard_normal((16, 8, 3, 3)).astype(f32) * 0.2,
                  "G": RNG.standard_normal((16 * 4 * 4, 10)).astype(f32) * 0.1}  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Flatten", ["r2"], ["flat"]),
        helper.make_node("MatMul", ["flat", "G"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(v, k) for k, v in weights_of.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "float.onnx")
    samples = iter([{"x": RNG.standard_normal((1, 3, 8, 8)).astype(f32)} for _ in range(8)])

    class Calibration(quantization.CalibrationDataReader):  # type: ignore[misc]
        def get_next(self) -> Any:
            return next(samples, None)

    quantization.quantize_static(
        str(tmp_path / "float.onnx"), str(tmp_path / "int8.onnx"), Calibration(),
        quant_format=quantization.QuantFormat.QOperator, per_channel=True,
        activation_type=getattr(quantization.QuantType, activations),
        weight_type=getattr(quantization.QuantType, weights),
    )  # fmt: skip
    quantized = onnx.load(tmp_path / "int8.onnx")
    assert {"QLinearConv", "QLinearMatMul"} <= {n.op_type for n in quantized.graph.node}
    x = RNG.standard_normal((1, 3, 8, 8)).astype(f32)
    with nn_onnx.Runner(nn_onnx.load(quantized), cache_dir=None) as run:
        (got,) = run(x)
    if activations == "QInt8":
        np.testing.assert_array_equal(got, _session(quantized).run(None, {"x": x})[0])
    for opset in quantized.opset_import:  # the reference implements these from opset 19
        if opset.domain in ("", "ai.onnx"):
            opset.version = 21
    np.testing.assert_array_equal(got, ReferenceEvaluator(quantized).run(None, {"x": x})[0])
