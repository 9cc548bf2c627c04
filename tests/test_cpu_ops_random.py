"""CPU driver: RANDOM_MULTINOMIAL, its frequencies against the softmax of its logits."""

from __future__ import annotations

import numpy as np

from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op

from .op_models import rejects, run
from .op_operands import const, f32, i32, info

# --------------------------------------------------------------- RANDOM_MULTINOMIAL


def multinomial(
    logits: np.ndarray, samples: int, seeds: list[int], code: T = T.TENSOR_FLOAT32
) -> np.ndarray:
    return run(
        Op.RANDOM_MULTINOMIAL,
        [info(code, *logits.shape), i32(samples), const(info(T.TENSOR_INT32, 2), seeds)],
        [info(T.TENSOR_INT32, logits.shape[0], samples)],
        logits.astype(info(code).dtype),
    )[0]


def test_random_multinomial_frequencies_follow_softmax() -> None:
    logits = np.array([[0.0, 1.0, 2.0, -1.0], [3.0, 3.0, -np.inf, 0.0]], np.float32)
    samples = 20000
    out = multinomial(logits, samples, [37, 1234])
    assert out.shape == (2, samples) and out.dtype == np.int32
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    for b in range(2):
        freq = np.bincount(out[b], minlength=4) / samples
        # 5 standard deviations of a binomial frequency
        tol = 5 * np.sqrt(probs[b] * (1 - probs[b]) / samples) + 1e-9
        assert np.all(np.abs(freq - probs[b]) <= tol), (freq, probs[b])
    assert not (out[1] == 2).any()  # probability zero never drawn
    # fixed seeds reproduce, other seeds differ; float16 logits work too
    np.testing.assert_array_equal(out, multinomial(logits, samples, [37, 1234]))
    assert not np.array_equal(out, multinomial(logits, samples, [38, 1234]))
    half = multinomial(logits, 1000, [1, 2], T.TENSOR_FLOAT16)
    assert half.shape == (2, 1000) and half.min() >= 0 and half.max() <= 3


def test_random_multinomial_validation() -> None:
    rejects(
        Op.RANDOM_MULTINOMIAL,
        [f32(1, 3), i32(-1), const(info(T.TENSOR_INT32, 2), [1, 2])],
        [info(T.TENSOR_INT32, 1, 0)],
        "num_samples is -1",
    )
    rejects(
        Op.RANDOM_MULTINOMIAL,
        [f32(1, 3), i32(4), const(info(T.TENSOR_INT32, 3), [1, 2, 3])],
        [info(T.TENSOR_INT32, 1, 4)],
        "3 elements",
    )
    rejects(
        Op.RANDOM_MULTINOMIAL,
        [f32(1, 3), i32(4), const(info(T.TENSOR_INT32, 2), [1, 2])],
        [f32(1, 4)],
        "output 0",
    )
    rejects(
        Op.RANDOM_MULTINOMIAL,
        [f32(3), i32(4), const(info(T.TENSOR_INT32, 2), [1, 2])],
        [info(T.TENSOR_INT32, 1, 4)],
        "rank 1",
    )
