"""DEQUANTIZE: ``(q - zero_point) * scale`` into float32 or float16.

The product is formed in float32 exactly as the reference does (an int
difference times a float32 scale), so float32 outputs are bit-exact; float16
outputs are that float32 value rounded.  Per-channel inputs (NNAPI 1.2) use
the scale of each element's channel and a zero point of 0.
"""

from __future__ import annotations

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    op_failed,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
)

_PER_CHANNEL = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
_INPUT_TYPES = (
    OperandCode.TENSOR_QUANT8_ASYMM,
    OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
    OperandCode.TENSOR_QUANT8_SYMM,
    _PER_CHANNEL,
)


def _validate(sig: OperationSignature) -> None:
    require_operand_counts(sig, (1,), 1)
    info = require_operand_type(sig, 0, _INPUT_TYPES, "input")
    require_operand_type(sig, 0, FLOAT_TENSOR_CODES, "output", output=True)
    require_operand_rank(sig, 0, range(0, 5), "input")
    if info.code == _PER_CHANNEL:
        quant = info.channel_quant
        if quant is None:
            raise sig.fail("a per-channel quantized input needs its channel scales")
        rank = info.rank
        if rank is not None and not 0 <= quant.channel_dim < rank:
            raise sig.fail(f"channel dimension {quant.channel_dim} is out of range for rank {rank}")
        dims = info.dimensions or ()
        if (
            rank is not None
            and dims[quant.channel_dim] > 0
            and dims[quant.channel_dim] != len(quant.scales)
        ):
            raise sig.fail(
                f"{len(quant.scales)} channel scales for a channel dimension of "
                f"{dims[quant.channel_dim]}"
            )
    a, b = info.dimensions, sig.outputs[0].dimensions
    if (
        a is not None
        and b
        and (len(a) != len(b) or any(x > 0 and y > 0 and x != y for x, y in zip(a, b)))
    ):
        raise sig.fail(f"output dimensions {b} differ from input {a}")


def _execute(ctx: ExecutionContext) -> list[np.ndarray]:
    x = ctx.input(0)
    info = ctx.signature.inputs[0]
    diff = x.astype(np.int32) - np.int32(info.zero_point)
    quant = info.channel_quant
    scale: np.ndarray | np.float32
    if info.code == _PER_CHANNEL and quant is not None:
        axis = quant.channel_dim
        if x.ndim <= axis or x.shape[axis] != len(quant.scales):
            raise op_failed(
                ctx.code,
                f"input shape {x.shape} does not match "
                f"{len(quant.scales)} scales on dimension {axis}",
            )
        shape = [1] * x.ndim
        shape[axis] = len(quant.scales)
        scale = np.asarray(quant.scales, dtype=np.float32).reshape(shape)
    else:
        scale = np.float32(info.scale)
    result = diff.astype(np.float32) * scale
    return [result.astype(ctx.output_info(0).dtype)]


register(OperationCode.DEQUANTIZE, validate=_validate, execute=_execute)
