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

Client and server are pinned to different CPUs when there are two or more.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

import numpy as np

from ..fmq import MessageQueue
from .stats import LatencyStats, Throughput, latency_table, throughput_table

MESSAGE_BYTES = 256
STREAM_ELEMENT = np.dtype("V64")
STREAM_BATCH = 256
POLL_NS = 50_000
_FORK = multiprocessing.get_context("fork")
REPO = Path(__file__).resolve().parents[2]


def _pin(cpu: int) -> None:
    """Client on CPU 0, server on CPU 1: side by side, as a burst runs."""
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {cpu})


def _timed(iterations: int, warmup: int, round_trip: Callable[[], None]) -> np.ndarray:
    for _ in range(warmup):
        round_trip()
    times = np.empty(iterations, dtype=np.int64)
    clock = time.perf_counter_ns
    for i in range(iterations):
        start = clock()
        round_trip()
        times[i] = clock() - start
    return times


def _run_server(target: Callable[..., None], *args: object) -> multiprocessing.process.BaseProcess:
    process = _FORK.Process(target=target, args=args, daemon=True)
    process.start()
    return process


def _finish(process: multiprocessing.process.BaseProcess) -> None:
    process.join(10)
    if process.is_alive():
        process.kill()
        process.join()


# -- FMQ ---------------------------------------------------------------------


def _fmq_echo(request_desc: bytes, response_desc: bytes, total: int, spin_ns: int, nowait: bool) -> None:
    _pin(1)
    request = MessageQueue.attach(request_desc)
    response = MessageQueue.attach(response_desc)
    buffer = np.empty(MESSAGE_BYTES, dtype=np.uint8)
    if nowait:
        for _ in range(total):
            while not request.read_into(buffer):
                pass
            while not response.write(buffer):
                pass
    else:
        # Reply and wait for the next request in one C call per round trip.
        request.read_blocking(MESSAGE_BYTES, out=buffer, spin_ns=spin_ns)
        reply_and_wait = response.round_trip(request, buffer, buffer, spin_ns)
        for _ in range(total - 1):
            reply_and_wait(MESSAGE_BYTES)
        response.write_blocking(buffer, spin_ns=spin_ns)
    request.close()
    response.close()


def fmq_round_trips(iterations: int, spin_ns: int = 0, nowait: bool = False) -> np.ndarray:
    _pin(0)
    with MessageQueue(np.uint8, 16384) as request, MessageQueue(np.uint8, 16384) as response:
        warmup = max(100, iterations // 10)
        server = _run_server(
            _fmq_echo,
            request.descriptor.to_bytes(),
            response.descriptor.to_bytes(),
            warmup + iterations,
            spin_ns,
            nowait,
        )
        message = np.full(MESSAGE_BYTES, 7, dtype=np.uint8)
        reply = np.empty(MESSAGE_BYTES, dtype=np.uint8)

        call = request.round_trip(response, message, reply, spin_ns)

        def blocking() -> None:
            call(MESSAGE_BYTES)

        def polling() -> None:
            while not request.write(message):
                pass
            while not response.read_into(reply):
                pass

        try:
            times = _timed(iterations, warmup, polling if nowait else blocking)
        finally:
            _finish(server)
    return times


def _fmq_stream_writer(desc: bytes, total: int, spin_ns: int) -> None:
    _pin(1)
    queue = MessageQueue.attach(desc)
    batch = np.zeros(STREAM_BATCH, dtype=STREAM_ELEMENT)
    for _ in range(total // STREAM_BATCH):
        queue.write_blocking(batch, spin_ns=spin_ns)
    queue.close()


def fmq_stream(total: int, spin_ns: int = 0) -> float:
    """Seconds to receive ``total`` 64-byte elements."""
    _pin(0)
    total -= total % STREAM_BATCH
    with MessageQueue(STREAM_ELEMENT, 16384) as queue:
        out = np.empty(4096, dtype=STREAM_ELEMENT)
        writer = _run_server(_fmq_stream_writer, queue.descriptor.to_bytes(), total, spin_ns)
        received = 0
        start = time.perf_counter()
        try:
            while received < total:
                received += queue.read_available_blocking(out, spin_ns=spin_ns, timeout_ns=10**10)
        finally:
            elapsed = time.perf_counter() - start
            _finish(writer)
    return elapsed


# -- baselines ---------------------------------------------------------------


def _pipe_echo(conn: object, total: int) -> None:
    _pin(1)
    for _ in range(total):
        conn.send_bytes(conn.recv_bytes())  # type: ignore[attr-defined]


def pipe_round_trips(iterations: int) -> np.ndarray:
    _pin(0)
    ours, theirs = _FORK.Pipe()
    warmup = max(100, iterations // 10)
    server = _run_server(_pipe_echo, theirs, warmup + iterations)
    message = bytes(MESSAGE_BYTES)

    def round_trip() -> None:
        ours.send_bytes(message)
        ours.recv_bytes()

    try:
        return _timed(iterations, warmup, round_trip)
    finally:
        _finish(server)
        ours.close()
        theirs.close()


def _os_pipe_echo(read_fd: int, write_fd: int, total: int) -> None:
    _pin(1)
    for _ in range(total):
        os.write(write_fd, os.read(read_fd, MESSAGE_BYTES))


def os_pipe_round_trips(iterations: int) -> np.ndarray:
    _pin(0)
    to_server = os.pipe()
    to_client = os.pipe()
    warmup = max(100, iterations // 10)
    server = _run_server(_os_pipe_echo, to_server[0], to_client[1], warmup + iterations)
    message = bytes(MESSAGE_BYTES)

    def round_trip() -> None:
        os.write(to_server[1], message)
        os.read(to_client[0], MESSAGE_BYTES)

    try:
        return _timed(iterations, warmup, round_trip)
    finally:
        _finish(server)
        for fd in (*to_server, *to_client):
            os.close(fd)


# Spin-flag layout in one shared_memory block: flag byte at 0, request at 64,
# response at 64 + MESSAGE_BYTES.
_REQUEST = slice(64, 64 + MESSAGE_BYTES)
_RESPONSE = slice(64 + MESSAGE_BYTES, 64 + 2 * MESSAGE_BYTES)


def _spin_flag_echo(name: str, total: int) -> None:
    _pin(1)
    block = shared_memory.SharedMemory(name)
    # Attaching registered the block with the shared resource tracker; the
    # client owns it and unlinks it.
    resource_tracker.unregister(block._name, "shared_memory")  # type: ignore[attr-defined]
    buf = block.buf
    for _ in range(total):
        while buf[0] != 1:
            pass
        buf[_RESPONSE] = buf[_REQUEST]
        buf[0] = 2
    del buf
    block.close()


def spin_flag_round_trips(iterations: int) -> np.ndarray:
    _pin(0)
    block = shared_memory.SharedMemory(create=True, size=4096)
    buf = block.buf
    warmup = max(100, iterations // 10)
    server = _run_server(_spin_flag_echo, block.name, warmup + iterations)
    message = bytes(MESSAGE_BYTES)

    def round_trip() -> None:
        buf[_REQUEST] = message
        buf[0] = 1
        while buf[0] != 2:
            pass
        bytes(buf[_RESPONSE])

    try:
        return _timed(iterations, warmup, round_trip)
    finally:
        _finish(server)
        del buf
        block.close()
        block.unlink()


def _c_floor_binary() -> Path | None:
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
    binary = _c_floor_binary()
    if binary is None:
        return None
    out = subprocess.run([str(binary), mode, str(iterations), str(nbytes)], check=True, capture_output=True, text=True)
    return np.array(out.stdout.split(), dtype=np.int64)


def pipe_stream(total: int) -> float:
    """Seconds to receive ``total`` 64-byte elements through multiprocessing.Pipe."""
    _pin(0)
    total -= total % STREAM_BATCH
    ours, theirs = _FORK.Pipe(duplex=False)

    def writer(conn: object) -> None:
        _pin(1)
        chunk = bytes(STREAM_BATCH * STREAM_ELEMENT.itemsize)
        for _ in range(total // STREAM_BATCH):
            conn.send_bytes(chunk)  # type: ignore[attr-defined]

    process = _run_server(writer, theirs)
    received = 0
    start = time.perf_counter()
    while received < total:
        received += len(ours.recv_bytes()) // STREAM_ELEMENT.itemsize
    elapsed = time.perf_counter() - start
    _finish(process)
    ours.close()
    theirs.close()
    return elapsed


# -- the whole run -----------------------------------------------------------


def run(iterations: int = 20000, stream_items: int = 2_000_000) -> tuple[list[LatencyStats], list[Throughput]]:
    """Every round-trip mode and stream, measured back to back in this run."""
    rows = [
        LatencyStats.from_ns("fmq futex", fmq_round_trips(iterations, spin_ns=0)),
        LatencyStats.from_ns("fmq poll 50us", fmq_round_trips(iterations, spin_ns=POLL_NS)),
        LatencyStats.from_ns("fmq nowait (python)", fmq_round_trips(iterations, nowait=True)),
        LatencyStats.from_ns("python spin flag", spin_flag_round_trips(iterations)),
        LatencyStats.from_ns("os.pipe", os_pipe_round_trips(iterations)),
        LatencyStats.from_ns("multiprocessing.Pipe", pipe_round_trips(iterations)),
    ]
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


def main(iterations: int = 20000, stream_items: int = 2_000_000) -> None:
    rows, streams = run(iterations, stream_items)
    print(f"Round trip of a {MESSAGE_BYTES}-byte message, {iterations} iterations, cross-process:")
    print(latency_table(rows, baseline="multiprocessing.Pipe"))
    print()
    print(f"One-way streaming of {STREAM_ELEMENT.itemsize}-byte elements, batches of {STREAM_BATCH}:")
    print(throughput_table(streams))


if __name__ == "__main__":
    main()
