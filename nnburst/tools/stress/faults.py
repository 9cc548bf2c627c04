"""The faults ``nnburst stress`` injects into bursts: request queues too short for the
request (``--shrink-queues``) and mutated raw request packets (``--mutate-packets``)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

import nnburst as nn
from nnburst.codes import ErrorStatus
from nnburst.errors import BadDataError, NNError
from nnburst.hal.burst_controller import CHANNEL_LENGTH, ExecutionBurstController
from nnburst.hal.packets import deserialize_result, serialize_request
from nnburst.hal.types import DataLocation, MeasureTiming, Request, RequestArgument

from .models import ModelSpec
from .monitor import Stats

#: Request channel lengths for --shrink-queues: most requests do not fit.
SMALL_CHANNELS = (2, 4, 8, 12)


# -- bursts with faults -------------------------------------------------------------------------


class _CountingController:
    """Wraps a HAL controller to count the requests it handed back for the synchronous path."""

    def __init__(self, controller: ExecutionBurstController, stats: Stats) -> None:
        self._controller = controller
        self._stats = stats

    def compute(self, *args: Any, **kwargs: Any) -> Any:
        result = self._controller.compute(*args, **kwargs)
        if result[3]:
            self._stats.add("fallbacks")
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._controller, name)


class FmqBurst(nn.Burst):
    """A burst over FMQs even on the in-process device, whose bursts otherwise run on
    the caller's thread: the stress test is there to exercise the burst server."""

    def make_controller(self, polling_window_us: int) -> Any:
        return self.fmq_controller(polling_window_us)


class ShrunkQueueBurst(nn.Burst):
    """A burst whose request channel is too short for most requests (``--shrink-queues``):
    they overflow into ``execute_synchronously``, the runtime's fallback."""

    def __init__(self, compilation: nn.Compilation, channel_length: int, stats: Stats) -> None:
        self.channel_length = channel_length
        self.stats = stats
        super().__init__(compilation)  # creates the controller

    def make_controller(self, polling_window_us: int) -> Any:
        controller = self.fmq_controller(
            polling_window_us,
            channel_length=self.channel_length,
            result_channel_length=CHANNEL_LENGTH,
        )
        return None if controller is None else _CountingController(controller, self.stats)


class RawRequest:
    """A HAL request for a model spec: the inputs in one shared memory, the outputs in another."""

    def __init__(self, spec: ModelSpec) -> None:
        self.in_sizes = [4 * math.prod(s) for s in spec.input_shapes]
        self.out_shapes = spec.output_shapes
        self.out_sizes = [4 * math.prod(s) for s in spec.output_shapes]
        self.inputs = nn.Memory.create_shared(sum(self.in_sizes))
        self.output = nn.Memory.create_shared(sum(self.out_sizes))
        self.pools = [self.inputs, self.output]

    def request(self, values: Sequence[np.ndarray] | None = None) -> Request:
        args_in, offset = [], 0
        for i, size in enumerate(self.in_sizes):
            if values is not None:
                self.inputs.buffer[offset : offset + size] = values[i].tobytes()
            args_in.append(RequestArgument(False, DataLocation(0, offset, size)))
            offset += size
        args_out, offset = [], 0
        for size in self.out_sizes:
            args_out.append(RequestArgument(False, DataLocation(1, offset, size)))
            offset += size
        return Request(args_in, args_out, list(self.pools))

    def outputs(self) -> list[np.ndarray]:
        result, offset = [], 0
        for shape, size in zip(self.out_shapes, self.out_sizes):
            result.append(
                np.frombuffer(self.output.buffer, np.float32, size // 4, offset)
                .reshape(shape)
                .copy()
            )
            offset += size
        return result

    def packet(self, controller: ExecutionBurstController) -> np.ndarray:
        """The valid packet as rows of six words."""
        slots = controller.slots.get_slots(self.pools, self.pools)
        return (
            serialize_request(self.request(), MeasureTiming.YES, slots)
            .view("<u4")
            .reshape(-1, 6)
            .copy()
        )

    def close(self) -> None:
        self.inputs.close()
        self.output.close()


#: Datums no valid packet holds at an arbitrary position (VTS validateBurstSerialization's list).
BAD_DATUMS = [
    (0, (10, 10, 10, 10, 0)),
    (1, (0, 0, 0, 0, 10)),
    (2, (0, 0, 0, 0, 0)),
    (3, (0, 0, 0, 0, 10)),
    (4, (0, 0, 0, 0, 0)),
    (5, (2**31 - 1, 0, 0, 0, 0)),
    (6, (1, 0, 0, 0, 0)),
]


def mutations(rng: np.random.Generator, valid: np.ndarray, n: int) -> Iterator[np.ndarray]:
    """``n`` packets that are each certainly invalid: a datum removed, a bad datum inserted or
    substituted (never one that leaves the packet valid), the packet truncated, or its
    declared size wrong."""
    rows = len(valid)
    produced = 0
    while produced < n:
        kind = int(rng.integers(5))
        tag, words = BAD_DATUMS[int(rng.integers(len(BAD_DATUMS)))]
        bad = np.array([[tag, *words]], dtype="<u4")
        if kind == 0:
            variant = np.delete(valid, int(rng.integers(rows)), axis=0)
        elif kind == 1:
            variant = np.insert(valid, int(rng.integers(rows + 1)), bad, axis=0)
        elif kind == 2:
            i = int(rng.integers(rows))
            same = np.array_equal(valid[i], bad[0])
            if same or (int(valid[i, 0]) == tag and tag in (2, 4)):  # that would stay valid
                continue
            variant = valid.copy()
            variant[i] = bad[0]
        elif kind == 3:
            if rows < 2:
                continue
            variant = valid[: int(rng.integers(1, rows))].copy()
        else:
            variant = valid.copy()
            wrong = int(rng.integers(0, 2 * rows + 2))
            if wrong == int(valid[0, 1]):
                continue
            variant[0, 1] = wrong
        if len(variant) == 0:
            continue
        produced += 1
        yield np.ascontiguousarray(variant)


def raw_round_trip(controller: ExecutionBurstController, rows: np.ndarray) -> ErrorStatus:
    """Send a packet as is (VTS's sendPacket) on the controller's channel; the reply's status.

    A reply too long for the result buffer or malformed counts as a failure of the packet,
    as the controller itself treats it.
    """
    try:
        reply = controller.send_packet(rows)
    except BadDataError:  # too long for the request channel: never sent
        return ErrorStatus.GENERAL_FAILURE
    try:
        status, _, _ = deserialize_result(reply)
    except NNError:
        return ErrorStatus.GENERAL_FAILURE
    return ErrorStatus(status)
