"""Peer side of the cross-process FMQ tests (``python -m tests.fmq_peer NAME ARGS``).

Every function attaches from a hex descriptor, does its half of a scenario,
checks what it can see and raises on any mismatch.  Values on the wire are
``int32`` sequence numbers, as in libfmq's client tests.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from nnburst.errors import BrokenResourceError, ClosedResourceError
from nnburst.fmq import Flavor, MessageQueue

SECOND = 1_000_000_000


def sequence(start: int, n: int) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.int64).astype(np.int32)


def _attach(desc_hex: str) -> MessageQueue:
    return MessageQueue.attach(bytes.fromhex(desc_hex))


def read_blocking_batches(
    desc_hex: str, batches: str, batch: str, timeout_ns: str = "5000000000"
) -> None:
    """readBlocking(batch) `batches` times, checking a continuous sequence."""
    with _attach(desc_hex) as q:
        expected = 0
        for _ in range(int(batches)):
            got = q.read_blocking(int(batch), timeout_ns=int(timeout_ns))
            assert got is not None, f"read_blocking timed out at element {expected}"
            assert np.array_equal(got, sequence(expected, int(batch))), f"bad data at {expected}"
            expected += int(batch)


def read_blocking_sizes(desc_hex: str, sizes: str) -> None:
    """readBlocking of each comma-separated size in turn, one continuous sequence."""
    with _attach(desc_hex) as q:
        expected = 0
        for size in map(int, sizes.split(",")):
            got = q.read_blocking(size, timeout_ns=5 * SECOND)
            assert got is not None and np.array_equal(got, sequence(expected, size))
            expected += size


def echo_plus_one(requests_hex: str, replies_hex: str, count: str) -> None:
    """Answer each request with its elements plus one."""
    with _attach(requests_hex) as requests, _attach(replies_hex) as replies:
        buffer = np.zeros(requests.quantum_count, dtype=np.int32)
        for _ in range(int(count)):
            n = requests.read_available_blocking(buffer, timeout_ns=5 * SECOND)
            assert n > 0
            assert replies.write_blocking(buffer[:n] + 1, timeout_ns=5 * SECOND)


def write_blocking_batches(desc_hex: str, batches: str, batch: str) -> None:
    with _attach(desc_hex) as q:
        start = 0
        for _ in range(int(batches)):
            assert q.write_blocking(sequence(start, int(batch)), timeout_ns=5 * SECOND)
            start += int(batch)


def write_sequence(desc_hex: str, n: str, expect: str = "1") -> None:
    """Non-blocking write of 0..n-1; asserts the write's result is `expect`."""
    with _attach(desc_hex) as q:
        assert q.write(sequence(0, int(n))) == bool(int(expect))


def read_sequence(desc_hex: str, n: str, expect: str = "1") -> None:
    """Non-blocking read of n, which must hold 0..n-1 (or fail if expect=0)."""
    with _attach(desc_hex) as q:
        got = q.read(int(n))
        if int(expect):
            assert got is not None and np.array_equal(got, sequence(0, int(n)))
        else:
            assert got is None


def read_in_chunks(desc_hex: str, chunks: str, chunk: str) -> None:
    with _attach(desc_hex) as q:
        for i in range(int(chunks)):
            got = q.read(int(chunk))
            assert got is not None and np.array_equal(got, sequence(i * int(chunk), int(chunk)))


def unsync_reader_after_overflow(desc_hex: str) -> None:
    """libfmq MultipleReadersAfterOverflow, reader half: the writer has
    overrun the ring; our first read fails, then we resync and read."""
    with _attach(desc_hex) as q:
        assert q.available_to_read() > q.quantum_count
        assert q.read(q.quantum_count) is None
        assert q.available_to_read() == q.quantum_count // 2
        got = q.read(q.quantum_count // 2)
        assert got is not None


def block_until_broken(desc_hex: str, ready_path: str = "") -> None:
    """Block forever in read_blocking; the only way out is the peer closing."""
    with _attach(desc_hex) as q:
        if ready_path:
            open(ready_path, "w").close()
        try:
            q.read_blocking(1)
        except (BrokenResourceError, ClosedResourceError):
            return
        raise AssertionError("read_blocking returned although nobody wrote")


def create_and_sleep(flavor: str) -> None:
    """Create a queue, print its descriptor, then wait to be killed."""
    q = MessageQueue(np.int32, 64, Flavor(int(flavor)))
    print(q.descriptor.to_bytes().hex(), flush=True)
    time.sleep(60)


def stream_writer(desc_hex: str, total: str, seed: str, blocking: str) -> None:
    """Stream `total` checksummed elements in random batches."""
    rng = np.random.default_rng(int(seed))
    with _attach(desc_hex) as q:
        sent = 0
        while sent < int(total):
            n = min(int(rng.integers(1, 257)), q.quantum_count, int(total) - sent)
            seq = np.arange(sent, sent + n, dtype=np.uint64)
            items = np.empty(n, dtype=q.dtype)
            items["seq"] = seq
            items["check"] = checksum(seq)
            if int(blocking):
                assert q.write_blocking(items, timeout_ns=30 * SECOND)
            else:
                while not q.write(items):
                    pass
            sent += n


def checksum(seq: np.ndarray) -> np.ndarray:
    return (seq * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(0xABCDEF)


def main() -> None:
    name, *args = sys.argv[1:]
    globals()[name](*args)


if __name__ == "__main__":
    main()
