"""One-operation models for the CPU operation tests.

``model(code, inputs, outputs)``: each input is an ``OperandInfo`` (a model
input), an ``(info, value)`` pair (a constant) or ``(info, OMITTED)`` (an
omitted optional operand); every output is a model output.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnburst.codes import OperationCode
from nnburst.cpu.executor import PreparedModel
from nnburst.errors import BadDataError
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.operands import OperandInfo

OMITTED = object()


def model(code: OperationCode, inputs: list[Any], outputs: list[OperandInfo]) -> HalModel:
    operands: list[Operand] = []
    model_inputs = []
    for item in inputs:
        if isinstance(item, OperandInfo):
            model_inputs.append(len(operands))
            operands.append(Operand(item, Lifetime.SUBGRAPH_INPUT))
        elif item[1] is OMITTED:
            operands.append(Operand(item[0], Lifetime.NO_VALUE))
        else:
            operands.append(Operand(item[0], Lifetime.CONSTANT_COPY, item[1]))
    first = len(operands)
    operands += [Operand(info, Lifetime.SUBGRAPH_OUTPUT) for info in outputs]
    outs = tuple(range(first, len(operands)))
    operation = Operation(code, tuple(range(len(inputs))), outs)
    return HalModel(Subgraph(operands, [operation], tuple(model_inputs), outs))


def run(
    code: OperationCode, inputs: list[Any], outputs: list[OperandInfo], *feed: Any
) -> list[np.ndarray]:
    return PreparedModel(model(code, inputs, outputs)).run(list(feed))


def rejects(code: OperationCode, inputs: list[Any], outputs: list[OperandInfo], match: str) -> None:
    with pytest.raises(BadDataError, match=match):
        PreparedModel(model(code, inputs, outputs))
