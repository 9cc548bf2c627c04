"""FULLY_CONNECTED: ``output = activation(input · weightsᵀ + bias)``.

The input is flattened to [batch, input_size] where input_size is the
weights' second dimension, as NNAPI specifies for inputs of rank > 2.  Float
math runs in float32 like the reference's (float16 too, cast back);
quantized math accumulates ``(x - x_zp)·(w - w_zp)`` exactly through a
float matmul (float32 when the largest possible sum fits its mantissa,
else float64: ``windows.exact_dtype``), then requantizes with the
reference fixed-point multiplier.  Weights, bias, multiplier and clamp are
converted once in ``prepare``.
A quantized layer bound at prepare time runs the int32 C kernels of
``_bindings/qconv.py`` instead (every row a 1x1 image): exact sums and the
requantization in one pass; a float32 one the packed kernel of
``_bindings/fconv.py`` (its 1x1 case), bias and clamp as it stores, and
either is a step of the C plan, so a layer no longer splits a plan.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..._bindings import fconv
from ..._bindings import plan as c_plan
from ..._bindings.qconv import QuantConv, vector_path
from ...codes import OperandCode, OperationCode
from ...errors import BadDataError
from ..registry import ExecutionContext, Kernel, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    QUANT8_ASYMM_CODES,
    constant_scalar,
    known_dim,
    op_failed,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
)
from .fixed_point import quantize_multiplier
from .fused_activation import FLOAT_ACTIVATION_BOUNDS, FUSE_CODES, fused_activation_bounds
from .native import Requantizer
from .requantization import bias_scale_matches
from .windows import biased, conv_output, exact_dtype


def _validate(sig: OperationSignature) -> None:
    require_operand_counts(sig, (4,), 1)
    inp = require_operand_type(sig, 0, (*FLOAT_TENSOR_CODES, *QUANT8_ASYMM_CODES), "input")
    quantized = inp.code in QUANT8_ASYMM_CODES
    weights = require_operand_type(sig, 1, (inp.code,), "weights")
    bias = require_operand_type(
        sig, 2, (OperandCode.TENSOR_INT32,) if quantized else (inp.code,), "bias"
    )
    require_operand_type(sig, 3, (OperandCode.INT32,), "fused activation")
    out = require_operand_type(sig, 0, (inp.code,), "output", output=True)
    require_operand_rank(sig, 0, (2, 3, 4), "input")
    require_operand_rank(sig, 1, (2,), "weights")
    require_operand_rank(sig, 2, (1,), "bias")
    require_operand_rank(sig, 0, (2,), "output", output=True)
    fuse = constant_scalar(sig, 3)
    if fuse is not None and fuse not in FUSE_CODES:
        raise sig.fail(f"fused activation {fuse} is not a FuseCode (0..3)")
    units = known_dim(weights, 0)
    bias_len, out_units = known_dim(bias, 0), known_dim(out, 1)
    if None not in (units, bias_len) and units != bias_len:
        raise sig.fail(f"bias length {bias_len} != weights' num_units {units}")
    if None not in (units, out_units) and units != out_units:
        raise sig.fail(f"output dimension 1 is {out_units}; weights have {units} units")
    input_size = known_dim(weights, 1)
    if inp.dimensions and inp.is_fully_specified and input_size is not None:
        total = int(np.prod(inp.dimensions))
        if total % input_size:
            raise sig.fail(
                f"input of {total} elements is not a multiple of input_size {input_size}"
            )
    if quantized:
        if min(inp.scale, weights.scale, out.scale) <= 0:
            raise sig.fail("quantized input, weights and output need positive scales")
        if not bias_scale_matches(inp.scale, weights.scale, bias.scale):
            raise sig.fail(
                f"bias scale {bias.scale} != input scale {inp.scale} x weights scale {weights.scale}"
            )


@dataclass
class _State:
    #: constant weights [input_size, num_units], zero point removed, in the compute dtype; or None.
    weights_t: np.ndarray | None
    #: float: in the weights' dtype; quantized: int64.  None when not constant.
    bias: np.ndarray | None
    #: int64 (multiplier, shift) as one-element arrays; None for float.
    requant: tuple[np.ndarray, np.ndarray] | None
    #: quantized fused-activation clamp when the activation is constant.
    bounds: tuple[int, int] | None


def _convert_weights(sig: OperationSignature, w: np.ndarray) -> np.ndarray:
    inp = sig.inputs[0]
    if inp.code not in QUANT8_ASYMM_CODES:
        return np.ascontiguousarray(w.T, dtype=np.float32)
    wf = w.T.astype(np.float64) - sig.inputs[1].zero_point
    return np.ascontiguousarray(wf, dtype=exact_dtype(inp, np.abs(wf).sum(axis=0)))


def _convert_bias(b: np.ndarray, sig: OperationSignature, weights_t: np.ndarray) -> np.ndarray:
    return b.astype(np.int64 if sig.inputs[0].code in QUANT8_ASYMM_CODES else weights_t.dtype)


def _prepare(sig: OperationSignature) -> _State:
    """Convert constant weights and bias, the multiplier and the clamp once."""
    w, b = sig.constants.get(1), sig.constants.get(2)
    weights_t = None if w is None else _convert_weights(sig, np.asarray(w))
    bias = None if b is None or weights_t is None else _convert_bias(np.asarray(b), sig, weights_t)
    requant = bounds = None
    inp = sig.inputs[0]
    if inp.code in QUANT8_ASYMM_CODES:
        m, shift = quantize_multiplier(inp.scale * sig.inputs[1].scale / sig.outputs[0].scale)
        requant = (np.array([m], np.int64), np.array([shift], np.int64))
        fuse = constant_scalar(sig, 3)
        if fuse is not None:
            bounds = fused_activation_bounds(fuse, sig.outputs[0])
    return _State(weights_t, bias, requant, bounds)


def _execute(ctx: ExecutionContext) -> list[np.ndarray]:
    sig = ctx.signature
    state: _State = ctx.state
    x = ctx.input(0)
    weights_t = state.weights_t
    if weights_t is None:
        w = ctx.input(1)
        if w.ndim != 2:
            raise op_failed(sig.code, f"weights have rank {w.ndim}; expected 2")
        weights_t = _convert_weights(sig, w)
    bias = state.bias if state.bias is not None else _convert_bias(ctx.input(2), sig, weights_t)
    input_size, units = weights_t.shape
    if bias.shape != (units,):
        raise op_failed(sig.code, f"bias shape {bias.shape} != ({units},)")
    if x.ndim < 2 or input_size == 0 or x.size % input_size:
        raise op_failed(
            sig.code, f"input of shape {x.shape} cannot be flattened to rows of {input_size}"
        )
    fuse = ctx.scalar(3)
    if fuse not in FUSE_CODES:
        raise op_failed(sig.code, f"fused activation {fuse} is not a FuseCode (0..3)")
    zero_point = sig.inputs[0].zero_point if state.requant is not None else 0
    rows = np.subtract(x.reshape(-1, input_size), zero_point, dtype=weights_t.dtype)
    acc = rows @ weights_t
    return [conv_output(acc, bias, state.requant, sig.outputs[0], fuse, state.bounds)]


def _bind(sig: OperationSignature, state: _State) -> Kernel | None:
    """Constant weights, bias and activation, with sums in float32: a run is the
    matrix product and one pass for the bias and activation (float) or one C
    requantization prepared here (quantized): 6 us a call where ``_execute``
    took 17."""
    weights_t, bias = state.weights_t, state.bias
    fuse = constant_scalar(sig, 3)
    inp = sig.inputs[0]
    if weights_t is None or bias is None or fuse is None:
        return None
    if state.requant is not None and state.bounds is not None and vector_path():
        int32 = _int32_kernel(sig, state, weights_t, bias)
        if int32 is not None:
            return int32
    if weights_t.dtype != np.float32:
        return None
    if inp.code not in (OperandCode.TENSOR_FLOAT32, *QUANT8_ASYMM_CODES):
        return None  # float16: _execute computes in float32 and casts back
    input_size, units = weights_t.shape
    if inp.code == OperandCode.TENSOR_FLOAT32 and float_route(sig, input_size) == "fconv":
        return _packed_kernel(sig, state, weights_t, bias, int(fuse))
    out = sig.outputs[0]
    finish: Callable[[np.ndarray], np.ndarray]
    if state.requant is not None:
        if state.bounds is None or out.dtype not in (np.uint8, np.int8):
            return None
        finish = Requantizer(units, bias, *state.requant, out.zero_point, state.bounds, out.dtype)
    else:
        finish = functools.partial(biased, bias=bias if bias.any() else None, fuse=int(fuse))
    zero_point, dtype = (inp.zero_point if state.requant is not None else 0), inp.dtype

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if type(x) is np.ndarray and x.dtype == dtype and x.ndim >= 2 and x.size % input_size == 0:
            rows = np.subtract(x.reshape(-1, input_size), zero_point, dtype=np.float32)
            return [finish(rows @ weights_t)]
        return _execute(ExecutionContext(sig, inputs, state))  # checks and explains

    return kernel


#: Rows of a float32 layer up to which the packed kernel (its one-row tile
#: for a single row, bound by reading the weights; 6-row tiles above)
#: replaces BLAS's product and numpy's pass for the bias and clamp
#: (bench/bench_fc.py, each called from Python): 0.8-1.0x their time on one
#: row (hand_landmark's 672 -> 63 and 672 -> 1 heads, a 1024 -> 1000
#: classifier), 0.55-0.7x at 4 to 64 rows; and in a C plan a step with no
#: Python around it, where BLAS split the plan.
FC_PACKED_MAX_ROWS = 64


def float_route(sig: OperationSignature, input_size: int) -> str:
    """The route of a float32 layer with constant weights: ``"fconv"`` (the
    packed kernel) or ``"sgemm"`` (BLAS, then numpy's bias and clamp)."""
    dims = sig.inputs[0].dimensions or ()
    if not fconv.vector_path() or not dims or 0 in dims or math.prod(dims) % input_size:
        return "sgemm"
    return "fconv" if math.prod(dims) // input_size <= FC_PACKED_MAX_ROWS else "sgemm"


def _packed_kernel(
    sig: OperationSignature, state: _State, weights_t: np.ndarray, bias: np.ndarray, fuse: int
) -> Kernel:
    """The packed float32 kernel, every row a 1x1 image; a step of the C plan."""
    input_size, units = weights_t.shape
    rows = math.prod(sig.inputs[0].dimensions or ()) // input_size
    layer = fconv.FloatConv(
        (1, 1, input_size), weights_t, (1, 1), bias, None, FLOAT_ACTIVATION_BOUNDS[fuse]
    )

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if type(x) is np.ndarray and x.ndim >= 2 and x.size == rows * input_size:
            images = x.reshape(rows, 1, 1, input_size)
            if layer.fits(images):
                return [layer(images).reshape(rows, units)]
        return _execute(ExecutionContext(sig, inputs, state))  # checks and explains

    fields = layer.plan_fields()
    params = c_plan.fconv_params(fields, rows)
    return c_plan.mark(
        kernel, c_plan.KernelStep(c_plan.FCONV, params, scratch=fields["scratch_bytes"])
    )


def _int32_kernel(
    sig: OperationSignature, state: _State, weights_t: np.ndarray, bias: np.ndarray
) -> Kernel | None:
    """The int32 C kernel (_bindings/qconv.py) with every row a 1x1 image: sums and
    requantization in one pass; None for a layer it cannot compute exactly."""
    assert state.requant is not None and state.bounds is not None
    inp, out = sig.inputs[0], sig.outputs[0]
    input_size, units = weights_t.shape
    try:
        layer = QuantConv(
            (1, 1, input_size),
            weights_t,
            (1, 1),
            bias,
            state.requant,
            None,
            (inp.dtype, inp.zero_point),
            (out.dtype, out.zero_point),
            state.bounds,
        )
    except BadDataError:  # NotExactError, or a size it does not take
        return None

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if type(x) is np.ndarray and x.ndim >= 2 and x.size % input_size == 0 and x.size:
            rows = x.reshape(-1, 1, 1, input_size)
            if layer.fits(rows):
                return [layer(rows).reshape(-1, units)]
        return _execute(ExecutionContext(sig, inputs, state))  # checks and explains

    dims = inp.dimensions or ()
    if not dims or 0 in dims or math.prod(dims) % input_size:
        return kernel
    fields = layer.plan_fields()
    params = c_plan.qconv_params(fields, math.prod(dims) // input_size)
    return c_plan.mark(
        kernel, c_plan.KernelStep(c_plan.QCONV, params, scratch=fields["scratch_bytes"])
    )


register(
    OperationCode.FULLY_CONNECTED,
    validate=_validate,
    execute=_execute,
    prepare=_prepare,
    bind=_bind,
)
