"""nnburst as an ONNX backend (``onnx.backend.base.Backend``), so ONNX's own
backend test runner can drive it: ``prepare`` converts and compiles a model,
``run`` executes it through a :class:`~nnburst.onnx.Runner`."""

from __future__ import annotations

import os
import sys
import unittest
import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from . import Runner, UnsupportedModelError, load


class NnburstRep(BackendRep):
    """A prepared model, converted when it first runs: NNAPI shapes are static,
    so the conversion uses the shapes of the inputs it is given; an int64
    input (what feeds shapes, axes and indices in ONNX graphs), a one-element
    boolean (a Loop's or If's condition, which can decide an output's length) and
    an empty tensor become constants of the values given, so what they drive is
    known at load.
    New shapes or such values convert it again."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.runner: Runner | None = None
        self._key: Any = None
        initializers = {t.name for t in model.graph.initializer}
        self._inputs = [i for i in model.graph.input if i.name not in initializers]
        #: inputs a Resize or Upsample reads as its roi or scales, and a Range's
        #: bounds: they decide an output's shape (and the positions a resize
        #: reads), so they are known at load.
        self._geometry = {
            name
            for node in model.graph.node
            if node.op_type in ("Resize", "Upsample", "Range")
            for name in (node.input[:3] if node.op_type == "Range" else node.input[1:3])
        }

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if any(not i.type.HasField("tensor_type") for i in self._inputs):
            raise UnsupportedModelError(Counter({"sequence, map or optional inputs": 1}))
        values = [np.asarray(v) for v in (inputs.values() if isinstance(inputs, dict) else inputs)]
        frozen = {
            i.name: v
            for i, v in zip(self._inputs, values)
            if _frozen(v) or i.name in self._geometry and v.dtype in _GEOMETRY_TYPES
        }
        fed = [v for i, v in zip(self._inputs, values) if i.name not in frozen]
        key = (
            tuple(v.shape for v in values),
            tuple((n, v.tobytes()) for n, v in frozen.items()),
        )
        if key != self._key:
            self._convert(values, frozen)
            self._key = key
        assert self.runner is not None
        return tuple(self.runner(*fed))

    def _convert(self, values: list[np.ndarray], frozen: dict[str, np.ndarray]) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None
        shapes = {i.name: v.shape for i, v in zip(self._inputs, values) if i.name not in frozen}
        loaded = load(self.model, shapes, constants=frozen)
        self.runner = Runner(loaded, "nnburst-reference", cache_dir=None)


#: the element types of geometry inputs that are made constants (others stay inputs,
#: and are refused by name if nnburst cannot hold them).
_GEOMETRY_TYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int32))


def _frozen(value: np.ndarray) -> bool:
    """An empty tensor has no values to feed (NNAPI has no empty operands): its
    shape, which the key holds, is all it says."""
    return value.dtype == np.int64 or value.dtype == np.bool_ and value.size == 1 or not value.size


class NnburstBackend(Backend):
    """The in-process CPU reference driver, through a burst."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> NnburstRep:
        return NnburstRep(model)

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Sequence[Any], device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


prepare = NnburstBackend.prepare
run_model = NnburstBackend.run_model
supports_device = NnburstBackend.supports_device


def run_node_tests(data_dir: str | os.PathLike[str]) -> dict[str, str]:
    """ONNX's backend test runner over the node tests in ``data_dir`` (the
    ``onnx/backend/test/data`` directory of an onnx wheel that ships them, as
    1.22.0 does), nnburst as the backend: each test's outcome by name, ``"pass"``,
    ``"unsupported: <what>"`` (the clear refusal, with what it names) or
    ``"wrong: <why>"``.  CUDA variants are left out."""
    import onnx.backend.test.loader as loader
    import onnx.backend.test.runner as runner_module

    def node_tests_only(data_dir_: str = "", kind: str | None = None) -> list[Any]:
        return loader.load_model_tests(os.fspath(data_dir), kind) if kind == "node" else []

    original = runner_module.load_model_tests
    runner_module.load_model_tests = node_tests_only  # type: ignore[assignment]
    # ONNX's own test cases compute overflowing casts and log(0) on purpose.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            # The runner calls a backend module's prepare/run_model/supports_device.
            runner = runner_module.Runner(sys.modules[__name__], __name__)  # type: ignore[arg-type]
        finally:
            runner_module.load_model_tests = original
        cases = runner.test_cases.values()
        suite = unittest.TestSuite(
            unittest.defaultTestLoader.loadTestsFromTestCase(c) for c in cases
        )
        outcomes = {_name(t): "pass" for t in _tests(suite)}  # a suite forgets its tests as it runs
        result = unittest.TestResult()
        suite.run(result)
    for test, _ in result.skipped:
        outcomes.pop(_name(test), None)
    for test, trace in result.errors + result.failures:
        last = trace.strip().splitlines()[-1]
        refused = "UnsupportedModelError" in trace
        outcomes[_name(test)] = (
            f"unsupported: {last.rsplit('cannot run: ', 1)[-1]}" if refused else f"wrong: {last}"
        )
    return outcomes


def _name(test: unittest.TestCase) -> str:
    return test.id().rsplit(".", 1)[-1].removesuffix("_cpu")


def _tests(suite: unittest.TestSuite) -> list[unittest.TestCase]:
    found: list[unittest.TestCase] = []
    for item in suite:
        found.extend(_tests(item) if isinstance(item, unittest.TestSuite) else [item])
    return found
