"""Structure-aware fuzzing of the burst packet parsers.

Random words are rejected by the parsers' first check almost every time, so
they never exercise the count and dimension parsing.  Here every example
starts from a valid FmqRequestDatum / FmqResultDatum packet built by the
serializer and applies a few mutations that keep the packet plausible:
change one count (inputs, outputs, pools, shapes, dimensions) by a little,
retag one datum, flip a flag, insert or delete a datum, usually with the
declared packet size kept equal to the real one so that the first check
passes.  Each test records which rejection each example met and asserts
that the deep ones were reached.

Properties: the parser either raises ``PacketError`` or returns a request
(result) that serializes back to a packet of the same datums, with the same
tags, which parses to the same value again (words a datum does not use are
not compared: the parser ignores them, as Android's does).
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nnburst.codes import ErrorStatus
from nnburst.errors import PacketError
from nnburst.hal.packets import (
    REQUEST_DATUM,
    RESULT_DATUM,
    deserialize_request,
    deserialize_result,
    serialize_request,
    serialize_result,
)
from nnburst.hal.types import (
    DataLocation,
    MeasureTiming,
    OutputShape,
    Request,
    RequestArgument,
    Timing,
)

WORDS = 6
FUZZ = settings(
    max_examples=400,
    derandomize=True,  # the coverage assertions below must not depend on luck
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

small = st.integers(0, 8)
dims = st.lists(st.integers(0, 9), max_size=4).map(tuple)
arguments = st.one_of(
    st.just(RequestArgument(True)),
    st.builds(
        lambda p, o, d: RequestArgument(False, DataLocation(p, o, 16), d), small, small, dims
    ),
)
requests = st.builds(
    lambda i, o: Request(i, o, []), st.lists(arguments, max_size=3), st.lists(arguments, max_size=3)
)
slot_lists = st.lists(st.integers(0, 5), max_size=3)
shape_lists = st.lists(st.builds(OutputShape, dims, st.booleans()), max_size=3)

#: Rejection messages by the check they come from (the parsers' order).
REQUEST_REASONS = [
    ("first datum", r"starts with packet information"),
    ("declared size", r"packet declares"),
    ("counts", r"cannot fit in"),
    ("operand tag", r"expected operand information"),
    ("has no value", r"hasNoValue is"),
    ("dimension count", r"dimensions overrun"),
    ("dimension tag", r"expected dimension values"),
    ("pool count", r"datums remain for"),
    ("pool tag", r"pool identifiers"),
    ("measure tag", r"last datum must be measureTiming"),
    ("measure value", r"measureTiming is"),
]
RESULT_REASONS = [
    ("first datum", r"starts with packet information"),
    ("declared size", r"packet declares"),
    ("status", r"unknown error status"),
    ("counts", r"cannot fit in"),
    ("operand tag", r"expected operand information"),
    ("sufficient", r"isSufficient is"),
    ("dimension count", r"dimensions overrun"),
    ("dimension tag", r"expected dimension values"),
    ("timing", r"executionTiming"),
]


def reason(error: PacketError, table: list[tuple[str, str]]) -> str:
    for name, pattern in table:
        if re.search(pattern, str(error)):
            return name
    raise AssertionError(f"a rejection with no known reason: {error}")


def as_words(packet: np.ndarray) -> list[list[int]]:
    return packet.view("<u4").reshape(-1, WORDS).tolist()


def to_packet(rows: list[list[int]], dtype: np.dtype) -> np.ndarray:
    return np.array(rows, dtype="<u4").reshape(-1).view(dtype)


def same_datums(a: list[list[int]], b: list[list[int]]) -> bool:
    return len(a) == len(b) and all(x[0] & 0xFF == y[0] & 0xFF for x, y in zip(a, b))


def mutate(
    data: st.DataObject,
    rows: list[list[int]],
    tags: list[int],
    size_word: int,
    count_words: list[int],
    value_words: list[int],
    info_tags: tuple[int, ...],
    dims_word: int,
) -> list[list[int]]:
    """One to three plausible mutations; the declared size usually follows
    the real one so the first check passes.  ``info_tags`` name the operand
    information datums, whose dimension count sits in word ``dims_word``."""
    rows = [list(r) for r in rows]
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        kind = data.draw(
            st.sampled_from(["count", "dims", "retag", "value", "last", "insert", "delete"]),
            label="kind",
        )
        infos = [i for i, row in enumerate(rows) if row[0] in info_tags]
        if kind == "dims" and infos:  # one operand's dimension count, a little or far off
            at = data.draw(st.sampled_from(infos), label="operand")
            rows[at][dims_word] = data.draw(
                st.sampled_from([0, 1, 2, 3, 7, 2**31, 2**32 - 1]), label="dims"
            )
            kind = "done"
        at = data.draw(st.integers(0, len(rows) - 1), label="datum")
        if kind in ("retag", "insert", "delete") and at == 0 and len(rows) > 1:
            at = data.draw(st.integers(0, len(rows) - 1), label="datum again")  # datum 0 less often
        if kind == "last":  # the trailing datum: measureTiming or executionTiming
            kind, at = "value", len(rows) - 1
        if kind == "count":  # a packet count, or a datum's dimension count, nudged
            column = data.draw(st.sampled_from(count_words), label="count word")
            delta = data.draw(st.sampled_from([-2, -1, 1, 2, 1000, 2**31]), label="delta")
            rows[at][column] = (rows[at][column] + delta) % 2**32
        elif kind == "retag":
            rows[at][0] = data.draw(st.sampled_from(tags), label="tag")
        elif kind == "value":  # a flag or enum word: hasNoValue, isSufficient, measure, status
            column = data.draw(st.sampled_from(value_words), label="value word")
            rows[at][column] = data.draw(st.sampled_from([0, 1, 2, 5, 2**32 - 1]), label="value")
        elif kind == "insert":
            tag = data.draw(st.sampled_from(tags), label="inserted tag")
            rows.insert(at, [tag, 1, 1, 1, 1, 1])
        elif kind == "delete" and len(rows) > 1:
            del rows[at]
        if data.draw(st.integers(0, 9), label="fix size") < 8 and rows:
            rows[0][size_word] = len(rows)
    return rows


@FUZZ
@given(requests, st.sampled_from(MeasureTiming), slot_lists, st.data())
def _request_example(reasons: Counter, request, measure, slots, data):
    rows = as_words(serialize_request(request, measure, slots))
    request_tags = list(range(7))
    rows = mutate(data, rows, request_tags, 1, [2, 3, 4, 5], [1], (1, 3), 5)
    packet = to_packet(rows, REQUEST_DATUM)
    try:
        parsed, parsed_slots, parsed_measure = deserialize_request(packet)
    except PacketError as exc:
        reasons[reason(exc, REQUEST_REASONS)] += 1
        return
    reasons["accepted"] += 1
    again = serialize_request(parsed, parsed_measure, parsed_slots)
    assert same_datums(as_words(again), rows), (
        "an accepted packet does not serialize back to itself"
    )
    assert deserialize_request(again) == (parsed, parsed_slots, parsed_measure)


@FUZZ
@given(st.sampled_from(ErrorStatus), shape_lists, st.data())
def _result_example(reasons: Counter, status, shapes, data):
    rows = as_words(serialize_result(status, shapes, Timing(3, 4)))
    rows = mutate(data, rows, list(range(4)), 2, [3, 4], [2, 3], (1,), 3)
    packet = to_packet(rows, RESULT_DATUM)
    try:
        parsed_status, parsed_shapes, timing = deserialize_result(packet)
    except PacketError as exc:
        reasons[reason(exc, RESULT_REASONS)] += 1
        return
    reasons["accepted"] += 1
    again = serialize_result(parsed_status, parsed_shapes, timing)
    assert same_datums(as_words(again), rows), (
        "an accepted packet does not serialize back to itself"
    )
    assert deserialize_result(again) == (parsed_status, parsed_shapes, timing)


def test_mutated_request_packets_reach_the_count_and_dimension_checks():
    reasons: Counter = Counter()
    _request_example(reasons)
    total = sum(reasons.values())
    assert reasons["first datum"] + reasons["declared size"] < total / 4, reasons
    deep = {
        "counts",
        "operand tag",
        "has no value",
        "dimension count",
        "dimension tag",
        "pool count",
        "pool tag",
        "measure tag",
        "measure value",
    }
    assert deep <= set(reasons), f"never reached: {deep - set(reasons)}; {reasons}"
    assert reasons["accepted"] > 0, reasons


def test_mutated_result_packets_reach_the_count_and_dimension_checks():
    reasons: Counter = Counter()
    _result_example(reasons)
    total = sum(reasons.values())
    assert reasons["first datum"] + reasons["declared size"] < total / 4, reasons
    deep = {
        "status",
        "counts",
        "operand tag",
        "sufficient",
        "dimension count",
        "dimension tag",
        "timing",
    }
    assert deep <= set(reasons), f"never reached: {deep - set(reasons)}; {reasons}"
    assert reasons["accepted"] > 0, reasons


def test_a_request_with_one_dimension_too_many_is_rejected_not_misread():
    """The canonical deep case, spelled out: a dimension count one higher
    than the dimension datums that follow."""
    request = Request([RequestArgument(False, DataLocation(0, 0, 16), (2, 2))], [], [])
    rows = as_words(serialize_request(request, MeasureTiming.NO, [0]))
    rows[1][5] = 3  # the input claims 3 dimensions; the third "dimension" is the pool datum
    try:
        deserialize_request(to_packet(rows, REQUEST_DATUM))
    except PacketError as exc:
        assert reason(exc, REQUEST_REASONS) in ("dimension tag", "pool count")
    else:
        raise AssertionError("accepted a dimension that is a pool identifier")
