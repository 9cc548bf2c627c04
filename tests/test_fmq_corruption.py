"""Hostile input: scribbled counters and malformed descriptors get clear errors,
never an out-of-bounds access or a hang."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import posix_ipc
import pytest

from nnburst import fmq, shm
from nnburst._bindings import READ_OFFSET, WRITE_OFFSET
from nnburst.errors import BadDataError, CorruptQueueError
from nnburst.fmq import Descriptor, Flavor, MessageQueue
from nnburst.hal.packets import REQUEST_DATUM

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
    ids=[
        "misaligned-write",
        "misaligned-read",
        "write-behind-read",
        "more-than-a-ring",
        "huge-read",
    ],
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
    forged = Descriptor(
        desc.name,
        desc.flavor,
        np.dtype(np.int64),
        desc.count // 2,
        desc.size,
        True,
        desc.creator_pid,
    )
    with pytest.raises(BadDataError, match="does not hold the queue"):
        MessageQueue.attach(forged.to_bytes())


def test_descriptor_naming_a_missing_segment_is_rejected(queue):
    desc = queue.descriptor
    forged = Descriptor(
        shm.unique_name(), desc.flavor, desc.dtype, desc.count, desc.size, True, desc.creator_pid
    )
    with pytest.raises(BadDataError, match="does not exist"):
        MessageQueue.attach(forged.to_bytes())


def test_descriptor_naming_a_foreign_segment_is_rejected(queue):
    desc = queue.descriptor
    forged = Descriptor(
        "/someone-else", desc.flavor, desc.dtype, desc.count, desc.size, True, desc.creator_pid
    )
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
    forged = Descriptor(
        desc.name,
        Flavor.UNSYNCHRONIZED_WRITE,
        desc.dtype,
        desc.count,
        desc.size,
        True,
        desc.creator_pid,
    )
    with pytest.raises(BadDataError):
        MessageQueue.attach(forged.to_bytes())


@pytest.mark.parametrize(
    ("offset", "layout", "value"),
    [
        (0, "<I", 0x12345678),  # magic
        (4, "<I", 2),  # version
        (8, "<I", 8),  # quantum
        (12, "<I", int(Flavor.UNSYNCHRONIZED_WRITE)),  # flavor
        (16, "<Q", COUNT - 1),  # count (ring_bytes left consistent with the descriptor)
        (24, "<Q", 4 * (COUNT - 1)),  # ring_bytes
        (32, "<I", 0),  # flags: the event flag vanished
    ],
    ids=["magic", "version", "quantum", "flavor", "count", "ring-bytes", "flags"],
)
def test_every_header_field_is_checked_on_attach(queue, offset, layout, value):
    """A peer that scribbled on one header field cannot get an attacher to
    accept the queue, even when the other fields still agree."""
    struct.pack_into(layout, queue._region.mmap, offset, value)
    with pytest.raises(BadDataError, match="does not hold the queue"):
        MessageQueue.attach(queue.descriptor.to_bytes())


def test_an_unsynchronized_writer_counter_moved_behind_the_reader_is_corrupt():
    """Not an overrun: a write counter below our own read position can only
    be a scribble, and the reader must say so instead of resyncing to it."""
    with MessageQueue(np.int32, COUNT, Flavor.UNSYNCHRONIZED_WRITE) as writer:
        with MessageQueue.attach(writer.descriptor) as reader:
            assert writer.write(np.arange(8, dtype=np.int32))
            assert reader.read(8) is not None  # our private r is now 8 elements in
            struct.pack_into("<Q", writer._region.mmap, WRITE_OFFSET, 4 * 4)
            with pytest.raises(CorruptQueueError):
                reader.read(1)
            with pytest.raises(CorruptQueueError):
                reader.available_to_read()


# -- the element type in a descriptor (the private codec, tested directly) --------------------


@pytest.mark.parametrize(
    "dtype",
    [
        np.dtype("<u4"),
        np.dtype(">f8"),
        np.dtype("S5"),
        np.dtype((np.float32, (3, 2))),
        np.dtype(
            {"names": ["a", "b"], "formats": ["<u2", "<f4"], "offsets": [0, 4], "itemsize": 12}
        ),
        REQUEST_DATUM,  # the burst datum: a union, fields overlap
        np.dtype([("seq", "<u8"), ("pair", [("lo", "<u4"), ("v", ("<i2", (2,)))])]),
    ],
    ids=["scalar", "big-endian", "bytes", "subarray", "padded", "union", "nested"],
)
def test_element_types_cross_a_descriptor_unchanged(dtype):
    back = fmq._dtype_from_json(fmq._dtype_to_json(dtype))
    assert back == dtype and back.itemsize == dtype.itemsize
    assert back.fields == dtype.fields and back.str == dtype.str


def _nested(levels: int) -> bytes:
    obj: object = "<u1"
    for _ in range(levels):
        obj = {"subarray": obj, "shape": [1]}
    return json.dumps(obj).encode()


def test_element_type_nesting_is_bounded():
    assert fmq._dtype_from_json(_nested(8)).itemsize == 1  # the deepest allowed
    with pytest.raises(BadDataError, match="nests too deeply"):
        fmq._dtype_from_json(_nested(9))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'"O"', "element type 'O' cannot cross a process boundary"),
        (b'"<M8[s]"', r"element type '<M8\[s\]' cannot cross"),
        (b"5", "unknown element type description 5"),
        (b'{"names": ["a"], "formats": ["O"], "offsets": [0], "itemsize": 8}', "cannot cross"),
        (b'{"subarray": "O", "shape": [2]}', "cannot cross"),
        (b'{"names": ["a"], "formats": ["<u4"]}', "invalid element type"),
        (b"\xff", "invalid element type"),
    ],
    ids=[
        "object",
        "datetime",
        "number",
        "object-field",
        "object-subarray",
        "missing-keys",
        "not-utf8",
    ],
)
def test_element_types_that_cannot_cross_are_rejected(raw, message):
    with pytest.raises(BadDataError, match=message):
        fmq._dtype_from_json(raw)


def test_mutated_descriptors_are_bad_data_never_another_error():
    """Found by fuzzing (issue 15, item 7): an element type numpy parses as a
    Python literal raised SyntaxError; a huge creator pid broke teardown."""
    import random

    rng = random.Random(1)
    with MessageQueue(np.dtype([("a", "<u4"), ("b", "<f8")]), 16) as queue:
        raw = queue.descriptor.to_bytes()
        for _ in range(3000):
            mutated = bytearray(raw)
            for _ in range(rng.randint(1, 4)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            try:
                Descriptor.from_bytes(bytes(mutated))
            except BadDataError:
                pass
        literal = raw.replace(b'"<u4"', b'"004"')  # numpy would parse '004' as a literal
        with pytest.raises(BadDataError, match="element type"):
            Descriptor.from_bytes(literal)


@pytest.mark.parametrize("pid", [0, 2**31, 2**32 - 1])
def test_impossible_creator_pids_are_refused_and_never_signalled(pid):
    assert not shm.pid_alive(pid) and not shm.pid_alive(-1)
    with MessageQueue(np.uint8, 16) as queue:
        raw = queue.descriptor.to_bytes()
    header = fmq._DESCRIPTOR
    fields = list(header.unpack_from(raw))
    fields[8] = pid  # creator pid
    with pytest.raises(BadDataError, match="not a process id"):
        Descriptor.from_bytes(header.pack(*fields) + raw[header.size :])
