"""CONV_2D and DEPTHWISE_CONV_2D.

Both run on NHWC data (an NCHW input is transposed in and out) with the
filter always in NNAPI's [depth_out, height, width, depth_in] order.  Float
data is computed in float64 and cast to the output type, which keeps the
result within a few ULP of the float32 reference.  Quantized data is
accumulated exactly: ``(x - x_zp)·(w - w_zp)`` sums are integers far below
2**53, so a float64 BLAS matmul yields them exactly and fast; they are then
requantized with the reference's fixed-point multiplier.

CONV_2D is an im2col matmul; DEPTHWISE_CONV_2D accumulates one broadcast
multiply per filter tap (a handful of vectorised passes, never a loop over
output pixels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...codes import OperandCode, OperationCode
from ...operands import OperandInfo
from ..registry import ExecutionContext, OperationSignature, register
from .common import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    WindowArgs,
    apply_fused_activation,
    bias_scale_matches,
    check_window_arg_types,
    check_window_values,
    constant_scalar,
    from_nhwc,
    known_dim,
    op_failed,
    quantize_multiplier,
    requantize,
    require_operand_rank,
    require_operand_type,
    resolve_window,
    to_nhwc,
    window_args,
    window_values,
    window_view,
)

_PER_CHANNEL = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL


def _args(sig: OperationSignature) -> WindowArgs:
    depthwise = sig.code == OperationCode.DEPTHWISE_CONV_2D
    return window_args(sig, 3, ("depth_multiplier",) if depthwise else (), dilation=True)


def _validate(sig: OperationSignature) -> None:
    depthwise = sig.code == OperationCode.DEPTHWISE_CONV_2D
    if len(sig.outputs) != 1:
        raise sig.fail(f"expected 1 output, got {len(sig.outputs)}")
    args = _args(sig)  # checks the input count
    check_window_arg_types(sig, args)
    inp = require_operand_type(sig, 0, (*FLOAT_TENSOR_CODES, *QUANT8_ASYMM_CODES), "input")
    quantized = inp.code in QUANT8_ASYMM_CODES
    filt = require_operand_type(
        sig, 1, (inp.code, _PER_CHANNEL) if quantized else (inp.code,), "filter"
    )
    bias = require_operand_type(
        sig, 2, (OperandCode.TENSOR_INT32,) if quantized else (inp.code,), "bias"
    )
    out = require_operand_type(sig, 0, (inp.code,), "output", output=True)
    for i, name in ((0, "input"), (1, "filter")):
        require_operand_rank(sig, i, (4,), name)
    require_operand_rank(sig, 2, (1,), "bias")
    require_operand_rank(sig, 0, (4,), "output", output=True)

    values = window_values(args, lambda i: constant_scalar(sig, i))
    check_window_values(values, sig.fail)
    nchw = bool(values["nchw"])
    in_depth = known_dim(inp, 1 if nchw else 3)
    out_depth = known_dim(filt, 3 if depthwise else 0)
    bias_len = known_dim(bias, 0)
    if depthwise:
        first = known_dim(filt, 0)
        if first not in (None, 1):
            raise sig.fail(f"filter dimension 0 is {first}; depthwise filters have 1")
        mult = values["depth_multiplier"]
        if (
            in_depth is not None
            and out_depth is not None
            and mult is not None
            and in_depth * mult != out_depth
        ):
            raise sig.fail(
                f"filter depth {out_depth} != input depth {in_depth} x depth_multiplier {mult}"
            )
    else:
        filter_depth = known_dim(filt, 3)
        if None not in (in_depth, filter_depth) and in_depth != filter_depth:
            raise sig.fail(f"filter depth {filter_depth} != input depth {in_depth}")
    if None not in (out_depth, bias_len) and out_depth != bias_len:
        raise sig.fail(f"bias length {bias_len} != output depth {out_depth}")

    if quantized:
        if out.scale <= 0 or inp.scale <= 0:
            raise sig.fail("quantized input and output need a positive scale")
        if filt.code == _PER_CHANNEL:
            quant = filt.channel_quant
            channel_dim = 3 if depthwise else 0
            if quant is None or quant.channel_dim != channel_dim:
                raise sig.fail(
                    f"per-channel filter must be quantized along dimension {channel_dim}"
                )
            if any(s <= 0 for s in quant.scales):
                raise sig.fail("per-channel filter scales must be positive")
            if out_depth is not None and len(quant.scales) != out_depth:
                raise sig.fail(f"{len(quant.scales)} per-channel scales for {out_depth} channels")
        else:
            if filt.scale <= 0:
                raise sig.fail("quantized filter needs a positive scale")
            if not bias_scale_matches(inp.scale, filt.scale, bias.scale):
                raise sig.fail(
                    f"bias scale {bias.scale} != input scale {inp.scale} x filter scale {filt.scale}"
                )


@dataclass
class _Filter:
    """A filter converted once: float64, zero point removed, laid out for the matmul."""

    #: CONV_2D: [depth_in*fh*fw, depth_out]; DEPTHWISE: [fh, fw, depth_out].
    weights: np.ndarray
    filter_h: int
    filter_w: int
    depth_out: int
    #: (multiplier, shift) per output channel (one entry for per-tensor), or None for float.
    multipliers: list[tuple[int, int]] | None


def _convert_filter(sig: OperationSignature, w: np.ndarray) -> _Filter:
    inp, filt, out = sig.inputs[0], sig.inputs[1], sig.outputs[0]
    depthwise = sig.code == OperationCode.DEPTHWISE_CONV_2D
    wf = w.astype(np.float64)
    multipliers = None
    if inp.code in QUANT8_ASYMM_CODES:
        if filt.channel_quant is not None:  # TENSOR_QUANT8_SYMM_PER_CHANNEL
            scales = filt.channel_quant.scales
        else:
            wf -= filt.zero_point
            scales = (filt.scale,)
        multipliers = [quantize_multiplier(inp.scale * s / out.scale) for s in scales]
    depth_out, fh, fw = (w.shape[3] if depthwise else w.shape[0]), w.shape[1], w.shape[2]
    if multipliers is not None and len(multipliers) not in (1, depth_out):
        raise op_failed(sig.code, f"{len(multipliers)} filter scales for {depth_out} channels")
    if depthwise:
        weights = wf[0]
    else:  # [O, fh, fw, C] -> [C, fh, fw, O] flattened, matching the window view's order
        weights = np.ascontiguousarray(wf.transpose(3, 1, 2, 0).reshape(-1, depth_out))
    return _Filter(weights, fh, fw, depth_out, multipliers)


def _prepare(sig: OperationSignature) -> dict[str, Any]:
    """Convert constant filters (and biases) once per prepared model."""
    state: dict[str, Any] = {"filter": None, "bias": None}
    w = sig.constants.get(1)
    if w is not None:
        state["filter"] = _convert_filter(sig, np.asarray(w))
    b = sig.constants.get(2)
    if b is not None:
        state["bias"] = np.asarray(b).astype(np.float64)
    return state


def _execute(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    depthwise = sig.code == OperationCode.DEPTHWISE_CONV_2D
    values = window_values(_args(sig), ctx.scalar)
    fail = ctx.fail
    check_window_values(values, fail)
    nchw = bool(values["nchw"])

    if ctx.input(0).ndim != 4:
        raise fail(f"input has rank {ctx.input(0).ndim}; expected 4")
    x = to_nhwc(ctx.input(0), nchw)
    state = ctx.state or {}
    filt: _Filter = state.get("filter") or _check_and_convert(ctx)
    bias = state.get("bias")
    if bias is None:
        bias = ctx.input(2).astype(np.float64)
    _, in_h, in_w, in_depth = x.shape
    if bias.shape != (filt.depth_out,):
        raise fail(f"bias shape {bias.shape} != ({filt.depth_out},)")
    if depthwise:
        mult = int(values["depth_multiplier"])
        if in_depth * mult != filt.depth_out:
            raise fail(
                f"filter depth {filt.depth_out} != input depth {in_depth} x multiplier {mult}"
            )
    elif filt.weights.shape[0] != in_depth * filt.filter_h * filt.filter_w:
        raise fail(f"filter depth does not match input depth {in_depth}")
    win = resolve_window(values, in_h, in_w, filt.filter_h, filt.filter_w, fail)

    inp = sig.inputs[0]
    quantized = inp.code in QUANT8_ASYMM_CODES
    xf = x.astype(np.float64)
    if quantized:
        xf -= inp.zero_point  # padding with 0 now means padding with the zero point
    if depthwise:
        acc = _depthwise(xf, filt, win, mult)
    else:
        acc = _conv(xf, filt, win)
    acc += bias

    out_info = sig.outputs[0]
    fuse = int(values["fuse"])
    if filt.multipliers is not None:  # quantized
        result = _requantize(acc, filt.multipliers, out_info, fuse)
    else:
        result = apply_fused_activation(acc, fuse).astype(out_info.dtype)
    return [from_nhwc(result, nchw)]


def _check_and_convert(ctx: ExecutionContext) -> _Filter:
    w = ctx.input(1)
    if w.ndim != 4:
        raise op_failed(ctx.code, f"filter has rank {w.ndim}; expected 4")
    if ctx.code == OperationCode.DEPTHWISE_CONV_2D and w.shape[0] != 1:
        raise op_failed(ctx.code, f"depthwise filter dimension 0 is {w.shape[0]}; expected 1")
    return _convert_filter(ctx.signature, w)


def _conv(x: np.ndarray, filt: _Filter, win: Any) -> np.ndarray:
    """im2col: every window becomes one row, then one matmul with the filter."""
    n = x.shape[0]
    patches = window_view(x, win, filt.filter_h, filt.filter_w)
    rows = patches.reshape(n * win.out_h * win.out_w, filt.weights.shape[0])
    return (rows @ filt.weights).reshape(n, win.out_h, win.out_w, filt.depth_out)


def _depthwise(x: np.ndarray, filt: _Filter, win: Any, mult: int) -> np.ndarray:
    """Sum over filter taps of (input slice) x (that tap's weights), per channel."""
    n, _, _, depth = x.shape
    if win.pad_top or win.pad_bottom or win.pad_left or win.pad_right:
        x = np.pad(
            x, ((0, 0), (win.pad_top, win.pad_bottom), (win.pad_left, win.pad_right), (0, 0))
        )
    acc = np.zeros((n, win.out_h, win.out_w, depth, mult))
    rows = (win.out_h - 1) * win.stride_h + 1
    cols = (win.out_w - 1) * win.stride_w + 1
    for i in range(filt.filter_h):
        y0 = i * win.dilation_h
        for j in range(filt.filter_w):
            x0 = j * win.dilation_w
            tap = x[:, y0 : y0 + rows : win.stride_h, x0 : x0 + cols : win.stride_w, :, None]
            acc += tap * filt.weights[i, j].reshape(depth, mult)
    return acc.reshape(n, win.out_h, win.out_w, depth * mult)


def _requantize(
    acc: np.ndarray, multipliers: list[tuple[int, int]], out: OperandInfo, fuse: int
) -> np.ndarray:
    acc = np.rint(acc).astype(np.int64)  # exact integers already; rint guards the cast
    if len(multipliers) == 1:
        return requantize(acc, *multipliers[0], out, fuse)
    result = np.empty(acc.shape, dtype=out.dtype)
    for channel, (m, s) in enumerate(multipliers):
        result[..., channel] = requantize(acc[..., channel], m, s, out, fuse)
    return result


register(OperationCode.CONV_2D, validate=_validate, execute=_execute, prepare=_prepare)
register(OperationCode.DEPTHWISE_CONV_2D, validate=_validate, execute=_execute, prepare=_prepare)
