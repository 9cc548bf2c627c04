"""What a newcomer meets first: children that import the installed package
from any directory, errors that say why, services that are not there, and
devices chosen by what they measurably cost."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import nnburst as nn
from nnburst._version import __version__
from nnburst.cpu import calibration
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.operands import OperandInfo
from nnburst.partition import estimated_us, operation_work
from nnburst.service import launch, remote
from nnburst.service.driver import sample_devices
from nnburst.tools.benchmarks import report, runtime_bench, runtime_paths
from nnburst.tools.benchmarks.service_process import ServiceError
from nnburst.tools.cli import main
from nnburst.tools.serve import parse_performance

from .test_service import ServiceProcess


@pytest.fixture
def decoy_checkout(tmp_path, monkeypatch):
    """A working directory holding an ``nnburst`` folder that cannot be imported,
    as a source checkout's root is for an installed nnburst."""
    decoy = tmp_path / "checkout"
    (decoy / "nnburst").mkdir(parents=True)
    (decoy / "nnburst" / "__init__.py").write_text(
        "raise ImportError('imported the decoy checkout')\n"
    )
    monkeypatch.chdir(decoy)
    return decoy


def test_children_import_the_installed_package_whatever_the_directory(decoy_checkout):
    result = subprocess.run(
        launch.child_python("nnburst", "--version"),
        capture_output=True,
        text=True,
        cwd=decoy_checkout,
        env=launch.child_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"nnburst {__version__}"


def test_the_service_starts_from_a_checkout_root(decoy_checkout, tmp_path):
    process, stderr = launch.start_service(str(tmp_path / "svc" / "driver.sock"))
    try:
        assert process.poll() is None
    finally:
        launch.stop_process(process)
        stderr.close()
    assert process.returncode == 0


def test_a_service_that_fails_to_start_reports_its_own_error(tmp_path):
    with pytest.raises(launch.ServiceStartError) as caught:
        launch.start_service(str(tmp_path / "driver.sock"), ["--emulate-performance", "nonsense"])
    message = str(caught.value)
    assert "exited with code 2" in message
    assert "expected DEVICE=TIME[/POWER]" in message  # the child's own argparse error


def test_a_failing_mode_keeps_the_rows_that_finished(monkeypatch, capsys, tmp_path):
    def no_service(cpu=None):
        raise ServiceError("the driver service exited with code 1 before it listened: boom")

    monkeypatch.setattr(runtime_bench, "driver_service", no_service)
    path = tmp_path / "partial.json"
    argv = ["bench", "--model", "add-mul", "--duration", "0.02", "--paths", "sync"]
    code = main([*argv, "--json", str(path)])
    out, _ = capsys.readouterr()
    assert code == 1
    assert "sync in-process" in out and "multiprocessing.Pipe" in out
    assert "1 modes failed" in out
    assert "add-mul sync cross-process: the driver service exited" in out
    document = json.loads(path.read_text())
    assert report.validate(document) == []
    assert [row["path"] for row in document["latency"]] == ["pipe", "sync"]
    error = "the driver service exited with code 1 before it listened: boom"
    assert document["failures"] == [
        {"model": "add-mul", "mode": "sync cross-process", "error": error}
    ]


def test_the_in_process_rows_name_the_reference_device(monkeypatch):
    chosen = []
    original = runtime_paths.execution_path

    def spy(work, path, device=None, polling=True):
        chosen.append(device)
        return original(work, path, device, polling)

    monkeypatch.setattr(runtime_paths, "execution_path", spy)
    settings = runtime_bench.Settings(
        models=("add-mul",),
        iterations=2,
        duration=None,
        paths=("sync",),
        placements=("in-process",),
    )
    result = runtime_bench.run(settings)
    assert [row.mode.name for row in result.rows] == ["multiprocessing.Pipe", "sync in-process"]
    assert [device.name for device in chosen] == ["nnburst-reference"]


# -- services that cannot be reached --------------------------------------------------------


def test_each_unreachable_service_path_is_named_once_with_the_reason(tmp_path, monkeypatch, caplog):
    regular = tmp_path / "regular"
    regular.write_text("")
    stale = tmp_path / "stale.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(stale))
    listener.close()  # the socket file stays, nothing listens
    missing = tmp_path / "missing.sock"
    monkeypatch.setenv("NNBURST_SERVICES", f"{missing}:{regular}:{stale}")
    remote.disconnect_all()
    with caplog.at_level(logging.WARNING, logger="nnburst.service"):
        names = [d.name for d in nn.get_devices()]
        nn.get_devices()
    assert names == ["nnburst-reference"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3, warnings
    assert f"{missing}: it does not exist" in warnings[0]
    assert f"{regular}: it is not a socket" in warnings[1]
    assert f"{stale}: nothing listens on it" in warnings[2]


def test_the_default_socket_missing_is_not_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("NNBURST_SERVICES", raising=False)
    monkeypatch.setenv("NNBURST_SOCKET", str(tmp_path / "none.sock"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    remote.disconnect_all()
    with caplog.at_level(logging.WARNING, logger="nnburst.service"):
        nn.get_devices()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_stress_fails_when_its_service_is_not_there(tmp_path, capsys):
    code = main(["stress", "--socket", str(tmp_path / "missing.sock"), "--duration", "1"])
    _, err = capsys.readouterr()
    assert code == 2
    assert "no driver service answers there" in err


# -- honest capabilities ---------------------------------------------------------------------


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


# -- errors at the call that made the mistake ----------------------------------------------------


def test_add_operation_checks_operand_counts_when_called():
    model = nn.Model()
    tensor = nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, (2,))
    a, b, out = (model.add_operand(tensor) for _ in range(3))
    with pytest.raises(nn.NNError, match=r"ADD\): takes 3 inputs, got 2") as caught:
        model.add_operation(nn.OperationCode.ADD, [a, b], [out])
    assert caught.value.code == nn.ResultCode.BAD_DATA
    with pytest.raises(nn.NNError, match=r"TOPK_V2\): gives 2 outputs, got 1"):
        model.add_operation(nn.OperationCode.TOPK_V2, [a, b], [out])
    with pytest.raises(nn.NNError, match="takes at least 2 inputs, got 1"):
        model.add_operation(nn.OperationCode.CONCATENATION, [a], [out])


def test_every_operation_has_operand_counts():
    from nnburst.arity import arity

    assert [code.name for code in nn.OperationCode if arity(code) is None] == []


@pytest.mark.parametrize("dimensions", [("a",), (1.5,), 3, (True,)])
def test_a_bad_operand_type_dimension_is_bad_data(dimensions):
    with pytest.raises(nn.NNError) as caught:
        nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, dimensions)
    assert caught.value.code == nn.ResultCode.BAD_DATA
    assert "dimensions" in str(caught.value)


def test_a_device_asked_for_by_a_missing_name_lists_the_names_that_exist():
    assert nn.get_device("nnburst-reference").name == "nnburst-reference"
    with pytest.raises(
        nn.NNError, match=r"no device named 'nnburst-gpu'; the devices are: nnburst-reference"
    ) as caught:
        nn.get_device("nnburst-gpu")
    assert caught.value.code == nn.ResultCode.BAD_DATA


def test_a_service_started_by_a_killed_parent_does_not_outlive_it(tmp_path):
    """The parent dies by SIGKILL (no cleanup runs): its service must go too."""
    script = (
        "import sys\n"
        "from nnburst.service.launch import start_service\n"
        "process, _ = start_service(sys.argv[1])\n"
        "print(process.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-P", "-c", script, str(tmp_path / "s.sock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=launch.child_env(),
    )
    try:
        service_pid = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait()
        parent.stdin.close()
        parent.stdout.close()
    for _ in range(400):  # up to 20 s: only guards against a hang
        try:
            os.kill(service_pid, 0)
        except ProcessLookupError:
            return
        with open(f"/proc/{service_pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return  # exited, waiting for init to reap it
        time.sleep(0.05)
    os.kill(service_pid, 9)
    pytest.fail("the service outlived its killed parent")


#: The test environment is an editable install, whose finder would supply the
#: compiled module to any ``nnburst`` package; a user's ``pip install .`` has none.
_WITHOUT_EDITABLE_FINDER = (
    "import sys; sys.meta_path[:] = "
    "[f for f in sys.meta_path if 'Editable' not in getattr(f, '__name__', '')]; "
)


def test_importing_an_unbuilt_checkout_says_what_to_do(tmp_path):
    """``python -c 'import nnburst'`` at a clone's root finds the checkout first."""
    checkout = tmp_path / "clone"
    shutil.copytree(
        os.path.dirname(nn.__file__),
        checkout / "nnburst",
        ignore=shutil.ignore_patterns("*.so", "__pycache__"),
    )
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EDITABLE_FINDER + "import nnburst"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 1
    assert "compiled module is missing" in result.stderr
    assert "pip install -e ." in result.stderr
