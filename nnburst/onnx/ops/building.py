"""What the ONNX mappers build from: one NNAPI operation (:func:`apply`), a
tensor of one value (:func:`filled`), reshapes, broadcasts, permutations and
reversals, and the readings of a node that several families share."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from ...codes import FuseCode, OperandCode, OperationCode
from ...extensions import MAX_EXTENDED_RANK
from ..converter import (
    Converter,
    Unsupported,
    check_constant_size,
    operand_dtype,
    operand_type_of,
)


def output_of(c: Converter, node: onnx.NodeProto, i: int = 0) -> int:
    return c.operand(node.output[i])


def permuted(c: Converter, source: int, shape: Sequence[int], perm: Sequence[int]) -> int:
    """A float32 ``source`` of ``shape``, TRANSPOSE'd by ``perm`` at every execution."""
    out = c.temporary(np.dtype(np.float32), tuple(shape[p] for p in perm))
    c.add(OperationCode.TRANSPOSE, [source, c.ints(perm)], [out])
    return out


def scaled_by(c: Converter, source: int, shape: tuple[int, ...], factor: float) -> int:
    """A float32 ``source`` of ``shape`` times ``factor``, at every execution."""
    out = c.temporary(np.dtype(np.float32), shape)
    c.add(OperationCode.MUL, [source, c.floats(np.array([factor])), c.i32(FuseCode.NONE)], [out])
    return out


def reshaped(c: Converter, source: int, dtype: np.dtype[Any], shape: tuple[int, ...],
              target: tuple[int, ...], name: str | None = None) -> int:  # fmt: skip
    """``source`` with the ``target`` shape, into tensor ``name`` (a new operand if
    None): the same operand where NNAPI's shapes agree (a scalar is [1]), RESHAPE for
    floats, an ADD broadcasting zeros for integers when only leading ones are added."""
    target, trimmed = target or (1,), shape or (1,)
    if len(shape) > MAX_EXTENDED_RANK or len(target) > MAX_EXTENDED_RANK:
        raise Unsupported(f"a tensor of rank over {MAX_EXTENDED_RANK}")
    if trimmed == target:
        if name is not None:
            c.alias(name, source)
        return source
    out = c.operand(name) if name is not None else c.temporary(dtype, target)
    if dtype in (np.float32, np.float16, np.uint8, np.int8):  # (bytes: quantized)
        c.add(OperationCode.RESHAPE, [source, c.ints(target)], [out])
    elif (
        dtype.kind in "iu"
        and target[len(target) - len(trimmed) :] == trimmed
        and all(d == 1 for d in target[: len(target) - len(trimmed)])
    ):
        apply(c, OperationCode.ADD, [source, filled(c, dtype, target, 0)], dtype, target, out)
    elif dtype in (np.int32, np.int64):
        _reshaped_int32(c, source, trimmed, target, out)
    else:
        raise Unsupported(f"{dtype} tensors (NNAPI's RESHAPE takes floats and quantized)")
    return out


def _reshaped_int32(c: Converter, source: int, shape: tuple[int, ...], target: tuple[int, ...],
                    out: int) -> None:  # fmt: skip
    """int32 ``source`` reshaped exactly, NNAPI's RESHAPE taking no int32: EXPAND_DIMS
    (which does) for each 1 the target inserts; else a RESHAPE, which the converter
    runs on two exact float32 halves (see :meth:`Converter.add`)."""
    int32 = np.dtype(np.int32)
    inserted, matched = [], 0
    for axis, size in enumerate(target):
        if matched < len(shape) and size == shape[matched]:
            matched += 1
        elif size == 1:
            inserted.append(axis)
        else:
            break
    if matched == len(shape) and len(inserted) == len(target) - len(shape):
        current = list(shape)
        for n, axis in enumerate(inserted):
            current.insert(axis, 1)
            last = n == len(inserted) - 1
            source = apply(c, OperationCode.EXPAND_DIMS, [source, c.i32(axis)], int32,
                           tuple(current), out if last else None)  # fmt: skip
        return
    c.add(OperationCode.RESHAPE, [source, c.ints(target)], [out])  # through two halves


def like(c: Converter, name: str, value: float) -> int:
    """A one-element constant of ``name``'s type (broadcast by the operation)."""
    return filled(c, c.dtype(name), (1,), value)


def float_input(c: Converter, node: onnx.NodeProto) -> tuple[str, tuple[int, ...]]:
    name = node.input[0]
    if c.dtype(name) != np.float32:
        raise Unsupported(f"{c.dtype(name)} operands")
    return name, c.shape(name)


def broadcast(c: Converter, name: str, shape: tuple[int, ...], out: int | None = None) -> int:
    """``name`` broadcast to ``shape`` (into ``out``, or a new operand): x + (-0.0) of
    that shape (which keeps every value, -0.0 and NaN included), x + 0 for integers,
    x OR false for booleans."""
    dtype = c.dtype(name)
    if dtype == np.bool_:
        falses = filled(c, dtype, shape, False)
        return apply(c, OperationCode.LOGICAL_OR, [c.operand(name), falses], dtype, shape, out)
    zeros = filled(c, dtype, shape, -0.0 if np.issubdtype(dtype, np.floating) else 0)
    return apply(c, OperationCode.ADD, [c.operand(name), zeros], dtype, shape, out)


def reversed_along(
    c: Converter, x: int, axis: int, dtype: np.dtype[Any], shape: tuple[int, ...]
) -> int:
    """``x`` with ``axis`` reversed (a GATHER): an operation that picks the first of
    equal values then picks the last; unreversed maps its indices back."""
    backwards = c.ints(np.arange(shape[axis])[::-1].tolist())
    return apply(c, OperationCode.GATHER, [x, c.i32(axis), backwards], dtype, shape)


def unreversed(c: Converter, found: int, n: int, shape: tuple[int, ...],
                out: int | None = None) -> int:  # fmt: skip
    """Indices ``found`` along an axis of ``n`` reversed, as indices along the axis: n − 1 − i."""
    return apply(c, OperationCode.SUB, [c.ints([n - 1]), found], np.dtype(np.int32), shape, out)


def apply(c: Converter, code: OperationCode, inputs: Sequence[int], dtype: np.dtype[Any],
           shape: tuple[int, ...], out: int | None = None) -> int:  # fmt: skip
    """``code`` on ``inputs`` into ``out`` (a new operand of ``dtype`` and ``shape`` if None);
    ADD, SUB, MUL and DIV get their NONE activation."""
    target = c.temporary(dtype, shape) if out is None else out
    fused = code in (OperationCode.ADD, OperationCode.SUB, OperationCode.MUL, OperationCode.DIV)
    c.add(code, [*inputs, c.i32(FuseCode.NONE)] if fused else list(inputs), [target])
    return target


def filled(c: Converter, dtype: np.dtype[Any], shape: tuple[int, ...], value: float) -> int:
    """A constant of ``shape`` filled with ``value`` (SELECT wants whole shapes)."""
    check_constant_size(f"a {list(shape)} constant", math.prod(shape))
    operand = c.model.add_operand(operand_type_of(dtype, shape))
    c.model.set_operand_value(operand, np.full(shape or (1,), value, operand_dtype(dtype)))
    return operand


def int_tensor(c: Converter, values: np.ndarray) -> int:
    array = np.ascontiguousarray(values, np.int32)
    return c.constant(OperandCode.TENSOR_INT32, array, array.shape)


def text(value: Any, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


#: erf's series 2/√π·Σ (−1)ⁿ x²ⁿ⁺¹ / (n!(2n + 1)), to the x¹¹ term: below |x| = ½ the
#: next term is under 2e-8, where the tail formula would cancel in float32.
_ERF_SERIES = [
    2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(6)
]
#: Abramowitz and Stegun 7.1.26 for |x| ≥ ½: 1 − (a₁t + … + a₅t⁵)e^(−x²), t = 1/(1 + px),
#: within 1.5e-7 of erf.
_ERF_P = 0.3275911
_ERF_A = [0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429]


def erf(c: Converter, x: int, shape: tuple[int, ...], out: int | None = None) -> int:
    """erf of a float32 ``x`` (NNAPI has none): the series near 0, the A&S tail beyond."""
    f32 = np.dtype(np.float32)

    def const(v: float) -> int:
        return filled(c, f32, (1,), v)

    def op(code: OperationCode, *inputs: int) -> int:
        return apply(c, code, list(inputs), f32, shape)

    square = op(OperationCode.MUL, x, x)
    series = const(_ERF_SERIES[-1])
    for coefficient in reversed(_ERF_SERIES[:-1]):  # Horner in x²
        series = op(OperationCode.ADD, op(OperationCode.MUL, series, square), const(coefficient))
    near = op(OperationCode.MUL, series, x)
    size = op(OperationCode.ABS, x)
    t = op(
        OperationCode.DIV,
        const(1.0),
        op(OperationCode.ADD, op(OperationCode.MUL, size, const(_ERF_P)), const(1.0)),
    )
    poly = const(_ERF_A[-1])
    for coefficient in reversed(_ERF_A[:-1]):
        poly = op(OperationCode.ADD, op(OperationCode.MUL, poly, t), const(coefficient))
    poly = op(OperationCode.MUL, poly, t)
    decay = op(OperationCode.EXP, op(OperationCode.NEG, square))
    tail = op(OperationCode.SUB, const(1.0), op(OperationCode.MUL, poly, decay))
    signed = op(OperationCode.SELECT, apply(c, OperationCode.LESS, [x, const(0.0)], np.dtype(np.bool_), shape),
                op(OperationCode.NEG, tail), tail)  # fmt: skip
    small = apply(c, OperationCode.LESS, [size, const(0.5)], np.dtype(np.bool_), shape)
    return apply(c, OperationCode.SELECT, [small, near, signed], f32, shape, out)
