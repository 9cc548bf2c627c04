"""The model as drivers see it (HAL 1.3 ``Model``): subgraphs of operands and operations.

The runtime's :class:`nnburst.Model` produces one of these at ``finish()``;
drivers validate, prepare and execute it.  It is plain data, so the driver
service can encode it on its wire without pickle.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..codes import OperationCode
from ..errors import BadDataError
from ..operands import OperandInfo


class Lifetime(enum.IntEnum):
    """HAL ``OperandLifeTime`` (1.3 names)."""

    TEMPORARY_VARIABLE = 0
    SUBGRAPH_INPUT = 1
    SUBGRAPH_OUTPUT = 2
    CONSTANT_COPY = 3
    CONSTANT_REFERENCE = 4
    NO_VALUE = 5
    SUBGRAPH = 6


@dataclass
class Operand:
    info: OperandInfo
    lifetime: Lifetime
    #: the constant's value (CONSTANT_COPY/REFERENCE), shaped by ``info.dimensions``.
    value: np.ndarray | None = None
    #: index into ``HalModel.referenced`` for SUBGRAPH operands.
    subgraph: int | None = None


@dataclass
class Operation:
    code: OperationCode
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass
class Subgraph:
    operands: list[Operand]
    operations: list[Operation]
    input_indexes: tuple[int, ...]
    output_indexes: tuple[int, ...]


def execution_order(subgraph: Subgraph, group: Sequence[object] | None = None) -> list[int]:
    """Operation indexes in an order where each operation follows those writing its inputs.

    The one ordering rule, for the CPU executor and the partitioner.  Among
    the operations ready to run the lowest index goes first; with ``group``
    (one label per operation, e.g. its device) one with the label of the
    operation just placed is preferred, so same-label runs stay together.

    Raises:
        BadDataError: the operations form a cycle; one reads a temporary or
            output operand that no operation writes; an operand is written
            twice, or is not a temporary or output yet written; or a subgraph
            output is never written.  (``Model.finish`` refuses these too; a
            model from another process is checked here.)
    """
    operations = subgraph.operations
    produced_later = (Lifetime.TEMPORARY_VARIABLE, Lifetime.SUBGRAPH_OUTPUT)
    writer: dict[int, int] = {}
    for n, op in enumerate(operations):
        for i in op.outputs:
            if i in writer:
                raise BadDataError(f"operand {i} is written by operations {writer[i]} and {n}")
            if subgraph.operands[i].lifetime not in produced_later:
                raise BadDataError(
                    f"operation {n} writes operand {i}, which is not a temporary or an output"
                )
            writer[i] = n
    for i in subgraph.output_indexes:
        if i not in writer and subgraph.operands[i].lifetime in produced_later:
            raise BadDataError(f"output operand {i} is written by no operation")
    waiting: list[int] = []
    consumers: list[set[int]] = [set() for _ in operations]
    for n, op in enumerate(operations):
        if any(
            subgraph.operands[i].lifetime in produced_later and i not in writer for i in op.inputs
        ):
            raise BadDataError(f"operation {n} reads an operand no operation writes")
        producers = {writer[i] for i in op.inputs if i in writer}
        waiting.append(len(producers))
        for p in producers:
            consumers[p].add(n)
    ready = [n for n in range(len(operations)) if waiting[n] == 0]
    order: list[int] = []
    last: object = None
    while ready:
        pick = ready[0]
        if group is not None:
            pick = next((n for n in ready if group[n] == last), pick)
            last = group[pick]
        ready.remove(pick)
        order.append(pick)
        for c in consumers[pick]:
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.append(c)
        ready.sort()
    if len(order) != len(operations):
        raise BadDataError("the model's operations form a cycle")
    return order


@dataclass
class HalModel:
    main: Subgraph
    referenced: list[Subgraph] = field(default_factory=list)
    relax_float32_to_float16: bool = False

    def subgraphs(self) -> list[Subgraph]:
        return [self.main, *self.referenced]
