"""nnburst's extensions to NNAPI, which a device declares by name.

NNAPI lets a vendor add to the standard through named extensions
(``ANeuralNetworksDevice_getExtensionSupport``): a model that uses one
compiles only for devices that declare it.  nnburst has one so far:

:data:`RANK_ABOVE_4` — tensors of rank 5 to :data:`MAX_EXTENDED_RANK` for the
operations in :data:`RANK_ABOVE_4_OPERATIONS`.  NNAPI caps these at rank 4,
although rank is only bookkeeping for them (a reshape, a transpose, an
elementwise sum, a softmax over the last axis); transformer models reshape to
rank 5 for multi-head attention.  The arithmetic is the standard operation's,
at every rank.  The partitioner gives an operation that uses the extension
only to a device that declares it (``IDevice.extensions``); the CPU reference
driver does, a driver service's device does not (its protocol carries no
extensions), so such operations run on the CPU.  See docs/extensions.md.
"""

from __future__ import annotations

from typing import Any

from .codes import OperationCode as Op

__all__ = [
    "MAX_EXTENDED_RANK",
    "RANK_ABOVE_4",
    "RANK_ABOVE_4_OPERATIONS",
    "STANDARD_MAX_RANK",
    "uses_rank_above_4",
]

#: The extension's name, as a device lists it in ``IDevice.extensions``.
RANK_ABOVE_4 = "nnburst.rank_above_4"

#: The highest rank NNAPI allows the operations below.
STANDARD_MAX_RANK = 4

#: The highest rank the extension allows them.
MAX_EXTENDED_RANK = 8

#: Operations whose NNAPI rank limit of 4 the extension lifts.
RANK_ABOVE_4_OPERATIONS = frozenset(
    {
        Op.ADD,
        Op.SUB,
        Op.MUL,
        Op.DIV,
        Op.RESHAPE,
        Op.SQUEEZE,
        Op.TRANSPOSE,
        Op.CONCATENATION,
        Op.STRIDED_SLICE,
        Op.PAD,
        Op.PAD_V2,
        Op.SOFTMAX,
        Op.LOGISTIC,
        Op.TANH,
        Op.RELU,
        Op.RELU1,
        Op.RELU6,
    }
)


def uses_rank_above_4(subgraph: Any, operation: Any) -> bool:
    """True when ``operation`` (of ``subgraph``, a ``hal.model.Subgraph``) is one of
    :data:`RANK_ABOVE_4_OPERATIONS` with an operand of rank over 4."""
    if operation.code not in RANK_ABOVE_4_OPERATIONS:
        return False
    for index in (*operation.inputs, *operation.outputs):
        dims = subgraph.operands[index].info.dimensions
        if dims is not None and len(dims) > STANDARD_MAX_RANK:
            return True
    return False
