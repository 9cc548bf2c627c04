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

from .._bindings.plan import BoundPlan


@dataclass(frozen=True)
class BurstPlan:
    """The plan bound to a request's inputs and private outputs, and the
    (private output, target in a pool) pairs to copy after each run."""

    plan: BoundPlan
    copies: tuple[tuple[np.ndarray, np.ndarray], ...]


def bind(
    main: Any,
    inputs: list[np.ndarray | None],
    targets: list[np.ndarray | None] | None,
) -> BurstPlan | None:
    """The whole-model plan of ``main`` (a prepared subgraph, which checks
    that it is one C plan and that every buffer has exactly the plan's shape
    and type) over a request's ``inputs`` (arrays in the pools, checked
    against the model) and fixed-shape ``targets``; None when it is not that."""
    if main.plan_table is None:  # before any allocation: a repeat asks on every packet
        return None
    if targets is None or any(type(t) is not np.ndarray for t in targets):
        return None
    privates = [np.empty(t.shape, t.dtype) for t in targets]  # type: ignore[union-attr]
    plan = main.bind(inputs, privates)
    if plan is None:
        return None
    return BurstPlan(plan, tuple(zip(privates, targets)))  # type: ignore[arg-type]
