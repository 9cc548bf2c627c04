"""The burst client's C path (``ExecutionBurstController.arm_repeat`` /
``repeat``, ``nnb_burst_repeat``): a repeated execution copies its inputs in,
round-trips and copies its outputs back in one C call, and everything else
(another answer, a deadline, a dead server, a freed memory, a raw packet)
goes the way the Python path goes.  With the server in a thread, and in a
service process through the public runtime."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import nnburst as nn
from nnburst import tracing
from nnburst.codes import ErrorStatus
from nnburst.cpu.driver import cpu_device
from nnburst.errors import BadDataError, BadStateError
from nnburst.hal.burst_controller import ExecutionBurstController
from nnburst.hal.burst_server import ExecutionBurstServer
from nnburst.hal.interfaces import IPreparedModel
from nnburst.hal.packets import deserialize_result
from nnburst.hal.types import MeasureTiming, Timing
from nnburst.service import remote
from nnburst.tools import trace_summary
from nnburst.tools.benchmarks.runtime_paths import add_mul_model

from .burst_models import NBYTES, SHAPE, Pools, add_model
from .test_burst import open_driver
from .test_service import ServiceProcess, healthy_service


class Switchable(IPreparedModel):
    """The test model, whose executions fail while ``failing`` is set and
    wait while ``held`` is clear (a server in this process, run in Python)."""

    def __init__(self) -> None:
        self.model = cpu_device().prepare_model(add_model())
        self.failing = False
        self.held = threading.Event()
        self.held.set()
        self.entered = threading.Event()

    def execute_synchronously(self, request, measure, **_):  # type: ignore[no-untyped-def]
        self.entered.set()
        assert self.held.wait(60), "the test never let the execution go"
        if self.failing:
            return ErrorStatus.GENERAL_FAILURE, [], Timing()
        return self.model.execute_synchronously(request, measure)

    def configure_execution_burst(self, callback, request_channel, result_channel):  # type: ignore[no-untyped-def]
        return 0, ExecutionBurstServer.create(callback, request_channel, result_channel, self)


class Caller:
    """The caller's own numpy buffers, copied in and out of the shared pools as a
    runtime ``Burst`` copies them through its staging memory."""

    def __init__(self, pools: Pools) -> None:
        self.a = np.zeros(SHAPE, np.float32)
        self.b = np.full(SHAPE, 0.5, np.float32)
        self.c = np.full(SHAPE, -1.0, np.float32)
        staged_in = pools.inputs.buffer
        self.copies_in = [
            (memoryview(self.a).cast("B"), staged_in[:NBYTES]),
            (memoryview(self.b).cast("B"), staged_in[NBYTES : 2 * NBYTES]),
        ]
        self.copies_out = [(pools.output.buffer[:NBYTES], memoryview(self.c).cast("B"))]


def armed(controller: ExecutionBurstController, pools: Pools, caller: Caller):
    """The pools' request computed once through Python, then armed."""
    request = pools.request()
    status, _, _, _ = controller.compute(request, MeasureTiming.NO, pools.keys)
    assert status == ErrorStatus.NONE
    assert controller.arm_repeat(request, pools.keys, caller.copies_in, caller.copies_out)
    return request


@pytest.fixture
def pools() -> Iterator[Pools]:
    p = Pools()
    yield p
    p.close()


@pytest.fixture
def switched(pools: Pools) -> Iterator[tuple[Switchable, ExecutionBurstController, Caller, Any]]:
    """A burst of the Switchable model in this process, its request armed."""
    model = Switchable()
    with ExecutionBurstController.create(model) as controller:
        caller = Caller(pools)
        yield model, controller, caller, armed(controller, pools, caller)


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_repeat_copies_in_round_trips_and_copies_back_in_one_call(mode, pools):
    with (
        open_driver(mode) as d,
        ExecutionBurstController.create(d.prepared, polling_window_us=50) as controller,
    ):
        caller = Caller(pools)
        request = armed(controller, pools, caller)
        rng = np.random.default_rng(7)
        for _ in range(40):
            caller.a[:] = rng.standard_normal(SHAPE, np.float32)
            status, shapes, timing, copied = controller.repeat(request)
            assert (status, copied, timing) == (ErrorStatus.NONE, True, Timing())
            assert [s.dimensions for s in shapes] in ([(3, 4)], [])
            np.testing.assert_array_equal(caller.c, caller.a + caller.b)
        assert controller.repeated == 40


def test_an_unexpected_answer_is_parsed_and_nothing_is_copied_back(switched):
    model, controller, caller, request = switched
    model.failing = True
    caller.c[:] = 7.0
    assert controller.repeat(request) == (ErrorStatus.GENERAL_FAILURE, [], Timing(), False)
    assert np.all(caller.c == 7.0)
    model.failing = False
    caller.a[:] = 3.0
    status, _, _, copied = controller.repeat(request)
    assert (status, copied) == (ErrorStatus.NONE, True)
    assert np.all(caller.c == 3.5)
    assert controller.repeated == 1


def test_a_repeat_past_its_deadline_is_missed_and_its_late_answer_dropped(switched, pools):
    model, controller, caller, request = switched
    model.held.clear()
    model.entered.clear()
    soon = time.monotonic_ns() + 20_000_000
    assert controller.repeat(request, soon) == (
        ErrorStatus.MISSED_DEADLINE_TRANSIENT,
        [],
        Timing(),
        False,
    )
    assert model.entered.is_set()
    # The answer is owed: the C path sends nothing until the Python path drained it.
    assert controller.repeat(request) is None
    past = time.monotonic_ns() - 1
    assert controller.compute(request, MeasureTiming.NO, pools.keys, past)[0] == (
        ErrorStatus.MISSED_DEADLINE_TRANSIENT
    )
    model.held.set()
    caller.a[:] = 2.0
    pools.a[:] = 2.0  # the Python path reads the pools themselves
    assert controller.compute(request, MeasureTiming.NO, pools.keys)[0] == ErrorStatus.NONE
    caller.a[:] = 4.0
    status, _, _, copied = controller.repeat(request)
    assert (status, copied) == (ErrorStatus.NONE, True)
    assert np.all(caller.c == 4.5)


def test_a_second_execution_while_one_is_in_flight_is_refused(switched):
    model, controller, caller, request = switched
    model.held.clear()
    model.entered.clear()
    results = []
    thread = threading.Thread(target=lambda: results.append(controller.repeat(request)))
    thread.start()
    assert model.entered.wait(30)
    with pytest.raises(BadStateError):
        controller.repeat(request)
    model.held.set()
    thread.join(30)
    assert results[0][0] == ErrorStatus.NONE


def test_a_repeat_without_a_deadline_stops_waiting_at_the_wedged_server_limit(pools):
    """No deadline: C waits the controller's limit from the call (deadline 0),
    neither at once nor for ever; then the burst is closed, as compute does."""
    model = Switchable()
    with ExecutionBurstController.create(model, wait_limit_s=0.3) as controller:
        caller = Caller(pools)
        request = armed(controller, pools, caller)
        closing = []
        close = controller.close
        controller.close = lambda: closing.append(time.monotonic()) or close()  # type: ignore[method-assign]
        model.held.clear()
        threading.Timer(3.0, model.held.set).start()  # then the server can stop
        started = time.monotonic()
        status, _, _, copied = controller.repeat(request)
        assert (status, copied) == (ErrorStatus.DEVICE_UNAVAILABLE, False)
        assert 0.25 <= closing[0] - started < 2.5  # gave up at the limit, not before
        assert controller.closed


def test_only_a_plain_success_of_the_last_request_is_armed(pools):
    with ExecutionBurstController.create(cpu_device().prepare_model(add_model())) as controller:
        caller = Caller(pools)
        request = pools.request()
        copies = (caller.copies_in, caller.copies_out)
        assert not controller.arm_repeat(request, pools.keys, *copies)  # nothing sent yet
        controller.compute(request, MeasureTiming.YES, pools.keys)
        assert not controller.arm_repeat(request, pools.keys, *copies)  # its timing changes
        other = pools.request()
        controller.compute(other, MeasureTiming.NO, pools.keys)
        assert not controller.arm_repeat(request, pools.keys, *copies)  # not the last one
        assert controller.repeat(request) is None
        assert controller.arm_repeat(other, pools.keys, *copies)
        third = pools.request()
        controller.compute(third, MeasureTiming.NO, pools.keys)
        wrong = [(caller.copies_in[0][0], pools.inputs.buffer[:4])]  # sizes differ
        with pytest.raises(BadDataError):
            controller.arm_repeat(third, pools.keys, wrong, [])
        read_only = [(caller.copies_in[0][0], memoryview(bytes(NBYTES)))]
        with pytest.raises(BadDataError, match="read-only"):
            controller.arm_repeat(third, pools.keys, [], read_only)


def test_freeing_a_memory_disarms_and_a_raw_packet_does_not_reach_the_repeat(pools):
    with ExecutionBurstController.create(cpu_device().prepare_model(add_model())) as controller:
        caller = Caller(pools)
        request = armed(controller, pools, caller)
        # A raw packet overwrites the request buffer; the next repeat writes its own again.
        status, _, _ = deserialize_result(controller.send_packet(np.zeros(6, "<u4")))
        assert status != ErrorStatus.NONE
        caller.a[:] = 1.0
        assert controller.repeat(request)[:1] == (ErrorStatus.NONE,)
        assert np.all(caller.c == 1.5)
        extra = nn.Memory.create_shared(64)
        controller.slots.get_slots([extra], [extra])
        controller.free_memory(extra)  # its slot may come back as another memory's
        extra.close()
        assert controller.repeat(request) is None
        assert controller.repeated == 0


# -- through the public runtime, on a driver service ------------------------------------


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    yield from healthy_service(str(tmp_path_factory.mktemp("repeat") / "driver.sock"))


def service_device(path: str, monkeypatch: pytest.MonkeyPatch) -> nn.Device:
    remote.disconnect_all()
    monkeypatch.setenv("NNBURST_SERVICES", path)
    return next(d for d in nn.get_devices() if d.name == "nnburst-sample-all")


def bursts(
    device: nn.Device, setting: str = ""
) -> Iterator[tuple[nn.Execution, nn.Burst, list[np.ndarray]]]:
    """One reusable execution of ADD+MUL and a burst, on ``device``; ``setting``
    "timeout" or "timing" sets that too."""
    work = add_mul_model()
    with nn.Compilation(work.model, devices=[device]) as compilation:
        compilation.set_preference(nn.PreferenceCode.FAST_SINGLE_ANSWER)
        compilation.finish()
        with nn.Burst(compilation) as burst:
            execution = nn.Execution(compilation)
            execution.set_reusable(True)
            if setting == "timeout":
                execution.set_timeout(30_000_000_000)
            elif setting == "timing":
                execution.set_measure_timing(True)
            buffers = [np.zeros((3, 4), np.float32) for _ in range(3)]
            execution.set_input(0, buffers[0])
            execution.set_input(1, buffers[1])
            execution.set_output(0, buffers[2])
            yield execution, burst, buffers


def test_runtime_bursts_to_a_service_repeat_in_c_and_see_every_new_input(service, monkeypatch):
    device = service_device(service.path, monkeypatch)
    try:
        for execution, burst, (a, b, out) in bursts(device):
            rng = np.random.default_rng(3)
            for _ in range(30):
                a[:] = rng.standard_normal((3, 4), np.float32)
                b[:] = rng.standard_normal((3, 4), np.float32)
                execution.burst_compute(burst)
                np.testing.assert_array_equal(out, (a + b) * np.float32(0.5))
            controller = burst._controller
            assert controller is not None and controller.repeated >= 28
    finally:
        remote.disconnect_all()


def test_two_executions_taking_turns_on_one_burst_get_their_own_results(service, monkeypatch):
    device = service_device(service.path, monkeypatch)
    try:
        for first, burst, (a, b, out) in bursts(device):
            second = nn.Execution(burst.compilation)
            second.set_reusable(True)
            a2, b2, out2 = (np.full((3, 4), v, np.float32) for v in (10.0, 20.0, 0.0))
            second.set_input(0, a2)
            second.set_input(1, b2)
            second.set_output(0, out2)
            for k in range(12):
                a[:] = k
                b[:] = 1.0
                a2[:] = -k
                first.burst_compute(burst)
                second.burst_compute(burst)
                assert np.all(out == (k + 1.0) * 0.5) and np.all(out2 == (20.0 - k) * 0.5)
    finally:
        remote.disconnect_all()


def test_killing_the_service_between_repeats_ends_them_with_unavailable_device(
    tmp_path, monkeypatch
):
    proc = ServiceProcess(str(tmp_path / "driver.sock"))
    try:
        device = service_device(proc.path, monkeypatch)
        for execution, burst, (a, _, _) in bursts(device):
            for _ in range(5):
                execution.burst_compute(burst)
            assert burst._controller is not None and burst._controller.repeated >= 3
            os.kill(proc.pid, signal.SIGKILL)
            started = time.monotonic()
            with pytest.raises(nn.NNError) as error:
                # Until the death is seen (the threads it killed may answer for a few
                # milliseconds more); each call is bounded.
                while time.monotonic() - started < 30:
                    a[:] = 1.0
                    execution.burst_compute(burst)
            assert error.value.code in (
                nn.ResultCode.UNAVAILABLE_DEVICE,
                nn.ResultCode.DEAD_OBJECT,
                nn.ResultCode.OP_FAILED,
            )
            assert time.monotonic() - started < 30
    finally:
        remote.disconnect_all()
        proc.kill()


def computes(execution: nn.Execution, burst: nn.Burst, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many of the next five burst_computes went the whole way (Burst.run)."""
    runs = []
    real = nn.Burst.run
    monkeypatch.setattr(nn.Burst, "run", lambda self, bound: runs.append(1) or real(self, bound))
    for _ in range(5):
        execution.burst_compute(burst)
    monkeypatch.setattr(nn.Burst, "run", real)
    return len(runs)


def test_a_repeated_burst_compute_skips_the_runtime_path_only_when_nothing_asks_for_it(
    service, monkeypatch, tmp_path
):
    """Execution.burst_compute offers an armed request to Burst.repeat first:
    a plain reusable execution's repeats never reach Burst.run, while a
    timeout, timing or tracing keeps them on the whole path, and a burst
    that is closed, busy or of another compilation is refused as before."""
    device = service_device(service.path, monkeypatch)
    try:
        for execution, burst, (a, b, out) in bursts(device):
            execution.burst_compute(burst)
            execution.burst_compute(burst)  # armed from here
            assert computes(execution, burst, monkeypatch) == 0
            a[:] = 2.0
            b[:] = 4.0
            execution.burst_compute(burst)
            assert np.all(out == 3.0)
            # Tracing on: every call is spanned, so it takes the whole path.
            tracing.start(tmp_path / "trace.json")
            try:
                assert computes(execution, burst, monkeypatch) == 5
            finally:
                path = tracing.stop()
            assert path is not None
            spans = [e["name"] for e in trace_summary.load(path) if e.get("ph") == "X"]
            assert spans.count("[NN_LR_PE]burst_compute") == 5
            assert computes(execution, burst, monkeypatch) == 0
            # Another compilation's burst: BAD_DATA, as on the first call.
            with nn.Compilation(add_mul_model().model, devices=[device]) as other:
                other.finish()
                with nn.Burst(other) as foreign, pytest.raises(BadDataError):
                    execution.burst_compute(foreign)
            # The miss sent the next call the whole way once, which armed it again.
            assert computes(execution, burst, monkeypatch) == 1
            # A burst in use by another execution: BAD_STATE, nothing sent.
            sent = burst._controller.repeated
            with burst.using(), pytest.raises(BadStateError):
                execution.burst_compute(burst)
            assert burst._controller.repeated == sent
            execution.burst_compute(burst)  # and the execution is still usable
            burst.close()
            with pytest.raises(BadStateError):
                execution.burst_compute(burst)
        for setting in ("timeout", "timing"):
            for execution, burst, _ in bursts(device, setting):
                execution.burst_compute(burst)
                execution.burst_compute(burst)
                assert computes(execution, burst, monkeypatch) == 5, setting
    finally:
        remote.disconnect_all()
