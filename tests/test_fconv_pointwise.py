"""The packed float32 kernel's 1x1 path (csrc/fconv.c run_pointwise): a 1x1
layer at stride 1 without padding reads pixel p's inputs at p * in_c, for
every pixel count off the 6-pixel tile, batches, channel counts under, on
and off the 16-channel tile (the half tile of 8 too), on every path, exactly
(inputs and weights in quarters keep every sum exact in float32)."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst._bindings.fconv import FloatConv, available_paths
from nnburst.cpu.ops.fused_activation import FLOAT_ACTIVATION_BOUNDS
from nnburst.cpu.ops.window_geometry import Window2D

from .test_fconv import reference

PATHS = available_paths()


def quarters(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.integers(-12, 13, shape) / 4).astype(np.float32)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(40))
def test_pointwise_layers_match_numpy_exactly(path: int, seed: int) -> None:
    rng = np.random.default_rng(900 + seed)
    h, w = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    c = int(rng.integers(1, 70))
    o = int(rng.choice([1, 5, 8, 15, 16, 17, 24, 31, 32, 40, 47, 64]))
    batches = int(rng.integers(1, 4))
    win = Window2D(0, 0, 0, 0, 1, 1, 1, 1, h, w)
    bounds = FLOAT_ACTIVATION_BOUNDS[int(rng.choice(list(FLOAT_ACTIVATION_BOUNDS)))]
    x, weights, bias = quarters(rng, (batches, h, w, c)), quarters(rng, (c, o)), quarters(rng, (o,))
    layer = FloatConv(x.shape[1:], weights, (1, 1), bias, win, bounds, path)
    got = layer(x)
    np.testing.assert_array_equal(got, reference(x, weights, (1, 1), bias, win, bounds))


@pytest.mark.parametrize("path", PATHS)
def test_a_padded_or_strided_1x1_layer_is_not_read_as_pointwise(path: int) -> None:
    """The same weights over a padded input and strided ones, two of them with
    as many output pixels as input ones: each pixel's own window, not pixel
    p's row."""
    rng = np.random.default_rng(5)
    x, weights, bias = quarters(rng, (2, 3, 3, 20)), quarters(rng, (20, 24)), quarters(rng, (24,))
    bounds = FLOAT_ACTIVATION_BOUNDS[0]
    for win in (
        Window2D(1, 1, 2, 0, 1, 1, 1, 1, 5, 5),
        Window2D(0, 0, 0, 0, 2, 2, 1, 1, 2, 2),
        Window2D(1, 1, 1, 1, 2, 2, 1, 1, 3, 3),
        Window2D(0, 3, 0, 3, 2, 2, 1, 1, 3, 3),
    ):
        got = FloatConv(x.shape[1:], weights, (1, 1), bias, win, bounds, path)(x)
        np.testing.assert_array_equal(got, reference(x, weights, (1, 1), bias, win, bounds))
