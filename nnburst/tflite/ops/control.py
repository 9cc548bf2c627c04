"""Control flow and resource variables: IF and WHILE name subgraphs that
become referenced models; CALL_ONCE, VAR_HANDLE, READ_VARIABLE and
ASSIGN_VARIABLE keep a variable's value between calls."""

from __future__ import annotations

from ...codes import OperationCode
from ..converter import Converter, Unsupported, maps, variable_name
from ..reader import Operator


@maps("IF")
def _if(c: Converter, op: Operator) -> None:
    o = op.options
    inputs = [
        c.condition(op.inputs[0]),
        c.subgraph(o.ThenSubgraphIndex()),
        c.subgraph(o.ElseSubgraphIndex()),
    ]
    inputs += [c.operand(i) for i in op.inputs[1:]]
    c.add(OperationCode.IF, inputs, [c.operand(i) for i in op.outputs])


@maps("WHILE")
def _while(c: Converter, op: Operator) -> None:
    """Every TFLite loop variable is loop-carried: the body returns them all."""
    o = op.options
    cond = c.named_subgraph(o.CondSubgraphIndex())
    if len(cond.outputs) != 1 or cond.tensors[cond.outputs[0]].shape not in ((), (1,)):
        raise Unsupported("a condition that is not one boolean")
    inputs = [c.subgraph(o.CondSubgraphIndex()), c.subgraph(o.BodySubgraphIndex())]
    inputs += [c.operand(i) for i in op.inputs]
    c.add(OperationCode.WHILE, inputs, [c.operand(i) for i in op.outputs])


@maps("CALL_ONCE")
def _call_once(c: Converter, op: Operator) -> None:
    """Its initialization is the variables' initial values (``declare_variables``)."""


@maps("VAR_HANDLE")
def _var_handle(c: Converter, op: Operator) -> None:
    name = variable_name(op)
    if c.graph is not c.flat.subgraphs[0] or name not in c.variables:
        raise Unsupported(f"variable {name!r} outside the main subgraph or never initialized")
    c._resources[op.outputs[0]] = c.variables[name]


@maps("READ_VARIABLE")
def _read_variable(c: Converter, op: Operator) -> None:
    """The read value is the variable's latest operand: no operation at all."""
    c._operands[op.outputs[0]] = c.variable(op.inputs[0]).current


@maps("ASSIGN_VARIABLE")
def _assign_variable(c: Converter, op: Operator) -> None:
    c.variable(op.inputs[0]).current = c.operand(op.inputs[1])
