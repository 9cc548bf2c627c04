"""Exceptions, and the one table that maps between NNAPI and HAL status codes.

Every error nnburst raises is an :class:`NNError` carrying a
:class:`~nnburst.codes.ResultCode`, so callers can branch on ``err.code`` the
way NDK callers branch on ``ANEURALNETWORKS_*``.  The subclasses say *whose
fault* a failure was (your code closed it, the peer went away, the shared
header was scribbled on, a packet was malformed), following trio's taxonomy.
"""

from __future__ import annotations

from .codes import ErrorStatus, ResultCode


class NNError(Exception):
    """Base of every nnburst error; ``code`` is the NNAPI result code."""

    default_code = ResultCode.OP_FAILED

    def __init__(self, message: str, code: ResultCode | None = None) -> None:
        super().__init__(message)
        self.code: ResultCode = code if code is not None else self.default_code

    def __str__(self) -> str:
        return f"{self.code.name}: {super().__str__()}"


class BadDataError(NNError, ValueError):
    """An argument, model, descriptor or index is invalid (``BAD_DATA``)."""

    default_code = ResultCode.BAD_DATA


class BadStateError(NNError):
    """The object is in the wrong state for this call (``BAD_STATE``)."""

    default_code = ResultCode.BAD_STATE


class ClosedResourceError(BadStateError):
    """Your code closed this object, then used it (or closed it while blocked)."""


class BrokenResourceError(NNError):
    """The peer went away or tore the channel down (``DEAD_OBJECT``)."""

    default_code = ResultCode.DEAD_OBJECT


class CorruptQueueError(NNError):
    """The shared queue header holds impossible counters: a peer scribbled on it."""

    default_code = ResultCode.OP_FAILED


class PacketError(BadDataError):
    """A burst packet is malformed and was rejected whole."""


class UnsupportedError(NNError, ValueError):
    """This CPU or build has not got what was asked for (a C loop, a C library call)."""

    default_code = ResultCode.OP_FAILED


class OutOfMemoryError(NNError, MemoryError):
    """Memory a computation needs could not be had (``OUT_OF_MEMORY``)."""

    default_code = ResultCode.OUT_OF_MEMORY


class DeadlineExceeded(NNError, TimeoutError):
    """A deadline or loop timeout ran out."""

    default_code = ResultCode.MISSED_DEADLINE_TRANSIENT


# HAL status -> NNAPI result code, as the NN runtime converts driver replies.
_RESULT_FOR_STATUS: dict[ErrorStatus, ResultCode] = {
    ErrorStatus.NONE: ResultCode.NO_ERROR,
    ErrorStatus.DEVICE_UNAVAILABLE: ResultCode.UNAVAILABLE_DEVICE,
    ErrorStatus.GENERAL_FAILURE: ResultCode.OP_FAILED,
    ErrorStatus.OUTPUT_INSUFFICIENT_SIZE: ResultCode.OUTPUT_INSUFFICIENT_SIZE,
    ErrorStatus.INVALID_ARGUMENT: ResultCode.BAD_DATA,
    ErrorStatus.MISSED_DEADLINE_TRANSIENT: ResultCode.MISSED_DEADLINE_TRANSIENT,
    ErrorStatus.MISSED_DEADLINE_PERSISTENT: ResultCode.MISSED_DEADLINE_PERSISTENT,
    ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT: ResultCode.RESOURCE_EXHAUSTED_TRANSIENT,
    ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT: ResultCode.RESOURCE_EXHAUSTED_PERSISTENT,
}

_STATUS_FOR_RESULT: dict[ResultCode, ErrorStatus] = {
    ResultCode.NO_ERROR: ErrorStatus.NONE,
    ResultCode.BAD_DATA: ErrorStatus.INVALID_ARGUMENT,
    ResultCode.UNEXPECTED_NULL: ErrorStatus.INVALID_ARGUMENT,
    ResultCode.OUTPUT_INSUFFICIENT_SIZE: ErrorStatus.OUTPUT_INSUFFICIENT_SIZE,
    ResultCode.UNAVAILABLE_DEVICE: ErrorStatus.DEVICE_UNAVAILABLE,
    ResultCode.DEAD_OBJECT: ErrorStatus.DEVICE_UNAVAILABLE,
    ResultCode.MISSED_DEADLINE_TRANSIENT: ErrorStatus.MISSED_DEADLINE_TRANSIENT,
    ResultCode.MISSED_DEADLINE_PERSISTENT: ErrorStatus.MISSED_DEADLINE_PERSISTENT,
    ResultCode.RESOURCE_EXHAUSTED_TRANSIENT: ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
    ResultCode.RESOURCE_EXHAUSTED_PERSISTENT: ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
}


def result_code_for_status(status: ErrorStatus) -> ResultCode:
    """The NNAPI result code an app sees for a driver's HAL status."""
    return _RESULT_FOR_STATUS.get(ErrorStatus(status), ResultCode.OP_FAILED)


def status_for_result_code(code: ResultCode) -> ErrorStatus:
    """The HAL status a driver reports for a failure with this result code."""
    return _STATUS_FOR_RESULT.get(ResultCode(code), ErrorStatus.GENERAL_FAILURE)


def status_for_exception(exc: BaseException) -> ErrorStatus:
    """The HAL status that reports ``exc`` to a client."""
    if isinstance(exc, NNError):
        return status_for_result_code(exc.code)
    return ErrorStatus.GENERAL_FAILURE
