"""The driver service process: discovery, sample devices, HAL calls over the
socket, cross-process bursts, peer death in both directions, and hostile
clients.  Everything runs against real ``python -m nnburst.tools.serve``
processes started here."""

from __future__ import annotations

import math
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

import nnburst as nn
from nnburst._version import __version__
from nnburst.codes import ErrorStatus, OperandCode, OperationCode, ResultCode
from nnburst.errors import BadDataError, BrokenResourceError, NNError
from nnburst.hal.burst_controller import ExecutionBurstController
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.hal.staging import StagedRequest
from nnburst.hal.types import DataLocation, DeviceType, MeasureTiming, Request, RequestArgument
from nnburst.memory import PROT_READ, PROT_WRITE, Memory
from nnburst.operands import OperandInfo
from nnburst.service import protocol, remote, wire
from nnburst.service.driver import Limits, Service, peer_allowed, peer_uid
from nnburst.service.wire import FLAG_ERROR, HEADER, MAX_PAYLOAD, Frame, recv_frame, send_frame

from .blocking import sleeping_service_process, wait_until
from .burst_models import NBYTES, Pools, add_model
from .cts_vectors import check_outputs, iter_vectors, parse_vector
from .peers import REPO
from .test_model import add_model as nn_add_model

#: A hang guard: a dead service must be noticed well before its injected
#: hang (60 s) ends, and nothing else here waits on a timeout.
PROMPTLY = 30.0

DEVICES = [
    "nnburst-sample-all",
    "nnburst-sample-float-fast",
    "nnburst-sample-quant",
    "nnburst-sample-minimal",
]


#: Sample devices that declare themselves faster than the reference CPU (as
#: Android's sample drivers do), so the partitioning tests have choices to make.
EMULATED = (
    "--emulate-performance",
    "nnburst-sample-all=1.1",
    "--emulate-performance",
    "nnburst-sample-float-fast=0.8/1.2",
    "--emulate-performance",
    "nnburst-sample-quant=0.6/0.4",
    "--emulate-performance",
    "nnburst-sample-minimal=0.4/0.5",
)


class ServiceProcess:
    """``python -m nnburst.tools.serve`` on ``path``, ready when constructed."""

    def __init__(
        self, path: str, env: dict[str, str] | None = None, args: tuple[str, ...] | None = None
    ) -> None:
        """``args`` default to :data:`EMULATED`; ``()`` keeps the measured capabilities."""
        self.path = path
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nnburst.tools.serve",
                "--socket",
                path,
                *(EMULATED if args is None else args),
            ],
            cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO), **(env or {})),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready, _, _ = select.select([self.proc.stdout], [], [], 20)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("listening"):
            self.proc.kill()
            raise AssertionError(f"the service did not start: {self.proc.communicate()[1]}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.communicate()

    def stop(self) -> int:
        """SIGTERM; the service must exit cleanly and unlink its socket."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, self.stderr = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise AssertionError("the service ignored SIGTERM") from None
        return self.proc.returncode


def healthy_service(path: str, args: tuple[str, ...] | None = None) -> Iterator[ServiceProcess]:
    """A service for tests that leave it healthy: it must stop cleanly, unlink
    its socket and print no traceback (the body of a module fixture)."""
    proc = ServiceProcess(path, args=args)
    yield proc
    remote.disconnect_all()
    assert proc.stop() == 0
    assert not os.path.exists(path)
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """One service for the tests that leave it healthy."""
    yield from healthy_service(str(tmp_path_factory.mktemp("svc") / "driver.sock"))


@pytest.fixture
def services_env(service: ServiceProcess, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("NNBURST_SERVICES", service.path)
    yield service.path
    remote.disconnect_all()


@pytest.fixture
def client(service: ServiceProcess) -> Iterator[remote.ServiceClient]:
    c = remote.ServiceClient(service.path)
    yield c
    c.close()


@pytest.fixture
def own_service(tmp_path: pytest.TempPathFactory) -> Iterator[callable]:
    """Start a private service (with faults or options) that a test may kill."""
    started: list[ServiceProcess] = []

    def start(env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> ServiceProcess:
        proc = ServiceProcess(str(tmp_path / f"s{len(started)}.sock"), env, args)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


def device(client: remote.ServiceClient, name: str) -> remote.RemoteDevice:
    return next(d for d in client.devices() if d.name == name)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# -- models ------------------------------------------------------------------------------


def tensor(
    code: OperandCode, dims: tuple[int, ...] = (2,), scale: float = 0.0, zp: int = 0
) -> OperandInfo:
    return OperandInfo(code, dims, scale, zp)


def const_i32(value: int) -> Operand:
    return Operand(
        OperandInfo(OperandCode.INT32, ()), Lifetime.CONSTANT_COPY, np.array(value, np.int32)
    )


def mixed_model() -> HalModel:
    """float ADD, quant8 ADD, float LOGISTIC: one op for each kind of device."""
    f = tensor(OperandCode.TENSOR_FLOAT32)
    q = tensor(OperandCode.TENSOR_QUANT8_ASYMM, scale=0.5, zp=0)
    ql = tensor(OperandCode.TENSOR_QUANT8_ASYMM, scale=1.0, zp=0)
    operands = [
        Operand(f, Lifetime.SUBGRAPH_INPUT),
        Operand(f, Lifetime.SUBGRAPH_INPUT),
        const_i32(0),
        Operand(f, Lifetime.TEMPORARY_VARIABLE),
        Operand(q, Lifetime.SUBGRAPH_INPUT),
        Operand(q, Lifetime.SUBGRAPH_INPUT),
        Operand(ql, Lifetime.SUBGRAPH_OUTPUT),
        Operand(f, Lifetime.SUBGRAPH_OUTPUT),
    ]
    operations = [
        Operation(OperationCode.ADD, (0, 1, 2), (3,)),
        Operation(OperationCode.ADD, (4, 5, 2), (6,)),
        Operation(OperationCode.LOGISTIC, (3,), (7,)),
    ]
    return HalModel(Subgraph(operands, operations, (0, 1, 4, 5), (6, 7)))


def branch(code: OperationCode) -> Subgraph:
    f = tensor(OperandCode.TENSOR_FLOAT32)
    operands = [
        Operand(f, Lifetime.SUBGRAPH_INPUT),
        const_i32(0),
        Operand(f, Lifetime.SUBGRAPH_OUTPUT),
    ]
    return Subgraph(operands, [Operation(code, (0, 0, 1), (2,))], (0,), (2,))


def if_model() -> HalModel:
    """out = cond ? x + x : x * x (HAL 1.3 IF with two referenced subgraphs)."""
    f = tensor(OperandCode.TENSOR_FLOAT32)
    model_ref = OperandInfo(OperandCode.MODEL, ())
    operands = [
        Operand(tensor(OperandCode.TENSOR_BOOL8, (1,)), Lifetime.SUBGRAPH_INPUT),
        Operand(model_ref, Lifetime.SUBGRAPH, subgraph=0),
        Operand(model_ref, Lifetime.SUBGRAPH, subgraph=1),
        Operand(f, Lifetime.SUBGRAPH_INPUT),
        Operand(f, Lifetime.SUBGRAPH_OUTPUT),
    ]
    main = Subgraph(operands, [Operation(OperationCode.IF, (0, 1, 2, 3), (4,))], (0, 3), (4,))
    return HalModel(main, [branch(OperationCode.ADD), branch(OperationCode.MUL)])


class Arguments:
    """Inputs and outputs laid out in two shared memories (the only pools a service accepts)."""

    def __init__(
        self, inputs: list[np.ndarray | None], outputs: list[tuple[tuple[int, ...], np.dtype]]
    ) -> None:
        self.memories: list[Memory] = []
        in_args, offset = [], 0
        for array in inputs:
            if array is None:
                in_args.append(RequestArgument(True))
                continue
            in_args.append(RequestArgument(False, DataLocation(0, offset, array.nbytes)))
            offset += max(array.nbytes, 1)
        self.memories.append(Memory.create_shared(max(offset, 1)))
        for array, arg in zip(inputs, in_args):
            if array is not None and array.nbytes:
                self.memories[0].buffer[
                    arg.location.offset : arg.location.offset + array.nbytes
                ] = np.ascontiguousarray(array).tobytes()
        out_args, self._outputs, offset = [], [], 0
        for dims, dtype in outputs:
            nbytes = math.prod(dims) * np.dtype(dtype).itemsize
            out_args.append(RequestArgument(False, DataLocation(1, offset, nbytes)))
            self._outputs.append((offset, dims, np.dtype(dtype)))
            offset += max(nbytes, 1)
        self.memories.append(Memory.create_shared(max(offset, 1)))
        self.request = Request(in_args, out_args, list(self.memories))

    def outputs(self) -> list[np.ndarray]:
        return [
            np.frombuffer(self.memories[1].buffer, dtype, math.prod(dims), offset)
            .reshape(dims)
            .copy()
            for offset, dims, dtype in self._outputs
        ]

    def close(self) -> None:
        for memory in self.memories:
            memory.close()


def run_add(prepared, a: float = 1.0, b: float = 2.0) -> tuple[ErrorStatus, np.ndarray]:
    args = Arguments(
        [np.full((3, 4), a, np.float32), np.full((3, 4), b, np.float32)], [((3, 4), np.float32)]
    )
    try:
        status, shapes, _ = prepared.execute_synchronously(args.request, MeasureTiming.NO)
        return status, args.outputs()[0]
    finally:
        args.close()


# -- discovery and devices -----------------------------------------------------------------


def test_get_devices_lists_the_cpu_and_every_service_device(services_env):
    devices = nn.get_devices()
    names = [d.name for d in devices]
    assert names == ["nnburst-reference", *DEVICES]
    assert nn.get_devices()[1] is devices[1]  # the same objects on every call
    by_name = {d.name: d for d in devices}
    assert by_name["nnburst-sample-all"].type == nn.DeviceTypeCode.CPU
    assert by_name["nnburst-sample-float-fast"].type == nn.DeviceTypeCode.GPU
    assert by_name["nnburst-sample-quant"].type == nn.DeviceTypeCode.ACCELERATOR
    for d in devices[1:]:
        vendor, _, device_name = d.name.partition("-")
        assert vendor == "nnburst" and device_name
        assert __version__ in d.version and d.name in d.version
        assert d.feature_level >= 27
    assert by_name["nnburst-sample-minimal"].feature_level == 27


def test_unreachable_services_add_nothing_and_do_not_hang(tmp_path, monkeypatch):
    dead = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(dead))  # a socket file nobody listens on
    try:
        monkeypatch.setenv("NNBURST_SERVICES", f"{tmp_path / 'missing.sock'}:{dead}")
        start = time.monotonic()
        assert [d.name for d in nn.get_devices()] == ["nnburst-reference"]
        assert time.monotonic() - start < PROMPTLY  # a hang guard: nothing here waits on a timeout
    finally:
        s.close()
        remote.disconnect_all()


def test_default_socket_path(monkeypatch):
    monkeypatch.setenv("NNBURST_SOCKET", "/x/y.sock")
    assert protocol.default_socket_path() == "/x/y.sock"
    monkeypatch.delenv("NNBURST_SOCKET")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/7")
    assert protocol.default_socket_path() == "/run/user/7/nnburst/driver.sock"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert protocol.default_socket_path() == f"/tmp/nnburst-{os.getuid()}/driver.sock"
    monkeypatch.delenv("NNBURST_SERVICES", raising=False)
    assert remote.service_paths() == [protocol.default_socket_path()]


def test_socket_and_directory_are_private(service):
    assert stat.S_IMODE(os.stat(service.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(service.path)).st_mode) == 0o700


def test_capabilities_differ_per_device(client):
    caps = {d.name: d.capabilities for d in client.devices()}
    fast = caps["nnburst-sample-float-fast"]
    assert (
        fast.performance_for(OperandCode.TENSOR_FLOAT32).exec_time
        < caps["nnburst-sample-all"].performance_for(OperandCode.TENSOR_FLOAT32).exec_time
    )
    quant = caps["nnburst-sample-quant"]
    assert (
        quant.performance_for(OperandCode.TENSOR_QUANT8_ASYMM).exec_time
        < quant.performance_for(OperandCode.TENSOR_FLOAT32).exec_time
    )
    assert caps["nnburst-sample-minimal"].if_performance.exec_time > 1e30
    assert all(len(c.operand_performance) == len(OperandCode) for c in caps.values())


@pytest.mark.parametrize(
    ("name", "mixed", "control_flow"),
    [
        ("nnburst-sample-all", [True, True, True], [True]),
        ("nnburst-sample-float-fast", [True, False, True], [True]),
        (
            "nnburst-sample-quant",
            [False, True, False],
            [False],
        ),  # IF accepted, but its branches are float
        ("nnburst-sample-minimal", [True, True, False], [False]),
    ],
)
def test_supported_operations_per_device(client, name, mixed, control_flow):
    d = device(client, name)
    assert d.get_supported_operations(mixed_model()) == mixed
    assert d.get_supported_operations(if_model()) == control_flow


# -- prepare and execute over the socket -----------------------------------------------------


@pytest.mark.parametrize(
    "name", ["nnburst-sample-all", "nnburst-sample-float-fast", "nnburst-sample-minimal"]
)
def test_prepare_and_execute_synchronously(client, name):
    prepared = device(client, name).prepare_model(add_model())
    status, out = run_add(prepared, 1.5, 2.0)
    assert status == ErrorStatus.NONE
    assert np.all(out == 3.5)
    args = Arguments(
        [np.ones((3, 4), np.float32), np.ones((3, 4), np.float32)], [((3, 4), np.float32)]
    )
    status, shapes, timing = prepared.execute_synchronously(args.request, MeasureTiming.YES)
    args.close()
    assert status == ErrorStatus.NONE and [s.dimensions for s in shapes] == [(3, 4)]
    assert timing.time_on_device <= timing.time_in_driver < 10**7
    prepared.close()


def test_if_model_runs_in_the_service(client):
    prepared = device(client, "nnburst-sample-float-fast").prepare_model(if_model())
    x = np.array([3, 4], np.float32)
    for cond, want in ((True, x + x), (False, x * x)):
        args = Arguments([np.array([cond]), x], [((2,), np.float32)])
        status, _, _ = prepared.execute_synchronously(args.request, MeasureTiming.NO)
        assert status == ErrorStatus.NONE
        assert np.array_equal(args.outputs()[0], want)
        args.close()


def test_preparing_an_unsupported_model_is_bad_data(client):
    with pytest.raises(NNError) as info:
        device(client, "nnburst-sample-quant").prepare_model(add_model())
    assert info.value.code == ResultCode.BAD_DATA


def test_pools_must_be_shared_memory_and_user_buffers_can_be_staged(client):
    prepared = device(client, "nnburst-sample-all").prepare_model(add_model())
    pools = Pools()
    request = pools.request()
    inputs = np.arange(24, dtype=np.float32)
    output = np.zeros(12, np.float32)
    request.pools = [inputs, output]
    assert (
        prepared.execute_synchronously(request, MeasureTiming.NO)[0] == ErrorStatus.INVALID_ARGUMENT
    )
    request.pools = [inputs, pools.output]  # one user buffer, one Memory used in place
    with StagedRequest(request) as staged:
        assert (
            prepared.execute_synchronously(staged.request, MeasureTiming.NO)[0] == ErrorStatus.NONE
        )
        staged.copy_back()
    assert np.array_equal(pools.c.reshape(-1), inputs[:12] + inputs[12:])
    request.pools = [inputs, output]
    with StagedRequest(request) as staged:
        assert (
            prepared.execute_synchronously(staged.request, MeasureTiming.NO)[0] == ErrorStatus.NONE
        )
        staged.copy_back()
    assert np.array_equal(output, inputs[:12] + inputs[12:])
    request.inputs[1] = RequestArgument(False, DataLocation(0, 64, 48))  # past the 96-byte buffer
    with pytest.raises(BadDataError):
        StagedRequest(request)
    pools.close()


@pytest.mark.parametrize(
    "location",
    [
        DataLocation(0, 90, 48),
        DataLocation(0, 2**63, 48),
        DataLocation(5, 0, 48),
        DataLocation(0, 0, 47),
    ],
    ids=["past-the-pool", "huge-offset", "no-such-pool", "short"],
)
def test_bad_locations_are_invalid_argument(client, location):
    prepared = device(client, "nnburst-sample-all").prepare_model(add_model())
    pools = Pools()
    try:
        request = pools.request()
        request.inputs[1] = RequestArgument(False, location)
        status, shapes, _ = prepared.execute_synchronously(request, MeasureTiming.NO)
        assert status == ErrorStatus.INVALID_ARGUMENT and shapes == []
        assert run_add(prepared)[0] == ErrorStatus.NONE
    finally:
        pools.close()


def test_output_insufficient_size_reports_the_shapes(client):
    prepared = device(client, "nnburst-sample-all").prepare_model(add_model())
    pools = Pools()
    request = pools.request()
    request.outputs[0] = RequestArgument(False, DataLocation(1, 0, 16))
    status, shapes, _ = prepared.execute_synchronously(request, MeasureTiming.NO)
    pools.close()
    assert status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
    assert shapes[0].dimensions == (3, 4) and not shapes[0].is_sufficient


CTS = [
    (name, raw)
    for name, raw in iter_vectors()
    if name.split("/")[1]
    in {
        "add",
        "add_quant8",
        "conv_float",
        "conv_quant8",
        "fully_connected_float",
        "depthwise_conv2d_float",
        "softmax_float_1",
        "lstm",
        "mul_relu",
        "l2_pool_float",
    }
]


@pytest.mark.skipif(not CTS, reason="no NNAPI conformance vectors found (NNBURST_CTS_DIR)")
@pytest.mark.parametrize("raw", [raw for _, raw in CTS], ids=[name for name, _ in CTS])
def test_conformance_vectors_through_the_service(client, raw):
    vector = parse_vector(raw)
    operands = vector.model.main.operands
    outputs = [(e.dimensions, operands[e.operand].info.dtype) for e in vector.outputs]
    prepared = device(client, "nnburst-sample-all").prepare_model(vector.model)
    args = Arguments(vector.inputs, outputs)
    try:
        status, _, _ = prepared.execute_synchronously(args.request, MeasureTiming.NO)
        assert status == ErrorStatus.NONE
        check_outputs(vector, args.outputs())
    finally:
        args.close()


# -- bursts ----------------------------------------------------------------------------------


def test_cross_process_burst_with_memories_freed_mid_burst(client):
    prepared = device(client, "nnburst-sample-all").prepare_model(add_model())
    pools = Pools()
    with ExecutionBurstController.create(prepared) as controller:
        for i in range(3):
            pools.a[:] = i
            pools.b[:] = 0.5
            status, shapes, _, fallback = controller.compute(
                pools.request(), MeasureTiming.NO, pools.keys
            )
            assert (status, fallback) == (ErrorStatus.NONE, False)
            assert np.all(pools.c == i + 0.5)
        controller.free_memory(pools.output)
        fresh = Pools()
        request = pools.request()
        request.pools = [pools.inputs, fresh.output]
        status, _, _, _ = controller.compute(
            request, MeasureTiming.NO, [pools.inputs, fresh.output]
        )
        assert status == ErrorStatus.NONE and np.all(fresh.c == 2.5)
        fresh.close()
    pools.close()
    assert run_add(prepared)[0] == ErrorStatus.NONE  # the sync path still works beside it


# -- peer death -------------------------------------------------------------------------------


def _kill_when_hanging(proc: ServiceProcess) -> threading.Thread:
    """SIGKILL the service process (the worker, with several) once it is inside the
    injected hang: the ``hang`` fault polls in time.sleep, and no other service
    thread sleeps."""

    def kill() -> None:
        wait_until(lambda: sleeping_service_process(proc.pid), "the service reached the hang")
        os.kill(sleeping_service_process(proc.pid) or proc.pid, signal.SIGKILL)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def test_killing_the_service_during_execute_returns_promptly(own_service):
    fds = open_fds()
    proc = own_service(env={"NNBURST_SERVICE_FAULT": "execute:hang"})
    c = remote.ServiceClient(proc.path)
    prepared = device(c, "nnburst-sample-all").prepare_model(add_model())
    killer = _kill_when_hanging(proc)
    start = time.monotonic()
    status, _ = run_add(prepared)
    assert status == ErrorStatus.DEVICE_UNAVAILABLE
    assert time.monotonic() - start < PROMPTLY
    killer.join()
    assert run_add(prepared)[0] == ErrorStatus.DEVICE_UNAVAILABLE  # and later calls fail at once
    with pytest.raises(BrokenResourceError):
        device(c, "nnburst-sample-all").prepare_model(add_model())
    c.close()
    proc.kill()
    assert open_fds() == fds


def test_killing_the_service_during_a_burst_compute_returns_promptly(own_service):
    fds = open_fds()
    proc = own_service(env={"NNBURST_SERVICE_FAULT": "execute:hang"})
    c = remote.ServiceClient(proc.path)
    prepared = device(c, "nnburst-sample-all").prepare_model(add_model())
    pools = Pools()
    controller = ExecutionBurstController.create(prepared)
    killer = _kill_when_hanging(proc)
    start = time.monotonic()
    status, _, _, fallback = controller.compute(pools.request(), MeasureTiming.NO, pools.keys)
    assert status == ErrorStatus.DEVICE_UNAVAILABLE and not fallback
    assert time.monotonic() - start < PROMPTLY
    killer.join()
    controller.close()
    pools.close()
    c.close()
    proc.kill()
    assert open_fds() == fds


def test_killing_the_service_during_prepare_raises_promptly(own_service):
    fds = open_fds()
    proc = own_service(env={"NNBURST_SERVICE_FAULT": "prepare:hang"})
    c = remote.ServiceClient(proc.path)
    d = device(c, "nnburst-sample-all")
    killer = _kill_when_hanging(proc)
    start = time.monotonic()
    with pytest.raises(BrokenResourceError) as info:
        d.prepare_model(add_model())
    assert info.value.code == ResultCode.DEAD_OBJECT
    assert time.monotonic() - start < PROMPTLY
    killer.join()
    c.close()
    proc.kill()
    assert open_fds() == fds


def test_injected_execution_failure_is_reported(own_service):
    proc = own_service(env={"NNBURST_SERVICE_FAULT": "execute:fail"})
    c = remote.ServiceClient(proc.path)
    prepared = device(c, "nnburst-sample-all").prepare_model(add_model())
    assert run_add(prepared)[0] == ErrorStatus.GENERAL_FAILURE
    c.close()
    assert proc.stop() == 0


def test_a_client_killed_mid_burst_leaves_the_service_healthy(service, client):
    peer = subprocess.Popen(
        [sys.executable, "-m", "tests.service_peer", "burst_forever", service.path],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([peer.stdout], [], [], 20)
        # "bursting" comes after the first compute: the burst is live and the
        # peer computes in a loop, so the kill lands mid-burst.
        assert ready and peer.stdout.readline().strip() == "bursting", (
            peer.stderr.read() if not ready else ""
        )
    finally:
        peer.kill()
        peer.communicate()
    assert service.alive()
    prepared = device(client, "nnburst-sample-all").prepare_model(add_model())
    assert run_add(prepared)[0] == ErrorStatus.NONE
    pools = Pools()
    with ExecutionBurstController.create(prepared) as controller:
        assert (
            controller.compute(pools.request(), MeasureTiming.NO, pools.keys)[0] == ErrorStatus.NONE
        )
    pools.close()


def test_a_disconnected_client_releases_its_models_and_bursts(tmp_path):
    """In-process service, so its bookkeeping can be inspected."""
    svc = Service(str(tmp_path / "in.sock"))
    thread = threading.Thread(target=svc.serve_forever)
    thread.start()
    try:
        c = remote.ServiceClient(svc.path)
        prepared = device(c, "nnburst-sample-all").prepare_model(add_model())
        device(c, "nnburst-sample-all").prepare_model(add_model()).close()
        pools = Pools()
        controller = ExecutionBurstController.create(prepared)
        assert (
            controller.compute(pools.request(), MeasureTiming.NO, pools.keys)[0] == ErrorStatus.NONE
        )
        (session,) = svc._sessions
        assert session.model_count == 1 and session.bursts.burst_count == 1
        c.close()
        wait_until(lambda: svc.session_count == 0, "the service noticed the disconnect")
        assert session.model_count == 0 and session.bursts.burst_count == 0
        assert (
            controller.compute(pools.request(), MeasureTiming.NO, pools.keys)[0]
            == ErrorStatus.DEVICE_UNAVAILABLE
        )
        controller.close()
        pools.close()
    finally:
        svc.stop()
        thread.join(5)
    assert not thread.is_alive() and not os.path.exists(svc.path)


# -- hostile clients ----------------------------------------------------------------------------


def test_peer_uid_check():
    a, b = socket.socketpair()
    try:
        assert peer_uid(a) == os.getuid()
    finally:
        a.close()
        b.close()
    assert peer_allowed(os.getuid(), os.getuid())
    assert not peer_allowed(os.getuid() + 1, os.getuid())
    assert not peer_allowed(0, 65534)  # root is refused by a service it does not own
    assert peer_allowed(0, 0) and peer_allowed(65534, 65534)


#: A client that connects as another user: stdlib only (the child drops to
#: ``nobody`` first and may not be able to read the repository), one
#: GET_DEVICES call, prints whether it was served.
_OTHER_USER_CLIENT = """
import os, socket, struct, sys
uid, gid, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
assert os.getuid() == uid and os.geteuid() == uid
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(path)
try:
    s.sendall(struct.pack("<IHHQ", 0, int(sys.argv[4]), 0, 1))
    print("served" if len(s.recv(16)) == 16 else "refused")
except (ConnectionResetError, BrokenPipeError):
    print("refused")
"""


def _served_as(uid: int, gid: int, path: str) -> bool:
    """Connect to ``path`` from a child running as ``uid``/``gid``."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _OTHER_USER_CLIENT,
            str(uid),
            str(gid),
            path,
            str(int(protocol.Kind.GET_DEVICES)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() == "served"


def _served_as_us(path: str) -> bool:
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.settimeout(10)
    raw.connect(path)
    try:
        send_frame(raw, Frame(protocol.Kind.GET_DEVICES, 0, 1, b""))
        recv_frame(raw)
        return True
    except (EOFError, OSError):
        return False
    finally:
        raw.close()


@pytest.fixture
def reachable_dir():
    """A socket directory any user can traverse (pytest's tmp_path is 0700)."""
    import pwd
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="nnb-peer-")
    os.chmod(path, 0o711)
    yield path, pwd.getpwnam("nobody")
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(
    os.getuid() != 0, reason="only root can start a client that runs as another user (nobody)"
)
@pytest.mark.parametrize("allow", ["owner", "nobody"])
def test_only_the_allowed_uid_is_served_and_root_is_not_special(reachable_dir, allow):
    directory, nobody = reachable_dir
    path = os.path.join(directory, "driver.sock")
    args = () if allow == "owner" else ("--allow-uid", str(nobody.pw_uid))
    proc = ServiceProcess(path, args=args)
    try:
        os.chmod(
            path, 0o666
        )  # let the other user reach the socket: only the peer check stands in the way
        assert _served_as(nobody.pw_uid, nobody.pw_gid, path) == (allow == "nobody")
        # root owns this service; it is served only when it is the allowed uid
        assert _served_as_us(path) == (allow == "owner")
        assert proc.alive()
    finally:
        remote.disconnect_all()
        assert proc.stop() == 0


def test_a_foreign_uid_is_refused(own_service, monkeypatch):
    proc = own_service(args=("--allow-uid", str(os.getuid() + 1)))
    monkeypatch.setenv("NNBURST_SERVICES", proc.path)
    assert [d.name for d in nn.get_devices()] == ["nnburst-reference"]
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.settimeout(5)
    raw.connect(proc.path)
    with pytest.raises((EOFError, OSError)):  # refused: closed before or after our request
        send_frame(raw, Frame(protocol.Kind.GET_DEVICES, 0, 1, b""))
        recv_frame(raw)
    raw.close()
    remote.disconnect_all()
    assert proc.stop() == 0


def _raw(service: ServiceProcess) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(service.path)
    return s


def _error_code(s: socket.socket, kind: int, payload: bytes, fds: list[int] | None = None) -> int:
    send_frame(s, Frame(kind, 0, 7, payload, fds or []))
    reply = recv_frame(s)
    reply.close_fds()
    assert reply.call_id == 7 and reply.flags & FLAG_ERROR, reply
    return struct.unpack_from("<I", reply.payload)[0]


def test_malformed_frames_get_errors_and_harm_no_one(service, client):
    prepared = device(client, "nnburst-sample-all").prepare_model(add_model())
    s = _raw(service)
    huge = struct.pack("<I", 0) + b"\x00" + struct.pack("<I", 0xFFFFFFFF)
    model = protocol.encode_device_model(0, add_model())
    assert _error_code(s, 999, b"") == ResultCode.BAD_DATA  # unknown kind
    assert (
        _error_code(s, protocol.Kind.GET_SUPPORTED_OPERATIONS, huge) == ResultCode.BAD_DATA
    )  # huge count
    assert (
        _error_code(s, protocol.Kind.GET_SUPPORTED_OPERATIONS, model[:-3]) == ResultCode.BAD_DATA
    )  # truncated
    assert (
        _error_code(s, protocol.Kind.GET_SUPPORTED_OPERATIONS, model + b"x") == ResultCode.BAD_DATA
    )  # trailing
    assert (
        _error_code(s, protocol.Kind.GET_CAPABILITIES, struct.pack("<I", 99)) == ResultCode.BAD_DATA
    )  # no device
    assert _error_code(s, protocol.Kind.PREPARE_MODEL, b"\x01") == ResultCode.BAD_DATA
    # an EXECUTE whose pools and fds disagree: a result with INVALID_ARGUMENT, and the fd is closed
    memory = Memory.create_shared(64)
    payload = protocol.encode_execute(1, Request([], [], []), 0, None, None, [])
    send_frame(s, Frame(protocol.Kind.EXECUTE, 0, 8, payload, [memory.fd]))
    status, _, _ = protocol.decode_result(recv_frame(s).payload)
    assert status == ErrorStatus.INVALID_ARGUMENT
    # a region larger than the file behind it
    payload = protocol.encode_execute(
        1, Pools().request(), 0, None, None, [(0, 1 << 20), (0, NBYTES)]
    )
    send_frame(s, Frame(protocol.Kind.EXECUTE, 0, 9, payload, [memory.fd, memory.fd]))
    status, _, _ = protocol.decode_result(recv_frame(s).payload)
    assert status != ErrorStatus.NONE
    memory.close()
    s.close()
    # an oversized frame: the connection is dropped
    s = _raw(service)
    s.sendall(HEADER.pack(MAX_PAYLOAD + 1, protocol.Kind.GET_DEVICES, 0, 1))
    assert s.recv(1) == b""
    s.close()
    # a truncated frame, then the client goes away
    s = _raw(service)
    s.sendall(HEADER.pack(100, protocol.Kind.GET_DEVICES, 0, 1) + b"short")
    s.close()
    assert service.alive()
    assert run_add(prepared)[0] == ErrorStatus.NONE


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        struct.pack("<I", 0) + b"\x02",
        struct.pack("<I", 0) + b"\x00" + struct.pack("<I", 0),
        struct.pack("<I", 0) + b"\x00" + struct.pack("<II", 1, 0xFFFFFFFF),
    ],
    ids=["empty", "bad-flag", "no-subgraphs", "huge-operands"],
)
def test_model_decoder_rejects_malformed_payloads(payload):
    with pytest.raises(BadDataError):
        protocol.decode_device_model(payload)


def test_model_encoding_round_trips():
    for model in (mixed_model(), if_model(), add_model()):
        _, back = protocol.decode_device_model(protocol.encode_device_model(3, model))
        assert len(back.subgraphs()) == len(model.subgraphs())
        for a, b in zip(model.subgraphs(), back.subgraphs()):
            assert a.operations == b.operations
            assert a.input_indexes == b.input_indexes and a.output_indexes == b.output_indexes
            for x, y in zip(a.operands, b.operands):
                assert (x.info, x.lifetime, x.subgraph) == (y.info, y.lifetime, y.subgraph)
                assert (x.value is None) == (y.value is None)
                if x.value is not None:
                    assert x.value.dtype == y.value.dtype and np.array_equal(x.value, y.value)


def test_an_operand_index_out_of_range_is_rejected():
    model = add_model()
    model.main.operations[0] = Operation(OperationCode.ADD, (0, 1, 9), (3,))
    with pytest.raises(BadDataError, match="out of range"):
        protocol.decode_device_model(protocol.encode_device_model(0, model))


def test_device_types_map(client):
    assert {d.type for d in client.devices()} <= set(DeviceType)


# -- memory a client could shrink (issue 15, item 1) --------------------------------------------


def test_memories_nnburst_creates_cannot_shrink():
    """A shrunk mapping faults on access: nnburst's memories are sealed against it."""
    import fcntl

    with Memory.create_shared(4096) as memory:
        assert memory.sealed
        assert fcntl.fcntl(memory.fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK
        with pytest.raises(PermissionError):
            os.ftruncate(memory.fd, 0)
        os.ftruncate(memory.fd, 8192)  # growing is harmless and stays allowed


def unsealed_memory(size: int) -> Memory:
    """An app's own memfd, the kind of fd a client could shrink after handing it over."""
    fd = os.memfd_create("app-owned", os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    try:
        return Memory.from_fd(size, PROT_READ | PROT_WRITE, fd, 0)
    finally:
        os.close(fd)


def test_the_service_refuses_a_pool_that_could_shrink_and_keeps_serving(client):
    prepared = device(client, "nnburst-sample-all").prepare_model(add_model())
    args = Arguments(
        [np.full((3, 4), 1, np.float32), np.full((3, 4), 2, np.float32)], [((3, 4), np.float32)]
    )
    shrinkable = unsealed_memory(args.memories[1].size)
    assert not shrinkable.sealed
    request = Request(args.request.inputs, args.request.outputs, [args.memories[0], shrinkable])
    status, _, _ = prepared.execute_synchronously(request, MeasureTiming.NO)
    assert status != ErrorStatus.NONE  # refused before it was mapped
    os.ftruncate(shrinkable.fd, 0)  # what an attacker would do next: nothing to fault on
    assert run_add(prepared) == (ErrorStatus.NONE, pytest.approx(np.full((3, 4), 3, np.float32)))
    shrinkable.close()
    args.close()


def test_an_unsealed_app_memory_reaches_a_service_as_a_staged_copy(services_env):
    """Through the runtime, an app's unsealed memory still works: it is copied into sealed staging."""
    compilation = nn.Compilation(nn_add_model((3, 4)), [nn.get_device("nnburst-sample-all")])
    compilation.finish()
    memory = unsealed_memory(3 * NBYTES)
    view = np.frombuffer(memory.buffer, np.float32, 36).reshape(3, 3, 4)
    view[0], view[1] = 1.0, 2.0
    with nn.Execution(compilation) as execution:
        execution.set_input_from_memory(0, memory, 0, NBYTES)
        execution.set_input_from_memory(1, memory, NBYTES, NBYTES)
        execution.set_output_from_memory(0, memory, 2 * NBYTES, NBYTES)
        execution.compute()
    assert np.array_equal(view[2], np.full((3, 4), 3, np.float32))
    del view
    memory.close()
    compilation.close()


def test_burst_queues_are_sealed_segments_passed_as_fds():
    """The FMQs of a burst are memfds sealed against shrinking: a queue shrunk
    under the service would make its worker fault (issue 15, item 1)."""
    import fcntl

    from nnburst.fmq import MessageQueue

    with MessageQueue(np.uint8, 64, sealed=True) as queue:
        descriptor = queue.descriptor
        assert descriptor.name == "" and descriptor.fd >= 0
        assert fcntl.fcntl(descriptor.fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK
        with pytest.raises(PermissionError):
            os.ftruncate(descriptor.fd, 0)
        with MessageQueue.attach(descriptor) as peer:  # attached from the fd, not a name
            assert queue.write(np.arange(3, dtype=np.uint8))
            assert list(peer.read(3)) == [0, 1, 2]
        with pytest.raises(BadDataError, match="needs its fd"):
            MessageQueue.attach(descriptor.to_bytes())  # the bytes alone name no segment


def test_the_service_refuses_burst_queues_it_could_not_trust(service, client):
    """Named segments (or too few fds) are refused; an unsealed memfd too; the
    service keeps serving."""
    from nnburst.fmq import MessageQueue
    from nnburst.hal.packets import REQUEST_DATUM, RESULT_DATUM
    from nnburst.service.burst import _CONFIGURE
    from nnburst.service.burst import Kind as BurstKind

    prepared = device(client, "nnburst-sample-all").prepare_model(add_model())
    with MessageQueue(REQUEST_DATUM, 8) as requests, MessageQueue(RESULT_DATUM, 8) as results:
        request, result = requests.descriptor.to_bytes(), results.descriptor.to_bytes()
        payload = _CONFIGURE.pack(prepared.model_id, len(request), len(result)) + request + result
        with pytest.raises(NNError, match="sealed memfds") as info:
            client.connection.call(BurstKind.CONFIGURE_BURST, payload, timeout=5)
        assert info.value.code == ResultCode.BAD_DATA
    plain = [os.memfd_create("unsealed", os.MFD_CLOEXEC) for _ in range(2)]
    with MessageQueue(REQUEST_DATUM, 8, sealed=True) as requests:
        with MessageQueue(RESULT_DATUM, 8, sealed=True) as results:
            request, result = requests.descriptor.to_bytes(), results.descriptor.to_bytes()
            for fd, queue in zip(plain, (requests, results)):
                os.ftruncate(fd, queue.descriptor.size)
            payload = (
                _CONFIGURE.pack(prepared.model_id, len(request), len(result)) + request + result
            )
            reply = client.connection.call(BurstKind.CONFIGURE_BURST, payload, plain, timeout=5)
            status, burst_id = struct.unpack_from("<iI", reply.payload)
            assert status == ErrorStatus.GENERAL_FAILURE and burst_id == 0  # not attached
    for fd in plain:
        os.close(fd)
    assert service.alive()
    assert run_add(prepared)[0] == ErrorStatus.NONE


# -- the listener under attack (issue 15, items 3, 5 and 6) -------------------------------------


def test_a_symlinked_socket_directory_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    os.chmod(victim, 0o755)
    link = tmp_path / "nnburst-link"
    link.symlink_to(victim)
    with pytest.raises(NNError, match="symbolic link"):
        Service(str(link / "driver.sock"), [])
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o755
    assert not (victim / "driver.sock").exists()


def test_an_existing_directory_is_used_as_it_is_and_a_new_one_is_private(tmp_path):
    shared = tmp_path / "nnburst-existing"
    shared.mkdir()
    os.chmod(shared, 0o750)
    Service(str(shared / "driver.sock"), []).close()
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o750  # not ours to chmod
    fresh = tmp_path / "fresh"
    Service(str(fresh / "driver.sock"), []).close()
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o700


def test_connections_beyond_the_limit_are_closed_and_the_others_served(tmp_path):
    service = Service(str(tmp_path / "driver.sock"), [], limits=Limits(connections=2))
    thread = threading.Thread(target=service.serve_forever)
    thread.start()
    try:
        first, second = remote.ServiceClient(service.path), remote.ServiceClient(service.path)
        wait_until(lambda: service.session_count == 2, "both clients are sessions")
        extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        extra.settimeout(5)
        extra.connect(service.path)
        assert extra.recv(1) == b""  # closed by the service
        extra.close()
        assert first.devices() == [] and second.devices() == []
        first.close()
        second.close()
    finally:
        service.stop()
        thread.join()


def test_a_full_backlog_is_waited_out_not_reported_as_no_service(tmp_path):
    path = str(tmp_path / "busy.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)  # room for one pending connection
    pending = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    pending.connect(path)
    accepted: list[socket.socket] = []

    def accept_later() -> None:
        time.sleep(0.05)
        for _ in range(2):
            accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept_later)
    thread.start()
    sock = remote._connect(path, timeout=5)  # refused with EAGAIN at first: retried
    thread.join()
    for s in (sock, pending, listener, *accepted):
        s.close()


def test_running_out_of_fds_pauses_accepting_and_never_ends_the_service(tmp_path):
    """With a low fd limit, a flood of connections makes accept() fail with
    EMFILE: the service waits and serves again once clients leave."""
    import resource

    path = str(tmp_path / "driver.sock")

    def low_fd_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "nnburst", "serve", "--socket", path],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=low_fd_limit,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        assert b"listening" in proc.stdout.readline()
        flood = []
        for _ in range(80):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)  # queued in the backlog even when the service cannot accept
            flood.append(s)
        time.sleep(0.3)  # let it hit the limit
        assert proc.poll() is None
        for s in flood:
            s.close()
        found: list[list] = []
        wait_until(
            lambda: bool(found.append(_devices_or_none(path)) or found[-1]),
            "a new client is served after the flood",
            timeout=20,
        )
        assert [d.name for d in found[-1]]
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _devices_or_none(path: str) -> list | None:
    try:
        client = remote.ServiceClient(path)
    except OSError:
        return None
    try:
        return client.devices(timeout=2)
    except (NNError, OSError):
        return None
    finally:
        client.close()


def _malformed_graphs() -> dict[str, HalModel]:
    """Graphs ``nn.Model.finish`` refuses, sent straight to the service (issue 15, item 7)."""
    f = tensor(OperandCode.TENSOR_FLOAT32)
    inputs = [Operand(f, Lifetime.SUBGRAPH_INPUT), Operand(f, Lifetime.SUBGRAPH_INPUT)]
    add = OperationCode.ADD
    return {
        "written-twice": HalModel(
            Subgraph(
                [*inputs, const_i32(0), Operand(f, Lifetime.SUBGRAPH_OUTPUT)],
                [Operation(add, (0, 1, 2), (3,)), Operation(add, (1, 0, 2), (3,))],
                (0, 1),
                (3,),
            )
        ),
        "output-never-written": HalModel(
            Subgraph(
                [*inputs, const_i32(0), Operand(f, Lifetime.TEMPORARY_VARIABLE)]
                + [Operand(f, Lifetime.SUBGRAPH_OUTPUT)],
                [Operation(add, (0, 1, 2), (3,))],
                (0, 1),
                (4,),
            )
        ),
        "writes-an-input": HalModel(
            Subgraph(
                [*inputs, const_i32(0), Operand(f, Lifetime.SUBGRAPH_OUTPUT)],
                [Operation(add, (0, 1, 2), (3,)), Operation(add, (3, 3, 2), (0,))],
                (0, 1),
                (3,),
            )
        ),
    }


@pytest.mark.parametrize("name", list(_malformed_graphs()))
def test_the_service_refuses_a_graph_that_model_finish_refuses(client, name):
    with pytest.raises(NNError) as info:
        device(client, "nnburst-sample-all").prepare_model(_malformed_graphs()[name])
    assert info.value.code == ResultCode.BAD_DATA
    assert run_add(device(client, "nnburst-sample-all").prepare_model(add_model()))[0] == (
        ErrorStatus.NONE
    )


def test_prepared_models_per_connection_are_capped(service):
    """Issue 15: one connection cannot hold unbounded prepared models."""
    from nnburst.service.driver import MAX_MODELS_PER_CONNECTION

    client = remote.ServiceClient(service.path)
    try:
        sample_all = device(client, "nnburst-sample-all")
        models = [sample_all.prepare_model(add_model()) for _ in range(MAX_MODELS_PER_CONNECTION)]
        with pytest.raises(NNError, match="the limit") as info:
            sample_all.prepare_model(add_model())
        assert info.value.code == ResultCode.OUT_OF_MEMORY
        models.pop().close()
        wait_until(lambda: _prepares(sample_all), "a released model makes room")
    finally:
        client.close()


def _model_with_constant(n: int) -> HalModel:
    """out = a + c with ``c`` a float32 constant of ``n`` elements."""
    tensor = OperandInfo(OperandCode.TENSOR_FLOAT32, (n,))
    operands = [
        Operand(tensor, Lifetime.SUBGRAPH_INPUT),
        Operand(tensor, Lifetime.CONSTANT_COPY, np.ones(n, np.float32)),
        Operand(OperandInfo(OperandCode.INT32, ()), Lifetime.CONSTANT_COPY, np.array(0, np.int32)),
        Operand(tensor, Lifetime.SUBGRAPH_OUTPUT),
    ]
    return HalModel(Subgraph(operands, [Operation(OperationCode.ADD, (0, 1, 2), (3,))], (0,), (3,)))


def _prepares(sample_all: remote.RemoteDevice, model: HalModel | None = None) -> bool:
    try:
        sample_all.prepare_model(model or add_model()).close()
    except NNError:
        return False
    return True


def test_a_finalizer_that_sends_mid_send_is_deferred_not_deadlocked(monkeypatch):
    """A GC pass can run a finalizer (a model release) inside a send, on the thread
    that holds the send lock: its message must follow that frame, not wait forever."""
    left, right = socket.socketpair()
    seen: list[bytes] = []
    serving = wire.Connection(right, {7: lambda f: (seen.append(f.payload), (b"ok", ()))[1]})
    caller = wire.Connection(left)
    real_send = wire.send_frame
    nested: list[str] = []

    def send_with_a_gc_pass(sock, frame):
        if frame.payload == b"first" and not nested:
            nested.append("ran")
            caller.notify(7, b"from a finalizer")
            with pytest.raises(RuntimeError, match="would wait on itself"):
                caller.call(7, b"a call cannot wait here", timeout=1)
        real_send(sock, frame)

    monkeypatch.setattr(wire, "send_frame", send_with_a_gc_pass)
    try:
        assert caller.call(7, b"first", timeout=5).payload == b"ok"
        wait_until(lambda: len(seen) == 2, "both frames to arrive")
        assert seen == [b"first", b"from a finalizer"]
    finally:
        caller.close()
        serving.close()


def test_idle_connections_that_hold_nothing_are_closed_and_clients_reconnect(own_service):
    proc = own_service(args=("--idle-timeout", "0.3", "--workers", "1"))
    idle = remote.ServiceClient(proc.path)
    holding = remote.ServiceClient(proc.path)
    try:
        idle.devices()
        prepared = device(holding, "nnburst-sample-all").prepare_model(add_model())
        first = idle.connection
        wait_until(lambda: first.broken, "the service closed the idle connection")
        assert not holding.connection.broken  # it holds a model: never idle-closed
        time.sleep(0.6)
        assert not holding.connection.broken
        assert run_add(prepared)[0] == ErrorStatus.NONE
        # The idle client's next call goes over a new connection, transparently.
        idle.call(protocol.Kind.GET_DEVICES, b"").close_fds()
        assert idle.connection is not first and not idle.broken
    finally:
        idle.close()
        holding.close()


def test_model_bytes_and_frame_size_are_capped_per_connection(own_service):
    """Issue 15: `nnburst serve --max-models/--max-model-bytes/--max-frame-bytes`.
    A connection past its share is refused with OUT_OF_MEMORY, and a frame over the
    limit drops only that connection; others are still served."""
    proc = own_service(args=("--workers", "1", "--max-models", "3", "--max-model-bytes", "20000",
                             "--max-frame-bytes", "40000"))  # fmt: skip
    client = remote.ServiceClient(proc.path)
    try:
        sample_all = device(client, "nnburst-sample-all")
        small = [sample_all.prepare_model(add_model()) for _ in range(3)]
        with pytest.raises(NNError, match="3 prepared models, the limit") as info:
            sample_all.prepare_model(add_model())
        assert info.value.code == ResultCode.OUT_OF_MEMORY
        for model in small:
            model.close()
        first = sample_all.prepare_model(_model_with_constant(3000))  # 12 kB: one fits
        with pytest.raises(NNError, match="over its 20000-byte limit") as info:
            sample_all.prepare_model(_model_with_constant(3000))
        assert info.value.code == ResultCode.OUT_OF_MEMORY
        first.close()
        wait_until(lambda: _prepares(sample_all, _model_with_constant(3000)), "room again")
    finally:
        client.close()
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(proc.path)
    try:
        send_frame(raw, Frame(protocol.Kind.GET_DEVICES, 0, 1, b"x" * 50_000))
        with pytest.raises((EOFError, ConnectionResetError)):
            recv_frame(raw)  # dropped, not answered
    finally:
        raw.close()
    other = remote.ServiceClient(proc.path)
    try:
        assert (
            run_add(device(other, "nnburst-sample-all").prepare_model(add_model()))[0]
            == ErrorStatus.NONE
        )
    finally:
        other.close()
