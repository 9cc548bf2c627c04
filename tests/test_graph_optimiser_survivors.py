"""The graph optimiser (nnburst/cpu/optimise.py) where mutation testing found the
other tests blind (issue 32, fifth pass).

A rewrite that breaks the graph is not seen by comparing answers: the driver
then logs a warning and prepares the graph as written.  So every test here
also fails on that warning, and some read the rewritten subgraph itself: its
listing order, the constants it adds, what it logs."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import pytest

from nnburst.codes import FuseCode, OperandCode
from nnburst.cpu import optimise
from nnburst.hal.model import Lifetime, Operand, Operation, Subgraph
from nnburst.operands import OperandInfo
from tests.test_graph_optimiser import F32, I32, Graph, Op, codes, compare, hard_swish, prepared
from tests.test_layout_regions import SHAPE, pool

T32 = OperandCode.TENSOR_INT32


@pytest.fixture(autouse=True)
def no_fallback(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A rewritten graph that does not prepare is run as written, with a warning:
    here that warning is a failure."""
    with caplog.at_level(logging.DEBUG, logger="nnburst.compilation"):
        yield
    records = caplog.get_records("call")
    fallbacks = [r.getMessage() for r in records if "runs as written" in r.getMessage()]
    assert not fallbacks


def listed_in_order(subgraph: Subgraph) -> bool:
    """Whether each operation is listed after those writing its inputs."""
    written = {
        i for i, o in enumerate(subgraph.operands) if o.lifetime != Lifetime.TEMPORARY_VARIABLE
    }
    written -= {i for op in subgraph.operations for i in op.outputs}
    for op in subgraph.operations:
        if any(i not in written for i in op.inputs):
            return False
        written.update(op.outputs)
    return True


def nchw_block() -> Graph:
    """An NCHW convolution, its activation as a RELU of its own, a pool: the
    layout pass makes it NHWC between two transposes, after a fusion."""
    g = Graph()
    x = g.input(SHAPE)
    middle = (1, 4, 6, 5)
    a = g.op(Op.RELU, [g.conv(x, SHAPE, 4, nchw=True)], middle)
    shifted = g.binary(Op.ADD, a, g.const(np.arange(4.0).reshape(4, 1, 1)), middle)
    g.output(pool(g, shifted, middle))
    return g


def test_an_nchw_region_is_listed_in_the_order_it_runs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The transposes and NHWC operations the layout pass adds are listed right
    after the operation they replace, so the listing still runs as written."""
    g = nchw_block()
    names = compare(g, monkeypatch)
    assert names.count("TRANSPOSE") == 2 and "RELU" not in names
    rewritten = optimise.optimise(g.model().main)
    assert listed_in_order(rewritten)
    assert [op.code.name for op in rewritten.operations][:2] == ["TRANSPOSE", "CONV_2D"]
    # both passes say what they did: the fusion, then the layout's moves
    assert "RELU fused into CONV_2D as RELU" in caplog.text
    assert "TRANSPOSE moved past ADD" in caplog.text


def test_the_constants_a_rewrite_adds_hold_their_operand_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fused activation code is an INT32 operand: its value is int32 (a cached
    graph stores the value's bytes)."""
    g = nchw_block()
    rewritten = optimise.optimise(g.model().main)
    added = rewritten.operands[len(g.operands) :]
    assert added
    for operand in added:
        if operand.value is not None:
            assert operand.value.dtype == operand.info.dtype, operand


def test_a_hard_swish_listed_backwards_takes_its_relu6_operation_along(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Met before its RELU6 is fused into the ADD, the chain is four operations,
    and the log says so (not a fusion first, then three)."""
    g = Graph()
    x = g.input((3, 7))
    g.output(hard_swish(g, x, (3, 7), Op.DIV))
    g.operations.reverse()
    assert codes(prepared(g.model(), True, monkeypatch)) == ["HARD_SWISH"]
    assert "x * RELU6(x + 3) / 6 (4 operations) as HARD_SWISH" in caplog.text
    assert "fused into ADD" not in caplog.text


def test_a_hard_swish_whose_add_is_read_elsewhere_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input((3, 7))
    g.output(hard_swish(g, x, (3, 7), Op.DIV))
    g.output(g.binary(Op.MUL, g.operations[0].outputs[0], x, (3, 7)))  # the ADD, read again
    g.operations.reverse()
    model = g.model()
    optimised, written = prepared(model, True, monkeypatch), prepared(model, False, monkeypatch)
    feeds = [np.random.default_rng(4).uniform(-6, 6, (3, 7)).astype(np.float32)]
    for got, want in zip(optimised.run(feeds), written.run(feeds)):
        np.testing.assert_array_equal(got, want)
    names = codes(optimised)
    assert "HARD_SWISH" not in names and "ADD" in names


def test_a_layer_output_read_twice_keeps_its_own_activation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ADD -> RELU, with the ADD also read by a MUL (or a model output): the
    RELU cannot move into the ADD, which the MUL reads unclamped."""
    for second in ("reader", "output"):
        g = Graph()
        x, y = g.input((2, 5)), g.input((2, 5))
        added = g.binary(Op.ADD, x, y, (2, 5))
        g.output(g.op(Op.RELU, [added], (2, 5)))
        if second == "reader":
            g.output(g.binary(Op.MUL, added, y, (2, 5)))
        else:
            g.output(added)
        assert compare(g, monkeypatch, exact=True)[:2] == ["ADD", "RELU"], second


def test_two_clamps_whose_first_is_read_elsewhere_stay_two(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input((2, 5))
    inner = g.op(Op.RELU, [x], (2, 5))
    g.output(g.op(Op.RELU6, [inner], (2, 5)))
    g.output(g.binary(Op.MUL, inner, x, (2, 5)))
    assert compare(g, monkeypatch, exact=True) == ["RELU", "RELU6", "MUL"]


def test_a_fused_activation_given_at_run_time_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ADD whose activation code is a model input: nothing is known to narrow."""
    g = Graph()
    x, y = g.input((2, 5)), g.input((2, 5))
    code = len(g.operands)
    g.operands.append(Operand(OperandInfo(I32, ()), Lifetime.SUBGRAPH_INPUT))
    g.inputs.append(code)
    added = g.op(Op.ADD, [x, y, code], (2, 5))
    g.output(g.op(Op.RELU6, [added], (2, 5)))
    model = g.model()
    optimised, written = prepared(model, True, monkeypatch), prepared(model, False, monkeypatch)
    assert codes(optimised) == ["ADD", "RELU6"]
    rng = np.random.default_rng(3)
    feeds = [rng.uniform(-9, 9, (2, 5)).astype(np.float32) for _ in "xy"]
    for fuse in (FuseCode.NONE, FuseCode.RELU1):
        run = [*feeds, np.array(fuse, np.int32)]
        np.testing.assert_array_equal(optimised.run(run)[0], written.run(run)[0])


def test_shapes_known_only_at_run_time_are_left_as_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every rewrite needs static shapes: an activation after an ADD, two clamps,
    a scale after a convolution, each with a result of unknown size, stay."""
    g = Graph()
    x, y = g.input((2, 5)), g.input((2, 5))
    added = g.binary(Op.ADD, x, y, (2, 0))
    g.output(g.op(Op.RELU, [added], (2, 5)))
    inner = g.op(Op.RELU, [y], (2, 5))
    g.output(g.op(Op.RELU6, [inner], (0, 5)))
    image = g.input((1, 6, 5, 3))
    conv = g.conv(image, (1, 6, 5, 3), 4)
    g.operands[conv] = Operand(OperandInfo(F32, (1, 0, 0, 4)), Lifetime.TEMPORARY_VARIABLE)
    g.output(g.binary(Op.MUL, conv, g.const([0.5, 2.0, -1.0, 1.5]), (1, 0, 0, 4)))
    assert compare(g, monkeypatch, exact=True) == [
        "ADD",
        "RELU",
        "RELU",
        "RELU6",
        "CONV_2D",
        "MUL",
    ]


def test_a_division_by_zero_among_constants_is_computed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1 / 0 and 0 / 0 computed at prepare give what the operation gives at run
    time (inf and NaN), without numpy's warnings (errors in this suite)."""
    g = Graph()
    x = g.input((3,))
    ratio = g.binary(Op.DIV, g.const([1.0, 0.0, -2.0]), g.const([0.0, 0.0, 4.0]), (3,))
    g.output(g.binary(Op.ADD, x, ratio, (3,)))
    assert compare(g, monkeypatch, exact=True) == ["ADD"]


def rewrite(kind: str) -> tuple[Graph, list[str]]:
    """A graph each rewrite applies to once, and the operations it leaves."""
    g = Graph()
    image = (1, 6, 5, 3)
    if kind == "batch norm":
        conv = g.conv(g.input(image), image, 4)
        scaled = g.binary(Op.MUL, conv, g.const([0.5, 2.0, -1.0, 1.5]), (1, 6, 5, 4))
        g.output(g.binary(Op.ADD, scaled, g.const([1.0, 0.0, -3.0, 2.5]), (1, 6, 5, 4)))
        return g, ["CONV_2D"]
    if kind == "depthwise scale":
        layer = g.depthwise(g.input(image), image)
        g.output(g.binary(Op.MUL, layer, g.const([0.5, -2.0, 3.0]), image))
        return g, ["DEPTHWISE_CONV_2D"]
    if kind == "fully connected shift":
        layer = g.fully_connected(g.input((1, 5)), 5, 3)
        g.output(g.binary(Op.SUB, layer, g.const([0.5, -2.0, 3.0]), (1, 3)))
        return g, ["FULLY_CONNECTED"]
    x = g.input((3, 7))
    if kind == "activation":
        added = g.binary(Op.ADD, x, g.const(0.5), (3, 7))
        g.output(g.op(Op.RELU6, [added], (3, 7)))
        return g, ["ADD"]
    if kind == "leaky relu":
        scaled = g.binary(Op.MUL, x, g.const(0.2), (3, 7))
        g.output(g.op(Op.MAXIMUM, [x, scaled], (3, 7)))
        return g, ["PRELU"]
    if kind == "hard swish":
        g.output(hard_swish(g, x, (3, 7), Op.MUL))
        return g, ["HARD_SWISH"]
    if kind == "min max":
        low = g.op(Op.MAXIMUM, [x, g.const(-1.0)], (3, 7))
        g.output(g.op(Op.MINIMUM, [low, g.const(1.0)], (3, 7)))
        return g, ["RELU1"]
    if kind == "square":
        g.output(g.op(Op.POW, [x, g.const(2.0)], (3, 7)))
        return g, ["MUL"]
    assert kind == "identity and constants"
    same = g.op(Op.RESHAPE, [x, g.const([3, 7], T32)], (3, 7))
    bias = g.binary(Op.ADD, g.const(np.arange(7.0)), g.const(np.ones(7)), (7,))
    g.output(g.binary(Op.MUL, same, bias, (3, 7)))
    return g, ["MUL"]


KINDS = [
    "batch norm",
    "depthwise scale",
    "fully connected shift",
    "activation",
    "leaky relu",
    "hard swish",
    "min max",
    "square",
    "identity and constants",
]


@pytest.mark.parametrize("kind", KINDS)
def test_each_rewrite_prepares_without_falling_back(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rewrite once: its result prepares as it is (a broken rewrite would be
    dropped with a warning and the graph run as written, with the same answers)."""
    g, left = rewrite(kind)
    assert compare(g, monkeypatch) == left


# -- the PAD fold ----------------------------------------------------------------------

IMAGE = (1, 6, 5, 3)
PADS = [[0, 0], [1, 1], [2, 0], [0, 0]]


def padded_conv(
    g: Graph,
    depthwise: bool = False,
    guard: str | None = None,
) -> tuple[int, int]:
    """x -> PAD -> a dilated CONV_2D or DEPTHWISE_CONV_2D (layout flag given), SAME
    padding; (the PAD's output, the layer's).  ``guard`` breaks one condition of the fold."""
    x = g.input((1, 6, 4, 2) if guard == "not a pad" else IMAGE)
    pads = np.array(PADS, np.int32)
    if guard == "nchw":  # the PAD's rows 1 and 2 are then channels and rows
        pads = np.array([[0, 0], [1, 0], [1, 1], [0, 0]], np.int32)
    paddings = g.const(pads, T32)
    if guard == "paddings fed":
        paddings = len(g.operands)
        g.operands.append(Operand(OperandInfo(T32, (4, 2)), Lifetime.SUBGRAPH_INPUT))
        g.inputs.append(paddings)
    padded_dims = tuple(d + int(p.sum()) for d, p in zip(IMAGE, pads))
    if guard == "not a pad":  # a MAXIMUM by a [4, 2] constant of a PAD's paddings
        padded_dims = (1, 6, 4, 2)
        padded = g.op(Op.MAXIMUM, [x, g.const(pads.astype(np.float32))], padded_dims)
    else:
        declared = (1, 0, 0, 3) if guard == "unknown size" else padded_dims
        padded = g.op(Op.PAD, [x, paddings], declared)
    n, h, w, c = padded_dims
    if guard == "nchw":
        n, c, h, w = padded_dims
    rng = np.random.default_rng(5)
    depth = c if depthwise else 4
    weights = rng.normal(0, 0.5, (1, 3, 3, c) if depthwise else (depth, 3, 3, c)).astype(np.float32)
    if guard == "weights inf":
        weights[0, 1, 1, 0] = np.inf
    w_index = g.const(weights)
    if guard == "weights fed":
        w_index = len(g.operands)
        g.operands.append(Operand(OperandInfo(F32, weights.shape), Lifetime.SUBGRAPH_INPUT))
        g.inputs.append(w_index)
    args = [padded, w_index, g.const(rng.normal(0, 0.5, depth).astype(np.float32))]
    args += [g.const(1, I32), g.const(1, I32), g.const(1, I32)]  # SAME, strides 1
    if depthwise:
        args.append(g.const(1, I32))
    args += [g.fuse(), g.const(guard == "nchw", OperandCode.BOOL), g.const(2, I32), g.const(2, I32)]
    out = (n, depth, h, w) if guard == "nchw" else (n, h, w, depth)
    layer = g.op(Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D, args, out)
    g.output(layer)
    if guard == "read twice":
        g.output(g.op(Op.RELU, [padded], padded_dims))
    return padded, layer


def answers(g: Graph, monkeypatch: pytest.MonkeyPatch, seed: int = 0) -> list[str]:
    """The optimised graph's operations, after checking it answers as the graph as
    written bit for bit (NaN where NaN), for graphs of any inputs."""
    model = g.model()
    rng = np.random.default_rng(seed)
    feeds = []
    for i in g.inputs:
        info = model.main.operands[i].info
        if info.code == T32:
            feeds.append(np.array(PADS, np.int32))
        else:
            feeds.append(rng.uniform(-6, 6, info.dimensions).astype(np.float32))
    optimised, written = prepared(model, True, monkeypatch), prepared(model, False, monkeypatch)
    for got, want in zip(optimised.run(feeds), written.run(feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return codes(optimised)


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
def test_a_pad_folds_into_a_dilated_layer_with_its_layout_flag(
    depthwise: bool, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fold keeps the layer's strides, depth multiplier, activation, layout
    flag and dilations, and adds four int32 paddings."""
    g = Graph()
    padded_conv(g, depthwise)
    layer = "DEPTHWISE_CONV_2D" if depthwise else "CONV_2D"
    assert answers(g, monkeypatch) == [layer]
    assert f"PAD [[1, 1], [2, 0]] folded into {layer}'s padding" in caplog.text
    rewritten = optimise.optimise(g.model().main)
    (op,) = rewritten.operations
    assert len(op.inputs) == (14 if depthwise else 13)
    for operand in rewritten.operands[len(g.operands) :]:
        assert operand.value.dtype == operand.info.dtype


PAD_GUARDS = [
    "read twice",
    "weights fed",
    "paddings fed",
    "weights inf",
    "unknown size",
    "nchw",
    "not a pad",
]


@pytest.mark.parametrize("guard", PAD_GUARDS)
def test_what_the_pad_fold_leaves(guard: str, monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    padded_conv(g, guard=guard)
    names = answers(g, monkeypatch)
    assert ("MAXIMUM" if guard == "not a pad" else "PAD") in names


# -- what the activation rewrites leave -------------------------------------------------


@pytest.mark.parametrize(
    "guard",
    [
        "MUL read twice",
        "MUL of another input",
        "slope first times another",
        "slope fed",
        "size unknown",
    ],
)
def test_what_is_not_a_leaky_relu_here_is_left(guard: str, monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input((3, 7))
    scaled_of = g.input((3, 7)) if guard == "MUL of another input" else x
    slope = g.input((1,)) if guard == "slope fed" else g.const(0.2)
    shape = (3, 0) if guard == "size unknown" else (3, 7)
    if guard == "slope first times another":
        scaled_of = g.input((3, 7))
        scaled = g.binary(Op.MUL, slope, scaled_of, shape)
    else:
        scaled = g.binary(Op.MUL, scaled_of, slope, shape)
    g.output(g.op(Op.MAXIMUM, [x, scaled], (3, 7)))
    if guard == "MUL read twice":
        g.output(g.op(Op.RELU, [scaled], (3, 7)))
    assert "MAXIMUM" in answers(g, monkeypatch)


def test_a_hard_swish_multiplying_the_gate_first_is_one_operation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    g = Graph()
    x = g.input((3, 7))
    shifted = g.binary(Op.ADD, x, g.const([3.0]), (3, 7), FuseCode.RELU6)
    product = g.binary(Op.MUL, shifted, x, (3, 7))  # the gate on the left
    g.output(g.binary(Op.DIV, product, g.const(6.0), (3, 7)))
    assert answers(g, monkeypatch) == ["HARD_SWISH"]


@pytest.mark.parametrize("guard", ["product read twice", "a sixth 5e-6 off"])
def test_more_that_is_not_a_hard_swish_is_left(guard: str, monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input((3, 7))
    shifted = g.binary(Op.ADD, x, g.const([3.0]), (3, 7), FuseCode.RELU6)
    product = g.binary(Op.MUL, x, shifted, (3, 7))
    sixth = np.float32(1 / 6) * np.float32(1 + 5e-6 if guard == "a sixth 5e-6 off" else 1)
    g.output(g.binary(Op.MUL, product, g.const(sixth), (3, 7)))
    if guard == "product read twice":
        g.output(g.op(Op.RELU, [product], (3, 7)))
    assert "HARD_SWISH" not in answers(g, monkeypatch)


def test_a_square_is_logged_and_a_maximum_by_two_is_no_square(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    x = g.input((3, 7))
    squared = g.op(Op.POW, [x, g.const(2.0)], (3, 7))
    g.output(g.op(Op.MAXIMUM, [squared, g.const(2.0)], (3, 7)))
    assert answers(g, monkeypatch) == ["MUL", "MAXIMUM"]
    assert "\n  POW(x, 2) as MUL(x, x)\n" in caplog.text + "\n"


def test_random_numbers_of_constants_are_drawn_each_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """RANDOM_MULTINOMIAL reads only constants, and still is never run at prepare."""
    g = Graph()
    x = g.input((2, 3))
    logits = g.const(np.log([[0.2, 0.3, 0.5], [0.6, 0.2, 0.2]]))
    seeds = g.const([7, 11], T32)
    out = len(g.operands)
    g.operands.append(Operand(OperandInfo(T32, (2, 4)), Lifetime.SUBGRAPH_OUTPUT))
    g.outputs.append(out)
    g.operations.append(Operation(Op.RANDOM_MULTINOMIAL, (logits, g.const(4, I32), seeds), (out,)))
    g.output(g.op(Op.RELU, [x], (2, 3)))
    rewritten = optimise.optimise(g.model().main)
    assert Op.RANDOM_MULTINOMIAL in [op.code for op in rewritten.operations]


def test_an_operation_of_two_results_is_left_and_a_dead_identity_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SPLIT (two outputs) is no identity; a RESHAPE to its own shape that
    nothing reads goes."""
    g = Graph()
    x = g.input((4, 3))
    halves = [len(g.operands), len(g.operands) + 1]
    for _ in halves:
        g.operands.append(Operand(OperandInfo(F32, (2, 3)), Lifetime.TEMPORARY_VARIABLE))
    g.operations.append(Operation(Op.SPLIT, (x, g.const(0, I32), g.const(2, I32)), tuple(halves)))
    g.output(g.binary(Op.ADD, halves[0], halves[1], (2, 3)))
    g.op(Op.RESHAPE, [x, g.const([4, 3], T32)], (4, 3))  # read by nothing
    assert answers(g, monkeypatch) == ["SPLIT", "ADD"]


def test_a_layer_output_read_twice_keeps_its_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    conv = g.conv(g.input(IMAGE), IMAGE, 4)
    g.output(g.binary(Op.MUL, conv, g.const([0.5, 2.0, -1.0, 1.5]), (1, 6, 5, 4)))
    g.output(g.op(Op.RELU, [conv], (1, 6, 5, 4)))
    assert answers(g, monkeypatch) == ["CONV_2D", "MUL", "RELU"]
