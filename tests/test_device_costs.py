"""Devices chosen by what they measurably cost: the reference's measured cost,
the sample devices' declared ratios (measured or emulated), the partitioner's
weights, and an app that names no device staying on the in-process CPU."""

from __future__ import annotations

import os

import numpy as np
import pytest

import nnburst as nn
from nnburst.cpu import calibration
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.operands import OperandInfo
from nnburst.partition import estimated_us, operation_work
from nnburst.service import remote
from nnburst.service.driver import sample_devices
from nnburst.tools.benchmarks import runtime_paths
from nnburst.tools.serve import parse_performance

from .test_service import ServiceProcess


def test_the_reference_cost_is_measured():
    cost = calibration.reference_cost()
    assert cost.operation_us > 0 and cost.element_ns >= 0
    assert cost.estimate_us(10_000) >= cost.estimate_us(1)


def test_sample_devices_declare_measured_ratios_not_speedups():
    for device in sample_devices():
        for perf in device.capabilities.operand_performance.values():
            assert perf.exec_time >= 1.0  # the reference kernels cannot beat themselves
    emulated = sample_devices(
        {"nnburst-sample-quant": parse_performance("nnburst-sample-quant=0.5/0.25")[1]}
    )
    quant = next(d for d in emulated if d.name == "nnburst-sample-quant")
    perf = quant.capabilities.performance_for(nn.OperandCode.TENSOR_QUANT8_ASYMM)
    assert (perf.exec_time, perf.power_usage) == (0.5, 0.25)


@pytest.mark.parametrize(
    "text", ["x", "nnburst-sample-all=", "=1", "nnburst-sample-all=0", "a=1/2/3", "a=x"]
)
def test_emulated_performance_must_be_well_formed(text):
    with pytest.raises(Exception, match="DEVICE=TIME"):
        parse_performance(text)


def test_emulating_an_unknown_device_names_the_real_ones():
    with pytest.raises(nn.NNError, match="no sample device named nnburst-gpu .*nnburst-sample-all"):
        sample_devices({"nnburst-gpu": parse_performance("nnburst-gpu=0.1")[1]})


def test_a_convolution_weighs_its_multiply_accumulates():
    f32 = nn.OperandCode.TENSOR_FLOAT32
    operands = [
        Operand(OperandInfo(f32, (1, 8, 8, 16)), Lifetime.SUBGRAPH_INPUT),
        Operand(
            OperandInfo(f32, (32, 3, 3, 16)),
            Lifetime.CONSTANT_COPY,
            np.zeros((32, 3, 3, 16), np.float32),
        ),
        Operand(OperandInfo(f32, (1, 8, 8, 32)), Lifetime.SUBGRAPH_OUTPUT),
    ]
    model = HalModel(Subgraph(operands, [], (0,), (2,)))
    conv = Operation(nn.OperationCode.CONV_2D, (0, 1), (2,))
    relu = Operation(nn.OperationCode.RELU, (0,), (2,))
    assert operation_work(model, conv) == 8 * 8 * 32 * 3 * 3 * 16
    assert operation_work(model, relu) == 8 * 8 * 32
    assert estimated_us(1.0, 100.0, 1) > estimated_us(1.0, 0.0, 1)


def test_a_running_service_does_not_take_over_the_readme_example(tmp_path, monkeypatch):
    """With the sample service up (measured capabilities), an app that names no
    device still runs on the in-process CPU: reaching the service costs more
    than the same kernels save nothing."""
    service = ServiceProcess(str(tmp_path / "driver.sock"), args=())
    try:
        remote.disconnect_all()
        monkeypatch.setenv("NNBURST_SERVICES", service.path)
        assert any(d.name == "nnburst-sample-minimal" for d in nn.get_devices())
        work = runtime_paths.add_mul_model()
        with nn.Compilation(work.model) as compilation:
            compilation.finish()
            assert compilation.device is not None and compilation.device.name == "nnburst-reference"
            execution = nn.Execution(compilation)
            for i, value in enumerate(work.inputs):
                execution.set_input(i, value)
            execution.set_output(0, work.output)
            execution.compute()
        np.testing.assert_array_equal(work.output, (work.inputs[0] + work.inputs[1]) * 0.5)
    finally:
        remote.disconnect_all()
        service.kill()
    assert not os.path.exists(tmp_path / "driver.sock") or service.proc.returncode is not None
