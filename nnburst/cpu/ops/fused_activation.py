"""Fused activations (NONE, RELU, RELU1, RELU6): the clamp an operation applies
to its own output, on float data and in a quantized output's integer domain.
"""

from __future__ import annotations

import numpy as np

from ...codes import FuseCode
from ...operands import OperandInfo
from .fixed_point import round_half_away

#: The valid fused-activation codes (0..3).
FUSE_CODES = frozenset(int(c) for c in FuseCode)


#: A float fused activation as the clamp it is (NONE: unbounded).
FLOAT_ACTIVATION_BOUNDS: dict[int, tuple[float, float]] = {
    FuseCode.NONE: (-np.inf, np.inf),
    FuseCode.RELU: (0.0, np.inf),
    FuseCode.RELU1: (-1.0, 1.0),
    FuseCode.RELU6: (0.0, 6.0),
}


def apply_fused_activation(x: np.ndarray, fuse: int) -> np.ndarray:
    """Fused activation on float data."""
    fuse = FuseCode(fuse)
    if fuse == FuseCode.RELU:
        return np.maximum(x, 0, dtype=x.dtype)
    if fuse == FuseCode.RELU1:
        return np.clip(x, -1, 1).astype(x.dtype)
    if fuse == FuseCode.RELU6:
        return np.clip(x, 0, 6).astype(x.dtype)
    return x


def fused_activation_bounds(fuse: int, info: OperandInfo) -> tuple[int, int]:
    """Clamp bounds of a fused activation in ``info``'s quantized domain.

    Same as the reference's ``CalculateActivationRange{Uint8,Int8}``: the real
    bound is divided by the float32 scale in float32 and rounded half away from
    zero, so ties and float32 rounding land where the reference puts them.
    """
    limits = np.iinfo(info.dtype)
    qmin, qmax = int(limits.min), int(limits.max)
    scale = np.float32(info.scale)

    def q(v: float) -> int:
        with np.errstate(all="ignore"):
            return info.zero_point + int(round_half_away(np.float32(v) / scale))

    fuse = FuseCode(fuse)
    if fuse == FuseCode.RELU:
        return max(qmin, q(0.0)), qmax
    if fuse == FuseCode.RELU6:
        return max(qmin, q(0.0)), min(qmax, q(6.0))
    if fuse == FuseCode.RELU1:
        return max(qmin, q(-1.0)), min(qmax, q(1.0))
    return qmin, qmax
