"""C status (``csrc/status.h``): 0, or a negative errno, turned into an
exception in one table."""

from __future__ import annotations

from ..codes import ResultCode
from ..errors import (
    BadDataError,
    BrokenResourceError,
    ClosedResourceError,
    CorruptQueueError,
    DeadlineExceeded,
    NNError,
    OutOfMemoryError,
    UnsupportedError,
)
from .compiled import lib

EAGAIN: int = lib.NNB_EAGAIN
ETIMEDOUT: int = lib.NNB_ETIMEDOUT
EINTR: int = lib.NNB_EINTR
EINVAL: int = lib.NNB_EINVAL
EPROTO: int = lib.NNB_EPROTO
EOVERFLOW: int = lib.NNB_EOVERFLOW
EPIPE: int = lib.NNB_EPIPE
EBADF: int = lib.NNB_EBADF
ENOTSUP: int = lib.NNB_ENOTSUP
ENOMEM: int = lib.NNB_ENOMEM
ENOSYS: int = lib.NNB_ENOSYS

#: C status -> (exception, what it means).  EAGAIN, EOVERFLOW and EINTR are
#: outcomes the wrappers below answer themselves (False, None, a retry); they
#: reach this table only where they cannot happen.
_ERRORS: dict[int, tuple[type[NNError], str]] = {
    EPROTO: (CorruptQueueError, "the shared queue header or counters are corrupt"),
    EBADF: (ClosedResourceError, "the queue was closed"),
    EPIPE: (BrokenResourceError, "the peer closed or tore down the queue"),
    EINVAL: (BadDataError, "invalid argument"),
    ETIMEDOUT: (DeadlineExceeded, "timed out"),
    ENOTSUP: (UnsupportedError, "not built or not supported by this CPU"),
    ENOMEM: (OutOfMemoryError, "out of memory"),
    ENOSYS: (UnsupportedError, "not available in this C library"),
    EAGAIN: (NNError, "would block"),
    EOVERFLOW: (NNError, "the reader was overrun"),
    EINTR: (NNError, "interrupted by a signal"),
}


def error_for(
    rc: int,
    what: str,
    *,
    closed_locally: bool = False,
    detail: str | None = None,
    code: ResultCode | None = None,
) -> NNError:
    """The exception for C status ``rc`` returned by ``what``.

    ``closed_locally``: the caller closed the queue, so a teardown (-EPIPE)
    is its own doing (``ClosedResourceError``), not the peer's.  ``detail``
    replaces the table's phrase; ``code`` its result code (a kernel that
    refuses its arguments at run time is an operation that failed)."""
    if rc == EPIPE and closed_locally:
        rc = EBADF
    cls, phrase = _ERRORS.get(rc, (NNError, f"failed with errno {-rc}"))
    return cls(f"{what}: {detail or phrase}", code)


def layer_error(rc: int, what: str) -> NNError:
    """A packed kernel's status (csrc/fconv.c, qconv.c): its EINVAL is always a layer
    or buffers it refuses, which is what the message says."""
    return error_for(rc, what, detail="invalid layer or buffers" if rc == EINVAL else None)
