"""Payload encodings of the driver service's control calls (message kinds 20+).

Everything is explicit little-endian ``struct`` packing plus raw numpy bytes;
nothing is pickled.  The service trusts no client, so every decoder checks
each count, size and index against a fixed limit *and* against the bytes
actually left in the payload before it allocates or indexes anything, and
raises :class:`~nnburst.errors.BadDataError` for anything malformed.

Building blocks::

    str            u32 n | n bytes UTF-8                           (n ≤ MAX_STRING)
    dims           i32 rank (-1 = unknown rank) | rank × u32
    perf           f64 exec_time | f64 power_usage
    OperandInfo    u32 code | dims | f64 scale | i32 zero_point
                   | u8 has_channel_quant [| u32 channel_dim | u32 n | n × f64 scales]
    value          u8 dtype code (_DTYPES) | u32 ndim | ndim × u32 shape
                   | u64 nbytes | nbytes raw bytes (C order)
    Operand        OperandInfo | u32 lifetime | u8 has_value [| value] | i32 subgraph (-1 = none)
    Operation      u32 code | u32 n | n × u32 inputs | u32 m | m × u32 outputs
    Subgraph       u32 n | n × Operand | u32 n | n × Operation
                   | u32 n | n × u32 input indexes | u32 n | n × u32 output indexes
    HalModel       u8 relaxed | u32 n (≥ 1: main first) | n × Subgraph
    Capabilities   perf relaxed scalar | perf relaxed tensor
                   | u32 n | n × (u32 operand code | perf) | perf if | perf while
    argument       u8 has_no_value | u32 pool | u64 offset | u64 length | dims
    Request        u32 n | n × argument (inputs) | u32 m | m × argument (outputs)
                   | u32 p | p × (u64 offset | u64 size)   — plus p fds, one per pool
    result         i32 status | u32 n | n × (u8 sufficient | dims)
                   | u64 time_on_device | u64 time_in_driver
    DeviceInfo     str name | u32 type | str version | u32 feature level

Message kinds (app → service unless noted; replies on the same kind):

``GET_DEVICES``              empty → ``u32 n | n × DeviceInfo``
``GET_CAPABILITIES``         ``u32 device`` → Capabilities
``GET_SUPPORTED_OPERATIONS`` ``u32 device | HalModel`` → ``u32 n | n × u8``
``PREPARE_MODEL``            ``u32 device | u32 preference | u32 priority
                             | i64 deadline_ns (-1 = none) | HalModel`` → ``u32 model id``
``EXECUTE``                  ``u32 model id | u32 measure | i64 deadline_ns
                             | i64 loop_timeout_ns (-1 = none) | Request`` (+ pool fds) → result
``RELEASE_MODEL``            ``u32 model id`` (one-way, or a call with an empty reply)

Bursts on the same connection use kinds 10–13 (:mod:`nnburst.service.burst`).
Failures travel as wire error replies (an NNAPI result code and a message),
except EXECUTE whose HAL status is part of its result.
"""

from __future__ import annotations

import enum
import math
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..codes import OperandCode, OperationCode
from ..errors import BadDataError
from ..hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from ..hal.types import (
    Capabilities,
    DataLocation,
    OutputShape,
    PerformanceInfo,
    Request,
    RequestArgument,
    Timing,
)
from ..operands import ChannelQuant, OperandInfo


class Kind(enum.IntEnum):
    GET_DEVICES = 20
    GET_CAPABILITIES = 21
    GET_SUPPORTED_OPERATIONS = 22
    PREPARE_MODEL = 23
    EXECUTE = 24
    RELEASE_MODEL = 25


# Limits: generous for real models, small enough that a hostile count cannot
# make the service allocate much before the "bytes left" check rejects it.
MAX_STRING = 4096
MAX_RANK = 64
MAX_SUBGRAPHS = 4096
MAX_OPERANDS = 1 << 20
MAX_OPERATIONS = 1 << 20
MAX_ARGUMENTS = 1 << 16
MAX_POOLS = 253  # every pool is an fd in one frame (SCM_MAX_FD)
MAX_DEVICES = 256
MAX_VALUE_BYTES = 1 << 30

NO_VALUE_I64 = -1

_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_PERF = struct.Struct("<dd")
_INFO_TAIL = struct.Struct("<diB")
_ARG_HEAD = struct.Struct("<BIQQ")
_REGION = struct.Struct("<QQ")
_TIMING = struct.Struct("<QQ")
_PREPARE_HEAD = struct.Struct("<IIIq")
_EXECUTE_HEAD = struct.Struct("<IIqq")

#: numpy dtypes a constant may have, by their wire code.
_DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(t).newbyteorder("<")
    for t in (
        np.bool_,
        np.int8,
        np.uint8,
        np.int16,
        np.uint16,
        np.int32,
        np.uint32,
        np.int64,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
    )
)
_DTYPE_CODE = {dtype: code for code, dtype in enumerate(_DTYPES)}


def default_socket_path() -> str:
    """``$NNBURST_SOCKET``, else the per-user runtime directory's ``nnburst/driver.sock``."""
    explicit = os.environ.get("NNBURST_SOCKET")
    if explicit:
        return explicit
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = os.path.join(runtime, "nnburst") if runtime else f"/tmp/nnburst-{os.getuid()}"
    return os.path.join(base, "driver.sock")


# -- primitives -----------------------------------------------------------------------


class Writer:
    """Accumulates a payload; every method appends one field."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def pack(self, layout: struct.Struct, *values: Any) -> None:
        self.parts.append(layout.pack(*values))

    def u8(self, value: int) -> None:
        self.parts.append(_U8.pack(value))

    def u32(self, value: int) -> None:
        self.parts.append(_U32.pack(value))

    def i32(self, value: int) -> None:
        self.parts.append(_I32.pack(value))

    def u32s(self, values: Sequence[int]) -> None:
        self.parts.append(_U32.pack(len(values)) + struct.pack(f"<{len(values)}I", *values))

    def raw(self, data: bytes) -> None:
        self.parts.append(data)

    def string(self, text: str) -> None:
        data = text.encode()
        if len(data) > MAX_STRING:
            raise BadDataError(f"string of {len(data)} bytes exceeds {MAX_STRING}")
        self.parts.append(_U32.pack(len(data)) + data)

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


class Reader:
    """Reads a payload field by field; never past its end."""

    def __init__(self, data: bytes | memoryview) -> None:
        self.view = memoryview(data).cast("B")
        self.pos = 0

    @property
    def remaining(self) -> int:
        return len(self.view) - self.pos

    def take(self, n: int) -> memoryview:
        if n < 0 or n > self.remaining:
            raise BadDataError(
                f"payload truncated: need {n} bytes at {self.pos}, {self.remaining} left"
            )
        chunk = self.view[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, layout: struct.Struct) -> tuple[Any, ...]:
        return layout.unpack(self.take(layout.size))

    def u8(self) -> int:
        return self.unpack(_U8)[0]

    def u32(self) -> int:
        return self.unpack(_U32)[0]

    def i32(self) -> int:
        return self.unpack(_I32)[0]

    def count(self, limit: int, item_size: int, what: str) -> int:
        """A u32 count, bounded by ``limit`` and by the bytes left (each item ≥ ``item_size``)."""
        n = self.u32()
        if n > limit or n * item_size > self.remaining:
            raise BadDataError(f"{what}: count {n} exceeds the limit or the payload")
        return n

    def u32s(self, limit: int, what: str) -> tuple[int, ...]:
        n = self.count(limit, 4, what)
        return struct.unpack(f"<{n}I", self.take(4 * n))

    def string(self) -> str:
        n = self.count(MAX_STRING, 1, "string")
        try:
            return bytes(self.take(n)).decode()
        except UnicodeDecodeError as exc:
            raise BadDataError(f"string is not UTF-8: {exc}") from None

    def done(self) -> None:
        if self.remaining:
            raise BadDataError(f"{self.remaining} unexpected trailing bytes")


_E = TypeVar("_E", bound=enum.IntEnum)


def decode_enum(kind: type[_E], value: int, what: str) -> _E:
    """``kind(value)``, or BAD_DATA naming ``what`` for a value the enum lacks."""
    try:
        return kind(value)
    except ValueError:
        raise BadDataError(f"{what}: unknown value {value}") from None


def _write_dims(w: Writer, dims: Sequence[int] | None) -> None:
    if dims is None:
        w.i32(-1)
        return
    if len(dims) > MAX_RANK:
        raise BadDataError(f"rank {len(dims)} exceeds {MAX_RANK}")
    w.i32(len(dims))
    w.raw(struct.pack(f"<{len(dims)}I", *dims))


def _read_dims(r: Reader) -> tuple[int, ...] | None:
    rank = r.i32()
    if rank == -1:
        return None
    if not 0 <= rank <= MAX_RANK:
        raise BadDataError(f"rank {rank} out of range")
    return struct.unpack(f"<{rank}I", r.take(4 * rank))


def _write_perf(w: Writer, perf: PerformanceInfo) -> None:
    w.pack(_PERF, perf.exec_time, perf.power_usage)


def _read_perf(r: Reader) -> PerformanceInfo:
    exec_time, power = r.unpack(_PERF)
    if math.isnan(exec_time) or math.isnan(power):
        raise BadDataError("performance is NaN")
    return PerformanceInfo(exec_time, power)


# -- model ----------------------------------------------------------------------------


def _write_info(w: Writer, info: OperandInfo) -> None:
    w.u32(int(info.code))
    _write_dims(w, info.dimensions)
    quant = info.channel_quant
    w.pack(_INFO_TAIL, float(info.scale), int(info.zero_point), quant is not None)
    if quant is not None:
        w.u32(quant.channel_dim)
        w.u32(len(quant.scales))
        w.raw(struct.pack(f"<{len(quant.scales)}d", *quant.scales))


def _read_info(r: Reader) -> OperandInfo:
    code = decode_enum(OperandCode, r.u32(), "operand type")
    dims = _read_dims(r)
    scale, zero_point, has_quant = r.unpack(_INFO_TAIL)
    quant = None
    if has_quant > 1:
        raise BadDataError("bad channel-quant flag")
    if has_quant:
        channel_dim = r.u32()
        n = r.count(MAX_OPERANDS, 8, "channel scales")
        quant = ChannelQuant(channel_dim, struct.unpack(f"<{n}d", r.take(8 * n)))
    return OperandInfo(code, dims, scale, zero_point, quant)


def _write_value(w: Writer, value: Any) -> None:
    array = np.asarray(value)
    dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder != "|" else array.dtype
    code = _DTYPE_CODE.get(dtype)
    if code is None:
        raise BadDataError(f"constant of dtype {array.dtype} cannot be sent")
    if array.ndim > MAX_RANK:
        raise BadDataError(f"constant rank {array.ndim} exceeds {MAX_RANK}")
    data = np.ascontiguousarray(array, dtype=dtype).tobytes()
    w.u8(code)
    w.u32(array.ndim)
    w.raw(struct.pack(f"<{array.ndim}I", *array.shape))
    w.raw(_U64.pack(len(data)))
    w.raw(data)


def _read_value(r: Reader) -> np.ndarray:
    code = r.u8()
    if code >= len(_DTYPES):
        raise BadDataError(f"unknown constant dtype code {code}")
    dtype = _DTYPES[code]
    ndim = r.u32()
    if ndim > MAX_RANK:
        raise BadDataError(f"constant rank {ndim} out of range")
    shape = struct.unpack(f"<{ndim}I", r.take(4 * ndim))
    (nbytes,) = r.unpack(_U64)
    if nbytes > MAX_VALUE_BYTES or nbytes != math.prod(shape) * dtype.itemsize:
        raise BadDataError(f"constant of {nbytes} bytes does not match {dtype} {shape}")
    data = r.take(nbytes)
    return np.frombuffer(data, dtype).reshape(shape).astype(dtype.newbyteorder("="), copy=True)


def _write_subgraph(w: Writer, subgraph: Subgraph) -> None:
    w.u32(len(subgraph.operands))
    for operand in subgraph.operands:
        _write_info(w, operand.info)
        w.u32(int(operand.lifetime))
        w.u8(operand.value is not None)
        if operand.value is not None:
            _write_value(w, operand.value)
        w.i32(-1 if operand.subgraph is None else operand.subgraph)
    w.u32(len(subgraph.operations))
    for operation in subgraph.operations:
        w.u32(int(operation.code))
        w.u32s(operation.inputs)
        w.u32s(operation.outputs)
    w.u32s(subgraph.input_indexes)
    w.u32s(subgraph.output_indexes)


def _check_indexes(indexes: Sequence[int], count: int, what: str) -> None:
    for index in indexes:
        if index >= count:
            raise BadDataError(f"{what}: operand index {index} out of range ({count} operands)")


def _read_subgraph(r: Reader, subgraph_count: int) -> Subgraph:
    operands: list[Operand] = []
    for i in range(r.count(MAX_OPERANDS, 22, "operands")):
        info = _read_info(r)
        lifetime = decode_enum(Lifetime, r.u32(), f"operand {i} lifetime")
        has_value = r.u8()
        if has_value > 1:
            raise BadDataError(f"operand {i}: bad value flag")
        value = _read_value(r) if has_value else None
        ref = r.i32()
        constant = lifetime in (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE)
        if constant != (value is not None):
            raise BadDataError(
                f"operand {i}: a value goes with a constant lifetime, and only there"
            )
        if lifetime == Lifetime.SUBGRAPH:
            # Subgraph 0 on the wire is main; operands reference `referenced`.
            if not 0 <= ref < subgraph_count - 1:
                raise BadDataError(f"operand {i}: subgraph reference {ref} out of range")
        elif ref != -1:
            raise BadDataError(f"operand {i}: a subgraph reference on a {lifetime.name} operand")
        operands.append(
            Operand(info, lifetime, value, ref if lifetime == Lifetime.SUBGRAPH else None)
        )
    operations: list[Operation] = []
    for i in range(r.count(MAX_OPERATIONS, 12, "operations")):
        code = decode_enum(OperationCode, r.u32(), f"operation {i} type")
        inputs = r.u32s(MAX_OPERANDS, "operation inputs")
        outputs = r.u32s(MAX_OPERANDS, "operation outputs")
        _check_indexes(inputs, len(operands), f"operation {i} inputs")
        _check_indexes(outputs, len(operands), f"operation {i} outputs")
        operations.append(Operation(code, inputs, outputs))
    input_indexes = r.u32s(MAX_OPERANDS, "subgraph inputs")
    output_indexes = r.u32s(MAX_OPERANDS, "subgraph outputs")
    _check_indexes(input_indexes, len(operands), "subgraph inputs")
    _check_indexes(output_indexes, len(operands), "subgraph outputs")
    return Subgraph(operands, operations, input_indexes, output_indexes)


def write_model(w: Writer, model: HalModel) -> None:
    subgraphs = model.subgraphs()
    w.u8(bool(model.relax_float32_to_float16))
    w.u32(len(subgraphs))
    for subgraph in subgraphs:
        _write_subgraph(w, subgraph)


def read_model(r: Reader) -> HalModel:
    relaxed = r.u8()
    if relaxed > 1:
        raise BadDataError("bad relaxed flag")
    n = r.count(MAX_SUBGRAPHS, 16, "subgraphs")
    if n < 1:
        raise BadDataError("a model needs a main subgraph")
    subgraphs = [_read_subgraph(r, n) for _ in range(n)]
    return HalModel(subgraphs[0], subgraphs[1:], bool(relaxed))


# -- capabilities, devices ------------------------------------------------------------


def encode_capabilities(caps: Capabilities) -> bytes:
    w = Writer()
    _write_perf(w, caps.relaxed_float32_to_float16_scalar)
    _write_perf(w, caps.relaxed_float32_to_float16_tensor)
    w.u32(len(caps.operand_performance))
    for code, perf in sorted(caps.operand_performance.items()):
        w.u32(int(code))
        _write_perf(w, perf)
    _write_perf(w, caps.if_performance)
    _write_perf(w, caps.while_performance)
    return w.getvalue()


def decode_capabilities(data: bytes) -> Capabilities:
    r = Reader(data)
    scalar, tensor = _read_perf(r), _read_perf(r)
    table: dict[OperandCode, PerformanceInfo] = {}
    for _ in range(r.count(len(OperandCode), 4 + _PERF.size, "operand performance")):
        code = decode_enum(OperandCode, r.u32(), "operand type")
        table[code] = _read_perf(r)
    caps = Capabilities(scalar, tensor, table, _read_perf(r), _read_perf(r))
    r.done()
    return caps


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    type: int
    version_string: str
    feature_level: int


def encode_devices(devices: Sequence[DeviceInfo]) -> bytes:
    w = Writer()
    w.u32(len(devices))
    for device in devices:
        w.string(device.name)
        w.u32(device.type)
        w.string(device.version_string)
        w.u32(device.feature_level)
    return w.getvalue()


def decode_devices(data: bytes) -> list[DeviceInfo]:
    r = Reader(data)
    devices = []
    for _ in range(r.count(MAX_DEVICES, 16, "devices")):
        name = r.string()
        kind = r.u32()
        version = r.string()
        devices.append(DeviceInfo(name, kind, version, r.u32()))
    r.done()
    return devices


# -- calls ----------------------------------------------------------------------------


def encode_device_model(device: int, model: HalModel) -> bytes:
    """GET_SUPPORTED_OPERATIONS request."""
    w = Writer()
    w.u32(device)
    write_model(w, model)
    return w.getvalue()


def decode_device_model(data: bytes) -> tuple[int, HalModel]:
    r = Reader(data)
    device = r.u32()
    model = read_model(r)
    r.done()
    return device, model


def encode_flags(flags: Sequence[bool]) -> bytes:
    return _U32.pack(len(flags)) + bytes(bool(f) for f in flags)


def decode_flags(data: bytes, expected: int) -> list[bool]:
    r = Reader(data)
    n = r.count(MAX_OPERATIONS, 1, "flags")
    flags = r.take(n)
    r.done()
    if n != expected or any(f > 1 for f in flags):
        raise BadDataError(f"{n} support flags for {expected} operations")
    return [bool(f) for f in flags]


def encode_prepare(
    device: int, preference: int, priority: int, deadline_ns: int | None, model: HalModel
) -> bytes:
    w = Writer()
    w.pack(
        _PREPARE_HEAD,
        device,
        preference,
        priority,
        NO_VALUE_I64 if deadline_ns is None else deadline_ns,
    )
    write_model(w, model)
    return w.getvalue()


def decode_prepare(data: bytes) -> tuple[int, int, int, int | None, HalModel]:
    r = Reader(data)
    device, preference, priority, deadline = r.unpack(_PREPARE_HEAD)
    model = read_model(r)
    r.done()
    return device, preference, priority, None if deadline < 0 else deadline, model


def _write_arguments(w: Writer, arguments: Sequence[RequestArgument]) -> None:
    w.u32(len(arguments))
    for arg in arguments:
        loc = arg.location
        w.pack(_ARG_HEAD, bool(arg.has_no_value), loc.pool_index, loc.offset, loc.length)
        _write_dims(w, tuple(arg.dimensions))


def _read_arguments(r: Reader, what: str) -> list[RequestArgument]:
    arguments = []
    for i in range(r.count(MAX_ARGUMENTS, _ARG_HEAD.size + 4, what)):
        has_no_value, pool, offset, length = r.unpack(_ARG_HEAD)
        dims = _read_dims(r)
        if has_no_value > 1 or dims is None:
            raise BadDataError(f"{what} {i}: malformed argument")
        arguments.append(
            RequestArgument(bool(has_no_value), DataLocation(pool, offset, length), dims)
        )
    return arguments


def encode_execute(
    model_id: int,
    request: Request,
    measure: int,
    deadline_ns: int | None,
    loop_timeout_ns: int | None,
    regions: Sequence[tuple[int, int]],
) -> bytes:
    """EXECUTE request; ``regions`` are each pool's (offset, size) in its fd."""
    w = Writer()
    w.pack(
        _EXECUTE_HEAD,
        model_id,
        measure,
        NO_VALUE_I64 if deadline_ns is None else deadline_ns,
        NO_VALUE_I64 if loop_timeout_ns is None else loop_timeout_ns,
    )
    _write_arguments(w, request.inputs)
    _write_arguments(w, request.outputs)
    w.u32(len(regions))
    for offset, size in regions:
        w.pack(_REGION, offset, size)
    return w.getvalue()


@dataclass
class ExecuteCall:
    model_id: int
    measure: int
    deadline_ns: int | None
    loop_timeout_ns: int | None
    inputs: list[RequestArgument]
    outputs: list[RequestArgument]
    regions: list[tuple[int, int]]


def decode_execute(data: bytes, fd_count: int) -> ExecuteCall:
    """Parse an EXECUTE payload and check every location against its pool's size."""
    r = Reader(data)
    model_id, measure, deadline, loop_timeout = r.unpack(_EXECUTE_HEAD)
    if measure > 1:
        raise BadDataError(f"bad measure flag {measure}")
    inputs = _read_arguments(r, "input")
    outputs = _read_arguments(r, "output")
    n = r.count(MAX_POOLS, _REGION.size, "pools")
    regions = [r.unpack(_REGION) for _ in range(n)]
    r.done()
    if n != fd_count:
        raise BadDataError(f"{n} pools described, {fd_count} file descriptors received")
    for what, arguments in (("input", inputs), ("output", outputs)):
        for i, arg in enumerate(arguments):
            if arg.has_no_value:
                continue
            loc = arg.location
            if loc.pool_index >= n or loc.offset + loc.length > regions[loc.pool_index][1]:
                raise BadDataError(f"{what} {i}: location {tuple(loc)} is outside the pools")
    return ExecuteCall(
        model_id,
        measure,
        None if deadline < 0 else deadline,
        None if loop_timeout < 0 else loop_timeout,
        inputs,
        outputs,
        regions,
    )


def encode_result(status: int, shapes: Sequence[OutputShape], timing: Timing) -> bytes:
    w = Writer()
    w.i32(int(status))
    w.u32(len(shapes))
    for shape in shapes:
        w.u8(bool(shape.is_sufficient))
        _write_dims(w, tuple(shape.dimensions))
    w.pack(_TIMING, timing.time_on_device, timing.time_in_driver)
    return w.getvalue()


def decode_result(data: bytes) -> tuple[int, list[OutputShape], Timing]:
    r = Reader(data)
    status = r.i32()
    shapes = []
    for _ in range(r.count(MAX_ARGUMENTS, 5, "output shapes")):
        sufficient = r.u8()
        dims = _read_dims(r)
        if sufficient > 1 or dims is None:
            raise BadDataError("malformed output shape")
        shapes.append(OutputShape(dims, bool(sufficient)))
    timing = Timing(*r.unpack(_TIMING))
    r.done()
    return status, shapes, timing


def encode_u32(value: int) -> bytes:
    return _U32.pack(value)


def decode_u32(data: bytes) -> int:
    r = Reader(data)
    value = r.u32()
    r.done()
    return value
