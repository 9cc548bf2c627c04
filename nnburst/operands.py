"""Operand types: the public ``OperandType`` and the driver-facing ``OperandInfo``.

Shared by the runtime (which builds models from them) and the drivers (which
validate and execute against them), so both agree on dtypes and sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .codes import OperandCode

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
        object.__setattr__(self, "code", OperandCode(self.code))
        if self.dimensions is not None:
            object.__setattr__(self, "dimensions", tuple(int(d) for d in self.dimensions))


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
