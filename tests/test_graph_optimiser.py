"""The CPU driver's graph rewrites (nnburst/cpu/optimise.py).

Each rewrite is checked twice: the optimised graph holds the operations it
should, and gives the unoptimised graph's answers (exactly where the rewrite
computes the same expression, within float rounding where weights are
scaled).  Each guard has a case the rewrite must leave alone."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from nnburst.codes import FuseCode, OperandCode, OperationCode, PaddingCode
from nnburst.cpu import compilation_cache, optimise, prepare
from nnburst.cpu.driver import cpu_device
from nnburst.cpu.executor import PreparedModel
from nnburst.cpu.registry import ExecutionContext, OperationSignature, lookup
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.operands import OperandInfo

F32, I32 = OperandCode.TENSOR_FLOAT32, OperandCode.INT32
Op = OperationCode


class Graph:
    """A subgraph written operand by operand (the tests' models)."""

    def __init__(self) -> None:
        self.operands: list[Operand] = []
        self.operations: list[Operation] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    def input(self, shape: Sequence[int]) -> int:
        self.inputs.append(
            self._add(Operand(OperandInfo(F32, tuple(shape)), Lifetime.SUBGRAPH_INPUT))
        )
        return self.inputs[-1]

    def const(self, value: object, code: OperandCode = F32) -> int:
        dtype = {F32: np.float32, I32: np.int32, OperandCode.BOOL: np.bool_}.get(code, np.int32)
        array = np.asarray(value, dtype)
        info = OperandInfo(code, () if code in (I32, OperandCode.BOOL) else array.shape)
        return self._add(Operand(info, Lifetime.CONSTANT_COPY, array))

    def fuse(self, code: int = FuseCode.NONE) -> int:
        return self.const(int(code), I32)

    def op(self, code: OperationCode, inputs: Sequence[int], shape: Sequence[int]) -> int:
        out = self._add(Operand(OperandInfo(F32, tuple(shape)), Lifetime.TEMPORARY_VARIABLE))
        self.operations.append(Operation(code, tuple(inputs), (out,)))
        return out

    def output(self, index: int) -> int:
        operand = self.operands[index]
        self.operands[index] = Operand(operand.info, Lifetime.SUBGRAPH_OUTPUT)
        self.outputs.append(index)
        return index

    def model(self) -> HalModel:
        return HalModel(
            Subgraph(self.operands, self.operations, tuple(self.inputs), tuple(self.outputs))
        )

    def _add(self, operand: Operand) -> int:
        self.operands.append(operand)
        return len(self.operands) - 1

    # -- layers ---------------------------------------------------------------------------
    def conv(
        self, x: int, shape: Sequence[int], depth_out: int, nchw: bool = False, fuse: int = 0
    ) -> int:
        rng = np.random.default_rng(len(self.operands))
        depth_in = shape[1] if nchw else shape[3]
        w = self.const(rng.normal(0, 0.5, (depth_out, 3, 3, depth_in)))
        b = self.const(rng.normal(0, 0.5, depth_out))
        out = (1, depth_out, *shape[2:]) if nchw else (*shape[:3], depth_out)
        args = [x, w, b, self.const(PaddingCode.SAME, I32), self.const(1, I32), self.const(1, I32)]
        args.append(self.fuse(fuse))
        if nchw:
            args.append(self.const(True, OperandCode.BOOL))
        return self.op(Op.CONV_2D, args, out)

    def depthwise(self, x: int, shape: Sequence[int]) -> int:
        rng = np.random.default_rng(len(self.operands))
        w = self.const(rng.normal(0, 0.5, (1, 3, 3, shape[3])))
        b = self.const(rng.normal(0, 0.5, shape[3]))
        args = [x, w, b, self.const(PaddingCode.SAME, I32), self.const(1, I32), self.const(1, I32)]
        args += [self.const(1, I32), self.fuse()]
        return self.op(Op.DEPTHWISE_CONV_2D, args, shape)

    def fully_connected(self, x: int, depth_in: int, units: int) -> int:
        rng = np.random.default_rng(len(self.operands))
        w = self.const(rng.normal(0, 0.5, (units, depth_in)))
        b = self.const(rng.normal(0, 0.5, units))
        return self.op(Op.FULLY_CONNECTED, [x, w, b, self.fuse()], (1, units))

    def binary(
        self, code: OperationCode, a: int, b: int, shape: Sequence[int], fuse: int = 0
    ) -> int:
        return self.op(code, [a, b, self.fuse(fuse)], shape)


def prepared(model: HalModel, enabled: bool, monkeypatch: pytest.MonkeyPatch) -> PreparedModel:
    with monkeypatch.context() as patch:
        patch.setattr(optimise, "ENABLED", enabled)
        return PreparedModel(model)


def codes(prepared_model: PreparedModel) -> list[str]:
    return [op.signature.code.name for op in prepared_model.main.operations]


def compare(
    graph: Graph, monkeypatch: pytest.MonkeyPatch, exact: bool = False, seed: int = 0
) -> list[str]:
    """The optimised graph's operations, after checking it answers as the graph as written."""
    model = graph.model()
    rng = np.random.default_rng(seed)
    feeds = [
        rng.uniform(-6, 6, model.main.operands[i].info.dimensions).astype(np.float32)
        for i in graph.inputs
    ]
    optimised, written = prepared(model, True, monkeypatch), prepared(model, False, monkeypatch)
    assert codes(written) == [op.code.name for op in graph.operations]
    for got, want in zip(optimised.run(feeds), written.run(feeds)):
        if exact:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return codes(optimised)


NHWC, NCHW = (1, 6, 5, 3), (1, 3, 6, 5)


# -- folding into a layer -----------------------------------------------------------


@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
def test_a_batch_norm_folds_into_the_convolution(
    nchw: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    shape = NCHW if nchw else NHWC
    conv = g.conv(g.input(shape), shape, 4, nchw)
    out = (1, 4, 6, 5) if nchw else (1, 6, 5, 4)
    per_channel = (4, 1, 1) if nchw else (4,)  # ONNX's [C, 1, 1] against NNAPI's [C]
    rng = np.random.default_rng(1)
    scaled = g.binary(Op.MUL, conv, g.const(rng.uniform(0.5, 2, per_channel)), out)
    g.output(g.binary(Op.ADD, g.const(rng.normal(0, 1, per_channel)), scaled, out, FuseCode.RELU6))
    assert compare(g, monkeypatch) == ["CONV_2D"]


def test_scales_fold_into_depthwise_and_fully_connected_layers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    g = Graph()
    dw = g.depthwise(g.input(NHWC), NHWC)
    g.output(g.binary(Op.MUL, dw, g.const([0.5, -2.0, 3.0]), NHWC, FuseCode.RELU))
    fc = g.fully_connected(g.input((1, 7)), 7, 4)
    scaled = g.binary(Op.MUL, fc, g.const(1.5), (1, 4))  # a scalar scales every unit
    g.output(g.binary(Op.SUB, scaled, g.const([[1.0, 2.0, 3.0, 4.0]]), (1, 4)))
    assert compare(g, monkeypatch) == ["DEPTHWISE_CONV_2D", "FULLY_CONNECTED"]


@pytest.mark.parametrize(
    "guard", ["another reader", "model output", "not per channel", "conv activation", "c - x"]
)
def test_a_scale_that_cannot_fold_is_left(guard: str, monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    conv = g.conv(g.input(NHWC), NHWC, 4, fuse=FuseCode.RELU if guard == "conv activation" else 0)
    out = (1, 6, 5, 4)
    scale = g.const(np.full((1, 6, 1, 1), 2.0) if guard == "not per channel" else [1.0, 2, 3, 4])
    if guard == "c - x":
        g.output(g.binary(Op.SUB, scale, conv, out))
    else:
        g.output(g.binary(Op.MUL, conv, scale, out))
    if guard == "another reader":
        g.output(g.op(Op.RELU, [conv], out))
    if guard == "model output":
        g.output(conv)
    assert "CONV_2D" in compare(g, monkeypatch, exact=True)
    assert len(compare(g, monkeypatch, exact=True)) == len(g.operations)


# -- activations ----------------------------------------------------------------------


def test_activations_fuse_into_their_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    conv = g.conv(g.input(NHWC), NHWC, 4)
    g.output(g.op(Op.RELU6, [g.op(Op.RELU, [conv], (1, 6, 5, 4))], (1, 6, 5, 4)))
    x, y = g.input((2, 3)), g.input((2, 3))
    added = g.binary(Op.ADD, x, y, (2, 3))
    g.output(
        g.op(Op.MINIMUM, [g.op(Op.MAXIMUM, [added, g.const(-1.0)], (2, 3)), g.const([1.0])], (2, 3))
    )
    assert compare(g, monkeypatch, exact=True) == ["CONV_2D", "ADD"]
    fuses = [
        op.inputs[-1] for op in prepared(g.model(), True, monkeypatch).main.subgraph.operations
    ]
    model = prepared(g.model(), True, monkeypatch).main.subgraph
    assert [int(model.operands[i].value) for i in fuses] == [FuseCode.RELU6, FuseCode.RELU1]


def test_min_max_chains_become_one_operation(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x = g.input((2, 5))
    g.output(g.op(Op.MINIMUM, [g.op(Op.MAXIMUM, [x, g.const(0.0)], (2, 5)), g.const(6.0)], (2, 5)))
    g.output(g.op(Op.MAXIMUM, [g.const([0.0]), x], (2, 5)))
    leaky = g.binary(Op.MUL, x, g.const(0.125), (2, 5))
    g.output(g.op(Op.MAXIMUM, [x, leaky], (2, 5)))
    assert compare(g, monkeypatch, exact=True) == ["RELU6", "RELU", "PRELU"]


@pytest.mark.parametrize("guard", ["bounds", "alpha above 1", "clamp read twice"])
def test_chains_nnapi_has_no_activation_for_are_left(
    guard: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    x = g.input((2, 5))
    if guard == "bounds":  # a clamp to [0, 1] is no fused activation (hard-sigmoid's)
        g.output(
            g.op(Op.MINIMUM, [g.op(Op.MAXIMUM, [x, g.const(0.5)], (2, 5)), g.const(1.0)], (2, 5))
        )
    elif guard == "alpha above 1":
        g.output(g.op(Op.MAXIMUM, [x, g.binary(Op.MUL, x, g.const(1.5), (2, 5))], (2, 5)))
    else:
        low = g.output(g.op(Op.MAXIMUM, [x, g.const(-1.0)], (2, 5)))
        g.output(g.op(Op.MINIMUM, [low, g.const(1.0)], (2, 5)))
    assert len(compare(g, monkeypatch, exact=True)) == len(g.operations)


def hard_swish(
    g: Graph, x: int, shape: tuple[int, ...], last: OperationCode, shift: float = 3.0, y: int = -1
) -> int:
    """x * RELU6(y + shift) / 6 (y = x unless given), the last step ``last``."""
    shifted = g.binary(Op.ADD, x if y < 0 else y, g.const([shift]), shape)
    gate = g.op(Op.RELU6, [shifted], shape)
    product = g.binary(Op.MUL, x, gate, shape)
    return g.binary(last, product, g.const(6.0 if last == Op.DIV else 1 / 6), shape)


@pytest.mark.parametrize("last", [Op.DIV, Op.MUL])
def test_a_hard_swish_chain_is_one_operation(
    last: OperationCode, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Graph()
    x = g.input((3, 7))
    g.output(hard_swish(g, x, (3, 7), last))
    assert compare(g, monkeypatch, exact=last == Op.DIV) == ["HARD_SWISH"]


@pytest.mark.parametrize("guard", ["gate read elsewhere", "x + 2", "another x"])
def test_what_is_not_a_hard_swish_is_left(guard: str, monkeypatch: pytest.MonkeyPatch) -> None:
    g = Graph()
    x, y = g.input((3, 7)), g.input((3, 7))
    shift = 2.0 if guard == "x + 2" else 3.0
    g.output(hard_swish(g, x, (3, 7), Op.DIV, shift, y if guard == "another x" else -1))
    if guard == "gate read elsewhere":
        g.output(g.operations[1].outputs[0])  # the RELU6 gate
    assert "HARD_SWISH" not in compare(g, monkeypatch, exact=True)


# -- identities and constants -----------------------------------------------------------


def test_identities_are_dropped_and_constants_computed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    g = Graph()
    x = g.input((2, 6))
    same = g.op(Op.RESHAPE, [x, g.const([2, 6], OperandCode.TENSOR_INT32)], (2, 6))
    plus_zero = g.binary(Op.ADD, same, g.const(0.0), (2, 6))
    bias = g.binary(Op.ADD, g.const(np.arange(6.0)), g.const(np.ones(6)), (6,))
    g.output(g.binary(Op.MUL, plus_zero, bias, (2, 6)))
    assert compare(g, monkeypatch, exact=True) == ["MUL"]


def test_identities_and_constants_the_model_outputs_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    g = Graph()
    x = g.input((2, 6))
    g.output(g.binary(Op.MUL, x, g.const(1.0), (2, 6)))
    g.output(g.binary(Op.ADD, g.const(np.arange(6.0)), g.const(np.ones(6)), (6,)))
    g.output(g.binary(Op.ADD, x, g.const(np.ones(6)), (2, 6)))  # not a zero: computed
    assert compare(g, monkeypatch, exact=True) == ["MUL", "ADD", "ADD"]


# -- the driver ---------------------------------------------------------------------------


def batch_norm_model() -> HalModel:
    g = Graph()
    conv = g.conv(g.input(NHWC), NHWC, 4)
    scaled = g.binary(Op.MUL, conv, g.const([0.5, 1, 2, 4]), (1, 6, 5, 4))
    g.output(g.binary(Op.ADD, scaled, g.const([1.0, 0, -1, 2]), (1, 6, 5, 4), FuseCode.RELU))
    return g.model()


def test_the_compilation_cache_keeps_the_optimised_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, token = batch_norm_model(), b"\x01" * 32
    x = np.random.default_rng(3).uniform(-1, 1, NHWC).astype(np.float32)
    first = cpu_device().prepare_model(model, cache=(str(tmp_path), token))
    path, key = (
        compilation_cache.cache_path(tmp_path, token),
        compilation_cache.structure_key(model),
    )
    compiled = compilation_cache.load_compiled(path, key, model.main)
    assert compiled is not None
    assert len(compiled.order) == len(compiled.states) == 1  # one CONV_2D, its weights scaled

    def not_again(subgraph: object) -> object:
        raise AssertionError("a cached compilation ran the optimiser")

    with monkeypatch.context() as patch:
        patch.setattr(prepare, "optimise", not_again)
        second = cpu_device().prepare_model(model, cache=(str(tmp_path), token))
    assert (first.cache_hit, second.cache_hit) == (False, True)
    assert codes(second.executor) == ["CONV_2D"]
    np.testing.assert_array_equal(first.executor.run([x])[0], second.executor.run([x])[0])


def test_a_cached_graph_that_does_not_fit_is_compiled_afresh(tmp_path: Path) -> None:
    model, token = batch_norm_model(), b"\x03" * 32
    x = np.random.default_rng(4).uniform(-1, 1, NHWC).astype(np.float32)
    want = cpu_device().prepare_model(model, cache=(str(tmp_path), token)).executor.run([x])[0]
    path, key = (
        compilation_cache.cache_path(tmp_path, token),
        compilation_cache.structure_key(model),
    )
    compiled = compilation_cache.load_compiled(path, key, model.main)
    assert compiled is not None
    (conv,) = compiled.subgraph.operations
    conv.inputs = (10**6, *conv.inputs[1:])  # the convolution reads an operand that is not there
    assert compilation_cache.save_compiled(path, key, model.main, compiled)
    again = cpu_device().prepare_model(model, cache=(str(tmp_path), token))
    assert not again.cache_hit
    np.testing.assert_array_equal(again.executor.run([x])[0], want)


def test_rewrites_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="nnburst.compilation"):
        PreparedModel(batch_norm_model())
    assert "3 operations -> 1" in caplog.text
    assert "MUL by a constant folded into CONV_2D's weights and bias" in caplog.text


def test_an_invalid_model_is_refused_before_any_rewrite(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MUL with a bad activation code folded away would otherwise vanish."""
    model = batch_norm_model()
    mul = model.main.operations[1]
    model.main.operands[mul.inputs[2]] = Operand(
        OperandInfo(I32, ()), Lifetime.CONSTANT_COPY, np.array(9, np.int32)
    )
    with pytest.raises(Exception, match="MUL"):
        prepared(model, True, monkeypatch)


def test_the_bound_hard_swish_computes_what_the_operation_does() -> None:
    registration = lookup(Op.HARD_SWISH)
    assert registration is not None and registration.bind is not None
    info = OperandInfo(F32, (4, 6))
    signature = OperationSignature(Op.HARD_SWISH, [info], [info])
    kernel = registration.bind(signature, None)
    assert kernel is not None
    x = np.random.default_rng(5).uniform(-8, 8, (4, 6)).astype(np.float32)
    x[0, :6] = [np.nan, np.inf, -np.inf, -3.0, 3.0, 3e38]
    with np.errstate(all="ignore"):  # as the executor runs kernels: inf * 0 is NaN
        (want,) = registration.execute(ExecutionContext(signature, [x], None))
        (got,) = kernel([x])
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.float32


@pytest.mark.parametrize("layer", ["3x3", "1x1", "depthwise"])
def test_nchw_convolutions_are_bound_and_compute_what_the_operation_does(layer: str) -> None:
    g = Graph()
    shape = (1, 4, 6, 5)
    x = g.input(shape)
    rng = np.random.default_rng(6)
    size, depth_out = (1, 8) if layer == "1x1" else (3, 4)
    if layer == "depthwise":
        w = g.const(rng.normal(0, 1, (1, 3, 3, 4)))
        extra = [g.const(1, I32)]
        code = Op.DEPTHWISE_CONV_2D
    else:
        w = g.const(rng.normal(0, 1, (depth_out, size, size, 4)))
        extra, code = [], Op.CONV_2D
    args = [x, w, g.const(rng.normal(0, 1, depth_out)), g.const(PaddingCode.SAME, I32)]
    args += [g.const(1, I32), g.const(1, I32), *extra, g.fuse(FuseCode.RELU6)]
    g.output(g.op(code, [*args, g.const(True, OperandCode.BOOL)], (1, depth_out, 6, 5)))
    (op,) = PreparedModel(g.model()).main.operations
    assert op.kernel is not None
    feed = rng.uniform(-3, 3, shape).astype(np.float32)
    inputs = [feed if i == x else g.operands[i].value for i in op.inputs]
    (want,) = op.registration.execute(ExecutionContext(op.signature, inputs, op.state))
    (got,) = op.kernel(inputs)
    np.testing.assert_array_equal(got, want)
    assert got.shape == (1, depth_out, 6, 5)
