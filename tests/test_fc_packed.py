"""Float32 FULLY_CONNECTED on the packed kernel (fully_connected._packed_kernel):
exact against a float64 reference where every sum is exact, the same bits
planned and one by one, one step of the C plan (no split), and the route."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnburst._bindings import plan as c_plan
from nnburst._bindings.fconv import vector_path
from nnburst.cpu.executor import PreparedModel, operation_signature
from nnburst.cpu.ops import conv, fully_connected
from nnburst.operands import OperandInfo
from tests.test_cpu_plan_layers import F32, Net, Op, random_image, same_answers


@pytest.fixture
def kinds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every float layer packed (whatever this CPU's measured routes say: the
    portable kernel where there is no vector one), and the kinds of every
    plan table built."""
    monkeypatch.setattr(fully_connected, "float_route", lambda sig, size: "fconv")
    monkeypatch.setattr(conv, "float_route", lambda filt, in_shape, win: "fconv")
    built: list[int] = []
    build = c_plan.PlanTable.__init__

    def recording(table: Any, steps: Any, *args: Any) -> None:
        built.extend(step.kind for step in steps)
        build(table, steps, *args)

    monkeypatch.setattr(c_plan.PlanTable, "__init__", recording)
    return built


def quarters(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.integers(-12, 13, shape) / 4).astype(np.float32)


@pytest.mark.parametrize("seed", range(24))
def test_a_packed_layer_is_exact_where_the_sums_are(seed: int, kinds: list[int]) -> None:
    """Rows 1-20 (the one-row tile, the 6-row tiles and their tails), sizes
    and units off the 16-channel panels, every fused activation."""
    rng = np.random.default_rng(seed)
    rows, size, units = int(rng.integers(1, 21)), int(rng.integers(1, 70)), int(rng.integers(1, 40))
    fuse = seed % 4
    net = Net(seed)
    x = net.input(OperandInfo(F32, (rows, size)))
    weights, bias = quarters(rng, (units, size)), quarters(rng, (units,))
    args = [
        x,
        net.const(OperandInfo(F32, (units, size)), weights),
        net.const(OperandInfo(F32, (units,)), bias),
        net.scalar(fuse),
    ]
    net.output(net.op(Op.FULLY_CONNECTED, args, OperandInfo(F32, (rows, units))))
    values = quarters(rng, (rows, size))
    values.flat[int(rng.integers(0, values.size))] = np.nan if seed % 5 == 0 else 0.25
    model = PreparedModel(net.model())
    step = c_plan.marked(model.main.operations[0].kernel)
    assert step is not None and step.kind == c_plan.FCONV, "not the packed kernel"
    (got,) = model.run([values])
    want = values.astype(np.float64) @ weights.T.astype(np.float64) + bias
    lo, hi = {0: (-np.inf, np.inf), 1: (0, np.inf), 2: (-1, 1), 3: (0, 6)}[fuse]
    want = np.where(np.isnan(want), want, np.clip(want, lo, hi)).astype(np.float32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(8))
def test_a_packed_layer_joins_the_plan_and_gives_the_operations_bits(
    seed: int, monkeypatch: pytest.MonkeyPatch, kinds: list[int]
) -> None:
    net = Net(900 + seed)
    x = random_image(net, F32)
    t = net.conv(x, int(net.rng.integers(1, 24)))
    t = net.fully_connected(t, int(net.rng.integers(1, 40)))
    t = net.op(Op.RELU, [t], net.like(t, net.info(t).dimensions or ()))
    net.output(net.fully_connected(t, int(net.rng.integers(1, 12))))
    planned = same_answers(net, monkeypatch)
    assert len(planned.main._plan) == 1, "a fully connected layer split the plan"
    assert kinds.count(c_plan.FCONV) == 3


def test_the_route_takes_up_to_its_rows_on_a_vector_path() -> None:
    net = Net(1)

    def signature(rows: int, size: int) -> Any:
        x = net.input(OperandInfo(F32, (rows, size)))
        t = net.fully_connected(x, 5)
        model = net.model()
        operation = model.main.operations[-1]
        assert operation.outputs == (t,)
        return operation_signature(model.main, len(model.main.operations) - 1, False)

    packed = "fconv" if vector_path() else "sgemm"
    assert fully_connected.float_route(signature(1, 672), 672) == packed
    limit = fully_connected.FC_PACKED_MAX_ROWS
    assert fully_connected.float_route(signature(limit, 8), 8) == packed
    assert fully_connected.float_route(signature(limit + 1, 8), 8) == "sgemm"


def test_a_wrong_input_is_explained_not_run(kinds: list[int]) -> None:
    """An input the packed layer does not fit goes to the checks that explain it."""
    net = Net(2)
    x = net.input(OperandInfo(F32, (2, 6)))
    net.output(net.fully_connected(x, 3))
    model = PreparedModel(net.model())
    with pytest.raises(Exception, match="FULLY_CONNECTED|flattened|shape"):
        model.run([np.zeros((2, 5), np.float32)])
