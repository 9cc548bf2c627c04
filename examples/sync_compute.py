"""Synchronous execution: build a model, compile it, run it with ``Execution.compute()``.

The model is one dense layer, ``relu(x · Wᵀ + b)``, with the weights and bias
stored in the model as constants. ``compute()`` blocks until the outputs are
written into the numpy array bound with ``set_output``. The compilation names
its device explicitly (the in-process CPU reference driver), so this example
also measures how long the computation took inside the driver.

Run it (after ``pip install .``)::

    python examples/sync_compute.py
"""

from __future__ import annotations

import numpy as np

import nnburst as nn


def dense_relu_model(weights: np.ndarray, bias: np.ndarray) -> nn.Model:
    """A finished model computing ``relu(x · weightsᵀ + bias)`` for a batch of 2 rows."""
    units, features = weights.shape
    model = nn.Model()
    x = model.add_operand(nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, (2, features)))
    w = model.add_operand(nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, (units, features)))
    b = model.add_operand(nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, (units,)))
    fuse = model.add_operand(nn.OperandType(nn.OperandCode.INT32))
    y = model.add_operand(nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, (2, units)))
    model.set_operand_value(w, weights)
    model.set_operand_value(b, bias)
    model.set_operand_value(fuse, np.int32(nn.FuseCode.RELU))
    model.add_operation(nn.OperationCode.FULLY_CONNECTED, [x, w, b, fuse], [y])
    model.identify_inputs_and_outputs([x], [y])
    model.finish()
    return model


def main() -> None:
    weights = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 1], [-1, -1, -1]], np.float32)
    bias = np.array([0, 0, 0.5, 0], np.float32)
    model = dense_relu_model(weights, bias)

    cpu = next(d for d in nn.get_devices() if d.name == "nnburst-reference")
    x = np.array([[1, 2, 3], [-1, 0, 1]], np.float32)
    y = np.empty((2, 4), np.float32)
    with nn.Compilation(model, devices=[cpu]) as compilation:
        compilation.finish()
        execution = nn.Execution(compilation)
        execution.set_input(0, x)
        execution.set_output(0, y)
        execution.set_measure_timing(True)  # allowed: the compilation has exactly one device
        execution.compute()
        driver_ns = execution.get_duration(nn.DurationCode.IN_DRIVER)

    expected = np.maximum(x @ weights.T + bias, 0)
    assert np.array_equal(y, expected), (y, expected)
    print(f"device: {cpu.name}")
    print(f"output shape: {execution.get_output_operand_dimensions(0)}")
    print(f"output:\n{y}")
    if driver_ns != 2**64 - 1:
        print(f"time in driver: {driver_ns / 1000:.1f} µs")
    print("sync compute: OK")


if __name__ == "__main__":
    main()
