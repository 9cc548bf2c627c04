"""Wrong calls on the facades fail as onnxruntime's and LiteRT's do: every case
runs on the real library first (it must refuse too), then on nnburst, whose
error is a BadDataError (a ValueError) carrying the library's words.  Where the
library's own error is not a sentence a user could act on (a pybind11 argument
dump, an AttributeError, a kernel's status), nnburst says it plainly instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

ort = pytest.importorskip(
    "onnxruntime", reason="onnxruntime (pip install '.[peers]') is the reference"
)
pytest.importorskip("onnx", reason="nnburst.onnx needs onnx (pip install '.[onnx]')")

from onnx import TensorProto, helper  # noqa: E402

from nnburst import onnx as nn_onnx  # noqa: E402
from nnburst import tflite as nn_tflite  # noqa: E402
from nnburst.errors import BadDataError  # noqa: E402
from nnburst.tools.benchmarks import facades, runtime_paths  # noqa: E402

from .test_tflite_models import micro_wakeword  # noqa: E402

X = np.arange(12, dtype=np.float32).reshape(3, 4)
Y = np.ones((3, 4), np.float32)


def add_mul(shape: list[Any]) -> bytes:
    """y = (a + b) * b over float32 inputs of ``shape`` (ints, or a symbol)."""
    a, b = (helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "ab")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    nodes = [helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Mul", ["t", "b"], ["y"])]
    graph = helper.make_graph(nodes, "add_mul", [a, b], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data: bytes = model.SerializeToString()
    return data


#: (case, output_names, input_feed, the library's words in both errors or None, nnburst's
#: own words where the library's are not a sentence)
ONNX_CASES = [
    ("unknown name", None, {"a": X, "b": Y, "c": Y}, "Invalid input name: c", None),
    ("missing input", None, {"a": X}, r"Required inputs \(\['b'\]\) are missing from input feed \(\['a'\]\)", None),
    ("a name for another", None, {"a": X, "B": Y}, r"Required inputs \(\['b'\]\) are missing", None),
    ("no input", None, {}, r"Required inputs \(\['a', 'b'\]\) are missing", None),
    ("bytes name", None, {b"a": X, "b": Y}, r"Required inputs \(\['a'\]\) are missing", None),
    ("double", None, {"a": X.astype(np.float64), "b": Y},
     r"Unexpected input data type. Actual: \(tensor\(double\)\) , expected: \(tensor\(float\)\)", None),
    ("int32", None, {"a": X, "b": Y.astype(np.int32)},
     r"Unexpected input data type. Actual: \(tensor\(int32\)\) , expected: \(tensor\(float\)\)", None),
    ("rank", None, {"a": X[None], "b": Y}, "Invalid rank for input: a Got: 3 Expected: 2", None),
    ("output name", ["z"], {"a": X, "b": Y}, "Invalid output name:z", None),
    ("a None value", None, {"a": None, "b": Y}, None, "Missing Input: a"),
    ("a str for output_names", "y", {"a": X, "b": Y}, None, "output_names must be a list of names"),
    ("a list for input_feed", None, [X, Y], None, "input_feed must map input names to values, not list"),
]  # fmt: skip
#: only a model of fixed shapes can say a dimension is wrong
DIMENSION = (
    "dimension", None, {"a": X[:2], "b": Y},
    "Got invalid dimensions for input: a for the following indices\n index: 0 Got: 2 Expected: 3",
    None,
)  # fmt: skip


def refused(call: Callable[[], Any]) -> BaseException:
    with pytest.raises(Exception) as caught:
        call()
    return caught.value


@pytest.mark.parametrize("shape", [[3, 4], ["n", 4]], ids=["fixed", "symbolic"])
@pytest.mark.parametrize(
    "case, output_names, feed, theirs, ours",
    [*ONNX_CASES, DIMENSION],
    ids=[c[0] for c in [*ONNX_CASES, DIMENSION]],
)
def test_a_wrong_run_fails_like_onnxruntimes(
    shape: list[Any], case: str, output_names: Any, feed: Any, theirs: str | None, ours: str | None
) -> None:
    if case == "dimension" and shape != [3, 4]:
        pytest.skip("a symbolic dimension takes any size")
    model = add_mul(shape)
    reference = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    session = nn_onnx.InferenceSession(model)
    good = session.run(None, {"a": X, "b": Y})  # a model of fixed shapes: its quick path is warm
    np.testing.assert_array_equal(good[0], reference.run(None, {"a": X, "b": Y})[0])
    their_error = refused(lambda: reference.run(output_names, feed))
    with pytest.raises(BadDataError) as our_error:
        session.run(output_names, feed)
    assert isinstance(our_error.value, ValueError)
    if theirs is not None:
        import re

        assert re.search(theirs, str(their_error)), their_error
        assert re.search(theirs, str(our_error.value)), our_error.value
    else:
        assert ours is not None and ours in str(our_error.value)
    np.testing.assert_array_equal(session.run(None, {"a": X, "b": Y})[0], good[0])  # still fine


def test_a_list_is_fed_as_onnxruntime_feeds_it() -> None:
    """onnxruntime converts a list to the input's type; a float64 array it refuses."""
    model = add_mul([3, 4])
    reference = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    session = nn_onnx.InferenceSession(model)
    feed = {"a": X.tolist(), "b": Y}
    np.testing.assert_array_equal(session.run(None, feed)[0], reference.run(None, feed)[0])


# -- LiteRT ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def litert() -> Any:
    return pytest.importorskip(
        "ai_edge_litert.interpreter", reason="LiteRT (pip install '.[litert]') is the reference"
    )


def interpreters(litert: Any, model: bytes, allocate: bool = True) -> list[Any]:
    pair = [litert.Interpreter(model_content=model), nn_tflite.Interpreter(model_content=model)]
    for interpreter in pair if allocate else []:
        interpreter.allocate_tensors()
    return pair


#: (case, call on an allocated ADD+MUL interpreter, LiteRT's words)
LITERT_CASES = [
    ("float64", lambda it: it.set_tensor(0, X.astype(np.float64)),
     "Cannot set tensor: Got value of type FLOAT64 but expected type FLOAT32 for input 0, name: input0"),
    ("a list", lambda it: it.set_tensor(0, X.tolist()),
     "Cannot set tensor: Got value of type FLOAT64 but expected type FLOAT32 for input 0"),
    ("None", lambda it: it.set_tensor(1, None),
     "Cannot set tensor: Got value of type STRING but expected type FLOAT32 for input 1, name: input1"),
    ("rank", lambda it: it.set_tensor(0, X[None]),
     "Cannot set tensor: Dimension mismatch. Got 3 but expected 2 for input 0."),
    ("dimension", lambda it: it.set_tensor(1, X[:, :2]),
     "Cannot set tensor: Dimension mismatch. Got 2 but expected 4 for dimension 1 of input 1."),
    ("index past the end", lambda it: it.set_tensor(99, X), "Invalid tensor index 99 exceeds max tensor index 5"),
    ("negative index", lambda it: it.set_tensor(-1, X), "Invalid tensor index -1 exceeds max tensor index 5"),
    ("reading past the end", lambda it: it.get_tensor(5), "Invalid tensor index 5 exceeds max tensor index 5"),
    ("no signature", lambda it: it.get_signature_runner(),
     "SignatureDef signature_key is None and model has 0 Signatures"),
    ("unknown signature", lambda it: it.get_signature_runner("nope"), 'Invalid signature_key provided: "nope".'),
]  # fmt: skip


@pytest.mark.parametrize(
    "case, call, words", LITERT_CASES, ids=[c[0] for c in LITERT_CASES]
)  # fmt: skip
def test_a_wrong_call_fails_like_litert(
    litert: Any, case: str, call: Callable[[Any], Any], words: str
) -> None:
    work = runtime_paths.add_mul_model()
    reference, mine = interpreters(litert, facades.add_mul_tflite(work))
    for interpreter in (reference, mine):  # a good cycle first: the quick paths are warm
        interpreter.set_tensor(0, X)
        interpreter.set_tensor(1, Y)
        interpreter.invoke()
    with pytest.raises(ValueError, match="^" + _escaped(words)):
        call(reference)
    with pytest.raises(BadDataError) as ours:
        call(mine)
    assert isinstance(ours.value, ValueError) and words in str(ours.value)
    np.testing.assert_array_equal(mine.get_tensor(4), reference.get_tensor(4))  # still fine


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


def test_calls_before_allocate_tensors_fail_like_litert(litert: Any) -> None:
    work = runtime_paths.add_mul_model()
    reference, mine = interpreters(litert, facades.add_mul_tflite(work), allocate=False)
    words = "Cannot set tensor: Tensor is unallocated. Try calling allocate_tensors() first"
    with pytest.raises(ValueError, match=_escaped(words)):
        reference.set_tensor(0, X)
    with pytest.raises(BadDataError, match=_escaped(words)):
        mine.set_tensor(0, X)
    with pytest.raises(RuntimeError, match="Invoke called on model that is not ready"):
        reference.invoke()
    with pytest.raises(BadDataError, match="Invoke called on model that is not ready"):
        mine.invoke()


@pytest.mark.parametrize(
    "inputs, words",
    [
        (
            {},
            "Invalid number of inputs provided for running a SignatureDef, expected 1 vs provided 0",
        ),
        (
            "two",
            "Invalid number of inputs provided for running a SignatureDef, expected 1 vs provided 2",
        ),
        ("renamed", "Invalid Input name (audio) for SignatureDef"),
        (
            "float32",
            "Cannot set tensor: Got value of type FLOAT32 but expected type INT8 for input 0",
        ),
    ],
    ids=["none", "two", "renamed", "float32"],
)
def test_a_wrong_signature_call_fails_like_litert(litert: Any, inputs: Any, words: str) -> None:
    reference, mine = interpreters(litert, micro_wakeword("okay_nabu"))
    (name,) = reference.get_signature_list()["serving_default"]["inputs"]
    detail = reference.get_signature_runner().get_input_details()[name]
    frames = np.zeros(detail["shape"], detail["dtype"])
    feed = {
        "two": {name: frames, "audio": frames},
        "renamed": {"audio": frames},
        "float32": {name: frames.astype(np.float32)},
    }.get(inputs, inputs) if isinstance(inputs, str) else inputs  # fmt: skip
    with pytest.raises(ValueError, match=_escaped(words)):
        reference.get_signature_runner()(**feed)
    with pytest.raises(BadDataError, match=_escaped(words)):
        mine.get_signature_runner()(**feed)
