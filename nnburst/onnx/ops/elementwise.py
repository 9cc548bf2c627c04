"""Elementwise operators and activations: NNAPI's unary and binary operations
one to one, the rest (Clip, HardSigmoid, Gelu, Mish, Mod, ...) composed from
them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from ...codes import FuseCode, OperationCode
from ..converter import Converter, Unsupported, maps, operand_dtype
from .building import apply, broadcast, erf, filled, float_input, like, output_of, text
from .quantization import BYTES, cast_bytes

#: Unary operators mapped one to one, by ONNX name.
_UNARY = {
    "Relu": OperationCode.RELU, "Sigmoid": OperationCode.LOGISTIC, "Tanh": OperationCode.TANH,
    "Exp": OperationCode.EXP, "Log": OperationCode.LOG, "Sqrt": OperationCode.SQRT,
    "Abs": OperationCode.ABS, "Neg": OperationCode.NEG, "Floor": OperationCode.FLOOR,
    "Sin": OperationCode.SIN, "Not": OperationCode.LOGICAL_NOT,
    "HardSwish": OperationCode.HARD_SWISH,
}  # fmt: skip

#: Binary operators mapped one to one; the first four take NNAPI's fuse operand.
_BINARY = {
    "Add": OperationCode.ADD, "Sub": OperationCode.SUB,
    "Mul": OperationCode.MUL, "Div": OperationCode.DIV,
    "Pow": OperationCode.POW, "PRelu": OperationCode.PRELU,
    "Equal": OperationCode.EQUAL, "Less": OperationCode.LESS,
    "LessOrEqual": OperationCode.LESS_EQUAL, "Greater": OperationCode.GREATER,
    "GreaterOrEqual": OperationCode.GREATER_EQUAL, "And": OperationCode.LOGICAL_AND,
    "Or": OperationCode.LOGICAL_OR,
}  # fmt: skip
_FUSED = (OperationCode.ADD, OperationCode.SUB, OperationCode.MUL, OperationCode.DIV)


@maps(*_UNARY)
def _unary(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    c.add(_UNARY[node.op_type], [c.operand(node.input[0])], [output_of(c, node)])


@maps(*_BINARY)
def _binary(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    code = _BINARY[node.op_type]
    kinds = {c.dtype(n).kind for n in node.input[:2]}
    if code == OperationCode.POW and kinds != {"f"}:
        raise Unsupported("integer operands")
    if code == OperationCode.DIV and "f" not in kinds:
        raise Unsupported("integer division (NNAPI rounds toward −∞, ONNX toward 0)")
    inputs = [c.operand(node.input[0]), c.operand(node.input[1])]
    if code in _FUSED:
        inputs.append(c.i32(FuseCode.NONE))
    c.add(code, inputs, [output_of(c, node)])


@maps("Max", "Min")
def _max_min(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """A chain of MAXIMUMs (MINIMUMs); one input is the input itself, max(x, x)."""
    names = [n for n in node.input if n]
    if len(names) == 1:
        names = names * 2
    code = OperationCode.MAXIMUM if node.op_type == "Max" else OperationCode.MINIMUM
    _chain(c, code, names, c.dtype(node.output[0]), output_of(c, node))


def _chain(c: Converter, code: OperationCode, names: Sequence[str], dtype: np.dtype[Any],
           out: int | None = None) -> int:  # fmt: skip
    """``code`` over ``names`` left to right, each step of the shape its operands
    broadcast to, the last into ``out`` (one name: its operand as it is)."""
    total, shape = c.operand(names[0]), c.shape(names[0])
    for i, name in enumerate(names[1:], start=2):
        shape = tuple(np.broadcast_shapes(shape, c.shape(name)))
        target = out if i == len(names) else None
        total = apply(c, code, [total, c.operand(name)], dtype, shape, target)
    return total


@maps("Identity", "Dropout")
def _identity(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    if node.op_type == "Dropout":
        training = node.input[2] if len(node.input) > 2 else ""
        if training and (training not in c.constants or bool(c.constants[training].reshape(-1)[0])):
            raise Unsupported("training mode (random)")
        if len(node.output) > 1 and node.output[1]:  # inference keeps every element
            c.constants[node.output[1]] = np.ones(c.shape(node.input[0]), np.bool_)
    c.alias(node.output[0], c.operand(node.input[0]))


def _clamp(c: Converter, x: int, out: int, dtype: np.dtype[Any], shape: tuple[int, ...],
           lo: float | None, hi: float | None) -> None:  # fmt: skip
    """``out = min(max(x, lo), hi)``, as one RELU-family operation where one fits."""
    fused: dict[tuple[float | None, float | None], OperationCode] = {
        (0.0, None): OperationCode.RELU,
        (0.0, 6.0): OperationCode.RELU6,
        (-1.0, 1.0): OperationCode.RELU1,
    }
    code = fused.get((lo, hi))
    if code is not None and dtype == np.float32:
        c.add(code, [x], [out])
        return

    def bound(value: float | None) -> int | None:
        if value is None:
            return None
        if dtype.kind in "iu":  # within the operand's range (int64 runs as int32)
            info = np.iinfo(operand_dtype(dtype))
            value = min(max(value, info.min), info.max)
        return filled(c, dtype, (1,), value)

    _bounded(c, x, out, dtype, shape, bound(lo), bound(hi))


def _bounded(c: Converter, x: int, out: int, dtype: np.dtype[Any], shape: tuple[int, ...],
             low: int | None, high: int | None) -> None:  # fmt: skip
    """``out = min(max(x, low), high)`` with bound operands (which broadcast): a
    MAXIMUM, then a MINIMUM, for the bounds given (a copy for none)."""
    if low is not None:
        target = out if high is None else c.temporary(dtype, shape)
        c.add(OperationCode.MAXIMUM, [x, low], [target])
        x = target
    if high is not None:
        c.add(OperationCode.MINIMUM, [x, high], [out])
    elif low is None:
        c.add(OperationCode.RESHAPE, [x, c.ints(shape or (1,))], [out])


@maps("Clip")
def _clip(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Constant bounds fold into _clamp; computed ones (one-element tensors) are
    _bounded by the bound operands."""
    name = node.input[0]
    given = [node.input[i] if len(node.input) > i else "" for i in (1, 2)]
    if any(n and n not in c.constants for n in given):
        shape, dtype = c.shape(name), c.dtype(name)
        for bound in given:
            if bound and (c.dtype(bound) != dtype or int(np.prod(c.shape(bound))) != 1):
                raise Unsupported("a computed bound that is not one element of the input's type")
        low, high = (c.operand(bound) if bound else None for bound in given)
        _bounded(c, c.operand(name), output_of(c, node), dtype, shape, low, high)
        return
    bounds = [a.get("min"), a.get("max")]
    for i, bound in enumerate(given):
        if bound:
            bounds[i] = float(c.value(bound, "clip bound").reshape(-1)[0])
    lo, hi = (None if b is None else float(b) for b in bounds)
    _clamp(c, c.operand(name), output_of(c, node), c.dtype(name), c.shape(name), lo, hi)


@maps("LeakyRelu")
def _leaky_relu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    slope = c.floats(np.array([a.get("alpha", 0.01)]))
    c.add(OperationCode.PRELU, [c.operand(node.input[0]), slope], [output_of(c, node)])


@maps("HardSigmoid")
def _hard_sigmoid(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """max(0, min(1, alpha·x + beta)): MUL, ADD, then the clamp."""
    name = node.input[0]
    shape, dtype = c.shape(name), c.dtype(name)
    scaled, shifted = c.temporary(dtype, shape), c.temporary(dtype, shape)
    none = c.i32(FuseCode.NONE)
    c.add(
        OperationCode.MUL,
        [c.operand(name), c.floats(np.array([a.get("alpha", 0.2)])), none],
        [scaled],
    )
    c.add(OperationCode.ADD, [scaled, c.floats(np.array([a.get("beta", 0.5)])), none], [shifted])
    _clamp(c, shifted, output_of(c, node), dtype, shape, 0.0, 1.0)


@maps("Cast", "CastLike")
def _cast(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """CastLike's second input only names the type, which the output carries.  NNAPI's
    CAST takes no booleans: from one, a SELECT of 1 and 0; to one, x ≠ 0.  Bytes:
    see :func:`.quantization.cast_bytes`."""
    name, out = node.input[0], node.output[0]
    dtype, target, shape = c.dtype(name), c.dtype(out), c.shape(out)
    if dtype != np.bool_ and (dtype in BYTES or target in BYTES):
        cast_bytes(c, node)
    elif dtype == np.bool_ and target != np.bool_:
        ones, zeros = filled(c, target, shape, 1), filled(c, target, shape, 0)
        c.add(OperationCode.SELECT, [c.operand(name), ones, zeros], [output_of(c, node)])
    elif target == np.bool_ and dtype != np.bool_:
        c.add(OperationCode.NOT_EQUAL, [c.operand(name), like(c, name, 0)], [output_of(c, node)])
    else:
        c.add(OperationCode.CAST, [c.operand(name)], [output_of(c, node)])


@maps("Reciprocal")
def _reciprocal(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    name, _ = float_input(c, node)
    c.add(
        OperationCode.DIV,
        [like(c, name, 1.0), c.operand(name), c.i32(FuseCode.NONE)],
        [output_of(c, node)],
    )


@maps("Cos")
def _cos(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """cos x = sin(x + π/2)."""
    name, shape = float_input(c, node)
    shifted = c.temporary(np.dtype(np.float32), shape)
    c.add(
        OperationCode.ADD,
        [c.operand(name), like(c, name, np.pi / 2), c.i32(FuseCode.NONE)],
        [shifted],
    )
    c.add(OperationCode.SIN, [shifted], [output_of(c, node)])


@maps("Ceil")
def _ceil(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """ceil x = −floor(−x)."""
    name, shape = float_input(c, node)
    negated, floored = (
        c.temporary(np.dtype(np.float32), shape),
        c.temporary(np.dtype(np.float32), shape),
    )
    c.add(OperationCode.NEG, [c.operand(name)], [negated])
    c.add(OperationCode.FLOOR, [negated], [floored])
    c.add(OperationCode.NEG, [floored], [output_of(c, node)])


@maps("Softplus", "Softsign")
def _soft(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """softplus x = log(1 + eˣ); softsign x = x / (1 + |x|)."""
    name, shape = float_input(c, node)
    f32 = np.dtype(np.float32)
    inner, plus_one = c.temporary(f32, shape), c.temporary(f32, shape)
    first = OperationCode.EXP if node.op_type == "Softplus" else OperationCode.ABS
    c.add(first, [c.operand(name)], [inner])
    c.add(OperationCode.ADD, [inner, like(c, name, 1.0), c.i32(FuseCode.NONE)], [plus_one])
    if node.op_type == "Softplus":
        c.add(OperationCode.LOG, [plus_one], [output_of(c, node)])
    else:
        c.add(
            OperationCode.DIV,
            [c.operand(name), plus_one, c.i32(FuseCode.NONE)],
            [output_of(c, node)],
        )


@maps("Elu")
def _elu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    name, _ = float_input(c, node)
    c.add(OperationCode.ELU, [c.operand(name), c.f32(a.get("alpha", 1.0))], [output_of(c, node)])


@maps("Sum", "Mean")
def _sum(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """A chain of ADDs (then a MUL by 1/n for Mean)."""
    names = [n for n in node.input if n]
    out = c.shape(node.output[0])
    dtype = c.dtype(names[0])
    if node.op_type == "Mean" and dtype != np.float32:
        raise Unsupported(f"{dtype} operands")
    if node.op_type == "Mean":
        total = _chain(c, OperationCode.ADD, names, dtype)
        factor = like(c, names[0], 1.0 / len(names))
        apply(c, OperationCode.MUL, [total, factor], dtype, out, output_of(c, node))
    elif len(names) > 1:
        _chain(c, OperationCode.ADD, names, dtype, output_of(c, node))
    else:  # one input: + 0, a copy (the output must be computed)
        zero = like(c, names[0], 0)
        apply(c, OperationCode.ADD, [c.operand(names[0]), zero], dtype, out, output_of(c, node))


@maps("Where")
def _where(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """SELECT, whose three inputs have one shape: the others are broadcast to it."""
    shape = c.shape(node.output[0])
    inputs = [c.operand(n) if c.shape(n) == shape else broadcast(c, n, shape) for n in node.input]
    c.add(OperationCode.SELECT, inputs, [output_of(c, node)])


@maps("Xor")
def _xor(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """a xor b = a ≠ b, for booleans."""
    inputs = [c.operand(node.input[0]), c.operand(node.input[1])]
    c.add(OperationCode.NOT_EQUAL, inputs, [output_of(c, node)])


@maps("IsNaN")
def _is_nan(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """NaN is the one value not equal to itself."""
    x = c.operand(node.input[0])
    c.add(OperationCode.NOT_EQUAL, [x, x], [output_of(c, node)])


@maps("IsInf")
def _is_inf(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """EQUAL to +inf and/or -inf, as detect_positive and detect_negative ask."""
    name = node.input[0]
    if c.dtype(name).kind != "f":
        raise Unsupported(f"{c.dtype(name)} tensors")
    shape, x = c.shape(name), c.operand(name)
    wanted = [
        v
        for v, on in ((np.inf, a.get("detect_positive", 1)), (-np.inf, a.get("detect_negative", 1)))
        if on
    ]
    if not wanted:
        raise Unsupported("neither sign detected")
    hits = []
    for value in wanted:
        target = output_of(c, node) if len(wanted) == 1 else None
        hits.append(
            apply(
                c,
                OperationCode.EQUAL,
                [x, like(c, name, value)],
                np.dtype(np.bool_),
                shape,
                target,
            )
        )
    if len(hits) == 2:
        c.add(OperationCode.LOGICAL_OR, hits, [output_of(c, node)])


@maps("Celu")
def _celu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """celu x = α·elu(x/α)."""
    name, shape = float_input(c, node)
    alpha, f32 = a.get("alpha", 1.0), np.dtype(np.float32)
    scaled = apply(c, OperationCode.DIV, [c.operand(name), like(c, name, alpha)], f32, shape)
    elu = apply(c, OperationCode.ELU, [scaled, c.f32(1.0)], f32, shape)
    apply(c, OperationCode.MUL, [elu, like(c, name, alpha)], f32, shape, output_of(c, node))


@maps("Selu")
def _selu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """selu x = γ·elu(x; α)."""
    name, shape = float_input(c, node)
    f32 = np.dtype(np.float32)
    alpha = a.get("alpha", 1.67326319217681884765625)
    gamma = a.get("gamma", 1.05070102214813232421875)
    elu = apply(c, OperationCode.ELU, [c.operand(name), c.f32(alpha)], f32, shape)
    apply(c, OperationCode.MUL, [elu, like(c, name, gamma)], f32, shape, output_of(c, node))


@maps("ThresholdedRelu")
def _thresholded_relu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """x where x > α, else 0: a SELECT."""
    name, shape = float_input(c, node)
    x = c.operand(name)
    above = apply(
        c,
        OperationCode.GREATER,
        [x, like(c, name, a.get("alpha", 1.0))],
        np.dtype(np.bool_),
        shape,
    )
    zeros = filled(c, np.dtype(np.float32), shape, 0.0)
    c.add(OperationCode.SELECT, [above, x, zeros], [output_of(c, node)])


@maps("Shrink")
def _shrink(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """x − bias above λ, x + bias below −λ, 0 between: two SELECTs."""
    name, shape = float_input(c, node)
    f32, boolean = np.dtype(np.float32), np.dtype(np.bool_)
    lambd, bias = a.get("lambd", 0.5), a.get("bias", 0.0)
    x = c.operand(name)
    above = apply(c, OperationCode.GREATER, [x, like(c, name, lambd)], boolean, shape)
    below = apply(c, OperationCode.LESS, [x, like(c, name, -lambd)], boolean, shape)
    lowered = apply(c, OperationCode.SUB, [x, like(c, name, bias)], f32, shape)
    raised = apply(c, OperationCode.ADD, [x, like(c, name, bias)], f32, shape)
    low = apply(c, OperationCode.SELECT, [below, raised, filled(c, f32, shape, 0.0)], f32, shape)
    c.add(OperationCode.SELECT, [above, lowered, low], [output_of(c, node)])


@maps("Sign")
def _sign(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """1 above 0, −1 below, else x·0 (0 stays 0, NaN stays NaN): two SELECTs."""
    name, shape = float_input(c, node)
    f32, boolean = np.dtype(np.float32), np.dtype(np.bool_)
    x = c.operand(name)
    positive = apply(c, OperationCode.GREATER, [x, like(c, name, 0.0)], boolean, shape)
    negative = apply(c, OperationCode.LESS, [x, like(c, name, 0.0)], boolean, shape)
    rest = apply(c, OperationCode.MUL, [x, like(c, name, 0.0)], f32, shape)
    low = apply(c, OperationCode.SELECT, [negative, filled(c, f32, shape, -1.0), rest], f32, shape)
    c.add(OperationCode.SELECT, [positive, filled(c, f32, shape, 1.0), low], [output_of(c, node)])


@maps("Cosh", "Sinh")
def _cosh_sinh(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """(eˣ ± e⁻ˣ)/2.  Near 0 sinh's difference cancels, so there (|x| < 1/64) it is
    x + x³/6, whose next term is below float32's precision."""
    name, shape = float_input(c, node)
    f32, x = np.dtype(np.float32), c.operand(name)
    grown = apply(c, OperationCode.EXP, [x], f32, shape)
    negated = apply(c, OperationCode.NEG, [x], f32, shape)
    shrunk = apply(c, OperationCode.EXP, [negated], f32, shape)
    if node.op_type == "Cosh":
        total = apply(c, OperationCode.ADD, [grown, shrunk], f32, shape)
        apply(c, OperationCode.MUL, [total, like(c, name, 0.5)], f32, shape, output_of(c, node))
        return
    difference = apply(c, OperationCode.SUB, [grown, shrunk], f32, shape)
    far = apply(c, OperationCode.MUL, [difference, like(c, name, 0.5)], f32, shape)
    square = apply(c, OperationCode.MUL, [x, x], f32, shape)
    sixth = apply(c, OperationCode.MUL, [square, like(c, name, 1 / 6)], f32, shape)
    cube = apply(c, OperationCode.MUL, [sixth, x], f32, shape)
    near = apply(c, OperationCode.ADD, [x, cube], f32, shape)
    size = apply(c, OperationCode.ABS, [x], f32, shape)
    small = apply(c, OperationCode.LESS, [size, like(c, name, 1 / 64)], np.dtype(np.bool_), shape)
    c.add(OperationCode.SELECT, [small, near, far], [output_of(c, node)])


@maps("Tan")
def _tan(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """tan x = sin x / sin(x + π/2)."""
    name, shape = float_input(c, node)
    f32, x = np.dtype(np.float32), c.operand(name)
    sine = apply(c, OperationCode.SIN, [x], f32, shape)
    shifted = apply(c, OperationCode.ADD, [x, like(c, name, np.pi / 2)], f32, shape)
    cosine = apply(c, OperationCode.SIN, [shifted], f32, shape)
    apply(c, OperationCode.DIV, [sine, cosine], f32, shape, output_of(c, node))


@maps("Round")
def _round(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Half to even: f = floor x and d = x − f (both exact); f + 1 where d > ½, or
    d = ½ and f is odd (floor(f/2) ≠ f/2), else f."""
    name, shape = float_input(c, node)
    f32, boolean, x = np.dtype(np.float32), np.dtype(np.bool_), c.operand(name)
    floor = apply(c, OperationCode.FLOOR, [x], f32, shape)
    fraction = apply(c, OperationCode.SUB, [x, floor], f32, shape)
    half = like(c, name, 0.5)
    above = apply(c, OperationCode.GREATER, [fraction, half], boolean, shape)
    tie = apply(c, OperationCode.EQUAL, [fraction, half], boolean, shape)
    halved = apply(c, OperationCode.MUL, [floor, half], f32, shape)
    halved_floor = apply(c, OperationCode.FLOOR, [halved], f32, shape)
    odd = apply(c, OperationCode.NOT_EQUAL, [halved, halved_floor], boolean, shape)
    odd_tie = apply(c, OperationCode.LOGICAL_AND, [tie, odd], boolean, shape)
    up = apply(c, OperationCode.LOGICAL_OR, [above, odd_tie], boolean, shape)
    ceiling = apply(c, OperationCode.ADD, [floor, like(c, name, 1.0)], f32, shape)
    c.add(OperationCode.SELECT, [up, ceiling, floor], [output_of(c, node)])


@maps("Swish")
def _swish(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """x·σ(αx)."""
    name, shape = float_input(c, node)
    f32, x = np.dtype(np.float32), c.operand(name)
    alpha = a.get("alpha", 1.0)
    scaled = apply(c, OperationCode.MUL, [x, like(c, name, alpha)], f32, shape) if alpha != 1 else x
    gate = apply(c, OperationCode.LOGISTIC, [scaled], f32, shape)
    apply(c, OperationCode.MUL, [x, gate], f32, shape, output_of(c, node))


@maps("Mish")
def _mish(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """x·tanh(log(1 + eˣ))."""
    name, shape = float_input(c, node)
    f32, x = np.dtype(np.float32), c.operand(name)
    grown = apply(c, OperationCode.EXP, [x], f32, shape)
    plus_one = apply(c, OperationCode.ADD, [grown, like(c, name, 1.0)], f32, shape)
    softplus = apply(c, OperationCode.LOG, [plus_one], f32, shape)
    gate = apply(c, OperationCode.TANH, [softplus], f32, shape)
    apply(c, OperationCode.MUL, [x, gate], f32, shape, output_of(c, node))


@maps("Gelu")
def _gelu(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """The tanh form, ½x(1 + tanh(√(2/π)(x + 0.044715x³))); the exact form
    ½x(1 + erf(x/√2)) through building.erf (NNAPI has no erf)."""
    name, shape = float_input(c, node)
    if text(a.get("approximate"), "none") != "tanh":
        f32, x = np.dtype(np.float32), c.operand(name)
        scaled = apply(c, OperationCode.MUL, [x, like(c, name, 1 / np.sqrt(2))], f32, shape)
        plus_one = apply(
            c, OperationCode.ADD, [erf(c, scaled, shape), like(c, name, 1.0)], f32, shape
        )
        half = apply(c, OperationCode.MUL, [x, like(c, name, 0.5)], f32, shape)
        apply(c, OperationCode.MUL, [half, plus_one], f32, shape, output_of(c, node))
        return
    f32, x = np.dtype(np.float32), c.operand(name)
    square = apply(c, OperationCode.MUL, [x, x], f32, shape)
    cube = apply(c, OperationCode.MUL, [square, x], f32, shape)
    term = apply(c, OperationCode.MUL, [cube, like(c, name, 0.044715)], f32, shape)
    inner = apply(c, OperationCode.ADD, [x, term], f32, shape)
    scaled = apply(c, OperationCode.MUL, [inner, like(c, name, np.sqrt(2 / np.pi))], f32, shape)
    gate = apply(c, OperationCode.TANH, [scaled], f32, shape)
    plus_one = apply(c, OperationCode.ADD, [gate, like(c, name, 1.0)], f32, shape)
    half = apply(c, OperationCode.MUL, [x, like(c, name, 0.5)], f32, shape)
    apply(c, OperationCode.MUL, [half, plus_one], f32, shape, output_of(c, node))


@maps("Mod")
def _mod(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Integers only (a float remainder through a quotient would not be exact).
    NNAPI's integer DIV floors, so r = x − y·⌊x/y⌋ has the divisor's sign (fmod=0);
    fmod=1 wants the dividend's: where r ≠ 0 and the signs of r and x differ, r − y."""
    x_name, y_name = node.input[:2]
    if c.dtype(x_name).kind not in "iu" or c.dtype(y_name) != c.dtype(x_name):
        raise Unsupported(f"{c.dtype(x_name)} operands (integers map)")
    shape, i32, boolean = c.shape(node.output[0]), np.dtype(np.int32), np.dtype(np.bool_)
    x, y = c.operand(x_name), c.operand(y_name)
    quotient = apply(c, OperationCode.DIV, [x, y], i32, shape)
    product = apply(c, OperationCode.MUL, [quotient, y], i32, shape)
    if not a.get("fmod", 0):
        apply(c, OperationCode.SUB, [x, product], i32, shape, output_of(c, node))
        return
    rest = apply(c, OperationCode.SUB, [x, product], i32, shape)
    zero = c.ints([0])
    rest_negative = apply(c, OperationCode.LESS, [rest, zero], boolean, shape)
    x_negative = apply(c, OperationCode.LESS, [x, zero], boolean, c.shape(x_name))
    differ = apply(c, OperationCode.NOT_EQUAL, [rest_negative, x_negative], boolean, shape)
    nonzero = apply(c, OperationCode.NOT_EQUAL, [rest, zero], boolean, shape)
    fix = apply(c, OperationCode.LOGICAL_AND, [differ, nonzero], boolean, shape)
    fixed = apply(c, OperationCode.SUB, [rest, y], i32, shape)
    c.add(OperationCode.SELECT, [fix, fixed, rest], [output_of(c, node)])
