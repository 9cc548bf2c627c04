"""The fast paths of issue 12, checked for behaviour (never for speed: that is bench/).

- A reusable execution is validated and mapped once, yet sees in-place input
  updates, refuses closed memories and follows re-bindings after an aborted start.
- In-process bursts run on the caller's thread; FMQ bursts keep their packets.
- The spin policy closes the window when spinning does not pay.
- Steady-state bursts retain nothing per execution (tracemalloc).
"""

from __future__ import annotations

import threading
import time
import tracemalloc
from collections.abc import Sequence

import numpy as np
import pytest

import nnburst as nn
from nnburst.codes import ErrorStatus
from nnburst.cpu.driver import cpu_device
from nnburst.hal.burst_controller import ExecutionBurstController
from nnburst.hal.burst_server import ExecutionBurstServer
from nnburst.hal.interfaces import ExecutionResult, IBurstExecutorWithCache
from nnburst.hal.spin import (
    FIRST_PAUSE,
    MISSES,
    PROBE_FACTOR,
    SLEEP_SAMPLE_EVERY,
    WARM_UP,
    SpinPolicy,
)
from nnburst.hal.types import NO_TIMING, MeasureTiming, Request
from nnburst.tools.benchmarks.runtime_paths import add_mul_model
from nnburst.tools.stress.faults import FmqBurst  # FMQs even on the in-process device

A = np.arange(12, dtype=np.float32).reshape(3, 4)
B = np.ones((3, 4), np.float32)


def expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a + b) * np.float32(0.5)


def compiled_add_mul() -> nn.Compilation:
    compilation = nn.Compilation(add_mul_model().model, [nn.Device(cpu_device())])
    compilation.finish()
    return compilation


def reusable(compilation: nn.Compilation, a: np.ndarray, b: np.ndarray, out: np.ndarray):
    execution = nn.Execution(compilation)
    execution.set_reusable(True)
    execution.set_input(0, a)
    execution.set_input(1, b)
    execution.set_output(0, out)
    return execution


# -- reusable executions --------------------------------------------------------------------------
def test_a_reusable_execution_reads_its_inputs_at_every_computation():
    a, out = A.copy(), np.zeros((3, 4), np.float32)
    with compiled_add_mul() as compilation, reusable(compilation, a, B, out) as execution:
        for k in range(3):
            a[...] = A + k  # updated in place: the kept request must see it
            execution.compute()
            np.testing.assert_array_equal(out, expected(A + k, B))


def test_an_intermediate_is_dropped_once_its_last_reader_has_run():
    """ADD's result is read by MUL only: a run drops it right after MUL (its
    memory goes back to the allocator while still in cache), keeps the model's
    output, and leaves the inputs and constants alone."""
    from nnburst.cpu.executor import PreparedModel

    model = add_mul_model().model.hal_model
    main = PreparedModel(model).main
    summed = main.operations[0].outputs[0]
    out = main.subgraph.output_indexes[0]
    values = main.initial_values.copy()
    for index, value in zip(main.subgraph.input_indexes, (A, B)):
        values[index] = value
    main._run_operations(values, None, None)
    assert values[summed] is None
    np.testing.assert_array_equal(values[out], expected(A, B))
    assert [values[i] is not None for i in main.subgraph.input_indexes] == [True, True]
    assert main.run([A, B])[0].tolist() == expected(A, B).tolist()


def test_float_overflow_is_a_result_whatever_the_callers_numpy_error_state():
    """Overflow to inf is defined NNAPI behaviour: an execution must not raise or warn
    even where the caller made numpy raise, on any thread, and must leave the
    caller's own setting as it was (the executor's per-thread quiet context)."""
    big = np.full((3, 4), 3e38, np.float32)
    failures: list[BaseException] = []

    def compute_raising() -> None:
        try:
            out = np.zeros((3, 4), np.float32)
            with np.errstate(all="raise"):
                with compiled_add_mul() as compilation, reusable(compilation, big, big, out) as ex:
                    ex.compute()
                    ex.compute()
                assert np.geterr()["over"] == "raise"
                with pytest.raises(FloatingPointError):
                    np.float32(3e38) * np.float32(10)  # the caller's setting still holds
            assert np.isposinf(out).all()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=compute_raising) for _ in range(2)]
    for thread in threads:
        thread.start()
    compute_raising()
    for thread in threads:
        thread.join(30)
    assert not failures, failures


def test_inputs_converted_to_the_operand_type_are_converted_again_each_time():
    a, out = A.astype(np.float64), np.zeros((3, 4), np.float32)  # float64 for a float32 operand
    with compiled_add_mul() as compilation, reusable(compilation, a, B, out) as execution:
        for k in range(2):
            a[...] = A + 10 * k
            execution.compute()
            np.testing.assert_array_equal(out, expected(A + 10 * k, B))


def test_a_memory_closed_between_computations_fails_the_next_one():
    memory = nn.Memory.create_shared(3 * A.nbytes)
    view = np.frombuffer(memory.buffer, np.float32, 36).reshape(3, 3, 4)
    view[0], view[1] = A, B
    with compiled_add_mul() as compilation:
        execution = nn.Execution(compilation)
        execution.set_reusable(True)
        execution.set_input_from_memory(0, memory, 0, A.nbytes)
        execution.set_input_from_memory(1, memory, A.nbytes, A.nbytes)
        execution.set_output_from_memory(0, memory, 2 * A.nbytes, A.nbytes)
        execution.compute()
        np.testing.assert_array_equal(view[2], expected(A, B))
        del view
        memory.close()
        with pytest.raises(nn.NNError) as info:
            execution.compute()
        assert info.value.code == nn.ResultCode.BAD_DATA
        execution.close()


def test_a_closed_execution_refuses_to_compute_and_close_is_idempotent():
    out = np.zeros((3, 4), np.float32)
    with compiled_add_mul() as compilation:
        execution = reusable(compilation, A, B, out)
        execution.compute()
        execution.close()
        execution.close()
        with pytest.raises(nn.NNError) as info:
            execution.compute()
        assert info.value.code == nn.ResultCode.BAD_STATE
        assert "closed" in str(info.value)


def test_a_binding_changed_after_an_aborted_start_is_the_one_computed():
    out, other = np.zeros((3, 4), np.float32), np.zeros((3, 4), np.float32)
    with compiled_add_mul() as compilation:
        execution = nn.Execution(compilation)
        execution.set_input(0, A)
        execution.set_input(1, B)
        execution.set_output(0, out)
        busy = nn.Burst(compilation)
        with busy.using(), pytest.raises(nn.NNError):  # in use: the start is aborted
            execution.burst_compute(busy)
        busy.close()
        execution.set_input(0, A + 1)  # still in preparation: re-binding is allowed
        execution.set_output(0, other)
        execution.compute()
        np.testing.assert_array_equal(other, expected(A + 1, B))
        assert not out.any()


# -- bursts ---------------------------------------------------------------------------------------
def test_an_in_process_burst_runs_on_the_callers_thread():
    out = np.zeros((3, 4), np.float32)
    before = set(threading.enumerate())
    with compiled_add_mul() as compilation, nn.Burst(compilation) as burst:
        assert burst.direct
        execution = reusable(compilation, A, B, out)
        for _ in range(3):
            execution.burst_compute(burst)
        assert set(threading.enumerate()) == before  # no burst server thread was started
        np.testing.assert_array_equal(out, expected(A, B))


def test_an_fmq_burst_of_one_request_builds_its_packet_once(monkeypatch):
    import nnburst.hal.burst_controller as controller_module

    built: list[int] = []
    original = controller_module.request_words

    def counting(*args):  # type: ignore[no-untyped-def]
        built.append(1)
        return original(*args)

    monkeypatch.setattr(controller_module, "request_words", counting)
    a, out = A.copy(), np.zeros((3, 4), np.float32)
    with compiled_add_mul() as compilation, FmqBurst(compilation) as burst:
        assert not burst.direct
        execution = reusable(compilation, a, B, out)
        for k in range(5):
            a[...] = A - k
            execution.burst_compute(burst)
            np.testing.assert_array_equal(out, expected(A - k, B))
    assert len(built) == 1


# -- the spin policy ------------------------------------------------------------------------------
def test_spin_policy_keeps_spinning_while_answers_come_within_the_window():
    policy = SpinPolicy(50_000)
    windows = []
    for _ in range(1000):
        windows.append(policy.next_window())
        policy.record(windows[-1], 10_000 if windows[-1] else 60_000)  # sleeping is slower
    assert policy.spinning
    assert windows.count(0) == 1000 // SLEEP_SAMPLE_EVERY  # the samples of sleeping, only
    assert windows.count(50_000) == 1000 - windows.count(0)
    assert policy.spun_ns == 10_000 and policy.slept_ns == 60_000


def test_spin_policy_closes_when_spinning_catches_answers_later_than_sleeping_would():
    # A busy machine: the spin catches every answer, at 80 us, while a
    # sleeping wait gets its answer in 40 us (the load preempted the peer).
    policy = SpinPolicy(200_000)
    windows = []
    for _ in range(5000):
        windows.append(policy.next_window())
        policy.record(windows[-1], 80_000 if windows[-1] else 40_000)
    first_sample = windows.index(0)
    assert first_sample == SLEEP_SAMPLE_EVERY - 1  # spins until it knows what sleeping costs
    assert windows[first_sample + 1 : first_sample + 1 + MISSES] == [200_000] * MISSES
    assert windows[first_sample + 1 + MISSES] == 0  # then closed
    later = windows[first_sample + 1 + MISSES :]
    assert sum(w > 0 for w in later) < 0.01 * len(later)  # only the probes spin
    assert set(later) == {0, PROBE_FACTOR * 200_000}
    assert not policy.spinning

    # The load goes: spinning answers in 10 us, sleeping still in 40 us.
    for _ in range(3000):
        window = policy.next_window()
        policy.record(window, 10_000 if window else 40_000)
    assert policy.spinning


def test_spin_policy_closes_after_misses_and_probes_with_growing_pauses():
    policy = SpinPolicy(50_000)
    for _ in range(MISSES):
        policy.record(policy.next_window(), 900_000)
    assert not policy.spinning
    assert [policy.next_window() for _ in range(FIRST_PAUSE)] == [0] * FIRST_PAUSE
    probe = policy.next_window()
    assert probe == PROBE_FACTOR * 50_000  # room for waking a peer that stopped spinning too
    policy.record(probe, 900_000)  # the probe missed: closed again, for twice as long
    assert [policy.next_window() for _ in range(2 * FIRST_PAUSE)] == [0] * (2 * FIRST_PAUSE)
    probe = policy.next_window()
    policy.record(probe, 1_000)  # a hit: open for good
    assert policy.spinning
    policy.record(policy.next_window(), 900_000)
    assert policy.spinning  # one miss alone does not close it


def test_a_zero_window_never_spins():
    policy = SpinPolicy(0)
    for _ in range(5):
        window = policy.next_window()
        assert window == 0
        policy.record(window, 10**9)


class SlowExecutor(IBurstExecutorWithCache):
    """Takes ``delay_s`` per execution: longer than the client's spin window."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def is_cache_entry_present(self, slot: int) -> bool:
        return True

    def add_cache_entry(self, memory, slot: int) -> None:  # type: ignore[no-untyped-def]
        pass

    def remove_cache_entry(self, slot: int) -> None:
        pass

    def execute(
        self, request: Request, slots: Sequence[int], measure: MeasureTiming
    ) -> ExecutionResult:
        time.sleep(self.delay_s)
        return ErrorStatus.NONE, [], NO_TIMING


class SlowPreparedModel:
    def configure_execution_burst(self, callback, request_channel, result_channel):  # type: ignore[no-untyped-def]
        context = ExecutionBurstServer.create(
            callback, request_channel, result_channel, SlowExecutor(0.002), polling_window_us=50
        )
        return ErrorStatus.NONE, context


def test_a_burst_client_stops_spinning_for_a_server_slower_than_its_window():
    with ExecutionBurstController.create(SlowPreparedModel(), polling_window_us=50) as controller:
        assert controller._spin.spinning
        for _ in range(WARM_UP + MISSES):  # a burst's first waits are not judged
            status, *_ = controller.compute(Request([], [], []), MeasureTiming.NO, [])
            assert status == ErrorStatus.NONE
        assert not controller._spin.spinning


# -- allocations ----------------------------------------------------------------------------------
def retained_bytes(run, executions: int) -> int:  # type: ignore[no-untyped-def]
    """Bytes still allocated after ``executions`` runs that were not before (tracemalloc)."""
    for _ in range(200):
        run()  # warm up: caches, first-call setup, the server's kept execution
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(executions):
            run()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    growth = after.compare_to(before, "filename")
    return sum(stat.size_diff for stat in growth if stat.size_diff > 0)


@pytest.mark.parametrize("path", ["fmq burst", "direct burst", "compute"])
def test_steady_state_executions_retain_nothing(path):
    """1,000 executions may not leave memory behind on either side of a burst:
    the client, and the server thread (traced too: it runs in this process)."""
    a, out = A.copy(), np.zeros((3, 4), np.float32)
    with compiled_add_mul() as compilation:
        burst = (FmqBurst if path == "fmq burst" else nn.Burst)(compilation)
        with burst, reusable(compilation, a, B, out) as execution:
            if path == "compute":
                run = execution.compute
            else:

                def run() -> None:
                    execution.burst_compute(burst)

            grown = retained_bytes(run, 1000)
    # A per-execution leak of even one small object would be tens of kilobytes.
    assert grown < 4096, f"{grown} bytes retained over 1000 executions"
    np.testing.assert_array_equal(out, expected(A, B))


class WedgedPreparedModel:
    """A driver whose executions take far longer than the client will wait."""

    def configure_execution_burst(self, callback, request_channel, result_channel):  # type: ignore[no-untyped-def]
        context = ExecutionBurstServer.create(
            callback, request_channel, result_channel, SlowExecutor(1.0)
        )
        return ErrorStatus.NONE, context


def test_a_burst_without_a_deadline_stops_waiting_for_a_wedged_driver():
    """Issue 15: every wait on the burst path is bounded; past the limit the
    burst is closed (its server told) and reports the device unavailable."""
    controller = ExecutionBurstController.create(WedgedPreparedModel(), wait_limit_s=0.2)
    status, *_ = controller.compute(Request([], [], []), MeasureTiming.NO, [])
    assert status == ErrorStatus.DEVICE_UNAVAILABLE
    assert controller.closed
