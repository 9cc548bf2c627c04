"""The only module that touches the compiled ``nnburst._native``.

It re-exports ``ffi``/``lib`` for the few modules that drive the C core on a
hot path (fmq, event_flag), names the C constants once, and turns the C
core's negative errno returns into exceptions in exactly one table.
"""

from __future__ import annotations

import os

try:
    from . import _native  # compiled by cffi at build time; typed by _native.pyi
except ImportError as exc:  # the usual cause: a source checkout shadows the installed package
    _here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    raise ImportError(
        f"nnburst's compiled module is missing from {_here}/nnburst: this is a source "
        "checkout without a build (Python looks in the current directory first). Run from "
        "another directory to use the installed nnburst, or build this checkout with "
        "`pip install -e .`"
    ) from exc
from .errors import (
    BadDataError,
    BrokenResourceError,
    ClosedResourceError,
    CorruptQueueError,
    DeadlineExceeded,
    NNError,
)

ffi = _native.ffi
lib = _native.lib

EAGAIN: int = lib.NNB_EAGAIN
ETIMEDOUT: int = lib.NNB_ETIMEDOUT
EINTR: int = lib.NNB_EINTR
EINVAL: int = lib.NNB_EINVAL
EPROTO: int = lib.NNB_EPROTO
EOVERFLOW: int = lib.NNB_EOVERFLOW
EPIPE: int = lib.NNB_EPIPE
EBADF: int = lib.NNB_EBADF

FLAVOR_SYNCHRONIZED: int = lib.NNB_FLAVOR_SYNCHRONIZED
FLAVOR_UNSYNCHRONIZED: int = lib.NNB_FLAVOR_UNSYNCHRONIZED
HAS_EVFLAG: int = lib.NNB_FMQ_HAS_EVFLAG
EF_NOT_FULL: int = lib.NNB_EF_NOT_FULL
EF_NOT_EMPTY: int = lib.NNB_EF_NOT_EMPTY
EF_TEARDOWN: int = lib.NNB_EF_TEARDOWN

READ_OFFSET: int = lib.NNB_FMQ_READ_OFFSET
WRITE_OFFSET: int = lib.NNB_FMQ_WRITE_OFFSET
RING_OFFSET: int = lib.NNB_FMQ_RING_OFFSET


def error_for(rc: int, what: str, *, closed_locally: bool = False) -> NNError:
    """The exception for a C status ``rc`` returned by operation ``what``."""
    if rc == EPROTO:
        return CorruptQueueError(f"{what}: the shared queue header or counters are corrupt")
    if rc == EBADF:
        return ClosedResourceError(f"{what}: the queue was closed")
    if rc == EPIPE:
        if closed_locally:
            return ClosedResourceError(f"{what}: the queue was closed")
        return BrokenResourceError(f"{what}: the peer closed or tore down the queue")
    if rc == EINVAL:
        return BadDataError(f"{what}: invalid argument")
    if rc == ETIMEDOUT:
        return DeadlineExceeded(f"{what}: timed out")
    return NNError(f"{what}: failed with errno {-rc}")


def required_bytes(quantum: int, count: int) -> int:
    """Shared memory needed by a queue; 0 when the size would overflow."""
    return int(lib.nnb_fmq_required_bytes(quantum, count))
