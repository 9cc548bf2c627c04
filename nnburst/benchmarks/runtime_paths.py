"""Per-execution latency of the runtime's paths on two models.

* the seeds' worked example: ADD then MUL on float32 [3, 4] tensors
  (7 operands: two inputs, a constant, a fused-activation scalar, an
  intermediate, a second constant, the output)
* a mid-size convolution: float32 [1, 32, 32, 16] input, 3×3 CONV_2D to 32
  channels with ReLU, then 2×2 MAX_POOL_2D

Paths: ``compute`` (synchronous), ``start_compute`` + ``Event.wait`` (a
worker thread), ``burst_compute`` (FMQs and the burst server thread).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .. import (
    Burst,
    Compilation,
    Execution,
    FuseCode,
    Model,
    OperandCode,
    OperandType,
    OperationCode,
    PaddingCode,
)
from .fmq_pingpong import timed
from .stats import LatencyStats, latency_table

PATHS = ("compute", "start_compute", "burst_compute")


def add_mul_model() -> tuple[Model, list[np.ndarray], np.ndarray]:
    """The seeds' example: out = (a + b) * c, on float32 [3, 4]."""
    model = Model()
    tensor = OperandType(OperandCode.TENSOR_FLOAT32, (3, 4))
    activation = OperandType(OperandCode.INT32)
    a, b, fuse, summed, c, out = (
        model.add_operand(tensor),
        model.add_operand(tensor),
        model.add_operand(activation),
        model.add_operand(tensor),
        model.add_operand(tensor),
        model.add_operand(tensor),
    )
    fuse2 = model.add_operand(activation)
    model.set_operand_value(fuse, np.int32(FuseCode.NONE))
    model.set_operand_value(fuse2, np.int32(FuseCode.NONE))
    model.set_operand_value(c, np.full((3, 4), 0.5, np.float32))
    model.add_operation(OperationCode.ADD, [a, b, fuse], [summed])
    model.add_operation(OperationCode.MUL, [summed, c, fuse2], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    inputs = [np.arange(12, dtype=np.float32).reshape(3, 4), np.ones((3, 4), np.float32)]
    return model, inputs, np.empty((3, 4), np.float32)


def conv_model() -> tuple[Model, list[np.ndarray], np.ndarray]:
    """A mid-size convolution block: 3×3 CONV_2D (16→32 channels, ReLU), 2×2 max pool."""
    rng = np.random.default_rng(0)
    model = Model()
    image = model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (1, 32, 32, 16)))
    weights = model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (32, 3, 3, 16)))
    bias = model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (32,)))
    scalars = [model.add_operand(OperandType(OperandCode.INT32)) for _ in range(4)]
    conv = model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (1, 32, 32, 32)))
    pool_scalars = [model.add_operand(OperandType(OperandCode.INT32)) for _ in range(6)]
    out = model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (1, 16, 16, 32)))
    model.set_operand_value(weights, rng.standard_normal((32, 3, 3, 16)).astype(np.float32) * 0.1)
    model.set_operand_value(bias, np.zeros(32, np.float32))
    for operand, value in zip(scalars, (PaddingCode.SAME, 1, 1, FuseCode.RELU)):
        model.set_operand_value(operand, np.int32(value))
    for operand, value in zip(pool_scalars, (PaddingCode.VALID, 2, 2, 2, 2, FuseCode.NONE)):
        model.set_operand_value(operand, np.int32(value))
    model.add_operation(OperationCode.CONV_2D, [image, weights, bias, *scalars], [conv])
    model.add_operation(OperationCode.MAX_POOL_2D, [conv, *pool_scalars], [out])
    model.identify_inputs_and_outputs([image], [out])
    model.finish()
    inputs = [rng.standard_normal((1, 32, 32, 16)).astype(np.float32)]
    return model, inputs, np.empty((1, 16, 16, 32), np.float32)


MODELS: dict[str, Callable[[], tuple[Model, list[np.ndarray], np.ndarray]]] = {
    "add+mul 3x4": add_mul_model,
    "conv 32x32x16": conv_model,
}


@contextmanager
def execution_path(model_name: str, path: str) -> Iterator[Callable[[], Any]]:
    """A reusable execution of the model, run through ``path`` per call."""
    model, inputs, output = MODELS[model_name]()
    with Compilation(model) as compilation:
        compilation.finish()
        execution = Execution(compilation)
        execution.set_reusable(True)
        for i, value in enumerate(inputs):
            execution.set_input(i, value)
        execution.set_output(0, output)
        if path == "compute":
            yield execution.compute
        elif path == "start_compute":
            yield lambda: execution.start_compute().wait()
        else:
            with Burst(compilation) as burst:
                yield lambda: execution.burst_compute(burst)


def run(iterations: int = 2000) -> list[LatencyStats]:
    rows = []
    for model_name in MODELS:
        for path in PATHS:
            with execution_path(model_name, path) as execute:
                count = iterations if model_name.startswith("add") else max(50, iterations // 20)
                rows.append(LatencyStats.from_ns(f"{model_name} {path}", timed(execute, count)))
    return rows


def main(iterations: int = 2000) -> None:
    print("Runtime execution paths on the CPU reference driver (in-process):")
    print(latency_table(run(iterations)))


if __name__ == "__main__":
    main()
