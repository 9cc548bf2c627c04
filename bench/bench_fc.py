"""Float32 FULLY_CONNECTED, per shape: the packed kernel (csrc/fconv.c, its
1x1 case) against BLAS's product then numpy's bias and clamp (the route
before it), one thread, timed in turns.

``python bench/bench_fc.py [--seconds 0.5]``: p50 us of each and the ratio,
for the heads of hand_landmark_lite (672 -> 63, 672 -> 1), a 1024 -> 1000
classifier and a few row counts; fully_connected.FC_PACKED_MAX_ROWS is
read off this table.  The machine these ran on is shared: read the
ratios, taken in turns, more than the times.
"""

from __future__ import annotations

import argparse
import functools
import sys

import numpy as np
import threadpoolctl

from nnburst._bindings.fconv import FloatConv
from nnburst.cpu.ops.fused_activation import FLOAT_ACTIVATION_BOUNDS
from nnburst.cpu.ops.windows import biased

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_fconv import time_in_turns

SHAPES = [(1, 672, 63), (1, 672, 1), (1, 1024, 1000), (1, 256, 16), (4, 672, 63), (16, 672, 63),
          (64, 672, 63)]  # fmt: skip


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="per shape")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print("rows x in -> out: us p50 packed | BLAS + numpy | packed / BLAS")
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        for rows, size, units in SHAPES:
            w = rng.standard_normal((size, units)).astype(np.float32)
            b = rng.standard_normal(units).astype(np.float32)
            x = rng.standard_normal((rows, size)).astype(np.float32)
            layer = FloatConv((1, 1, size), w, (1, 1), b, None, FLOAT_ACTIVATION_BOUNDS[1])
            images = x.reshape(rows, 1, 1, size)
            calls = [
                ("packed", functools.partial(layer, images)),
                ("blas", functools.partial(lambda x, w, b: biased(x @ w, b, 1), x, w, b)),
            ]
            got, want = (call().reshape(rows, units) for _, call in calls)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
            packed, blas = time_in_turns(calls, args.seconds)
            print(
                f"  {rows:3d} x {size:5d} -> {units:5d}: {packed:8.1f} | {blas:8.1f} | {packed / blas:.2f}"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
