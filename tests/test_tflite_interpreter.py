"""``nnburst.tflite.Interpreter`` against LiteRT's: the same calls on both, on
real models, with the same descriptions, results and errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

litert = pytest.importorskip(
    "ai_edge_litert.interpreter", reason="LiteRT (pip install '.[litert]') is the reference"
)

from nnburst import tflite  # noqa: E402
from nnburst.errors import BadDataError  # noqa: E402

from .model_cache import wheel_member  # noqa: E402
from .test_tflite_models import (  # noqa: E402
    FACE_DETECTION,
    close_to_litert,
    micro_wakeword,
    within_one,
)


def both(model: bytes) -> tuple[Any, tflite.Interpreter]:
    reference = litert.Interpreter(
        model_content=model,
        num_threads=1,
        experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF,  # nnburst's rounding
    )
    mine = tflite.Interpreter(model_content=model, num_threads=1)
    for interpreter in (reference, mine):
        interpreter.allocate_tensors()
    return reference, mine


def assert_same_details(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    assert len(mine) == len(theirs)
    for m, t in zip(mine, theirs):
        assert set(m) == set(t)
        for key in ("name", "index", "dtype", "quantization"):
            assert m[key] == t[key], key
        for key in ("shape", "shape_signature"):
            np.testing.assert_array_equal(m[key], t[key])
            assert m[key].dtype == t[key].dtype
        for key in ("scales", "zero_points", "quantized_dimension"):
            np.testing.assert_array_equal(
                m["quantization_parameters"][key], t["quantization_parameters"][key]
            )


def invoke(interpreter: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


@pytest.fixture(scope="module")
def face_detection() -> bytes:
    return wheel_member(*FACE_DETECTION).read_bytes()


def test_a_float_detector_is_described_and_runs_like_litert(face_detection: bytes) -> None:
    reference, mine = both(face_detection)
    assert_same_details(mine.get_input_details(), reference.get_input_details())
    assert_same_details(mine.get_output_details(), reference.get_output_details())
    assert mine.get_signature_list() == reference.get_signature_list() == {}
    image = np.random.default_rng(3).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
    close_to_litert(invoke(mine, [image]), invoke(reference, [image]))
    index = mine.get_input_details()[0]["index"]
    np.testing.assert_array_equal(mine.get_tensor(index), image)
    np.testing.assert_array_equal(mine.tensor(index)(), image)
    mine.close()


def test_a_stateful_int8_model_keeps_its_variables_across_invokes_and_signatures() -> None:
    """microWakeWord's okay_nabu: int8 input, per-channel weights, six streaming
    variables kept from invoke to invoke; its one signature runs by name."""
    model = micro_wakeword("okay_nabu")
    reference, mine = both(model)
    assert_same_details(mine.get_input_details(), reference.get_input_details())
    assert_same_details(mine.get_output_details(), reference.get_output_details())
    assert mine.get_signature_list() == reference.get_signature_list()
    rng = np.random.default_rng(8)
    shape = tuple(mine.get_input_details()[0]["shape"])
    for _ in range(12):
        frames = rng.integers(-128, 128, shape, dtype=np.int8)
        within_one(invoke(mine, [frames]), invoke(reference, [frames]))
    (key,) = reference.get_signature_list()
    theirs, ours = reference.get_signature_runner(key), mine.get_signature_runner()
    (name,) = ours.get_input_details()
    for _ in range(3):
        frames = rng.integers(-128, 128, shape, dtype=np.int8)
        want, got = theirs(**{name: frames}), ours(**{name: frames})
        assert list(got) == list(want)
        within_one(list(got.values()), list(want.values()))
    with pytest.raises(BadDataError, match="Invalid Input name"):
        ours(nope=frames)
    mine.reset_all_variables()
    mine.close()


def test_wrong_calls_fail_with_litert_words_as_value_errors(face_detection: bytes) -> None:
    reference, mine = both(face_detection)
    index = mine.get_input_details()[0]["index"]
    calls = [
        lambda it: it.set_tensor(index, np.zeros((1, 128, 128, 3))),
        lambda it: it.set_tensor(index, np.zeros((1, 128, 127, 3), np.float32)),
        lambda it: it.set_tensor(index, np.zeros((1, 128, 3), np.float32)),
        lambda it: it.set_tensor(999, np.zeros(1, np.float32)),
        lambda it: it.get_tensor(999),
        lambda it: it.get_signature_runner(),
    ]
    for call in calls:
        with pytest.raises(ValueError) as theirs:
            call(reference)
        with pytest.raises(BadDataError) as ours:
            call(mine)
        assert isinstance(ours.value, ValueError)
        assert str(theirs.value).strip() in str(ours.value), (theirs.value, ours.value)
    mine.resize_tensor_input(index, [1, 128, 128, 3])  # its own shape: nothing to do
    with pytest.raises(BadDataError, match="model_path` or `model_content` must be specified"):
        tflite.Interpreter()
    fresh = tflite.Interpreter(model_content=face_detection)
    with pytest.raises(BadDataError, match="not ready"):
        fresh.invoke()
