"""Float32 TRANSPOSE_CONV_2D as a C plan step (csrc/plan.c's transpose_conv)
against the operation one by one (numpy's matrix product and scatter), within
float32 rounding: random shapes, strides 1-3, filters 1-4, explicit paddings
with negative tails, SAME and VALID, every fused activation, NCHW, batches of
1-2 and depths around the vector width (both loops); a layer the plan cannot take (a filter
given at run time) stays the operation's."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst._bindings import plan as c_plan
from nnburst.codes import FuseCode, OperandCode, OperationCode, PaddingCode
from nnburst.cpu.executor import PreparedModel

from .test_cpu_plan import both
from .test_graph_optimiser import I32, Graph

Op = OperationCode
DEPTHS = (1, 3, 7, 8, 9, 17)
FUSES = (FuseCode.NONE, FuseCode.RELU, FuseCode.RELU1, FuseCode.RELU6)


def kinds(prepared: PreparedModel) -> list[int]:
    """The C steps' kinds of a model prepared as one plan."""
    (step,) = prepared.main._plan
    return [s.kind for s in step.kernel.plan_table._steps]


def transposed(
    rng: np.random.Generator, seed: int, implicit: bool
) -> tuple[Graph, tuple[int, ...], int]:
    """A graph: input + 0.5, TRANSPOSE_CONV_2D, times 2; its input shape and
    fused activation."""
    n = int(rng.integers(1, 3))
    h, w = (int(v) for v in rng.integers(1, 7, 2))
    depth_in, depth_out = DEPTHS[seed % 6], DEPTHS[(seed // 6 + seed) % 6]
    fh, fw = (int(v) for v in rng.integers(1, 5, 2))
    sh, sw = (int(v) for v in rng.integers(1, 4, 2))
    nchw = seed % 5 == 4
    fuse = FUSES[seed % 4]
    full_h, full_w = (h - 1) * sh + fh, (w - 1) * sw + fw
    g = Graph()
    in_shape = (n, depth_in, h, w) if nchw else (n, h, w, depth_in)
    x = g.binary(Op.ADD, g.input(in_shape), g.const(0.5), in_shape)
    weights = g.const(rng.uniform(-1, 1, (depth_out, fh, fw, depth_in)).astype(np.float32))
    bias = g.const(rng.uniform(-1, 1, depth_out).astype(np.float32) * (seed % 3 != 0))
    if implicit:
        scheme = PaddingCode.SAME if seed % 2 else PaddingCode.VALID
        out_h, out_w = (h * sh, w * sw) if scheme == PaddingCode.SAME else (full_h, full_w)
        out_shape = (n, depth_out, out_h, out_w) if nchw else (n, out_h, out_w, depth_out)
        shape = g.const(np.array(out_shape, np.int32), OperandCode.TENSOR_INT32)
        args = [shape, g.const(int(scheme), I32)]
    else:
        top, left = int(rng.integers(0, fh)), int(rng.integers(0, fw))
        # a tail from -2 (two rows of bias alone past the canvas) up to the rest of the filter
        bottom, right = int(rng.integers(-2, fh - top)), int(rng.integers(-2, fw - left))
        if full_h - top - bottom < 1 or full_w - left - right < 1:
            bottom, right = min(bottom, 0), min(right, 0)
        out_h, out_w = full_h - top - bottom, full_w - left - right
        args = [g.const(v, I32) for v in (left, right, top, bottom)]
    out_shape = (n, depth_out, out_h, out_w) if nchw else (n, out_h, out_w, depth_out)
    inputs = [x, weights, bias, *args, g.const(sw, I32), g.const(sh, I32), g.fuse(fuse)]
    inputs.append(g.const(nchw, OperandCode.BOOL))
    y = g.op(Op.TRANSPOSE_CONV_2D, inputs, out_shape)
    g.output(g.binary(Op.MUL, y, g.const(2.0), out_shape))
    return g, in_shape, fuse


@pytest.mark.parametrize("implicit", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_a_transposed_convolution_is_one_c_step(
    seed: int, implicit: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(900 + seed + 1000 * implicit)
    g, in_shape, _ = transposed(rng, seed, implicit)
    planned, one_by_one = both(g.model(), monkeypatch)
    steps = kinds(planned)
    assert steps.count(c_plan.TRANSPOSE_CONV) == 1
    assert len(one_by_one.main._plan) == 3  # the plan really was off there
    for _ in range(2):  # the arena is reused: the second run starts from the first's bytes
        feed = rng.uniform(-4, 4, in_shape).astype(np.float32)
        (got,), (want,) = planned.run([feed]), one_by_one.run([feed])
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", [4, 9])  # NCHW; out_c 3 (narrow) and 8 (wide)
def test_an_nchw_layer_is_one_step_reading_and_writing_nchw(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(3)
    g, in_shape, _ = transposed(rng, seed, False)
    planned, one_by_one = both(g.model(), monkeypatch)
    assert kinds(planned) == [c_plan.ADD, c_plan.TRANSPOSE_CONV, c_plan.MUL]
    feed = rng.uniform(-4, 4, in_shape).astype(np.float32)
    np.testing.assert_allclose(
        planned.run([feed])[0], one_by_one.run([feed])[0], rtol=1e-5, atol=1e-5
    )


def test_a_filter_given_at_run_time_stays_the_operations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    g = Graph()
    shape, out = (1, 3, 4, 2), (1, 6, 8, 5)
    x = g.binary(Op.ADD, g.input(shape), g.const(0.5), shape)
    w = g.input((5, 2, 2, 2))
    args = [g.const(v, I32) for v in (0, 0, 0, 0, 2, 2)]
    y = g.op(Op.TRANSPOSE_CONV_2D, [x, w, g.const(np.zeros(5, np.float32)), *args,
                                    g.fuse(), g.const(False, OperandCode.BOOL)], out)  # fmt: skip
    g.output(g.binary(Op.MUL, y, g.const(2.0), out))
    planned, one_by_one = both(g.model(), monkeypatch)
    assert len(planned.main._plan) == 3
    rng = np.random.default_rng(5)
    feeds = [rng.uniform(-1, 1, shape).astype(np.float32), rng.uniform(-1, 1, (5, 2, 2, 2))]
    feeds[1] = feeds[1].astype(np.float32)
    np.testing.assert_array_equal(planned.run(feeds)[0], one_by_one.run(feeds)[0])
