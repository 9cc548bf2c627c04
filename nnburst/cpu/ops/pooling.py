"""AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D.

Every output pixel reduces one window of a strided view of the padded input
(``window_view``), so there is no Python loop over pixels.  As in the NNAPI
reference, padding never counts: average and L2 pools divide by the number
of real input elements under the window, and max pools pad with the lowest
value of the type.  Quantized pools work on the raw integers (the output
shares the input's scale); the quantized average rounds half away from zero:
``(sum ± count/2) / count``.
"""

from __future__ import annotations

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .common import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    Window2D,
    WindowArgs,
    apply_fused_activation,
    check_window_arg_types,
    check_window_values,
    constant_scalar,
    from_nhwc,
    fused_activation_bounds,
    require_operand_rank,
    require_operand_type,
    resolve_window,
    to_nhwc,
    window_args,
    window_values,
    window_view,
)


def _args(sig: OperationSignature) -> WindowArgs:
    return window_args(sig, 1, ("filter_w", "filter_h"), dilation=False)


def _validate(sig: OperationSignature) -> None:
    if len(sig.outputs) != 1:
        raise sig.fail(f"expected 1 output, got {len(sig.outputs)}")
    args = _args(sig)  # checks the input count
    check_window_arg_types(sig, args)
    allowed: tuple[OperandCode, ...] = FLOAT_TENSOR_CODES
    if sig.code != OperationCode.L2_POOL_2D:
        allowed = (*FLOAT_TENSOR_CODES, *QUANT8_ASYMM_CODES)
    inp = require_operand_type(sig, 0, allowed, "input")
    require_operand_type(sig, 0, (inp.code,), "output", output=True)
    require_operand_rank(sig, 0, (4,), "input")
    require_operand_rank(sig, 0, (4,), "output", output=True)
    check_window_values(window_values(args, lambda i: constant_scalar(sig, i)), sig.fail)


def _counts(win: Window2D, in_h: int, in_w: int, filter_h: int, filter_w: int) -> np.ndarray:
    """[out_h, out_w] number of real (unpadded) input elements under each window."""

    def along(out: int, stride: int, pad: int, size: int, filt: int) -> np.ndarray:
        start = np.arange(out) * stride - pad
        return np.minimum(start + filt, size) - np.maximum(start, 0)

    rows = along(win.out_h, win.stride_h, win.pad_top, in_h, filter_h)
    cols = along(win.out_w, win.stride_w, win.pad_left, in_w, filter_w)
    return np.outer(np.maximum(rows, 0), np.maximum(cols, 0))


def _execute(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    values = window_values(_args(sig), ctx.scalar)
    fail = ctx.fail
    check_window_values(values, fail)
    nchw = bool(values["nchw"])
    if ctx.input(0).ndim != 4:
        raise fail(f"input has rank {ctx.input(0).ndim}; expected 4")
    x = to_nhwc(ctx.input(0), nchw)
    _, in_h, in_w, _ = x.shape
    fh, fw = int(values["filter_h"]), int(values["filter_w"])
    win = resolve_window(values, in_h, in_w, fh, fw, fail)
    out_info = sig.outputs[0]
    fuse = int(values["fuse"])
    quantized = sig.inputs[0].code in QUANT8_ASYMM_CODES

    if sig.code == OperationCode.MAX_POOL_2D:
        lowest = np.iinfo(x.dtype).min if quantized else -np.inf
        result = window_view(x, win, fh, fw, lowest).max(axis=(-2, -1))
    else:
        counts = _counts(win, in_h, in_w, fh, fw)[None, :, :, None]
        if (counts == 0).any():
            raise fail("a pooling window lies entirely in the padding")
        if sig.code == OperationCode.L2_POOL_2D:
            squares = np.square(x, dtype=np.float64)
            result = np.sqrt(window_view(squares, win, fh, fw).sum(axis=(-2, -1)) / counts)
        elif quantized:
            sums = window_view(x.astype(np.int64), win, fh, fw).sum(axis=(-2, -1))
            half = counts // 2
            result = np.where(sums >= 0, (sums + half) // counts, -((half - sums) // counts))
        else:
            sums = window_view(x, win, fh, fw).sum(axis=(-2, -1), dtype=np.float64)
            result = sums / counts

    if quantized:
        lo, hi = fused_activation_bounds(fuse, out_info)
        result = np.clip(result, lo, hi).astype(out_info.dtype)
    else:
        result = apply_fused_activation(result.astype(np.float64), fuse).astype(out_info.dtype)
    return [from_nhwc(result, nchw)]


for _code in (OperationCode.AVERAGE_POOL_2D, OperationCode.MAX_POOL_2D, OperationCode.L2_POOL_2D):
    register(_code, validate=_validate, execute=_execute)
