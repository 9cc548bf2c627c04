"""Queues shared with a peer in another thread and in another process
(libfmq's msgq_test_client cases), plus teardown and segment lifetime."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from nnburst import deadlines, shm
from nnburst.errors import BadDataError, BrokenResourceError, ClosedResourceError
from nnburst.fmq import Flavor, MessageQueue

from .blocking import wait_until, wait_until_in_futex
from .fmq_peer import SECOND, sequence
from .peers import MODES, Peer

SYNC_COUNT = 1020  # (4096 - 16) / 4 int32s, as libfmq's client queue


@pytest.fixture
def sync_queue():
    with MessageQueue(np.int32, SYNC_COUNT) as q:
        yield q


def hexdesc(q: MessageQueue) -> str:
    return q.descriptor.to_bytes().hex()


@pytest.mark.parametrize("mode", MODES)
def test_blocking_read_write_1(mode, sync_queue):
    peer = Peer(mode, "read_blocking_batches", hexdesc(sync_queue), 1, 64)
    assert sync_queue.write_blocking(sequence(0, 64), timeout_ns=5 * SECOND)
    peer.join()
    # The peer drained the 64: a full-capacity write now fits.
    assert sync_queue.write_blocking(sequence(0, SYNC_COUNT), timeout_ns=5 * SECOND)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("reads", "read_size", "writes", "write_size"),
    [(1020, 64, 1020, 64), (510, 128, 1020, 64), (2048, 32, 1024, 64)],
    ids=["repeat1", "repeat2", "repeat3"],
)
def test_blocking_read_write_repeat(mode, sync_queue, reads, read_size, writes, write_size):
    peer = Peer(mode, "read_blocking_batches", hexdesc(sync_queue), reads, read_size)
    for i in range(writes):
        assert sync_queue.write_blocking(
            sequence(i * write_size, write_size), timeout_ns=5 * SECOND
        )
    peer.join()
    assert sync_queue.write_blocking(sequence(0, SYNC_COUNT), timeout_ns=5 * SECOND)


@pytest.mark.parametrize("mode", MODES)
def test_peer_writes_blocking_we_read_with_spin(mode, sync_queue):
    peer = Peer(mode, "write_blocking_batches", hexdesc(sync_queue), 200, 50)
    for i in range(200):
        got = sync_queue.read_blocking(50, timeout_ns=5 * SECOND, spin_ns=20_000)
        assert np.array_equal(got, sequence(i * 50, 50))
    peer.join()


@pytest.mark.parametrize("mode", MODES)
def test_small_input_reader(mode, sync_queue):
    peer = Peer(mode, "write_sequence", hexdesc(sync_queue), 16)
    peer.join()
    assert np.array_equal(sync_queue.read(16), sequence(0, 16))


@pytest.mark.parametrize("mode", MODES)
def test_small_input_writer(mode, sync_queue):
    before = sync_queue.available_to_write()
    assert sync_queue.write(sequence(0, 16))
    Peer(mode, "read_sequence", hexdesc(sync_queue), 16).join()
    assert sync_queue.available_to_write() == before


@pytest.mark.parametrize("mode", MODES)
def test_peer_read_when_empty_fails(mode, sync_queue):
    Peer(mode, "read_sequence", hexdesc(sync_queue), 2, 0).join()


@pytest.mark.parametrize("mode", MODES)
def test_peer_write_when_full_fails(mode, sync_queue):
    assert sync_queue.write(sequence(0, SYNC_COUNT))
    assert sync_queue.available_to_write() == 0
    Peer(mode, "write_sequence", hexdesc(sync_queue), 1, 0).join()
    assert np.array_equal(sync_queue.read(SYNC_COUNT), sequence(0, SYNC_COUNT))


@pytest.mark.parametrize("mode", MODES)
def test_peer_reads_a_full_queue(mode, sync_queue):
    assert sync_queue.write(sequence(0, SYNC_COUNT))
    Peer(mode, "read_sequence", hexdesc(sync_queue), SYNC_COUNT).join()


@pytest.mark.parametrize("mode", MODES)
def test_peer_write_larger_than_capacity_fails(mode, sync_queue):
    Peer(mode, "write_sequence", hexdesc(sync_queue), 2048, 0).join()
    assert sync_queue.available_to_read() == 0
    assert sync_queue.read(1) is None


@pytest.mark.parametrize("mode", MODES)
def test_multiple_reads_by_the_peer(mode, sync_queue):
    assert sync_queue.write(sequence(0, 500))
    Peer(mode, "read_in_chunks", hexdesc(sync_queue), 5, 100).join()


@pytest.mark.parametrize("mode", MODES)
def test_wrap_around_across_the_boundary(mode, sync_queue):
    peer = Peer(mode, "read_blocking_sizes", hexdesc(sync_queue), "510,1020")
    assert sync_queue.write_blocking(sequence(0, 510), timeout_ns=5 * SECOND)
    # Waits for the peer to drain the 510, then wraps round the ring end.
    assert sync_queue.write_blocking(sequence(510, SYNC_COUNT), timeout_ns=5 * SECOND)
    peer.join()


@pytest.mark.parametrize("mode", MODES)
def test_a_second_attach_to_a_synchronized_queue_fails_cleanly(mode, sync_queue):
    """One peer per synchronized queue: its name is gone once attached."""
    Peer(mode, "read_sequence", hexdesc(sync_queue), 2, 0).join()
    with pytest.raises(BadDataError, match="does not exist"):
        MessageQueue.attach(sync_queue.descriptor)


@pytest.mark.parametrize("mode", MODES)
def test_unsync_readers_are_independent(mode):
    with MessageQueue(np.int32, 1024, Flavor.UNSYNCHRONIZED_WRITE) as writer:
        with MessageQueue.attach(writer.descriptor) as own_reader:
            assert writer.write(sequence(0, 16))
            Peer(mode, "read_sequence", hexdesc(writer), 16).join()
            assert np.array_equal(own_reader.read(16), sequence(0, 16))


@pytest.mark.parametrize("mode", MODES)
def test_unsync_overflow_is_seen_by_every_reader(mode):
    with MessageQueue(np.int32, 1024, Flavor.UNSYNCHRONIZED_WRITE) as writer:
        with MessageQueue.attach(writer.descriptor) as own_reader:
            assert writer.write(sequence(0, 1024))
            assert writer.write(sequence(1024, 1))  # overruns every reader
            Peer(mode, "unsync_reader_after_overflow", hexdesc(writer)).join()
            assert own_reader.read(1024) is None
            assert writer.write(sequence(0, 16))
            assert own_reader.read(16) is not None


@pytest.mark.parametrize("mode", MODES)
def test_closing_our_side_releases_a_blocked_peer(mode, sync_queue, tmp_path):
    ready = tmp_path / "ready"
    peer = Peer(mode, "block_until_broken", hexdesc(sync_queue), ready)
    wait_until(ready.exists, "the peer attached")
    wait_until_in_futex(peer.thread if peer.process is None else peer.pid)
    sync_queue.close()
    peer.join(timeout=5)


def test_peer_closing_releases_us_with_broken_resource():
    creator = Peer(
        "process", "create_and_sleep", int(Flavor.SYNCHRONIZED_READ_WRITE), capture_stdout=True
    )
    desc = bytes.fromhex(creator.readline())
    with MessageQueue.attach(desc) as q:
        os.kill(creator.pid, signal.SIGKILL)
        creator.process.communicate()
        # A dead peer is not detected by the queue itself (no liveness in
        # FMQ); whoever watches the peer tears the queue down, which wakes us.
        watchdog = __import__("threading").Timer(0.05, q.tear_down)
        watchdog.start()
        with pytest.raises(BrokenResourceError):
            q.read_blocking(1, timeout_ns=5 * SECOND)
        watchdog.join()


def segment_exists(desc: bytes) -> bool:
    from nnburst.fmq import Descriptor

    return (shm.SHM_DIR / Descriptor.from_bytes(desc).name.lstrip("/")).exists()


def test_sync_segment_is_unlinked_once_attached_even_if_the_creator_is_killed():
    creator = Peer(
        "process", "create_and_sleep", int(Flavor.SYNCHRONIZED_READ_WRITE), capture_stdout=True
    )
    desc = bytes.fromhex(creator.readline())
    assert segment_exists(desc)
    q = MessageQueue.attach(desc)
    assert not segment_exists(desc)
    creator.kill()
    q.close()


def test_unsync_segment_is_unlinked_by_the_last_attacher_after_the_creator_died():
    creator = Peer(
        "process", "create_and_sleep", int(Flavor.UNSYNCHRONIZED_WRITE), capture_stdout=True
    )
    desc = bytes.fromhex(creator.readline())
    q = MessageQueue.attach(desc)
    assert segment_exists(desc)  # more readers may still attach
    creator.kill()
    q.close()
    assert not segment_exists(desc)


def test_segment_of_a_creator_killed_before_anyone_attached_is_swept():
    creator = Peer(
        "process", "create_and_sleep", int(Flavor.SYNCHRONIZED_READ_WRITE), capture_stdout=True
    )
    desc = bytes.fromhex(creator.readline())
    creator.kill()
    assert segment_exists(desc)
    shm.sweep_stale_segments()
    assert not segment_exists(desc)


@pytest.mark.parametrize("mode", MODES)
def test_request_reply_round_trips_in_one_call(mode):
    with MessageQueue(np.int32, 64) as requests, MessageQueue(np.int32, 64) as replies:
        peer = Peer(
            mode,
            "echo_plus_one",
            requests.descriptor.to_bytes().hex(),
            replies.descriptor.to_bytes().hex(),
            50,
        )
        message = np.zeros(16, np.int32)
        reply = np.zeros(64, np.int32)
        call = requests.round_trip(replies, message, reply, spin_ns=10_000)
        for i in range(50):
            message[:] = sequence(i, 16)
            n = call(1 + i % 16, deadlines.after(5 * SECOND))
            assert n == 1 + i % 16
            assert np.array_equal(reply[:n], sequence(i, n) + 1)
        peer.join()


def test_round_trip_reports_a_reply_timeout_and_a_closed_queue():
    with MessageQueue(np.int32, 8) as requests, MessageQueue(np.int32, 8) as replies:
        call = requests.round_trip(replies, np.zeros(4, np.int32), np.zeros(8, np.int32))
        assert call(4, deadlines.after(2_000_000)) == 0  # sent, no reply
        assert call(4, deadlines.after(2_000_000)) == 0
        assert call(4, deadlines.after(2_000_000)) == -1  # the request queue is full now
        with pytest.raises(BadDataError):
            call(5)
    with pytest.raises(ClosedResourceError):
        call(1)
