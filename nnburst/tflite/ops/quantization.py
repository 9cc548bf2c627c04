"""How values are stored: QUANTIZE (requantizing quantized values through
float32) and DENSIFY (sparse constants, expanded by the reader and folded at
load).  DEQUANTIZE maps one to one with the unary operators."""

from __future__ import annotations

import numpy as np

from ...codes import OperationCode
from ..converter import Converter, Unsupported, maps
from ..reader import Operator


@maps("DENSIFY")
def _densify(c: Converter, op: Operator) -> None:
    # A DENSIFY of a constant is folded before mapping; nothing else has sparse data.
    raise Unsupported("an input that is not a sparse constant")


@maps("QUANTIZE")
def _quantize(c: Converter, op: Operator) -> None:
    """A QUANTIZE of quantized values requantizes (int8 → uint8, a new scale); NNAPI's
    QUANTIZE takes floats only, so it goes through float32 with a DEQUANTIZE."""
    x = c.tensor(op.inputs[0])
    source = c.operand(op.inputs[0])
    if x.dtype not in (np.float32, np.float16):
        floats = c.model.add_operand(c.operand_type(x, np.dtype(np.float32)))
        c.add(OperationCode.DEQUANTIZE, [source], [floats])
        source = floats
    c.add(OperationCode.QUANTIZE, [source], [c.operand(op.outputs[0])])
