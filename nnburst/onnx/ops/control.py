"""Control flow: If as NNAPI's IF and Loop as its WHILE, their subgraphs
converted into referenced models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...codes import OperandCode, OperationCode
from ...imported import UnsupportedModelError
from ...model import OperandType
from ..converter import Converter, Unsupported, maps, node_attributes
from ..folding import fold_constant
from .building import filled


def _outer_names(graph: onnx.GraphProto) -> set[str]:
    """The names a subgraph reads from the scopes around it."""
    produced = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    used: set[str] = set()
    for node in graph.node:
        used.update(n for n in node.input if n)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                used |= _outer_names(attribute.g)
        produced.update(node.output)
    used.update(o.name for o in graph.output)
    return used - produced


def _value_info(c: Converter, name: str, as_name: str | None = None) -> onnx.ValueInfoProto:
    """A typed subgraph input for the outer value ``name`` (called ``as_name`` there)."""
    dtype = helper.np_dtype_to_tensor_dtype(c.dtype(name))
    return helper.make_tensor_value_info(as_name or name, dtype, c.shape(name))


def _referenced(
    c: Converter,
    graph: onnx.GraphProto,
    inputs: Sequence[onnx.ValueInfoProto],
    nodes: Sequence[onnx.NodeProto] = (),
    outputs: Sequence[onnx.ValueInfoProto] | None = None,
) -> tuple[int, list[tuple[np.dtype[Any], tuple[int, ...]]]]:
    """A MODEL operand for a subgraph (an If branch, a Loop body) taking ``inputs``,
    with ``nodes`` after its own and ``outputs`` in place of its own: the outer-scope
    constants it reads become its initializers."""
    constants = [
        numpy_helper.from_array(np.asarray(c.constants[n]), n)
        for n in sorted(_outer_names(graph))
        if n in c.constants
    ]
    sub = helper.make_graph(
        [*graph.node, *nodes], graph.name or "subgraph", list(inputs),
        list(graph.output if outputs is None else outputs),
        [*graph.initializer, *constants], value_info=list(graph.value_info),
    )  # fmt: skip
    model = helper.make_model(sub, opset_imports=list(c.onnx.opset_import))
    model.ir_version = c.onnx.ir_version
    operand, converter = c.model.add_operand(OperandType(OperandCode.MODEL)), Converter(model)
    try:
        c.model.set_operand_value_from_model(operand, converter.convert())
    except UnsupportedModelError as exc:  # listed under the If or Loop node
        raise Unsupported(f"a subgraph using {exc.listed}") from None
    return operand, [(converter.dtype(o.name), converter.shape(o.name)) for o in sub.output]


@maps("If")
def _if(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """NNAPI's IF takes its branches as models with explicit inputs: the values
    the ONNX branches read from around them."""
    then_branch, else_branch = a["then_branch"], a["else_branch"]
    outer = _outer_names(then_branch) | _outer_names(else_branch)
    captured = [_value_info(c, n) for n in sorted(outer) if n not in c.constants]
    (then_model, types), (else_model, others) = (
        _referenced(c, then_branch, captured), _referenced(c, else_branch, captured),
    )  # fmt: skip
    untyped = [n for n in node.output if c.types.get(n, (None, None))[1] is None]
    for name, kind, other in zip(node.output, types, others):
        if kind != other:
            raise Unsupported("branches whose outputs differ in type or shape")
        if name in untyped:  # ONNX could not merge the branches' shapes
            c.types[name] = kind
    if untyped:  # so the nodes after the If are typed too
        kept = [v for v in c.graph.value_info if v.name not in untyped]
        del c.graph.value_info[:]
        c.graph.value_info.extend([*kept, *(_value_info(c, n) for n in untyped)])
        c._infer_again()
    inputs = [_condition(c, node.input[0]), then_model, else_model]
    inputs += [c.operand(v.name) for v in captured]
    c.add(OperationCode.IF, inputs, [c.operand(o) for o in node.output])


def _condition(c: Converter, name: str) -> int:
    """An If condition as NNAPI wants it, TENSOR_BOOL8 of shape [1]."""
    shape = c.shape(name)
    if int(np.prod(shape)) != 1:
        raise Unsupported("a condition of more than one element")
    if len(shape) <= 1:
        return c.operand(name)
    return c.reshape_boolean(c.operand(name), shape, (1,))


@maps("Loop")
def _loop(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """NNAPI's WHILE, whose condition is a model of its own.  The loop values are the
    carried values and a buffer per scan output (WHILE's outputs), the iteration
    number and the condition (carried, not returned), then the trip count and the
    values the body reads from around it (read only).  The condition model is
    ``i < trip count and cond``; the body model is ONNX's body plus ``i + 1`` and,
    per scan output, a SELECT writing its row ``i``."""
    body = a["body"]
    trip, cond = (*node.input, "", "")[:2]
    if trip in c.constants and int(c.constants[trip].reshape(-1)[0]) >= 2**31 - 1:
        trip = ""  # "no limit": the loop timeout ends a loop long before
    if not trip and not cond:
        raise Unsupported("no trip count and no condition (a loop that never ends)")
    carried, prefix = list(node.input[2:]), f"{node.output[0]}/loop."
    if len(body.input) != 2 + len(carried) or len(body.output) != len(node.output) + 1:
        raise Unsupported("a body whose inputs or outputs do not match the loop's")
    iteration, flag = (i.name for i in body.input[:2])
    rows = [o.name for o in body.output[1 + len(carried) :]]
    scans = list(node.output[len(carried) :])
    count = _iterations(c, trip, cond, body) if scans else 0
    buffers = [f"{prefix}scan{k}" for k in range(len(scans))]
    inputs = [
        *(_value_info(c, n, v.name) for n, v in zip(carried, body.input[2:])),
        *(_value_info(c, n, b) for n, b in zip(scans, buffers)),
        helper.make_tensor_value_info(iteration, onnx.TensorProto.INT64, []),
        helper.make_tensor_value_info(flag, onnx.TensorProto.BOOL, []),
        *([_value_info(c, trip, f"{prefix}trip")] if trip else []),
        *(_value_info(c, n) for n in sorted(_outer_names(body)) if n not in c.constants),
    ]
    for scan in scans:
        if c.shape(scan)[:1] != (count,):
            raise Unsupported(f"scan output {scan!r} longer or shorter than the loop")
    # The body, then i + 1 and each scan buffer with row i written.
    one, following = f"{prefix}one", f"{prefix}next"
    extra = [
        helper.make_node("Constant", [], [one], value=numpy_helper.from_array(np.array(1, np.int64))),
        helper.make_node("Add", [iteration, one], [following]),
    ]  # fmt: skip
    for scan, row, buffer in zip(scans, rows, buffers):
        shape = c.shape(scan)
        positions = np.arange(count, dtype=np.int64).reshape(count, *[1] * (len(shape) - 1))
        extra += [
            helper.make_node("Constant", [], [f"{buffer}.at"], value=numpy_helper.from_array(positions)),
            helper.make_node("Equal", [f"{buffer}.at", iteration], [f"{buffer}.here"]),
            helper.make_node("Where", [f"{buffer}.here", row, buffer], [f"{buffer}.next"]),
        ]  # fmt: skip
    named = onnx.ValueInfoProto
    outputs = [
        *body.output[1 : 1 + len(carried)],
        *(named(name=f"{b}.next") for b in buffers),
        named(name=following),
        body.output[0],
    ]
    body_model, _ = _referenced(c, body, inputs, extra, outputs)
    # The condition: i < trip count, and the carried condition when there is one.
    tests = [f"{prefix}below"] if trip else []
    checks = [helper.make_node("Less", [iteration, f"{prefix}trip"], tests)] if trip else []
    if cond and trip:
        checks.append(helper.make_node("And", [tests[0], flag], [f"{prefix}go"]))
    result = checks[-1].output[0] if checks else flag
    condition, _ = _referenced(
        c, onnx.GraphProto(name="condition"), inputs, checks,
        [helper.make_tensor_value_info(result, onnx.TensorProto.BOOL, [])],
    )  # fmt: skip
    true = c.constant(OperandCode.TENSOR_BOOL8, np.ones(1, np.bool_), (1,))
    values = [c.operand(n) for n in carried]
    values += [filled(c, c.dtype(s), c.shape(s), 0) for s in scans]
    values += [c.ints([0]), _condition(c, cond) if cond else true]
    values += [c.operand(trip)] if trip else []
    values += [c.operand(v.name) for v in inputs[len(values) :]]  # what the body reads
    results = [
        c.operand(o) if o else c.temporary(c.dtype(n), c.shape(n))
        for o, n in zip(node.output, [*carried, *scans])
    ]
    c.add(OperationCode.WHILE, [condition, body_model, *values], results)


def _iterations(c: Converter, trip: str, cond: str, body: onnx.GraphProto) -> int:
    """How often a loop with scan outputs runs, which must be known at load: a
    constant trip count (as _loop took it: none when it means "no limit"), and a
    condition that starts true and stays so (none, or the body passing it on
    unchanged or setting it to a constant true)."""
    if trip not in c.constants or cond and cond not in c.constants:
        raise Unsupported("scan outputs whose length depends on the input's values")
    if cond:
        made = {o: n for n in body.node for o in n.output}
        name = body.output[0].name
        while name in made and made[name].op_type == "Identity":
            name = made[name].input[0]
        constant = made.get(name)
        stays = name == body.input[1].name or (
            constant is not None
            and constant.op_type == "Constant"
            and bool(fold_constant(c, constant, node_attributes(constant))[0].all())
        )
        if not stays or not bool(c.constants[cond].reshape(-1)[0]):
            raise Unsupported("scan outputs of a loop that may stop early")
    return int(c.constants[trip].reshape(-1)[0])
