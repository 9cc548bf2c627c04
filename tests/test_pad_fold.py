"""The graph optimiser's PAD fold (optimise._pad_into_layer): a PAD of zeros
around rows and columns, read by a float CONV_2D or DEPTHWISE_CONV_2D alone,
becomes the layer's padding.  Each case runs the model optimised and as
written; values are multiples of 1/4 so every sum is exact and the two must
agree bit for bit whatever kernels the two shapes take."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import OperandCode, OperationCode, PaddingCode
from nnburst.cpu import optimise
from nnburst.cpu.executor import PreparedModel
from nnburst.operands import OperandInfo
from tests.test_cpu_plan_layers import F32, Net

Op = OperationCode


def quarters(net: Net, shape: tuple[int, ...]) -> np.ndarray:
    return (net.rng.integers(-8, 9, shape) / 4).astype(np.float32)


def padded_layer(
    net: Net, depthwise: bool, pads: np.ndarray, implicit: int | None
) -> tuple[int, int]:
    """input -> PAD(pads) -> CONV_2D or DEPTHWISE_CONV_2D; (the input, the PAD's output)."""
    n, h, w, c = 1, *(int(v) for v in net.rng.integers(3, 12, 2)), int(net.rng.integers(1, 20))
    x = net.input(OperandInfo(F32, (n, h, w, c)))
    padded_dims = tuple(int(d + pads[k].sum()) for k, d in enumerate((n, h, w, c)))
    pad_values = net.const(OperandInfo(OperandCode.TENSOR_INT32, (4, 2)), pads.astype(np.int32))
    t = net.op(Op.PAD, [x, pad_values], OperandInfo(F32, padded_dims))
    pn, ph, pw, pc = padded_dims
    fh, fw = (int(v) for v in net.rng.choice([1, 3, 5], 2))
    fh, fw = min(fh, ph), min(fw, pw)
    stride = int(net.rng.integers(1, 3))
    out_c = pc if depthwise else int(net.rng.integers(1, 24))
    weights = quarters(net, (1, fh, fw, pc) if depthwise else (out_c, fh, fw, pc))
    args = [t, net.const(OperandInfo(F32, weights.shape), weights)]
    args.append(net.const(OperandInfo(F32, (out_c,)), quarters(net, (out_c,))))
    if implicit is None:
        explicit = [int(v) for v in net.rng.integers(0, 2, 4)]  # left, right, top, bottom
        args += [net.scalar(v) for v in explicit]
        oh = (ph + explicit[2] + explicit[3] - fh) // stride + 1
        ow = (pw + explicit[0] + explicit[1] - fw) // stride + 1
    else:
        args.append(net.scalar(implicit))
        same = implicit == PaddingCode.SAME
        oh = -(-ph // stride) if same else (ph - fh) // stride + 1
        ow = -(-pw // stride) if same else (pw - fw) // stride + 1
    args += [net.scalar(stride), net.scalar(stride)]
    if depthwise:
        args.append(net.scalar(1))
    args.append(net.scalar(int(net.rng.integers(0, 4))))
    code = Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D
    dims = (pn, oh, ow, out_c)
    net.output(net.op(code, args, OperandInfo(F32, dims)))
    return x, t


def run_both(net: Net, monkeypatch: pytest.MonkeyPatch) -> tuple[PreparedModel, int]:
    """The model optimised, after checking it gives what it gives as written;
    and how many operations the optimiser removed."""
    model = net.model()
    optimised = PreparedModel(model)
    with monkeypatch.context() as patch:
        patch.setattr(optimise, "ENABLED", False)
        written = PreparedModel(model)
    x = net.inputs[0]
    values = [quarters(net, net.info(x).dimensions or ())]
    for got, want in zip(optimised.run(values), written.run(values)):
        np.testing.assert_array_equal(got, want)
    removed = len(written.main.subgraph.operations) - len(optimised.main.subgraph.operations)
    return optimised, removed


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
@pytest.mark.parametrize("seed", range(12))
def test_a_padded_layer_takes_the_padding_and_gives_the_same_bits(
    depthwise: bool, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(1000 + seed)
    pads = np.zeros((4, 2), np.int64)
    pads[1:3] = net.rng.integers(0, 3, (2, 2))
    implicit = (None, PaddingCode.SAME, PaddingCode.VALID)[seed % 3]
    padded_layer(net, depthwise, pads, implicit)
    optimised, removed = run_both(net, monkeypatch)
    assert removed == 1
    assert Op.PAD not in [op.code for op in optimised.main.subgraph.operations]


@pytest.mark.parametrize("case", ["channels", "batches", "read twice"])
def test_a_pad_the_layer_cannot_take_stays(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    net = Net(77)
    pads = np.zeros((4, 2), np.int64)
    pads[1:3] = 1
    if case == "channels":
        pads[3] = (0, 2)
    if case == "batches":
        pads[0] = (1, 0)
    _, padded = padded_layer(net, True, pads, PaddingCode.VALID)
    if case == "read twice":
        net.output(net.op(Op.RELU, [padded], net.info(padded)))
    optimised, removed = run_both(net, monkeypatch)
    assert removed == 0
    assert Op.PAD in [op.code for op in optimised.main.subgraph.operations]
