"""The third stage of the CPU driver's prepare: each operation's prepared state, in order.

After validation (:mod:`.validate`) and the graph rewrites (:mod:`.optimise`),
the operations are put in dependency order and each computes, once, what
depends only on the model: filters converted, multipliers and lookup tables
computed.  The result is plain values (arrays, numbers, the operations' own
dataclasses), which is why it is what the compilation cache keeps
(:mod:`.compilation_cache`): a cached compilation starts at the next stage,
binding (:mod:`.bind`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..codes import OperationCode
from ..errors import BadDataError
from ..hal.model import HalModel, Subgraph, execution_order
from .registry import OperationRegistration, OperationSignature, lookup
from .validate import operation_signature


@dataclass(frozen=True)
class CompiledSubgraph:
    """A subgraph as the optimiser rewrote it, the order its operations run in
    (positions in ``subgraph.operations``) and their prepared states (one per
    entry of ``order``)."""

    subgraph: Subgraph
    order: list[int]
    states: list[Any]
    #: the signatures the states were prepared from, for binding to reuse
    #: (None from a cache: they hold the model, so binding makes them)
    signatures: list[OperationSignature] | None = field(default=None, compare=False)


def compile_subgraph(model: HalModel, subgraph: Subgraph) -> CompiledSubgraph:
    """``subgraph`` (validated, rewritten) ordered and prepared.  Each operation
    is validated again: a rewrite must leave only valid operations behind.

    Raises:
        NNError: an operation the driver cannot prepare (for a rewritten graph,
            the driver then prepares the graph as written).
    """
    order = execution_order(subgraph)
    states, signatures = [], []
    for index in order:
        registration = registration_of(subgraph, index)
        signature = operation_signature(subgraph, index, model.relax_float32_to_float16, model)
        registration.validate(signature)
        states.append(registration.prepare(signature) if registration.prepare else None)
        signatures.append(signature)
    return CompiledSubgraph(subgraph, order, states, signatures)


def registration_of(subgraph: Subgraph, index: int) -> OperationRegistration:
    """Operation ``index``'s CPU registration (BadDataError when it has none)."""
    code = subgraph.operations[index].code
    registration = lookup(code)
    if registration is None:
        raise BadDataError(
            f"operation {index}: {OperationCode(code).name} is not supported by the CPU driver"
        )
    return registration
