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

``python bench/bench_fconv.py --litert MODEL.tflite ...``: each layer's
packed kernel (fconv avx2, or the best path) against LiteRT (its XNNPACK
delegate, one thread) running a one-operator model of the same layer
(weights, bias, SAME or VALID padding, stride, activation), both timed in
thread CPU time (time the process was scheduled out is not counted), the
best of three p25s each, and the sum over the model's layers, each shape
counted as often as it occurs.  A small layer's time is mostly the Python
call around the kernel (a few us here, LiteRT's invoke less).

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


def litert_model(layer: dict[str, Any]) -> bytes:
    """A one-operator LiteRT model of ``layer`` (tests/tflite_builder.py writes it)."""
    from tests.tflite_builder import Tensor, schema, single_op

    filt, win = layer["filter"], layer["win"]
    h, w, c = layer["in_hwc"]
    o = filt.depth_out
    weights = filt.weights[..., :o].reshape(-1, o)
    pads = (win.pad_top, win.pad_bottom, win.pad_left, win.pad_right)
    padding = schema.Padding.SAME if any(pads) else schema.Padding.VALID
    act = schema.ActivationFunctionType
    fused = {0: act.NONE, 1: act.RELU, 2: act.RELU_N1_TO_1, 3: act.RELU6}[layer["fuse"]]
    strides = {"strideH": win.stride_h, "strideW": win.stride_w, "fusedActivationFunction": fused}
    if layer["depthwise"]:
        kernel = weights.reshape(1, filt.filter_h, filt.filter_w, o)
        options = schema.DepthwiseConv2DOptionsT(padding=padding, depthMultiplier=1, **strides)
        name = "DEPTHWISE_CONV_2D"
    else:
        kernel = weights.reshape(filt.filter_h, filt.filter_w, c, o).transpose(3, 0, 1, 2)
        options = schema.Conv2DOptionsT(padding=padding, **strides)
        name = "CONV_2D"
    kernel = np.ascontiguousarray(kernel, np.float32)
    tensors = [Tensor((1, h, w, c), np.float32), Tensor(kernel.shape, np.float32, kernel),
               Tensor((o,), np.float32, np.asarray(layer["bias"], np.float32))]  # fmt: skip
    out = [Tensor((1, win.out_h, win.out_w, o), np.float32)]
    return single_op(name, tensors, out, options)


def thread_time(call: Callable[[], object], seconds: float) -> float:
    """The best of three p25s of call's thread CPU time, us."""
    best = float("inf")
    for _ in range(3):
        call()
        samples = []
        end = time.perf_counter() + seconds / 3
        while time.perf_counter() < end:
            start = time.thread_time_ns()
            call()
            samples.append(time.thread_time_ns() - start)
        best = min(best, float(np.percentile(samples, 25)) / 1000)
    return best


def bench_litert(models: list[Path], seconds: float) -> None:
    from ai_edge_litert.interpreter import Interpreter

    path = available_paths()[-1]
    rng = np.random.default_rng(0)
    print(f"us (thread CPU time): {PATH_NAMES[path]} against LiteRT's one-operator model")
    for model in models:
        print(f"\n{model.name}")
        layers = model_layers(model.read_bytes())
        counts: dict[str, int] = {}
        for layer in layers:
            counts[label(layer)] = counts.get(label(layer), 0) + 1
        ours_total = litert_total = 0.0
        for layer in layers:
            name = label(layer)
            if name not in counts:
                continue
            count = counts.pop(name)
            filt = layer["filter"]
            x = rng.uniform(-1, 1, (1, *layer["in_hwc"])).astype(np.float32)
            interpreter = Interpreter(model_content=litert_model(layer), num_threads=1)
            interpreter.allocate_tensors()
            interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
            weights = filt.weights[..., : filt.depth_out].reshape(-1, filt.depth_out)
            kernel = FloatConv(layer["in_hwc"], weights, (filt.filter_h, filt.filter_w),
                               layer["bias"], layer["win"], layer["bounds"], path,
                               layer["depthwise"])  # fmt: skip
            ours = thread_time(functools.partial(kernel, x), seconds)
            theirs = thread_time(interpreter.invoke, seconds)
            ours_total, litert_total = ours_total + ours * count, litert_total + theirs * count
            print(f"  {name:<36} x{count}  {ours:8.1f} {theirs:8.1f}  x{ours / theirs:.2f}")
        print(f"  {'all layers':<36}     {ours_total:8.0f} {litert_total:8.0f}"
              f"  x{ours_total / litert_total:.2f}")  # fmt: skip


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--seconds", type=float, default=1.0, help="per layer or model")
    parser.add_argument("--models", dest="whole", action="store_true", help="whole models")
    parser.add_argument("--litert", action="store_true", help="each layer against LiteRT")
    args = parser.parse_args(argv)
    if args.litert:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.tflite_builder
        bench_litert(args.models, args.seconds)
        return
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
