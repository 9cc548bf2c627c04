"""``Model``: the graph an app builds, checked and frozen into a ``HalModel`` (``ANeuralNetworksModel``).

Building is permissive and order-free like the NDK's (operands by insertion
order, operations in any order, values set before or after the operations
that use them); ``finish()`` is where the whole graph is checked, so every
rule is enforced in one place and reported with the NDK's result code and a
message that names the operand or operation at fault.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .arity import arity
from .checks import operator_index, require
from .codes import OperandCode, OperationCode
from .cpu.driver import validate_operation
from .devices import Device
from .errors import BadDataError, BadStateError, NNError
from .hal.memory import MappedMemory
from .hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from .operands import SCALAR_CODES, ChannelQuant, OperandInfo, OperandType

__all__ = ["Model", "as_operand_array"]

_UINT32_MAX = 2**32 - 1

#: Zero-point range and whether scale must be positive, per quantized type (NNAPI's rules).
_QUANT_RULES: dict[OperandCode, tuple[int, int]] = {
    OperandCode.TENSOR_QUANT8_ASYMM: (0, 255),
    OperandCode.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
    OperandCode.TENSOR_QUANT8_SYMM: (0, 0),
    OperandCode.TENSOR_QUANT16_ASYMM: (0, 65535),
    OperandCode.TENSOR_QUANT16_SYMM: (0, 0),
}


def _index_list(values: Any, what: str, count: int) -> tuple[int, ...]:
    require(values, what)
    try:
        indexes = tuple(operator_index(v) for v in values)
    except TypeError as exc:
        raise BadDataError(f"{what} must be a sequence of integers: {exc}") from None
    for i in indexes:
        if not 0 <= i < count:
            raise BadDataError(
                f"{what}: operand index {i} out of range (the model has {count} operands)"
            )
    return indexes


def _castable(src: np.dtype, dst: np.dtype) -> bool:
    """One rule for numpy data: any number converts into a floating-point operand
    (float64 or int32 data for a float32 operand); only integers and booleans go
    into integer operands (floats would be truncated), and their values must fit."""
    if src.kind not in "biuf":
        return False
    return dst.kind == "f" or src.kind in "biu"


def as_operand_array(value: Any, dtype: np.dtype, what: str, convert: bool = True) -> np.ndarray:
    """``value`` (numpy array, numpy scalar, Python scalar or list) as an array of ``dtype``.

    Numpy data must already have a compatible dtype (a safe cast, or float to
    float); Python numbers are range-checked, so 300 never silently becomes 44
    in a uint8 operand.  Returns the original array when no conversion is
    needed, or when ``convert`` is false (the caller converts later).

    Raises:
        BadDataError: the value cannot represent this operand's type.
    """
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if not _castable(array.dtype, dtype):
            raise BadDataError(f"{what}: expected {dtype} data, got {array.dtype}")
        if dtype.kind in "iu" and array.size and not np.can_cast(array.dtype, dtype, "safe"):
            _check_range(array, dtype, what)
        if dtype.kind == "b" and array.dtype.kind != "b" and not np.isin(array, (0, 1)).all():
            raise BadDataError(f"{what}: expected booleans")
        return array if array.dtype == dtype or not convert else array.astype(dtype)
    if not isinstance(value, (bool, int, float, list, tuple)):
        raise BadDataError(
            f"{what}: expected a numpy array, a buffer or a number, got {type(value).__name__}"
        )
    try:
        raw = np.asarray(value)
    except (ValueError, OverflowError) as exc:
        raise BadDataError(f"{what}: {exc}") from None
    if raw.dtype.kind not in "biuf":
        raise BadDataError(f"{what}: expected numbers, got {raw.dtype}")
    if dtype.kind in "iub":
        if raw.dtype.kind == "f":
            raise BadDataError(f"{what}: expected {dtype} data, got floating-point values")
        if dtype.kind == "b":
            if raw.size and not np.isin(raw, (0, 1)).all():
                raise BadDataError(f"{what}: expected booleans")
        elif raw.size:
            _check_range(raw, dtype, what)
    return raw.astype(dtype)


def _check_range(values: np.ndarray, dtype: np.dtype, what: str) -> None:
    """Integer values must fit ``dtype``: 300 never silently becomes 44 in a uint8 operand."""
    limits = np.iinfo(dtype)
    if int(values.min()) < limits.min or int(values.max()) > limits.max:
        raise BadDataError(f"{what}: values outside the {dtype} range [{limits.min}, {limits.max}]")


@dataclass
class _OperandEntry:
    type: OperandType
    lifetime: Lifetime = Lifetime.TEMPORARY_VARIABLE
    value: np.ndarray | None = None
    referenced: Model | None = None
    channel_quant: ChannelQuant | None = None

    @property
    def info(self) -> OperandInfo:
        dims = self.type.dimensions
        if self.type.code in SCALAR_CODES:
            dims = ()
        elif dims == ():
            dims = None  # NNAPI: a tensor of rank 0 is a tensor of unknown rank
        return OperandInfo(
            self.type.code, dims, self.type.scale, self.type.zero_point, self.channel_quant
        )


def _check_operand_type(t: Any, what: str) -> OperandType:
    require(t, what)
    if not isinstance(t, OperandType):
        raise BadDataError(f"{what} must be an nnburst.OperandType, got {type(t).__name__}")
    code = t.code
    if code in SCALAR_CODES:
        if t.dimensions not in ((), None):
            raise BadDataError(
                f"{what}: scalar type {code.name} cannot have dimensions {t.dimensions}"
            )
    elif t.dimensions is not None:
        for d in t.dimensions:
            if not 0 <= d <= _UINT32_MAX:
                raise BadDataError(f"{what}: dimension {d} of {t.dimensions} is not a uint32")
    if not math.isfinite(t.scale) or t.scale < 0:
        raise BadDataError(f"{what}: scale {t.scale} must be finite and non-negative")
    if code in _QUANT_RULES:
        low, high = _QUANT_RULES[code]
        if t.scale <= 0:
            raise BadDataError(f"{what}: {code.name} needs a positive scale, got {t.scale}")
        if not low <= t.zero_point <= high:
            raise BadDataError(
                f"{what}: {code.name} zero point {t.zero_point} outside [{low}, {high}]"
            )
    elif code == OperandCode.TENSOR_INT32:
        if t.zero_point != 0:
            raise BadDataError(f"{what}: TENSOR_INT32 zero point must be 0, got {t.zero_point}")
    elif t.scale != 0 or t.zero_point != 0:
        raise BadDataError(
            f"{what}: {code.name} takes no scale or zero point (got {t.scale}, {t.zero_point})"
        )
    return t


class Model:
    """A graph of operands and operations, built step by step and frozen by :meth:`finish`.

    Every method raises :class:`~nnburst.NNError`: ``BAD_STATE`` once the
    model is finished, ``UNEXPECTED_NULL`` for a missing (``None``) argument
    and ``BAD_DATA`` for anything invalid.
    """

    def __init__(self) -> None:
        self._operands: list[_OperandEntry] = []
        self._operations: list[Operation] = []
        self._inputs: tuple[int, ...] = ()
        self._outputs: tuple[int, ...] = ()
        self._identified = False
        self._relaxed = False
        self._finished = False
        self._invalid: str | None = None  # finish() failed: the model is unusable, as in the NDK
        self._hal: HalModel | None = None
        self._memories: list[MappedMemory] = []  # keep CONSTANT_REFERENCE memories mapped
        self._lock = threading.Lock()

    # -- building ---------------------------------------------------------------------------
    def _check_building(self, what: str) -> None:
        if self._finished:
            raise BadStateError(f"{what}: the model is already finished")
        if self._invalid is not None:
            raise BadStateError(f"{what}: the model is invalid (finish failed: {self._invalid})")

    def _operand(self, index: Any, what: str) -> _OperandEntry:
        try:
            i = operator_index(index)
        except TypeError:
            raise BadDataError(f"{what}: operand index must be an integer, got {index!r}") from None
        if not 0 <= i < len(self._operands):
            raise BadDataError(
                f"{what}: operand index {i} out of range (the model has {len(self._operands)} operands)"
            )
        return self._operands[i]

    def _check_settable(self, index: int, entry: _OperandEntry, what: str) -> None:
        if entry.lifetime in (Lifetime.SUBGRAPH_INPUT, Lifetime.SUBGRAPH_OUTPUT):
            raise BadDataError(
                f"{what}: operand {index} is a model input or output and cannot have a value"
            )

    def add_operand(self, operand_type: OperandType) -> int:
        """Add an operand; returns its index (operands are numbered in insertion order)."""
        with self._lock:
            require(operand_type, "add_operand: operand_type")
            self._check_building("add_operand")
            t = _check_operand_type(operand_type, f"add_operand (operand {len(self._operands)})")
            self._operands.append(_OperandEntry(t))
            return len(self._operands) - 1

    def set_operand_value(self, index: int, value: Any) -> None:
        """Give an operand a constant value (copied now); ``None`` or empty bytes omit an optional operand.

        ``value`` is a numpy array, a bytes-like object holding the raw
        little-endian data, or a Python number (scalars).
        """
        with self._lock:
            self._check_building("set_operand_value")
            what = f"set_operand_value(operand {index})"
            entry = self._operand(index, what)
            self._check_settable(index, entry, what)
            code = entry.type.code
            if code == OperandCode.MODEL:
                raise BadDataError(f"{what}: a MODEL operand takes set_operand_value_from_model")
            if value is None or (
                isinstance(value, (bytes, bytearray, memoryview)) and memoryview(value).nbytes == 0
            ):
                entry.lifetime, entry.value = Lifetime.NO_VALUE, None
                return
            info = entry.info
            needed = info.byte_size()
            if needed is None:
                raise BadDataError(
                    f"{what}: a constant tensor needs fully specified dimensions, has {entry.type.dimensions}"
                )
            dims: tuple[int, ...] = info.dimensions or ()  # known here; () for scalars
            dtype = info.dtype
            if isinstance(value, (bytes, bytearray, memoryview)):
                raw = bytes(memoryview(value).cast("B"))
                if len(raw) != needed:
                    raise BadDataError(
                        f"{what}: {len(raw)} bytes given, {code.name} {dims} needs {needed}"
                    )
                array = np.frombuffer(raw, dtype).reshape(dims)
            else:
                array = np.array(as_operand_array(value, dtype, what), dtype=dtype, copy=True)
                if array.size != math.prod(dims):
                    raise BadDataError(
                        f"{what}: value has {array.size} elements ({array.shape}), operand is {dims}"
                    )
                array = array.reshape(dims)
                array.flags.writeable = False
            entry.lifetime, entry.value, entry.referenced = Lifetime.CONSTANT_COPY, array, None

    def set_operand_value_from_memory(
        self, index: int, memory: MappedMemory, offset: int, length: int
    ) -> None:
        """Make an operand a constant that reads ``memory[offset:offset+length]`` in place (no copy).

        The memory must stay unchanged while the model, or anything compiled
        from it, is in use; the model keeps it mapped.
        """
        with self._lock:
            what = f"set_operand_value_from_memory(operand {index})"
            require(memory, f"{what}: memory")
            self._check_building("set_operand_value_from_memory")
            entry = self._operand(index, what)
            self._check_settable(index, entry, what)
            if not isinstance(memory, MappedMemory):
                raise BadDataError(
                    f"{what}: expected an nnburst.Memory, got {type(memory).__name__}"
                )
            if entry.type.code == OperandCode.MODEL:
                raise BadDataError(f"{what}: a MODEL operand takes set_operand_value_from_model")
            try:
                offset, length = operator_index(offset), operator_index(length)
            except TypeError as exc:
                raise BadDataError(f"{what}: {exc}") from None
            if memory.closed:
                raise BadStateError(f"{what}: the memory is closed")
            if offset < 0 or length < 0 or offset + length > memory.size:
                raise BadDataError(
                    f"{what}: [{offset}, {offset + length}) is outside the {memory.size}-byte memory"
                )
            info = entry.info
            needed = info.byte_size()
            if needed is None:
                raise BadDataError(
                    f"{what}: a constant tensor needs fully specified dimensions, has {entry.type.dimensions}"
                )
            if length != needed:
                raise BadDataError(f"{what}: length {length} != {needed} bytes needed")
            dims = () if info.is_scalar else info.dimensions
            array = np.frombuffer(
                memoryview(memory.buffer), info.dtype, math.prod(dims or ()), offset
            ).reshape(dims)
            array.flags.writeable = False
            entry.lifetime, entry.value, entry.referenced = Lifetime.CONSTANT_REFERENCE, array, None
            if memory not in self._memories:
                self._memories.append(memory)

    def set_operand_value_from_model(self, index: int, model: Model) -> None:
        """Make a MODEL operand refer to another (finished) model: an IF/WHILE branch or body."""
        with self._lock:
            what = f"set_operand_value_from_model(operand {index})"
            require(model, f"{what}: model")
            self._check_building("set_operand_value_from_model")
            entry = self._operand(index, what)
            self._check_settable(index, entry, what)
            if not isinstance(model, Model):
                raise BadDataError(f"{what}: expected an nnburst.Model, got {type(model).__name__}")
            if entry.type.code != OperandCode.MODEL:
                raise BadDataError(f"{what}: operand is {entry.type.code.name}, not MODEL")
            if not model._finished:
                raise BadStateError(f"{what}: the referenced model is not finished")
            entry.lifetime, entry.value, entry.referenced = Lifetime.SUBGRAPH, None, model

    def set_operand_symm_per_channel_quant_params(
        self, index: int, channel_dim: int, scales: Sequence[float]
    ) -> None:
        """Per-channel scales of a TENSOR_QUANT8_SYMM_PER_CHANNEL operand (conv weights)."""
        with self._lock:
            what = f"set_operand_symm_per_channel_quant_params(operand {index})"
            require(scales, f"{what}: scales")
            self._check_building("set_operand_symm_per_channel_quant_params")
            entry = self._operand(index, what)
            if entry.type.code != OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL:
                raise BadDataError(
                    f"{what}: operand is {entry.type.code.name}, not TENSOR_QUANT8_SYMM_PER_CHANNEL"
                )
            dims = entry.type.dimensions
            try:
                channel_dim = operator_index(channel_dim)
                values = tuple(float(s) for s in scales)
            except (TypeError, ValueError) as exc:
                raise BadDataError(f"{what}: {exc}") from None
            if not dims or not 0 <= channel_dim < len(dims):
                raise BadDataError(f"{what}: channel_dim {channel_dim} is not an axis of {dims}")
            if len(values) != dims[channel_dim]:
                raise BadDataError(f"{what}: {len(values)} scales for {dims[channel_dim]} channels")
            if not all(s > 0 and math.isfinite(s) for s in values):
                raise BadDataError(f"{what}: every scale must be positive")
            entry.channel_quant = ChannelQuant(channel_dim, values)

    def add_operation(
        self, operation_code: OperationCode, inputs: Sequence[int], outputs: Sequence[int]
    ) -> None:
        """Add an operation reading ``inputs`` and writing ``outputs`` (operand indexes).

        Operations may be added in any order.  Operand counts are checked now
        (:mod:`nnburst.arity`); types and shapes at :meth:`finish`, when every
        constant is known.
        """
        with self._lock:
            require(operation_code, "add_operation: operation_code")
            self._check_building("add_operation")
            n = len(self._operations)
            try:
                code = OperationCode(operation_code)
            except ValueError:
                raise BadDataError(
                    f"add_operation (operation {n}): unknown operation code {operation_code!r}"
                ) from None
            what = f"add_operation (operation {n}, {code.name})"
            ins = _index_list(inputs, f"{what}: inputs", len(self._operands))
            outs = _index_list(outputs, f"{what}: outputs", len(self._operands))
            if not outs:
                raise BadDataError(f"{what}: an operation needs at least one output")
            counts = arity(code)
            if counts is not None and not counts.accepts_inputs(len(ins)):
                raise BadDataError(f"{what}: takes {counts.describe('inputs')}, got {len(ins)}")
            if counts is not None and not counts.accepts_outputs(len(outs)):
                raise BadDataError(f"{what}: gives {counts.describe('outputs')}, got {len(outs)}")
            both = set(ins) & set(outs)
            if both:
                raise BadDataError(
                    f"{what}: operand {min(both)} is both an input and an output of the operation"
                )
            self._operations.append(Operation(code, ins, outs))

    def identify_inputs_and_outputs(self, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        """Declare which operands the execution provides and which it reads back (once)."""
        with self._lock:
            self._check_building("identify_inputs_and_outputs")
            what = "identify_inputs_and_outputs"
            if self._identified:
                raise BadStateError(f"{what}: inputs and outputs were already identified")
            ins = _index_list(inputs, f"{what}: inputs", len(self._operands))
            outs = _index_list(outputs, f"{what}: outputs", len(self._operands))
            seen: set[int] = set()
            for kind, indexes in (("input", ins), ("output", outs)):
                for i in indexes:
                    if i in seen:
                        raise BadDataError(
                            f"{what}: operand {i} is listed twice (an operand cannot be both a model input and output)"
                        )
                    seen.add(i)
                    entry = self._operands[i]
                    if entry.lifetime != Lifetime.TEMPORARY_VARIABLE:
                        raise BadDataError(
                            f"{what}: operand {i} has a value ({entry.lifetime.name}) and cannot be a model {kind}"
                        )
                    if entry.type.code == OperandCode.MODEL:
                        raise BadDataError(
                            f"{what}: operand {i} is a MODEL operand and cannot be a model {kind}"
                        )
            for i in ins:
                self._operands[i].lifetime = Lifetime.SUBGRAPH_INPUT
            for i in outs:
                self._operands[i].lifetime = Lifetime.SUBGRAPH_OUTPUT
            self._inputs, self._outputs, self._identified = ins, outs, True

    def relax_computation_float32_to_float16(self, allow: bool) -> None:
        """Let drivers compute TENSOR_FLOAT32 with float16 range and precision."""
        with self._lock:
            self._check_building("relax_computation_float32_to_float16")
            self._relaxed = bool(allow)

    # -- finishing --------------------------------------------------------------------------
    def finish(self) -> None:
        """Check the whole model and freeze it.

        Raises:
            BadStateError: already finished, or a previous finish failed.
            BadDataError: a graph rule is broken or an operation is invalid.
                As in the NDK the model is then invalid: every later call
                raises BAD_STATE.
        """
        with self._lock:
            self._check_building("finish")
            try:
                self._check_graph()
                referenced: list[Subgraph] = []
                index_of = _referenced_index_map(self, referenced)
                hal = HalModel(self._subgraph(index_of), referenced, self._relaxed)
                self._validate_operations(hal)
            except NNError as exc:
                self._invalid = str(exc)
                raise
            self._hal = hal
            self._finished = True

    def _check_graph(self) -> None:
        if not self._operations:
            raise BadDataError("finish: the model has no operations")
        if not self._outputs:
            raise BadDataError(
                "finish: the model has no outputs (call identify_inputs_and_outputs)"
            )
        writer: dict[int, int] = {}
        for n, operation in enumerate(self._operations):
            for i in operation.outputs:
                entry = self._operands[i]
                name = f"operation {n} ({operation.code.name})"
                if i in writer:
                    raise BadDataError(
                        f"finish: operand {i} is written by operation {writer[i]} and by {name}"
                    )
                if entry.lifetime not in (Lifetime.TEMPORARY_VARIABLE, Lifetime.SUBGRAPH_OUTPUT):
                    raise BadDataError(
                        f"finish: {name} writes operand {i}, which is a {_describe(entry.lifetime)}"
                    )
                writer[i] = n
        for i, entry in enumerate(self._operands):
            if (
                entry.type.code == OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
                and entry.channel_quant is None
            ):
                raise BadDataError(
                    f"finish: operand {i} is TENSOR_QUANT8_SYMM_PER_CHANNEL but has no per-channel scales"
                )
            if entry.type.code == OperandCode.MODEL and entry.lifetime != Lifetime.SUBGRAPH:
                raise BadDataError(
                    f"finish: MODEL operand {i} refers to no model (set_operand_value_from_model)"
                )
            if (
                entry.lifetime in (Lifetime.TEMPORARY_VARIABLE, Lifetime.SUBGRAPH_OUTPUT)
                and i not in writer
            ):
                raise BadDataError(
                    f"finish: operand {i} is neither a model input, a constant nor the output of an operation"
                )
        # Kahn's algorithm: everything must become computable, or there is a cycle.
        ready = {i for i, e in enumerate(self._operands) if i not in writer}
        pending = list(range(len(self._operations)))
        while pending:
            runnable = [n for n in pending if all(i in ready for i in self._operations[n].inputs)]
            if not runnable:
                n = pending[0]
                raise BadDataError(
                    f"finish: operation {n} ({self._operations[n].code.name}) is part of a cycle: "
                    "its inputs depend on its own outputs"
                )
            for n in runnable:
                ready.update(self._operations[n].outputs)
            done = set(runnable)
            pending = [n for n in pending if n not in done]

    def _subgraph(self, index_of: dict[int, int]) -> Subgraph:
        operands = []
        for entry in self._operands:
            subgraph = index_of[id(entry.referenced)] if entry.referenced is not None else None
            operands.append(Operand(entry.info, entry.lifetime, entry.value, subgraph))
        return Subgraph(operands, list(self._operations), self._inputs, self._outputs)

    def _validate_operations(self, hal: HalModel) -> None:
        for index in range(len(hal.main.operations)):
            validate_operation(hal, hal.main, index)

    # -- introspection ----------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def hal_model(self) -> HalModel:
        """The frozen HAL model drivers consume (``BAD_STATE`` before :meth:`finish`)."""
        if self._hal is None:
            raise BadStateError("the model is not finished")
        return self._hal

    @property
    def input_types(self) -> list[OperandInfo]:
        return [self._operands[i].info for i in self._inputs]

    @property
    def output_types(self) -> list[OperandInfo]:
        return [self._operands[i].info for i in self._outputs]

    def get_supported_operations_for_devices(self, devices: Sequence[Device]) -> list[bool]:
        """One flag per operation (in insertion order): can any of ``devices`` run it?"""
        require(devices, "get_supported_operations_for_devices: devices")
        if not self._finished:
            raise BadStateError("get_supported_operations_for_devices: the model is not finished")
        devices = list(devices)
        if not devices:
            raise BadDataError("get_supported_operations_for_devices: no devices given")
        supported = [False] * len(self._operations)
        for device in devices:
            if not isinstance(device, Device):
                raise BadDataError(
                    f"get_supported_operations_for_devices: {device!r} is not an nnburst.Device"
                )
            flags = device.hal.get_supported_operations(self.hal_model)
            supported = [a or bool(b) for a, b in zip(supported, flags)]
        return supported


def _describe(lifetime: Lifetime) -> str:
    return {
        Lifetime.SUBGRAPH_INPUT: "model input",
        Lifetime.CONSTANT_COPY: "constant",
        Lifetime.CONSTANT_REFERENCE: "constant",
        Lifetime.NO_VALUE: "omitted (no value) operand",
        Lifetime.SUBGRAPH: "MODEL operand",
    }.get(lifetime, lifetime.name)


def _referenced_index_map(root: Model, out: list[Subgraph]) -> dict[int, int]:
    """Flatten every model reachable through MODEL operands into ``out``; id(model) -> index.

    Referenced models are finished (hence frozen and acyclic), so a plain
    depth-first walk visits each once.
    """
    index_of: dict[int, int] = {}
    order: list[Model] = []

    def visit(model: Model) -> None:
        for entry in model._operands:
            ref = entry.referenced
            if ref is not None and id(ref) not in index_of:
                index_of[id(ref)] = len(order)
                order.append(ref)
                visit(ref)

    visit(root)
    for model in order:
        out.append(model._subgraph(index_of))
    return index_of
