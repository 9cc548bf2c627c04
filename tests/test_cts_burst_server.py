"""Every NNAPI 1.0/1.1 conformance vector through a burst server thread, three
times: the first two through the server's Python path, the third answered in
C exactly when the model runs as one C plan (csrc/burst_fast.c).  The third
result must equal the first bit for bit, and pass the vector."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import ErrorStatus
from nnburst.cpu.driver import cpu_device
from nnburst.hal.burst_controller import ExecutionBurstController
from nnburst.hal.types import DataLocation, MeasureTiming, Request, RequestArgument
from nnburst.memory import Memory

from .cts_vectors import check_outputs, iter_vectors, parse_vector

VECTORS = list(iter_vectors())
_ALIGN = 64
#: vectors answered in C, counted across the module (see the last test)
SERVED = {"vectors": 0, "in_c": 0}


def _layout(sizes: list[int]) -> tuple[list[int], int]:
    offsets, end = [], 0
    for size in sizes:
        offsets.append(end)
        end += -(-max(size, 1) // _ALIGN) * _ALIGN
    return offsets, end


def _arguments(values, infos, pool: int, offsets) -> list[RequestArgument]:
    arguments = []
    for value, info, offset in zip(values, infos, offsets):
        if value is None:
            arguments.append(RequestArgument(True, DataLocation()))
            continue
        unknown = info.dimensions is None or 0 in info.dimensions
        dims = tuple(value.shape) if unknown and not info.is_scalar else ()
        arguments.append(RequestArgument(False, DataLocation(pool, offset, value.nbytes), dims))
    return arguments


@pytest.mark.skipif(not VECTORS, reason="no NNAPI conformance vectors found (NNBURST_CTS_DIR)")
@pytest.mark.parametrize("name, raw", VECTORS, ids=[name for name, _ in VECTORS])
def test_cts_vector_through_a_burst_server(name, raw):
    vector = parse_vector(raw)
    if vector.expect_failure or vector.multinomial_tolerance > 0:
        pytest.skip("a failure or a random result: not a repeated request")
    main = vector.model.main
    in_infos = [main.operands[i].info for i in main.input_indexes]
    out_infos = [main.operands[i].info for i in main.output_indexes]
    outputs = [np.zeros(e.dimensions, e.values.dtype) for e in vector.outputs]
    in_offsets, in_size = _layout([0 if v is None else v.nbytes for v in vector.inputs])
    out_offsets, out_size = _layout([o.nbytes for o in outputs])
    prepared = cpu_device().prepare_model(vector.model)
    with Memory.create_shared(in_size) as ins, Memory.create_shared(out_size) as outs:
        for value, offset in zip(vector.inputs, in_offsets):
            if value is not None:
                np.frombuffer(ins.buffer, np.uint8, value.nbytes, offset)[:] = (
                    np.ascontiguousarray(value).reshape(-1).view(np.uint8)
                )
        request = Request(
            _arguments(vector.inputs, in_infos, 0, in_offsets),
            _arguments(outputs, out_infos, 1, out_offsets),
            [ins, outs],
        )
        results = []
        with ExecutionBurstController.create(prepared) as controller:
            for _ in range(3):
                np.frombuffer(outs.buffer, np.uint8)[:] = 0xA5  # nothing left from the last run
                status, _, _, fallback = controller.compute(request, MeasureTiming.NO, [ins, outs])
                assert (status, fallback) == (ErrorStatus.NONE, False)
                results.append(
                    [
                        np.frombuffer(outs.buffer, o.dtype, o.size, offset).reshape(o.shape).copy()
                        for o, offset in zip(outputs, out_offsets)
                    ]
                )
            served = controller._context._worker.fast.served
    steps = prepared.executor.main._steps
    whole = len(steps) == 1 and hasattr(steps[0][1], "plan_table")
    assert served == whole  # one C plan: the third is answered in C, else never
    SERVED["vectors"] += 1
    SERVED["in_c"] += served
    for first, third in zip(results[0], results[2]):
        assert first.tobytes() == third.tobytes()
    check_outputs(vector, results[2])


def test_the_c_path_answered_some_vectors():
    """Not a silent no-op (most 1.0/1.1 models are one operation, which no C plan
    holds: the C path needs two or more)."""
    if SERVED["vectors"] < 100:
        pytest.skip("run with the vectors above")
    assert SERVED["in_c"] >= 30, SERVED
