"""More of the graph optimiser's rewrites (nnburst/cpu/optimise.py), each against
the graph as written, and the guards that must keep a rewrite from firing: the
constant on the other side, a value read twice or returned, shapes that broadcast,
bounds NNAPI has no activation for.  Built with test_graph_optimiser's Graph."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from nnburst.codes import FuseCode, OperandCode, OperationCode
from nnburst.cpu import optimise
from nnburst.hal.model import Lifetime, Operand, Operation
from nnburst.operands import OperandInfo

from .test_graph_optimiser import NHWC, Graph, codes, compare, hard_swish, prepared

Op = OperationCode
F32, I32 = OperandCode.TENSOR_FLOAT32, OperandCode.INT32


def fuse_codes(g: Graph, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The fused activation (last input) of each operation of the optimised graph."""
    subgraph = prepared(g.model(), True, monkeypatch).main.subgraph
    return [int(subgraph.operands[op.inputs[-1]].value) for op in subgraph.operations]


# -- folding into a layer -----------------------------------------------------------


@pytest.mark.parametrize("code", [Op.ADD, Op.SUB])
def test_a_shift_after_a_fully_connected_layer_folds_into_its_bias(
    code: OperationCode, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    fc = g.fully_connected(g.input((1, 6)), 6, 4)
    g.output(g.binary(code, fc, g.const([0.5, -1.0, 2.0, 3.5]), (1, 4), FuseCode.RELU))
    assert compare(g, monkeypatch) == ["FULLY_CONNECTED"]
    assert fuse_codes(g, monkeypatch) == [FuseCode.RELU]


def test_a_constant_minus_a_layer_is_not_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    fc = g.fully_connected(g.input((1, 6)), 6, 4)
    g.output(g.binary(Op.SUB, g.const([0.5, -1.0, 2.0, 3.5]), fc, (1, 4)))
    assert compare(g, monkeypatch) == ["FULLY_CONNECTED", "SUB"]


@pytest.mark.parametrize("code", [Op.MUL, Op.ADD])
def test_a_constant_first_folds_into_a_depthwise_layer(
    code: OperationCode, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    dw = g.depthwise(g.input(NHWC), NHWC)
    g.output(g.binary(code, g.const([[[[0.5, -2.0, 3.0]]]]), dw, NHWC, FuseCode.RELU6))
    assert compare(g, monkeypatch) == ["DEPTHWISE_CONV_2D"]
    assert fuse_codes(g, monkeypatch) == [FuseCode.RELU6]


@pytest.mark.parametrize(
    "guard",
    [
        "not finite",
        "integer constant",
        "broadcasts up",
        "no bias constant",
        "two outputs",
        "per row",
        "division",
    ],
)
def test_what_cannot_fold_into_a_fully_connected_layer_is_left(
    guard: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    x = g.input((2, 6))
    rng = np.random.default_rng(2)
    w = g.const(rng.normal(0, 0.5, (4, 6)))
    b = g.input((4,)) if guard == "no bias constant" else g.const(rng.normal(0, 0.5, 4))
    fc = g.op(Op.FULLY_CONNECTED, [x, w, b, g.fuse()], (2, 4))
    scale = {
        "not finite": g.const([1.0, np.inf, 2.0, 1.0]),
        "integer constant": g.const([1, 2, 3, 4], OperandCode.TENSOR_INT32),
        "broadcasts up": g.const(np.ones((3, 2, 4))),
        "per row": g.const([[2.0], [3.0]]),
    }.get(guard, g.const([1.5, 2.0, -1.0, 0.5]))
    if guard == "integer constant":
        scale = g.const([1.0, 2.0, 3.0, 4.0])
        g.operands[scale] = Operand(
            OperandInfo(F32, (4,)), Lifetime.CONSTANT_COPY, np.array([1, 2, 3, 4], np.float64)
        )
    out = (3, 2, 4) if guard == "broadcasts up" else (2, 4)
    code = Op.DIV if guard == "division" else Op.MUL
    g.output(g.binary(code, fc, scale, out))
    if guard == "two outputs":
        g.output(fc)
    if guard == "integer constant":  # a float64 constant: no model validates, the guard alone
        subgraph = optimise.optimise(g.model().main)
        assert [op.code for op in subgraph.operations] == [Op.FULLY_CONNECTED, Op.MUL]
        return
    assert compare(g, monkeypatch) == ["FULLY_CONNECTED", code.name]


# -- activations ----------------------------------------------------------------------

#: (the producer's fused activation, the clamp after it) -> the one activation they make
NARROWED = [
    (FuseCode.NONE, Op.RELU, FuseCode.RELU),
    (FuseCode.NONE, Op.RELU1, FuseCode.RELU1),
    (FuseCode.NONE, Op.RELU6, FuseCode.RELU6),
    (FuseCode.RELU, Op.RELU6, FuseCode.RELU6),
    (FuseCode.RELU6, Op.RELU, FuseCode.RELU6),
    (FuseCode.RELU1, Op.RELU1, FuseCode.RELU1),
]


@pytest.mark.parametrize("fuse, clamp, want", NARROWED, ids=str)
def test_a_clamp_narrows_its_producers_activation(
    fuse: int, clamp: OperationCode, want: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    x, y = g.input((2, 5)), g.input((2, 5))
    g.output(g.op(clamp, [g.binary(Op.SUB, x, y, (2, 5), fuse)], (2, 5)))
    assert compare(g, monkeypatch, exact=True) == ["SUB"]
    assert fuse_codes(g, monkeypatch) == [want]


@pytest.mark.parametrize(
    "fuse, clamp", [(FuseCode.RELU1, Op.RELU6), (FuseCode.RELU6, Op.RELU1)], ids=str
)
def test_two_activations_that_make_no_nnapi_one_stay_two(
    fuse: int, clamp: OperationCode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELU1 then RELU6 clamps to [0, 1], which no fused activation is."""
    g = Graph()
    x, y = g.input((2, 5)), g.input((2, 5))
    g.output(g.op(clamp, [g.binary(Op.ADD, x, y, (2, 5), fuse)], (2, 5)))
    assert compare(g, monkeypatch, exact=True) == ["ADD", clamp.name]


#: (the first clamp, the second one and its bound) -> the one RELU they make
TWO_CLAMPS = [
    ((Op.RELU6, None), (Op.MAXIMUM, 0.0), "RELU6"),
    ((Op.RELU, None), (Op.MINIMUM, 6.0), "RELU6"),
    ((Op.RELU, None), (Op.MAXIMUM, -1.0), "RELU"),
    ((Op.MAXIMUM, -1.0), (Op.MINIMUM, 1.0), "RELU1"),
    ((Op.RELU1, None), (Op.MAXIMUM, -1.0), "RELU1"),
    ((Op.MINIMUM, 1.0), (Op.MAXIMUM, -1.0), "RELU1"),
]


@pytest.mark.parametrize("first, second, want", TWO_CLAMPS, ids=str)
def test_two_clamps_in_a_row_are_one_relu(
    first: tuple, second: tuple, want: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    x = g.input((2, 5))
    t = x
    for code, bound in (first, second):
        t = g.op(code, [t] if bound is None else [t, g.const(bound)], (2, 5))
    g.output(t)
    assert compare(g, monkeypatch, exact=True) == [want]


@pytest.mark.parametrize(
    "guard", ["bound per element", "bound broadcasts x", "inner read twice", "not a clamp inside"]
)
def test_a_maximum_or_minimum_that_is_no_clamp_of_x_is_left(
    guard: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    x = g.input((2, 5))
    if guard == "bound per element":
        g.output(g.op(Op.MAXIMUM, [x, g.const(np.linspace(-1, 1, 10).reshape(2, 5))], (2, 5)))
        want = ["MAXIMUM"]
    elif guard == "bound broadcasts x":
        g.output(g.op(Op.MAXIMUM, [g.input((5,)), g.const(np.zeros((2, 5)))], (2, 5)))
        want = ["MAXIMUM"]
    elif guard == "inner read twice":
        inner = g.output(g.op(Op.RELU, [x], (2, 5)))
        g.output(g.op(Op.MINIMUM, [inner, g.const(6.0)], (2, 5)))
        want = ["RELU", "MINIMUM"]
    else:
        neg = g.op(Op.NEG, [x], (2, 5))
        g.output(g.op(Op.MINIMUM, [neg, g.const(6.0)], (2, 5)))
        want = ["NEG", "MINIMUM"]
    assert compare(g, monkeypatch, exact=True) == want


@pytest.mark.parametrize("alpha", [0.0, [0.0, 0.25, 0.5, 0.75, 1.0]], ids=str)
def test_a_leaky_relu_at_the_edges_of_its_slope_is_prelu(
    alpha: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    x = g.input((2, 5))
    g.output(g.op(Op.MAXIMUM, [g.binary(Op.MUL, g.const(alpha), x, (2, 5)), x], (2, 5)))
    assert compare(g, monkeypatch, exact=True) == ["PRELU"]


@pytest.mark.parametrize(
    "guard", ["negative slope", "fused mul", "x times x", "product read twice", "another x"]
)
def test_what_is_not_a_leaky_relu_is_left(guard: str, monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x, y = g.input((2, 5)), g.input((2, 5))
    alpha = g.const(-0.5 if guard == "negative slope" else 0.25)
    fuse = FuseCode.RELU if guard == "fused mul" else FuseCode.NONE
    if guard == "x times x":
        scaled = g.binary(Op.MUL, x, x, (2, 5))
    else:
        scaled = g.binary(Op.MUL, y if guard == "another x" else x, alpha, (2, 5), fuse)
    g.output(g.op(Op.MAXIMUM, [x, scaled], (2, 5)))
    if guard == "product read twice":
        g.output(scaled)
    assert compare(g, monkeypatch, exact=True) == ["MUL", "MAXIMUM"]


def test_a_hard_swish_with_its_relu6_fused_into_the_add(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input((3, 7))
    gate = g.binary(Op.ADD, g.const(3.0), x, (3, 7), FuseCode.RELU6)
    product = g.binary(Op.MUL, gate, x, (3, 7))
    g.output(g.binary(Op.MUL, g.const(1 / 6), product, (3, 7)))
    assert compare(g, monkeypatch) == ["HARD_SWISH"]


@pytest.mark.parametrize(
    "guard",
    ["six over", "divide by 5", "times 0.17", "fused last", "fused product", "add fused relu"],
)
def test_more_that_is_not_a_hard_swish_is_left(guard: str, monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input((3, 7))
    if guard == "add fused relu":  # RELU(x + 3): no upper bound
        gate = g.binary(Op.ADD, x, g.const(3.0), (3, 7), FuseCode.RELU)
    else:
        gate = g.op(Op.RELU6, [g.binary(Op.ADD, x, g.const(3.0), (3, 7))], (3, 7))
    product = g.binary(Op.MUL, x, gate, (3, 7), FuseCode.RELU if guard == "fused product" else 0)
    last_fuse = FuseCode.RELU if guard == "fused last" else FuseCode.NONE
    if guard == "six over":
        g.output(g.binary(Op.DIV, g.const(6.0), product, (3, 7)))
    elif guard == "divide by 5":
        g.output(g.binary(Op.DIV, product, g.const(5.0), (3, 7)))
    elif guard == "times 0.17":
        g.output(g.binary(Op.MUL, product, g.const(0.17), (3, 7)))
    else:
        g.output(g.binary(Op.DIV, product, g.const(6.0), (3, 7), last_fuse))
    assert "HARD_SWISH" not in compare(g, monkeypatch)


# -- identities and constants -----------------------------------------------------------


def test_a_cast_to_its_own_type_and_x_over_one_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input((2, 6))
    same = g.op(Op.CAST, [x], (2, 6))
    over_one = g.binary(Op.DIV, same, g.const(1.0), (2, 6))
    times_one = g.binary(Op.MUL, g.const([1.0] * 6), over_one, (2, 6))
    g.output(g.binary(Op.SUB, times_one, x, (2, 6)))
    assert compare(g, monkeypatch, exact=True) == ["SUB"]


@pytest.mark.parametrize("guard", ["another shape", "other quantization", "fused", "not neutral"])
def test_what_is_no_identity_is_kept(guard: str, monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    if guard == "other quantization":
        q = OperandCode.TENSOR_QUANT8_ASYMM
        x = g._add(Operand(OperandInfo(q, (2, 6), 0.5, 3), Lifetime.SUBGRAPH_INPUT))
        g.inputs.append(x)
        shape = g.const([2, 6], OperandCode.TENSOR_INT32)
        out = g._add(Operand(OperandInfo(q, (2, 6), 0.25, 3), Lifetime.TEMPORARY_VARIABLE))
        g.operations.append(Operation(Op.RESHAPE, (x, shape), (out,)))
        g.output(g.op(Op.DEQUANTIZE, [out], (2, 6)))
        subgraph = optimise.optimise(g.model().main)
        assert [op.code for op in subgraph.operations] == [Op.RESHAPE, Op.DEQUANTIZE]
        return
    x = g.input((2, 6))
    if guard == "another shape":
        t = g.op(Op.RESHAPE, [x, g.const([3, 4], OperandCode.TENSOR_INT32)], (3, 4))
        g.output(g.binary(Op.ADD, t, t, (3, 4)))
        want = ["RESHAPE", "ADD"]
    elif guard == "fused":
        t = g.binary(Op.ADD, x, g.const(0.0), (2, 6), FuseCode.RELU)
        g.output(g.binary(Op.MUL, t, x, (2, 6)))
        want = ["ADD", "MUL"]
    else:
        t = g.binary(Op.MUL, x, g.const([1.0, 1.0, 1.0, 1.0, 1.0, 0.5]), (2, 6))
        g.output(g.binary(Op.MUL, t, x, (2, 6)))
        want = ["MUL", "MUL"]
    assert compare(g, monkeypatch, exact=True) == want


def test_an_identity_read_by_two_operations_feeds_both(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input((2, 6))
    same = g.binary(Op.ADD, x, g.const(0.0), (2, 6))
    a = g.binary(Op.MUL, same, g.const(2.0), (2, 6))
    b = g.binary(Op.SUB, same, x, (2, 6))
    g.output(g.binary(Op.ADD, a, b, (2, 6)))
    assert compare(g, monkeypatch, exact=True) == ["MUL", "SUB", "ADD"]


def test_chains_of_constants_are_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input((2, 3))
    a = g.binary(Op.MUL, g.const([[1.0, 2, 3], [4, 5, 6]]), g.const(0.5), (2, 3))
    b = g.op(Op.RELU, [g.binary(Op.SUB, a, g.const(1.0), (2, 3))], (2, 3))
    t = g.op(Op.TRANSPOSE, [b, g.const([1, 0], OperandCode.TENSOR_INT32)], (3, 2))
    back = g.op(Op.RESHAPE, [t, g.const([2, 3], OperandCode.TENSOR_INT32)], (2, 3))
    g.output(g.binary(Op.ADD, x, back, (2, 3)))
    assert compare(g, monkeypatch, exact=True) == ["ADD"]
    subgraph = prepared(g.model(), True, monkeypatch).main.subgraph
    (add,) = subgraph.operations
    folded = subgraph.operands[add.inputs[1]]
    assert folded.lifetime == Lifetime.CONSTANT_COPY
    np.testing.assert_array_equal(
        folded.value, np.maximum(np.array([[1, 2, 3], [4, 5, 6]]) * 0.5 - 1, 0).T.reshape(2, 3)
    )
    assert folded.info.dimensions == (2, 3)


def test_a_layer_of_constants_is_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input((1, 4))
    w, b = g.const(np.eye(4) * 2), g.const(np.arange(4.0))
    bias = g.op(Op.FULLY_CONNECTED, [g.const([[1.0, 2, 3, 4]]), w, b, g.fuse()], (1, 4))
    g.output(g.binary(Op.ADD, x, bias, (1, 4)))
    assert compare(g, monkeypatch, exact=True) == ["ADD"]


def test_what_is_never_computed_at_prepare_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    """An operation on constants whose result would be larger than
    MAX_FOLDED_BYTES runs when the model runs."""
    g = Graph()
    x = g.input((4,))
    big = g.op(Op.TILE, [g.const([1.0, 2.0]), g.const([4], OperandCode.TENSOR_INT32)], (8,))
    g.output(g.op(Op.RESHAPE, [big, g.const([2, 4], OperandCode.TENSOR_INT32)], (2, 4)))
    g.output(g.binary(Op.ADD, x, g.const(1.0), (4,)))
    monkeypatch.setattr(optimise, "MAX_FOLDED_BYTES", 31)
    assert compare(g, monkeypatch, exact=True) == ["TILE", "RESHAPE", "ADD"]
    monkeypatch.setattr(optimise, "MAX_FOLDED_BYTES", 32)  # 8 float32 values
    assert compare(g, monkeypatch, exact=True) == ["RESHAPE", "ADD"]


def test_an_operation_with_no_constant_input_is_not_run_at_prepare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    g = Graph()
    x = g.input((2, 3))
    t = g.op(Op.RELU, [x], (2, 3))
    g.output(g.binary(Op.ADD, t, g.const(1.0), (2, 3)))
    assert compare(g, monkeypatch, exact=True) == ["RELU", "ADD"]


# -- the rewritten graph written down and read back ----------------------------------------


# -- operations listed in another order than they run -------------------------------------


@pytest.mark.parametrize("guard", [None, "x + 2", "another x", "gate read elsewhere"])
def test_a_hard_swish_written_last_first(
    guard: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model's operations need not be listed in the order they run: met before its
    RELU6 is fused into the ADD, the chain is ADD, RELU6, MUL, DIV."""
    g = Graph()
    x, y = g.input((3, 7)), g.input((3, 7))
    shift = 2.0 if guard == "x + 2" else 3.0
    g.output(hard_swish(g, x, (3, 7), Op.DIV, shift, y if guard == "another x" else -1))
    if guard == "gate read elsewhere":
        g.output(g.operations[0].outputs[0])  # the ADD before the RELU6
    g.operations.reverse()
    model = g.model()
    optimised, written = prepared(model, True, monkeypatch), prepared(model, False, monkeypatch)
    feeds = [np.random.default_rng(8).uniform(-6, 6, (3, 7)).astype(np.float32) for _ in "xy"]
    for got, want in zip(optimised.run(feeds), written.run(feeds)):
        np.testing.assert_array_equal(got, want)
    assert (codes(optimised) == ["HARD_SWISH"]) == (guard is None)


# -- what the rewrites log ----------------------------------------------------------------


def test_every_rewrite_says_what_it_did(caplog: pytest.LogCaptureFixture) -> None:
    g = Graph()
    x = g.input((2, 6))
    same = g.binary(Op.ADD, x, g.const(0.0), (2, 6))  # an identity
    clamped = g.op(Op.MAXIMUM, [same, g.const(0.0)], (2, 6))  # MAXIMUM(x, 0) as RELU
    both = g.op(Op.MINIMUM, [g.op(Op.RELU, [x], (2, 6)), g.const(6.0)], (2, 6))
    leaky = g.op(Op.MAXIMUM, [x, g.binary(Op.MUL, x, g.const(0.25), (2, 6))], (2, 6))
    swish = hard_swish(g, x, (2, 6), Op.DIV)
    constant = g.binary(Op.ADD, g.const(np.ones(6)), g.const(np.ones(6)), (6,))
    t = g.binary(Op.ADD, clamped, both, (2, 6), FuseCode.NONE)
    t = g.binary(Op.ADD, t, leaky, (2, 6))
    t = g.binary(Op.ADD, t, swish, (2, 6))
    t = g.op(Op.RELU1, [g.binary(Op.MUL, t, constant, (2, 6))], (2, 6))
    g.output(t)
    with caplog.at_level(logging.DEBUG, logger="nnburst.compilation"):
        optimise.optimise(g.model().main)
    (record,) = [r for r in caplog.records if r.name == "nnburst.compilation.optimise"]
    head, *lines = record.getMessage().split("\n  ")
    assert head == "graph optimiser: 16 operations -> 8:"
    assert sorted(lines) == sorted(
        [
            "ADD as an identity dropped",
            "ADD of constants computed once",
            "MAXIMUM(x, c) as RELU",
            "RELU then MINIMUM as RELU6",
            "MAXIMUM(x, MUL(x, a)) as PRELU",
            "RELU6 fused into ADD as RELU6",
            "x * RELU6(x + 3) / 6 (3 operations) as HARD_SWISH",
            "RELU1 fused into MUL as RELU1",
        ]
    )


# -- more guards and parameters -------------------------------------------------------------


def test_a_bound_of_x_s_own_rank_is_still_one_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input((2, 5))
    g.output(g.op(Op.MAXIMUM, [x, g.const(np.zeros((1, 5)))], (2, 5)))
    assert compare(g, monkeypatch, exact=True) == ["RELU"]


def test_a_dilated_convolution_takes_its_activation_and_a_scale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    g = Graph()
    x = g.input(NHWC)
    rng = np.random.default_rng(7)
    w = g.const(rng.normal(0, 0.5, (4, 3, 3, 3)))
    b = g.const(rng.normal(0, 0.5, 4))
    args = [x, w, b, g.const(1, I32), g.const(1, I32), g.const(1, I32), g.fuse()]
    args += [g.const(False, OperandCode.BOOL), g.const(2, I32), g.const(2, I32)]
    conv = g.op(Op.CONV_2D, args, (1, 6, 5, 4))
    scaled = g.binary(Op.MUL, conv, g.const([0.5, 2.0, -1.0, 1.5]), (1, 6, 5, 4))
    g.output(g.op(Op.RELU, [scaled], (1, 6, 5, 4)))
    assert compare(g, monkeypatch) == ["CONV_2D"]
    subgraph = prepared(g.model(), True, monkeypatch).main.subgraph
    (conv_op,) = subgraph.operations
    assert int(subgraph.operands[conv_op.inputs[6]].value) == FuseCode.RELU
    new_weights = subgraph.operands[conv_op.inputs[1]]
    assert new_weights.info.dimensions == (4, 3, 3, 3)  # folded weights declare their shape
    assert subgraph.operands[conv_op.inputs[2]].info.dimensions == (4,)


def test_a_constant_declared_of_unknown_size_is_computed_and_sized(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    g = Graph()
    x = g.input((2, 3))
    bias = g.binary(Op.ADD, g.const(np.ones((2, 3))), g.const(2.0), (2, 0))
    g.output(g.binary(Op.MUL, x, bias, (2, 3)))
    assert compare(g, monkeypatch, exact=True) == ["MUL"]
    subgraph = prepared(g.model(), True, monkeypatch).main.subgraph
    (mul,) = subgraph.operations
    assert subgraph.operands[mul.inputs[1]].info.dimensions == (2, 3)
