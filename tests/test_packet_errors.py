"""Burst packet parsers: each complaint names the datum and the count.

A driver's log line is all a developer gets when a peer sends a bad packet,
so the message must point at the right datums.  Packets start valid (built
by the serializer's word form) and one word is broken per case.
"""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import ErrorStatus
from nnburst.errors import PacketError
from nnburst.hal.packets import (
    WORDS,
    RequestTag,
    ResultTag,
    parse_request_words,
    parse_result_words,
    request_words,
    result_words,
)
from nnburst.hal.types import (
    DataLocation,
    MeasureTiming,
    OutputShape,
    Request,
    RequestArgument,
    Timing,
)


def result(shapes=((2, 3),)) -> list[int]:
    return result_words(
        ErrorStatus.NONE, [OutputShape(s, True) for s in shapes], Timing(5, 2**40 + 7)
    )


def request(pools=(4, -2)) -> list[int]:
    req = Request([RequestArgument(False, DataLocation(0, 0, 48), (3, 4))], [], [])
    return request_words(req, MeasureTiming.YES, list(pools))


def test_a_valid_result_parses_with_its_timing():
    assert parse_result_words(result()) == (
        ErrorStatus.NONE,
        [OutputShape((2, 3), True)],
        Timing(5, 2**40 + 7),
    )


@pytest.mark.parametrize(("word", "shown"), [(0xFFFFFFFF, -1), (0x80000000, -(2**31))])
def test_an_unknown_status_is_shown_as_the_int32_it_is(word, shown):
    flat = result()
    flat[3] = word
    with pytest.raises(PacketError, match=rf"unknown error status {shown}$"):
        parse_result_words(flat)


def test_a_result_without_packet_information_is_refused():
    with pytest.raises(
        PacketError,
        match="a result packet starts with packet information and has at least 2 datums$",
    ):
        parse_result_words(result()[:WORDS])


def test_a_result_whose_dimensions_are_not_dimensions_names_their_datums():
    flat = result()
    flat[3 * WORDS] = ResultTag.OPERAND_INFORMATION  # datum 3 (second dimension)
    with pytest.raises(PacketError, match=r"datums 2\.\.3: expected dimension values$"):
        parse_result_words(flat)


def test_a_result_whose_shapes_leave_no_room_for_timing_is_refused():
    flat = result()
    flat[WORDS + 3] = 3  # three dimensions: datum 4, the timing, would be one
    with pytest.raises(PacketError, match=r"datum 1: 3 dimensions overrun the packet$"):
        parse_result_words(flat)


def test_a_result_that_does_not_end_in_timing_is_refused():
    flat = result()
    flat[-WORDS] = ResultTag.OPERAND_DIMENSION_VALUE
    with pytest.raises(
        PacketError, match="the last datum must be executionTiming, right after the shapes$"
    ):
        parse_result_words(flat)


def test_a_result_with_more_shapes_than_room_names_the_counts():
    flat = result(shapes=((),))  # 3 datums: information, one shape, timing
    flat[4] = 2
    with pytest.raises(PacketError, match=r"2 output shapes cannot fit in 3 datums$"):
        parse_result_words(flat)


def test_a_valid_request_parses_pool_slots_as_int32():
    parsed, slots, measure = parse_request_words(request())
    assert slots == [4, -2]
    assert measure == MeasureTiming.YES
    assert parsed.pools == []


def test_a_request_without_packet_information_is_refused():
    with pytest.raises(
        PacketError,
        match="a request packet starts with packet information and has at least 2 datums$",
    ):
        parse_request_words(request()[:WORDS])


def test_a_request_that_does_not_end_in_measure_timing_is_refused():
    flat = request()
    flat[-WORDS] = RequestTag.POOL_IDENTIFIER
    with pytest.raises(PacketError, match="the last datum must be measureTiming$"):
        parse_request_words(flat)


def test_a_request_whose_pools_are_not_pools_names_their_datums():
    flat = request()
    size = len(flat) // WORDS
    flat[(size - 3) * WORDS] = RequestTag.MEASURE_TIMING  # the first pool
    with pytest.raises(
        PacketError, match=rf"datums {size - 3}\.\.{size - 2}: expected 2 pool identifiers$"
    ):
        parse_request_words(flat)


def test_a_request_with_pools_left_over_names_the_remaining_datums():
    flat = request()
    size = len(flat) // WORDS
    flat[4] = 1  # one pool declared, two sent
    with pytest.raises(
        PacketError,
        match=rf"after the operands, {size - 4} datums remain for 1 pools and timing$",
    ):
        parse_request_words(flat)


def test_a_datum_union_has_the_hal_layout():
    """Every datum is a 24-byte union led by a one-byte discriminator (HAL 1.2's
    FmqRequestDatum/FmqResultDatum); built here at test time, not only at import."""
    from nnburst.hal import packets as packet_module

    union = packet_module._union(["value"], ["<u4"], [4])
    assert union.itemsize == 24
    assert union.names == ("discriminator", "value")
    assert union.fields["discriminator"][:2] == (np.dtype("u1"), 0)
    assert union.fields["value"][:2] == (np.dtype("<u4"), 4)
    assert packet_module.REQUEST_DATUM.itemsize == packet_module.RESULT_DATUM.itemsize == 24
