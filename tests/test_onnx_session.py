"""``nnburst.onnx.InferenceSession`` against onnxruntime's: the same calls on
both, the same results, dtypes, descriptions and errors."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="nnburst.onnx needs onnx (pip install '.[onnx]')")
ort = pytest.importorskip(
    "onnxruntime", reason="onnxruntime (pip install '.[peers]') is the reference"
)

from onnx import TensorProto, helper  # noqa: E402

from nnburst import onnx as nn_onnx  # noqa: E402
from nnburst.errors import BadDataError  # noqa: E402
from nnburst.onnx import session as session_module  # noqa: E402

from .model_cache import wheel_member  # noqa: E402
from .test_onnx import make_model  # noqa: E402
from .test_service import healthy_service  # noqa: E402

RNG = np.random.default_rng(5)
CPU = ["CPUExecutionProvider"]


def both(model: Any, **kwargs: Any) -> tuple[Any, nn_onnx.InferenceSession]:
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, providers=CPU), nn_onnx.InferenceSession(data, **kwargs)


def scaled_sum() -> Any:
    """y = x * k (x of a symbolic length), total = n + n (int64 data); a description
    with metadata."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "length"])
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [1])
    n = helper.make_tensor_value_info("n", TensorProto.INT64, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "length"])
    total = helper.make_tensor_value_info("total", TensorProto.INT64, [3])
    model = make_model(
        [
            helper.make_node("Mul", ["x", "k"], ["y"]),
            helper.make_node("Add", ["n", "n"], ["total"]),
        ],
        [x, k, n],
        [y, total],
        {},
    )
    model.producer_name = "a test"
    model.model_version = 7
    helper.set_model_props(model, {"author": "nnburst"})
    return model


def test_descriptions_read_like_onnxruntimes() -> None:
    want, got = both(scaled_sum())
    for mine, theirs in ((got.get_inputs(), want.get_inputs()), (got.get_outputs(), want.get_outputs())):  # fmt: skip
        assert [(a.name, a.shape, a.type) for a in mine] == [
            (a.name, a.shape, a.type) for a in theirs
        ]
    meta, theirs_meta = got.get_modelmeta(), want.get_modelmeta()
    for name in ("producer_name", "graph_name", "version", "custom_metadata_map"):
        assert getattr(meta, name) == getattr(theirs_meta, name)
    assert got.get_providers() == ["CPUExecutionProvider"]
    assert got.get_overridable_initializers() == []


def test_runs_give_what_onnxruntime_gives_for_every_shape_fed() -> None:
    want, got = both(scaled_sum())
    for length in (5, 9, 5):  # a new length compiles once; going back reuses it
        feed = {
            "x": RNG.uniform(-1, 1, (2, length)).astype(np.float32),
            "k": np.float32([3]),
            "n": np.int64([4, -5, 2**29]),
        }
        theirs, mine = want.run(None, feed), got.run(None, feed)
        for t, m in zip(theirs, mine):
            assert m.dtype == t.dtype and m.shape == t.shape
        np.testing.assert_allclose(mine[0], theirs[0], rtol=1e-6)
        np.testing.assert_array_equal(mine[1], theirs[1])  # int64 data stays int64
        assert got.run(["total", "y"], feed)[0].tolist() == theirs[1].tolist()
    assert len(got._runners) == 2
    feed["n"] = np.int64([1, 2, 2**33])  # NNAPI has no int64: it runs as int32
    with pytest.raises(BadDataError, match="int64 values beyond the int32 this input runs as"):
        got.run(None, feed)
    got.close()


@pytest.mark.parametrize(
    "feed, message",
    [
        ({"x": np.zeros((1, 4), np.float64), "k": np.float32([1]), "n": np.int64([1, 2, 3])},
         r"Unexpected input data type. Actual: \(tensor\(double\)\) , expected: \(tensor\(float\)\)"),
        ({"x": np.zeros((1, 4), np.float32), "k": np.float32([1])},
         r"Required inputs \(\['n'\]\) are missing from input feed"),
        ({"x": np.zeros((1, 4), np.float32), "k": np.float32([1]), "n": np.int64([1, 2, 3]),
          "z": np.float32([0])}, "Invalid input name: z"),
        ({"x": np.zeros(4, np.float32), "k": np.float32([1]), "n": np.int64([1, 2, 3])},
         "Invalid rank for input: x Got: 1 Expected: 2"),
        ({"x": np.zeros((1, 4), np.float32), "k": np.float32([1, 2]), "n": np.int64([1, 2, 3])},
         "Got invalid dimensions for input: k for the following indices\n index: 0 Got: 2 Expected: 1"),
    ],
    ids=["dtype", "missing", "unknown name", "rank", "dimension"],
)  # fmt: skip
def test_bad_feeds_fail_with_onnxruntimes_words(feed: dict[str, Any], message: str) -> None:
    want, got = both(scaled_sum())
    with pytest.raises(Exception, match=message):
        want.run(None, feed)
    with pytest.raises(BadDataError, match=message):
        got.run(None, feed)


def test_an_unknown_output_name_is_refused() -> None:
    _, got = both(scaled_sum())
    feed = {"x": np.zeros((1, 4), np.float32), "k": np.float32([1]), "n": np.int64([1, 2, 3])}
    with pytest.raises(BadDataError, match="Invalid output name:nope"):
        got.run(["nope"], feed)


def test_providers_name_onnxruntimes_cpu_or_an_nnburst_device() -> None:
    with pytest.warns(RuntimeWarning, match="CUDAExecutionProvider is not available"):
        session = nn_onnx.InferenceSession(
            scaled_sum(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
        )
    assert session.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(BadDataError, match="no device named 'gpu0'"):
        nn_onnx.InferenceSession(scaled_sum(), providers=["gpu0"])
    options = nn_onnx.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = nn_onnx.GraphOptimizationLevel.ORT_ENABLE_ALL
    kept = nn_onnx.InferenceSession(scaled_sum(), options, providers=["nnburst-reference"])
    assert kept.get_session_options().intra_op_num_threads == 1


def test_an_int64_input_that_decides_a_shape_is_fixed_to_its_value() -> None:
    """A Reshape whose target is fed: the session compiles per target, as the backend does."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])
    model = make_model([helper.make_node("Reshape", ["x", "shape"], ["y"])], [x, shape], [y], {})
    want, got = both(model)
    data = RNG.uniform(-1, 1, (2, 6)).astype(np.float32)
    for target in ([3, 4], [12, 1], [3, 4]):
        feed = {"x": data, "shape": np.int64(target)}
        np.testing.assert_array_equal(got.run(None, feed)[0], want.run(None, feed)[0])
    assert got._frozen == {"shape"} and len(got._runners) == 2


def test_concurrent_runs_on_one_session_all_answer_right() -> None:
    """onnxruntime allows run from several threads at once; so does the session."""
    want, got = both(scaled_sum())
    errors: list[BaseException] = []

    def calls(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(50):
                feed = {
                    "x": rng.uniform(-1, 1, (1, 3 + seed)).astype(np.float32),
                    "k": np.float32([seed]),
                    "n": np.int64([seed, 1, 2]),
                }
                np.testing.assert_allclose(got.run(None, feed)[0], want.run(None, feed)[0])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=calls, args=(seed,)) for seed in (1, 2, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors[0]


def test_the_compiled_shapes_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_module, "MAX_COMPILED_SHAPES", 2)
    _, got = both(scaled_sum())
    for length in (1, 2, 3, 4):
        got.run(None, {"x": np.ones((1, length), np.float32), "k": np.float32([2]), "n": np.int64([1, 2, 3])})  # fmt: skip
    assert len(got._runners) == 2
    got.close()


# -- real models ------------------------------------------------------------------------------


def test_silero_vad_streams_like_onnxruntime_without_input_shapes() -> None:
    """Its symbolic chunk length and its If on the rate input: no input_shapes, no constants."""
    path = wheel_member("silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx")
    want, got = both(path.read_bytes())
    states = [np.zeros((2, 1, 128), np.float32)] * 2
    rng = np.random.default_rng(0)
    for _ in range(8):
        chunk = rng.uniform(-0.3, 0.3, (1, 512)).astype(np.float32)
        outputs = []
        for i, session in enumerate((want, got)):
            feed = {"input": chunk, "state": states[i], "sr": np.array(16000, np.int64)}
            probability, states[i] = session.run(None, feed)
            outputs.append(probability)
        np.testing.assert_allclose(outputs[1], outputs[0], atol=2e-5)
    np.testing.assert_allclose(states[1], states[0], atol=2e-4)


def test_the_ppocr_classifier_matches_onnxruntime_at_its_natural_shape() -> None:
    path = wheel_member(
        "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
    )  # fmt: skip
    want, got = both(path.read_bytes())
    (name,) = [i.name for i in got.get_inputs()]
    image = RNG.uniform(-1, 1, (2, 3, 48, 192)).astype(np.float32)  # a batch of two lines
    np.testing.assert_allclose(got.run(None, {name: image})[0], want.run(None, {name: image})[0], atol=1e-4)  # fmt: skip


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from healthy_service(str(tmp_path_factory.mktemp("svc") / "driver.sock"), args=())


def test_a_service_device_as_the_provider_runs_through_a_burst(
    service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One line moves inference into a driver process."""
    monkeypatch.setenv("NNBURST_SERVICES", service.path)
    names = [d.name for d in nn_onnx.session.get_devices() if d.name != "nnburst-reference"]
    assert names, "the service's devices are listed"
    want, got = both(scaled_sum(), providers=[names[0]])
    feed = {"x": np.ones((1, 8), np.float32), "k": np.float32([2]), "n": np.int64([1, 2, 3])}
    for _ in range(3):
        mine = got.run(None, feed)
    np.testing.assert_array_equal(mine[0], want.run(None, feed)[0])
    (runner,) = got._runners.values()
    assert runner.burst is not None and runner.compilation.device.name == names[0]
    got.close()
