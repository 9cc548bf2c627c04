"""A small real model for burst tests (ADD of two float32 [3, 4] tensors) and
helpers that lay its request out in shared memory."""

from __future__ import annotations

import os
import time

import numpy as np

from nnburst.codes import OperandCode, OperationCode
from nnburst.hal.interfaces import IPreparedModel
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.hal.types import DataLocation, MeasureTiming, Request, RequestArgument
from nnburst.memory import Memory
from nnburst.operands import OperandInfo

SHAPE = (3, 4)
NBYTES = 48


def add_model() -> HalModel:
    return binary_model(OperationCode.ADD)


def binary_model(code: OperationCode) -> HalModel:
    """One float32 [3, 4] operation of two inputs and a fuse code (ADD, MUL, ...)."""
    tensor = OperandInfo(OperandCode.TENSOR_FLOAT32, SHAPE)
    operands = [
        Operand(tensor, Lifetime.SUBGRAPH_INPUT),
        Operand(tensor, Lifetime.SUBGRAPH_INPUT),
        Operand(OperandInfo(OperandCode.INT32, ()), Lifetime.CONSTANT_COPY, np.array(0, np.int32)),
        Operand(tensor, Lifetime.SUBGRAPH_OUTPUT),
    ]
    return HalModel(Subgraph(operands, [Operation(code, (0, 1, 2), (3,))], (0, 1), (3,)))


class Pools:
    """Inputs in one shared memory, the output in another."""

    def __init__(self) -> None:
        self.inputs = Memory.create_shared(2 * NBYTES)
        self.output = Memory.create_shared(NBYTES)
        self.a = np.frombuffer(self.inputs.buffer, np.float32, 12, 0).reshape(SHAPE)
        self.b = np.frombuffer(self.inputs.buffer, np.float32, 12, NBYTES).reshape(SHAPE)
        self.c = np.frombuffer(self.output.buffer, np.float32, 12, 0).reshape(SHAPE)

    def request(self) -> Request:
        return Request(
            [
                RequestArgument(False, DataLocation(0, 0, NBYTES)),
                RequestArgument(False, DataLocation(0, NBYTES, NBYTES)),
            ],
            [RequestArgument(False, DataLocation(1, 0, NBYTES))],
            [self.inputs, self.output],
        )

    @property
    def keys(self) -> list[object]:
        return [self.inputs, self.output]

    def close(self) -> None:
        del self.a, self.b, self.c
        self.inputs.close()
        self.output.close()


class _Slow(IPreparedModel):
    """Delays every execution: lets tests act while the server is busy.

    With ``gate`` (a file path) the delay is not a time: the execution
    creates ``gate + ".entered"`` and then waits until the file ``gate``
    exists, so a test knows the execution is in flight and decides when it
    ends, across processes too (see :class:`Gate`)."""

    def __init__(self, model: IPreparedModel, seconds: float, gate: str | None = None) -> None:
        self.model, self.seconds, self.gate = model, seconds, gate

    def execute_synchronously(self, request: Request, measure: MeasureTiming, **_):  # type: ignore[no-untyped-def]
        if self.gate:
            open(self.gate + ".entered", "w").close()
            deadline = time.monotonic() + 120  # a guard for a test that never opens the gate
            while not os.path.exists(self.gate) and time.monotonic() < deadline:
                time.sleep(0.002)
        else:
            time.sleep(self.seconds)
        return self.model.execute_synchronously(request, measure)

    def configure_execution_burst(self, callback, request_channel, result_channel):  # type: ignore[no-untyped-def]
        from nnburst.hal.burst_server import ExecutionBurstServer

        return 0, ExecutionBurstServer.create(callback, request_channel, result_channel, self)


def slow(model: IPreparedModel, seconds: float, gate: str | None = None) -> IPreparedModel:
    return _Slow(model, seconds, gate)


class Gate:
    """The test's end of a gated slow model: wait for an execution to be in
    flight, then let it finish."""

    def __init__(self, path: str) -> None:
        self.path = path

    def wait_entered(self) -> None:
        deadline = time.monotonic() + 60  # a hang guard only
        while not os.path.exists(self.path + ".entered"):
            assert time.monotonic() < deadline, "no execution reached the gate"
            time.sleep(0.002)

    def open(self) -> None:
        open(self.path, "w").close()
