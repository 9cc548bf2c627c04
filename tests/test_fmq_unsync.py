"""The unsynchronized flavor: writes always succeed, overrun readers resync
to the newest half (libfmq UnsynchronizedReadWriteTest and overflow history)."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.fmq import Flavor, MessageQueue

CAPACITY = 2048


def data(n: int, start: int = 0, dtype=np.uint8) -> np.ndarray:
    return (np.arange(start, start + n) & 0xFF).astype(dtype)


@pytest.fixture
def queue():
    with MessageQueue(np.uint8, CAPACITY, Flavor.UNSYNCHRONIZED_WRITE) as q:
        yield q


def test_small_input(queue):
    assert queue.write(data(16))
    assert np.array_equal(queue.read(16), data(16))


def test_read_when_empty_fails(queue):
    assert queue.read(2) is None


def test_write_when_full_succeeds_and_the_reader_sees_the_overflow(queue):
    assert queue.write(data(CAPACITY))
    assert queue.available_to_write() == 0
    assert queue.write(data(1))
    assert queue.read(CAPACITY) is None


def test_transaction_write_when_full_succeeds(queue):
    assert queue.write(data(CAPACITY))
    tx = queue.begin_write(1)
    assert tx is not None and len(tx.regions[0]) == 1
    tx.copy_to(data(1))
    assert queue.commit_write(1)
    assert queue.read(CAPACITY) is None


def test_larger_than_capacity_fails_even_unsynchronized(queue):
    assert not queue.write(data(2 * CAPACITY))
    assert queue.read(1) is None
    assert queue.available_to_read() == 0


def test_read_more_than_the_capacity_or_than_available_fails(queue):
    assert queue.write(data(CAPACITY))
    assert queue.read(CAPACITY + 1) is None
    with MessageQueue(np.uint8, CAPACITY, Flavor.UNSYNCHRONIZED_WRITE) as q:
        assert q.write(data(1024))
        assert q.read(1025) is None


def test_multiple_reads_and_writes_and_wrap_around(queue):
    assert queue.write(data(500))
    for i in range(5):
        assert np.array_equal(queue.read(100), data(100, 100 * i))
    for i in range(5):
        assert queue.write(data(100, 100 * i))
    assert np.array_equal(queue.read(500), data(500))
    assert queue.write(data(CAPACITY - 1))
    assert queue.read(CAPACITY - 1) is not None
    assert queue.write(data(CAPACITY))
    assert np.array_equal(queue.read(CAPACITY), data(CAPACITY))


def overflowed_history(q: MessageQueue) -> np.ndarray:
    """The newest half after writing 2048 items then one more."""
    stream = np.concatenate([data(CAPACITY, dtype=np.uint16), data(1, dtype=np.uint16)])
    return stream[-(CAPACITY // 2) :]


def test_read_after_overflow_resumes_at_the_newest_half():
    with MessageQueue(np.uint16, CAPACITY, Flavor.UNSYNCHRONIZED_WRITE) as q:
        assert q.write(data(CAPACITY, dtype=np.uint16))
        assert q.write(data(1, dtype=np.uint16))
        assert q.read(1) is None
        assert q.available_to_read() == CAPACITY // 2
        assert np.array_equal(q.read(CAPACITY // 2), overflowed_history(q))


def test_commit_read_after_overflow_fails_then_resumes():
    with MessageQueue(np.uint16, CAPACITY, Flavor.UNSYNCHRONIZED_WRITE) as q:
        assert q.write(data(CAPACITY, dtype=np.uint16))
        assert q.begin_read(CAPACITY) is not None
        assert q.write(data(1, dtype=np.uint16))
        assert not q.commit_read(CAPACITY)
        assert q.available_to_read() == CAPACITY // 2
        assert np.array_equal(q.read(CAPACITY // 2), overflowed_history(q))


def test_single_element_queue_overflow_keeps_nothing_then_recovers():
    with MessageQueue(np.uint16, 1, Flavor.UNSYNCHRONIZED_WRITE) as q:
        assert q.write(np.uint16(4)) and q.read(1)[0] == 4
        assert q.write(np.uint16(4)) and q.write(np.uint16(4))
        assert q.read(1) is None
        assert q.write(np.uint16(4)) and q.read(1)[0] == 4


def test_two_readers_read_the_same_data_independently(queue):
    with MessageQueue.attach(queue.descriptor) as a, MessageQueue.attach(queue.descriptor) as b:
        assert queue.write(data(16))
        assert np.array_equal(a.read(16), data(16))
        assert np.array_equal(b.read(16), data(16))


def test_a_late_reader_that_finds_the_ring_lapped_resyncs():
    """libfmq MultipleReadersAfterOverflow, second reader: r starts at 0."""
    with MessageQueue(np.int32, 1024, Flavor.UNSYNCHRONIZED_WRITE) as writer:
        assert writer.write(np.arange(1025, dtype=np.int32)[:1024])
        assert writer.write(np.arange(1, dtype=np.int32))
        with MessageQueue.attach(writer.descriptor) as late:
            assert late.read(16) is None
            assert writer.write(np.arange(16, dtype=np.int32))
            assert late.read(16) is not None
