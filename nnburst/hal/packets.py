"""Burst packets: ``FmqRequestDatum`` / ``FmqResultDatum`` in the HAL 1.2 layout.

Both datums are 24 bytes: a discriminator byte, padding, then a union (at
offset 4 for requests, 8 for results, where a 64-bit Timing sets the
alignment).  A packet is a sequence of datums whose first one carries the
packet's length; the order and size rules are HAL 1.2's (see
docs/architecture.md, "Packet layout").

Packets are built and parsed as flat runs of little-endian 32-bit words
(six per datum), converted to and from numpy in one call each.  Deserializers treat the packet
as hostile: every count is checked against the packet's real length before
it is used, and anything malformed is rejected whole with
:class:`~nnburst.errors.PacketError`.
"""

from __future__ import annotations

import array
from collections.abc import Sequence

import numpy as np

from ..codes import ErrorStatus
from ..errors import PacketError
from .types import (
    DataLocation,
    MeasureTiming,
    OutputShape,
    Request,
    RequestArgument,
    Timing,
)

__all__ = [
    "REQUEST_DATUM",
    "RESULT_DATUM",
    "RequestTag",
    "ResultTag",
    "deserialize_request",
    "deserialize_result",
    "error_result_packet",
    "parse_request_words",
    "parse_result_words",
    "request_words",
    "result_words",
    "serialize_request",
    "serialize_result",
]

WORDS = 6  # a datum is six 32-bit words


class RequestTag:
    """Discriminators of ``FmqRequestDatum`` (declaration order in types.hal)."""

    PACKET_INFORMATION = 0
    INPUT_OPERAND_INFORMATION = 1
    INPUT_OPERAND_DIMENSION_VALUE = 2
    OUTPUT_OPERAND_INFORMATION = 3
    OUTPUT_OPERAND_DIMENSION_VALUE = 4
    POOL_IDENTIFIER = 5
    MEASURE_TIMING = 6


class ResultTag:
    """Discriminators of ``FmqResultDatum``."""

    PACKET_INFORMATION = 0
    OPERAND_INFORMATION = 1
    OPERAND_DIMENSION_VALUE = 2
    EXECUTION_TIMING = 3


def _union(names: list[str], formats: list[str], offsets: list[int]) -> np.dtype:
    return np.dtype(
        {
            "names": ["discriminator", *names],
            "formats": ["u1", *formats],
            "offsets": [0, *offsets],
            "itemsize": 24,
        }
    )


#: One FmqRequestDatum; the named fields overlap as the union's members do.
REQUEST_DATUM = _union(
    # packetInformation
    [
        "packet_size",
        "number_of_input_operands",
        "number_of_output_operands",
        "number_of_pools",
        # operandInformation (input or output)
        "has_no_value",
        "pool_index",
        "offset",
        "length",
        "number_of_dimensions",
        # dimension value / pool identifier / measureTiming
        "dimension_value",
        "pool_identifier",
        "measure_timing",
    ],
    ["<u4", "<u4", "<u4", "<u4", "u1", "<u4", "<u4", "<u4", "<u4", "<u4", "<i4", "<i4"],
    [4, 8, 12, 16, 4, 8, 12, 16, 20, 4, 4, 4],
)

#: One FmqResultDatum.
RESULT_DATUM = _union(
    [
        "packet_size",
        "error_status",
        "number_of_operands",
        "is_sufficient",
        "number_of_dimensions",
        "dimension_value",
        "time_on_device",
        "time_in_driver",
    ],
    ["<u4", "<i4", "<u4", "u1", "<u4", "<u4", "<u8", "<u8"],
    [8, 12, 16, 8, 12, 8, 8, 16],
)


# -- requests ---------------------------------------------------------------

# Packets are short (a handful to a few hundred datums), and numpy's fixed
# cost per call (~1 µs) would dominate: a packet is converted once between
# numpy and a flat list of 32-bit words (one ``tolist`` / one buffer copy)
# and everything else is list slicing.  Word ``j`` of datum ``i`` is
# ``flat[6*i + j]``; a run of datums' values is one strided slice, so no
# Python loop ever walks single datums, only operands.

assert array.array("I").itemsize == 4

# Builds a NamedTuple from values already checked, skipping the generated
# Python-level __new__ (a third of the cost of parsing a small packet).
_new_tuple = tuple.__new__


def _to_packet(flat: list[int], dtype: np.dtype) -> np.ndarray:
    return np.frombuffer(array.array("I", flat), dtype="<u4").view(dtype)


def _datums(tag: int, values: Sequence[int], column: int) -> list[int]:
    """One datum per value: ``tag`` in word 0, the value in word ``column``."""
    block = [tag, 0, 0, 0, 0, 0] * len(values)
    block[column::WORDS] = values
    return block


def _flat_words(packet: np.ndarray, dtype: np.dtype) -> list[int]:
    """The packet's words as a list."""
    if type(packet) is not np.ndarray or packet.dtype != dtype or packet.ndim != 1:
        raise PacketError(f"a packet is a 1-D numpy array of {dtype}")
    return np.ascontiguousarray(packet).view("<u4").tolist()


def serialize_request(
    request: Request, measure: MeasureTiming | int, slots: Sequence[int]
) -> np.ndarray:
    """The request packet: pools replaced by their ``slots``, in pool order."""
    return _to_packet(request_words(request, measure, slots), REQUEST_DATUM)


def request_words(
    request: Request, measure: MeasureTiming | int, slots: Sequence[int]
) -> list[int]:
    """The request packet as a flat list of words (what a burst writes into its FMQ)."""
    flat = [
        RequestTag.PACKET_INFORMATION,
        0,
        len(request.inputs),
        len(request.outputs),
        len(slots),
        0,
    ]
    for arguments, info_tag in (
        (request.inputs, RequestTag.INPUT_OPERAND_INFORMATION),
        (request.outputs, RequestTag.OUTPUT_OPERAND_INFORMATION),
    ):
        for a in arguments:
            location = a.location
            flat += (
                info_tag,
                int(a.has_no_value),
                location.pool_index,
                location.offset,
                location.length,
                len(a.dimensions),
            )
            if a.dimensions:
                flat += _datums(info_tag + 1, a.dimensions, 1)  # dimension tag = info tag + 1
    if slots:
        flat += _datums(RequestTag.POOL_IDENTIFIER, [slot & 0xFFFFFFFF for slot in slots], 1)
    flat += (RequestTag.MEASURE_TIMING, int(measure), 0, 0, 0, 0)
    flat[1] = len(flat) // WORDS
    return flat


def _read_arguments(
    flat: Sequence[int], size: int, position: int, count: int, info_tag: int
) -> tuple[list[RequestArgument], int]:
    """Parse ``count`` operand infos and their dimensions starting at ``position``."""
    arguments = []
    for _ in range(count):  # each operand takes at least one datum: bounded by size
        base = position * WORDS
        if position >= size or flat[base] & 0xFF != info_tag:
            raise PacketError(f"datum {position}: expected operand information (tag {info_tag})")
        has_no_value, pool, offset, length, ndims = flat[base + 1 : base + 6]
        if has_no_value > 1:
            raise PacketError(f"datum {position}: hasNoValue is {has_no_value}")
        end = position + 1 + ndims
        if end > size:
            raise PacketError(f"datum {position}: {ndims} dimensions overrun the packet")
        if ndims and {t & 0xFF for t in flat[base + WORDS : end * WORDS : WORDS]} != {info_tag + 1}:
            raise PacketError(f"datums {position + 1}..{end - 1}: expected dimension values")
        dims = tuple(flat[base + WORDS + 1 : end * WORDS : WORDS])
        location = _new_tuple(DataLocation, (pool, offset, length))
        arguments.append(_new_tuple(RequestArgument, (has_no_value == 1, location, dims)))
        position = end
    return arguments, position


def deserialize_request(packet: np.ndarray) -> tuple[Request, list[int], MeasureTiming]:
    """(request without pools, slots, measure) from a request packet.

    Raises:
        PacketError: wrong tag, wrong size, counts that overrun: the whole
            packet is rejected and nothing past its end is read.
    """
    return parse_request_words(_flat_words(packet, REQUEST_DATUM))


def parse_request_words(flat: Sequence[int]) -> tuple[Request, list[int], MeasureTiming]:
    """:func:`deserialize_request` on a flat list of words (6 per datum)."""
    size = len(flat) // WORDS
    if size < 2 or flat[0] & 0xFF != RequestTag.PACKET_INFORMATION:
        raise PacketError(
            "a request packet starts with packet information and has at least 2 datums"
        )
    declared, n_inputs, n_outputs, n_pools = flat[1:5]
    if declared != size:
        raise PacketError(f"packet declares {declared} datums but holds {size}")
    if n_inputs + n_outputs + n_pools > size - 2:
        raise PacketError(
            f"{n_inputs} inputs, {n_outputs} outputs and {n_pools} pools cannot fit in {size} datums"
        )
    inputs, position = _read_arguments(
        flat, size, 1, n_inputs, RequestTag.INPUT_OPERAND_INFORMATION
    )
    outputs, position = _read_arguments(
        flat, size, position, n_outputs, RequestTag.OUTPUT_OPERAND_INFORMATION
    )
    if position + n_pools + 1 != size:
        raise PacketError(
            f"after the operands, {size - position} datums remain for {n_pools} pools and timing"
        )
    last = (size - 1) * WORDS
    if n_pools and {t & 0xFF for t in flat[position * WORDS : last : WORDS]} != {
        RequestTag.POOL_IDENTIFIER
    }:
        raise PacketError(f"datums {position}..{size - 2}: expected {n_pools} pool identifiers")
    slots = [
        s - (1 << 32) if s >= 1 << 31 else s for s in flat[position * WORDS + 1 : last : WORDS]
    ]
    if flat[last] & 0xFF != RequestTag.MEASURE_TIMING:
        raise PacketError("the last datum must be measureTiming")
    measure = flat[last + 1]
    if measure > MeasureTiming.YES:
        raise PacketError(f"measureTiming is {measure}")
    return Request(inputs, outputs, []), slots, _MEASURES[measure]


# -- results -----------------------------------------------------------------


def serialize_result(
    status: ErrorStatus | int, output_shapes: Sequence[OutputShape], timing: Timing
) -> np.ndarray:
    """The result packet; padding bytes are zero (VTS validateBurstSanitized)."""
    return _to_packet(result_words(status, output_shapes, timing), RESULT_DATUM)


def result_words(
    status: ErrorStatus | int, output_shapes: Sequence[OutputShape], timing: Timing
) -> list[int]:
    """The result packet as a flat list of words."""
    flat = [ResultTag.PACKET_INFORMATION, 0, 0, int(status) & 0xFFFFFFFF, len(output_shapes), 0]
    for shape in output_shapes:
        flat += (
            ResultTag.OPERAND_INFORMATION,
            0,
            int(shape.is_sufficient),
            len(shape.dimensions),
            0,
            0,
        )
        if shape.dimensions:
            flat += _datums(ResultTag.OPERAND_DIMENSION_VALUE, shape.dimensions, 2)
    on_device, in_driver = timing.time_on_device, timing.time_in_driver
    flat += (
        ResultTag.EXECUTION_TIMING,
        0,
        on_device & 0xFFFFFFFF,
        on_device >> 32,
        in_driver & 0xFFFFFFFF,
        in_driver >> 32,
    )
    flat[2] = len(flat) // WORDS
    return flat


def error_result_packet(status: ErrorStatus = ErrorStatus.GENERAL_FAILURE) -> np.ndarray:
    """The 2-datum failure packet: status, no shapes, no timing."""
    return serialize_result(status, [], Timing())


#: The words of the 2-datum GENERAL_FAILURE packet.
ERROR_RESULT_WORDS = result_words(ErrorStatus.GENERAL_FAILURE, [], Timing())


_STATUSES = {int(s): s for s in ErrorStatus}
_MEASURES = (MeasureTiming.NO, MeasureTiming.YES)


def deserialize_result(packet: np.ndarray) -> tuple[ErrorStatus, list[OutputShape], Timing]:
    """(status, output shapes, timing) from a result packet.

    Raises:
        PacketError: malformed; the whole packet is rejected.
    """
    return parse_result_words(_flat_words(packet, RESULT_DATUM))


def parse_result_words(flat: Sequence[int]) -> tuple[ErrorStatus, list[OutputShape], Timing]:
    """:func:`deserialize_result` on a flat list of words (6 per datum)."""
    size = len(flat) // WORDS
    if size < 2 or flat[0] & 0xFF != ResultTag.PACKET_INFORMATION:
        raise PacketError(
            "a result packet starts with packet information and has at least 2 datums"
        )
    declared, status, n_operands = flat[2:5]
    status = status - (1 << 32) if status >= 1 << 31 else status  # errorStatus is an int32
    if declared != size:
        raise PacketError(f"packet declares {declared} datums but holds {size}")
    if status not in _STATUSES:
        raise PacketError(f"unknown error status {status}")
    if n_operands > size - 2:
        raise PacketError(f"{n_operands} output shapes cannot fit in {size} datums")
    shapes = []
    position = 1
    for _ in range(n_operands):
        base = position * WORDS
        if flat[base] & 0xFF != ResultTag.OPERAND_INFORMATION:
            raise PacketError(f"datum {position}: expected operand information")
        sufficient, ndims = flat[base + 2 : base + 4]
        if sufficient > 1:
            raise PacketError(f"datum {position}: isSufficient is {sufficient}")
        end = position + 1 + ndims
        if end > size - 1:
            raise PacketError(f"datum {position}: {ndims} dimensions overrun the packet")
        if ndims and {t & 0xFF for t in flat[base + WORDS : end * WORDS : WORDS]} != {
            ResultTag.OPERAND_DIMENSION_VALUE
        }:
            raise PacketError(f"datums {position + 1}..{end - 1}: expected dimension values")
        dims = tuple(flat[base + WORDS + 2 : end * WORDS : WORDS])
        shapes.append(_new_tuple(OutputShape, (dims, sufficient == 1)))
        position = end
    base = position * WORDS
    if position != size - 1 or flat[base] & 0xFF != ResultTag.EXECUTION_TIMING:
        raise PacketError("the last datum must be executionTiming, right after the shapes")
    lo_device, hi_device, lo_driver, hi_driver = flat[base + 2 : base + 6]
    return (
        _STATUSES[status],
        shapes,
        Timing(lo_device | hi_device << 32, lo_driver | hi_driver << 32),
    )
