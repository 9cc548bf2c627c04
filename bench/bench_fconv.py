"""The packed float32 convolution kernels (csrc/fconv.c), per layer shape.

``python bench/bench_fconv.py MODEL.tflite ...``: every float32 CONV_2D and
DEPTHWISE_CONV_2D shape of the models (their real weights, padding and fused
activation), timed in turns on each fconv path and on the routes they
compete with: nnb_conv_f32 or nnb_depthwise_conv_f32 (kernels.c's loops,
bias and clamp inside) and, for a 1x1 layer, numpy's BLAS sgemm then
numpy's bias and clamp (conv.py's ``biased``).  Each cell
is p50 us and GFLOP/s (2 a multiply-add, padding taps counted) against the
machine's FMA peak: 2 FMA ports x 8 floats x 2 flops a cycle at the clock
/proc/cpuinfo reports.  The last column is the route conv.py picks.

``python bench/bench_fconv.py --models MODEL.tflite ...``: each model's whole
run with the packed kernels switched off while it is prepared (before) and
on (after), in one process, calls alternating one by one (a paired ratio
per pair of calls, the machine's load shared), outputs checked close first.

One thread throughout (BLAS limited to one, as LiteRT).  The machine these
ran on is shared: read the ratios, taken in turns, more than the times.
"""

from __future__ import annotations

import argparse
import functools
import gc
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import threadpoolctl

from nnburst import tflite
from nnburst._bindings.fconv import PATH_AVX2, PATH_PORTABLE, FloatConv, available_paths
from nnburst.codes import OperationCode
from nnburst.cpu.executor import PreparedSubgraph
from nnburst.cpu.ops import conv
from nnburst.cpu.ops.fused_activation import FLOAT_ACTIVATION_BOUNDS
from nnburst.cpu.ops.native import TILE, ConvLoop
from nnburst.cpu.ops.window_geometry import Window2D
from nnburst.cpu.ops.windows import biased
from nnburst.devices import get_devices

PATH_NAMES = {PATH_PORTABLE: "fconv portable", PATH_AVX2: "fconv avx2"}


def peak_gflops() -> float:
    """2 FMA ports x 8 float lanes x 2 flops a cycle at the reported clock."""
    text = Path("/proc/cpuinfo").read_text()
    mhz = float(re.search(r"cpu MHz\s*:\s*([\d.]+)", text).group(1))  # type: ignore[union-attr]
    return 32 * mhz / 1000


def model_layers(model: bytes) -> list[dict[str, Any]]:
    """Every float32 CONV_2D and DEPTHWISE_CONV_2D (depth multiplier 1) the CPU
    driver prepares for ``model``, as conv.py holds it."""
    cpu = next(d for d in get_devices() if d.name == "nnburst-reference")
    layers = []
    with tflite.Runner(tflite.load(model), cpu, cache_dir=None):
        for sub in [o for o in gc.get_objects() if isinstance(o, PreparedSubgraph)]:
            for op in sub.operations:  # each one, also those a C plan runs
                state = op.state
                code = op.signature.code
                if code not in (OperationCode.CONV_2D, OperationCode.DEPTHWISE_CONV_2D):
                    continue
                if not isinstance(state, conv._State):
                    continue
                depthwise = code == OperationCode.DEPTHWISE_CONV_2D
                if depthwise and state.plan and state.plan.values["depth_multiplier"] != 1:
                    continue
                filt = state.filter
                if filt is None or filt.requant is not None or state.plan is None:
                    continue
                if state.plan.window is None or state.bias is None:
                    continue
                layers.append(
                    {
                        "in_hwc": tuple(op.signature.inputs[0].dimensions[1:]),
                        "filter": filt,
                        "bias": state.bias,
                        "win": state.plan.window,
                        "bounds": FLOAT_ACTIVATION_BOUNDS[int(state.plan.values["fuse"])],
                        "fuse": int(state.plan.values["fuse"]),
                        "depthwise": depthwise,
                    }
                )
    return layers


def layer_calls(layer: dict[str, Any], x: np.ndarray) -> list[tuple[str, Callable[[], object]]]:
    filt, win, bias, bounds = layer["filter"], layer["win"], layer["bias"], layer["bounds"]
    hw = (filt.filter_h, filt.filter_w)
    depthwise = layer.get("depthwise", False)
    weights = filt.weights[..., : filt.depth_out].reshape(-1, filt.depth_out)
    calls: list[tuple[str, Callable[[], object]]] = []
    for path in available_paths():
        kernel = FloatConv(layer["in_hwc"], weights, hw, bias, win, bounds, path, depthwise)
        calls.append((PATH_NAMES[path], functools.partial(kernel, x)))
    loop = ConvLoop(depthwise, x.shape, filt.weights, hw, bias, win, *bounds)
    calls.append(("nnb_depthwise_conv_f32" if depthwise else "nnb_conv_f32",
                  functools.partial(loop, x)))  # fmt: skip
    if not depthwise and conv._pointwise(filt, win):
        sums = conv._pointwise_sums(filt, x.shape)
        b = bias if bias.any() else None
        calls.append(("sgemm + numpy", lambda: biased(sums(x), b, layer["fuse"])))
    return calls


def test_layer_calls_agree() -> None:
    """The smoke pass (``pytest bench``): every timed call of a 1x1 layer and
    a 3x3 one gives the same outputs, to float32 rounding."""
    rng = np.random.default_rng(1)
    for fh, win in ((1, Window2D(0, 0, 0, 0, 1, 1, 1, 1, 16, 16)),
                    (3, Window2D(0, 1, 0, 1, 2, 2, 1, 1, 8, 8))):  # fmt: skip
        weights = np.zeros((fh * fh * 24, TILE * 2), np.float32)
        weights[:, :20] = rng.standard_normal((fh * fh * 24, 20))
        filt = conv._Filter(weights, fh, fh, 20, None)
        bias = rng.standard_normal(20).astype(np.float32)
        layer = {"in_hwc": (16, 16, 24), "filter": filt, "bias": bias, "win": win,
                 "bounds": FLOAT_ACTIVATION_BOUNDS[1], "fuse": 1}  # fmt: skip
        x = rng.standard_normal((1, 16, 16, 24)).astype(np.float32)
        outputs = [call() for _, call in layer_calls(layer, x)]
        for out in outputs[1:]:
            np.testing.assert_allclose(out, outputs[0], rtol=1e-5, atol=1e-5)


def time_in_turns(calls: list[tuple[str, Callable[[], object]]], seconds: float) -> list[float]:
    """Each call's p50 (us), timed in 10 turns of seconds/10/len(calls) each."""
    samples: list[list[int]] = [[] for _ in calls]
    for call in calls:
        call[1]()
    turn = seconds / 10 / len(calls)
    for _ in range(10):
        for i, (_, call) in enumerate(calls):
            end = time.perf_counter() + turn
            while True:
                start = time.perf_counter_ns()
                call()
                samples[i].append(time.perf_counter_ns() - start)
                if time.perf_counter() > end:
                    break
    return [float(np.median(s)) / 1000 for s in samples]


def label(layer: dict[str, Any]) -> str:
    h, w, c = layer["in_hwc"]
    filt, win = layer["filter"], layer["win"]
    kind = "dw " if layer["depthwise"] else ""
    return (f"{kind}{h}x{w}x{c} -> {win.out_h}x{win.out_w}x{filt.depth_out}"
            f" {filt.filter_h}x{filt.filter_w}/{win.stride_h}")  # fmt: skip


def old_float_route(filt: Any, in_shape: tuple[int, ...], win: Any) -> str:
    """conv.float_route without the packed kernel: the route before it."""
    return (
        "sgemm"
        if conv._pointwise(filt, win) and conv._blas_wins(in_shape, filt)
        else "nnb_conv_f32"
    )


def bench_models(models: list[Path], seconds: float) -> None:
    cpu = next(d for d in get_devices() if d.name == "nnburst-reference")
    rng = np.random.default_rng(0)
    print("model: us p50 before (kernels.c / BLAS) and after (packed kernels), paired ratio")
    for path in models:
        loaded = tflite.load(path.read_bytes())
        inputs = [rng.uniform(-1, 1, i.shape).astype(i.dtype) for i in loaded.inputs]
        with (
            mock.patch.object(conv, "float_route", old_float_route),
            mock.patch.object(conv, "depthwise_route", return_value="nnb_depthwise_conv_f32"),
        ):
            before = tflite.Runner(loaded, cpu, cache_dir=None)
        after = tflite.Runner(loaded, cpu, cache_dir=None)
        with before, after:
            for got, want in zip(after(*inputs), before(*inputs)):
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
            pairs: list[tuple[int, int]] = []
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                start = time.perf_counter_ns()
                before(*inputs)
                middle = time.perf_counter_ns()
                after(*inputs)
                pairs.append((middle - start, time.perf_counter_ns() - middle))
        times = np.array(pairs) / 1000
        ratio = float(np.median(times[:, 1] / times[:, 0]))
        print(f"  {path.name:<36} {np.median(times[:, 0]):9.0f} {np.median(times[:, 1]):9.0f}"
              f"   x{ratio:.2f} ({len(pairs)} pairs)")  # fmt: skip


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--seconds", type=float, default=1.0, help="per layer or model")
    parser.add_argument("--models", dest="whole", action="store_true", help="whole models")
    args = parser.parse_args(argv)
    if args.whole:
        with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
            bench_models(args.models, args.seconds)
        return
    peak = peak_gflops()
    print(f"FMA peak (32 flops a cycle at /proc/cpuinfo's clock): {peak:.0f} GFLOP/s")
    rng = np.random.default_rng(0)
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        for path in args.models:
            print(f"\n{path.name}: us p50, GFLOP/s, % of peak; conv.py's choice last")
            seen = set()
            for layer in model_layers(path.read_bytes()):
                name = label(layer)
                if name in seen:
                    continue
                seen.add(name)
                x = rng.uniform(-1, 1, (1, *layer["in_hwc"])).astype(np.float32)
                calls = layer_calls(layer, x)
                filt, win = layer["filter"], layer["win"]
                taps = filt.filter_h * filt.filter_w
                depth_in = 1 if layer["depthwise"] else layer["in_hwc"][2]
                flops = 2 * win.out_h * win.out_w * filt.depth_out * taps * depth_in
                cells = []
                for (call_name, _), us in zip(calls, time_in_turns(calls, args.seconds)):
                    gflops = flops / (us * 1000)
                    cells.append(f"{call_name} {us:7.1f} {gflops:5.1f} {100 * gflops / peak:3.0f}%")
                in_shape = (1, *layer["in_hwc"])
                if layer["depthwise"]:
                    choice = conv.depthwise_route(in_shape, win, (filt.filter_h, filt.filter_w))
                else:
                    choice = conv.float_route(filt, in_shape, win)
                print(f"  {name:<32} " + " | ".join(cells) + f" | -> {choice}")


if __name__ == "__main__":
    main(sys.argv[1:])
