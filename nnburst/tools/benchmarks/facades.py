"""What the onnxruntime and LiteRT facades cost over the Runner they wrap.

``nnburst bench``'s ADD+MUL table gets three in-process rows: the model
called through :class:`nnburst.onnx.Runner` (positional inputs, outputs as a
list), through ``InferenceSession.run(None, feed)`` and through LiteRT's
cycle on :class:`nnburst.tflite.Interpreter` (``set_tensor`` per input,
``invoke``, ``get_tensor``).  All three run the same NNAPI model on the
in-process CPU driver, so the differences are the facades' own Python.  The
three take turns call by call, and each facade's overhead is the median of
its calls' differences with the Runner call next to them: a machine whose
speed drifts moves both sides of a pair alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import flatbuffers
import numpy as np
import tflite as schema

from .runtime_paths import Workload

__all__ = ["FACADES", "Overhead", "add_mul_tflite", "facade_calls", "lines", "measure", "overheads"]

RUNNER = "Runner"
SESSION = "InferenceSession.run"
INTERPRETER = "Interpreter invoke cycle"
FACADES = (SESSION, INTERPRETER)
#: The issue's goal: a facade adds at most this over the Runner, per call.
GOAL_US = 5.0


def add_mul_tflite(work: Workload) -> bytes:
    """The ADD+MUL workload as a ``.tflite`` file: out = (input0 + input1) * c."""
    b = flatbuffers.Builder(1024)
    shape = list(work.inputs[0].shape)

    def vector(
        start: Callable[[flatbuffers.Builder, int], None], items: list[int], int32: bool
    ) -> int:
        start(b, len(items))
        for item in reversed(items):
            b.PrependInt32(item) if int32 else b.PrependUOffsetTRelative(item)
        return int(b.EndVector())

    data = b.CreateByteVector(work.constants["c"].astype("<f4").tobytes())
    buffers = []
    for payload in (None, data):
        schema.BufferStart(b)
        if payload is not None:
            schema.BufferAddData(b, payload)
        buffers.append(schema.BufferEnd(b))
    tensors = []
    for name in ("input0", "input1", "c", "summed", "output"):
        text = b.CreateString(name)
        dims = vector(schema.TensorStartShapeVector, shape, True)
        schema.TensorStart(b)
        schema.TensorAddShape(b, dims)
        schema.TensorAddType(b, schema.TensorType.FLOAT32)
        schema.TensorAddBuffer(b, 1 if name == "c" else 0)
        schema.TensorAddName(b, text)
        tensors.append(schema.TensorEnd(b))
    codes = []
    for code in (schema.BuiltinOperator.ADD, schema.BuiltinOperator.MUL):
        schema.OperatorCodeStart(b)
        schema.OperatorCodeAddDeprecatedBuiltinCode(b, code)
        schema.OperatorCodeAddBuiltinCode(b, code)
        schema.OperatorCodeAddVersion(b, 1)
        codes.append(schema.OperatorCodeEnd(b))
    operators = []
    for opcode, (inputs, output) in enumerate((([0, 1], 3), ([3, 2], 4))):
        if opcode == 0:
            schema.AddOptionsStart(b)
            options, kind = schema.AddOptionsEnd(b), schema.BuiltinOptions.AddOptions
        else:
            schema.MulOptionsStart(b)
            options, kind = schema.MulOptionsEnd(b), schema.BuiltinOptions.MulOptions
        ins = vector(schema.OperatorStartInputsVector, inputs, True)
        outs = vector(schema.OperatorStartOutputsVector, [output], True)
        schema.OperatorStart(b)
        schema.OperatorAddOpcodeIndex(b, opcode)
        schema.OperatorAddInputs(b, ins)
        schema.OperatorAddOutputs(b, outs)
        schema.OperatorAddBuiltinOptionsType(b, kind)
        schema.OperatorAddBuiltinOptions(b, options)
        operators.append(schema.OperatorEnd(b))
    graph_tensors = vector(schema.SubGraphStartTensorsVector, tensors, False)
    graph_inputs = vector(schema.SubGraphStartInputsVector, [0, 1], True)
    graph_outputs = vector(schema.SubGraphStartOutputsVector, [4], True)
    graph_operators = vector(schema.SubGraphStartOperatorsVector, operators, False)
    schema.SubGraphStart(b)
    schema.SubGraphAddTensors(b, graph_tensors)
    schema.SubGraphAddInputs(b, graph_inputs)
    schema.SubGraphAddOutputs(b, graph_outputs)
    schema.SubGraphAddOperators(b, graph_operators)
    graph = schema.SubGraphEnd(b)
    model_codes = vector(schema.ModelStartOperatorCodesVector, codes, False)
    model_graphs = vector(schema.ModelStartSubgraphsVector, [graph], False)
    model_buffers = vector(schema.ModelStartBuffersVector, buffers, False)
    schema.ModelStart(b)
    schema.ModelAddVersion(b, 3)
    schema.ModelAddOperatorCodes(b, model_codes)
    schema.ModelAddSubgraphs(b, model_graphs)
    schema.ModelAddBuffers(b, model_buffers)
    b.Finish(schema.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


@contextmanager
def facade_calls(work: Workload) -> Iterator[dict[str, Callable[[], object]]]:
    """The ADD+MUL workload through the Runner and both facades, each call checked
    once against ``work``'s expected output first."""
    from ... import onnx as nn_onnx  # the onnx package is an optional extra
    from ... import tflite as nn_tflite
    from . import peers

    with ExitStack() as opened:
        session = nn_onnx.InferenceSession(peers.onnx_model("add-mul", work))
        opened.callback(session.close)
        feed = {f"input{i}": value for i, value in enumerate(work.inputs)}
        expected = session.run(None, feed)[0]
        (runner,) = session._runners.values()  # the Runner run() calls
        interpreter = nn_tflite.Interpreter(model_content=add_mul_tflite(work))
        opened.callback(interpreter.close)
        interpreter.allocate_tensors()
        ins = [d["index"] for d in interpreter.get_input_details()]
        (out,) = [d["index"] for d in interpreter.get_output_details()]

        def invoke_cycle() -> np.ndarray:
            for index, value in zip(ins, work.inputs):
                interpreter.set_tensor(index, value)
            interpreter.invoke()
            return interpreter.get_tensor(out)

        calls: dict[str, Callable[[], object]] = {
            RUNNER: lambda: runner(*work.inputs),
            SESSION: lambda: session.run(None, feed),
            INTERPRETER: invoke_cycle,
        }
        np.testing.assert_array_equal(invoke_cycle(), expected)
        np.testing.assert_array_equal(runner(*work.inputs)[0], expected)
        yield calls


@dataclass(frozen=True)
class Overhead:
    facade: str
    runner_us: float  # the Runner's median per call
    facade_us: float  # the facade's median per call
    added_us: float  # median of (facade call - the Runner call beside it)


def overheads(
    calls: dict[str, Callable[[], object]], seconds: float = 1.0, pairs: int | None = None
) -> list[Overhead]:
    """Each facade against the Runner, call by call in turns (see the module's note),
    for ``seconds`` or ``pairs`` turns, whichever comes first (at least 20)."""
    clock = time.perf_counter_ns
    times: dict[str, list[int]] = {name: [] for name in calls}
    for _ in range(20):  # warm-up
        for call in calls.values():
            call()
    deadline = clock() + int(seconds * 1e9)
    turns = 0
    while turns < 20 or (clock() < deadline and (pairs is None or turns < pairs)):
        for name, call in calls.items():
            start = clock()
            call()
            times[name].append(clock() - start)
        turns += 1
    runner = times[RUNNER]
    return [
        Overhead(
            name,
            statistics.median(runner) / 1000,
            statistics.median(times[name]) / 1000,
            statistics.median(f - r for f, r in zip(times[name], runner)) / 1000,
        )
        for name in FACADES
        if name in times
    ]


def measure(work: Workload, seconds: float, pairs: int | None = None) -> list[Overhead]:
    """The facades' rows for ``work`` (the ADD+MUL workload)."""
    with facade_calls(work) as calls:
        return overheads(calls, seconds, pairs)


def lines(rows: list[Overhead]) -> list[str]:
    """The rows under the ADD+MUL table (after a blank line: a block of their own,
    not rows of the table), and whether the goal is met."""
    if not rows:
        return []
    out = [
        "",
        f"Facades, in-process, call by call in turns with the Runner ({RUNNER} p50 "
        f"{rows[0].runner_us:.1f} us):",
    ]
    for row in rows:
        verdict = "met" if row.added_us <= GOAL_US else "NOT met"
        out.append(
            f"  {row.facade:<26} p50 {row.facade_us:7.1f} us, adds {row.added_us:5.2f} us "
            f"(goal <= {GOAL_US:g}: {verdict})"
        )
    return out
