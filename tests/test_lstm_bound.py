"""The bound plain LSTM layer (UNIDIRECTIONAL_SEQUENCE_LSTM, nnburst/cpu/ops/
sequence.py) against the layer as the LSTM cell computes it, over random
sizes, both time layouts and both output counts: the same values within a
float32 rounding of the matrix products.  A layer it does not cover
(peepholes, clipping, another activation) stays unbound."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import OperandCode, OperationCode
from nnburst.cpu.executor import PreparedModel
from nnburst.cpu.registry import ExecutionContext
from nnburst.errors import NNError
from nnburst.hal.model import Lifetime, Operand, Operation
from nnburst.operands import OperandInfo

from .test_graph_optimiser import F32, I32, Graph


def omitted(g: Graph) -> int:
    return g._add(Operand(OperandInfo(F32, None), Lifetime.NO_VALUE))


def scalar(g: Graph, value: float, code: OperandCode) -> int:
    dtype = np.float32 if code == OperandCode.FLOAT32 else np.bool_
    return g._add(Operand(OperandInfo(code, ()), Lifetime.CONSTANT_COPY, np.array(value, dtype)))


def lstm(
    seed: int,
    time_major: bool,
    states: bool,
    peephole: bool = False,
    clip: float = 0.0,
    activation: int = 4,
) -> tuple[PreparedModel, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    steps, batch, features, units = (int(v) for v in rng.integers(1, [5, 4, 20, 17]))
    g = Graph()
    shape = (steps, batch, features) if time_major else (batch, steps, features)
    x = g.input(shape)
    h, c = g.input((batch, units)), g.input((batch, units))
    inputs = [x]
    inputs += [g.const(rng.normal(0, 0.4, (units, features))) for _ in range(4)]
    inputs += [g.const(rng.normal(0, 0.4, (units, units))) for _ in range(4)]
    inputs += [g.const(rng.normal(0, 0.3, units)) if peephole else omitted(g) for _ in range(3)]
    inputs += [g.const(rng.normal(0, 0.5, units)) for _ in range(4)]
    inputs += [omitted(g), omitted(g), h, c, g.const(activation, I32)]
    inputs += [scalar(g, clip, OperandCode.FLOAT32), scalar(g, 0.0, OperandCode.FLOAT32)]
    inputs += [scalar(g, time_major, OperandCode.BOOL)] + [omitted(g) for _ in range(4)]
    outs = [shape[:2] + (units,)] + ([(batch, units), (batch, units)] if states else [])
    indexes = []
    for out in outs:
        g.operands.append(Operand(OperandInfo(F32, out), Lifetime.SUBGRAPH_OUTPUT))
        indexes.append(len(g.operands) - 1)
    g.operations.append(
        Operation(OperationCode.UNIDIRECTIONAL_SEQUENCE_LSTM, tuple(inputs), tuple(indexes))
    )
    g.outputs += indexes
    feeds = [
        rng.uniform(-2, 2, shape).astype(np.float32),
        rng.uniform(-1, 1, (batch, units)).astype(np.float32),
        rng.uniform(-1, 1, (batch, units)).astype(np.float32),
    ]
    return PreparedModel(g.model()), feeds


def bound_and_cell(model: PreparedModel, feeds: list[np.ndarray]) -> tuple[list, list]:
    (op,) = model.main.operations
    values = model.main.initial_values.copy()
    for index, value in zip(model.main._input_indexes, feeds):
        values[index] = value
    arguments = [values[i] for i in op.inputs]
    assert op.kernel is not None
    cell = op.registration.execute(ExecutionContext(op.signature, arguments, op.state))
    return list(op.kernel(arguments)), list(cell)


@pytest.mark.parametrize("seed", range(24))
def test_a_plain_lstm_layer_is_bound_and_answers_as_the_cell(seed: int) -> None:
    model, feeds = lstm(seed, time_major=bool(seed % 2), states=bool(seed // 2 % 2))
    bound, cell = bound_and_cell(model, feeds)
    assert len(bound) == len(cell)
    for got, want in zip(bound, cell):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)
    (result, *_) = model.run(feeds)
    np.testing.assert_allclose(result, cell[0], rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("variant", ["peephole", "clip", "relu"])
def test_a_layer_beyond_the_plain_one_stays_the_cells(variant: str) -> None:
    model, _ = lstm(
        3,
        time_major=True,
        states=True,
        peephole=variant == "peephole",
        clip=1.5 if variant == "clip" else 0.0,
        activation=1 if variant == "relu" else 4,
    )
    assert model.main.operations[0].kernel is None


def test_another_batch_is_the_cells_error() -> None:
    model, feeds = lstm(5, time_major=True, states=True)
    (op,) = model.main.operations
    feeds[1] = np.zeros((feeds[1].shape[0] + 1, feeds[1].shape[1]), np.float32)
    with pytest.raises(NNError):
        model.run(feeds)
    assert op.kernel is not None
