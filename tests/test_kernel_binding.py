"""Prepare-time binding (each op module's ``_bind*``): the kernel an operation binds
when its parameters are constants must answer exactly as its unbound ``execute``.

Each case is prepared twice, with binding and without (the registry's ``bind``
dropped), and run on the same random data: the answers must be equal (bit for
bit, floats included: both paths run the same arithmetic in the same order,
or the case says otherwise).  A case also states whether it binds at all, and a
bound kernel must not fall back to ``execute`` for the inputs it was bound for
(binding exists to skip that work).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from nnburst._bindings.qconv import vector_path
from nnburst.codes import FuseCode, OperationCode
from nnburst.codes import OperandCode as T
from nnburst.cpu import states
from nnburst.cpu.executor import PreparedModel
from nnburst.errors import NNError
from nnburst.operands import OperandInfo

from .op_models import model

Op = OperationCode
RNG = np.random.default_rng(32)
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def info(code: T, *dims: int, scale: float = 0.0, zp: int = 0) -> OperandInfo:
    return OperandInfo(code, dims, scale, zp)


def i32(value: int) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.INT32, ()), np.array(value, np.int32)


def f32(value: float) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.FLOAT32, ()), np.array(value, np.float32)


def b8(value: bool) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.BOOL, ()), np.array(value, np.bool_)


def const(i: OperandInfo, value: Any) -> tuple[OperandInfo, np.ndarray]:
    return i, np.asarray(value).astype(i.dtype).reshape(i.dimensions)


def data(i: OperandInfo, shape: tuple[int, ...] | None = None) -> np.ndarray:
    shape = shape or i.dimensions
    if i.dtype == np.uint8:
        return RNG.integers(0, 256, shape).astype(np.uint8)
    if i.dtype == np.int8:
        return RNG.integers(-128, 128, shape).astype(np.int8)
    if i.dtype == np.int32:
        return RNG.integers(-1000, 1000, shape).astype(np.int32)
    return RNG.uniform(-4, 4, shape).astype(i.dtype)


@dataclasses.dataclass
class Case:
    code: OperationCode
    inputs: list[Any]
    outputs: list[OperandInfo]
    bound: bool
    #: the module whose unbound ``execute`` function the bound kernel must not call
    fallback: tuple[str, str] | None = None
    #: feeds shaped otherwise than declared (unknown dimensions), per model input
    shapes: list[tuple[int, ...]] | None = None
    #: float answers allowed to differ by this much (a BLAS product's summation order)
    rtol: float = 0.0
    #: the values of model inputs that are not random data (a shape, an activation)
    given: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)


def feeds(case: Case) -> list[np.ndarray]:
    model_inputs = [i for i in case.inputs if isinstance(i, OperandInfo)]
    shapes = case.shapes or [None] * len(model_inputs)
    values = [data(i, s) for i, s in zip(model_inputs, shapes)]
    for position, value in case.given.items():
        values[position] = value
    return values


# -- the cases ------------------------------------------------------------------------------------

POOL = ("nnburst.cpu.ops.pooling", "_execute")
CONV = ("nnburst.cpu.ops.conv", "_execute")
FC = ("nnburst.cpu.ops.fully_connected", "_execute")
BINARY = ("nnburst.cpu.ops.elementwise", "_execute_binary")
SOFTMAX = ("nnburst.cpu.ops.activation", "_execute_softmax")
RESHAPE = ("nnburst.cpu.ops.shape", "_execute_reshape")
QUANTIZE = ("nnburst.cpu.ops.unary", "_execute_quantize")


def binary(
    code: OperationCode,
    t: T,
    fuse: Any,
    a: tuple[int, ...] = (2, 3, 4),
    b: tuple[int, ...] = (2, 3, 4),
    quant: tuple[dict[str, Any], ...] = ({}, {}, {}),
) -> Case:
    out = info(t, *np.broadcast_shapes(a, b), **quant[2])
    fuse_operand = i32(fuse) if isinstance(fuse, int) else fuse
    return Case(
        code,
        [info(t, *a, **quant[0]), info(t, *b, **quant[1]), fuse_operand],
        [out],
        bound=isinstance(fuse, int) and t in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, Q8, Q8S),
        fallback=BINARY,
    )


def pool(code: OperationCode, t: T = T.TENSOR_FLOAT32, *, nchw: bool = False, **kw: Any) -> Case:
    shape = (1, 3, 7, 5) if nchw else (1, 7, 5, 3)
    q = {"scale": 0.5, "zp": 100} if t in (Q8, Q8S) else {}
    if t == Q8S:
        q["zp"] = -20
    pads = kw.get("pads", (1, 1, 0, 1))
    args: list[Any] = [info(t, *shape, **q)]
    args += [i32(p) for p in pads] if pads else [i32(1)]  # explicit, or SAME
    args += [i32(2), i32(2), i32(kw.get("filter", 3)), i32(kw.get("filter", 3))]
    args += [i32(kw.get("fuse", FuseCode.RELU6))]
    if nchw:
        args.append(b8(True))
    filt = kw.get("filter", 3)
    if pads:
        h, w = (7 + pads[2] + pads[3] - filt) // 2 + 1, (5 + pads[0] + pads[1] - filt) // 2 + 1
    else:
        h, w = 4, 3
    out_shape = (1, 3, h, w) if nchw else (1, h, w, 3)
    if code == Op.L2_POOL_2D:
        q = {}
    return Case(code, args, [info(t, *out_shape, **q)], bound=not nchw, fallback=POOL)


def conv(
    t: T = T.TENSOR_FLOAT32,
    *,
    depthwise: bool = False,
    multiplier: int = 1,
    kernel: int = 3,
    channels: int = 4,
    size: int = 6,
    filter_is_input: bool = False,
    nchw: bool = False,
    bound: bool = True,
    rtol: float = 0.0,
) -> Case:
    quantized = t in (Q8, Q8S)
    qx = {"scale": 0.05, "zp": 3 if t == Q8S else 130} if quantized else {}
    qw = {"scale": 0.02, "zp": 0 if t == Q8S else 120} if quantized else {}
    qo = {"scale": 0.25, "zp": -5 if t == Q8S else 90} if quantized else {}
    bias_t = T.TENSOR_INT32 if quantized else t
    depth_out = channels * multiplier if depthwise else 5
    wshape = (1, kernel, kernel, depth_out) if depthwise else (depth_out, kernel, kernel, channels)
    w_info = info(t, *wshape, **qw)
    b_info = info(bias_t, depth_out, scale=0.05 * 0.02 if quantized else 0.0)
    in_shape = (1, channels, size, size) if nchw else (1, size, size, channels)
    out_shape = (1, depth_out, size, size) if nchw else (1, size, size, depth_out)
    args: list[Any] = [
        info(t, *in_shape, **qx),
        w_info if filter_is_input else const(w_info, data(w_info)),
        const(b_info, data(b_info) if not quantized else RNG.integers(-500, 500, depth_out)),
        i32(1),  # SAME
        i32(1),
        i32(1),
    ]
    if depthwise:
        args.append(i32(multiplier))
    args.append(i32(FuseCode.RELU))
    if nchw:
        args.append(b8(True))
    code = Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D
    return Case(code, args, [info(t, *out_shape, **qo)], bound=bound, fallback=CONV, rtol=rtol)


def fully_connected(
    t: T = T.TENSOR_FLOAT32,
    *,
    fuse: int = FuseCode.RELU,
    zero_bias: bool = False,
    weights_are_input: bool = False,
    unknown_batch: bool = False,
    size: int = 8,
) -> Case:
    quantized = t in (Q8, Q8S)
    qx = {"scale": 0.05, "zp": -3 if t == Q8S else 128} if quantized else {}
    qw = {"scale": 0.02, "zp": 0 if t == Q8S else 127} if quantized else {}
    qo = {"scale": 0.1, "zp": 7 if t == Q8S else 100} if quantized else {}
    w_info = info(t, 6, size, **qw)
    b_info = info(T.TENSOR_INT32 if quantized else t, 6, scale=0.001 if quantized else 0.0)
    bias = np.zeros(6) if zero_bias else (RNG.integers(-300, 300, 6) if quantized else data(b_info))
    batch = 0 if unknown_batch else 3
    return Case(
        Op.FULLY_CONNECTED,
        [
            info(t, batch, size, **qx),
            w_info if weights_are_input else const(w_info, data(w_info)),
            const(b_info, bias),
            i32(fuse),
        ],
        [info(t, batch, 6, **qo)],
        # Wide quantized rows: the int32 kernels sum them exactly where the CPU has them.
        bound=not weights_are_input
        and t != T.TENSOR_FLOAT16
        and (size <= 1024 or t in (Q8, Q8S) and vector_path()),
        fallback=FC,
        shapes=[(5, size)] if unknown_batch else None,
        # float32: the packed kernel (bound) and BLAS (execute) sum in other orders
        rtol=1e-5 if t == T.TENSOR_FLOAT32 else 0.0,
    )


def softmax(t: T, shape: tuple[int, ...], beta: float = 1.0, axis: int | None = None) -> Case:
    q = {"scale": 1 / 16, "zp": 128 if t == Q8 else 0} if t in (Q8, Q8S) else {}
    qo = {"scale": 1 / 256, "zp": 0 if t == Q8 else -128} if t in (Q8, Q8S) else {}
    args: list[Any] = [info(t, *shape, **q), f32(beta)]
    if axis is not None:
        args.append(i32(axis))
    return Case(Op.SOFTMAX, args, [info(t, *shape, **qo)], bound=t in (Q8, Q8S), fallback=SOFTMAX)


def reshape(shape: list[int], in_shape=(2, 3, 4), out_shape=(4, 6), constant: bool = True) -> Case:
    s_info = info(T.TENSOR_INT32, len(shape))
    return Case(
        Op.RESHAPE,
        [info(T.TENSOR_FLOAT32, *in_shape), const(s_info, shape) if constant else s_info],
        [info(T.TENSOR_FLOAT32, *out_shape)],
        bound=constant and 0 not in in_shape,
        fallback=RESHAPE,
        given={} if constant else {1: np.array(shape, np.int32)},
    )


def quantize(t: T, out: T, zp: int) -> Case:
    return Case(Op.QUANTIZE, [info(t, 3, 7)], [info(out, 3, 7, scale=0.03, zp=zp)], True, QUANTIZE)


def as_input(case: Case, position: int, bound: bool = False) -> Case:
    """``case`` with its constant input ``position`` given at run time instead."""
    operand_info, value = case.inputs[position]
    inputs = [*case.inputs[:position], operand_info, *case.inputs[position + 1 :]]
    index = sum(isinstance(i, OperandInfo) for i in case.inputs[:position])
    given = {k + (k >= index): v for k, v in case.given.items()}
    shapes = case.shapes
    if shapes is not None:
        shapes = [*shapes[:index], operand_info.dimensions, *shapes[index:]]
    return dataclasses.replace(
        case, inputs=inputs, bound=bound, given={**given, index: value}, shapes=shapes
    )


def unknown_batch(case: Case, feed_batch: int = 1) -> Case:
    """``case`` with dimension 0 of its first input (and output) left unknown."""
    first, out = case.inputs[0], case.outputs[0]
    shapes = [(feed_batch, *first.dimensions[1:])]
    return dataclasses.replace(
        case,
        inputs=[
            dataclasses.replace(first, dimensions=(0, *first.dimensions[1:])),
            *case.inputs[1:],
        ],
        outputs=[dataclasses.replace(out, dimensions=(0, *out.dimensions[1:]))],
        shapes=shapes,
        bound=False,
    )


CASES: dict[str, Callable[[], Case]] = {
    **{
        f"{c.name.lower()} float32 {f.name.lower()}": (
            lambda c=c, f=f: binary(c, T.TENSOR_FLOAT32, int(f))
        )
        for c in (Op.ADD, Op.SUB, Op.MUL, Op.DIV)
        for f in FuseCode
    },
    "add float32 broadcast": lambda: binary(Op.ADD, T.TENSOR_FLOAT32, 1, a=(2, 3, 4), b=(4,)),
    "mul float32 broadcast both": lambda: binary(
        Op.MUL, T.TENSOR_FLOAT32, 3, a=(2, 1, 4), b=(3, 1)
    ),
    "add float16 relu": lambda: binary(Op.ADD, T.TENSOR_FLOAT16, 1),
    "div float16 relu1": lambda: binary(Op.DIV, T.TENSOR_FLOAT16, 2),
    "sub float16 none": lambda: binary(Op.SUB, T.TENSOR_FLOAT16, 0),
    "add int32": lambda: binary(Op.ADD, T.TENSOR_INT32, 0),
    "add float32 fuse is an input": lambda: dataclasses.replace(
        binary(Op.ADD, T.TENSOR_FLOAT32, OperandInfo(T.INT32, ())),
        given={2: np.array(FuseCode.RELU, np.int32)},
    ),
    **{
        f"{c.name.lower()} {t.name.lower()} {f.name.lower()}": (
            lambda c=c, t=t, f=f: binary(
                c,
                t,
                int(f),
                a=(2, 3, 4),
                b=(3, 4),
                quant=(
                    {"scale": 0.5, "zp": 120 if t == Q8 else -7},
                    {"scale": 0.25, "zp": 130 if t == Q8 else 9},
                    {"scale": 0.75, "zp": 128 if t == Q8 else 3},
                ),
            )
        )
        for c in (Op.ADD, Op.SUB, Op.MUL)
        for t in (Q8, Q8S)
        for f in (FuseCode.NONE, FuseCode.RELU6)
    },
    **{
        f"{c.name.lower()} {t.name.lower()} {'nchw' if nchw else 'nhwc'} {pads}": (
            lambda c=c, t=t, nchw=nchw, pads=pads: pool(c, t, nchw=nchw, pads=pads)
        )
        for c in (Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D)
        for t in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, Q8, Q8S)
        for nchw in (False, True)
        for pads in ((1, 1, 0, 1), None)
        if not (c == Op.L2_POOL_2D and t in (Q8, Q8S))
    },
    "average pool 1x1 relu1": lambda: pool(Op.AVERAGE_POOL_2D, pads=(0, 0, 0, 0), filter=1, fuse=2),
    "max pool none": lambda: pool(Op.MAX_POOL_2D, Q8, fuse=0),
    "average pool unknown batch": lambda: unknown_batch(pool(Op.AVERAGE_POOL_2D)),
    "max pool uint8 unknown batch": lambda: unknown_batch(pool(Op.MAX_POOL_2D, Q8), 2),
    "average pool windows in the padding only": lambda: dataclasses.replace(
        pool(Op.AVERAGE_POOL_2D, pads=(3, 3, 3, 3), filter=1), bound=False
    ),
    "conv float32": lambda: conv(),
    "conv float32 1x1 (BLAS)": lambda: conv(kernel=1, channels=64, size=16, rtol=1e-5),
    "conv float32 nchw": lambda: conv(nchw=True),
    "conv float32 filter is an input": lambda: conv(filter_is_input=True, bound=False),
    "conv float16": lambda: conv(T.TENSOR_FLOAT16, bound=False),
    "conv uint8": lambda: conv(Q8),
    "conv int8": lambda: conv(Q8S),
    "conv uint8 1x1": lambda: conv(Q8, kernel=1, channels=64, size=16),
    "depthwise float32": lambda: conv(depthwise=True),
    "depthwise uint8": lambda: conv(Q8, depthwise=True),
    "depthwise float32 multiplier 2": lambda: conv(depthwise=True, multiplier=2, bound=False),
    "fully connected float32": lambda: fully_connected(),
    "fully connected float32 none": lambda: fully_connected(fuse=FuseCode.NONE),
    "fully connected float32 zero bias": lambda: fully_connected(zero_bias=True),
    "fully connected float32 unknown batch": lambda: fully_connected(unknown_batch=True),
    "fully connected float16": lambda: fully_connected(T.TENSOR_FLOAT16),
    "fully connected uint8": lambda: fully_connected(Q8),
    "fully connected int8 relu6": lambda: fully_connected(Q8S, fuse=FuseCode.RELU6),
    "fully connected weights are an input": lambda: fully_connected(weights_are_input=True),
    "softmax uint8": lambda: softmax(Q8, (2, 5)),
    "softmax int8 axis 0": lambda: softmax(Q8S, (3, 4), beta=0.5, axis=0),
    "softmax uint8 axis -1 rank 4": lambda: softmax(Q8, (1, 2, 3, 6), beta=2.0, axis=-1),
    "softmax uint8 axis 1 rank 3": lambda: softmax(Q8, (2, 4, 3), axis=1),
    "softmax float32": lambda: softmax(T.TENSOR_FLOAT32, (2, 5)),
    "softmax uint8 rank 3 default axis": lambda: softmax(Q8, (2, 3, 4)),
    "softmax uint8 rank 1": lambda: softmax(Q8, (7,)),
    "softmax uint8 one value": lambda: softmax(Q8, (1, 1)),
    "softmax int8 axis -2": lambda: softmax(Q8S, (3, 4), axis=-2),
    "softmax uint8 beta is an input": lambda: as_input(softmax(Q8, (2, 5)), 1),
    "softmax uint8 axis is an input": lambda: as_input(softmax(Q8, (2, 5), axis=1), 2),
    "fully connected float32 activation is an input": lambda: as_input(fully_connected(), 3),
    "fully connected float32 bias is an input": lambda: as_input(fully_connected(), 2),
    "fully connected uint8 wide (int32 sums)": lambda: fully_connected(Q8, size=3000),
    "conv float32 bias is an input": lambda: as_input(conv(), 2),
    "conv uint8 wide (int32 sums)": lambda: conv(Q8, channels=300, size=3, bound=vector_path()),
    "depthwise float32 unknown batch": lambda: unknown_batch(conv(depthwise=True)),
    "conv float32 unknown batch": lambda: unknown_batch(conv()),
    "reshape": lambda: reshape([4, -1]),
    "reshape to rank 1": lambda: reshape([-1], out_shape=(24,)),
    "reshape shape is an input": lambda: reshape([4, 6], constant=False),
    "quantize float32 uint8": lambda: quantize(T.TENSOR_FLOAT32, Q8, 128),
    "quantize float32 int8": lambda: quantize(T.TENSOR_FLOAT32, Q8S, -3),
    "quantize float16 uint8": lambda: quantize(T.TENSOR_FLOAT16, Q8, 7),
}


def unbound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prepare without any operation's ``bind``: everything runs ``execute``."""
    lookup = states.lookup

    def without_bind(code: OperationCode) -> Any:
        registration = lookup(code)
        return None if registration is None else dataclasses.replace(registration, bind=None)

    monkeypatch.setattr(states, "lookup", without_bind)


@pytest.mark.parametrize("name", list(CASES))
def test_a_bound_kernel_answers_as_execute(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[name]()
    hal = model(case.code, case.inputs, case.outputs)
    bound = PreparedModel(hal)
    kernel = bound.main.operations[0].kernel
    assert (kernel is not None) == case.bound, "bound" if kernel is not None else "not bound"
    values = feeds(case)
    with monkeypatch.context() as patch:
        if case.bound and case.fallback:
            module = importlib.import_module(case.fallback[0])

            def refuse(*args: Any) -> Any:
                raise AssertionError("the bound kernel fell back to execute")

            patch.setattr(module, case.fallback[1], refuse)
        got = outcome(bound, values)
    with monkeypatch.context() as patch:
        unbound(patch)
        plain = PreparedModel(hal)
        assert plain.main.operations[0].kernel is None
        want = outcome(plain, values)
    if isinstance(want, str) or isinstance(got, str):
        assert got == want
        return
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if case.rtol:
            np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.rtol)
        else:
            np.testing.assert_array_equal(g, w)


def outcome(prepared: PreparedModel, values: list[np.ndarray]) -> Any:
    """The outputs, or the error (an execution may refuse: then both paths must)."""
    try:
        return prepared.run([v.copy() for v in values])
    except NNError as error:
        return f"{type(error).__name__}: {error}"


def _errors(hal: Any, values: list[np.ndarray | None]) -> str:
    try:
        PreparedModel(hal).run(values)
    except NNError as error:
        return f"{type(error).__name__}: {error}"
    return "no error"


@pytest.mark.parametrize(
    "name, values",
    [
        ("add float32 relu", lambda: [None, data(info(T.TENSOR_FLOAT32), (2, 3, 4))]),
        ("add float32 relu", lambda: [data(info(T.TENSOR_FLOAT32), (2, 3, 4)), None]),
        ("add tensor_quant8_asymm none", lambda: [None, data(info(Q8), (3, 4))]),
        ("quantize float32 uint8", lambda: [None]),
        ("reshape", lambda: [None]),
        ("softmax uint8", lambda: [None]),
        ("fully connected float32", lambda: [None]),
        ("average_pool_2d tensor_float32 nhwc (1, 1, 0, 1)", lambda: [None]),
    ],
)
def test_a_bound_kernel_refuses_what_execute_refuses(
    name: str, values: Callable[[], list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing input: the bound kernel's error is execute's."""
    case = CASES[name]()
    hal = model(case.code, case.inputs, case.outputs)
    assert PreparedModel(hal).main.operations[0].kernel is not None
    feed = values()
    bound_error = _errors(hal, feed)
    with monkeypatch.context() as patch:
        unbound(patch)
        plain_error = _errors(hal, feed)
    assert bound_error == plain_error != "no error"
