"""The C plan's contract (``csrc/plan.h``): a run of float32 elementwise steps
computed in one C call over the caller's buffers and an arena of
intermediates.  The planner (``nnburst/cpu/plan.py``) decides the steps;
this module builds C's table once and calls it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import NNError
from .compiled import ffi, lib

ADD, SUB, MUL, DIV = lib.NNB_PLAN_ADD, lib.NNB_PLAN_SUB, lib.NNB_PLAN_MUL, lib.NNB_PLAN_DIV
MAXIMUM, MINIMUM = lib.NNB_PLAN_MAXIMUM, lib.NNB_PLAN_MINIMUM
CLAMP, HARD_SWISH = lib.NNB_PLAN_CLAMP, lib.NNB_PLAN_HARD_SWISH


@dataclass(frozen=True)
class PlanStep:
    """One step: ``out = kind(a, b)`` over ``count`` floats, clamped to [lo, hi].
    A reference is an arena offset (>= 0) or ``-1 - n`` for the n-th buffer of
    :meth:`PlanTable.run`; a ``*_step`` of 0 broadcasts one value."""

    kind: int
    a: int
    a_step: int
    b: int | None
    b_step: int
    out: int
    count: int
    lo: float
    hi: float


class PlanTable:
    """Steps and the size of each buffer, checked by C against each other on
    every run (a planner bug is an error, never a stray write)."""

    def __init__(self, steps: Sequence[PlanStep], buffer_floats: Sequence[int], arena_floats: int):
        table: Any = ffi.new("nnb_plan_step[]", len(steps))  # its fields are set below
        for entry, step in zip(table, steps):
            entry.kind, entry.a, entry.a_step = step.kind, step.a, step.a_step
            if step.b is not None:
                entry.b, entry.b_step = step.b, step.b_step
            entry.out, entry.count = step.out, step.count
            entry.lo, entry.hi = step.lo, step.hi
        self._table = table
        self._count = len(steps)
        self._floats = ffi.new("int64_t[]", list(buffer_floats))
        self._buffers = len(buffer_floats)
        self._arena_floats = arena_floats

    def run(self, buffers: Sequence[np.ndarray]) -> None:
        """Run the steps over ``buffers`` (C-contiguous float32, inputs then outputs)."""
        arena = np.empty(self._arena_floats, np.float32)  # per call: threads share nothing
        pointers = ffi.new("float *[]", [ffi.from_buffer("float[]", b) for b in buffers])
        rc = lib.nnb_plan_run(
            self._table,
            self._count,
            ffi.from_buffer("float[]", arena),
            self._arena_floats,
            pointers,
            self._floats,
            self._buffers,
        )
        if rc:
            raise NNError(f"the C plan refused its own tables ({rc})")  # a planner bug
