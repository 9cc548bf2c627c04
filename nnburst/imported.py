"""What the model importers share: a converted model and the runner that executes it.

:mod:`nnburst.tflite` and :mod:`nnburst.onnx` turn files into a
:class:`LoadedModel` (a finished ``nn.Model`` plus what a caller needs to
feed it); :class:`Runner` is the execution loop a delegate would run: one
reusable execution bound to fixed buffers, computed through a burst.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .burst import Burst
from .codes import OperandCode, OperationCode
from .compilation import Compilation
from .cpu import threads as kernel_threads
from .devices import Device, get_devices
from .errors import BadDataError
from .execution import Execution
from .hal.types import pool_view
from .memory import Memory
from .model import Model, OperandType
from .operands import OperandInfo

__all__ = [
    "LoadedModel",
    "Runner",
    "TensorInfo",
    "UnsupportedModelError",
    "Variable",
    "exact_input",
    "read_source",
]

#: Where a Runner caches compiled models unless told otherwise (``~`` expanded).
DEFAULT_CACHE_DIR = "~/.cache/nnburst/compilations"


class UnsupportedModelError(BadDataError):
    """The model uses operators or tensors nnburst cannot run; ``unsupported``
    maps each reason to how often it occurs, ``listed`` spells them out (an ONNX
    If or Loop quotes its subgraph's)."""

    def __init__(self, unsupported: Counter[str]) -> None:
        self.unsupported = unsupported
        self.listed = "; ".join(f"{what} ×{count}" for what, count in sorted(unsupported.items()))
        super().__init__(f"the model uses what nnburst cannot run: {self.listed}")


@dataclass
class TensorInfo:
    """A model input or output as a caller sees it."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    scale: float = 0.0
    zero_point: int = 0


@dataclass
class Variable:
    """A variable of a stateful model (a resource variable, or a TFLite variable
    tensor such as an LSTM's state), carried as an extra model input (its value
    before the call) and output (its value after)."""

    name: str
    initial: np.ndarray
    input: int = -1  # the model operand holding the value read at the start
    current: int = -1  # the operand holding its latest value (the last assigned)


@dataclass
class LoadedModel:
    """A converted model: ``model`` is finished; ``inputs``/``outputs`` in its order.

    A stateful model (resource variables, as streaming models keep, or the
    variable tensors of a recurrent layer) has one more model input and output
    per entry of ``state``, after the file's own: the variable's value before
    and after a call.  :class:`Runner` carries them from call to call,
    starting from ``state[i].initial``.
    """

    model: Model
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    #: a digest of the file, the compilation cache's token
    digest: bytes
    state: list[Variable] = field(default_factory=list)


M = TypeVar("M")


class Registry(dict[str, M]):
    """An importer's table of mappers by operator name."""

    def maps(self, *names: str) -> Callable[[M], M]:
        """Decorator: the function maps each of ``names``."""

        def register(mapper: M) -> M:
            for name in names:
                self[name] = mapper
            return mapper

        return register


class ModelBuilder:
    """What every importer's converter does to the ``nn.Model`` it builds: new
    constant operands (the scalars NNAPI operations take) and operations."""

    def __init__(self) -> None:
        self.model = Model()

    def constant(self, code: OperandCode, value: Any, shape: Sequence[int] | None = None) -> int:
        """A new constant operand (a scalar when ``shape`` is None)."""
        operand = self.model.add_operand(
            OperandType(code, tuple(shape) if shape is not None else ())
        )
        self.model.set_operand_value(operand, value)
        return operand

    def i32(self, value: int) -> int:
        return self.constant(OperandCode.INT32, np.int32(value))

    def f32(self, value: float) -> int:
        return self.constant(OperandCode.FLOAT32, np.float32(value))

    def boolean(self, value: bool) -> int:
        return self.constant(OperandCode.BOOL, np.bool_(value))

    def ints(self, values: Sequence[int]) -> int:
        array = np.asarray(values, np.int32).reshape(-1)
        return self.constant(OperandCode.TENSOR_INT32, array, array.shape or (1,))

    def floats(self, values: np.ndarray) -> int:
        array = np.ascontiguousarray(values, np.float32)
        return self.constant(OperandCode.TENSOR_FLOAT32, array, array.shape or (1,))

    def add(self, code: OperationCode, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self.model.add_operation(code, list(inputs), list(outputs))

    def copy(self, source: int, operand_type: OperandType) -> int:
        """A new operand holding ``source``'s values, written by an operation (a model
        output must be computed, not an input or a constant): RESHAPE where it takes
        the type, ADD of zero for integers, LOGICAL_AND with true for booleans."""
        copy = self.model.add_operand(operand_type)
        if operand_type.code == OperandCode.TENSOR_BOOL8:
            true = self.constant(OperandCode.TENSOR_BOOL8, np.ones(1, np.bool_), (1,))
            self.add(OperationCode.LOGICAL_AND, [source, true], [copy])
        elif operand_type.code == OperandCode.TENSOR_INT32:
            zero = self.model.add_operand(
                OperandType(OperandCode.TENSOR_INT32, (1,), operand_type.scale)
            )
            self.model.set_operand_value(zero, np.zeros(1, np.int32))
            self.add(OperationCode.ADD, [source, zero, self.i32(0)], [copy])
        else:
            self.add(
                OperationCode.RESHAPE, [source, self.ints(operand_type.dimensions or (1,))], [copy]
            )
        return copy

    def reshape_boolean(
        self, source: int, shape: Sequence[int], target: Sequence[int], out: int | None = None
    ) -> int:
        """``out`` (a new operand if None): the one-element boolean ``source`` with
        the ``target`` shape.  NNAPI's RESHAPE takes no booleans (IF/WHILE want a
        [1] condition, converters squeeze theirs): REDUCE_ANY drops axes, LOGICAL_AND
        with a true of the target's shape adds them."""
        if out is None:
            out = self.model.add_operand(OperandType(OperandCode.TENSOR_BOOL8, tuple(target)))
        source_rank, target_rank = len(shape or (1,)), len(target)
        if source_rank > target_rank:
            axes = self.ints(list(range(target_rank, source_rank)))
            self.add(OperationCode.REDUCE_ANY, [source, axes, self.boolean(False)], [out])
        else:
            true = self.constant(OperandCode.TENSOR_BOOL8, np.ones(target, np.bool_), target)
            self.add(OperationCode.LOGICAL_AND, [source, true], [out])
        return out

    def finish(self) -> Model:
        """Finish the model.  An operation NNAPI refuses for its operand types (the
        mapping allowed a type the operation does not take) is unsupported."""
        try:
            self.model.finish()
        except BadDataError as exc:
            reason = str(exc.args[0] if exc.args else exc).removeprefix("BAD_DATA: ")
            raise UnsupportedModelError(Counter({reason: 1})) from None
        return self.model


def read_source(source: str | os.PathLike[str] | bytes) -> bytes:
    """A model file's bytes, from its path or as given."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    try:
        return Path(source).read_bytes()
    except OSError as exc:
        raise BadDataError(f"cannot read {source}: {exc.strerror or exc}") from None


def _device(device: str | Device | None) -> list[Device] | None:
    if device is None or isinstance(device, Device):
        return None if device is None else [device]
    devices = get_devices()
    for candidate in devices:
        if candidate.name == device:
            return [candidate]
    names = ", ".join(d.name for d in devices)
    raise BadDataError(f"no device named {device!r} (devices: {names})")


#: Each buffer of a runner starts on a cache line.
_ALIGN = 64


def _bind_buffers(
    execution: Execution, input_types: Sequence[OperandInfo], output_types: Sequence[OperandInfo]
) -> tuple[Memory, list[np.ndarray], list[np.ndarray]]:
    """One shared memory holding every input and output, bound to ``execution``
    and viewed as arrays: a driver in another process maps it once per burst,
    where buffers of this process's own would be copied in and out of a staging
    memory on every call.  An empty output stays an array of its own."""
    types = (*input_types, *output_types)
    shapes = [tuple(t.dimensions or ()) for t in types]
    sizes = [math.prod(shape) * t.dtype.itemsize for t, shape in zip(types, shapes)]
    offsets, end = [], 0
    for size in sizes:
        offsets.append(end)
        end += -(-size // _ALIGN) * _ALIGN
    memory = Memory.create_shared(max(end, _ALIGN))
    view = pool_view(memory)
    places = iter(zip(shapes, sizes, offsets))

    def bind(t: OperandInfo, is_input: bool, index: int) -> np.ndarray:
        shape, size, offset = next(places)
        if size == 0:
            buffer = np.zeros(shape, t.dtype)
            (execution.set_input if is_input else execution.set_output)(index, buffer)
            return buffer
        if is_input:
            execution.set_input_from_memory(index, memory, offset, size)
        else:
            execution.set_output_from_memory(index, memory, offset, size)
        return np.frombuffer(view, t.dtype, math.prod(shape), offset).reshape(shape)

    try:
        inputs = [bind(t, True, i) for i, t in enumerate(input_types)]
        outputs = [bind(t, False, i) for i, t in enumerate(output_types)]
    except BaseException:
        memory.close()
        raise
    return memory, inputs, outputs


def exact_input(info: TensorInfo, dtype: np.dtype[Any], value: Any) -> np.ndarray:
    """``value`` as an array of ``dtype`` (the buffer the model reads input
    ``info`` from), or a :class:`BadDataError` naming the input, the dtype given
    and the dtype expected when that would change a value.

    An array goes in when its dtype is the input's (``info.dtype``, the file's),
    or one numpy casts *safely* to it (every value of the narrower type exists
    in the wider one: int8 → int16, uint8 → int32, float16 → float32, bool →
    any).  Anything else (int32 → int8, float64 → float32, uint8 codes into an
    int8 model, floats into a quantized one) is refused, as onnxruntime and
    LiteRT refuse it: a value that changes on the way in is lost data.  A Python
    number or list has no dtype of its own: it goes in when every value survives
    (integers within range; floats rounded to the input's precision).  An ONNX
    int64 input runs as int32 (NNAPI has no int64): its values must fit.
    """
    if (
        type(value) is np.ndarray
        and value.dtype == dtype == info.dtype
        and value.shape == info.shape
    ):
        return value  # the usual call, in three comparisons
    expected = np.dtype(info.dtype)
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype != expected and not np.can_cast(array.dtype, expected, "safe"):
            raise BadDataError(
                f"input {info.name!r} takes {expected}, got {array.dtype}: only {expected} or a "
                f"dtype that casts to it without changing a value (e.g. int8 -> int16, "
                f"float16 -> float32) goes in; convert it yourself"
                + _quantization_hint(info, expected)
            )
    else:
        try:
            given = np.asarray(value)
            if given.dtype.kind not in "biuf":
                raise TypeError(f"{given.dtype} values")
            array = given.astype(expected)
        except (TypeError, ValueError, OverflowError) as exc:
            raise BadDataError(f"input {info.name!r}: not {expected} data ({exc})") from None
        if expected.kind != "f" and not np.array_equal(array, given):
            raise BadDataError(
                f"input {info.name!r}: {given.dtype} values that change as {expected}"
                + _quantization_hint(info, expected)
            )
    if array.shape != info.shape:
        raise BadDataError(
            f"input {info.name!r}: expected shape {list(info.shape)}, got {list(array.shape)}"
        )
    if dtype != expected:  # the file's type runs as a narrower one
        narrowed = array.astype(dtype)
        if not np.array_equal(narrowed, array):
            raise BadDataError(
                f"input {info.name!r}: {expected} values beyond the {dtype} this input runs as"
            )
        return narrowed
    return array


def _as_is(info: TensorInfo, buffer: np.ndarray) -> bool:
    """Whether ``buffer`` holds the file's tensor ``info`` as it is (dtype and shape)."""
    return buffer.dtype == info.dtype and buffer.shape == tuple(info.shape)


def _quantization_hint(info: TensorInfo, dtype: np.dtype[Any]) -> str:
    if not info.scale:
        return ""
    return (
        f" (a quantized input: real values x go in as round(x / {info.scale:g}) + "
        f"{info.zero_point}, as {dtype})"
    )


class Runner:
    """Runs an imported model: ``runner(*inputs)`` → outputs, as numpy arrays in the
    model's order.

    The model is compiled once (cached on disk under the file's digest), and
    every call copies the inputs into fixed buffers and computes one reusable
    execution, through a burst unless ``burst=False``.  Each importer's Runner
    sets :attr:`load`, which reads its files.

    Inputs must keep their values on the way in (:func:`exact_input`).  One
    Runner may be shared by threads: its calls take turns (a lock; an
    uncontended call pays ~0.1 µs for it), as its buffers are one set.

    ``threads``: the kernel threads of the in-process CPU driver's plans for
    this model (0 or None: ``NNBURST_THREADS``, else one; see
    ``nnburst/cpu/threads.py``), held until :meth:`close`.  A driver service
    takes its own ``--threads``.
    """

    @staticmethod
    def load(source: Any) -> LoadedModel:
        """Read a model file of this importer's format."""
        raise NotImplementedError

    def __init__(
        self,
        model: Any,
        device: str | Device | None = None,
        burst: bool = True,
        cache_dir: str | os.PathLike[str] | None = DEFAULT_CACHE_DIR,
        threads: int | None = None,
        threads_option: str = "threads",
    ) -> None:
        wanted = kernel_threads.checked_threads(threads, threads_option)
        self.loaded = model if isinstance(model, LoadedModel) else type(self).load(model)
        self.compilation = Compilation(self.loaded.model, _device(device))
        if cache_dir is not None:  # None: no caching
            directory = Path(cache_dir).expanduser()
            directory.mkdir(parents=True, exist_ok=True)
            self.compilation.set_caching(directory, self.loaded.digest)
        hold = kernel_threads.hold(wanted, threads_option)
        #: gives the kernel threads back at close, or when the Runner is collected
        self._threads = weakref.finalize(self, hold.release) if hold is not None else None
        try:
            with kernel_threads.asked(wanted, threads_option):
                self.compilation.finish()
        except BaseException:
            self._release_threads()
            raise
        self.execution = Execution(self.compilation)
        self.execution.set_reusable(True)
        self._memory, self._inputs, self._outputs = _bind_buffers(
            self.execution, self.loaded.model.input_types, self.loaded.model.output_types
        )
        self.burst = Burst(self.compilation) if burst else None
        self._lock = threading.Lock()
        #: where each variable's value goes in (model inputs) and comes out (outputs)
        count = len(self.loaded.state)
        self._state_in = self._inputs[len(self._inputs) - count :]
        self._state_out = self._outputs[len(self._outputs) - count :]
        self._carry = list(zip(self._state_in, self._state_out))
        #: per input, what a call's value is checked against: (info, buffer, the
        #: dtype and shape an array goes in as is, or None when the file's type
        #: runs as another or its scalar as a [1] operand: exact_input decides)
        self._feeds = [
            (info, buffer, buffer.dtype if _as_is(info, buffer) else None, buffer.shape)
            for info, buffer in zip(self.loaded.inputs, self._inputs)
        ]
        #: per output: its buffer, and None, or the file's (shape, dtype) when the
        #: buffer's differ (a [1] scalar, an int64 that ran as int32)
        self._results = [
            (out, None if _as_is(info, out) else (info.shape, info.dtype))
            for out, info in zip(self._outputs, self.loaded.outputs)
        ]
        self._compute = (
            self.execution.compute
            if self.burst is None
            else functools.partial(self.execution.burst_compute, self.burst)
        )
        self.reset()

    def reset(self) -> None:
        """Put every variable back to its initial value (a new stream)."""
        for buffer, variable in zip(self._state_in, self.loaded.state):
            np.copyto(buffer, variable.initial.reshape(buffer.shape))

    @property
    def state(self) -> list[np.ndarray]:
        """The variables' values now (copies, in ``loaded.state`` order): what the
        next call starts from."""
        return [buffer.copy() for buffer in self._state_in]

    @property
    def inputs(self) -> list[TensorInfo]:
        return self.loaded.inputs

    @property
    def outputs(self) -> list[TensorInfo]:
        return self.loaded.outputs

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        feeds = self._feeds
        if len(inputs) != len(feeds):
            raise BadDataError(f"the model takes {len(feeds)} inputs, got {len(inputs)}")
        with self._lock:
            for (info, buffer, dtype, shape), value in zip(feeds, inputs):
                if type(value) is np.ndarray and value.dtype is dtype and value.shape == shape:
                    buffer[...] = value  # the usual call: what np.copyto does, for less
                else:  # a file's scalar is a [1] operand
                    np.copyto(buffer, exact_input(info, buffer.dtype, value).reshape(buffer.shape))
            self._compute()
            for before, after in self._carry:
                before[...] = after  # np.copyto's work without its dispatch
            # Fresh arrays the caller owns.  A file's scalar is a [1] operand: given
            # back with the file's shape; int64 outputs ran as int32 (NNAPI has no
            # int64): back in the file's type.
            return [
                out.copy() if file is None else out.reshape(file[0]).astype(file[1])
                for out, file in self._results
            ]

    def _buffers_as_is(self) -> list[np.ndarray | None]:
        """Per input, the buffer an array of the file's dtype and shape can be
        written straight into (None where the file's type runs as another):
        the Interpreter's ``set_tensor`` fills these, saving a copy a call."""
        return [buffer if dtype is not None else None for _, buffer, dtype, _ in self._feeds]

    def _run_in_place(self, inputs: dict[int, Any]) -> list[np.ndarray]:
        """Run on what the buffers hold, after writing ``inputs`` (by position:
        those :meth:`_buffers_as_is` has no buffer for).  The outputs are this
        Runner's own buffers, valid until its next run or close: for a caller
        that copies them anyway (the Interpreter's ``get_tensor``)."""
        with self._lock:
            for position, value in inputs.items():
                info, buffer, _, _ = self._feeds[position]
                np.copyto(buffer, exact_input(info, buffer.dtype, value).reshape(buffer.shape))
            self._compute()
            for before, after in self._carry:
                before[...] = after
            return [
                out if file is None else out.reshape(file[0]).astype(file[1])
                for out, file in self._results
            ]

    def close(self) -> None:
        if self.burst is not None:
            self.burst.close()
        self.execution.close()
        self.compilation.close()
        self._memory.close()
        self._release_threads()

    def _release_threads(self) -> None:
        if self._threads is not None:
            self._threads()  # a finalize runs once

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
