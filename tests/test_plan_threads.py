"""The C plan's convolutions split over kernel threads (csrc/plan.c's run
loop, csrc/threadpool.c): each step of a plan built for 2 or 3 threads gives
the bits the same step gives on one, for float and int8 convolution,
depthwise and fully connected layers (packed and kernels.c's loops) over
random shapes, strides, dilations and paddings, with fewer output rows than
threads, batches, and every kernel path this CPU runs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from nnburst._bindings import fconv, kernels, qconv, threadpool
from nnburst._bindings import plan as c_plan

KINDS = ["fconv", "fdwconv", "fc", "qconv", "qdepthwise", "qfc", "conv", "depthwise"]


@pytest.fixture(autouse=True)
def three_threads() -> Any:
    """The pool sized for 3 while a test runs (given back after)."""
    hold = threadpool.Hold(3)
    yield
    hold.release()


class Window:
    """A window's geometry as the bindings read it."""

    def __init__(self, rng: np.random.Generator, in_h: int, in_w: int, fh: int, fw: int) -> None:
        self.stride_h, self.stride_w = (int(v) for v in rng.integers(1, 4, 2))
        self.dilation_h, self.dilation_w = (int(v) for v in rng.choice([1, 1, 2], 2))
        reach_h = (fh - 1) * self.dilation_h + 1
        reach_w = (fw - 1) * self.dilation_w + 1
        self.pad_top, self.pad_left = (int(v) for v in rng.integers(0, 3, 2))
        self.pad_bottom, self.pad_right = (int(v) for v in rng.integers(0, 3, 2))
        self.out_h = (in_h + self.pad_top + self.pad_bottom - reach_h) // self.stride_h + 1
        self.out_w = (in_w + self.pad_left + self.pad_right - reach_w) // self.stride_w + 1


def random_geometry(rng: np.random.Generator, few_rows: bool) -> tuple[int, int, int, int, Window]:
    """(in_h, in_w, fh, fw, window) with at least one output row and column."""
    while True:
        in_h = int(rng.integers(1, 3 if few_rows else 14))
        in_w = int(rng.integers(1, 14))
        fh, fw = (int(v) for v in rng.integers(1, 6, 2))
        win = Window(rng, in_h, in_w, fh, fw)
        if win.out_h >= 1 and win.out_w >= 1:
            return in_h, in_w, fh, fw, win


def float_step(kind: str, rng: np.random.Generator, few_rows: bool, path: int) -> Any:
    """(step, input, output shape, dtype, keep) for one random float layer."""
    batches = int(rng.integers(1, 4))
    if kind == "fc":
        in_h = in_w = fh = fw = 1
        win = None
        batches = int(rng.integers(1, 9))
        out_hw = (1, 1)
    else:
        in_h, in_w, fh, fw, win = random_geometry(rng, few_rows)
        out_hw = (win.out_h, win.out_w)
    in_c = int(rng.integers(1, 40))
    depthwise = kind == "fdwconv"
    out_c = in_c if depthwise else int(rng.integers(1, 40))
    k = fh * fw * (1 if depthwise else in_c)
    weights = rng.normal(0, 1, (k, out_c)).astype(np.float32)
    bias = rng.normal(0, 1, out_c).astype(np.float32)
    bounds = (-np.inf, np.inf) if rng.random() < 0.5 else (-1.0, 6.0)
    layer = fconv.FloatConv(
        (in_h, in_w, in_c), weights, (fh, fw), bias, win, bounds, path, depthwise
    )
    fields = layer.plan_fields()
    x = rng.normal(0, 1, (batches, in_h, in_w, in_c)).astype(np.float32)
    step = c_plan.PlanStep(
        c_plan.FDWCONV if depthwise else c_plan.FCONV, -1, -2, b=0,
        params=c_plan.fconv_params(fields, batches),
    )  # fmt: skip
    return step, x, (batches, *out_hw, out_c), np.float32, fields["scratch_bytes"]


def quant_step(kind: str, rng: np.random.Generator, few_rows: bool, path: int) -> Any:
    batches = int(rng.integers(1, 4))
    if kind == "qfc":
        in_h = in_w = fh = fw = 1
        win = None
        batches = int(rng.integers(1, 9))
        out_hw = (1, 1)
    else:
        in_h, in_w, fh, fw, win = random_geometry(rng, few_rows)
        out_hw = (win.out_h, win.out_w)
    in_c = int(rng.integers(1, 40))
    depthwise = kind == "qdepthwise"
    out_c = in_c if depthwise else int(rng.integers(1, 40))
    k = fh * fw * (1 if depthwise else in_c)
    weights = rng.integers(-127, 128, (k, out_c)).astype(np.int32)
    bias = rng.integers(-5000, 5000, out_c).astype(np.int32)
    multipliers = rng.integers(1 << 29, 1 << 31, out_c).astype(np.int64)
    shifts = rng.integers(-10, 0, out_c).astype(np.int64)
    layer = qconv.QuantConv(
        (in_h, in_w, in_c), weights, (fh, fw), bias, (multipliers, shifts), win,
        (np.int8, int(rng.integers(-20, 20))), (np.int8, int(rng.integers(-20, 20))),
        (-128, 127), path, depthwise,
    )  # fmt: skip
    fields = layer.plan_fields()
    x = rng.integers(-128, 128, (batches, in_h, in_w, in_c)).astype(np.int8)
    step = c_plan.PlanStep(
        c_plan.QDEPTHWISE if depthwise else c_plan.QCONV, -1, -2, b=0,
        params=c_plan.qconv_params(fields, batches),
    )  # fmt: skip
    return step, x, (batches, *out_hw, out_c), np.int8, fields["scratch_bytes"]


def loop_step(kind: str, rng: np.random.Generator, few_rows: bool, path: int) -> Any:
    """kernels.c's nnb_conv_f32 / nnb_depthwise_conv_f32 (CONV, DEPTHWISE)."""
    batches = int(rng.integers(1, 4))
    in_h, in_w, fh, fw, win = random_geometry(rng, few_rows)
    depthwise = kind == "depthwise"
    source_c = int(rng.integers(1, 40))
    in_c = max(16, source_c) if depthwise else source_c
    out_c = source_c if depthwise else int(rng.integers(1, 40))
    cols = -(-out_c // 16) * 16
    rows = fh * fw if depthwise else fh * fw * in_c
    weights = np.zeros((rows, cols), np.float32)
    weights[:, :out_c] = rng.normal(0, 1, (rows, out_c))
    bias = rng.normal(0, 1, out_c).astype(np.float32)
    fields = {
        "batches": batches, "in_h": in_h, "in_w": in_w, "in_c": in_c, "filter_h": fh,
        "filter_w": fw, "out_h": win.out_h, "out_w": win.out_w, "out_c": out_c,
    }  # fmt: skip
    for name in ("stride_h", "stride_w", "dilation_h", "dilation_w", "pad_top", "pad_bottom"):
        fields[name] = getattr(win, name)
    fields["pad_left"], fields["pad_right"] = win.pad_left, win.pad_right
    shape = kernels.window_shape(fields)
    if depthwise:  # kernels.c's depthwise loop reads no padding below or right
        shape.pad_bottom = shape.pad_right = 0
        shape.out_h = (in_h + win.pad_top - (fh - 1) * win.dilation_h - 1) // win.stride_h + 1
        shape.out_w = (in_w + win.pad_left - (fw - 1) * win.dilation_w - 1) // win.stride_w + 1
        if shape.out_h < 1 or shape.out_w < 1:
            return None
    params = c_plan.conv_params(shape, weights, bias, -np.inf, np.inf, path, source_c)
    x = rng.normal(0, 1, (batches, in_h, in_w, source_c)).astype(np.float32)
    scratch = batches * in_h * in_w * in_c * 4 if source_c < in_c else 0
    step = c_plan.PlanStep(
        c_plan.DEPTHWISE if depthwise else c_plan.CONV, -1, -2, b=0 if scratch else None,
        params=params,
    )  # fmt: skip
    return step, x, (batches, shape.out_h, shape.out_w, out_c), np.float32, scratch


def paths(kind: str) -> list[int]:
    if kind in ("fconv", "fdwconv", "fc"):
        return fconv.available_paths()
    if kind in ("qconv", "qdepthwise", "qfc"):
        return qconv.available_paths()
    return [kernels.CONV_PORTABLE, kernels.CONV_AVX2, kernels.CONV_AVX512]


def run(
    step: Any,
    x: np.ndarray,
    out_shape: Any,
    dtype: Any,
    scratch: int,
    threads: int,
    slices: int = 1,
) -> Any:
    out = np.full(out_shape, 77, dtype)
    table = c_plan.PlanTable([step], [x.nbytes, out.nbytes], max(scratch, 8), threads, 0, slices)
    table.run([x, out])
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(12))
def test_split_steps_give_one_threads_bits(kind: str, seed: int) -> None:
    rng = np.random.default_rng(hash((kind, seed)) % 2**32)
    make = {"f": float_step, "q": quant_step}.get(kind[0], loop_step)
    for path in paths(kind):
        built = make(kind, rng, few_rows=seed % 3 == 0, path=path)
        if built is None:
            continue
        step, x, out_shape, dtype, scratch = built
        try:
            alone = run(step, x, out_shape, dtype, scratch, 1)
        except Exception as exc:  # a path this CPU has not got
            if "ENOTSUP" in str(exc) or "not supported" in str(exc) or "-95" in str(exc):
                continue
            raise
        for threads, slices in ((2, 1), (3, 1), (2, 4)):
            split = run(step, x, out_shape, dtype, scratch, threads, slices)
            assert split.tobytes() == alone.tobytes(), (kind, path, threads, slices, out_shape)


def test_a_split_step_runs_on_the_workers() -> None:
    """Not every slice on the caller: a worker exists and the results still match."""
    rng = np.random.default_rng(5)
    layer = fconv.FloatConv(
        (64, 32, 16), rng.normal(0, 1, (9 * 16, 32)).astype(np.float32), (3, 3),
        rng.normal(0, 1, 32).astype(np.float32), type("W", (), {
            "pad_top": 1, "pad_left": 1, "stride_h": 1, "stride_w": 1, "dilation_h": 1,
            "dilation_w": 1, "out_h": 64, "out_w": 32})(), (-np.inf, np.inf),
    )  # fmt: skip
    fields = layer.plan_fields()
    step = c_plan.PlanStep(c_plan.FCONV, -1, -2, b=0, params=c_plan.fconv_params(fields, 1))
    x = rng.normal(0, 1, (1, 64, 32, 16)).astype(np.float32)
    alone = run(step, x, (1, 64, 32, 32), np.float32, fields["scratch_bytes"], 1)
    for _ in range(20):
        split = run(step, x, (1, 64, 32, 32), np.float32, fields["scratch_bytes"], 3)
        assert split.tobytes() == alone.tobytes()
    assert threadpool.workers_alive() == 2


def test_small_steps_stay_on_one_thread() -> None:
    """A step below min_work is not split: with the pool at 1 thread and a plan
    asking for 3, nothing starts (the count caps it)."""
    threadpool.Hold(1).release()
    assert math.isfinite(threadpool.pool_count())
