"""Measured, not declared: how fast the CPU reference driver is on this machine.

Two users need real numbers instead of invented ones:

* the partitioner, which weighs a device's declared speed against what it
  costs to reach it: it needs an estimate, in microseconds, of what an
  operation costs on the reference driver (:func:`reference_cost`);
* drivers built on the reference kernels (the service's sample devices),
  which declare their performance relative to the reference the way NNAPI's
  ``Capabilities`` asks (a ratio, lower is faster).  They time their own
  execution path against the bare reference on a small calibration model
  (:func:`measured_ratio`).

Each measurement takes a few milliseconds and is done once per process.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..codes import OperandCode, OperationCode
from ..hal.interfaces import IPreparedModel
from ..hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from ..hal.types import DataLocation, MeasureTiming, Request, RequestArgument
from ..operands import OperandInfo
from .driver import CpuPreparedModel

__all__ = ["ReferenceCost", "calibration_model", "measured_ratio", "reference_cost", "run_once"]

#: Elements of the large calibration tensor: big enough that per-element time dominates.
LARGE = 1 << 16
#: Timed runs per measurement; the minimum is kept (the least disturbed run).
REPEATS = 15


@dataclass(frozen=True)
class ReferenceCost:
    """The reference driver's cost model: a fixed cost per operation plus a cost per
    element of work (an output element, or a multiply-accumulate for convolutions)."""

    operation_us: float
    element_ns: float

    def estimate_us(self, work: int) -> float:
        return self.operation_us + self.element_ns * work / 1000.0


def calibration_model(code: OperandCode, elements: int) -> HalModel:
    """``out = a + b`` on two ``[elements]`` tensors of ``code`` (float32 or an 8-bit quant type)."""
    quantized = code != OperandCode.TENSOR_FLOAT32
    tensor = OperandInfo(code, (elements,), 0.5 if quantized else 0.0, 0)
    fuse = Operand(OperandInfo(OperandCode.INT32), Lifetime.CONSTANT_COPY, np.array(0, np.int32))
    operands = [
        Operand(tensor, Lifetime.SUBGRAPH_INPUT),
        Operand(tensor, Lifetime.SUBGRAPH_INPUT),
        fuse,
        Operand(tensor, Lifetime.SUBGRAPH_OUTPUT),
    ]
    main = Subgraph(operands, [Operation(OperationCode.ADD, (0, 1, 2), (3,))], (0, 1), (3,))
    return HalModel(main)


def run_once(prepared: IPreparedModel, model: HalModel) -> Callable[[], object]:
    """One execution of a :func:`calibration_model` on ``prepared``, as a call."""
    info = model.main.operands[0].info
    assert info.dimensions is not None
    nbytes = int(np.prod(info.dimensions)) * info.dtype.itemsize
    pool = np.zeros(3 * nbytes, np.uint8)
    arguments = [RequestArgument(False, DataLocation(0, i * nbytes, nbytes)) for i in range(3)]
    request = Request(arguments[:2], arguments[2:], [pool])

    def run() -> object:
        return prepared.execute_synchronously(request, MeasureTiming.NO)

    return run


def best_seconds(call: Callable[[], object], repeats: int = REPEATS) -> float:
    """The fastest of ``repeats`` timed calls, after one untimed warm-up."""
    call()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


@functools.cache
def reference_cost() -> ReferenceCost:
    """The reference driver's cost model on this machine (measured once per process)."""
    small = calibration_model(OperandCode.TENSOR_FLOAT32, 1)
    large = calibration_model(OperandCode.TENSOR_FLOAT32, LARGE)
    small_s = best_seconds(run_once(CpuPreparedModel(small), small))
    large_s = best_seconds(run_once(CpuPreparedModel(large), large))
    per_element_ns = max(0.0, (large_s - small_s) * 1e9 / (LARGE - 1))
    return ReferenceCost(operation_us=small_s * 1e6, element_ns=per_element_ns)


def measured_ratio(device: Callable[[], object], reference: Callable[[], object]) -> float:
    """A device's execution time over the reference's on the same work, rounded to 0.01.

    A driver built on the reference kernels cannot be faster than they are,
    so a value below 1 is measurement noise and reads 1.0 (NNAPI's
    ``PerformanceInfo`` is this ratio: lower is faster)."""
    ratio = best_seconds(device) / max(best_seconds(reference), 1e-9)
    return round(max(1.0, ratio), 2)
