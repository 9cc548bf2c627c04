"""The synthetic-model builder itself: LiteRT must load what it writes and
compute the numpy answer, or the importer tests built on it prove nothing."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")

from .tflite_builder import (
    OPTIONAL,
    Tensor,
    graph,
    options_type,
    run_litert,
    schema,
    single_op,
    with_outputs,
)

RNG = np.random.default_rng(20240611)
F32 = np.float32
ACT = schema.ActivationFunctionType
PADDING = schema.Padding


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(F32)


def pad_for(size: int, kernel: int, stride: int, padding: str) -> tuple[int, int, int]:
    """TFLite's output size and (before, after) padding along one axis."""
    if padding == "SAME":
        out = -(-size // stride)
        total = max((out - 1) * stride + kernel - size, 0)
        return out, total // 2, total - total // 2
    return (size - kernel) // stride + 1, 0, 0


def padded(x: np.ndarray, kh: int, kw: int, stride: int, padding: str, value: float = 0.0):
    oh, top, bottom = pad_for(x.shape[1], kh, stride, padding)
    ow, left, right = pad_for(x.shape[2], kw, stride, padding)
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=value)
    return xp, oh, ow


def conv2d_ref(x, w, b, stride=1, padding="SAME", x_zero=0.0):
    """NHWC input, OHWI weights; float64 accumulation."""
    _, kh, kw, _ = w.shape
    xp, oh, ow = padded(x.astype(np.float64) - x_zero, kh, kw, stride, padding)
    out = np.empty((x.shape[0], oh, ow, w.shape[0]))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * stride : i * stride + kh, j * stride : j * stride + kw, :]
            out[:, i, j, :] = np.einsum("nhwc,ohwc->no", patch, w.astype(np.float64))
    return out + b


def depthwise_ref(x, w, b, multiplier, stride=1, padding="SAME"):
    """NHWC input, [1, H, W, C*multiplier] weights: output channel k reads input k // multiplier."""
    _, kh, kw, _ = w.shape
    xp, oh, ow = padded(
        np.repeat(x.astype(np.float64), multiplier, axis=3), kh, kw, stride, padding
    )
    out = np.empty((x.shape[0], oh, ow, w.shape[3]))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * stride : i * stride + kh, j * stride : j * stride + kw, :]
            out[:, i, j, :] = np.einsum("nhwk,hwk->nk", patch, w[0].astype(np.float64))
    return out + b


def test_add_relu_is_exact():
    a = Tensor((1, 2, 2, 3), F32, name="a")
    b = Tensor((1, 2, 2, 3), F32, name="b")
    out = Tensor((1, 2, 2, 3), F32, name="sum")
    model = single_op("ADD", [a, b], [out], schema.AddOptionsT(fusedActivationFunction=ACT.RELU))
    x, y = rand(1, 2, 2, 3), rand(1, 2, 2, 3)
    (got,) = run_litert(model, [x, y])
    assert got.dtype == F32
    np.testing.assert_array_equal(got, np.maximum(x + y, 0))
    assert (got == 0).any() and (got > 0).any()  # the RELU did something


def test_conv2d_same_padding_with_constant_weights():
    x, w, bias = rand(1, 5, 6, 3), rand(4, 3, 3, 3), rand(4)
    options = schema.Conv2DOptionsT(padding=PADDING.SAME, strideH=1, strideW=1)
    model = single_op(
        "CONV_2D",
        [Tensor((1, 5, 6, 3), F32), Tensor((4, 3, 3, 3), F32, w), Tensor((4,), F32, bias)],
        [Tensor((1, 5, 6, 4), F32)],
        options,
    )
    (got,) = run_litert(model, [x])
    np.testing.assert_allclose(got, conv2d_ref(x, w, bias), rtol=1e-5, atol=1e-5)


def test_fully_connected_without_bias_is_an_omitted_input():
    """-1 in the operator's inputs.  (Not CONV_2D: LiteRT's conv kernel
    requires a bias tensor, refusing both -1 and a two-input operator.)"""
    x, w = rand(2, 5), rand(3, 5)
    model = single_op(
        "FULLY_CONNECTED",
        [Tensor((2, 5), F32), Tensor((3, 5), F32, w), None],
        [Tensor((2, 3), F32)],
        schema.FullyConnectedOptionsT(fusedActivationFunction=ACT.NONE),
    )
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    assert parsed.subgraphs[0].operators[0].inputs.tolist() == [0, 1, OPTIONAL]
    (got,) = run_litert(model, [x])
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)


def test_depthwise_conv2d_with_multiplier():
    x, w, bias = rand(1, 6, 5, 2), rand(1, 3, 3, 4), rand(4)
    options = schema.DepthwiseConv2DOptionsT(
        padding=PADDING.SAME, strideH=2, strideW=2, depthMultiplier=2
    )
    model = single_op(
        "DEPTHWISE_CONV_2D",
        [Tensor((1, 6, 5, 2), F32), Tensor((1, 3, 3, 4), F32, w), Tensor((4,), F32, bias)],
        [Tensor((1, 3, 3, 4), F32)],
        options,
    )
    (got,) = run_litert(model, [x])
    want = depthwise_ref(x, w, bias, multiplier=2, stride=2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_uint8_quantized_add():
    a = Tensor((1, 2, 2, 3), np.uint8, scale=0.5, zero_point=128)
    b = Tensor((1, 2, 2, 3), np.uint8, scale=[0.25], zero_point=[100])
    out = Tensor((1, 2, 2, 3), np.uint8, scale=0.75, zero_point=120)
    model = single_op("ADD", [a, b], [out], schema.AddOptionsT())
    x = RNG.integers(0, 256, (1, 2, 2, 3), dtype=np.uint8)
    y = RNG.integers(0, 256, (1, 2, 2, 3), dtype=np.uint8)
    (got,) = run_litert(model, [x, y])
    assert got.dtype == np.uint8
    real = (x.astype(np.float64) - 128) * 0.5 + (y.astype(np.float64) - 100) * 0.25
    want = np.clip(np.round(real / 0.75) + 120, 0, 255)
    # LiteRT rescales in fixed point: within one step of the rounded real sum
    assert np.abs(got.astype(np.int64) - want).max() <= 1


def test_int8_per_channel_conv2d():
    x = RNG.integers(-128, 128, (1, 4, 4, 2), dtype=np.int8)
    w = RNG.integers(-127, 128, (3, 3, 3, 2), dtype=np.int8)
    w_scales = [0.02, 0.05, 0.01]
    x_scale, x_zero, out_scale, out_zero = 0.1, -3, 0.4, 5
    bias = RNG.integers(-500, 500, 3, dtype=np.int32)
    model = single_op(
        "CONV_2D",
        [
            Tensor((1, 4, 4, 2), np.int8, scale=x_scale, zero_point=x_zero),
            Tensor((3, 3, 3, 2), np.int8, w, scale=w_scales, zero_point=[0, 0, 0]),
            Tensor((3,), np.int32, bias, scale=[x_scale * s for s in w_scales], zero_point=[0] * 3),
        ],
        [Tensor((1, 4, 4, 3), np.int8, scale=out_scale, zero_point=out_zero)],
        schema.Conv2DOptionsT(padding=PADDING.SAME, strideH=1, strideW=1),
        version=3,  # per-channel int8 CONV_2D
    )
    (got,) = run_litert(model, [x])
    # padding is with the zero point, i.e. real zero
    acc = conv2d_ref(x, w, bias, x_zero=x_zero)
    want = np.clip(np.round(acc * x_scale * np.array(w_scales) / out_scale) + out_zero, -128, 127)
    assert np.abs(got.astype(np.int64) - want).max() <= 1


def test_conv_then_reshape_graph():
    x, w, bias = rand(1, 4, 4, 3), rand(2, 3, 3, 3), rand(2)
    tensors = [
        Tensor((1, 4, 4, 3), F32, name="x"),
        Tensor((2, 3, 3, 3), F32, w, name="w"),
        Tensor((2,), F32, bias, name="b"),
        Tensor((1, 2, 2, 2), F32, name="conv"),
        Tensor((2,), np.int32, np.array([1, 8], np.int32), name="shape"),
        Tensor((1, 8), F32, name="flat"),
    ]
    model = graph(
        tensors,
        [
            (
                "CONV_2D",
                [0, 1, 2],
                [3],
                schema.Conv2DOptionsT(
                    padding=PADDING.VALID, strideH=1, strideW=1, fusedActivationFunction=ACT.RELU6
                ),
            ),
            ("RESHAPE", [3, 4], [5], schema.ReshapeOptionsT(newShape=[1, 8])),
        ],
        inputs=[0],
        outputs=[5],
    )
    (got,) = run_litert(model, [x])
    want = np.clip(conv2d_ref(x, w, bias, 1, "VALID"), 0, 6).reshape(1, 8)
    assert got.shape == (1, 8)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_with_outputs_exposes_an_intermediate_and_keeps_constants_aligned():
    x, w = rand(2, 3), rand(4, 3)
    tensors = [
        Tensor((2, 3), F32, name="x"),
        Tensor((4, 3), F32, w, name="w"),
        Tensor((2, 4), F32, name="logits"),
        Tensor((2, 4), F32, name="p"),
    ]
    model = graph(
        tensors,
        [
            ("FULLY_CONNECTED", [0, 1, OPTIONAL], [2], schema.FullyConnectedOptionsT()),
            ("SOFTMAX", [2], [3], schema.SoftmaxOptionsT(beta=1.0)),
        ],
        inputs=[0],
        outputs=[3],
    )
    exposed = with_outputs(model, [2])
    assert schema.ModelT.InitFromPackedBuf(exposed, 0).subgraphs[0].outputs.tolist() == [3, 2]
    buf = schema.Model.GetRootAs(exposed, 0).Buffers(1)
    start = buf._tab.Vector(buf._tab.Offset(4))
    assert start % 16 == 0 and exposed[start : start + w.nbytes] == w.tobytes()
    probabilities, logits = run_litert(exposed, [x])
    np.testing.assert_allclose(logits, x.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(probabilities, run_litert(model, [x])[0], rtol=1e-6)


def test_code_above_127_uses_the_placeholder():
    """BROADCAST_TO is 130: the int8 deprecated field reads 127 and LiteRT
    must find the operator through builtin_code."""
    model = single_op(
        "BROADCAST_TO",
        [Tensor((1, 3), F32), Tensor((2,), np.int32, np.array([2, 3], np.int32))],
        [Tensor((2, 3), F32)],
        schema.BroadcastToOptionsT(),
        version=2,  # LiteRT registers BROADCAST_TO from version 2 only
    )
    (code,) = schema.ModelT.InitFromPackedBuf(model, 0).operatorCodes
    assert (code.builtinCode, code.deprecatedBuiltinCode) == (130, 127)
    x = rand(1, 3)
    (got,) = run_litert(model, [x])
    np.testing.assert_array_equal(got, np.broadcast_to(x, (2, 3)))


def test_legacy_opcodes():
    """Old converters wrote only deprecated_builtin_code; LiteRT still reads
    those files (max of the two fields)."""
    model = single_op("RELU", [Tensor((4,), F32)], [Tensor((4,), F32)], legacy_opcodes=True)
    (code,) = schema.ModelT.InitFromPackedBuf(model, 0).operatorCodes
    assert (code.builtinCode, code.deprecatedBuiltinCode) == (0, schema.BuiltinOperator.RELU)
    x = rand(4)
    np.testing.assert_array_equal(run_litert(model, [x])[0], np.maximum(x, 0))
    with pytest.raises(ValueError, match="no legacy"):
        single_op(
            "BROADCAST_TO",
            [Tensor((1,), F32), Tensor((1,), np.int32, np.array([2], np.int32))],
            [Tensor((2,), F32)],
            legacy_opcodes=True,
        )


def test_layout():
    w = np.arange(24, dtype=F32).reshape(4, 1, 2, 3)
    model = single_op(
        "CONV_2D",
        [
            Tensor((1, 2, 2, 3), F32),
            Tensor((4, 1, 2, 3), np.int8, w.astype(np.int8), scale=[1.0, 2.0, 3.0, 4.0]),
            None,
        ],
        [Tensor((1, 2, 1, 4), F32, name="y")],
        schema.Conv2DOptionsT(padding=PADDING.VALID),
        version=2,
    )
    assert model[4:8] == b"TFL3"
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    assert parsed.version == 3
    assert parsed.buffers[0].data is None
    assert len(parsed.buffers) == 2  # the sentinel, then one per constant
    sub = parsed.subgraphs[0]
    assert sub.inputs.tolist() == [0] and sub.outputs.tolist() == [2]
    assert [t.name for t in sub.tensors] == [b"t0", b"t1", b"y"]
    weights = sub.tensors[1]
    assert weights.buffer == 1 and weights.type == schema.TensorType.INT8
    assert parsed.buffers[1].data.tobytes() == w.astype(np.int8).tobytes()
    assert weights.quantization.scale.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert weights.quantization.zeroPoint.tolist() == [0, 0, 0, 0]
    assert weights.quantization.quantizedDimension == 0
    assert sub.tensors[0].quantization is None
    op = sub.operators[0]
    assert op.builtinOptionsType == schema.BuiltinOptions.Conv2DOptions
    assert op.builtinOptions.padding == PADDING.VALID
    assert parsed.operatorCodes[0].version == 2
    # constant data starts 16-byte aligned in the file
    buf = schema.Model.GetRootAs(model, 0).Buffers(1)
    start = buf._tab.Vector(buf._tab.Offset(4))
    assert start % 16 == 0 and model[start : start + 24] == w.astype(np.int8).tobytes()


def test_shared_input_and_operator_codes():
    x = Tensor((2, 2), F32)
    model = single_op("MUL", [x, x], [Tensor((2, 2), F32)], schema.MulOptionsT())
    sub = schema.ModelT.InitFromPackedBuf(model, 0).subgraphs[0]
    assert len(sub.tensors) == 2 and sub.inputs.tolist() == [0]
    v = rand(2, 2)
    np.testing.assert_array_equal(run_litert(model, [v])[0], v * v)

    tensors = [Tensor((2,), F32), Tensor((2,), F32), Tensor((2,), F32)]
    two_adds = graph(
        tensors,
        [("ADD", [0, 0], [1], None), ("ADD", [1, 0], [2], None, 1)],
        inputs=[0],
        outputs=[2],
    )
    assert len(schema.ModelT.InitFromPackedBuf(two_adds, 0).operatorCodes) == 1
    np.testing.assert_array_equal(run_litert(two_adds, [np.array([1, 2], F32)])[0], [3, 6])


def test_options_mapping_and_errors():
    assert options_type(schema.Pool2DOptionsT()) == (
        "builtinOptions",
        schema.BuiltinOptions.Pool2DOptions,
    )
    assert options_type(schema.StablehloPadOptionsT())[0] == "builtinOptions2"
    with pytest.raises(TypeError):
        options_type(object())
    with pytest.raises(ValueError, match="BuiltinOperator.NOPE"):
        single_op("NOPE", [Tensor((1,), F32)], [Tensor((1,), F32)])
    with pytest.raises(ValueError, match="per-channel"):
        single_op(
            "ABS", [Tensor((2, 3), np.int8, scale=[1.0, 2.0, 3.0])], [Tensor((2, 3), np.int8)]
        )
    with pytest.raises(ValueError, match="data has shape"):
        single_op("ABS", [Tensor((2, 3), F32, np.zeros(5, F32))], [Tensor((2, 3), F32)])
    with pytest.raises(TypeError):
        single_op("ABS", [Tensor((2,), np.int32, np.array([0.5, 1.5]))], [Tensor((2,), F32)])
    with pytest.raises(IndexError):
        graph([Tensor((1,), F32)], [("ABS", [0], [1], None)], [0], [1])


def test_max_pool_runs():
    x = rand(1, 4, 4, 2)
    options = schema.Pool2DOptionsT(
        padding=PADDING.VALID, strideH=2, strideW=2, filterHeight=2, filterWidth=2
    )
    model = single_op(
        "MAX_POOL_2D", [Tensor((1, 4, 4, 2), F32)], [Tensor((1, 2, 2, 2), F32)], options
    )
    (got,) = run_litert(model, [x])
    np.testing.assert_array_equal(got, x.reshape(1, 2, 2, 2, 2, 2).max(axis=(2, 4)))
