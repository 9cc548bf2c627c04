"""The float32 depthwise kernel's row loop (csrc/fconv.c): rows 1-40 pixels
wide, so that every split of a row into blocks of 8, 4, 2 and 1 (and a last
overlapping block of 8) occurs, read in place or through the ring, with the
checked edge pixels' 4-group and 1-group loops (channels in whole vectors
of 8, up to 72, and others).  Exact: inputs and weights in quarters keep
every sum exact in float32, whatever the order."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst._bindings.fconv import FloatConv, available_paths
from nnburst.cpu.ops.fused_activation import FLOAT_ACTIVATION_BOUNDS
from nnburst.cpu.ops.window_geometry import Window2D

from .test_fconv import reference

PATHS = available_paths()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(60))
def test_depthwise_rows_match_numpy_exactly(path: int, seed: int) -> None:
    rng = np.random.default_rng(1200 + seed)
    f = int(rng.choice([3, 5]))
    s = int(rng.integers(1, 3))
    w = int(rng.integers(f, 41))
    h = int(rng.integers(f, 8))
    c = int(rng.choice([8, 16, 24, 32, 40, 48, 64, 72, 5, 13, 37]))
    top, bottom, left, right = (int(v) for v in rng.integers(0, f // 2 + 2, 4))
    out_h = (h + top + bottom - f) // s + 1
    out_w = (w + left + right - f) // s + 1
    win = Window2D(top, bottom, left, right, s, s, 1, 1, out_h, out_w)
    quarters = lambda shape: (rng.integers(-12, 13, shape) / 4).astype(np.float32)  # noqa: E731
    x, weights, bias = quarters((1, h, w, c)), quarters((f * f, c)), quarters((c,))
    bounds = FLOAT_ACTIVATION_BOUNDS[int(rng.choice(list(FLOAT_ACTIVATION_BOUNDS)))]
    got = FloatConv(x.shape[1:], weights, (f, f), bias, win, bounds, path, depthwise=True)(x)
    for ch in range(c):
        one = reference(x[..., ch : ch + 1], weights[:, ch : ch + 1], (f, f),
                        bias[ch : ch + 1], win, bounds)  # fmt: skip
        np.testing.assert_array_equal(got[..., ch : ch + 1], one)
