"""The int32 quantized convolution kernels (csrc/qconv.c): per layer and per model.

``python bench/bench_qconv.py layers [MODEL.tflite ...]``: every CONV_2D and
FULLY_CONNECTED shape of the models, timed in turns on each kernel path and
on the float route it replaces (nnb_conv_f32 on a shifted float32 copy, then
nnb_requantize_f32), as GOP/s (2 ops a multiply-add, padding taps counted)
against the machine's peak for pmaddwd: 2 a cycle x 16 multiply-adds on
Zen 3/4 at the clock /proc/cpuinfo reports.

``python bench/bench_qconv.py models MODEL.tflite ...``: each model's p50
in-process compute before (the float route: the int32 kernels switched off
while the model is prepared) and after, with LiteRT on one thread, in one
process, rows taking 0.1 s turns.  Outputs are checked equal first.

One thread throughout (BLAS limited to one, as LiteRT).  The machine these
ran on is shared: read the ratios, taken in turns, more than the times.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import threadpoolctl

from nnburst import tflite
from nnburst.benchmarks.model_bench import litert_runner, random_inputs, time_in_turns
from nnburst.cpu.ops import common, conv, fully_connected
from nnburst.cpu.ops.common import Window2D
from nnburst.cpu.ops.native import TILE, ConvLoop, Requantizer
from nnburst.cpu.ops.qconv import PATH_AVX2, PATH_PORTABLE, QuantConv, available_paths
from nnburst.devices import get_devices

PATH_NAMES = {PATH_PORTABLE: "portable", PATH_AVX2: "avx2"}


def peak_gops() -> float:
    """pmaddwd's peak on Zen 3/4 (2 ymm a cycle, 16 multiply-adds each) at the
    reported clock: 64 int ops a cycle."""
    text = Path("/proc/cpuinfo").read_text()
    mhz = float(re.search(r"cpu MHz\s*:\s*([\d.]+)", text).group(1))  # type: ignore[union-attr]
    return 64 * mhz / 1000


@contextlib.contextmanager
def float_route() -> Iterator[None]:
    """Models prepared inside use the float route (the int32 kernels declined)."""
    with (
        mock.patch.object(conv, "_int32_kernel", return_value=None),
        mock.patch.object(fully_connected, "_int32_kernel", return_value=None),
    ):
        yield


def layer_shapes(model: bytes) -> list[dict[str, Any]]:
    """The model's CONV_2D and FULLY_CONNECTED layers as the CPU driver sees them."""
    loaded = tflite.load(model)
    main = loaded.model.hal_model.main
    shapes = []
    for op in main.operations:
        name = op.code.name
        if name not in ("CONV_2D", "FULLY_CONNECTED"):
            continue
        x, w = (main.operands[i].info for i in op.inputs[:2])
        y = main.operands[op.outputs[0]].info
        if name == "FULLY_CONNECTED":
            shapes.append({"in": (1, 1, 1, w.dimensions[1]), "out": (1, 1, 1, w.dimensions[0]),
                           "filter": (1, 1), "win": Window2D(0, 0, 0, 0, 1, 1, 1, 1, 1, 1)})  # fmt: skip
            continue
        scalars = [main.operands[i].value for i in op.inputs[3:]]
        n, in_h, in_w, _ = x.dimensions
        _, out_h, out_w, _ = y.dimensions
        fh, fw = w.dimensions[1:3]
        if len(scalars) >= 7 and np.ndim(scalars[0]) == 0 and int(scalars[0]) in (1, 2):
            sh, sw = int(scalars[1]), int(scalars[2])  # implicit padding
        else:
            sh, sw = int(scalars[4]), int(scalars[5])
        pad_h = max(0, (out_h - 1) * sh + fh - in_h)
        pad_w = max(0, (out_w - 1) * sw + fw - in_w)
        win = Window2D(pad_h // 2, pad_h - pad_h // 2, pad_w // 2, pad_w - pad_w // 2,
                       sh, sw, 1, 1, out_h, out_w)  # fmt: skip
        shapes.append({"in": tuple(x.dimensions), "out": tuple(y.dimensions),
                       "filter": (fh, fw), "win": win})  # fmt: skip
    return shapes


def layer_calls(
    shape: dict[str, Any], rng: np.random.Generator
) -> list[tuple[str, Callable[[], object]]]:
    """The layer on every int32 path and on the float route, on random int8 data."""
    n, h, w, c = shape["in"]
    o = shape["out"][3]
    fh, fw = shape["filter"]
    k = fh * fw * c
    x = rng.integers(-128, 128, (n, h, w, c)).astype(np.int8)
    weights = rng.integers(-127, 128, (k, o))
    bias = rng.integers(-5000, 5000, o)
    pairs = [common.quantize_multiplier(float(s)) for s in rng.uniform(1e-4, 1e-3, o)]
    requant = (np.array([m for m, _ in pairs]), np.array([s for _, s in pairs]))
    args = (shape["win"], (np.int8, -3), (np.int8, 7), (-128, 127))
    calls: list[tuple[str, Callable[[], object]]] = []
    for path in available_paths():
        layer = QuantConv((h, w, c), weights, (fh, fw), bias, requant, *args[:3], args[3], path)
        calls.append((f"int32 {PATH_NAMES[path]}", lambda layer=layer: layer(x)))
    columns = -(-o // TILE) * TILE
    padded = np.zeros((k, columns), np.float32)
    padded[:, :o] = weights
    loop = ConvLoop(False, (n, h, w, c), padded, (fh, fw), np.zeros(o, np.float32), shape["win"])
    finish = Requantizer(o, bias, *requant, 7, (-128, 127), np.int8)
    calls.append(("float route", lambda: finish(loop(np.subtract(x, -3, dtype=np.float32)))))
    return calls


def test_layer_calls_agree() -> None:
    """The smoke pass (``pytest bench``): every timed call of a ResNet-8 layer
    gives the same bytes."""
    shape = {"in": (1, 16, 16, 32), "out": (1, 8, 8, 64), "filter": (3, 3),
             "win": Window2D(0, 1, 0, 1, 2, 2, 1, 1, 8, 8)}  # fmt: skip
    outputs = [call() for _, call in layer_calls(shape, np.random.default_rng(1))]
    for out in outputs[1:]:
        np.testing.assert_array_equal(out, outputs[0])


def bench_layers(models: list[Path], seconds: float) -> None:
    peak = peak_gops()
    print(f"peak (pmaddwd, 64 int ops a cycle at /proc/cpuinfo's clock): {peak:.0f} GOP/s")
    rng = np.random.default_rng(0)
    seen = set()
    for path in models:
        print(f"\n{path.name}")
        header = None
        for shape in layer_shapes(path.read_bytes()):
            key = (shape["in"], shape["out"], shape["filter"], shape["win"])
            if key in seen:
                continue
            seen.add(key)
            calls = layer_calls(shape, rng)
            if header is None:
                header = "".join(f"{name:>22}" for name, _ in calls)
                print(f"{'layer (in -> out, filter/stride)':<44}{header}   (us p50, GOP/s, % peak)")
            n, oh, ow, o = shape["out"]
            macs = n * oh * ow * o * shape["filter"][0] * shape["filter"][1] * shape["in"][3]
            rows = time_in_turns(calls, seconds)
            cells = []
            for row in rows:
                us = row.p50_us
                gops = 2 * macs / (us * 1000)
                cells.append(f"{us:8.1f} {gops:6.1f} {100 * gops / peak:4.0f}%")
            label = (f"{'x'.join(map(str, shape['in'][1:]))} -> {'x'.join(map(str, shape['out'][1:]))}"
                     f" {shape['filter'][0]}x{shape['filter'][1]}/{shape['win'].stride_h}")  # fmt: skip
            print(f"{label:<44}" + "".join(f"{c:>22}" for c in cells))


def bench_models(models: list[Path], seconds: float) -> None:
    cpu = next(d for d in get_devices() if d.name == "nnburst-reference")
    for path in models:
        model = path.read_bytes()
        loaded = tflite.load(model)
        inputs = random_inputs(loaded.inputs)
        with contextlib.ExitStack() as stack:
            with float_route():
                before = stack.enter_context(tflite.Runner(loaded, cpu, cache_dir=None))
            after = stack.enter_context(tflite.Runner(loaded, cpu, cache_dir=None))
            for got, want in zip(after(*inputs), before(*inputs)):
                np.testing.assert_array_equal(got, want)
            calls = [
                ("float route (before)", functools.partial(before, *inputs)),
                ("int32 kernels (after)", functools.partial(after, *inputs)),
            ]
            litert = litert_runner(model)
            if litert is not None:
                calls.insert(0, ("LiteRT in-process", functools.partial(litert, *inputs)))
            rows = time_in_turns(calls, seconds)
        base = rows[0].p50_us
        print(f"\n{path.name} ({time.strftime('%H:%M:%S')})")
        for row in rows:
            print(f"  {row.name:<24} p50 {row.p50_us:8.1f} us   x{row.p50_us / base:5.2f}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("layers", "models"))
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--seconds", type=float, default=2.0, help="per row (default 2)")
    args = parser.parse_args(argv)
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        (bench_layers if args.what == "layers" else bench_models)(args.models, args.seconds)


if __name__ == "__main__":
    main(sys.argv[1:])
