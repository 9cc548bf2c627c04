"""Every reject branch of the service's decoders, one test each.

Payloads are built here field by field from the layouts documented in
``nnburst/service/protocol.py`` (not with its encoders), starting from a
valid one that must decode; each test then breaks exactly one field and
expects the decoder's specific complaint.  The GET_MEMORIES reply (the app's
answer to the service's memory callback, ``service/burst.py``) is checked the
same way through a connection double that returns a crafted reply.
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from nnburst.codes import ErrorStatus, OperandCode, OperationCode, ResultCode
from nnburst.errors import BadDataError, NNError
from nnburst.hal.memory import MappedMemory
from nnburst.hal.model import Lifetime
from nnburst.service import burst as service_burst
from nnburst.service import protocol
from nnburst.service.wire import Frame

F32_CODE, I32_CODE = 10, 5  # wire dtype codes (protocol._DTYPES order)


def u8(v: int) -> bytes:
    return struct.pack("<B", v)


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def i32(v: int) -> bytes:
    return struct.pack("<i", v)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def dims(shape: tuple[int, ...] | None) -> bytes:
    if shape is None:
        return i32(-1)
    return i32(len(shape)) + b"".join(u32(d) for d in shape)


def info(
    code: int = OperandCode.TENSOR_FLOAT32, shape=(2,), quant_flag: int = 0, quant: bytes = b""
) -> bytes:
    return u32(code) + dims(shape) + struct.pack("<diB", 0.0, 0, quant_flag) + quant


def value(
    dtype_code: int = F32_CODE, shape=(2,), nbytes: int | None = None, data: bytes | None = None
) -> bytes:
    itemsize = 4
    count = int(np.prod(shape)) if shape else 1
    nbytes = count * itemsize if nbytes is None else nbytes
    data = bytes(count * itemsize) if data is None else data
    return u8(dtype_code) + u32(len(shape)) + b"".join(u32(d) for d in shape) + u64(nbytes) + data


def operand(
    info_bytes: bytes,
    lifetime: int,
    value_bytes: bytes | None = None,
    *,
    flag: int | None = None,
    ref: int = -1,
) -> bytes:
    has = (value_bytes is not None) if flag is None else flag
    return info_bytes + u32(lifetime) + u8(has) + (value_bytes or b"") + i32(ref)


def u32s(values) -> bytes:
    return u32(len(values)) + b"".join(u32(v) for v in values)


def operation(code: int, inputs, outputs) -> bytes:
    return u32(code) + u32s(inputs) + u32s(outputs)


def subgraph(operands: list[bytes], operations: list[bytes], inputs, outputs) -> bytes:
    return (
        u32(len(operands))
        + b"".join(operands)
        + u32(len(operations))
        + b"".join(operations)
        + u32s(inputs)
        + u32s(outputs)
    )


def add_operands(**replace: bytes) -> list[bytes]:
    """ADD(input, constant, fuse) -> output; ``replace`` swaps operands by ``o<i>``."""
    operands = [
        operand(info(), Lifetime.SUBGRAPH_INPUT),
        operand(info(), Lifetime.CONSTANT_COPY, value()),
        operand(info(OperandCode.INT32, ()), Lifetime.CONSTANT_COPY, value(I32_CODE, ())),
        operand(info(), Lifetime.SUBGRAPH_OUTPUT),
    ]
    for key, data in replace.items():
        operands[int(key[1:])] = data
    return operands


def model_payload(
    operands: list[bytes] | None = None,
    operations: list[bytes] | None = None,
    inputs=(0,),
    outputs=(3,),
    extra_subgraphs: list[bytes] = (),
) -> bytes:
    main = subgraph(
        add_operands() if operands is None else operands,
        [operation(OperationCode.ADD, (0, 1, 2), (3,))] if operations is None else operations,
        inputs,
        outputs,
    )
    body = u8(0) + u32(1 + len(extra_subgraphs)) + main + b"".join(extra_subgraphs)
    return u32(0) + body  # GET_SUPPORTED_OPERATIONS: device index, then the model


def rejects(payload: bytes, match: str) -> None:
    with pytest.raises(BadDataError, match=match):
        protocol.decode_device_model(payload)


def test_the_baseline_model_payload_decodes():
    device, model = protocol.decode_device_model(model_payload())
    assert device == 0
    assert [op.code for op in model.main.operations] == [OperationCode.ADD]
    assert model.main.operands[1].value.dtype == np.float32
    assert model.main.operands[2].value.shape == ()


# -- constants: dtype, rank, size -------------------------------------------------------------


def test_constant_with_an_unknown_dtype_code_is_rejected():
    rejects(
        model_payload(
            add_operands(o1=operand(info(), Lifetime.CONSTANT_COPY, value(dtype_code=12)))
        ),
        "unknown constant dtype code 12",
    )


def test_constant_with_rank_over_the_limit_is_rejected():
    bad = u8(F32_CODE) + u32(protocol.MAX_RANK + 1)
    rejects(
        model_payload(add_operands(o1=operand(info(), Lifetime.CONSTANT_COPY, bad))),
        "constant rank",
    )


def test_constant_whose_byte_count_disagrees_with_its_shape_is_rejected():
    rejects(
        model_payload(
            add_operands(
                o1=operand(info(), Lifetime.CONSTANT_COPY, value(nbytes=12, data=bytes(12)))
            )
        ),
        "does not match",
    )


def test_constant_larger_than_the_value_limit_is_rejected_before_reading_it():
    shape = (1 << 15, 1 << 14)  # 2**29 float32 = 2 GiB > MAX_VALUE_BYTES
    bad = u8(F32_CODE) + u32(2) + u32(shape[0]) + u32(shape[1]) + u64(shape[0] * shape[1] * 4)
    rejects(
        model_payload(add_operands(o1=operand(info(), Lifetime.CONSTANT_COPY, bad))),
        "does not match",
    )


# -- operands ---------------------------------------------------------------------------------


def test_operand_value_flag_other_than_0_or_1_is_rejected():
    rejects(
        model_payload(add_operands(o1=operand(info(), Lifetime.CONSTANT_COPY, value(), flag=2))),
        "bad value flag",
    )


def test_a_value_on_a_non_constant_operand_is_rejected():
    rejects(
        model_payload(add_operands(o0=operand(info(), Lifetime.SUBGRAPH_INPUT, value()))),
        "value goes with a constant lifetime",
    )


def test_a_constant_without_a_value_is_rejected():
    rejects(
        model_payload(add_operands(o1=operand(info(), Lifetime.CONSTANT_COPY))),
        "value goes with a constant lifetime",
    )


def test_a_constant_reference_needs_a_value_too():
    rejects(
        model_payload(add_operands(o1=operand(info(), Lifetime.CONSTANT_REFERENCE))),
        "value goes with a constant lifetime",
    )


def test_a_subgraph_reference_out_of_range_is_rejected():
    ref = operand(info(OperandCode.MODEL, ()), Lifetime.SUBGRAPH, ref=0)  # no referenced subgraphs
    rejects(model_payload([*add_operands(), ref]), "subgraph reference 0 out of range")


def test_a_negative_subgraph_reference_is_rejected():
    inner = subgraph(add_operands(), [operation(OperationCode.ADD, (0, 1, 2), (3,))], (0,), (3,))
    ref = operand(info(OperandCode.MODEL, ()), Lifetime.SUBGRAPH, ref=-1)
    rejects(
        model_payload([*add_operands(), ref], extra_subgraphs=[inner]),
        "subgraph reference -1 out of range",
    )


def test_a_valid_subgraph_reference_decodes():
    inner = subgraph(add_operands(), [operation(OperationCode.ADD, (0, 1, 2), (3,))], (0,), (3,))
    ref = operand(info(OperandCode.MODEL, ()), Lifetime.SUBGRAPH, ref=0)
    _, model = protocol.decode_device_model(
        model_payload([*add_operands(), ref], extra_subgraphs=[inner])
    )
    assert model.main.operands[4].subgraph == 0 and len(model.subgraphs()) == 2


def test_a_subgraph_reference_on_another_lifetime_is_rejected():
    rejects(
        model_payload(add_operands(o3=operand(info(), Lifetime.SUBGRAPH_OUTPUT, ref=0))),
        "subgraph reference on a SUBGRAPH_OUTPUT operand",
    )


def test_an_unknown_lifetime_is_rejected():
    rejects(model_payload(add_operands(o3=operand(info(), 7))), "lifetime: unknown value 7")


def test_an_unknown_operand_type_is_rejected():
    rejects(
        model_payload(add_operands(o3=operand(info(code=9999), Lifetime.SUBGRAPH_OUTPUT))),
        "operand type: unknown value 9999",
    )


def test_operand_rank_out_of_range_is_rejected():
    bad = u32(OperandCode.TENSOR_FLOAT32) + i32(-2)
    rejects(
        model_payload(add_operands(o3=bad + u32(Lifetime.SUBGRAPH_OUTPUT))), "rank -2 out of range"
    )


def test_a_channel_quant_flag_other_than_0_or_1_is_rejected():
    rejects(
        model_payload(add_operands(o3=operand(info(quant_flag=2), Lifetime.SUBGRAPH_OUTPUT))),
        "bad channel-quant flag",
    )


def test_channel_scales_count_beyond_the_payload_is_rejected():
    quant = u32(0) + u32(1000)  # channel dim 0, 1000 scales that are not there
    rejects(
        model_payload(
            add_operands(o3=operand(info(quant_flag=1, quant=quant), Lifetime.SUBGRAPH_OUTPUT))
        ),
        "channel scales: count 1000",
    )


@pytest.mark.parametrize(
    ("operations", "inputs", "outputs", "match"),
    [
        (
            [operation(OperationCode.ADD, (0, 1, 9), (3,))],
            (0,),
            (3,),
            "operation 0 inputs: operand index 9",
        ),
        (
            [operation(OperationCode.ADD, (0, 1, 2), (4,))],
            (0,),
            (3,),
            "operation 0 outputs: operand index 4",
        ),
        (None, (4,), (3,), "subgraph inputs: operand index 4"),
        (None, (0,), (7,), "subgraph outputs: operand index 7"),
        ([operation(99999, (0, 1, 2), (3,))], (0,), (3,), "operation 0 type: unknown value 99999"),
    ],
)
def test_operand_indexes_and_operation_types_are_checked(operations, inputs, outputs, match):
    rejects(model_payload(operations=operations, inputs=inputs, outputs=outputs), match)


def test_a_relaxed_flag_other_than_0_or_1_is_rejected():
    payload = model_payload()
    rejects(payload[:4] + u8(2) + payload[5:], "bad relaxed flag")


def test_a_model_without_subgraphs_is_rejected():
    rejects(u32(0) + u8(0) + u32(0), "needs a main subgraph")


# -- EXECUTE ----------------------------------------------------------------------------------


def argument(
    has_no_value: int = 0, pool: int = 0, offset: int = 0, length: int = 8, shape=(2,)
) -> bytes:
    return struct.pack("<BIQQ", has_no_value, pool, offset, length) + dims(shape)


def execute_payload(
    measure: int = 0,
    inputs: list[bytes] | None = None,
    outputs: list[bytes] | None = None,
    regions=((0, 64),),
) -> bytes:
    inputs = [argument()] if inputs is None else inputs
    outputs = [argument(offset=8)] if outputs is None else outputs
    head = struct.pack("<IIqq", 1, measure, -1, 5_000_000)
    body = u32(len(inputs)) + b"".join(inputs) + u32(len(outputs)) + b"".join(outputs)
    return head + body + u32(len(regions)) + b"".join(struct.pack("<QQ", o, s) for o, s in regions)


def test_the_baseline_execute_payload_decodes():
    call = protocol.decode_execute(execute_payload(measure=1), 1)
    assert (call.model_id, call.measure, call.deadline_ns, call.loop_timeout_ns) == (
        1,
        1,
        None,
        5_000_000,
    )
    assert call.outputs[0].location.offset == 8 and call.regions == [(0, 64)]


@pytest.mark.parametrize("measure", [2, 0xFFFFFFFF])
def test_execute_with_a_bad_measure_flag_is_rejected(measure):
    with pytest.raises(BadDataError, match=f"bad measure flag {measure}"):
        protocol.decode_execute(execute_payload(measure=measure), 1)


@pytest.mark.parametrize(
    "bad", [argument(has_no_value=2), argument(shape=None)], ids=["flag", "unknown-rank"]
)
def test_execute_with_a_malformed_argument_is_rejected(bad):
    with pytest.raises(BadDataError, match="output 0: malformed argument"):
        protocol.decode_execute(execute_payload(outputs=[bad]), 1)


def test_execute_whose_pools_and_fds_disagree_is_rejected():
    with pytest.raises(BadDataError, match="1 pools described, 2 file descriptors"):
        protocol.decode_execute(execute_payload(), 2)


@pytest.mark.parametrize(
    "bad",
    [argument(pool=1), argument(offset=60, length=8), argument(offset=2**64 - 8, length=16)],
    ids=["pool", "past-the-end", "wraps"],
)
def test_execute_with_a_location_outside_its_pool_is_rejected(bad):
    with pytest.raises(BadDataError, match="input 0: location"):
        protocol.decode_execute(execute_payload(inputs=[bad]), 1)


def test_an_omitted_argument_is_not_checked_against_the_pools():
    call = protocol.decode_execute(execute_payload(inputs=[argument(has_no_value=1, pool=7)]), 1)
    assert call.inputs[0].has_no_value


# -- results (output shapes) ------------------------------------------------------------------


def result_payload(shapes: list[bytes], count: int | None = None, tail: bytes = b"") -> bytes:
    n = len(shapes) if count is None else count
    return i32(0) + u32(n) + b"".join(shapes) + struct.pack("<QQ", 5, 7) + tail


def test_the_baseline_result_decodes():
    status, shapes, timing = protocol.decode_result(
        result_payload([u8(1) + dims((2, 3)), u8(0) + dims(())])
    )
    assert status == 0 and [tuple(s.dimensions) for s in shapes] == [(2, 3), ()]
    assert [s.is_sufficient for s in shapes] == [True, False]
    assert (timing.time_on_device, timing.time_in_driver) == (5, 7)


@pytest.mark.parametrize(
    "shape", [u8(2) + dims((2,)), u8(1) + dims(None)], ids=["sufficient-flag", "unknown-rank"]
)
def test_a_malformed_output_shape_is_rejected(shape):
    with pytest.raises(BadDataError, match="malformed output shape"):
        protocol.decode_result(result_payload([shape]))


def test_an_output_shape_rank_over_the_limit_is_rejected():
    with pytest.raises(BadDataError, match="out of range"):
        protocol.decode_result(result_payload([u8(1) + i32(protocol.MAX_RANK + 1)]))


def test_an_output_shape_count_beyond_the_payload_is_rejected():
    with pytest.raises(BadDataError, match="output shapes: count 1000"):
        protocol.decode_result(result_payload([u8(1) + dims(())], count=1000))


def test_result_trailing_bytes_are_rejected():
    with pytest.raises(BadDataError, match="trailing"):
        protocol.decode_result(result_payload([], tail=b"\x00"))


# -- support flags, capabilities -------------------------------------------------------------


def test_support_flags_must_match_the_operation_count_and_be_booleans():
    assert protocol.decode_flags(u32(2) + b"\x01\x00", 2) == [True, False]
    with pytest.raises(BadDataError, match="2 support flags for 3"):
        protocol.decode_flags(u32(2) + b"\x01\x00", 3)
    with pytest.raises(BadDataError, match="support flags"):
        protocol.decode_flags(u32(2) + b"\x01\x02", 2)


def test_capabilities_with_a_nan_performance_are_rejected():
    perf = struct.pack("<dd", 1.0, 1.0)
    good = perf + perf + u32(0) + perf + perf
    assert protocol.decode_capabilities(good).if_performance.exec_time == 1.0
    nan = struct.pack("<dd", float("nan"), 1.0)
    with pytest.raises(BadDataError, match="NaN"):
        protocol.decode_capabilities(perf + perf + u32(0) + nan + perf)


# -- the GET_MEMORIES reply (service side of the memory callback) -----------------------------


class OneReply:
    """Stands in for the socket connection: answers the one GET_MEMORIES
    call with a crafted reply and records the request."""

    def __init__(self, payload: bytes, fds: list[int]) -> None:
        self.reply = Frame(service_burst.Kind.GET_MEMORIES, 0, 1, payload, fds)
        self.requests: list[bytes] = []

    def call(self, kind: int, payload: bytes = b"", fds=(), timeout=None) -> Frame:
        assert kind == service_burst.Kind.GET_MEMORIES
        self.requests.append(payload)
        return self.reply


def memfd(size: int, sealed: bool = True) -> int:
    """A memfd as an app sends it: sealed against shrinking unless ``sealed`` is False."""
    import fcntl

    fd = os.memfd_create("nnburst-test", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if sealed:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    return fd


def test_a_get_memories_reply_with_an_unsealed_memory_is_refused_and_closed():
    before = open_fds()
    with pytest.raises(BadDataError, match="not sealed against shrinking"):
        fetch(reply(ErrorStatus.NONE, [(0, 64), (0, 64)]), [memfd(64), memfd(64, sealed=False)])
    assert open_fds() == before


def open_fds() -> set[int]:
    return set(os.listdir("/proc/self/fd"))


def reply(status: int, regions: list[tuple[int, int]], count: int | None = None) -> bytes:
    n = len(regions) if count is None else count
    return struct.pack("<iI", status, n) + b"".join(struct.pack("<QQ", o, s) for o, s in regions)


def fetch(payload: bytes, fds: list[int], slots=(3, 5)):
    connection = OneReply(payload, fds)
    callback = service_burst.RemoteBurstCallback(connection, 42)
    result = callback.get_memories(list(slots))
    assert connection.requests == [
        struct.pack("<II", 42, len(slots)) + struct.pack(f"<{len(slots)}i", *slots)
    ]
    return result


def test_a_well_formed_get_memories_reply_maps_each_region():
    before = open_fds()
    status, memories = fetch(
        reply(ErrorStatus.NONE, [(0, 64), (4096, 16)]), [memfd(64), memfd(8192)]
    )
    assert status == ErrorStatus.NONE
    assert [(m.offset, m.size) for m in memories] == [(0, 64), (4096, 16)]
    assert all(isinstance(m, MappedMemory) for m in memories)
    for m in memories:
        m.close()
    assert open_fds() == before


@pytest.mark.parametrize(
    ("payload", "fd_sizes", "code", "match"),
    [
        (reply(ErrorStatus.INVALID_ARGUMENT, []), [], ResultCode.BAD_DATA, "refused slots"),
        (
            b"\x00\x00\x00",
            [],
            ResultCode.OP_FAILED,
            "malformed GET_MEMORIES reply",
        ),  # shorter than the header
        (
            reply(ErrorStatus.NONE, [(0, 64)]),
            [64],
            ResultCode.OP_FAILED,
            "malformed",
        ),  # 1 region for 2 slots
        (
            reply(ErrorStatus.NONE, [(0, 64), (0, 64)]),
            [64],
            ResultCode.OP_FAILED,
            "malformed",
        ),  # 1 fd for 2
        (
            reply(ErrorStatus.NONE, [(0, 64)], count=2),
            [64, 64],
            ResultCode.OP_FAILED,
            "malformed",
        ),  # short body
        (
            reply(ErrorStatus.NONE, [(0, 64), (0, 64)]) + b"\x00",
            [64, 64],
            ResultCode.OP_FAILED,
            "malformed",
        ),
        (
            reply(ErrorStatus.NONE, [(0, 64), (0, 65)]),
            [64, 64],
            ResultCode.BAD_DATA,
            "exceeds the file",
        ),
        (
            reply(ErrorStatus.NONE, [(0, 64), (0, 0)]),
            [64, 64],
            ResultCode.BAD_DATA,
            "size must be positive",
        ),
    ],
    ids=[
        "refused",
        "short",
        "count",
        "fds",
        "truncated",
        "trailing",
        "region-past-file",
        "empty-region",
    ],
)
def test_a_bad_get_memories_reply_is_an_error_and_leaks_no_fd(payload, fd_sizes, code, match):
    before = open_fds()
    with pytest.raises(NNError, match=match) as err:
        fetch(payload, [memfd(size) for size in fd_sizes])
    assert err.value.code == code
    assert open_fds() == before


# -- every field decoded exactly ---------------------------------------------------------------
#
# The reject tests above pin what is refused; these pin that what is
# accepted is read back field for field (a decoder that drops a per-channel
# scale or swaps two fields must fail here).


def per_channel_model():
    from nnburst.hal.model import HalModel, Operand, Operation, Subgraph
    from nnburst.operands import ChannelQuant, OperandInfo

    conv_filter = OperandInfo(
        OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL,
        (2, 1, 1, 3),
        0.0,
        0,
        ChannelQuant(0, (0.5, 0.25)),
    )
    operands = [
        Operand(
            OperandInfo(OperandCode.TENSOR_QUANT8_ASYMM, (1, 2, 2, 3), 0.125, 7),
            Lifetime.SUBGRAPH_INPUT,
        ),
        Operand(
            conv_filter, Lifetime.CONSTANT_COPY, np.arange(6, dtype=np.int8).reshape(2, 1, 1, 3)
        ),
        Operand(
            OperandInfo(OperandCode.TENSOR_INT32, (2,), 0.0, 0),
            Lifetime.CONSTANT_REFERENCE,
            np.array([-5, 9], dtype=np.int32),
        ),
        Operand(
            OperandInfo(OperandCode.INT32, ()), Lifetime.CONSTANT_COPY, np.array(2, dtype=np.int32)
        ),
        Operand(OperandInfo(OperandCode.TENSOR_FLOAT32, None), Lifetime.TEMPORARY_VARIABLE),
        Operand(
            OperandInfo(OperandCode.TENSOR_QUANT8_ASYMM, (1, 2, 2, 2), 0.5, 3),
            Lifetime.SUBGRAPH_OUTPUT,
        ),
    ]
    operation = Operation(OperationCode.CONV_2D, (0, 1, 2, 3, 3, 3, 3), (5,))
    return HalModel(Subgraph(operands, [operation], (0,), (5,)), [], True)


def test_a_model_decodes_to_exactly_what_was_encoded():
    model = per_channel_model()
    device, back = protocol.decode_device_model(protocol.encode_device_model(7, model))
    assert device == 7 and back.relax_float32_to_float16 is True
    for sent, got in zip(model.main.operands, back.main.operands, strict=True):
        assert (
            got.info == sent.info
        )  # code, dims (None stays None), scale, zero point, channel scales
        assert (got.lifetime, got.subgraph) == (sent.lifetime, sent.subgraph)
        if sent.value is None:
            assert got.value is None
        else:
            assert got.value.dtype == sent.value.dtype and got.value.shape == sent.value.shape
            assert np.array_equal(got.value, sent.value)
    assert back.main.operations == model.main.operations
    assert (back.main.input_indexes, back.main.output_indexes) == ((0,), (5,))


def test_prepare_decodes_its_header_and_model():
    payload = protocol.encode_prepare(3, 1, 110, 123_456_789, per_channel_model())
    device, preference, priority, deadline, model = protocol.decode_prepare(payload)
    assert (device, preference, priority, deadline) == (3, 1, 110, 123_456_789)
    assert model.main.operands[1].info.channel_quant.scales == (0.5, 0.25)
    assert (
        protocol.decode_prepare(protocol.encode_prepare(0, 0, 90, None, per_channel_model()))[3]
        is None
    )
    with pytest.raises(BadDataError, match="trailing"):
        protocol.decode_prepare(payload + b"\x00")


def test_execute_decodes_every_argument_field():
    from nnburst.hal.types import DataLocation, Request, RequestArgument

    request = Request(
        [RequestArgument(False, DataLocation(1, 8, 24), (2, 3)), RequestArgument(True)],
        [RequestArgument(False, DataLocation(0, 16, 12), (3,))],
        [],
    )
    call = protocol.decode_execute(
        protocol.encode_execute(9, request, 1, 77, None, [(0, 64), (4096, 32)]), 2
    )
    assert (call.model_id, call.measure, call.deadline_ns, call.loop_timeout_ns) == (9, 1, 77, None)
    assert call.regions == [(0, 64), (4096, 32)]
    assert [(a.has_no_value, tuple(a.location), tuple(a.dimensions)) for a in call.inputs] == [
        (False, (1, 8, 24), (2, 3)),
        (True, tuple(RequestArgument(True).location), ()),
    ]
    assert [(tuple(a.location), tuple(a.dimensions)) for a in call.outputs] == [((0, 16, 12), (3,))]


def test_capabilities_and_devices_decode_exactly():
    from nnburst.hal.types import Capabilities, PerformanceInfo

    caps = Capabilities(
        PerformanceInfo(0.5, 0.25),
        PerformanceInfo(0.75, 1.5),
        {
            OperandCode.TENSOR_FLOAT32: PerformanceInfo(0.8, 1.2),
            OperandCode.TENSOR_QUANT8_ASYMM: PerformanceInfo(2, 3),
        },
        PerformanceInfo(1.25, 1.75),
        PerformanceInfo(4.0, 8.0),
    )
    assert protocol.decode_capabilities(protocol.encode_capabilities(caps)) == caps
    devices = [
        protocol.DeviceInfo("nnburst-sample-all", 2, "1.0 ü", 30),
        protocol.DeviceInfo("x", 4, "", 29),
    ]
    assert protocol.decode_devices(protocol.encode_devices(devices)) == devices
    with pytest.raises(BadDataError, match="not UTF-8"):
        protocol.decode_devices(u32(1) + u32(1) + b"\xff" + u32(2) + u32(0) + u32(29))
    with pytest.raises(BadDataError, match="string: count 5000"):
        protocol.decode_devices(u32(1) + u32(5000) + bytes(5000))
    assert protocol.decode_u32(protocol.encode_u32(0xDEADBEEF)) == 0xDEADBEEF
    with pytest.raises(BadDataError, match="trailing"):
        protocol.decode_u32(protocol.encode_u32(1) + b"\x00")


# -- every count in a subgraph names what it counts ----------------------------------------------

HUGE = 1 << 31


def _counted(part: str) -> bytes:
    """A model payload whose count of ``part`` claims more items than any payload holds."""
    op = operation(OperationCode.ADD, (0, 1, 2), (3,))
    room = bytes(64)  # enough left for the counts before the one under test
    if part == "operands":
        return u32(0) + u8(0) + u32(1) + u32(HUGE) + room
    main_operands = u32(4) + b"".join(add_operands())
    if part == "operations":
        body = main_operands + u32(HUGE)
    elif part == "operation inputs":
        body = main_operands + u32(1) + u32(OperationCode.ADD) + u32(HUGE)
    elif part == "operation outputs":
        body = main_operands + u32(1) + u32(OperationCode.ADD) + u32s((0, 1, 2)) + u32(HUGE)
    elif part == "subgraph inputs":
        body = main_operands + u32(1) + op + u32(HUGE)
    else:  # subgraph outputs
        body = main_operands + u32(1) + op + u32s((0,)) + u32(HUGE)
    return u32(0) + u8(0) + u32(1) + body + room


@pytest.mark.parametrize(
    "part",
    [
        "operands",
        "operations",
        "operation inputs",
        "operation outputs",
        "subgraph inputs",
        "subgraph outputs",
    ],
)
def test_a_count_beyond_the_payload_names_what_it_counts(part):
    rejects(_counted(part), rf"^BAD_DATA: {part}: count {HUGE} exceeds the limit or the payload$")
