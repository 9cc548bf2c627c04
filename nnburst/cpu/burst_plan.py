"""A request bound to the model's C plan, for a burst server's C path.

When one C plan (:mod:`.plan`) computes the whole main subgraph, a
request's execution is nothing but that plan over its inputs, the model's
constants and its outputs.  :func:`bind` checks that this holds for one
validated execution (:class:`.driver.CpuExecution`) and returns the plan
with every buffer it reads and writes, so the burst server's C loop
(``csrc/burst_fast.c``) can repeat the execution without Python.

The plan writes private output arrays, copied to the request's output
locations afterwards, exactly as the Python path computes into fresh arrays
and copies them into place: an output location overlapping an input (or
two slots naming one file) gives the same answer either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._bindings.plan import PlanTable


@dataclass(frozen=True)
class BoundPlan:
    """The plan, its buffers in its order (inputs, then private outputs), and
    (private output, target in a pool) pairs to copy after each run."""

    table: PlanTable
    buffers: tuple[np.ndarray, ...]
    copies: tuple[tuple[np.ndarray, np.ndarray], ...]


def bind(
    main: Any,
    inputs: list[np.ndarray | None],
    targets: list[np.ndarray | None] | None,
) -> BoundPlan | None:
    """The whole-model plan of ``main`` (a prepared subgraph) over a request's
    ``inputs`` (arrays in the pools, checked against the model) and fixed-shape
    ``targets``; None when anything but one C plan would run, or a buffer does
    not have exactly the plan's shape and type."""
    if targets is None or len(main._steps) != 1:
        return None
    op = main._plan[0]
    table = getattr(op.kernel, "plan_table", None)
    infos = getattr(op.kernel, "plan_infos", None)
    if not isinstance(table, PlanTable) or infos is None:
        return None
    model_inputs = {index: position for position, index in enumerate(main._input_indexes)}
    model_outputs = list(main._output_indexes)
    if sorted(op.outputs) != sorted(model_outputs) or len(set(model_outputs)) != len(model_outputs):
        return None
    if len(op.inputs) + len(op.outputs) != len(infos):
        return None
    buffers: list[np.ndarray] = []
    for index, info in zip(op.inputs, infos):
        position = model_inputs.get(index)
        value = main.initial_values[index] if position is None else inputs[position]
        if value is None or not _fits(value, info):
            return None
        buffers.append(value)
    copies = []
    for index, info in zip(op.outputs, infos[len(op.inputs) :]):
        target = targets[model_outputs.index(index)]
        if target is None or not _fits(target, info):
            return None
        private = np.empty(info.dimensions or (), info.dtype)
        buffers.append(private)
        copies.append((private, target))
    return BoundPlan(table, tuple(buffers), tuple(copies))


def _fits(value: Any, info: Any) -> bool:
    return (
        type(value) is np.ndarray
        and value.dtype == info.dtype
        and value.shape == tuple(info.dimensions or ())
        and value.flags.c_contiguous
    )
