"""The Interpreter keeps its inputs in the Runner's own buffers and hands out
copies: what a caller passes or receives is never shared with nnburst."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst import tflite

from .tflite_builder import Tensor, graph, options, schema


def add_model(shape: tuple[int, ...] = (2, 3), also_out: bool = False) -> bytes:
    """``z = x + y``; ``also_out``: ``x`` is an output too (after ``z``)."""
    x, y = Tensor(shape, np.float32, name="x"), Tensor(shape, np.float32, name="y")
    z = Tensor(shape, np.float32, name="z")
    add = options(schema.AddOptionsT, fusedActivationFunction=schema.ActivationFunctionType.NONE)
    outputs = [2, 0] if also_out else [2]
    return graph([x, y, z], [("ADD", [0, 1], [2], add)], [0, 1], outputs)


@pytest.fixture
def interpreter():
    interpreter = tflite.Interpreter(model_content=add_model())
    interpreter.allocate_tensors()
    yield interpreter
    interpreter.close()


def run(interpreter: tflite.Interpreter, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    interpreter.set_tensor(0, x)
    interpreter.set_tensor(1, y)
    interpreter.invoke()
    return interpreter.get_tensor(2)


def test_a_caller_changing_its_array_after_set_tensor_changes_nothing(interpreter):
    x, y = np.ones((2, 3), np.float32), np.full((2, 3), 2, np.float32)
    interpreter.set_tensor(0, x)
    interpreter.set_tensor(1, y)
    x[...] = 100
    y[...] = 100
    interpreter.invoke()
    np.testing.assert_array_equal(interpreter.get_tensor(2), np.full((2, 3), 3))
    np.testing.assert_array_equal(interpreter.get_tensor(0), np.ones((2, 3)))


def test_an_output_already_taken_keeps_its_value_after_the_next_invoke(interpreter):
    first = run(interpreter, np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
    function = interpreter.tensor(2)
    second = run(interpreter, np.full((2, 3), 5, np.float32), np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(first, np.full((2, 3), 2))
    np.testing.assert_array_equal(second, np.full((2, 3), 6))
    np.testing.assert_array_equal(function(), np.full((2, 3), 6))
    first[...] = -1  # the caller's copy: the next get_tensor is not touched
    np.testing.assert_array_equal(interpreter.get_tensor(2), np.full((2, 3), 6))


def test_inputs_set_before_a_resize_survive_the_old_runner_closing(interpreter):
    run(interpreter, np.full((2, 3), 4, np.float32), np.ones((2, 3), np.float32))
    interpreter.resize_tensor_input(0, [4, 3])
    interpreter.resize_tensor_input(1, [4, 3])
    # The old Runner is gone: its buffers too, but not the values read from them.
    np.testing.assert_array_equal(interpreter.get_tensor(1), np.ones((2, 3)))
    with pytest.raises(ValueError, match="an output before invoke"):
        interpreter.get_tensor(2)
    interpreter.set_tensor(0, np.full((4, 3), 7, np.float32))  # before allocate_tensors
    interpreter.allocate_tensors()
    interpreter.set_tensor(1, np.full((4, 3), 1, np.float32))
    interpreter.invoke()
    np.testing.assert_array_equal(interpreter.get_tensor(2), np.full((4, 3), 8))


def test_an_input_that_is_also_an_output_reads_back_as_set():
    interpreter = tflite.Interpreter(model_content=add_model(also_out=True))
    interpreter.allocate_tensors()
    try:
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        for scale in (1, 3):
            out = run(interpreter, x * scale, np.ones((2, 3), np.float32))
            np.testing.assert_array_equal(out, x * scale + 1)
            np.testing.assert_array_equal(interpreter.get_tensor(0), x * scale)
    finally:
        interpreter.close()


def test_a_closed_interpreter_keeps_the_inputs_it_was_given(interpreter):
    run(interpreter, np.full((2, 3), 2, np.float32), np.ones((2, 3), np.float32))
    interpreter.close()
    np.testing.assert_array_equal(interpreter.get_tensor(0), np.full((2, 3), 2))
    with pytest.raises(RuntimeError, match="not ready"):
        interpreter.invoke()
