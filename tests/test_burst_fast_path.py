"""The burst server's C path (csrc/burst_fast.c): a request repeated on a
burst is answered in C, with the Python path's results, and everything that
is not exactly the armed request (another slot, offset, shape, measure
flag, a freed memory, a hostile packet, the burst's close) goes back to the
Python path.  The server runs in a thread of this process and in another
process (tests/burst_spin_peer.py)."""

from __future__ import annotations

import os
import socket
import time
from contextlib import contextmanager

import numpy as np
import pytest

from nnburst.codes import ErrorStatus
from nnburst.cpu.driver import cpu_device
from nnburst.hal.burst_controller import ExecutionBurstController
from nnburst.hal.packets import WORDS, deserialize_result, request_words
from nnburst.hal.spin import WARM_UP
from nnburst.hal.types import (
    NO_TIMING_US,
    DataLocation,
    MeasureTiming,
    Request,
    RequestArgument,
)
from nnburst.memory import Memory
from nnburst.service.burst import RemoteBurstClient, RemoteBurstModel

from .burst_fast_models import NBYTES, SHAPE, add_mul_model, expected
from .peers import MODES, Peer

SENTINEL = -7.25


class Driver:
    def __init__(self, prepared, peer: Peer | None = None, client=None) -> None:
        self.prepared, self.peer, self.client = prepared, peer, client
        self.served_in_process: int | None = None  # the peer's count, once it ended

    def finish(self) -> None:
        """End the peer (process mode) and read how many requests it answered in C."""
        if self.peer is None or self.served_in_process is not None:
            return
        self.client.close()
        line = self.peer.readline()
        assert line.startswith("served "), line
        self.served_in_process = int(line.split()[1])
        self.peer.join(timeout=10)


@contextmanager
def open_driver(mode: str):
    if mode == "thread":
        yield Driver(cpu_device().prepare_model(add_mul_model()))
        return
    ours, theirs = socket.socketpair()
    peer = Peer(
        "process",
        "serve",
        theirs.fileno(),
        "FAST_SINGLE_ANSWER",  # the driver's default preference
        module="tests.burst_spin_peer",
        pass_fds=(theirs.fileno(),),
        capture_stdout=True,
    )
    theirs.close()
    try:
        assert peer.readline() == "ready"
        client = RemoteBurstClient(ours)
        driver = Driver(RemoteBurstModel(client, 1), peer, client)
        try:
            yield driver
        finally:
            driver.finish()
    finally:
        if peer.process.poll() is None:
            peer.kill()


@pytest.fixture(params=MODES)
def driver(request):
    with open_driver(request.param) as d:
        yield d


class Pool:
    """a, b and two output locations in one shared memory."""

    def __init__(self) -> None:
        self.memory = Memory.create_shared(5 * NBYTES)
        whole = np.frombuffer(self.memory.buffer, np.float32)
        self.a, self.b, self.out, self.other, self.spare = (
            whole[12 * i : 12 * (i + 1)].reshape(SHAPE) for i in range(5)
        )

    def fill(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.a[:] = rng.standard_normal(SHAPE, np.float32)
        self.b[:] = rng.standard_normal(SHAPE, np.float32)
        self.out[:] = self.other[:] = self.spare[:] = SENTINEL

    def close(self) -> None:
        del self.a, self.b, self.out, self.other, self.spare
        self.memory.close()


@pytest.fixture
def pool():
    p = Pool()
    yield p
    p.close()


def request(pools, out_pool=0, out_offset=2 * NBYTES, dims=(), in_dims=()) -> Request:
    return Request(
        [
            RequestArgument(False, DataLocation(0, 0, NBYTES), in_dims),
            RequestArgument(False, DataLocation(0, NBYTES, NBYTES)),
        ],
        [RequestArgument(False, DataLocation(out_pool, out_offset, NBYTES), dims)],
        list(pools),
    )


def compute(controller, req, measure=MeasureTiming.NO):
    status, shapes, timing, fallback = controller.compute(req, measure, req.pools)
    assert (status, fallback) == (ErrorStatus.NONE, False)
    assert [s.dimensions for s in shapes] == [SHAPE]
    return timing


def served_in_c(controller) -> int | None:
    """Requests the server answered in C (a server in this process only)."""
    worker = getattr(controller._context, "_worker", None)
    return None if worker is None else worker.fast.served


def test_repeats_are_answered_in_c_with_the_python_paths_results(driver, pool):
    with ExecutionBurstController.create(driver.prepared, polling_window_us=50) as controller:
        req = request([pool.memory])
        for seed in range(20):
            pool.fill(seed)  # new inputs in place: the packet stays the same
            compute(controller, req)
            np.testing.assert_array_equal(pool.out, expected(pool.a, pool.b))
            assert np.all(pool.other == SENTINEL)
        if driver.peer is None:
            assert served_in_c(controller) == 18  # the first two go through Python
    driver.finish()
    if driver.peer is not None:
        assert driver.served_in_process == 18


def test_timing_is_measured_in_c_when_asked(driver, pool):
    with ExecutionBurstController.create(driver.prepared) as controller:
        req = request([pool.memory])
        for seed in range(5):
            pool.fill(seed)
            timing = compute(controller, req, MeasureTiming.YES)
            assert timing.time_on_device <= timing.time_in_driver < NO_TIMING_US
            np.testing.assert_array_equal(pool.out, expected(pool.a, pool.b))
        timing = compute(controller, req, MeasureTiming.NO)  # another packet: no timing
        assert timing.time_on_device == timing.time_in_driver == NO_TIMING_US
        if driver.peer is None:
            assert served_in_c(controller) == 3


CHANGES = {
    "offset": lambda p, o: request([p.memory], out_offset=3 * NBYTES),
    "slot": lambda p, o: request([p.memory, o], out_pool=1, out_offset=0),
    "shape": lambda p, o: request([p.memory], dims=SHAPE, in_dims=SHAPE),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_request_falls_back_and_is_answered_right(driver, pool, change):
    other = Memory.create_shared(NBYTES)
    other_out = np.frombuffer(other.buffer, np.float32).reshape(SHAPE)
    try:
        with ExecutionBurstController.create(driver.prepared) as controller:
            base, changed = request([pool.memory]), CHANGES[change](pool, other)
            for seed in range(3):
                pool.fill(seed)
                compute(controller, base)
            armed = served_in_c(controller)
            for seed in range(3, 8):
                pool.fill(seed)
                other_out[:] = SENTINEL
                compute(controller, changed)
                want = expected(pool.a, pool.b)
                written = {"offset": pool.other, "slot": other_out, "shape": pool.out}[change]
                np.testing.assert_array_equal(written, want)
                if change != "shape":  # the armed request's output is left alone
                    assert np.all(pool.out == SENTINEL)
                # and back: the armed request is still answered right
                pool.fill(seed + 100)
                compute(controller, base)
                np.testing.assert_array_equal(pool.out, expected(pool.a, pool.b))
            if armed is not None:
                assert armed == 1
                # alternating requests: each goes through Python, none is served stale
                assert served_in_c(controller) == 1
    finally:
        del other_out
        other.close()


def test_a_freed_slot_is_not_served_from_its_old_memory(driver, pool):
    first = Memory.create_shared(NBYTES)
    second = Memory.create_shared(NBYTES)
    first_out = np.frombuffer(first.buffer, np.float32).reshape(SHAPE)
    second_out = np.frombuffer(second.buffer, np.float32).reshape(SHAPE)
    try:
        with ExecutionBurstController.create(driver.prepared) as controller:
            req = request([pool.memory, first], out_pool=1, out_offset=0)
            for seed in range(4):
                pool.fill(seed)
                compute(controller, req)
            np.testing.assert_array_equal(first_out, expected(pool.a, pool.b))
            controller.free_memory(first)
            first_out[:] = SENTINEL
            second_out[:] = SENTINEL
            reuse = request([pool.memory, second], out_pool=1, out_offset=0)
            assert controller.slots.get_slots(reuse.pools, reuse.pools) == [0, 1]  # slot 1 again
            for seed in range(10, 14):  # the very same packet bytes as before the free
                pool.fill(seed)
                compute(controller, reuse)
                np.testing.assert_array_equal(second_out, expected(pool.a, pool.b))
                assert np.all(first_out == SENTINEL)
            if served_in_c(controller) is not None:
                # the first after the free went through Python (which fetched the
                # new memory), and re-armed: the packet repeats the one before
                assert served_in_c(controller) == 2 + 3
    finally:
        del first_out, second_out
        first.close()
        second.close()


def _packet(req, slots) -> np.ndarray:
    return np.array(request_words(req, MeasureTiming.NO, slots), "<u4")


def _hostile(words: np.ndarray, which: str) -> np.ndarray:
    words = words.copy()
    output = 3 * WORDS  # datum 3: the output's operand information
    if which == "offset past the pool":
        words[output + 3] = 5 * NBYTES - 4
    elif which == "length past the pool":
        words[output + 4] = 2**32 - 1
    elif which == "unknown slot":
        words[-2 * WORDS + 1] = 77
    elif which == "one datum short":
        words = words[:-WORDS]
    elif which == "wrong pool index":
        words[output + 2] = 9
    elif which == "bad measure":
        words[-WORDS + 1] = 5
    return words


HOSTILE = [
    "offset past the pool",
    "length past the pool",
    "unknown slot",
    "one datum short",
    "wrong pool index",
    "bad measure",
]


def test_a_hostile_packet_after_arming_is_refused_and_the_burst_goes_on(driver, pool):
    with ExecutionBurstController.create(driver.prepared) as controller:
        req = request([pool.memory])
        for seed in range(3):
            pool.fill(seed)
            compute(controller, req)
        words = _packet(req, [0])
        for which in HOSTILE:
            pool.fill(50)
            status, shapes, _ = deserialize_result(controller.send_packet(_hostile(words, which)))
            assert status in (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.GENERAL_FAILURE), which
            assert shapes == [], which
            assert np.all(pool.out == SENTINEL) and np.all(pool.spare == SENTINEL), which
            for seed in range(3):  # served right again, then re-armed
                pool.fill(seed)
                compute(controller, req)
                np.testing.assert_array_equal(pool.out, expected(pool.a, pool.b))
        # the armed packet itself, sent raw, is still answered by C
        status, _, _ = deserialize_result(controller.send_packet(words))
        assert status == ErrorStatus.NONE


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_closing_an_armed_burst_leaves_no_thread_and_no_fd(pool):
    prepared = cpu_device().prepare_model(add_mul_model())
    fds = _open_fds()
    for window in (0, 50):  # the worker asleep on the futex, or spinning
        controller = ExecutionBurstController.create(prepared, polling_window_us=window)
        req = request([pool.memory])
        for seed in range(5):
            pool.fill(seed)
            compute(controller, req)
        worker = controller._context._worker
        assert worker.fast.served == 3 and worker.fast.packet
        controller.close()
        worker.thread.join(5)
        assert not worker.thread.is_alive()
        assert not worker.fast.packet  # released: nothing armed points anywhere
        assert _open_fds() == fds


def test_stopping_the_server_ends_the_c_loop_even_when_the_client_keeps_sending(pool):
    """The stop flag, not only the queue's teardown bit (which the client could clear)."""
    prepared = cpu_device().prepare_model(add_mul_model())
    controller = ExecutionBurstController.create(prepared, polling_window_us=50)
    req = request([pool.memory])
    for seed in range(4):
        pool.fill(seed)
        compute(controller, req)
    worker = controller._context._worker
    worker.fast.stop()  # as stop() does first; C serves nothing more
    pool.fill(9)
    status, _, _, _ = controller.compute(req, MeasureTiming.NO, req.pools)
    assert status == ErrorStatus.NONE  # answered by Python, which serves until the flag
    np.testing.assert_array_equal(pool.out, expected(pool.a, pool.b))
    assert worker.fast.served == 2
    controller.close()
    worker.thread.join(5)
    assert not worker.thread.is_alive()


def test_an_unsealed_pool_is_not_armed(pool, tmp_path):
    """A pool whose file the app may shrink stays on the Python path."""
    path = tmp_path / "pool"
    path.write_bytes(bytes(5 * NBYTES))
    fd = os.open(path, os.O_RDWR)
    try:
        memory = Memory.from_fd(5 * NBYTES, 3, fd, 0)
    finally:
        os.close(fd)
    prepared = cpu_device().prepare_model(add_mul_model())
    try:
        values = np.frombuffer(memory.buffer, np.float32)
        values[:24] = np.arange(24, dtype=np.float32)
        with ExecutionBurstController.create(prepared) as controller:
            req = request([memory])
            for _ in range(4):
                compute(controller, req)
            assert served_in_c(controller) == 0
            np.testing.assert_array_equal(
                values[24:36].reshape(SHAPE),
                expected(values[:12].reshape(SHAPE), values[12:24].reshape(SHAPE)),
            )
        del values
    finally:
        memory.close()


def test_waits_that_miss_the_spin_window_go_to_the_policy_and_c_serves_on(pool):
    """A client slower than the server's window: each miss is recorded by the
    worker's spin policy (which closes the window), and C answers throughout."""
    prepared = cpu_device().prepare_model(add_mul_model())  # a 50 µs window
    with ExecutionBurstController.create(prepared, polling_window_us=0) as controller:
        req = request([pool.memory])
        for seed in range(WARM_UP + 10):  # a burst's first waits are not judged
            pool.fill(seed)
            compute(controller, req)
            np.testing.assert_array_equal(pool.out, expected(pool.a, pool.b))
            time.sleep(0.002)
        worker = controller._context._worker
        assert worker.fast.served == WARM_UP + 8
        assert not worker.spin.spinning  # the misses C reported closed the window


def test_a_packet_array_changed_in_place_is_sent_as_changed(driver, pool):
    """The client skips copying a repeated packet of its own, never a caller's array."""
    with ExecutionBurstController.create(driver.prepared) as controller:
        req = request([pool.memory])
        for seed in range(3):
            pool.fill(seed)
            compute(controller, req)
        words = _packet(req, [0])
        assert deserialize_result(controller.send_packet(words))[0] == ErrorStatus.NONE
        words[-WORDS + 1] = 5  # measureTiming 5, in the same array
        status, shapes, _ = deserialize_result(controller.send_packet(words))
        assert status != ErrorStatus.NONE and shapes == []
