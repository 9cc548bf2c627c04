"""IF and WHILE (NNAPI 1.3): run referenced subgraphs conditionally or repeatedly.

IF takes (TENSOR_BOOL8 [1] condition, then-model, else-model, inputs...) and
returns what the chosen branch returns.  WHILE takes (condition model, body
model, m input-output values, k state-only values, n input-only values) and
returns the m input-output values after the last iteration; the body's m + k
outputs become the next iteration's first m + k inputs.

The referenced subgraphs must agree with the operation: the same operand
types and quantization, and ranks/dimensions equal wherever both sides know
them (a subgraph may leave dimensions or rank unknown; its values then take
their runtime shapes).  Subgraph references must not form a cycle, which
would make execution recurse forever.

A WHILE checks the loop deadline (absolute ``time.monotonic_ns()``, set by
the driver from the execution's loop timeout) before every evaluation of its
condition; past it the execution fails with MISSED_DEADLINE_TRANSIENT, the
code NNAPI's reference executor uses for loop timeouts.  Without a deadline
the NNAPI default of 2 s applies, so no loop runs forever.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...codes import OperandCode, OperationCode, ResultCode
from ...errors import DeadlineExceeded, NNError
from ...hal.cancellation import cancelled
from ...hal.model import HalModel, Lifetime, Subgraph
from ...hal.types import DEFAULT_LOOP_TIMEOUT_NS
from ...operands import OperandInfo
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import op_failed

# --- validation -----------------------------------------------------------------------


def _dims(info: OperandInfo) -> tuple[int, ...] | None:
    """Known dimensions, ``None`` for unknown rank (a tensor of rank 0 is unknown rank)."""
    if info.is_scalar:
        return ()
    return info.dimensions or None


def _compatible(a: OperandInfo, b: OperandInfo) -> bool:
    """Same type and quantization; dimensions equal wherever both sides know them."""
    if (a.code, a.scale, a.zero_point, a.channel_quant) != (
        b.code,
        b.scale,
        b.zero_point,
        b.channel_quant,
    ):
        return False
    da, db = _dims(a), _dims(b)
    if da is None or db is None:
        return True
    return len(da) == len(db) and all(x == 0 or y == 0 or x == y for x, y in zip(da, db))


def _describe(info: OperandInfo) -> str:
    return f"{info.code.name} {_dims(info)}"


def _referenced(sig: OperationSignature, position: int, name: str) -> Subgraph:
    """The subgraph input ``position`` refers to, or BAD_DATA saying why there is none."""
    if sig.inputs[position].code != OperandCode.MODEL:
        raise sig.fail(
            f"input {position} ({name}) must be a MODEL operand, got {sig.inputs[position].code.name}"
        )
    index = sig.subgraphs.get(position)
    if index is None:
        raise sig.fail(f"input {position} ({name}) refers to no subgraph")
    model: HalModel | None = sig.model
    if model is None:
        raise sig.fail("the referenced subgraphs are not available for validation")
    if not 0 <= index < len(model.referenced):
        raise sig.fail(
            f"input {position} ({name}) refers to subgraph {index}, "
            f"but the model has {len(model.referenced)} referenced subgraphs"
        )
    return model.referenced[index]


def _check_acyclic(sig: OperationSignature) -> None:
    """Fail if a subgraph this operation reaches references itself (directly or not)."""
    model: HalModel = sig.model
    done: set[int] = set()
    on_path: set[int] = set()

    def visit(index: int) -> None:
        if index in done:
            return
        if index in on_path:
            raise sig.fail(f"referenced subgraph {index} refers back to itself (a cycle)")
        on_path.add(index)
        for operand in model.referenced[index].operands:
            if operand.lifetime == Lifetime.SUBGRAPH and operand.subgraph is not None:
                if not 0 <= operand.subgraph < len(model.referenced):
                    raise sig.fail(
                        f"referenced subgraph {index} refers to a missing subgraph {operand.subgraph}"
                    )
                visit(operand.subgraph)
        on_path.discard(index)
        done.add(index)

    for index in sig.subgraphs.values():
        visit(index)


def _check_counts(
    sig: OperationSignature, name: str, sub: Subgraph, inputs: int, outputs: Sequence[int]
) -> None:
    if len(sub.input_indexes) != inputs:
        raise sig.fail(f"the {name} model has {len(sub.input_indexes)} inputs, expected {inputs}")
    if len(sub.output_indexes) not in outputs:
        want = " to ".join(str(n) for n in sorted({min(outputs), max(outputs)}))
        raise sig.fail(f"the {name} model has {len(sub.output_indexes)} outputs, expected {want}")


def _check_match(
    sig: OperationSignature, what: str, sub_info: OperandInfo, op_info: OperandInfo, op_what: str
) -> None:
    if not _compatible(sub_info, op_info):
        raise sig.fail(f"{what} is {_describe(sub_info)}, but {op_what} is {_describe(op_info)}")


def _check_condition_type(
    sig: OperationSignature, info: OperandInfo, what: str, exact: bool
) -> None:
    """A condition is TENSOR_BOOL8 of shape [1] (``exact``: the shape must be fully specified)."""
    dims = _dims(info)
    ok_shape = dims == (1,) if exact else dims is None or dims in ((0,), (1,))
    if info.code != OperandCode.TENSOR_BOOL8 or not ok_shape:
        raise sig.fail(f"{what} must be TENSOR_BOOL8 of shape [1], got {_describe(info)}")


def _validate_if(sig: OperationSignature) -> None:
    if len(sig.inputs) < 3:
        raise sig.fail(f"expected at least 3 inputs (condition, then, else), got {len(sig.inputs)}")
    if not sig.outputs:
        raise sig.fail("expected at least 1 output")
    _check_condition_type(sig, sig.inputs[0], "input 0 (condition)", exact=False)
    n_inputs, n_outputs = len(sig.inputs) - 3, len(sig.outputs)
    for position, name in ((1, "then"), (2, "else")):
        sub = _referenced(sig, position, name)
        _check_counts(sig, name, sub, n_inputs, (n_outputs,))
        for i, operand in enumerate(sub.input_indexes):
            _check_match(
                sig,
                f"{name} model input {i}",
                sub.operands[operand].info,
                sig.inputs[3 + i],
                f"input {3 + i}",
            )
        for i, operand in enumerate(sub.output_indexes):
            _check_match(
                sig,
                f"{name} model output {i}",
                sub.operands[operand].info,
                sig.outputs[i],
                f"output {i}",
            )
    _check_acyclic(sig)


def _validate_while(sig: OperationSignature) -> None:
    if len(sig.inputs) < 3:
        raise sig.fail(
            f"expected at least 3 inputs (condition, body, values), got {len(sig.inputs)}"
        )
    if not sig.outputs:
        raise sig.fail("expected at least 1 output")
    values = len(sig.inputs) - 2  # m input-output + k state-only + n input-only
    m = len(sig.outputs)
    if m > values:
        raise sig.fail(f"{m} outputs but only {values} loop values")
    cond = _referenced(sig, 0, "condition")
    body = _referenced(sig, 1, "body")
    _check_counts(sig, "condition", cond, values, (1,))
    _check_counts(sig, "body", body, values, range(m, values + 1))
    _check_condition_type(
        sig, cond.operands[cond.output_indexes[0]].info, "the condition model's output", exact=True
    )
    for name, sub in (("condition", cond), ("body", body)):
        for i, operand in enumerate(sub.input_indexes):
            _check_match(
                sig,
                f"{name} model input {i}",
                sub.operands[operand].info,
                sig.inputs[2 + i],
                f"input {2 + i}",
            )
    for i, operand in enumerate(body.output_indexes):
        info = body.operands[operand].info
        _check_match(sig, f"body model output {i}", info, sig.inputs[2 + i], f"input {2 + i}")
        if i < m:
            _check_match(sig, f"body model output {i}", info, sig.outputs[i], f"output {i}")
    _check_acyclic(sig)


# --- execution ------------------------------------------------------------------------


def _prepared(ctx: ExecutionContext, position: int) -> Any:
    """The ``executor.PreparedSubgraph`` behind MODEL input ``position``."""
    if ctx.model is None:
        raise op_failed(ctx.code, "no prepared model to run the referenced subgraph")
    return ctx.model.referenced(ctx.signature.subgraphs[position])


def _check_fits(
    ctx: ExecutionContext, prepared: Any, values: Sequence[np.ndarray | None], name: str
) -> None:
    """Runtime shapes must fit what the subgraph declares for its inputs."""
    sub = prepared.subgraph
    for i, (operand, value) in enumerate(zip(sub.input_indexes, values)):
        if value is None:
            continue
        declared = _dims(sub.operands[operand].info)
        if declared is None:
            continue
        shape = value.shape
        if len(shape) != len(declared) or any(d and d != s for d, s in zip(declared, shape)):
            raise op_failed(
                ctx.code, f"{name} model input {i} is declared {declared} but gets shape {shape}"
            )


def _truth(ctx: ExecutionContext, value: np.ndarray, what: str) -> bool:
    if value.size != 1:
        raise op_failed(ctx.code, f"{what} must hold exactly one value, got shape {value.shape}")
    return bool(value.reshape(-1)[0])


def _execute_if(ctx: ExecutionContext) -> list[np.ndarray]:
    branch, name = (1, "then") if _truth(ctx, ctx.input(0), "the condition") else (2, "else")
    prepared = _prepared(ctx, branch)
    values = ctx.inputs[3:]
    _check_fits(ctx, prepared, values, name)
    return prepared.run(values, ctx.loop_deadline_ns)


def _execute_while(ctx: ExecutionContext) -> list[np.ndarray]:
    cond, body = _prepared(ctx, 0), _prepared(ctx, 1)
    deadline = ctx.loop_deadline_ns
    if deadline is None:
        deadline = time.monotonic_ns() + DEFAULT_LOOP_TIMEOUT_NS
    state = list(ctx.inputs[2:])
    carried = len(body.subgraph.output_indexes)
    iteration = 0
    while True:
        if time.monotonic_ns() > deadline:
            raise DeadlineExceeded(f"WHILE: the loop timeout expired after {iteration} iterations")
        if cancelled():  # its caller is gone: nobody will read the answer
            raise NNError(
                f"WHILE: cancelled after {iteration} iterations (the caller is gone)",
                ResultCode.OP_FAILED,
            )
        _check_fits(ctx, cond, state, "condition")
        (flag,) = cond.run(state, deadline)
        if not _truth(ctx, flag, "the condition model's output"):
            break
        _check_fits(ctx, body, state, "body")
        state[:carried] = body.run(state, deadline)
        iteration += 1
    outputs = state[: len(ctx.signature.outputs)]
    if any(value is None for value in outputs):
        raise op_failed(ctx.code, "an omitted input cannot be a loop output")
    return outputs  # type: ignore[return-value]


register(OperationCode.IF, validate=_validate_if, execute=_execute_if)
register(OperationCode.WHILE, validate=_validate_while, execute=_execute_while)
