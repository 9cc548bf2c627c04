"""``Execution`` and ``Event``: one application of a compiled model (``ANeuralNetworksExecution``).

The app binds every input and output, then computes synchronously
(``compute``), asynchronously (``start_compute`` → ``Event``) or through a
``Burst``.  Bindings become a HAL ``Request`` whose pools are the app's own
buffers: the in-process CPU driver reads and writes numpy arrays in place,
and ``Memory`` objects are passed as they are.  A driver's HAL status comes
back as an :class:`~nnburst.NNError` with the NDK result code.
"""

from __future__ import annotations

import atexit
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import deadlines, tracing
from .burst import Burst
from .checks import operator_index, require, require_duration
from .codes import DurationCode, ErrorStatus, ResultCode
from .compilation import Compilation
from .errors import BadDataError, BadStateError, NNError, result_code_for_status
from .hal.interfaces import ExecutionResult, IExecution, IPreparedModel
from .hal.staging import BoundRequest
from .hal.types import (
    DEFAULT_LOOP_TIMEOUT_NS,
    MAXIMUM_LOOP_TIMEOUT_NS,
    NO_TIMING,
    NO_TIMING_US,
    DataLocation,
    MeasureTiming,
    OutputShape,
    Request,
    RequestArgument,
    Timing,
)
from .memory import Memory
from .model import as_operand_array
from .operands import OperandInfo, OperandType, merge_dimensions

__all__ = ["Event", "Execution", "get_default_loop_timeout", "get_maximum_loop_timeout"]

logger = logging.getLogger("nnburst.execution")


def get_default_loop_timeout() -> int:
    """The WHILE loop timeout of an execution that never called ``set_loop_timeout`` (ns).

    ``ANeuralNetworks_getDefaultLoopTimeout``.
    """
    return DEFAULT_LOOP_TIMEOUT_NS


def get_maximum_loop_timeout() -> int:
    """The largest loop timeout ``set_loop_timeout`` keeps; larger values are clamped to it (ns).

    ``ANeuralNetworks_getMaximumLoopTimeout``.
    """
    return MAXIMUM_LOOP_TIMEOUT_NS


#: ``getDuration`` value when a duration is not available.
NO_DURATION = 2**64 - 1

_PREPARATION, _COMPUTATION, _COMPLETED = "preparation", "computation", "completed"
# Module constants for the hot path: a class attribute costs ~0.1 µs per use.
_NONE = ErrorStatus.NONE
_RUNTIME, _EXECUTION = tracing.Layer.RUNTIME, tracing.Phase.EXECUTION


# -- arguments --------------------------------------------------------------------------------
@dataclass
class Argument:
    """One bound input or output, as the app gave it.

    Exactly one of ``array``/``buffer``/``memory`` is set unless the argument
    is omitted.  ``dims`` are the dimensions the app declared (``()`` when it
    declared none beyond the model's).
    """

    omitted: bool = False
    array: np.ndarray | None = None  # inputs: converted to ``dtype`` at compute time
    buffer: memoryview | None = None  # flat bytes
    memory: Memory | None = None
    offset: int = 0
    length: int = 0
    dims: tuple[int, ...] = ()
    dtype: np.dtype | None = None

    def data(self) -> np.ndarray | memoryview:
        """The argument's bytes source for a pool: an array of the operand's dtype or a flat view."""
        if self.array is not None:
            # np.asarray returns the array itself when it already fits: no copy.
            array = np.asarray(self.array, dtype=self.dtype, order="C")
            return array if array.nbytes else memoryview(bytearray(0))
        assert self.buffer is not None
        return self.buffer


# -- the asynchronous side --------------------------------------------------------------------
class Event:
    """Completion of an asynchronous execution; any number of threads may :meth:`wait` on it."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._error: NNError | None = None
        self._callbacks: list[Callable[[Event], None]] = []
        self._lock = threading.Lock()

    def wait(self) -> None:
        """Block until the execution ends (``ANeuralNetworksEvent_wait``).

        Raises:
            NNError: the execution failed; ``code`` says how.
        """
        self._done.wait()
        if self._error is not None:
            # A fresh exception per waiter: raising one instance from several
            # threads would tangle their tracebacks.
            raise type(self._error)(self._error.args[0], self._error.code) from self._error

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _finish(self, error: NNError | None) -> None:
        with self._lock:
            self._error = error
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def _when_done(self, callback: Callable[[Event], None]) -> None:
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self)

    def close(self) -> None:
        """Wait for the execution to end (``ANeuralNetworksEvent_free``), ignoring its result."""
        self._done.wait()

    def __enter__(self) -> Event:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _WorkerPool:
    """A few daemon threads running asynchronous executions.

    Daemon threads never keep the interpreter alive; ``shutdown`` (run at
    exit) still stops and joins them so nothing runs during teardown.
    """

    def __init__(self, max_workers: int) -> None:
        self._max = max_workers
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, task: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                raise BadStateError("the interpreter is shutting down")
            if self._idle == 0 and len(self._threads) < self._max:
                thread = threading.Thread(
                    target=self._work, name=f"nnburst-exec-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
            self._queue.put(task)

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            task = self._queue.get()
            with self._lock:
                self._idle -= 1
            if task is None:
                return
            try:
                task()
            except BaseException:  # tasks report their own errors; never kill the worker
                logger.exception("asynchronous execution task failed")

    def shutdown(self, timeout: float = 1.0) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


_pool = _WorkerPool(max_workers=4)
atexit.register(_pool.shutdown)


# -- the execution ----------------------------------------------------------------------------
class Execution:
    """Inputs and outputs bound to a compiled model, computed once (or many times if reusable).

    Misuse is ``BAD_STATE``: binding after a computation started, computing
    while a computation runs, or computing a completed execution that is not
    reusable.
    """

    def __init__(self, compilation: Compilation) -> None:
        require(compilation, "Execution: compilation")
        if not isinstance(compilation, Compilation):
            raise BadDataError(
                f"Execution: expected an nnburst.Compilation, got {type(compilation).__name__}"
            )
        self._prepared: IPreparedModel = compilation.prepared_for("Execution")
        self._compilation = compilation
        model = compilation.model
        self._input_infos: list[OperandInfo] = model.input_types
        self._output_infos: list[OperandInfo] = model.output_types
        self._inputs: list[Argument | None] = [None] * len(self._input_infos)
        self._outputs: list[Argument | None] = [None] * len(self._output_infos)
        self._measure = False
        self._timeout_ns = 0
        self._loop_timeout_ns = DEFAULT_LOOP_TIMEOUT_NS
        self._reusable = False
        self._state = _PREPARATION
        #: set by the first computation, when the bindings become final: whether an
        #: input is a device memory (checked for data each time) and whether no output is
        #: a device memory (none to mark), which _begin and _complete then skip.
        self._input_memories = True
        self._plain_outputs = False
        self._status: ErrorStatus | None = None
        self._shapes: list[OutputShape] = []
        self._timing: Timing = NO_TIMING
        self._lock = threading.Lock()
        #: the request over the bindings, once it is known to stay valid
        self._stable_request: Request | None = None
        #: the driver's reusable execution of the stable request
        self._direct: IExecution | None = None
        #: set by the first computation: nothing in the bindings or settings asks
        #: more of a repeat than a burst's C path does (reusable, no deadline, no
        #: timing, no device memory to check or mark)
        self._repeatable = False
        #: the stable request, once a burst computed it under those settings:
        #: burst_compute then offers it to the burst's armed repeat first
        self._repeat_request: Request | None = None
        self._closed = False

    @property
    def compilation(self) -> Compilation:
        return self._compilation

    # -- binding -------------------------------------------------------------------------
    def _check_preparation(self, what: str) -> None:
        if self._state != _PREPARATION:
            raise BadStateError(f"{what}: the execution has already started")

    def _forget_request(self) -> IExecution | None:
        """Forget the kept request (lock held); returns the driver's execution of
        it, for the caller to close once the lock is released."""
        direct, self._direct = self._direct, None
        self._stable_request = self._repeat_request = None
        return direct

    def close(self) -> None:
        """Release what the driver holds for this execution (``ANeuralNetworksExecution_free``).

        A reusable execution keeps its driver's reusable execution (for a
        service: a staging memory and a burst) until this, or until it is
        garbage collected; other executions release it when they complete.
        Idempotent; an execution still computing releases it when it ends.
        """
        with self._lock:
            self._closed = True
            direct = self._forget_request() if self._state != _COMPUTATION else None
        if direct is not None:
            direct.close()

    def __enter__(self) -> Execution:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _bind(self, what: str, is_input: bool, index: Any) -> tuple[int, OperandInfo]:
        self._check_preparation(what)
        infos = self._input_infos if is_input else self._output_infos
        try:
            i = operator_index(index)
        except TypeError:
            raise BadDataError(f"{what}: index must be an integer, got {index!r}") from None
        if not 0 <= i < len(infos):
            kind = "inputs" if is_input else "outputs"
            raise BadDataError(
                f"{what}: index {i} out of range (the model has {len(infos)} {kind})"
            )
        return i, infos[i]

    def set_input(self, index: int, value: Any, operand_type: OperandType | None = None) -> None:
        """Bind input ``index`` to a numpy array, a bytes-like buffer or a Python number.

        The data is read when the execution runs, so a reusable execution sees
        in-place updates of the array.  ``None`` omits an optional input.  A
        numpy array's shape gives dimensions the model left unknown.
        """
        with self._lock:
            what = f"set_input({index})"
            i, info = self._bind(what, True, index)
            self._inputs[i] = self._argument(what, True, info, value, operand_type)

    def set_output(self, index: int, value: Any, operand_type: OperandType | None = None) -> None:
        """Bind output ``index`` to a C-contiguous writable numpy array (or buffer), filled in place.

        ``None`` omits the output.
        """
        with self._lock:
            what = f"set_output({index})"
            i, info = self._bind(what, False, index)
            self._outputs[i] = self._argument(what, False, info, value, operand_type)

    def set_input_from_memory(
        self,
        index: int,
        memory: Memory,
        offset: int,
        length: int,
        operand_type: OperandType | None = None,
    ) -> None:
        """Bind input ``index`` to ``memory[offset:offset+length]`` (read in place)."""
        with self._lock:
            what = f"set_input_from_memory({index})"
            require(memory, f"{what}: memory")
            i, info = self._bind(what, True, index)
            self._inputs[i] = self._memory_argument(
                what, True, i, info, memory, offset, length, operand_type
            )

    def set_output_from_memory(
        self,
        index: int,
        memory: Memory,
        offset: int,
        length: int,
        operand_type: OperandType | None = None,
    ) -> None:
        """Bind output ``index`` to ``memory[offset:offset+length]`` (written in place)."""
        with self._lock:
            what = f"set_output_from_memory({index})"
            require(memory, f"{what}: memory")
            i, info = self._bind(what, False, index)
            self._outputs[i] = self._memory_argument(
                what, False, i, info, memory, offset, length, operand_type
            )

    def _declared_dims(
        self, what: str, info: OperandInfo, operand_type: OperandType | None
    ) -> tuple[int, ...] | None:
        """Dimensions an ``operand_type`` adds to the model's (None: it adds none)."""
        if operand_type is None:
            return None
        if not isinstance(operand_type, OperandType):
            raise BadDataError(f"{what}: operand_type must be an nnburst.OperandType")
        if (operand_type.code, operand_type.scale, operand_type.zero_point) != (
            info.code,
            info.scale,
            info.zero_point,
        ):
            raise BadDataError(
                f"{what}: operand_type {operand_type.code.name} (scale {operand_type.scale}, zero point "
                f"{operand_type.zero_point}) differs from the model's {info.code.name} "
                f"(scale {info.scale}, zero point {info.zero_point}); only dimensions may be refined"
            )
        if info.is_scalar:
            if operand_type.dimensions not in ((), None):
                raise BadDataError(f"{what}: a scalar operand takes no dimensions")
            return None
        if not operand_type.dimensions:
            return None
        return tuple(operand_type.dimensions)

    def _check_dims(
        self, what: str, is_input: bool, info: OperandInfo, dims: tuple[int, ...] | None
    ) -> tuple[int, ...] | None:
        """Check declared dims against the model; returns the effective dims (None: unknown rank)."""
        if info.is_scalar:
            return ()
        model = info.dimensions
        if dims is None:
            effective = model
        else:
            try:
                merge_dimensions(dims, model)
            except ValueError as exc:
                raise BadDataError(
                    f"{what}: dimensions {dims} conflict with the model's {model}: {exc}"
                ) from None
            effective = dims
        if is_input and (effective is None or not effective or any(d <= 0 for d in effective)):
            raise BadDataError(
                f"{what}: input dimensions {effective} are not fully specified; "
                "pass an array of the right shape or an operand_type"
            )
        return effective

    def _check_length(
        self,
        what: str,
        is_input: bool,
        info: OperandInfo,
        dims: tuple[int, ...] | None,
        length: int,
    ) -> None:
        needed = info.byte_size(dims)
        if needed is not None and length != needed:
            raise BadDataError(
                f"{what}: {length} bytes given, {info.code.name} {dims} needs {needed}"
            )

    def _argument(
        self,
        what: str,
        is_input: bool,
        info: OperandInfo,
        value: Any,
        operand_type: OperandType | None,
    ) -> Argument:
        declared = self._declared_dims(what, info, operand_type)
        if value is None:
            return Argument(omitted=True)
        if isinstance(value, Memory):
            raise BadDataError(
                f"{what}: pass Memory objects to set_{'input' if is_input else 'output'}_from_memory"
            )
        dtype = info.dtype
        if isinstance(value, (np.ndarray, np.generic)) or (is_input and not _is_buffer(value)):
            if is_input:
                # Arrays are read (and converted) when the execution runs; Python values are frozen now.
                array = as_operand_array(value, dtype, what, convert=False)
                if not isinstance(value, np.ndarray):
                    array = np.array(array, dtype=dtype, copy=True)
            else:
                array = value
                if array.dtype != dtype:
                    raise BadDataError(
                        f"{what}: output array must have dtype {dtype}, got {array.dtype}"
                    )
                if not array.flags.c_contiguous or not array.flags.writeable:
                    raise BadDataError(f"{what}: output array must be C-contiguous and writable")
            if info.is_scalar:
                if array.ndim != 0:
                    raise BadDataError(
                        f"{what}: scalar {info.code.name} takes a 0-d array or a number, got shape {array.shape}"
                    )
                dims: tuple[int, ...] = ()
            elif declared is not None:
                if array.size != math.prod(declared):
                    raise BadDataError(
                        f"{what}: array of shape {array.shape} does not hold operand_type dimensions {declared}"
                    )
                dims = declared
            else:
                dims = tuple(int(d) for d in array.shape)
            effective = self._check_dims(what, is_input, info, dims if not info.is_scalar else None)
            self._check_length(what, is_input, info, effective, array.size * dtype.itemsize)
            return Argument(array=array, length=array.size * dtype.itemsize, dims=dims, dtype=dtype)
        if not _is_buffer(value):
            raise BadDataError(
                f"{what}: expected a numpy array or a writable buffer, got {type(value).__name__}"
            )
        view = memoryview(value)
        if not view.c_contiguous:
            raise BadDataError(f"{what}: the buffer must be C-contiguous")
        view = view.cast("B") if view.nbytes else memoryview(bytearray(0))
        if not is_input and view.readonly:
            raise BadDataError(f"{what}: the output buffer is read-only")
        effective = self._check_dims(what, is_input, info, declared)
        self._check_length(what, is_input, info, effective, view.nbytes)
        return Argument(buffer=view, length=view.nbytes, dims=declared or (), dtype=info.dtype)

    def _memory_argument(
        self,
        what: str,
        is_input: bool,
        index: int,
        info: OperandInfo,
        memory: Any,
        offset: Any,
        length: Any,
        operand_type: OperandType | None,
    ) -> Argument:
        if not isinstance(memory, Memory):
            raise BadDataError(f"{what}: expected an nnburst.Memory, got {type(memory).__name__}")
        try:
            offset, length = operator_index(offset), operator_index(length)
        except TypeError as exc:
            raise BadDataError(f"{what}: {exc}") from None
        if memory.closed:
            raise BadStateError(f"{what}: the memory is closed")
        if memory.desc is not None:
            return self._desc_memory_argument(
                what, is_input, index, info, memory, offset, length, operand_type
            )
        if offset < 0 or length < 0 or offset + length > memory.size:
            raise BadDataError(
                f"{what}: [{offset}, {offset + length}) is outside the {memory.size}-byte memory"
            )
        if not is_input and memory.buffer.readonly:
            raise BadDataError(f"{what}: the memory is read-only")
        declared = self._declared_dims(what, info, operand_type)
        effective = self._check_dims(what, is_input, info, declared)
        self._check_length(what, is_input, info, effective, length)
        return Argument(
            memory=memory, offset=offset, length=length, dims=declared or (), dtype=info.dtype
        )

    def _desc_memory_argument(
        self,
        what: str,
        is_input: bool,
        index: int,
        info: OperandInfo,
        memory: Memory,
        offset: int,
        length: int,
        operand_type: OperandType | None,
    ) -> Argument:
        """A memory from a MemoryDesc: used whole, and only in a role its descriptor names."""
        desc = memory.desc
        assert desc is not None
        if offset or length:
            raise BadDataError(
                f"{what}: a memory from a MemoryDesc is used whole: offset and length must be 0"
            )
        if not desc.has_role(self._compilation, is_input, index):
            kind = "input" if is_input else "output"
            raise BadDataError(
                f"{what}: the memory's descriptor has no role as {kind} {index} of this compilation"
            )
        declared = self._declared_dims(what, info, operand_type)
        dims = desc.dimensions or ()
        if declared is not None and declared != dims:
            raise BadDataError(
                f"{what}: operand_type dimensions {declared} differ from the memory's {dims}"
            )
        self._check_dims(what, is_input, info, None if info.is_scalar else dims)
        return Argument(
            memory=memory,
            offset=0,
            length=memory.size,
            dims=() if info.is_scalar else dims,
            dtype=info.dtype,
        )

    # -- settings ------------------------------------------------------------------------
    def set_measure_timing(self, measure: bool) -> None:
        """Ask the driver for device and driver time (see :meth:`get_duration`).

        As in the NDK, only for a compilation created for exactly one device.
        """
        with self._lock:
            self._check_preparation("set_measure_timing")
            if not self._compilation.single_explicit_device:
                raise BadDataError(
                    "set_measure_timing: the compilation must be created for exactly one device"
                )
            self._measure = bool(measure)

    def set_timeout(self, duration_ns: int) -> None:
        """Maximum time for the computation (0: none); one-device compilations only.

        It bounds every path: the driver's ``execute_synchronously`` gets it as
        a HAL 1.3 deadline, and a burst stops waiting for its result at it
        (``MISSED_DEADLINE_TRANSIENT``; see ``hal/burst_controller.py``).
        """
        with self._lock:
            self._check_preparation("set_timeout")
            duration_ns = require_duration(duration_ns, "set_timeout")
            if not self._compilation.single_explicit_device:
                raise BadDataError(
                    "set_timeout: the compilation must be created for exactly one device"
                )
            self._timeout_ns = duration_ns

    def set_loop_timeout(self, duration_ns: int) -> None:
        """Maximum time a WHILE loop may run; clamped to 15 s (default 2 s), as the NDK does.

        A loop running longer fails the execution with
        ``MISSED_DEADLINE_TRANSIENT``.  Executions through a burst's FMQ
        channel get the driver default (2 s): HAL 1.2 burst packets carry no
        loop timeout.
        """
        with self._lock:
            self._check_preparation("set_loop_timeout")
            self._loop_timeout_ns = min(
                require_duration(duration_ns, "set_loop_timeout"), MAXIMUM_LOOP_TIMEOUT_NS
            )

    def set_reusable(self, reusable: bool) -> None:
        """Allow computing this execution again after it completes (feature level 5)."""
        with self._lock:
            self._check_preparation("set_reusable")
            self._reusable = bool(reusable)

    # -- computing -----------------------------------------------------------------------
    def _begin(self, what: str) -> None:
        """Move to COMPUTATION, or raise why this execution cannot compute now."""
        with self._lock:
            repeat = self._state is _COMPLETED and self._reusable and not self._closed
            if repeat and not self._input_memories:  # the common repeat: nothing to check
                self._state = _COMPUTATION
                return
            if self._closed:
                raise BadStateError(f"{what}: the execution is closed")
            if self._state == _COMPUTATION:
                raise BadStateError(f"{what}: the execution is already computing")
            if self._state == _COMPLETED and not self._reusable:
                raise BadStateError(f"{what}: the execution has completed and is not reusable")
            if self._state == _PREPARATION:
                for kind, args in (("input", self._inputs), ("output", self._outputs)):
                    for i, arg in enumerate(args):
                        if arg is None:
                            raise BadDataError(
                                f"{what}: {kind} {i} is not set (bind it, or pass None to omit it)"
                            )
            for i, arg in enumerate(self._inputs):
                if arg is not None and arg.memory is not None and not arg.memory.initialized:
                    raise BadDataError(f"{what}: input {i}'s memory holds no data yet")
            self._input_memories = any(  # only a device memory can hold no data
                arg is not None and arg.memory is not None and arg.memory.desc is not None
                for arg in self._inputs
            )
            self._plain_outputs = not any(
                arg is not None and arg.memory is not None and arg.memory.desc is not None
                for arg in self._outputs
            )
            self._repeatable = (
                self._reusable
                and not self._measure
                and not self._timeout_ns
                and not self._input_memories
                and self._plain_outputs
            )
            self._state = _COMPUTATION

    def _abort(self) -> None:
        """Undo ``_begin`` when the computation could not even start."""
        with self._lock:
            # Back in preparation a binding may change: the kept request would be stale.
            self._state = _COMPLETED if self._status is not None else _PREPARATION
            direct = self._forget_request()
        if direct is not None:
            direct.close()

    def _complete(self, result: ExecutionResult, what: str) -> None:
        """Record a driver result and raise its error, if any."""
        status, shapes, timing = result
        if type(status) is not ErrorStatus:  # the enum call costs more than the check
            status = ErrorStatus(status)
        ok = status is _NONE
        with self._lock:
            self._status = status
            keep = ok or status is ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
            self._shapes = list(shapes) if keep else []
            if ok and len(self._shapes) != len(self._outputs):
                self._shapes = [
                    OutputShape(self._declared_shape(i)) for i in range(len(self._outputs))
                ]
            self._timing = timing if (ok and self._measure) else NO_TIMING
            if not self._plain_outputs:
                for arg in self._outputs:
                    if arg is not None and arg.memory is not None and arg.memory.desc is not None:
                        # As NNAPI: a failed execution leaves its device-memory outputs
                        # without data.
                        arg.memory.initialized = ok
            self._state = _COMPLETED
            # It cannot compute again: release what the driver holds for it.
            direct = self._forget_request() if self._closed or not self._reusable else None
        if direct is not None:
            direct.close()
        if ok:
            return
        device = self._compilation.device
        where = f" on {device.name}" if device is not None else ""
        if status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
            short = [
                f"output {i} needs {s.dimensions}"
                for i, s in enumerate(self._shapes)
                if not s.is_sufficient
            ]
            detail = "; ".join(short) or "an output buffer is too small"
            raise NNError(f"{what}: {detail}", ResultCode.OUTPUT_INSUFFICIENT_SIZE)
        reason = self._prepared.failure_reason()
        raise NNError(
            f"{what}: the execution failed{where} ({status.name})"
            + (f": {reason}" if reason else ""),
            result_code_for_status(status),
        )

    def _declared_shape(self, i: int) -> tuple[int, ...]:
        arg = self._outputs[i]
        if arg is not None and arg.dims:
            return arg.dims
        info = self._output_infos[i]
        return () if info.is_scalar or info.dimensions is None else tuple(info.dimensions)

    def _request(self) -> tuple[Request, bool]:
        """The HAL request whose pools are the bound buffers themselves, and
        whether it stays valid for later computations (False when an input
        array had to be converted to its operand's dtype: that copy is taken
        afresh at every computation, so in-place updates are seen)."""
        pools: list[Any] = []
        memory_pools: dict[int, int] = {}
        stable = True

        def location(arg: Argument) -> DataLocation:
            nonlocal stable
            if arg.memory is not None:
                index = memory_pools.get(id(arg.memory))
                if index is None:
                    index = memory_pools[id(arg.memory)] = len(pools)
                    pools.append(arg.memory)
                return DataLocation(index, arg.offset, arg.length)
            data = arg.data()
            stable = stable and (arg.array is None or data is arg.array)
            pools.append(data)
            return DataLocation(len(pools) - 1, 0, arg.length)

        def arguments(args: list[Argument | None]) -> list[RequestArgument]:
            out = []
            for arg in args:
                assert arg is not None
                if arg.omitted:
                    out.append(RequestArgument(has_no_value=True))
                else:
                    out.append(RequestArgument(False, location(arg), arg.dims))
            return out

        inputs = arguments(self._inputs)
        outputs = arguments(self._outputs)
        return Request(inputs, outputs, pools), stable

    def _current_request(self) -> tuple[Request, bool]:
        """The request for this computation, and whether it is kept for the next ones.

        Bindings cannot change once an execution has computed, so a stable
        request (see :meth:`_request`) is built once: the driver and a burst
        recognise it and skip their per-request work."""
        if self._stable_request is not None:
            return self._stable_request, True
        try:
            request, stable = self._request()
        except NNError:
            raise
        except Exception as exc:  # e.g. a buffer that stopped exporting
            raise BadDataError(f"cannot build the request: {exc}") from exc
        if stable:
            self._stable_request = request
        return request, stable

    def _bound(self, deadline_ns: int | None) -> BoundRequest:
        """This computation's request and settings, as one value for the burst path."""
        measure = MeasureTiming.YES if self._measure else MeasureTiming.NO
        return BoundRequest(self._current_request()[0], measure, deadline_ns, self._loop_timeout_ns)

    def _execute_directly(self, deadline_ns: int | None) -> ExecutionResult:
        """Run on the prepared model; driver errors come back as a status.

        The driver's reusable execution of a stable request is made once and
        kept, so its validation and buffer mapping are paid once."""
        execution = self._direct
        if execution is not None:
            return execution.compute(deadline_ns)
        request, stable = self._current_request()
        measure = MeasureTiming.YES if self._measure else MeasureTiming.NO
        execution = self._prepared.create_reusable_execution(
            request, measure, self._loop_timeout_ns
        )
        if stable:
            self._direct = execution
            return execution.compute(deadline_ns)
        try:  # a request for this computation only
            return execution.compute(deadline_ns)
        finally:
            execution.close()

    def _deadline(self, duration_ns: int | None = None) -> int | None:
        """The computation's absolute deadline (``nnburst.deadlines``): from
        ``duration_ns``, else :meth:`set_timeout`'s; None for no bound."""
        duration_ns = self._timeout_ns if duration_ns is None else duration_ns
        return deadlines.after(duration_ns) if duration_ns else None  # no call without a bound

    def compute(self) -> None:
        """Run the execution and wait for it (``ANeuralNetworksExecution_compute``).

        Raises:
            BadStateError: see the class docstring.
            BadDataError: an input or output is not bound, or the driver
                rejected the request.
            NNError: the execution failed (``OUTPUT_INSUFFICIENT_SIZE``:
                query :meth:`get_output_operand_dimensions` for the sizes).
        """
        self._begin("compute")
        try:
            result = tracing.call(
                _RUNTIME, _EXECUTION, "compute", self._execute_directly, self._deadline()
            )
        except BaseException:
            self._abort()
            raise
        self._complete(result, "compute")

    def start_compute(self) -> Event:
        """Run the execution on a worker thread; returns the :class:`Event` to wait on."""
        return self.start_compute_with_dependencies([], 0)

    def start_compute_with_dependencies(
        self, events: Iterable[Event], duration_ns: int = 0
    ) -> Event:
        """Run once every event in ``events`` has signalled; fails if any of them failed.

        ``duration_ns`` bounds the computation after the dependencies are met
        (0: no bound); one-device compilations only.
        """
        require(events, "start_compute_with_dependencies: events")
        dependencies = list(events)
        for event in dependencies:
            if not isinstance(event, Event):
                raise BadDataError(
                    f"start_compute_with_dependencies: {event!r} is not an nnburst.Event"
                )
        duration_ns = require_duration(duration_ns, "start_compute_with_dependencies")
        if duration_ns and not self._compilation.single_explicit_device:
            raise BadDataError(
                "start_compute_with_dependencies: a duration needs a compilation for exactly one device"
            )
        what = "start_compute" if not dependencies else "start_compute_with_dependencies"
        self._begin(what)
        event = Event()
        remaining = [len(dependencies)]
        failed: list[NNError] = []
        counter_lock = threading.Lock()

        def run() -> None:
            error: NNError | None = None
            try:
                if failed:
                    raise NNError(f"{what}: a dependency failed: {failed[0]}", ResultCode.OP_FAILED)
                deadline = self._deadline(duration_ns or None)
                with tracing.span(tracing.Layer.RUNTIME, tracing.Phase.EXECUTION, what):
                    self._complete(self._execute_directly(deadline), what)
            except NNError as exc:
                error = exc
                with self._lock:
                    if self._state == _COMPUTATION:
                        self._status = ErrorStatus.GENERAL_FAILURE
                        self._state = _COMPLETED
            except Exception as exc:
                error = NNError(f"{what}: {type(exc).__name__}: {exc}", ResultCode.OP_FAILED)
                with self._lock:
                    self._status = ErrorStatus.GENERAL_FAILURE
                    self._state = _COMPLETED
            event._finish(error)

        def dependency_done(dependency: Event) -> None:
            if dependency._error is not None:
                failed.append(dependency._error)
            with counter_lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                self._submit(run, event)

        if not dependencies:
            self._submit(run, event)
        for dependency in dependencies:
            dependency._when_done(dependency_done)
        return event

    def _submit(self, task: Callable[[], None], event: Event) -> None:
        try:
            _pool.submit(task)
        except NNError as exc:
            with self._lock:
                self._status = ErrorStatus.GENERAL_FAILURE
                self._state = _COMPLETED
            event._finish(exc)

    def burst_compute(self, burst: Burst) -> None:
        """Run synchronously through ``burst`` (``ANeuralNetworksExecution_burstCompute``).

        Raises:
            NNError: ``UNEXPECTED_NULL`` without a burst; ``BAD_DATA`` if the
                burst belongs to another compilation; ``BAD_STATE`` if the
                burst is closed or already in use, and as :meth:`compute`.
        """
        request = self._repeat_request
        if request is not None and type(burst) is Burst and not tracing.enabled():
            # The common repeat, in one frame: see _repeat_request.
            lock = self._lock
            with lock:
                ready = self._state is _COMPLETED and not self._closed
                if ready:
                    self._state = _COMPUTATION
            if ready:
                try:
                    result = burst.repeat(request)
                except BaseException:
                    self._abort()
                    raise
                if result is not None:
                    self._complete(result, "burst_compute")
                    return
                with lock:  # not armed: the whole path below, from where it was
                    self._state = _COMPLETED
                    self._repeat_request = None
                if self._closed:  # close() came meanwhile and left the release to us
                    self._abort()
        if type(burst) is not Burst:  # the common case in one check
            require(burst, "burst_compute: burst")
            if not isinstance(burst, Burst):
                raise BadDataError(
                    f"burst_compute: expected an nnburst.Burst, got {type(burst).__name__}"
                )
        if burst.compilation is not self._compilation:
            raise BadDataError(
                "burst_compute: the burst and the execution come from different compilations"
            )
        self._begin("burst_compute")
        try:
            deadline = self._deadline()
            if burst.direct:
                run = burst.run_directly
                execute = self._execute_directly
                result = tracing.call(_RUNTIME, _EXECUTION, "burst_compute", run, execute, deadline)
            else:
                bound = self._bound(deadline)
                result = tracing.call(_RUNTIME, _EXECUTION, "burst_compute", burst.run, bound)
                if self._repeatable and burst.armed_for(bound.request):
                    self._repeat_request = bound.request
        except BaseException:
            self._abort()
            raise
        self._complete(result, "burst_compute")

    # -- results -------------------------------------------------------------------------
    def _check_shapes(self, what: str, index: Any) -> OutputShape:
        with self._lock:
            if self._state != _COMPLETED:
                raise BadStateError(f"{what}: the execution has not completed")
            if self._status not in (ErrorStatus.NONE, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE):
                raise BadStateError(f"{what}: the execution failed")
            try:
                i = operator_index(index)
            except TypeError:
                raise BadDataError(f"{what}: index must be an integer, got {index!r}") from None
            if not 0 <= i < len(self._shapes):
                raise BadDataError(
                    f"{what}: index {i} out of range (the model has {len(self._outputs)} outputs)"
                )
            return self._shapes[i]

    def get_output_operand_rank(self, index: int) -> int:
        """Rank of output ``index`` as computed (0 for scalars)."""
        return len(self._check_shapes("get_output_operand_rank", index).dimensions)

    def get_output_operand_dimensions(self, index: int) -> tuple[int, ...]:
        """Dimensions of output ``index`` as computed.

        After ``OUTPUT_INSUFFICIENT_SIZE`` these are the dimensions the output
        needs, as NNAPI reports them.

        Raises:
            BadStateError: not completed, or failed with another error.
            BadDataError: bad index, or the output is a scalar.
        """
        shape = self._check_shapes("get_output_operand_dimensions", index)
        if self._output_infos[operator_index(index)].is_scalar:
            raise BadDataError(f"get_output_operand_dimensions: output {index} is a scalar")
        return tuple(shape.dimensions)

    def get_duration(self, duration_code: DurationCode) -> int:
        """Nanoseconds the last computation took on the device or in the driver; 2**64-1 if unknown.

        Raises:
            BadStateError: not completed, failed, or timing was not requested.
            BadDataError: unknown duration code.
        """
        try:
            code = DurationCode(duration_code)
        except ValueError:
            raise BadDataError(f"get_duration: unknown duration code {duration_code!r}") from None
        with self._lock:
            if self._state != _COMPLETED:
                raise BadStateError("get_duration: the execution has not completed")
            if self._status != ErrorStatus.NONE:
                raise BadStateError("get_duration: the execution failed")
            if not self._measure:
                raise BadStateError("get_duration: timing was not requested (set_measure_timing)")
            timing = self._timing
        micros = {
            DurationCode.ON_HARDWARE: timing.time_on_device,
            DurationCode.IN_DRIVER: timing.time_in_driver,
        }.get(code, NO_TIMING_US)
        return NO_DURATION if micros == NO_TIMING_US else micros * 1000


def _is_buffer(value: Any) -> bool:
    try:
        memoryview(value)
    except TypeError:
        return False
    return True
