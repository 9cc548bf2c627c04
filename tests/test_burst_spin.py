"""Spinning on a burst (nnburst/hal/spin.py, csrc/burst_fast.c): a repeated
request answered in C keeps its server's spin window open only if every wait
reaches the spin policy, hits as well as misses (a policy told only of
misses closes for good); LOW_POWER never spins; closing a burst whose server
is spinning ends it at once and leaves no thread or fd behind.  The server
runs in a thread of this process and in another process
(tests/burst_spin_peer.py)."""

from __future__ import annotations

import os
import socket
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest

from nnburst.codes import ErrorStatus, PreferenceCode
from nnburst.cpu.driver import cpu_device
from nnburst.hal.burst_controller import ExecutionBurstController, polling_window_us
from nnburst.hal.burst_server import ExecutionBurstServer
from nnburst.hal.spin import SpinPolicy
from nnburst.hal.types import DataLocation, MeasureTiming, Request, RequestArgument
from nnburst.memory import Memory
from nnburst.service.burst import RemoteBurstClient, RemoteBurstModel

from .burst_fast_models import NBYTES, SHAPE, add_mul_model, expected
from .peers import Peer

WINDOW = 50_000
HIT, MISS = 1_000, 900_000
REPEATS = 300
#: Bursts tried before the machine is taken never to let a spin catch an answer.
ATTEMPTS = 5


# -- the policy, told of waits a run at a time -----------------------------------------


def test_a_policy_that_never_spins_holds_its_zero_window_without_limit() -> None:
    policy = SpinPolicy(0)
    assert policy.window_run() == (0, 0)
    policy.record_run(0, 1000, 1000 * MISS)
    assert policy.window_run() == (0, 0) and policy.waits == 1000 and not policy.spinning


def test_a_run_holds_one_window_until_the_sleeping_sample() -> None:
    policy = SpinPolicy(WINDOW)
    assert policy.window_run() == (WINDOW, 255)  # the 256th wait is the sleeping sample
    policy.record_run(WINDOW, 255, 255 * HIT)
    assert policy.window_run() == (0, 1)
    policy.record_run(0, 1, 2 * HIT)
    assert policy.window_run() == (WINDOW, 255)
    assert policy.waits == 256 and (policy.spun_ns, policy.slept_ns) == (HIT, 2 * HIT)


def test_hits_told_in_a_run_reset_the_misses() -> None:
    policy = SpinPolicy(WINDOW)
    policy.record_run(WINDOW, 1, MISS, MISS)
    policy.record_run(WINDOW, 1, MISS, MISS)
    policy.record_run(WINDOW, 40, 39 * HIT)  # hits only: the two misses are forgiven
    policy.record_run(WINDOW, 1, MISS, MISS)
    assert policy.spinning
    policy.record_run(WINDOW, 3, 2 * HIT + MISS, MISS)  # two hits, then a miss: still one
    assert policy.spinning


def test_a_closed_window_told_of_its_sleeping_waits_reopens_for_a_probe() -> None:
    policy = SpinPolicy(WINDOW)
    for _ in range(3):
        window, _ = policy.window_run()
        policy.record_run(window, 1, MISS, MISS)
    assert not policy.spinning
    assert policy.window_run() == (0, 16)  # the pause: C sleeps at once for 16 waits
    policy.record_run(0, 10, 10 * MISS)  # C came back early (a packet for Python)
    assert policy.window_run() == (0, 6)
    policy.record_run(0, 6, 6 * MISS)
    assert policy.window_run() == (4 * WINDOW, 1)  # the probe, one wait
    policy.record_run(4 * WINDOW, 1, HIT)
    # the sample counts only waits with the window open: the three misses
    assert policy.spinning and policy.window_run() == (WINDOW, 255 - 3)


# -- a server in this process -------------------------------------------------------------


class Pool:
    """a, b and the output in one shared memory."""

    def __init__(self) -> None:
        self.memory = Memory.create_shared(3 * NBYTES)
        whole = np.frombuffer(self.memory.buffer, np.float32)
        self.a, self.b, self.out = (whole[12 * i : 12 * (i + 1)].reshape(SHAPE) for i in range(3))
        self.request = Request(
            [
                RequestArgument(False, DataLocation(0, 0, NBYTES)),
                RequestArgument(False, DataLocation(0, NBYTES, NBYTES)),
            ],
            [RequestArgument(False, DataLocation(0, 2 * NBYTES, NBYTES))],
            [self.memory],
        )

    def run(self, controller: ExecutionBurstController, repeats: int) -> None:
        """``repeats`` executions, each with new inputs, each result checked."""
        rng = np.random.default_rng(repeats)
        for _ in range(repeats):
            self.a[:] = rng.standard_normal(SHAPE, np.float32)
            self.b[:] = rng.standard_normal(SHAPE, np.float32)
            status, _, _, fallback = controller.compute(
                self.request, MeasureTiming.NO, self.request.pools
            )
            assert (status, fallback) == (ErrorStatus.NONE, False)
            np.testing.assert_array_equal(self.out, expected(self.a, self.b))

    def close(self) -> None:
        del self.a, self.b, self.out
        self.memory.close()


@pytest.fixture
def pool():
    p = Pool()
    yield p
    p.close()


def burst_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "nnburst-burst-server"]


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize(
    "preference", [PreferenceCode.FAST_SINGLE_ANSWER, PreferenceCode.SUSTAINED_SPEED]
)
def test_every_wait_of_the_c_loop_reaches_the_servers_policy(pool, preference) -> None:
    prepared = cpu_device().prepare_model(add_mul_model(), preference=preference)
    with ExecutionBurstController.create(
        prepared, polling_window_us=polling_window_us(preference)
    ) as controller:
        pool.run(controller, REPEATS)
        worker = controller._context._worker
        fast, spin = worker.fast, worker.spin
    assert fast.served == REPEATS - 2  # the first two through Python, then armed
    # Every wait after a reply was given a window (the last one, torn down, may
    # not have been told back): a policy that hears only of misses counts a few.
    assert spin.waits >= REPEATS - 1
    assert spin.window_ns == polling_window_us(preference) * 1000


def test_low_power_never_spins(pool) -> None:
    prepared = cpu_device().prepare_model(add_mul_model(), preference=PreferenceCode.LOW_POWER)
    with ExecutionBurstController.create(prepared, polling_window_us=0) as controller:
        pool.run(controller, REPEATS)
        worker = controller._context._worker
        assert worker.fast.served == REPEATS - 2
    assert worker.fast.spun == 0 and worker.spin.window_run()[0] == 0
    assert worker.spin.waits >= REPEATS - 1 and controller._spin.window_run()[0] == 0


class LongWindow:
    """A prepared model whose burst servers spin for 10 s after every reply."""

    def __init__(self) -> None:
        self.model = cpu_device().prepare_model(add_mul_model())
        self.servers: list[ExecutionBurstServer] = []

    def configure_execution_burst(self, callback, requests, results):  # type: ignore[no-untyped-def]
        server = ExecutionBurstServer.create(
            callback, requests, results, self.model, polling_window_us=10_000_000
        )
        self.servers.append(server)
        return ErrorStatus.NONE, server


@pytest.mark.parametrize("requests", [0, 5])
def test_closing_a_burst_whose_server_spins_ends_it_at_once(pool, requests) -> None:
    """The server spins for 10 s for its first request, or after each reply."""
    threads, fds = burst_threads(), open_fds()
    prepared = LongWindow()
    controller = ExecutionBurstController.create(prepared, polling_window_us=0)  # type: ignore[arg-type]
    pool.run(controller, requests)
    worker = prepared.servers[0]._worker
    assert worker is not None
    time.sleep(0.05)  # the server is in its window now, spinning in C
    assert worker.thread.is_alive() and worker.spin.window_run()[0] == 10**10
    start = time.monotonic()
    controller.close()
    assert time.monotonic() - start < 2.0, "close waited for the spin window"
    assert not worker.thread.is_alive()
    served = worker.fast.served
    assert served == max(0, requests - 2)
    assert worker.fast.spun == max(0, served - 1)  # every wait but the torn-down one spun
    assert burst_threads() == threads
    assert open_fds() <= fds


# -- a server in another process ----------------------------------------------------------


@contextmanager
def service(preference: PreferenceCode):
    """A driver process serving bursts; yields (model, a function returning its report)."""
    ours, theirs = socket.socketpair()
    peer = Peer(
        "process",
        "serve",
        theirs.fileno(),
        preference.name,
        module="tests.burst_spin_peer",
        pass_fds=(theirs.fileno(),),
        capture_stdout=True,
    )
    theirs.close()
    client = RemoteBurstClient(ours)
    report: dict[str, int] = {}

    def finish() -> dict[str, int]:
        if not report:
            client.close()
            words = peer.readline().split()
            report.update(zip(words[::2], map(int, words[1::2])))
            peer.join(timeout=10)
        return report

    try:
        assert peer.readline() == "ready"
        yield RemoteBurstModel(client, 1), finish
        finish()
    finally:
        if peer.process.poll() is None:
            peer.kill()


def test_a_service_answers_repeats_spinning_and_its_policy_hears_every_wait(pool) -> None:
    preference = PreferenceCode.FAST_SINGLE_ANSWER
    spun = []
    # Some waits are caught spinning, but how many depends on the machine: the
    # policy stops spinning while it does not pay (both cores busy, as under
    # pytest -n 2) and probes again.  So a burst that caught none is tried
    # again, up to ATTEMPTS times; every burst must account for every wait.
    for _ in range(ATTEMPTS):
        with service(preference) as (model, finish):
            with ExecutionBurstController.create(
                model, polling_window_us=polling_window_us(preference)
            ) as controller:
                pool.run(controller, REPEATS)
            report = finish()
        assert report["served"] == REPEATS - 2
        assert report["accounted"] >= REPEATS - 1
        assert (report["threads"], report["fds"]) == (0, 0)
        spun.append(report["spun"])
        if spun[-1] > 0:
            break
    assert spun[-1] > 0, f"no wait caught spinning in {len(spun)} bursts"


def test_a_low_power_service_sleeps_at_once(pool) -> None:
    with service(PreferenceCode.LOW_POWER) as (model, finish):
        with ExecutionBurstController.create(model, polling_window_us=0) as controller:
            pool.run(controller, REPEATS)
            assert controller._spin.waits == REPEATS and controller._spin.window_run()[0] == 0
        report = finish()
    assert report["served"] == REPEATS - 2 and report["spun"] == 0
    assert (report["threads"], report["fds"]) == (0, 0)


def test_closing_a_service_burst_while_its_server_spins_leaves_nothing(pool) -> None:
    preference = PreferenceCode.SUSTAINED_SPEED  # 200 µs windows
    with service(preference) as (model, finish):
        for _ in range(3):  # bursts opened and closed mid-stream, the server in its window
            with ExecutionBurstController.create(
                model, polling_window_us=polling_window_us(preference)
            ) as controller:
                pool.run(controller, 20)
        report = finish()
    assert report["served"] == 3 * 18
    assert (report["threads"], report["fds"]) == (0, 0)
