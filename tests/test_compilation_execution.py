"""Devices, compilations and executions: results, lifecycles and the CPU driver's request checks."""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest

import nnburst as nn
from nnburst.codes import ErrorStatus
from nnburst.cpu.driver import FEATURE_LEVEL, CpuPreparedModel
from nnburst.hal.interfaces import IDevice, IPreparedModel
from nnburst.hal.memory import MappedMemory
from nnburst.hal.types import (
    NO_TIMING,
    DataLocation,
    MeasureTiming,
    OutputShape,
    Request,
    RequestArgument,
)

from .test_model import (
    F32,
    AddOnlyDevice,
    add_model,
    build_example,
    example_expected,
    raises,
    softmax_model,
)

X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def cpu() -> nn.Device:
    (device,) = [d for d in nn.get_devices() if d.name == "nnburst-reference"]
    return device


def compiled(model: nn.Model | None = None, for_cpu: bool = True) -> nn.Compilation:
    compilation = nn.Compilation(model or build_example(), [cpu()] if for_cpu else None)
    compilation.finish()
    return compilation


def example_execution(
    compilation: nn.Compilation, x: np.ndarray = X
) -> tuple[nn.Execution, np.ndarray]:
    execution = nn.Execution(compilation)
    out = np.zeros((3, 4), np.float32)
    execution.set_input(0, x)
    execution.set_output(0, out)
    return execution, out


# -- devices ----------------------------------------------------------------------------------
def test_cpu_reference_device_is_listed():
    device = cpu()
    assert device.type == nn.DeviceTypeCode.CPU
    assert device.version == f"nnburst-reference {nn.__version__}"
    assert device.feature_level == FEATURE_LEVEL == 30  # ANEURALNETWORKS_FEATURE_LEVEL_4
    assert isinstance(device.hal, IDevice)
    assert nn.get_devices()[0] is nn.get_devices()[0]
    device.wait()


# -- the worked example through every synchronous path ----------------------------------------
def test_compute_gives_the_example_result():
    execution, out = example_execution(compiled(for_cpu=False))
    execution.compute()
    np.testing.assert_allclose(out, example_expected(X), rtol=1e-6)
    assert execution.get_output_operand_dimensions(0) == (3, 4)
    assert execution.get_output_operand_rank(0) == 2


def test_compute_with_constants_from_memory():
    with nn.Memory.create_shared(96) as memory:
        execution, out = example_execution(compiled(build_example(memory)))
        execution.compute()
    np.testing.assert_allclose(out, example_expected(X), rtol=1e-6)


def test_start_compute_gives_the_example_result():
    execution, out = example_execution(compiled())
    execution.start_compute().wait()
    np.testing.assert_allclose(out, example_expected(X), rtol=1e-6)


def test_several_threads_wait_on_one_event():
    execution, out = example_execution(compiled())
    event = execution.start_compute()
    errors: list[BaseException] = []

    def waiter():
        try:
            event.wait()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert not errors and event.done
    np.testing.assert_allclose(out, example_expected(X), rtol=1e-6)


def test_failed_event_raises_in_every_waiter():
    execution = nn.Execution(compiled())
    execution.set_input(0, X)
    execution.set_output(0, np.zeros((3, 4), np.float32))
    execution._prepared = _Failing(ErrorStatus.GENERAL_FAILURE)
    event = execution.start_compute()
    for _ in range(2):
        with raises(nn.ResultCode.OP_FAILED):
            event.wait()


def test_start_compute_with_dependencies_runs_after_them():
    compilation = compiled()
    first, out1 = example_execution(compilation)
    second, out2 = example_execution(compilation, X * 2)
    gate = _Gate(first._prepared)
    first._prepared = gate
    event1 = first.start_compute()
    event2 = second.start_compute_with_dependencies([event1])
    assert not event2.done
    gate.open.set()
    event2.wait()
    np.testing.assert_allclose(out2, example_expected(X * 2), rtol=1e-6)


def test_failed_dependency_fails_the_execution():
    compilation = compiled()
    first, _ = example_execution(compilation)
    first._prepared = _Failing(ErrorStatus.GENERAL_FAILURE)
    second, _ = example_execution(compilation)
    event = second.start_compute_with_dependencies([first.start_compute()])
    with raises(nn.ResultCode.OP_FAILED):
        event.wait()


# -- inputs and outputs -----------------------------------------------------------------------
def test_memory_inputs_and_outputs():
    compilation = compiled()
    with nn.Memory.create_shared(200) as memory:
        np.frombuffer(memory.buffer, np.float32, 12, 8)[:] = X.ravel()
        execution = nn.Execution(compilation)
        execution.set_input_from_memory(0, memory, 8, 48)
        execution.set_output_from_memory(0, memory, 64, 48)
        execution.compute()
        got = np.frombuffer(memory.buffer, np.float32, 12, 64).reshape(3, 4).copy()
    np.testing.assert_allclose(got, example_expected(X), rtol=1e-6)


def test_bytes_input_and_bytearray_output():
    execution = nn.Execution(compiled())
    out = bytearray(48)
    execution.set_input(0, X.tobytes())
    execution.set_output(0, out)
    execution.compute()
    np.testing.assert_allclose(
        np.frombuffer(out, np.float32).reshape(3, 4), example_expected(X), rtol=1e-6
    )


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.uint8])
def test_numeric_input_arrays_are_converted_for_a_float_operand(dtype):
    """numpy's same-kind rule: any number goes into a float operand."""
    values = np.arange(12).reshape(3, 4)
    execution, out = example_execution(compiled(), values.astype(dtype))
    execution.compute()
    np.testing.assert_allclose(out, example_expected(values.astype(np.float32)), rtol=1e-6)


@pytest.mark.parametrize(
    "bind",
    [
        lambda e: e.set_input(1, X),  # no such input
        lambda e: e.set_input(0, X[:2]),  # shape conflicts with [3][4]
        lambda e: e.set_input(0, X.astype(np.complex64)),  # complex numbers have no operand type
        lambda e: e.set_input(0, X.tobytes()[:40]),  # wrong byte length
        lambda e: e.set_input(0, X, nn.OperandType(nn.OperandCode.TENSOR_INT32, (3, 4))),
        lambda e: e.set_input(0, nn.Memory.create_shared(48)),  # memories go through *_from_memory
        lambda e: e.set_output(0, np.zeros((3, 4), np.float64)),  # output dtype must match
        lambda e: e.set_output(0, np.zeros((4, 6), np.float32)[:3, :4]),  # not C-contiguous
        lambda e: e.set_output(0, _readonly()),
        lambda e: e.set_output(0, b"\0" * 48),  # read-only buffer
        lambda e: e.set_output_from_memory(0, nn.Memory.create_shared(48), 8, 48),  # past the end
    ],
    ids=[
        "bad-index",
        "bad-shape",
        "complex-data",
        "short-bytes",
        "other-type",
        "memory-object",
        "output-dtype",
        "output-strided",
        "output-readonly",
        "output-bytes",
        "memory-overflow",
    ],
)
def test_bad_bindings_are_bad_data(bind):
    with raises(nn.ResultCode.BAD_DATA):
        bind(nn.Execution(compiled()))


def _readonly() -> np.ndarray:
    array = np.zeros((3, 4), np.float32)
    array.setflags(write=False)
    return array


def test_unbound_argument_is_bad_data_and_execution_stays_usable():
    execution = nn.Execution(compiled())
    execution.set_input(0, X)
    with raises(nn.ResultCode.BAD_DATA):
        execution.compute()
    out = np.zeros((3, 4), np.float32)
    execution.set_output(0, out)
    execution.compute()
    np.testing.assert_allclose(out, example_expected(X), rtol=1e-6)


def test_missing_none_arguments():
    with raises(nn.ResultCode.UNEXPECTED_NULL):
        nn.Execution(None)
    with raises(nn.ResultCode.UNEXPECTED_NULL):
        nn.Execution(compiled()).set_input_from_memory(0, None, 0, 48)


# -- optional inputs, unknown dimensions, insufficient outputs --------------------------------
def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_optional_operand_omitted_in_the_model():
    x = np.array([[1, 2, 3], [0, 0, 1]], np.float32)
    execution = nn.Execution(compiled(softmax_model(omit_axis_in_model=True)))
    out = np.zeros((2, 3), np.float32)
    execution.set_input(0, x)
    execution.set_output(0, out)
    execution.compute()
    np.testing.assert_allclose(out, _softmax(x), rtol=1e-5)


def test_optional_input_omitted_at_execution():
    x = np.array([[1, 2, 3], [0, 0, 1]], np.float32)
    execution = nn.Execution(compiled(softmax_model(omit_axis_in_model=False)))
    out = np.zeros((2, 3), np.float32)
    execution.set_input(0, x)
    execution.set_input(1, None)
    execution.set_output(0, out)
    execution.compute()
    np.testing.assert_allclose(out, _softmax(x), rtol=1e-5)


def test_unknown_dimensions_come_from_the_arrays():
    execution = nn.Execution(compiled(add_model(dims=(0, 2))))
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    out = np.zeros((3, 2), np.float32)
    execution.set_input(0, a)
    execution.set_input(1, a)
    execution.set_output(0, out)
    execution.compute()
    np.testing.assert_array_equal(out, 2 * a)
    assert execution.get_output_operand_dimensions(0) == (3, 2)


def test_unknown_input_dimensions_need_a_shape():
    execution = nn.Execution(compiled(add_model(dims=(0, 2))))
    with raises(nn.ResultCode.BAD_DATA):
        execution.set_input(0, np.zeros(6, np.float32).tobytes())
    execution.set_input(0, np.zeros(6, np.float32).tobytes(), nn.OperandType(F32, (3, 2)))


def test_output_insufficient_size_reports_the_needed_dimensions():
    execution = nn.Execution(compiled(add_model(dims=(0,), out_dims=(0,))))
    a = np.ones(5, np.float32)
    execution.set_input(0, a)
    execution.set_input(1, a)
    execution.set_output(0, bytearray(8))  # room for 2 of the 5 values
    with raises(nn.ResultCode.OUTPUT_INSUFFICIENT_SIZE) as info:
        execution.compute()
    assert "(5,)" in str(info.value)
    assert execution.get_output_operand_dimensions(0) == (5,)
    assert execution.get_output_operand_rank(0) == 1


def test_dynamic_output_smaller_than_its_buffer():
    execution = nn.Execution(compiled(add_model(dims=(0,), out_dims=(0,))))
    a = np.ones(3, np.float32)
    out = bytearray(b"\xff" * 20)
    execution.set_input(0, a)
    execution.set_input(1, a)
    execution.set_output(0, out)
    execution.compute()
    assert execution.get_output_operand_dimensions(0) == (3,)
    assert np.frombuffer(out, np.float32, 3).tolist() == [2, 2, 2]
    assert out[12:] == b"\xff" * 8  # untouched past the result


# -- timing -----------------------------------------------------------------------------------
def test_timing_is_measured_only_when_asked():
    execution, _ = example_execution(compiled())
    execution.set_measure_timing(True)
    execution.compute()
    on_hw = execution.get_duration(nn.DurationCode.ON_HARDWARE)
    in_driver = execution.get_duration(nn.DurationCode.IN_DRIVER)
    assert 0 <= on_hw <= in_driver < 2**64 - 1
    assert execution.get_duration(nn.DurationCode.FENCED_ON_HARDWARE) == 2**64 - 1
    execution, _ = example_execution(compiled())
    execution.compute()
    with raises(nn.ResultCode.BAD_STATE):
        execution.get_duration(nn.DurationCode.ON_HARDWARE)


def test_timing_needs_a_single_device_compilation():
    execution, _ = example_execution(compiled(for_cpu=False))
    with raises(nn.ResultCode.BAD_DATA):
        execution.set_measure_timing(True)
    with raises(nn.ResultCode.BAD_DATA):
        execution.set_timeout(1000)


def test_cpu_driver_reports_timing_only_for_yes():
    prepared = compiled().prepared_model
    request = _example_request()
    status, _, timing = prepared.execute_synchronously(request, MeasureTiming.NO)
    assert status == ErrorStatus.NONE and timing == NO_TIMING
    status, shapes, timing = prepared.execute_synchronously(request, MeasureTiming.YES)
    assert status == ErrorStatus.NONE and shapes == [OutputShape((3, 4), True)]
    assert timing.time_on_device <= timing.time_in_driver != NO_TIMING.time_in_driver


def test_loop_timeout_is_clamped_and_settable():
    execution, _ = example_execution(compiled())
    assert execution._loop_timeout_ns == 2_000_000_000
    execution.set_loop_timeout(10**12)
    assert execution._loop_timeout_ns == 15_000_000_000
    with raises(nn.ResultCode.BAD_DATA):
        execution.set_loop_timeout(-1)


# -- lifecycles -------------------------------------------------------------------------------
def test_completed_execution_cannot_be_reused_or_rebound():
    execution, _ = example_execution(compiled())
    execution.compute()
    for call in (
        execution.compute,
        execution.start_compute,
        lambda: execution.set_input(0, X),
        lambda: execution.set_output(0, np.zeros((3, 4), np.float32)),
        lambda: execution.set_measure_timing(True),
        lambda: execution.set_reusable(True),
    ):
        with raises(nn.ResultCode.BAD_STATE):
            call()


def test_reusable_execution_reads_its_inputs_again():
    x = X.copy()
    execution, out = example_execution(compiled(), x)
    execution.set_reusable(True)
    execution.compute()
    x += 1
    execution.compute()
    np.testing.assert_allclose(out, example_expected(X + 1), rtol=1e-6)
    execution.start_compute().wait()


def test_computing_twice_at_once_is_bad_state():
    execution, _ = example_execution(compiled())
    gate = _Gate(execution._prepared)
    execution._prepared = gate
    event = execution.start_compute()
    assert gate.entered.wait(5)
    with raises(nn.ResultCode.BAD_STATE):
        execution.compute()
    with raises(nn.ResultCode.BAD_STATE):
        execution.get_output_operand_dimensions(0)
    with raises(nn.ResultCode.BAD_STATE):
        execution.set_input(0, X)
    gate.open.set()
    event.wait()


def test_results_before_completion_and_after_failure_are_bad_state():
    execution, _ = example_execution(compiled())
    with raises(nn.ResultCode.BAD_STATE):
        execution.get_output_operand_rank(0)
    execution._prepared = _Failing(ErrorStatus.INVALID_ARGUMENT)
    with raises(nn.ResultCode.BAD_DATA):
        execution.compute()
    with raises(nn.ResultCode.BAD_STATE):
        execution.get_output_operand_dimensions(0)


@pytest.mark.parametrize(
    "status, code",
    [
        (ErrorStatus.DEVICE_UNAVAILABLE, nn.ResultCode.UNAVAILABLE_DEVICE),
        (ErrorStatus.GENERAL_FAILURE, nn.ResultCode.OP_FAILED),
        (ErrorStatus.INVALID_ARGUMENT, nn.ResultCode.BAD_DATA),
        (ErrorStatus.MISSED_DEADLINE_TRANSIENT, nn.ResultCode.MISSED_DEADLINE_TRANSIENT),
    ],
)
def test_driver_status_becomes_the_ndk_result_code(status, code):
    execution, _ = example_execution(compiled())
    execution._prepared = _Failing(status)
    with raises(code):
        execution.compute()


# -- compilations -----------------------------------------------------------------------------
def test_compilation_lifecycle():
    with raises(nn.ResultCode.UNEXPECTED_NULL):
        nn.Compilation(None)
    with raises(nn.ResultCode.BAD_STATE):
        nn.Compilation(build_example(finish=False))
    with raises(nn.ResultCode.BAD_DATA):
        nn.Compilation(build_example(), [])
    with raises(nn.ResultCode.BAD_DATA):
        nn.Compilation(build_example(), [cpu(), cpu()])
    compilation = nn.Compilation(build_example())
    with raises(nn.ResultCode.BAD_STATE):
        nn.Execution(compilation)  # not finished
    compilation.finish()
    for call in (
        compilation.finish,
        lambda: compilation.set_preference(nn.PreferenceCode.LOW_POWER),
        lambda: compilation.set_priority(nn.PriorityCode.HIGH),
        lambda: compilation.set_caching(".", bytes(32)),
    ):
        with raises(nn.ResultCode.BAD_STATE):
            call()
    compilation.close()
    compilation.close()
    with raises(nn.ResultCode.BAD_STATE):
        nn.Execution(compilation)


def test_compilation_settings_are_validated(tmp_path):
    compilation = nn.Compilation(build_example())
    with raises(nn.ResultCode.BAD_DATA):
        compilation.set_preference(7)
    with raises(nn.ResultCode.BAD_DATA):
        compilation.set_priority(42)
    with raises(nn.ResultCode.BAD_DATA):
        compilation.set_caching(".", b"short")
    with raises(nn.ResultCode.UNEXPECTED_NULL):
        compilation.set_caching(".", None)
    with raises(nn.ResultCode.BAD_DATA):
        compilation.set_timeout(1_000_000)  # needs exactly one explicit device
    compilation.set_preference(nn.PreferenceCode.SUSTAINED_SPEED)
    compilation.set_priority(nn.PriorityCode.LOW)
    compilation.set_caching(str(tmp_path), bytes(range(32)))  # finish writes the cache there
    compilation.finish()
    single = nn.Compilation(build_example(), [cpu()])
    single.set_timeout(10**9)
    single.finish()


def test_unsupported_operation_fails_compilation_for_devices():
    add_only = nn.Device(AddOnlyDevice())
    compilation = nn.Compilation(build_example(), [add_only])
    with raises(nn.ResultCode.BAD_DATA) as info:
        compilation.finish()
    assert "0 (MUL)" in str(info.value)
    with raises(nn.ResultCode.BAD_STATE):
        nn.Execution(compilation)  # the compilation failed


def test_compilation_picks_a_device_that_runs_everything():
    compilation = nn.Compilation(build_example(), [nn.Device(AddOnlyDevice()), cpu()])
    compilation.finish()
    assert compilation.device is cpu()


# -- the CPU driver's request validation ------------------------------------------------------
def _example_request(**changes) -> Request:
    pool = bytearray(X.tobytes() + bytes(48))
    request = Request(
        [RequestArgument(False, DataLocation(0, 0, 48))],
        [RequestArgument(False, DataLocation(0, 48, 48))],
        [pool],
    )
    for key, value in changes.items():
        setattr(request, key, value)
    return request


@pytest.mark.parametrize(
    "changes",
    [
        {"inputs": []},  # argument counts
        {"outputs": []},
        {"inputs": [RequestArgument(True, DataLocation(0, 0, 48))]},  # no value with a location
        {"inputs": [RequestArgument(True, dimensions=(3, 4))]},  # no value with dimensions
        {"inputs": [RequestArgument(False, DataLocation(1, 0, 48))]},  # bad pool index
        {"inputs": [RequestArgument(False, DataLocation(-1, 0, 48))]},
        # offset + length past the pool
        {"inputs": [RequestArgument(False, DataLocation(0, 90, 48))]},
        {"outputs": [RequestArgument(False, DataLocation(0, 60, 48))]},
        {"inputs": [RequestArgument(False, DataLocation(0, 0, 44))]},  # wrong length
        {"inputs": [RequestArgument(False, DataLocation(0, 0, 48), (4, 3))]},  # dims conflict
        {"inputs": [RequestArgument(False, DataLocation(0, 0, 48), (3, 4, 1))]},  # rank conflict
        {"outputs": [RequestArgument(False, DataLocation(0, 48, 48), (3,))]},
        {"pools": [bytes(96)]},  # read-only pool for an output
        {"pools": [object()]},  # not a buffer
        {"inputs": [None]},  # not an argument at all
        {"outputs": [RequestArgument(False, DataLocation(0, 48, 48), ("3", 4))]},
    ],
    # No memory address in an ID: pytest-xdist's workers must collect the same names.
    ids=lambda c: re.sub(r" at 0x[0-9a-f]+", "", ",".join(f"{k}={v}" for k, v in c.items()))[:60],
)
def test_invalid_requests_are_invalid_argument(changes):
    prepared = compiled().prepared_model
    assert prepared.execute_synchronously(_example_request(**changes), MeasureTiming.YES) == (
        ErrorStatus.INVALID_ARGUMENT,
        [],
        NO_TIMING,
    )


def test_closed_memory_pool_is_invalid_argument():
    prepared = compiled().prepared_model
    memory = nn.Memory.create_shared(96)
    memory.close()
    status, _, _ = prepared.execute_synchronously(
        _example_request(pools=[memory]), MeasureTiming.NO
    )
    assert status == ErrorStatus.INVALID_ARGUMENT


def test_driver_insufficient_output_gives_shapes_without_timing():
    prepared = compiled().prepared_model
    request = _example_request(outputs=[RequestArgument(False, DataLocation(0, 48, 40))])
    status, shapes, timing = prepared.execute_synchronously(request, MeasureTiming.YES)
    assert status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
    assert shapes == [OutputShape((3, 4), False)] and timing == NO_TIMING


def test_driver_writes_outputs_into_the_pool():
    prepared = compiled().prepared_model
    request = _example_request()
    status, _, _ = prepared.execute_synchronously(request, MeasureTiming.NO)
    assert status == ErrorStatus.NONE
    got = np.frombuffer(request.pools[0], np.float32, 12, 48).reshape(3, 4)
    np.testing.assert_allclose(got, example_expected(X), rtol=1e-6)
    assert isinstance(prepared, CpuPreparedModel)


# -- stand-in prepared models for lifecycle tests ---------------------------------------------
class _Failing(IPreparedModel):
    def __init__(self, status: ErrorStatus) -> None:
        self.status = status

    def execute_synchronously(self, request, measure, **_):
        return self.status, [], NO_TIMING

    def configure_execution_burst(self, callback, request_channel, result_channel):
        return ErrorStatus.GENERAL_FAILURE, None


class _Gate(IPreparedModel):
    """Runs the real prepared model once ``open`` is set; ``entered`` tells a call is waiting."""

    def __init__(self, inner: IPreparedModel) -> None:
        self.inner = inner
        self.open = threading.Event()
        self.entered = threading.Event()

    def execute_synchronously(self, request, measure, **_):
        self.entered.set()
        assert self.open.wait(5)
        return self.inner.execute_synchronously(request, measure)

    def configure_execution_burst(self, callback, request_channel, result_channel):
        return ErrorStatus.GENERAL_FAILURE, None


# -- bursts -----------------------------------------------------------------------------------
class _RecordingController:
    """Stands in for ExecutionBurstController: runs requests on the CPU and records the calls."""

    def __init__(self, prepared: IPreparedModel, fallback: bool = False) -> None:
        self.prepared = prepared
        self.fallback = fallback
        self.keys: list[list] = []
        self.deadlines: list[int | None] = []
        self.freed: list = []
        self.closed = 0

    def compute(self, request, measure, memory_keys, deadline_ns=None):
        assert all(isinstance(pool, MappedMemory) for pool in request.pools)
        assert len(memory_keys) == len(request.pools)
        self.keys.append(list(memory_keys))
        self.deadlines.append(deadline_ns)
        if self.fallback:
            return ErrorStatus.GENERAL_FAILURE, [], NO_TIMING, True
        return (*self.prepared.execute_synchronously(request, measure), False)

    def free_memory(self, key):
        self.freed.append(key)

    def close(self):
        self.closed += 1


def recording_burst(compilation: nn.Compilation, fallback: bool = False) -> nn.Burst:
    burst = nn.Burst(compilation)
    if burst._controller is not None:
        burst._controller.close()
    burst._controller = _RecordingController(compilation.prepared_model, fallback)
    return burst


def test_burst_compute_gives_the_example_result_repeatedly():
    compilation = compiled()
    with nn.Burst(compilation) as burst:
        for k in range(3):
            execution, out = example_execution(compilation, X + k)
            execution.burst_compute(burst)
            np.testing.assert_allclose(out, example_expected(X + k), rtol=1e-6)


def test_burst_stages_arrays_and_passes_memories_in_place():
    compilation = compiled()
    burst = recording_burst(compilation)
    controller = burst._controller
    with nn.Memory.create_shared(48) as memory:
        np.frombuffer(memory.buffer, np.float32)[:] = X.ravel()
        for _ in range(2):
            execution = nn.Execution(compilation)
            out = np.zeros((3, 4), np.float32)
            execution.set_input_from_memory(0, memory, 0, 48)
            execution.set_output(0, out)
            execution.burst_compute(burst)
            np.testing.assert_allclose(out, example_expected(X), rtol=1e-6)
        staging = burst._staging
        assert controller.keys == [[staging, memory], [staging, memory]]  # staging reused
    assert controller.freed == [memory]  # Memory.close() freed its slot
    burst.close()
    burst.close()
    assert controller.closed == 1
    assert staging.closed


def test_set_timeout_bounds_the_burst_round_trip():
    compilation = compiled()  # for exactly one device: timeouts are allowed
    with recording_burst(compilation) as burst:
        execution, _ = example_execution(compilation)
        execution.burst_compute(burst)
        execution, _ = example_execution(compilation)
        execution.set_timeout(60 * 10**9)
        before = time.monotonic_ns()
        execution.burst_compute(burst)
        controller = burst._controller
    assert controller.deadlines[0] is None
    assert before + 60 * 10**9 <= controller.deadlines[1] <= time.monotonic_ns() + 60 * 10**9


def test_burst_falls_back_to_execute_synchronously():
    compilation = compiled()
    with recording_burst(compilation, fallback=True) as burst:
        execution, out = example_execution(compilation)
        execution.burst_compute(burst)
    np.testing.assert_allclose(out, example_expected(X), rtol=1e-6)


def test_burst_reports_timing_and_insufficient_size():
    compilation = compiled()
    with nn.Burst(compilation) as burst:
        execution, _ = example_execution(compilation)
        execution.set_measure_timing(True)
        execution.burst_compute(burst)
        assert execution.get_duration(nn.DurationCode.ON_HARDWARE) <= execution.get_duration(
            nn.DurationCode.IN_DRIVER
        )
    dynamic = compiled(add_model(dims=(0,), out_dims=(0,)))
    with nn.Burst(dynamic) as burst:
        execution = nn.Execution(dynamic)
        execution.set_input(0, np.ones(5, np.float32))
        execution.set_input(1, np.ones(5, np.float32))
        execution.set_output(0, bytearray(8))
        with raises(nn.ResultCode.OUTPUT_INSUFFICIENT_SIZE):
            execution.burst_compute(burst)
        assert execution.get_output_operand_dimensions(0) == (5,)


def test_burst_rules():
    compilation = compiled()
    with raises(nn.ResultCode.UNEXPECTED_NULL):
        nn.Burst(None)
    with raises(nn.ResultCode.BAD_STATE):
        nn.Burst(nn.Compilation(build_example()))  # not finished
    with nn.Burst(compilation) as burst:
        execution, _ = example_execution(compiled())
        with raises(nn.ResultCode.BAD_DATA):
            execution.burst_compute(burst)  # another compilation
        with raises(nn.ResultCode.UNEXPECTED_NULL):
            execution.burst_compute(None)
        execution, out = example_execution(compilation)
        # burst._lock held: as if another thread were computing through this burst.
        with burst._guard, raises(nn.ResultCode.BAD_STATE):
            execution.burst_compute(burst)
        execution.burst_compute(burst)  # the refused execution is still usable
        np.testing.assert_allclose(out, example_expected(X), rtol=1e-6)
        with raises(nn.ResultCode.BAD_STATE):
            execution.burst_compute(burst)  # completed, not reusable
    execution, _ = example_execution(compilation)
    with raises(nn.ResultCode.BAD_STATE):
        execution.burst_compute(burst)  # closed


def test_concurrent_burst_computes_never_crash():
    compilation = compiled()
    results: list[object] = []
    with nn.Burst(compilation) as burst:

        def worker():
            execution, out = example_execution(compilation)
            try:
                execution.burst_compute(burst)
                results.append(np.allclose(out, example_expected(X), rtol=1e-6))
            except nn.NNError as exc:
                results.append(exc.code)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert set(results) <= {True, nn.ResultCode.BAD_STATE} and True in results


# -- memory descriptors (memory domains) ------------------------------------------------------
def example_desc(compilation: nn.Compilation) -> nn.MemoryDesc:
    desc = nn.MemoryDesc()
    desc.add_input_role(compilation, 0, 1.0)
    desc.add_output_role(compilation, 0, 0.5)
    desc.set_dimensions((3, 0))
    desc.finish()
    return desc


def test_memory_from_desc_round_trip():
    compilation = compiled()
    desc = example_desc(compilation)
    assert desc.dimensions == (3, 4)
    with nn.Memory.from_desc(desc) as state, nn.Memory.create_shared(48) as plain:
        assert state.size == 48 and not state.initialized
        execution = nn.Execution(compilation)
        execution.set_input_from_memory(0, state, 0, 0)
        execution.set_output(0, np.zeros((3, 4), np.float32))
        with raises(nn.ResultCode.BAD_DATA):
            execution.compute()  # no data in the memory yet
        np.frombuffer(plain.buffer, np.float32)[:] = X.ravel()
        nn.Memory.copy(plain, state)
        assert state.initialized
        execution.compute()
        # The memory as an output, then read back with a copy.
        execution = nn.Execution(compilation)
        execution.set_input(0, X)
        execution.set_output_from_memory(0, state, 0, 0)
        execution.compute()
        nn.Memory.copy(state, plain)
        got = np.frombuffer(plain.buffer, np.float32).reshape(3, 4)
        np.testing.assert_allclose(got, example_expected(X), rtol=1e-6)


def test_memory_desc_rules():
    compilation = compiled()
    with raises(nn.ResultCode.BAD_STATE):
        nn.MemoryDesc().add_input_role(nn.Compilation(build_example()), 0, 1.0)
    with raises(nn.ResultCode.UNEXPECTED_NULL):
        nn.MemoryDesc().add_input_role(None, 0, 1.0)
    desc = nn.MemoryDesc()
    for call in (
        lambda: desc.add_input_role(compilation, 1, 1.0),  # no input 1
        lambda: desc.add_input_role(compilation, 0, 0.0),  # frequency in (0, 1]
        lambda: desc.finish(),  # no role yet
    ):
        with raises(nn.ResultCode.BAD_DATA):
            call()
    with raises(nn.ResultCode.BAD_STATE):
        nn.Memory.from_desc(desc)  # not finished
    desc.add_input_role(compilation, 0, 1.0)
    with raises(nn.ResultCode.BAD_DATA):
        desc.add_input_role(compilation, 0, 1.0)  # twice
    with raises(nn.ResultCode.BAD_DATA):
        desc.add_input_role(compiled(softmax_model(False)), 0, 1.0)  # dims (2, 3) vs (3, 4)
    with raises(nn.ResultCode.BAD_DATA):
        desc.set_dimensions((3, 5))
    desc.finish()
    with raises(nn.ResultCode.BAD_STATE):
        desc.finish()
    dynamic = nn.MemoryDesc()
    dynamic.add_input_role(compiled(add_model(dims=(0,))), 0, 1.0)
    dynamic.finish()
    with raises(nn.ResultCode.OP_FAILED):
        nn.Memory.from_desc(dynamic)  # the CPU device needs a known size


def test_desc_memories_are_used_whole_and_in_their_roles():
    compilation = compiled()
    desc = nn.MemoryDesc()
    desc.add_output_role(compilation, 0, 1.0)
    desc.finish()
    with nn.Memory.from_desc(desc) as memory, nn.Memory.create_shared(40) as small:
        execution = nn.Execution(compilation)
        with raises(nn.ResultCode.BAD_DATA):
            execution.set_output_from_memory(0, memory, 0, 48)  # offset and length must be 0
        with raises(nn.ResultCode.BAD_DATA):
            execution.set_input_from_memory(0, memory, 0, 0)  # no input role
        with raises(nn.ResultCode.BAD_DATA):
            nn.Memory.copy(memory, memory)  # never written
        with raises(nn.ResultCode.BAD_DATA):
            nn.Memory.copy(small, memory)  # sizes differ
        execution.set_input(0, X)
        execution.set_output_from_memory(0, memory, 0, 0)
        execution._prepared = _Failing(ErrorStatus.GENERAL_FAILURE)
        with raises(nn.ResultCode.OP_FAILED):
            execution.compute()
        assert not memory.initialized  # a failed execution leaves no data


def test_reusable_execution_reads_converted_inputs_again():
    x = X.astype(np.float64)
    execution, out = example_execution(compiled(), x)
    execution.set_reusable(True)
    execution.compute()
    x += 1
    execution.compute()
    np.testing.assert_allclose(out, example_expected(X + 1), rtol=1e-6)


@pytest.mark.parametrize(
    "memory_first", [True, False], ids=["free-memory-first", "free-burst-first"]
)
def test_memory_and_burst_can_be_freed_in_either_order(memory_first):
    compilation = compiled()
    burst = nn.Burst(compilation)
    memory = nn.Memory.create_shared(48)
    execution = nn.Execution(compilation)
    execution.set_input(0, X)
    execution.set_output_from_memory(0, memory, 0, 48)
    execution.burst_compute(burst)
    got = np.frombuffer(memory.buffer, np.float32).reshape(3, 4).copy()
    np.testing.assert_allclose(got, example_expected(X), rtol=1e-6)
    if memory_first:
        memory.close()
        execution, out = example_execution(compilation)  # the burst goes on without it
        execution.burst_compute(burst)
        np.testing.assert_allclose(out, example_expected(X), rtol=1e-6)
        burst.close()
    else:
        burst.close()
        memory.close()


def _conv_on_unknown_sizes() -> nn.Model:
    """A 3x3 VALID convolution over an input whose height and width come with the call."""
    model = nn.Model()
    x = model.add_operand(nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, (1, 0, 0, 1)))
    w = model.add_operand(nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, (1, 3, 3, 1)))
    model.set_operand_value(w, np.ones((1, 3, 3, 1), np.float32))
    b = model.add_operand(nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, (1,)))
    model.set_operand_value(b, np.zeros(1, np.float32))
    scalars = []
    for value in (0, 0, 0, 0, 1, 1, 0):  # explicit padding 0, strides 1, no activation
        scalars.append(model.add_operand(nn.OperandType(nn.OperandCode.INT32)))
        model.set_operand_value(scalars[-1], np.int32(value))
    out = model.add_operand(nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, (1, 0, 0, 1)))
    model.add_operation(nn.OperationCode.CONV_2D, [x, w, b, *scalars], [out])
    model.identify_inputs_and_outputs([x], [out])
    model.finish()
    return model


@pytest.mark.parametrize("path", ["compute", "burst_compute", "start_compute"])
def test_a_failed_execution_says_why(path: str) -> None:
    """The driver's reason is in the error, not only in NNBURST_VLOG's log."""
    compilation = nn.Compilation(_conv_on_unknown_sizes(), [cpu()])
    compilation.finish()
    with compilation, nn.Burst(compilation) as burst:
        execution = nn.Execution(compilation)
        execution.set_input(0, np.ones((1, 2, 2, 1), np.float32))
        execution.set_output(0, np.empty((1, 2, 2, 1), np.float32))
        with pytest.raises(nn.NNError, match="window .* does not fit the padded 2x2 input"):
            if path == "burst_compute":
                execution.burst_compute(burst)
            elif path == "start_compute":
                execution.start_compute().wait()
            else:
                execution.compute()
        execution.close()
