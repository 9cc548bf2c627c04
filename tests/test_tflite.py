"""nnburst.tflite: TFLite models converted to NNAPI operations, checked against LiteRT.

Each synthetic model is one operator (or a few) built with the schema's object
API; LiteRT runs the same bytes and its outputs are the expected ones.  Float
outputs must match within the CTS's relaxed tolerance, quantized ones within 1.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import nnburst as nn
from nnburst import tflite
from nnburst.errors import BadDataError
from nnburst.service import remote
from nnburst.tflite import reader as tflite_reader

from .peers import REPO
from .test_service import healthy_service

pytest.importorskip("ai_edge_litert", reason="LiteRT (pip install '.[litert]') is the reference")

from .tflite_builder import (
    Tensor,
    graph,
    options,
    repack,
    run_litert,
    run_litert_calls,
    schema,
    single_op,
    sparse,
)

RNG = np.random.default_rng(7)
F32 = np.float32
ACT = schema.ActivationFunctionType


def rand(*shape: int, lo: float = -2, hi: float = 2) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(F32)


def conv_options(
    padding: int = schema.Padding.SAME, stride: int = 1, act: int = ACT.NONE, dilation: int = 1
) -> Any:
    return options(
        schema.Conv2DOptionsT, padding=padding, strideW=stride, strideH=stride,
        fusedActivationFunction=act, dilationWFactor=dilation, dilationHFactor=dilation,
    )  # fmt: skip


def compare(model: bytes, inputs: list[np.ndarray], quantized: bool = False, **runner: Any) -> None:
    want = run_litert(model, inputs)
    with tflite.Runner(model, cache_dir=None, **runner) as run:
        got = run(*inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        if quantized:
            assert np.abs(g.astype(np.int32) - w.astype(np.int32)).max(initial=0) <= 1
        elif w.dtype == np.bool_ or np.issubdtype(w.dtype, np.integer):
            np.testing.assert_array_equal(g, w.astype(g.dtype))
        else:
            np.testing.assert_allclose(g, w, rtol=5e-3, atol=5e-3)  # CTS relaxed float32


# -- one operator each ------------------------------------------------------------------------

x4 = Tensor((1, 6, 6, 3), F32)


def _conv_case(
    padding: int, stride: int, act: int, dilation: int = 1
) -> tuple[bytes, list[np.ndarray]]:
    w = Tensor((4, 3, 3, 3), F32, rand(4, 3, 3, 3))
    b = Tensor((4,), F32, rand(4))
    out_size = {
        schema.Padding.SAME: -(-6 // stride),
        schema.Padding.VALID: (6 - 2 * dilation - 1) // stride + 1,
    }[padding]
    out = Tensor((1, out_size, out_size, 4), F32)
    return single_op("CONV_2D", [x4, w, b], [out], conv_options(padding, stride, act, dilation)), [
        rand(1, 6, 6, 3)
    ]


def _depthwise_case(multiplier: int) -> tuple[bytes, list[np.ndarray]]:
    w = Tensor((1, 3, 3, 3 * multiplier), F32, rand(1, 3, 3, 3 * multiplier))
    o = options(schema.DepthwiseConv2DOptionsT, padding=schema.Padding.VALID, strideW=1, strideH=1,
                depthMultiplier=multiplier, fusedActivationFunction=ACT.RELU6,
                dilationWFactor=1, dilationHFactor=1)  # fmt: skip
    b = Tensor((3 * multiplier,), F32, rand(3 * multiplier))
    return single_op(
        "DEPTHWISE_CONV_2D", [x4, w, b], [Tensor((1, 4, 4, 3 * multiplier), F32)], o
    ), [rand(1, 6, 6, 3)]


def _binary_case(
    op: str, cls: Any, act: int, shape_b: tuple[int, ...] = (1, 2, 2, 3)
) -> tuple[bytes, list[np.ndarray]]:
    a, b = Tensor((1, 2, 2, 3), F32), Tensor(shape_b, F32)
    model = single_op(
        op, [a, b], [Tensor((1, 2, 2, 3), F32)], options(cls, fusedActivationFunction=act)
    )
    lo = 0.5 if op == "DIV" else -2
    return model, [rand(1, 2, 2, 3), rand(*shape_b, lo=lo)]


def _pool_case(op: str, padding: int) -> tuple[bytes, list[np.ndarray]]:
    o = options(schema.Pool2DOptionsT, padding=padding, strideW=2, strideH=2, filterWidth=2, filterHeight=2,
                fusedActivationFunction=ACT.NONE)  # fmt: skip
    return single_op(op, [Tensor((1, 6, 6, 3), F32)], [Tensor((1, 3, 3, 3), F32)], o), [
        rand(1, 6, 6, 3)
    ]


def _unary_case(op: str, lo: float = -2, hi: float = 2) -> tuple[bytes, list[np.ndarray]]:
    return single_op(op, [Tensor((2, 5), F32)], [Tensor((2, 5), F32)]), [rand(2, 5, lo=lo, hi=hi)]


def _const(values: Any, dtype: Any = np.int32) -> Tensor:
    array = np.asarray(values, dtype)
    return Tensor(array.shape, dtype, array)


CASES: dict[str, Callable[[], tuple[bytes, list[np.ndarray]]]] = {
    "conv same relu": lambda: _conv_case(schema.Padding.SAME, 1, ACT.RELU),
    "conv valid stride 2 relu6": lambda: _conv_case(schema.Padding.VALID, 2, ACT.RELU6),
    "conv dilated": lambda: _conv_case(schema.Padding.VALID, 1, ACT.NONE, dilation=2),
    "conv same stride 2 relu-1": lambda: _conv_case(schema.Padding.SAME, 2, ACT.RELU_N1_TO_1),
    "depthwise x1": lambda: _depthwise_case(1),
    "depthwise x2": lambda: _depthwise_case(2),
    "add relu": lambda: _binary_case("ADD", schema.AddOptionsT, ACT.RELU),
    "add broadcast": lambda: _binary_case("ADD", schema.AddOptionsT, ACT.NONE, (3,)),
    "sub": lambda: _binary_case("SUB", schema.SubOptionsT, ACT.NONE),
    "mul relu6": lambda: _binary_case("MUL", schema.MulOptionsT, ACT.RELU6),
    "div": lambda: _binary_case("DIV", schema.DivOptionsT, ACT.NONE),
    "max pool same": lambda: _pool_case("MAX_POOL_2D", schema.Padding.SAME),
    "average pool valid": lambda: _pool_case("AVERAGE_POOL_2D", schema.Padding.VALID),
    "logistic": lambda: _unary_case("LOGISTIC"),
    "tanh": lambda: _unary_case("TANH"),
    "relu": lambda: _unary_case("RELU"),
    "relu6": lambda: _unary_case("RELU6", -8, 8),
    "exp": lambda: _unary_case("EXP"),
    "abs": lambda: _unary_case("ABS"),
    "sqrt": lambda: _unary_case("SQRT", 0.1, 4),
    "rsqrt": lambda: _unary_case("RSQRT", 0.1, 4),
    "hard swish": lambda: _unary_case("HARD_SWISH", -5, 5),
    "leaky relu": lambda: (
        single_op(
            "LEAKY_RELU",
            [Tensor((2, 5), F32)],
            [Tensor((2, 5), F32)],
            options(schema.LeakyReluOptionsT, alpha=0.2),
        ),
        [rand(2, 5)],
    ),
    "fully connected": lambda: (
        single_op(
            "FULLY_CONNECTED",
            [Tensor((2, 8), F32), _const(rand(5, 8), F32), _const(rand(5), F32)],
            [Tensor((2, 5), F32)],
            options(schema.FullyConnectedOptionsT, fusedActivationFunction=ACT.RELU),
        ),
        [rand(2, 8)],
    ),  # fmt: skip
    "fully connected keep dims": lambda: (
        single_op(
            "FULLY_CONNECTED",
            [Tensor((2, 3, 8), F32), _const(rand(5, 8), F32), None],
            [Tensor((2, 3, 5), F32)],
            options(schema.FullyConnectedOptionsT, keepNumDims=True),
        ),
        [rand(2, 3, 8)],
    ),  # fmt: skip
    "softmax": lambda: (
        single_op(
            "SOFTMAX",
            [Tensor((2, 6), F32)],
            [Tensor((2, 6), F32)],
            options(schema.SoftmaxOptionsT, beta=0.7),
        ),
        [rand(2, 6)],
    ),
    "reshape": lambda: (
        single_op("RESHAPE", [Tensor((2, 6), F32), _const([3, 4])], [Tensor((3, 4), F32)]),
        [rand(2, 6)],
    ),
    "concatenation": lambda: (
        single_op(
            "CONCATENATION",
            [Tensor((1, 2, 3), F32), Tensor((1, 2, 2), F32)],
            [Tensor((1, 2, 5), F32)],
            options(schema.ConcatenationOptionsT, axis=-1),
        ),
        [rand(1, 2, 3), rand(1, 2, 2)],
    ),  # fmt: skip
    "pad": lambda: (
        single_op(
            "PAD",
            [Tensor((1, 2, 2, 1), F32), _const([[0, 0], [1, 1], [0, 2], [0, 0]])],
            [Tensor((1, 4, 4, 1), F32)],
        ),
        [rand(1, 2, 2, 1)],
    ),
    "mean keep dims": lambda: (
        single_op(
            "MEAN",
            [Tensor((1, 3, 4, 2), F32), _const([1, 2])],
            [Tensor((1, 1, 1, 2), F32)],
            options(schema.ReducerOptionsT, keepDims=True),
        ),
        [rand(1, 3, 4, 2)],
    ),  # fmt: skip
    "reduce max": lambda: (
        single_op(
            "REDUCE_MAX",
            [Tensor((3, 4), F32), _const([1])],
            [Tensor((3,), F32)],
            options(schema.ReducerOptionsT),
        ),
        [rand(3, 4)],
    ),
    "transpose": lambda: (
        single_op(
            "TRANSPOSE", [Tensor((2, 3, 4), F32), _const([2, 0, 1])], [Tensor((4, 2, 3), F32)]
        ),
        [rand(2, 3, 4)],
    ),
    "squeeze": lambda: (
        single_op(
            "SQUEEZE",
            [Tensor((1, 3, 1, 2), F32)],
            [Tensor((3, 2), F32)],
            options(schema.SqueezeOptionsT, squeezeDims=[0, 2]),
        ),
        [rand(1, 3, 1, 2)],
    ),
    "strided slice": lambda: (
        single_op(
            "STRIDED_SLICE",
            [Tensor((4, 6), F32), _const([1, 0]), _const([4, 6]), _const([2, 2])],
            [Tensor((2, 3), F32)],
            options(schema.StridedSliceOptionsT),
        ),
        [rand(4, 6)],
    ),  # fmt: skip
    "slice": lambda: (
        single_op(
            "SLICE", [Tensor((4, 6), F32), _const([1, 2]), _const([2, 3])], [Tensor((2, 3), F32)]
        ),
        [rand(4, 6)],
    ),
    "gather": lambda: (
        single_op(
            "GATHER",
            [Tensor((5, 3), F32), _const([4, 0, 2])],
            [Tensor((3, 3), F32)],
            options(schema.GatherOptionsT, axis=0),
        ),
        [rand(5, 3)],
    ),
    "resize bilinear half pixel": lambda: (
        single_op(
            "RESIZE_BILINEAR",
            [Tensor((1, 3, 3, 2), F32), _const([5, 6])],
            [Tensor((1, 5, 6, 2), F32)],
            options(schema.ResizeBilinearOptionsT, halfPixelCenters=True),
        ),
        [rand(1, 3, 3, 2)],
    ),  # fmt: skip
    "resize nearest align corners": lambda: (
        single_op(
            "RESIZE_NEAREST_NEIGHBOR",
            [Tensor((1, 3, 3, 2), F32), _const([6, 6])],
            [Tensor((1, 6, 6, 2), F32)],
            options(schema.ResizeNearestNeighborOptionsT, alignCorners=True),
        ),
        [rand(1, 3, 3, 2)],
    ),  # fmt: skip
    "maximum": lambda: (
        single_op("MAXIMUM", [Tensor((2, 3), F32), Tensor((2, 3), F32)], [Tensor((2, 3), F32)]),
        [rand(2, 3), rand(2, 3)],
    ),
    "split": lambda: (
        single_op(
            "SPLIT",
            [_const(1), Tensor((2, 6), F32)],
            [Tensor((2, 3), F32), Tensor((2, 3), F32)],
            options(schema.SplitOptionsT, numSplits=2),
        ),
        [rand(2, 6)],
    ),  # fmt: skip
    "split v": lambda: (
        single_op(
            "SPLIT_V",
            [Tensor((2, 6), F32), _const([1, 5]), _const(1)],
            [Tensor((2, 1), F32), Tensor((2, 5), F32)],
            options(schema.SplitVOptionsT, numSplits=2),
        ),
        [rand(2, 6)],
    ),  # fmt: skip
    "pack": lambda: (
        single_op(
            "PACK",
            [Tensor((2, 3), F32), Tensor((2, 3), F32)],
            [Tensor((2, 2, 3), F32)],
            options(schema.PackOptionsT, valuesCount=2, axis=1),
        ),
        [rand(2, 3), rand(2, 3)],
    ),  # fmt: skip
    "arg max": lambda: (
        single_op(
            "ARG_MAX",
            [Tensor((3, 5), F32), _const([1])],
            [Tensor((3,), np.int32)],
            options(schema.ArgMaxOptionsT, outputType=schema.TensorType.INT32),
        ),
        [rand(3, 5)],
    ),  # fmt: skip
    "transpose conv": lambda: (
        single_op(
            "TRANSPOSE_CONV",
            [_const([1, 6, 6, 2]), _const(rand(2, 3, 3, 3), F32), Tensor((1, 3, 3, 3), F32)],
            [Tensor((1, 6, 6, 2), F32)],
            options(
                schema.TransposeConvOptionsT, padding=schema.Padding.SAME, strideW=2, strideH=2
            ),
        ),
        [rand(1, 3, 3, 3)],
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_operator_matches_litert(case: str) -> None:
    model, inputs = CASES[case]()
    compare(model, inputs)


POOL_SHAPES = {  # (input H, W), filter (H, W), stride (H, W): odd sizes, where SAME pads
    "7x5 2x2/2": ((7, 5), (2, 2), (2, 2)),
    "5x7 3x3/2": ((5, 7), (3, 3), (2, 2)),
    "7x7 3x3/1": ((7, 7), (3, 3), (1, 1)),
    "9x6 3x2/(2,3)": ((9, 6), (3, 2), (2, 3)),
    "3x3 4x4/2": ((3, 3), (4, 4), (2, 2)),  # SAME only: the filter is wider than the input
}


@pytest.mark.parametrize("op", ["MAX_POOL_2D", "AVERAGE_POOL_2D", "L2_POOL_2D"])
@pytest.mark.parametrize(
    "padding", [schema.Padding.SAME, schema.Padding.VALID], ids=["same", "valid"]
)
@pytest.mark.parametrize("shape", list(POOL_SHAPES))
def test_pools_on_odd_sizes_match_litert(op: str, padding: int, shape: str) -> None:
    """SAME and VALID differ only where the window does not tile the input: odd sizes
    (a 6x6 input pooled 2x2/2 gives the same answer either way)."""
    (h, w), (fh, fw), (sh, sw) = POOL_SHAPES[shape]
    if padding == schema.Padding.SAME:
        out_h, out_w = -(-h // sh), -(-w // sw)
    elif fh > h or fw > w:
        pytest.skip("no VALID window fits")
    else:
        out_h, out_w = (h - fh) // sh + 1, (w - fw) // sw + 1
    o = options(schema.Pool2DOptionsT, padding=padding, strideW=sw, strideH=sh, filterWidth=fw,
                filterHeight=fh, fusedActivationFunction=ACT.NONE)  # fmt: skip
    model = single_op(op, [Tensor((1, h, w, 3), F32)], [Tensor((1, out_h, out_w, 3), F32)], o)
    compare(model, [rand(1, h, w, 3)])


def test_fp16_weights_are_dequantized_once_at_load() -> None:
    """A float model with fp16 weights: a DEQUANTIZE per weight, folded into float32 constants."""
    weights = rand(4, 3, 3, 3).astype(np.float16)
    tensors = [
        Tensor((1, 6, 6, 3), F32),
        Tensor(weights.shape, np.float16, weights),
        Tensor(weights.shape, F32),
        Tensor((4,), F32, rand(4)),
        Tensor((1, 6, 6, 4), F32),
    ]
    model = graph(
        tensors,
        [("DEQUANTIZE", [1], [2], None), ("CONV_2D", [0, 2, 3], [4], conv_options())],
        [0],
        [4],
    )
    loaded = tflite.load(model)
    ops = [op.code for op in loaded.model.hal_model.main.operations]
    assert ops == [nn.OperationCode.CONV_2D]  # no DEQUANTIZE left to run
    compare(model, [rand(1, 6, 6, 3)])


def densify_then_add(weights: Tensor, shape: tuple[int, ...], dense_dtype: Any = F32) -> bytes:
    """sparse constant -> DENSIFY (-> DEQUANTIZE for fp16) -> ADD to the input."""
    tensors = [Tensor(shape, F32), weights, Tensor(shape, weights.dtype)]
    ops: list[tuple[Any, ...]] = [("DENSIFY", [1], [2], None)]
    if weights.dtype == np.float16:
        tensors.append(Tensor(shape, F32))
        ops.append(("DEQUANTIZE", [2], [3], None))
    tensors.append(Tensor(shape, F32))
    ops.append(("ADD", [0, len(tensors) - 2], [len(tensors) - 1], schema.AddOptionsT()))
    return graph(tensors, ops, [0], [len(tensors) - 1])


#: name -> (dense matrix, Tensor.sparsity, stored values): CSR, CSC (traversal [1, 0]),
#: 1x4 blocks along columns, fp16 weights with uint8 vectors.
_DENSE = np.array(
    [[0, 0, 3, 0, 0, 0, 0, 0], [1, 2, 0, 0, 0, 0, 0, 4], [0] * 8, [0, 0, 0, 5, 6, 7, 8, 0]],
    np.float32,
)
SPARSE_CASES = {
    "csr": (
        _DENSE,
        sparse([0, 1], [4, ([0, 1, 4, 4, 8], [2, 0, 1, 7, 3, 4, 5, 6])]),
        [3, 1, 2, 4, 5, 6, 7, 8],
    ),
    "csc-uint16": (
        _DENSE,
        sparse(
            [1, 0],
            [8, ([0, 1, 2, 3, 4, 5, 6, 7, 8], [1, 1, 0, 3, 3, 3, 3, 1])],
            index_dtype=np.uint16,
        ),
        [1, 2, 3, 5, 6, 7, 8, 4],
    ),
    "blocks-of-4": (
        _DENSE,
        sparse([0, 1, 2], [4, ([0, 1, 3, 3, 5], [0, 0, 1, 0, 1]), 4], block_map=[1]),
        [0, 0, 3, 0, 1, 2, 0, 0, 0, 0, 0, 4, 0, 0, 0, 5, 6, 7, 8, 0],
    ),
}


@pytest.mark.parametrize("case", sorted(SPARSE_CASES))
@pytest.mark.parametrize("dtype", [F32, np.float16])
def test_sparse_weights_are_densified_at_load(case: str, dtype: Any) -> None:
    """TFLite's sparse format (DENSIFY of a constant), against the dense matrix and LiteRT."""
    dense, sparsity, stored = SPARSE_CASES[case]
    weights = Tensor(dense.shape, dtype, np.array(stored, dtype), sparsity=sparsity)
    model = densify_then_add(weights, dense.shape)
    loaded = tflite.load(model)
    assert [op.code for op in loaded.model.hal_model.main.operations] == [nn.OperationCode.ADD]
    x = rand(*dense.shape)
    with tflite.Runner(loaded, cache_dir=None) as run:
        (got,) = run(x)
    np.testing.assert_array_equal(got, x + dense)
    np.testing.assert_array_equal(got, run_litert(model, [x])[0])


@pytest.mark.parametrize(
    ("levels", "stored", "message"),
    [
        ([4, ([0, 1, 4, 4, 8], [2, 0, 1, 9, 3, 4, 5, 6])], 8, "outside dimension 1"),
        ([4, ([0, 1, 4, 2, 8], [2, 0, 1, 7, 3, 4, 5, 6])], 8, "out of order"),
        ([4, ([0, 1, 4, 4, 9], [2, 0, 1, 7, 3, 4, 5, 6])], 8, "out of bounds"),
        ([4, ([0, 1, 4, 4], [2, 0, 1, 7, 3, 4, 5, 6])], 8, "out of bounds"),
        ([4, ([0, 1, 4, 4, 8], [2, 0, 1, 7, 3, 4, 5, 6])], 7, "7 stored values for 8"),
        ([4, 8, 1], 32, "do not describe"),
        ([1 << 30, 8], 32, "does not fit"),
    ],
)
def test_malformed_sparse_weights_are_refused(levels: list[Any], stored: int, message: str) -> None:
    sparsity = sparse(list(range(len(levels))), levels)
    weights = Tensor(_DENSE.shape, F32, np.ones(stored, F32), sparsity=sparsity)
    with pytest.raises(BadDataError, match=message):
        tflite.load(densify_then_add(weights, _DENSE.shape))


def test_uint8_quantized_conv_within_one() -> None:
    x = Tensor((1, 5, 5, 2), np.uint8, scale=0.05, zero_point=128)
    w = Tensor(
        (3, 3, 3, 2),
        np.uint8,
        RNG.integers(0, 256, (3, 3, 3, 2), dtype=np.uint8),
        scale=0.01,
        zero_point=120,
    )
    b = Tensor(
        (3,), np.int32, RNG.integers(-500, 500, 3, dtype=np.int32), scale=0.05 * 0.01, zero_point=0
    )
    out = Tensor((1, 5, 5, 3), np.uint8, scale=0.1, zero_point=100)
    model = single_op("CONV_2D", [x, w, b], [out], conv_options(act=ACT.RELU))
    compare(model, [RNG.integers(0, 256, (1, 5, 5, 2), dtype=np.uint8)], quantized=True)


def test_int8_per_channel_conv_within_one() -> None:
    scales = [0.01, 0.02, 0.015]
    x = Tensor((1, 5, 5, 2), np.int8, scale=0.05, zero_point=-3)
    w = Tensor(
        (3, 3, 3, 2),
        np.int8,
        RNG.integers(-127, 128, (3, 3, 3, 2), dtype=np.int8),
        scale=scales,
        zero_point=[0, 0, 0],
    )
    b = Tensor(
        (3,),
        np.int32,
        RNG.integers(-500, 500, 3, dtype=np.int32),
        scale=[0.05 * s for s in scales],
        zero_point=[0, 0, 0],
    )
    out = Tensor((1, 5, 5, 3), np.int8, scale=0.1, zero_point=5)
    model = single_op("CONV_2D", [x, w, b], [out], conv_options())
    compare(model, [RNG.integers(-128, 128, (1, 5, 5, 2), dtype=np.int8)], quantized=True)


def test_quantize_and_dequantize_round_trip() -> None:
    tensors = [
        Tensor((2, 4), F32),
        Tensor((2, 4), np.int8, scale=0.02, zero_point=1),
        Tensor((2, 4), F32),
    ]
    model = graph(tensors, [("QUANTIZE", [0], [1], None), ("DEQUANTIZE", [1], [2], None)], [0], [2])
    compare(model, [rand(2, 4)])


def test_operator_codes_written_only_in_the_int32_field_are_read() -> None:
    """ai-edge-quantizer writes each operator code only in the 4-byte
    ``builtin_code`` and leaves the deprecated byte at 0 (ADD); the schema says
    to take the larger of the two, as LiteRT does.  The ``tflite`` package's
    ``BuiltinCode()`` hides such a code below 127 behind the byte."""
    tensors = [
        Tensor((2, 4), F32),
        Tensor((2, 4), np.int8, scale=0.02, zero_point=1),
        Tensor((2, 4), F32),
    ]
    parsed = schema.ModelT.InitFromPackedBuf(
        graph(tensors, [("QUANTIZE", [0], [1], None), ("DEQUANTIZE", [1], [2], None)], [0], [2]), 0
    )
    for code in parsed.operatorCodes:
        code.deprecatedBuiltinCode = 0
    model = repack(parsed)
    written = schema.ModelT.InitFromPackedBuf(model, 0).operatorCodes
    assert [(c.builtinCode, c.deprecatedBuiltinCode) for c in written] == [
        (schema.BuiltinOperator.QUANTIZE, 0),
        (schema.BuiltinOperator.DEQUANTIZE, 0),
    ]
    assert [op.name for op in tflite_reader.read(model).subgraphs[0].operators] == [
        "QUANTIZE",
        "DEQUANTIZE",
    ]
    compare(model, [rand(2, 4)])


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from healthy_service(str(tmp_path_factory.mktemp("svc") / "driver.sock"), args=())


@pytest.fixture
def services_env(service: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    remote.disconnect_all()
    monkeypatch.setenv("NNBURST_SERVICES", service.path)
    yield service.path
    remote.disconnect_all()


def test_a_chain_runs_on_a_service_device_through_a_burst(services_env) -> None:
    tensors = [
        Tensor((1, 6, 6, 3), F32),
        Tensor((4, 3, 3, 3), F32, rand(4, 3, 3, 3)),
        Tensor((4,), F32, rand(4)),
        Tensor((1, 6, 6, 4), F32),
        Tensor((1, 3, 3, 4), F32),
    ]
    pool = options(
        schema.Pool2DOptionsT,
        padding=schema.Padding.VALID,
        strideW=2,
        strideH=2,
        filterWidth=2,
        filterHeight=2,
    )
    model = graph(
        tensors,
        [("CONV_2D", [0, 1, 2], [3], conv_options(act=ACT.RELU)), ("MAX_POOL_2D", [3], [4], pool)],
        [0],
        [4],
    )
    x = rand(1, 6, 6, 3)
    compare(model, [x], device="nnburst-sample-all")
    with tflite.Runner(model, device="nnburst-sample-all", cache_dir=None) as runner:
        first = runner(x)[0]
        np.testing.assert_array_equal(runner(x)[0], first)
        # Its buffers are one shared memory the service maps: nothing is staged.
        assert runner.burst is not None and runner.burst._staged.memory is None


# -- what cannot be run -----------------------------------------------------------------------


def test_unsupported_operators_are_all_listed_with_counts() -> None:
    tensors = [Tensor((4,), F32), Tensor((4,), F32), Tensor((4,), F32), Tensor((4,), F32)]
    ops = [
        ("CUMSUM", [0, 0], [1], None),  # a builtin nnburst does not map
        ("CUMSUM", [1, 1], [2], None),
        ("RELU", [2], [3], None),
    ]
    model = graph(tensors, ops, [0], [3])
    with pytest.raises(tflite.UnsupportedModelError) as info:
        tflite.load(model)
    assert info.value.unsupported == {"CUMSUM": 2}
    assert "CUMSUM ×2" in str(info.value)


def test_a_fused_activation_litert_would_ignore_is_refused() -> None:
    model, _ = _conv_case(schema.Padding.SAME, 1, ACT.TANH)
    with pytest.raises(tflite.UnsupportedModelError, match="CONV_2D \\(fused activation 4\\)"):
        tflite.load(model)


def test_every_operator_family_is_imported_by_convert() -> None:
    """A family module convert.py leaves out registers nothing, and its
    operators would be refused as unknown."""
    from nnburst.tflite import ops

    convert = importlib.import_module(
        "nnburst.tflite.convert"
    )  # the package's convert is the function
    families = {module.__name__.rsplit(".", 1)[-1] for module in convert.FAMILIES}
    modules = {module.name for module in pkgutil.iter_modules(ops.__path__)}
    assert modules <= families


def test_not_a_tflite_file_is_bad_data(tmp_path) -> None:
    with pytest.raises(BadDataError, match="not a TensorFlow Lite model"):
        tflite.load(b"\x00" * 64)
    with pytest.raises(BadDataError, match="cannot read"):
        tflite.load(tmp_path / "missing.tflite")
    model, _ = CASES["relu"]()
    with pytest.raises(BadDataError, match="malformed"):
        tflite.load(model[: len(model) // 2])


def _set(table: Any, **fields: Any) -> None:
    for name, value in fields.items():
        setattr(table, name, value)


def _conv_op(p: Any) -> Any:
    return p.subgraphs[0].operators[0]


@pytest.mark.parametrize(
    "edit, error, message",
    [
        (lambda p: _set(_conv_op(p), inputs=[0]), BadDataError, r"operator 0 \(CONV_2D\): too few"),
        (lambda p: _set(_conv_op(p), outputs=[]), BadDataError, r"operator 0 \(CONV_2D\): too few"),
        (lambda p: _set(_conv_op(p), inputs=[-1, 1, 2]), BadDataError, "an omitted tensor"),
        (lambda p: _set(p.subgraphs[0], inputs=[-1]), BadDataError, "omits one of its inputs"),
        (
            lambda p: _set(_conv_op(p), builtinOptions=None, builtinOptionsType=0),
            tflite.UnsupportedModelError,
            r"CONV_2D \(no options table\)",
        ),
        (
            lambda p: _set(_conv_op(p).builtinOptions, padding=7),
            tflite.UnsupportedModelError,
            r"CONV_2D \(padding 7\)",
        ),
    ],
    ids=["one input", "no output", "omitted input", "omitted model input", "no options", "padding"],
)
def test_a_malformed_operator_is_refused_clearly(
    edit: Callable[[Any], None], error: type[Exception], message: str
) -> None:
    """Not an IndexError, KeyError or AttributeError from inside the converter."""
    model, _ = CASES["conv same relu"]()
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    edit(parsed)
    with pytest.raises(error, match=message):
        tflite.load(repack(parsed))


def test_runner_checks_its_inputs() -> None:
    model, inputs = CASES["add relu"]()
    with tflite.Runner(model, cache_dir=None) as run:
        assert [i.shape for i in run.inputs] == [(1, 2, 2, 3), (1, 2, 2, 3)]
        with pytest.raises(BadDataError, match="takes 2 inputs"):
            run(inputs[0])
        with pytest.raises(BadDataError, match="expected shape"):
            run(inputs[0], np.zeros((2, 2), F32))
        first = run(*inputs)
        again = run(*inputs)
        np.testing.assert_array_equal(first[0], again[0])


def _quantized_add() -> bytes:
    x = Tensor((1, 4), np.int8, scale=0.5, zero_point=3)
    return graph([x, x, x], [("ADD", [0, 1], [2], None)], [0, 1], [2])


@pytest.mark.parametrize(
    "given, message",
    [
        (np.array([[200, 1, 2, 3]], np.int32), "takes int8, got int32"),
        (np.array([[1, 2, 3, 4]], np.uint8), "takes int8, got uint8"),
        (np.array([[1, 2, 3, 4]], np.float32), "takes int8, got float32"),
        ([[1, 2, 3, 300]], "int64 values that change as int8"),
        ([[1.5, 2, 3, 4]], "float64 values that change as int8"),
    ],
    ids=["int32 200", "uint8 codes", "floats", "list past the range", "list of fractions"],
)
def test_runner_refuses_an_input_whose_values_would_change(given: Any, message: str) -> None:
    """numpy's same_kind casting turned an int32 200 into an int8 -56: lost data."""
    with tflite.Runner(_quantized_add(), burst=False, cache_dir=None) as run:
        ok = np.array([[1, 2, 3, 4]], np.int8)
        with pytest.raises(BadDataError, match=message) as error:
            run(given, ok)
        assert "input " in str(error.value) and "round(x / 0.5) + 3" in str(error.value)
        with pytest.raises(BadDataError, match=message):
            run(ok, given)


def test_runner_takes_inputs_that_keep_their_values() -> None:
    model, inputs = CASES["add relu"]()
    with tflite.Runner(model, burst=False, cache_dir=None) as run:
        want = run(*inputs)[0]
        with pytest.raises(BadDataError, match="takes float32, got float64"):
            run(inputs[0].astype(np.float64), inputs[1])
        halves = [x.astype(np.float16) for x in inputs]
        np.testing.assert_array_equal(
            run(*halves)[0], run(*[h.astype(F32) for h in halves])[0]
        )  # float16 -> float32 keeps every value
        np.testing.assert_array_equal(run(inputs[0].tolist(), inputs[1])[0], want)
    with tflite.Runner(_quantized_add(), burst=False, cache_dir=None) as run:
        codes = np.array([[1, 2, 3, 4]], np.int8)
        np.testing.assert_array_equal(run([[1, 2, 3, 4]], codes)[0], run(codes, codes)[0])


def test_a_runner_shared_by_threads_takes_turns() -> None:
    """Its buffers are one set: a second thread's call waited, it did not fail with BAD_STATE."""
    model, inputs = CASES["add relu"]()
    errors: list[BaseException] = []
    with tflite.Runner(model, cache_dir=None) as run:
        want = run(*inputs)[0]

        def calls(scale: float) -> None:
            try:
                for _ in range(200):
                    got = run(inputs[0] * F32(scale), inputs[1] * F32(scale))[0]
                    np.testing.assert_array_equal(got, np.maximum(want * F32(scale), 0))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=calls, args=(s,)) for s in (1.0, 2.0)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert not errors, errors[0]


def test_the_compilation_is_cached_by_the_files_digest(tmp_path) -> None:
    model, inputs = CASES["conv same relu"]()
    for _ in range(2):
        with tflite.Runner(model, cache_dir=tmp_path) as run:
            run(*inputs)
    assert any(tmp_path.iterdir())


def test_nnburst_run_prints_shapes_and_checksums(tmp_path) -> None:
    model, inputs = CASES["add relu"]()
    path = tmp_path / "add.tflite"
    path.write_bytes(model)
    files = []
    for i, value in enumerate(inputs):
        files += ["--input", str(tmp_path / f"in{i}.npy")]
        np.save(tmp_path / f"in{i}.npy", value)
    home = dict(os.environ, HOME=str(tmp_path))  # the compilation cache goes under it
    result = subprocess.run(
        [sys.executable, "-m", "nnburst", "run", str(path), *files],
        env=home,
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    want = run_litert(model, inputs)[0]
    assert "[1, 2, 2, 3] float32" in result.stdout
    assert f"sum {float(want.astype(np.float64).sum()):.6g}" in result.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "nnburst", "run", str(tmp_path / "in0.npy")],
        env=home,
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 1 and "not a TensorFlow Lite model" in bad.stderr
    assert any((tmp_path / ".cache" / "nnburst" / "compilations").iterdir())


def test_an_activation_after_an_operation_is_fused_into_it() -> None:
    """ADD then RELU (as BlazeFace's residual blocks): one NNAPI ADD with fuse RELU."""
    tensors = [
        Tensor((1, 2, 2, 3), F32),
        Tensor((1, 2, 2, 3), F32),
        Tensor((1, 2, 2, 3), F32),
        Tensor((1, 2, 2, 3), F32),
    ]
    model = graph(
        tensors,
        [("ADD", [0, 1], [2], options(schema.AddOptionsT)), ("RELU", [2], [3], None)],
        [0, 1],
        [3],
    )
    operations = tflite.load(model).model.hal_model.main.operations
    assert [op.code for op in operations] == [nn.OperationCode.ADD]
    compare(model, [rand(1, 2, 2, 3), rand(1, 2, 2, 3)])
    # Not when the intermediate is read elsewhere (here: a model output).
    both = graph(
        tensors,
        [("ADD", [0, 1], [2], options(schema.AddOptionsT)), ("RELU", [2], [3], None)],
        [0, 1],
        [2, 3],
    )
    assert len(tflite.load(both).model.hal_model.main.operations) == 2
    compare(both, [rand(1, 2, 2, 3), rand(1, 2, 2, 3)])


def test_while_loops_like_litert() -> None:
    """WHILE (i < 5): i += 1, x *= 2, with a condition and a body subgraph."""
    from .tflite_builder import subgraphs

    i32 = np.int32
    main = (
        [
            Tensor((1,), i32, np.array([0], i32)),
            Tensor((2,), F32),
            Tensor((1,), i32),
            Tensor((2,), F32),
        ],
        [
            (
                "WHILE",
                [0, 1],
                [2, 3],
                options(schema.WhileOptionsT, condSubgraphIndex=1, bodySubgraphIndex=2),
            )
        ],
        [1],
        [3],
    )
    cond = (
        [
            Tensor((1,), i32),
            Tensor((2,), F32),
            Tensor((1,), i32, np.array([5], i32)),
            Tensor((1,), np.bool_),
        ],
        [("LESS", [0, 2], [3], None)],
        [0, 1],
        [3],
    )
    body = (
        [Tensor((1,), i32), Tensor((2,), F32), Tensor((1,), i32, np.array([1], i32)), Tensor((1,), i32),
         Tensor((1,), F32, np.array([2], F32)), Tensor((2,), F32)],
        [("ADD", [0, 2], [3], options(schema.AddOptionsT)), ("MUL", [1, 4], [5], options(schema.MulOptionsT))],
        [0, 1],
        [3, 5],
    )  # fmt: skip
    model = subgraphs([main, cond, body])
    assert nn.OperationCode.WHILE in [
        op.code for op in tflite.load(model).model.hal_model.main.operations
    ]
    x = np.array([1.5, -3], F32)
    compare(model, [x])
    with tflite.Runner(model, cache_dir=None) as run:
        np.testing.assert_array_equal(run(x)[0], x * 32)


def accumulator(like: Tensor, initial: np.ndarray) -> bytes:
    """A streaming accumulator: CALL_ONCE sets variable ``total`` to ``initial``,
    and each call adds its input to it and returns the sum (every value tensor
    shaped, typed and quantized like ``like``)."""
    from .tflite_builder import RESOURCE, subgraphs

    def value(data: np.ndarray | None = None) -> Tensor:
        return Tensor(like.shape, like.dtype, data, like.scale, like.zero_point)

    handle = options(schema.VarHandleOptionsT, sharedName="total")
    main = (
        [Tensor((), RESOURCE), value(), value(), value()],
        [
            ("CALL_ONCE", [], [], options(schema.CallOnceOptionsT, initSubgraphIndex=1)),
            ("VAR_HANDLE", [], [0], handle),
            ("READ_VARIABLE", [0], [2], None),
            ("ADD", [2, 1], [3], options(schema.AddOptionsT)),
            ("ASSIGN_VARIABLE", [0, 3], [], None),
        ],
        [1],
        [3],
    )
    init = (
        [Tensor((), RESOURCE), value(initial)],
        [("VAR_HANDLE", [], [0], handle), ("ASSIGN_VARIABLE", [0, 1], [], None)],
        [],
        [],
    )
    return subgraphs([main, init])


def test_a_stateful_model_carries_its_variables_from_call_to_call() -> None:
    """The runner must agree with one LiteRT interpreter over several calls, and
    start over after reset()."""
    model = accumulator(Tensor((1, 4), F32), np.zeros((1, 4), F32))
    loaded = tflite.load(model)
    assert [v.name for v in loaded.state] == ["total"] and len(loaded.inputs) == 1
    steps = [rand(1, 4) for _ in range(3)]
    reference = run_litert_calls(model, [[step] for step in steps])
    with tflite.Runner(loaded, cache_dir=None) as run:
        for step, (want,) in zip(steps, reference):
            (got,) = run(step)
            np.testing.assert_allclose(got, want, rtol=1e-6)
            np.testing.assert_allclose(run.state[0], want, rtol=1e-6)
        np.testing.assert_allclose(got, sum(steps), rtol=1e-5)
        run.reset()
        np.testing.assert_allclose(run(steps[0])[0], steps[0], rtol=1e-6)


def test_a_quantized_variable_takes_its_initial_values_quantization() -> None:
    """The initial value (a constant of the init subgraph) carries the variable's
    scale and zero point, as in microWakeWord's int8 streaming models."""
    like = Tensor((1, 4), np.int8, scale=0.1, zero_point=-5)
    model = accumulator(like, np.full((1, 4), -5, np.int8))
    steps = [RNG.integers(-20, 20, (1, 4), dtype=np.int8) for _ in range(3)]
    reference = run_litert_calls(model, [[step] for step in steps])
    with tflite.Runner(model, cache_dir=None) as run:
        for step, (want,) in zip(steps, reference):
            assert np.abs(run(step)[0].astype(int) - want.astype(int)).max() <= 1


def test_a_malformed_variable_initialization_is_bad_data() -> None:
    model = accumulator(Tensor((1, 4), F32), np.zeros((1, 4), F32))
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    parsed.subgraphs[1].operators[1].inputs = [0]
    with pytest.raises(BadDataError, match="an ASSIGN_VARIABLE of 1 inputs"):
        tflite.load(repack(parsed))
    parsed.subgraphs[0].operators[0].builtinOptions.initSubgraphIndex = 9
    with pytest.raises(BadDataError, match="names subgraph 9"):
        tflite.load(repack(parsed))


@pytest.mark.parametrize(
    "out",
    [
        Tensor((2, 8), np.uint8, scale=0.02, zero_point=128),
        Tensor((2, 8), np.int8, scale=0.05, zero_point=3),
    ],
    ids=["int8 to uint8", "int8 rescaled"],
)
def test_a_quantize_of_quantized_values_requantizes(out: Tensor) -> None:
    """microWakeWord ends on one (int8 → uint8); NNAPI's QUANTIZE takes floats only."""
    x = Tensor((2, 8), np.int8, scale=0.02, zero_point=0)
    model = single_op("QUANTIZE", [x], [out], None)
    compare(model, [RNG.integers(-128, 128, (2, 8), dtype=np.int8)], quantized=True)


def test_a_reduction_to_a_scalar_keeps_the_scalar_shape() -> None:
    """TFLite scalars are [1] operands inside; the runner returns them as scalars."""
    model = single_op(
        "REDUCE_MAX",
        [Tensor((2, 3), F32), _const([0, 1])],
        [Tensor((), F32)],
        options(schema.ReducerOptionsT),
    )
    compare(model, [rand(2, 3)])


def test_batch_matmul_with_constant_weights_is_a_fully_connected() -> None:
    weights = rand(6, 4)
    model = single_op("BATCH_MATMUL", [Tensor((1, 3, 6), F32), _const(weights, F32)], [Tensor((1, 3, 4), F32)],
                      options(schema.BatchMatMulOptionsT))  # fmt: skip
    assert nn.OperationCode.FULLY_CONNECTED in [
        op.code for op in tflite.load(model).model.hal_model.main.operations
    ]
    compare(model, [rand(1, 3, 6)])
    computed = single_op("BATCH_MATMUL", [Tensor((1, 3, 6), F32), Tensor((6, 4), F32)], [Tensor((1, 3, 4), F32)],
                         options(schema.BatchMatMulOptionsT))  # fmt: skip
    assert nn.OperationCode.BATCH_MATMUL in [  # NNAPI feature level 6 (test_transformer_ops.py)
        op.code for op in tflite.load(computed).model.hal_model.main.operations
    ]


def test_nnburst_bench_times_a_tflite_file_against_litert(tmp_path, capsys) -> None:
    from nnburst.tools.cli import main

    model, _ = CASES["conv same relu"]()
    path = tmp_path / "conv.tflite"
    path.write_bytes(model)
    assert main(["bench", "--model", str(path), "--duration", "0.05"]) == 0
    out = capsys.readouterr().out
    for row in (
        "LiteRT in-process",
        "sync in-process",
        "burst in-process",
        "sync cross-process",
        "burst cross-process",
    ):
        assert row in out
    assert "not timed" not in out and "x LiteRT" in out


def test_an_input_passed_through_as_an_output_is_copied_whatever_its_type() -> None:
    """NNAPI outputs are computed operands: an int32 input that is also an output is
    copied (RESHAPE takes no integers, so an ADD of zero), and a repeated output too."""
    i32 = np.int32
    tensors = [Tensor((2, 3), i32), Tensor((2, 3), i32), Tensor((2, 3), i32)]
    model = graph(tensors, [("ADD", [0, 1], [2], options(schema.AddOptionsT))], [0, 1], [2, 0, 2])
    a, b = RNG.integers(-9, 9, (2, 3), dtype=i32), RNG.integers(-9, 9, (2, 3), dtype=i32)
    compare(model, [a, b])
