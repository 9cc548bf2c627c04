"""CONV_2D and DEPTHWISE_CONV_2D (TRANSPOSE_CONV_2D and GROUPED_CONV_2D, which share
their checks, are in :mod:`.transposed_conv`).

All four run on NHWC data (an NCHW input is transposed in and out) with the
filter always in NNAPI's [depth_out, height, width, depth_in] order.  Float
data is computed in float32, as the NNAPI reference does (float16 is
computed in float32 and cast back).  Quantized data is accumulated exactly:
``(x - x_zp)·(w - w_zp)`` sums are integers, so a float BLAS matmul yields
them exactly while they fit the mantissa (``windows.exact_dtype`` picks
float32 or float64); they are then requantized with the reference's
fixed-point multiplier.

Everything that depends only on constants (filter layout and dtype, bias,
multipliers, padding, the fused clamp) is worked out in ``prepare``.
A 1x1 CONV_2D over every pixel is one BLAS matrix product, unless it has
many pixels and few channels (see ``_blas_wins``).  Other float32
sums (float models, and quantized ones whose sums are exact in float32) run
C loops over the pixels with the channels innermost (csrc/kernels.c):
CONV_2D reads its windows in place, with no im2col copy, about 1.8x faster
than im2col and OpenBLAS's matmul on a 3x3 layer of a small CNN;
DEPTHWISE_CONV_2D is no matrix product at all.  float64 sums keep the
im2col matmul and einsum.

A float32 layer bound at prepare time (constant filter, known shapes) runs
the packed kernels of ``_bindings/fconv.py`` where ``float_route`` or
``depthwise_route`` picks them per shape: weights packed once into the
panels the kernel reads, sums in registers, bias and fused clamp in the
same pass (1.2-1.9x the loops above, 1.0-1.4x BLAS and its numpy epilogue).

A quantized layer bound at prepare time (constant filter, known shapes,
NHWC; a depth multiplier above 1 on its input's channels repeated) runs
the int32 C kernels of ``_bindings/qconv.py`` instead: exact int32 sums
and the requantization in one pass, 2-4x the float route; a layer whose
sums could leave int32 keeps the float route.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._bindings import fconv
from ..._bindings import plan as c_plan
from ..._bindings.qconv import QuantConv, vector_path
from ...codes import OperandCode, OperationCode
from ...errors import BadDataError
from ...operands import OperandInfo
from ..registry import ExecutionContext, Kernel, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    constant_scalar,
    known_dim,
    op_failed,
    require_operand_rank,
    require_operand_type,
)
from .fixed_point import quantize_multiplier
from .fused_activation import FLOAT_ACTIVATION_BOUNDS, fused_activation_bounds
from .native import TILE, ConvLoop, Requantizer, conv_f32, depthwise_conv_f32
from .requantization import bias_scale_matches
from .window_geometry import (
    WindowArgs,
    check_window_arg_types,
    check_window_values,
    from_nhwc,
    to_nhwc,
    window_args,
    window_values,
)
from .windows import (
    WindowPlan,
    biased,
    constant_plan,
    conv_output,
    exact_dtype,
    im2col,
    pad_nhwc,
    runtime_plan,
    windows,
)

PER_CHANNEL = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL


# --------------------------------------------------------------- CONV_2D and DEPTHWISE_CONV_2D


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
        sig, 1, (inp.code, PER_CHANNEL) if quantized else (inp.code,), "filter"
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
        check_quantization(sig, inp, filt, bias, out, 3 if depthwise else 0, out_depth)


@dataclass
class _Filter:
    """A filter converted once to the layout and dtype its kernel multiplies with."""

    #: CONV_2D: [fh*fw*depth_in, depth_out], float32 with zero columns up to a
    #: multiple of 16 (the C loop's layout); DEPTHWISE: [fh, fw, depth_out].  Zero
    #: point removed; float32, or float64 when float32 cannot hold quantized sums exactly.
    weights: np.ndarray
    filter_h: int
    filter_w: int
    depth_out: int
    #: int64 (multipliers, shifts), per output channel or one for the tensor; None for float.
    requant: tuple[np.ndarray, np.ndarray] | None


@dataclass
class _State:
    filter: _Filter | None
    #: float: in the filter's dtype; quantized: int64.  None when not constant.
    bias: np.ndarray | None
    plan: WindowPlan | None
    #: quantized fused-activation clamp when the activation is constant.
    bounds: tuple[int, int] | None


def _convert_filter(sig: OperationSignature, w: np.ndarray) -> _Filter:
    inp, filt, out = sig.inputs[0], sig.inputs[1], sig.outputs[0]
    depthwise = sig.code == OperationCode.DEPTHWISE_CONV_2D
    depth_out, fh, fw = (w.shape[3] if depthwise else w.shape[0]), w.shape[1], w.shape[2]
    if depthwise:
        wf = w[0].astype(np.float64)  # [fh, fw, depth_out]
    else:  # [O, fh, fw, C] -> [fh, fw, C, O] flattened, the im2col column order
        wf = w.transpose(1, 2, 3, 0).reshape(-1, depth_out).astype(np.float64)
    if inp.code not in QUANT8_ASYMM_CODES:
        return _Filter(_c_layout(wf, np.float32), fh, fw, depth_out, None)
    if filt.channel_quant is not None:  # TENSOR_QUANT8_SYMM_PER_CHANNEL
        scales = filt.channel_quant.scales
    else:
        wf -= filt.zero_point
        scales = (filt.scale,)
    if len(scales) not in (1, depth_out):
        raise op_failed(sig.code, f"{len(scales)} filter scales for {depth_out} channels")
    pairs = [quantize_multiplier(inp.scale * s / out.scale) for s in scales]
    requant = (np.array([m for m, _ in pairs], np.int64), np.array([s for _, s in pairs], np.int64))
    dtype = exact_dtype(inp, np.abs(wf).reshape(-1, depth_out).sum(axis=0))
    return _Filter(_c_layout(wf, dtype), fh, fw, depth_out, requant)


def _c_layout(weights: np.ndarray, dtype: Any) -> np.ndarray:
    """``weights`` as ``dtype``, contiguous; float32 ones with zeros along the last
    (output channel) axis up to a multiple of :data:`~.native.TILE`, as the C
    loops of :mod:`.native` take them."""
    if dtype != np.float32:
        return np.ascontiguousarray(weights, dtype=dtype)
    depth_out = weights.shape[-1]
    padded = np.zeros((*weights.shape[:-1], -(-depth_out // TILE) * TILE), np.float32)
    padded[..., :depth_out] = weights
    return padded


def _convert_bias(b: np.ndarray, filt: _Filter) -> np.ndarray:
    return b.astype(np.int64 if filt.requant is not None else filt.weights.dtype)


def _prepare(sig: OperationSignature) -> _State:
    """Convert constant filters and biases, resolve padding and the fused clamp once."""
    w, b = sig.constants.get(1), sig.constants.get(2)
    filt = None if w is None else _convert_filter(sig, np.asarray(w))
    bias = None if b is None or filt is None else _convert_bias(np.asarray(b), filt)
    plan = constant_plan(
        sig, _args(sig), lambda _: None if filt is None else (filt.filter_h, filt.filter_w)
    )
    bounds = None
    if plan is not None and sig.inputs[0].code in QUANT8_ASYMM_CODES:
        bounds = fused_activation_bounds(int(plan.values["fuse"]), sig.outputs[0])
    return _State(filt, bias, plan, bounds)


def _execute(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    state: _State = ctx.state
    depthwise = sig.code == OperationCode.DEPTHWISE_CONV_2D
    plan = state.plan or runtime_plan(ctx, _args(sig))
    values = plan.values
    fail = ctx.fail
    nchw = values["nchw"]
    x = ctx.input(0)
    if x.ndim != 4:
        raise fail(f"input has rank {x.ndim}; expected 4")
    x = to_nhwc(x, nchw)
    filt = state.filter or _check_and_convert(ctx)
    bias = state.bias if state.bias is not None else _convert_bias(ctx.input(2), filt)
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
    win = plan.resolve(in_h, in_w, filt.filter_h, filt.filter_w, fail)

    inp, out = sig.inputs[0], sig.outputs[0]
    fuse = int(values["fuse"])
    zero_point = inp.zero_point if filt.requant is not None else 0
    if depthwise and mult > 1:  # output channel c·mult + m reads input channel c
        x = np.repeat(x, mult, axis=3)
    packed = _packed_route(filt, x, win, depthwise and mult == 1)
    if packed is not None:  # the layer the bound kernel runs, packed for this call
        layer = fconv.FloatConv(
            x.shape[1:],
            packed,
            (filt.filter_h, filt.filter_w),
            bias,
            win,
            FLOAT_ACTIVATION_BOUNDS[fuse],
            depthwise=depthwise,
        )
        return [from_nhwc(layer(np.ascontiguousarray(x)), nchw)]
    if not depthwise and _pointwise(filt, win) and _blas_wins(x.shape, filt):
        # A matrix product as it stands, and no im2col copy to save.
        rows = np.subtract(x, zero_point, dtype=filt.weights.dtype) if zero_point else x
        acc = rows.reshape(-1, rows.shape[3]) @ filt.weights[:, : filt.depth_out]
    elif filt.weights.dtype == np.float32:  # the C loops: float, or exact integer sums
        if filt.requant is None:  # the bias and the fused clamp inside the loop too
            lo, hi = FLOAT_ACTIVATION_BOUNDS[fuse]
            source, addend = x, bias
        else:  # zero padding of the shifted input is zero-point padding
            lo, hi = -np.inf, np.inf
            source = np.subtract(x, zero_point, dtype=np.float32)
            addend = np.zeros(filt.depth_out, np.float32)
        if depthwise:
            acc = depthwise_conv_f32(source, filt.weights, addend, win, lo, hi)
        else:
            acc = conv_f32(
                source, filt.weights, (filt.filter_h, filt.filter_w), addend, win, lo, hi
            )
        if filt.requant is None:
            return [from_nhwc(acc.astype(out.dtype, copy=False), nchw)]
    else:  # float64 sums: numpy
        padded = pad_nhwc(x, win, filt.weights.dtype, offset=zero_point)
        if depthwise:
            view = windows(padded, win, filt.filter_h, filt.filter_w)
            acc = np.einsum("nhwijc,ijc->nhwc", view, filt.weights)
        else:
            acc = im2col(padded, win, filt.filter_h, filt.filter_w) @ filt.weights
    acc = acc.reshape(x.shape[0], win.out_h, win.out_w, filt.depth_out)
    result = conv_output(acc, bias, filt.requant, out, fuse, state.bounds)
    return [from_nhwc(result, nchw)]


def _packed_route(
    filt: _Filter, x: np.ndarray, win: Any, multiplier_one: bool
) -> np.ndarray | None:
    """The weights as the packed kernels take them when ``_bind`` would run this
    float32 layer on one (so that a bound and an unbound run compute alike),
    else None."""
    if filt.requant is not None or filt.weights.dtype != np.float32 or x.dtype != np.float32:
        return None
    weights = filt.weights[..., : filt.depth_out]
    if filt.weights.ndim == 3:  # depthwise: [fh, fw, depth]
        if (
            not multiplier_one
            or depthwise_route(x.shape, win, (filt.filter_h, filt.filter_w)) != "fdwconv"
        ):
            return None
        return weights.reshape(-1, filt.depth_out)
    return weights if float_route(filt, x.shape, win) == "fconv" else None


def _pointwise(filt: _Filter, win: Any) -> bool:
    """A 1x1 filter over every pixel: the convolution is one matrix product."""
    return filt.filter_h == filt.filter_w == win.stride_h == win.stride_w == 1 and not (
        win.pad_top or win.pad_bottom or win.pad_left or win.pad_right
    )


#: A 1x1 convolution with at least this many pixels and at most this many
#: input channels runs in the C loop: it adds the bias and clamps as it
#: stores, where BLAS needs another pass over the output (numpy's broadcast
#: add over rows of 28 floats took as long as half the matrix product).  The
#: C loop took 0.6x BLAS's time at 64x64 pixels, 24 -> 28 channels, 0.8x at
#: 32x32, 36 -> 42; BLAS won at 8x8 pixels (0.5x) and at 128 channels and up.
C_LOOP_MIN_PIXELS = 1024
C_LOOP_MAX_DEPTH_IN = 64


def _blas_wins(in_shape: tuple[int, ...], filt: _Filter) -> bool:
    """Whether a 1x1 convolution of an NHWC input runs faster as one BLAS matrix product."""
    n, h, w, depth_in = in_shape
    return (
        filt.weights.dtype != np.float32
        or n * h * w < C_LOOP_MIN_PIXELS
        or depth_in > C_LOOP_MAX_DEPTH_IN
    )


def _check_and_convert(ctx: ExecutionContext) -> _Filter:
    w = ctx.input(1)
    if w.ndim != 4:
        raise op_failed(ctx.code, f"filter has rank {w.ndim}; expected 4")
    if ctx.code == OperationCode.DEPTHWISE_CONV_2D and w.shape[0] != 1:
        raise op_failed(ctx.code, f"depthwise filter dimension 0 is {w.shape[0]}; expected 1")
    return _convert_filter(ctx.signature, w)


def _bind(sig: OperationSignature, state: _State) -> Kernel | None:
    """A kernel prepared once for a convolution whose filter, bias,
    parameters and input shape are all known and whose sums run in float32
    (float data, or quantized data whose sums float32 holds exactly): a run
    checks the input and calls C.  An NCHW one runs the same kernel between
    the transposes ``_execute`` makes.  Anything else runs ``_execute``."""
    kernel = _bind_nhwc(sig, state)
    if kernel is None or state.plan is None or not state.plan.values["nchw"]:
        return kernel
    return _nchw_kernel(sig, state, kernel)


def _nchw_kernel(sig: OperationSignature, state: _State, nhwc: Kernel) -> Kernel:
    """``nhwc`` (bound for the input transposed to NHWC) on an NCHW input, and
    its output transposed back: ``_execute``'s work without its per-run checks
    (ONNX models are NCHW: PP-OCR's classifier has 53 such layers)."""
    shape, dtype = tuple(sig.inputs[0].dimensions or ()), sig.inputs[0].dtype

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if type(x) is np.ndarray and x.shape == shape and x.dtype == dtype:
            (y,) = nhwc([np.ascontiguousarray(x.transpose(0, 2, 3, 1))])
            return [np.ascontiguousarray(y.transpose(0, 3, 1, 2))]
        return _execute(ExecutionContext(sig, inputs, state))  # checks and explains

    step = c_plan.marked(nhwc)
    if step is None:
        return kernel
    return c_plan.mark(kernel, dataclasses.replace(step, nchw=True))


def _bind_nhwc(sig: OperationSignature, state: _State) -> Kernel | None:
    """The kernel for the convolution on NHWC data (its input transposed if NCHW)."""
    filt, plan, inp, out = state.filter, state.plan, sig.inputs[0], sig.outputs[0]
    quantized = filt is not None and filt.requant is not None
    if filt is None or state.bias is None or plan is None or plan.window is None:
        return None
    if quantized and not plan.values["nchw"]:  # the int32 kernels read NHWC operands
        kernel = _int32_kernel(sig, state, filt)
        if kernel is not None:
            return kernel
    if filt.weights.dtype != np.float32:
        return None
    if not quantized and inp.code != OperandCode.TENSOR_FLOAT32:
        return None  # float16: computed in float32 and cast back by _execute
    if quantized and (state.bounds is None or out.dtype not in (np.uint8, np.int8)):
        return None
    in_shape = tuple(inp.dimensions or ())
    if len(in_shape) != 4 or 0 in in_shape or state.bias.shape != (filt.depth_out,):
        return None
    if plan.values["nchw"]:
        in_shape = (in_shape[0], in_shape[2], in_shape[3], in_shape[1])
    depth_in = in_shape[3]
    depthwise = sig.code == OperationCode.DEPTHWISE_CONV_2D
    if depthwise and (plan.values["depth_multiplier"] != 1 or depth_in != filt.depth_out):
        return None
    if not depthwise and filt.weights.shape[0] != depth_in * filt.filter_h * filt.filter_w:
        return None
    if not quantized and not depthwise and float_route(filt, in_shape, plan.window) == "fconv":
        return _packed_kernel(sig, state, filt, in_shape, depthwise=False)
    hw = (filt.filter_h, filt.filter_w)
    if not quantized and depthwise and depthwise_route(in_shape, plan.window, hw) == "fdwconv":
        return _packed_kernel(sig, state, filt, in_shape, depthwise=True)
    blas = not depthwise and _pointwise(filt, plan.window) and _blas_wins(in_shape, filt)
    if quantized:
        return _quantized_kernel(sig, state, filt, in_shape, depthwise, blas)
    if blas:
        return _float_product_kernel(sig, state, filt, in_shape)
    return _float_kernel(sig, state, filt, in_shape, depthwise)


#: The packed kernels' own overheads, measured per layer shape of the MediaPipe
#: detectors and landmark models (bench/bench_fconv.py): a tile is 16 output
#: channels, so a layer of 1-4 channels (a detector's score head) computes
#: mostly zeros and BLAS or nnb_conv_f32 won it.  A tap of a few input
#: channels (a first layer on RGB) is a few FMAs for a tap's worth of
#: bookkeeping, so such a layer runs a filter row as one tap (fconv.c's
#: by_rows), dilation 1 across only: then 0.55-0.7x nnb_conv_f32's time on
#: the five detectors' and landmark models' first layers (palm_detection's
#: 192x192x3 5x5/2: 1.0 ms against 1.5); dilated, nnb_conv_f32 keeps it.
#: A layer of under 4 output pixels (iris_landmark's 2x2 -> 1x1 heads) fills
#: few of a tile's 6 rows.  Everywhere else the packed kernel won: 1.2-1.9x
#: nnb_conv_f32, 1.0-1.4x BLAS with its numpy bias and clamp.
FCONV_MIN_DEPTH_OUT = 5
FCONV_MIN_DEPTH_IN = 4
FCONV_MIN_PIXELS = 4


def float_route(filt: _Filter, in_shape: tuple[int, ...], win: Any) -> str:
    """The route of a float32 CONV_2D of an NHWC input: ``"fconv"`` (the packed
    kernel, csrc/fconv.c), ``"sgemm"`` (a 1x1 layer as one BLAS product, then
    the bias and clamp) or ``"nnb_conv_f32"`` (kernels.c's loop)."""
    if (
        fconv.vector_path()
        and filt.depth_out >= FCONV_MIN_DEPTH_OUT
        and (in_shape[3] >= FCONV_MIN_DEPTH_IN or win.dilation_w == 1)
        and in_shape[0] * win.out_h * win.out_w >= FCONV_MIN_PIXELS
    ):
        return "fconv"
    return "sgemm" if _pointwise(filt, win) and _blas_wins(in_shape, filt) else "nnb_conv_f32"


#: Depthwise layers the packed kernel won (bench/bench_fconv.py), of the
#: shapes its register loop takes (3 or 5 wide, stride 1 or 2, dilation 1):
#: at stride 1 every such layer of the five MediaPipe detectors and landmark
#: models, 6x6 to 112x112 pixels, 24 to 1152 channels (0.45-0.8x
#: nnb_depthwise_conv_f32's time; 0.93 at 14x14x192).  At stride 2 those of
#: whole vectors of 8 channels, which it reads in place (0.6-0.9x on 13 of
#: 15 such layers; palm_detection's 24x24x128 and 12x12x256 5x5/2 lost,
#: 1.2-1.45x, a sixth to a third of their pixels at the padded ends, where
#: each tap is checked); at stride 2 a layer of other channel counts pays
#: for copying its padded rows (4 input pixels an output: face_detection's
#: 64x64x28 1.7x), so kernels.c keeps it.
FDWCONV_WIDTHS = (3, 5)


def depthwise_route(in_shape: tuple[int, ...], win: Any, filter_hw: tuple[int, int]) -> str:
    """The route of a float32 DEPTHWISE_CONV_2D (depth multiplier 1) of an NHWC
    input and a ``filter_hw`` filter: ``"fdwconv"`` (csrc/fconv.c) or
    ``"nnb_depthwise_conv_f32"`` (kernels.c)."""
    fw = filter_hw[1]
    if (
        not fconv.vector_path()
        or fw not in FDWCONV_WIDTHS
        or not win.stride_h == win.stride_w in (1, 2)
        or not win.dilation_h == win.dilation_w == 1
    ):
        return "nnb_depthwise_conv_f32"
    if win.stride_w == 1 or in_shape[3] % 8 == 0:
        return "fdwconv"
    return "nnb_depthwise_conv_f32"


def _packed_kernel(
    sig: OperationSignature,
    state: _State,
    filt: _Filter,
    in_shape: tuple[int, ...],
    depthwise: bool,
) -> Kernel:
    """The packed float32 kernel (_bindings/fconv.py): weights, bias and the fused
    clamp packed once here, one pass over the input a run."""
    assert state.plan is not None and state.plan.window is not None and state.bias is not None
    bounds = FLOAT_ACTIVATION_BOUNDS[int(state.plan.values["fuse"])]
    weights = filt.weights[..., : filt.depth_out]
    if depthwise:  # [fh, fw, depth] -> [fh*fw, depth]
        weights = weights.reshape(-1, filt.depth_out)
    layer = fconv.FloatConv(
        (in_shape[1], in_shape[2], in_shape[3]),
        weights,
        (filt.filter_h, filt.filter_w),
        state.bias,
        state.plan.window,
        bounds,
        depthwise=depthwise,
    )
    batches = in_shape[0]

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if x is not None and layer.fits(x) and x.shape[0] == batches:
            return [layer(x)]
        return _execute(ExecutionContext(sig, inputs, state))  # checks and explains

    # As one step of the C plan (the params keep the layer, and so its packed
    # weights, alive as long as the kernel): a packed layer left out would
    # split the plan around it, costing more than the kernel saves.
    kind = c_plan.FDWCONV if depthwise else c_plan.FCONV
    fields = layer.plan_fields()
    params = c_plan.fconv_params(fields, batches)
    return c_plan.mark(kernel, c_plan.KernelStep(kind, params, scratch=fields["scratch_bytes"]))


def _int32_kernel(sig: OperationSignature, state: _State, filt: _Filter) -> Kernel | None:
    """The int32 C kernel (_bindings/qconv.py): sums and requantization in one pass over
    the input, no float copy; None for a layer it cannot compute exactly."""
    plan, inp, out = state.plan, sig.inputs[0], sig.outputs[0]
    in_shape = tuple(inp.dimensions or ())
    if plan is None or plan.window is None or state.bias is None or state.bounds is None:
        return None
    if len(in_shape) != 4 or 0 in in_shape or filt.requant is None or not vector_path():
        return None
    depthwise = sig.code == OperationCode.DEPTHWISE_CONV_2D
    weights = filt.weights[..., : filt.depth_out]
    multiplier = int(plan.values["depth_multiplier"]) if depthwise else 1
    if depthwise:
        if multiplier < 1 or in_shape[3] * multiplier != filt.depth_out:
            return None
        weights = weights.reshape(-1, filt.depth_out)  # [FH*FW, C]
    # A depth multiplier m > 1: output channel c*m + k reads input channel c, so
    # the input with each channel repeated m times is a multiplier-1 layer's
    # (one copy of 8-bit data, where the float route copied and widened it).
    layer_in = (*in_shape[1:3], in_shape[3] * multiplier)
    try:
        layer = QuantConv(
            layer_in,
            weights,
            (filt.filter_h, filt.filter_w),
            state.bias,
            filt.requant,
            plan.window,
            (inp.dtype, inp.zero_point),
            (out.dtype, out.zero_point),
            state.bounds,
            depthwise=depthwise,
        )
    except BadDataError:  # NotExactError, or a shape it does not take
        return None

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if x is not None and layer.fits(x) and x.shape[0] == in_shape[0]:
            return [layer(x)]
        return _execute(ExecutionContext(sig, inputs, state))  # checks and explains

    def repeating_kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if type(x) is np.ndarray and x.shape == in_shape and x.dtype == inp.dtype:
            return [layer(np.repeat(x, multiplier, axis=3))]
        return _execute(ExecutionContext(sig, inputs, state))  # checks and explains

    if multiplier != 1:
        return repeating_kernel
    kind = c_plan.QDEPTHWISE if depthwise else c_plan.QCONV
    fields = layer.plan_fields()
    params = c_plan.qconv_params(fields, in_shape[0])
    return c_plan.mark(kernel, c_plan.KernelStep(kind, params, scratch=fields["scratch_bytes"]))


def _float_kernel(
    sig: OperationSignature,
    state: _State,
    filt: _Filter,
    in_shape: tuple[int, ...],
    depthwise: bool,
) -> Kernel:
    """The C loop with bias and fused clamp, for float32 data."""
    assert state.plan is not None and state.plan.window is not None and state.bias is not None
    lo, hi = FLOAT_ACTIVATION_BOUNDS[int(state.plan.values["fuse"])]
    hw = (filt.filter_h, filt.filter_w)
    loop = ConvLoop(depthwise, in_shape, filt.weights, hw, state.bias, state.plan.window, lo, hi)

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if x is not None and loop.fits(x):
            return [loop(x)]
        return _execute(ExecutionContext(sig, inputs, state))  # checks and explains

    return c_plan.mark(kernel, loop.plan_step)


def _float_product_kernel(
    sig: OperationSignature, state: _State, filt: _Filter, in_shape: tuple[int, ...]
) -> Kernel:
    """A 1x1 float32 layer BLAS runs best: one matrix product, then the bias and
    the fused clamp in place, as ``_execute`` computes it without its per-run
    checks (4-8 us a layer; face_detection has 15 such layers)."""
    assert state.plan is not None and state.bias is not None
    sums = _pointwise_sums(filt, in_shape)
    bias = state.bias if state.bias.any() else None
    fuse = int(state.plan.values["fuse"])

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if type(x) is np.ndarray and x.shape == in_shape and x.dtype == np.float32:
            return [biased(sums(x), bias, fuse)]
        return _execute(ExecutionContext(sig, inputs, state))  # checks and explains

    # In a C plan the same layer runs the C loop (the planner weighs the two).
    lo, hi = FLOAT_ACTIVATION_BOUNDS[fuse]
    hw = (filt.filter_h, filt.filter_w)
    assert state.plan.window is not None
    loop = ConvLoop(False, in_shape, filt.weights, hw, state.bias, state.plan.window, lo, hi)
    macs = math.prod(in_shape) * filt.depth_out
    return c_plan.mark(kernel, dataclasses.replace(loop.plan_step, macs=macs))


def _quantized_kernel(
    sig: OperationSignature,
    state: _State,
    filt: _Filter,
    in_shape: tuple[int, ...],
    depthwise: bool,
    blas: bool,
) -> Kernel:
    """The sums of (x - x_zp) * w in float32, exactly (zero padding of the
    shifted input is zero-point padding), by the C loop or, for a 1x1 layer
    BLAS runs best, one matrix product; then the requantization, whose
    arguments are worth preparing too (30 us a call, built per run)."""
    assert state.plan is not None and state.plan.window is not None and state.bias is not None
    assert filt.requant is not None and state.bounds is not None
    out = sig.outputs[0]
    sums: Callable[[np.ndarray], np.ndarray]
    if blas:
        sums = _pointwise_sums(filt, in_shape)
    else:
        zeros = np.zeros(filt.depth_out, np.float32)
        hw = (filt.filter_h, filt.filter_w)
        sums = ConvLoop(depthwise, in_shape, filt.weights, hw, zeros, state.plan.window)
    requantize = Requantizer(
        filt.depth_out, state.bias, *filt.requant, out.zero_point, state.bounds, out.dtype
    )
    x_dtype, x_zero_point = sig.inputs[0].dtype, sig.inputs[0].zero_point

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if type(x) is np.ndarray and x.shape == in_shape and x.dtype == x_dtype:
            return [requantize(sums(np.subtract(x, x_zero_point, dtype=np.float32)))]
        return _execute(ExecutionContext(sig, inputs, state))  # checks and explains

    return kernel


def _pointwise_sums(filt: _Filter, in_shape: tuple[int, ...]) -> Callable[[np.ndarray], np.ndarray]:
    """A 1x1 layer's sums for an input of ``in_shape``: one matrix product with
    the filter's columns of real channels, made contiguous once."""
    weights = np.ascontiguousarray(filt.weights[:, : filt.depth_out])
    return functools.partial(_matrix_product, weights, (*in_shape[:3], filt.depth_out))


def _matrix_product(weights: np.ndarray, shape: tuple[int, ...], x: np.ndarray) -> np.ndarray:
    """A 1x1 convolution's sums: ``x`` [N, H, W, C] times ``weights`` [C, O] -> ``shape``."""
    return (x.reshape(-1, weights.shape[0]) @ weights).reshape(shape)


def check_quantization(
    sig: OperationSignature,
    inp: OperandInfo,
    filt: OperandInfo,
    bias: OperandInfo,
    out: OperandInfo,
    channel_dim: int,
    depth_out: int | None,
) -> None:
    """A quantized convolution's scales: positive, per-channel along the output
    channels' dimension, and a per-tensor bias scale of input x filter."""
    if inp.scale <= 0 or out.scale <= 0:
        raise sig.fail("quantized input and output need a positive scale")
    if filt.code == PER_CHANNEL:
        quant = filt.channel_quant
        if quant is None or quant.channel_dim != channel_dim:
            raise sig.fail(f"per-channel filter must be quantized along dimension {channel_dim}")
        if any(s <= 0 for s in quant.scales):
            raise sig.fail("per-channel filter scales must be positive")
        if depth_out is not None and len(quant.scales) != depth_out:
            raise sig.fail(f"{len(quant.scales)} per-channel scales for {depth_out} channels")
    else:
        if filt.scale <= 0:
            raise sig.fail("quantized filter needs a positive scale")
        if not bias_scale_matches(inp.scale, filt.scale, bias.scale):
            raise sig.fail(
                f"bias scale {bias.scale} != input scale {inp.scale} x filter scale {filt.scale}"
            )


for _code in (OperationCode.CONV_2D, OperationCode.DEPTHWISE_CONV_2D):
    register(_code, validate=_validate, execute=_execute, prepare=_prepare, bind=_bind)
