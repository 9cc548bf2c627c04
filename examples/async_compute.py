"""Asynchronous execution: ``start_compute()`` returns an ``Event``; chain executions on events.

``start_compute()`` runs the execution on a runtime worker thread and
returns at once; ``Event.wait()`` blocks until it ends and raises
``nn.NNError`` if it failed. ``start_compute_with_dependencies(events)``
starts an execution only after other executions' events have signalled, so
a pipeline can be queued up front without waiting in between.

Here the model computes ``a * b``. A first execution squares ``x``; a second
one, started on the first one's event, multiplies that result by ``x`` again
(it reads the first execution's output array when it runs, not when it is
bound). The main thread is free while both run.

Run it (after ``pip install .``)::

    python examples/async_compute.py
"""

from __future__ import annotations

import numpy as np

import nnburst as nn


def multiply_model(shape: tuple[int, ...]) -> nn.Model:
    """A finished model with two inputs and one output: ``a * b``."""
    tensor = nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, shape)
    model = nn.Model()
    a, b, out = model.add_operand(tensor), model.add_operand(tensor), model.add_operand(tensor)
    fuse = model.add_operand(nn.OperandType(nn.OperandCode.INT32))
    model.set_operand_value(fuse, np.int32(nn.FuseCode.NONE))
    model.add_operation(nn.OperationCode.MUL, [a, b, fuse], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    return model


def main() -> None:
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    squared = np.zeros_like(x)
    cubed = np.zeros_like(x)
    with nn.Compilation(multiply_model(x.shape)) as compilation:
        compilation.finish()

        first = nn.Execution(compilation)
        first.set_input(0, x)
        first.set_input(1, x)
        first.set_output(0, squared)

        second = nn.Execution(compilation)
        second.set_input(0, squared)  # read when the second execution runs
        second.set_input(1, x)
        second.set_output(0, cubed)

        first_done = first.start_compute()
        second_done = second.start_compute_with_dependencies([first_done])
        print("both executions queued; the main thread is free")
        second_done.wait()  # raises nn.NNError if either execution failed
        first_done.wait()

    assert np.array_equal(squared, x**2) and np.array_equal(cubed, x**3)
    print(f"x:\n{x}")
    print(f"x**3 (second execution, after the first):\n{cubed}")
    print("async compute: OK")


if __name__ == "__main__":
    main()
