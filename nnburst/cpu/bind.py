"""The last stage of the CPU driver's prepare: kernels bound, pairs fused, runs planned in C.

From a compiled subgraph (:class:`.states.CompiledSubgraph`: the order and
every operation's prepared state) this stage makes what the executor runs:
each operation's kernel bound with its constant parameters resolved
(``registration.bind``), the pairs of :mod:`.fusion` as one operation and
the runs of :mod:`.plan` as one C call.  Everything made here holds C
pointers or closures, so it is made again for every compilation, a cached
one included; what comes before it is plain values and is cached.
"""

from __future__ import annotations

from ..hal.model import HalModel
from .executor import PreparedOperation
from .fusion import fuse
from .plan import plan
from .registry import OperationSignature
from .states import CompiledSubgraph, registration_of
from .validate import operation_signature


def bind_operations(model: HalModel, compiled: CompiledSubgraph) -> list[PreparedOperation]:
    """The compiled operations in order, each with its kernel bound where it has one."""
    subgraph = compiled.subgraph
    if len(compiled.states) != len(compiled.order):
        raise ValueError("one prepared state per ordered operation")
    signatures: list[OperationSignature | None] = [None] * len(compiled.order)
    if compiled.signatures is not None:
        signatures = list(compiled.signatures)
    operations = []
    for index, state, signature in zip(compiled.order, compiled.states, signatures):
        operation = subgraph.operations[index]
        registration = registration_of(subgraph, index)
        if signature is None:
            signature = operation_signature(subgraph, index, model.relax_float32_to_float16, model)
        kernel = registration.bind(signature, state) if registration.bind else None
        output_infos = tuple(
            (i, info, info.dtype, info.dimensions)
            for i, info in ((i, subgraph.operands[i].info) for i in operation.outputs)
        )
        operations.append(
            PreparedOperation(
                registration,
                signature,
                operation.inputs,
                operation.outputs,
                state,
                kernel,
                output_infos,
            )
        )
    return operations


def plan_operations(
    operations: list[PreparedOperation], compiled: CompiledSubgraph
) -> list[PreparedOperation]:
    """What runs: ``operations`` with fusable pairs as one and C runs as one step."""
    subgraph = compiled.subgraph
    written = {index for op in operations for index in op.outputs}
    return plan(fuse(operations, written - set(subgraph.output_indexes)), subgraph)
