"""Argument checks every NDK-style entry point shares, in one place.

A leaf module: the runtime's classes (model, compilation, execution, burst)
all check NULLs, integers and durations the same way, with the NDK's result
codes.
"""

from __future__ import annotations

from typing import Any

from .codes import ResultCode
from .errors import BadDataError, NNError

__all__ = ["operator_index", "require", "require_duration"]


def require(value: Any, what: str) -> None:
    """NDK functions reject NULL pointers with UNEXPECTED_NULL; ``None`` is our NULL.

    Raises:
        NNError: ``UNEXPECTED_NULL`` when ``value`` is None.
    """
    if value is None:
        raise NNError(f"{what} is None", ResultCode.UNEXPECTED_NULL)


def operator_index(value: Any) -> int:
    """``int(value)`` for integers only (bools and floats are refused).

    Raises:
        TypeError: ``value`` is not an integer.
    """
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{value!r} is not an integer")
    index: int = value.__index__()
    return index


def require_duration(value: Any, what: str) -> int:
    """A duration in ns: a non-negative integer, else BAD_DATA naming ``what``."""
    try:
        value = operator_index(value)
    except TypeError:
        raise BadDataError(
            f"{what}: duration must be an integer number of nanoseconds, got {value!r}"
        ) from None
    if value < 0:
        raise BadDataError(f"{what}: duration must not be negative, got {value}")
    return int(value)
