"""Runs a prepared subgraph's operations in order on numpy arrays.

Everything is decided before this module sees a subgraph: :mod:`.prepare`
validates, optimises, orders and prepares it and binds its kernels, and
hands over the steps to run.  An execution here only calls kernels and moves
arrays between operand slots.
"""

from __future__ import annotations

import contextvars
import logging
import operator
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._bindings.plan import BoundPlan, PlanTable
from ..codes import OperationCode, ResultCode
from ..errors import BadDataError, NNError
from ..hal.model import HalModel, Lifetime
from ..operands import OperandInfo
from .registry import (
    ExecutionContext,
    Kernel,
    OperationRegistration,
    OperationSignature,
)
from .validate import operation_signature, subgraph_references

if TYPE_CHECKING:
    from .states import CompiledSubgraph

__all__ = [
    "PreparedModel",
    "PreparedOperation",
    "PreparedSubgraph",
    "operation_signature",
    "run_quietly",
    "subgraph_references",
]

logger = logging.getLogger("nnburst.cpu")


@dataclass
class PreparedOperation:
    """One operation as the run loop calls it (made by :mod:`.bind`)."""

    registration: OperationRegistration
    signature: OperationSignature
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    state: Any
    #: the operation's bound fast path, or None: ``registration.execute`` then runs.
    kernel: Kernel | None
    #: (operand index, its info, dtype, dimensions) per output, for the checks after each run.
    output_infos: tuple[tuple[int, OperandInfo, np.dtype, tuple[int, ...] | None], ...]


class PreparedSubgraph:
    """A validated, ordered subgraph ready to execute any number of times."""

    def __init__(
        self,
        model: HalModel,
        compiled: CompiledSubgraph,
        operations: list[PreparedOperation],
        planned: list[PreparedOperation],
        owner: PreparedModel | None = None,
    ) -> None:
        """``compiled``: the subgraph as :mod:`.optimise` rewrote it, its order
        and prepared states; ``operations``: its operations in that order with
        their kernels bound; ``planned``: what runs, the pairs of :mod:`.fusion`
        as one and the runs of :mod:`.plan` as one C call (:mod:`.bind` makes
        both)."""
        self.model = model
        #: the prepared model this subgraph belongs to; IF/WHILE reach their
        #: referenced subgraphs through it.
        self.owner = owner
        #: what the compilation cache keeps of this subgraph
        self.compiled = compiled
        self.subgraph = subgraph = compiled.subgraph
        self.order = compiled.order
        self.operations = operations
        self._plan = planned
        subgraph = self.subgraph
        self._input_indexes = list(subgraph.input_indexes)
        self._output_indexes = list(subgraph.output_indexes)
        self._gather_outputs = _gatherer(tuple(self._output_indexes))
        #: (operation, kernel, input gatherer, single output, slots to release,
        #: planned) per operation, in order: what the hot loop of
        #: :meth:`_run_operations` unpacks.  The single output is (slot, dtype,
        #: dimensions) for the usual one-output operation, None for the others;
        #: planned: the kernel is a C plan's, which checks the deadline itself
        #: between its steps.
        self._steps = [
            (
                op,
                op.kernel,
                _gatherer(op.inputs),
                _single_output(op),
                release,
                getattr(op.kernel, "plan_table", None) is not None,
            )
            for op, release in zip(self._plan, self._releases())
        ]
        #: operand slots at the start of every execution: constants filled in.
        self.initial_values: list[np.ndarray | None] = [
            operand.value
            if operand.lifetime in (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE)
            else None
            for operand in subgraph.operands
        ]

    @property
    def plan_table(self) -> PlanTable | None:
        """The C plan that is the whole subgraph, or None when it is not one."""
        if len(self._plan) != 1:
            return None
        table = getattr(self._plan[0].kernel, "plan_table", None)
        return table if isinstance(table, PlanTable) else None

    def bind(
        self, inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray | None]
    ) -> BoundPlan | None:
        """The whole subgraph as one C call over these very buffers (a reusable
        request's inputs and output targets), or None where it is not that: more
        than one step, an output the plan does not write, a buffer of another
        shape or dtype than the plan's (the run loop then checks and explains).
        The plan writes the outputs in place: nothing allocated, nothing copied."""
        table = self.plan_table
        if table is None or len(inputs) != len(self._input_indexes):
            return None
        (op,) = self._plan
        if len(set(self._output_indexes)) != len(self._output_indexes):
            return None
        values = self.initial_values.copy()
        for index, value in zip(self._input_indexes, inputs):
            values[index] = value
        where = dict(zip(self._output_indexes, outputs))
        if sorted(where) != sorted(op.outputs):
            return None
        buffers = [values[i] for i in op.inputs] + [where[i] for i in op.outputs]
        for buffer, (shape, dtype) in zip(buffers, op.kernel.plan_buffers):  # type: ignore[union-attr]
            if (
                type(buffer) is not np.ndarray
                or buffer.shape != shape
                or buffer.dtype != dtype
                or not buffer.flags.c_contiguous
            ):
                return None
        try:
            return table.bind(buffers)  # type: ignore[arg-type]  # no None: checked above
        except BadDataError as exc:  # an output over an input, say: the run loop copies
            logger.debug("plan not bound to the request: %s", exc)
            return None

    def _releases(self) -> list[tuple[int, ...]]:
        """Per operation, the intermediate results no later operation reads: dropped
        as soon as it has run, so that their memory is reused while still in cache
        (holding every intermediate to the end made face_detection's operations
        1.7x slower in a run than alone) and a run's footprint is its widest point."""
        last_read: dict[int, int] = {}
        for position, op in enumerate(self._plan):
            for index in op.inputs:
                last_read[index] = position
        kept = set(self._output_indexes)
        releases: list[list[int]] = [[] for _ in self._plan]
        for position, op in enumerate(self._plan):
            for index in op.outputs:
                if index not in kept:
                    releases[max(last_read.get(index, position), position)].append(index)
        return [tuple(release) for release in releases]

    def run(
        self,
        inputs: Sequence[np.ndarray | None],
        loop_deadline_ns: int | None = None,
        deadline_ns: int | None = None,
    ) -> Sequence[np.ndarray]:
        """Execute with one array per subgraph input; returns one per output.

        ``deadline_ns`` (absolute ``time.monotonic_ns()``) is checked before
        every operation: a late execution stops with MISSED_DEADLINE."""
        input_indexes = self._input_indexes
        if len(inputs) != len(input_indexes):
            raise BadDataError(f"expected {len(input_indexes)} inputs, got {len(inputs)}")
        values = self.initial_values.copy()  # constants and omitted operands, set once
        for index, value in zip(input_indexes, inputs):
            values[index] = value
        # Float overflow to inf/nan is defined behaviour here, not a warning.
        run_quietly(self._run_operations, values, loop_deadline_ns, deadline_ns)
        outputs = self._gather_outputs(values)
        for value in outputs:
            if value is None:
                unwritten = [i for i in self._output_indexes if values[i] is None]
                raise NNError(f"model output operands {unwritten} were never written")
        return outputs

    def _run_operations(
        self, values: list[Any], loop_deadline_ns: int | None, deadline_ns: int | None
    ) -> None:
        """Every operation in order, reading and writing operand slots in ``values``.

        The hot loop of every execution: one ``try`` around it (free in Python
        3.11 until something raises) and the per-operation fields in a tuple."""
        op = None
        check_deadline = deadline_ns is not None
        try:
            for op, kernel, gather, single, release, planned in self._steps:
                if check_deadline and time.monotonic_ns() > deadline_ns:  # type: ignore[operator]
                    raise NNError(
                        f"the execution missed its deadline before {op.signature.code.name}",
                        ResultCode.MISSED_DEADLINE_TRANSIENT,
                    )
                arguments = gather(values)
                if planned:
                    results = kernel(arguments, deadline_ns)  # type: ignore[call-arg,misc]
                elif kernel is not None:
                    results = kernel(arguments)
                else:
                    results = op.registration.execute(
                        ExecutionContext(
                            op.signature, arguments, op.state, loop_deadline_ns, self.owner
                        )
                    )
                if single is not None and len(results) == 1:
                    index, dtype, dimensions = single
                    result = results[0]
                    if (
                        type(result) is not np.ndarray
                        or result.dtype is not dtype  # numpy's builtin dtypes are singletons
                        or result.shape != dimensions
                    ):
                        result = _checked_output(op.signature.code, op.output_infos[0][1], result)
                    values[index] = result
                else:
                    _store_results(op, results, values)
                for index in release:
                    values[index] = None
        except NNError:
            raise
        except (ValueError, IndexError, FloatingPointError, OverflowError) as exc:
            assert op is not None
            raise NNError(f"{op.signature.code.name} failed: {exc}", ResultCode.OP_FAILED) from exc


def _single_output(op: PreparedOperation) -> tuple[int, np.dtype, Any] | None:
    """(slot, dtype, dimensions) of an operation's only output; None if it has several."""
    if len(op.output_infos) != 1:
        return None
    index, _, dtype, dimensions = op.output_infos[0]
    return index, dtype, dimensions


def _gatherer(indexes: tuple[int, ...]) -> Callable[[list[Any]], tuple[Any, ...]]:
    """A function picking an operation's arguments out of the operand slots:
    ``operator.itemgetter`` does it in C, half the cost of a comprehension."""
    if len(indexes) >= 2:
        return operator.itemgetter(*indexes)
    if len(indexes) == 1:
        index = indexes[0]
        return lambda values: (values[index],)
    return lambda values: ()


def _store_results(op: PreparedOperation, results: Sequence[Any], values: list[Any]) -> None:
    """Check and store the results of an operation with several outputs."""
    if len(results) != len(op.output_infos):
        raise NNError(
            f"{op.signature.code.name} produced {len(results)} outputs, "
            f"expected {len(op.output_infos)}"
        )
    for (index, info, dtype, dimensions), result in zip(op.output_infos, results):
        if (
            type(result) is not np.ndarray
            or result.dtype is not dtype
            or result.shape != dimensions
        ):
            result = _checked_output(op.signature.code, info, result)
        values[index] = result


#: True only inside the per-thread contexts of :func:`run_quietly`.
_QUIET = contextvars.ContextVar("nnburst_quiet_numpy", default=False)
#: numpy 2 keeps its error state in a context variable; numpy 1 per thread.
_CONTEXT_ERRSTATE = np.lib.NumpyVersion(np.__version__) >= "2.0.0"
_threads = threading.local()


def run_quietly(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` with numpy's floating-point errors ignored.

    ``with np.errstate(...)`` costs ~1 µs per execution, a sixth of a small
    model's.  With numpy 2 each thread instead keeps one context in which the
    errors are already ignored, and entering it costs ~0.05 µs.  A nested call
    (IF and WHILE bodies) is already inside it and runs directly."""
    if _QUIET.get():
        return function(*args)
    if not _CONTEXT_ERRSTATE:
        with np.errstate(all="ignore"):
            return function(*args)
    context = getattr(_threads, "context", None)
    if context is None:
        context = _threads.context = contextvars.Context()
        context.run(_enter_quiet)
    return context.run(function, *args)


def _enter_quiet() -> None:
    np.seterr(all="ignore")  # this context's error state only (numpy 2)
    _QUIET.set(True)


def _checked_output(code: OperationCode, info: Any, result: np.ndarray) -> np.ndarray:
    result = np.asarray(result)
    if result.dtype != info.dtype:
        result = result.astype(info.dtype)
    declared = info.dimensions
    if declared == result.shape:
        return result
    if declared is not None and len(declared) == result.ndim:
        for want, got in zip(declared, result.shape):
            if want and want != got:
                raise NNError(
                    f"{code.name} produced shape {result.shape}, but the model declares {declared}",
                    ResultCode.OP_FAILED,
                )
    elif declared is not None and declared and not info.is_scalar:
        raise NNError(
            f"{code.name} produced rank {result.ndim}, but the model declares {declared}",
            ResultCode.OP_FAILED,
        )
    return result


class PreparedModel:
    """The CPU driver's prepared form of a whole model: its main subgraph, and
    the referenced ones (IF and WHILE bodies) prepared on first use."""

    def __init__(self, model: HalModel, cached: Any = None) -> None:
        """``cached``: the main subgraph's :class:`.states.CompiledSubgraph` from a
        compilation cache (validation, the rewrites and the states skipped)."""
        from .prepare import prepare_subgraph  # prepare makes what this module runs

        self.model = model
        self._prepare = prepare_subgraph
        self._referenced: dict[int, PreparedSubgraph] = {}
        self.main = prepare_subgraph(model, model.main, self, cached)

    def referenced(self, index: int) -> PreparedSubgraph:
        """A referenced subgraph (IF/WHILE bodies), prepared on first use."""
        prepared = self._referenced.get(index)
        if prepared is None:
            if not 0 <= index < len(self.model.referenced):
                raise BadDataError(
                    f"referenced subgraph {index} does not exist "
                    f"(the model has {len(self.model.referenced)})"
                )
            prepared = self._prepare(self.model, self.model.referenced[index], self)
            self._referenced[index] = prepared
        return prepared

    def run(
        self,
        inputs: Sequence[np.ndarray | None],
        loop_deadline_ns: int | None = None,
        deadline_ns: int | None = None,
    ) -> Sequence[np.ndarray]:
        return self.main.run(inputs, loop_deadline_ns, deadline_ns)
