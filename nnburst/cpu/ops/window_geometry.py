"""Where the windows of a 2-D windowed operation (convolutions, pools) fall.

CONV_2D, DEPTHWISE_CONV_2D, GROUPED_CONV_2D and the pools share one scheme of
scalar parameters (:class:`WindowArgs`); their values resolve, for one input size,
to explicit padding, strides, dilation and an output size (:class:`Window2D`), as
NNAPI's reference computes them.  The operations compute in NHWC; NCHW data is
transposed in and out (:func:`to_nhwc`, :func:`from_nhwc`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...codes import OperandCode, PaddingCode
from .arguments import require_operand_type
from .fused_activation import FUSE_CODES


def to_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return np.transpose(x, (0, 2, 3, 1)) if nchw else x


def from_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2))) if nchw else x


def padding_for_scheme(
    in_size: int, stride: int, filter_size: int, scheme: int, dilation: int = 1
) -> tuple[int, int]:
    """(head, tail) explicit padding for an implicit padding scheme."""
    if PaddingCode(scheme) == PaddingCode.VALID:
        return 0, 0
    effective = (filter_size - 1) * dilation + 1
    out_size = (in_size + stride - 1) // stride
    needed = max(0, (out_size - 1) * stride + effective - in_size)
    return needed // 2, needed - needed // 2


def transpose_padding(out_size: int, stride: int, filter_size: int, scheme: int) -> tuple[int, int]:
    """TRANSPOSE_CONV_2D's (head, tail) padding for an implicit scheme, given the
    wanted output size.

    SAME pads so the output is exactly ``out_size``; the tail is fitted to the
    end of the last stride and may come out negative, as in the reference.
    """
    if scheme != PaddingCode.SAME:
        return 0, 0
    in_size = (out_size + stride - 1) // stride
    needed = (in_size - 1) * stride + filter_size - out_size
    head = needed // 2 if needed > 0 else 0
    return head, needed - head


def transpose_conv_paddings(
    values: dict[str, Any], output_shape: Any, nchw: bool, filter_hw: tuple[int, int]
) -> tuple[int, int, int, int]:
    """TRANSPOSE_CONV_2D's (top, bottom, left, right): the explicit paddings, or
    for an implicit scheme (``padding_scheme`` in ``values``) those that give
    the wanted ``output_shape`` (4 values, NCHW or NHWC as ``nchw`` says).
    The operation and the C plan's lowering both work them out here."""
    if "padding_scheme" not in values:
        return (
            int(values["pad_top"]), int(values["pad_bottom"]),
            int(values["pad_left"]), int(values["pad_right"]),
        )  # fmt: skip
    want_h, want_w = (
        (output_shape[2], output_shape[3]) if nchw else (output_shape[1], output_shape[2])
    )
    scheme = values["padding_scheme"]
    top, bottom = transpose_padding(int(want_h), int(values["stride_h"]), filter_hw[0], scheme)
    left, right = transpose_padding(int(want_w), int(values["stride_w"]), filter_hw[1], scheme)
    return top, bottom, left, right


@dataclass(frozen=True)
class WindowArgs:
    """Input positions of the scalar parameters of a 2-D windowed operation.

    CONV_2D, DEPTHWISE_CONV_2D and the pools share one parameter scheme: after
    the tensors come either a padding code (implicit) or four explicit pads
    (left, right, top, bottom), then stride_w, stride_h, op-specific extras
    (depth multiplier, filter size), the fused activation and, from NNAPI 1.2,
    an optional NCHW flag and optional dilation factors (w, h).
    """

    implicit: bool
    positions: dict[str, int]


def window_args(sig: Any, first: int, extras: tuple[str, ...], dilation: bool) -> WindowArgs:
    """Decide implicit vs explicit padding from the input count and types."""
    n = len(sig.inputs)
    implicit_base = first + 4 + len(extras)
    explicit_base = first + 7 + len(extras)
    implicit = n == implicit_base or (
        n > implicit_base and sig.inputs[implicit_base].code == OperandCode.BOOL
    )
    base = implicit_base if implicit else explicit_base
    allowed = (base, base + 1, base + 3) if dilation else (base, base + 1)
    if n not in allowed:
        counts = sorted(
            {implicit_base, implicit_base + 1, explicit_base, explicit_base + 1}
            | ({implicit_base + 3, explicit_base + 3} if dilation else set())
        )
        raise sig.fail(f"expected {', '.join(map(str, counts))} inputs, got {n}")
    positions: dict[str, int] = {}
    i = first
    if implicit:
        positions["padding_scheme"] = i
        i += 1
    else:
        for name in ("pad_left", "pad_right", "pad_top", "pad_bottom"):
            positions[name] = i
            i += 1
    for name in ("stride_w", "stride_h", *extras, "fuse"):
        positions[name] = i
        i += 1
    if n > base:
        positions["nchw"] = i
    if n > base + 1:
        positions["dilation_w"] = i + 1
        positions["dilation_h"] = i + 2
    return WindowArgs(implicit, positions)


def check_window_arg_types(sig: Any, args: WindowArgs) -> None:
    for name, index in args.positions.items():
        want = OperandCode.BOOL if name == "nchw" else OperandCode.INT32
        require_operand_type(sig, index, (want,), name)


def window_values(args: WindowArgs, value: Callable[[int], Any]) -> dict[str, Any]:
    """Parameter name -> Python value (``None`` where ``value`` does not know it)."""
    values: dict[str, Any] = {"nchw": False, "dilation_w": 1, "dilation_h": 1}
    for name, index in args.positions.items():
        values[name] = value(index)
    return values


def check_window_values(values: dict[str, Any], fail: Callable[[str], Exception]) -> None:
    """Range checks on whatever parameter values are known."""
    for name, v in values.items():
        if v is None or name == "nchw":
            continue
        if name == "padding_scheme":
            if v not in (int(PaddingCode.SAME), int(PaddingCode.VALID)):
                raise fail(f"padding scheme {v} is not SAME (1) or VALID (2)")
        elif name == "fuse":
            if v not in FUSE_CODES:
                raise fail(f"fused activation {v} is not a FuseCode (0..3)")
        elif name.startswith("pad_"):
            if v < 0:
                raise fail(f"{name} is {v}; padding must be >= 0")
        elif v < 1:
            raise fail(f"{name} is {v}; it must be >= 1")


@dataclass(frozen=True)
class Window2D:
    """Resolved padding, strides, dilation and output size for one input size."""

    pad_top: int
    pad_bottom: int
    pad_left: int
    pad_right: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int
    out_h: int
    out_w: int


def resolve_window(
    values: dict[str, Any],
    in_h: int,
    in_w: int,
    filter_h: int,
    filter_w: int,
    fail: Callable[[str], Exception],
) -> Window2D:
    """Explicit padding and output size, as NNAPI's reference computes them."""
    sh, sw = int(values["stride_h"]), int(values["stride_w"])
    dh, dw = int(values["dilation_h"]), int(values["dilation_w"])
    if "padding_scheme" in values:
        pt, pb = padding_for_scheme(in_h, sh, filter_h, values["padding_scheme"], dh)
        pl, pr = padding_for_scheme(in_w, sw, filter_w, values["padding_scheme"], dw)
    else:
        pt, pb = int(values["pad_top"]), int(values["pad_bottom"])
        pl, pr = int(values["pad_left"]), int(values["pad_right"])
    eff_h = (filter_h - 1) * dh + 1
    eff_w = (filter_w - 1) * dw + 1
    span_h = in_h + pt + pb - eff_h
    span_w = in_w + pl + pr - eff_w
    if span_h < 0 or span_w < 0:
        raise fail(
            f"the {filter_h}x{filter_w} window (dilation {dh}x{dw}) does not fit the padded "
            f"{in_h}x{in_w} input"
        )
    return Window2D(pt, pb, pl, pr, sh, sw, dh, dw, span_h // sh + 1, span_w // sw + 1)
