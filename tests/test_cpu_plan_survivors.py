"""The C plan's planner (nnburst/cpu/plan.py) where mutation testing found the
other tests blind (issue 32, fifth pass).

A lowering that refuses an operation it should take is not seen by comparing
answers: the operation then runs on its own, with the same values.  So these
tests also say which operations become C steps, at the edges of what the plan
takes (the largest rank, the most copies) and just past them."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from nnburst._bindings import plan as c_plan
from nnburst.codes import FuseCode, OperandCode
from nnburst.cpu import plan
from nnburst.operands import OperandInfo
from tests.test_cpu_plan_layers import F32, Net, Op, both, feed

T32 = OperandCode.TENSOR_INT32
F16 = OperandCode.TENSOR_FLOAT16
U8 = OperandCode.TENSOR_QUANT8_ASYMM
BOOL = OperandCode.BOOL


def c_calls(net: Net, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each step of the planned run loop, whether it is a C plan, after
    checking the run gives the operations' own answers bit for bit."""
    planned, one_by_one = both(net.model(), monkeypatch)
    for _ in range(2):
        values = feed(net)
        for got, want in zip(planned.run(values), one_by_one.run(values)):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    return [hasattr(op.kernel, "plan_table") for op in planned.main._plan]


def f32(*dims: int) -> OperandInfo:
    return OperandInfo(F32, dims)


# -- the largest rank a copy takes ------------------------------------------------------

RANK6 = (2, 1, 3, 2, 1, 2)


def rank6_move(net: Net, kind: str, x: int) -> int:
    if kind == "TRANSPOSE":
        perm = [5, 0, 4, 1, 3, 2]
        return net.op(Op.TRANSPOSE, [x, net.vector(perm)], f32(*(RANK6[p] for p in perm)))
    if kind == "SLICE":
        begin, size = [1, 0, 1, 0, 0, 1], [1, 1, 2, 2, 1, 1]
        return net.op(Op.SLICE, [x, net.vector(begin), net.vector(size)], f32(*size))
    if kind == "STRIDED_SLICE":
        args = [x, net.vector([0, 0, 2, 1, 0, 0]), net.vector([2, 1, -4, 2, 1, 2])]
        args += [net.vector([1, 1, -2, 1, 1, 1]), net.scalar(0), net.scalar(0), net.scalar(0)]
        return net.op(Op.STRIDED_SLICE, args, f32(2, 1, 2, 1, 1, 2))
    if kind == "PAD":
        rows = np.array([[0, 1], [1, 0], [0, 0], [2, 1], [0, 0], [1, 1]])
        paddings = net.const(OperandInfo(T32, (6, 2)), rows)
        return net.op(Op.PAD, [x, paddings], f32(*(d + int(r.sum()) for d, r in zip(RANK6, rows))))
    if kind == "MIRROR_PAD":
        rows = np.zeros((6, 2), np.int32)
        rows[2] = (2, 1)
        paddings = net.const(OperandInfo(T32, (6, 2)), rows)
        out = f32(2, 1, 6, 2, 1, 2)
        return net.op(Op.MIRROR_PAD, [x, paddings, net.scalar(0)], out)  # REFLECT
    assert kind == "CONCATENATION"
    return net.op(Op.CONCATENATION, [x, x, net.scalar(3)], f32(2, 1, 3, 4, 1, 2))


MOVES = ["TRANSPOSE", "SLICE", "STRIDED_SLICE", "PAD", "MIRROR_PAD", "CONCATENATION"]


@pytest.mark.parametrize("kind", MOVES)
def test_moves_of_the_largest_rank_are_c_steps(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(RANK6) == c_plan.MAX_RANK
    net = Net(1)
    moved = rank6_move(net, kind, net.input(f32(*RANK6)))
    net.output(net.op(Op.RELU, [moved], net.info(moved)))
    assert c_calls(net, monkeypatch) == [True]


# -- views ------------------------------------------------------------------------------


def test_a_reshape_inside_a_run_is_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    net = Net(2)
    x = net.input(f32(3, 4))
    t = net.op(Op.RELU, [x], f32(3, 4))
    t = net.reshape(t, (2, 6))
    net.output(net.op(Op.RELU6, [t], f32(2, 6)))
    assert c_calls(net, monkeypatch) == [True]


def test_a_reshape_to_a_shape_given_at_run_time_is_its_own_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shape is the model's first operand (index 0), fed with each request."""
    net = Net(3)
    shape = net.input(OperandInfo(T32, (2,)))
    assert shape == 0
    x = net.input(f32(3, 4))
    t = net.op(Op.RELU, [x], f32(3, 4))
    t = net.op(Op.RESHAPE, [t, shape], f32(2, 6))
    net.output(net.op(Op.RELU6, [t], f32(2, 6)))
    planned, one_by_one = both(net.model(), monkeypatch)
    steps = [op.signature.code.name for op in planned.main._plan]
    assert steps == ["RELU", "RESHAPE", "RELU6"]
    values = [np.array([2, 6], np.int32), np.linspace(-9, 9, 12, dtype=np.float32).reshape(3, 4)]
    np.testing.assert_array_equal(planned.run(values)[0], one_by_one.run(values)[0])


# -- what the plan leaves to the operation ----------------------------------------------


def test_a_dequantize_to_float16_stays_the_operations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = Net(4)
    x = net.input(OperandInfo(U8, (3, 4), 0.25, 100))
    net.output(net.op(Op.DEQUANTIZE, [x], OperandInfo(F16, (3, 4))))
    assert c_calls(net, monkeypatch) == [False]


def test_a_softmax_over_the_first_of_two_axes_stays_the_operations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = Net(5)
    x = net.input(f32(3, 2))
    beta = net.const(OperandInfo(OperandCode.FLOAT32, ()), np.float32(1.0))
    soft = net.op(Op.SOFTMAX, [x, beta, net.scalar(0)], f32(3, 2))
    net.output(net.op(Op.RELU, [soft], f32(3, 2)))
    assert c_calls(net, monkeypatch) == [False, True]


def test_a_mirror_pad_of_nothing_is_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    net = Net(6)
    x = net.input(f32(3, 4))
    paddings = net.const(OperandInfo(T32, (2, 2)), np.zeros((2, 2)))
    padded = net.op(Op.MIRROR_PAD, [x, paddings, net.scalar(1)], f32(3, 4))
    net.output(net.op(Op.RELU, [padded], f32(3, 4)))
    assert c_calls(net, monkeypatch) == [True]


@pytest.mark.parametrize("count", [plan.MAX_GATHER_COPIES, plan.MAX_GATHER_COPIES + 1])
def test_a_gather_of_at_most_the_copies_it_takes_is_c_steps(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(7)
    x = net.input(f32(2, 5, 3))
    picks = net.const(OperandInfo(T32, (count,)), np.arange(count) % 5)
    gathered = net.op(Op.GATHER, [x, net.scalar(1), picks], f32(2, count, 3))
    net.output(net.op(Op.RELU, [gathered], f32(2, count, 3)))
    assert c_calls(net, monkeypatch) == (
        [True] if count <= plan.MAX_GATHER_COPIES else [False, True]
    )


def nearest(net: Net, x: int, out_h: int, out_w: int) -> int:
    n, h, w, c = net.info(x).dimensions or ()
    args = [x, net.scalar(out_w), net.scalar(out_h)]
    args += [net.const(OperandInfo(BOOL, ()), np.bool_(False)) for _ in range(3)]
    return net.op(Op.RESIZE_NEAREST_NEIGHBOR, args, f32(n, out_h, out_w, c))


@pytest.mark.parametrize(
    "out_h, out_w, planned",
    [
        (8, 8, True),  # 4 x 4
        (16, 4, True),  # 8 x 2
        (16, 6, True),  # 8 x 3: any whole factors are one copy with repeating strides
        (3, 4, False),  # 1.5 x 2: no whole factor down
        (4, 3, False),  # 2 x 1.5 across
        (1, 2, False),  # half the rows: no factor at all
    ],
)
def test_a_nearest_resize_by_whole_factors_is_a_c_step(
    out_h: int, out_w: int, planned: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(8)
    x = net.input(f32(1, 2, 2, 3))
    resized = nearest(net, x, out_h, out_w)
    net.output(net.op(Op.RELU, [resized], net.info(resized)))
    assert c_calls(net, monkeypatch) == ([True] if planned else [False, True])


def test_an_nchw_depth_to_space_stays_the_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    net = Net(9)
    x = net.input(f32(1, 8, 2, 3))  # NCHW: 8 channels, 2 x 3
    nchw = net.const(OperandInfo(BOOL, ()), np.bool_(True))
    moved = net.op(Op.DEPTH_TO_SPACE, [x, net.scalar(2), nchw], f32(1, 2, 4, 6))
    net.output(net.op(Op.RELU, [moved], f32(1, 2, 4, 6)))
    assert c_calls(net, monkeypatch) == [False, True]


def test_quantized_logistic_and_tanh_are_byte_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    net = Net(10)
    x = net.input(OperandInfo(U8, (4, 64), 0.05, 128))
    squashed = net.op(Op.LOGISTIC, [x], OperandInfo(U8, (4, 64), 1 / 256, 0))
    net.output(net.op(Op.TANH, [squashed], OperandInfo(U8, (4, 64), 1 / 128, 128)))
    assert c_calls(net, monkeypatch) == [True]


# -- what a planned run says -------------------------------------------------------------


def test_a_planned_run_is_logged_with_its_operations_steps_and_arena(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(11)
    x, y = net.input(f32(3, 5)), net.input(f32(3, 5))
    t = net.op(Op.ADD, [x, y, net.scalar(FuseCode.NONE)], f32(3, 5))
    net.output(net.op(Op.MUL, [t, x, net.scalar(FuseCode.NONE)], f32(3, 5)))
    with caplog.at_level(logging.DEBUG, logger="nnburst.compilation.plan"):
        both(net.model(), monkeypatch)
    (message,) = [r.getMessage() for r in caplog.records if r.name.endswith(".plan")]
    # the ADD's 60 bytes take one 64-byte block of the arena
    assert message == "plan: 2 operations (ADD, MUL) as one C call of 2 steps, arena 64 bytes"


# -- bound kernels as steps ----------------------------------------------------------------


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
def test_an_nchw_layer_is_a_c_step_between_two_transposing_copies(
    depthwise: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan, "BLAS_MACS_IN_PLAN", 1 << 30)
    net = Net(12)
    x = net.input(f32(1, 3, 5, 4))  # NCHW
    t = net.conv(x, 6, depthwise=depthwise, nchw=True)
    net.output(net.op(Op.RELU, [t], net.info(t)))
    assert c_calls(net, monkeypatch) == [True]


def test_a_channel_padded_add_clamps_to_its_fused_activation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ADD(a, PAD(x)) of the channels (fusion.py's pair) with RELU6 fused, inside a
    run: sums below 0 and above 6 both occur and are clamped."""
    net = Net(13)
    a, x = net.input(f32(2, 3, 5)), net.input(f32(2, 3, 3))
    none = net.scalar(FuseCode.NONE)
    shifted = net.op(Op.ADD, [a, net.const(f32(1), np.float32([-3.0])), none], f32(2, 3, 5))
    scaled = net.op(Op.MUL, [x, net.const(f32(1), np.float32([8.0])), none], f32(2, 3, 3))
    rows = net.const(OperandInfo(T32, (3, 2)), np.array([[0, 0], [0, 0], [0, 2]]))
    padded = net.op(Op.PAD, [scaled, rows], f32(2, 3, 5))
    net.output(net.op(Op.ADD, [shifted, padded, net.scalar(FuseCode.RELU6)], f32(2, 3, 5)))
    assert c_calls(net, monkeypatch) == [True]


def test_a_plan_for_two_threads_gives_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Built to split its convolutions over two kernel threads (no work too small)."""
    from nnburst.cpu import threads

    monkeypatch.setattr(threads, "MIN_WORK", 0)
    net = Net(14)
    x = net.input(f32(1, 9, 8, 3))
    t = net.conv(x, 8)
    net.output(net.op(Op.RELU, [t], net.info(t)))
    with threads.asked(2):
        assert c_calls(net, monkeypatch) == [True]
        planned, _ = both(net.model(), monkeypatch)
    assert planned.main._plan[0].kernel.plan_table.threads == 2


def test_a_prelu_with_a_slope_per_element_is_a_c_step(monkeypatch: pytest.MonkeyPatch) -> None:
    net = Net(15)
    x = net.input(f32(3, 4))
    slope = net.const(f32(3, 4), np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4))
    t = net.op(Op.PRELU, [x, slope], f32(3, 4))
    net.output(net.op(Op.RELU1, [t], f32(3, 4)))
    assert c_calls(net, monkeypatch) == [True]


@pytest.mark.parametrize("flags", [0, 1], ids=["layout only", "NCHW"])
def test_a_nearest_resize_without_corner_flags_is_c_steps_and_an_nchw_one_is_not(
    flags: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(16)
    x = net.input(f32(1, 2, 3, 4))
    nhwc = net.const(OperandInfo(BOOL, ()), np.bool_(False))
    args = [x, net.scalar(6), net.scalar(4), nhwc]  # width 6, height 4, no corner flags
    out = f32(1, 4, 6, 4)
    if flags:  # NCHW: 2 channels of 3 x 4 to 6 x 8
        args = [x, net.scalar(8), net.scalar(6), net.const(OperandInfo(BOOL, ()), np.bool_(True))]
        out = f32(1, 2, 6, 8)
    resized = net.op(Op.RESIZE_NEAREST_NEIGHBOR, args, out)
    net.output(net.op(Op.RELU, [resized], out))
    assert c_calls(net, monkeypatch) == ([False, True] if flags else [True])
