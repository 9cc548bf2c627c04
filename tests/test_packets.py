"""Burst packets: HAL 1.2 layout, round trips, and rejection of malformed input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nnburst.codes import ErrorStatus
from nnburst.errors import PacketError
from nnburst.hal.packets import (
    REQUEST_DATUM,
    RESULT_DATUM,
    RequestTag,
    ResultTag,
    deserialize_request,
    deserialize_result,
    error_result_packet,
    serialize_request,
    serialize_result,
)
from nnburst.hal.types import (
    NO_TIMING_US,
    DataLocation,
    MeasureTiming,
    OutputShape,
    Request,
    RequestArgument,
    Timing,
)

u32 = st.integers(0, 2**32 - 1)
dims = st.lists(u32, max_size=6).map(tuple)
arguments = st.one_of(
    st.just(RequestArgument(True)),
    st.builds(
        lambda p, o, n, d: RequestArgument(False, DataLocation(p, o, n), d), u32, u32, u32, dims
    ),
)
requests = st.builds(
    lambda i, o: Request(i, o, []), st.lists(arguments, max_size=5), st.lists(arguments, max_size=5)
)
slots = st.lists(st.integers(-(2**31), 2**31 - 1), max_size=6)
timings = st.builds(Timing, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
shapes = st.lists(st.builds(OutputShape, dims, st.booleans()), max_size=5)


def test_datums_have_the_hal_1_2_layout():
    assert REQUEST_DATUM.itemsize == 24 and RESULT_DATUM.itemsize == 24
    assert REQUEST_DATUM.fields["discriminator"][1] == 0
    assert REQUEST_DATUM.fields["packet_size"][1] == 4  # request union at offset 4
    assert REQUEST_DATUM.fields["number_of_dimensions"][1] == 20
    assert RESULT_DATUM.fields["packet_size"][1] == 8  # result union at offset 8 (Timing alignment)
    assert RESULT_DATUM.fields["is_sufficient"][1] == 8
    assert RESULT_DATUM.fields["number_of_dimensions"][1] == 12
    assert RESULT_DATUM.fields["time_in_driver"][1] == 16


def test_request_packet_order_and_size_follow_the_hal():
    request = Request(
        [
            RequestArgument(False, DataLocation(0, 0, 64), (1, 2, 2, 4)),
            RequestArgument(False, DataLocation(0, 64, 64), (1, 2, 2, 4)),
        ],
        [RequestArgument(False, DataLocation(1, 0, 16), ())],
        [],
    )
    packet = serialize_request(request, MeasureTiming.YES, [3, 7])
    assert len(packet) == 2 + 2 + 1 + 2 + 8  # the spec's example: 15
    assert packet["discriminator"].tolist() == [0, 1, 2, 2, 2, 2, 1, 2, 2, 2, 2, 3, 5, 5, 6]
    assert packet[0]["packet_size"] == 15
    assert packet["pool_identifier"][12:14].tolist() == [3, 7]
    assert packet[14]["measure_timing"] == 1


@given(requests, st.sampled_from(MeasureTiming), slots)
def test_request_round_trip(request, measure, slot_ids):
    packet = serialize_request(request, measure, slot_ids)
    assert len(packet) == 2 + len(request.inputs) + len(request.outputs) + len(slot_ids) + sum(
        len(a.dimensions) for a in [*request.inputs, *request.outputs]
    )
    assert deserialize_request(packet) == (request, slot_ids, measure)


@given(st.sampled_from(ErrorStatus), shapes, timings)
def test_result_round_trip(status, output_shapes, timing):
    packet = serialize_result(status, output_shapes, timing)
    assert deserialize_result(packet) == (status, output_shapes, timing)


@given(st.sampled_from(ErrorStatus), shapes, timings)
def test_result_padding_bytes_are_zero(status, output_shapes, timing):
    raw = serialize_result(status, output_shapes, timing).view(np.uint8).reshape(-1, 24)
    assert not raw[:, 1:8].any()  # between the discriminator and the union
    info = raw[raw[:, 0] == ResultTag.OPERAND_INFORMATION]
    assert not info[:, 9:12].any()  # OperandInformation bytes [1, 4)


def test_error_packet_is_two_datums_with_no_timing():
    packet = error_result_packet()
    assert len(packet) == 2
    assert deserialize_result(packet) == (
        ErrorStatus.GENERAL_FAILURE,
        [],
        Timing(NO_TIMING_US, NO_TIMING_US),
    )


def valid_request_packet():
    request = Request(
        [RequestArgument(False, DataLocation(0, 0, 48), (3, 4)), RequestArgument(True)],
        [RequestArgument(False, DataLocation(1, 0, 48), (3, 4))],
        [],
    )
    return serialize_request(request, MeasureTiming.YES, [0, 1])


def words(packet: np.ndarray) -> np.ndarray:
    return packet.view("<u4").reshape(-1, 6).copy()


def as_request(w: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(w).reshape(-1).view(REQUEST_DATUM)


@pytest.mark.parametrize(
    ("row", "column", "value"),
    [
        (0, 0, 9),  # unknown discriminator
        (0, 1, 99),  # packet size lies
        (0, 2, 2**32 - 1),  # inputs overrun
        (0, 4, 1000),  # pools overrun
        (1, 5, 2**31),  # dimensions overrun
        (1, 0, RequestTag.OUTPUT_OPERAND_INFORMATION),  # wrong tag
        (1, 1, 7),  # hasNoValue not a bool
        (2, 0, RequestTag.POOL_IDENTIFIER),  # a dimension that is not one
        (-1, 0, RequestTag.POOL_IDENTIFIER),  # no measureTiming
        (-1, 1, 5),  # measureTiming out of range
    ],
)
def test_malformed_request_packets_are_rejected_whole(row, column, value):
    w = words(valid_request_packet())
    w[row, column] = value
    with pytest.raises(PacketError):
        deserialize_request(as_request(w))


@pytest.mark.parametrize("cut", [0, 1, 5, -1])
def test_truncated_request_packets_are_rejected(cut):
    packet = valid_request_packet()
    with pytest.raises(PacketError):
        deserialize_request(packet[:cut] if cut else packet[:0])


def test_request_with_consistent_size_but_inflated_counts_is_rejected():
    """Android 10 read past the end here; we must not."""
    w = np.zeros((2, 6), "<u4")
    w[0, :5] = (0, 2, 0, 0, 5)
    w[1, :2] = (6, 0)
    with pytest.raises(PacketError):
        deserialize_request(as_request(w))


def test_wrong_element_type_is_rejected():
    with pytest.raises(PacketError):
        deserialize_request(np.zeros(4, np.uint32))
    with pytest.raises(PacketError):
        deserialize_result(valid_request_packet())


@pytest.mark.parametrize(
    ("row", "column", "value"),
    [
        (0, 2, 7),  # size lies
        (0, 3, 99),  # unknown status
        (0, 4, 50),  # shapes overrun
        (1, 2, 2),  # isSufficient not a bool
        (1, 3, 2**31),  # dims overrun
        (-1, 0, ResultTag.OPERAND_DIMENSION_VALUE),  # no timing
    ],
)
def test_malformed_result_packets_are_rejected(row, column, value):
    w = (
        serialize_result(ErrorStatus.NONE, [OutputShape((3, 4))], Timing(1, 2))
        .view("<u4")
        .reshape(-1, 6)
        .copy()
    )
    w[row, column] = value
    with pytest.raises(PacketError):
        deserialize_result(np.ascontiguousarray(w).reshape(-1).view(RESULT_DATUM))


@given(st.lists(st.integers(0, 2**32 - 1), min_size=0, max_size=60))
def test_random_words_never_crash_the_request_parser(raw):
    w = np.array(raw + [0] * (-len(raw) % 6), dtype="<u4").reshape(-1, 6)
    try:
        deserialize_request(as_request(w))
    except PacketError:
        pass


@given(st.lists(st.integers(0, 2**32 - 1), min_size=0, max_size=60))
def test_random_words_never_crash_the_result_parser(raw):
    w = np.array(raw + [0] * (-len(raw) % 6), dtype="<u4").reshape(-1, 6)
    try:
        deserialize_result(np.ascontiguousarray(w).reshape(-1).view(RESULT_DATUM))
    except PacketError:
        pass
