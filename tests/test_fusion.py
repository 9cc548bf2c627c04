"""PAD + ADD run as one step (nnburst/cpu/fusion.py): same answers, one step fewer."""

from __future__ import annotations

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
