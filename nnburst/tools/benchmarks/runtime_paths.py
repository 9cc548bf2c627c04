"""The models and execution paths that ``nnburst bench`` times through the public runtime.

Models:

* ``add-mul``: the seeds' worked example, ADD then MUL on float32 [3, 4]
  tensors (7 operands: two inputs, a constant, a fused-activation scalar,
  an intermediate, a second constant, the output).  Tiny: the time is the
  runtime's and the transport's, not the arithmetic's.
* ``conv``: a mid-size convolution block, float32 [1, N, N, 16] input, 3×3
  CONV_2D to 32 channels with ReLU, then 2×2 MAX_POOL_2D (N = 32 by
  default).  Big enough that the arithmetic and the copies show.

Paths: ``sync`` (``Execution.compute``), ``async`` (``start_compute`` +
``Event.wait``: a worker thread) and ``burst`` (``burst_compute``: FMQs and
the burst server).  A compilation for a service device runs the same paths
across processes; its preference picks the burst polling window (LOW_POWER:
0, sleep on the futex at once; otherwise 50 µs of spinning first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ... import (
    Burst,
    Compilation,
    Device,
    Execution,
    FuseCode,
    Model,
    OperandCode,
    OperandType,
    OperationCode,
    PaddingCode,
    PreferenceCode,
)
from ...hal.burst_controller import POLLING_WINDOW_US

PATHS = ("sync", "async", "burst")
MODELS = ("add-mul", "conv")
DEFAULT_CONV_SIZE = 32


@dataclass
class Workload:
    """A finished model with its input values and an output buffer."""

    name: str
    model: Model
    inputs: list[np.ndarray]
    output: np.ndarray
    #: the model's constant tensors by role ("c"; "weights", "bias"), so a peer
    #: (:mod:`.peers`) can build the same model from the same values
    constants: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def request_bytes(self) -> int:
        return sum(value.nbytes for value in self.inputs)

    @property
    def response_bytes(self) -> int:
        return self.output.nbytes


def add_mul_model() -> Workload:
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
    half = np.full((3, 4), 0.5, np.float32)
    model.set_operand_value(c, half)
    model.add_operation(OperationCode.ADD, [a, b, fuse], [summed])
    model.add_operation(OperationCode.MUL, [summed, c, fuse2], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    inputs = [np.arange(12, dtype=np.float32).reshape(3, 4), np.ones((3, 4), np.float32)]
    return Workload(
        "add+mul 3x4", model, inputs, np.empty((3, 4), np.float32), constants={"c": half}
    )


def conv_model(size: int = DEFAULT_CONV_SIZE) -> Workload:
    """3×3 CONV_2D (16→32 channels, ReLU) then 2×2 max pool on a size×size image."""
    if size < 2:
        raise ValueError(f"conv size must be at least 2, got {size}")
    rng = np.random.default_rng(0)
    pooled = size // 2
    model = Model()
    image = model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (1, size, size, 16)))
    weights = model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (32, 3, 3, 16)))
    bias = model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (32,)))
    scalars = [model.add_operand(OperandType(OperandCode.INT32)) for _ in range(4)]
    conv = model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (1, size, size, 32)))
    pool_scalars = [model.add_operand(OperandType(OperandCode.INT32)) for _ in range(6)]
    out = model.add_operand(OperandType(OperandCode.TENSOR_FLOAT32, (1, pooled, pooled, 32)))
    filters = rng.standard_normal((32, 3, 3, 16)).astype(np.float32) * 0.1  # [OC, KH, KW, IC]
    offsets = np.zeros(32, np.float32)
    model.set_operand_value(weights, filters)
    model.set_operand_value(bias, offsets)
    for operand, value in zip(scalars, (PaddingCode.SAME, 1, 1, FuseCode.RELU)):
        model.set_operand_value(operand, np.int32(value))
    for operand, value in zip(pool_scalars, (PaddingCode.VALID, 2, 2, 2, 2, FuseCode.NONE)):
        model.set_operand_value(operand, np.int32(value))
    model.add_operation(OperationCode.CONV_2D, [image, weights, bias, *scalars], [conv])
    model.add_operation(OperationCode.MAX_POOL_2D, [conv, *pool_scalars], [out])
    model.identify_inputs_and_outputs([image], [out])
    model.finish()
    inputs = [rng.standard_normal((1, size, size, 16)).astype(np.float32)]
    return Workload(
        f"conv {size}x{size}x16",
        model,
        inputs,
        np.empty((1, pooled, pooled, 32), np.float32),
        constants={"weights": filters, "bias": offsets},
    )


def workload(name: str, conv_size: int = DEFAULT_CONV_SIZE) -> Workload:
    """One of :data:`MODELS` by name."""
    if name == "add-mul":
        return add_mul_model()
    if name == "conv":
        return conv_model(conv_size)
    raise ValueError(f"unknown model {name!r}: expected one of {', '.join(MODELS)}")


def preference_for_polling(polling: bool | int) -> PreferenceCode:
    """The preference whose burst polling window is ``polling`` µs (True: 50, False: 0)."""
    window = 50 if polling is True else 0 if polling is False else int(polling)
    for preference, us in POLLING_WINDOW_US.items():
        if us == window:
            return preference
    raise ValueError(
        f"no preference polls for {window} µs (choices: {sorted(POLLING_WINDOW_US.values())})"
    )


@contextmanager
def execution_path(
    work: Workload, path: str, device: Device | None = None, polling: bool | int = True
) -> Iterator[Callable[[], object]]:
    """A reusable execution of ``work`` on ``device`` (default: the runtime's choice), run
    through ``path`` per call.  Everything it opened is closed on exit, also on Ctrl-C."""
    if path not in PATHS:
        raise ValueError(f"unknown path {path!r}: expected one of {', '.join(PATHS)}")
    with Compilation(work.model, devices=None if device is None else [device]) as compilation:
        compilation.set_preference(preference_for_polling(polling))
        compilation.finish()
        execution = Execution(compilation)
        execution.set_reusable(True)
        for i, value in enumerate(work.inputs):
            execution.set_input(i, value)
        execution.set_output(0, work.output)
        if path == "sync":
            yield execution.compute
        elif path == "async":
            yield lambda: execution.start_compute().wait()
        else:
            with Burst(compilation) as burst:
                yield lambda: execution.burst_compute(burst)
