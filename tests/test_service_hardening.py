"""Issue 31: one same-user client must not bloat, spin or starve the service.

Each test shows one limit with a small value (`nnburst serve` options), so
they stay small in memory and time: the mechanism, not the gigabytes."""

from __future__ import annotations

import dataclasses
import os
import socket
import stat
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from nnburst.codes import ErrorStatus, OperandCode, OperationCode, ResultCode
from nnburst.cpu.driver import CpuDevice
from nnburst.errors import BrokenResourceError, NNError
from nnburst.fmq import MessageQueue
from nnburst.hal.burst_controller import ExecutionBurstController
from nnburst.hal.burst_server import ExecutionBurstServer
from nnburst.hal.interfaces import IBurstCallback
from nnburst.hal.memory import MappedMemory, drop_fd
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.hal.packets import REQUEST_DATUM, RESULT_DATUM, parse_result_words, serialize_request
from nnburst.hal.types import DataLocation, MeasureTiming, Request, RequestArgument
from nnburst.memory import Memory
from nnburst.operands import OperandInfo
from nnburst.service import protocol, remote, wire
from nnburst.service.burst import _CONFIGURE, MappingBudget
from nnburst.service.burst import Kind as BurstKind
from nnburst.service.driver import Service
from nnburst.service.wire import HEADER, ReceiveBudget, recv_frame

from .blocking import wait_until
from .burst_models import Pools, add_model
from .test_service import ServiceProcess, device, healthy_service, run_add


@pytest.fixture
def own_service(tmp_path: pytest.TempPathFactory) -> Iterator[Callable[..., ServiceProcess]]:
    """Start a private service with options (killed at the end)."""
    started: list[ServiceProcess] = []

    def start(args: tuple[str, ...] = ()) -> ServiceProcess:
        proc = ServiceProcess(str(tmp_path / f"s{len(started)}.sock"), None, args)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """One default service for the tests that leave it healthy."""
    yield from healthy_service(str(tmp_path_factory.mktemp("svc") / "driver.sock"))


@pytest.fixture
def client(service: ServiceProcess) -> Iterator[remote.ServiceClient]:
    c = remote.ServiceClient(service.path)
    yield c
    c.close()


# -- models ---------------------------------------------------------------------------------

I32 = OperandInfo(OperandCode.TENSOR_INT32, (1,))


def _counter_subgraphs() -> list[Subgraph]:
    """cond: i < n; body: i + 1 (NNAPI's WHILE counter)."""
    zero = Operand(
        OperandInfo(OperandCode.INT32, ()), Lifetime.CONSTANT_COPY, np.array(0, np.int32)
    )
    cond = Subgraph(
        [
            Operand(I32, Lifetime.SUBGRAPH_INPUT),
            Operand(I32, Lifetime.SUBGRAPH_INPUT),
            Operand(OperandInfo(OperandCode.TENSOR_BOOL8, (1,)), Lifetime.SUBGRAPH_OUTPUT),
        ],
        [Operation(OperationCode.LESS, (0, 1), (2,))],
        (0, 1),
        (2,),
    )
    one = Operand(I32, Lifetime.CONSTANT_COPY, np.array([1], np.int32))
    body = Subgraph(
        [
            Operand(I32, Lifetime.SUBGRAPH_INPUT),
            Operand(I32, Lifetime.SUBGRAPH_INPUT),
            one,
            zero,
            Operand(I32, Lifetime.SUBGRAPH_OUTPUT),
        ],
        [Operation(OperationCode.ADD, (0, 2, 3), (4,))],
        (0, 1),
        (4,),
    )
    return [cond, body]


def counter_model() -> HalModel:
    """WHILE i < n: i += 1; returns i.  n = 2**31 - 1 runs until the loop timeout."""
    ref = OperandInfo(OperandCode.MODEL, ())
    operands = [
        Operand(ref, Lifetime.SUBGRAPH, subgraph=0),
        Operand(ref, Lifetime.SUBGRAPH, subgraph=1),
        Operand(I32, Lifetime.SUBGRAPH_INPUT),
        Operand(I32, Lifetime.SUBGRAPH_INPUT),
        Operand(I32, Lifetime.SUBGRAPH_OUTPUT),
    ]
    main = Subgraph(operands, [Operation(OperationCode.WHILE, (0, 1, 2, 3), (4,))], (2, 3), (4,))
    return HalModel(main, _counter_subgraphs())


class Counter:
    """The counter model's i, n and output in one shared memory."""

    def __init__(self, n: int) -> None:
        self.memory = Memory.create_shared(12)
        self.values = np.frombuffer(self.memory.buffer, np.int32, 3)
        self.values[:] = (0, n, -1)
        arg = [RequestArgument(False, DataLocation(0, 4 * i, 4)) for i in range(3)]
        self.request = Request(arg[:2], arg[2:], [self.memory])

    def close(self) -> None:
        del self.values
        self.memory.close()


def _chain_model(n: int) -> HalModel:
    """``n`` ADDs in a row: a few bytes on the wire per operation, kilobytes prepared."""
    f = OperandInfo(OperandCode.TENSOR_FLOAT32, (2,))
    zero = Operand(
        OperandInfo(OperandCode.INT32, ()), Lifetime.CONSTANT_COPY, np.array(0, np.int32)
    )
    operands = [Operand(f, Lifetime.SUBGRAPH_INPUT), zero]
    operations = []
    for i in range(n):
        last = i == n - 1
        operands.append(
            Operand(f, Lifetime.SUBGRAPH_OUTPUT if last else Lifetime.TEMPORARY_VARIABLE)
        )
        previous = 0 if i == 0 else len(operands) - 2
        operations.append(
            Operation(OperationCode.ADD, (previous, previous, 1), (len(operands) - 1,))
        )
    return HalModel(Subgraph(operands, operations, (0,), (len(operands) - 1,)))


class Slots(IBurstCallback):
    """An in-process burst client's memories: slot 0 the inputs, then outputs."""

    transfers_ownership = False

    def __init__(self) -> None:
        self.pools = Pools()
        self.memories = {0: self.pools.inputs, 1: self.pools.output}

    def get_memories(self, slots):
        return ErrorStatus.NONE, [self.memories[slot] for slot in slots]

    def request(self) -> Request:
        return self.pools.request()

    def close(self) -> None:
        self.pools.close()


def _status(reply: np.ndarray, n: int) -> ErrorStatus:
    return parse_result_words(reply.view("<u4")[: 6 * n].tolist())[0]


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _configure(connected: remote.ServiceClient, model_id: int, fds: list[int], requests, results):
    request, result = requests.descriptor.to_bytes(), results.descriptor.to_bytes()
    payload = _CONFIGURE.pack(model_id, len(request), len(result)) + request + result
    return connected.connection.call(BurstKind.CONFIGURE_BURST, payload, fds, timeout=10)


# -- 1: the FMQ channel length --------------------------------------------------------------------


def test_a_burst_channel_longer_than_the_limit_is_refused(own_service):
    proc = own_service(args=("--workers", "1", "--max-burst-channel", "64"))
    client = remote.ServiceClient(proc.path)
    try:
        prepared = device(client, "nnburst-sample-all").prepare_model(add_model())
        with (
            MessageQueue(REQUEST_DATUM, 65, sealed=True) as requests,
            MessageQueue(RESULT_DATUM, 8, sealed=True) as results,
        ):
            fds = [requests.descriptor.fd, results.descriptor.fd]
            with pytest.raises(NNError, match="65 datums.*at most 64.*--max-burst-channel") as info:
                _configure(client, prepared.model_id, fds, requests, results)
            assert info.value.code == ResultCode.BAD_DATA
        with pytest.raises(NNError, match="refused the burst: .*65 datums"):
            ExecutionBurstController.create(prepared, channel_length=65)  # the app sees why
        with ExecutionBurstController.create(prepared, channel_length=64) as controller:
            pools = Pools()
            status, _, _, _ = controller.compute(pools.request(), MeasureTiming.NO, pools.keys)
            assert status == ErrorStatus.NONE
            pools.close()
    finally:
        client.close()


def test_the_default_channel_limit_follows_the_model(service, client):
    """By default a burst may have room for the model's longest request, not 2**16 datums."""
    prepared = device(client, "nnburst-sample-all").prepare_model(add_model())
    with (
        MessageQueue(REQUEST_DATUM, 1 << 16, sealed=True) as requests,
        MessageQueue(RESULT_DATUM, 8, sealed=True) as results,
    ):
        fds = [requests.descriptor.fd, results.descriptor.fd]
        with pytest.raises(NNError, match="65536 datums"):
            _configure(client, prepared.model_id, fds, requests, results)
    assert run_add(prepared)[0] == ErrorStatus.NONE


def test_a_long_request_packet_costs_its_size_once_not_a_list_of_ints():
    """The burst server reads a packet as bytes: a garbage packet of 100,000 datums
    (2.4 MB) must not become 600,000 Python ints (24 MB)."""
    count = 100_000
    prepared = CpuDevice().prepare_model(add_model())
    requests = MessageQueue(REQUEST_DATUM, count, sealed=True)
    results = MessageQueue(RESULT_DATUM, 8, sealed=True)
    slots = Slots()
    server = ExecutionBurstServer.create(slots, requests.descriptor, results.descriptor, prepared)
    garbage = np.full(count, 0xFF, REQUEST_DATUM).view("<u4")
    garbage[:] = 0xFFFFFFFF
    tracemalloc.start()
    try:
        assert requests.write_blocking(garbage.view(REQUEST_DATUM), timeout_ns=10_000_000_000)
        reply = np.zeros(8, RESULT_DATUM)
        received = results.read_available_blocking(reply, timeout_ns=30_000_000_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        server.close()
        requests.close()
        results.close()
        slots.close()
    assert received == 2  # the failure packet: the worker answered
    assert peak < 2 * garbage.nbytes, f"serving the packet took {peak} bytes"


# -- 2: frames ---------------------------------------------------------------------------------


def test_a_frame_header_alone_allocates_nothing_of_its_declared_length():
    left, right = socket.socketpair()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            recv_frame(right, max_payload=64 << 20)
        except BaseException as exc:
            errors.append(exc)

    tracemalloc.start()
    try:
        reader = threading.Thread(target=read)
        reader.start()
        left.sendall(HEADER.pack(32 << 20, 1, 0, 1) + b"x" * 100)
        time.sleep(0.3)
        held, _ = tracemalloc.get_traced_memory()
        left.close()
        reader.join(10)
    finally:
        tracemalloc.stop()
        right.close()
    assert held < 1 << 20, f"a 32 MiB header with 100 bytes held {held} bytes"
    assert len(errors) == 1 and isinstance(errors[0], EOFError)


def test_a_frame_over_the_receive_budget_is_refused_and_the_connection_goes_on():
    left, right = socket.socketpair()
    budget = ReceiveBudget(256 * 1024)
    served = wire.Connection(
        right, {7: lambda f: (str(len(f.payload)).encode(), ())}, budget=budget
    )
    caller = wire.Connection(left)
    try:
        with pytest.raises(NNError, match="receiving.*dropped") as info:
            caller.call(7, b"y" * (1 << 20), timeout=10)
        assert info.value.code == ResultCode.OUT_OF_MEMORY
        assert caller.call(7, b"z" * 200_000, timeout=10).payload == b"200000"  # it fits
        wait_until(lambda: budget.used == 0, "every reservation given back")
    finally:
        caller.close()
        served.close()


def test_bytes_in_flight_are_bounded_per_worker_and_others_still_served(own_service):
    """A client holding a half-sent frame takes budget; another's big PREPARE is
    refused with OUT_OF_MEMORY while it does, its small calls are served, and the
    PREPARE succeeds once the first client is gone."""
    proc = own_service(args=("--workers", "1", "--max-receiving-bytes", "100000"))
    stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stalled.connect(proc.path)
    stalled.sendall(HEADER.pack(150_000, protocol.Kind.GET_DEVICES, 0, 1) + b"x" * 100_000)
    client = remote.ServiceClient(proc.path)
    try:
        sample_all = device(client, "nnburst-sample-all")
        big = _model_with_constant(30_000)  # 120 kB on the wire
        # The stalled client's bytes may still be on their way in: wait for the refusal.
        deadline = time.monotonic() + 10
        while True:
            try:
                sample_all.prepare_model(big).close()
            except NNError as exc:
                assert exc.code == ResultCode.OUT_OF_MEMORY and "receiving" in str(exc)
                break
            assert time.monotonic() < deadline, "the big PREPARE was never refused"
            time.sleep(0.05)
        assert run_add(sample_all.prepare_model(add_model()))[0] == ErrorStatus.NONE
        stalled.close()
        wait_until(lambda: _prepares(sample_all, big), "room once the stalled client left")
    finally:
        stalled.close()
        client.close()


def _model_with_constant(n: int) -> HalModel:
    tensor = OperandInfo(OperandCode.TENSOR_FLOAT32, (n,))
    operands = [
        Operand(tensor, Lifetime.SUBGRAPH_INPUT),
        Operand(tensor, Lifetime.CONSTANT_COPY, np.ones(n, np.float32)),
        Operand(OperandInfo(OperandCode.INT32, ()), Lifetime.CONSTANT_COPY, np.array(0, np.int32)),
        Operand(tensor, Lifetime.SUBGRAPH_OUTPUT),
    ]
    return HalModel(Subgraph(operands, [Operation(OperationCode.ADD, (0, 1, 2), (3,))], (0,), (3,)))


def _prepares(sample_all: remote.RemoteDevice, model: HalModel) -> bool:
    try:
        sample_all.prepare_model(model).close()
    except NNError:
        return False
    return True


# -- 3: one file for both queues -------------------------------------------------------------------


def test_one_file_for_both_queues_is_refused(service, client):
    prepared = device(client, "nnburst-sample-all").prepare_model(add_model())
    with MessageQueue(REQUEST_DATUM, 8, sealed=True) as requests:
        results = dataclasses.replace(requests.descriptor, dtype=RESULT_DATUM)
        fd = requests.descriptor.fd
        request, result = requests.descriptor.to_bytes(), results.to_bytes()
        payload = _CONFIGURE.pack(prepared.model_id, len(request), len(result)) + request + result
        for fds in ([fd, fd], [fd, os.dup(fd)]):
            with pytest.raises(NNError, match="one file for both queues") as info:
                client.connection.call(BurstKind.CONFIGURE_BURST, payload, fds, timeout=10)
            assert info.value.code == ResultCode.BAD_DATA
            if fds[1] != fd:
                os.close(fds[1])
    assert run_add(prepared)[0] == ErrorStatus.NONE


def test_a_burst_worker_stops_even_when_its_queues_never_let_it_wait():
    """Both queues on one file: the worker reads its own results back as requests
    and never blocks, so the teardown bit alone never reaches it; closing still
    stops it at once."""
    prepared = CpuDevice().prepare_model(add_model())
    requests = MessageQueue(REQUEST_DATUM, 64, sealed=True)
    result_channel = dataclasses.replace(
        requests.descriptor, dtype=RESULT_DATUM, fd=os.dup(requests.descriptor.fd)
    )
    pools = Slots()
    server = ExecutionBurstServer.create(pools, requests.descriptor, result_channel, prepared)
    worker = server._worker
    assert worker is not None
    try:
        packet = serialize_request(pools.request(), MeasureTiming.NO, [0, 1])
        assert requests.write_blocking(packet, timeout_ns=10_000_000_000)
        time.sleep(0.2)  # serving its own answers
        start = time.monotonic()
        server.close()
        assert time.monotonic() - start < 3
        assert not worker.thread.is_alive()
    finally:
        server.close()
        worker.thread.join(15)
        os.close(result_channel.fd)
        requests.close()
        pools.close()


# -- 4: fds ------------------------------------------------------------------------------------


def test_cached_memories_hold_one_fd_each_and_are_budgeted_per_connection(own_service):
    proc = own_service(args=("--workers", "1", "--max-connection-memories", "4"))
    client = remote.ServiceClient(proc.path)
    memories: list[Memory] = []
    try:
        prepared = device(client, "nnburst-sample-all").prepare_model(add_model())
        with ExecutionBurstController.create(prepared) as controller:
            pools = Pools()
            assert controller.compute(pools.request(), MeasureTiming.NO, pools.keys)[0] == 0
            before = _fd_count(proc.pid)
            for _ in range(2):  # two more outputs: 4 memories cached, the limit
                memory = Memory.create_shared(48)
                memories.append(memory)
                request = pools.request()
                request.pools = [pools.inputs, memory]
                status = controller.compute(request, MeasureTiming.NO, [pools.inputs, memory])[0]
                assert status == ErrorStatus.NONE
            assert _fd_count(proc.pid) - before == 2  # one fd per memory, not two
            fifth = Memory.create_shared(48)
            memories.append(fifth)
            request = pools.request()
            request.pools = [pools.inputs, fifth]
            status = controller.compute(request, MeasureTiming.NO, [pools.inputs, fifth])[0]
            assert status != ErrorStatus.NONE  # over the connection's 4
            controller.free_memory(memories[0])
            assert controller.compute(request, MeasureTiming.NO, [pools.inputs, fifth])[0] == 0
            pools.close()
    finally:
        for memory in memories:
            memory.close()
        client.close()
    wait_until(lambda: proc.alive() and _fd_count(proc.pid) <= before, "the burst's fds closed")


def test_a_mapped_memory_can_let_go_of_its_fd():
    fd = os.memfd_create("keep-fd-test", os.MFD_CLOEXEC)
    os.ftruncate(fd, 4096)
    before = len(os.listdir("/proc/self/fd"))
    memory = MappedMemory(os.dup(fd), 4096)
    drop_fd(memory)
    assert len(os.listdir("/proc/self/fd")) == before + 1  # the mapping's own duplicate
    memory.buffer[:3] = b"abc"
    assert os.pread(fd, 3, 0) == b"abc"
    memory.close()
    os.close(fd)


def test_mapped_memories_are_budgeted_per_connection_within_the_process():
    process = MappingBudget(3)
    first, second = MappingBudget(2, process), MappingBudget(2, process)
    first.take(2)
    with pytest.raises(NNError, match="limit of 2, one connection's") as info:
        first.take(1)
    assert info.value.code == ResultCode.RESOURCE_EXHAUSTED_TRANSIENT
    second.take(1)
    with pytest.raises(NNError, match="limit of 3, the process's"):
        second.take(1)  # within its own share, not within the process's
    assert (first.used, second.used, process.used) == (2, 1, 3)  # the refusal took nothing
    first.give(1)
    second.take(1)
    assert process.used == 3


# -- 5: what a prepared model costs ----------------------------------------------------------------


def test_the_model_budget_counts_what_a_prepared_model_costs(own_service):
    """2,000 ADDs weigh 124 kB on the wire and ~5 MB prepared: a 2 MB budget refuses them."""
    proc = own_service(args=("--workers", "1", "--max-model-bytes", "2000000"))
    client = remote.ServiceClient(proc.path)
    try:
        sample_all = device(client, "nnburst-sample-all")
        with pytest.raises(NNError, match="as prepared.*--max-model-bytes") as info:
            sample_all.prepare_model(_chain_model(2000))
        assert info.value.code == ResultCode.OUT_OF_MEMORY
        sample_all.prepare_model(_chain_model(200)).close()  # ~0.5 MB: fits
    finally:
        client.close()


# -- 9: long executions ---------------------------------------------------------------------------


def test_a_loop_whose_client_is_gone_stops(own_service):
    proc = own_service(args=("--workers", "1"))
    client = remote.ServiceClient(proc.path)
    counter = Counter(2**31 - 1)
    prepared = device(client, "nnburst-sample-all").prepare_model(counter_model())
    outcome: list[object] = []

    def loop() -> None:
        try:
            outcome.append(
                prepared.execute_synchronously(
                    counter.request, MeasureTiming.NO, loop_timeout_ns=15_000_000_000
                )[0]
            )
        except BrokenResourceError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=loop)
    base = _cpu_seconds(proc.pid)
    thread.start()
    wait_until(lambda: _cpu_seconds(proc.pid) - base > 0.3, "the service loops")
    client.close()
    thread.join(20)
    time.sleep(0.3)
    start = _cpu_seconds(proc.pid)
    time.sleep(1.5)
    spent = _cpu_seconds(proc.pid) - start
    counter.close()
    assert spent < 0.2, f"the service spent {spent:.2f} s of CPU after its client left"
    other = remote.ServiceClient(proc.path)
    try:
        assert run_add(device(other, "nnburst-sample-all").prepare_model(add_model()))[0] == 0
    finally:
        other.close()


def test_concurrent_loops_per_connection_are_capped(own_service):
    proc = own_service(args=("--workers", "1", "--max-long-executions", "1"))
    client = remote.ServiceClient(proc.path)
    long, short = Counter(2**31 - 1), Counter(3)
    try:
        prepared = device(client, "nnburst-sample-all").prepare_model(counter_model())
        with (
            ExecutionBurstController.create(prepared) as first,
            ExecutionBurstController.create(prepared) as second,
        ):
            statuses: list[ErrorStatus] = []
            runner = threading.Thread(
                target=lambda: statuses.append(
                    first.compute(long.request, MeasureTiming.NO, [long.memory])[0]
                )
            )
            runner.start()
            # Until the first loop reaches the service the second one may run; once
            # it runs (a burst's loop timeout: 2 s) the second one must be refused.
            seen: list[ErrorStatus] = []
            while runner.is_alive() and ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT not in seen:
                seen.append(second.compute(short.request, MeasureTiming.NO, [short.memory])[0])
                time.sleep(0.05)
            assert set(seen) <= {ErrorStatus.NONE, ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT}
            assert seen[-1] == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, seen
            runner.join(30)
            assert statuses == [ErrorStatus.MISSED_DEADLINE_TRANSIENT]
            status = second.compute(short.request, MeasureTiming.NO, [short.memory])[0]
            assert status == ErrorStatus.NONE and short.values[2] == 3
    finally:
        long.close()
        short.close()
        client.close()


def test_closing_a_burst_stops_its_loop_in_progress():
    """A burst's loop timeout is 2 s; closing the burst 0.3 s in must not wait for it."""
    prepared = CpuDevice().prepare_model(counter_model())
    contexts = []

    class Capture:
        def configure_execution_burst(self, callback, request_channel, result_channel):
            status, context = prepared.configure_execution_burst(
                callback, request_channel, result_channel
            )
            contexts.append(context)
            return status, context

    long = Counter(2**31 - 1)
    try:
        with ExecutionBurstController.create(Capture()) as controller:
            statuses: list[ErrorStatus] = []
            runner = threading.Thread(
                target=lambda: statuses.append(
                    controller.compute(long.request, MeasureTiming.NO, [long.memory])[0]
                )
            )
            runner.start()
            time.sleep(0.3)
            start = time.monotonic()
            contexts[0].close()
            closing = time.monotonic() - start
            runner.join(10)
        assert closing < 1.0, f"closing the burst waited {closing:.2f} s for its loop"
        assert statuses and statuses[0] != ErrorStatus.NONE
    finally:
        long.close()


# -- 10: posted frees ------------------------------------------------------------------------------


class _LateFreeing(Slots):
    """A client whose posted FREE_MEMORY reaches the server while it fetches the
    next request's memories (it was sent first, but the FMQ is faster than the socket)."""

    server: ExecutionBurstServer | None = None
    late_free: int | None = None

    def get_memories(self, slots):
        if self.late_free is not None and self.server is not None:
            self.server.free_memory(self.late_free)
            self.late_free = None
        return super().get_memories(slots)


def test_a_free_posted_before_a_request_counts_even_when_it_arrives_late():
    prepared = CpuDevice().prepare_model(add_model())
    client = _LateFreeing()
    client.memories[2] = Memory.create_shared(48)
    requests = MessageQueue(REQUEST_DATUM, 64, sealed=True)
    results = MessageQueue(RESULT_DATUM, 64, sealed=True)
    server = ExecutionBurstServer.create(
        client, requests.descriptor, results.descriptor, prepared, max_cached_slots=2
    )
    client.server = server
    try:
        reply = np.zeros(64, RESULT_DATUM)
        for slots in ([0, 1], [0, 2]):  # slot 1 freed (posted), slot 2 new: 2 cached
            if slots == [0, 2]:
                client.late_free = 1
            assert requests.write_blocking(
                serialize_request(client.request(), MeasureTiming.NO, slots),
                timeout_ns=10_000_000_000,
            )
            n = results.read_available_blocking(reply, timeout_ns=30_000_000_000)
            assert _status(reply, n) == ErrorStatus.NONE
    finally:
        server.close()
        requests.close()
        results.close()
        client.memories[2].close()
        client.close()


# -- the socket's directory -----------------------------------------------------------------------


def test_an_existing_socket_directory_others_may_write_is_refused(tmp_path):
    shared = tmp_path / "nnburst-open"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(NNError, match="may be written by other users"):
        Service(str(shared / "driver.sock"), [])
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o777  # refused, not changed
    assert not (shared / "driver.sock").exists()


def test_a_directory_above_that_others_could_redirect_is_refused(tmp_path):
    """Links above the socket's directory are followed only where no other user
    could have made them: not in a directory others may write that is not sticky."""
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(NNError, match="may be changed by another user"):
        Service(str(open_dir / "nnburst" / "driver.sock"), [])
    assert not (open_dir / "nnburst").exists()
    real = tmp_path / "real"
    real.mkdir()
    os.chmod(open_dir, 0o755)
    (open_dir / "link").symlink_to(real)  # ours, in a directory only we may write: followed
    Service(str(open_dir / "link" / "nnburst" / "driver.sock"), []).close()
    assert stat.S_IMODE(os.stat(real / "nnburst").st_mode) == 0o700
