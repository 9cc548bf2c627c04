"""Cross-process FMQ round trips and streaming, against baselines, in one run.

Round trip: the client sends a 256-byte message, a server process echoes it,
the client times each round trip.  Modes:

* ``fmq futex``      blocking calls, ``spin_ns=0``: sleep on the futex at once
* ``fmq poll 50us``  blocking calls with a 50 µs spin window (in C, no GIL)
* ``fmq nowait``     non-blocking reads retried from Python
* baselines: ``multiprocessing.Pipe`` (send_bytes), ``os.pipe``, a pure-Python
  spin flag on ``multiprocessing.shared_memory``, and this machine's C floor
  (``bench/floor_pingpong.c``: spin on a cache line, and futex ping-pong)

Streaming: a writer process sends 64-byte elements in batches of 256; the
reader receives whatever is there with one call; elements per second.

Each mode is a context manager yielding a zero-argument round-trip callable,
so the CLI's timing loop and pytest-benchmark (``bench/``) drive the very
same peers.  Client and server are pinned to different CPUs when there are
two or more.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np

from ...fmq import MessageQueue
from .stats import LatencyStats, Throughput, latency_table, throughput_table

MESSAGE_BYTES = 256
STOP = 0xFF  # first byte of the message that ends a server
STREAM_ELEMENT = np.dtype("V64")
STREAM_BATCH = 256
POLL_NS = 50_000
_FORK = multiprocessing.get_context("fork")
REPO = Path(__file__).resolve().parents[2]

RoundTrip = Callable[[], Any]


def pin(cpu: int) -> None:
    """Client on CPU 0, server on CPU 1: side by side, as a burst runs."""
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {cpu})


def timed(round_trip: RoundTrip, iterations: int, warmup: int | None = None) -> np.ndarray:
    """Per-call latencies in ns, after a warm-up."""
    for _ in range(max(100, iterations // 10) if warmup is None else warmup):
        round_trip()
    times = np.empty(iterations, dtype=np.int64)
    clock = time.perf_counter_ns
    for i in range(iterations):
        start = clock()
        round_trip()
        times[i] = clock() - start
    return times


@contextmanager
def _server(target: Callable[..., None], *args: object) -> Iterator[None]:
    process = _FORK.Process(target=target, args=args, daemon=True)
    process.start()
    try:
        yield
    finally:
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join()


# -- FMQ ---------------------------------------------------------------------


def _fmq_echo(request_desc: bytes, response_desc: bytes, spin_ns: int, nowait: bool) -> None:
    pin(1)
    with (
        MessageQueue.attach(request_desc) as request,
        MessageQueue.attach(response_desc) as response,
    ):
        buffer = np.empty(MESSAGE_BYTES, dtype=np.uint8)
        if nowait:
            while True:
                while not request.read_into(buffer):
                    pass
                if buffer[0] == STOP:
                    return
                while not response.write(buffer):
                    pass
        # Reply and wait for the next request in one C call per round trip.
        request.read_blocking(MESSAGE_BYTES, out=buffer, spin_ns=spin_ns)
        reply_and_wait = response.round_trip(request, buffer, buffer, spin_ns)
        first_byte = memoryview(buffer.data)  # cheaper to index than the numpy array
        while first_byte[0] != STOP:
            reply_and_wait(MESSAGE_BYTES)


@contextmanager
def fmq_peer(spin_ns: int = 0, nowait: bool = False) -> Iterator[RoundTrip]:
    """A server process echoing over two FMQs; yields one round trip."""
    pin(0)
    with MessageQueue(np.uint8, 16384) as request, MessageQueue(np.uint8, 16384) as response:
        message = np.full(MESSAGE_BYTES, 7, dtype=np.uint8)
        reply = np.empty(MESSAGE_BYTES, dtype=np.uint8)
        with _server(
            _fmq_echo,
            request.descriptor.to_bytes(),
            response.descriptor.to_bytes(),
            spin_ns,
            nowait,
        ):
            if nowait:

                def round_trip() -> None:
                    while not request.write(message):
                        pass
                    while not response.read_into(reply):
                        pass

                yield round_trip
            else:
                yield functools.partial(
                    request.round_trip(response, message, reply, spin_ns), MESSAGE_BYTES
                )
            stop = np.full(MESSAGE_BYTES, STOP, dtype=np.uint8)
            request.write_blocking(stop, timeout_ns=1_000_000_000)


def _fmq_stream_writer(desc: bytes, total: int, spin_ns: int) -> None:
    pin(1)
    with MessageQueue.attach(desc) as queue:
        batch = np.zeros(STREAM_BATCH, dtype=STREAM_ELEMENT)
        for _ in range(total // STREAM_BATCH):
            queue.write_blocking(batch, spin_ns=spin_ns)


def fmq_stream(total: int, spin_ns: int = 0) -> float:
    """Seconds to receive ``total`` 64-byte elements."""
    pin(0)
    total -= total % STREAM_BATCH
    with MessageQueue(STREAM_ELEMENT, 16384) as queue:
        out = np.empty(4096, dtype=STREAM_ELEMENT)
        with _server(_fmq_stream_writer, queue.descriptor.to_bytes(), total, spin_ns):
            received = 0
            start = time.perf_counter()
            while received < total:
                received += queue.read_available_blocking(out, spin_ns=spin_ns, timeout_ns=10**10)
            return time.perf_counter() - start


# -- baselines ---------------------------------------------------------------


def _pipe_echo(conn: Any) -> None:
    pin(1)
    while True:
        message = conn.recv_bytes()
        if message[0] == STOP:
            return
        conn.send_bytes(message)


@contextmanager
def pipe_peer() -> Iterator[RoundTrip]:
    """multiprocessing.Pipe request/response with send_bytes/recv_bytes."""
    pin(0)
    ours, theirs = _FORK.Pipe()
    message = bytes(MESSAGE_BYTES)
    try:
        with _server(_pipe_echo, theirs):

            def round_trip() -> None:
                ours.send_bytes(message)
                ours.recv_bytes()

            yield round_trip
            ours.send_bytes(bytes([STOP]))
    finally:
        ours.close()
        theirs.close()


def _os_pipe_echo(read_fd: int, write_fd: int) -> None:
    pin(1)
    while True:
        message = os.read(read_fd, MESSAGE_BYTES)
        if message[0] == STOP:
            return
        os.write(write_fd, message)


@contextmanager
def os_pipe_peer() -> Iterator[RoundTrip]:
    pin(0)
    to_server, to_client = os.pipe(), os.pipe()
    message = bytes(MESSAGE_BYTES)
    try:
        with _server(_os_pipe_echo, to_server[0], to_client[1]):

            def round_trip() -> None:
                os.write(to_server[1], message)
                os.read(to_client[0], MESSAGE_BYTES)

            yield round_trip
            os.write(to_server[1], bytes([STOP]) * MESSAGE_BYTES)
    finally:
        for fd in (*to_server, *to_client):
            os.close(fd)


# Spin-flag layout in one shared_memory block: flag byte at 0, request at 64,
# response at 64 + MESSAGE_BYTES.  Flag 1: request ready; 2: reply ready; 3: stop.
_REQUEST = slice(64, 64 + MESSAGE_BYTES)
_RESPONSE = slice(64 + MESSAGE_BYTES, 64 + 2 * MESSAGE_BYTES)


def _spin_flag_echo(name: str) -> None:
    pin(1)
    block = shared_memory.SharedMemory(name)  # the client owns and unlinks it
    buf = block.buf
    assert buf is not None
    while True:
        while buf[0] == 0 or buf[0] == 2:
            pass
        if buf[0] == 3:
            break
        buf[_RESPONSE] = buf[_REQUEST]
        buf[0] = 2
    buf.release()
    block.close()


@contextmanager
def spin_flag_peer() -> Iterator[RoundTrip]:
    """A pure-Python spin flag on multiprocessing.shared_memory."""
    pin(0)
    block = shared_memory.SharedMemory(create=True, size=4096)
    buf = block.buf
    assert buf is not None
    message = bytes(MESSAGE_BYTES)
    try:
        with _server(_spin_flag_echo, block.name):

            def round_trip() -> None:
                buf[_REQUEST] = message
                buf[0] = 1
                while buf[0] != 2:
                    pass
                bytes(buf[_RESPONSE])

            yield round_trip
            buf[0] = 3
    finally:
        buf.release()
        block.close()
        block.unlink()


def c_floor_binary() -> Path | None:
    """Compile bench/floor_pingpong.c once (source checkouts only)."""
    source = REPO / "bench" / "floor_pingpong.c"
    binary = REPO / "bench" / "bin" / "floor_pingpong"
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not source.exists() or compiler is None:
        return None
    if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
        binary.parent.mkdir(exist_ok=True)
        subprocess.run([compiler, "-O2", "-std=gnu11", "-o", str(binary), str(source)], check=True)
    return binary


def c_floor_round_trips(iterations: int, mode: str, nbytes: int) -> np.ndarray | None:
    binary = c_floor_binary()
    if binary is None:
        return None
    out = subprocess.run(
        [str(binary), mode, str(iterations), str(nbytes)],
        check=True,
        capture_output=True,
        text=True,
    )
    return np.array(out.stdout.split(), dtype=np.int64)


def _pipe_stream_writer(conn: Any, total: int) -> None:
    pin(1)
    chunk = bytes(STREAM_BATCH * STREAM_ELEMENT.itemsize)
    for _ in range(total // STREAM_BATCH):
        conn.send_bytes(chunk)


def pipe_stream(total: int) -> float:
    """Seconds to receive ``total`` 64-byte elements through multiprocessing.Pipe."""
    pin(0)
    total -= total % STREAM_BATCH
    ours, theirs = _FORK.Pipe(duplex=False)
    try:
        with _server(_pipe_stream_writer, theirs, total):
            received = 0
            start = time.perf_counter()
            while received < total:
                received += len(ours.recv_bytes()) // STREAM_ELEMENT.itemsize
            return time.perf_counter() - start
    finally:
        ours.close()
        theirs.close()


# -- the whole run -----------------------------------------------------------

ROUND_TRIP_MODES: dict[str, Callable[[], Any]] = {
    "fmq futex": lambda: fmq_peer(spin_ns=0),
    "fmq poll 50us": lambda: fmq_peer(spin_ns=POLL_NS),
    "fmq nowait (python)": lambda: fmq_peer(nowait=True),
    "python spin flag": spin_flag_peer,
    "os.pipe": os_pipe_peer,
    "multiprocessing.Pipe": pipe_peer,
}


def run(
    iterations: int = 20000, stream_items: int = 2_000_000
) -> tuple[list[LatencyStats], list[Throughput]]:
    """Every round-trip mode and stream, measured back to back in this run."""
    rows = []
    for name, open_peer in ROUND_TRIP_MODES.items():
        with open_peer() as round_trip:
            rows.append(LatencyStats.from_ns(name, timed(round_trip, iterations)))
    for mode, nbytes in (("spin", 0), ("spin", MESSAGE_BYTES), ("futex", 0)):
        samples = c_floor_round_trips(iterations, mode, nbytes)
        if samples is not None:
            rows.append(LatencyStats.from_ns(f"C {mode} floor {nbytes}B", samples))
    streams = [
        Throughput("fmq futex", stream_items, fmq_stream(stream_items, 0)),
        Throughput("fmq poll 50us", stream_items, fmq_stream(stream_items, POLL_NS)),
        Throughput("multiprocessing.Pipe", stream_items, pipe_stream(stream_items)),
    ]
    return rows, streams


def report(rows: list[LatencyStats], streams: list[Throughput], iterations: int) -> str:
    return "\n".join(
        [
            f"Round trip of a {MESSAGE_BYTES}-byte message, {iterations} iterations, cross-process:",
            latency_table(rows, baseline="multiprocessing.Pipe", ratio_title="x Pipe"),
            "",
            f"One-way streaming of {STREAM_ELEMENT.itemsize}-byte elements, batches of {STREAM_BATCH}:",
            throughput_table(streams),
        ]
    )


def main(iterations: int = 20000, stream_items: int = 2_000_000) -> None:
    rows, streams = run(iterations, stream_items)
    print(report(rows, streams, iterations))


if __name__ == "__main__":
    main()
