"""Mutated real model files get ``BadDataError`` (or load), never another
exception: a few hundred mutants per format here, many more with
``--run-stress``.  Each mutant is made from its own seed, which a failure
names, so it can be made again."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from nnburst import tflite
from nnburst.errors import BadDataError

from .model_cache import wheel_member

onnx = pytest.importorskip("onnx", reason="nnburst.onnx needs onnx (pip install '.[onnx]')")
from onnx import TensorProto, helper  # noqa: E402

from nnburst import onnx as nn_onnx  # noqa: E402

#: A small stateful int8 TFLite model (resource variables, per-channel weights).
TFLITE_MODEL = ("pymicro-wakeword", "1.0.0", "pymicro_wakeword/models/okay_nabu.tflite")
#: A small ONNX model (dense and convolution layers, constants folded at load).
ONNX_MODEL = ("openwakeword", "0.5.1", "openwakeword/resources/models/alexa_v0.1.onnx")


def only_bad_data(load: Callable[[bytes], Any], mutants: Any) -> collections.Counter[str]:
    outcomes: collections.Counter[str] = collections.Counter()
    for seed, data in mutants:
        try:
            load(data)
            outcomes["loaded"] += 1
        except BadDataError:
            outcomes["refused"] += 1
        except Exception as exc:
            pytest.fail(f"mutant {seed}: {type(exc).__name__}: {exc}")
    return outcomes


def flipped_bytes(data: bytes, seeds: range) -> Any:
    """1-3 bytes changed, mostly in the first 4 KiB (the tables and vtables, where
    an offset sends a reader elsewhere), else anywhere."""
    for seed in seeds:
        rng = np.random.default_rng(seed)
        mutant = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            end = min(len(mutant), 4096) if rng.random() < 0.7 else len(mutant)
            mutant[int(rng.integers(0, end))] = int(rng.integers(0, 256))
        yield seed, bytes(mutant)


def _mutate_node(rng: np.random.Generator, model: Any) -> None:
    nodes = model.graph.node
    node = nodes[int(rng.integers(0, len(nodes)))]
    other = nodes[int(rng.integers(0, len(nodes)))]
    kind = int(rng.integers(0, 8))
    if kind == 0:
        node.op_type = str(rng.choice(["", "Foo", "Cönv", other.op_type]))
    elif kind == 1 and node.input:
        node.input[int(rng.integers(0, len(node.input)))] = str(rng.choice(["", "nope", node.output[0]]))  # fmt: skip
    elif kind == 2 and node.attribute:
        node.attribute[int(rng.integers(0, len(node.attribute)))].type = int(rng.integers(0, 14))
    elif kind == 3 and model.graph.initializer:
        tensor = model.graph.initializer[int(rng.integers(0, len(model.graph.initializer)))]
        if tensor.dims:
            tensor.dims[int(rng.integers(0, len(tensor.dims)))] = int(rng.integers(-2, 100_000))
        else:
            tensor.data_type = int(rng.integers(0, 24))
    elif kind == 4:
        del node.input[:]
    elif kind == 5:
        node.output[0] = other.output[0]
    elif kind == 6:
        node.CopyFrom(helper.make_node("Constant", [], list(node.output), value_ints=[1, 2]))
    else:
        shape = helper.make_tensor("big", TensorProto.INT64, [2], [60000, 60000])
        node.CopyFrom(helper.make_node("ConstantOfShape", [], list(node.output)))
        model.graph.initializer.append(shape)
        node.input.append("big")


def mutated_graphs(data: bytes, seeds: range) -> Any:
    """1-2 structural edits: operator types, inputs, attribute and tensor types,
    dimensions, a Constant of INTS, a ConstantOfShape of 60000x60000."""
    for seed in seeds:
        rng = np.random.default_rng(seed)
        model = onnx.load_from_string(data)
        for _ in range(int(rng.integers(1, 3))):
            _mutate_node(rng, model)
        yield seed, model.SerializeToString()


def count(request: pytest.FixtureRequest, quick: int, stress: int) -> range:
    return range(stress if request.config.getoption("--run-stress") else quick)


def test_mutated_tflite_files_are_bad_data(request: pytest.FixtureRequest) -> None:
    data = wheel_member(*TFLITE_MODEL).read_bytes()
    outcomes = only_bad_data(tflite.load, flipped_bytes(data, count(request, 120, 3000)))
    assert outcomes["refused"] > 0


def test_mutated_onnx_graphs_are_bad_data(request: pytest.FixtureRequest) -> None:
    data = wheel_member(*ONNX_MODEL).read_bytes()
    outcomes = only_bad_data(nn_onnx.load, mutated_graphs(data, count(request, 300, 5000)))
    assert outcomes["refused"] > 0


def test_mutated_onnx_bytes_are_bad_data(request: pytest.FixtureRequest) -> None:
    data = wheel_member(*ONNX_MODEL).read_bytes()
    outcomes = only_bad_data(nn_onnx.load, flipped_bytes(data, count(request, 150, 3000)))
    assert outcomes["refused"] > 0
