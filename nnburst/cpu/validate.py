"""The first stage of the CPU driver's prepare: is every operation registered and valid?

One check serves both questions a runtime asks the driver: which operations
it supports (``getSupportedOperations``, :func:`.driver.supported_operations`)
and whether a model prepares (:func:`validate_subgraph`, the first stage of
:mod:`.prepare`).  Both call :func:`validate_operation`, so what the driver
says it supports and what it accepts cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..codes import OperationCode
from ..errors import BadDataError, NNError
from ..hal.model import HalModel, Lifetime, Subgraph, execution_order
from .registry import OperationSignature, lookup


def operation_signature(
    subgraph: Subgraph, index: int, relaxed: bool, model: HalModel | None = None
) -> OperationSignature:
    """The signature the registry validates for operation ``index`` of ``subgraph``."""
    operation = subgraph.operations[index]
    constants: dict[int, np.ndarray | None] = {}
    for position, operand_index in enumerate(operation.inputs):
        operand = subgraph.operands[operand_index]
        if operand.lifetime in (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE):
            constants[position] = operand.value
        elif operand.lifetime == Lifetime.NO_VALUE:
            constants[position] = None
    return OperationSignature(
        code=OperationCode(operation.code),
        inputs=[subgraph.operands[i].info for i in operation.inputs],
        outputs=[subgraph.operands[i].info for i in operation.outputs],
        constants=constants,
        relaxed=relaxed,
        subgraphs=subgraph_references(subgraph, operation.inputs),
        model=model,
    )


def subgraph_references(subgraph: Subgraph, inputs: Sequence[int]) -> dict[int, int]:
    """Input position -> referenced-subgraph index, for an operation's MODEL inputs."""
    return {
        position: operand.subgraph
        for position, operand in ((p, subgraph.operands[i]) for p, i in enumerate(inputs))
        if operand.lifetime == Lifetime.SUBGRAPH and operand.subgraph is not None
    }


def validate_operation(model: HalModel, subgraph: Subgraph, index: int) -> bool:
    """Validate one operation with its CPU registration.

    Returns:
        False when the CPU driver has no implementation of the operation (it
        may still be valid for another device), True when it validated.

    Raises:
        BadDataError: the operation is invalid; the message names it.
    """
    operation = subgraph.operations[index]
    registration = lookup(operation.code)
    if registration is None:
        return False
    name = OperationCode(operation.code).name
    try:
        registration.validate(
            operation_signature(subgraph, index, model.relax_float32_to_float16, model)
        )
    except NNError as exc:
        raise BadDataError(
            f"operation {index} ({name}) is invalid: {exc.args[0] if exc.args else exc}"
        ) from exc
    except Exception as exc:  # a validator tripping over a malformed signature
        raise BadDataError(
            f"operation {index} ({name}) is invalid: {type(exc).__name__}: {exc}"
        ) from exc
    return True


def validate_subgraph(model: HalModel, subgraph: Subgraph) -> None:
    """Every operation of ``subgraph`` registered and valid, in dependency order.

    Raises:
        BadDataError: an operation the CPU driver does not implement, or an
            invalid one (the message names it), or a graph with no order.
    """
    for index in execution_order(subgraph):
        if not validate_operation(model, subgraph, index):
            name = OperationCode(subgraph.operations[index].code).name
            raise BadDataError(f"operation {index}: {name} is not supported by the CPU driver")
