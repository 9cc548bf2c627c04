"""One ``nnburst stress`` thread: sessions of random model, target and burst, each
result checked against the CPU-only reference."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

import numpy as np

import nnburst as nn
from nnburst.codes import ErrorStatus
from nnburst.cpu.driver import cpu_device
from nnburst.errors import NNError, result_code_for_status
from nnburst.hal.burst_controller import ExecutionBurstController
from nnburst.hal.types import MeasureTiming

from .faults import (
    SMALL_CHANNELS,
    FmqBurst,
    RawRequest,
    ShrunkQueueBurst,
    mutations,
    raw_round_trip,
)
from .models import ModelSpec, choice, random_model, reference
from .monitor import Budget, Stats, Watchdog
from .services import Target

#: Results are computed by the same reference code on every target; this only absorbs
#: summation-order differences of BLAS between threads.
RTOL, ATOL = 1e-5, 1e-5


# -- workers ------------------------------------------------------------------------------------


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
                length = choice(self.rng, SMALL_CHANNELS)
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
