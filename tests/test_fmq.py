"""The synchronized queue in one process: libfmq's SynchronizedReadWrites cases."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.errors import BadDataError, BadStateError, ClosedResourceError
from nnburst.fmq import Descriptor, Flavor, MessageQueue

CAPACITY = 2048


def data(n: int, start: int = 0) -> np.ndarray:
    return (np.arange(start, start + n) & 0xFF).astype(np.uint8)


@pytest.fixture
def queue():
    with MessageQueue(np.uint8, CAPACITY) as q:
        yield q


def test_small_write_then_read_returns_the_same_data(queue):
    assert queue.write(data(16))
    assert queue.available_to_read() == 16
    assert np.array_equal(queue.read(16), data(16))


def test_small_transaction_write_then_read(queue):
    tx = queue.begin_write(16)
    assert tx is not None and sum(len(r) for r in tx.regions) == 16
    tx.copy_to(data(16))
    assert queue.commit_write(16)
    rx = queue.begin_read(16)
    assert rx is not None
    assert np.array_equal(rx.copy_from(), data(16))
    assert queue.commit_read(16)
    assert queue.available_to_read() == 0


def test_transaction_slots_written_one_by_one(queue):
    tx = queue.begin_write(16)
    region = tx.regions[0]
    for i in range(16):
        region[i] = i
    assert queue.commit_write(16)
    assert np.array_equal(queue.read(16), data(16))


def test_read_when_empty_fails(queue):
    assert queue.available_to_read() == 0
    assert queue.read(2) is None
    assert queue.begin_read(2) is None


def test_write_when_full_fails_and_keeps_the_data(queue):
    assert queue.write(data(CAPACITY))
    assert queue.available_to_write() == 0
    assert not queue.write(data(1))
    assert queue.begin_write(1) is None
    assert np.array_equal(queue.read(CAPACITY), data(CAPACITY))


def test_write_of_exactly_the_capacity(queue):
    assert queue.write(data(CAPACITY))
    assert np.array_equal(queue.read(CAPACITY), data(CAPACITY))


def test_larger_than_capacity_fails_for_every_call(queue):
    assert not queue.write(data(2 * CAPACITY))
    assert queue.read(CAPACITY) is None
    assert queue.read(2 * CAPACITY) is None
    assert queue.begin_write(2 * CAPACITY) is None
    assert queue.available_to_read() == 0
    assert not queue.write_blocking(data(2 * CAPACITY), timeout_ns=1000)
    assert queue.read_blocking(2 * CAPACITY, timeout_ns=1000) is None


def test_multiple_reads(queue):
    assert queue.write(data(500))
    for i in range(5):
        assert np.array_equal(queue.read(100), data(100, 100 * i))


def test_multiple_writes(queue):
    for i in range(5):
        assert queue.write(data(100, 100 * i))
    assert np.array_equal(queue.read(500), data(500))


def test_wrap_around(queue):
    assert queue.write(data(CAPACITY - 1))
    assert queue.read(CAPACITY - 1) is not None
    assert queue.write(data(CAPACITY))  # wraps round the end of the ring
    assert np.array_equal(queue.read(CAPACITY), data(CAPACITY))


def test_wrap_around_with_transactions_gives_two_regions(queue):
    assert queue.write(data(CAPACITY - 1))
    assert queue.read(CAPACITY - 1) is not None
    tx = queue.begin_write(CAPACITY)
    assert len(tx.regions) == 2
    assert len(tx.regions[0]) + len(tx.regions[1]) == CAPACITY
    tx.copy_to(data(CAPACITY))
    assert queue.commit_write(CAPACITY)
    rx = queue.begin_read(CAPACITY)
    assert len(rx.regions) == 2
    assert np.array_equal(rx.copy_from(), data(CAPACITY))
    assert queue.commit_read(CAPACITY)


@pytest.mark.parametrize("count", [1, 3, 61, 2049])
@pytest.mark.parametrize(
    "dtype", [np.uint8, np.dtype("V3"), np.int64, np.dtype([("a", "u1"), ("b", "<f8")])]
)
def test_odd_sizes_wrap_correctly(count, dtype):
    with MessageQueue(dtype, count) as q:
        rng = np.random.default_rng(count)
        raw = rng.integers(0, 256, size=3 * count * q.quantum_size, dtype=np.uint8)
        items = raw.view(q.dtype)
        sent = received = 0
        while received < len(items):
            n = min(int(rng.integers(1, count + 1)), len(items) - sent)
            if n and q.write(items[sent : sent + n]):
                sent += n
            m = min(int(rng.integers(1, count + 1)), q.available_to_read())
            if m:
                got = q.read(m)
                assert got.tobytes() == items[received : received + m].tobytes()
                received += m


def test_odd_sized_queue_with_event_flag_blocks_and_writes():
    with MessageQueue(np.uint8, 2049) as q:
        assert q.write_blocking(data(64), timeout_ns=5_000_000_000)
        assert np.array_equal(q.read_blocking(64, timeout_ns=5_000_000_000), data(64))


def test_zero_length_blocking_calls_return_at_once(queue):
    assert queue.write_blocking(data(0))
    assert queue.read_blocking(0) is not None


def test_commit_of_more_than_granted_is_refused(queue):
    assert queue.begin_write(4) is not None
    assert not queue.commit_write(5)
    assert queue.available_to_read() == 0
    assert queue.write(data(4))
    assert queue.begin_read(2) is not None
    assert not queue.commit_read(3)


def test_read_into_a_preallocated_array(queue):
    out = np.zeros(8, dtype=np.uint8)
    assert queue.write(data(8))
    assert queue.read_into(out)
    assert np.array_equal(out, data(8))
    assert not queue.read_into(out)
    with pytest.raises(BadDataError):
        queue.read_into(np.zeros(8, dtype=np.int32))


def test_read_blocking_fills_the_given_out_array(queue):
    out = np.zeros(8, dtype=np.uint8)
    assert queue.write(data(8))
    assert queue.read_blocking(8, out=out, timeout_ns=1_000_000) is out
    assert np.array_equal(out, data(8))


def test_single_item_and_lists_are_accepted(queue):
    assert queue.write(7)
    assert queue.write([1, 2])
    assert queue.read(3).tolist() == [7, 1, 2]


@pytest.mark.parametrize("count", [0, -1])
def test_bad_lengths_are_rejected(count):
    with pytest.raises(BadDataError):
        MessageQueue(np.uint8, count)


def test_a_size_that_overflows_is_rejected():
    with pytest.raises(BadDataError):
        MessageQueue(np.uint16, 2**63)


def test_object_elements_are_rejected():
    with pytest.raises(BadDataError):
        MessageQueue(object, 4)


def test_closed_queue_refuses_every_call_and_close_is_idempotent():
    q = MessageQueue(np.uint8, 8)
    q.close()
    q.close()
    assert not q.is_valid()
    for call in (
        lambda: q.write(1),
        lambda: q.read(1),
        lambda: q.available_to_read(),
        lambda: q.descriptor,
    ):
        with pytest.raises(ClosedResourceError):
            call()


def test_numpy_views_outlive_close_safely():
    q = MessageQueue(np.uint8, 16)
    assert q.write(data(4))
    view = q.begin_read(4).regions[0]
    q.close()
    assert np.array_equal(view, data(4))  # the mapping stays until the view goes


def test_blocking_needs_a_synchronized_queue_with_an_event_flag():
    with MessageQueue(np.uint8, 8, event_flag=False) as q:
        assert q.event_flag is None
        with pytest.raises(BadStateError):
            q.write_blocking(data(1))
    with MessageQueue(np.uint8, 8, Flavor.UNSYNCHRONIZED_WRITE) as q:
        with pytest.raises(BadStateError):
            q.read_blocking(1)


def test_descriptor_round_trips_through_bytes(queue):
    desc = queue.descriptor
    again = Descriptor.from_bytes(desc.to_bytes())
    assert again == desc
    assert again.quantum == 1 and again.count == CAPACITY


def test_attach_in_the_same_process_shares_the_ring(queue):
    with MessageQueue.attach(queue.descriptor.to_bytes()) as reader:
        assert queue.write(data(10))
        assert np.array_equal(reader.read(10), data(10))
        assert queue.available_to_read() == 0
