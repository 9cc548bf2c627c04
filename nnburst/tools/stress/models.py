"""Random small models for ``nnburst stress``, and their reference results on the CPU."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import nnburst as nn
from nnburst.codes import FuseCode, OperandCode, OperationCode, PaddingCode

F32 = OperandCode.TENSOR_FLOAT32


# -- random models ------------------------------------------------------------------------------


@dataclass
class ModelSpec:
    """A finished random model and what an execution of it binds."""

    model: nn.Model
    input_shapes: list[tuple[int, ...]]
    output_shapes: list[tuple[int, ...]]
    operations: list[str]


class _Builder:
    """Adds operands to a model and remembers its inputs."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.model = nn.Model()
        self.inputs: list[int] = []
        self.input_shapes: list[tuple[int, ...]] = []
        self.operations: list[str] = []

    def tensor(
        self,
        shape: tuple[int, ...],
        code: OperandCode = F32,
        scale: float = 0.0,
        zero_point: int = 0,
    ) -> int:
        return self.model.add_operand(nn.OperandType(code, shape, scale, zero_point))

    def int32(self, value: int) -> int:
        index = self.model.add_operand(nn.OperandType(OperandCode.INT32))
        self.model.set_operand_value(index, np.int32(value))
        return index

    def constant(self, value: np.ndarray) -> int:
        index = self.tensor(value.shape)
        self.model.set_operand_value(index, value.astype(np.float32))
        return index

    def input(self, shape: tuple[int, ...]) -> int:
        index = self.tensor(shape)
        self.inputs.append(index)
        self.input_shapes.append(shape)
        return index

    def fuse(self) -> int:
        return self.int32(choice(self.rng, list(FuseCode)))

    def operation(
        self,
        code: OperationCode,
        inputs: list[int],
        shape: tuple[int, ...],
        out_code: OperandCode = F32,
        scale: float = 0.0,
        zero_point: int = 0,
    ) -> int:
        out = self.tensor(shape, out_code, scale, zero_point)
        self.model.add_operation(code, inputs, [out])
        self.operations.append(code.name)
        return out


def choice(rng: np.random.Generator, items: Sequence[Any]) -> Any:
    """One of ``items`` itself (``rng.choice`` would turn enum members into numpy ints)."""
    return items[int(rng.integers(len(items)))]


def _window(rng: np.random.Generator, h: int, w: int) -> tuple[int, int, PaddingCode, int, int]:
    """Kernel size, stride, padding and the output size of a 2-D window that fits."""
    k = int(rng.integers(1, min(3, h, w) + 1))
    stride = int(rng.integers(1, 3))
    padding = PaddingCode.SAME if rng.random() < 0.5 else PaddingCode.VALID
    if padding == PaddingCode.SAME:
        return k, stride, padding, math.ceil(h / stride), math.ceil(w / stride)
    return k, stride, padding, (h - k) // stride + 1, (w - k) // stride + 1


def _step(b: _Builder, x: int, shape: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """One random operation on ``x`` (NHWC float32); its output and shape."""
    rng = b.rng
    n, h, w, c = shape
    kind = choice(rng, ["binary", "binary", "unary", "conv", "pool", "quant"])
    if kind == "binary":
        code = choice(
            rng,
            [
                OperationCode.ADD,
                OperationCode.MUL,
                OperationCode.SUB,
                OperationCode.MAXIMUM,
                OperationCode.MINIMUM,
            ],
        )
        other = b.input(shape) if rng.random() < 0.5 else b.constant(rng.uniform(-2, 2, shape))
        pair = [x, other] if rng.random() < 0.5 else [other, x]
        if code in (OperationCode.ADD, OperationCode.MUL, OperationCode.SUB):
            pair.append(b.fuse())
        return b.operation(code, pair, shape), shape
    if kind == "unary":
        code = choice(rng, [OperationCode.RELU, OperationCode.LOGISTIC, OperationCode.TANH])
        return b.operation(code, [x], shape), shape
    if kind == "conv":
        k, stride, padding, oh, ow = _window(rng, h, w)
        out_c = int(rng.integers(1, 5))
        weights = b.constant(rng.normal(0, 0.5, (out_c, k, k, c)))
        bias = b.constant(rng.normal(0, 0.5, (out_c,)))
        inputs = [x, weights, bias, b.int32(padding), b.int32(stride), b.int32(stride), b.fuse()]
        return b.operation(OperationCode.CONV_2D, inputs, (n, oh, ow, out_c)), (n, oh, ow, out_c)
    if kind == "pool":
        k, stride, padding, oh, ow = _window(rng, h, w)
        inputs = [
            x,
            b.int32(padding),
            b.int32(stride),
            b.int32(stride),
            b.int32(k),
            b.int32(k),
            b.fuse(),
        ]
        return b.operation(OperationCode.AVERAGE_POOL_2D, inputs, (n, oh, ow, c)), (n, oh, ow, c)
    scale, zero_point = choice(rng, [0.02, 0.05, 0.1]), int(rng.integers(64, 192))
    q = b.operation(
        OperationCode.QUANTIZE, [x], shape, OperandCode.TENSOR_QUANT8_ASYMM, scale, zero_point
    )
    return b.operation(OperationCode.DEQUANTIZE, [q], shape), shape


def random_model(rng: np.random.Generator, max_size: int = 8, max_operations: int = 5) -> ModelSpec:
    """A valid random chain of CPU-driver operations on a small NHWC float32 tensor."""
    b = _Builder(rng)
    shape: tuple[int, ...] = (
        1,
        int(rng.integers(1, max_size + 1)),
        int(rng.integers(1, max_size + 1)),
        int(rng.integers(1, 5)),
    )
    x = b.input(shape)
    outputs: list[int] = []
    output_shapes: list[tuple[int, ...]] = []
    for _ in range(int(rng.integers(1, max_operations + 1))):
        if rng.random() < 0.15 and len(outputs) < 2:  # a side branch: a second model output
            outputs.append(b.operation(OperationCode.RELU, [x], shape))
            output_shapes.append(shape)
        x, shape = _step(b, x, shape)
    outputs.append(x)
    output_shapes.append(shape)
    b.model.identify_inputs_and_outputs(b.inputs, outputs)
    b.model.finish()
    return ModelSpec(b.model, b.input_shapes, output_shapes, b.operations)


def reference(
    spec: ModelSpec, compilation: nn.Compilation, inputs: list[np.ndarray]
) -> list[np.ndarray]:
    """The expected outputs: a synchronous compute on the CPU-only compilation."""
    outputs = [np.empty(s, np.float32) for s in spec.output_shapes]
    execution = nn.Execution(compilation)
    for i, value in enumerate(inputs):
        execution.set_input(i, value)
    for i, out in enumerate(outputs):
        execution.set_output(i, out)
    execution.compute()
    return outputs
