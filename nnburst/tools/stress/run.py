"""``nnburst stress``: many concurrent bursts on random models, with faults on request.

Threads (and, with ``--processes``, child processes running this module with
``--child``) open bursts on random small models against the in-process CPU
device and one or more driver services, and check every result against an
in-process CPU-only compilation of the same model.  Faults are injected on
request: services killed and restarted, mutated request packets sent on raw
HAL bursts, memories closed mid-burst, request queues too small for the
request (synchronous fallback).

Everything is bounded (``--count``, ``--duration``) and every blocking call
is watched: a call that outlives ``--hang-timeout`` is counted as a hang and
its burst closed to release it, never waited on forever.  The exit code is 0
only if there were no mismatches, hangs, leaks or unclean failures
(exceptions other than NNError, accepted mutated packets).

Children get their parameters on the command line and print their summary
as JSON on stdout: nothing is pickled.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import nnburst as nn
from nnburst.codes import ErrorStatus, FuseCode, OperandCode, OperationCode, PaddingCode
from nnburst.cpu.driver import cpu_device
from nnburst.errors import BadDataError, NNError, result_code_for_status
from nnburst.hal.burst_controller import CHANNEL_LENGTH, ExecutionBurstController
from nnburst.hal.packets import deserialize_result, serialize_request
from nnburst.hal.types import DataLocation, MeasureTiming, Request, RequestArgument
from nnburst.service.launch import (
    ServiceStartError,
    child_env,
    child_python,
    neutral_cwd,
    start_service,
    stop_process,
)
from nnburst.service.remote import ServiceClient, connect

#: The service device that accepts every operation the CPU driver runs.
SERVICE_DEVICE = "nnburst-sample-all"
SERVICE_START_TIMEOUT_S = 20.0
#: Request channel lengths for --shrink-queues: most requests do not fit.
SMALL_CHANNELS = (2, 4, 8, 12)
#: Results are computed by the same reference code on every target; this only absorbs
#: summation-order differences of BLAS between threads.
RTOL, ATOL = 1e-5, 1e-5
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
        return self.int32(_choice(self.rng, list(FuseCode)))

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


def _choice(rng: np.random.Generator, items: Sequence[Any]) -> Any:
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
    kind = _choice(rng, ["binary", "binary", "unary", "conv", "pool", "quant"])
    if kind == "binary":
        code = _choice(
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
        code = _choice(rng, [OperationCode.RELU, OperationCode.LOGISTIC, OperationCode.TANH])
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
    scale, zero_point = _choice(rng, [0.02, 0.05, 0.1]), int(rng.integers(64, 192))
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


# -- counters -----------------------------------------------------------------------------------


@dataclass
class Stats:
    """Every counter of a run; thread-safe updates, JSON in and out (children report these)."""

    executions: int = 0
    by_target: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    unclean: Counter[str] = field(default_factory=Counter)
    mismatches: int = 0
    hangs: int = 0
    sessions: int = 0
    fallbacks: int = 0
    memories_freed: int = 0
    packets_mutated: int = 0
    mutations_accepted: int = 0
    restarts: int = 0
    unrecovered: int = 0
    leaks: dict[str, int] = field(
        default_factory=lambda: {"shm": 0, "processes": 0, "threads": 0, "fds": 0}
    )
    details: list[str] = field(default_factory=list)
    processes: int = 1
    seconds: float = 0.0
    interrupted: bool = False

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def count(self, table: str, key: str, n: int = 1) -> None:
        with self._lock:
            getattr(self, table)[key] += n

    def note(self, what: str) -> None:
        """Keep the first few failure descriptions for the report."""
        with self._lock:
            if len(self.details) < 20 and what not in self.details:
                self.details.append(what)

    @property
    def leak_total(self) -> int:
        return sum(self.leaks.values())

    @property
    def passed(self) -> bool:
        return not (
            self.mismatches
            or self.hangs
            or self.leak_total
            or self.unclean
            or self.mutations_accepted
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "executions": self.executions,
            "by_target": dict(self.by_target),
            "errors": dict(self.errors),
            "unclean": dict(self.unclean),
            "mismatches": self.mismatches,
            "hangs": self.hangs,
            "leaks": dict(self.leaks),
            "leak_total": self.leak_total,
            "sessions": self.sessions,
            "fallbacks": self.fallbacks,
            "memories_freed": self.memories_freed,
            "packets_mutated": self.packets_mutated,
            "mutations_accepted": self.mutations_accepted,
            "restarts": self.restarts,
            "unrecovered": self.unrecovered,
            "details": self.details,
            "processes": self.processes,
            "seconds": round(self.seconds, 3),
            "interrupted": self.interrupted,
            "passed": self.passed,
        }

    def merge(self, doc: dict[str, Any]) -> None:
        """Add a child's summary (its JSON) to this one."""
        with self._lock:
            for name in (
                "executions",
                "mismatches",
                "hangs",
                "sessions",
                "fallbacks",
                "memories_freed",
                "packets_mutated",
                "mutations_accepted",
                "processes",
            ):
                setattr(self, name, getattr(self, name) + int(doc.get(name, 0)))
            for table in ("by_target", "errors", "unclean"):
                getattr(self, table).update({k: int(v) for k, v in doc.get(table, {}).items()})
            for kind, n in doc.get("leaks", {}).items():
                self.leaks[kind] = self.leaks.get(kind, 0) + int(n)
            self.details.extend(doc.get("details", [])[: max(0, 20 - len(self.details))])


# -- bounds and the watchdog --------------------------------------------------------------------


class Budget:
    """How many executions are left and until when: every loop asks before it works."""

    def __init__(self, count: int, duration: float) -> None:
        self.deadline = time.monotonic() + duration
        self._left = count
        self._lock = threading.Lock()
        self.stop = threading.Event()

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()

    def running(self) -> bool:
        if self.stop.is_set() or time.monotonic() >= self.deadline:
            self.stop.set()
            return False
        return True

    def take(self) -> bool:
        """One more execution, if the count and the time allow it."""
        with self._lock:
            if self._left <= 0 or not self.running():
                self.stop.set()
                return False
            self._left -= 1
            return True


class Watchdog:
    """Flags a watched call that outlives the timeout as a hang and calls its ``unblock``
    (closing its burst), so a stuck call is counted and released, not waited on."""

    def __init__(self, timeout: float, stats: Stats) -> None:
        self.timeout = timeout
        self._stats = stats
        self._calls: dict[int, list[Any]] = {}  # id -> [start, what, unblock, flagged]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="nnburst-stress-watchdog", daemon=True
        )
        self._thread.start()

    @contextlib.contextmanager
    def watch(self, what: str, unblock: Callable[[], None] | None = None) -> Iterator[list[Any]]:
        """Yields the call's record; ``record[3]`` is True if it was flagged as a hang."""
        record: list[Any] = [time.monotonic(), what, unblock, False]
        with self._lock:
            self._calls[id(record)] = record
        try:
            yield record
        finally:
            with self._lock:
                self._calls.pop(id(record), None)

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            now = time.monotonic()
            with self._lock:
                overdue = [
                    r for r in self._calls.values() if not r[3] and now - r[0] > self.timeout
                ]
                for record in overdue:
                    record[3] = True
            for _, what, unblock, _ in overdue:
                self._stats.add("hangs")
                self._stats.note(f"hang: {what} took more than {self.timeout:g} s")
                if unblock is not None:
                    with contextlib.suppress(Exception):
                        unblock()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)


# -- services -----------------------------------------------------------------------------------


class ServiceProcess:
    """``python -m nnburst.service.driver`` on one socket, in its own session (a Ctrl-C in
    the terminal reaches only us, and we stop it); restartable on the same path."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.process: subprocess.Popen[str] | None = None
        self.pids: list[int] = []
        self.start()

    def start(self) -> None:
        try:
            process, stderr = start_service(self.path, timeout=SERVICE_START_TIMEOUT_S)
        except ServiceStartError as exc:
            raise RuntimeError(f"the driver service on {self.path} did not start: {exc}") from None
        stderr.close()  # its later warnings are not the stress run's to print
        self.process = process
        self.pids.append(process.pid)
        assert process.stdout is not None
        process.stdout.close()  # it prints one line only

    def kill(self) -> None:
        """SIGKILL: the worst way to die (no chance to clean up)."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        """SIGTERM (the service unlinks its socket), SIGKILL if it does not go."""
        if self.process is not None:
            stop_process(self.process)


class Target:
    """Where executions run: the in-process CPU device or one service (reconnected when it broke)."""

    def __init__(self, name: str, path: str | None = None) -> None:
        self.name = name
        self.path = path
        self.successes = 0
        self._lock = threading.Lock()
        self._client: ServiceClient | None = None
        self._device: nn.Device | None = nn.Device(cpu_device()) if path is None else None

    def device(self) -> nn.Device | None:
        """The device now; None while the service is unreachable (being restarted)."""
        if self.path is None:
            return self._device
        with self._lock:
            if self._client is not None and not self._client.broken:
                return self._device
            if self._client is not None:
                # Broken for good: close it now (its socket and burst channels), or a
                # run with --kill-service keeps every dead connection's fds to the end.
                # Bursts still holding it fail as they would anyway: the peer is gone.
                with contextlib.suppress(Exception):
                    self._client.close()
                self._client, self._device = None, None
            try:
                client = ServiceClient(self.path)
            except OSError:
                return None
            try:
                hal = next(d for d in client.devices(timeout=2.0) if d.name == SERVICE_DEVICE)
            except (NNError, OSError, StopIteration, ValueError):
                client.close()
                return None
            self._client, self._device = client, nn.Device(hal)
            return self._device

    def succeeded(self) -> None:
        with self._lock:
            self.successes += 1

    def close(self) -> None:
        with self._lock:
            client, self._client, self._device = self._client, None, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


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


@dataclass
class Options:
    """What the workers need from the command line."""

    max_size: int = 8
    max_operations: int = 5
    mutate_packets: bool = False
    free_memories: bool = False
    shrink_queues: bool = False


def _close_all(memories: list[nn.Memory]) -> None:
    for memory in memories:
        memory.close()


def _name(exc: BaseException) -> str:
    return exc.code.name if isinstance(exc, NNError) else type(exc).__name__


class Worker:
    """One thread: sessions of (random model, target, burst), several executions each."""

    def __init__(
        self,
        index: int,
        seed: int,
        targets: list[Target],
        budget: Budget,
        watchdog: Watchdog,
        stats: Stats,
        options: Options,
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.targets = targets
        self.budget = budget
        self.watchdog = watchdog
        self.stats = stats
        self.options = options
        self.thread = threading.Thread(
            target=self._run, name=f"nnburst-stress-{index}", daemon=True
        )

    def _run(self) -> None:
        while self.budget.running():
            try:
                if self.options.mutate_packets and self.rng.random() < 0.25:
                    self._mutation_session()
                else:
                    self._session()
            except NNError as exc:  # compiling or opening a burst failed (a killed service)
                self.stats.count("errors", _name(exc))
            except Exception as exc:  # a library call failed uncleanly: a bug to report
                self.stats.count("unclean", type(exc).__name__)
                self.stats.note(f"unclean: {type(exc).__name__}: {exc}")

    def _start_session(self) -> tuple[Target, nn.Device, ModelSpec] | None:
        """A random target and model; None while the picked service restarts."""
        target = self.targets[int(self.rng.integers(len(self.targets)))]
        device = target.device()
        if device is None:
            time.sleep(0.05)  # the service is restarting
            return None
        self.stats.add("sessions")
        return (
            target,
            device,
            random_model(self.rng, self.options.max_size, self.options.max_operations),
        )

    def _compile(self, spec: ModelSpec, device: nn.Device, what: str) -> nn.Compilation:
        compilation = nn.Compilation(spec.model, devices=[device])
        with self.watchdog.watch(f"{what} on {device.name}"):
            compilation.finish()
        return compilation

    # -- a runtime burst session --
    def _session(self) -> None:
        started = self._start_session()
        if started is None:
            return
        target, device, spec = started
        with contextlib.ExitStack() as stack:
            ref = stack.enter_context(
                self._compile(spec, nn.Device(cpu_device()), "reference compile")
            )
            compilation = stack.enter_context(self._compile(spec, device, "compile"))
            if self.options.shrink_queues:
                length = _choice(self.rng, SMALL_CHANNELS)
                burst: nn.Burst = ShrunkQueueBurst(compilation, length, self.stats)
            else:
                burst = FmqBurst(compilation)
            stack.callback(burst.close)
            memories: list[nn.Memory] = []
            stack.callback(_close_all, memories)
            for _ in range(int(self.rng.integers(1, 20))):
                if not self.budget.take():
                    return
                inputs = [self.rng.uniform(-3, 3, s).astype(np.float32) for s in spec.input_shapes]
                expected = reference(spec, ref, inputs)
                if not self._execute(target, spec, compilation, burst, inputs, expected, memories):
                    return

    def _execute(
        self,
        target: Target,
        spec: ModelSpec,
        compilation: nn.Compilation,
        burst: nn.Burst,
        inputs: list[np.ndarray],
        expected: list[np.ndarray],
        memories: list[nn.Memory],
    ) -> bool:
        """One burst execution, checked; False ends the session (the burst failed or hung)."""
        use_memory = self.options.free_memories or self.rng.random() < 0.3
        execution = nn.Execution(compilation)
        outputs = [np.zeros(s, np.float32) for s in spec.output_shapes]
        if use_memory:
            if not memories:
                memories.extend(
                    nn.Memory.create_shared(max(4, a.nbytes)) for a in (*inputs, *outputs)
                )
            for i, value in enumerate(inputs):
                memories[i].buffer[: value.nbytes] = value.tobytes()
                execution.set_input_from_memory(i, memories[i], 0, value.nbytes)
            for i, out in enumerate(outputs):
                execution.set_output_from_memory(i, memories[len(inputs) + i], 0, out.nbytes)
        else:
            for i, value in enumerate(inputs):
                execution.set_input(i, value)
            for i, out in enumerate(outputs):
                execution.set_output(i, out)
        with self.watchdog.watch(f"burst_compute on {target.name}", burst.close) as record:
            try:
                execution.burst_compute(burst)
            except NNError as exc:
                if not record[3]:
                    self.stats.count("errors", _name(exc))
                return False
        if record[3]:
            return False
        if use_memory:
            for i, out in enumerate(outputs):
                out[...] = np.frombuffer(
                    memories[len(inputs) + i].buffer, np.float32, out.size
                ).reshape(out.shape)
            if self.options.free_memories and self.rng.random() < 0.5:
                for memory in (
                    memories
                ):  # mid-burst: the burst frees their slots, the next execution maps new ones
                    memory.close()
                self.stats.add("memories_freed", len(memories))
                memories.clear()
        self.stats.add("executions")
        self.stats.count("by_target", target.name)
        for got, want in zip(outputs, expected):
            if not np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True):
                self.stats.add("mismatches")
                self.stats.note(
                    f"mismatch on {target.name}: {'-'.join(spec.operations)} "
                    f"max error {float(np.nanmax(np.abs(got - want))):g}"
                )
                return True
        target.succeeded()
        return True

    # -- a raw HAL burst session with mutated packets --
    def _mutation_session(self) -> None:
        started = self._start_session()
        if started is None:
            return
        target, device, spec = started
        with contextlib.ExitStack() as stack:
            ref = stack.enter_context(
                self._compile(spec, nn.Device(cpu_device()), "reference compile")
            )
            with self.watchdog.watch(f"prepare_model on {target.name}"):
                prepared = device.hal.prepare_model(spec.model.hal_model)
            stack.callback(getattr(prepared, "close", lambda: None))
            controller = stack.enter_context(ExecutionBurstController.create(prepared))
            raw = RawRequest(spec)
            stack.callback(raw.close)
            inputs = [self.rng.uniform(-3, 3, s).astype(np.float32) for s in spec.input_shapes]
            expected = reference(spec, ref, inputs)
            if not self._raw_valid(target, controller, raw, inputs, expected):
                return
            for variant in mutations(
                self.rng, raw.packet(controller), int(self.rng.integers(4, 16))
            ):
                if not self.budget.running():
                    return
                self.stats.add("packets_mutated")
                with self.watchdog.watch(
                    f"mutated packet on {target.name}", controller.close
                ) as record:
                    try:
                        status = raw_round_trip(controller, variant)
                    except NNError as exc:
                        if not record[3]:
                            self.stats.count("errors", _name(exc))
                        return
                if status == ErrorStatus.NONE:
                    self.stats.add("mutations_accepted")
                    self.stats.note(f"a mutated packet was accepted by {target.name}")
            self._raw_valid(
                target, controller, raw, inputs, expected
            )  # the burst survives them all

    def _raw_valid(
        self,
        target: Target,
        controller: ExecutionBurstController,
        raw: RawRequest,
        inputs: list[np.ndarray],
        expected: list[np.ndarray],
    ) -> bool:
        if not self.budget.take():
            return False
        with self.watchdog.watch(f"raw burst compute on {target.name}", controller.close) as record:
            status, _, _, _ = controller.compute(raw.request(inputs), MeasureTiming.NO, raw.pools)
        if record[3]:
            return False
        if status != ErrorStatus.NONE:
            self.stats.count("errors", nn.ResultCode(_result_code(status)).name)
            return False
        self.stats.add("executions")
        self.stats.count("by_target", target.name)
        for got, want in zip(raw.outputs(), expected):
            if not np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True):
                self.stats.add("mismatches")
                self.stats.note(f"mismatch on a raw burst on {target.name}")
                return False
        target.succeeded()
        return True


def _result_code(status: int) -> int:
    return int(result_code_for_status(ErrorStatus(status)))


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


# -- killing services ---------------------------------------------------------------------------


class ServiceKiller:
    """Kills a random service at random times and restarts it on the same socket; waits for
    an execution to succeed on it again before the next kill, and counts restarts that never
    saw one (``unrecovered``)."""

    def __init__(
        self,
        services: list[ServiceProcess],
        targets: dict[str, Target],
        budget: Budget,
        stats: Stats,
        seed: int,
    ) -> None:
        self.services = services
        self.targets = targets
        self.budget = budget
        self.stats = stats
        self.rng = random.Random(seed)
        self.pending: list[tuple[Target, int]] = []  # (target, its successes at restart)
        self.thread = threading.Thread(target=self._run, name="nnburst-stress-killer", daemon=True)

    def _run(self) -> None:
        while self.budget.running():
            if self.budget.stop.wait(self.rng.uniform(0.2, 1.0)):
                return
            if self.budget.remaining_s() < 2.5 or any(t.successes <= n for t, n in self.pending):
                continue  # leave time to recover; one outage at a time
            self.pending.clear()
            service = self.rng.choice(self.services)
            target = self.targets[service.path]
            try:
                service.restart()
            except RuntimeError as exc:
                self.stats.note(f"restart failed: {exc}")
                continue
            self.stats.add("restarts")
            self.pending.append((target, target.successes))

    def finish(self) -> None:
        self.stats.unrecovered = sum(1 for t, n in self.pending if t.successes <= n)


# -- leaks --------------------------------------------------------------------------------------


_SEGMENT = re.compile(r"^nnburst-(\d+)-[0-9a-f]{16}$")


def _segments(pids: set[int]) -> set[str]:
    try:
        entries = os.listdir("/dev/shm")
    except OSError:
        return set()
    return {e for e in entries if (m := _SEGMENT.match(e)) and int(m.group(1)) in pids}


def _live_children() -> set[int]:
    """Our child processes that are running (not zombies waiting to be reaped)."""
    children: set[int] = set()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            children.add(int(entry))
    return children


class LeakCheck:
    """What the run left behind: shm segments of ours or our children, live children,
    threads, file descriptors (against a snapshot taken before the run)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.segments = _segments({self.pid})
        self.children = _live_children()
        self.threads = set(threading.enumerate())
        self.fds = len(os.listdir("/proc/self/fd"))

    def measure(self, child_pids: set[int], stats: Stats) -> None:
        gc.collect()
        end = time.monotonic() + 2.0  # threads just told to stop may need a moment
        while time.monotonic() < end:
            threads = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]
            if not threads:
                break
            time.sleep(0.05)
        segments = _segments({self.pid} | child_pids) - self.segments
        children = _live_children() - self.children
        fds = len(os.listdir("/proc/self/fd")) - self.fds
        stats.leaks = {
            "shm": len(segments),
            "processes": len(children),
            "threads": len(threads),
            "fds": max(0, fds),
        }
        for what in (
            *sorted(segments),
            *(f"pid {p}" for p in sorted(children)),
            *(t.name for t in threads),
        ):
            stats.note(f"leak: {what}")


# -- children -----------------------------------------------------------------------------------


def _child_command(args: argparse.Namespace, paths: list[str], index: int, count: int) -> list[str]:
    command = child_python(
        "nnburst.stress",
        "--child",
        "--threads",
        str(args.threads),
        "--count",
        str(count),
        "--duration",
        str(args.duration),
        "--seed",
        str(args.seed + 1000 * (index + 1)),
        "--hang-timeout",
        str(args.hang_timeout),
        "--max-size",
        str(args.max_size),
        "--max-operations",
        str(args.max_operations),
    )
    for path in paths:
        command += ["--socket", path]
    for flag in ("mutate_packets", "free_memories", "shrink_queues", "no_cpu"):
        if getattr(args, flag):
            command.append("--" + flag.replace("_", "-"))
    return command


def _collect_child(
    process: subprocess.Popen[str], timeout: float, stats: Stats, interrupted: bool = False
) -> None:
    """Merge a worker process's JSON summary; one without a summary failed (unless we
    interrupted it before it was ready)."""
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        stats.add("hangs")
        stats.note(f"hang: worker process {process.pid} did not finish")
        return
    try:
        stats.merge(json.loads(out.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        if not interrupted:
            stats.count("unclean", "ChildFailed")
        stats.note(f"worker process {process.pid} exited {process.returncode} without a summary")


# -- the run ------------------------------------------------------------------------------------


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nnburst stress",
        description="Many concurrent bursts on random models against driver services and the "
        "in-process CPU device, every result checked; faults on request.",
    )
    parser.add_argument(
        "--duration", type=_seconds, default=10.0, help="seconds to run (default 10)"
    )
    parser.add_argument(
        "--count",
        type=_positive,
        default=100_000,
        help="at most this many executions (default 100000)",
    )
    parser.add_argument(
        "--threads", type=_positive, default=4, help="worker threads per process (default 4)"
    )
    parser.add_argument(
        "--processes",
        type=_non_negative,
        default=0,
        help="extra worker processes, each with --threads threads (default 0)",
    )
    parser.add_argument(
        "--services",
        type=_non_negative,
        default=1,
        help="driver services to start when no --socket is given (default 1)",
    )
    parser.add_argument(
        "--socket",
        action="append",
        default=[],
        metavar="PATH",
        help="use the running service at PATH instead of starting one (repeatable)",
    )
    parser.add_argument("--no-cpu", action="store_true", help="leave out the in-process CPU device")
    parser.add_argument(
        "--kill-service", action="store_true", help="kill and restart services at random times"
    )
    parser.add_argument(
        "--mutate-packets",
        action="store_true",
        help="send mutated request packets on raw HAL bursts",
    )
    parser.add_argument(
        "--free-memories",
        action="store_true",
        help="close memories mid-burst and continue with new ones",
    )
    parser.add_argument(
        "--shrink-queues",
        action="store_true",
        help="request channels too short for most requests (synchronous fallback)",
    )
    parser.add_argument(
        "--hang-timeout",
        type=_seconds,
        default=10.0,
        help="a call taking longer than this counts as a hang (default 10 s)",
    )
    parser.add_argument(
        "--max-size",
        type=_positive,
        default=8,
        help="largest height/width of a model's tensors (default 8)",
    )
    parser.add_argument(
        "--max-operations", type=_positive, default=5, help="longest operation chain (default 5)"
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="random seed (default: from the clock)"
    )
    parser.add_argument(
        "--json", metavar="FILE", help="also write the summary as JSON to FILE ('-' for stdout)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser


#: How long a worker process waits for a service that --kill-service is restarting.
CHILD_CONNECT_PATIENCE_S = 15.0


def _answers(path: str, patient: bool) -> bool:
    """Whether a service answers at ``path``; a worker process (``patient``) waits
    out a restart by --kill-service instead of failing the run."""
    deadline = time.monotonic() + (CHILD_CONNECT_PATIENCE_S if patient else 0.0)
    while connect(path) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _run(args: argparse.Namespace, stats: Stats, leaks: LeakCheck) -> None:
    workdir = None
    services: list[ServiceProcess] = []
    targets: list[Target] = []
    children: list[subprocess.Popen[str]] = []
    workers: list[Worker] = []
    killer: ServiceKiller | None = None
    watchdog: Watchdog | None = None
    budget = Budget(args.count, args.duration)
    child_pids: set[int] = set()
    try:
        try:
            paths = list(args.socket)
            for path in paths:
                if not _answers(path, patient=args.child):  # the warning above says why
                    raise RuntimeError(f"--socket {path}: no driver service answers there")
            if not paths and not args.child and args.services:
                workdir = tempfile.mkdtemp(prefix="nnburst-stress-")
                for i in range(args.services):
                    services.append(
                        ServiceProcess(os.path.join(workdir, f"service{i}", "driver.sock"))
                    )
                paths = [s.path for s in services]
            if not args.no_cpu:
                targets.append(Target("cpu"))
            targets += [Target(f"service{i}", path) for i, path in enumerate(paths)]
            per_process = args.count // (args.processes + 1)
            # The clock starts once the services listen.
            budget = Budget(args.count - per_process * args.processes, args.duration)
            watchdog = Watchdog(args.hang_timeout, stats)
            for i in range(args.processes):
                children.append(
                    subprocess.Popen(
                        _child_command(args, paths, i, max(1, per_process)),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        text=True,
                        env=child_env(),
                        cwd=neutral_cwd(),
                        start_new_session=True,
                    )
                )
            workers = [
                Worker(
                    i,
                    args.seed + i,
                    targets,
                    budget,
                    watchdog,
                    stats,
                    Options(
                        args.max_size,
                        args.max_operations,
                        args.mutate_packets,
                        args.free_memories,
                        args.shrink_queues,
                    ),
                )
                for i in range(args.threads)
            ]
            for worker in workers:
                worker.thread.start()
            if args.kill_service and services:
                killer = ServiceKiller(
                    services, {t.path: t for t in targets if t.path}, budget, stats, args.seed
                )
                killer.thread.start()
            while any(w.thread.is_alive() for w in workers):
                time.sleep(0.05)  # the main thread stays free for Ctrl-C
            for process in children:
                _collect_child(process, args.duration + args.hang_timeout + 30, stats)
        except KeyboardInterrupt:
            stats.interrupted = True
            budget.stop.set()
            for process in children:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGINT)  # each prints its partial summary
            for process in children:
                if process.returncode is None:
                    _collect_child(process, args.hang_timeout + 10, stats, interrupted=True)
    finally:
        budget.stop.set()
        for worker in workers:
            worker.thread.join(args.hang_timeout + 5)
            if worker.thread.is_alive():
                stats.add("hangs")
                stats.note(f"hang: {worker.thread.name} did not stop")
        if killer is not None:
            killer.thread.join(SERVICE_START_TIMEOUT_S + 5)
            killer.finish()
        for process in children:
            child_pids.add(process.pid)
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        for target in targets:
            target.close()
        for service in services:
            service.stop()
            child_pids.update(service.pids)
        if watchdog is not None:
            watchdog.close()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        leaks.measure(child_pids, stats)


def verdict(stats: Stats) -> str:
    """FAIL on any failure; an interrupted run has not passed, whatever it saw."""
    if not stats.passed:
        return "FAIL"
    return "INTERRUPTED (no failure before it)" if stats.interrupted else "PASS"


def format_summary(stats: Stats, args: argparse.Namespace) -> str:
    doc = stats.to_json()
    by_target = ", ".join(f"{k} {v}" for k, v in sorted(doc["by_target"].items())) or "none"
    errors = sum(doc["errors"].values())
    lines = [
        f"nnburst stress: {doc['seconds']:.1f} s, {args.threads} threads x {stats.processes} processes, "
        f"seed {args.seed}" + (" (interrupted)" if stats.interrupted else ""),
        f"  executions   {doc['executions']:>8}   ({by_target}; {doc['sessions']} bursts/models)",
        f"  errors       {errors:>8}",
        *(f"    {k:<28} {v}" for k, v in sorted(doc["errors"].items())),
        f"  mismatches   {doc['mismatches']:>8}",
        f"  hangs        {doc['hangs']:>8}",
        f"  leaks        {doc['leak_total']:>8}   (shm {doc['leaks']['shm']}, processes {doc['leaks']['processes']}, "
        f"threads {doc['leaks']['threads']}, fds {doc['leaks']['fds']})",
    ]
    if doc["unclean"]:
        lines.append(
            f"  unclean      {sum(doc['unclean'].values()):>8}   "
            + ", ".join(f"{k} {v}" for k, v in sorted(doc["unclean"].items()))
        )
    faults = []
    if args.kill_service:
        faults.append(f"kill-service: {doc['restarts']} restarts, {doc['unrecovered']} unrecovered")
    if args.mutate_packets:
        faults.append(
            f"mutate-packets: {doc['packets_mutated']} sent, {doc['mutations_accepted']} accepted"
        )
    if args.free_memories:
        faults.append(f"free-memories: {doc['memories_freed']} closed mid-burst")
    if args.shrink_queues:
        faults.append(f"shrink-queues: {doc['fallbacks']} synchronous fallbacks")
    lines += [f"  fault        {f}" for f in faults]
    lines += [f"  ! {d}" for d in doc["details"][:10]]
    lines.append("  result       " + verdict(stats))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``nnburst stress``; returns the exit code: 0 when the whole run saw no
    mismatch, hang, leak or unclean failure, 1 when it saw one, 130 when it was
    interrupted before its end without one."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = int(time.time()) % 100_000
    if args.kill_service and (args.socket or args.child or args.services == 0):
        parser.error("--kill-service needs services this run starts (no --socket, --services >= 1)")
    if args.no_cpu and not args.socket and args.services == 0:
        parser.error("no targets: --no-cpu with --services 0")
    stats = Stats()
    leaks = LeakCheck()
    start = time.monotonic()
    in_main = threading.current_thread() is threading.main_thread()
    try:
        _run(args, stats, leaks)
    except KeyboardInterrupt:  # a second Ctrl-C during cleanup: what is left is reported as leaks
        stats.interrupted = True
    except (RuntimeError, OSError) as exc:
        print(f"nnburst stress: error: {exc}", file=sys.stderr)
        return 2
    stats.seconds = time.monotonic() - start
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
    try:
        doc = stats.to_json()
        if args.child:
            print(json.dumps(doc), flush=True)
        else:
            print(format_summary(stats, args), flush=True)
        if args.json == "-" and not args.child:
            print(json.dumps(doc, indent=2))
        elif args.json and args.json != "-":
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=2)
                f.write("\n")
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if not stats.passed:
        return 1
    return 130 if stats.interrupted else 0  # 130: as a shell reports a Ctrl-C


if __name__ == "__main__":
    sys.exit(main())
