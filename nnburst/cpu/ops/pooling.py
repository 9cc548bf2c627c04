"""AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D.

Float32 windows (max, and the float32 sums of average and L2 pools) are
reduced by a C loop that reads each window once (csrc/kernels.c); other
dtypes tap by tap, rows then columns (``windows.reduce_windows``): a few
whole-array passes, no Python loop over pixels or channels.  As in the
NNAPI reference, padding never counts:
average and L2 pools divide by the number of real input elements under the
window, and max pools pad with the lowest value of the type.  Float sums
are formed in float32 like the reference's.  Quantized pools work on the
raw integers (the output shares the input's scale); the quantized average
rounds half away from zero: ``(sum ± count/2) / count``.

Parameters, padding, window counts and the fused clamp are resolved in
``prepare`` when the scalars are constant and the input size is declared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._bindings import plan as c_plan
from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, Kernel, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    constant_scalar,
    require_operand_rank,
    require_operand_type,
)
from .fused_activation import FLOAT_ACTIVATION_BOUNDS, fused_activation_bounds
from .native import POOL_MAX, POOL_SUM, pool_f32, window_struct
from .window_geometry import (
    Window2D,
    WindowArgs,
    check_window_arg_types,
    check_window_values,
    from_nhwc,
    to_nhwc,
    window_args,
    window_values,
)
from .windows import WindowPlan, activate, constant_plan, pad_nhwc, reduce_windows, runtime_plan


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
    """[out_h, out_w, 1] number of real (unpadded) input elements under each window."""

    def along(out: int, stride: int, pad: int, size: int, filt: int) -> np.ndarray:
        start = np.arange(out) * stride - pad
        return np.minimum(start + filt, size) - np.maximum(start, 0)

    rows = along(win.out_h, win.stride_h, win.pad_top, in_h, filter_h)
    cols = along(win.out_w, win.stride_w, win.pad_left, in_w, filter_w)
    return np.outer(np.maximum(rows, 0), np.maximum(cols, 0))[:, :, None]


@dataclass
class _State:
    plan: WindowPlan | None
    #: window counts for the plan's resolved window (average and L2 pools).
    counts: np.ndarray | None
    #: quantized fused-activation clamp when the activation is constant.
    bounds: tuple[int, int] | None


def _filter_hw(values: dict[str, Any]) -> tuple[int, int]:
    return int(values["filter_h"]), int(values["filter_w"])


def _prepare(sig: OperationSignature) -> _State:
    """Resolve parameters, padding, counts and the clamp once when they are constant."""
    plan = constant_plan(sig, _args(sig), _filter_hw)
    if plan is None:
        return _State(None, None, None)
    counts = None
    if plan.window is not None and plan.in_hw is not None:
        counts = _counts(plan.window, *plan.in_hw, *_filter_hw(plan.values))
    bounds = None
    if sig.inputs[0].code in QUANT8_ASYMM_CODES:
        bounds = fused_activation_bounds(int(plan.values["fuse"]), sig.outputs[0])
    return _State(plan, counts, bounds)


def _execute(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    state: _State = ctx.state
    plan = state.plan or runtime_plan(ctx, _args(sig))
    values = plan.values
    fail = ctx.fail
    nchw = values["nchw"]
    x = ctx.input(0)
    if x.ndim != 4:
        raise fail(f"input has rank {x.ndim}; expected 4")
    x = to_nhwc(x, nchw)
    _, in_h, in_w, _ = x.shape
    fh, fw = _filter_hw(values)
    win = plan.resolve(in_h, in_w, fh, fw, fail)
    counts = None
    if sig.code != OperationCode.MAX_POOL_2D:
        counts = state.counts
        if counts is None or win is not plan.window:
            counts = _counts(win, in_h, in_w, fh, fw)
        if (counts == 0).any():
            raise fail("a pooling window lies entirely in the padding")
    fuse = int(values["fuse"])
    bounds = state.bounds
    if bounds is None and sig.inputs[0].code in QUANT8_ASYMM_CODES:
        bounds = fused_activation_bounds(fuse, sig.outputs[0])
    result = _pooled(x, sig.code, win, (fh, fw), counts, fuse, bounds, sig.outputs[0].dtype)
    return [from_nhwc(result, nchw)]


def _pooled(
    x: np.ndarray,
    code: OperationCode,
    win: Window2D,
    filter_hw: tuple[int, int],
    counts: np.ndarray | None,
    fuse: int,
    bounds: tuple[int, int] | None,
    dtype: np.dtype,
) -> np.ndarray:
    """The pool of NHWC ``x`` over the resolved window: what both ``_execute``
    and a bound kernel compute.  ``counts`` (average and L2 pools) has no zero;
    ``bounds`` is the quantized clamp, None for float."""
    quantized = bounds is not None
    if code == OperationCode.MAX_POOL_2D:
        lowest = np.iinfo(x.dtype).min if quantized else -np.inf
        padded = pad_nhwc(x, win, x.dtype, lowest)
        if x.dtype == np.float32:
            result = pool_f32(padded, filter_hw, win, POOL_MAX)
        else:
            result = reduce_windows(padded, win, *filter_hw, np.maximum)
    elif counts is None:
        raise ValueError(f"{code.name} needs the window counts")
    elif code == OperationCode.L2_POOL_2D:
        squares = np.square(x, dtype=np.float32)
        sums = pool_f32(pad_nhwc(squares, win, np.float32), filter_hw, win, POOL_SUM)
        result = np.sqrt(sums / counts, dtype=np.float32)
    elif quantized:
        sums = reduce_windows(pad_nhwc(x, win, np.int64), win, *filter_hw, np.add)
        half = counts // 2
        result = np.where(sums >= 0, (sums + half) // counts, -((half - sums) // counts))
    else:
        sums = pool_f32(pad_nhwc(x, win, np.float32), filter_hw, win, POOL_SUM)
        result = np.divide(sums, counts, dtype=np.float32)
    if bounds is not None:
        return np.clip(result, *bounds).astype(dtype)
    return activate(result, fuse).astype(dtype, copy=False)


def _bind(sig: OperationSignature, state: _State) -> Kernel | None:
    """A kernel for an NHWC pool whose parameters and input shape are constant:
    the window, counts and clamp are resolved once, so a run is the pool alone
    (the resolution cost 1-5 us a run)."""
    plan, inp = state.plan, sig.inputs[0]
    in_shape = tuple(inp.dimensions or ())
    if (
        plan is None
        or plan.window is None
        or plan.values["nchw"]
        or len(in_shape) != 4
        or 0 in in_shape
        or (state.counts is not None and (state.counts == 0).any())
    ):
        return None  # _execute resolves at run time (and explains what is wrong)
    settings = (
        sig.code,
        plan.window,
        _filter_hw(plan.values),
        state.counts,
        int(plan.values["fuse"]),
        state.bounds,
        sig.outputs[0].dtype,
    )
    dtype = inp.dtype

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if type(x) is np.ndarray and x.shape == in_shape and x.dtype == dtype:
            return [_pooled(x, *settings)]
        return _execute(ExecutionContext(sig, inputs, state))

    step = _plan_step(sig, state, in_shape)
    return kernel if step is None else c_plan.mark(kernel, step)


def _plan_step(
    sig: OperationSignature, state: _State, in_shape: tuple[int, ...]
) -> c_plan.KernelStep | None:
    """A float32 max or average pool (its padding filled in by the plan), or an
    8-bit average pool, as one step of the C plan."""
    plan, win = state.plan, state.plan.window if state.plan is not None else None
    if plan is None or win is None:
        return None
    fh, fw = _filter_hw(plan.values)
    if sig.inputs[0].code in QUANT8_ASYMM_CODES and sig.code == OperationCode.AVERAGE_POOL_2D:
        if state.bounds is None or sig.outputs[0].dtype != sig.inputs[0].dtype:
            return None
        shape = window_struct(in_shape, (fh, fw), win, in_shape[3], padded=True)
        params = c_plan.average_params(shape, sig.inputs[0].dtype, *state.bounds)
        return c_plan.KernelStep(c_plan.AVERAGE_Q8, params)
    if sig.inputs[0].code != OperandCode.TENSOR_FLOAT32:
        return None
    if sig.code == OperationCode.MAX_POOL_2D:
        kind, counts, fill = POOL_MAX, None, -np.inf
    elif sig.code == OperationCode.AVERAGE_POOL_2D and state.counts is not None:
        kind, counts = POOL_SUM, np.ascontiguousarray(state.counts.reshape(-1), np.float32)
        fill = 0.0
    else:
        return None
    lo, hi = FLOAT_ACTIVATION_BOUNDS[int(plan.values["fuse"])]
    # The plan pads the input as _pooled does (pad_nhwc), then pools the padded one.
    pad = (win.pad_top, win.pad_bottom, win.pad_left, win.pad_right)
    n, h, w, c = in_shape
    padded = (n, h + pad[0] + pad[1], w + pad[2] + pad[3], c)
    shape = window_struct(padded, _filter_hw(plan.values), win, c)
    params = c_plan.pool_params(shape, kind, counts, lo, hi)
    return c_plan.KernelStep(c_plan.POOL, params, pad=pad, pad_value=fill)


for _code in (OperationCode.AVERAGE_POOL_2D, OperationCode.MAX_POOL_2D, OperationCode.L2_POOL_2D):
    register(_code, validate=_validate, execute=_execute, prepare=_prepare, bind=_bind)
