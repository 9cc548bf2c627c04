"""More of the C plan's lowering (nnburst/cpu/plan.py): each planned run compared
with the same model run operation by operation (bit for bit), and the cases the
plan must leave to the operations.  Built with test_cpu_plan_layers' Net."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nnburst.codes import FuseCode, OperandCode, OperationCode
from nnburst.cpu import optimise, plan
from nnburst.operands import OperandInfo

from .test_cpu_plan_layers import Net, both, same_answers

Op = OperationCode
F32, I32 = OperandCode.TENSOR_FLOAT32, OperandCode.INT32
Q8 = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED


@pytest.fixture(autouse=True)
def graph_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(optimise, "ENABLED", False)
    monkeypatch.setattr(plan, "BLAS_MACS_IN_PLAN", 0)


def f32(*dims: int) -> OperandInfo:
    return OperandInfo(F32, tuple(dims))


def binary(net: Net, code: OperationCode, a: int, b: int, out: OperandInfo, fuse: int = 0) -> int:
    return net.op(code, [a, b, net.scalar(fuse)], out)


def steps(planned) -> int:
    """How many steps of the run loop the planned model takes."""
    return len(planned.main._plan)


@pytest.mark.parametrize("code", [Op.SUB, Op.DIV])
def test_one_element_on_the_left_of_a_sub_or_div(
    code: OperationCode, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(1)
    x = net.input(f32(3, 5))
    one = net.const(f32(1), np.array([1.5], np.float32))
    t = binary(net, code, one, x, f32(3, 5))
    net.output(binary(net, code, t, x, f32(3, 5)))
    assert steps(same_answers(net, monkeypatch)) == 1


# -- a random graph of values that live long and die early: the arena's reuse -----------------


def random_graph(seed: int) -> Net:
    """Float32 operations on a few sizes, each reading random earlier values (so some
    live across many steps while others die at once), a few returned on the way."""
    net = Net(seed)
    rng = net.rng
    rows = [int(v) for v in rng.integers(1, 5, 3)]
    values = [net.input(f32(r, 8)) for r in rows[:2]]
    for _ in range(24):
        a = values[int(rng.integers(0, len(values)))]
        shape = net.info(a).dimensions
        same = [v for v in values if net.info(v).dimensions == shape]
        b = same[int(rng.integers(0, len(same)))]
        kind = int(rng.integers(0, 8))
        if kind < 4:
            code = (Op.ADD, Op.SUB, Op.MUL, Op.MAXIMUM)[kind]
            inputs = [a, b] + ([net.scalar(int(rng.integers(0, 4)))] if kind < 3 else [])
            t = net.op(code, inputs, f32(*shape))
        elif kind == 4:
            t = net.op(Op.RELU6, [a], f32(*shape))
        elif kind == 5:
            t = net.concat([a, b], 0)
        elif kind == 6 and shape[0] > 1:
            t = net.op(
                Op.SLICE,
                [a, net.vector([1, 0]), net.vector([shape[0] - 1, 8])],
                f32(shape[0] - 1, 8),
            )
        else:
            flat = net.reshape(a, (shape[0] * 8,))
            t = net.reshape(net.op(Op.RELU1, [flat], f32(shape[0] * 8)), shape)
        values.append(t)
        if rng.random() < 0.15:
            net.output(t)
    net.output(values[-1])
    return net


@pytest.mark.parametrize("seed", range(8))
def test_a_random_graph_with_long_and_short_lived_values_gives_the_operations_bits(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned = same_answers(random_graph(900 + seed), monkeypatch)
    assert steps(planned) == 1


# -- how much is planned ------------------------------------------------------------------


def test_a_run_of_two_is_planned_and_a_run_of_one_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """EXP is no C step: it cuts the operations into runs of 1 and 2."""
    net = Net(2)
    x = net.input(f32(2, 3))
    t = net.op(Op.RELU, [x], f32(2, 3))
    t = net.op(Op.EXP, [t], f32(2, 3))
    t = binary(net, Op.ADD, t, x, f32(2, 3))
    t = net.op(Op.RELU6, [t], f32(2, 3))
    net.output(net.op(Op.EXP, [t], f32(2, 3)))
    planned = same_answers(net, monkeypatch)
    assert steps(planned) == 4  # RELU, EXP, the ADD + RELU6 run, EXP


def test_a_large_1x1_convolution_keeps_blas(monkeypatch: pytest.MonkeyPatch) -> None:
    net = Net(3)
    x = net.input(f32(1, 4, 4, 8))
    w = net.const(f32(4, 1, 1, 8), net.rng.normal(0, 1, (4, 1, 1, 8)))
    b = net.const(f32(4), net.rng.normal(0, 1, 4))
    args = [x, w, b, net.scalar(1), net.scalar(1), net.scalar(1), net.scalar(0)]
    t = net.op(Op.CONV_2D, args, f32(1, 4, 4, 4))  # 4 outputs: BLAS's 1x1 route
    t = net.op(Op.RELU, [t], f32(1, 4, 4, 4))
    net.output(net.op(Op.RELU6, [t], f32(1, 4, 4, 4)))
    macs = 4 * 4 * 8 * 4
    monkeypatch.setattr(plan, "BLAS_MACS_IN_PLAN", macs)
    planned, _ = both(net.model(), monkeypatch)
    assert steps(planned) == 1  # at the limit: in the plan
    monkeypatch.setattr(plan, "BLAS_MACS_IN_PLAN", macs - 1)
    planned, _ = both(net.model(), monkeypatch)
    assert steps(planned) == 2  # the convolution, then the two clamps


# -- elementwise: broadcasts the plan takes and those it leaves ------------------------------


@pytest.mark.parametrize(
    "a_shape, b_shape, out_shape",
    [
        ((2, 3, 4), (4,), (2, 3, 4)),
        ((2, 3, 4), (3, 1), (2, 3, 4)),
        ((2, 3, 4), (1, 3, 4), (2, 3, 4)),
        ((2, 3, 4), (2, 1, 1), (2, 3, 4)),
        ((4,), (2, 3, 4), (2, 3, 4)),
        ((1, 1, 4), (2, 3, 4), (2, 3, 4)),
        ((2, 1, 4), (2, 3, 1), (2, 3, 4)),
        ((2, 3, 4), (2, 1, 4), (2, 3, 4)),
        ((3, 4), (1, 1, 1), (1, 3, 4)),
    ],
    ids=str,
)
@pytest.mark.parametrize("code", [Op.SUB, Op.MUL, Op.MINIMUM])
def test_binary_operations_of_any_broadcast_give_the_operations_bits(
    code: OperationCode, a_shape: tuple, b_shape: tuple, out_shape: tuple,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    net = Net(4)
    a, b = net.input(f32(*a_shape)), net.input(f32(*b_shape))
    fused = code in (Op.ADD, Op.SUB, Op.MUL, Op.DIV)
    extra = [net.scalar(FuseCode.RELU1)] if fused else []
    t = net.op(code, [a, b, *extra], f32(*out_shape))
    net.output(net.op(Op.RELU6, [t], f32(*out_shape)))
    same_answers(net, monkeypatch, planned_run=False)


@pytest.mark.parametrize("alpha_shape", [(1,), (4,), (3, 4), (2, 3, 4), (3, 1)], ids=str)
def test_prelu_of_any_alpha_gives_the_operations_bits(
    alpha_shape: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(5)
    x = net.input(f32(2, 3, 4))
    alpha = net.const(f32(*alpha_shape), net.rng.uniform(-1, 1, alpha_shape))
    t = net.op(Op.PRELU, [x, alpha], f32(2, 3, 4))
    net.output(net.op(Op.HARD_SWISH, [t], f32(2, 3, 4)))
    same_answers(net, monkeypatch, planned_run=False)


def test_an_activation_given_at_run_time_is_left_to_the_operation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = Net(6)
    x = net.input(f32(2, 3))
    fuse = net.input(OperandInfo(I32, ()))
    t = net.op(Op.ADD, [x, x, fuse], f32(2, 3))
    net.output(net.op(Op.RELU, [t], f32(2, 3)))
    planned, one_by_one = both(net.model(), monkeypatch)
    assert steps(planned) == 2
    values = [net.rng.uniform(-9, 9, (2, 3)).astype(np.float32), np.int32(FuseCode.RELU1)]
    np.testing.assert_array_equal(planned.run(values)[0], one_by_one.run(values)[0])


# -- moves: the parameters the random chains leave out --------------------------------------


def q8(*dims: int, scale: float = 0.05, zero: int = 3) -> OperandInfo:
    return OperandInfo(Q8, tuple(dims), scale, zero)


@pytest.mark.parametrize("axis", [-1, -3, 1])
@pytest.mark.parametrize("code", [F32, Q8], ids=["float32", "int8"])
def test_a_concatenation_on_any_axis_gives_the_operations_bits(
    code: OperandCode, axis: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(10)
    info = f32(2, 3, 4) if code == F32 else q8(2, 3, 4)
    x, y = net.input(info), net.input(info)
    dims = [2, 3, 4]
    dims[axis] *= 3
    out = dataclasses.replace(info, dimensions=tuple(dims))
    t = net.op(Op.CONCATENATION, [x, y, x, net.scalar(axis)], out)
    net.output(net.reshape(t, (int(np.prod(dims)),)))
    assert steps(same_answers(net, monkeypatch)) == 1


def test_a_concatenation_of_other_quantizations_is_left_to_the_operation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = Net(11)
    x, y = net.input(q8(2, 3)), net.input(q8(2, 3, scale=0.1))
    t = net.op(Op.CONCATENATION, [x, y, net.scalar(0)], q8(4, 3))
    net.output(
        net.op(
            Op.PAD,
            [t, net.const(OperandInfo(OperandCode.TENSOR_INT32, (2, 2)), np.ones((2, 2)))],
            q8(6, 5),
        )
    )
    planned = same_answers(net, monkeypatch, planned_run=False)
    assert steps(planned) == 2


@pytest.mark.parametrize(
    "begin, end, strides, masks, out",
    [
        ([0, 1, 0], [2, 3, 4], [1, 1, 2], (0, 0, 0), (2, 2, 2)),
        ([1, 0, 3], [0, 3, 0], [-1, 1, -1], (0, 0, 0), (1, 3, 3)),
        ([1, 2, 1], [0, 0, 4], [1, -1, 1], (0b101, 0b011, 0), (2, 3, 4)),
        ([0, 1, 0], [2, 2, 4], [1, 1, 3], (0, 0, 0b010), (2, 2)),
        ([-1, -2, -3], [-3, -4, 4], [-1, -1, 1], (0, 0, 0), (2, 2, 3)),
    ],
    ids=str,
)
def test_strided_slices_with_masks_and_reversals_give_the_operations_bits(
    begin: list, end: list, strides: list, masks: tuple, out: tuple,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    net = Net(12)
    x = net.input(f32(2, 3, 4))
    t = net.op(Op.RELU, [x], f32(2, 3, 4))
    args = [t, net.vector(begin), net.vector(end), net.vector(strides)]
    args += [net.scalar(m) for m in masks]
    s = net.op(Op.STRIDED_SLICE, args, f32(*out))
    net.output(net.op(Op.RELU6, [s], f32(*out)))
    assert steps(same_answers(net, monkeypatch)) == 1


@pytest.mark.parametrize(
    "begin, size, out",
    [([0, 1, 2], [2, 2, 2], (2, 2, 2)), ([1, 0, 0], [-1, -1, 3], (1, 3, 3))],
    ids=str,
)
def test_slices_with_sizes_to_the_end_give_the_operations_bits(
    begin: list, size: list, out: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(13)
    x = net.input(f32(2, 3, 4))
    t = net.op(Op.RELU, [x], f32(2, 3, 4))
    s = net.op(Op.SLICE, [t, net.vector(begin), net.vector(size)], f32(*out))
    net.output(net.op(Op.RELU6, [s], f32(*out)))
    assert steps(same_answers(net, monkeypatch)) == 1


@pytest.mark.parametrize("perm", [[2, 0, 1], [1, 2, 0], [0, 2, 1]], ids=str)
def test_transposes_of_any_permutation_give_the_operations_bits(
    perm: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(14)
    x = net.input(q8(2, 3, 4))
    dims = [(2, 3, 4)[p] for p in perm]
    t = net.op(Op.TRANSPOSE, [x, net.vector(perm)], q8(*dims))
    net.output(net.reshape(t, (24,)))
    assert steps(same_answers(net, monkeypatch)) == 1


@pytest.mark.parametrize("code", [F32, Q8, OperandCode.TENSOR_QUANT8_ASYMM], ids=str)
def test_a_pad_fills_with_zero_or_the_zero_point(
    code: OperandCode, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(16)
    info = OperandInfo(code, (2, 3, 4), *(() if code == F32 else (0.5, 7)))
    x = net.input(info)
    rows = np.array([[1, 0], [0, 2], [3, 1]])
    paddings = net.const(OperandInfo(OperandCode.TENSOR_INT32, (3, 2)), rows)
    t = net.op(Op.PAD, [x, paddings], dataclasses.replace(info, dimensions=(3, 5, 8)))
    net.output(net.reshape(t, (120,)))
    assert steps(same_answers(net, monkeypatch)) == 1


@pytest.mark.parametrize(
    "code", [OperandCode.TENSOR_QUANT8_ASYMM, Q8, OperandCode.TENSOR_QUANT8_SYMM], ids=str
)
def test_dequantize_of_every_8_bit_type_gives_the_operations_bits(
    code: OperandCode, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(18)
    zero = 0 if code == OperandCode.TENSOR_QUANT8_SYMM else 5
    x = net.input(OperandInfo(code, (3, 4), 0.037, zero))
    t = net.op(Op.DEQUANTIZE, [x], f32(3, 4))
    net.output(net.op(Op.RELU6, [t], f32(3, 4)))
    planned, one_by_one = both(net.model(), monkeypatch)
    assert steps(planned) == 1
    info = np.iinfo(net.info(x).dtype)
    values = [np.arange(info.min, info.min + 12).reshape(3, 4).astype(info.dtype)]
    values[0].flat[-1] = info.max
    np.testing.assert_array_equal(planned.run(values)[0], one_by_one.run(values)[0])


def test_a_uint8_logistic_is_a_lookup_of_its_own_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    u8 = OperandCode.TENSOR_QUANT8_ASYMM
    net = Net(19)
    x = net.input(OperandInfo(u8, (4, 64), 0.1, 128))
    t = net.op(Op.LOGISTIC, [x], OperandInfo(u8, (4, 64), 1 / 256, 0))
    net.output(net.op(Op.TANH, [t], OperandInfo(u8, (4, 64), 1 / 128, 128)))
    planned, one_by_one = both(net.model(), monkeypatch)
    assert steps(planned) == 1
    every = [np.arange(256, dtype=np.uint8).reshape(4, 64)]
    np.testing.assert_array_equal(planned.run(every)[0], one_by_one.run(every)[0])
