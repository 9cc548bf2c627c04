"""ONNX Resize (and Upsample): NNAPI's RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR where
their arithmetic is ONNX's, else one step per resized axis built from tables
computed at load.

Every output size is static after loading, so each resized axis is a fixed map
from output to input positions:

* nearest: each output element copies one input element, a GATHER along the axis
  with the positions worked out here (every coordinate mode and rounding rule,
  any element type);
* linear and cubic, antialiased or not, ``exclude_outside``: each output element
  is a weighted sum of input elements along the axis, a [out, in] matrix applied
  with FULLY_CONNECTED over the axis (moved last by TRANSPOSE when it is not);
  ``tf_crop_and_resize`` outside the image adds its extrapolation value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from ...codes import FuseCode, OperationCode
from ..converter import Converter, Unsupported, maps
from .building import apply, output_of, permuted, reshaped, text

#: ONNX (coordinate mode, nearest mode) → NNAPI's (align_corners, half_pixel_centers)
#: where the two agree at every size (linear: the coordinate mode alone).
_RESIZE_LINEAR = {
    "asymmetric": (False, False),
    "align_corners": (True, False),
    "half_pixel": (False, True),
}
_RESIZE_NEAREST = {("asymmetric", "floor"): (False, False)}

#: The most input elements one table row may read (an antialiased downscale by
#: k reads about 4k): beyond it the tables would be larger than the images.
_MAX_TAPS = 4096


@maps("Resize", "Upsample")
def _resize(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    x_name = node.input[0]
    x, out = c.shape(x_name), c.shape(node.output[0])
    if len(x) != len(out):
        raise Unsupported("an output of another rank")
    mode = text(a.get("mode"), "nearest")
    transform = text(a.get("coordinate_transformation_mode"), "half_pixel")
    if node.op_type == "Upsample" or c.opset < 11:  # before coordinate modes
        transform = "asymmetric"
    nearest = text(a.get("nearest_mode"), "round_prefer_floor")
    if node.op_type == "Upsample" or c.opset < 11:
        nearest = "floor" if mode == "nearest" else nearest
    if mode not in ("nearest", "linear", "cubic", "bilinear"):
        raise Unsupported(f"mode {mode}")
    mode = "linear" if mode == "bilinear" else mode
    scales = _scales(c, node, a, x, out)
    antialias = bool(a.get("antialias", 0)) and mode != "nearest"
    exclude = bool(a.get("exclude_outside", 0))
    plain = not exclude and not (antialias and any(s < 1 for s in scales))
    if plain and _nnapi_resize(c, node, x, out, mode, transform, nearest, scales):
        return
    axes_given = [int(v) % len(x) for v in a.get("axes", range(len(x)))]
    roi = _roi(c, node, len(x), axes_given) if transform == "tf_crop_and_resize" else None
    extrapolation = float(a.get("extrapolation_value", 0.0))
    dtype = c.dtype(x_name)
    if mode != "nearest" and dtype != np.float32:
        raise Unsupported(f"{mode} resizes of {dtype} tensors")
    source, shape = c.operand(x_name), tuple(x)
    axes = [i for i in range(len(x)) if x[i] != out[i] or scales[i] != 1 or roi is not None]
    if not axes:
        c.add(OperationCode.RESHAPE, [source, c.ints(shape or (1,))], [output_of(c, node)])
        return
    for n, axis in enumerate(axes):
        window = None if roi is None else (float(roi[axis]), float(roi[axis + len(x)]))
        positions = _coordinates(transform, shape[axis], out[axis], scales[axis], window)
        target = output_of(c, node) if n == len(axes) - 1 else None
        new_shape = (*shape[:axis], out[axis], *shape[axis + 1 :])
        if mode == "nearest":
            source = _gather(c, source, shape, axis, positions, nearest, window, dtype, target)
        else:
            weights = _weights(mode, positions, shape[axis], scales[axis], a, antialias, exclude)
            source = _weighted(
                c, source, shape, axis, weights, positions, window, extrapolation, target
            )
        shape = new_shape


def _scales(c: Converter, node: onnx.NodeProto, a: dict[str, Any], x: tuple[int, ...],
            out: tuple[int, ...]) -> list[float]:  # fmt: skip
    """The scale of each axis as ONNX maps coordinates with it: the given scales, or
    output / input sizes (one common ratio under a keep-aspect-ratio policy)."""
    rank = len(x)
    if node.op_type == "Upsample":
        given = c.value(node.input[1], "scales") if len(node.input) > 1 else a.get("scales")
        return [float(s) for s in np.asarray(given, np.float64).reshape(-1)]
    axes = [int(v) % rank for v in a.get("axes", range(rank))]
    scales_name = node.input[2] if len(node.input) > 2 else ""
    sizes_name = node.input[3] if len(node.input) > 3 else ""
    result = [1.0] * rank
    if scales_name and c.value(scales_name, "scales").size:
        for axis, s in zip(axes, c.value(scales_name, "scales").astype(np.float64).reshape(-1)):
            result[axis] = float(s)
        return result
    if not sizes_name:
        raise Unsupported("neither scales nor sizes")
    sizes = c.value(sizes_name, "sizes").astype(np.int64).reshape(-1)
    policy = text(a.get("keep_aspect_ratio_policy"), "stretch")
    ratios = [float(s) / x[axis] for axis, s in zip(axes, sizes)]
    if policy == "stretch":
        for axis, r in zip(axes, ratios):
            result[axis] = r
        return result
    common = min(ratios) if policy == "not_larger" else max(ratios)
    for axis in axes:
        result[axis] = common
    return result


def _roi(c: Converter, node: onnx.NodeProto, rank: int, axes: list[int]) -> np.ndarray:
    """The crop window of every axis, starts then ends (the whole axis where not given)."""
    if len(node.input) < 2 or not node.input[1]:
        raise Unsupported("tf_crop_and_resize without a roi")
    given = c.value(node.input[1], "roi").astype(np.float64).reshape(-1)
    if given.size != 2 * len(axes):
        raise Unsupported(f"a roi of {given.size} values for {len(axes)} axes")
    roi = np.array([0.0] * rank + [1.0] * rank)
    for n, axis in enumerate(axes):
        roi[axis], roi[axis + rank] = given[n], given[n + len(axes)]
    return roi


def _nnapi_resize(c: Converter, node: onnx.NodeProto, x: tuple[int, ...], out: tuple[int, ...],
                  mode: str, transform: str, nearest: str, scales: list[float]) -> bool:  # fmt: skip
    """NNAPI's own resize for 2-D NCHW float32 where the coordinates agree (the
    scales are the size ratios); False when it does not apply."""
    if len(x) != 4 or x[:2] != out[:2] or c.dtype(node.input[0]) != np.float32:
        return False
    if any(abs(s * n - m) > 1e-6 * m for s, n, m in zip(scales[2:], x[2:], out[2:])):
        return False  # ONNX maps with the scale itself; NNAPI with the size ratio
    if mode == "linear":
        flags = _RESIZE_LINEAR.get(transform)
        code = OperationCode.RESIZE_BILINEAR
    elif mode == "nearest":
        flags = _RESIZE_NEAREST.get((transform, nearest))
        code = OperationCode.RESIZE_NEAREST_NEIGHBOR
    else:
        flags = None
    if flags is None:
        return False
    align, half = flags
    inputs = [c.operand(node.input[0]), c.i32(out[3]), c.i32(out[2]), c.boolean(True)]
    c.add(code, [*inputs, c.boolean(align), c.boolean(half)], [output_of(c, node)])
    return True


def _coordinates(transform: str, size: int, out: int, scale: float,
                 window: tuple[float, float] | None) -> np.ndarray:  # fmt: skip
    """Each output position's coordinate in the input, as ONNX's coordinate modes define it."""
    o = np.arange(out, dtype=np.float64)
    if transform == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if transform == "half_pixel_symmetric":
        adjustment = out / (scale * size)
        offset = size / 2 * (1 - adjustment)
        return offset + (o + 0.5) / scale - 0.5
    if transform == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if out > 1 else np.zeros(out)
    if transform == "align_corners":  # the resized length as the scale gives it, not rounded
        length = scale * size
        return o * (size - 1) / (length - 1) if out > 1 and length != 1 else np.zeros(out)
    if transform == "asymmetric":
        return o / scale
    if transform == "tf_half_pixel_for_nn":
        return (o + 0.5) / scale
    if transform == "tf_crop_and_resize":
        assert window is not None
        start, end = window
        if out == 1:
            return np.full(out, 0.5 * (start + end) * (size - 1))
        return start * (size - 1) + o * (end - start) * (size - 1) / (out - 1)
    raise Unsupported(f"coordinate mode {transform}")


def _outside(positions: np.ndarray, size: int, window: tuple[float, float] | None) -> np.ndarray:
    """Where tf_crop_and_resize reads outside the image (the extrapolation value)."""
    if window is None:
        return np.zeros(positions.shape, bool)
    return (positions < 0) | (positions > size - 1)


def _nearest_index(positions: np.ndarray, rule: str, size: int) -> np.ndarray:
    if rule == "round_prefer_floor":
        index = np.where(
            positions - np.floor(positions) == 0.5, np.floor(positions), np.round(positions)
        )
    elif rule == "round_prefer_ceil":
        index = np.where(
            positions - np.floor(positions) == 0.5, np.ceil(positions), np.round(positions)
        )
    elif rule == "floor":
        index = np.floor(positions)
    elif rule == "ceil":
        index = np.ceil(positions)
    else:
        raise Unsupported(f"nearest mode {rule}")
    return np.clip(index, 0, size - 1).astype(np.int32)


def _gather(c: Converter, source: int, shape: tuple[int, ...], axis: int, positions: np.ndarray,
            rule: str, window: tuple[float, float] | None, dtype: np.dtype[Any],
            out: int | None) -> int:  # fmt: skip
    new_shape = (*shape[:axis], len(positions), *shape[axis + 1 :])
    index = _nearest_index(positions, rule, shape[axis])
    if _outside(positions, shape[axis], window).any():
        raise Unsupported("nearest tf_crop_and_resize reading outside the image")
    return apply(
        c,
        OperationCode.GATHER,
        [source, c.i32(axis), c.ints(index.tolist())],
        dtype,
        new_shape,
        out,
    )


def _cubic(distance: np.ndarray, a: float) -> np.ndarray:
    """The cubic convolution kernel with coefficient ``a`` at |distance| (0 beyond 2)."""
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _weights(mode: str, positions: np.ndarray, size: int, scale: float, a: dict[str, Any],
             antialias: bool, exclude: bool) -> np.ndarray:  # fmt: skip
    """The [out, size] matrix of a linear or cubic resize along one axis: each row
    the kernel's weights at the input positions around the output's coordinate
    (stretched by 1 / scale when antialiasing a downscale), positions beyond the
    edges folded onto the edge element (or dropped with ``exclude_outside``), and
    normalised to sum to 1."""
    stretch = min(scale, 1.0) if antialias else 1.0
    reach = (1.0 if mode == "linear" else 2.0) / stretch
    if 2 * reach > _MAX_TAPS:
        raise Unsupported(f"a resize by {scale} (rows of over {_MAX_TAPS} taps)")
    coefficient = float(a.get("cubic_coeff_a", -0.75))
    matrix = np.zeros((len(positions), size), np.float64)
    support = 1.0 if mode == "linear" else 2.0
    for row, x in enumerate(positions):
        taps = np.arange(math.floor(x - reach), math.ceil(x + reach) + 1)
        taps = taps[np.abs(taps - x) * stretch < support]
        distance = (taps - x) * stretch
        if mode == "linear":
            kernel = np.clip(1 - np.abs(distance), 0, 1)
        else:
            kernel = _cubic(distance, coefficient)
        if exclude:
            kernel = np.where((taps >= 0) & (taps < size), kernel, 0.0)
        total = kernel.sum()
        if total == 0:
            continue
        kernel = kernel / total if (antialias or exclude) else kernel
        np.add.at(matrix[row], np.clip(taps, 0, size - 1), kernel)
    return matrix


def _weighted(c: Converter, source: int, shape: tuple[int, ...], axis: int, weights: np.ndarray,
              positions: np.ndarray, window: tuple[float, float] | None, extrapolation: float,
              out: int | None) -> int:  # fmt: skip
    """``weights`` [new, size] applied along ``axis``: the axis moved last, FULLY_CONNECTED
    over the rows, moved back; extrapolated positions take ``extrapolation``."""
    f32 = np.dtype(np.float32)
    rank = len(shape)
    outside = _outside(positions, shape[axis], window)
    weights = np.where(outside[:, None], 0.0, weights)
    new = len(positions)
    order = [i for i in range(rank) if i != axis] + [axis]
    moved_shape = tuple(shape[i] for i in order)
    moved = source if axis == rank - 1 else permuted(c, source, shape, order)
    rows = math.prod(moved_shape[:-1])
    flat = reshaped(c, moved, f32, moved_shape, (rows, shape[axis]))
    bias = np.where(outside, np.float32(extrapolation), np.float32(0)).astype(np.float32)
    inputs = [flat, c.floats(weights.astype(np.float32)), c.floats(bias), c.i32(FuseCode.NONE)]
    product = apply(c, OperationCode.FULLY_CONNECTED, inputs, f32, (rows, new))
    result_moved = (*moved_shape[:-1], new)
    result_shape = (*shape[:axis], new, *shape[axis + 1 :])
    if axis == rank - 1:
        if out is not None:
            c.add(OperationCode.RESHAPE, [product, c.ints(result_shape)], [out])
            return out
        return reshaped(c, product, f32, (rows, new), result_shape)
    unflat = reshaped(c, product, f32, (rows, new), result_moved)
    back = [order.index(i) for i in range(rank)]
    if out is not None:
        c.add(OperationCode.TRANSPOSE, [unflat, c.ints(back)], [out])
        return out
    return permuted(c, unflat, result_moved, back)
