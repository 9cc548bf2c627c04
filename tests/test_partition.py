"""Device assignment, partitioning across devices, and CPU fallback, with in-process fake drivers.

The fake devices wrap the CPU reference driver but only accept operations
whose first input has one of their operand types (a float-only and a
quant-only accelerator), and only accept requests whose pools are shared
``Memory`` objects, as a driver in another process would: so every result
here also checks that the plan staged its buffers.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import nnburst as nn
from nnburst import devices as devices_module
from nnburst.codes import ErrorStatus
from nnburst.cpu.driver import CpuPreparedModel, cpu_device
from nnburst.errors import NNError
from nnburst.hal.interfaces import IDevice, IPreparedModel
from nnburst.hal.memory import MappedMemory
from nnburst.hal.staging import StagedRequest
from nnburst.hal.types import (
    NO_TIMING,
    Capabilities,
    DataLocation,
    DeviceType,
    PerformanceInfo,
    Request,
    RequestArgument,
)
from nnburst.partition import ExecutionPlan

from .test_model import raises

F32 = nn.OperandCode.TENSOR_FLOAT32
Q8 = nn.OperandCode.TENSOR_QUANT8_ASYMM
FLOAT_CODES = (F32, nn.OperandCode.FLOAT32, nn.OperandCode.INT32)
QUANT_CODES = (Q8, nn.OperandCode.INT32)
SHAPE = (2, 3)
QCONST = np.array([[130, 126, 128], [140, 120, 129]], np.uint8)  # scale 0.5, zero point 128


# -- fake drivers -----------------------------------------------------------------------------
class FakePrepared(IPreparedModel):
    def __init__(self, device: FakeDevice, inner: CpuPreparedModel) -> None:
        self.device = device
        self.inner = inner

    def execute_synchronously(self, request, measure, **_):
        self.device.executions += 1
        if not all(isinstance(pool, MappedMemory) for pool in request.pools):
            return ErrorStatus.INVALID_ARGUMENT, [], NO_TIMING  # a remote driver maps memories only
        if self.device.fail_execute == "status":
            return ErrorStatus.GENERAL_FAILURE, [], NO_TIMING
        if self.device.fail_execute == "raise":
            raise NNError("the fake driver died", nn.ResultCode.DEAD_OBJECT)
        return self.inner.execute_synchronously(request, measure)

    def configure_execution_burst(self, callback, request_channel, result_channel):
        return self.inner.configure_execution_burst(callback, request_channel, result_channel)


class FakeDevice(IDevice):
    """Runs (on the CPU driver) the operations whose first input has one of ``codes``."""

    type = DeviceType.ACCELERATOR
    feature_level = 30

    def __init__(self, name, codes, exec_time, power, fail_execute=None, fail_prepare=False):
        self.name = name
        self.version_string = f"{name} 1"
        self.codes = set(codes)
        self.fail_execute = fail_execute
        self.fail_prepare = fail_prepare
        self.executions = 0
        self.prepared_models = []
        perf = PerformanceInfo(exec_time, power)
        self._capabilities = Capabilities(
            relaxed_float32_to_float16_scalar=perf,
            relaxed_float32_to_float16_tensor=perf,
            operand_performance={code: perf for code in codes},
        )

    @property
    def capabilities(self):
        return self._capabilities

    def get_supported_operations(self, model):
        cpu = cpu_device().get_supported_operations(model)
        operands = model.main.operands
        return [
            ok and operands[op.inputs[0]].info.code in self.codes
            for ok, op in zip(cpu, model.main.operations)
        ]

    def prepare_model(self, model, preference=None, priority=None, deadline_ns=None, cache=None):
        if self.fail_prepare:
            raise NNError("the fake driver cannot compile", nn.ResultCode.OP_FAILED)
        self.prepared_models.append(model)
        return FakePrepared(self, cpu_device().prepare_model(model))


def float_device(**kw):
    kw.setdefault("exec_time", 0.5)
    kw.setdefault("power", 2.0)
    return FakeDevice("test-float", FLOAT_CODES, **kw)


def quant_device(**kw):
    kw.setdefault("exec_time", 0.5)
    kw.setdefault("power", 0.5)
    return FakeDevice("test-quant", QUANT_CODES, **kw)


@pytest.fixture
def register():
    """Make fake HAL devices visible to get_devices() for one test."""
    removers = []

    def add(*hals):
        removers.append(devices_module.register_source(lambda: list(hals)))
        return [devices_module.device_for(h) for h in hals]

    yield add
    for remove in removers:
        remove()


def cpu() -> nn.Device:
    (device,) = [d for d in nn.get_devices() if d.name == "nnburst-reference"]
    return device


# -- models -----------------------------------------------------------------------------------
def chain_model(quant_dims=SHAPE, expose_quant: bool = False) -> nn.Model:
    """out = DEQUANTIZE(QUANTIZE(a + b) + QCONST): float, then quant, then float again.

    Operations 0 (ADD) and 1 (QUANTIZE) read floats, 2 (ADD) and 3
    (DEQUANTIZE) read quant8.  ``expose_quant`` also makes the QUANTIZE result
    (read by the quant step) a model output.
    """
    model = nn.Model()
    f = nn.OperandType(F32, SHAPE)
    q = nn.OperandType(Q8, SHAPE, 0.5, 128)
    a, b, act = (
        model.add_operand(f),
        model.add_operand(f),
        model.add_operand(nn.OperandType(nn.OperandCode.INT32)),
    )
    s = model.add_operand(f)
    q0 = model.add_operand(nn.OperandType(Q8, quant_dims, 0.5, 128))
    qc = model.add_operand(q)
    q1 = model.add_operand(q)
    out = model.add_operand(f)
    model.set_operand_value(act, 0)
    model.set_operand_value(qc, QCONST)
    model.add_operation(nn.OperationCode.DEQUANTIZE, [q1], [out])  # any order: the graph decides
    model.add_operation(nn.OperationCode.ADD, [a, b, act], [s])
    model.add_operation(nn.OperationCode.ADD, [q0, qc, act], [q1])
    model.add_operation(nn.OperationCode.QUANTIZE, [s], [q0])
    model.identify_inputs_and_outputs([a, b], [out, q0] if expose_quant else [out])
    model.finish()
    return model


A = np.array([[0.5, -1.0, 2.0], [3.25, 0.0, -4.5]], np.float32)
B = np.array([[1.0, 1.5, -0.5], [0.25, 7.0, 1.0]], np.float32)


def run(compilation: nn.Compilation, n_outputs: int = 1) -> list[np.ndarray]:
    execution = nn.Execution(compilation)
    execution.set_input(0, A)
    execution.set_input(1, B)
    outs = [np.zeros(SHAPE, np.float32), np.zeros(SHAPE, np.uint8)][:n_outputs]
    for i, out in enumerate(outs):
        execution.set_output(i, out)
    execution.compute()
    return outs


def cpu_reference(model: nn.Model, n_outputs: int = 1) -> list[np.ndarray]:
    compilation = nn.Compilation(model, [cpu()])
    compilation.finish()
    return run(compilation, n_outputs)


def finished(model: nn.Model, devices=None, preference=None) -> nn.Compilation:
    compilation = nn.Compilation(model, devices)
    if preference is not None:
        compilation.set_preference(preference)
    compilation.finish()
    return compilation


def step_devices(compilation: nn.Compilation) -> list[tuple[str, list[int]]]:
    plan = compilation.prepared_model
    assert isinstance(plan, ExecutionPlan)
    return [(step.device.name, step.operations) for step in plan.steps]


# -- assignment and steps ---------------------------------------------------------------------
def test_fast_preference_splits_float_and_quant(register, caplog):
    register(float_device(), quant_device())
    model = chain_model()
    expected = cpu_reference(model)
    with caplog.at_level(logging.INFO, logger="nnburst.manager"):
        compilation = finished(model)
    assert compilation.device is None
    assert step_devices(compilation) == [("test-float", [1, 3]), ("test-quant", [2, 0])]
    assert "ModelBuilder::findBestDeviceForEachOperation(QUANTIZE#3): 1 (test-float)" in caplog.text
    assert "findBestDeviceForEachOperation(DEQUANTIZE#0): 2 (test-quant)" in caplog.text
    assert "only one best device" not in caplog.text
    (out,) = run(compilation)
    np.testing.assert_array_equal(out, expected[0])


def test_low_power_preference_keeps_floats_on_the_cpu(register):
    register(float_device(), quant_device())  # the float device is fast but power hungry
    model = chain_model()
    compilation = finished(model, preference=nn.PreferenceCode.LOW_POWER)
    assert step_devices(compilation) == [("nnburst-reference", [1, 3]), ("test-quant", [2, 0])]
    np.testing.assert_array_equal(run(compilation)[0], cpu_reference(model)[0])


def test_sustained_speed_uses_exec_time(register):
    register(float_device(exec_time=2.0, power=0.1), quant_device(exec_time=0.9, power=5.0))
    compilation = finished(chain_model(), preference=nn.PreferenceCode.SUSTAINED_SPEED)
    assert step_devices(compilation) == [("nnburst-reference", [1, 3]), ("test-quant", [2, 0])]


def test_only_one_best_device_is_logged_and_keeps_the_fast_path(register, caplog):
    register(float_device(exec_time=3.0), quant_device(exec_time=3.0))
    model = chain_model()
    with caplog.at_level(logging.INFO, logger="nnburst.manager"):
        compilation = finished(model)
    assert "ModelBuilder::partitionTheWork: only one best device: nnburst-reference" in caplog.text
    assert compilation.device is cpu()
    assert isinstance(compilation.prepared_model, CpuPreparedModel)  # no plan wrapper


def test_ties_go_to_the_accelerator_not_the_cpu(register, caplog):
    register(float_device(exec_time=1.0, power=1.0), quant_device(exec_time=1.0, power=1.0))
    compilation = finished(chain_model())
    assert step_devices(compilation) == [("test-float", [1, 3]), ("test-quant", [2, 0])]


def test_one_accelerator_for_everything_is_a_one_step_plan(register, caplog):
    everything = FakeDevice("test-all", (*FLOAT_CODES, Q8), 0.1, 0.1)
    register(everything)
    model = chain_model()
    with caplog.at_level(logging.INFO, logger="nnburst.manager"):
        compilation = finished(model)
    assert "only one best device: test-all" in caplog.text
    assert compilation.device.name == "test-all"
    assert everything.prepared_models == [model.hal_model]  # the model itself, not a copy
    np.testing.assert_array_equal(run(compilation)[0], cpu_reference(model)[0])
    # Bursts go to the device's own prepared model.
    execution = nn.Execution(compilation)
    out = np.zeros(SHAPE, np.float32)
    execution.set_input(0, A)
    execution.set_input(1, B)
    execution.set_output(0, out)
    with nn.Burst(compilation) as burst:
        execution.burst_compute(burst)
    np.testing.assert_array_equal(out, cpu_reference(model)[0])


def test_relaxed_models_use_relaxed_performance(register):
    fast_relaxed = FakeDevice("test-relaxed", FLOAT_CODES, 5.0, 5.0)
    fast_relaxed.capabilities.relaxed_float32_to_float16_tensor = PerformanceInfo(0.1, 0.1)
    register(fast_relaxed)
    model = nn.Model()
    t = nn.OperandType(F32, SHAPE)
    a, b, act, out = (model.add_operand(x) for x in (t, t, nn.OperandType(nn.OperandCode.INT32), t))
    model.set_operand_value(act, 0)
    model.add_operation(nn.OperationCode.ADD, [a, b, act], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.relax_computation_float32_to_float16(True)
    model.finish()
    assert finished(model).device.name == "test-relaxed"


def test_step_models_cut_at_the_crossing_tensors(register):
    register(float_device(), quant_device())
    compilation = finished(chain_model(expose_quant=True))
    first, second = compilation.prepared_model.steps
    assert first.inputs == (0, 1) and first.outputs == (4,)  # QUANTIZE's result crosses
    assert second.inputs == (4,) and second.outputs == (7,)
    sub = second.model.main
    assert [sub.operands[i].info.code for i in sub.input_indexes] == [Q8]
    assert [op.code for op in sub.operations] == [nn.OperationCode.ADD, nn.OperationCode.DEQUANTIZE]
    assert sum(o.value is not None for o in sub.operands) == 2  # the quant constant and act


# -- results across devices -------------------------------------------------------------------
def test_model_output_read_by_a_later_step(register):
    register(float_device(), quant_device())
    model = chain_model(expose_quant=True)
    expected = cpu_reference(model, 2)
    compilation = finished(model)
    assert len(compilation.prepared_model.steps) == 2
    out, q0 = run(compilation, 2)
    np.testing.assert_array_equal(out, expected[0])
    np.testing.assert_array_equal(q0, expected[1])


def test_temporary_of_unknown_shape_crosses_devices(register):
    register(float_device(), quant_device())
    model = chain_model(quant_dims=(0, 0))
    expected = cpu_reference(model)
    compilation = finished(model)
    assert len(compilation.prepared_model.steps) == 2
    np.testing.assert_array_equal(run(compilation)[0], expected[0])


def test_memory_inputs_and_outputs_and_reuse(register):
    register(float_device(), quant_device())
    model = chain_model()
    expected = cpu_reference(model)[0]
    compilation = finished(model)
    memory = nn.Memory.create_shared(3 * 24)
    view = np.frombuffer(memory.buffer, np.float32).reshape(3, *SHAPE)
    view[0], view[1] = A, B
    execution = nn.Execution(compilation)
    execution.set_reusable(True)
    execution.set_input_from_memory(0, memory, 0, 24)
    execution.set_input_from_memory(1, memory, 24, 24)
    execution.set_output_from_memory(0, memory, 48, 24)
    for _ in range(2):
        view[2] = 0
        execution.compute()
        np.testing.assert_array_equal(view[2], expected)
    assert execution.get_output_operand_dimensions(0) == SHAPE
    memory.close()


def test_async_and_burst_on_a_multi_step_plan(register):
    register(float_device(), quant_device())
    model = chain_model()
    expected = cpu_reference(model)[0]
    compilation = finished(model)
    execution = nn.Execution(compilation)
    out = np.zeros(SHAPE, np.float32)
    execution.set_input(0, A)
    execution.set_input(1, B)
    execution.set_output(0, out)
    execution.start_compute().wait()
    np.testing.assert_array_equal(out, expected)
    execution = nn.Execution(compilation)
    out = np.zeros(SHAPE, np.float32)
    execution.set_input(0, A)
    execution.set_input(1, B)
    execution.set_output(0, out)
    with nn.Burst(compilation) as burst:  # refused by the plan: runs step by step
        execution.burst_compute(burst)
    np.testing.assert_array_equal(out, expected)


def test_staged_request_copies_in_and_back():
    src = np.arange(4, dtype=np.float32)
    dst = np.zeros(4, np.float32)
    memory = nn.Memory.create_shared(16)
    request = Request(
        [RequestArgument(False, DataLocation(0, 0, 16))],
        [RequestArgument(False, DataLocation(2, 0, 16)), RequestArgument(has_no_value=True)],
        [src, memory, dst],
    )
    with StagedRequest(request) as staged:
        assert all(isinstance(p, MappedMemory) for p in staged.request.pools)
        assert staged.request.pools[1] is memory
        loc_in, loc_out = staged.request.inputs[0].location, staged.request.outputs[0].location
        assert np.frombuffer(staged.memory.buffer, np.float32, 4, loc_in.offset).tolist() == [
            0,
            1,
            2,
            3,
        ]
        np.frombuffer(staged.memory.buffer, np.float32, 4, loc_out.offset)[:] = 7
        staged.copy_back()
    assert dst.tolist() == [7, 7, 7, 7]
    memory.close()


# -- CPU fallback -----------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["status", "raise"])
def test_failed_step_is_retried_on_the_cpu(register, caplog, how):
    quant = quant_device(fail_execute=how)
    register(float_device(), quant)
    model = chain_model()
    expected = cpu_reference(model)[0]
    compilation = finished(model)
    with caplog.at_level(logging.INFO, logger="nnburst.manager"):
        (out,) = run(compilation)
    np.testing.assert_array_equal(out, expected)
    assert quant.executions == 1
    assert "failed on test-quant" in caplog.text and "retrying it on the CPU" in caplog.text
    assert "whole model" not in caplog.text


def test_failed_cpu_step_falls_back_to_the_whole_model(register, caplog, monkeypatch):
    register(float_device(), quant_device(fail_execute="status"))
    model = chain_model()
    expected = cpu_reference(model)[0]
    compilation = finished(model)
    original = CpuPreparedModel.execute_synchronously

    def partial_models_fail(self, request, measure, **kw):
        if len(self.model.main.operations) < 4:  # a step, not the whole model
            return ErrorStatus.GENERAL_FAILURE, [], NO_TIMING
        return original(self, request, measure, **kw)

    monkeypatch.setattr(CpuPreparedModel, "execute_synchronously", partial_models_fail)
    with caplog.at_level(logging.INFO, logger="nnburst.manager"):
        (out,) = run(compilation)
    np.testing.assert_array_equal(out, expected)
    assert "retrying the whole model on the CPU" in caplog.text


def test_failed_preparation_compiles_the_whole_model_for_the_cpu(register, caplog):
    register(float_device(), quant_device(fail_prepare=True))
    model = chain_model()
    with caplog.at_level(logging.INFO, logger="nnburst.manager"):
        compilation = finished(model)
    assert compilation.device is cpu()
    assert isinstance(compilation.prepared_model, CpuPreparedModel)
    assert "compiling the whole model for the CPU" in caplog.text
    np.testing.assert_array_equal(run(compilation)[0], cpu_reference(model)[0])


def test_single_device_failure_falls_back(register):
    everything = FakeDevice("test-all", (*FLOAT_CODES, Q8), 0.1, 0.1, fail_execute="status")
    register(everything)
    model = chain_model()
    compilation = finished(model)
    assert compilation.device.name == "test-all"
    np.testing.assert_array_equal(run(compilation)[0], cpu_reference(model)[0])
    assert everything.executions == 1


# -- createForDevices -------------------------------------------------------------------------
def test_explicit_devices_that_miss_operations_are_bad_data():
    floats = nn.Device(float_device())
    compilation = nn.Compilation(chain_model(), [floats])
    with raises(nn.ResultCode.BAD_DATA) as info:
        compilation.finish()
    message = str(info.value)
    assert "0 (DEQUANTIZE)" in message and "2 (ADD)" in message
    assert "1 (ADD)" not in message and "QUANTIZE)" not in message.replace("DEQUANTIZE)", "")


def test_explicit_devices_partition_without_the_cpu():
    floats, quants = float_device(), quant_device()
    model = chain_model()
    compilation = finished(model, [nn.Device(floats), nn.Device(quants)])
    assert step_devices(compilation) == [("test-float", [1, 3]), ("test-quant", [2, 0])]
    assert not compilation.prepared_model.fallback_enabled
    np.testing.assert_array_equal(run(compilation)[0], cpu_reference(model)[0])


def test_explicit_devices_never_fall_back():
    model = chain_model()
    compilation = finished(
        model, [nn.Device(float_device()), nn.Device(quant_device(fail_execute="status"))]
    )
    with raises(nn.ResultCode.OP_FAILED):
        run(compilation)
    failing = nn.Compilation(
        model, [nn.Device(float_device()), nn.Device(quant_device(fail_prepare=True))]
    )
    with raises(nn.ResultCode.OP_FAILED):
        failing.finish()
    with raises(nn.ResultCode.BAD_STATE):
        nn.Execution(failing)


def test_explicit_single_accelerator_measures_timing():
    everything = FakeDevice("test-all", (*FLOAT_CODES, Q8), 0.1, 0.1)
    compilation = finished(chain_model(), [nn.Device(everything)])
    execution = nn.Execution(compilation)
    execution.set_measure_timing(True)
    out = np.zeros(SHAPE, np.float32)
    execution.set_input(0, A)
    execution.set_input(1, B)
    execution.set_output(0, out)
    execution.compute()
    assert execution.get_duration(nn.DurationCode.ON_HARDWARE) < 2**64 - 1


# -- supported operations ---------------------------------------------------------------------
def test_get_supported_operations_for_devices():
    model = chain_model()  # operations: DEQUANTIZE, ADD (float), ADD (quant), QUANTIZE
    floats, quants = nn.Device(float_device()), nn.Device(quant_device())
    assert model.get_supported_operations_for_devices([floats]) == [False, True, False, True]
    assert model.get_supported_operations_for_devices([quants]) == [True, False, True, False]
    assert model.get_supported_operations_for_devices([floats, quants]) == [True] * 4
    assert model.get_supported_operations_for_devices([cpu()]) == [True] * 4
    with raises(nn.ResultCode.BAD_DATA):
        model.get_supported_operations_for_devices([])
    with raises(nn.ResultCode.BAD_DATA):
        model.get_supported_operations_for_devices(["not a device"])


def test_a_device_that_cannot_answer_supports_nothing(register):
    class Broken(FakeDevice):
        def get_supported_operations(self, model):
            raise NNError("service gone", nn.ResultCode.DEAD_OBJECT)

    register(Broken("test-broken", FLOAT_CODES, 0.01, 0.01))
    compilation = finished(chain_model())
    assert compilation.device is cpu()
