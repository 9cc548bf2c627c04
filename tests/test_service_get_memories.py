"""The app side of GET_MEMORIES (``RemoteBurstClient``), over a real socket.

The service's memory callback (``RemoteBurstCallback``) asks the app's
client through a socketpair, in this process: what the app answers (the
regions, their order, refusals, malformed requests) is what the service maps.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from nnburst.codes import ErrorStatus, ResultCode
from nnburst.errors import NNError
from nnburst.hal.memory import PROT_READ, PROT_WRITE, MappedMemory
from nnburst.service import burst as service_burst
from nnburst.service.wire import MAX_FDS, Connection, Frame

BURST_ID = 7


@dataclass
class QueueStub:
    """configure() only needs a descriptor's bytes and its fd."""

    fd: int

    def to_bytes(self) -> bytes:
        return b"queue"


class AppSlots:
    """The app's burst callback: hands out the memories it was given."""

    def __init__(self, memories, status=ErrorStatus.NONE) -> None:
        self.memories = memories
        self.status = status
        self.asked: list[tuple[int, ...]] = []

    def get_memories(self, slots):
        self.asked.append(tuple(slots))
        return self.status, [self.memories[s] for s in slots if s in self.memories]


@dataclass
class Pair:
    client: service_burst.RemoteBurstClient
    service: Connection

    def callback(self, burst_id: int = BURST_ID) -> service_burst.RemoteBurstCallback:
        return service_burst.RemoteBurstCallback(self.service, burst_id)


def configured(service_side: socket.socket) -> Connection:
    def configure(frame: Frame):
        frame.close_fds()
        return struct.pack("<iI", ErrorStatus.NONE, BURST_ID), ()

    return Connection(service_side, {service_burst.Kind.CONFIGURE_BURST: configure})


@pytest.fixture
def pair() -> Iterator[Pair]:
    app_side, service_side = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    client = service_burst.RemoteBurstClient(app_side)
    service = configured(service_side)
    try:
        yield Pair(client, service)
    finally:
        client.close()
        service.close()


def configure(pair: Pair, slots: AppSlots) -> None:
    queues = [MappedMemory.create_shared(64) for _ in range(2)]
    try:
        status, context = pair.client.configure(
            3, slots, QueueStub(queues[0].fd), QueueStub(queues[1].fd)
        )
    finally:
        for q in queues:
            q.close()
    assert status == ErrorStatus.NONE and context is not None


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_the_service_maps_what_the_app_hands_out_in_slot_order(pair):
    whole = MappedMemory.create_shared(8192)
    part = MappedMemory.from_fd(16, PROT_READ | PROT_WRITE, whole.fd, 4096)
    small = MappedMemory.create_shared(64)
    slots = AppSlots({1: small, 2: part})
    configure(pair, slots)
    before = open_fds()
    status, mapped = pair.callback().get_memories([2, 1])
    try:
        assert status == ErrorStatus.NONE
        assert slots.asked == [(2, 1)]
        assert [(m.offset, m.size) for m in mapped] == [(4096, 16), (0, 64)]
        np.frombuffer(part.buffer, np.uint8)[:] = 9
        np.frombuffer(small.buffer, np.uint8)[:] = 5
        assert bytes(mapped[0].buffer) == b"\x09" * 16
        assert bytes(mapped[1].buffer) == b"\x05" * 64
    finally:
        for m in mapped:
            m.close()
        for m in (part, whole, small):
            m.close()
    assert open_fds() <= before


def test_slots_are_fetched_in_batches_of_at_most_max_fds(pair):
    memory = MappedMemory.create_shared(64)
    slots = AppSlots({s: memory for s in range(MAX_FDS + 2)})
    configure(pair, slots)
    status, mapped = pair.callback().get_memories(list(range(MAX_FDS + 2)))
    try:
        assert status == ErrorStatus.NONE
        assert slots.asked == [tuple(range(MAX_FDS)), (MAX_FDS, MAX_FDS + 1)]
        assert len(mapped) == MAX_FDS + 2
    finally:
        for m in mapped:
            m.close()
        memory.close()


def refused(pair: Pair, burst_id: int = BURST_ID, slots=(1,)) -> None:
    before = open_fds()
    with pytest.raises(NNError, match=rf"the app refused slots \[{', '.join(map(str, slots))}\]"):
        pair.callback(burst_id).get_memories(list(slots))
    assert open_fds() == before


def test_an_unknown_burst_is_refused(pair):
    configure(pair, AppSlots({}))
    refused(pair, burst_id=BURST_ID + 1)


def test_a_forgotten_burst_is_refused(pair):
    memory = MappedMemory.create_shared(64)
    configure(pair, AppSlots({1: memory}))
    pair.client.forget(BURST_ID)
    refused(pair)
    memory.close()


def test_the_app_callback_refusing_is_passed_on(pair):
    memory = MappedMemory.create_shared(64)
    configure(pair, AppSlots({1: memory}, status=ErrorStatus.GENERAL_FAILURE))
    refused(pair)
    memory.close()


def test_memories_without_an_fd_cannot_cross(pair):
    """A numpy buffer or a closed memory has no fd to send: refused, not sent."""
    closed = MappedMemory.create_shared(64)
    closed.close()
    live = MappedMemory.create_shared(64)
    configure(pair, AppSlots({1: live, 2: np.zeros(4), 3: closed}))
    refused(pair, slots=(1, 2))
    refused(pair, slots=(3, 1))
    live.close()


def request(pair: Pair, payload: bytes, fds=()) -> Frame:
    return pair.service.call(service_burst.Kind.GET_MEMORIES, payload, fds, timeout=30)


def test_a_request_for_max_fds_slots_reaches_the_app(pair):
    slots = AppSlots({}, status=ErrorStatus.INVALID_ARGUMENT)
    configure(pair, slots)
    payload = struct.pack("<II", BURST_ID, MAX_FDS) + struct.pack(f"<{MAX_FDS}i", *range(MAX_FDS))
    reply = request(pair, payload)
    assert struct.unpack("<iI", reply.payload) == (ErrorStatus.INVALID_ARGUMENT, 0)
    assert slots.asked == [tuple(range(MAX_FDS))]


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack("<II", BURST_ID, MAX_FDS + 1) + bytes(4 * (MAX_FDS + 1)),  # too many slots
        struct.pack("<II", BURST_ID, 2) + bytes(4),  # one slot short
        struct.pack("<II", BURST_ID, 1) + bytes(5),  # a stray byte
    ],
    ids=["too-many", "short", "trailing"],
)
def test_a_malformed_request_is_a_bad_data_error(pair, payload):
    slots = AppSlots({})
    configure(pair, slots)
    with pytest.raises(NNError, match="malformed GET_MEMORIES payload") as err:
        request(pair, payload)
    assert err.value.code == ResultCode.BAD_DATA
    assert slots.asked == []


def test_fds_sent_with_a_request_are_closed_by_the_app(pair):
    configure(pair, AppSlots({}))
    sent = MappedMemory.create_shared(64)
    before = open_fds()
    reply = request(pair, struct.pack("<IIi", BURST_ID + 1, 1, 0), [sent.fd])
    sent.close()
    assert struct.unpack("<iI", reply.payload) == (ErrorStatus.INVALID_ARGUMENT, 0)
    # The app received a duplicate of the fd and must not keep it open.
    assert open_fds() <= before
