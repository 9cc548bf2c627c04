"""The packed float32 convolution kernels (csrc/fconv.c via _bindings/fconv.py).

Every path this CPU runs against a float64 numpy convolution over random
layers: paddings, strides, dilations, channel counts under and off the
16-channel tile, pixel counts off the 6-pixel tile, batches, fully
connected rows and every fused clamp.  Inputs and weights that are
multiples of 1/4 make every sum exact in float32, so those must match
exactly; real-valued ones to float32 rounding.  Then CONV_2D bound by the
CPU driver: the packed kernel where ``float_route`` picks it, with the
result of the route it replaced.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest

from nnburst._bindings.fconv import FloatConv, available_paths, vector_path
from nnburst.codes import FuseCode, PaddingCode
from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.cpu import plan as cpu_plan
from nnburst.cpu.executor import PreparedModel
from nnburst.cpu.ops import conv
from nnburst.cpu.ops.fused_activation import FLOAT_ACTIVATION_BOUNDS
from nnburst.cpu.ops.window_geometry import Window2D
from nnburst.errors import BadDataError
from nnburst.operands import OperandInfo

from .op_models import model

PATHS = available_paths()


@pytest.fixture
def unplanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-operation model is one C plan (the plan's conv steps are compared in
    test_cpu_plan*); these tests count the operation's own bound kernel, so no
    run is planned while they prepare."""
    monkeypatch.setattr(cpu_plan, "MIN_RUN", 1 << 30)


def reference(x, weights, filter_hw, bias, win, bounds):
    """x [N, H, W, C]; weights [FH*FW*C, O] -> [N, OH, OW, O] in float64, then clamped."""
    n, h, w, c = x.shape
    fh, fw = filter_hw
    padded = np.zeros((n, h + win.pad_top + win.pad_bottom, w + win.pad_left + win.pad_right, c))
    padded[:, win.pad_top : win.pad_top + h, win.pad_left : win.pad_left + w] = x
    rows = np.empty((n, win.out_h, win.out_w, fh, fw, c))
    for i in range(fh):
        for j in range(fw):
            y0, x0 = i * win.dilation_h, j * win.dilation_w
            rows[:, :, :, i, j] = padded[
                :,
                y0 : y0 + (win.out_h - 1) * win.stride_h + 1 : win.stride_h,
                x0 : x0 + (win.out_w - 1) * win.stride_w + 1 : win.stride_w,
            ]
    acc = rows.reshape(-1, fh * fw * c) @ weights.astype(np.float64) + bias
    out = np.minimum(np.maximum(acc.astype(np.float32), bounds[0]), bounds[1])
    return out.reshape(n, win.out_h, win.out_w, -1)


def random_layer(rng: np.random.Generator, quarters: bool) -> dict[str, Any]:
    """A random layer and input whose windows fit their padded input."""
    fh, fw = (int(v) for v in rng.integers(1, 6, 2))
    sh, sw, dh, dw = (int(v) for v in rng.integers(1, 3, 4))
    h, w = int(rng.integers(1 + (fh - 1) * dh, 14)), int(rng.integers(1 + (fw - 1) * dw, 14))
    c, o = int(rng.integers(1, 40)), int(rng.integers(1, 45))
    top, bottom, left, right = (int(v) for v in rng.integers(0, 3, 4))
    out_h = (h + top + bottom - (fh - 1) * dh - 1) // sh + 1
    out_w = (w + left + right - (fw - 1) * dw - 1) // sw + 1
    win = Window2D(top, bottom, left, right, sh, sw, dh, dw, out_h, out_w)
    shape_w, shape_x = (fh * fw * c, o), (int(rng.integers(1, 3)), h, w, c)
    if quarters:  # every sum exact in float32, whatever the order
        make = lambda shape: (rng.integers(-12, 13, shape) / 4).astype(np.float32)  # noqa: E731
    else:
        make = lambda shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    bounds = FLOAT_ACTIVATION_BOUNDS[int(rng.choice(list(FLOAT_ACTIVATION_BOUNDS)))]
    return {"x": make(shape_x), "weights": make(shape_w), "filter_hw": (fh, fw),
            "bias": make((o,)), "win": win, "bounds": bounds}  # fmt: skip


def run(case: dict[str, Any], path: int) -> np.ndarray:
    x = case["x"]
    layer = FloatConv(x.shape[1:], case["weights"], case["filter_hw"], case["bias"], case["win"],
                      case["bounds"], path)  # fmt: skip
    return layer(x)


def expected(case: dict[str, Any]) -> np.ndarray:
    return reference(*(case[k] for k in ("x", "weights", "filter_hw", "bias", "win", "bounds")))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(40))
def test_exact_sums_match_numpy_exactly(path: int, seed: int) -> None:
    case = random_layer(np.random.default_rng(seed), quarters=True)
    np.testing.assert_array_equal(run(case, path), expected(case))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(20))
def test_real_values_match_numpy_to_float32_rounding(path: int, seed: int) -> None:
    case = random_layer(np.random.default_rng(100 + seed), quarters=False)
    np.testing.assert_allclose(run(case, path), expected(case), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("path", PATHS)
def test_fully_connected_rows(path: int) -> None:
    """The 1x1 case with no window: rows of a batch, 13 (two tiles of 6 and one)."""
    rng = np.random.default_rng(5)
    x = (rng.integers(-8, 9, (13, 1, 1, 70)) / 4).astype(np.float32)
    weights = (rng.integers(-8, 9, (70, 33)) / 4).astype(np.float32)
    bias = (rng.integers(-8, 9, 33) / 4).astype(np.float32)
    got = FloatConv((1, 1, 70), weights, (1, 1), bias, None, (-1.0, 1.0), path)(x)
    want = np.clip(x.reshape(13, 70).astype(np.float64) @ weights + bias, -1, 1)
    np.testing.assert_array_equal(got.reshape(13, 33), want.astype(np.float32))


@pytest.mark.parametrize("path", PATHS)
def test_nan_goes_through_the_clamp(path: int) -> None:
    """NaN stays NaN under RELU6, as numpy's maximum and minimum keep it."""
    x = np.ones((1, 4, 4, 3), np.float32)
    x[0, 2, 1, 0] = np.nan
    win = Window2D(0, 0, 0, 0, 1, 1, 1, 1, 4, 4)
    out = FloatConv((4, 4, 3), np.ones((3, 20), np.float32), (1, 1), np.zeros(20, np.float32),
                    win, (0.0, 6.0), path)(x)  # fmt: skip
    assert np.isnan(out[0, 2, 1]).all()
    assert (out[0, 0, 0] == 3).all()


def test_bad_input_is_a_clear_error() -> None:
    win = Window2D(0, 0, 0, 0, 1, 1, 1, 1, 4, 4)
    layer = FloatConv((4, 4, 3), np.ones((3, 8), np.float32), (1, 1), np.zeros(8, np.float32),
                      win, (0.0, 6.0))  # fmt: skip
    with pytest.raises(BadDataError, match="float conv prepared"):
        layer(np.ones((1, 4, 4, 2), np.float32))
    with pytest.raises(BadDataError, match="weights"):
        FloatConv((4, 4, 3), np.ones((4, 8), np.float32), (1, 1), np.zeros(8, np.float32), win,
                  (0.0, 6.0))  # fmt: skip
    with pytest.raises(BadDataError, match="invalid layer"):
        FloatConv((4, 4, 3), np.ones((3, 8), np.float32), (1, 1), np.zeros(8, np.float32), win,
                  (6.0, 0.0))  # fmt: skip


def _scalar(value: int) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.INT32, ()), np.int32(value)


def _conv_model(rng: np.random.Generator, c: int, o: int, fh: int, stride: int, fuse: int) -> Any:
    x_info = OperandInfo(T.TENSOR_FLOAT32, (1, 11, 9, c))
    w_info = OperandInfo(T.TENSOR_FLOAT32, (o, fh, fh, c))
    b_info = OperandInfo(T.TENSOR_FLOAT32, (o,))
    w = rng.standard_normal((o, fh, fh, c)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    out_h, out_w = -(-11 // stride), -(-9 // stride)
    out = OperandInfo(T.TENSOR_FLOAT32, (1, out_h, out_w, o))
    ins = [x_info, (w_info, w), (b_info, b), _scalar(PaddingCode.SAME), _scalar(stride),
           _scalar(stride), _scalar(fuse)]  # fmt: skip
    return model(Op.CONV_2D, ins, [out])


@pytest.mark.skipif(not vector_path(), reason="the operation binds the kernel on a vector path")
@pytest.mark.parametrize(
    ("c", "o", "fh", "stride", "fuse"),
    [(24, 28, 1, 1, FuseCode.NONE), (16, 40, 3, 2, FuseCode.RELU6), (37, 19, 5, 1, FuseCode.RELU),
     (8, 5, 3, 1, FuseCode.RELU1)],
)  # fmt: skip
def test_conv_2d_runs_the_packed_kernel_and_matches_the_old_route(
    c: int, o: int, fh: int, stride: int, fuse: int, unplanned: None
) -> None:
    rng = np.random.default_rng(c * o)
    hal_model = _conv_model(rng, c, o, fh, stride, fuse)
    x = rng.standard_normal((1, 11, 9, c)).astype(np.float32)
    calls = []
    original = FloatConv.__call__

    def counted(self: FloatConv, value: np.ndarray) -> np.ndarray:
        calls.append(value.shape)
        return original(self, value)

    with mock.patch.object(FloatConv, "__call__", counted):
        (got,) = PreparedModel(hal_model).run([x])
    assert len(calls) == 1
    with mock.patch.object(conv, "float_route", return_value="nnb_conv_f32"):
        (want,) = PreparedModel(hal_model).run([x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_float_route_keeps_narrow_layers_off_the_packed_kernel() -> None:
    """A score head of 2 channels and a dilated first layer on 3 input channels
    keep the routes that won them (bench/bench_fconv.py); an undilated first
    layer runs packed, a filter row a tap."""
    win = Window2D(0, 0, 0, 0, 1, 1, 1, 1, 8, 8)
    dilated = Window2D(0, 0, 0, 0, 1, 1, 1, 2, 8, 8)
    weights = np.zeros((96, 16), np.float32)
    head = conv._Filter(weights, 1, 1, 2, None)
    wide = conv._Filter(weights, 1, 1, 16, None)
    first = conv._Filter(np.zeros((75, 32), np.float32), 5, 5, 32, None)
    assert conv.float_route(head, (1, 8, 8, 96), win) != "fconv"
    assert conv.float_route(first, (1, 8, 8, 3), dilated) == "nnb_conv_f32"
    packed = "fconv" if vector_path() else "nnb_conv_f32"
    assert conv.float_route(first, (1, 8, 8, 3), win) == packed
    assert conv.float_route(wide, (1, 8, 8, 96), win) == ("fconv" if vector_path() else "sgemm")


def random_depthwise(rng: np.random.Generator) -> dict[str, Any]:
    """A depthwise layer, mostly of the shapes the register loop takes."""
    common = rng.random() < 0.75
    fh = fw = int(rng.choice([3, 5])) if common else int(rng.integers(1, 6))
    s = int(rng.integers(1, 3))
    d = 1 if common else int(rng.integers(1, 3))
    h, w = int(rng.integers(1 + (fh - 1) * d, 14)), int(rng.integers(1 + (fw - 1) * d, 22))
    c = int(rng.integers(1, 40))
    top, bottom, left, right = (int(v) for v in rng.integers(0, 3, 4))
    out_h = (h + top + bottom - (fh - 1) * d - 1) // s + 1
    out_w = (w + left + right - (fw - 1) * d - 1) // s + 1
    win = Window2D(top, bottom, left, right, s, s, d, d, out_h, out_w)
    quarters = lambda shape: (rng.integers(-12, 13, shape) / 4).astype(np.float32)  # noqa: E731
    bounds = FLOAT_ACTIVATION_BOUNDS[int(rng.choice(list(FLOAT_ACTIVATION_BOUNDS)))]
    return {"x": quarters((int(rng.integers(1, 3)), h, w, c)), "weights": quarters((fh * fw, c)),
            "filter_hw": (fh, fw), "bias": quarters((c,)), "win": win, "bounds": bounds}  # fmt: skip


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(40))
def test_depthwise_matches_numpy_exactly(path: int, seed: int) -> None:
    case = random_depthwise(np.random.default_rng(300 + seed))
    x, weights, (fh, fw) = case["x"], case["weights"], case["filter_hw"]
    c = x.shape[3]
    layer = FloatConv(x.shape[1:], weights, (fh, fw), case["bias"], case["win"], case["bounds"],
                      path, depthwise=True)  # fmt: skip
    got = layer(x)
    # each channel alone is a convolution of one input channel to one output
    for ch in range(c):
        one = reference(x[..., ch : ch + 1], weights[:, ch : ch + 1], (fh, fw),
                        case["bias"][ch : ch + 1], case["win"], case["bounds"])  # fmt: skip
        np.testing.assert_array_equal(got[..., ch : ch + 1], one)


def _depthwise_model(rng: np.random.Generator, c: int, fh: int, stride: int) -> Any:
    x_info = OperandInfo(T.TENSOR_FLOAT32, (1, 13, 17, c))
    w_info = OperandInfo(T.TENSOR_FLOAT32, (1, fh, fh, c))
    b_info = OperandInfo(T.TENSOR_FLOAT32, (c,))
    w = rng.standard_normal((1, fh, fh, c)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    out = OperandInfo(T.TENSOR_FLOAT32, (1, -(-13 // stride), -(-17 // stride), c))
    ins = [x_info, (w_info, w), (b_info, b), _scalar(PaddingCode.SAME), _scalar(stride),
           _scalar(stride), _scalar(1), _scalar(FuseCode.RELU6)]  # fmt: skip
    return model(Op.DEPTHWISE_CONV_2D, ins, [out])


@pytest.mark.skipif(not vector_path(), reason="the operation binds the kernel on a vector path")
@pytest.mark.parametrize(("c", "fh"), [(24, 3), (37, 5), (8, 3)])
def test_depthwise_conv_2d_runs_the_packed_kernel_and_matches_the_old_route(
    c: int, fh: int, unplanned: None
) -> None:
    rng = np.random.default_rng(c)
    hal_model = _depthwise_model(rng, c, fh, 1)
    x = rng.standard_normal((1, 13, 17, c)).astype(np.float32)
    calls = []
    original = FloatConv.__call__

    def counted(self: FloatConv, value: np.ndarray) -> np.ndarray:
        calls.append(value.shape)
        return original(self, value)

    with mock.patch.object(FloatConv, "__call__", counted):
        (got,) = PreparedModel(hal_model).run([x])
    assert len(calls) == 1
    with mock.patch.object(conv, "depthwise_route", return_value="nnb_depthwise_conv_f32"):
        (want,) = PreparedModel(hal_model).run([x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_depthwise_route_keeps_strided_odd_depths_and_other_shapes_on_kernels_c() -> None:
    """Stride 1 (any width and depth) and stride 2 over whole vectors of 8
    channels run packed; stride 2 over other depths, a dilated or a 7-wide
    layer keep kernels.c's loop."""
    one = Window2D(1, 1, 1, 1, 1, 1, 1, 1, 8, 8)
    two = Window2D(1, 1, 1, 1, 2, 2, 1, 1, 4, 4)
    dilated = Window2D(2, 2, 2, 2, 1, 1, 2, 2, 8, 8)
    packed = "fdwconv" if vector_path() else "nnb_depthwise_conv_f32"
    old = "nnb_depthwise_conv_f32"
    assert conv.depthwise_route((1, 8, 8, 60), one, (3, 3)) == packed
    assert conv.depthwise_route((1, 8, 8, 256), one, (5, 5)) == packed
    narrow = Window2D(1, 1, 1, 1, 1, 1, 1, 1, 4, 4)
    assert conv.depthwise_route((1, 4, 4, 64), narrow, (3, 3)) == packed
    assert conv.depthwise_route((1, 8, 8, 64), two, (3, 3)) == packed
    assert conv.depthwise_route((1, 8, 8, 60), two, (3, 3)) == old
    assert conv.depthwise_route((1, 8, 8, 64), dilated, (3, 3)) == old
    assert conv.depthwise_route((1, 8, 8, 64), one, (7, 7)) == old


def test_float_route_keeps_a_few_pixels_off_the_packed_kernel() -> None:
    filt = conv._Filter(np.zeros((512, 224), np.float32), 2, 2, 213, None)
    one_pixel = Window2D(0, 0, 0, 0, 1, 1, 1, 1, 1, 1)
    four = Window2D(0, 0, 0, 0, 1, 1, 1, 1, 2, 2)
    assert conv.float_route(filt, (1, 2, 2, 128), one_pixel) == "nnb_conv_f32"
    assert conv.float_route(filt, (4, 2, 2, 128), one_pixel) == (
        "fconv" if vector_path() else "nnb_conv_f32"
    )
    assert conv.float_route(filt, (1, 3, 3, 128), four) == (
        "fconv" if vector_path() else "nnb_conv_f32"
    )
