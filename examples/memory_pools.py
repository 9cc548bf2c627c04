"""Memory pools: inputs and outputs in shared memory (``nn.Memory``) instead of numpy arrays.

Part 1: one ``nn.Memory.create_shared`` region holds both inputs and another
one the output. ``set_input_from_memory`` / ``set_output_from_memory`` bind
byte ranges of them, and numpy views of ``memory.buffer`` read and write the
data in place. In a burst such memories are not copied: the driver maps each
one once and caches it under a slot number, and ``memory.close()`` tells it
to drop that slot.

Part 2: a memory allocated from a ``nn.MemoryDesc`` (the NDK's
``ANeuralNetworksMemory_createFromDesc``) carries an intermediate result
from one execution to the next without the app touching it, and
``nn.Memory.copy`` copies it into a plain shared memory to read it back.

Run it (after ``pip install .``)::

    python examples/memory_pools.py
"""

from __future__ import annotations

import numpy as np

import nnburst as nn

SHAPE = (2, 4)
BYTES = int(np.prod(SHAPE)) * 4  # float32


def add_model() -> nn.Model:
    """A finished model with two inputs and one output: ``a + b``."""
    tensor = nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, SHAPE)
    model = nn.Model()
    a, b, out = model.add_operand(tensor), model.add_operand(tensor), model.add_operand(tensor)
    fuse = model.add_operand(nn.OperandType(nn.OperandCode.INT32))
    model.set_operand_value(fuse, np.int32(nn.FuseCode.NONE))
    model.add_operation(nn.OperationCode.ADD, [a, b, fuse], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    return model


def view(memory: nn.Memory, offset: int) -> np.ndarray:
    """A float32 array of SHAPE over ``memory`` at ``offset``: reads and writes go to shared memory."""
    return np.frombuffer(memory.buffer, np.float32, int(np.prod(SHAPE)), offset).reshape(SHAPE)


def shared_memory_burst(compilation: nn.Compilation) -> None:
    with nn.Memory.create_shared(2 * BYTES) as inputs, nn.Memory.create_shared(BYTES) as output:
        a, b, out = view(inputs, 0), view(inputs, BYTES), view(output, 0)
        execution = nn.Execution(compilation)
        execution.set_reusable(True)
        execution.set_input_from_memory(0, inputs, 0, BYTES)
        execution.set_input_from_memory(1, inputs, BYTES, BYTES)
        execution.set_output_from_memory(0, output, 0, BYTES)
        with nn.Burst(compilation) as burst:
            for step in range(3):
                a[...] = np.arange(8, dtype=np.float32).reshape(SHAPE)
                b[...] = 10 * step
                execution.burst_compute(burst)
                assert np.array_equal(out, a + b), (step, out)
        print(f"part 1, shared-memory pools through a burst:\n{out}")
        del a, b, out  # a numpy view keeps its mapping alive past close(): drop them first


def memory_from_descriptor(compilation: nn.Compilation) -> None:
    x = np.ones(SHAPE, np.float32)
    desc = nn.MemoryDesc()
    desc.add_output_role(compilation, 0, 1.0)  # written as output 0 by one execution ...
    desc.add_input_role(compilation, 0, 1.0)  # ... and read as input 0 by the next
    desc.finish()
    with (
        nn.Memory.from_desc(desc) as intermediate,
        nn.Memory.from_desc(desc) as final,
        nn.Memory.create_shared(BYTES) as readable,
    ):
        first = nn.Execution(compilation)
        first.set_input(0, x)
        first.set_input(1, x)
        first.set_output_from_memory(0, intermediate, 0, 0)  # descriptor memories are used whole
        first.compute()

        second = nn.Execution(compilation)
        second.set_input_from_memory(0, intermediate, 0, 0)
        second.set_input(1, x)
        second.set_output_from_memory(0, final, 0, 0)
        second.compute()  # final = (x + x) + x

        nn.Memory.copy(final, readable)
        result = view(readable, 0).copy()
    assert np.array_equal(result, 3 * x), result
    print(f"part 2, a MemoryDesc memory carried between executions:\n{result}")


def main() -> None:
    with nn.Compilation(add_model()) as compilation:
        compilation.finish()
        shared_memory_burst(compilation)
        memory_from_descriptor(compilation)
    print("memory pools: OK")


if __name__ == "__main__":
    main()
