"""BATCH_MATMUL (NNAPI feature level 6): one matrix product per batch slice.

Android added it after 1.3 for transformers.  The operand rules follow its
documentation: both inputs of one type (TENSOR_FLOAT16, TENSOR_FLOAT32,
TENSOR_INT32 or TENSOR_QUANT8_ASYMM_SIGNED), of the same rank 2 to 4, with
equal batch dimensions (no broadcasting); optional BOOL ``adj_x``/``adj_y``
transpose the last two dimensions of an input first.  The quantized output
may have its own scale and zero point: the int32 sums of
``(x - x_zp)·(y - y_zp)`` are requantized with the reference's convolution
multiplier, so results are exact.  INT32 sums wrap like C int32.
"""

from __future__ import annotations

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    constant_scalar,
    known_dim,
    op_failed,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
)
from .fixed_point import conv_multiplier, multiply_by_quantized_multiplier, wrap_int32
from .requantization import quantized_range

_TYPES = (*FLOAT_TENSOR_CODES, OperandCode.TENSOR_INT32, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED)
_RANKS = (2, 3, 4)


def _adjoints(sig: OperationSignature) -> tuple[bool | None, bool | None]:
    """adj_x and adj_y: False when omitted, None when not constant."""
    flags: list[bool | None] = []
    for i in (2, 3):
        if i >= len(sig.inputs) or (i in sig.constants and sig.constants[i] is None):
            flags.append(False)
        else:
            value = constant_scalar(sig, i)
            flags.append(None if value is None else bool(value))
    return flags[0], flags[1]


def _validate(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2, 3, 4), 1)
    x = require_operand_type(sig, 0, _TYPES, "input 0")
    y = require_operand_type(sig, 1, (x.code,), "input 1")
    for i in range(2, len(sig.inputs)):
        require_operand_type(sig, i, (OperandCode.BOOL,), "adj_x" if i == 2 else "adj_y")
    out = require_operand_type(sig, 0, (x.code,), "output", output=True)
    require_operand_rank(sig, 0, _RANKS, "input 0")
    require_operand_rank(sig, 1, _RANKS, "input 1")
    if x.rank is not None and y.rank is not None and x.rank != y.rank:
        raise sig.fail(f"input 0 has rank {x.rank} and input 1 rank {y.rank}; they must match")
    if x.code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED and min(x.scale, y.scale, out.scale) <= 0:
        raise sig.fail("quantized inputs and output need positive scales")
    adj_x, adj_y = _adjoints(sig)
    rank = x.rank
    if rank is None or y.rank is None or adj_x is None or adj_y is None:
        return
    for axis in range(rank - 2):
        a, b = known_dim(x, axis), known_dim(y, axis)
        if None not in (a, b) and a != b:
            raise sig.fail(f"batch dimension {axis} differs: {a} and {b}")
    inner_x = known_dim(x, rank - 2 if adj_x else rank - 1)
    inner_y = known_dim(y, rank - 1 if adj_y else rank - 2)
    if None not in (inner_x, inner_y) and inner_x != inner_y:
        raise sig.fail(
            f"input 0 has {inner_x} columns to multiply and input 1 {inner_y} rows"
            f" (adj_x={adj_x}, adj_y={adj_y})"
        )


def _execute(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    x, y = ctx.input(0), ctx.input(1)
    adj_x, adj_y = (i < len(ctx.inputs) and ctx.inputs[i] is not None and bool(ctx.scalar(i))
                    for i in (2, 3))  # fmt: skip
    if x.ndim != y.ndim or x.ndim not in _RANKS:
        raise op_failed(
            sig.code, f"inputs of shapes {x.shape} and {y.shape}: need one rank, 2 to 4"
        )
    if adj_x:
        x = np.swapaxes(x, -1, -2)
    if adj_y:
        y = np.swapaxes(y, -1, -2)
    if x.shape[:-2] != y.shape[:-2] or x.shape[-1] != y.shape[-2]:
        raise op_failed(sig.code, f"cannot multiply slices of {x.shape} by slices of {y.shape}")
    out = sig.outputs[0]
    if x.dtype == np.int32 and sig.inputs[0].code == OperandCode.TENSOR_INT32:
        return [wrap_int32(np.matmul(x.astype(np.int64), y.astype(np.int64))).astype(np.int32)]
    if sig.inputs[0].code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED:
        xi, yi = sig.inputs[0], sig.inputs[1]
        # Exact in float64: each sum is at most depth * 255 * 255, far below 2**53.
        acc = np.matmul(
            x.astype(np.float64) - xi.zero_point, y.astype(np.float64) - yi.zero_point
        ).astype(np.int64)
        multiplier, shift = conv_multiplier(xi.scale, yi.scale, out.scale)
        scaled = multiply_by_quantized_multiplier(wrap_int32(acc), multiplier, shift)
        lo, hi = quantized_range(out)
        return [np.clip(scaled + out.zero_point, lo, hi).astype(out.dtype)]
    product = np.matmul(x.astype(np.float32), y.astype(np.float32))
    return [product.astype(out.dtype, copy=False)]


register(OperationCode.BATCH_MATMUL, validate=_validate, execute=_execute)
