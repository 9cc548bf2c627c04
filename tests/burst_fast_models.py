"""The model of the burst C path's tests: out = (a + b) * c, float32 [3, 4],
c a constant: two operations, so the CPU driver runs it as one C plan."""

from __future__ import annotations

import numpy as np

from nnburst.codes import OperandCode, OperationCode
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.operands import OperandInfo

SHAPE = (3, 4)
NBYTES = 48
C = np.linspace(-2, 2, 12, dtype=np.float32).reshape(SHAPE)


def add_mul_model() -> HalModel:
    tensor = OperandInfo(OperandCode.TENSOR_FLOAT32, SHAPE)
    none = Operand(
        OperandInfo(OperandCode.INT32, ()), Lifetime.CONSTANT_COPY, np.array(0, np.int32)
    )
    operands = [
        Operand(tensor, Lifetime.SUBGRAPH_INPUT),  # 0 a
        Operand(tensor, Lifetime.SUBGRAPH_INPUT),  # 1 b
        none,  # 2
        Operand(tensor, Lifetime.TEMPORARY_VARIABLE),  # 3 a + b
        Operand(tensor, Lifetime.CONSTANT_COPY, C),  # 4 c
        Operand(tensor, Lifetime.SUBGRAPH_OUTPUT),  # 5 out
    ]
    operations = [
        Operation(OperationCode.ADD, (0, 1, 2), (3,)),
        Operation(OperationCode.MUL, (3, 4, 2), (5,)),
    ]
    return HalModel(Subgraph(operands, operations, (0, 1), (5,)))


def expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a + b) * C
