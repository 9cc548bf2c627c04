"""Operand types: the public ``OperandType`` and the driver-facing ``OperandInfo``.

Shared by the runtime (which builds models from them) and the drivers (which
validate and execute against them), so both agree on dtypes and sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .codes import OperandCode
from .errors import BadDataError

#: numpy dtype holding each operand type's element (scalars and tensors alike).
DTYPE_FOR_OPERAND: dict[OperandCode, np.dtype] = {
    OperandCode.FLOAT32: np.dtype(np.float32),
    OperandCode.INT32: np.dtype(np.int32),
    OperandCode.UINT32: np.dtype(np.uint32),
    OperandCode.TENSOR_FLOAT32: np.dtype(np.float32),
    OperandCode.TENSOR_INT32: np.dtype(np.int32),
    OperandCode.TENSOR_QUANT8_ASYMM: np.dtype(np.uint8),
    OperandCode.BOOL: np.dtype(np.bool_),
    OperandCode.TENSOR_QUANT16_SYMM: np.dtype(np.int16),
    OperandCode.TENSOR_FLOAT16: np.dtype(np.float16),
    OperandCode.TENSOR_BOOL8: np.dtype(np.bool_),
    OperandCode.FLOAT16: np.dtype(np.float16),
    OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.dtype(np.int8),
    OperandCode.TENSOR_QUANT16_ASYMM: np.dtype(np.uint16),
    OperandCode.TENSOR_QUANT8_SYMM: np.dtype(np.int8),
    OperandCode.TENSOR_QUANT8_ASYMM_SIGNED: np.dtype(np.int8),
}

SCALAR_CODES = frozenset(
    {
        OperandCode.FLOAT32,
        OperandCode.INT32,
        OperandCode.UINT32,
        OperandCode.BOOL,
        OperandCode.FLOAT16,
        OperandCode.MODEL,
    }
)

QUANTIZED_CODES = frozenset(
    {
        OperandCode.TENSOR_QUANT8_ASYMM,
        OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
        OperandCode.TENSOR_QUANT8_SYMM,
        OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL,
        OperandCode.TENSOR_QUANT16_ASYMM,
        OperandCode.TENSOR_QUANT16_SYMM,
    }
)


def is_scalar(code: OperandCode) -> bool:
    return code in SCALAR_CODES


@dataclass(frozen=True)
class OperandType:
    """An operand's type as the app declares it (``ANeuralNetworksOperandType``).

    ``dimensions`` is a tuple where 0 means "unknown until execution"; ``None``
    means unknown rank.  Scalars have ``()``.
    """

    code: OperandCode
    dimensions: tuple[int, ...] | None = ()
    scale: float = 0.0
    zero_point: int = 0

    def __post_init__(self) -> None:
        try:
            code = OperandCode(self.code)
        except ValueError:
            raise BadDataError(f"OperandType: unknown operand code {self.code!r}") from None
        object.__setattr__(self, "code", code)
        if self.dimensions is not None:
            object.__setattr__(self, "dimensions", _dimensions(self.dimensions))


def _dimensions(dimensions: Any) -> tuple[int, ...]:
    """Dimensions as a tuple of ints, or BAD_DATA; their range is checked where the type
    is used (``add_operand``, ``set_input``), as the NDK does."""
    what = f"OperandType: dimensions {dimensions!r}"
    try:
        values: tuple[object, ...] = tuple(dimensions)
    except TypeError:
        raise BadDataError(
            f"{what} must be a sequence of integers (or None for unknown rank)"
        ) from None
    for d in values:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise BadDataError(f"{what}: {d!r} is not an integer")
    return tuple(int(d) for d in values)  # type: ignore[call-overload]


@dataclass(frozen=True)
class ChannelQuant:
    """Per-channel scales of a TENSOR_QUANT8_SYMM_PER_CHANNEL operand."""

    channel_dim: int
    scales: tuple[float, ...]


@dataclass(frozen=True)
class OperandInfo:
    """Everything a driver needs to know about one operand's type."""

    code: OperandCode
    dimensions: tuple[int, ...] | None = ()
    scale: float = 0.0
    zero_point: int = 0
    channel_quant: ChannelQuant | None = None

    @property
    def dtype(self) -> np.dtype:
        return DTYPE_FOR_OPERAND[self.code]

    @property
    def is_scalar(self) -> bool:
        return self.code in SCALAR_CODES

    @property
    def rank(self) -> int | None:
        return None if self.dimensions is None else len(self.dimensions)

    @property
    def is_fully_specified(self) -> bool:
        return self.dimensions is not None and all(d > 0 for d in self.dimensions)

    def byte_size(self, dims: tuple[int, ...] | list[int] | None = None) -> int | None:
        """Bytes of one value with ``dims`` (its own by default); None while not fully known.

        The one place an operand's size is computed: model constants, bound
        arguments, memory descriptors and the partitioner's temporaries.
        """
        if self.code == OperandCode.MODEL:
            return None
        if self.is_scalar:
            return self.dtype.itemsize
        dims = self.dimensions if dims is None else dims
        if not dims or any(d <= 0 for d in dims):
            return None
        return math.prod(dims) * self.dtype.itemsize


def merge_dimensions(
    a: tuple[int, ...] | None, b: tuple[int, ...] | None
) -> tuple[int, ...] | None:
    """The most specific dimensions compatible with both (0: unknown; None: unknown rank).

    NNAPI's one rule for dimensions given in several places (the model, an
    execution's bindings, a memory descriptor's roles, a request): ranks must
    agree and known values must be equal.

    Raises:
        ValueError: ranks or known values differ; the message says which.
    """
    if a is None:
        return b
    if b is None:
        return a
    if len(a) != len(b):
        raise ValueError(f"ranks differ: {a} and {b}")
    out = []
    for x, y in zip(a, b):
        if x and y and x != y:
            raise ValueError(f"{a} and {b} differ")
        out.append(x or y)
    return tuple(out)
