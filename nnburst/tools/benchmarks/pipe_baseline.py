"""The baseline ``nnburst bench`` compares every path to: the same bytes over a
``multiprocessing.Pipe``.

A forked peer receives the model's input bytes and answers with as many bytes
as the model's output: the cheapest way plain Python moves that request and
response between two processes, with no model, no runtime and no shared memory.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_FORK = multiprocessing.get_context("fork")


def _answer(conn: Any, other_end: Any, response_bytes: int, cpu: int | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the benchmark's to handle; it ends us
    other_end.close()  # the fork's copy: with it open, the benchmark's close would not end us
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    response = bytes(response_bytes)
    try:
        while True:
            conn.recv_bytes()
            conn.send_bytes(response)
    except (EOFError, OSError):  # the benchmark closed its end
        pass


@contextmanager
def pipe_peer(
    request_bytes: int, response_bytes: int, cpu: int | None = None
) -> Iterator[Callable[[], object]]:
    """A round trip: ``request_bytes`` out, ``response_bytes`` back; ``cpu`` pins the peer."""
    ours, theirs = _FORK.Pipe()
    process = _FORK.Process(target=_answer, args=(theirs, ours, response_bytes, cpu), daemon=True)
    request = bytes(request_bytes)
    try:
        process.start()
        theirs.close()

        def round_trip() -> object:
            ours.send_bytes(request)
            return ours.recv_bytes()

        yield round_trip
    finally:
        ours.close()
        theirs.close()
        if process.pid is not None:  # started
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()
        process.close()
