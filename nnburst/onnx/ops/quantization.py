"""Quantized ONNX: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
ConvInteger, MatMulInteger, QLinearConv and QLinearMatMul, with onnxruntime's bits.

int8 and uint8 tensors are operands of scale 1 and zero point 0 (their values are
the integers, see :mod:`..converter`), so every ONNX scale and zero point is
arithmetic here, not an operand's quantization.  Where NNAPI's quantized operations
round differently from onnxruntime they are not used:

* QUANTIZE rounds half away from zero; ONNX (and onnxruntime) round x / scale half
  to even.  So x / scale is a float DIV, rounded half to even by adding and
  subtracting 1.5·2²³ (float32 addition itself rounds to even once |v| ≤ 2²²),
  the zero point added, and only then QUANTIZE'd (scale 1: the value is already
  an integer, QUANTIZE just saturates).
* CONV_2D and FULLY_CONNECTED on quantized operands requantize with a fixed-point
  multiplier; onnxruntime (x86) multiplies float(acc) by the float32
  x_scale·w_scale/y_scale and rounds half to even.  So the integer accumulator is
  computed exactly by a float convolution (or matrix product) of the integers
  x − x_zero_point and w − w_zero_point: every partial sum is an integer below
  2²⁴, which float32 holds exactly.  When the longest sum could pass 2²⁴ the
  input is split into digits (base a power of 2) small enough that each digit's
  products are exact, and those are combined in int32 (an accumulation so long
  that even one-bit digits could pass 2²⁴ is refused).  Then float(acc) · multiplier, rounded half to even, plus y_zero_point.
* DEQUANTIZE is the same arithmetic as ONNX's (an integer difference times a
  float32 scale, one rounding): here it is float(x) − zero point (exact) times
  the scale.

Constant QuantizeLinear/DequantizeLinear (a QDQ model's weights) fold at load.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...codes import OperationCode
from ...errors import BadDataError
from ..converter import (
    MAPPERS,
    Converter,
    Unsupported,
    axis_index,
    folds,
    maps,
    rewrites,
    tensor_value,
)
from .building import apply, int_tensor, output_of, reshaped

F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
BYTES = _BYTES = (np.dtype(np.uint8), np.dtype(np.int8))
#: Adding then subtracting 1.5·2²³ rounds a float32 of magnitude ≤ 2²² to an integer,
#: half to even (float32's spacing there is 1).
_ROUNDER = 1.5 * 2**23
_ROUNDABLE = 2.0**22
#: float32 holds every integer up to 2²⁴: a sum whose partial sums stay below is exact.
_EXACT = 2**24


def _limits(dtype: np.dtype[Any]) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _byte_dtype(c: Converter, name: str) -> np.dtype[Any]:
    dtype = c.dtype(name)
    if dtype not in _BYTES:
        raise Unsupported(f"{dtype} quantized tensors (int8 and uint8 map)")
    return dtype


# -- scales and zero points ---------------------------------------------------------------


def _broadcastable(
    values: np.ndarray, shape: tuple[int, ...], axis: int, block: int, what: str
) -> np.ndarray:
    """A per-tensor, per-axis or blocked parameter laid out to broadcast against ``shape``."""
    if values.size == 1 and not block:
        return values.reshape(())
    rank = len(shape)
    if block:
        if values.ndim != rank:
            raise Unsupported(f"a blocked {what} of rank {values.ndim} for a rank-{rank} input")
        values = np.repeat(values, block, axis=axis)
        values = np.take(values, np.arange(shape[axis]), axis=axis)
        if values.shape != shape:
            raise Unsupported(f"a blocked {what} of shape {list(values.shape)}")
        return values
    if values.ndim != 1 or values.shape[0] != shape[axis]:
        raise Unsupported(
            f"a {what} of shape {list(values.shape)} for axis {axis} of {list(shape)}"
        )
    layout = [1] * rank
    layout[axis] = shape[axis]
    return values.reshape(layout)


def _laid_out(
    c: Converter, name: str, shape: tuple[int, ...], axis: int, block: int, what: str
) -> np.ndarray | int:
    """The scale or zero point ``name`` laid out to broadcast against ``shape``: a
    constant as an array; a computed one as a float32 operand, RESHAPE'd along
    ``axis`` (one value per index) or GATHER'd into blocks at every execution."""
    if name in c.constants:
        return _broadcastable(c.constants[name], shape, axis, block, what)
    given, dtype = c.shape(name), c.dtype(name)
    operand = c.operand(name)
    if dtype != F32:
        operand = _as_floats(c, operand, dtype, given or (1,))
    if block:
        if len(given) != len(shape):
            raise Unsupported(
                f"a blocked {what} of rank {len(given)} for a rank-{len(shape)} input"
            )
        picks = c.ints((np.arange(shape[axis]) // block).tolist())
        return apply(c, OperationCode.GATHER, [operand, c.i32(axis), picks], F32, shape)
    if int(np.prod(given or (1,))) == 1:
        return operand
    if len(given) != 1 or given[0] != shape[axis]:
        raise Unsupported(f"a {what} of shape {list(given)} for axis {axis} of {list(shape)}")
    layout = tuple(shape[axis] if k == axis else 1 for k in range(len(shape)))
    return reshaped(c, operand, F32, given, layout)


def _parameter(
    c: Converter, node: onnx.NodeProto, i: int, shape: tuple[int, ...], a: dict[str, Any]
) -> np.ndarray | int | None:
    """Input ``i`` (a scale or zero point) of QuantizeLinear or DequantizeLinear, laid
    out for their input of ``shape`` (None when left out)."""
    name = node.input[i] if len(node.input) > i else ""
    if not name:
        return None
    what = "scale" if i == 1 else "zero point"
    if int(np.prod(c.shape(name) or (1,))) == 1 and not a.get("block_size"):
        axis = 0  # per tensor: the axis is ignored (a rank-1 input keeps the default 1)
    else:
        axis = axis_index(a.get("axis", 1), len(shape))
    return _laid_out(c, name, shape, axis, int(a.get("block_size", 0)), what)


def _as_floats(c: Converter, operand: int, dtype: np.dtype[Any], shape: tuple[int, ...]) -> int:
    """An integer tensor's values as float32 (exact for bytes: DEQUANTIZE at scale 1)."""
    code = OperationCode.DEQUANTIZE if dtype in _BYTES else OperationCode.CAST
    return apply(c, code, [operand], F32, shape)


def _float_parameter(c: Converter, value: np.ndarray | int) -> int:
    """A laid-out scale or zero point as a float32 operand."""
    if isinstance(value, np.ndarray):
        return c.floats(value.astype(np.float32))
    return value


# -- quantizing ---------------------------------------------------------------------------


def _rounded(c: Converter, v: int, shape: tuple[int, ...]) -> int:
    """Half to even: clamped to ±2²² (beyond, every value saturates anyway), then
    ± 1.5·2²³."""
    low = apply(c, OperationCode.MINIMUM, [v, c.floats(np.array([_ROUNDABLE]))], F32, shape)
    clamped = apply(c, OperationCode.MAXIMUM, [low, c.floats(np.array([-_ROUNDABLE]))], F32, shape)
    up = apply(c, OperationCode.ADD, [clamped, c.floats(np.array([_ROUNDER]))], F32, shape)
    return apply(c, OperationCode.SUB, [up, c.floats(np.array([_ROUNDER]))], F32, shape)


def _quantized(
    c: Converter,
    v: int,
    shape: tuple[int, ...],
    zero_point: int | None,
    dtype: np.dtype[Any],
    out: int | None = None,
) -> int:
    """Float ``v`` rounded half to even, plus ``zero_point`` (a float32 operand),
    saturated into a byte tensor."""
    rounded = _rounded(c, v, shape)
    if zero_point is not None:
        rounded = apply(c, OperationCode.ADD, [rounded, zero_point], F32, shape)
    return apply(c, OperationCode.QUANTIZE, [rounded], dtype, shape, out)


@maps("QuantizeLinear")
def _quantize_linear(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """saturate(round_half_even(x / scale) + zero_point)."""
    x, shape = node.input[0], c.shape(node.input[0])
    if c.dtype(x) != F32:
        raise Unsupported(f"{c.dtype(x)} inputs")
    dtype = _byte_dtype(c, node.output[0])
    scale = _parameter(c, node, 1, shape, a)
    assert scale is not None  # a required input (checked against the schema)
    zero_point = _parameter(c, node, 2, shape, a)
    quotient = apply(c, OperationCode.DIV, [c.operand(x), _float_parameter(c, scale)], F32, shape)
    zero = None if zero_point is None else _float_parameter(c, zero_point)
    _quantized(c, quotient, shape, zero, dtype, output_of(c, node))


@maps("DequantizeLinear")
def _dequantize_linear(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """(x − zero_point) · scale: the difference is exact in float32, the product
    rounds once, as onnxruntime's."""
    x, shape = node.input[0], c.shape(node.input[0])
    dtype = c.dtype(x)
    if dtype not in (*_BYTES, I32):
        raise Unsupported(f"{dtype} inputs")
    if c.dtype(node.output[0]) != F32:
        raise Unsupported(f"{c.dtype(node.output[0])} outputs")
    scale = _parameter(c, node, 1, shape, a)
    assert scale is not None
    zero_point = _parameter(c, node, 2, shape, a)
    v = _as_floats(c, c.operand(x), dtype, shape)
    if zero_point is not None:
        zero = _float_parameter(c, zero_point)
        v = apply(c, OperationCode.SUB, [v, zero], F32, shape)
    apply(c, OperationCode.MUL, [v, _float_parameter(c, scale)], F32, shape, output_of(c, node))


def _constant_parameter(
    c: Converter, node: onnx.NodeProto, i: int, shape: tuple[int, ...], a: dict[str, Any]
) -> np.ndarray | None:
    value = _parameter(c, node, i, shape, a)
    if value is not None and not isinstance(value, np.ndarray):
        raise Unsupported("a computed parameter")
    return value


@folds("QuantizeLinear")
def _fold_quantize(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    if len(node.input) < 2 or not node.input[0] or not node.input[1]:
        raise Unsupported("no input or no scale")  # the schema check names it
    x = c.constants[node.input[0]]
    if x.dtype != F32:
        raise Unsupported(f"{x.dtype} inputs")
    shape = tuple(x.shape)
    scale = _constant_parameter(c, node, 1, shape, a)
    zero = _constant_parameter(c, node, 2, shape, a)
    assert scale is not None  # a required input
    dtype = zero.dtype if zero is not None else c.dtype(node.output[0])
    if dtype not in _BYTES:
        raise Unsupported(f"{dtype} outputs")
    low, high = _limits(dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.rint(x / np.float32(scale) if scale.ndim == 0 else x / scale.astype(F32))
    if zero is not None:
        v = v + zero.astype(F32)
    return [np.clip(v, low, high).astype(dtype)]


@folds("DequantizeLinear")
def _fold_dequantize(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> list[np.ndarray]:
    if len(node.input) < 2 or not node.input[0] or not node.input[1]:
        raise Unsupported("no input or no scale")  # the schema check names it
    x = c.constants[node.input[0]]
    if x.dtype not in (*_BYTES, I32) or c.dtype(node.output[0]) != F32:
        raise Unsupported(f"{x.dtype} inputs")
    shape = tuple(x.shape)
    scale = _constant_parameter(c, node, 1, shape, a)
    zero = _constant_parameter(c, node, 2, shape, a)
    assert scale is not None
    difference = x.astype(np.int64) - (0 if zero is None else zero.astype(np.int64))
    return [(difference.astype(F32) * scale.astype(F32)).astype(F32)]


@maps("DynamicQuantizeLinear")
def _dynamic_quantize_linear(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """onnxruntime's: the range widened to hold 0, scale = (max − min) / 255 (1 for
    an all-zero input), zero point = round_half_even(clamp(−min / scale, 0, 255)),
    then QuantizeLinear with those."""
    x, shape = node.input[0], c.shape(node.input[0])
    if c.dtype(x) != F32:
        raise Unsupported(f"{c.dtype(x)} inputs")
    if not 1 <= len(shape) <= 4:
        raise Unsupported(f"a rank-{len(shape)} input")
    kept = (1,) * len(shape)
    axes, keep, zero = c.ints(list(range(len(shape)))), c.boolean(True), c.floats(np.zeros(1))
    whole = [c.operand(x), axes, keep]
    top = apply(c, OperationCode.REDUCE_MAX, whole, F32, kept)
    bottom = apply(c, OperationCode.REDUCE_MIN, whole, F32, kept)
    top = apply(c, OperationCode.MAXIMUM, [top, zero], F32, kept)
    bottom = apply(c, OperationCode.MINIMUM, [bottom, zero], F32, kept)
    span = apply(c, OperationCode.SUB, [top, bottom], F32, kept)
    ratio = apply(c, OperationCode.DIV, [span, c.floats(np.array([255.0]))], F32, kept)
    flat = apply(c, OperationCode.EQUAL, [top, bottom], np.dtype(np.bool_), kept)
    ones = c.floats(np.ones(kept))
    scale = apply(c, OperationCode.SELECT, [flat, ones, ratio], F32, kept)
    share = apply(c, OperationCode.DIV, [bottom, scale], F32, kept)
    start = apply(c, OperationCode.SUB, [zero, share], F32, kept)
    start = apply(c, OperationCode.MAXIMUM, [start, zero], F32, kept)
    start = apply(c, OperationCode.MINIMUM, [start, c.floats(np.array([255.0]))], F32, kept)
    zero_point = _rounded(c, start, kept)
    quotient = apply(c, OperationCode.DIV, [c.operand(x), scale], F32, shape)
    uint8 = np.dtype(np.uint8)
    _quantized(c, quotient, shape, zero_point, uint8, output_of(c, node))
    reshaped(c, scale, F32, kept, c.shape(node.output[1]), node.output[1])
    if len(node.output) > 2 and node.output[2]:
        flat_zero = reshaped(c, zero_point, F32, kept, c.shape(node.output[2]) or (1,))
        apply(c, OperationCode.QUANTIZE, [flat_zero], uint8, (1,), output_of(c, node, 2))


# -- integer products ---------------------------------------------------------------------


def _centred(c: Converter, name: str, zero_point: np.ndarray | int | None) -> tuple[int, int]:
    """A byte tensor minus its (laid-out) zero point, as float32, and the largest
    magnitude that can hold (its values are integers)."""
    dtype, shape = _byte_dtype(c, name), c.shape(name)
    low, high = _limits(dtype)
    v = _as_floats(c, c.operand(name), dtype, shape)
    if zero_point is None:
        return v, max(-low, high)
    if isinstance(zero_point, np.ndarray):
        zeros = zero_point.astype(np.int64)
        bound = int(max(np.abs(high - zeros).max(), np.abs(low - zeros).max()))
    else:
        bound = high - low
    return apply(c, OperationCode.SUB, [v, _float_parameter(c, zero_point)], F32, shape), bound


def _temporary_tensor(c: Converter, name: str, operand: int, shape: tuple[int, ...]) -> str:
    """Name a float32 operand as a tensor, for another mapper to read."""
    c.types[name] = (F32, shape)
    c.alias(name, operand)
    return name


def _products(
    c: Converter,
    node: onnx.NodeProto,
    a: dict[str, Any],
    x_name: str,
    x_zero: np.ndarray | int | None,
    weights: tuple[np.ndarray | int, tuple[int, ...], int],
    bias_bound: int = 0,
) -> tuple[int, bool]:
    """The exact integer accumulator of Conv or MatMul of (x − x_zero) with the
    centred ``weights`` (float32 integers: values or an operand, their shape and
    largest magnitude): a float32 operand, or an int32 one (second value True) when
    float32 could not hold every partial sum."""
    conv = node.op_type in ("ConvInteger", "QLinearConv")
    x, x_bound = _centred(c, x_name, x_zero)
    x_shape = c.shape(x_name)
    out_shape = c.shape(node.output[0])
    w_values, w_shape, w_bound = weights
    terms = int(np.prod(w_shape[1:])) if conv else w_shape[-2]
    label = node.output[0]

    def product(source: int, tag: str) -> int:
        x_tensor = _temporary_tensor(c, f"{label}/{tag}", source, x_shape)
        w_tensor = f"{label}/weights"
        if isinstance(w_values, np.ndarray):
            c.constants[w_tensor] = w_values
        else:
            _temporary_tensor(c, w_tensor, w_values, w_shape)
        y_tensor = f"{label}/{tag}·w"
        c.types[y_tensor] = (F32, out_shape)
        if conv:
            keys = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
            inner = helper.make_node("Conv", [x_tensor, w_tensor], [y_tensor])
            MAPPERS["Conv"](c, inner, {k: v for k, v in a.items() if k in keys})
        else:
            MAPPERS["MatMul"](c, helper.make_node("MatMul", [x_tensor, w_tensor], [y_tensor]), {})
        return c.operand(y_tensor)

    if terms * x_bound * w_bound + bias_bound < _EXACT:
        return product(x, "x"), False
    base, count = _digits(x_bound, lambda digit: terms * digit * w_bound < _EXACT)
    # x = Σ baseⁱ·dᵢ: each lower digit x − base·floor(x / base) in [0, base), the top
    # one what is left (signed); each digit's products are exact, summed in int32.
    total, rest = 0, x
    for i in range(count):
        x = rest
        if i < count - 1:
            scaled = apply(c, OperationCode.MUL, [x, c.floats(np.array([1 / base]))], F32, x_shape)
            rest = apply(c, OperationCode.FLOOR, [scaled], F32, x_shape)
            back = apply(c, OperationCode.MUL, [rest, c.floats(np.array([base]))], F32, x_shape)
            digit = apply(c, OperationCode.SUB, [x, back], F32, x_shape)
        else:
            digit = x
        part = apply(c, OperationCode.CAST, [product(digit, f"digit{i}")], I32, out_shape)
        if i:
            part = apply(c, OperationCode.MUL, [part, c.ints([base**i])], I32, out_shape)
            part = apply(c, OperationCode.ADD, [total, part], I32, out_shape)
        total = part
    return total, True


def _digits(bound: int, fits: Any) -> tuple[int, int]:
    """The base (a power of 2) and digit count splitting integers of magnitude ≤ ``bound``
    into the fewest digits whose every value ``fits``."""
    values = np.arange(-bound, bound + 1)
    for count in range(2, 10):
        for bits in range(8, 0, -1):
            base, rest, largest = 2**bits, values, 0
            for _ in range(count - 1):
                largest = max(largest, base - 1)
                rest = np.floor_divide(rest, base)
            largest = max(largest, int(np.abs(rest).max()))
            if fits(largest):
                return base, count
    raise Unsupported("sums of products too long to keep exact")


def _centred_weights(
    c: Converter, node: onnx.NodeProto, w_index: int, zero_index: int, conv: bool
) -> tuple[np.ndarray | int, tuple[int, ...], int]:
    """The weights minus their zero point (one per output channel for Conv, per column
    for MatMul) as float32 integers: values when constant, else an operand; their
    shape and the largest magnitude they can hold."""
    name = node.input[w_index]
    dtype, shape = _byte_dtype(c, name), c.shape(name)
    low, high = _limits(dtype)
    zero_name = node.input[zero_index] if len(node.input) > zero_index else ""
    axis = 0 if conv else len(shape) - 1
    zero = _laid_out(c, zero_name, shape, axis, 0, "weight zero point") if zero_name else None
    if name in c.constants and not isinstance(zero, int):
        w = c.constants[name].astype(np.int64)
        if zero is not None:
            w = w - zero.astype(np.int64)
        return w.astype(np.float32), shape, int(np.abs(w).max(initial=0))
    centred, bound = _centred(c, name, zero)
    return centred, shape, bound


def _input_zero(c: Converter, node: onnx.NodeProto, i: int, conv: bool) -> np.ndarray | int | None:
    """The data input's zero point, laid out: one value, or (MatMulInteger's
    a_zero_point) one per row."""
    name = node.input[i] if len(node.input) > i else ""
    if not name:
        return None
    shape = c.shape(node.input[0])
    if conv or len(shape) < 2:
        if int(np.prod(c.shape(name) or (1,))) != 1:
            raise Unsupported("an input zero point of more than one value")
        return _laid_out(c, name, shape, 0, 0, "zero point")
    return _laid_out(c, name, shape, len(shape) - 2, 0, "zero point")


def _integer_output(c: Converter, node: onnx.NodeProto, total: int, is_int: bool) -> None:
    if is_int:
        c.alias(node.output[0], total)
    else:
        c.add(OperationCode.CAST, [total], [output_of(c, node)])


@maps("ConvInteger")
def _conv_integer(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Conv of (x − x_zero_point) and (w − w_zero_point), exact in int32."""
    if len(c.shape(node.input[1])) != 4:
        raise Unsupported("a convolution that is not 2-D")
    weights = _centred_weights(c, node, 1, 3, conv=True)
    total, is_int = _products(c, node, a, node.input[0], _input_zero(c, node, 2, True), weights)
    _integer_output(c, node, total, is_int)


@maps("MatMulInteger")
def _matmul_integer(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """MatMul of (a − a_zero_point) and a constant (b − b_zero_point), exact in int32."""
    weights = _centred_weights(c, node, 1, 3, conv=False)
    total, is_int = _products(c, node, a, node.input[0], _input_zero(c, node, 2, False), weights)
    _integer_output(c, node, total, is_int)


def _multiplier(
    c: Converter, node: onnx.NodeProto, x_scale: int, w_scale: int, y_scale: int, conv: bool
) -> int:
    """x_scale · w_scale / y_scale in the scales' type (float32, or float16), in that
    order (onnxruntime's), per output channel (Conv) or column (MatMul) when w_scale
    is: folded when all three are constants."""
    names = [node.input[i] for i in (x_scale, w_scale, y_scale)]
    dtype = c.dtype(names[0])
    if all(n in c.constants for n in names):
        xs, ws, ys = (c.constants[n].astype(dtype) for n in names)
        if xs.size != 1 or ys.size != 1:
            raise Unsupported("per-axis input or output scales")
        value = (xs.reshape(()) * ws.reshape(-1)) / ys.reshape(())
        if value.size > 1 and conv:
            value = value.reshape(-1, 1, 1)
        return c.floats(value.astype(F32))
    out_shape = c.shape(node.output[0])
    if dtype == np.float16:  # QLinearMatMul's float16 scales: the product in float16
        for n in names:
            if int(np.prod(c.shape(n) or (1,))) != 1 and len(c.shape(n)) != 1:
                raise Unsupported("float16 scales of rank over 1")
        shape = c.shape(names[1]) or (1,)
        ops = [c.operand(n) for n in names]
        product = apply(c, OperationCode.MUL, ops[:2], dtype, shape)
        quotient = apply(c, OperationCode.DIV, [product, ops[2]], dtype, shape)
        return apply(c, OperationCode.CAST, [quotient], F32, shape)
    axis = 1 if conv else len(out_shape) - 1
    x_s, w_s, y_s = (
        _float_parameter(c, _laid_out(c, n, out_shape, axis, 0, "scale")) for n in names
    )
    layout = tuple(out_shape[axis] if k == axis else 1 for k in range(len(out_shape)))
    shape = layout if int(np.prod(c.shape(names[1]) or (1,))) > 1 else (1,)
    product = apply(c, OperationCode.MUL, [x_s, w_s], F32, shape)
    return apply(c, OperationCode.DIV, [product, y_s], F32, shape)


def _requantized(
    c: Converter,
    node: onnx.NodeProto,
    total: int,
    is_int: bool,
    bias: np.ndarray | None,
    multiplier: int,
    zero_index: int,
) -> None:
    """round_half_even(float(acc + bias) · multiplier) + y_zero_point, saturated."""
    shape = c.shape(node.output[0])
    if bias is not None:
        if is_int:
            total = apply(c, OperationCode.ADD, [total, int_tensor(c, bias)], I32, shape)
        else:
            total = apply(c, OperationCode.ADD, [total, c.floats(bias.astype(F32))], F32, shape)
    if is_int:
        total = apply(c, OperationCode.CAST, [total], F32, shape)
    scaled = apply(c, OperationCode.MUL, [total, multiplier], F32, shape)
    zero_name = node.input[zero_index] if len(node.input) > zero_index else ""
    zero = None
    if zero_name:
        if int(np.prod(c.shape(zero_name) or (1,))) != 1:
            raise Unsupported("a per-axis output zero point")
        zero = _float_parameter(c, _laid_out(c, zero_name, shape, 0, 0, "zero point"))
    _quantized(c, scaled, shape, zero, _byte_dtype(c, node.output[0]), output_of(c, node))


@maps("QLinearConv")
def _qlinear_conv(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """The exact accumulator (plus the int32 bias), requantized as onnxruntime does."""
    if len(c.shape(node.input[3])) != 4:
        raise Unsupported("a convolution that is not 2-D")
    weights = _centred_weights(c, node, 3, 5, conv=True)
    bias = None
    if len(node.input) > 8 and node.input[8]:
        bias = c.value(node.input[8], "bias").astype(np.int64).reshape(-1, 1, 1)
    bias_bound = int(np.abs(bias).max(initial=0)) if bias is not None else 0
    total, is_int = _products(
        c, node, a, node.input[0], _input_zero(c, node, 2, True), weights, bias_bound
    )
    multiplier = _multiplier(c, node, 1, 4, 6, conv=True)
    _requantized(c, node, total, is_int, bias, multiplier, 7)


@maps("QLinearMatMul")
def _qlinear_matmul(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """The exact accumulator, requantized as onnxruntime does (float16 scales, which
    onnxruntime's CPU kernel does not take: their product in float16, as ONNX's
    reference computes it)."""
    kinds = {c.dtype(node.input[i]) for i in (1, 4, 6)}
    if kinds not in ({F32}, {np.dtype(np.float16)}):
        raise Unsupported(f"scales of types {sorted(map(str, kinds))}")
    weights = _centred_weights(c, node, 3, 5, conv=False)
    total, is_int = _products(c, node, a, node.input[0], _input_zero(c, node, 2, True), weights)
    multiplier = _multiplier(c, node, 1, 4, 6, conv=False)
    _requantized(c, node, total, is_int, None, multiplier, 7)


def cast_bytes(c: Converter, node: onnx.NodeProto) -> None:
    """Cast from or to int8/uint8 (NNAPI's CAST takes no int8, and saturates where C
    wraps).  From bytes: their values as float32 (exact), then CAST.  To bytes: from
    floats, truncated toward zero (CAST to int32) and saturated by QUANTIZE (ONNX
    leaves out-of-range values undefined); from integers, wrapped modulo 2⁸ as C
    does (int32 DIV floors), then QUANTIZE'd."""
    name, out = node.input[0], node.output[0]
    dtype, target, shape = c.dtype(name), c.dtype(out), c.shape(out)
    if dtype == target:
        c.alias(out, c.operand(name))
        return
    if dtype in _BYTES and target in _BYTES:
        raise Unsupported(f"{dtype} → {target} casts")
    if dtype in _BYTES:
        values = _as_floats(c, c.operand(name), dtype, shape)
        if target == np.bool_:
            c.add(OperationCode.NOT_EQUAL, [values, c.floats(np.zeros(1))], [output_of(c, node)])
        elif target == F32:
            c.alias(out, values)
        else:
            c.add(OperationCode.CAST, [values], [output_of(c, node)])
        return
    if dtype.kind == "f":
        whole = apply(c, OperationCode.CAST, [c.operand(name)], I32, shape)
    elif dtype in (I32, np.dtype(np.int64)):
        low, high = _limits(target)
        span = c.ints([high - low + 1])
        shifted = apply(c, OperationCode.SUB, [c.operand(name), c.ints([low])], I32, shape)
        turns = apply(c, OperationCode.DIV, [shifted, span], I32, shape)
        back = apply(c, OperationCode.MUL, [turns, span], I32, shape)
        kept = apply(c, OperationCode.SUB, [shifted, back], I32, shape)
        whole = apply(c, OperationCode.ADD, [kept, c.ints([low])], I32, shape)
    else:
        raise Unsupported(f"{dtype} → {target} casts")
    values = apply(c, OperationCode.CAST, [whole], F32, shape)
    apply(c, OperationCode.QUANTIZE, [values], target, shape, output_of(c, node))


@rewrites("com.microsoft.DynamicQuantizeLSTM")
def _dynamic_quantize_lstm(graph: onnx.GraphProto, node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """onnxruntime's LSTM with int8/uint8 weights ([directions, input, 4·hidden], a
    scale and zero point per direction or per gate column) as an ONNX LSTM whose
    weights are dequantized once, here: (w − zero point) · scale, transposed to
    ONNX's [directions, 4·hidden, input].  Not bit-exact: onnxruntime also quantizes
    the input and the hidden state to uint8 at every step; this LSTM keeps them
    float32 (so it is the closer of the two to the float model)."""
    inputs = list(node.input) + [""] * (12 - len(node.input))
    constants = {t.name: t for t in graph.initializer}
    if any(inputs[i] not in constants for i in (1, 2, 8, 9, 10, 11)):
        return [node]  # computed weights: left for the check to name
    names = []
    for w, scale, zero in ((1, 8, 9), (2, 10, 11)):
        q = tensor_value(constants[inputs[w]]).astype(np.int64)
        s = tensor_value(constants[inputs[scale]]).astype(F32)
        z = tensor_value(constants[inputs[zero]]).astype(np.int64)
        try:
            if q.ndim != 3 or s.ndim > 2 or z.ndim > 2:
                raise ValueError(f"weights of rank {q.ndim}, scales of rank {s.ndim}")
            s = s.reshape(s.shape[0], 1, -1) if s.ndim else s
            z = z.reshape(z.shape[0], 1, -1) if z.ndim else z
            values = ((q - z).astype(F32) * s).astype(F32).transpose(0, 2, 1)
        except ValueError as exc:
            raise BadDataError(
                f"not a valid ONNX model: DynamicQuantizeLSTM {node.name or node.output[0]!r}: "
                f"{exc}"
            ) from None
        name = f"{inputs[w]}/dequantized"
        if name not in constants:
            graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(values), name))
        names.append(name)
    lstm = helper.make_node(
        "LSTM", [inputs[0], *names, *inputs[3:8]], list(node.output), name=node.name
    )
    lstm.attribute.extend(node.attribute)
    while lstm.input and not lstm.input[-1]:
        del lstm.input[-1]
    return [lstm]
