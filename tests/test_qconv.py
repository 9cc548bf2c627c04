"""The int32 quantized convolution kernels (csrc/qconv.c) against numpy.

The reference pads with the input's zero point, builds im2col rows in
int64, multiplies, and requantizes with ``common``'s numpy fixed-point steps
(the ones the float route uses): every path must give the same bytes.
Shapes come from a seeded generator, so a failure names a reproducible case;
they cover channel counts off the 16-channel tile, pixel counts off the
4-pixel tile, paddings, strides, dilations, per-channel and per-tensor
multipliers with left and right shifts, and zero points at the extremes.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest

from nnburst._bindings.qconv import (
    PATH_BEST,
    PATH_PORTABLE,
    NotExactError,
    QuantConv,
    available_paths,
    vector_path,
)
from nnburst.codes import FuseCode, PaddingCode
from nnburst.codes import OperandCode as T
from nnburst.codes import OperationCode as Op
from nnburst.cpu import plan as cpu_plan
from nnburst.cpu.executor import PreparedModel
from nnburst.cpu.ops import conv, fixed_point, fully_connected
from nnburst.cpu.ops.window_geometry import Window2D
from nnburst.errors import BadDataError
from nnburst.operands import ChannelQuant, OperandInfo

from .op_models import model

PATHS = available_paths()
RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


@pytest.fixture
def unplanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-operation model is one C plan (the plan's conv steps are compared in
    test_cpu_plan*); these tests count the operation's own bound kernel, so no
    run is planned while they prepare."""
    monkeypatch.setattr(cpu_plan, "MIN_RUN", 1 << 30)


def reference(x, weights, filter_hw, bias, requant, win, in_zp, out_type, bounds, depthwise=False):
    """x [N, H, W, C]; weights [FH*FW*C, O] (zero point removed), or [FH*FW, C]
    ``depthwise`` -> [N, OH, OW, O]."""
    n, h, w, c = x.shape
    fh, fw = filter_hw
    padded = np.full(
        (n, h + win.pad_top + win.pad_bottom, w + win.pad_left + win.pad_right, c),
        in_zp,
        np.int64,
    )
    padded[:, win.pad_top : win.pad_top + h, win.pad_left : win.pad_left + w] = x
    rows = np.empty((n, win.out_h, win.out_w, fh, fw, c), np.int64)
    for i in range(fh):
        for j in range(fw):
            y0, x0 = i * win.dilation_h, j * win.dilation_w
            rows[:, :, :, i, j] = padded[
                :,
                y0 : y0 + (win.out_h - 1) * win.stride_h + 1 : win.stride_h,
                x0 : x0 + (win.out_w - 1) * win.stride_w + 1 : win.stride_w,
            ]
    if depthwise:
        taps = (rows.reshape(-1, fh * fw, c) - in_zp) * weights.astype(np.int64)
        acc = taps.sum(axis=1)
    else:
        acc = (rows.reshape(-1, fh * fw * c) - in_zp) @ weights.astype(np.int64)
    acc += bias
    scaled = fixed_point.multiply_by_quantized_multiplier(acc, *requant) + out_type[1]
    out = np.clip(scaled, *bounds).astype(out_type[0])
    return out.reshape(n, win.out_h, win.out_w, -1)


def random_layer(rng: np.random.Generator) -> dict[str, Any]:
    """A random layer and input whose windows fit (padding included)."""
    while True:
        fh, fw = rng.integers(1, 5, 2)
        sh, sw = rng.integers(1, 4, 2)
        dh, dw = rng.integers(1, 3, 2)
        pads = rng.integers(0, 3, 4)
        n, h, w = rng.integers(1, 3), rng.integers(1, 12), rng.integers(1, 12)
        out_h = (h + pads[0] + pads[1] - (fh - 1) * dh - 1) // sh + 1
        out_w = (w + pads[2] + pads[3] - (fw - 1) * dw - 1) // sw + 1
        if out_h >= 1 and out_w >= 1:
            break
    c = int(rng.choice([1, 2, 3, 5, 8, 16, 17, 31]))
    o = int(rng.choice([1, 3, 8, 15, 16, 17, 32, 33, 40]))
    in_dtype = np.dtype(rng.choice([np.uint8, np.int8]))
    out_dtype = np.dtype(rng.choice([np.uint8, np.int8]))
    in_lo, in_hi = RANGES[in_dtype]
    out_lo, out_hi = RANGES[out_dtype]
    in_zp = int(rng.choice([in_lo, in_hi, rng.integers(in_lo, in_hi + 1)]))
    out_zp = int(rng.choice([out_lo, out_hi, rng.integers(out_lo, out_hi + 1)]))
    k = int(fh * fw * c)
    w_lo, w_hi = [(-127, 127), (-255, 255), (-128, 127)][rng.integers(0, 3)]
    weights = rng.integers(w_lo, w_hi + 1, (k, o))
    bias = rng.integers(-(2**14), 2**14, o)
    channels = o if rng.integers(0, 2) else 1
    # scales from tiny to above 1, so both right and left shifts occur
    pairs = [
        fixed_point.quantize_multiplier(float(s)) for s in 10.0 ** rng.uniform(-5, 0.7, channels)
    ]
    requant = (np.array([m for m, _ in pairs]), np.array([s for _, s in pairs]))
    lo = int(rng.integers(out_lo, out_hi + 1)) if rng.integers(0, 3) == 0 else out_lo
    hi = int(rng.integers(lo, out_hi + 1)) if rng.integers(0, 3) == 0 else out_hi
    win = Window2D(*map(int, pads), int(sh), int(sw), int(dh), int(dw), int(out_h), int(out_w))
    x = rng.integers(in_lo, in_hi + 1, (n, h, w, c)).astype(in_dtype)
    return {
        "x": x,
        "weights": weights,
        "filter_hw": (int(fh), int(fw)),
        "bias": bias,
        "requant": requant,
        "win": win,
        "in_type": (in_dtype, in_zp),
        "out_type": (out_dtype, out_zp),
        "bounds": (lo, hi),
    }


def depthwise_layer(rng: np.random.Generator) -> dict[str, Any]:
    """A random depthwise layer: ``random_layer`` with one filter per channel."""
    case = random_layer(rng)
    c = int(rng.choice([1, 3, 8, 15, 16, 17, 24, 33, 40]))
    case["x"] = case["x"][..., :1].repeat(c, axis=3)
    case["x"][...] = rng.integers(*RANGES[case["x"].dtype], case["x"].shape, endpoint=True)
    fh, fw = case["filter_hw"]
    case["weights"] = rng.integers(-255, 256, (fh * fw, c))
    case["bias"] = rng.integers(-(2**14), 2**14, c)
    case["requant"] = tuple(np.resize(a, c) if a.size > 1 else a for a in case["requant"])
    case["depthwise"] = True
    return case


def layer(case: dict[str, Any], path: int) -> QuantConv:
    x = case["x"]
    return QuantConv(
        x.shape[1:],
        case["weights"],
        case["filter_hw"],
        case["bias"],
        case["requant"],
        case["win"],
        case["in_type"],
        case["out_type"],
        case["bounds"],
        path,
        case.get("depthwise", False),
    )


def expected(case: dict[str, Any]) -> np.ndarray:
    return reference(
        case["x"],
        case["weights"],
        case["filter_hw"],
        case["bias"],
        case["requant"],
        case["win"],
        case["in_type"][1],
        case["out_type"],
        case["bounds"],
        case.get("depthwise", False),
    )


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(40))
def test_random_layers_match_numpy(path: int, seed: int) -> None:
    case = random_layer(np.random.default_rng(seed))
    np.testing.assert_array_equal(layer(case, path)(case["x"]), expected(case))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(40))
def test_random_depthwise_layers_match_numpy(path: int, seed: int) -> None:
    case = depthwise_layer(np.random.default_rng(500 + seed))
    np.testing.assert_array_equal(layer(case, path)(case["x"]), expected(case))


@pytest.mark.parametrize("seed", range(10))
def test_paths_agree_on_larger_layers(seed: int) -> None:
    """Every path against the portable one on layers of a small CNN's size."""
    rng = np.random.default_rng(1000 + seed)
    case = random_layer(rng)
    c, o = int(rng.integers(1, 70)), int(rng.integers(1, 70))
    h, w = int(rng.integers(3, 20)), int(rng.integers(3, 20))
    case["x"] = rng.integers(-128, 128, (1, h, w, c)).astype(np.int8)
    case["in_type"] = (np.dtype(np.int8), int(rng.integers(-128, 128)))
    case["weights"] = rng.integers(-127, 128, (9 * c, o))
    case["filter_hw"] = (3, 3)
    case["win"] = Window2D(1, 1, 1, 1, 1, 1, 1, 1, h, w)
    case["bias"] = rng.integers(-(2**16), 2**16, o)
    case["requant"] = tuple(a[:1] for a in case["requant"])
    want = layer(case, PATH_PORTABLE)(case["x"])
    np.testing.assert_array_equal(want, expected(case))
    for path in PATHS:
        np.testing.assert_array_equal(layer(case, path)(case["x"]), want)


@pytest.mark.parametrize("path", PATHS)
def test_fully_connected_rows(path: int) -> None:
    """A fully connected layer: 1x1 pixels, every row a batch."""
    rng = np.random.default_rng(7)
    for rows, k, units in ((1, 1, 1), (3, 100, 10), (5, 257, 33), (9, 64, 16)):
        case = random_layer(rng)
        case["x"] = rng.integers(-128, 128, (rows, 1, 1, k)).astype(np.int8)
        case["in_type"] = (np.dtype(np.int8), -128)
        case["weights"] = rng.integers(-127, 128, (k, units))
        case["bias"] = rng.integers(-1000, 1000, units)
        case["requant"] = tuple(a[:1] for a in case["requant"])
        case["filter_hw"] = (1, 1)
        case["win"] = Window2D(0, 0, 0, 0, 1, 1, 1, 1, 1, 1)
        fc = QuantConv(
            (1, 1, k), case["weights"], (1, 1), case["bias"], case["requant"], None,
            case["in_type"], case["out_type"], case["bounds"], path,
        )  # fmt: skip
        np.testing.assert_array_equal(fc(case["x"]), expected(case))


@pytest.mark.parametrize("path", PATHS)
def test_sums_at_the_int32_limit(path: int) -> None:
    """Weights whose largest sum plus bias is just inside int32 are exact (the
    requantization's left shift saturating too); one step past is refused."""
    k, o = 2048, 17
    weights = np.full((k, o), 255)
    weights[:, ::2] = -255
    bias = np.full(o, 2**31 - 1 - 255 * 255 * k)
    x = np.full((1, 1, 1, k), 255, np.uint8)
    case = {
        "x": x,
        "weights": weights,
        "filter_hw": (1, 1),
        "bias": bias,
        "requant": (np.array([2**30 + 12345]), np.array([3])),
        "win": Window2D(0, 0, 0, 0, 1, 1, 1, 1, 1, 1),
        "in_type": (np.dtype(np.uint8), 0),
        "out_type": (np.dtype(np.int8), 5),
        "bounds": (-128, 127),
    }
    np.testing.assert_array_equal(layer(case, path)(x), expected(case))
    case["bias"] = bias + 1
    with pytest.raises(NotExactError):
        layer(case, path)


def test_refuses_what_it_cannot_compute_exactly() -> None:
    rng = np.random.default_rng(3)
    case = random_layer(rng)
    case["weights"] = case["weights"] * 0 + 40000  # beyond int16
    with pytest.raises(NotExactError):
        layer(case, PATH_BEST)
    case = random_layer(rng)
    case["requant"] = (case["requant"][0], case["requant"][1] * 0 + 31)  # shift beyond 30
    with pytest.raises(NotExactError):
        layer(case, PATH_BEST)


def test_bad_input_is_a_clear_error() -> None:
    case = random_layer(np.random.default_rng(4))
    conv = layer(case, PATH_BEST)
    with pytest.raises(BadDataError, match="prepared for"):
        conv(case["x"][..., :-1] if case["x"].shape[-1] > 1 else case["x"].astype(np.int16))
    with pytest.raises(BadDataError, match="quantized conv weights"):
        case["weights"] = case["weights"][:-1]
        layer(case, PATH_BEST)


# ------------------------------------------- the operations bind the kernels


def _scalar(value: int) -> tuple[OperandInfo, np.ndarray]:
    return OperandInfo(T.INT32, ()), np.int32(value)


def _operation_models() -> list[tuple[str, Any, np.ndarray]]:
    """Quantized CONV_2D, DEPTHWISE_CONV_2D (per-channel int8 filters) and
    FULLY_CONNECTED (uint8) one-operation models, with an input each."""
    rng = np.random.default_rng(21)
    x_info = OperandInfo(T.TENSOR_QUANT8_ASYMM_SIGNED, (1, 9, 7, 5), 0.05, -7)
    x = rng.integers(-128, 128, (1, 9, 7, 5)).astype(np.int8)
    cases = []
    for depthwise in (False, True):
        o = 5 if depthwise else 19
        dims = (1, 3, 3, o) if depthwise else (o, 3, 3, 5)
        scales = tuple(float(s) for s in rng.uniform(0.001, 0.02, o))
        w_info = OperandInfo(
            T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
            dims,
            channel_quant=ChannelQuant(3 if depthwise else 0, scales),
        )
        w = rng.integers(-127, 128, dims).astype(np.int8)
        b_info = OperandInfo(T.TENSOR_INT32, (o,), 0.0)
        b = rng.integers(-3000, 3000, o).astype(np.int32)
        out = OperandInfo(T.TENSOR_QUANT8_ASYMM_SIGNED, (1, 5, 4, o), 0.03, 4)
        extra = [_scalar(1)] if depthwise else []  # depth multiplier
        ins = [x_info, (w_info, w), (b_info, b), _scalar(PaddingCode.SAME), _scalar(2), _scalar(2),
               *extra, _scalar(FuseCode.RELU6)]  # fmt: skip
        code = Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D
        cases.append((code.name, model(code, ins, [out]), x))
    fc_in = OperandInfo(T.TENSOR_QUANT8_ASYMM, (3, 40), 0.1, 131)
    w_info = OperandInfo(T.TENSOR_QUANT8_ASYMM, (11, 40), 0.01, 120)
    b_info = OperandInfo(T.TENSOR_INT32, (11,), 0.001)
    ins = [fc_in, (w_info, rng.integers(0, 256, (11, 40)).astype(np.uint8)),
           (b_info, rng.integers(-900, 900, 11).astype(np.int32)), _scalar(FuseCode.NONE)]  # fmt: skip
    out = OperandInfo(T.TENSOR_QUANT8_ASYMM, (3, 11), 0.2, 100)
    fc_x = rng.integers(0, 256, (3, 40)).astype(np.uint8)
    cases.append(("FULLY_CONNECTED", model(Op.FULLY_CONNECTED, ins, [out]), fc_x))
    return cases


@pytest.mark.skipif(
    not vector_path(), reason="the operations bind the kernels on a vector path only"
)
@pytest.mark.parametrize("case", _operation_models(), ids=lambda c: c[0])
def test_operations_run_the_kernels_and_match_the_float_route(case: Any, unplanned: None) -> None:
    """A prepared quantized convolution, depthwise convolution and fully
    connected layer run QuantConv, and give the float route's bytes."""
    _, hal_model, x = case
    calls = []
    original = QuantConv.__call__

    def counted(self: QuantConv, value: np.ndarray) -> np.ndarray:
        calls.append(value.shape)
        return original(self, value)

    with mock.patch.object(QuantConv, "__call__", counted):
        (got,) = PreparedModel(hal_model).run([x])
    assert calls
    with (
        mock.patch.object(conv, "_int32_kernel", return_value=None),
        mock.patch.object(fully_connected, "_int32_kernel", return_value=None),
    ):
        (want,) = PreparedModel(hal_model).run([x])
    np.testing.assert_array_equal(got, want)
    assert len(calls) == 1
