"""The C plan beyond elementwise runs (nnburst/cpu/plan.py, csrc/plan.c): float and
int8 convolutions, fully connected layers, pools, the moves (concatenation,
slices, pads, transposes, reshapes) and the PAD + ADD pair, each chain run as
one C call and compared with the same model run operation by operation, over
random shapes, strides, paddings and tails: equal bit for bit."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from nnburst._bindings import POOL_MAX
from nnburst._bindings import plan as c_plan
from nnburst.codes import FuseCode, OperandCode, OperationCode, PaddingCode
from nnburst.cpu import optimise, plan
from nnburst.cpu.executor import PreparedModel
from nnburst.errors import BadDataError
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.operands import OperandInfo

Op = OperationCode
F32, I32 = OperandCode.TENSOR_FLOAT32, OperandCode.INT32
Q8 = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED


@pytest.fixture(autouse=True)
def graph_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(optimise, "ENABLED", False)
    monkeypatch.setattr(plan, "BLAS_MACS_IN_PLAN", 0)  # BLAS sums in another order


class Net:
    """A subgraph of any operand types, written operand by operand."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.operands: list[Operand] = []
        self.operations: list[Operation] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    def add(self, info: OperandInfo, lifetime: Lifetime, value: object = None) -> int:
        self.operands.append(Operand(info, lifetime, value))
        return len(self.operands) - 1

    def input(self, info: OperandInfo) -> int:
        self.inputs.append(self.add(info, Lifetime.SUBGRAPH_INPUT))
        return self.inputs[-1]

    def const(self, info: OperandInfo, value: np.ndarray) -> int:
        return self.add(info, Lifetime.CONSTANT_COPY, np.asarray(value, info.dtype))

    def scalar(self, value: int) -> int:
        return self.const(OperandInfo(I32, ()), np.int32(value))

    def op(self, code: OperationCode, inputs: Sequence[int], out: OperandInfo) -> int:
        index = self.add(out, Lifetime.TEMPORARY_VARIABLE)
        self.operations.append(Operation(code, tuple(inputs), (index,)))
        return index

    def info(self, index: int) -> OperandInfo:
        return self.operands[index].info

    def output(self, index: int) -> None:
        operand = self.operands[index]
        self.operands[index] = Operand(operand.info, Lifetime.SUBGRAPH_OUTPUT)
        self.outputs.append(index)

    def model(self) -> HalModel:
        subgraph = Subgraph(self.operands, self.operations, tuple(self.inputs), tuple(self.outputs))
        return HalModel(subgraph)

    # -- layers -------------------------------------------------------------------------
    def like(self, x: int, dims: Sequence[int], scale: float | None = None) -> OperandInfo:
        info = self.info(x)
        if scale is None:
            return OperandInfo(info.code, tuple(dims), info.scale, info.zero_point)
        return OperandInfo(info.code, tuple(dims), scale, int(self.rng.integers(-20, 20)))

    def conv(self, x: int, depth_out: int, depthwise: bool = False, nchw: bool = False) -> int:
        info = self.info(x)
        n, h, w, c = info.dimensions or ()
        if nchw:
            n, c, h, w = info.dimensions or ()
        fh, fw = (int(v) for v in self.rng.integers(1, 4, 2))
        stride = int(self.rng.integers(1, 3))
        padding = PaddingCode.SAME if self.rng.random() < 0.6 else PaddingCode.VALID
        if padding == PaddingCode.VALID:
            fh, fw = min(fh, h), min(fw, w)
        if depthwise:
            depth_out = c
        quantized = info.code == Q8
        if quantized:
            w_info = OperandInfo(
                Q8,
                (1 if depthwise else depth_out, fh, fw, c if not depthwise else depth_out),
                0.02,
                0,
            )
            weights = self.rng.integers(-127, 128, w_info.dimensions)
            b_info = OperandInfo(OperandCode.TENSOR_INT32, (depth_out,), info.scale * 0.02, 0)
            bias = self.rng.integers(-3000, 3000, depth_out)
        else:
            w_info = OperandInfo(
                F32, (1 if depthwise else depth_out, fh, fw, c if not depthwise else depth_out)
            )
            weights = self.rng.normal(0, 0.5, w_info.dimensions)
            b_info = OperandInfo(F32, (depth_out,))
            bias = self.rng.normal(0, 0.5, depth_out)
        oh = -(-h // stride) if padding == PaddingCode.SAME else (h - fh) // stride + 1
        ow = -(-w // stride) if padding == PaddingCode.SAME else (w - fw) // stride + 1
        fuse = int(self.rng.integers(0, 4))
        args = [x, self.const(w_info, weights), self.const(b_info, bias), self.scalar(padding)]
        args += [self.scalar(stride), self.scalar(stride)]
        if depthwise:
            args.append(self.scalar(1))
        args.append(self.scalar(fuse))
        if nchw:
            args.append(self.const(OperandInfo(OperandCode.BOOL, ()), np.bool_(True)))
        dims = (n, depth_out, oh, ow) if nchw else (n, oh, ow, depth_out)
        out = self.like(x, dims, 0.05 if quantized else None)
        return self.op(Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D, args, out)

    def fully_connected(self, x: int, units: int) -> int:
        info = self.info(x)
        depth_in = int(np.prod(info.dimensions)) // info.dimensions[0]
        if info.code == Q8:
            w_info = OperandInfo(Q8, (units, depth_in), 0.02, 0)
            b_info = OperandInfo(OperandCode.TENSOR_INT32, (units,), info.scale * 0.02, 0)
            weights = self.rng.integers(-127, 128, (units, depth_in))
            bias = self.rng.integers(-3000, 3000, units)
        else:
            w_info, b_info = OperandInfo(F32, (units, depth_in)), OperandInfo(F32, (units,))
            weights, bias = self.rng.normal(0, 0.5, (units, depth_in)), self.rng.normal(0, 1, units)
        args = [x, self.const(w_info, weights), self.const(b_info, bias), self.scalar(0)]
        out = self.like(x, (info.dimensions[0], units), 0.1 if info.code == Q8 else None)
        return self.op(Op.FULLY_CONNECTED, args, out)

    def pool(self, x: int, code: OperationCode) -> int:
        n, h, w, c = self.info(x).dimensions or ()
        fh, fw = min(2, h), min(2, w)
        stride = int(self.rng.integers(1, 3))
        args = [x, self.scalar(PaddingCode.VALID), self.scalar(stride), self.scalar(stride)]
        args += [self.scalar(fw), self.scalar(fh), self.scalar(int(self.rng.integers(0, 4)))]
        dims = (n, (h - fh) // stride + 1, (w - fw) // stride + 1, c)
        return self.op(code, args, self.like(x, dims))

    def concat(self, xs: Sequence[int], axis: int) -> int:
        dims = list(self.info(xs[0]).dimensions or ())
        dims[axis] = sum((self.info(x).dimensions or ())[axis] for x in xs)
        return self.op(Op.CONCATENATION, [*xs, self.scalar(axis)], self.like(xs[0], dims))

    def vector(self, values: Sequence[int]) -> int:
        return self.const(OperandInfo(OperandCode.TENSOR_INT32, (len(values),)), np.array(values))

    def strided_slice(self, x: int) -> int:
        dims = self.info(x).dimensions or ()
        begin, end, strides, out = [], [], [], []
        for d in dims:
            b = int(self.rng.integers(0, d))
            e = int(self.rng.integers(b + 1, d + 1))
            s = int(self.rng.integers(1, 3))
            if self.rng.random() < 0.2 and d > 1:  # reversed
                b, e, s = e - 1, (b - 1 if b else -d - 1), -s
                out.append(len(range(b, -1 if e < 0 else e, s)))
            else:
                out.append(len(range(b, e, s)))
            begin.append(b), end.append(e), strides.append(s)
        args = [x, self.vector(begin), self.vector(end), self.vector(strides)]
        args += [self.scalar(0), self.scalar(0), self.scalar(0)]
        return self.op(Op.STRIDED_SLICE, args, self.like(x, out))

    def slice(self, x: int) -> int:
        dims = self.info(x).dimensions or ()
        begin = [int(self.rng.integers(0, d)) for d in dims]
        size = [int(self.rng.integers(1, d - b + 1)) for d, b in zip(dims, begin)]
        return self.op(Op.SLICE, [x, self.vector(begin), self.vector(size)], self.like(x, size))

    def pad(self, x: int) -> int:
        dims = self.info(x).dimensions or ()
        rows = self.rng.integers(0, 3, (len(dims), 2))
        paddings = self.const(OperandInfo(OperandCode.TENSOR_INT32, rows.shape), rows)
        out = [d + int(r.sum()) for d, r in zip(dims, rows)]
        return self.op(Op.PAD, [x, paddings], self.like(x, out))

    def transpose(self, x: int) -> int:
        dims = self.info(x).dimensions or ()
        perm = [int(p) for p in self.rng.permutation(len(dims))]
        out = [dims[p] for p in perm]
        return self.op(Op.TRANSPOSE, [x, self.vector(perm)], self.like(x, out))

    def reshape(self, x: int, dims: Sequence[int]) -> int:
        return self.op(Op.RESHAPE, [x, self.vector(list(dims))], self.like(x, dims))

    def add_op(self, a: int, b: int) -> int:
        return self.op(
            Op.ADD, [a, b, self.scalar(FuseCode.NONE)], self.like(a, self.info(a).dimensions or ())
        )


def both(model: HalModel, monkeypatch: pytest.MonkeyPatch) -> tuple[PreparedModel, PreparedModel]:
    planned = PreparedModel(model)
    with monkeypatch.context() as patch:
        patch.setattr(plan, "MIN_RUN", 1 << 30)
        one_by_one = PreparedModel(model)
    return planned, one_by_one


def feed(net: Net) -> list[np.ndarray]:
    values = []
    for index in net.inputs:
        info = net.info(index)
        if info.code == F32:
            values.append(net.rng.uniform(-2, 2, info.dimensions).astype(np.float32))
        else:
            values.append(net.rng.integers(-128, 128, info.dimensions).astype(info.dtype))
    return values


def same_answers(
    net: Net, monkeypatch: pytest.MonkeyPatch, planned_run: bool = True
) -> PreparedModel:
    planned, one_by_one = both(net.model(), monkeypatch)
    if planned_run:
        assert len(planned.main._plan) < len(one_by_one.main._plan), "nothing was planned"
    runs: list[int] = []
    run = c_plan.PlanTable.run
    monkeypatch.setattr(c_plan.PlanTable, "run", lambda table, b: runs.append(1) or run(table, b))
    for _ in range(2):  # the second run reuses the first's arena
        values = feed(net)
        for got, want in zip(planned.run(values), one_by_one.run(values)):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    assert runs or not planned_run, "the plan fell back to the operations one by one"
    return planned


def random_image(net: Net, code: OperandCode, nchw: bool = False) -> int:
    n, h, w, c = 1 + int(net.rng.integers(0, 2)), *(int(v) for v in net.rng.integers(1, 9, 3))
    dims = (n, c, h, w) if nchw else (n, h, w, c)
    if code == Q8:
        return net.input(OperandInfo(Q8, dims, 0.05, int(net.rng.integers(-10, 10))))
    return net.input(OperandInfo(F32, dims))


@pytest.mark.parametrize("code", [F32, Q8], ids=["float32", "int8"])
@pytest.mark.parametrize("seed", range(12))
def test_convolution_chains_give_the_operations_bits(
    code: OperandCode, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(seed)
    x = random_image(net, code)
    t = net.conv(x, int(net.rng.integers(1, 40)))
    t = net.conv(t, 0, depthwise=True)
    t = net.conv(t, int(net.rng.integers(1, 24)))
    if code == F32 and seed % 2:
        t = net.pool(t, Op.MAX_POOL_2D if seed % 4 == 1 else Op.AVERAGE_POOL_2D)
    t = net.conv(t, 0, depthwise=True)
    net.output(net.fully_connected(t, int(net.rng.integers(1, 12))))
    planned = same_answers(net, monkeypatch)
    if code == Q8:  # float 1x1 layers and fully connected ones keep BLAS, steps of their own
        assert len(planned.main._plan) == 1


@pytest.mark.parametrize("code", [F32, Q8], ids=["float32", "int8"])
@pytest.mark.parametrize("seed", range(12))
def test_moves_give_the_operations_bits(
    code: OperandCode, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(100 + seed)
    x = random_image(net, code)
    y = net.input(net.info(x))
    axis = int(net.rng.integers(0, 4))
    t = net.concat([x, y, x], axis)
    t = net.strided_slice(t)
    t = net.transpose(t)
    t = net.slice(t)
    t = net.pad(t)
    flat = net.reshape(t, (int(np.prod(net.info(t).dimensions)),))
    net.output(net.reshape(flat, net.info(t).dimensions or ()))
    net.output(net.concat([flat, flat], 0))
    planned = same_answers(net, monkeypatch)
    assert len(planned.main._plan) == 1


@pytest.mark.parametrize("seed", range(6))
def test_nchw_convolutions_run_between_transposing_copies(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(200 + seed)
    x = random_image(net, F32, nchw=True)
    t = net.conv(x, int(net.rng.integers(1, 20)), nchw=True)
    t = net.conv(t, int(net.rng.integers(1, 20)), nchw=True)
    net.output(net.add_op(t, t))
    same_answers(net, monkeypatch, planned_run=False)  # 1x1 layers keep BLAS


def test_a_value_read_after_the_run_and_a_view_that_leaves_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = Net(5)
    x = net.input(OperandInfo(F32, (1, 4, 4, 3)))
    t = net.conv(x, 5)
    view = net.reshape(t, (1, int(np.prod(net.info(t).dimensions))))
    net.output(view)
    net.output(net.conv(t, 2))
    same_answers(net, monkeypatch)


def test_the_c_plan_refuses_a_copy_or_a_window_reaching_outside() -> None:
    x = np.arange(12, dtype=np.float32)
    out = np.zeros(12, np.float32)
    good = c_plan.copy_params(4, (3, 4), (4, 1), (4, 1))
    c_plan.PlanTable([c_plan.PlanStep(c_plan.COPY, -1, -2, params=good)], [48, 48], 0).run([x, out])
    assert list(out) == list(x)
    reversed_rows = c_plan.copy_params(4, (3, 4), (-4, 1), (4, 1), 8, 0)
    c_plan.PlanTable([c_plan.PlanStep(c_plan.COPY, -1, -2, params=reversed_rows)], [48, 48], 0).run(
        [x, out]
    )
    assert list(out) == list(x.reshape(3, 4)[::-1].reshape(-1))
    for params in (
        c_plan.copy_params(4, (3, 4), (4, 1), (4, 1), 1, 0),  # one float past the input
        c_plan.copy_params(4, (3, 4), (-4, 1), (4, 1), 4, 0),  # reversed, before it
        c_plan.copy_params(4, (3, 4), (4, 1), (5, 1)),  # past the output
        c_plan.copy_params(3, (3, 4), (4, 1), (4, 1)),  # no such element size
    ):
        with pytest.raises(BadDataError, match="refuses its tables"):
            c_plan.PlanTable([c_plan.PlanStep(c_plan.COPY, -1, -2, params=params)], [48, 48], 0)
    # A pool whose window reaches past its input, and one with the wrong output.
    from nnburst.cpu.ops.native import window_struct
    from nnburst.cpu.ops.window_geometry import Window2D

    for out_h, out_bytes in ((3, 2 * 2 * 3 * 4), (2, 2 * 2 * 3 * 4 - 4)):
        window = Window2D(
            stride_h=1,
            stride_w=1,
            dilation_h=1,
            dilation_w=1,
            pad_top=0,
            pad_bottom=0,
            pad_left=0,
            pad_right=0,
            out_h=out_h,
            out_w=2,
        )
        shape = window_struct((1, 3, 3, 3), (2, 2), window, 3)
        params = c_plan.pool_params(shape, POOL_MAX, None, -np.inf, np.inf)
        step = c_plan.PlanStep(c_plan.POOL, -1, -2, params=params)
        with pytest.raises(BadDataError, match="refuses its tables"):
            c_plan.PlanTable([step], [27 * 4, out_bytes], 0)


@pytest.mark.parametrize("code", [Op.LOGISTIC, Op.TANH])
def test_an_int8_logistic_or_tanh_is_a_lookup_of_its_own_answers(
    code: OperationCode, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(300)
    x = random_image(net, Q8)
    t = net.conv(x, 7)
    out = OperandInfo(
        Q8,
        net.info(t).dimensions,
        1 / 256 if code == Op.LOGISTIC else 1 / 128,
        -128 if code == Op.LOGISTIC else 0,
    )
    net.output(net.op(code, [t], out))
    planned = same_answers(net, monkeypatch)
    assert len(planned.main._plan) == 1


@pytest.mark.parametrize("seed", range(6))
def test_int8_adds_and_muls_are_table_lookups_in_the_plan(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(400 + seed)
    x = random_image(net, Q8)
    t = net.conv(x, 6)
    u = net.conv(x, 6)
    dims = net.info(t).dimensions or ()
    if net.info(u).dimensions != dims:
        return
    s = net.op(Op.ADD, [t, u, net.scalar(seed % 4)], net.like(t, dims, 0.07))
    channel = OperandInfo(Q8, (6,), 0.03, 3)
    scale = net.const(channel, net.rng.integers(-128, 128, 6))
    net.output(net.op(Op.MUL, [s, scale, net.scalar(0)], net.like(s, dims, 0.09)))
    planned = same_answers(net, monkeypatch)
    assert len(planned.main._plan) == 1


@pytest.mark.parametrize("seed", range(10))
def test_int8_average_pools_and_softmax_give_the_operations_bits(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(500 + seed)
    t = random_image(net, Q8)  # random bytes: rows of the softmax differ
    n, h, w, c = net.info(t).dimensions or ()
    fh, fw = (int(v) for v in net.rng.integers(1, 4, 2))
    stride = int(net.rng.integers(1, 3))
    same = seed % 2 == 0
    if not same:
        fh, fw = min(fh, h), min(fw, w)
    args = [t, net.scalar(PaddingCode.SAME if same else PaddingCode.VALID)]
    args += [net.scalar(stride), net.scalar(stride), net.scalar(fw), net.scalar(fh)]
    args.append(net.scalar(int(net.rng.integers(0, 4))))
    oh = -(-h // stride) if same else (h - fh) // stride + 1
    ow = -(-w // stride) if same else (w - fw) // stride + 1
    t = net.op(Op.AVERAGE_POOL_2D, args, net.like(t, (n, oh, ow, c)))
    beta = net.const(OperandInfo(OperandCode.FLOAT32, ()), np.float32(net.rng.uniform(0.5, 2)))
    net.output(net.op(Op.SOFTMAX, [t, beta], OperandInfo(Q8, (n, oh, ow, c), 1 / 256, -128)))
    planned = same_answers(net, monkeypatch)
    assert len(planned.main._plan) == 1


@pytest.mark.parametrize("seed", range(8))
def test_per_channel_operands_and_prelu_give_the_operations_bits(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(600 + seed)
    nchw = seed % 2 == 1
    x = random_image(net, F32, nchw=nchw)
    dims = net.info(x).dimensions or ()
    channel = (1, dims[1], 1, 1) if nchw else (dims[3],)
    alpha = (1, dims[1], 1, 1) if nchw else (1, 1, dims[3])
    scale = net.const(OperandInfo(F32, channel), net.rng.normal(0, 1, channel))
    t = net.op(Op.MUL, [scale, x, net.scalar(seed % 4)], net.like(x, dims))  # b first
    alphas = net.rng.normal(0, 1, alpha)
    alphas.flat[0] = np.nan if seed % 3 == 0 else alphas.flat[0]
    t = net.op(Op.PRELU, [t, net.const(OperandInfo(F32, alpha), alphas)], net.like(x, dims))
    half = net.const(OperandInfo(F32, (1,)), np.full(1, 0.5))
    t = net.op(Op.SUB, [t, half, net.scalar(0)], net.like(x, dims))
    t = net.op(Op.MAXIMUM, [t, scale], net.like(x, dims))
    net.output(net.op(Op.PRELU, [t, half], net.like(x, dims)))
    planned = same_answers(net, monkeypatch)
    assert len(planned.main._plan) == 1


@pytest.mark.parametrize("seed", range(6))
def test_quantize_and_dequantize_at_the_borders_of_an_int8_chain(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Net(700 + seed)
    x = random_image(net, F32)
    dims = net.info(x).dimensions or ()
    code = Q8
    q = net.op(
        Op.QUANTIZE,
        [x],
        OperandInfo(code, dims, 0.02, int(net.rng.integers(-5, 5))),
    )
    t = net.conv(q, int(net.rng.integers(1, 9)))
    net.output(net.op(Op.DEQUANTIZE, [t], OperandInfo(F32, net.info(t).dimensions)))
    planned, one_by_one = both(net.model(), monkeypatch)
    assert len(planned.main._plan) == 1
    values = feed(net)
    values[0].flat[: min(4, values[0].size)] = [np.nan, np.inf, -np.inf, 1e30][
        : min(4, values[0].size)
    ]
    for got, want in zip(planned.run(values), one_by_one.run(values)):
        np.testing.assert_array_equal(got, want)


def test_maximum_and_minimum_keep_their_first_operand_beside_a_nan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = Net(1)
    x, y = net.input(OperandInfo(F32, (4,))), net.input(OperandInfo(F32, (4,)))
    t = net.op(Op.MAXIMUM, [x, y], OperandInfo(F32, (4,)))
    net.output(net.op(Op.MINIMUM, [t, y], OperandInfo(F32, (4,))))
    planned, one_by_one = both(net.model(), monkeypatch)
    a = np.array([1, 2, np.nan, 4], np.float32)
    b = np.array([np.nan, 0, 5, np.nan], np.float32)
    got = planned.run([a, b])[0]
    np.testing.assert_array_equal(got, one_by_one.run([a, b])[0])
    np.testing.assert_array_equal(got, [1, 0, np.nan, 4])
