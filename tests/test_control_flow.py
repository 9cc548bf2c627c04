"""IF and WHILE (NNAPI 1.3) through the public runtime API: results, loop timeouts, validation.

Every model is built with ``nn.Model`` and ``set_operand_value_from_model``;
expectations are plain Python/numpy loops written independently here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

import nnburst as nn
from nnburst.codes import ErrorStatus
from nnburst.cpu import driver as cpu_driver
from nnburst.cpu import validate as cpu_validate
from nnburst.cpu.driver import cpu_device
from nnburst.cpu.ops import control_flow
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.hal.types import DataLocation, MeasureTiming, Request, RequestArgument
from nnburst.operands import OperandInfo

from .blocking import SteppingClock

OC = nn.OperandCode
Op = nn.OperationCode
F32, I32, BOOL8 = OC.TENSOR_FLOAT32, OC.TENSOR_INT32, OC.TENSOR_BOOL8
BIG = 2**31 - 1


class Graph:
    """A small builder over ``nn.Model`` so each test reads like the computation it builds."""

    def __init__(self) -> None:
        self.model = nn.Model()

    def operand(self, code: OC, dims: Sequence[int] | None = (1,)) -> int:
        if code in (OC.INT32, OC.MODEL, OC.FLOAT32, OC.BOOL):
            dims = ()
        return self.model.add_operand(nn.OperandType(code, dims))

    def const(self, code: OC, value: object, dims: Sequence[int] | None = (1,)) -> int:
        index = self.operand(code, dims)
        self.model.set_operand_value(index, value)
        return index

    def ref(self, model: nn.Model) -> int:
        index = self.operand(OC.MODEL)
        self.model.set_operand_value_from_model(index, model)
        return index

    def op(
        self, code: Op, inputs: Sequence[int], out_code: OC, dims: Sequence[int] | None = (1,)
    ) -> int:
        out = self.operand(out_code, dims)
        self.model.add_operation(code, list(inputs), [out])
        return out

    def binary(
        self, code: Op, a: int, b: int, out_code: OC, dims: Sequence[int] | None = (1,)
    ) -> int:
        return self.op(code, [a, b, self.const(OC.INT32, 0, ())], out_code, dims)

    def multi(
        self, code: Op, inputs: Sequence[int], outs: Sequence[tuple[OC, Sequence[int] | None]]
    ) -> list[int]:
        indexes = [self.operand(c, d) for c, d in outs]
        self.model.add_operation(code, list(inputs), indexes)
        return indexes

    def done(self, inputs: Sequence[int], outputs: Sequence[int]) -> nn.Model:
        self.model.identify_inputs_and_outputs(list(inputs), list(outputs))
        self.model.finish()
        return self.model


def cpu() -> nn.Device:
    (device,) = [d for d in nn.get_devices() if d.name == "nnburst-reference"]
    return device


def compiled(model: nn.Model) -> nn.Compilation:
    compilation = nn.Compilation(model, [cpu()])
    compilation.finish()
    return compilation


def run(
    compilation: nn.Compilation,
    inputs: Sequence[object],
    outputs: Sequence[np.ndarray],
    how: str = "compute",
    loop_timeout_ns: int | None = None,
    burst: nn.Burst | None = None,
) -> nn.Execution:
    execution = nn.Execution(compilation)
    for i, value in enumerate(inputs):
        execution.set_input(i, value)
    for i, out in enumerate(outputs):
        execution.set_output(i, out)
    if loop_timeout_ns is not None:
        execution.set_loop_timeout(loop_timeout_ns)
    if how == "compute":
        execution.compute()
    elif how == "start_compute":
        execution.start_compute().wait()
    else:
        assert burst is not None
        execution.burst_compute(burst)
    return execution


def raises(code: nn.ResultCode, fn: Callable[[], object]) -> nn.NNError:
    with pytest.raises(nn.NNError) as info:
        fn()
    assert info.value.code == code, info.value
    return info.value


# -- models -----------------------------------------------------------------------------------
def fibonacci_model() -> nn.Model:
    """WHILE i < n: (a, b, i) = (b, a + b, i + 1); returns a (m=1, k=2 state-only, n=1 input-only)."""
    cond = Graph()
    a, b, i, n = (
        cond.operand(F32, (2,)),
        cond.operand(F32, (2,)),
        cond.operand(I32),
        cond.operand(I32),
    )
    keep_going = cond.op(Op.LESS, [i, n], BOOL8)
    cond_model = cond.done([a, b, i, n], [keep_going])

    body = Graph()
    a, b, i, n = (
        body.operand(F32, (2,)),
        body.operand(F32, (2,)),
        body.operand(I32),
        body.operand(I32),
    )
    new_a = body.binary(Op.ADD, b, body.const(F32, [0.0]), F32, (2,))
    new_b = body.binary(Op.ADD, a, b, F32, (2,))
    new_i = body.binary(Op.ADD, i, body.const(I32, [1]), I32)
    body_model = body.done([a, b, i, n], [new_a, new_b, new_i])

    main = Graph()
    a, b, n = main.operand(F32, (2,)), main.operand(F32, (2,)), main.operand(I32)
    i0 = main.const(I32, [0])
    out = main.op(Op.WHILE, [main.ref(cond_model), main.ref(body_model), a, b, i0, n], F32, (2,))
    return main.done([a, b, n], [out])


def fibonacci_expected(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    for _ in range(n):
        a, b = b, a + b
    return a.astype(np.float32)


def branch_model(code: Op, dims: Sequence[int] | None = (2,)) -> nn.Model:
    g = Graph()
    x = g.operand(F32, dims)
    return g.done([x], [g.binary(code, x, x, F32, dims)])


def if_model(
    then_model: nn.Model | None = None,
    else_model: nn.Model | None = None,
    dims: Sequence[int] | None = (2,),
) -> nn.Model:
    """out = cond ? x + x : x * x."""
    g = Graph()
    cond, x = g.operand(BOOL8), g.operand(F32, dims)
    then_ref = g.ref(then_model or branch_model(Op.ADD, dims))
    else_ref = g.ref(else_model or branch_model(Op.MUL, dims))
    out = g.op(Op.IF, [cond, then_ref, else_ref, x], F32, dims)
    return g.done([cond, x], [out])


def counter_model() -> nn.Model:
    """WHILE i < n: i += 1; returns i.  With n = 2**31 - 1 it never ends in practice."""
    cond_model, body_model = _counter_parts()
    main = Graph()
    i, n = main.operand(I32), main.operand(I32)
    out = main.op(Op.WHILE, [main.ref(cond_model), main.ref(body_model), i, n], I32)
    return main.done([i, n], [out])


def nested_model() -> nn.Model:
    """WHILE i < n: x = IF(i < k, x + 1, x * 2); i += 1; returns (x, i)."""
    then_model = Graph()
    x = then_model.operand(F32, (2,))
    then_model = then_model.done(
        [x], [then_model.binary(Op.ADD, x, then_model.const(F32, [1.0]), F32, (2,))]
    )
    else_model = Graph()
    x = else_model.operand(F32, (2,))
    else_model = else_model.done(
        [x], [else_model.binary(Op.MUL, x, else_model.const(F32, [2.0]), F32, (2,))]
    )

    cond = Graph()
    x, i, n, k = cond.operand(F32, (2,)), cond.operand(I32), cond.operand(I32), cond.operand(I32)
    cond_model = cond.done([x, i, n, k], [cond.op(Op.LESS, [i, n], BOOL8)])

    body = Graph()
    x, i, n, k = body.operand(F32, (2,)), body.operand(I32), body.operand(I32), body.operand(I32)
    early = body.op(Op.LESS, [i, k], BOOL8)
    new_x = body.op(Op.IF, [early, body.ref(then_model), body.ref(else_model), x], F32, (2,))
    new_i = body.binary(Op.ADD, i, body.const(I32, [1]), I32)
    body_model = body.done([x, i, n, k], [new_x, new_i])

    main = Graph()
    x, n, k = main.operand(F32, (2,)), main.operand(I32), main.operand(I32)
    i0 = main.const(I32, [0])
    out_x, out_i = main.multi(
        Op.WHILE,
        [main.ref(cond_model), main.ref(body_model), x, i0, n, k],
        [(F32, (2,)), (I32, (1,))],
    )
    return main.done([x, n, k], [out_x, out_i])


# -- results ----------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["compute", "start_compute"])
@pytest.mark.parametrize("n", [0, 1, 7, 20])
def test_fibonacci_while(how: str, n: int) -> None:
    compilation = compiled(fibonacci_model())
    a, b = np.array([0, 2], np.float32), np.array([1, 3], np.float32)
    out = np.zeros(2, np.float32)
    run(compilation, [a, b, np.array([n], np.int32)], [out], how)
    np.testing.assert_array_equal(out, fibonacci_expected(a, b, n))


def test_fibonacci_while_through_a_burst() -> None:
    compilation = compiled(fibonacci_model())
    a, b = np.array([0, 1], np.float32), np.array([1, 1], np.float32)
    with nn.Burst(compilation) as burst:
        for n in (3, 10):
            out = np.zeros(2, np.float32)
            run(compilation, [a, b, np.array([n], np.int32)], [out], "burst", burst=burst)
            np.testing.assert_array_equal(out, fibonacci_expected(a, b, n))


@pytest.mark.parametrize("how", ["compute", "start_compute"])
@pytest.mark.parametrize("condition", [True, False])
def test_if_takes_the_right_branch(how: str, condition: bool) -> None:
    compilation = compiled(if_model())
    x = np.array([3.0, -1.5], np.float32)
    out = np.zeros(2, np.float32)
    run(compilation, [np.array([condition]), x], [out], how)
    np.testing.assert_array_equal(out, x + x if condition else x * x)


def test_if_through_a_burst() -> None:
    compilation = compiled(if_model())
    x = np.array([2.0, 5.0], np.float32)
    with nn.Burst(compilation) as burst:
        for condition in (True, False):
            out = np.zeros(2, np.float32)
            run(compilation, [np.array([condition]), x], [out], "burst", burst=burst)
            np.testing.assert_array_equal(out, x + x if condition else x * x)


@pytest.mark.parametrize("how", ["compute", "start_compute"])
def test_if_nested_inside_a_while_body(how: str) -> None:
    compilation = compiled(nested_model())
    x = np.array([1.0, -2.0], np.float32)
    n, k = 6, 2
    expected = x.copy()
    for i in range(n):
        expected = expected + 1 if i < k else expected * 2
    out_x, out_i = np.zeros(2, np.float32), np.zeros(1, np.int32)
    run(compilation, [x, np.array([n], np.int32), np.array([k], np.int32)], [out_x, out_i], how)
    np.testing.assert_array_equal(out_x, expected)
    assert out_i[0] == n


def test_while_nested_inside_a_while() -> None:
    """total += (count from 0 to 3 in an inner WHILE), n times: 3 * n."""
    cond = Graph()
    total, j, n = cond.operand(I32), cond.operand(I32), cond.operand(I32)
    cond_model = cond.done([total, j, n], [cond.op(Op.LESS, [j, n], BOOL8)])
    inner_cond, inner_body = _counter_parts()
    body = Graph()
    total, j, n = body.operand(I32), body.operand(I32), body.operand(I32)
    zero, three = body.const(I32, [0]), body.const(I32, [3])
    counted = body.op(Op.WHILE, [body.ref(inner_cond), body.ref(inner_body), zero, three], I32)
    new_total = body.binary(Op.ADD, total, counted, I32)
    new_j = body.binary(Op.ADD, j, body.const(I32, [1]), I32)
    body_model = body.done([total, j, n], [new_total, new_j])
    main = Graph()
    n = main.operand(I32)
    out = main.op(
        Op.WHILE,
        [main.ref(cond_model), main.ref(body_model), main.const(I32, [0]), main.const(I32, [0]), n],
        I32,
    )
    compilation = compiled(main.done([n], [out]))
    result = np.zeros(1, np.int32)
    run(compilation, [np.array([4], np.int32)], [result])
    assert result[0] == 12


def test_subgraph_with_unknown_rank_and_dimensions() -> None:
    """Branches of unknown rank, main operands of unknown dimensions: shapes come from the inputs."""
    compilation = compiled(
        if_model(branch_model(Op.ADD, None), branch_model(Op.MUL, None), dims=(0, 0))
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = np.zeros((2, 3), np.float32)
    execution = run(compilation, [np.array([False]), x], [out])
    np.testing.assert_array_equal(out, x * x)
    assert execution.get_output_operand_dimensions(0) == (2, 3)


def test_while_growing_a_tensor_of_unknown_length() -> None:
    """The body appends one element per iteration; the output's length is known only at the end."""
    cond = Graph()
    x, i, n = cond.operand(F32, (0,)), cond.operand(I32), cond.operand(I32)
    cond_model = cond.done([x, i, n], [cond.op(Op.LESS, [i, n], BOOL8)])
    body = Graph()
    x, i, n = body.operand(F32, (0,)), body.operand(I32), body.operand(I32)
    grown = body.op(
        Op.CONCATENATION, [x, body.const(F32, [7.0]), body.const(OC.INT32, 0, ())], F32, (0,)
    )
    body_model = body.done([x, i, n], [grown, body.binary(Op.ADD, i, body.const(I32, [1]), I32)])
    main = Graph()
    x, n = main.operand(F32, (0,)), main.operand(I32)
    out = main.op(
        Op.WHILE,
        [main.ref(cond_model), main.ref(body_model), x, main.const(I32, [0]), n],
        F32,
        (0,),
    )
    compilation = compiled(main.done([x, n], [out]))

    x = np.array([1.0, 2.0], np.float32)
    small = np.zeros(2, np.float32)
    execution = nn.Execution(compilation)
    execution.set_input(0, x)
    execution.set_input(1, np.array([3], np.int32))
    execution.set_output(0, small)
    raises(nn.ResultCode.OUTPUT_INSUFFICIENT_SIZE, execution.compute)
    assert execution.get_output_operand_dimensions(0) == (5,)

    out = np.zeros(5, np.float32)
    execution = run(compilation, [x, np.array([3], np.int32)], [out])
    np.testing.assert_array_equal(out, [1, 2, 7, 7, 7])
    assert execution.get_output_operand_dimensions(0) == (5,)


def test_int32_counters_and_bool8_conditions() -> None:
    """The [1]-shaped arithmetic and comparisons loop counters and conditions rely on."""
    g = Graph()
    a, b = g.operand(I32), g.operand(I32)
    arithmetic = [g.binary(code, a, b, I32) for code in (Op.ADD, Op.SUB, Op.MUL)]
    comparisons = [
        g.op(code, [a, b], BOOL8)
        for code in (Op.LESS, Op.LESS_EQUAL, Op.GREATER, Op.GREATER_EQUAL, Op.EQUAL, Op.NOT_EQUAL)
    ]
    negated = g.op(Op.LOGICAL_NOT, [comparisons[0]], BOOL8)
    both = g.op(Op.LOGICAL_AND, [comparisons[0], comparisons[5]], BOOL8)
    outputs = [*arithmetic, *comparisons, negated, both]
    compilation = compiled(g.done([a, b], outputs))
    for x, y in ((3, 5), (5, 3), (4, 4), (-7, 2)):
        outs = [np.zeros(1, np.int32) for _ in arithmetic] + [
            np.zeros(1, np.bool_) for _ in outputs[3:]
        ]
        run(compilation, [np.array([x], np.int32), np.array([y], np.int32)], outs)
        assert [int(o[0]) for o in outs[:3]] == [x + y, x - y, x * y]
        assert [bool(o[0]) for o in outs[3:]] == [
            x < y,
            x <= y,
            x > y,
            x >= y,
            x == y,
            x != y,
            not x < y,
            x < y and x != y,
        ]


# -- loop timeouts ----------------------------------------------------------------------------
#
# No wall clock: the CPU driver and the WHILE operation read time through a
# SteppingClock that moves on by a fixed step at every read, so a loop
# times out after a known amount of (fake) time whatever the machine's load,
# and a test can tell a 1 s deadline from a 2 s one exactly.


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SteppingClock:
    fake = SteppingClock(10_000_000)  # 10 ms per read: a WHILE iteration reads it once
    monkeypatch.setattr(cpu_driver, "time", fake)
    monkeypatch.setattr(control_flow, "time", fake)
    return fake


def loop_timeouts_reaching_the_driver(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """Records the ``loop_timeout_ns`` each CPU execution receives."""
    seen: list[int | None] = []
    original = cpu_driver.CpuExecution.__init__

    def recording(self, prepared, request, measure, loop_timeout_ns):  # type: ignore[no-untyped-def]
        seen.append(loop_timeout_ns)
        original(self, prepared, request, measure, loop_timeout_ns)

    monkeypatch.setattr(cpu_driver.CpuExecution, "__init__", recording)
    return seen


def timed_out_after(clock: SteppingClock, fn: Callable[[], object]) -> int:
    """Runs ``fn``, which must fail with MISSED_DEADLINE_TRANSIENT; returns
    the fake nanoseconds that passed."""
    start = clock.now
    raises(nn.ResultCode.MISSED_DEADLINE_TRANSIENT, fn)
    return clock.now - start


def counter_inputs(n: int) -> list[np.ndarray]:
    return [np.array([0], np.int32), np.array([n], np.int32)]


def test_loop_timeout_defaults() -> None:
    assert nn.get_default_loop_timeout() == 2_000_000_000
    assert nn.get_maximum_loop_timeout() == 15_000_000_000
    execution = nn.Execution(compiled(counter_model()))
    execution.set_loop_timeout(10**12)  # clamped, as the NDK does, not refused
    raises(nn.ResultCode.BAD_DATA, lambda: execution.set_loop_timeout(-1))


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (None, 2_000_000_000),
        (5_000_000_000, 5_000_000_000),
        (15_000_000_000, 15_000_000_000),
        (15_000_000_001, 15_000_000_000),
        (10**12, 15_000_000_000),
    ],
)
def test_set_loop_timeout_reaches_the_driver_clamped_to_15_s(
    monkeypatch, requested, expected
) -> None:
    seen = loop_timeouts_reaching_the_driver(monkeypatch)
    out = np.zeros(1, np.int32)
    run(compiled(counter_model()), counter_inputs(0), [out], loop_timeout_ns=requested)
    assert seen == [expected]


def test_a_loop_runs_for_at_most_15_s_whatever_set_loop_timeout_asked(clock) -> None:
    out = np.zeros(1, np.int32)
    compilation = compiled(counter_model())
    elapsed = timed_out_after(
        clock, lambda: run(compilation, counter_inputs(BIG), [out], loop_timeout_ns=10**12)
    )
    assert 15_000_000_000 <= elapsed <= 15_000_000_000 + 20 * clock.step_ns


def test_the_driver_clamps_a_loop_timeout_it_is_given_directly(clock) -> None:
    prepared = cpu_device().prepare_model(counter_model().hal_model)
    pool = np.array([0, BIG, 0], np.int32)
    request = Request(
        [
            RequestArgument(False, DataLocation(0, 0, 4)),
            RequestArgument(False, DataLocation(0, 4, 4)),
        ],
        [RequestArgument(False, DataLocation(0, 8, 4))],
        [pool],
    )
    start = clock.now
    status, _, _ = prepared.execute_synchronously(request, MeasureTiming.NO, loop_timeout_ns=10**12)
    assert status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert 15_000_000_000 <= clock.now - start <= 15_000_000_000 + 20 * clock.step_ns


@pytest.mark.parametrize("how", ["compute", "start_compute"])
def test_infinite_loop_times_out_and_the_process_stays_healthy(clock, how: str) -> None:
    compilation = compiled(counter_model())
    out = np.zeros(1, np.int32)
    elapsed = timed_out_after(
        clock, lambda: run(compilation, counter_inputs(BIG), [out], how, 50_000_000)
    )
    assert 50_000_000 <= elapsed <= 50_000_000 + 20 * clock.step_ns
    # The same compilation, and others, still work.
    run(compilation, counter_inputs(5), [out], how, 1_000_000_000)
    assert out[0] == 5
    fib = np.zeros(2, np.float32)
    run(
        compiled(fibonacci_model()),
        [np.ones(2, np.float32), np.ones(2, np.float32), np.array([4], np.int32)],
        [fib],
    )
    np.testing.assert_array_equal(fib, [5, 5])


def test_infinite_loop_through_a_burst_stops_at_the_default_timeout(clock) -> None:
    """Burst packets carry no loop timeout: the driver's 2 s default still ends the loop."""
    compilation = compiled(counter_model())
    out = np.zeros(1, np.int32)
    with nn.Burst(compilation) as burst:
        elapsed = timed_out_after(
            clock, lambda: run(compilation, counter_inputs(BIG), [out], "burst", burst=burst)
        )
        assert 2_000_000_000 <= elapsed <= 2_000_000_000 + 20 * clock.step_ns
        run(compilation, counter_inputs(3), [out], "burst", burst=burst)
        assert out[0] == 3


def while_around_a_counter(inner_n: int) -> nn.Model:
    """WHILE j < n: total += (an inner WHILE counting to ``inner_n``); j += 1."""
    cond = Graph()
    total, j, n = cond.operand(I32), cond.operand(I32), cond.operand(I32)
    cond_model = cond.done([total, j, n], [cond.op(Op.LESS, [j, n], BOOL8)])
    inner_cond, inner_body = _counter_parts()
    body = Graph()
    total, j, n = body.operand(I32), body.operand(I32), body.operand(I32)
    zero, limit = body.const(I32, [0]), body.const(I32, [inner_n])
    counted = body.op(Op.WHILE, [body.ref(inner_cond), body.ref(inner_body), zero, limit], I32)
    new_total = body.binary(Op.ADD, total, counted, I32)
    new_j = body.binary(Op.ADD, j, body.const(I32, [1]), I32)
    body_model = body.done([total, j, n], [new_total, new_j])
    main = Graph()
    n = main.operand(I32)
    out = main.op(
        Op.WHILE,
        [main.ref(cond_model), main.ref(body_model), main.const(I32, [0]), main.const(I32, [0]), n],
        I32,
    )
    return main.done([n], [out])


def test_a_nested_while_may_use_the_whole_outer_loop_timeout(clock) -> None:
    """The inner loop alone runs 3 s (300 reads of a 10 ms clock), longer
    than a fresh 2 s default: it finishes only if it shares the outer
    execution's 10 s deadline."""
    out = np.zeros(1, np.int32)
    run(
        compiled(while_around_a_counter(300)),
        [np.array([1], np.int32)],
        [out],
        loop_timeout_ns=10_000_000_000,
    )
    assert out[0] == 300


def test_a_nested_while_stops_at_the_outer_deadline_not_a_fresh_one(clock) -> None:
    """An endless inner loop under a 1 s outer timeout fails after 1 s, not
    after a new 2 s (or a new 1 s) of its own."""
    compilation = compiled(while_around_a_counter(BIG))
    out = np.zeros(1, np.int32)
    elapsed = timed_out_after(
        clock,
        lambda: run(compilation, [np.array([1], np.int32)], [out], loop_timeout_ns=1_000_000_000),
    )
    assert 1_000_000_000 <= elapsed <= 1_000_000_000 + 20 * clock.step_ns


def test_driver_reports_a_loop_timeout_as_missed_deadline() -> None:
    prepared = cpu_device().prepare_model(counter_model().hal_model)
    pool = np.array([0, BIG, 0], np.int32)
    request = Request(
        [
            RequestArgument(False, DataLocation(0, 0, 4)),
            RequestArgument(False, DataLocation(0, 4, 4)),
        ],
        [RequestArgument(False, DataLocation(0, 8, 4))],
        [pool],
    )
    status, shapes, _ = prepared.execute_synchronously(
        request, MeasureTiming.NO, loop_timeout_ns=1_000_000
    )
    assert status == ErrorStatus.MISSED_DEADLINE_TRANSIENT and shapes == []


# -- validation -------------------------------------------------------------------------------
def test_if_condition_must_be_bool8() -> None:
    g = Graph()
    cond, x = g.operand(I32), g.operand(F32, (2,))
    out = g.op(
        Op.IF, [cond, g.ref(branch_model(Op.ADD)), g.ref(branch_model(Op.MUL)), x], F32, (2,)
    )
    error = raises(nn.ResultCode.BAD_DATA, lambda: g.done([cond, x], [out]))
    assert "condition" in str(error)


def test_if_condition_must_have_one_element() -> None:
    g = Graph()
    cond, x = g.operand(BOOL8, (2,)), g.operand(F32, (2,))
    out = g.op(
        Op.IF, [cond, g.ref(branch_model(Op.ADD)), g.ref(branch_model(Op.MUL)), x], F32, (2,)
    )
    raises(nn.ResultCode.BAD_DATA, lambda: g.done([cond, x], [out]))


def test_if_branch_input_count_must_match() -> None:
    two_inputs = Graph()
    x, y = two_inputs.operand(F32, (2,)), two_inputs.operand(F32, (2,))
    two_inputs = two_inputs.done([x, y], [two_inputs.binary(Op.ADD, x, y, F32, (2,))])
    g = Graph()
    cond, x = g.operand(BOOL8), g.operand(F32, (2,))
    out = g.op(Op.IF, [cond, g.ref(two_inputs), g.ref(branch_model(Op.MUL)), x], F32, (2,))
    error = raises(nn.ResultCode.BAD_DATA, lambda: g.done([cond, x], [out]))
    assert "then model has 2 inputs" in str(error)


def test_if_branch_types_must_match() -> None:
    g = Graph()
    cond, x = g.operand(BOOL8), g.operand(F32, (3,))  # branches take [2]
    out = g.op(
        Op.IF, [cond, g.ref(branch_model(Op.ADD)), g.ref(branch_model(Op.MUL)), x], F32, (3,)
    )
    raises(nn.ResultCode.BAD_DATA, lambda: g.done([cond, x], [out]))
    g = Graph()
    cond, x = g.operand(BOOL8), g.operand(I32, (2,))
    out = g.op(
        Op.IF, [cond, g.ref(branch_model(Op.ADD)), g.ref(branch_model(Op.MUL)), x], I32, (2,)
    )
    raises(nn.ResultCode.BAD_DATA, lambda: g.done([cond, x], [out]))


def test_if_branch_must_be_a_model_operand() -> None:
    g = Graph()
    cond, x = g.operand(BOOL8), g.operand(F32, (2,))
    not_a_model = g.const(F32, [0.0, 0.0], (2,))
    out = g.op(Op.IF, [cond, not_a_model, g.ref(branch_model(Op.MUL)), x], F32, (2,))
    raises(nn.ResultCode.BAD_DATA, lambda: g.done([cond, x], [out]))


def _while_with(
    cond_model: nn.Model, body_model: nn.Model, n_values: int = 2, outputs: int = 1
) -> Callable[[], object]:
    g = Graph()
    values = [g.operand(I32) for _ in range(n_values)]
    outs = [g.operand(I32) for _ in range(outputs)]
    g.model.add_operation(Op.WHILE, [g.ref(cond_model), g.ref(body_model), *values], outs)
    return lambda: g.done(values, outs)


def _counter_parts() -> tuple[nn.Model, nn.Model]:
    cond = Graph()
    i, n = cond.operand(I32), cond.operand(I32)
    cond_model = cond.done([i, n], [cond.op(Op.LESS, [i, n], BOOL8)])
    body = Graph()
    i, n = body.operand(I32), body.operand(I32)
    body_model = body.done([i, n], [body.binary(Op.ADD, i, body.const(I32, [1]), I32)])
    return cond_model, body_model


def test_while_validation() -> None:
    cond_model, body_model = _counter_parts()
    _while_with(cond_model, body_model)()  # the valid baseline finishes
    # The body's input count must equal the number of loop values.
    raises(nn.ResultCode.BAD_DATA, _while_with(cond_model, body_model, n_values=3))
    # More WHILE outputs than body outputs.
    raises(nn.ResultCode.BAD_DATA, _while_with(cond_model, body_model, outputs=2))
    # The condition model must produce TENSOR_BOOL8 [1].
    bad_cond = Graph()
    i, n = bad_cond.operand(I32), bad_cond.operand(I32)
    bad_cond_model = bad_cond.done([i, n], [bad_cond.binary(Op.SUB, n, i, I32)])
    error = raises(nn.ResultCode.BAD_DATA, _while_with(bad_cond_model, body_model))
    assert "TENSOR_BOOL8" in str(error)
    # Body outputs must have the loop values' types.
    float_body = Graph()
    i, n = float_body.operand(I32), float_body.operand(I32)
    float_body_model = float_body.done([i, n], [float_body.op(Op.CAST, [i], F32)])
    raises(nn.ResultCode.BAD_DATA, _while_with(cond_model, float_body_model))
    # The body in the condition's place (and vice versa).
    raises(nn.ResultCode.BAD_DATA, _while_with(body_model, cond_model))


# -- supported operations and capabilities ----------------------------------------------------
def _main_with_add_and_if(if_operation_model: nn.Model) -> nn.Model:
    """Main model: an ADD and an IF (operations 0 and 1)."""
    g = Graph()
    cond, x = g.operand(BOOL8), g.operand(F32, (2,))
    doubled = g.binary(Op.ADD, x, x, F32, (2,))
    out = g.op(
        Op.IF, [cond, g.ref(branch_model(Op.ADD)), g.ref(if_operation_model), doubled], F32, (2,)
    )
    return g.done([cond, x], [out])


def test_supported_operations_follow_referenced_subgraphs(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _main_with_add_and_if(branch_model(Op.SUB))
    assert model.get_supported_operations_for_devices([cpu()]) == [True, True]

    real_lookup = cpu_validate.lookup
    monkeypatch.setattr(
        cpu_validate, "lookup", lambda code: None if code == Op.SUB else real_lookup(code)
    )
    assert model.get_supported_operations_for_devices([cpu()]) == [True, False]
    # A SUB three levels down (WHILE body -> IF else branch) makes the WHILE unsupported too.
    assert cpu_device().get_supported_operations(nested_with_sub().hal_model) == [False, True]


def nested_with_sub() -> nn.Model:
    """Main: WHILE whose body holds an IF whose else branch holds a SUB; then an ADD."""
    cond = Graph()
    x, i = cond.operand(F32, (2,)), cond.operand(I32)
    cond_model = cond.done([x, i], [cond.op(Op.LESS, [i, cond.const(I32, [2])], BOOL8)])
    body = Graph()
    x, i = body.operand(F32, (2,)), body.operand(I32)
    flag = body.op(Op.LESS, [i, body.const(I32, [1])], BOOL8)
    new_x = body.op(
        Op.IF, [flag, body.ref(branch_model(Op.ADD)), body.ref(branch_model(Op.SUB)), x], F32, (2,)
    )
    body_model = body.done([x, i], [new_x, body.binary(Op.ADD, i, body.const(I32, [1]), I32)])
    main = Graph()
    x = main.operand(F32, (2,))
    looped = main.op(
        Op.WHILE, [main.ref(cond_model), main.ref(body_model), x, main.const(I32, [0])], F32, (2,)
    )
    out = main.binary(Op.ADD, looped, looped, F32, (2,))
    return main.done([x], [out])


def test_nested_model_with_sub_runs() -> None:
    x = np.array([1.0, 3.0], np.float32)
    out = np.zeros(2, np.float32)
    run(compiled(nested_with_sub()), [x], [out])
    np.testing.assert_array_equal(out, 2 * ((x + x) - (x + x)))


def test_capabilities_carry_control_flow_performance() -> None:
    capabilities = cpu_device().capabilities
    assert capabilities.if_performance.exec_time > 0
    assert capabilities.while_performance.exec_time > 0


def test_reference_cycle_is_rejected_not_recursed() -> None:
    """A HAL model whose referenced subgraph refers to itself: invalid, never executed."""
    f32, b8, model_info = (
        OperandInfo(F32, (1,)),
        OperandInfo(BOOL8, (1,)),
        OperandInfo(OC.MODEL, ()),
    )
    looping = Subgraph(
        operands=[
            Operand(b8, Lifetime.SUBGRAPH_INPUT),
            Operand(f32, Lifetime.SUBGRAPH_INPUT),
            Operand(model_info, Lifetime.SUBGRAPH, subgraph=0),
            Operand(f32, Lifetime.SUBGRAPH_OUTPUT),
        ],
        operations=[Operation(Op.IF, (0, 2, 2, 0, 1), (3,))],
        input_indexes=(0, 1),
        output_indexes=(3,),
    )
    main = Subgraph(
        operands=[
            Operand(b8, Lifetime.SUBGRAPH_INPUT),
            Operand(f32, Lifetime.SUBGRAPH_INPUT),
            Operand(model_info, Lifetime.SUBGRAPH, subgraph=0),
            Operand(f32, Lifetime.SUBGRAPH_OUTPUT),
        ],
        operations=[Operation(Op.IF, (0, 2, 2, 0, 1), (3,))],
        input_indexes=(0, 1),
        output_indexes=(3,),
    )
    hal = HalModel(main, [looping])
    assert cpu_device().get_supported_operations(hal) == [False]
    with pytest.raises(nn.NNError) as info:
        cpu_driver.validate_operation(hal, hal.main, 0)
    assert info.value.code == nn.ResultCode.BAD_DATA and "cycle" in str(info.value)
