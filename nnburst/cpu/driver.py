"""The numpy CPU reference driver behind the HAL interfaces.

``CpuDevice`` is what the runtime lists as ``nnburst-reference``;
``CpuPreparedModel`` executes HAL requests against a prepared graph.  The
request path is the hot path of burst executions, so everything that depends
only on the model (dtypes, declared shapes, byte sizes) is computed once at
prepare time and each call only checks the request's own numbers.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import tracing
from .._bindings.plan import BoundPlan
from .._version import __version__
from ..codes import ErrorStatus, OperandCode, PreferenceCode, PriorityCode
from ..errors import BadDataError, NNError, status_for_exception
from ..extensions import RANK_ABOVE_4
from ..hal.burst_controller import polling_window_us
from ..hal.burst_server import ExecutionBurstServer
from ..hal.interfaces import (
    ExecutionResult,
    IBurstCallback,
    IBurstContext,
    IDevice,
    IExecution,
    IPreparedModel,
)
from ..hal.memory import MappedMemory
from ..hal.model import HalModel, Lifetime, Operation, Subgraph
from ..hal.types import (
    DEFAULT_LOOP_TIMEOUT_NS,
    MAXIMUM_LOOP_TIMEOUT_NS,
    NO_TIMING,
    Capabilities,
    DataLocation,
    DeviceType,
    MeasureTiming,
    OutputShape,
    PerformanceInfo,
    Request,
    RequestArgument,
    Timing,
    pool_view,
)
from ..operands import merge_dimensions
from . import burst_plan
from .heap import keep_freed_memory
from .prepare import prepare_model
from .threads import limit_blas_threads, set_process_threads
from .validate import validate_operation

__all__ = [
    "DEVICE_NAME",
    "FEATURE_LEVEL",
    "VERSION_STRING",
    "CpuDevice",
    "CpuExecution",
    "CpuPreparedModel",
    "cpu_device",
    "supported_operations",
    "validate_operation",
]

if TYPE_CHECKING:
    from ..fmq import Descriptor

logger = logging.getLogger("nnburst.cpu")

#: ``{VENDOR}-{DEVICE_NAME}`` as HAL 1.2 asks device names to be.
DEVICE_NAME = "nnburst-reference"

#: ``ANEURALNETWORKS_FEATURE_LEVEL_4`` (NNAPI 1.3, Android R): every 1.3
#: operation, control flow included, is registered.
FEATURE_LEVEL = 30


_NO_LOCATION = DataLocation()

#: Different for every release, as HAL 1.2 asks of ``getVersionString``.
VERSION_STRING = f"{DEVICE_NAME} {__version__}"


@dataclass(frozen=True)
class _ArgumentSpec:
    """What the model says about one input or output operand (fixed per model)."""

    operand: int
    dtype: np.dtype
    itemsize: int
    dims: tuple[int, ...] | None  # None: unknown rank
    is_scalar: bool


def _specs(subgraph: Subgraph, indexes: Sequence[int]) -> tuple[_ArgumentSpec, ...]:
    specs = []
    for index in indexes:
        info = subgraph.operands[index].info
        dims = () if info.is_scalar else info.dimensions
        specs.append(_ArgumentSpec(index, info.dtype, info.dtype.itemsize, dims, info.is_scalar))
    return tuple(specs)


class _InvalidRequest(Exception):
    """Internal: the request breaks a validateRequest rule (→ INVALID_ARGUMENT)."""


def _check_dims(kind: str, i: int, spec: _ArgumentSpec, dims: tuple[int, ...]) -> None:
    if spec.is_scalar:
        raise _InvalidRequest(f"{kind} {i} is a scalar but the request gives dimensions {dims}")
    try:
        merge_dimensions(dims, spec.dims)
    except ValueError as exc:
        raise _InvalidRequest(
            f"{kind} {i}: request dimensions conflict with the model's: {exc}"
        ) from None
    if any(d < 0 for d in dims):
        raise _InvalidRequest(f"{kind} {i}: negative dimension in {dims}")
    if kind == "input" and any(d == 0 for d in dims):
        raise _InvalidRequest(f"input {i}: dimensions {dims} contain an unknown (0) value")


def _check_location(
    kind: str, i: int, location: DataLocation, views: list[memoryview]
) -> memoryview:
    if not 0 <= location.pool_index < len(views):
        raise _InvalidRequest(
            f"{kind} {i}: pool index {location.pool_index} out of range ({len(views)} pools)"
        )
    view = views[location.pool_index]
    if (
        location.offset < 0
        or location.length < 0
        or location.offset + location.length > view.nbytes
    ):
        raise _InvalidRequest(
            f"{kind} {i}: [{location.offset}, {location.offset + location.length}) is outside "
            f"pool {location.pool_index} of {view.nbytes} bytes"
        )
    return view


class CpuPreparedModel(IPreparedModel):
    """A model prepared by the CPU driver; executes requests, serves bursts."""

    def __init__(
        self,
        model: HalModel,
        preference: PreferenceCode = PreferenceCode.FAST_SINGLE_ANSWER,
        cache: tuple[str, bytes] | None = None,
    ) -> None:
        keep_freed_memory()  # every host of CPU models: this process, a driver service
        limit_blas_threads()  # likewise; a service has applied its --blas-threads already
        # The kernel-thread default too, before the compilation cache: a bad
        # NNBURST_THREADS is the caller's error, not a cache entry that "does not fit".
        set_process_threads()
        self.model = model
        self.preference = PreferenceCode(preference)
        #: whether the compilation came from the cache (``cache``: its directory and token)
        self.executor, self.cache_hit = prepare_model(model, cache)
        self.input_specs = _specs(model.main, model.main.input_indexes)
        self.output_specs = _specs(model.main, model.main.output_indexes)
        self._failure: str | None = None

    def failure_reason(self) -> str | None:
        return self._failure

    # -- execution -----------------------------------------------------------------------
    def create_reusable_execution(
        self, request: Request, measure: MeasureTiming, loop_timeout_ns: int | None = None
    ) -> CpuExecution:
        """Validate ``request`` and map its buffers once; see :class:`CpuExecution`."""
        return CpuExecution(self, request, measure, loop_timeout_ns)

    def execute_synchronously(
        self,
        request: Request,
        measure: MeasureTiming,
        *,
        deadline_ns: int | None = None,
        loop_timeout_ns: int | None = None,
    ) -> ExecutionResult:
        """Validate and run one request; returns a status, never raises for bad input.

        ``deadline_ns`` (absolute ``time.monotonic_ns()``) and
        ``loop_timeout_ns`` are the HAL 1.3 additions; the burst server does
        not pass them, so burst executions get the default loop timeout
        (2 s).  A WHILE running past its loop timeout is
        ``MISSED_DEADLINE_TRANSIENT``.
        """
        return CpuExecution(self, request, measure, loop_timeout_ns).compute(deadline_ns)

    def input_arrays(self, request: Request, views: list[memoryview]) -> list[np.ndarray | None]:
        """Read-only arrays over the request's input buffers (checked against the model)."""
        if len(request.inputs) != len(self.input_specs):
            raise _InvalidRequest(
                f"request has {len(request.inputs)} inputs, the model {len(self.input_specs)}"
            )
        arrays: list[np.ndarray | None] = []
        for i, (arg, spec) in enumerate(zip(request.inputs, self.input_specs)):
            if arg.has_no_value:
                if arg.location != _NO_LOCATION or arg.dimensions:
                    raise _InvalidRequest(f"input {i} has no value but a location or dimensions")
                arrays.append(None)
                continue
            view = _check_location("input", i, arg.location, views)
            dims = tuple(arg.dimensions)
            if dims:
                if dims != spec.dims or 0 in dims:  # the model's own full shape needs no check
                    _check_dims("input", i, spec, dims)
            else:
                if spec.dims is None or 0 in spec.dims:
                    raise _InvalidRequest(
                        f"input {i}: dimensions are unknown in the model and not given"
                    )
                dims = spec.dims
            count = math.prod(dims)
            if arg.location.length != count * spec.itemsize:
                raise _InvalidRequest(
                    f"input {i}: location length {arg.location.length} != {count * spec.itemsize} "
                    f"bytes needed for {spec.dtype} {dims}"
                )
            array = np.frombuffer(view, spec.dtype, count, arg.location.offset).reshape(dims)
            array.flags.writeable = False
            arrays.append(array)
        return arrays

    def output_views(self, request: Request, views: list[memoryview]) -> list[memoryview | None]:
        """The pool view each output is written to (checked writable and in range)."""
        if len(request.outputs) != len(self.output_specs):
            raise _InvalidRequest(
                f"request has {len(request.outputs)} outputs, the model {len(self.output_specs)}"
            )
        out: list[memoryview | None] = []
        for i, (arg, spec) in enumerate(zip(request.outputs, self.output_specs)):
            if arg.has_no_value:
                if arg.location != _NO_LOCATION or arg.dimensions:
                    raise _InvalidRequest(f"output {i} has no value but a location or dimensions")
                out.append(None)
                continue
            view = _check_location("output", i, arg.location, views)
            if view.readonly:
                raise _InvalidRequest(f"output {i}: pool {arg.location.pool_index} is read-only")
            if arg.dimensions and tuple(arg.dimensions) != spec.dims:
                _check_dims("output", i, spec, tuple(arg.dimensions))
            out.append(view)
        return out

    # -- bursts --------------------------------------------------------------------------
    def configure_execution_burst(
        self,
        callback: IBurstCallback,
        request_channel: Descriptor,
        result_channel: Descriptor,
    ) -> tuple[ErrorStatus, IBurstContext | None]:
        """Start a burst server thread executing through this prepared model.

        As SampleDriver: the server polls for 50 µs (0 for LOW_POWER) before
        sleeping, and a server that cannot start is ``GENERAL_FAILURE``.
        """
        window = polling_window_us(self.preference)
        try:
            context = ExecutionBurstServer.create(
                callback, request_channel, result_channel, self, polling_window_us=window
            )
        except (ValueError, NNError) as exc:  # a bad channel: reported as a status
            logger.info("cannot start a burst server: %s", exc)
            return ErrorStatus.GENERAL_FAILURE, None
        return ErrorStatus.NONE, context


# Module constants for the hot path: a class attribute costs ~0.1 µs per use.
_NONE, _GENERAL_FAILURE = ErrorStatus.NONE, ErrorStatus.GENERAL_FAILURE
_DRIVER, _COMPUTATION = tracing.Layer.DRIVER, tracing.Phase.COMPUTATION


class CpuExecution(IExecution):
    """A request checked and mapped once, then computed any number of times.

    Everything that depends only on the request (the pool views, the input
    arrays over the caller's buffers, the output targets) is set up here; a
    computation runs the plan and copies the outputs into place.  A request
    that breaks a rule fails every computation with ``INVALID_ARGUMENT``, as
    ``execute_synchronously`` would.  The caller's buffers are read at every
    computation, so in-place updates are seen.
    """

    def __init__(
        self,
        prepared: CpuPreparedModel,
        request: Request,
        measure: MeasureTiming,
        loop_timeout_ns: int | None,
    ) -> None:
        self._prepared = prepared
        self._run_model = prepared.executor.main.run  # the main subgraph, one call fewer
        self._loops = bool(prepared.executor.model.referenced)
        self._measure = measure == MeasureTiming.YES
        if loop_timeout_ns is None:  # the burst server path: HAL 1.2 packets carry no loop timeout
            loop_timeout_ns = DEFAULT_LOOP_TIMEOUT_NS
        self._loop_timeout_ns = min(loop_timeout_ns, MAXIMUM_LOOP_TIMEOUT_NS)
        #: memories whose closing invalidates this execution
        self._memories = [pool for pool in request.pools if isinstance(pool, MappedMemory)]
        self._outputs = request.outputs
        self._invalid: str | None = None  # why every computation is INVALID_ARGUMENT
        self._inputs: list[np.ndarray | None] = []
        self._targets: list[memoryview | None] = []
        #: typed arrays over the outputs' locations, and their shapes, when the
        #: model fixes every output's shape and each fits: written in place.
        self._fixed: list[np.ndarray | None] | None = None
        self._fixed_shapes: list[OutputShape] = []
        #: the whole model as one C call from the inputs into the fixed
        #: outputs (executor.PreparedSubgraph.bind), or None
        self._bound: BoundPlan | None = None
        #: whether the next computation binds: the second one does (binding
        #: costs more than a run, wasted on an execution computed once)
        self._bind_next = False
        self._bindable = False
        try:
            views = [pool_view(pool) for pool in request.pools]
            self._inputs = prepared.input_arrays(request, views)
            self._targets = prepared.output_views(request, views)
            self._fix_outputs(prepared)
            self._bindable = self._fixed is not None and not self._loops and not self._measure
        except _InvalidRequest as exc:
            logger.debug("invalid request: %s", exc)
            self._invalid = f"invalid request: {exc}"
        except Exception as exc:  # a closed Memory, a pool without a buffer, a malformed argument
            logger.debug("invalid request: %s: %s", type(exc).__name__, exc)
            self._invalid = f"invalid request: {type(exc).__name__}: {exc}"

    def _fix_outputs(self, prepared: CpuPreparedModel) -> None:
        fixed: list[np.ndarray | None] = []
        for arg, view, spec in zip(self._outputs, self._targets, prepared.output_specs):
            dims = spec.dims
            if (
                dims is None
                or 0 in dims
                or (arg.dimensions and not _compatible(arg.dimensions, dims))
            ):
                return
            count = math.prod(dims)
            if view is None:
                fixed.append(None)
            elif arg.location.length < count * spec.itemsize:
                return
            else:
                target = np.frombuffer(view, spec.dtype, count, arg.location.offset)
                fixed.append(target.reshape(dims))
            self._fixed_shapes.append(OutputShape(dims, True))
        self._fixed = fixed

    def close(self) -> None:
        """Drop the views of the request's buffers (so their mappings can close)."""
        self._invalid = "the execution was closed"
        self._inputs, self._targets, self._fixed = [], [], None
        bound, self._bound = self._bound, None
        if bound is not None:
            bound.close()

    def _bind(self) -> BoundPlan | None:
        """Bind the model to the request at the second computation (None before)."""
        if not self._bind_next:
            self._bind_next = True
            return None
        self._bindable = False  # one try
        assert self._fixed is not None
        self._bound = self._prepared.executor.main.bind(self._inputs, self._fixed)
        return self._bound

    def _failed(self, status: ErrorStatus, reason: str) -> ExecutionResult:
        """A failed computation's result; its reason kept for the runtime's error."""
        self._prepared._failure = reason
        return status, [], NO_TIMING

    def compute(self, deadline_ns: int | None = None) -> ExecutionResult:
        driver_start = time.perf_counter_ns() if self._measure else 0
        if self._invalid or (self._memories and any(m.closed for m in self._memories)):
            return self._failed(
                ErrorStatus.INVALID_ARGUMENT, self._invalid or "a memory of the request was closed"
            )
        if deadline_ns is not None and time.monotonic_ns() > deadline_ns:
            return ErrorStatus.MISSED_DEADLINE_TRANSIENT, [], NO_TIMING
        bound = self._bound
        if bound is None and self._bindable:
            bound = self._bind()
        if bound is not None:
            try:  # the outputs written in place: nothing to copy
                tracing.call(_DRIVER, _COMPUTATION, "execute", bound.run, deadline_ns)
            except NNError as exc:
                logger.info("execution failed: %s", exc)
                return self._failed(
                    status_for_exception(exc), str(exc.args[0] if exc.args else exc)
                )
            return _NONE, self._fixed_shapes, NO_TIMING
        # Only a WHILE (in a referenced subgraph) reads the loop deadline.
        loop_deadline = time.monotonic_ns() + self._loop_timeout_ns if self._loops else None
        device_start = time.perf_counter_ns() if self._measure else 0
        try:
            results = tracing.call(
                _DRIVER,
                _COMPUTATION,
                "execute",
                self._run_model,
                self._inputs,
                loop_deadline,
                deadline_ns,
            )
        except NNError as exc:
            logger.info("execution failed: %s", exc)
            return self._failed(status_for_exception(exc), str(exc.args[0] if exc.args else exc))
        except Exception as exc:
            logger.warning("execution failed unexpectedly: %s: %s", type(exc).__name__, exc)
            return self._failed(_GENERAL_FAILURE, f"{type(exc).__name__}: {exc}")
        device_end = time.perf_counter_ns() if self._measure else 0
        try:
            fixed = self._fixed
            if fixed is not None:  # in place when every result has its output's fixed shape
                for result, shape in zip(results, self._fixed_shapes):
                    if result.shape != shape.dimensions:
                        fixed = None
                        break
            if fixed is not None:
                for target, result in zip(fixed, results):
                    if target is not None:
                        target[...] = result  # what np.copyto does, at half the call cost
                status, shapes = _NONE, self._fixed_shapes
            else:
                status, shapes = _write_outputs(self._outputs, self._targets, results)
        except Exception as exc:  # e.g. an operation returned something that is not an array
            logger.warning("cannot write the outputs: %s: %s", type(exc).__name__, exc)
            return self._failed(_GENERAL_FAILURE, f"cannot write the outputs: {exc}")
        if status is not _NONE and status != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
            return status, [], NO_TIMING
        timing = NO_TIMING
        if self._measure and status is _NONE:
            on_device = (device_end - device_start) // 1000
            in_driver = (time.perf_counter_ns() - driver_start) // 1000
            timing = Timing(on_device, max(in_driver, on_device))
        return status, shapes, timing

    def burst_plan(self) -> burst_plan.BurstPlan | None:
        """This execution as one C plan over its buffers, for a burst server's
        C path (:mod:`.burst_plan`); None if it is not exactly that."""
        if self._invalid or self._loops or any(m.closed for m in self._memories):
            return None
        return burst_plan.bind(self._prepared.executor.main, self._inputs, self._fixed)


def _write_outputs(
    outputs: Sequence[RequestArgument],
    views: list[memoryview | None],
    results: Sequence[np.ndarray],
) -> tuple[ErrorStatus, list[OutputShape]]:
    """Copy each result into its output's location, or say which ones do not fit."""
    shapes: list[OutputShape] = []
    sufficient = True
    for i, (arg, result) in enumerate(zip(outputs, results)):
        if arg.dimensions and not _compatible(arg.dimensions, result.shape):
            fits = result.nbytes <= arg.location.length
            if fits:
                logger.info(
                    "output %d: produced shape %s, the request declares %s",
                    i,
                    result.shape,
                    arg.dimensions,
                )
                return ErrorStatus.GENERAL_FAILURE, []
        ok = arg.has_no_value or result.nbytes <= arg.location.length
        sufficient = sufficient and ok
        shapes.append(OutputShape(tuple(int(d) for d in result.shape), ok))
    if not sufficient:
        return ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, shapes
    for arg, view, result in zip(outputs, views, results):
        if view is None or result.nbytes == 0:
            continue
        target = np.frombuffer(view, np.uint8, result.nbytes, arg.location.offset)
        target[...] = np.ascontiguousarray(result).reshape(-1).view(np.uint8)
    return ErrorStatus.NONE, shapes


def _compatible(declared: Sequence[int], actual: Sequence[int]) -> bool:
    return len(declared) == len(actual) and all(d == 0 or d == a for d, a in zip(declared, actual))


def supported_operations(
    model: HalModel, accepts: Callable[[Subgraph, Operation], bool] | None = None
) -> list[bool]:
    """One flag per main-subgraph operation: registered, valid, and accepted.

    As HAL 1.3 asks, IF and WHILE count as supported only when every
    operation of every subgraph they reference (recursively) is.  Sample
    drivers narrow support with ``accepts``.
    """
    # referenced-subgraph index -> supported; set to False while its subgraph
    # is walked, so a reference cycle ends the walk instead of recursing.
    memo: dict[int, bool] = {}

    def supported(subgraph: Subgraph, index: int) -> bool:
        operation = subgraph.operations[index]
        try:
            if accepts is not None and not accepts(subgraph, operation):
                return False
            if not validate_operation(model, subgraph, index):
                return False
        except (BadDataError, IndexError, KeyError, ValueError):
            return False
        for operand_index in operation.inputs:
            operand = subgraph.operands[operand_index]
            if operand.lifetime != Lifetime.SUBGRAPH:
                continue
            ref = operand.subgraph
            if ref is None or not 0 <= ref < len(model.referenced):
                return False
            if ref not in memo:
                memo[ref] = False
                referenced = model.referenced[ref]
                memo[ref] = all(supported(referenced, i) for i in range(len(referenced.operations)))
            if not memo[ref]:
                return False
        return True

    return [supported(model.main, index) for index in range(len(model.main.operations))]


class CpuDevice(IDevice):
    """The in-process numpy reference device (type CPU)."""

    name = DEVICE_NAME
    type = DeviceType.CPU
    version_string = VERSION_STRING
    feature_level = FEATURE_LEVEL
    extensions = (RANK_ABOVE_4,)

    def __init__(self) -> None:
        self._capabilities = Capabilities(
            operand_performance={code: PerformanceInfo() for code in OperandCode},
            if_performance=PerformanceInfo(),
            while_performance=PerformanceInfo(),
        )

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def get_supported_operations(self, model: HalModel) -> list[bool]:
        return supported_operations(model)

    def prepare_model(
        self,
        model: HalModel,
        preference: PreferenceCode = PreferenceCode.FAST_SINGLE_ANSWER,
        priority: PriorityCode = PriorityCode.MEDIUM,
        deadline_ns: int | None = None,
        cache: Any = None,
    ) -> CpuPreparedModel:
        with tracing.span(tracing.Layer.DRIVER, tracing.Phase.COMPILATION, "prepare_model"):
            return CpuPreparedModel(model, preference, cache)


_DEVICE: CpuDevice | None = None


def cpu_device() -> CpuDevice:
    """The process-wide CPU device (it is stateless, so one is enough)."""
    global _DEVICE
    if _DEVICE is None:
        _DEVICE = CpuDevice()
    return _DEVICE
