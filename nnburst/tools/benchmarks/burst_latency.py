"""Burst execution latency against the synchronous path and raw FMQ, one run.

The model is the seed's worked example in HAL form, reduced to its first
operation: ADD of two float32 [3, 4] tensors.  Every mode executes the same
prepared model on the CPU reference driver:

* ``sync in-process``: ``execute_synchronously`` on the prepared model, which
  validates the request and maps its pools on every call (HAL 1.2's
  executeSynchronously: nothing is kept between calls)
* ``reusable compute in-process``: one reusable execution of the same
  request, computed per call: the in-process compute a burst repeats
* ``burst in-process``: controller and server thread in this process (the
  runtime never does this: its in-process bursts run on the caller's
  thread; here the server thread shares the GIL with the caller)
* ``burst cross-process``: the server in a driver process (socket for set-up
  and memories, FMQs for every execution)
* ``fmq raw``: the plain FMQ ping-pong of a 256-byte message, the floor a
  burst builds on; ``multiprocessing.Pipe`` as the usual IPC baseline

A burst's server answers a repeated request in C once it has served it
twice in Python (the model is one C plan): the burst rows time that path.
"poll 0" runs both ends with no polling window (LOW_POWER: sleep on the
futex at once); "poll 50us" spins for up to 50 µs first (the default), as
long as the spin policy finds that spinning pays.  The cross-process and fmq
rows pin the client to CPU 0 and the peer process to CPU 1; the rows before
them run where the scheduler puts them.  The last row is the server's own
per-request work in Python, without the model (deserialize, slot lookup,
serialize): what a request that is not a repeat costs the server.
"""

from __future__ import annotations

import multiprocessing
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ...codes import ErrorStatus, OperandCode, OperationCode, PreferenceCode
from ...cpu.driver import cpu_device
from ...fmq import MessageQueue
from ...hal.burst_controller import BurstSlots, ExecutionBurstController
from ...hal.burst_server import DefaultBurstExecutorWithCache, _Worker
from ...hal.interfaces import ExecutionResult, IPreparedModel
from ...hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from ...hal.packets import REQUEST_DATUM, RESULT_DATUM, request_words
from ...hal.types import DataLocation, MeasureTiming, OutputShape, Request, RequestArgument, Timing
from ...memory import Memory
from ...operands import OperandInfo
from ...service.burst import RemoteBurstClient, RemoteBurstModel, serve_bursts
from . import fmq_pingpong
from .fmq_pingpong import pin, timed
from .stats import LatencyStats, latency_table

_FORK = multiprocessing.get_context("fork")
RoundTrip = Callable[[], Any]
TENSOR_BYTES = 48


def add_model() -> HalModel:
    tensor = OperandInfo(OperandCode.TENSOR_FLOAT32, (3, 4))
    operands = [
        Operand(tensor, Lifetime.SUBGRAPH_INPUT),
        Operand(tensor, Lifetime.SUBGRAPH_INPUT),
        Operand(OperandInfo(OperandCode.INT32, ()), Lifetime.CONSTANT_COPY, np.array(0, np.int32)),
        Operand(tensor, Lifetime.SUBGRAPH_OUTPUT),
    ]
    return HalModel(
        Subgraph(operands, [Operation(OperationCode.ADD, (0, 1, 2), (3,))], (0, 1), (3,))
    )


def prepare(polling: bool) -> IPreparedModel:
    preference = PreferenceCode.FAST_SINGLE_ANSWER if polling else PreferenceCode.LOW_POWER
    return cpu_device().prepare_model(add_model(), preference=preference)


@contextmanager
def request_in_shared_memory() -> Iterator[tuple[Request, list[Memory]]]:
    """Both inputs and the output in one shared pool, as a burst sends them."""
    pool = Memory.create_shared(3 * TENSOR_BYTES)
    np.frombuffer(pool.buffer, np.float32, 24)[:] = 1.5
    request = Request(
        [
            RequestArgument(False, DataLocation(0, 0, TENSOR_BYTES)),
            RequestArgument(False, DataLocation(0, TENSOR_BYTES, TENSOR_BYTES)),
        ],
        [RequestArgument(False, DataLocation(0, 2 * TENSOR_BYTES, TENSOR_BYTES))],
        [pool],
    )
    try:
        yield request, [pool]
    finally:
        pool.close()


def _checked(
    controller: ExecutionBurstController, request: Request, keys: list[Memory]
) -> RoundTrip:
    status, *_ = controller.compute(request, MeasureTiming.NO, keys)
    if status != ErrorStatus.NONE:
        raise RuntimeError(f"burst execution failed: {status.name}")
    return lambda: controller.compute(request, MeasureTiming.NO, keys)


@contextmanager
def sync_in_process() -> Iterator[RoundTrip]:
    model = prepare(polling=True)
    with request_in_shared_memory() as (request, _):
        yield lambda: model.execute_synchronously(request, MeasureTiming.NO)


@contextmanager
def reusable_in_process() -> Iterator[RoundTrip]:
    model = prepare(polling=True)
    with request_in_shared_memory() as (request, _):
        execution = model.create_reusable_execution(request, MeasureTiming.NO)
        try:
            yield execution.compute
        finally:
            execution.close()


@contextmanager
def burst_in_process(polling: bool) -> Iterator[RoundTrip]:
    model = prepare(polling)
    with (
        request_in_shared_memory() as (request, keys),
        ExecutionBurstController.create(
            model, polling_window_us=50 if polling else 0
        ) as controller,
    ):
        yield _checked(controller, request, keys)


def _driver_process(sock: socket.socket, polling: bool) -> None:
    pin(1)
    done = threading.Event()
    connection, host = serve_bursts(sock, {1: prepare(polling)}.get)

    def closed() -> None:
        host.close()
        done.set()

    connection.on_close = closed
    done.wait()
    connection.close()


@contextmanager
def burst_cross_process(polling: bool) -> Iterator[RoundTrip]:
    pin(0)
    ours, theirs = socket.socketpair()
    process = _FORK.Process(target=_driver_process, args=(theirs, polling), daemon=True)
    process.start()
    theirs.close()
    client = RemoteBurstClient(ours)
    try:
        with (
            request_in_shared_memory() as (request, keys),
            ExecutionBurstController.create(
                RemoteBurstModel(client, 1), polling_window_us=50 if polling else 0
            ) as controller,
        ):
            yield _checked(controller, request, keys)
    finally:
        client.close()
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join()


class _NoModel(IPreparedModel):
    """Returns at once: isolates the burst server's own work."""

    def execute_synchronously(
        self, request: Request, measure: MeasureTiming, **_: Any
    ) -> ExecutionResult:
        return ErrorStatus.NONE, [OutputShape((3, 4))], Timing()

    def configure_execution_burst(self, *args: Any) -> Any:
        raise NotImplementedError("used only behind a worker, never configured")


@contextmanager
def server_overhead() -> Iterator[RoundTrip]:
    """One request through the server's respond(): deserialize, slot cache, serialize."""
    with (
        request_in_shared_memory() as (request, keys),
        MessageQueue(REQUEST_DATUM, 64) as requests,
        MessageQueue(RESULT_DATUM, 64) as results,
    ):
        slots = BurstSlots()
        worker = _Worker(slots, requests, results, DefaultBurstExecutorWithCache(_NoModel()), 0)
        packet = request_words(request, MeasureTiming.NO, slots.get_slots(request.pools, keys))
        worker.request_words[: len(packet)] = packet
        n = len(packet) // 6
        try:
            worker.respond(n)
            yield lambda: worker.respond(n)
        finally:
            worker.release()


MODES: dict[str, Callable[[], Any]] = {
    "sync in-process": sync_in_process,
    "reusable compute in-process": reusable_in_process,
    "burst in-process poll 0": lambda: burst_in_process(False),
    "burst in-process poll 50us": lambda: burst_in_process(True),
    "burst cross-process poll 0": lambda: burst_cross_process(False),
    "burst cross-process poll 50us": lambda: burst_cross_process(True),
    "fmq raw futex": lambda: fmq_pingpong.fmq_peer(spin_ns=0),
    "fmq raw poll 50us": lambda: fmq_pingpong.fmq_peer(spin_ns=fmq_pingpong.POLL_NS),
    "multiprocessing.Pipe": fmq_pingpong.pipe_peer,
    "server overhead (no model)": server_overhead,
}


def run(iterations: int = 5000, modes: list[str] | None = None) -> list[LatencyStats]:
    rows = []
    for name in modes or list(MODES):
        with MODES[name]() as round_trip:
            rows.append(LatencyStats.from_ns(name, timed(round_trip, iterations)))
        time.sleep(0.05)
    return rows


def main(iterations: int = 5000) -> None:
    rows = run(iterations)
    print(
        f"ADD of two float32 [3, 4] tensors on the CPU reference driver, {iterations} executions per mode:"
    )
    print(latency_table(rows, baseline="multiprocessing.Pipe", ratio_title="x Pipe"))


if __name__ == "__main__":
    main()
