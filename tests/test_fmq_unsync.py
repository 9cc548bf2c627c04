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


# -- a reader lapped in the middle of its copy --------------------------------
#
# nnb_fmq_set_read_hook splits a read's copy in two byte halves and runs the
# hook in between; the hook here is a writer burst through another handle.
# So the reader is overrun at a chosen point inside an element, every run,
# instead of by scheduler luck.  Each element carries its sequence number
# and a check word derived from it: a torn element has a check that does
# not match its sequence number.

ELEMENT = np.dtype([("seq", "<u4"), ("check", "<u4")])
RING = 8


def elements(start: int, n: int) -> np.ndarray:
    out = np.empty(n, dtype=ELEMENT)
    out["seq"] = np.arange(start, start + n, dtype=np.uint32)
    out["check"] = out["seq"] ^ np.uint32(0xA5A5A5A5)
    return out


def assert_whole_and_in_order(batch: np.ndarray) -> None:
    assert np.array_equal(batch["check"], batch["seq"] ^ np.uint32(0xA5A5A5A5)), (
        f"torn element: {batch}"
    )
    assert np.all(np.diff(batch["seq"].astype(np.int64)) == 1), f"out of order: {batch}"


class LapDuringCopy:
    """Installs a read hook on ``reader`` that writes ``burst`` new
    elements through ``writer`` once, mid-copy."""

    def __init__(self, reader: MessageQueue, writer: MessageQueue, burst: np.ndarray) -> None:
        self.reader, self.writer, self.burst = reader, writer, burst
        self.calls = 0

    def _run(self) -> None:
        self.calls += 1
        if self.calls == 1:  # writes of at most a ring each
            for start in range(0, len(self.burst), RING):
                assert self.writer.write(self.burst[start : start + RING])

    def __enter__(self) -> LapDuringCopy:
        self.reader._native.set_read_hook(self._run)
        return self

    def __exit__(self, *exc) -> None:
        self.reader._native.set_read_hook(None)


@pytest.fixture
def lap_pair():
    with MessageQueue(ELEMENT, RING, Flavor.UNSYNCHRONIZED_WRITE) as writer:
        with MessageQueue.attach(writer.descriptor) as reader:
            yield writer, reader


@pytest.mark.parametrize(
    ("read_n", "burst_n"),
    [
        (1, 1),  # the one slot being read is rewritten: split inside element 0
        (1, RING),  # a whole lap
        (3, 2),  # split inside element 1; the burst rewrites slots 0 and 1
        (RING, 1),  # a full-ring read, only the first slot rewritten
        (RING, 3 * RING),  # lapped three times over
    ],
)
def test_a_reader_lapped_mid_copy_never_returns_a_torn_element(lap_pair, read_n, burst_n):
    writer, reader = lap_pair
    assert writer.write(elements(0, RING))
    with LapDuringCopy(reader, writer, elements(RING, burst_n)) as lap:
        got = reader.read(read_n)
    assert lap.calls == 1
    assert got is None, f"a copy the writer overwrote was returned: {got}"
    # The reader resynchronised at the newest half of what was written.
    newest = RING + burst_n
    assert reader.available_to_read() == RING // 2
    tail = reader.read(RING // 2)
    assert tail is not None
    assert_whole_and_in_order(tail)
    assert int(tail["seq"][-1]) == newest - 1


@pytest.mark.parametrize("burst_n", [1, 4])
def test_a_writer_burst_into_free_slots_mid_copy_is_not_an_overrun(lap_pair, burst_n):
    """The check must not be too eager: writes that stay clear of the slots
    being copied leave the read valid."""
    writer, reader = lap_pair
    assert writer.write(elements(0, RING - 4))
    with LapDuringCopy(reader, writer, elements(RING - 4, burst_n)) as lap:
        got = reader.read(RING - 4)
    assert lap.calls == 1
    assert got is not None
    assert_whole_and_in_order(got)
    assert np.array_equal(got, elements(0, RING - 4))
    rest = reader.read(burst_n)
    assert rest is not None and np.array_equal(rest, elements(RING - 4, burst_n))


def test_read_into_reports_the_same_overrun_and_resumes_at_the_newest_half(lap_pair):
    """read_into, the path the stress test reads with."""
    writer, reader = lap_pair
    assert writer.write(elements(0, RING))
    out = np.zeros(2, dtype=ELEMENT)
    with LapDuringCopy(reader, writer, elements(RING, 2)):
        assert not reader.read_into(out)
    assert reader.read_into(out)
    assert_whole_and_in_order(out)
    assert int(out["seq"][0]) == RING + 2 - RING // 2
