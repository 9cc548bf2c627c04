"""The binding layer (nnburst/_bindings): one table for every C status, kernel
failures as NNError subclasses, and a deadline that reaches C unchanged."""

from __future__ import annotations

import time

import numpy as np
import pytest

from nnburst import _bindings, deadlines
from nnburst.codes import ErrorStatus, ResultCode
from nnburst.cpu.driver import cpu_device
from nnburst.cpu.ops.native import POOL_MAX, conv_f32, pool_f32
from nnburst.cpu.ops.window_geometry import Window2D
from nnburst.errors import (
    BadDataError,
    BrokenResourceError,
    ClosedResourceError,
    CorruptQueueError,
    DeadlineExceeded,
    NNError,
    OutOfMemoryError,
    UnsupportedError,
)
from nnburst.hal.burst_controller import ExecutionBurstController
from nnburst.hal.types import MeasureTiming

from .burst_models import Pools, add_model


@pytest.mark.parametrize(
    ("errno", "cls", "phrase"),
    [
        (71, CorruptQueueError, "the shared queue header or counters are corrupt"),
        (9, ClosedResourceError, "the queue was closed"),
        (32, BrokenResourceError, "the peer closed or tore down the queue"),
        (22, BadDataError, "invalid argument"),
        (110, DeadlineExceeded, "timed out"),
        (95, UnsupportedError, "not built or not supported by this CPU"),
        (12, OutOfMemoryError, "out of memory"),
        (38, UnsupportedError, "not available in this C library"),
        (5, NNError, "failed with errno 5"),  # none C returns: still an NNError
    ],
)
def test_every_c_status_is_one_nnerror(errno, cls, phrase):
    error = _bindings.error_for(-errno, "call")
    assert type(error) is cls
    assert str(error) == f"{cls.default_code.name}: call: {phrase}"


def test_a_teardown_of_a_queue_closed_here_is_ours_not_the_peers():
    error = _bindings.error_for(-32, "read_blocking", closed_locally=True)
    assert type(error) is ClosedResourceError


def test_a_kernel_path_this_build_has_not_got_is_unsupported_and_the_operation_failed():
    x = np.zeros((1, 4, 4, 8), np.float32)
    weights = np.zeros((72, 16), np.float32)
    with pytest.raises(UnsupportedError, match="conv path 99: not built or not supported") as info:
        conv_f32(
            x,
            weights,
            (3, 3),
            np.zeros(8, np.float32),
            Window2D(0, 0, 0, 0, 1, 1, 1, 1, 2, 2),
            path=99,
        )
    assert info.value.code == ResultCode.OP_FAILED
    assert isinstance(info.value, ValueError)  # what callers that fall back to numpy catch


def test_a_kernel_refusing_its_window_is_bad_data_and_the_operation_failed():
    padded = np.zeros((1, 4, 4, 8), np.float32)
    with pytest.raises(BadDataError, match="does not fit the input") as info:
        pool_f32(padded, (3, 3), Window2D(0, 0, 0, 0, 1, 1, 1, 1, 3, 2), POOL_MAX)  # rows 0..4 of 4
    assert info.value.code == ResultCode.OP_FAILED


@pytest.fixture
def controller():
    with ExecutionBurstController.create(cpu_device().prepare_model(add_model())) as c:
        yield c


def _spy_round_trips(controller) -> list[int | None]:
    """The deadline of every round trip the controller makes, as C's wrapper gets it."""
    seen: list[int | None] = []
    real = controller._round_trip

    def spy(n, deadline_ns, spin_ns):
        seen.append(deadline_ns)
        return real(n, deadline_ns, spin_ns)

    controller._round_trip = spy
    return seen


def test_the_burst_controller_passes_the_callers_deadline_on_unchanged(controller):
    pools = Pools()
    try:
        seen = _spy_round_trips(controller)
        deadline = deadlines.after(30_000_000_000)
        status = controller.compute(pools.request(), MeasureTiming.NO, pools.keys, deadline)[0]
        assert status == ErrorStatus.NONE
        assert seen == [deadline]
        # No deadline: still one absolute value, the wedged-server limit from now.
        before = time.monotonic_ns()
        controller.compute(pools.request(), MeasureTiming.NO, pools.keys)
        limit = controller._wait_limit_ns
        assert before + limit <= seen[1] <= time.monotonic_ns() + limit
    finally:
        pools.close()


def test_a_passed_deadline_sends_nothing(controller):
    pools = Pools()
    try:
        seen = _spy_round_trips(controller)
        status = controller.compute(
            pools.request(), MeasureTiming.NO, pools.keys, time.monotonic_ns() - 1
        )[0]
        assert status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
        assert seen == []
    finally:
        pools.close()
