"""A C plan bound to a reusable request's own buffers (``PlanTable.bind``, used
by the CPU driver when the whole model is one plan): the buffers are checked
once, when bound, and the outputs written in place; what cannot be bound (an
output over an input) runs the unbound way, with the same results."""

from __future__ import annotations

import numpy as np
import pytest

import nnburst as nn
from nnburst._bindings import plan as c_plan
from nnburst.errors import BadDataError
from nnburst.tools.benchmarks import runtime_paths


def add_then_mul() -> c_plan.PlanTable:
    """out = (x + y) * y over four floats, the sum in the arena (64 bytes)."""
    steps = [
        c_plan.PlanStep(kind=c_plan.ADD, a=-1, b=-2, out=0, count=4),
        c_plan.PlanStep(kind=c_plan.MUL, a=0, b=-2, out=-3, count=4),
    ]
    return c_plan.PlanTable(steps, [16, 16, 16], 64)


def test_a_bound_plan_computes_what_a_run_computes() -> None:
    table = add_then_mul()
    x, y = np.arange(4, dtype=np.float32), np.full(4, 3, np.float32)
    want = np.empty(4, np.float32)
    table.run([x, y, want])
    np.testing.assert_array_equal(want, (x + y) * y)
    out = np.zeros(4, np.float32)
    bound = table.bind([x, y, out])
    bound.run()
    np.testing.assert_array_equal(out, want)
    x += 1  # the bound buffers are read at every run
    bound.run(deadline_ns=None)
    np.testing.assert_array_equal(out, (x + y) * y)
    bound.close()
    with pytest.raises(BadDataError, match="released"):
        bound.run()


def test_binding_refuses_buffers_the_table_does_not_fit() -> None:
    table = add_then_mul()
    x, y, out = (np.zeros(4, np.float32) for _ in range(3))
    with pytest.raises(BadDataError, match="takes 3 buffers"):
        table.bind([x, y])
    with pytest.raises(BadDataError, match="holds 12 bytes, not 16"):
        table.bind([x, y, np.zeros(3, np.float32)])
    with pytest.raises(BadDataError, match="not a C-contiguous"):
        table.bind([np.zeros(8, np.float32)[::2], y, out])
    frozen = np.zeros(4, np.float32)
    frozen.flags.writeable = False
    table.bind([frozen, y, out]).close()  # an input may be read-only ...
    with pytest.raises(BadDataError, match="output buffer 2 is read-only"):
        table.bind([x, y, frozen])  # ... an output not
    with pytest.raises(BadDataError, match="output buffer 2 overlaps buffer 0"):
        table.bind([x, y, x])
    pair = np.zeros(6, np.float32)
    with pytest.raises(BadDataError, match="output buffer 2 overlaps buffer 1"):
        table.bind([x, pair[:4], pair[2:]])
    with pytest.raises(BadDataError, match="takes 3 buffers"):
        table.run([x, y])


def cpu_compilation(model: nn.Model) -> nn.Compilation:
    cpu = next(d for d in nn.get_devices() if d.type == nn.DeviceTypeCode.CPU)
    compilation = nn.Compilation(model, devices=[cpu])
    compilation.finish()
    return compilation


def test_a_reusable_execution_reads_its_inputs_and_writes_its_outputs_each_time() -> None:
    work = runtime_paths.add_mul_model()  # (a + b) * 0.5, one C plan
    with cpu_compilation(work.model) as compilation:
        a, b = (np.array(x) for x in work.inputs)
        out = np.zeros((3, 4), np.float32)
        execution = nn.Execution(compilation)
        execution.set_reusable(True)
        execution.set_input(0, a)
        execution.set_input(1, b)
        execution.set_output(0, out)
        for step in range(3):
            a += step
            execution.compute()
            np.testing.assert_array_equal(out, (a + b) * np.float32(0.5))
        assert execution._direct._bound is not None  # the driver's: one C call
        execution.close()


def test_an_output_over_an_input_gives_the_unbound_result() -> None:
    # A bound plan writing into the very array it reads would be undefined:
    # such a request is not bound, and the result is the run loop's.
    work = runtime_paths.add_mul_model()
    with cpu_compilation(work.model) as compilation:
        a, b = (np.array(x) for x in work.inputs)
        want = (a + b) * np.float32(0.5)
        execution = nn.Execution(compilation)
        execution.set_reusable(True)
        execution.set_input(0, a)
        execution.set_input(1, b)
        execution.set_output(0, a)
        execution.compute()
        np.testing.assert_array_equal(a, want)
        assert execution._direct._bound is None  # the driver's: not bound
        execution.close()


def test_the_runner_returns_arrays_of_its_own_each_call() -> None:
    from nnburst import tflite
    from nnburst.tools.benchmarks import facades

    work = runtime_paths.add_mul_model()
    with tflite.Runner(facades.add_mul_tflite(work), cache_dir=None) as runner:
        a, b = work.inputs
        (first,) = runner(a, b)
        (second,) = runner(a + 1, b)
        np.testing.assert_array_equal(first, (a + b) * np.float32(0.5))
        np.testing.assert_array_equal(second, (a + 1 + b) * np.float32(0.5))
        first[...] = -1  # the caller's to keep and change
        (third,) = runner(a, b)
        np.testing.assert_array_equal(third, (a + b) * np.float32(0.5))
        with pytest.raises(BadDataError, match="float64"):
            runner(a.astype(np.float64), b)
        with pytest.raises(BadDataError, match=r"expected shape \[3, 4\]"):
            runner(a[:2], b)


def test_a_memory_closed_after_binding_fails_the_computation_clearly() -> None:
    work = runtime_paths.add_mul_model()
    with cpu_compilation(work.model) as compilation:
        memory = nn.Memory.create_shared(256)
        execution = nn.Execution(compilation)
        execution.set_reusable(True)
        execution.set_input_from_memory(0, memory, 0, 48)
        execution.set_input(1, work.inputs[1])
        execution.set_output_from_memory(0, memory, 64, 48)
        for _ in range(3):
            execution.compute()
        assert execution._direct._bound is not None  # the driver's: bound to the memory
        memory.close()
        with pytest.raises(nn.NNError, match="a memory of the request was closed"):
            execution.compute()
        execution.close()
