"""The quantized convolution kernels (csrc/qconv.c) on the shapes their fast paths
take, against the numpy reference of test_qconv, exactly, on every path:

* a tile of each row count (1 to 6 output pixels, and a layer's last pixels);
* pointwise layers (1x1, stride 1, unpadded: the input pixels are the rows),
  in_c even and odd;
* short window runs widened 16 bytes a step (3x3x3, stride 2, edges included);
* int16 output (a quantized LSTM's gates), full range and clamped;
* depthwise layers of 8 channels (two output pixels a tile), widths odd and even.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnburst._bindings.qconv import available_paths
from nnburst.cpu.ops import fixed_point
from nnburst.cpu.ops.window_geometry import Window2D

from .test_qconv import RANGES, expected, layer

PATHS = available_paths()


def _case(
    rng: np.random.Generator,
    hwc: tuple[int, int, int],
    out_c: int,
    filter_hw: tuple[int, int],
    win: Window2D,
    *,
    depthwise: bool = False,
    out_dtype: Any = None,
) -> dict[str, Any]:
    h, w, c = hwc
    in_dtype = np.dtype(rng.choice([np.uint8, np.int8]))
    out_dtype = np.dtype(out_dtype or rng.choice([np.uint8, np.int8]))
    in_lo, in_hi = RANGES[in_dtype]
    if out_dtype == np.int16:
        out_lo, out_hi = -32768, 32767
        out_zp = int(rng.choice([0, 0, -7, 300]))
    else:
        out_lo, out_hi = RANGES[out_dtype]
        out_zp = int(rng.integers(out_lo, out_hi + 1))
    fh, fw = filter_hw
    taps = fh * fw
    weights = rng.integers(-255, 256, (taps, c) if depthwise else (taps * c, out_c))
    channels = out_c if rng.integers(0, 2) else 1
    pairs = [
        fixed_point.quantize_multiplier(float(s)) for s in 10.0 ** rng.uniform(-5, 0.7, channels)
    ]
    clamped = rng.integers(0, 3) == 0
    lo = int(rng.integers(out_lo, (out_lo + out_hi) // 2)) if clamped else out_lo
    hi = int(rng.integers(lo, out_hi + 1)) if clamped else out_hi
    return {
        "x": rng.integers(in_lo, in_hi + 1, (int(rng.integers(1, 3)), h, w, c)).astype(in_dtype),
        "weights": weights,
        "filter_hw": filter_hw,
        "bias": rng.integers(-(2**14), 2**14, out_c),
        "requant": (np.array([m for m, _ in pairs]), np.array([s for _, s in pairs])),
        "win": win,
        "in_type": (in_dtype, int(rng.integers(in_lo, in_hi + 1))),
        "out_type": (out_dtype, out_zp),
        "bounds": (lo, hi),
        "depthwise": depthwise,
    }


def _check(case: dict[str, Any], path: int) -> None:
    got = layer(case, path)(case["x"])
    want = expected(case)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("pixels", range(1, 14))
def test_every_row_count_of_a_tile(path: int, pixels: int) -> None:
    rng = np.random.default_rng(pixels)
    win = Window2D(0, 0, 0, 0, 1, 1, 1, 1, 1, pixels)
    case = _case(rng, (1, pixels, 19), 21, (1, 1), win)
    case["x"] = case["x"][:1]
    _check(case, path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(16))
def test_pointwise_layers(path: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    h, w = (int(v) for v in rng.integers(1, 9, 2))
    c = int(rng.choice([2, 3, 8, 16, 17, 40]))
    win = Window2D(0, 0, 0, 0, 1, 1, 1, 1, h, w)
    _check(_case(rng, (h, w, c), int(rng.choice([1, 8, 16, 33])), (1, 1), win), path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(12))
def test_short_window_runs_to_the_edges(path: int, seed: int) -> None:
    """A first layer's 3x3x3 windows, stride 2, padded after (SAME): every run is
    9 bytes, the last ones at the input's end."""
    rng = np.random.default_rng(seed)
    h, w = (int(v) for v in rng.integers(3, 14, 2))
    c = int(rng.choice([1, 3, 4]))
    out_h, out_w = (h + 1) // 2, (w + 1) // 2
    win = Window2D(0, (out_h - 1) * 2 + 3 - h, 0, (out_w - 1) * 2 + 3 - w, 2, 2, 1, 1, out_h, out_w)
    _check(_case(rng, (h, w, c), 8, (3, 3), win), path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(16))
def test_int16_output(path: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    units, size = int(rng.choice([4, 16, 17, 96])), int(rng.choice([1, 7, 64, 480]))
    win = Window2D(0, 0, 0, 0, 1, 1, 1, 1, 1, 1)
    case = _case(rng, (1, 1, size), units, (1, 1), win, out_dtype=np.int16)
    case["bias"] = rng.integers(-(2**22), 2**22, units)  # gates reach the int16 limits
    _check(case, path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(16))
def test_depthwise_layers_of_8_channels(path: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    fh, fw = (int(v) for v in rng.integers(1, 4, 2))
    stride = int(rng.integers(1, 3))
    h, w = int(rng.integers(fh, 12)), int(rng.integers(fw, 12))
    pads = [int(v) for v in rng.integers(0, 2, 4)]
    out_h = (h + pads[0] + pads[1] - fh) // stride + 1
    out_w = (w + pads[2] + pads[3] - fw) // stride + 1
    win = Window2D(*pads, stride, stride, 1, 1, out_h, out_w)
    _check(_case(rng, (h, w, 8), 8, (fh, fw), win, depthwise=True), path)
