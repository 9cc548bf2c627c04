"""Compilation with and without a cache hit (Compilation.set_caching), on a
model whose preparation is real work: six 1024×1024 FULLY_CONNECTED layers
(the CPU driver converts every weight matrix once per compilation)."""

from __future__ import annotations

import numpy as np
import pytest

import nnburst as nn

TOKEN = b"nnburst-bench-compilation-cache!"


def fc_model(layers: int = 6, width: int = 1024) -> nn.Model:
    rng = np.random.default_rng(0)
    T = nn.OperandCode
    model = nn.Model()
    x = first = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (1, width)))
    for _ in range(layers):
        w = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (width, width)))
        model.set_operand_value(w, rng.standard_normal((width, width)).astype(np.float32))
        b = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (width,)))
        model.set_operand_value(b, np.zeros(width, np.float32))
        fuse = model.add_operand(nn.OperandType(T.INT32))
        model.set_operand_value(fuse, np.int32(nn.FuseCode.RELU))
        y = model.add_operand(nn.OperandType(T.TENSOR_FLOAT32, (1, width)))
        model.add_operation(nn.OperationCode.FULLY_CONNECTED, [x, w, b, fuse], [y])
        x = y
    model.identify_inputs_and_outputs([first], [x])
    model.finish()
    return model


@pytest.mark.parametrize("cached", [False, True], ids=["no-cache", "cache-hit"])
def test_compile(benchmark, tmp_path, cached):
    model = fc_model()

    def compile_once() -> None:
        compilation = nn.Compilation(model)
        if cached:
            compilation.set_caching(tmp_path, TOKEN)
        compilation.finish()
        compilation.close()

    compile_once()  # the first compilation writes the cache
    benchmark.pedantic(compile_once, rounds=5, iterations=1)
