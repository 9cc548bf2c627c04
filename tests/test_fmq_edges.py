"""FMQ behaviour the other FMQ tests leave open: the exact complaints of
``Descriptor.from_bytes`` and the round-trip set-up, the documented defaults
of the blocking calls (0 = wait forever), and signals during a round trip.

Blocking is observed, never timed: a thread's futex sleep is read from
/proc (tests/blocking.py), with a hang guard only.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import signal
import struct
import threading
import time

import numpy as np
import pytest

from nnburst import deadlines
from nnburst._bindings import READ_OFFSET, WRITE_OFFSET
from nnburst.errors import BadDataError, BadStateError, ClosedResourceError, CorruptQueueError
from nnburst.fmq import Descriptor, Flavor, MessageQueue

from .blocking import HANG_GUARD_SECONDS, futex_word

GUARD_NS = int(HANG_GUARD_SECONDS * 1e9)  # a hang guard, never reached
HEADER = struct.Struct("<4sHBBIIQQIHH")


def descriptor_bytes(dtype=np.int32, count: int = 8, event_flag: bool = True) -> bytes:
    with MessageQueue(dtype, count, event_flag=event_flag) as q:
        return q.descriptor.to_bytes()


def with_fields(data: bytes, **changes) -> bytes:
    names = "magic version flavor flags quantum reserved count size pid name_len dtype_len"
    fields = dict(zip(names.split(), HEADER.unpack_from(data), strict=True))
    fields.update(changes)
    return HEADER.pack(*fields.values()) + data[HEADER.size :]


# -- Descriptor.from_bytes: each complaint names the field and its value ----------


def test_a_truncated_descriptor_says_how_long_the_header_is():
    with pytest.raises(
        BadDataError, match=rf"descriptor truncated: 10 bytes, header needs {HEADER.size}$"
    ):
        Descriptor.from_bytes(descriptor_bytes()[:10])
    with pytest.raises(BadDataError, match="descriptor truncated"):
        Descriptor.from_bytes(descriptor_bytes()[: HEADER.size - 1])


def test_a_descriptor_of_exactly_the_header_is_judged_by_its_lengths():
    data = with_fields(descriptor_bytes()[: HEADER.size], name_len=0, dtype_len=0)
    with pytest.raises(BadDataError, match="quantum 0|dtype|element type|JSON|not"):
        Descriptor.from_bytes(data)


@pytest.mark.parametrize("extra", [b"", b"x"])
def test_a_descriptor_whose_lengths_disagree_names_both_sizes(extra):
    data = descriptor_bytes()
    name_len, dtype_len = HEADER.unpack_from(data)[9:]
    bad = with_fields(data, dtype_len=dtype_len + 3) + extra
    want = HEADER.size + name_len + dtype_len + 3
    with pytest.raises(
        BadDataError, match=rf"descriptor is {len(bad)} bytes but its fields need {want}$"
    ):
        Descriptor.from_bytes(bad)


def test_a_zero_quantum_or_count_is_named():
    with pytest.raises(
        BadDataError, match=r"descriptor has quantum 4 and count 0; both must be positive$"
    ):
        Descriptor.from_bytes(with_fields(descriptor_bytes(), count=0))
    with pytest.raises(
        BadDataError, match=r"descriptor has quantum 0 and count 8; both must be positive$"
    ):
        Descriptor.from_bytes(with_fields(descriptor_bytes(), quantum=0))


def test_a_one_element_queue_and_a_queue_without_event_flag_describe_themselves():
    one = Descriptor.from_bytes(descriptor_bytes(count=1))
    assert one.count == 1 and one.has_event_flag
    bare = Descriptor.from_bytes(descriptor_bytes(event_flag=False))
    assert not bare.has_event_flag


def test_a_non_ascii_segment_name_is_refused():
    data = bytearray(descriptor_bytes())
    data[HEADER.size + 1] = 0xE9
    with pytest.raises(BadDataError, match=r"descriptor segment name is not ASCII$"):
        Descriptor.from_bytes(bytes(data))


def test_an_element_type_that_disagrees_with_the_quantum_is_named():
    with pytest.raises(BadDataError, match=r"element type is 4 bytes but the quantum is 2$"):
        data = descriptor_bytes(count=8)
        # quantum 2 with count 16 keeps the segment size of 8 int32 elements
        Descriptor.from_bytes(with_fields(data, quantum=2, count=16, size=size_for(2, 16)))


def size_for(quantum: int, count: int) -> int:
    from nnburst._bindings import required_bytes

    return required_bytes(quantum, count)


# -- round trips: what is refused, and why ----------------------------------------


@pytest.fixture
def pair():
    with MessageQueue(np.int32, 8) as requests, MessageQueue(np.int32, 8) as replies:
        yield requests, replies


@pytest.mark.parametrize(
    ("request_array", "reply_array", "name"),
    [
        (np.zeros(4, np.int16), np.zeros(8, np.int32), "request"),
        (np.zeros(4, np.int32), np.zeros(8, np.int64), "reply"),
        (np.zeros(8, np.int32)[::2], np.zeros(8, np.int32), "request"),
        (np.zeros(4, np.int32), np.zeros(16, np.int32)[::2], "reply"),
        ([0, 0, 0, 0], np.zeros(8, np.int32), "request"),
    ],
    ids=["request-dtype", "reply-dtype", "request-strided", "reply-strided", "request-list"],
)
def test_round_trip_buffers_must_be_contiguous_arrays_of_the_queue_type(
    pair, request_array, reply_array, name
):
    requests, replies = pair
    with pytest.raises(BadDataError, match=rf"{name} must be a C-contiguous numpy array of int32$"):
        requests.round_trip(replies, request_array, reply_array)


def test_a_round_trip_reply_must_be_writable(pair):
    requests, replies = pair
    reply = np.zeros(8, np.int32)
    reply.flags.writeable = False
    with pytest.raises(BadDataError, match=r"reply must be writable$"):
        requests.round_trip(replies, np.zeros(4, np.int32), reply)


@pytest.mark.parametrize("n", [-1, 5])
def test_a_round_trip_of_more_than_the_request_names_both_sizes(pair, n):
    requests, replies = pair
    call = requests.round_trip(replies, np.zeros(4, np.int32), np.zeros(8, np.int32))
    with pytest.raises(BadDataError, match=rf"cannot send {n} elements from a 4-element request$"):
        call(n)
    assert requests.available_to_read() == 0


def test_a_round_trip_of_the_whole_request_and_of_nothing_are_sent(pair):
    requests, replies = pair
    request = np.arange(4, dtype=np.int32)
    call = requests.round_trip(replies, request, np.zeros(8, np.int32))
    assert call(4, deadlines.after(1)) == 0  # sent; no reply yet
    assert requests.read(4).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("flavor", ["unsynchronized", "no-event-flag"])
def test_blocking_calls_need_a_synchronized_queue_with_an_event_flag(flavor):
    if flavor == "unsynchronized":
        q = MessageQueue(np.int32, 8, Flavor.UNSYNCHRONIZED_WRITE)
        match = "blocking calls need a synchronized queue$"
    else:
        q = MessageQueue(np.int32, 8, event_flag=False)
        match = "blocking calls need a queue created with an event flag$"
    with q:
        calls = [
            lambda: q.write_blocking(np.zeros(1, np.int32), timeout_ns=1),
            lambda: q.read_blocking(1, timeout_ns=1),
            lambda: q.read_available_blocking(np.zeros(2, np.int32), timeout_ns=1),
            lambda: q.write_until(np.zeros(1, np.int32), None),
            lambda: q.read_until(1, None),
            lambda: q.read_available_until(np.zeros(2, np.int32), None),
        ]
        for call in calls:
            for _ in range(2):  # the second call must not skip the check
                with pytest.raises(BadStateError, match=match):
                    call()


# -- the defaults: timeout_ns=0 waits for as long as it takes ---------------------


def wait_in_futex(thread, still_inside) -> bool:
    """True once ``thread`` sleeps in futex(); False as soon as
    ``still_inside()`` says the call it was to block in has returned (a
    broken queue must fail the test at once, not after the hang guard)."""
    deadline = time.monotonic() + HANG_GUARD_SECONDS
    while futex_word(thread) is None:
        if not still_inside():
            return False
        assert time.monotonic() < deadline, "the call never blocked"
        time.sleep(0.001)
    return True


class Blocked:
    """Runs ``call`` in a thread, returns once it sleeps in the kernel."""

    def __init__(self, call) -> None:
        self.result = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(call,))
        self.thread.start()
        wait_in_futex(self.thread, self.thread.is_alive)

    def _run(self, call) -> None:
        try:
            self.result = call()
        except BaseException as exc:  # reported by join()
            self.error = exc

    def join(self):
        self.thread.join(HANG_GUARD_SECONDS)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error
        return self.result


def test_write_blocking_by_default_waits_for_room():
    with MessageQueue(np.int32, 4) as q:
        assert q.write(np.arange(4, dtype=np.int32))
        blocked = Blocked(lambda: q.write_blocking(np.array([7, 8], np.int32)))
        assert q.read_blocking(2, timeout_ns=GUARD_NS).tolist() == [0, 1]  # wakes the writer
        assert blocked.join() is True
        assert q.read(4).tolist() == [2, 3, 7, 8]


def test_read_blocking_by_default_waits_for_the_elements():
    with MessageQueue(np.int32, 4) as q:
        out = np.zeros(3, np.int32)
        blocked = Blocked(lambda: q.read_blocking(3, out=out))
        assert q.write_blocking(np.array([4, 5, 6], np.int32), timeout_ns=GUARD_NS)
        assert blocked.join() is out
        assert out.tolist() == [4, 5, 6]


def test_read_available_blocking_by_default_waits_then_reads_what_is_there():
    with MessageQueue(np.int32, 8) as q:
        out = np.zeros(8, np.int32)
        blocked = Blocked(lambda: q.read_available_blocking(out))
        assert q.write_blocking(np.array([1, 2, 3], np.int32), timeout_ns=GUARD_NS)
        assert blocked.join() == 3
        assert out[:3].tolist() == [1, 2, 3]
        # A different out array next time is used, not the cached one.
        other = np.zeros(2, np.int32)
        assert q.write(np.array([9], np.int32))
        assert q.read_available_blocking(other) == 1
        assert other.tolist() == [9, 0]


def test_read_blocking_into_a_new_out_array_fills_that_array():
    with MessageQueue(np.int32, 8) as q:
        first, second = np.zeros(2, np.int32), np.zeros(2, np.int32)
        assert q.write(np.array([1, 2, 3, 4], np.int32))
        assert q.read_blocking(2, out=first) is first
        assert q.read_blocking(2, out=second) is second
        assert first.tolist() == [1, 2] and second.tolist() == [3, 4]
        with pytest.raises(BadDataError, match=r"out holds 2 elements, not 3$"):
            q.read_blocking(3, out=second)


def test_a_round_trip_by_default_waits_for_the_reply(pair):
    requests, replies = pair
    reply = np.zeros(8, np.int32)
    call = requests.round_trip(replies, np.arange(4, dtype=np.int32), reply)
    blocked = Blocked(lambda: call(4))
    assert requests.read(4).tolist() == [0, 1, 2, 3]
    assert replies.write_blocking(np.array([5, 6], np.int32), timeout_ns=GUARD_NS)
    assert blocked.join() == 2
    assert reply[:2].tolist() == [5, 6]


def test_a_round_trip_on_a_closed_reply_queue_says_round_trip(pair):
    requests, replies = pair
    call = requests.round_trip(replies, np.zeros(4, np.int32), np.zeros(8, np.int32))
    blocked = Blocked(lambda: call(4))
    replies.close()
    with pytest.raises(ClosedResourceError, match="round trip: "):
        blocked.join()


# -- signals: a Python handler runs and the call goes on ---------------------------


def interrupt_main_while_blocked(then, times: int = 2):
    """Signal the main thread each time it sleeps in the kernel, ``times``
    times, then run ``then`` (which unblocks it)."""
    main = threading.main_thread()
    handled = []
    ready = threading.Event()
    returned = threading.Event()  # set by finish(): the main thread's call is over

    def handler(*_):
        handled.append(1)
        ready.set()

    def run():
        def inside() -> bool:
            return not returned.is_set()

        for _ in range(times):
            ready.clear()
            if not wait_in_futex(main, inside):
                return
            signal.pthread_kill(main.ident, signal.SIGUSR1)
            while not ready.wait(0.01):
                if not inside():
                    return
        if wait_in_futex(main, inside):
            then()

    previous = signal.signal(signal.SIGUSR1, handler)
    thread = threading.Thread(target=run)
    thread.returned = returned
    thread.start()
    return thread, handled, previous


def finish(thread, previous) -> None:
    thread.returned.set()
    thread.join(HANG_GUARD_SECONDS)
    signal.signal(signal.SIGUSR1, previous)
    assert not thread.is_alive()


def test_a_signal_while_a_round_trip_waits_for_the_reply_does_not_end_it(pair):
    requests, replies = pair
    reply = np.zeros(8, np.int32)
    call = requests.round_trip(replies, np.arange(4, dtype=np.int32), reply)
    thread, handled, previous = interrupt_main_while_blocked(
        lambda: replies.write_blocking(np.array([3, 2, 1], np.int32), timeout_ns=GUARD_NS)
    )
    try:
        assert call(4) == 3
    finally:
        finish(thread, previous)
    assert len(handled) == 2
    assert reply[:3].tolist() == [3, 2, 1]
    assert requests.read(4).tolist() == [0, 1, 2, 3]


def test_a_signal_while_a_round_trip_waits_for_room_retries_the_send(pair):
    requests, replies = pair
    assert requests.write(np.arange(8, dtype=np.int32))  # full
    reply = np.zeros(8, np.int32)
    call = requests.round_trip(replies, np.array([40, 41], np.int32), reply)
    received = []

    def make_room_then_answer():
        received.append(requests.read_blocking(8, timeout_ns=GUARD_NS).tolist())
        # The request goes out now; wait for it, then answer.
        received.append(requests.read_blocking(2, timeout_ns=GUARD_NS).tolist())
        assert replies.write_blocking(np.array([9], np.int32), timeout_ns=GUARD_NS)

    thread, handled, previous = interrupt_main_while_blocked(make_room_then_answer)
    try:
        assert call(2, spin_ns=0) == 1
    finally:
        finish(thread, previous)
    assert len(handled) == 2
    assert received == [list(range(8)), [40, 41]]
    assert reply[0] == 9


def test_a_signal_during_a_round_trip_with_a_timeout_keeps_the_deadline(pair):
    requests, replies = pair
    reply = np.zeros(8, np.int32)
    call = requests.round_trip(replies, np.arange(4, dtype=np.int32), reply)
    thread, handled, previous = interrupt_main_while_blocked(
        lambda: replies.write_blocking(np.array([7], np.int32), timeout_ns=GUARD_NS)
    )
    try:
        assert call(4, deadlines.after(GUARD_NS)) == 1
    finally:
        finish(thread, previous)
    assert len(handled) == 2 and reply[0] == 7


# -- zero-copy transactions: grants, copies across the wrap, their complaints ----


def wrapped_grant(queue: MessageQueue, n: int) -> None:
    """Move both counters to 5 of 8 slots, so the next grant of n > 3 wraps."""
    assert queue.write(np.zeros(5, queue.dtype)) and queue.read(5) is not None


def test_a_wrapping_transaction_copies_in_and_out_from_any_start():
    with MessageQueue(np.int16, 8) as q:
        wrapped_grant(q, 6)
        tx = q.begin_write(6)
        assert tx is not None and len(tx) == 6
        assert [len(r) for r in tx.regions] == [3, 3]
        tx.copy_to(np.array([[10, 11], [12, 13]], np.int16), start=1)  # 2-D: flattened
        tx.copy_to(np.array([9], np.int16))
        tx.copy_to(np.array([14], np.int16), start=5)
        assert q.commit_write(6)
        rx = q.begin_read(6)
        assert rx is not None and len(rx) == 6
        whole = rx.copy_from()
        assert whole.dtype == np.int16 and whole.tolist() == [9, 10, 11, 12, 13, 14]
        assert rx.copy_from(4).tolist() == [13, 14]  # the rest, from a start past the wrap
        assert rx.copy_from(2, 3).tolist() == [11, 12, 13]  # across the wrap
        assert rx.copy_from(3, 0).tolist() == []
        assert q.commit_read(6)


@pytest.mark.parametrize(("start", "length"), [(-1, 1), (5, 2), (7, 0), (0, 7)])
def test_a_transaction_copy_outside_the_grant_names_the_slots(start, length):
    with MessageQueue(np.int16, 8) as q:
        wrapped_grant(q, 6)
        tx = q.begin_write(6)
        assert tx is not None
        message = rf"^BAD_DATA: slots \[{start}, {start + length}\) are outside the 6 granted$"
        with pytest.raises(BadDataError, match=message):
            tx.copy_to(np.zeros(length, np.int16), start=start)
        with pytest.raises(BadDataError, match=message):
            tx.copy_from(start, length)


def test_empty_grants_are_granted_and_negative_ones_refused():
    with MessageQueue(np.int16, 8) as q:
        for begin in (q.begin_write, q.begin_read):
            grant = begin(0)
            assert grant is not None and len(grant) == 0
        with pytest.raises(BadDataError, match=r"^BAD_DATA: cannot write -1 elements$"):
            q.begin_write(-1)
        with pytest.raises(BadDataError, match=r"^BAD_DATA: cannot read -2 elements$"):
            q.begin_read(-2)


CALLS = {
    "available_to_read": lambda q: q.available_to_read(),
    "available_to_write": lambda q: q.available_to_write(),
    "begin_write": lambda q: q.begin_write(1),
    "commit_write": lambda q: q.commit_write(1),
    "begin_read": lambda q: q.begin_read(1),
    "commit_read": lambda q: q.commit_read(1),
}


@pytest.mark.parametrize("name", sorted(set(CALLS) - {"commit_read"}))  # it reads no shared counter
def test_corrupt_counters_are_reported_by_the_call_that_found_them(name):
    with MessageQueue(np.int32, 8) as q:
        assert q.begin_write(1) is not None  # a grant to commit
        mapping = q._region.mmap
        struct.pack_into("<Q", mapping, READ_OFFSET, 0)
        struct.pack_into("<Q", mapping, WRITE_OFFSET, 3)  # not a whole element
        with pytest.raises(
            CorruptQueueError,
            match=rf"^OP_FAILED: {name}: the shared queue header or counters are corrupt$",
        ):
            CALLS[name](q)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_close_racing_a_call_is_reported_by_that_call(name):
    """close() on another thread lands between a call's Python check and its C call:
    the C core refuses the call (nnb_fmq_shutdown), and the error names it."""
    with MessageQueue(np.int32, 8) as q:
        assert q.write(np.ones(2, np.int32))
        assert q.begin_read(1) is not None and q.begin_write(1) is not None
        q._native.shut_down(tear_down=False)  # what close() does first, from the other thread
        with pytest.raises(
            ClosedResourceError, match=rf"^BAD_STATE: {name}: the queue was closed$"
        ):
            CALLS[name](q)


def test_tear_down_is_a_no_op_without_an_event_flag_or_once_closed():
    with MessageQueue(np.int32, 8, event_flag=False) as q:
        q.tear_down()
        assert q.write(np.ones(1, np.int32))
    q = MessageQueue(np.int32, 8)
    q.close()
    q.tear_down()


def test_a_queue_dropped_without_close_unlinks_its_segment():
    q = MessageQueue(np.int32, 8)
    path = "/dev/shm" + q.descriptor.name
    assert os.path.exists(path)
    del q
    gc.collect()
    assert not os.path.exists(path)


def test_an_element_type_nested_too_deeply_is_refused_by_name():
    nested: object = "<i4"
    for _ in range(10):
        nested = {"subarray": nested, "shape": [1]}
    data = descriptor_bytes()
    raw_dtype = json.dumps(nested).encode()
    header = with_fields(data, dtype_len=len(raw_dtype))
    name_end = HEADER.size + HEADER.unpack_from(data)[-2]
    with pytest.raises(BadDataError, match="element type nests too deeply$"):
        Descriptor.from_bytes(header[:name_end] + raw_dtype)


def test_repr_says_flavor_size_type_and_segment_or_closed():
    q = MessageQueue(np.int16, 8)
    name = q.descriptor.name
    assert repr(q) == f"<MessageQueue SYNCHRONIZED_READ_WRITE 8 x int16 {name}>"
    q.close()
    assert repr(q) == "<MessageQueue SYNCHRONIZED_READ_WRITE 8 x int16 closed>"


# -- sealed queues, closed queues, descriptors at their edges ---------------------


def test_a_sealed_queue_is_attached_from_a_copy_of_its_fd():
    with MessageQueue(np.int32, 8, sealed=True) as q:
        descriptor = q.descriptor
        assert descriptor.name == "" and descriptor.fd >= 0
        with MessageQueue.attach(descriptor) as peer:
            assert q.write(np.arange(3, dtype=np.int32))
            assert peer.read(3).tolist() == [0, 1, 2]
        os.fstat(descriptor.fd)  # the creator's fd is still its own


def test_a_sealed_queue_cannot_be_attached_without_a_usable_fd():
    with MessageQueue(np.int32, 8, sealed=True) as q:
        descriptor = q.descriptor
        with pytest.raises(
            BadDataError,
            match=r"^BAD_DATA: the descriptor is of a sealed queue: attaching needs its fd$",
        ):
            MessageQueue.attach(descriptor.to_bytes())  # the fd does not travel in the bytes
        closed_fd = os.open(os.devnull, os.O_RDONLY)
        os.close(closed_fd)
        with pytest.raises(
            BadDataError, match=rf"^BAD_DATA: invalid queue segment fd {closed_fd}: "
        ):
            MessageQueue.attach(dataclasses.replace(descriptor, fd=closed_fd))
        with pytest.raises(BadDataError) as refused:  # fd 0 is an fd: it is tried, not waved off
            MessageQueue.attach(dataclasses.replace(descriptor, fd=0))
        assert "attaching needs its fd" not in str(refused.value)


def test_a_closed_queue_says_so():
    q = MessageQueue(np.int32, 8)
    q.close()
    with pytest.raises(ClosedResourceError, match=r"^BAD_STATE: the queue is closed$"):
        q.available_to_read()


def test_a_descriptor_from_process_1_is_accepted():
    """pid 1 (a container's init) is a process id like any other."""
    data = descriptor_bytes()
    assert Descriptor.from_bytes(with_fields(data, pid=1)).creator_pid == 1


def nested_struct(depth: int) -> np.dtype:
    dtype = np.dtype(np.int32)
    for _ in range(depth):
        dtype = np.dtype([("inner", dtype)])
    return dtype


def test_struct_element_types_nest_eight_deep_and_no_deeper():
    with MessageQueue(nested_struct(8), 4) as q:
        assert Descriptor.from_bytes(q.descriptor.to_bytes()).dtype == nested_struct(8)
    with MessageQueue(nested_struct(9), 4) as q:
        with pytest.raises(BadDataError, match="element type nests too deeply$"):
            Descriptor.from_bytes(q.descriptor.to_bytes())


def test_an_element_type_that_is_no_plain_type_string_is_refused_with_the_rule():
    data = descriptor_bytes()
    raw_dtype = json.dumps("int32").encode()  # numpy would take it; a descriptor must not
    header = with_fields(data, dtype_len=len(raw_dtype))
    name_end = HEADER.size + HEADER.unpack_from(data)[-2]
    with pytest.raises(
        BadDataError,
        match=r"element type 'int32' cannot cross a process boundary "
        r"\(only plain numpy type strings, such as '<f4'\)$",
    ):
        Descriptor.from_bytes(header[:name_end] + raw_dtype)
