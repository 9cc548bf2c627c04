"""Unmodified third-party libraries on nnburst's facades: openWakeWord builds its
own ``onnxruntime.InferenceSession`` (and LiteRT ``Interpreter``); run with
nnburst's classes swapped in, it must predict what it predicts on the real
runtimes."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

ort = pytest.importorskip(
    "onnxruntime", reason="onnxruntime (pip install '.[peers]') is the reference"
)
pytest.importorskip("onnx", reason="nnburst.onnx needs onnx (pip install '.[onnx]')")

from nnburst import onnx as nn_onnx  # noqa: E402
from nnburst import tflite as nn_tflite  # noqa: E402

from .model_cache import FetchError, _download, cache_dir  # noqa: E402

OPENWAKEWORD = ("openwakeword", "0.5.1")
WAKE_WORDS = ("hey_jarvis_v0.1", "alexa_v0.1")
CHUNK = 1280  # openWakeWord's frame: 80 ms at 16 kHz
#: onnxruntime's own class, which every patch must put back
ORT_SESSION = ort.capi.onnxruntime_inference_collection.InferenceSession


def _openwakeword_from_wheel() -> None:
    """Put the openwakeword wheel's own files on sys.path (extracted once into the
    model cache), for a machine where it is not installed."""
    root = cache_dir() / "{}-{}-wheel".format(*OPENWAKEWORD)
    if not (root / "openwakeword" / "model.py").is_file():
        with tempfile.TemporaryDirectory(prefix="nnburst-wheel-") as tmp:
            wheel = _download(*OPENWAKEWORD, Path(tmp))
            staging = Path(tempfile.mkdtemp(prefix=".openwakeword.", dir=cache_dir()))
            try:
                with zipfile.ZipFile(wheel) as archive:
                    archive.extractall(staging)
                os.chmod(staging, 0o755)
                try:
                    os.rename(staging, root)
                except OSError:
                    if not (root / "openwakeword" / "model.py").is_file():
                        raise
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    sys.path.insert(0, str(root))


@pytest.fixture(scope="module")
def openwakeword() -> ModuleType:
    """openWakeWord 0.5.1's ``model`` module, installed or from its wheel."""
    for needed in ("scipy", "sklearn"):  # imported by openwakeword/__init__.py
        pytest.importorskip(needed, reason=f"openwakeword imports {needed} (pip install {needed})")
    try:
        return importlib.import_module("openwakeword.model")
    except ImportError:
        pass
    try:
        _openwakeword_from_wheel()
    except (FetchError, OSError, zipfile.BadZipFile) as exc:
        pytest.skip("openwakeword=={} wheel cannot be fetched: {}".format(*OPENWAKEWORD, exc))
    return importlib.import_module("openwakeword.model")


def models_dir(openwakeword: ModuleType) -> Path:
    """The wheel ships every model openWakeWord would download."""
    return Path(openwakeword.__file__).parent / "resources" / "models"


def audio(seconds: float = 3.0) -> np.ndarray:
    """A voiced, wavering tone with breath noise: 16-bit PCM at 16 kHz."""
    rng = np.random.default_rng(7)
    t = np.arange(int(16000 * seconds)) / 16000
    pitch = 140 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / 16000
    voice = sum(np.sin(k * phase) / k for k in range(1, 12)) * (
        0.6 + 0.4 * np.sin(2 * np.pi * 3 * t)
    )
    signal = 6000 * voice + 400 * rng.standard_normal(t.size)
    return np.clip(signal, -32768, 32767).astype(np.int16)


def listen(make_model: Callable[[], Any]) -> tuple[Any, list[dict[str, float]], np.ndarray]:
    """A detector built by ``make_model`` fed the clip frame by frame: the detector,
    its scores per frame and the features it computed."""
    np.random.seed(0)  # openWakeWord fills its first features from np.random
    detector = make_model()
    clip = audio()
    scores = [dict(detector.predict(clip[i : i + CHUNK])) for i in range(0, clip.size, CHUNK)]
    return detector, scores, detector.preprocessor.get_features(16)


def assert_same_scores(mine: list[dict[str, float]], theirs: list[dict[str, float]]) -> None:
    assert len(mine) == len(theirs) and set(mine[0]) == set(WAKE_WORDS)
    for got, want in zip(mine, theirs):
        for word in WAKE_WORDS:
            assert abs(got[word] - want[word]) <= 1e-4, (word, got[word], want[word])


def test_openwakeword_on_the_onnx_framework_scores_as_on_onnxruntime(
    openwakeword: ModuleType,
) -> None:
    """openWakeWord builds four ``ort.InferenceSession``s (melspectrogram, embedding,
    two wake words) and runs the melspectrogram at three input lengths."""
    models = models_dir(openwakeword)

    def detector() -> Any:
        return openwakeword.Model(
            wakeword_models=[str(models / f"{w}.onnx") for w in WAKE_WORDS],
            inference_framework="onnx",
            melspec_model_path=str(models / "melspectrogram.onnx"),
            embedding_model_path=str(models / "embedding_model.onnx"),
        )

    _, want_scores, want_features = listen(detector)
    with nn_onnx.patch_onnxruntime():
        assert ort.InferenceSession is nn_onnx.InferenceSession
        mine, scores, features = listen(detector)
    assert ort.InferenceSession is ORT_SESSION
    melspectrogram = mine.preprocessor.melspec_model
    assert isinstance(melspectrogram, nn_onnx.InferenceSession)
    assert all(isinstance(mine.models[w], nn_onnx.InferenceSession) for w in WAKE_WORDS)
    assert len(melspectrogram._runners) >= 2, (
        "the symbolic-length melspectrogram compiled per length"
    )
    np.testing.assert_allclose(features, want_features, atol=1e-3)
    assert_same_scores(scores, want_scores)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from .test_service import healthy_service

    yield from healthy_service(str(tmp_path_factory.mktemp("svc") / "driver.sock"), args=())


def test_one_line_moves_openwakeword_into_a_driver_service(
    openwakeword: ModuleType, service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``patch_onnxruntime(device=...)``: every model openWakeWord loads runs in the
    service process, through bursts, and scores as on onnxruntime."""
    monkeypatch.setenv("NNBURST_SERVICES", service.path)
    from nnburst.devices import get_devices

    remote = [d.name for d in get_devices() if d.name != "nnburst-reference"]
    assert remote, "the service's devices are listed"
    models = models_dir(openwakeword)

    def detector() -> Any:
        return openwakeword.Model(
            wakeword_models=[str(models / f"{w}.onnx") for w in WAKE_WORDS],
            inference_framework="onnx",
            melspec_model_path=str(models / "melspectrogram.onnx"),
            embedding_model_path=str(models / "embedding_model.onnx"),
        )

    _, want_scores, want_features = listen(detector)
    with nn_onnx.patch_onnxruntime(device=remote[0]):
        mine, scores, features = listen(detector)
    assert ort.InferenceSession is ORT_SESSION
    sessions = [mine.preprocessor.melspec_model, mine.preprocessor.embedding_model]
    for session in [*sessions, *(mine.models[w] for w in WAKE_WORDS)]:
        assert session.get_providers() == [remote[0]]
        for runner in session._runners.values():
            assert runner.burst is not None and runner.compilation.device.name == remote[0]
    np.testing.assert_allclose(features, want_features, atol=1e-3)
    assert_same_scores(scores, want_scores)
    for session in [*sessions, *(mine.models[w] for w in WAKE_WORDS)]:
        session.close()


def test_patch_onnxruntime_puts_the_class_back_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError, match="inside"):
        with nn_onnx.patch_onnxruntime():
            raise RuntimeError("inside")
    assert ort.InferenceSession is ORT_SESSION


def test_patch_onnxruntime_with_a_device_overrides_the_librarys_providers() -> None:
    from .test_onnx_session import scaled_sum

    with nn_onnx.patch_onnxruntime(device="nnburst-reference") as session_class:
        session = ort.InferenceSession(
            scaled_sum().SerializeToString(), providers=["CUDAExecutionProvider"]
        )  # no warning: the library's providers are not consulted
    assert isinstance(session, nn_onnx.InferenceSession) and session_class is type(session)
    assert session.get_providers() == ["CPUExecutionProvider"]  # nnburst-reference's name
    with pytest.raises(nn_onnx.session.BadDataError, match="no device named 'nope'"):
        with nn_onnx.patch_onnxruntime(device="nope"):
            ort.InferenceSession(scaled_sum().SerializeToString())
    assert ort.InferenceSession is ORT_SESSION


# -- LiteRT ------------------------------------------------------------------------------


@pytest.fixture
def litert(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """LiteRT's interpreter module, also under ``tflite_runtime.interpreter``, the
    name openWakeWord imports (LiteRT is tflite_runtime renamed; no tflite_runtime
    wheel is built for this Python)."""
    module = pytest.importorskip(
        "ai_edge_litert.interpreter", reason="LiteRT (pip install '.[litert]') is the reference"
    )
    try:
        importlib.import_module("tflite_runtime.interpreter")
    except ImportError:
        package = ModuleType("tflite_runtime")
        package.interpreter = module  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "tflite_runtime", package)
        monkeypatch.setitem(sys.modules, "tflite_runtime.interpreter", module)
    yield module


def classify(models: Path, features: np.ndarray) -> dict[str, list[float]]:
    """Written as a LiteRT user writes it (openWakeWord's own calls for its wake-word
    models): each classifier over every 16-frame window of the features, and the
    embedding model over melspectrogram windows."""
    from ai_edge_litert.interpreter import Interpreter  # looked up at call time

    scores: dict[str, list[float]] = {}
    for word in WAKE_WORDS:
        interpreter = Interpreter(model_path=str(models / f"{word}.tflite"), num_threads=1)
        interpreter.allocate_tensors()
        (given,), (taken,) = interpreter.get_input_details(), interpreter.get_output_details()
        frames = int(given["shape"][1])
        scores[word] = []
        for start in range(features.shape[0] - frames + 1):
            window = features[None, start : start + frames].astype(given["dtype"])
            interpreter.set_tensor(given["index"], window)
            interpreter.invoke()
            scores[word].append(float(interpreter.get_tensor(taken["index"])[0, 0]))
    return scores


def test_a_litert_pipeline_scores_as_on_litert(openwakeword: ModuleType, litert: Any) -> None:
    """openWakeWord's LiteRT wake-word classifiers over the features its detector
    computed, once on LiteRT and once inside ``patch_litert()``."""
    models = models_dir(openwakeword)
    _, _, features = listen(
        lambda: openwakeword.Model(
            wakeword_models=[str(models / f"{w}.onnx") for w in WAKE_WORDS],
            inference_framework="onnx",
            melspec_model_path=str(models / "melspectrogram.onnx"),
            embedding_model_path=str(models / "embedding_model.onnx"),
        )
    )
    features = np.concatenate([features, features[::-1] * 0.5])  # more windows, other values
    want = classify(models, features)
    with nn_tflite.patch_litert():
        got = classify(models, features)
        assert litert.Interpreter is nn_tflite.Interpreter
    assert not issubclass(litert.Interpreter, nn_tflite.Interpreter)
    for word in WAKE_WORDS:
        np.testing.assert_allclose(got[word], want[word], atol=1e-5)


def test_patch_litert_with_a_device_builds_interpreters_there(litert: Any) -> None:
    with nn_tflite.patch_litert(device="nnburst-reference") as interpreter_class:
        assert litert.Interpreter is interpreter_class
        assert issubclass(interpreter_class, nn_tflite.Interpreter)
    with pytest.raises(RuntimeError):
        with nn_tflite.patch_litert():
            raise RuntimeError("inside")
    assert not issubclass(litert.Interpreter, nn_tflite.Interpreter)


def test_openwakeword_on_the_tflite_framework_scores_as_on_litert(
    openwakeword: ModuleType, litert: Any
) -> None:
    models = models_dir(openwakeword)

    def detector() -> Any:
        return openwakeword.Model(
            wakeword_models=[str(models / f"{w}.tflite") for w in WAKE_WORDS],
            inference_framework="tflite",
            melspec_model_path=str(models / "melspectrogram.tflite"),
            embedding_model_path=str(models / "embedding_model.tflite"),
        )

    _, want_scores, want_features = listen(detector)
    with nn_tflite.patch_litert():
        mine, scores, features = listen(detector)
    assert isinstance(mine.models[WAKE_WORDS[0]], nn_tflite.Interpreter)
    np.testing.assert_allclose(features, want_features, atol=1e-3)
    assert_same_scores(scores, want_scores)
