"""Device assignment, partitioning and CPU fallback (Android's ``ExecutionPlan``).

A compilation created without devices may spread one model over every device:
each operation goes to the device that supports it and declares the best
performance for the compilation's preference, consecutive operations on the
same device become one *step* (a model of its own), and an
:class:`ExecutionPlan` runs the steps in order, passing the tensors that cross
a cut from one device to the next.

Why it is shaped like this:

* The performance of an operation is the device's declared performance for
  the type of the operation's first input (relaxed float32 performance when
  the model allows float16 computation; ``if_performance`` /
  ``while_performance`` for IF and WHILE), as the Android runtime does.
  Unlike Android, the runtime also counts what reaching a device costs: an
  operation's estimated time is that ratio times the reference driver's
  measured cost for the operation's work (:mod:`nnburst.cpu.calibration`),
  plus the device's ``reach_us`` (a service's measured round trip).  Lower
  is better; on a tie the CPU reference device comes last, then the earlier
  device wins.  Each choice is logged on ``nnburst.manager``.
* A plan whose only step runs on the in-process CPU is not wrapped at all:
  the compilation keeps the driver's prepared model and executions take the
  same path as before partitioning existed.
* Drivers outside this process can only read shared memory, so a step on any
  device other than the in-process CPU gets its numpy pools staged into one
  shared memory (:class:`~nnburst.hal.staging.StagedRequest`).  A reusable
  execution of a one-step plan without fallback keeps its staging memory and
  the driver's reusable execution (:class:`StagedExecution`).
* CPU fallback follows the NNAPI documentation: a model that fails to prepare
  is prepared whole on the CPU; at execution a failed step is retried on the
  CPU, and if that fails too the whole model is run on the CPU.  A
  compilation for explicit devices (``createForDevices``) never falls back.
* Bursts: a multi-step plan cannot serve a burst (``configure_execution_burst``
  answers ``GENERAL_FAILURE``), so ``Burst`` runs it through
  ``execute_synchronously``, one synchronous step after the other.  A
  one-step plan hands the burst to its device's prepared model (no fallback
  on that path).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .codes import ErrorStatus, OperandCode, OperationCode, PreferenceCode, PriorityCode, ResultCode
from .cpu.calibration import reference_cost
from .cpu.driver import CpuDevice, CpuPreparedModel, cpu_device
from .devices import Device, device_for
from .errors import BadDataError, BrokenResourceError, NNError, status_for_exception
from .extensions import RANK_ABOVE_4, uses_rank_above_4
from .hal.interfaces import (
    ExecutionResult,
    IBurstCallback,
    IBurstContext,
    IDevice,
    IExecution,
    IPreparedModel,
)
from .hal.model import HalModel, Lifetime, Operand, Operation, Subgraph, execution_order
from .hal.staging import BoundRequest, StagedRequest
from .hal.types import (
    NO_TIMING,
    Capabilities,
    DataLocation,
    MeasureTiming,
    OutputShape,
    Request,
    RequestArgument,
)

if TYPE_CHECKING:
    from .fmq import Descriptor

__all__ = [
    "ExecutionPlan",
    "Step",
    "compile_plan",
    "find_best_devices",
    "operation_performance",
    "split_into_steps",
]

logger = logging.getLogger("nnburst.manager")


#: How often a step is re-run after growing temporaries whose size it reported.
_MAX_RESIZES = 2

#: Statuses that a retry on the CPU cannot cure: the app must act (bigger
#: outputs, a longer deadline).
_NO_FALLBACK = (
    ErrorStatus.NONE,
    ErrorStatus.OUTPUT_INSUFFICIENT_SIZE,
    ErrorStatus.MISSED_DEADLINE_TRANSIENT,
    ErrorStatus.MISSED_DEADLINE_PERSISTENT,
)


# -- assignment -------------------------------------------------------------------------------
def operation_performance(
    capabilities: Capabilities,
    model: HalModel,
    operation: Operation,
    preference: PreferenceCode,
) -> float:
    """The figure a device declares for ``operation`` under ``preference`` (lower is better)."""
    code = OperationCode(operation.code)
    if code == OperationCode.IF:
        info = capabilities.if_performance
    elif code == OperationCode.WHILE:
        info = capabilities.while_performance
    else:
        operands = model.main.operands
        first = operation.inputs[0] if operation.inputs else operation.outputs[0]
        operand_code = OperandCode(operands[first].info.code)
        if model.relax_float32_to_float16 and operand_code == OperandCode.TENSOR_FLOAT32:
            info = capabilities.relaxed_float32_to_float16_tensor
        elif model.relax_float32_to_float16 and operand_code == OperandCode.FLOAT32:
            info = capabilities.relaxed_float32_to_float16_scalar
        else:
            info = capabilities.performance_for(operand_code)
    value = info.power_usage if preference == PreferenceCode.LOW_POWER else info.exec_time
    return float(value)


#: Operations whose work per output element is the filter's taps (× input
#: channels): the operand that holds the weights, and its axis of output channels.
_WEIGHTED = {
    OperationCode.CONV_2D: (1, 0),
    OperationCode.GROUPED_CONV_2D: (1, 0),
    OperationCode.TRANSPOSE_CONV_2D: (1, 0),
    OperationCode.FULLY_CONNECTED: (1, 0),
    OperationCode.DEPTHWISE_CONV_2D: (1, 3),
}


def operation_work(model: HalModel, operation: Operation) -> int:
    """Elements of work an operation does: its output elements, times the
    multiply-accumulates per output for convolutions and fully connected layers
    (unknown dimensions count as 1).  Only a weight for comparing devices."""
    operands = model.main.operands

    def elements(index: int) -> int:
        dims = operands[index].info.dimensions or ()
        return int(np.prod([max(1, d) for d in dims], dtype=np.int64)) if dims else 1

    work = sum(elements(i) for i in operation.outputs)
    weighted = _WEIGHTED.get(OperationCode(operation.code))
    if weighted is not None and len(operation.inputs) > weighted[0]:
        weights = operands[operation.inputs[weighted[0]]].info.dimensions or ()
        if len(weights) > weighted[1]:
            work *= max(1, elements(operation.inputs[weighted[0]]) // max(1, weights[weighted[1]]))
    return work


def estimated_us(performance: float, reach_us: float, work: int) -> float:
    """What running one operation on a device is expected to cost: the device's ratio
    to the reference times the reference's measured cost, plus the cost of reaching it."""
    return performance * reference_cost().estimate_us(work) + reach_us


def _supported(device: Device, model: HalModel, gone: list[str] | None = None) -> list[bool]:
    """The device's flags; a driver that fails to answer supports nothing (and is
    logged).  A device whose service is gone is added to ``gone``."""
    count = len(model.main.operations)
    try:
        flags = [bool(f) for f in device.hal.get_supported_operations(model)]
    except Exception as exc:  # a dead service, a broken driver: not a reason to fail the app
        logger.info("%s: get_supported_operations failed: %s", device.name, exc)
        if gone is not None and isinstance(exc, BrokenResourceError):
            gone.append(device.name)
        return [False] * count
    if len(flags) != count:
        logger.warning(
            "%s: get_supported_operations returned %d flags for %d operations; ignoring the device",
            device.name,
            len(flags),
            count,
        )
        return [False] * count
    # An operation that uses an extension goes only to a device that declares it.
    if RANK_ABOVE_4 not in getattr(device.hal, "extensions", ()):
        for n, operation in enumerate(model.main.operations):
            if flags[n] and uses_rank_above_4(model.main, operation):
                flags[n] = False
    return flags


def _capabilities(device: Device) -> Capabilities | None:
    """Asked once per compilation: for a service device it is a call across processes."""
    try:
        return device.hal.capabilities
    except Exception as exc:
        logger.warning("%s: capabilities unavailable: %s", device.name, exc)
        return None


def _estimated_cost(
    device: Device,
    capabilities: Capabilities | None,
    model: HalModel,
    operation: Operation,
    preference: PreferenceCode,
    work: int,
) -> float:
    """:func:`estimated_us` from what ``device`` declares; capabilities that cannot
    answer count as the worst performance."""
    try:
        if capabilities is None:
            raise ValueError("no capabilities")
        perf = operation_performance(capabilities, model, operation, preference)
    except Exception as exc:
        logger.warning(
            "%s: no performance for %s: %s", device.name, OperationCode(operation.code).name, exc
        )
        return math.inf
    return estimated_us(perf, float(device.hal.reach_us), work)


def find_best_devices(
    model: HalModel, devices: Sequence[Device], preference: PreferenceCode
) -> list[int]:
    """For each main-subgraph operation, the index in ``devices`` of the device that runs it.

    Raises:
        BadDataError: some operation is supported by none of ``devices``;
            the message names every such operation.
    """
    operations = model.main.operations
    gone: list[str] = []
    flags = [_supported(device, model, gone) for device in devices]
    # Asked only of devices that share an operation with another: with one device there is no choice.
    contested = [sum(column) > 1 for column in zip(*flags)]  # per operation
    capabilities = [
        _capabilities(device) if any(f and c for f, c in zip(row, contested)) else None
        for device, row in zip(devices, flags)
    ]
    assignment: list[int] = []
    missing: list[str] = []
    for n, operation in enumerate(operations):
        candidates = [d for d in range(len(devices)) if flags[d][n]]
        best: int | None = candidates[0] if candidates else None
        if len(candidates) > 1:  # a choice to make: estimate (calibrates once per process)
            work = operation_work(model, operation)
            best = min(
                candidates,
                key=lambda d: (
                    _estimated_cost(
                        devices[d], capabilities[d], model, operation, preference, work
                    ),
                    isinstance(devices[d].hal, CpuDevice),
                    d,
                ),
            )
        name = OperationCode(operation.code).name
        if best is None:
            missing.append(f"{n} ({name})")
            assignment.append(-1)
            continue
        assignment.append(best)
        logger.info(
            "ModelBuilder::findBestDeviceForEachOperation(%s#%d): %d (%s)",
            name,
            n,
            best,
            devices[best].name,
        )
    if missing and gone:
        raise NNError(
            f"Compilation.finish: {', '.join(gone)} unavailable (driver service gone); "
            f"operation(s) {', '.join(missing)} have no device",
            ResultCode.UNAVAILABLE_DEVICE,
        )
    if missing:
        names = ", ".join(d.name for d in devices)
        raise BadDataError(
            f"Compilation.finish: no device ({names}) supports operation(s) {', '.join(missing)}"
        )
    return assignment


# -- splitting --------------------------------------------------------------------------------
@dataclass
class Step:
    """A run of consecutive operations on one device, as a model of its own.

    ``inputs``/``outputs`` are operand indexes of the *main* model, in the
    order of the step model's own inputs and outputs.
    """

    device: Device
    operations: list[int]
    model: HalModel
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    prepared: IPreparedModel | None = None
    #: the step prepared on the CPU after it failed on its device (lazily).
    cpu_prepared: IPreparedModel | None = field(default=None, repr=False)


def split_into_steps(
    model: HalModel, assignment: Sequence[int], devices: Sequence[Device]
) -> list[Step]:
    """Cut the main subgraph into steps: maximal same-device runs of a topological order.

    Operands crossing a cut become inputs of the reading step and outputs of
    the writing one; a step whose outputs nobody reads is dropped.
    """
    main = model.main
    order = execution_order(main, assignment)
    runs: list[list[int]] = []
    for n in order:
        if runs and assignment[runs[-1][-1]] == assignment[n]:
            runs[-1].append(n)
        else:
            runs.append([n])
    step_of = {n: s for s, run in enumerate(runs) for n in run}
    model_outputs = set(main.output_indexes)
    read_by: dict[int, set[int]] = {}
    for n, op in enumerate(main.operations):
        for i in op.inputs:
            read_by.setdefault(i, set()).add(step_of[n])
    steps: list[Step] = []
    for s, run in enumerate(runs):
        written = [i for n in run for i in main.operations[n].outputs]
        written_set = set(written)
        inputs: list[int] = []
        for n in run:
            for i in main.operations[n].inputs:
                lifetime = main.operands[i].lifetime
                if (
                    lifetime
                    in (
                        Lifetime.TEMPORARY_VARIABLE,
                        Lifetime.SUBGRAPH_INPUT,
                        Lifetime.SUBGRAPH_OUTPUT,
                    )
                    and i not in written_set
                    and i not in inputs
                ):
                    inputs.append(i)
        outputs = [i for i in written if i in model_outputs or (read_by.get(i, set()) - {s})]
        if not outputs:
            logger.info("ModelBuilder::partitionTheWork: operations %s compute nothing used", run)
            continue
        sub = model if len(runs) == 1 else _step_model(model, run, inputs, outputs)
        device = devices[assignment[run[0]]]
        steps.append(Step(device, run, sub, tuple(inputs), tuple(outputs)))
    return steps


def _step_model(
    model: HalModel, run: Sequence[int], inputs: Sequence[int], outputs: Sequence[int]
) -> HalModel:
    main = model.main
    used = sorted(
        {i for n in run for i in (*main.operations[n].inputs, *main.operations[n].outputs)}
    )
    index = {old: new for new, old in enumerate(used)}
    ins, outs = set(inputs), set(outputs)
    operands = []
    for old in used:
        operand = main.operands[old]
        if old in ins:
            lifetime = Lifetime.SUBGRAPH_INPUT
        elif old in outs:
            lifetime = Lifetime.SUBGRAPH_OUTPUT
        elif operand.lifetime in (Lifetime.SUBGRAPH_INPUT, Lifetime.SUBGRAPH_OUTPUT):
            lifetime = Lifetime.TEMPORARY_VARIABLE
        else:
            lifetime = operand.lifetime
        operands.append(Operand(operand.info, lifetime, operand.value, operand.subgraph))
    operations = [
        Operation(
            main.operations[n].code,
            tuple(index[i] for i in main.operations[n].inputs),
            tuple(index[i] for i in main.operations[n].outputs),
        )
        for n in run
    ]
    subgraph = Subgraph(
        operands, operations, tuple(index[i] for i in inputs), tuple(index[i] for i in outputs)
    )
    return HalModel(subgraph, model.referenced, model.relax_float32_to_float16)


def _run(
    prepared: IPreparedModel,
    request: Request,
    measure: MeasureTiming,
    deadline_ns: int | None,
    loop_timeout_ns: int | None,
    stage: bool,
) -> ExecutionResult:
    """One synchronous execution; a driver exception becomes its status."""
    bound = BoundRequest(request, measure, deadline_ns, loop_timeout_ns)
    try:
        if not stage:
            return bound.execute(prepared)
        with StagedRequest(request) as staged:
            result = bound.with_request(staged.request).execute(prepared)
            if ErrorStatus(result[0]) in (ErrorStatus.NONE, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE):
                staged.copy_back()
            return result
    except Exception as exc:
        logger.info("the driver raised: %s: %s", type(exc).__name__, exc)
        return status_for_exception(exc), [], NO_TIMING


class StagedExecution(IExecution):
    """A reusable execution on a driver outside this process: the request is
    staged into one shared memory kept for every computation, and the driver's
    own reusable execution of the staged request is kept too.  A computation
    copies the inputs in and the outputs back, and nothing else."""

    _staged: StagedRequest | None = None  # until __init__ succeeds: nothing to close

    def __init__(
        self,
        prepared: IPreparedModel,
        request: Request,
        measure: MeasureTiming,
        loop_timeout_ns: int | None,
    ) -> None:
        staged = StagedRequest(request)
        try:
            self._execution = prepared.create_reusable_execution(
                staged.request, measure, loop_timeout_ns
            )
        except BaseException:
            staged.close()
            raise
        self._staged: StagedRequest | None = staged

    def compute(self, deadline_ns: int | None = None) -> ExecutionResult:
        staged = self._staged
        if staged is None:
            return ErrorStatus.INVALID_ARGUMENT, [], NO_TIMING
        staged.copy_in()
        result = self._execution.compute(deadline_ns)
        if ErrorStatus(result[0]) in (ErrorStatus.NONE, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE):
            staged.copy_back()
        return result

    def close(self) -> None:
        staged, self._staged = self._staged, None
        if staged is not None:
            self._execution.close()
            staged.close()

    def __del__(self) -> None:
        self.close()


def _in_process_cpu(prepared: IPreparedModel | None) -> bool:
    return isinstance(prepared, CpuPreparedModel)


# -- the plan ---------------------------------------------------------------------------------
class ExecutionPlan(IPreparedModel):
    """Runs a partitioned model: its steps in order, with CPU fallback unless ``cpu`` is None.

    It is an :class:`IPreparedModel`, so executions and bursts use it as they
    use a driver's prepared model.  Safe to execute from several threads at
    once: everything per execution lives on the stack.
    """

    def __init__(self, model: HalModel, steps: list[Step], cpu: IDevice | None) -> None:
        self.model = model
        self.steps = steps
        self._cpu = cpu
        self._whole_cpu: IPreparedModel | None = None
        self._lock = threading.Lock()

    @property
    def fallback_enabled(self) -> bool:
        return self._cpu is not None

    def failure_reason(self) -> str | None:
        """The reason a step's (or the CPU fallback's) driver gives, if one does."""
        candidates = [self._whole_cpu] + [step.prepared for step in self.steps]
        for prepared in candidates:
            reason = prepared.failure_reason() if prepared is not None else None
            if reason:
                return reason
        return None

    # -- execution -----------------------------------------------------------------------
    def create_reusable_execution(
        self, request: Request, measure: MeasureTiming, loop_timeout_ns: int | None = None
    ) -> IExecution:
        """A one-step plan without fallback stages once (:class:`StagedExecution`);
        any other plan runs every computation as :meth:`execute_synchronously`."""
        if len(self.steps) == 1 and self._cpu is None:
            prepared = self.steps[0].prepared
            assert prepared is not None
            if not _in_process_cpu(prepared):
                return StagedExecution(prepared, request, measure, loop_timeout_ns)
        return super().create_reusable_execution(request, measure, loop_timeout_ns)

    def execute_synchronously(
        self,
        request: Request,
        measure: MeasureTiming,
        *,
        deadline_ns: int | None = None,
        loop_timeout_ns: int | None = None,
    ) -> ExecutionResult:
        """Run every step; on a failure fall back to the CPU (step, then whole model)."""
        try:
            status, shapes, timing = self._execute_steps(
                request, measure, deadline_ns, loop_timeout_ns
            )
        except Exception as exc:  # a bug in the plan must not become a crash of the app
            logger.warning("partitioned execution failed: %s: %s", type(exc).__name__, exc)
            status, shapes, timing = status_for_exception(exc), [], NO_TIMING
        if ErrorStatus(status) in _NO_FALLBACK or self._cpu is None:
            return status, shapes, timing
        if len(self.steps) == 1 and not _in_process_cpu(self.steps[0].prepared):
            return (
                status,
                shapes,
                timing,
            )  # its step was the whole model, already retried on the CPU
        whole = self._whole_model_on_cpu()
        if whole is None:
            return status, shapes, timing
        logger.info(
            "ExecutionPlan: retrying the whole model on the CPU after %s", ErrorStatus(status).name
        )
        return _run(whole, request, measure, deadline_ns, loop_timeout_ns, stage=False)

    def _execute_steps(
        self,
        request: Request,
        measure: MeasureTiming,
        deadline_ns: int | None,
        loop_timeout_ns: int | None,
    ) -> ExecutionResult:
        main = self.model.main
        if len(request.inputs) != len(main.input_indexes) or len(request.outputs) != len(
            main.output_indexes
        ):
            return ErrorStatus.INVALID_ARGUMENT, [], NO_TIMING
        if len(self.steps) == 1:
            # The step model is the whole model: the request goes through unchanged.
            return self._execute_step(self.steps[0], request, measure, deadline_ns, loop_timeout_ns)
        input_position = {operand: k for k, operand in enumerate(main.input_indexes)}
        output_position = {operand: k for k, operand in enumerate(main.output_indexes)}
        pools = list(request.pools)
        # operand -> how a later step reads it (exact location and dimensions)
        produced: dict[int, RequestArgument] = {}
        shapes: list[OutputShape | None] = [None] * len(main.output_indexes)
        for step in self.steps:
            inputs = []
            for operand in step.inputs:
                if operand in input_position:
                    inputs.append(request.inputs[input_position[operand]])
                else:
                    inputs.append(produced[operand])
            outputs: list[RequestArgument] = []
            temporaries: dict[int, int] = {}  # output position -> pool index of its temporary
            for k, operand in enumerate(step.outputs):
                j = output_position.get(operand)
                if j is not None and not request.outputs[j].has_no_value:
                    outputs.append(request.outputs[j])
                    continue
                info = main.operands[operand].info
                size = info.byte_size() or 0  # 0: unknown yet (grown below)
                temporaries[k] = len(pools)
                pools.append(np.empty(max(size, 1), np.uint8))
                outputs.append(RequestArgument(False, DataLocation(len(pools) - 1, 0, size)))
            for _ in range(_MAX_RESIZES + 1):
                step_request = Request(inputs, outputs, pools)
                status, step_shapes, timing = self._execute_step(
                    step, step_request, measure, deadline_ns, loop_timeout_ns
                )
                if ErrorStatus(status) != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
                    break
                short = [k for k, s in enumerate(step_shapes) if not s.is_sufficient]
                if not short or any(k not in temporaries for k in short):
                    break  # an app output is too small: the app must grow it
                for k in short:  # a temporary of unknown size: grow it and run the step again
                    info = main.operands[step.outputs[k]].info
                    size = info.byte_size(tuple(step_shapes[k].dimensions)) or 0
                    pools[temporaries[k]] = np.empty(max(size, 1), np.uint8)
                    outputs[k] = RequestArgument(False, DataLocation(temporaries[k], 0, size))
            status = ErrorStatus(status)
            if status not in (ErrorStatus.NONE, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE):
                return status, [], NO_TIMING
            if len(step_shapes) != len(step.outputs):
                logger.warning(
                    "%s returned %d shapes for %d outputs",
                    step.device.name,
                    len(step_shapes),
                    len(step.outputs),
                )
                return ErrorStatus.GENERAL_FAILURE, [], NO_TIMING
            for operand, shape, arg in zip(step.outputs, step_shapes, outputs):
                j = output_position.get(operand)
                if j is not None:
                    shapes[j] = shape
                info = main.operands[operand].info
                dims = tuple(shape.dimensions)
                length = info.byte_size(dims) or 0
                produced[operand] = RequestArgument(
                    False, DataLocation(arg.location.pool_index, arg.location.offset, length), dims
                )
            if status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
                return status, [s or OutputShape((), True) for s in shapes], NO_TIMING
        return ErrorStatus.NONE, [s or OutputShape((), True) for s in shapes], NO_TIMING

    def _execute_step(
        self,
        step: Step,
        request: Request,
        measure: MeasureTiming,
        deadline_ns: int | None,
        loop_timeout_ns: int | None,
    ) -> ExecutionResult:
        assert step.prepared is not None
        stage = not _in_process_cpu(step.prepared)
        result = _run(step.prepared, request, measure, deadline_ns, loop_timeout_ns, stage)
        status = ErrorStatus(result[0])
        if status in _NO_FALLBACK or self._cpu is None or not stage:
            return result
        cpu_prepared = self._step_on_cpu(step)
        if cpu_prepared is None:
            return result
        logger.info(
            "ExecutionPlan: step %s failed on %s (%s); retrying it on the CPU",
            step.operations,
            step.device.name,
            status.name,
        )
        return _run(cpu_prepared, request, measure, deadline_ns, loop_timeout_ns, stage=False)

    # -- lazily prepared CPU fallbacks ---------------------------------------------------
    def _prepare_on_cpu(self, model: HalModel) -> IPreparedModel | None:
        assert self._cpu is not None
        try:
            if not all(self._cpu.get_supported_operations(model)):
                return None
            return self._cpu.prepare_model(model)
        except Exception as exc:
            logger.warning("the CPU cannot prepare the fallback model: %s", exc)
            return None

    def _step_on_cpu(self, step: Step) -> IPreparedModel | None:
        with self._lock:
            if step.cpu_prepared is None:
                step.cpu_prepared = self._prepare_on_cpu(step.model)
            return step.cpu_prepared

    def _whole_model_on_cpu(self) -> IPreparedModel | None:
        with self._lock:
            if self._whole_cpu is None:
                self._whole_cpu = self._prepare_on_cpu(self.model)
            return self._whole_cpu

    # -- bursts --------------------------------------------------------------------------
    def configure_execution_burst(
        self,
        callback: IBurstCallback,
        request_channel: Descriptor,
        result_channel: Descriptor,
    ) -> tuple[ErrorStatus, IBurstContext | None]:
        """One step: its device serves the burst.  Several: refused (the burst runs synchronously)."""
        if len(self.steps) == 1 and self.steps[0].prepared is not None:
            return self.steps[0].prepared.configure_execution_burst(
                callback, request_channel, result_channel
            )
        return ErrorStatus.GENERAL_FAILURE, None

    def __repr__(self) -> str:
        parts = ", ".join(f"{s.device.name}: {s.operations}" for s in self.steps)
        return f"<ExecutionPlan {parts}>"


# -- compiling --------------------------------------------------------------------------------
def compile_plan(
    model: HalModel,
    devices: Sequence[Device],
    preference: PreferenceCode,
    priority: PriorityCode,
    deadline_ns: int | None = None,
    cache: Any = None,
    allow_fallback: bool = True,
) -> tuple[Device | None, IPreparedModel]:
    """Assign, split and prepare ``model`` over ``devices``.

    Returns the one device the whole model runs on (None for several steps)
    and what executions run: the driver's own prepared model when the whole
    model runs on the in-process CPU, an :class:`ExecutionPlan` otherwise.

    Raises:
        BadDataError: an operation no device supports.
        NNError: preparing failed and there is no fallback.
    """
    assignment = find_best_devices(model, devices, preference)
    steps = split_into_steps(model, assignment, devices)
    used = {id(step.device) for step in steps}
    if len(used) == 1:
        logger.info(
            "ModelBuilder::partitionTheWork: only one best device: %s", steps[0].device.name
        )
    else:
        logger.info(
            "ModelBuilder::partitionTheWork: %d steps: %s",
            len(steps),
            "; ".join(f"{s.device.name} {s.operations}" for s in steps),
        )
    cpu = cpu_device() if allow_fallback else None
    try:
        for step in steps:
            step.prepared = step.device.hal.prepare_model(
                step.model, preference, priority, deadline_ns, cache if len(steps) == 1 else None
            )
    except Exception as exc:
        if cpu is None or not all(cpu.get_supported_operations(model)):
            raise
        logger.info(
            "ModelBuilder::partitionTheWork: preparing failed (%s); compiling the whole model for the CPU",
            exc,
        )
        return device_for(cpu), cpu.prepare_model(model, preference, priority, deadline_ns, cache)
    only = steps[0].prepared
    if (
        len(steps) == 1 and only is not None and _in_process_cpu(only)
    ):  # the common case: no wrapper
        return steps[0].device, only
    return (steps[0].device if len(steps) == 1 else None), ExecutionPlan(model, steps, cpu)
