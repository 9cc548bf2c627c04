"""The FMQ and HAL surfaces named in api.md §2 and §3 exist with those names."""

from __future__ import annotations

import inspect

import nnburst.fmq as fmq
import nnburst.hal as hal


def test_fmq_names():
    assert {
        "MessageQueue",
        "Descriptor",
        "EventFlag",
        "Flavor",
        "FMQ_NOT_FULL",
        "FMQ_NOT_EMPTY",
        "Transaction",
    } <= set(fmq.__all__)
    assert fmq.Flavor.SYNCHRONIZED_READ_WRITE == 1 and fmq.Flavor.UNSYNCHRONIZED_WRITE == 2
    assert (fmq.FMQ_NOT_FULL, fmq.FMQ_NOT_EMPTY) == (0x1, 0x2)
    for method in [
        "attach",
        "is_valid",
        "available_to_write",
        "available_to_read",
        "write",
        "read",
        "read_into",
        "write_blocking",
        "read_blocking",
        "begin_write",
        "commit_write",
        "begin_read",
        "commit_read",
        "close",
    ]:
        assert callable(getattr(fmq.MessageQueue, method)), method
    for prop in ["descriptor", "quantum_size", "quantum_count", "event_flag"]:
        assert isinstance(inspect.getattr_static(fmq.MessageQueue, prop), property), prop
    assert list(inspect.signature(fmq.MessageQueue.read_blocking).parameters) == [
        "self",
        "n",
        "timeout_ns",
        "read_notification",
        "write_notification",
        "spin_ns",
        "out",
    ]
    assert list(inspect.signature(fmq.MessageQueue.write_blocking).parameters) == [
        "self",
        "items",
        "timeout_ns",
        "read_notification",
        "write_notification",
        "spin_ns",
    ]
    assert list(inspect.signature(fmq.EventFlag.wait).parameters) == [
        "self",
        "bitmask",
        "timeout_ns",
        "retry",
    ]
    assert callable(fmq.Descriptor.from_bytes) and callable(fmq.Descriptor.to_bytes)


def test_hal_names():
    expected = {
        "ErrorStatus",
        "MeasureTiming",
        "DeviceType",
        "Timing",
        "OutputShape",
        "DataLocation",
        "RequestArgument",
        "Request",
        "REQUEST_DATUM",
        "RESULT_DATUM",
        "serialize_request",
        "deserialize_request",
        "serialize_result",
        "deserialize_result",
        "IDevice",
        "IPreparedModel",
        "IBurstCallback",
        "IBurstContext",
        "IBurstExecutorWithCache",
        "ExecutionBurstServer",
        "ExecutionBurstController",
    }
    assert expected <= set(hal.__all__)
    assert [e.value for e in hal.ErrorStatus][:5] == [0, 1, 2, 3, 4]
    assert hal.NO_TIMING_US == 2**64 - 1
    assert list(inspect.signature(hal.ExecutionBurstController.compute).parameters) == [
        "self",
        "request",
        "measure",
        "memory_keys",
        "deadline_ns",
    ]
    assert "polling_window_us" in inspect.signature(hal.ExecutionBurstServer.create).parameters
    assert "polling_window_us" in inspect.signature(hal.ExecutionBurstController.create).parameters
