"""The cost of one operation inside a C plan segment against the run loop.

    python bench/plan_overhead.py [--ops 200] [--seconds 1]

A chain of ``--ops`` float32 ADDs on [4] tensors, prepared twice in one
process: planned (one C call) and one by one (the run loop, ``MIN_RUN``
out of reach).  Each is timed in alternating slices; the table gives the
p50 of a whole run and per operation.  The machine is shared: repeat it.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from nnburst.codes import FuseCode, OperandCode, OperationCode
from nnburst.cpu import plan
from nnburst.cpu.executor import PreparedModel
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.operands import OperandInfo


def chain(ops: int, shape: tuple[int, ...]) -> HalModel:
    info = OperandInfo(OperandCode.TENSOR_FLOAT32, shape)
    operands = [Operand(info, Lifetime.SUBGRAPH_INPUT), Operand(info, Lifetime.SUBGRAPH_INPUT)]
    fuse = len(operands)
    operands.append(
        Operand(OperandInfo(OperandCode.INT32, ()), Lifetime.CONSTANT_COPY, np.int32(FuseCode.NONE))
    )
    operations, t = [], 0
    for k in range(ops):
        lifetime = Lifetime.SUBGRAPH_OUTPUT if k == ops - 1 else Lifetime.TEMPORARY_VARIABLE
        operands.append(Operand(info, lifetime))
        operations.append(Operation(OperationCode.ADD, (t, 1, fuse), (len(operands) - 1,)))
        t = len(operands) - 1
    return HalModel(Subgraph(operands, operations, (0, 1), (t,)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    model = chain(args.ops, (4,))
    planned = PreparedModel(model)
    saved, plan.MIN_RUN = plan.MIN_RUN, 1 << 30
    one_by_one = PreparedModel(model)
    plan.MIN_RUN = saved
    x = np.arange(4, dtype=np.float32)
    runs = {"C plan": planned, "run loop": one_by_one}
    times: dict[str, list[int]] = {name: [] for name in runs}
    for _ in range(10):
        for name, prepared in runs.items():
            end = time.perf_counter() + args.seconds / 20
            while time.perf_counter() < end:
                start = time.perf_counter_ns()
                prepared.run([x, x])
                times[name].append(time.perf_counter_ns() - start)
    print(f"{args.ops} float32 ADDs of 4 elements, p50 (busy shared machine: repeat)")
    for name, samples in times.items():
        p50 = statistics.median(samples) / 1000
        print(f"  {name:9s} {p50:9.1f} us a run  {p50 / args.ops:7.3f} us an operation")


if __name__ == "__main__":
    main()
