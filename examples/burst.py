"""Burst execution: many computations of one model, the request checked once.

A ``nn.Burst`` on a device in another process (a driver service) opens a
request queue and a result queue in shared memory, served by a burst server
thread there; on the in-process CPU device it needs no queues: each
computation runs on the caller's thread (a hop to another thread of the same
interpreter costs more than a small model's computation; see "Bursts" in
docs/architecture.md). With a *reusable* execution (``set_reusable(True)``,
NNAPI feature level 5) the inputs and outputs are bound once; each
``burst_compute(burst)`` then skips the per-request work. The input arrays
are read at every computation, so updating them in place feeds new data.

This is the README's example, run for a stream of frames, with the time per
computation printed next to plain ``compute()`` on the same execution. In
process the two paths do nearly the same work, so expect them close: bursts
pay off when the driver runs in another process
(``examples/service_device.py`` measures both paths there).

Run it (after ``pip install .``)::

    python examples/burst.py
"""

from __future__ import annotations

import time

import numpy as np

import nnburst as nn

FRAMES = 200


def add_model(shape: tuple[int, ...]) -> nn.Model:
    """A finished model with two inputs and one output: ``a + b``."""
    tensor = nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, shape)
    model = nn.Model()
    a, b, out = model.add_operand(tensor), model.add_operand(tensor), model.add_operand(tensor)
    fuse = model.add_operand(nn.OperandType(nn.OperandCode.INT32))
    model.set_operand_value(fuse, np.int32(nn.FuseCode.NONE))
    model.add_operation(nn.OperationCode.ADD, [a, b, fuse], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    return model


def median_us(samples: list[int]) -> float:
    return float(np.median(samples)) / 1000


def main() -> None:
    frame = np.zeros((3, 4), np.float32)
    offset = np.full((3, 4), 2, np.float32)
    result = np.empty((3, 4), np.float32)

    with nn.Compilation(add_model(frame.shape)) as compilation:
        # SUSTAINED_SPEED: a service's burst server polls longest before sleeping
        # (docs/architecture.md); in process it changes nothing.
        compilation.set_preference(nn.PreferenceCode.SUSTAINED_SPEED)
        compilation.finish()
        execution = nn.Execution(compilation)
        execution.set_reusable(True)
        execution.set_input(0, frame)
        execution.set_input(1, offset)
        execution.set_output(0, result)

        burst_ns: list[int] = []
        with nn.Burst(compilation) as burst:  # in process: the caller's thread, no FMQs
            for i in range(FRAMES):
                frame[...] = i  # new data, same array: no re-binding
                start = time.perf_counter_ns()
                execution.burst_compute(burst)
                burst_ns.append(time.perf_counter_ns() - start)
                assert np.all(result == i + 2), (i, result)

        sync_ns: list[int] = []
        for i in range(FRAMES):
            frame[...] = i
            start = time.perf_counter_ns()
            execution.compute()
            sync_ns.append(time.perf_counter_ns() - start)
            assert np.all(result == i + 2), (i, result)

    print(f"last result:\n{result}")
    print(f"{FRAMES} computations each way; median time per computation:")
    print(f"  burst_compute: {median_us(burst_ns):8.1f} µs")
    print(f"  compute:       {median_us(sync_ns):8.1f} µs")
    print("burst: OK")


if __name__ == "__main__":
    main()
