"""Comparisons (EQUAL, NOT_EQUAL, GREATER, GREATER_EQUAL, LESS, LESS_EQUAL),
LOGICAL_AND, LOGICAL_OR, LOGICAL_NOT and SELECT.

Comparisons broadcast like numpy and yield TENSOR_BOOL8.  Quantized inputs
are compared by real value, each dequantized with its own scale and zero
point in float32 as the reference does, so two tensors with different
quantization compare correctly.  SELECT takes no broadcasting: the condition
and both inputs share one shape; for quantized data each chosen value is
requantized to the output's scale and zero point (NNAPI's ``requantize``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    broadcast_shape_or_fail,
    check_broadcastable,
    op_failed,
    require_dims_like,
    require_operand_counts,
    require_operand_type,
)
from .requantization import dequantize, requantize_reference

_BOOL8 = (OperandCode.TENSOR_BOOL8,)
_INT32 = (OperandCode.TENSOR_INT32,)
_COMPARE_TYPES = _BOOL8 + FLOAT_TENSOR_CODES + _INT32 + QUANT8_ASYMM_CODES
_SELECT_TYPES = FLOAT_TENSOR_CODES + _INT32 + QUANT8_ASYMM_CODES

_COMPARISONS: dict[OperationCode, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    OperationCode.EQUAL: np.equal,
    OperationCode.NOT_EQUAL: np.not_equal,
    OperationCode.GREATER: np.greater,
    OperationCode.GREATER_EQUAL: np.greater_equal,
    OperationCode.LESS: np.less,
    OperationCode.LESS_EQUAL: np.less_equal,
}

_LOGICAL: dict[OperationCode, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    OperationCode.LOGICAL_AND: np.logical_and,
    OperationCode.LOGICAL_OR: np.logical_or,
}


# --- comparisons and binary logical operations ------------------------------------


def _validate_compare(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    types = _BOOL8 if sig.code in _LOGICAL else _COMPARE_TYPES
    first = require_operand_type(sig, 0, types, "input1")
    require_operand_type(sig, 1, (first.code,), "input2")
    require_operand_type(sig, 0, _BOOL8, "output", output=True)
    check_broadcastable(sig, 0, 1)


def _execute_compare(ctx: ExecutionContext) -> list[np.ndarray]:
    a, b = ctx.input(0), ctx.input(1)
    broadcast_shape_or_fail(ctx.code, a.shape, b.shape)
    if ctx.code in _LOGICAL:
        return [_LOGICAL[ctx.code](a, b)]
    info_a, info_b = ctx.signature.inputs[0], ctx.signature.inputs[1]
    if info_a.code in QUANT8_ASYMM_CODES:
        # Real values, each with its own quantization (float32, like the reference).
        a, b = dequantize(a, info_a), dequantize(b, info_b)
    return [_COMPARISONS[ctx.code](a, b)]


# --- LOGICAL_NOT --------------------------------------------------------------------


def _validate_not(sig: OperationSignature) -> None:
    require_operand_counts(sig, (1,), 1)
    require_operand_type(sig, 0, _BOOL8, "input")
    require_operand_type(sig, 0, _BOOL8, "output", output=True)
    require_dims_like(sig, sig.inputs[0])


def _execute_not(ctx: ExecutionContext) -> list[np.ndarray]:
    return [np.logical_not(ctx.input(0))]


# --- SELECT -------------------------------------------------------------------------


def _validate_select(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 1)
    require_operand_type(sig, 0, _BOOL8, "condition")
    first = require_operand_type(sig, 1, _SELECT_TYPES, "input1")
    require_operand_type(sig, 2, (first.code,), "input2")
    require_operand_type(sig, 0, (first.code,), "output", output=True)
    shapes = [sig.inputs[i].dimensions for i in range(3)]
    known = [s for s in shapes if s is not None]
    for s in known[1:]:
        if len(s) != len(known[0]) or any(x > 0 and y > 0 and x != y for x, y in zip(s, known[0])):
            raise sig.fail(f"condition, input1 and input2 must share one shape, got {shapes}")
    require_dims_like(sig, sig.inputs[1])


def _execute_select(ctx: ExecutionContext) -> list[np.ndarray]:
    cond, a, b = ctx.input(0), ctx.input(1), ctx.input(2)
    if not cond.shape == a.shape == b.shape:
        raise op_failed(
            ctx.code,
            f"condition {cond.shape}, input1 {a.shape} and input2 "
            f"{b.shape} must have the same shape",
        )
    out = ctx.output_info(0)
    if out.code in QUANT8_ASYMM_CODES:
        a = requantize_reference(a, ctx.signature.inputs[1], out)
        b = requantize_reference(b, ctx.signature.inputs[2], out)
    return [np.where(cond, a, b).astype(out.dtype, copy=False)]


for _code in (*_COMPARISONS, *_LOGICAL):
    register(_code, validate=_validate_compare, execute=_execute_compare)
register(OperationCode.LOGICAL_NOT, validate=_validate_not, execute=_execute_not)
register(OperationCode.SELECT, validate=_validate_select, execute=_execute_select)
