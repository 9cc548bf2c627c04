"""An operation's arguments: the checks on its operands when a model is validated
(``sig.fail``: BAD_DATA) and on its inputs when it executes (``ctx.fail``,
:func:`op_failed`: OP_FAILED), and the readers of constant and optional ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np

from ...codes import OperandCode, ResultCode
from ...errors import NNError
from ...operands import OperandInfo
from ..registry import ExecutionContext, OperationSignature
from .requantization import same_quantization

#: types a float operation accepts (float16 is computed in float32/64 and cast back).
FLOAT_TENSOR_CODES = (OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16)
#: asymmetric 8-bit quantized tensor types.
QUANT8_ASYMM_CODES = (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED)


#: Makes the exception for a message: ``sig.fail`` (BAD_DATA) or ``ctx.fail`` (OP_FAILED).
Fail = Callable[[str], Exception]


def op_failed(code: Any, message: str) -> NNError:
    """An execution-time OP_FAILED error naming the operation."""
    return NNError(f"{getattr(code, 'name', code)}: {message}", ResultCode.OP_FAILED)


#: The most bytes one tensor may take when its size comes from another tensor's
#: *values* (FILL's dims, TILE's multiples, PAD's paddings): eight bytes of a
#: request must not make the driver allocate gigabytes.  ``nnburst serve
#: --max-tensor-bytes`` sets it for a service.
MAX_TENSOR_BYTES = 256 << 20


def check_allocation(code: Any, shape: Collection[int], dtype: Any) -> None:
    """Refuse, before allocating, a ``shape`` tensor over :data:`MAX_TENSOR_BYTES`."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise op_failed(
            code,
            f"a {list(shape)} output would take {nbytes} bytes, over the "
            f"{MAX_TENSOR_BYTES}-byte limit on one tensor",
        )


def require_operand_counts(sig: Any, inputs: Collection[int], outputs: int) -> None:
    """Fail unless the operation has one of ``inputs`` inputs and ``outputs`` outputs."""
    if len(sig.inputs) not in inputs:
        want = " or ".join(str(n) for n in sorted(inputs))
        raise sig.fail(f"expected {want} inputs, got {len(sig.inputs)}")
    if len(sig.outputs) != outputs:
        raise sig.fail(f"expected {outputs} outputs, got {len(sig.outputs)}")


def require_operand_type(
    sig: Any, index: int, allowed: Collection[OperandCode], name: str, output: bool = False
) -> OperandInfo:
    """Fail unless input (or output) ``index`` has one of the ``allowed`` types."""
    info = (sig.outputs if output else sig.inputs)[index]
    if info.code not in allowed:
        kind = "output" if output else "input"
        names = ", ".join(OperandCode(c).name for c in allowed)
        raise sig.fail(f"{kind} {index} ({name}) has type {info.code.name}; expected {names}")
    return info


def require_operand_rank(
    sig: Any, index: int, ranks: Collection[int], name: str, output: bool = False
) -> None:
    """Fail when the operand's rank is known and not one of ``ranks``."""
    info = (sig.outputs if output else sig.inputs)[index]
    if info.dimensions is not None and len(info.dimensions) not in ranks:
        kind = "output" if output else "input"
        want = " or ".join(str(r) for r in sorted(ranks))
        raise sig.fail(f"{kind} {index} ({name}) has rank {len(info.dimensions)}; expected {want}")


def check_declared_output(sig: OperationSignature, dims: Sequence[int]) -> None:
    """Fail when the declared output shape contradicts one computed from constants."""
    declared = sig.outputs[0].dimensions
    if declared is None or not declared:
        return
    if len(declared) != len(dims) or any(d > 0 and d != w for d, w in zip(declared, dims)):
        raise sig.fail(f"output dimensions {declared} do not match the computed {tuple(dims)}")


def require_int_vector(sig: OperationSignature, index: int, name: str) -> None:
    """Input ``index`` must be a TENSOR_INT32 of rank 1 (shapes, axes, paddings)."""
    require_operand_type(sig, index, (OperandCode.TENSOR_INT32,), name)
    require_operand_rank(sig, index, (1,), name)


def require_dims_like(sig: Any, src: OperandInfo, index: int = 0) -> None:
    """Fail when output ``index``'s declared dimensions contradict ``src``'s."""
    a, b = src.dimensions, sig.outputs[index].dimensions
    if a is None or not b:
        return
    if len(a) != len(b) or any(x > 0 and y > 0 and x != y for x, y in zip(a, b)):
        raise sig.fail(f"output {index} dimensions {b} differ from the input's {a}")


def require_same_quantization(sig: Any, src: OperandInfo, index: int = 0) -> None:
    """Quant8 data only: output ``index`` must carry ``src``'s scale and zero point."""
    out = sig.outputs[index]
    if src.code in QUANT8_ASYMM_CODES and not same_quantization(src, out):
        raise sig.fail(
            f"output {index} scale and zero point ({out.scale}, {out.zero_point}) "
            f"must equal the input's ({src.scale}, {src.zero_point})"
        )


def check_broadcastable(sig: Any, first: int, second: int) -> None:
    """Fail when the declared shapes of two inputs can never broadcast together."""
    a, b = sig.inputs[first].dimensions, sig.inputs[second].dimensions
    if a is None or b is None:
        return
    for x, y in zip(reversed(a), reversed(b)):
        if x > 0 and y > 0 and x != y and x != 1 and y != 1:
            raise sig.fail(
                f"input {first} dimensions {a} and input {second} dimensions {b} "
                "cannot be broadcast together"
            )


def broadcast_shape_or_fail(code: Any, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's (= NNAPI's) broadcast shape, or OP_FAILED when the shapes do not broadcast."""
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise op_failed(code, f"shapes {', '.join(map(str, shapes))} cannot be broadcast") from None


def check_paddings(paddings: np.ndarray, rows: int, fail: Fail) -> np.ndarray:
    """A PAD / SPACE_TO_BATCH paddings tensor: shape [rows, 2], nothing negative."""
    if paddings.shape != (rows, 2):
        raise fail(f"paddings must have shape [{rows}, 2], got {list(paddings.shape)}")
    if (paddings < 0).any():
        raise fail(f"paddings must be non-negative, got {paddings.tolist()}")
    return paddings


def normalize_axis(axis: int, rank: int, fail: Callable[[str], Exception]) -> int:
    """An axis in ``[-rank, rank)`` as a non-negative index (``fail`` builds the error)."""
    if not -rank <= axis < rank:
        raise fail(f"axis {axis} is out of range [{-rank}, {rank})")
    return axis % rank


def float_scalar_code(tensor_code: OperandCode) -> OperandCode:
    """The scalar type NNAPI pairs with a tensor: FLOAT16 for TENSOR_FLOAT16, else FLOAT32."""
    return OperandCode.FLOAT16 if tensor_code == OperandCode.TENSOR_FLOAT16 else OperandCode.FLOAT32


def known_dim(info: OperandInfo, axis: int) -> int | None:
    """Dimension ``axis`` when declared (non-zero), else ``None``."""
    dims = info.dimensions
    if dims is None or not -len(dims) <= axis < len(dims) or dims[axis] <= 0:
        return None
    return dims[axis]


def constant_scalar(sig: Any, index: int) -> Any:
    """The Python value of constant scalar input ``index``, ``None`` when not constant."""
    value = sig.constants.get(index)
    return None if value is None else np.asarray(value).item()


def constant_ints(sig: OperationSignature, index: int) -> np.ndarray | None:
    """A constant TENSOR_INT32 input as int64, ``None`` when not constant."""
    value = sig.constants.get(index)
    return None if value is None else np.asarray(value, dtype=np.int64)


def int_input(ctx: ExecutionContext, index: int) -> np.ndarray:
    """An integer input widened to int64, so index arithmetic cannot overflow."""
    return np.asarray(ctx.input(index), dtype=np.int64)


def optional_input(ctx: Any, i: int) -> np.ndarray | None:
    """Input ``i``, or ``None`` when omitted (no value, or a model input given no data)."""
    value = ctx.inputs[i] if i < len(ctx.inputs) else None
    if value is None or np.asarray(value).size == 0:
        return None
    return np.asarray(value)


def maybe_omitted(sig: Any, i: int) -> bool:
    """True when input ``i`` is, or may at execution be, an omitted optional operand."""
    if i in sig.constants:
        return sig.constants[i] is None
    dims = sig.inputs[i].dimensions
    return dims is None or 0 in dims
