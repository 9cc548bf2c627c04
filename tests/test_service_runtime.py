"""The driver service through the public runtime (``import nnburst as nn``).

Everything here runs against real ``python -m nnburst.tools.serve``
processes: discovery with ``nn.get_devices()``, supported operations,
partitioning decisions, CPU fallback after injected driver failures,
``createForDevices`` errors, cross-process bursts with ``nn.Memory``
arguments, the conformance vectors through a service device, and SIGKILL of
either side.  (``tests/test_service.py`` tests the same service at the HAL
level.)
"""

from __future__ import annotations

import gc
import logging
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import nnburst as nn
from nnburst._version import __version__
from nnburst.service import remote, wire
from nnburst.service.burst import RemoteBurstContext
from nnburst.tools.benchmarks.runtime_paths import add_mul_model

from .blocking import sleeping_service_process, wait_until
from .cts_vectors import check_outputs, iter_vectors, parse_vector
from .peers import REPO
from .test_cts_runtime import build_model
from .test_service import PROMPTLY, ServiceProcess, healthy_service

ALL, FLOAT_FAST, QUANT, MINIMAL = (
    "nnburst-sample-all",
    "nnburst-sample-float-fast",
    "nnburst-sample-quant",
    "nnburst-sample-minimal",
)
SERVICE_DEVICES = [ALL, FLOAT_FAST, QUANT, MINIMAL]
REFERENCE = "nnburst-reference"

#: What a runtime call may raise when its service dies (DEAD_OBJECT: a control
#: call; UNAVAILABLE_DEVICE: an execution; OP_FAILED: a driver error).
DEAD = (nn.ResultCode.DEAD_OBJECT, nn.ResultCode.UNAVAILABLE_DEVICE, nn.ResultCode.OP_FAILED)


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """One healthy service shared by the module."""
    yield from healthy_service(str(tmp_path_factory.mktemp("rt") / "driver.sock"))


@pytest.fixture
def services(service: ServiceProcess, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServiceProcess]:
    """NNBURST_SERVICES names the module's service for this test; the discovery cache is reset after."""
    remote.disconnect_all()
    monkeypatch.setenv("NNBURST_SERVICES", service.path)
    # These tests pin what the declared capabilities choose; what reaching a
    # service costs is left out here and tested on its own below.
    monkeypatch.setattr(remote.RemoteDevice, "reach_us", 0.0)
    yield service
    remote.disconnect_all()


@pytest.fixture
def faulty(tmp_path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], ServiceProcess]]:
    """Start a private service with ``NNBURST_SERVICE_FAULT`` set; it is the only one visible."""
    started: list[ServiceProcess] = []

    def start(fault: str) -> ServiceProcess:
        proc = ServiceProcess(
            str(tmp_path / f"f{len(started)}.sock"), {"NNBURST_SERVICE_FAULT": fault}
        )
        started.append(proc)
        remote.disconnect_all()
        monkeypatch.setenv("NNBURST_SERVICES", proc.path)
        monkeypatch.setattr(remote.RemoteDevice, "reach_us", 0.0)  # as in ``services``
        return proc

    yield start
    remote.disconnect_all()
    for proc in started:
        proc.kill()


def device(name: str) -> nn.Device:
    return next(d for d in nn.get_devices() if d.name == name)


def open_fds() -> int:
    """Open fds once cached connections and garbage from earlier tests are gone."""
    remote.disconnect_all()
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


# -- models ------------------------------------------------------------------------------

F32 = nn.OperandCode.TENSOR_FLOAT32
Q8 = nn.OperandCode.TENSOR_QUANT8_ASYMM
SHAPE = (2, 3)


def mixed_model() -> nn.Model:
    """float ADD → float LOGISTIC, and a quant8 LOGISTIC: outputs [float, quant]."""
    model = nn.Model()
    f = nn.OperandType(F32, SHAPE)
    a, b = model.add_operand(f), model.add_operand(f)
    fuse = model.add_operand(nn.OperandType(nn.OperandCode.INT32))
    summed, fout = model.add_operand(f), model.add_operand(f)
    qin = model.add_operand(nn.OperandType(Q8, SHAPE, 0.5, 128))
    qout = model.add_operand(nn.OperandType(Q8, SHAPE, 1 / 256, 0))
    model.set_operand_value(fuse, np.int32(nn.FuseCode.NONE))
    model.add_operation(nn.OperationCode.ADD, [a, b, fuse], [summed])
    model.add_operation(nn.OperationCode.LOGISTIC, [summed], [fout])
    model.add_operation(nn.OperationCode.LOGISTIC, [qin], [qout])
    model.identify_inputs_and_outputs([a, b, qin], [fout, qout])
    model.finish()
    return model


MIXED_INPUTS = [
    np.linspace(-2, 2, 6, dtype=np.float32).reshape(SHAPE),
    np.full(SHAPE, 0.25, np.float32),
    np.array([[0, 64, 120], [128, 200, 255]], np.uint8),
]


def compute(compilation: nn.Compilation, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """One ``compute`` with numpy arguments; returns the outputs."""
    model_outputs = compilation.model.output_types
    execution = nn.Execution(compilation)
    for i, value in enumerate(inputs):
        execution.set_input(i, value)
    outputs = [np.zeros(info.dimensions, info.dtype) for info in model_outputs]
    for i, out in enumerate(outputs):
        execution.set_output(i, out)
    execution.compute()
    return outputs


def compiled(
    model: nn.Model,
    devices: list[nn.Device] | None = None,
    preference: nn.PreferenceCode = nn.PreferenceCode.FAST_SINGLE_ANSWER,
) -> nn.Compilation:
    compilation = nn.Compilation(model, devices)
    compilation.set_preference(preference)
    compilation.finish()
    return compilation


def reference_outputs(model: nn.Model, inputs: list[np.ndarray]) -> list[np.ndarray]:
    with compiled(model, [device(REFERENCE)]) as compilation:
        return compute(compilation, inputs)


# -- discovery -----------------------------------------------------------------------------


def test_get_devices_lists_the_cpu_and_the_service_devices(services):
    devices = nn.get_devices()
    assert [d.name for d in devices] == [REFERENCE, *SERVICE_DEVICES]
    assert nn.get_devices() == devices  # the same Device objects on every call
    types = {d.name: d.type for d in devices}
    assert types == {
        REFERENCE: nn.DeviceTypeCode.CPU,
        ALL: nn.DeviceTypeCode.CPU,
        FLOAT_FAST: nn.DeviceTypeCode.GPU,
        QUANT: nn.DeviceTypeCode.ACCELERATOR,
        MINIMAL: nn.DeviceTypeCode.ACCELERATOR,
    }
    for d in devices[1:]:
        vendor, _, name = d.name.partition("-")
        assert vendor == "nnburst" and name.startswith("sample-")
        assert d.name in d.version and __version__ in d.version  # changes with every release
        d.wait()  # ready: returns at once
    levels = {d.name: d.feature_level for d in devices}
    assert levels[MINIMAL] == 27
    assert levels[ALL] == levels[FLOAT_FAST] == levels[QUANT] == levels[REFERENCE] >= 30


def test_a_restarted_service_is_discovered_again(tmp_path, monkeypatch):
    """The discovery cache is per path: after the service goes, its devices go; a new one is found."""
    first = ServiceProcess(str(tmp_path / "a.sock"))
    try:
        monkeypatch.setenv("NNBURST_SERVICES", first.path)
        assert len(nn.get_devices()) == 5
        old = device(ALL)
        old.wait()
        first.kill()
        wait_until(lambda: len(nn.get_devices()) == 1, "discovery dropped the dead service")
        assert [d.name for d in nn.get_devices()] == [REFERENCE]
        with pytest.raises(nn.NNError) as gone:
            old.wait()
        assert gone.value.code == nn.ResultCode.UNAVAILABLE_DEVICE
        # Compiling for it names the device as gone, not the model as bad.
        with (
            pytest.raises(nn.NNError) as gone,
            nn.Compilation(add_mul_model().model, [old]) as compilation,
        ):
            compilation.finish()
        assert gone.value.code == nn.ResultCode.UNAVAILABLE_DEVICE
        second = ServiceProcess(first.path)
        try:
            assert [d.name for d in nn.get_devices()] == [REFERENCE, *SERVICE_DEVICES]
        finally:
            remote.disconnect_all()
            assert second.stop() == 0
    finally:
        remote.disconnect_all()
        first.kill()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (REFERENCE, [True, True, True]),
        (ALL, [True, True, True]),
        (FLOAT_FAST, [True, True, False]),
        (QUANT, [False, False, True]),
        (MINIMAL, [True, False, False]),
    ],
)
def test_supported_operations_per_device(services, name, expected):
    model = mixed_model()
    assert model.get_supported_operations_for_devices([device(name)]) == expected


def test_supported_operations_of_several_devices_are_the_union(services):
    model = mixed_model()
    assert model.get_supported_operations_for_devices([device(MINIMAL), device(QUANT)]) == [
        True,
        False,
        True,
    ]


# -- partitioning ---------------------------------------------------------------------------

_CHOICE = re.compile(r"findBestDeviceForEachOperation\((\w+)#(\d+)\): \d+ \((\S+)\)")


@pytest.mark.parametrize(
    ("preference", "expected"),
    [
        # ADD: minimal declares 0.4; float LOGISTIC: float-fast 0.8; quant LOGISTIC: quant 0.6.
        (nn.PreferenceCode.FAST_SINGLE_ANSWER, [MINIMAL, FLOAT_FAST, QUANT]),
        # power: ADD minimal 0.5; float LOGISTIC the reference CPU 1.0 (float-fast 1.2); quant 0.4.
        (nn.PreferenceCode.LOW_POWER, [MINIMAL, REFERENCE, QUANT]),
    ],
    ids=["fast-single-answer", "low-power"],
)
def test_a_mixed_model_is_partitioned_as_the_capabilities_say(
    services, caplog, preference, expected
):
    model = mixed_model()
    with caplog.at_level(logging.INFO, logger="nnburst.manager"):
        compilation = compiled(model, preference=preference)
    choices = {}
    for record in caplog.records:
        if record.name == "nnburst.manager" and (m := _CHOICE.search(record.getMessage())):
            choices[int(m.group(2))] = (m.group(1), m.group(3))
    assert choices == {
        0: ("ADD", expected[0]),
        1: ("LOGISTIC", expected[1]),
        2: ("LOGISTIC", expected[2]),
    }
    assert not any("only one best device" in r.getMessage() for r in caplog.records)
    assert compilation.device is None  # several devices: the plan's steps
    steps = compilation.prepared_model.steps
    assert sorted(op for s in steps for op in s.operations) == [0, 1, 2]
    assert {s.device.name for s in steps} == set(expected)
    with compilation:
        got = compute(compilation, MIXED_INPUTS)
    want = reference_outputs(model, MIXED_INPUTS)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_float_model_goes_whole_to_one_best_device(services, caplog):
    work = add_mul_model()  # ADD and MUL: the minimal device declares the best float time
    with caplog.at_level(logging.INFO, logger="nnburst.manager"):
        compilation = compiled(work.model)
    assert any(
        f"only one best device: {MINIMAL}" in r.getMessage()
        for r in caplog.records
        if r.name == "nnburst.manager"
    )
    with compilation:
        assert compilation.device.name == MINIMAL
        np.testing.assert_array_equal(
            compute(compilation, work.inputs)[0], (work.inputs[0] + work.inputs[1]) * 0.5
        )


# -- fallback and createForDevices ----------------------------------------------------------


def test_create_for_devices_without_a_needed_operation_is_bad_data(services):
    compilation = nn.Compilation(mixed_model(), [device(MINIMAL)])
    with pytest.raises(nn.NNError) as info:
        compilation.finish()
    assert info.value.code == nn.ResultCode.BAD_DATA
    assert "LOGISTIC" in str(info.value)
    with pytest.raises(nn.NNError) as info:
        nn.Execution(compilation)
    assert info.value.code == nn.ResultCode.BAD_STATE
    # Two devices that together cover the model are enough.
    with compiled(mixed_model(), [device(MINIMAL), device(FLOAT_FAST), device(QUANT)]) as ok:
        got = compute(ok, MIXED_INPUTS)
    for g, w in zip(got, reference_outputs(mixed_model(), MIXED_INPUTS)):
        np.testing.assert_array_equal(g, w)


def test_a_failing_partition_is_retried_on_the_cpu(faulty, caplog):
    faulty("execute:fail")
    model = mixed_model()
    with caplog.at_level(logging.INFO, logger="nnburst.manager"), compiled(model) as compilation:
        assert len(compilation.prepared_model.steps) == 3
        got = compute(compilation, MIXED_INPUTS)
    retried = [r.getMessage() for r in caplog.records if "retrying it on the CPU" in r.getMessage()]
    assert len(retried) == 3, retried  # every step failed in the service and ran on the CPU
    for g, w in zip(got, reference_outputs(model, MIXED_INPUTS)):
        np.testing.assert_array_equal(g, w)


def test_a_failing_prepare_compiles_the_whole_model_for_the_cpu(faulty, caplog):
    faulty("prepare:fail")
    with (
        caplog.at_level(logging.INFO, logger="nnburst.manager"),
        compiled(mixed_model()) as compilation,
    ):
        assert compilation.device.name == REFERENCE
        got = compute(compilation, MIXED_INPUTS)
    assert any("compiling the whole model for the CPU" in r.getMessage() for r in caplog.records)
    for g, w in zip(got, reference_outputs(mixed_model(), MIXED_INPUTS)):
        np.testing.assert_array_equal(g, w)


def test_explicit_devices_surface_an_execution_failure(faulty):
    faulty("execute:fail")
    work = add_mul_model()
    with compiled(work.model, [device(ALL)]) as compilation:
        with pytest.raises(nn.NNError) as info:
            compute(compilation, work.inputs)
    assert info.value.code == nn.ResultCode.OP_FAILED


def test_explicit_devices_surface_a_prepare_failure(faulty):
    faulty("prepare:fail")
    compilation = nn.Compilation(add_mul_model().model, [device(ALL)])
    with pytest.raises(nn.NNError) as info:
        compilation.finish()
    assert info.value.code == nn.ResultCode.OP_FAILED


# -- bursts ----------------------------------------------------------------------------------

NBYTES = 3 * 4 * 4


def _memory_execution(
    compilation: nn.Compilation, inputs: nn.Memory, output: nn.Memory
) -> nn.Execution:
    """ADD+MUL with both inputs in ``inputs`` and the output in ``output``."""
    execution = nn.Execution(compilation)
    execution.set_input_from_memory(0, inputs, 0, NBYTES)
    execution.set_input_from_memory(1, inputs, NBYTES, NBYTES)
    execution.set_output_from_memory(0, output, 0, NBYTES)
    return execution


def test_burst_compute_through_a_service_device_with_memories(services, monkeypatch):
    freed: list[int] = []
    free_memory = RemoteBurstContext.free_memory

    def spy(self, slot):
        freed.append(slot)
        free_memory(self, slot)  # a blocking call: the service has dropped the slot on return

    monkeypatch.setattr(RemoteBurstContext, "free_memory", spy)
    work = add_mul_model()
    inputs = nn.Memory.create_shared(2 * NBYTES)
    output = nn.Memory.create_shared(NBYTES)
    a = np.frombuffer(inputs.buffer, np.float32, 12, 0).reshape(3, 4)
    b = np.frombuffer(inputs.buffer, np.float32, 12, NBYTES).reshape(3, 4)
    with compiled(work.model, [device(ALL)]) as compilation, nn.Burst(compilation) as burst:
        assert burst._controller is not None  # a real cross-process burst, not the sync fallback
        execution = _memory_execution(compilation, inputs, output)
        execution.set_reusable(True)
        for i in range(3):
            a[:] = i
            b[:] = 1
            execution.burst_compute(burst)
            assert np.all(np.frombuffer(output.buffer, np.float32, 12) == (i + 1) * 0.5)
        slots = burst._controller.slots
        assert len(slots) == 2
        output.close()  # mid-burst: its slot is freed in the service
        assert len(freed) == 1 and len(slots) == 1
        fresh = nn.Memory.create_shared(NBYTES)
        try:
            a[:] = 5
            # `fresh` reuses the freed slot: a stale mapping in the service would miss the output
            _memory_execution(compilation, inputs, fresh).burst_compute(burst)
            assert np.all(np.frombuffer(fresh.buffer, np.float32, 12) == 3.0)
            # numpy arguments beside a memory: staged into the burst's own memory
            execution = nn.Execution(compilation)
            execution.set_input_from_memory(0, inputs, 0, NBYTES)
            execution.set_input(1, np.full((3, 4), 3, np.float32))
            out = np.zeros((3, 4), np.float32)
            execution.set_output(0, out)
            execution.burst_compute(burst)
            assert np.all(out == 4.0)
        finally:
            fresh.close()
    inputs.close()


def test_a_free_posted_by_a_finalizer_mid_send_retires_its_slot(services, monkeypatch):
    """A memory closed by a GC pass inside a send cannot wait for the service: its free
    is posted, and the slot is never handed to another memory (the service could
    still hold the old one when the next request names it)."""
    work = add_mul_model()
    inputs = nn.Memory.create_shared(2 * NBYTES)
    output = nn.Memory.create_shared(NBYTES)
    with compiled(work.model, [device(ALL)]) as compilation, nn.Burst(compilation) as burst:
        assert burst._controller is not None
        _memory_execution(compilation, inputs, output).burst_compute(burst)
        slots = burst._controller.slots
        old = slots.slot_of(output)
        monkeypatch.setattr(wire.Connection, "sending_here", lambda self: True)
        output.close()
        monkeypatch.undo()
        assert slots.slot_of(output) is None
        fresh = nn.Memory.create_shared(NBYTES)
        try:
            np.frombuffer(inputs.buffer, np.float32)[:] = 2
            _memory_execution(compilation, inputs, fresh).burst_compute(burst)
            assert slots.slot_of(fresh) != old
            assert np.all(np.frombuffer(fresh.buffer, np.float32, 12) == 2.0)
        finally:
            fresh.close()
    inputs.close()


def test_a_request_too_large_for_the_fmq_falls_back_to_the_sync_path(services, monkeypatch):
    """256 inputs of rank 4 need more than the channel's 1024 datums (no API sets a smaller channel)."""
    n = 256
    model = nn.Model()
    piece = nn.OperandType(F32, (1, 1, 1, 1))
    ins = [model.add_operand(piece) for _ in range(n)]
    axis = model.add_operand(nn.OperandType(nn.OperandCode.INT32))
    out = model.add_operand(nn.OperandType(F32, (n, 1, 1, 1)))
    model.set_operand_value(axis, np.int32(0))
    model.add_operation(nn.OperationCode.CONCATENATION, [*ins, axis], [out])
    model.identify_inputs_and_outputs(ins, [out])
    model.finish()
    with compiled(model, [device(ALL)]) as compilation, nn.Burst(compilation) as burst:
        plan = compilation.prepared_model
        sync_calls = []
        execute = plan.execute_synchronously
        monkeypatch.setattr(
            plan, "execute_synchronously", lambda *a, **k: sync_calls.append(1) or execute(*a, **k)
        )
        execution = nn.Execution(compilation)
        for i in range(n):
            execution.set_input(i, np.full((1, 1, 1, 1), i, np.float32))
        result = np.zeros((n, 1, 1, 1), np.float32)
        execution.set_output(0, result)
        execution.burst_compute(burst)
    assert sync_calls == [1]
    assert np.array_equal(result.reshape(-1), np.arange(n, dtype=np.float32))


# -- conformance vectors -----------------------------------------------------------------------

VECTORS = list(iter_vectors())


@pytest.fixture(scope="module")
def sample_all(service: ServiceProcess) -> Iterator[nn.Device]:
    """sample-all of the module's service, for the many vector tests (one connection for all)."""
    previous = os.environ.get("NNBURST_SERVICES")
    remote.disconnect_all()
    os.environ["NNBURST_SERVICES"] = service.path
    try:
        yield device(ALL)
    finally:
        remote.disconnect_all()
        if previous is None:
            os.environ.pop("NNBURST_SERVICES", None)
        else:
            os.environ["NNBURST_SERVICES"] = previous


@pytest.mark.skipif(not VECTORS, reason="no NNAPI conformance vectors found (NNBURST_CTS_DIR)")
@pytest.mark.parametrize("raw", [raw for _, raw in VECTORS], ids=[name for name, _ in VECTORS])
def test_cts_vector_through_a_service_device(sample_all, raw):
    vector = parse_vector(raw)
    model, memory = build_model(vector)
    try:
        if vector.expect_failure:
            with pytest.raises(nn.NNError):
                with compiled(model, [sample_all]) as compilation:
                    compute(compilation, vector.inputs)
            return
        with compiled(model, [sample_all]) as compilation:
            execution = nn.Execution(compilation)
            for i, value in enumerate(vector.inputs):
                execution.set_input(i, value)
            outputs = [np.zeros(e.dimensions, e.values.dtype) for e in vector.outputs]
            for i, out in enumerate(outputs):
                execution.set_output(i, out)
            execution.compute()
        check_outputs(vector, outputs)
    finally:
        if memory is not None:
            memory.close()


# -- peer death --------------------------------------------------------------------------------


def _kill_when_sleeping(proc: ServiceProcess, killed_at: list[float]) -> threading.Thread:
    """SIGKILL the service once it is inside its injected ``sleep`` fault (the
    only service thread that sleeps), so the call is surely in flight."""

    def kill() -> None:
        wait_until(lambda: sleeping_service_process(proc.pid), "the service reached the sleep")
        killed_at.append(time.monotonic())
        os.kill(sleeping_service_process(proc.pid) or proc.pid, signal.SIGKILL)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def _raises_promptly(proc: ServiceProcess, call: Callable[[], object]) -> nn.NNError:
    """Run ``call`` while the service is SIGKILLed inside its 60 s sleep; it must
    raise well before that sleep would have ended (a hang guard, not a stopwatch)."""
    killed_at: list[float] = []
    killer = _kill_when_sleeping(proc, killed_at)
    with pytest.raises(nn.NNError) as info:
        call()
    raised_at = time.monotonic()
    killer.join()
    assert killed_at and raised_at - killed_at[0] < PROMPTLY
    assert info.value.code in DEAD, info.value
    return info.value


def test_sigkill_during_a_burst_compute(faulty):
    fds = open_fds()
    proc = faulty("execute:sleep=60")
    work = add_mul_model()
    memory = nn.Memory.create_shared(3 * NBYTES)
    with compiled(work.model, [device(ALL)]) as compilation, nn.Burst(compilation) as burst:
        execution = nn.Execution(compilation)
        execution.set_input_from_memory(0, memory, 0, NBYTES)
        execution.set_input_from_memory(1, memory, NBYTES, NBYTES)
        execution.set_output_from_memory(0, memory, 2 * NBYTES, NBYTES)
        error = _raises_promptly(proc, lambda: execution.burst_compute(burst))
        assert error.code == nn.ResultCode.UNAVAILABLE_DEVICE
    memory.close()
    remote.disconnect_all()
    proc.kill()
    assert open_fds() == fds


def test_sigkill_during_a_synchronous_execution(faulty):
    fds = open_fds()
    proc = faulty("execute:sleep=60")
    work = add_mul_model()
    with compiled(work.model, [device(ALL)]) as compilation:
        error = _raises_promptly(proc, lambda: compute(compilation, work.inputs))
        assert error.code == nn.ResultCode.UNAVAILABLE_DEVICE
        with pytest.raises(nn.NNError):  # and later executions fail at once
            compute(compilation, work.inputs)
    remote.disconnect_all()
    proc.kill()
    assert open_fds() == fds


def test_sigkill_during_prepare(faulty):
    fds = open_fds()
    proc = faulty("prepare:sleep=60")
    compilation = nn.Compilation(add_mul_model().model, [device(ALL)])
    error = _raises_promptly(proc, compilation.finish)
    assert error.code == nn.ResultCode.DEAD_OBJECT
    remote.disconnect_all()
    proc.kill()
    assert open_fds() == fds
    # the dead service is gone from discovery
    assert [d.name for d in nn.get_devices()] == [REFERENCE]
    remote.disconnect_all()


def test_sigkill_during_a_partitioned_execution_falls_back_to_the_cpu(faulty):
    """Without explicit devices the dead service's step is retried on the CPU."""
    proc = faulty("execute:sleep=60")
    model = mixed_model()
    with compiled(model) as compilation:
        killed_at: list[float] = []
        killer = _kill_when_sleeping(proc, killed_at)
        got = compute(compilation, MIXED_INPUTS)
        assert time.monotonic() - killed_at[0] < PROMPTLY
        killer.join()
    for g, w in zip(got, reference_outputs(model, MIXED_INPUTS)):
        np.testing.assert_array_equal(g, w)


_BURSTING_CLIENT = """
import sys
import numpy as np
import nnburst as nn
from nnburst.tools.benchmarks.runtime_paths import add_mul_model
work = add_mul_model()
device = next(d for d in nn.get_devices() if d.name == "nnburst-sample-all")
compilation = nn.Compilation(work.model, [device])
compilation.finish()
burst = nn.Burst(compilation)
memory = nn.Memory.create_shared(48 * 3)
execution = nn.Execution(compilation)
execution.set_reusable(True)
execution.set_input_from_memory(0, memory, 0, 48)
execution.set_input_from_memory(1, memory, 48, 48)
execution.set_output_from_memory(0, memory, 96, 48)
execution.burst_compute(burst)
print("bursting", flush=True)
while True:
    execution.burst_compute(burst)
"""


def test_a_client_killed_mid_burst_leaves_the_service_healthy(services):
    peer = subprocess.Popen(
        [sys.executable, "-c", _BURSTING_CLIENT],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([peer.stdout], [], [], 20)
        # "bursting" follows the first burst compute; the client then computes
        # in a loop, so the kill lands mid-burst.
        assert ready and peer.stdout.readline().strip() == "bursting"
    finally:
        peer.kill()
        _, stderr = peer.communicate()
    assert peer.returncode == -signal.SIGKILL, stderr
    assert services.alive()
    work = add_mul_model()
    expected = (work.inputs[0] + work.inputs[1]) * 0.5
    with compiled(work.model, [device(ALL)]) as compilation, nn.Burst(compilation) as burst:
        np.testing.assert_array_equal(compute(compilation, work.inputs)[0], expected)
        execution = nn.Execution(compilation)
        out = np.zeros((3, 4), np.float32)
        execution.set_input(0, work.inputs[0])
        execution.set_input(1, work.inputs[1])
        execution.set_output(0, out)
        execution.burst_compute(burst)
        np.testing.assert_array_equal(out, expected)


# -- reused executions ---------------------------------------------------------------------------


@pytest.mark.parametrize("loop_timeout_ns", [None, 3_000_000_000])
def test_a_reused_service_execution_is_right_every_time_and_releases_everything(
    services, loop_timeout_ns
):
    """From its second computation a reusable execution on a service device
    runs over a burst of its own (a loop timeout other than the default keeps
    it on EXECUTE); either way every result is right and close() gives back
    the staging memory, the FMQs and the service's worker."""
    fds = open_fds()
    work = add_mul_model()
    a, b = work.inputs[0].copy(), work.inputs[1]
    out = np.zeros_like(work.output)
    with compiled(work.model, [device(ALL)]) as compilation:
        execution = nn.Execution(compilation)
        execution.set_reusable(True)
        if loop_timeout_ns is not None:
            execution.set_loop_timeout(loop_timeout_ns)
        execution.set_input(0, a)
        execution.set_input(1, b)
        execution.set_output(0, out)
        for k in range(4):
            a[...] = work.inputs[0] + k
            execution.compute()
            np.testing.assert_array_equal(out, (a + b) * np.float32(0.5))
        execution.close()
    assert open_fds() == fds


def test_closing_memories_while_bursts_fetch_new_ones_never_wedges(services):
    """One thread bursts with a fresh Memory each time while another closes the
    previous ones: the service's FREE_MEMORY handling must not wait for a
    worker that is itself waiting for a GET_MEMORIES reply (issue 15, item 2)."""
    work = add_mul_model()
    done: list[int] = []
    to_close: list[nn.Memory] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def closer() -> None:
        while len(done) < 1:
            with lock:
                batch, to_close[:] = list(to_close), []
            for memory in batch:
                memory.close()
            time.sleep(0)

    with compiled(work.model, [device(ALL)]) as compilation, nn.Burst(compilation) as burst:
        thread = threading.Thread(target=closer)
        thread.start()
        try:
            for k in range(200):
                memory = nn.Memory.create_shared(3 * NBYTES)
                view = np.frombuffer(memory.buffer, np.float32, 36).reshape(3, 3, 4)
                view[0], view[1] = work.inputs[0] + k, work.inputs[1]
                execution = nn.Execution(compilation)
                execution.set_timeout(10_000_000_000)  # a wedge fails here instead of hanging
                execution.set_input_from_memory(0, memory, 0, NBYTES)
                execution.set_input_from_memory(1, memory, NBYTES, NBYTES)
                execution.set_output_from_memory(0, memory, 2 * NBYTES, NBYTES)
                try:
                    execution.burst_compute(burst)
                    np.testing.assert_array_equal(
                        view[2], (work.inputs[0] + k + work.inputs[1]) * np.float32(0.5)
                    )
                except BaseException as exc:  # collected and reported below
                    failures.append(exc)
                    break
                finally:
                    del view
                    execution.close()
                    with lock:
                        to_close.append(memory)
        finally:
            done.append(1)
            thread.join()
        for memory in to_close:
            memory.close()
    assert not failures, failures[0]


def test_a_burst_caches_at_most_the_memories_the_service_allows(tmp_path, monkeypatch):
    """Issue 15: `nnburst serve --max-cached-memories N` caps one burst's mappings."""
    proc = ServiceProcess(
        str(tmp_path / "s.sock"), args=("--workers", "1", "--max-cached-memories", "2")
    )
    remote.disconnect_all()
    monkeypatch.setenv("NNBURST_SERVICES", proc.path)
    work = add_mul_model()
    inputs = nn.Memory.create_shared(2 * NBYTES)
    outputs = [nn.Memory.create_shared(NBYTES) for _ in range(2)]
    try:
        device = next(d for d in nn.get_devices() if d.name == "nnburst-sample-all")
        with compiled(work.model, [device]) as compilation, nn.Burst(compilation) as burst:
            _memory_execution(compilation, inputs, outputs[0]).burst_compute(burst)  # 2 cached
            with pytest.raises(nn.NNError):  # a third memory: refused by the service
                _memory_execution(compilation, inputs, outputs[1]).burst_compute(burst)
            outputs[0].close()  # its slot is freed in the service
            np.frombuffer(inputs.buffer, np.float32)[:12] = 1
            np.frombuffer(inputs.buffer, np.float32)[12:] = 3
            _memory_execution(compilation, inputs, outputs[1]).burst_compute(burst)
            assert np.all(np.frombuffer(outputs[1].buffer, np.float32, 12) == 2.0)  # (1 + 3) * 0.5
    finally:
        for memory in (inputs, *outputs):
            memory.close()
        remote.disconnect_all()
        proc.kill()
