"""HAL 1.2 value types: what a driver receives and returns for one execution.

These mirror ``neuralnetworks@1.0-1.2 types.hal`` field for field, so that a
request serialized into burst packets and one passed to
``execute_synchronously`` carry exactly the same information.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..codes import DeviceTypeCode, ErrorStatus, OperandCode

__all__ = [
    "NO_TIMING_US",
    "Capabilities",
    "DataLocation",
    "DeviceType",
    "ErrorStatus",
    "MeasureTiming",
    "OutputShape",
    "PerformanceInfo",
    "DEFAULT_LOOP_TIMEOUT_NS",
    "MAXIMUM_LOOP_TIMEOUT_NS",
    "Request",
    "RequestArgument",
    "Timing",
    "pool_view",
]

#: A Timing field that is not available (``UINT64_MAX``).
NO_TIMING_US = 2**64 - 1

#: HAL 1.3 ``LoopTimeoutDurationNs``: DEFAULT bounds WHILE loops of a request
#: that gives no timeout (HAL 1.2 burst packets carry none); MAXIMUM caps any
#: timeout given.  The NDK's getDefault/getMaximumLoopTimeout return these.
DEFAULT_LOOP_TIMEOUT_NS = 2_000_000_000
MAXIMUM_LOOP_TIMEOUT_NS = 15_000_000_000


class MeasureTiming(enum.IntEnum):
    NO = 0
    YES = 1


class DeviceType(enum.IntEnum):
    OTHER = int(DeviceTypeCode.OTHER)
    CPU = int(DeviceTypeCode.CPU)
    GPU = int(DeviceTypeCode.GPU)
    ACCELERATOR = int(DeviceTypeCode.ACCELERATOR)


# The per-execution value types are NamedTuples: immutable like the HAL's
# structs, and cheap to build on the burst's hot path (a frozen dataclass
# costs several times more per instance).


class Timing(NamedTuple):
    """Microseconds; ``NO_TIMING_US`` means not available.  Device time ≤ driver time."""

    time_on_device: int = NO_TIMING_US
    time_in_driver: int = NO_TIMING_US


NO_TIMING = Timing()


class OutputShape(NamedTuple):
    dimensions: tuple[int, ...]
    is_sufficient: bool = True


class DataLocation(NamedTuple):
    pool_index: int = 0
    offset: int = 0
    length: int = 0


class RequestArgument(NamedTuple):
    has_no_value: bool = False
    location: DataLocation = DataLocation()
    dimensions: tuple[int, ...] = ()


@dataclass
class Request:
    """One execution's arguments; locations index ``pools``.

    A pool is any object exposing a writable buffer: a
    :class:`~nnburst.hal.memory.MappedMemory` such as ``nnburst.Memory``
    (shared, mappable by another process) or, in-process only, a bytearray or
    numpy array.  A burst replaces pools by slots on the wire.
    """

    inputs: list[RequestArgument]
    outputs: list[RequestArgument]
    pools: list[Any] = field(default_factory=list)


def pool_view(pool: Any) -> memoryview:
    """A flat byte view of a pool, whatever object backs it."""
    buffer = getattr(pool, "buffer", pool)
    return memoryview(buffer).cast("B")


@dataclass(frozen=True)
class PerformanceInfo:
    """Relative cost versus the CPU reference (lower is better), as HAL 1.0."""

    exec_time: float = 1.0
    power_usage: float = 1.0


@dataclass
class Capabilities:
    """What a device declares about its speed, per operand type and per control-flow op."""

    relaxed_float32_to_float16_scalar: PerformanceInfo = PerformanceInfo()
    relaxed_float32_to_float16_tensor: PerformanceInfo = PerformanceInfo()
    operand_performance: dict[OperandCode, PerformanceInfo] = field(default_factory=dict)
    if_performance: PerformanceInfo = PerformanceInfo()
    while_performance: PerformanceInfo = PerformanceInfo()

    def performance_for(self, code: OperandCode) -> PerformanceInfo:
        return self.operand_performance.get(
            OperandCode(code), PerformanceInfo(float("inf"), float("inf"))
        )
