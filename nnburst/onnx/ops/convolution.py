"""Convolutions, pools, resizing and matrix products (MatMul, Gemm).  NNAPI's
convolutions and pools run on NCHW tensors as they are, by their layout flag;
filters are laid out once, at load."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ...codes import FuseCode, OperationCode
from ..converter import Converter, Unsupported, maps
from .building import apply, output_of, permuted, reshaped, scaled_by, text


def _spatial(
    c: Converter, node: onnx.NodeProto, a: dict[str, Any], kernel: Sequence[int]
) -> list[int]:
    """pad_left, pad_right, pad_top, pad_bottom, stride_w, stride_h for a 2-D NCHW window."""
    x = c.shape(node.input[0])
    if len(x) != 4 or len(kernel) != 2:
        raise Unsupported("a window that is not 2-D")
    strides = list(a.get("strides", [1, 1]))
    dilations = list(a.get("dilations", [1, 1]))
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for size, k, s, d in zip(x[2:], kernel, strides, dilations):
            total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if auto == "SAME_UPPER" else (big, small))
        (top, bottom), (left, right) = pads
    elif auto == "VALID":
        top = bottom = left = right = 0
    else:
        top, left, bottom, right = list(a.get("pads", [0, 0, 0, 0]))
    return [
        c.i32(left),
        c.i32(right),
        c.i32(top),
        c.i32(bottom),
        c.i32(strides[1]),
        c.i32(strides[0]),
    ]


@maps("Conv")
def _conv(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """CONV_2D, DEPTHWISE_CONV_2D or GROUPED_CONV_2D, NCHW through the layout flag.
    A constant filter is laid out once; a computed one (a graph input, or a value
    computed in the graph) is TRANSPOSE'd at every execution, ungrouped only."""
    w_shape = c.shape(node.input[1])
    if len(w_shape) == 3 and c.dtype(node.input[0]) == np.float32:
        _conv_1d(c, node, a)
        return
    if len(w_shape) != 4 or c.dtype(node.input[0]) != np.float32:
        raise Unsupported("a convolution that is not 2-D float32")
    out_channels, per_group, kh, kw = w_shape
    group = a.get("group", 1)
    in_channels = c.shape(node.input[0])[1]
    constant = node.input[1] in c.constants
    w = c.value(node.input[1], "filter").astype(np.float32) if constant else None
    has_bias = len(node.input) > 2 and node.input[2]
    bias = c.operand(node.input[2]) if has_bias else c.floats(np.zeros(out_channels, np.float32))
    window = _spatial(c, node, a, a.get("kernel_shape", [kh, kw]))
    dilations = list(a.get("dilations", [1, 1]))
    x, out, none, nchw = (
        c.operand(node.input[0]),
        output_of(c, node),
        c.i32(FuseCode.NONE),
        c.boolean(True),
    )
    dilation = [c.i32(dilations[1]), c.i32(dilations[0])]
    if group == 1:
        filt = (  # OIHW → NNAPI's [out, h, w, in]
            c.floats(w.transpose(0, 2, 3, 1))
            if w is not None
            else permuted(c, c.operand(node.input[1]), w_shape, [0, 2, 3, 1])
        )
        c.add(OperationCode.CONV_2D, [x, filt, bias, *window, none, nchw, *dilation], [out])
    elif w is None:
        raise Unsupported("a computed filter of a grouped convolution")
    elif group == in_channels and per_group == 1:
        filt = c.floats(w.transpose(1, 2, 3, 0))  # [out, 1, h, w] → [1, h, w, out]
        multiplier = c.i32(out_channels // in_channels)
        inputs = [x, filt, bias, *window, multiplier, none, nchw, *dilation]
        c.add(OperationCode.DEPTHWISE_CONV_2D, inputs, [out])
    else:
        if dilations != [1, 1]:
            raise Unsupported("a dilated grouped convolution")
        filt = c.floats(w.transpose(0, 2, 3, 1))
        inputs = [x, filt, bias, *window, c.i32(group), none, nchw]
        c.add(OperationCode.GROUPED_CONV_2D, inputs, [out])


def _conv_1d(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """A 1-D convolution is a 2-D one over a height of 1: its input, filter and
    output get that axis (a reshape each), the attributes their height's values.
    Another 1-D convolution of the same input reuses its reshape (an operand has
    one writer)."""
    tall = []
    for name in (*node.input[:2], node.output[0]):
        shape = c.shape(name)
        tall_name, tall_shape = f"{name}/2d", (*shape[:2], 1, *shape[2:])
        tall.append(tall_name)
        if tall_name in c.types:
            continue
        c.types[tall_name] = (c.dtype(name), tall_shape)
        if name in c.constants:
            c.constants[tall_name] = c.constants[name].reshape(tall_shape)
        elif name != node.output[0]:
            reshaped(c, c.operand(name), c.dtype(name), shape, tall_shape, tall_name)
    x, w, y = tall
    flat = {"kernel_shape": 1, "strides": 1, "dilations": 1}
    attributes = {k: [flat[k], *v] if k in flat else v for k, v in a.items()}
    if "pads" in a:
        attributes["pads"] = [0, a["pads"][0], 0, a["pads"][1]]
    _conv(c, helper.make_node("Conv", [x, w, *node.input[2:]], [y]), attributes)
    reshaped(c, c.operand(y), c.dtype(y), c.shape(y), c.shape(node.output[0]), node.output[0])


@maps("ConvTranspose")
def _conv_transpose(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """TRANSPOSE_CONV_2D with explicit padding, NCHW through the layout flag.  The
    output size is the inferred one; the padding that gives it is split as ONNX
    splits it (given pads first, else by auto_pad), and output_padding becomes a
    smaller (possibly negative) trailing pad."""
    x, w_shape = c.shape(node.input[0]), c.shape(node.input[1])
    if len(x) != 4 or len(w_shape) != 4 or c.dtype(node.input[0]) != np.float32:
        raise Unsupported("a transposed convolution that is not 2-D float32")
    if a.get("group", 1) != 1 or list(a.get("dilations", [1, 1])) != [1, 1]:
        raise Unsupported("groups or dilations")
    kernel = w_shape[2:]
    strides = list(a.get("strides", [1, 1]))
    out = c.shape(node.output[0])
    auto = text(a.get("auto_pad"), "NOTSET")
    pads = list(a.get("pads", [0, 0, 0, 0]))
    begins = []
    for axis in range(2):
        total = (x[2 + axis] - 1) * strides[axis] + kernel[axis] - out[2 + axis]
        if auto == "NOTSET" and "output_shape" not in a:
            begin = pads[axis]
        elif auto == "SAME_UPPER":
            begin = total // 2
        else:  # SAME_LOWER, or an output_shape without auto_pad
            begin = total - total // 2
        if begin < 0:
            raise Unsupported("a negative leading pad")
        begins.append((begin, total - begin))
    (top, bottom), (left, right) = begins
    if node.input[1] in c.constants:
        w = c.value(node.input[1], "filter").astype(np.float32)
        filt = c.floats(w.transpose(1, 2, 3, 0))  # [in, out, h, w] → NNAPI's [out, h, w, in]
    else:
        filt = permuted(c, c.operand(node.input[1]), w_shape, [1, 2, 3, 0])
    has_bias = len(node.input) > 2 and node.input[2]
    bias = c.operand(node.input[2]) if has_bias else c.floats(np.zeros(w_shape[1], np.float32))
    scalars = [c.i32(v) for v in (left, right, top, bottom, strides[1], strides[0])]
    inputs = [c.operand(node.input[0]), filt, bias, *scalars, c.i32(FuseCode.NONE), c.boolean(True)]
    c.add(OperationCode.TRANSPOSE_CONV_2D, inputs, [output_of(c, node)])


_POOLS = {"MaxPool": OperationCode.MAX_POOL_2D, "AveragePool": OperationCode.AVERAGE_POOL_2D}


@maps(*_POOLS)
def _pool(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    if a.get("ceil_mode", 0) or a.get("dilations", [1, 1]) != [1, 1]:
        raise Unsupported("ceil_mode or dilations")
    if a.get("count_include_pad", 0) and any(a.get("pads", [0])):
        raise Unsupported("count_include_pad with padding")
    if len(node.output) > 1 and node.output[1]:
        raise Unsupported("the indices output")
    kernel = list(a["kernel_shape"])
    window = _spatial(c, node, a, kernel)
    inputs = [c.operand(node.input[0]), *window, c.i32(kernel[1]), c.i32(kernel[0])]
    fuse = [c.i32(FuseCode.NONE), c.boolean(True)]
    c.add(_POOLS[node.op_type], [*inputs, *fuse], [output_of(c, node)])


@maps("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    axes = c.ints(list(range(2, len(c.shape(node.input[0])))))
    x, out = c.operand(node.input[0]), output_of(c, node)
    if node.op_type == "GlobalAveragePool":
        c.add(OperationCode.MEAN, [x, axes, c.i32(1)], [out])
    else:
        c.add(OperationCode.REDUCE_MAX, [x, axes, c.boolean(True)], [out])


def fully_connected(c: Converter, source: int, x_shape: tuple[int, ...], weights: int,
                     out: int, out_shape: tuple[int, ...], bias: int | None = None) -> None:  # fmt: skip
    """x [..., K] times ``weights`` [N, K]ᵀ plus ``bias`` (operands; zeros if None),
    reshaped around FULLY_CONNECTED when needed."""
    depth, units = x_shape[-1], out_shape[-1]
    rows = int(np.prod(x_shape[:-1]))
    if bias is None:
        bias = c.floats(np.zeros(units, np.float32))
    if len(x_shape) != 2:
        flat = c.temporary(np.dtype(np.float32), (rows, depth))
        c.add(OperationCode.RESHAPE, [source, c.ints((rows, depth))], [flat])
        source = flat
    inputs = [source, weights, bias, c.i32(FuseCode.NONE)]
    if len(out_shape) == 2:
        c.add(OperationCode.FULLY_CONNECTED, inputs, [out])
        return
    result = c.temporary(np.dtype(np.float32), (rows, units))
    c.add(OperationCode.FULLY_CONNECTED, inputs, [result])
    c.add(OperationCode.RESHAPE, [result, c.ints(out_shape or (1,))], [out])


def _weights_rows(c: Converter, name: str, transposed: bool, scale: float = 1.0) -> tuple[int, int]:
    """A 2-D right-hand side (times ``scale``) as FULLY_CONNECTED's [units, depth]
    operand, and its units: a constant is laid out once, a computed one TRANSPOSE'd
    at every run (``transposed``: it is already [units, depth])."""
    if name in c.constants:
        w = c.value(name, "right-hand side").astype(np.float32) * np.float32(scale)
        if w.ndim != 2:
            raise Unsupported("a right-hand side that is not one matrix")
        rows = w if transposed else w.T
        return c.floats(rows), rows.shape[0]
    shape = c.shape(name)
    if len(shape) != 2 or c.dtype(name) != np.float32:
        raise Unsupported("a computed right-hand side that is not one float32 matrix")
    source = c.operand(name)
    if scale != 1.0:
        source = scaled_by(c, source, shape, scale)
    if transposed:
        return source, shape[0]
    return permuted(c, source, shape, [1, 0]), shape[1]


@maps("MatMul")
def _matmul(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    if c.dtype(node.input[0]) != np.float32 or c.dtype(node.input[1]) != np.float32:
        raise Unsupported("operands that are not float32")
    a_shape, b_shape = c.shape(node.input[0]), c.shape(node.input[1])
    if not a_shape or not b_shape or a_shape[-1] != b_shape[-2 if len(b_shape) > 1 else 0]:
        raise Unsupported(f"shapes {list(a_shape)} and {list(b_shape)} (no matrix product)")
    if len(a_shape) < 2 or len(b_shape) != 2:
        _batched_matmul(c, node)
        return
    weights, _ = _weights_rows(c, node.input[1], transposed=False)
    x, out_shape = node.input[0], c.shape(node.output[0])
    fully_connected(c, c.operand(x), c.shape(x), weights, output_of(c, node), out_shape)


def _batched_matmul(c: Converter, node: onnx.NodeProto) -> None:
    """Vectors and stacks of matrices (broadcast over the leading axes), one
    FULLY_CONNECTED per pair of matrices (NNAPI 1.3 has no BATCH_MATMUL): each side
    flattened to rows, each matrix a SLICE of them (the left side unsliced when it is
    one matrix), the right one TRANSPOSE'd to [N, K] (laid out at load when it is a
    constant); the products CONCATENATED and reshaped to the output."""
    f32 = np.dtype(np.float32)
    a_shape, b_shape = c.shape(node.input[0]), c.shape(node.input[1])
    if len(a_shape) > 4 or len(b_shape) > 4:
        raise Unsupported("a tensor of rank over 4")
    a_mats = (1, *a_shape) if len(a_shape) == 1 else a_shape
    b_mats = (*b_shape, 1) if len(b_shape) == 1 else b_shape
    (m, k), n = a_mats[-2:], b_mats[-1]
    batch = np.broadcast_shapes(a_mats[:-2], b_mats[:-2])
    pairs = list(np.ndindex(*batch))
    if len(pairs) > 64:
        raise Unsupported(f"{len(pairs)} matrix products")
    a_count, b_count = int(np.prod(a_mats[:-2])), int(np.prod(b_mats[:-2]))
    a_ids = np.broadcast_to(np.arange(a_count).reshape(a_mats[:-2]), batch)
    b_ids = np.broadcast_to(np.arange(b_count).reshape(b_mats[:-2]), batch)

    def rows(name: str, mats: tuple[int, ...]) -> int:
        flat = (int(np.prod(mats[:-1])), mats[-1])
        return apply(c, OperationCode.RESHAPE, [c.operand(name), c.ints(flat)], f32, flat)

    def matrix(source: int, i: int, size: tuple[int, int]) -> int:
        begin = c.ints([i * size[0], 0])
        return apply(c, OperationCode.SLICE, [source, begin, c.ints(size)], f32, size)

    a_rows = rows(node.input[0], a_mats)
    if node.input[1] in c.constants:  # each matrix as FULLY_CONNECTED's [N, K], once
        b = c.value(node.input[1], "right-hand side").reshape(-1, k, n)
        weights = [c.floats(b[j].T) for j in range(b_count)]
    else:
        b_rows = rows(node.input[1], b_mats)
        weights = [permuted(c, matrix(b_rows, j, (k, n)), (k, n), [1, 0]) for j in range(b_count)]
    zeros = c.floats(np.zeros(n, np.float32))
    products = []
    for index in pairs:
        i, j = int(a_ids[index]), int(b_ids[index])
        left = a_rows if a_count == 1 else matrix(a_rows, i, (m, k))
        inputs = [left, weights[j], zeros, c.i32(FuseCode.NONE)]
        products.append(apply(c, OperationCode.FULLY_CONNECTED, inputs, f32, (m, n)))
    stacked = products[0]
    if len(products) > 1:
        stacked = apply(
            c, OperationCode.CONCATENATION, [*products, c.i32(0)], f32, (m * len(products), n)
        )
    out_shape = c.shape(node.output[0]) or (1,)
    c.add(OperationCode.RESHAPE, [stacked, c.ints(out_shape)], [output_of(c, node)])


@maps("Gemm")
def _gemm(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """alpha·A'·B' + beta·C: FULLY_CONNECTED, its bias when C is one constant row,
    else an ADD of C after it; a transposed A is TRANSPOSE'd first."""
    x, x_shape = c.operand(node.input[0]), c.shape(node.input[0])
    if len(x_shape) != 2 or c.dtype(node.input[0]) != np.float32:
        raise Unsupported("an A that is not one float32 matrix")
    if a.get("transA", 0):
        x, x_shape = permuted(c, x, x_shape, [1, 0]), x_shape[::-1]
    transposed = bool(a.get("transB", 0))
    weights, units = _weights_rows(c, node.input[1], transposed, a.get("alpha", 1.0))
    bias = None  # zeros
    added = None  # an operand added after the product
    beta = np.float32(a.get("beta", 1.0))
    if len(node.input) > 2 and node.input[2]:
        name = node.input[2]
        if name in c.constants:
            given = c.value(name, "C").astype(np.float32) * beta
            if given.size in (1, units) and given.ndim <= 1 or given.shape == (1, units):
                bias = c.floats(np.broadcast_to(given.reshape(-1), (units,)))
            else:
                added = c.floats(given)
        elif beta == 1:
            added = c.operand(name)
        else:
            added = scaled_by(c, c.operand(name), c.shape(name), float(beta))
    out_shape = c.shape(node.output[0])
    target = output_of(c, node) if added is None else c.temporary(np.dtype(np.float32), out_shape)
    fully_connected(c, x, x_shape, weights, target, out_shape, bias)
    if added is not None:
        c.add(OperationCode.ADD, [target, added, c.i32(FuseCode.NONE)], [output_of(c, node)])


#: ONNX Resize (mode, coordinate transformation[, nearest mode]) → NNAPI's
#: (align_corners, half_pixel_centers); anything else is refused, not approximated.
_RESIZE_LINEAR = {
    "asymmetric": (False, False),
    "align_corners": (True, False),
    "half_pixel": (False, True),
}
_RESIZE_NEAREST = {("asymmetric", "floor"): (False, False)}


@maps("Resize")
def _resize(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """2-D NCHW resizes through NNAPI's layout flag; the output size is the inferred one."""
    x, out = c.shape(node.input[0]), c.shape(node.output[0])
    if len(x) != 4 or x[:2] != out[:2]:
        raise Unsupported("a resize of other than the two spatial axes of a 4-D tensor")
    mode = text(a.get("mode"), "nearest")
    transform = text(a.get("coordinate_transformation_mode"), "half_pixel")
    if (
        a.get("antialias", 0)
        or a.get("exclude_outside", 0)
        or a.get("keep_aspect_ratio_policy", b"stretch") not in (b"stretch", "stretch")
    ):
        raise Unsupported("antialias, exclude_outside or an aspect-ratio policy")
    if mode == "linear":
        flags = _RESIZE_LINEAR.get(transform)
        code = OperationCode.RESIZE_BILINEAR
    elif mode == "nearest":
        flags = _RESIZE_NEAREST.get((transform, text(a.get("nearest_mode"), "round_prefer_floor")))
        code = OperationCode.RESIZE_NEAREST_NEIGHBOR
    else:
        flags = None
    if flags is None:
        raise Unsupported(f"mode {mode} with {transform} coordinates")
    if c.dtype(node.input[0]) != np.float32:
        raise Unsupported(f"{c.dtype(node.input[0])} images")
    scales = node.input[2] if len(node.input) > 2 else ""
    if scales and c.value(scales, "scales").size:
        # ONNX maps coordinates with the scale itself; NNAPI with the size ratio.
        factors = c.value(scales, "scales").astype(np.float64)[2:]
        if any(abs(size * f - round(size * f)) > 1e-6 for size, f in zip(x[2:], factors)):
            raise Unsupported("scales that do not give whole output sizes")
    align, half = flags
    inputs = [c.operand(node.input[0]), c.i32(out[3]), c.i32(out[2]), c.boolean(True)]
    c.add(code, [*inputs, c.boolean(align), c.boolean(half)], [output_of(c, node)])
