"""TRANSPOSE_CONV_2D and GROUPED_CONV_2D (NNAPI 1.2): CONV_2D's filter layout and
quantization (per-channel filter scales included), with multipliers formed as the
reference forms them: input x filter scale in float32 (``fixed_point.conv_multiplier``).
TRANSPOSE_CONV_2D is one matmul (every input pixel times every filter tap) followed by
a scatter-add of the taps into the output canvas, one strided slice per tap;
GROUPED_CONV_2D is a batched im2col matmul, one batch per group.  Neither loops over
pixels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...codes import OperandCode, OperationCode, PaddingCode
from ...operands import OperandInfo
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    constant_scalar,
    known_dim,
    op_failed,
    require_operand_rank,
    require_operand_type,
)
from .conv import PER_CHANNEL, check_quantization
from .fixed_point import conv_multiplier
from .fused_activation import FUSE_CODES, fused_activation_bounds
from .window_geometry import (
    check_window_arg_types,
    check_window_values,
    from_nhwc,
    to_nhwc,
    transpose_conv_paddings,
    window_args,
    window_values,
)
from .windows import (
    WindowPlan,
    constant_plan,
    conv_output,
    exact_dtype,
    pad_nhwc,
    runtime_plan,
    windows,
)

# ------------------------------------------ TRANSPOSE_CONV_2D and GROUPED_CONV_2D: shared


def _check_tensors(sig: OperationSignature) -> OperandInfo:
    """Types, ranks and quantization of input, filter, bias and output."""
    inp = require_operand_type(sig, 0, (*FLOAT_TENSOR_CODES, *QUANT8_ASYMM_CODES), "input")
    quantized = inp.code in QUANT8_ASYMM_CODES
    filt = require_operand_type(
        sig, 1, (inp.code, PER_CHANNEL) if quantized else (inp.code,), "filter"
    )
    bias = require_operand_type(
        sig, 2, (OperandCode.TENSOR_INT32,) if quantized else (inp.code,), "bias"
    )
    out = require_operand_type(sig, 0, (inp.code,), "output", output=True)
    require_operand_rank(sig, 0, (4,), "input")
    require_operand_rank(sig, 1, (4,), "filter")
    require_operand_rank(sig, 2, (1,), "bias")
    require_operand_rank(sig, 0, (4,), "output", output=True)
    depth_out, bias_len = known_dim(filt, 0), known_dim(bias, 0)
    if None not in (depth_out, bias_len) and depth_out != bias_len:
        raise sig.fail(f"bias length {bias_len} != filter depth_out {depth_out}")
    if not quantized:
        return inp
    check_quantization(sig, inp, filt, bias, out, 0, depth_out)
    return inp


@dataclass
class _Weights:
    """A filter converted once to its kernel's matmul layout and dtype, zero point removed.

    Float filters become float32; quantized ones float32 when every sum fits
    its mantissa exactly, else float64 (``windows.exact_dtype``).
    """

    #: GROUPED_CONV_2D: [groups, fh*fw*depth_group, depth_out/groups];
    #: TRANSPOSE_CONV_2D: [depth_in, fh*fw*depth_out].
    weights: np.ndarray
    #: the filter's [depth_out, fh, fw, depth_in].
    shape: tuple[int, int, int, int]
    #: int64 (multipliers, shifts), per output channel or one for the tensor; None for float.
    requant: tuple[np.ndarray, np.ndarray] | None


def _convert(sig: OperationSignature, w: np.ndarray, groups: int | None) -> _Weights:
    """``groups``: GROUPED_CONV_2D's group count; ``None`` for TRANSPOSE_CONV_2D."""
    inp, filt, out = sig.inputs[0], sig.inputs[1], sig.outputs[0]
    wf = np.asarray(w).astype(np.float64)
    depth_out, fh, fw, depth_in = wf.shape
    requant = None
    dtype: Any = np.float32
    if inp.code in QUANT8_ASYMM_CODES:
        if filt.channel_quant is not None:
            scales = filt.channel_quant.scales
            if len(scales) != depth_out:
                raise op_failed(sig.code, f"{len(scales)} filter scales for {depth_out} channels")
        else:
            wf -= filt.zero_point
            scales = (filt.scale,)
        pairs = [conv_multiplier(inp.scale, s, out.scale) for s in scales]
        requant = (
            np.array([m for m, _ in pairs], np.int64),
            np.array([s for _, s in pairs], np.int64),
        )
        dtype = exact_dtype(inp, np.abs(wf).reshape(depth_out, -1).sum(axis=1))
    layout: np.ndarray
    if groups is None:  # every input channel to every (tap, output channel)
        layout = wf.transpose(3, 1, 2, 0).reshape(depth_in, -1)
    else:  # per group, rows in the window view's (fh, fw, channel) order
        layout = wf.reshape(groups, depth_out // groups, fh, fw, depth_in)
        layout = layout.transpose(0, 2, 3, 4, 1).reshape(groups, fh * fw * depth_in, -1)
    return _Weights(np.ascontiguousarray(layout, dtype=dtype), wf.shape, requant)


@dataclass
class _MatmulState:
    """What TRANSPOSE_CONV_2D and GROUPED_CONV_2D prepare once."""

    weights: _Weights | None
    #: float: in the weights' dtype; quantized: int64.  None when not constant.
    bias: np.ndarray | None
    #: the scalar parameters by name when all are constant (GROUPED_CONV_2D: a WindowPlan).
    values: Any
    #: quantized fused-activation clamp when the activation is constant.
    bounds: tuple[int, int] | None


def _bias(b: np.ndarray, filt: _Weights) -> np.ndarray:
    return b.astype(np.int64 if filt.requant is not None else filt.weights.dtype)


def _state(sig: OperationSignature, values: Any, fuse: Any, groups: int | None) -> _MatmulState:
    """Convert the constant filter and bias, and the clamp, once per prepared model."""
    w, b = sig.constants.get(1), sig.constants.get(2)
    filt = None
    if w is not None and (groups is not None or sig.code == OperationCode.TRANSPOSE_CONV_2D):
        filt = _convert(sig, np.asarray(w), groups)
    bias = None if b is None or filt is None else _bias(np.asarray(b), filt)
    bounds = None
    if fuse is not None and sig.inputs[0].code in QUANT8_ASYMM_CODES:
        bounds = fused_activation_bounds(int(fuse), sig.outputs[0])
    return _MatmulState(filt, bias, values, bounds)


def _weights(ctx: ExecutionContext, groups: int | None) -> _Weights:
    state: _MatmulState = ctx.state
    if state.weights is not None:
        return state.weights
    w = ctx.input(1)
    if w.ndim != 4:
        raise op_failed(ctx.code, f"filter has rank {w.ndim}; expected 4")
    return _convert(ctx.signature, w, groups)


def _finish(
    ctx: ExecutionContext, acc: np.ndarray, filt: _Weights, fuse: int, nchw: bool
) -> list[np.ndarray]:
    """Add the bias, then activate (float) or requantize (quantized) and restore the layout."""
    state: _MatmulState = ctx.state
    bias = state.bias if state.bias is not None else _bias(ctx.input(2), filt)
    depth_out = filt.shape[0]
    if bias.shape != (depth_out,):
        raise op_failed(ctx.code, f"bias shape {bias.shape} != ({depth_out},)")
    out = ctx.output_info(0)
    return [from_nhwc(conv_output(acc, bias, filt.requant, out, fuse, state.bounds), nchw)]


def _input_nhwc(ctx: ExecutionContext, nchw: bool) -> np.ndarray:
    """The input as NHWC (a view for NCHW)."""
    x = ctx.input(0)
    if x.ndim != 4:
        raise op_failed(ctx.code, f"input has rank {x.ndim}; expected 4")
    return to_nhwc(x, nchw)


def _zero_point(ctx: ExecutionContext, filt: _Weights) -> int:
    """What to subtract from the input: its zero point when quantized."""
    return ctx.signature.inputs[0].zero_point if filt.requant is not None else 0


# --------------------------------------------------------------- TRANSPOSE_CONV_2D

# Positions of the scalar parameters for the two input counts.
_TC_EXPLICIT = {
    "pad_left": 3,
    "pad_right": 4,
    "pad_top": 5,
    "pad_bottom": 6,
    "stride_w": 7,
    "stride_h": 8,
    "fuse": 9,
    "nchw": 10,
}
_TC_IMPLICIT = {
    "output_shape": 3,
    "padding_scheme": 4,
    "stride_w": 5,
    "stride_h": 6,
    "fuse": 7,
    "nchw": 8,
}


def _tc_positions(sig: OperationSignature) -> dict[str, int]:
    n = len(sig.inputs)
    if n not in (9, 11):
        raise sig.fail(f"expected 9 (implicit padding) or 11 (explicit padding) inputs, got {n}")
    if len(sig.outputs) != 1:
        raise sig.fail(f"expected 1 output, got {len(sig.outputs)}")
    return _TC_EXPLICIT if n == 11 else _TC_IMPLICIT


def _tc_check_values(values: dict[str, Any], fail: Any) -> None:
    """Range checks; pad_right/pad_bottom may be negative (they trim the output)."""
    for name, v in values.items():
        if v is None or name in ("nchw", "pad_right", "pad_bottom"):
            continue
        if name == "padding_scheme" and v not in (int(PaddingCode.SAME), int(PaddingCode.VALID)):
            raise fail(f"padding scheme {v} is not SAME (1) or VALID (2)")
        if name == "fuse" and v not in FUSE_CODES:
            raise fail(f"fused activation {v} is not a FuseCode (0..3)")
        if name in ("pad_left", "pad_top") and v < 0:
            raise fail(f"{name} is {v}; it must be >= 0")
        if name.startswith("stride") and v < 1:
            raise fail(f"{name} is {v}; it must be >= 1")


def _validate_transpose(sig: OperationSignature) -> None:
    positions = _tc_positions(sig)
    for name, i in positions.items():
        want = {"nchw": OperandCode.BOOL, "output_shape": OperandCode.TENSOR_INT32}
        require_operand_type(sig, i, (want.get(name, OperandCode.INT32),), name)
    values = {
        name: constant_scalar(sig, i) for name, i in positions.items() if name != "output_shape"
    }
    _tc_check_values(values, sig.fail)
    if "output_shape" in positions:
        require_operand_rank(sig, 3, (1,), "output_shape")
        length = known_dim(sig.inputs[3], 0)
        if length not in (None, 4):
            raise sig.fail(f"output_shape has {length} elements; expected 4")
    inp = _check_tensors(sig)
    nchw = values.get("nchw")
    if nchw is not None:
        depth_in = known_dim(inp, 1 if nchw else 3)
        filter_depth = known_dim(sig.inputs[1], 3)
        if None not in (depth_in, filter_depth) and depth_in != filter_depth:
            raise sig.fail(f"filter depth_in {filter_depth} != input depth {depth_in}")


def _prepare_transpose(sig: OperationSignature) -> _MatmulState:
    positions = _tc_positions(sig)
    values = {
        name: constant_scalar(sig, i) for name, i in positions.items() if name != "output_shape"
    }
    if any(v is None for v in values.values()):
        return _state(sig, None, values["fuse"], None)
    return _state(sig, values, values["fuse"], None)


def _execute_transpose(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    positions = _tc_positions(sig)
    fail = ctx.fail
    values = ctx.state.values
    if values is None:
        values = {name: ctx.scalar(i) for name, i in positions.items() if name != "output_shape"}
        _tc_check_values(values, fail)
    nchw = bool(values["nchw"])
    x = _input_nhwc(ctx, nchw)
    filt = _weights(ctx, None)
    n, in_h, in_w, depth_in = x.shape
    depth_out, fh, fw, filter_depth = filt.shape
    if filter_depth != depth_in:
        raise fail(f"filter depth_in {filter_depth} != input depth {depth_in}")
    sh, sw = int(values["stride_h"]), int(values["stride_w"])
    shape = None
    if "output_shape" in positions:
        shape = ctx.input(3).reshape(-1)
        if shape.size != 4:
            raise fail(f"output_shape has {shape.size} elements; expected 4")
    pt, pb, pl, pr = transpose_conv_paddings(values, shape, nchw, (fh, fw))
    full_h, full_w = (in_h - 1) * sh + fh, (in_w - 1) * sw + fw
    out_h, out_w = full_h - pt - pb, full_w - pl - pr
    if min(in_h, in_w, depth_in, depth_out, out_h, out_w) <= 0:
        raise fail(f"empty spatial size: input {in_h}x{in_w}x{depth_in}, output {out_h}x{out_w}")

    # Every input pixel times every tap (one matmul), then each tap lands on a strided slice.
    rows = np.subtract(x, _zero_point(ctx, filt), dtype=filt.weights.dtype)
    taps = (rows.reshape(-1, depth_in) @ filt.weights).reshape(n, in_h, in_w, fh, fw, depth_out)
    canvas = np.zeros(
        (n, max(full_h, pt + out_h), max(full_w, pl + out_w), depth_out), filt.weights.dtype
    )
    for i in range(fh):
        for j in range(fw):
            canvas[:, i : i + (in_h - 1) * sh + 1 : sh, j : j + (in_w - 1) * sw + 1 : sw] += taps[
                :, :, :, i, j
            ]
    acc = np.ascontiguousarray(canvas[:, pt : pt + out_h, pl : pl + out_w])
    return _finish(ctx, acc, filt, int(values["fuse"]), nchw)


# --------------------------------------------------------------- GROUPED_CONV_2D


def _gc_args(sig: OperationSignature) -> Any:
    if len(sig.inputs) not in (9, 12):
        raise sig.fail(
            f"expected 9 (implicit padding) or 12 (explicit padding) inputs, got {len(sig.inputs)}"
        )
    if len(sig.outputs) != 1:
        raise sig.fail(f"expected 1 output, got {len(sig.outputs)}")
    return window_args(sig, 3, ("num_groups",), dilation=False)


def _validate_grouped(sig: OperationSignature) -> None:
    args = _gc_args(sig)
    check_window_arg_types(sig, args)
    values = window_values(args, lambda i: constant_scalar(sig, i))
    check_window_values(values, sig.fail)
    inp = _check_tensors(sig)
    groups, nchw = values["num_groups"], values["nchw"]
    filt = sig.inputs[1]
    depth_out, filter_depth = known_dim(filt, 0), known_dim(filt, 3)
    depth_in = None if nchw is None else known_dim(inp, 1 if nchw else 3)
    if groups is not None:
        if depth_out is not None and depth_out % groups:
            raise sig.fail(f"filter depth_out {depth_out} is not divisible by {groups} groups")
        if None not in (depth_in, filter_depth) and depth_in != filter_depth * groups:
            raise sig.fail(
                f"input depth {depth_in} != filter depth {filter_depth} x {groups} groups"
            )


def _prepare_grouped(sig: OperationSignature) -> _MatmulState:
    plan = constant_plan(sig, _gc_args(sig), lambda _: _filter_hw(sig))
    if plan is None:
        return _state(sig, None, constant_scalar(sig, _gc_args(sig).positions["fuse"]), None)
    return _state(sig, plan, plan.values["fuse"], int(plan.values["num_groups"]))


def _filter_hw(sig: OperationSignature) -> tuple[int, int] | None:
    fh, fw = known_dim(sig.inputs[1], 1), known_dim(sig.inputs[1], 2)
    return None if fh is None or fw is None else (fh, fw)


def _execute_grouped(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    plan: WindowPlan = ctx.state.values or runtime_plan(ctx, _gc_args(sig))
    values = plan.values
    fail = ctx.fail
    nchw = values["nchw"]
    x = _input_nhwc(ctx, nchw)
    groups = int(values["num_groups"])
    filt = _weights(ctx, groups)
    n, in_h, in_w, depth_in = x.shape
    depth_out, fh, fw, depth_group = filt.shape
    if depth_group * groups != depth_in or depth_out % groups:
        raise fail(
            f"input depth {depth_in} and filter {list(filt.shape)} do not split into "
            f"{groups} groups"
        )
    win = plan.resolve(in_h, in_w, fh, fw, fail)

    # im2col per group: patches [G, P, fh*fw*Cg] times weights [G, fh*fw*Cg, Og].
    padded = pad_nhwc(x, win, filt.weights.dtype, offset=_zero_point(ctx, filt))
    view = windows(padded, win, fh, fw).reshape(-1, fh, fw, groups, depth_group)
    patches = view.transpose(3, 0, 1, 2, 4).reshape(groups, -1, fh * fw * depth_group)
    acc = np.matmul(patches, filt.weights).transpose(1, 0, 2)
    acc = acc.reshape(n, win.out_h, win.out_w, depth_out)
    return _finish(ctx, acc, filt, int(values["fuse"]), nchw)


register(
    OperationCode.TRANSPOSE_CONV_2D,
    validate=_validate_transpose,
    execute=_execute_transpose,
    prepare=_prepare_transpose,
)
register(
    OperationCode.GROUPED_CONV_2D,
    validate=_validate_grouped,
    execute=_execute_grouped,
    prepare=_prepare_grouped,
)
