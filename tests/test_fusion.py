"""PAD + ADD run as one step (nnburst/cpu/fusion.py): same answers, one step fewer."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from nnburst.codes import FuseCode, OperandCode, OperationCode
from nnburst.cpu import optimise, plan
from nnburst.cpu.executor import PreparedModel
from nnburst.cpu.ops.native import add_padded_channels_f32
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.operands import OperandInfo

X_SHAPE, A_SHAPE = (1, 4, 4, 3), (1, 4, 4, 5)
BOUNDS = {FuseCode.NONE: (-np.inf, np.inf), FuseCode.RELU: (0, np.inf), FuseCode.RELU6: (0, 6)}


@pytest.fixture(autouse=True)
def graph_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph optimiser would drop the ADD-with-zero these models use to make
    their inputs temporaries (cpu/optimise.py), and the C plan would run those two
    ADDs as one step (cpu/plan.py); the pairs are tested as written."""
    monkeypatch.setattr(optimise, "ENABLED", False)
    monkeypatch.setattr(plan, "MIN_RUN", 1 << 30)


def floats(shape: tuple[int, ...], lifetime: Lifetime = Lifetime.TEMPORARY_VARIABLE) -> Operand:
    return Operand(OperandInfo(OperandCode.TENSOR_FLOAT32, shape), lifetime)


def int32(value: object, code: OperandCode = OperandCode.INT32) -> Operand:
    array = np.array(value, np.int32)
    return Operand(OperandInfo(code, array.shape), Lifetime.CONSTANT_COPY, array)


def pad_add_model(
    fuse: int, padded_first: bool, pad_before: int = 0, pad_is_output: bool = False
) -> PreparedModel:
    """x and b pass through ADD-with-zero (so both are temporaries), then
    ADD(b', PAD(x')) with the channel padding ``[pad_before, 2 - pad_before]``."""
    paddings = [[0, 0], [0, 0], [0, 0], [pad_before, 2 - pad_before]]
    operands = [
        floats(X_SHAPE, Lifetime.SUBGRAPH_INPUT),  # 0 x
        floats(A_SHAPE, Lifetime.SUBGRAPH_INPUT),  # 1 b
        Operand(
            OperandInfo(OperandCode.TENSOR_FLOAT32, (1,)),
            Lifetime.CONSTANT_COPY,
            np.zeros(1, np.float32),
        ),  # 2 zero
        int32(FuseCode.NONE),  # 3
        floats(X_SHAPE),  # 4 x'
        floats(A_SHAPE),  # 5 b'
        int32(paddings, OperandCode.TENSOR_INT32),  # 6
        floats(A_SHAPE, Lifetime.SUBGRAPH_OUTPUT if pad_is_output else Lifetime.TEMPORARY_VARIABLE),
        int32(fuse),  # 8
        floats(A_SHAPE, Lifetime.SUBGRAPH_OUTPUT),  # 9
    ]
    add_inputs = (7, 5, 8) if padded_first else (5, 7, 8)
    operations = [
        Operation(OperationCode.ADD, (0, 2, 3), (4,)),
        Operation(OperationCode.ADD, (1, 2, 3), (5,)),
        Operation(OperationCode.PAD, (4, 6), (7,)),
        Operation(OperationCode.ADD, add_inputs, (9,)),
    ]
    outputs = (9, 7) if pad_is_output else (9,)
    return PreparedModel(HalModel(Subgraph(operands, operations, (0, 1), outputs)))


def expected(x: np.ndarray, b: np.ndarray, fuse: int, pad_before: int = 0) -> np.ndarray:
    padded = np.pad(x, [(0, 0), (0, 0), (0, 0), (pad_before, 2 - pad_before)])
    lo, hi = BOUNDS[fuse]
    return np.minimum(np.maximum(b + padded, lo), hi)


def inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-8, 8, X_SHAPE).astype(np.float32)
    b = rng.uniform(-8, 8, A_SHAPE).astype(np.float32)
    x[0, 1, 2, 0] = np.nan  # a NaN in the added channels survives every clamp
    b[0, 3, 3, 4] = np.nan  # ... and one in the copied ones
    return x, b


@pytest.mark.parametrize("fuse", list(BOUNDS))
@pytest.mark.parametrize("padded_first", [False, True])
def test_pad_then_add_runs_as_one_step_with_the_same_result(fuse: int, padded_first: bool) -> None:
    model = pad_add_model(fuse, padded_first)
    assert [op.signature.code for op in model.main._plan] == [OperationCode.ADD] * 3
    x, b = inputs(fuse)
    (got,) = model.run([x, b])
    np.testing.assert_array_equal(got, expected(x, b, fuse))


@pytest.mark.parametrize(
    "pad_before, pad_is_output", [(1, False), (0, True)], ids=["padded-in-front", "pad-is-output"]
)
def test_pairs_the_loop_cannot_take_run_as_two_steps(pad_before: int, pad_is_output: bool) -> None:
    model = pad_add_model(FuseCode.RELU, False, pad_before, pad_is_output)
    assert len(model.main._plan) == 4
    x, b = inputs(7)
    got = model.run([x, b])
    np.testing.assert_array_equal(got[0], expected(x, b, FuseCode.RELU, pad_before))


def test_the_c_pass_refuses_shapes_it_cannot_pad() -> None:
    a = np.zeros((1, 2, 2, 4), np.float32)
    for x in (np.zeros((1, 2, 2, 5), np.float32), np.zeros((1, 2, 3, 2), np.float32)):
        with pytest.raises(ValueError, match="padded on its last axis"):
            add_padded_channels_f32(a, x, -np.inf, np.inf)


@pytest.mark.parametrize("channels", [1, 3, 4, 7, 8, 15, 16, 17, 24, 28, 33, 96])
def test_the_c_pass_matches_numpy_for_every_channel_count(channels: int) -> None:
    """x of no channels, one, half, all but one and all of a's (C vectorises
    whatever it can of each), NaN in either, with and without a clamp."""
    rng = np.random.default_rng(channels)
    for x_channels in sorted({0, 1, channels // 2, channels - 1, channels}):
        a = rng.uniform(-8, 8, (3, 5, channels)).astype(np.float32)
        x = rng.uniform(-8, 8, (3, 5, x_channels)).astype(np.float32)
        a.flat[::7] = np.nan
        x.flat[::5] = np.nan
        padded = np.pad(x, [(0, 0), (0, 0), (0, channels - x_channels)])
        for lo, hi in ((-np.inf, np.inf), (0.0, 6.0)):
            want = np.minimum(np.maximum(a + padded, lo), hi)
            np.testing.assert_array_equal(add_padded_channels_f32(a, x, lo, hi), want)


# -- fuse / don't-fuse pairs: the fused plan must answer as the unfused one --------


class Graph:
    """A small subgraph written operation by operation (operand indexes returned).
    ``code``: the tensors' type; ``unknown``: temporaries declared without dimensions."""

    def __init__(self, code: OperandCode = OperandCode.TENSOR_FLOAT32, unknown: bool = False):
        self.code, self.unknown = code, unknown
        self.operands: list[Operand] = []
        self.operations: list[Operation] = []
        self.inputs: list[int] = []
        self.shapes: dict[int, tuple[int, ...]] = {}
        self.given: dict[int, np.ndarray] = {}  # model inputs that are not random data

    def _add(self, operand: Operand, shape: tuple[int, ...] = ()) -> int:
        self.operands.append(operand)
        self.shapes[len(self.operands) - 1] = shape
        return len(self.operands) - 1

    def input(self, shape: tuple[int, ...], value: np.ndarray | None = None) -> int:
        code = self.code if value is None else OperandCode.TENSOR_INT32
        index = self._add(Operand(OperandInfo(code, shape), Lifetime.SUBGRAPH_INPUT), shape)
        self.inputs.append(index)
        if value is not None:
            self.given[index] = value
        return index

    def scalar(self, value: int) -> int:
        return self._add(int32(value))

    def op(self, code: OperationCode, inputs: tuple[int, ...], shape: tuple[int, ...]) -> int:
        declared = (0,) * len(shape) if self.unknown else shape
        operand = Operand(OperandInfo(self.code, declared), Lifetime.TEMPORARY_VARIABLE)
        out = self._add(operand, shape)
        self.operations.append(Operation(code, inputs, (out,)))
        return out

    def copy(self, x: int) -> int:
        """x + 0: a temporary holding x (what fusion may read in place)."""
        info = OperandInfo(self.code, (1,))
        zero = self._add(Operand(info, Lifetime.CONSTANT_COPY, np.zeros(1, info.dtype)), (1,))
        return self.op(OperationCode.ADD, (x, zero, self.scalar(FuseCode.NONE)), self.shape(x))

    def pad(self, x: int, paddings: list[list[int]], given: bool = False) -> int:
        shape = tuple(d + lo + hi for d, (lo, hi) in zip(self.shape(x), paddings))
        if given:  # the paddings are a model input
            index = self.input((len(paddings), 2), np.array(paddings, np.int32))
        else:
            index = self._add(int32(paddings, OperandCode.TENSOR_INT32))
        return self.op(OperationCode.PAD, (x, index), shape)

    def add(self, a: int, b: int, fuse: int = FuseCode.RELU) -> int:
        shape = np.broadcast_shapes(self.shape(a), self.shape(b))
        return self.op(OperationCode.ADD, (a, b, self.scalar(fuse)), shape)

    def shape(self, index: int) -> tuple[int, ...]:
        return self.shapes[index]

    def feed(self, index: int, rng: np.random.Generator) -> np.ndarray:
        if index in self.given:
            return self.given[index]
        value = rng.uniform(-8, 8, self.shape(index)).astype(self.operands[index].info.dtype)
        value.flat[::7] = np.nan  # NaN must come through the fused loop as through two
        return value

    def model(self, outputs: tuple[int, ...]) -> HalModel:
        operands = [
            dataclasses.replace(o, lifetime=Lifetime.SUBGRAPH_OUTPUT) if i in outputs else o
            for i, o in enumerate(self.operands)
        ]
        return HalModel(Subgraph(operands, self.operations, tuple(self.inputs), outputs))


CHANNELS = [[0, 0], [0, 0], [0, 0], [0, 2]]  # 3 channels -> 5, zeros after


def _pad_read_twice(second: OperationCode):
    def build(g: Graph) -> tuple[int, ...]:
        padded = g.pad(g.copy(g.input(X_SHAPE)), CHANNELS)
        b = g.copy(g.input(A_SHAPE))
        if second == OperationCode.ADD:  # two ADDs could each take the PAD
            return g.add(b, padded), g.add(padded, g.copy(g.input(A_SHAPE)))
        return g.add(b, padded), g.op(second, (padded,), A_SHAPE)

    return build


def _add_broadcasts(shape: tuple[int, ...]):
    def build(g: Graph) -> tuple[int, ...]:
        padded = g.pad(g.copy(g.input(X_SHAPE)), CHANNELS)
        return (g.add(g.copy(g.input(shape)), padded),)

    return build


def _padded_side_broadcasts(g: Graph) -> tuple[int, ...]:
    padded = g.pad(g.copy(g.input((1, 1, 1, 3))), CHANNELS)  # (1, 1, 1, 5)
    return (g.add(g.copy(g.input(A_SHAPE)), padded),)


def _two_pads_one_add(g: Graph) -> tuple[int, ...]:
    left = g.pad(g.copy(g.input(X_SHAPE)), CHANNELS)
    right = g.pad(g.copy(g.input((1, 4, 4, 4))), [[0, 0], [0, 0], [0, 0], [0, 1]])
    return (g.add(left, right),)


def _pad_of_a_model_input(g: Graph) -> tuple[int, ...]:
    padded = g.pad(g.input(X_SHAPE), CHANNELS)
    return (g.add(g.copy(g.input(A_SHAPE)), padded),)


def _other_is_a_model_input(g: Graph) -> tuple[int, ...]:
    padded = g.pad(g.copy(g.input(X_SHAPE)), CHANNELS)
    return (g.add(g.input(A_SHAPE), padded),)


def _padded_added_to_itself(g: Graph) -> tuple[int, ...]:
    padded = g.pad(g.copy(g.input(X_SHAPE)), CHANNELS)
    return (g.add(padded, padded),)


def _pad_then_mul(g: Graph) -> tuple[int, ...]:
    padded = g.pad(g.copy(g.input(X_SHAPE)), CHANNELS)
    b = g.copy(g.input(A_SHAPE))
    return (g.op(OperationCode.MUL, (b, padded, g.scalar(FuseCode.NONE)), A_SHAPE),)


def _padded_on_another_axis(g: Graph) -> tuple[int, ...]:
    padded = g.pad(g.copy(g.input((1, 4, 3, 5))), [[0, 0], [0, 0], [0, 1], [0, 0]])
    return (g.add(g.copy(g.input(A_SHAPE)), padded),)


def _relu1(g: Graph) -> tuple[int, ...]:
    padded = g.pad(g.copy(g.input(X_SHAPE)), CHANNELS)
    return (g.add(g.copy(g.input(A_SHAPE)), padded, FuseCode.RELU1),)


def _pad_read_by_the_output_add_and_a_later_pad(g: Graph) -> tuple[int, ...]:
    """PAD -> ADD fused; the ADD's result then is padded and added again (a chain)."""
    first = g.add(g.copy(g.input(A_SHAPE)), g.pad(g.copy(g.input(X_SHAPE)), CHANNELS))
    wider = g.pad(first, [[0, 0], [0, 0], [0, 0], [0, 1]])
    return (g.add(g.copy(g.input((1, 4, 4, 6))), wider, FuseCode.RELU6),)


def _pad_read_by_nobody(g: Graph) -> tuple[int, ...]:
    g.pad(g.copy(g.input(X_SHAPE)), CHANNELS)  # a dead PAD
    padded = g.pad(g.copy(g.input(X_SHAPE)), CHANNELS)
    return (g.add(g.copy(g.input(A_SHAPE)), padded),)


def _unfusable_pad_then_a_pair(g: Graph) -> tuple[int, ...]:
    first = g.pad(g.copy(g.input(X_SHAPE)), CHANNELS)
    twice = g.add(first, first)  # read twice: not fused; the scan goes on
    padded = g.pad(g.copy(g.input(X_SHAPE)), CHANNELS)
    return twice, g.add(g.copy(g.input(A_SHAPE)), padded)


def _paddings_given(g: Graph) -> tuple[int, ...]:
    padded = g.pad(g.copy(g.input(X_SHAPE)), CHANNELS, given=True)
    return (g.add(g.copy(g.input(A_SHAPE)), padded),)


#: Graph(...) arguments per case (default: float32, every dimension declared)
GRAPH_KINDS: dict[str, dict[str, Any]] = {
    "float16": {"code": OperandCode.TENSOR_FLOAT16},
    "unknown-dimensions": {"unknown": True},
}

#: (graph, steps in the fused plan, steps without fusion)
PAIRS = {
    "float16": (_relu1, 4, 4),
    "unknown-dimensions": (_relu1, 4, 4),
    "paddings-are-a-model-input": (_paddings_given, 4, 4),
    "a-pad-read-by-nobody": (_pad_read_by_nobody, 5, 6),
    "unfusable-pad-then-a-pair": (_unfusable_pad_then_a_pair, 6, 7),
    "pad-read-by-add-and-relu": (_pad_read_twice(OperationCode.RELU), 5, 5),
    "pad-read-by-two-adds": (_pad_read_twice(OperationCode.ADD), 6, 6),
    "other-input-broadcasts-channels": (_add_broadcasts((1, 1, 1, 5)), 4, 4),
    "other-input-broadcasts-rows": (_add_broadcasts((1, 4, 1, 5)), 4, 4),
    "other-input-broadcasts-a-rank": (_add_broadcasts((5,)), 4, 4),
    "padded-input-broadcasts": (_padded_side_broadcasts, 4, 4),
    "two-pads-into-one-add": (_two_pads_one_add, 4, 5),
    "pad-of-a-model-input": (_pad_of_a_model_input, 3, 3),
    "other-input-is-a-model-input": (_other_is_a_model_input, 3, 3),
    "padded-added-to-itself": (_padded_added_to_itself, 3, 3),
    "pad-then-mul": (_pad_then_mul, 4, 4),
    "padded-on-another-axis": (_padded_on_another_axis, 4, 4),
    "relu1": (_relu1, 3, 4),
    "a-chain-of-two-pairs": (_pad_read_by_the_output_add_and_a_later_pad, 5, 7),
}


def _unfused(operations: list, temporaries: set[int]) -> list:
    return list(operations)


@pytest.mark.parametrize("name", list(PAIRS))
def test_fused_plan_answers_as_the_unfused_one(name: str, monkeypatch) -> None:
    build, fused_steps, steps = PAIRS[name]
    g = Graph(**GRAPH_KINDS.get(name, {}))
    model = g.model(build(g))
    fused = PreparedModel(model)
    rng = np.random.default_rng(len(name))
    inputs = [g.feed(index, rng) for index in g.inputs]
    got = fused.run(inputs)
    monkeypatch.setattr("nnburst.cpu.bind.fuse", _unfused)
    plain = PreparedModel(model)
    want = plain.run(inputs)
    assert (len(fused.main._plan), len(plain.main._plan)) == (fused_steps, steps)
    assert len(got) == len(want)
    for g_out, w_out in zip(got, want):
        np.testing.assert_array_equal(g_out, w_out)
