"""RANDOM_MULTINOMIAL (NNAPI 1.2): draw class indices from softmax(logits).

Samples are drawn by inverse transform: a uniform number scaled to the row's
total unnormalised probability, located in the row's cumulative sums.  The
generator is numpy's, seeded with the two seed values, so a model is
reproducible for given seeds; both seeds 0 means "pick seeds at random".
The reference's Philox stream is not reproduced: NNAPI (and its conformance
suite) only promise the distribution, not particular draws.
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


def _validate(sig: OperationSignature) -> None:
    require_operand_counts(sig, (3,), 1)
    require_operand_type(sig, 0, FLOAT_TENSOR_CODES, "logits")
    require_operand_type(sig, 1, (OperandCode.INT32,), "num_samples")
    require_operand_type(sig, 2, (OperandCode.TENSOR_INT32,), "seeds")
    require_operand_type(sig, 0, (OperandCode.TENSOR_INT32,), "output", output=True)
    require_operand_rank(sig, 0, (2,), "logits")
    require_operand_rank(sig, 2, (1,), "seeds")
    require_operand_rank(sig, 0, (2,), "output", output=True)
    if known_dim(sig.inputs[2], 0) not in (None, 2):
        raise sig.fail(f"seeds have {known_dim(sig.inputs[2], 0)} elements; expected 2")
    samples = constant_scalar(sig, 1)
    if samples is not None and samples < 0:
        raise sig.fail(f"num_samples is {samples}; it must be >= 0")


def _execute(ctx: ExecutionContext) -> list[np.ndarray]:
    logits = ctx.input(0).astype(np.float64)
    samples = int(ctx.scalar(1))
    seeds = ctx.input(2).reshape(-1)
    if logits.ndim != 2 or logits.shape[1] == 0 or samples < 0 or seeds.size != 2:
        raise op_failed(
            ctx.code,
            f"logits {logits.shape}, {samples} samples and {seeds.size} "
            "seeds: expected [batches, classes > 0], >= 0 and 2",
        )
    key = [int(s) & 0xFFFFFFFF for s in seeds]
    rng = np.random.default_rng(None if key == [0, 0] else key)
    with np.errstate(invalid="ignore", over="ignore"):
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    cumulative = np.cumsum(weights, axis=1)
    out = np.empty((logits.shape[0], samples), dtype=np.int32)
    for b in range(logits.shape[0]):
        draws = rng.random(samples) * cumulative[b, -1]
        index = np.searchsorted(cumulative[b], draws, side="right")
        out[b] = np.minimum(index, logits.shape[1] - 1)
    return [out]


register(OperationCode.RANDOM_MULTINOMIAL, validate=_validate, execute=_execute)
