"""EventFlag semantics (libfmq BlockingReadWrites cases) and teardown wake-ups."""

from __future__ import annotations

import mmap
import signal
import threading
import time

import numpy as np
import pytest

from nnburst.errors import BadDataError, ClosedResourceError
from nnburst.fmq import FMQ_NOT_EMPTY, FMQ_NOT_FULL, EventFlag, MessageQueue

from .blocking import wait_until_blocked_on, word_address

MS = 1_000_000
SECOND = 1000 * MS


@pytest.fixture
def queue():
    with MessageQueue(np.uint8, 2048) as q:
        yield q


def test_wait_times_out_when_nobody_wakes(queue):
    start = time.monotonic()
    assert queue.event_flag.wait(FMQ_NOT_EMPTY, timeout_ns=50 * MS) == 0
    assert time.monotonic() - start >= 0.045


def test_a_pending_bit_wins_over_an_expired_timeout(queue):
    queue.event_flag.wake(FMQ_NOT_EMPTY)
    assert queue.event_flag.wait(FMQ_NOT_EMPTY, timeout_ns=1) == FMQ_NOT_EMPTY


def test_short_wait_without_wake_times_out(queue):
    assert queue.event_flag.wait(FMQ_NOT_EMPTY, timeout_ns=1) == 0


def test_waiting_consumes_only_the_bits_asked_for(queue):
    flag = queue.event_flag
    flag.wake(FMQ_NOT_EMPTY | FMQ_NOT_FULL)
    assert flag.wait(FMQ_NOT_EMPTY, timeout_ns=1) == FMQ_NOT_EMPTY
    assert flag.wait(FMQ_NOT_EMPTY, timeout_ns=1) == 0  # consumed
    assert flag.wait(FMQ_NOT_FULL, timeout_ns=1) == FMQ_NOT_FULL  # still pending


def test_write_and_wake_then_short_blocking_read_succeeds(queue):
    assert queue.write(np.arange(16, dtype=np.uint8))
    queue.event_flag.wake(FMQ_NOT_EMPTY)
    got = queue.read_blocking(16, timeout_ns=1)
    assert got is not None and np.array_equal(got, np.arange(16))


def test_reader_thread_woken_by_a_later_write(queue):
    """libfmq SmallInputTest1: wait, then read when the bit comes."""
    seen = []

    def reader():
        bits = queue.event_flag.wait(FMQ_NOT_EMPTY, timeout_ns=5 * SECOND, retry=False)
        seen.append(bits)
        seen.append(queue.read(64))
        queue.event_flag.wake(FMQ_NOT_FULL)

    thread = threading.Thread(target=reader)
    thread.start()
    wait_until_blocked_on(thread, word_address(queue.event_flag))
    assert queue.write(np.arange(64, dtype=np.uint8))
    queue.event_flag.wake(FMQ_NOT_EMPTY)
    thread.join(5)
    assert seen[0] == FMQ_NOT_EMPTY and np.array_equal(seen[1], np.arange(64))


def test_external_event_flag_on_a_plain_shared_word():
    """libfmq SmallInputTest2: an EventFlag on a word outside the queue."""
    with mmap.mmap(-1, 4096) as word_memory:
        flag = EventFlag.on_buffer(word_memory, 8)
        results = []
        thread = threading.Thread(
            target=lambda: results.append(flag.wait(0x4, timeout_ns=5 * SECOND))
        )
        thread.start()
        wait_until_blocked_on(thread, word_address(flag))
        flag.wake(0x4)
        thread.join(5)
        assert results == [0x4]
        assert flag.word == 0
        flag = None  # drop the view before the mapping closes


def test_zero_masks_are_rejected(queue):
    with pytest.raises(BadDataError):
        queue.event_flag.wake(0)
    with pytest.raises(BadDataError):
        queue.event_flag.wait(0)


def test_misaligned_external_word_is_rejected():
    with mmap.mmap(-1, 4096) as memory, pytest.raises(BadDataError):
        EventFlag.on_buffer(memory, 2)


def test_close_wakes_a_thread_blocked_in_read_blocking(queue):
    errors = []

    def reader():
        try:
            queue.read_blocking(1)
        except ClosedResourceError as exc:
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    wait_until_blocked_on(thread, word_address(queue.event_flag))
    queue.close()
    thread.join(5)
    assert not thread.is_alive()
    assert len(errors) == 1


def test_close_wakes_a_thread_blocked_in_event_flag_wait(queue):
    errors = []
    flag = queue.event_flag

    def waiter():
        try:
            flag.wait(FMQ_NOT_EMPTY)
        except ClosedResourceError as exc:
            errors.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    wait_until_blocked_on(thread, word_address(flag))
    queue.close()
    thread.join(5)
    assert len(errors) == 1


def test_a_signal_during_a_blocking_read_runs_its_handler_and_the_wait_goes_on(queue):
    calls = []
    previous = signal.signal(signal.SIGALRM, lambda *_: calls.append(time.monotonic()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.03)
        start = time.monotonic()
        assert queue.read_blocking(1, timeout_ns=150 * MS) is None
        elapsed = time.monotonic() - start
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert len(calls) == 1
    assert elapsed >= 0.14  # the deadline is absolute: the signal did not restart or cut it


def test_keyboard_interrupt_escapes_a_blocking_read(queue):
    def interrupt(*_):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.03)
        with pytest.raises(KeyboardInterrupt):
            queue.read_blocking(1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert queue.write(np.zeros(1, np.uint8))  # the queue is still usable
