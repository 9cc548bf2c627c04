"""The facades' thread rules, as their docstrings state them: one
InferenceSession may serve ``run`` from many threads at once (onnxruntime's
rule), each caller getting its own answer; an Interpreter is for one thread
(LiteRT's rule), and interpreters of one model in several threads run side by
side, each keeping its own variables."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx", reason="nnburst.onnx needs onnx (pip install '.[onnx]')")

from nnburst import onnx as nn_onnx
from nnburst import tflite as nn_tflite
from nnburst.tools.benchmarks import facades, runtime_paths

from .test_facade_errors import add_mul
from .test_tflite_models import micro_wakeword

THREADS = 4
CALLS = 150


def in_threads(work: Callable[[int], None], count: int = THREADS) -> None:
    """``work(i)`` in ``count`` threads started together; the first error is raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def body(i: int) -> None:
        try:
            start.wait(30)
            work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert not any(thread.is_alive() for thread in threads), "a thread hangs"
    assert not errors, errors[0]


def test_one_session_answers_every_thread_its_own_feed_at_a_fixed_shape() -> None:
    """The quick path of a fixed-shape model: every thread's outputs are its own."""
    session = nn_onnx.InferenceSession(add_mul([3, 4]))

    def calls(i: int) -> None:
        rng = np.random.default_rng(i)
        for _ in range(CALLS):
            a, b = rng.uniform(-4, 4, (2, 3, 4)).astype(np.float32)
            (y,) = session.run(None, {"a": a, "b": b})
            np.testing.assert_array_equal(y, (a + b) * b)

    in_threads(calls)
    assert len(session._runners) == 1


def test_threads_feeding_new_shapes_at_once_compile_each_shape_once() -> None:
    session = nn_onnx.InferenceSession(add_mul(["n", 4]))
    compiled: list[Any] = []
    compile_one = session._compile

    def counted(loaded: Any) -> Any:
        compiled.append(loaded)
        return compile_one(loaded)

    session._compile = counted  # type: ignore[method-assign]

    def calls(i: int) -> None:
        rng = np.random.default_rng(i)
        for call in range(40):
            rows = 1 + (i + call) % 3  # every thread meets every shape, in another order
            a, b = rng.uniform(-4, 4, (2, rows, 4)).astype(np.float32)
            (y,) = session.run(None, {"a": a, "b": b})
            np.testing.assert_array_equal(y, (a + b) * b)

    in_threads(calls)
    assert len(compiled) == 3 and len(session._runners) == 3


def test_interpreters_of_one_model_run_side_by_side_in_threads() -> None:
    """One Interpreter per thread, as LiteRT asks: each thread's cycles answer its
    own inputs, the compilation cache shared underneath."""
    model = facades.add_mul_tflite(runtime_paths.add_mul_model())
    c = runtime_paths.add_mul_model().constants["c"]

    def calls(i: int) -> None:
        interpreter = nn_tflite.Interpreter(model_content=model)
        interpreter.allocate_tensors()
        rng = np.random.default_rng(i)
        for _ in range(CALLS):
            a, b = rng.uniform(-4, 4, (2, 3, 4)).astype(np.float32)
            interpreter.set_tensor(0, a)
            interpreter.set_tensor(1, b)
            interpreter.invoke()
            np.testing.assert_array_equal(interpreter.get_tensor(4), (a + b) * c)
        interpreter.close()

    in_threads(calls)


def test_stateful_interpreters_in_threads_keep_their_own_variables() -> None:
    """A streaming wake-word model (variables carried from invoke to invoke): each
    thread's stream gives what the same stream gives alone."""
    model = micro_wakeword("okay_nabu")

    def stream(seed: int) -> list[np.ndarray]:
        interpreter = nn_tflite.Interpreter(model_content=model)
        interpreter.allocate_tensors()
        (given,), (taken,) = interpreter.get_input_details(), interpreter.get_output_details()
        rng = np.random.default_rng(seed)
        outputs = []
        for _ in range(12):
            frames = rng.integers(-128, 128, given["shape"]).astype(given["dtype"])
            interpreter.set_tensor(given["index"], frames)
            interpreter.invoke()
            outputs.append(interpreter.get_tensor(taken["index"]))
        interpreter.close()
        return outputs

    alone = [stream(seed) for seed in range(THREADS)]
    together: dict[int, list[np.ndarray]] = {}
    in_threads(lambda i: together.__setitem__(i, stream(i)))
    for seed in range(THREADS):
        np.testing.assert_array_equal(np.array(together[seed]), np.array(alone[seed]))
    assert any(not np.array_equal(alone[0][0], out) for out in alone[0][1:]), "state moves"
