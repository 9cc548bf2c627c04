"""Hostile input: scribbled counters and malformed descriptors get clear errors,
never an out-of-bounds access or a hang."""

from __future__ import annotations

import os
import struct

import numpy as np
import posix_ipc
import pytest

from nnburst import shm
from nnburst._bindings import READ_OFFSET, WRITE_OFFSET
from nnburst.errors import BadDataError, CorruptQueueError
from nnburst.fmq import Descriptor, Flavor, MessageQueue

COUNT = 64


@pytest.fixture
def queue():
    with MessageQueue(np.int32, COUNT) as q:
        yield q


def scribble(q: MessageQueue, read: int, write: int) -> None:
    """Overwrite the shared counters, as a hostile peer could."""
    mapping = q._region.mmap
    struct.pack_into("<Q", mapping, READ_OFFSET, read)
    struct.pack_into("<Q", mapping, WRITE_OFFSET, write)


@pytest.mark.parametrize(
    ("read", "write"),
    [(0, 3), (2, 8), (8, 4), (0, 4 * COUNT + 4), (2**63, 0)],
    ids=["misaligned-write", "misaligned-read", "write-behind-read", "more-than-a-ring", "huge-read"],
)
def test_corrupt_counters_are_reported_not_used(queue, read, write):
    scribble(queue, read, write)
    with pytest.raises(CorruptQueueError):
        queue.read(1)
    with pytest.raises(CorruptQueueError):
        queue.available_to_read()
    with pytest.raises(CorruptQueueError):
        queue.available_to_write()
    with pytest.raises(CorruptQueueError):
        queue.begin_read(1)
    with pytest.raises(CorruptQueueError):
        queue.read_blocking(1, timeout_ns=10_000_000)


@pytest.mark.parametrize(
    ("read", "write"),
    [(0, 3), (0, 4 * COUNT + 4), (4, 2)],
    ids=["misaligned-write", "more-than-a-ring", "write-behind-read"],
)
def test_corrupt_writer_counter_is_reported_to_the_writer(queue, read, write):
    scribble(queue, read, write)
    with pytest.raises(CorruptQueueError):
        queue.write(np.zeros(1, np.int32))
    with pytest.raises(CorruptQueueError):
        queue.write_blocking(np.zeros(1, np.int32), timeout_ns=10_000_000)


def test_a_scribbled_read_counter_never_lets_a_write_out_of_bounds(queue):
    """The writer trusts its cached copy of r while it shows room (r only
    goes up); a scribbled r is caught the moment the writer re-reads it."""
    scribble(queue, 4 * 3 + 2, 0)  # misaligned r, ahead of w
    for _ in range(COUNT + 1):
        try:
            queue.write(np.zeros(1, np.int32))
        except CorruptQueueError:
            return
    pytest.fail("a full ring of writes never re-read the corrupt read counter")


def test_large_consistent_counters_keep_working(queue):
    """Counters only go up; a peer may start them anywhere consistent.  (The
    2**64 wrap itself is reported as corruption: ~584 years at 1 GB/s.)"""
    start = 2**63 + 4 * 5
    scribble(queue, start, start)
    for i in range(40):
        assert queue.write(np.arange(i, i + 7, dtype=np.int32))
        assert np.array_equal(queue.read(7), np.arange(i, i + 7))


def test_a_scribbled_writer_counter_seen_by_the_peer(queue):
    """libfmq MisalignedWriteCounter: the reader corrupts w; the writer's next write fails."""
    with MessageQueue.attach(queue.descriptor) as reader:
        assert queue.write(np.zeros(1, np.int32))
        assert reader.begin_read(1) is not None
        scribble(reader, 0, 4 * COUNT - 1)
        assert reader.commit_read(1) is not None
        with pytest.raises(CorruptQueueError):
            queue.write(np.zeros(1, np.int32))


def descriptor_bytes(q: MessageQueue) -> bytearray:
    return bytearray(q.descriptor.to_bytes())


@pytest.mark.parametrize(
    ("offset", "value", "message"),
    [
        (0, b"XXXX", "magic"),
        (4, struct.pack("<H", 9), "version"),
        (6, b"\x07", "flavor"),
        (7, b"\x02", "flags"),
        (8, struct.pack("<I", 8), "size"),
        (16, struct.pack("<Q", COUNT + 1), "size"),
        (24, struct.pack("<Q", 12345), "size"),
    ],
)
def test_malformed_descriptor_fields_are_rejected(queue, offset, value, message):
    raw = descriptor_bytes(queue)
    raw[offset : offset + len(value)] = value
    with pytest.raises(BadDataError, match=message):
        MessageQueue.attach(bytes(raw))


@pytest.mark.parametrize("cut", [0, 10, 39, 41, -1])
def test_truncated_descriptors_are_rejected(queue, cut):
    raw = descriptor_bytes(queue)
    with pytest.raises(BadDataError):
        Descriptor.from_bytes(bytes(raw[:cut]))


def test_descriptor_with_mismatched_element_type_is_rejected(queue):
    desc = queue.descriptor
    forged = Descriptor(desc.name, desc.flavor, np.dtype(np.int64), desc.count // 2, desc.size, True, desc.creator_pid)
    with pytest.raises(BadDataError, match="does not hold the queue"):
        MessageQueue.attach(forged.to_bytes())


def test_descriptor_naming_a_missing_segment_is_rejected(queue):
    desc = queue.descriptor
    forged = Descriptor(shm.unique_name(), desc.flavor, desc.dtype, desc.count, desc.size, True, desc.creator_pid)
    with pytest.raises(BadDataError, match="does not exist"):
        MessageQueue.attach(forged.to_bytes())


def test_descriptor_naming_a_foreign_segment_is_rejected(queue):
    desc = queue.descriptor
    forged = Descriptor("/someone-else", desc.flavor, desc.dtype, desc.count, desc.size, True, desc.creator_pid)
    with pytest.raises(BadDataError, match="not an nnburst segment"):
        MessageQueue.attach(forged.to_bytes())


def test_segment_smaller_than_the_descriptor_claims_is_rejected(queue):
    name = shm.unique_name()
    small = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, size=64)
    small.close_fd()
    try:
        desc = queue.descriptor
        forged = Descriptor(name, desc.flavor, desc.dtype, desc.count, desc.size, True, os.getpid())
        with pytest.raises(BadDataError, match="holds 64 bytes"):
            MessageQueue.attach(forged.to_bytes())
    finally:
        posix_ipc.unlink_shared_memory(name)


def test_header_that_disagrees_with_the_descriptor_is_rejected(queue):
    desc = queue.descriptor
    forged = Descriptor(desc.name, Flavor.UNSYNCHRONIZED_WRITE, desc.dtype, desc.count, desc.size, True, desc.creator_pid)
    with pytest.raises(BadDataError):
        MessageQueue.attach(forged.to_bytes())
