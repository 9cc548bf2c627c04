"""The model as drivers see it (HAL 1.3 ``Model``): subgraphs of operands and operations.

The runtime's :class:`nnburst.Model` produces one of these at ``finish()``;
drivers validate, prepare and execute it.  It is plain data, so the driver
service can encode it on its wire without pickle.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from ..codes import OperationCode
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


@dataclass
class HalModel:
    main: Subgraph
    referenced: list[Subgraph] = field(default_factory=list)
    relax_float32_to_float16: bool = False

    def subgraphs(self) -> list[Subgraph]:
        return [self.main, *self.referenced]
