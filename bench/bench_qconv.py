"""The int32 quantized convolution kernels (csrc/qconv.c): per layer and per model.

``python bench/bench_qconv.py layers [MODEL.tflite ...]``: every CONV_2D,
DEPTHWISE_CONV_2D and FULLY_CONNECTED shape of the models and the gate sums of
their QUANTIZED_16BIT_LSTM cells (int16 out), timed in turns on each kernel
path and on the float route it replaces (nnb_conv_f32 on a shifted float32 copy,
then nnb_requantize_f32; none for the gates), as GOP/s (2 ops a multiply-add, padding taps counted)
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
from nnburst._bindings.qconv import PATH_AVX2, PATH_PORTABLE, QuantConv, available_paths
from nnburst.cpu.ops import conv, fixed_point, fully_connected
from nnburst.cpu.ops.native import TILE, ConvLoop, Requantizer
from nnburst.cpu.ops.window_geometry import Window2D
from nnburst.devices import get_devices
from nnburst.tools.benchmarks.model_bench import litert_runner, random_inputs, time_in_turns

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


def model_layers(model: bytes) -> list[dict[str, Any]]:
    """The arguments of every int32 layer the CPU driver binds for ``model``
    (its real weights, multipliers and zero points), recorded as it prepares."""
    layers: list[dict[str, Any]] = []
    original = QuantConv.__init__
    names = ("in_hwc", "weights", "filter_hw", "bias", "requant", "win", "in_type", "out_type",
             "bounds")  # fmt: skip

    def record(self: QuantConv, *args: Any, depthwise: bool = False) -> None:
        layers.append({**dict(zip(names, args)), "depthwise": depthwise})
        original(self, *args, depthwise=depthwise)

    cpu = next(d for d in get_devices() if d.name == "nnburst-reference")
    with mock.patch.object(QuantConv, "__init__", record):
        tflite.Runner(tflite.load(model), cpu, cache_dir=None).close()
    return layers


def layer_calls(
    layer: dict[str, Any], rng: np.random.Generator
) -> list[tuple[str, Callable[[], object]]]:
    """The layer on every int32 path and on the float route, on a random input."""
    h, w, c = layer["in_hwc"]
    fh, fw = layer["filter_hw"]
    in_dtype, in_zp = layer["in_type"]
    out_dtype, out_zp = layer["out_type"]
    win = layer["win"] or Window2D(0, 0, 0, 0, 1, 1, 1, 1, 1, 1)
    limits = np.iinfo(in_dtype)
    x = rng.integers(limits.min, limits.max, (1, h, w, c), endpoint=True).astype(in_dtype)
    args = [layer[k] for k in ("weights", "filter_hw", "bias", "requant", "win", "in_type",
                               "out_type", "bounds")]  # fmt: skip
    calls: list[tuple[str, Callable[[], object]]] = []
    for path in available_paths():
        conv = QuantConv((h, w, c), *args, path, layer["depthwise"])  # type: ignore[arg-type]
        calls.append((f"int32 {PATH_NAMES[path]}", functools.partial(conv, x)))
    if np.dtype(out_dtype) == np.int16:
        return calls  # a quantized LSTM's gates: the float route has no int16 output
    o = layer["bias"].shape[0]
    weights = np.asarray(layer["weights"], np.float32)
    padded = np.zeros((weights.shape[0], -(-o // TILE) * TILE), np.float32)
    padded[:, :o] = weights
    if layer["depthwise"]:
        padded = padded.reshape(fh, fw, -1)
    loop = ConvLoop(
        layer["depthwise"], (1, h, w, c), padded, (fh, fw), np.zeros(o, np.float32), win
    )
    finish = Requantizer(o, layer["bias"], *layer["requant"], out_zp, layer["bounds"], out_dtype)
    calls.append(("float route", lambda: finish(loop(np.subtract(x, in_zp, dtype=np.float32)))))
    return calls


def layer_label(layer: dict[str, Any]) -> str:
    h, w, c = layer["in_hwc"]
    win = layer["win"] or Window2D(0, 0, 0, 0, 1, 1, 1, 1, 1, 1)
    kind = "dw" if layer["depthwise"] else "fc" if layer["win"] is None else "conv"
    if np.dtype(layer["out_type"][0]) == np.int16:
        kind = "lstm gates"
    fh, fw = layer["filter_hw"]
    return (f"{kind} {h}x{w}x{c} -> {win.out_h}x{win.out_w}x{layer['bias'].shape[0]}"
            f" {fh}x{fw}/{win.stride_h}")  # fmt: skip


def multiply_adds(layer: dict[str, Any]) -> int:
    win = layer["win"] or Window2D(0, 0, 0, 0, 1, 1, 1, 1, 1, 1)
    depth = 1 if layer["depthwise"] else layer["in_hwc"][2]
    fh, fw = layer["filter_hw"]
    return win.out_h * win.out_w * layer["bias"].shape[0] * fh * fw * depth


def test_layer_calls_agree() -> None:
    """The smoke pass (``pytest bench``): every timed call of a ResNet-8-like
    layer and a depthwise one gives the same bytes."""
    rng = np.random.default_rng(1)
    for depthwise, c in ((False, 32), (True, 24)):
        pairs = [fixed_point.quantize_multiplier(float(s)) for s in rng.uniform(1e-4, 1e-3, 64)]
        layer = {
            "in_hwc": (16, 16, c),
            "weights": rng.integers(-127, 128, (9, c) if depthwise else (9 * c, 64)),
            "filter_hw": (3, 3),
            "bias": rng.integers(-5000, 5000, c if depthwise else 64),
            "requant": tuple(np.array(a[: c if depthwise else 64]) for a in zip(*pairs)),
            "win": Window2D(0, 1, 0, 1, 2, 2, 1, 1, 8, 8),
            "in_type": (np.int8, -3),
            "out_type": (np.int8, 7),
            "bounds": (-128, 127),
            "depthwise": depthwise,
        }
        outputs = [call() for _, call in layer_calls(layer, rng)]
        for out in outputs[1:]:
            np.testing.assert_array_equal(out, outputs[0])


def bench_layers(models: list[Path], seconds: float) -> None:
    peak = peak_gops()
    print(f"peak (pmaddwd, 64 int ops a cycle at /proc/cpuinfo's clock): {peak:.0f} GOP/s")
    rng = np.random.default_rng(0)
    for path in models:
        print(f"\n{path.name}: us p50, GOP/s, % of peak")
        header = None
        seen = set()
        for layer in model_layers(path.read_bytes()):
            label = layer_label(layer)
            if label in seen:
                continue
            seen.add(label)
            calls = layer_calls(layer, rng)
            columns = "".join(f"{name:>24}" for name, _ in calls)
            if columns != header:  # the LSTM gates have no float route column
                header = columns
                print(f"{'layer (in -> out, filter/stride)':<40}{header}")
            times = time_in_turns(calls, seconds)
            cells = []
            for name, _ in calls:
                p50_us = float(np.median(times[name])) / 1000
                gops = 2 * multiply_adds(layer) / (p50_us * 1000)
                cells.append(f"{p50_us:8.1f} {gops:6.1f} {100 * gops / peak:5.1f}%")
            print(f"{label:<40}" + "".join(f"{c:>24}" for c in cells))


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
            times = time_in_turns(calls, seconds)
        p50s = {name: float(np.median(ns)) / 1000 for name, ns in times.items()}
        base = p50s[calls[0][0]]
        print(f"\n{path.name} ({time.strftime('%H:%M:%S')})")
        for name, p50_us in p50s.items():
            print(f"  {name:<24} p50 {p50_us:8.1f} us   x{p50_us / base:5.2f}")


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
