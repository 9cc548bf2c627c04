"""Burst server and controller, with the server in a thread of this process
and in a separate service process (FMQs attached from descriptors, memory
pools passed as fds and mapped by slot).  Ports of the VTS burst checks."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest

from nnburst.codes import ErrorStatus
from nnburst.cpu.driver import cpu_device
from nnburst.errors import BadStateError, ClosedResourceError, NNError
from nnburst.hal.burst_controller import BurstSlots, ExecutionBurstController
from nnburst.hal.packets import (
    REQUEST_DATUM,
    RESULT_DATUM,
    deserialize_result,
    serialize_request,
)
from nnburst.hal.types import (
    NO_TIMING_US,
    DataLocation,
    MeasureTiming,
    Request,
    RequestArgument,
    Timing,
)
from nnburst.memory import Memory
from nnburst.service.burst import RemoteBurstClient, RemoteBurstModel

from .burst_models import NBYTES, Gate, Pools, add_model, slow
from .peers import MODES, Peer


class Driver:
    def __init__(
        self, prepared, peer: Peer | None = None, client: RemoteBurstClient | None = None
    ) -> None:
        self.prepared, self.peer, self.client = prepared, peer, client


@contextmanager
def open_driver(mode: str, slow_seconds: float = 0.0, gate: Gate | None = None):
    """The test model's driver in a thread or a process; ``gate`` holds
    every execution until the test opens it (see burst_models.Gate)."""
    gate_path = gate.path if gate else ""
    if mode == "thread":
        prepared = cpu_device().prepare_model(add_model())
        yield Driver(
            slow(prepared, slow_seconds, gate_path or None) if slow_seconds or gate else prepared
        )
        return
    ours, theirs = socket.socketpair()
    peer = Peer(
        "process",
        "serve",
        theirs.fileno(),
        slow_seconds,
        gate_path,
        module="tests.burst_peer",
        pass_fds=(theirs.fileno(),),
        capture_stdout=True,
    )
    theirs.close()
    try:
        assert peer.readline() == "ready"
        client = RemoteBurstClient(ours)
        try:
            yield Driver(RemoteBurstModel(client, 1), peer, client)
        finally:
            client.close()
        try:
            peer.join(timeout=10)
        except AssertionError:
            if peer.process.returncode != -signal.SIGKILL:  # the test may kill it
                raise
    finally:
        if peer.process.poll() is None:
            peer.kill()


@pytest.fixture(params=MODES)
def driver(request):
    with open_driver(request.param) as d:
        yield d


@pytest.fixture
def pools():
    p = Pools()
    yield p
    p.close()


def run(controller, pools, measure=MeasureTiming.NO):
    pools.a[:] = np.arange(12, dtype=np.float32).reshape(3, 4)
    pools.b[:] = 0.5
    pools.c[:] = 0
    return controller.compute(pools.request(), measure, pools.keys)


def assert_served(controller, pools):
    status, shapes, timing, fallback = run(controller, pools)
    assert (status, fallback) == (ErrorStatus.NONE, False)
    assert [s.dimensions for s in shapes] in ([(3, 4)], [])
    assert np.array_equal(pools.c, np.arange(12).reshape(3, 4) + 0.5)


def test_burst_computes_the_model(driver, pools):
    with ExecutionBurstController.create(driver.prepared) as controller:
        for _ in range(3):
            assert_served(controller, pools)


def test_timing_only_when_asked(driver, pools):
    with ExecutionBurstController.create(driver.prepared) as controller:
        _, _, timing, _ = run(controller, pools, MeasureTiming.NO)
        assert timing == Timing(NO_TIMING_US, NO_TIMING_US)
        status, _, timing, _ = run(controller, pools, MeasureTiming.YES)
        assert status == ErrorStatus.NONE
        assert timing.time_on_device <= timing.time_in_driver < NO_TIMING_US


def test_polling_window_gives_the_same_results(driver, pools):
    with ExecutionBurstController.create(driver.prepared, polling_window_us=50) as controller:
        assert_served(controller, pools)


def raw_round_trip(controller, packet: np.ndarray):
    """Send a packet as is (VTS's sender->sendPacket), return the parsed result."""
    return deserialize_result(controller.send_packet(packet))


BAD_DATUMS = [
    (0, (10, 10, 10, 10, 0)),
    (1, (0, 0, 0, 0, 10)),
    (2, (0, 0, 0, 0, 0)),
    (3, (0, 0, 0, 0, 10)),
    (4, (0, 0, 0, 0, 0)),
    (5, (2**31 - 1, 0, 0, 0, 0)),
    (6, (1, 0, 0, 0, 0)),
]


def datum(tag: int, words: tuple[int, ...]) -> np.ndarray:
    return np.array([[tag, *words]], dtype="<u4")


def assert_rejected(result):
    status, shapes, timing = result
    assert status != ErrorStatus.NONE
    assert shapes == []
    assert timing == Timing(NO_TIMING_US, NO_TIMING_US)


def test_every_removed_inserted_and_mutated_datum_is_rejected_and_the_burst_survives(driver, pools):
    """VTS validateBurstSerialization."""
    with ExecutionBurstController.create(driver.prepared) as controller:
        slots = controller.slots.get_slots(pools.request().pools, pools.keys)
        valid = (
            serialize_request(pools.request(), MeasureTiming.YES, slots).view("<u4").reshape(-1, 6)
        )
        variants = []
        for i in range(len(valid)):
            variants.append(np.delete(valid, i, axis=0))
        for i in range(len(valid) + 1):
            for tag, words in BAD_DATUMS:
                variants.append(np.insert(valid, i, datum(tag, words), axis=0))
        for i in range(len(valid)):
            original_tag = int(valid[i, 0])
            for tag, words in BAD_DATUMS:
                mutated = valid.copy()
                mutated[i] = datum(tag, words)
                same = np.array_equal(mutated[i], valid[i])
                dimension_value = original_tag == tag and tag in (2, 4)
                if not same and not dimension_value:
                    variants.append(mutated)
        assert len(variants) > 80
        for variant in variants:
            packet = np.ascontiguousarray(variant).reshape(-1).view(REQUEST_DATUM)
            assert_rejected(raw_round_trip(controller, packet))
        assert_served(controller, pools)


def test_a_result_larger_than_the_result_channel_gives_an_error_not_a_hang(driver, pools):
    """VTS validateBurstFmqLength (our result is 5 datums; the channel holds 4)."""
    with ExecutionBurstController.create(driver.prepared, result_channel_length=4) as controller:
        status, shapes, timing, fallback = run(controller, pools)
        assert status != ErrorStatus.NONE and shapes == [] and not fallback
        assert timing == Timing(NO_TIMING_US, NO_TIMING_US)


def test_result_padding_from_the_server_is_zero(driver, pools):
    """VTS validateBurstSanitized, on the raw bytes the server wrote."""
    with ExecutionBurstController.create(driver.prepared) as controller:
        run(controller, pools)  # gives the pools their slots
        slots = controller.slots.get_slots(pools.request().pools, pools.keys)
        reply = controller.send_packet(serialize_request(pools.request(), MeasureTiming.NO, slots))
        raw = reply.view(np.uint8).reshape(-1, 24)[:5]
        assert raw[1, 0] == 1  # operandInformation
        assert not raw[1, 9:12].any()
        assert not raw[:, 1:8].any()


@pytest.mark.parametrize("drop", ["input", "output"])
def test_a_request_invalid_for_the_model_is_invalid_argument(driver, pools, drop):
    """VTS ValidateRequest burst block: removeInput / removeOutput."""
    with ExecutionBurstController.create(driver.prepared) as controller:
        request = pools.request()
        if drop == "input":
            request.inputs = request.inputs[:1]
        else:
            request.outputs = []
        status, shapes, timing, fallback = controller.compute(
            request, MeasureTiming.YES, pools.keys
        )
        assert (status, shapes, fallback) == (ErrorStatus.INVALID_ARGUMENT, [], False)
        assert timing == Timing(NO_TIMING_US, NO_TIMING_US)
        controller.free_memory(pools.keys[0])
        controller.free_memory(object())  # unknown key
        controller.free_memory(pools.keys[0])  # double free
        assert_served(controller, pools)


@pytest.mark.parametrize(
    "location",
    [
        DataLocation(0, 90, 48),
        DataLocation(0, 2**32 - 1, 48),
        DataLocation(5, 0, 48),
        DataLocation(0, 0, 47),
    ],
    ids=["past-the-pool", "huge-offset", "no-such-pool", "short"],
)
def test_bad_locations_are_rejected_without_reading_outside_the_pool(driver, pools, location):
    with ExecutionBurstController.create(driver.prepared) as controller:
        request = pools.request()
        request.inputs[1] = RequestArgument(False, location)
        status, shapes, _, _ = controller.compute(request, MeasureTiming.NO, pools.keys)
        assert status == ErrorStatus.INVALID_ARGUMENT and shapes == []
        assert_served(controller, pools)


def test_an_unknown_slot_is_rejected(driver, pools):
    with ExecutionBurstController.create(driver.prepared) as controller:
        slots = controller.slots.get_slots(pools.request().pools, pools.keys)
        packet = serialize_request(pools.request(), MeasureTiming.NO, [slots[0], 2**31 - 1])
        assert_rejected(raw_round_trip(controller, packet))
        assert_served(controller, pools)


def test_a_request_too_large_for_the_channel_is_not_sent(driver, pools):
    with ExecutionBurstController.create(driver.prepared, channel_length=8) as controller:
        request = pools.request()
        request.inputs[0] = RequestArgument(False, DataLocation(0, 0, 48), (3, 4, 1, 1, 1, 1))
        status, shapes, timing, fallback = controller.compute(request, MeasureTiming.NO, pools.keys)
        assert (status, shapes, fallback) == (ErrorStatus.GENERAL_FAILURE, [], True)


def test_memory_freed_mid_burst_is_fetched_again_when_reused(driver, pools):
    with ExecutionBurstController.create(driver.prepared) as controller:
        assert_served(controller, pools)
        controller.free_memory(pools.output)
        fresh = Pools()
        try:
            assert controller.slots.get_slots([fresh.output], [fresh.output]) == [1]  # LIFO reuse
            request = pools.request()
            request.pools = [pools.inputs, fresh.output]
            pools.a[:] = 1
            pools.b[:] = 2
            status, _, _, _ = controller.compute(
                request, MeasureTiming.NO, [pools.inputs, fresh.output]
            )
            assert status == ErrorStatus.NONE
            assert np.all(fresh.c == 3)
        finally:
            fresh.close()


def test_slots_are_reused_last_freed_first():
    slots = BurstSlots()
    keys = [object() for _ in range(4)]
    assert slots.get_slots(keys, keys) == [0, 1, 2, 3]
    assert slots.free_memory(keys[1]) == 1
    assert slots.free_memory(keys[2]) == 2
    assert slots.free_memory(keys[2]) is None
    new = [object(), object(), object()]
    assert slots.get_slots(new, new) == [2, 1, 4]
    assert slots.get_memories([0, 2]) == (ErrorStatus.NONE, [keys[0], new[0]])
    assert slots.get_memories([0, 9])[0] == ErrorStatus.INVALID_ARGUMENT
    assert slots.get_memories([-1])[0] == ErrorStatus.INVALID_ARGUMENT


@pytest.mark.parametrize("mode", MODES)
def test_one_execution_in_flight_at_a_time(mode, tmp_path):
    gate = Gate(str(tmp_path / "gate"))
    with (
        open_driver(mode, gate=gate) as d,
        ExecutionBurstController.create(d.prepared) as controller,
    ):
        p = Pools()
        results = []
        thread = threading.Thread(target=lambda: results.append(run(controller, p)))
        thread.start()
        gate.wait_entered()  # the first execution is in the driver and stays there
        with pytest.raises(BadStateError):
            run(controller, p)
        gate.open()
        thread.join(30)
        assert results[0][0] == ErrorStatus.NONE
        p.close()


@pytest.mark.parametrize("mode", MODES)
def test_closing_the_controller_releases_a_blocked_compute(mode, tmp_path):
    """The driver holds the execution until the gate opens, which happens
    only after the compute returned: only close() can have released it."""
    gate = Gate(str(tmp_path / "gate"))
    with open_driver(mode, gate=gate) as d:
        controller = ExecutionBurstController.create(d.prepared)
        p = Pools()
        results = []
        thread = threading.Thread(target=lambda: results.append(run(controller, p)))
        thread.start()
        gate.wait_entered()
        controller.close()
        thread.join(30)  # a hang guard
        assert not thread.is_alive()
        assert results[0][0] == ErrorStatus.DEVICE_UNAVAILABLE
        gate.open()
        with pytest.raises(ClosedResourceError):
            run(controller, p)
        p.close()


def test_closing_the_server_side_releases_the_client():
    prepared = slow(cpu_device().prepare_model(add_model()), 0.5)
    contexts = []

    class Capture:
        def configure_execution_burst(self, callback, request_channel, result_channel):
            status, context = prepared.configure_execution_burst(
                callback, request_channel, result_channel
            )
            contexts.append(context)
            return status, context

    p = Pools()
    with ExecutionBurstController.create(Capture()) as controller:
        closer = threading.Timer(0.1, contexts[0].close)
        closer.start()
        status, _, _, _ = run(controller, p)  # the execution in progress may finish
        assert status in (ErrorStatus.NONE, ErrorStatus.DEVICE_UNAVAILABLE)
        closer.join(5)
        status, _, _, _ = run(controller, p)
        assert status == ErrorStatus.DEVICE_UNAVAILABLE
    p.close()


def test_dropping_the_context_stops_the_worker():
    prepared = cpu_device().prepare_model(add_model())
    slots = BurstSlots()
    from nnburst.fmq import MessageQueue

    with MessageQueue(REQUEST_DATUM, 16) as requests, MessageQueue(RESULT_DATUM, 16) as results:
        status, context = prepared.configure_execution_burst(
            slots, requests.descriptor, results.descriptor
        )
        assert status == ErrorStatus.NONE
        worker = context._worker.thread
        assert worker.is_alive()
        del context
        worker.join(5)
        assert not worker.is_alive()


def test_killing_the_service_mid_compute_releases_the_compute(tmp_path):
    """The gate never opens: the compute can only end because the service died."""
    gate = Gate(str(tmp_path / "gate"))
    with open_driver("process", gate=gate) as d:
        p = Pools()
        controller = ExecutionBurstController.create(d.prepared)

        def kill_when_in_flight() -> None:
            gate.wait_entered()
            os.kill(d.peer.pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_when_in_flight)
        killer.start()
        status, shapes, _, fallback = run(controller, p)
        killer.join(30)
        assert status == ErrorStatus.DEVICE_UNAVAILABLE and not fallback
        controller.close()
        p.close()


def test_configure_failure_raises_a_clear_error():
    class Refuses:
        def configure_execution_burst(self, *args):
            return ErrorStatus.GENERAL_FAILURE, None

    with pytest.raises(NNError):
        ExecutionBurstController.create(Refuses())


def test_a_closed_client_connection_ends_the_service_bursts():
    with open_driver("process") as d:
        controller = ExecutionBurstController.create(d.prepared)
        p = Pools()
        assert_served(controller, p)
        d.client.close()  # the app "dies": the service tears its bursts down
        status, _, _, _ = run(controller, p)
        assert status == ErrorStatus.DEVICE_UNAVAILABLE
        controller.close()
        p.close()


def test_request_pools_that_cannot_cross_a_process_boundary_are_refused():
    with open_driver("process") as d, ExecutionBurstController.create(d.prepared) as controller:
        buffer = np.zeros(144, np.uint8)
        request = Request(
            [
                RequestArgument(False, DataLocation(0, 0, 48)),
                RequestArgument(False, DataLocation(0, 48, 48)),
            ],
            [RequestArgument(False, DataLocation(0, 96, 48))],
            [buffer],
        )
        status, _, _, _ = controller.compute(request, MeasureTiming.NO, [id(buffer)])
        assert status == ErrorStatus.INVALID_ARGUMENT


@pytest.mark.parametrize("mode", MODES)
def test_a_result_past_the_deadline_is_missed_then_dropped_before_the_next_request(
    mode, pools, tmp_path
):
    """set_timeout's rule on the FMQ path: the controller stops waiting at the deadline, and
    the late result is read and dropped before the next request, so none is mistaken for another's."""
    gate = Gate(str(tmp_path / "gate"))  # the driver holds the first execution past its deadline
    with (
        open_driver(mode, gate=gate) as d,
        ExecutionBurstController.create(d.prepared) as controller,
    ):
        pools.a[:] = np.arange(12, dtype=np.float32).reshape(3, 4)
        pools.b[:] = 0.5
        soon = time.monotonic_ns() + 10_000_000
        status, shapes, timing, fallback = controller.compute(
            pools.request(), MeasureTiming.YES, pools.keys, soon
        )
        assert (status, shapes, timing, fallback) == (
            ErrorStatus.MISSED_DEADLINE_TRANSIENT,
            [],
            Timing(),
            False,
        )
        # Still owed, and this deadline has passed: nothing is sent.
        passed = time.monotonic_ns() - 1
        assert controller.compute(pools.request(), MeasureTiming.NO, pools.keys, passed)[0] == (
            ErrorStatus.MISSED_DEADLINE_TRANSIENT
        )
        gate.open()  # the late result comes back now; the next request must not take it
        pools.b[:] = 2.0
        status, shapes, _, _ = controller.compute(pools.request(), MeasureTiming.NO, pools.keys)
        assert status == ErrorStatus.NONE
        assert np.array_equal(pools.c, np.arange(12).reshape(3, 4) + 2.0)


def test_a_burst_caches_a_bounded_number_of_memories():
    """Issue 15: a client naming a new memory in every request and never freeing
    one is refused past MAX_CACHED_SLOTS; freeing makes room again."""
    from nnburst.hal.burst_server import MAX_CACHED_SLOTS

    prepared = cpu_device().prepare_model(add_model())
    pools = Pools()
    outputs: list[Memory] = []
    with ExecutionBurstController.create(prepared) as controller:
        request = pools.request()
        for k in range(MAX_CACHED_SLOTS):  # the inputs' memory is cached too: one more than fits
            outputs.append(Memory.create_shared(NBYTES))
            request.pools = [pools.inputs, outputs[-1]]
            status = controller.compute(request, MeasureTiming.NO, request.pools)[0]
            expected = (
                ErrorStatus.NONE if k < MAX_CACHED_SLOTS - 1 else ErrorStatus.INVALID_ARGUMENT
            )
            assert status == expected, k
        controller.free_memory(outputs[0])
        status = controller.compute(request, MeasureTiming.NO, request.pools)[0]
        assert status == ErrorStatus.NONE
    for memory in outputs:
        memory.close()
    pools.close()
