"""Runs of float32 elementwise operations as one C call (``csrc/plan.c``).

The run loop costs about a microsecond per operation before any
arithmetic: picking the arguments, calling the kernel, checking and storing
its result, a numpy call of its own.  For a run of consecutive elementwise
operations on small tensors that is all of their time.  At prepare time
each run of at least :data:`MIN_RUN` such operations (ADD, SUB, MUL, DIV,
MAXIMUM, MINIMUM, RELU, RELU1, RELU6, HARD_SWISH on float32 tensors of
static shape, each input the output's shape or one element) becomes one
step of the run loop: a table of C steps over an arena of the run's
intermediates, allocated at once per call, so nothing is shared between
threads.  The run's inputs and the results read after it (or returned)
are the step's inputs and outputs.  The C loop computes what numpy
computes, operation for operation: the same values, NaN where numpy has
NaN (only a zero's sign may differ after a MAXIMUM, MINIMUM or clamp, as it
does between numpy's own vector and scalar loops).  An
input of another dtype or shape than prepared runs the operations one by
one as before.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._bindings import plan as c_plan
from ..codes import FuseCode, OperandCode, OperationCode
from ..hal.model import Lifetime, Subgraph
from ..operands import OperandInfo
from .ops.fused_activation import FLOAT_ACTIVATION_BOUNDS
from .registry import ExecutionContext

logger = logging.getLogger("nnburst.compilation.plan")

#: Shorter runs gain too little over the loop to pay for a C call's set-up.
MIN_RUN = 2

_BINARY = {
    OperationCode.ADD: c_plan.ADD,
    OperationCode.SUB: c_plan.SUB,
    OperationCode.MUL: c_plan.MUL,
    OperationCode.DIV: c_plan.DIV,
    OperationCode.MAXIMUM: c_plan.MAXIMUM,
    OperationCode.MINIMUM: c_plan.MINIMUM,
}
_CLAMPS = {
    OperationCode.RELU: FuseCode.RELU,
    OperationCode.RELU1: FuseCode.RELU1,
    OperationCode.RELU6: FuseCode.RELU6,
}
_WITH_FUSE = (OperationCode.ADD, OperationCode.SUB, OperationCode.MUL, OperationCode.DIV)
_F32 = OperandCode.TENSOR_FLOAT32
_CONSTANT = (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE)


def plan(operations: list[Any], subgraph: Subgraph) -> list[Any]:
    """``operations`` (the executor's prepared operations, in order) with each run of
    :data:`MIN_RUN` or more plannable ones replaced by one operation running them in C."""
    steps = [_step(op, subgraph) for op in operations]
    result: list[Any] = []
    position = 0
    while position < len(operations):
        end = position
        while end < len(operations) and steps[end] is not None:
            end += 1
        if end - position >= MIN_RUN:
            later = {i for op in operations[end:] for i in op.inputs}
            result.append(_run(operations[position:end], steps[position:end], subgraph, later))
            position = end
        else:
            result.append(operations[position])
            position += 1
    return result


@dataclasses.dataclass(frozen=True)
class _Step:
    """One operation as a C step: its kind, tensor inputs and clamp."""

    kind: int
    inputs: tuple[int, ...]
    output: int
    count: int
    lo: float
    hi: float


def _step(op: Any, subgraph: Subgraph) -> _Step | None:
    """``op`` as a C step, or None when the C loop does not compute it."""
    code = op.signature.code
    if code in _BINARY:
        tensors = op.inputs[:2]
    elif code in _CLAMPS or code == OperationCode.HARD_SWISH:
        tensors = op.inputs[:1]
    else:
        return None
    if len(op.outputs) != 1:
        return None
    out = subgraph.operands[op.outputs[0]].info
    if out.code != _F32 or not out.is_fully_specified:
        return None
    count = math.prod(out.dimensions or ())
    for index in tensors:
        info = subgraph.operands[index].info
        if info.code != _F32 or not info.is_fully_specified:
            return None
        if info.dimensions != out.dimensions and (
            math.prod(info.dimensions or ()) != 1
            or len(info.dimensions or ()) > len(out.dimensions or ())
        ):
            return None
    lo, hi = -np.inf, np.inf
    if code in _WITH_FUSE:
        fuse = subgraph.operands[op.inputs[2]]
        if fuse.lifetime not in _CONSTANT or fuse.value is None:
            return None
        bounds = FLOAT_ACTIVATION_BOUNDS.get(int(fuse.value))
        if bounds is None:
            return None
        lo, hi = bounds
    elif code in _CLAMPS:
        lo, hi = FLOAT_ACTIVATION_BOUNDS[_CLAMPS[code]]
    if code in _BINARY:
        kind = _BINARY[code]
    elif code in _CLAMPS:
        kind = c_plan.CLAMP
    else:
        kind = c_plan.HARD_SWISH
    return _Step(kind, tuple(tensors), op.outputs[0], count, lo, hi)


def _run(operations: list[Any], steps: list[Any], subgraph: Subgraph, later: set[int]) -> Any:
    """One prepared operation computing ``operations`` (a run of plannable ones)."""
    written = {step.output for step in steps}
    inputs: list[int] = []
    for step in steps:
        inputs += [i for i in step.inputs if i not in written and i not in inputs]
    outputs = [
        s.output
        for s in steps
        if s.output in later
        or s.output in subgraph.output_indexes
        or subgraph.operands[s.output].lifetime != Lifetime.TEMPORARY_VARIABLE
    ]
    tensors = inputs + outputs
    refs = {index: -1 - n for n, index in enumerate(tensors)}
    arena = 0
    for step in steps:
        if step.output not in refs:
            refs[step.output] = arena
            arena += step.count
    entries = [
        c_plan.PlanStep(
            kind=step.kind,
            a=refs[step.inputs[0]],
            a_step=int(_count(subgraph, step.inputs[0]) == step.count),
            b=refs[step.inputs[1]] if len(step.inputs) > 1 else None,
            b_step=int(len(step.inputs) > 1 and _count(subgraph, step.inputs[1]) == step.count),
            out=refs[step.output],
            count=step.count,
            lo=step.lo,
            hi=step.hi,
        )
        for step in steps
    ]
    infos = [subgraph.operands[i].info for i in tensors]
    table = c_plan.PlanTable(entries, [math.prod(i.dimensions or ()) for i in infos], arena)
    fallback = _one_by_one(operations, subgraph, inputs, outputs)
    kernel = _kernel(table, infos, len(inputs), fallback)
    logger.debug(
        "plan: %d operations (%s) as one C call",
        len(operations),
        ", ".join(sorted({op.signature.code.name for op in operations})),
    )
    return dataclasses.replace(
        operations[0],
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        kernel=kernel,
        output_infos=tuple(
            (
                i,
                subgraph.operands[i].info,
                subgraph.operands[i].info.dtype,
                subgraph.operands[i].info.dimensions,
            )
            for i in outputs
        ),
    )


def _count(subgraph: Subgraph, index: int) -> int:
    return math.prod(subgraph.operands[index].info.dimensions or ())


def _kernel(
    table: c_plan.PlanTable,
    infos: list[OperandInfo],
    input_count: int,
    fallback: Callable[[Sequence[np.ndarray | None]], list[np.ndarray]],
) -> Callable[[Sequence[np.ndarray | None]], list[np.ndarray]]:
    shapes = [tuple(info.dimensions or ()) for info in infos]
    input_shapes, output_shapes = shapes[:input_count], shapes[input_count:]
    f32 = np.dtype(np.float32)

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        arrays: list[np.ndarray] = []
        for x, shape in zip(inputs, input_shapes):
            if type(x) is not np.ndarray or x.dtype is not f32 or x.shape != shape:
                return fallback(inputs)
            arrays.append(x if x.flags.c_contiguous else np.ascontiguousarray(x))
        outputs = [np.empty(shape, f32) for shape in output_shapes]
        table.run([*arrays, *outputs])
        return outputs

    return kernel


def _one_by_one(
    operations: list[Any], subgraph: Subgraph, inputs: list[int], outputs: list[int]
) -> Callable[[Sequence[np.ndarray | None]], list[np.ndarray]]:
    """The run's operations one after another, as the run loop would (for inputs
    of another dtype or shape than the plan's: their kernels check and explain)."""
    constants = {
        i: operand.value
        for i, operand in enumerate(subgraph.operands)
        if operand.lifetime in _CONSTANT
    }

    def run(values: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        known: dict[int, Any] = {**constants, **dict(zip(inputs, values))}
        for op in operations:
            arguments = [known.get(i) for i in op.inputs]
            if op.kernel is not None:
                results = op.kernel(arguments)
            else:
                results = op.registration.execute(
                    ExecutionContext(op.signature, arguments, op.state)
                )
            known[op.outputs[0]] = results[0]
        return [known[i] for i in outputs]

    return run
