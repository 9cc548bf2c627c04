"""EMBEDDING_LOOKUP and HASHTABLE_LOOKUP: gather rows of a values tensor.

EMBEDDING_LOOKUP indexes rows directly and fails on an out-of-range index.
HASHTABLE_LOOKUP finds each lookup among the keys; a miss yields a row of raw
zeros and a 0 in the hits output (TENSOR_QUANT8_ASYMM, 1 for a hit).  Keys
should be sorted, as NNAPI requires; a stable argsort makes the search exact
even when they are not.
"""

from __future__ import annotations

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import op_failed, require_operand_counts, require_operand_rank, require_operand_type

_INT32 = OperandCode.TENSOR_INT32
_EMBEDDING_TYPES = (
    OperandCode.TENSOR_FLOAT32,
    OperandCode.TENSOR_FLOAT16,
    OperandCode.TENSOR_INT32,
    OperandCode.TENSOR_QUANT8_ASYMM,
    OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
)
_HASHTABLE_TYPES = (
    OperandCode.TENSOR_FLOAT32,
    OperandCode.TENSOR_INT32,
    OperandCode.TENSOR_QUANT8_ASYMM,
)
_QUANT = (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED)


def _require_same_quant(sig: OperationSignature, input_index: int, output_index: int) -> None:
    a, b = sig.inputs[input_index], sig.outputs[output_index]
    if a.code in _QUANT and (
        np.float32(a.scale) != np.float32(b.scale) or a.zero_point != b.zero_point
    ):
        raise sig.fail(
            f"output {output_index} must have the scale and zero point of input "
            f"{input_index} ({a.scale}, {a.zero_point}); got ({b.scale}, {b.zero_point})"
        )


def _output_dims_check(sig: OperationSignature, lookups: int, values: int, output: int) -> None:
    """The output is [len(lookups), values.shape[1:]] when those are declared."""
    want_first = sig.inputs[lookups].dimensions
    rows = sig.inputs[values].dimensions
    got = sig.outputs[output].dimensions
    if got is None or not got or rows is None:
        return
    if len(got) != len(rows):
        raise sig.fail(f"output {output} has rank {len(got)}; expected {len(rows)}")
    expected = [want_first[0] if want_first else 0, *rows[1:]]
    if any(x > 0 and y > 0 and x != y for x, y in zip(expected, got)):
        raise sig.fail(f"output {output} dimensions {got} do not match {tuple(expected)}")


def _validate_embedding(sig: OperationSignature) -> None:
    require_operand_counts(sig, (2,), 1)
    require_operand_type(sig, 0, (_INT32,), "lookups")
    require_operand_rank(sig, 0, (1,), "lookups")
    values = require_operand_type(sig, 1, _EMBEDDING_TYPES, "values")
    if values.rank is not None and values.rank < 2:
        raise sig.fail(f"input 1 (values) has rank {values.rank}; expected at least 2")
    require_operand_type(sig, 0, (values.code,), "output", output=True)
    _require_same_quant(sig, 1, 0)
    _output_dims_check(sig, 0, 1, 0)


def _execute_embedding(ctx: ExecutionContext) -> list[np.ndarray]:
    lookups, values = ctx.input(0), ctx.input(1)
    if lookups.ndim != 1 or values.ndim < 2:
        raise op_failed(ctx.code, "lookups must be 1-D and values at least 2-D")
    bad = (lookups < 0) | (lookups >= values.shape[0])
    if bad.any():
        raise op_failed(
            ctx.code, f"lookup index {int(lookups[bad][0])} is out of range [0, {values.shape[0]})"
        )
    return [values[lookups.astype(np.int64)].astype(ctx.output_info(0).dtype)]


def _validate_hashtable(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 2)
    for i, name in ((0, "lookups"), (1, "keys")):
        require_operand_type(sig, i, (_INT32,), name)
        require_operand_rank(sig, i, (1,), name)
    values = require_operand_type(sig, 2, _HASHTABLE_TYPES, "values")
    if values.rank is not None and values.rank < 1:
        raise sig.fail("input 2 (values) must have rank 1 or more")
    require_operand_type(sig, 0, (values.code,), "output", output=True)
    require_operand_type(sig, 1, (OperandCode.TENSOR_QUANT8_ASYMM,), "hits", output=True)
    _require_same_quant(sig, 2, 0)
    keys, rows = sig.inputs[1].dimensions, values.dimensions
    if keys and rows and keys[0] > 0 and rows[0] > 0 and keys[0] != rows[0]:
        raise sig.fail(f"{keys[0]} keys but {rows[0]} rows of values")
    _output_dims_check(sig, 0, 2, 0)


def _execute_hashtable(ctx: ExecutionContext) -> list[np.ndarray]:
    lookups, keys, values = ctx.input(0), ctx.input(1), ctx.input(2)
    if lookups.ndim != 1 or keys.ndim != 1 or values.ndim < 1:
        raise op_failed(ctx.code, "lookups and keys must be 1-D, values at least 1-D")
    if keys.shape[0] != values.shape[0]:
        raise op_failed(ctx.code, f"{keys.shape[0]} keys but {values.shape[0]} rows of values")
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    position = np.searchsorted(sorted_keys, lookups)
    clipped = np.minimum(position, max(len(keys) - 1, 0))
    hits = (
        (position < len(keys)) & (sorted_keys[clipped] == lookups)
        if len(keys)
        else np.zeros(lookups.shape, dtype=bool)
    )
    out_dtype = ctx.output_info(0).dtype
    output = np.zeros((lookups.shape[0], *values.shape[1:]), dtype=out_dtype)
    if hits.any():
        output[hits] = values[order[clipped[hits]]]
    return [output, hits.astype(np.uint8)]


register(OperationCode.EMBEDDING_LOOKUP, validate=_validate_embedding, execute=_execute_embedding)
register(OperationCode.HASHTABLE_LOOKUP, validate=_validate_hashtable, execute=_execute_hashtable)
