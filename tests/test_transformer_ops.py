"""BATCH_MATMUL, PACK, MIRROR_PAD and REVERSE (NNAPI feature level 6) on the CPU
driver: known answers worked out by hand (quantized included, exact) in the
manner of the CTS vectors, and the operand rules that refuse a model."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst.codes import OperandCode, OperationCode
from nnburst.operands import OperandInfo

from .op_models import OMITTED, rejects, run

F32, I32, Q8S = (
    OperandCode.TENSOR_FLOAT32,
    OperandCode.TENSOR_INT32,
    OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
)
BOOL, INT = OperandCode.BOOL, OperandCode.INT32


def t(
    code: OperandCode, dims: tuple[int, ...], scale: float = 0.0, zero_point: int = 0
) -> OperandInfo:
    return OperandInfo(code, tuple(dims), scale, zero_point)


def flag(value: bool) -> tuple[OperandInfo, np.ndarray]:
    return (t(BOOL, ()), np.array(value))


def scalar(value: int) -> tuple[OperandInfo, np.ndarray]:
    return (t(INT, ()), np.array(value, np.int32))


def ints(values: list) -> tuple[OperandInfo, np.ndarray]:
    array = np.array(values, np.int32)
    return (t(I32, array.shape), array)


# -- BATCH_MATMUL -------------------------------------------------------------------------------

A = np.array([[[1, 2, 3], [4, 5, 6]], [[-1, 0, 2], [3, -2, 1]]], np.float32)  # [2, 2, 3]
B = np.array([[[1, 0], [0, 1], [1, 1]], [[2, 1], [0, -1], [1, 3]]], np.float32)  # [2, 3, 2]
AB = np.array([[[4, 5], [10, 11]], [[0, 5], [7, 8]]], np.float32)  # worked by hand


def test_batch_matmul_float_known_answer() -> None:
    (out,) = run(
        OperationCode.BATCH_MATMUL,
        [t(F32, (2, 2, 3)), t(F32, (2, 3, 2))],
        [t(F32, (2, 2, 2))],
        A,
        B,
    )
    np.testing.assert_array_equal(out, AB)


def test_batch_matmul_adjoint_flags_transpose_the_last_two_dimensions() -> None:
    at, bt = A.transpose(0, 2, 1).copy(), B.transpose(0, 2, 1).copy()
    inputs = [t(F32, (2, 3, 2)), t(F32, (2, 2, 3)), flag(True), flag(True)]
    (out,) = run(OperationCode.BATCH_MATMUL, inputs, [t(F32, (2, 2, 2))], at, bt)
    np.testing.assert_array_equal(out, AB)
    inputs = [t(F32, (2, 2, 3)), t(F32, (2, 2, 3)), flag(False), flag(True)]
    (out,) = run(OperationCode.BATCH_MATMUL, inputs, [t(F32, (2, 2, 2))], A, bt)
    np.testing.assert_array_equal(out, AB)
    inputs = [t(F32, (2, 2, 3)), t(F32, (2, 3, 2)), (t(BOOL, ()), OMITTED), (t(BOOL, ()), OMITTED)]
    (out,) = run(OperationCode.BATCH_MATMUL, inputs, [t(F32, (2, 2, 2))], A, B)
    np.testing.assert_array_equal(out, AB)


def test_batch_matmul_int32_wraps_like_c() -> None:
    x = np.array([[2**30, 2**30]], np.int32)
    y = np.array([[2], [1]], np.int32)  # 2**31 + 2**30 wraps to -2**30
    (out,) = run(
        OperationCode.BATCH_MATMUL, [t(I32, (1, 2)), t(I32, (2, 1))], [t(I32, (1, 1))], x, y
    )
    assert out.tolist() == [[-(2**30)]]


def test_batch_matmul_quantized_is_exact() -> None:
    # x: scale 0.5, zero point 1; y: scale 0.25, zero point -2; output scale 0.25, zero
    # point 3: the multiplier is 0.5, which the reference rounds half up (1.5 -> 2,
    # -1.5 -> -1), not half to even and not away from zero.
    x = np.array([[[2, 4], [0, 1]]], np.int8)  # x - 1 = [[1, 3], [-1, 0]]
    y = np.array([[[-1, 1], [0, -2]]], np.int8)  # y + 2 = [[1, 3], [2, 0]]
    sums = np.array([[[7, 3], [-1, -3]]])  # (x - 1) @ (y + 2), by hand
    expected = np.floor(sums * 0.5 + 0.5) + 3  # [[7, 5], [3, 2]]
    inputs = [t(Q8S, (1, 2, 2), 0.5, 1), t(Q8S, (1, 2, 2), 0.25, -2)]
    (out,) = run(OperationCode.BATCH_MATMUL, inputs, [t(Q8S, (1, 2, 2), 0.25, 3)], x, y)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, expected)
    assert out.tolist() == [[[7, 5], [3, 2]]]


def test_batch_matmul_quantized_saturates() -> None:
    x = np.full((2, 2), 127, np.int8)
    y = np.full((2, 2), 127, np.int8)
    inputs = [t(Q8S, (2, 2), 1.0, 0), t(Q8S, (2, 2), 1.0, 0)]
    (out,) = run(OperationCode.BATCH_MATMUL, inputs, [t(Q8S, (2, 2), 1.0, 0)], x, y)
    assert (out == 127).all()


@pytest.mark.parametrize(
    "inputs,output,match",
    [
        ([t(F32, (2, 2, 3)), t(F32, (3, 2))], t(F32, (2, 2, 2)), "rank 3 and input 1 rank 2"),
        ([t(F32, (1, 1, 1, 2, 3)), t(F32, (1, 1, 1, 3, 2))], t(F32, (1, 1, 1, 2, 2)), "rank 5"),
        (
            [t(F32, (2, 3)), t(F32, (2, 3))],
            t(F32, (2, 3)),
            "3 columns to multiply and input 1 2 rows",
        ),
        ([t(F32, (2, 2, 3)), t(F32, (3, 3, 2))], t(F32, (2, 2, 2)), "batch dimension 0 differs"),
        ([t(F32, (2, 3)), t(I32, (3, 2))], t(F32, (2, 2)), "input 1 .* has type TENSOR_INT32"),
        (
            [
                t(OperandCode.TENSOR_QUANT8_ASYMM, (2, 3), 1.0),
                t(OperandCode.TENSOR_QUANT8_ASYMM, (3, 2), 1.0),
            ],
            t(OperandCode.TENSOR_QUANT8_ASYMM, (2, 2), 1.0),
            "TENSOR_QUANT8_ASYMM;",
        ),
        ([t(F32, (2, 3)), t(F32, (3, 2)), scalar(1)], t(F32, (2, 2)), r"adj_x\) has type INT32"),
    ],
)
def test_batch_matmul_refusals(inputs: list, output: OperandInfo, match: str) -> None:
    rejects(OperationCode.BATCH_MATMUL, inputs, [output], match)


# -- PACK ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "axis,shape,expected",
    [
        (0, (2, 2, 2), [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]),
        (1, (2, 2, 2), [[[1, 2], [5, 6]], [[3, 4], [7, 8]]]),
        (2, (2, 2, 2), [[[1, 5], [2, 6]], [[3, 7], [4, 8]]]),
    ],
)
def test_pack_known_answers(axis: int, shape: tuple, expected: list) -> None:
    a, b = np.array([[1, 2], [3, 4]], np.int8), np.array([[5, 6], [7, 8]], np.int8)
    q = t(Q8S, (2, 2), 0.5, -3)
    (out,) = run(OperationCode.PACK, [scalar(axis), q, q], [t(Q8S, shape, 0.5, -3)], a, b)
    assert out.dtype == np.int8 and out.tolist() == expected


@pytest.mark.parametrize(
    "inputs,output,match",
    [
        (
            [scalar(3), t(F32, (2, 2)), t(F32, (2, 2))],
            t(F32, (2, 2, 2)),
            r"axis 3 is out of range \[0, 3\)",
        ),
        (
            [scalar(-1), t(F32, (2, 2)), t(F32, (2, 2))],
            t(F32, (2, 2, 2)),
            "axis -1 is out of range",
        ),
        (
            [scalar(0), t(F32, (2, 2)), t(F32, (2, 3))],
            t(F32, (2, 2, 2)),
            "input tensor 2 has dimensions",
        ),
        ([scalar(0), t(F32, (2, 2)), t(F32, (2, 2))], t(F32, (3, 2, 2)), "output dimension 0 is 3"),
        (
            [scalar(0), t(Q8S, (2,), 0.5, 0), t(Q8S, (2,), 0.25, 0)],
            t(Q8S, (2, 2), 0.5, 0),
            "quantized unlike",
        ),
        (
            [scalar(0), t(Q8S, (2,), 0.5, 0), t(Q8S, (2,), 0.5, 0)],
            t(Q8S, (2, 2), 0.5, 1),
            "scale and zero point",
        ),
    ],
)
def test_pack_refusals(inputs: list, output: OperandInfo, match: str) -> None:
    rejects(OperationCode.PACK, inputs, [output], match)


# -- MIRROR_PAD ---------------------------------------------------------------------------------

X = np.array([[1, 2, 3], [4, 5, 6]], np.float32)


def test_mirror_pad_reflect_and_symmetric() -> None:
    paddings = ints([[1, 1], [2, 2]])
    (out,) = run(
        OperationCode.MIRROR_PAD, [t(F32, (2, 3)), paddings, scalar(0)], [t(F32, (4, 7))], X
    )
    assert out.tolist() == [
        [6, 5, 4, 5, 6, 5, 4],
        [3, 2, 1, 2, 3, 2, 1],
        [6, 5, 4, 5, 6, 5, 4],
        [3, 2, 1, 2, 3, 2, 1],
    ]
    (out,) = run(
        OperationCode.MIRROR_PAD, [t(F32, (2, 3)), paddings, scalar(1)], [t(F32, (4, 7))], X
    )
    assert out.tolist() == [
        [2, 1, 1, 2, 3, 3, 2],
        [2, 1, 1, 2, 3, 3, 2],
        [5, 4, 4, 5, 6, 6, 5],
        [5, 4, 4, 5, 6, 6, 5],
    ]


def test_mirror_pad_quantized_copies_values() -> None:
    x = np.array([10, -20, 30], np.int8)
    q = t(Q8S, (3,), 0.1, 4)
    (out,) = run(
        OperationCode.MIRROR_PAD, [q, ints([[2, 1]]), scalar(0)], [t(Q8S, (6,), 0.1, 4)], x
    )
    assert out.tolist() == [30, -20, 10, -20, 30, -20]


def test_mirror_pad_run_time_paddings_are_checked() -> None:
    from nnburst.errors import NNError

    inputs = [t(F32, (2, 3)), t(I32, (2, 2)), scalar(0)]
    with pytest.raises(NNError, match=r"exceeds 1 \(REFLECT\)"):
        run(
            OperationCode.MIRROR_PAD,
            inputs,
            [t(F32, (0, 0))],
            X,
            np.array([[2, 0], [0, 0]], np.int32),
        )


@pytest.mark.parametrize(
    "inputs,match",
    [
        ([t(F32, (2, 3)), ints([[2, 0], [0, 0]]), scalar(0)], r"exceeds 1 \(REFLECT\)"),
        ([t(F32, (2, 3)), ints([[0, 0], [0, 4]]), scalar(1)], r"exceeds 3 \(SYMMETRIC\)"),
        ([t(F32, (2, 3)), ints([[0, 0], [0, 0]]), scalar(2)], "mode 2 is neither"),
        ([t(F32, (2, 3)), ints([[0, 0]]), scalar(0)], r"shape \[2, 2\]"),
        ([t(F32, (2, 3)), ints([[0, -1], [0, 0]]), scalar(0)], "non-negative"),
        ([t(F32, (2, 3)), ints([0, 0, 0, 0]), scalar(0)], "rank 1; expected 2"),
    ],
)
def test_mirror_pad_refusals(inputs: list, match: str) -> None:
    rejects(OperationCode.MIRROR_PAD, inputs, [t(F32, (0, 0))], match)


# -- REVERSE ------------------------------------------------------------------------------------


def test_reverse_known_answers() -> None:
    (out,) = run(OperationCode.REVERSE, [t(F32, (2, 3)), ints([1])], [t(F32, (2, 3))], X)
    assert out.tolist() == [[3, 2, 1], [6, 5, 4]]
    (out,) = run(OperationCode.REVERSE, [t(F32, (2, 3)), ints([0])], [t(F32, (2, 3))], X)
    assert out.tolist() == [[4, 5, 6], [1, 2, 3]]
    x = np.array([[1, 2], [3, 4]], np.int32)
    (out,) = run(
        OperationCode.REVERSE,
        [t(I32, (2, 2)), t(I32, (1,))],
        [t(I32, (2, 2))],
        x,
        np.array([1], np.int32),
    )
    assert out.tolist() == [[2, 1], [4, 3]]


@pytest.mark.parametrize(
    "inputs,match",
    [
        ([t(F32, (2, 3)), ints([0, 1])], r"axis must have shape \[1\]"),
        ([t(F32, (2, 3)), ints([2])], r"axis 2 is out of range \[0, 2\)"),
        ([t(F32, (2, 3)), scalar(0)], "has type INT32"),
        ([t(OperandCode.TENSOR_BOOL8, (2,)), ints([0])], "has type TENSOR_BOOL8"),
    ],
)
def test_reverse_refusals(inputs: list, match: str) -> None:
    rejects(OperationCode.REVERSE, inputs, [t(F32, (2, 3))], match)


def test_the_new_operations_pass_through_the_runtime() -> None:
    """Model.finish validates them and a compilation runs them (the public path)."""
    import nnburst

    model = nnburst.Model()
    x = model.add_operand(nnburst.OperandType(F32, (2, 2, 3)))
    y = model.add_operand(nnburst.OperandType(F32, (2, 3, 2)))
    out = model.add_operand(nnburst.OperandType(F32, (2, 2, 2)))
    model.add_operation(OperationCode.BATCH_MATMUL, [x, y], [out])
    model.identify_inputs_and_outputs([x, y], [out])
    model.finish()
    compilation = nnburst.Compilation(model)
    compilation.finish()
    execution = nnburst.Execution(compilation)
    result = np.zeros((2, 2, 2), np.float32)
    execution.set_input(0, A)
    execution.set_input(1, B)
    execution.set_output(0, result)
    execution.compute()
    np.testing.assert_array_equal(result, AB)


# -- the TFLite importer ------------------------------------------------------------------------


def _litert_cases() -> dict:
    pytest.importorskip(
        "ai_edge_litert", reason="LiteRT (pip install '.[litert]') is the reference"
    )
    from .tflite_builder import Tensor as T
    from .tflite_builder import options, schema, single_op

    rng = np.random.default_rng(28)
    f = np.float32

    def rand(*shape: int) -> np.ndarray:
        return rng.uniform(-1, 1, shape).astype(f)

    def q8(*shape: int) -> np.ndarray:
        return rng.integers(-128, 128, shape, dtype=np.int8)

    bmm = schema.BatchMatMulOptionsT
    return {
        "batch matmul computed": (
            single_op(
                "BATCH_MATMUL", [T((2, 3, 4), f), T((2, 4, 5), f)], [T((2, 3, 5), f)], options(bmm)
            ),
            [rand(2, 3, 4), rand(2, 4, 5)],
        ),
        "batch matmul adjoints": (
            single_op(
                "BATCH_MATMUL",
                [T((1, 2, 4, 3), f), T((1, 2, 5, 4), f)],
                [T((1, 2, 3, 5), f)],
                options(bmm, adjX=True, adjY=True),
            ),
            [rand(1, 2, 4, 3), rand(1, 2, 5, 4)],
        ),  # fmt: skip
        "batch matmul int8": (
            single_op(
                "BATCH_MATMUL",
                [
                    T((2, 3, 8), np.int8, scale=0.05, zero_point=3),
                    T((2, 8, 4), np.int8, scale=0.02, zero_point=-5),
                ],
                [T((2, 3, 4), np.int8, scale=0.07, zero_point=-2)],
                options(bmm),
            ),
            [q8(2, 3, 8), q8(2, 8, 4)],
        ),
        "pack int8": (
            single_op(
                "PACK",
                [T((2, 3), np.int8, scale=0.1, zero_point=1) for _ in range(3)],
                [T((2, 3, 3), np.int8, scale=0.1, zero_point=1)],
                options(schema.PackOptionsT, valuesCount=3, axis=-1),
            ),
            [q8(2, 3), q8(2, 3), q8(2, 3)],
        ),  # fmt: skip
        "mirror pad reflect": (
            single_op(
                "MIRROR_PAD",
                [T((1, 4, 5, 2), f), _const_tensor([[0, 0], [2, 1], [1, 3], [0, 0]])],
                [T((1, 7, 9, 2), f)],
                options(schema.MirrorPadOptionsT, mode=0),
            ),
            [rand(1, 4, 5, 2)],
        ),  # fmt: skip
        "mirror pad symmetric": (
            single_op(
                "MIRROR_PAD",
                [T((3, 4), f), _const_tensor([[3, 1], [0, 4]])],
                [T((7, 8), f)],
                options(schema.MirrorPadOptionsT, mode=1),
            ),
            [rand(3, 4)],
        ),  # fmt: skip
        "reverse v2": (
            single_op(
                "REVERSE_V2", [T((2, 3, 4), f), _const_tensor([-1])], [T((2, 3, 4), f)], None
            ),
            [rand(2, 3, 4)],
        ),
    }


def _const_tensor(values: list) -> object:
    from .tflite_builder import Tensor as T

    array = np.asarray(values, np.int32)
    return T(array.shape, np.int32, array)


CASES = [
    "batch matmul computed",
    "batch matmul adjoints",
    "batch matmul int8",
    "pack int8",
    "mirror pad reflect",
    "mirror pad symmetric",
    "reverse v2",
]


@pytest.mark.parametrize("name", CASES)
def test_tflite_operators_map_to_the_new_operations_and_match_litert(name: str) -> None:
    from nnburst import tflite

    from .tflite_builder import run_litert

    model, inputs = _litert_cases()[name]
    codes = {op.code for op in tflite.load(model).model.hal_model.main.operations}
    assert codes & {
        OperationCode.BATCH_MATMUL,
        OperationCode.PACK,
        OperationCode.MIRROR_PAD,
        OperationCode.REVERSE,
    }
    want = run_litert(model, inputs)
    with tflite.Runner(model, cache_dir=None) as runner:
        got = runner(*inputs)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if w.dtype == np.int8:
            np.testing.assert_array_equal(g, w)  # exact, as NNAPI is
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


# -- the ONNX importer --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_onnx_reflect_pad_is_one_mirror_pad(dtype: type) -> None:
    pytest.importorskip("onnxruntime")
    from onnx import helper, numpy_helper

    from nnburst import onnx as nn_onnx

    from .test_onnx import against_onnxruntime

    element = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")],
            "g",
            [helper.make_tensor_value_info("x", element, [2, 3, 4])],
            [helper.make_tensor_value_info("y", element, [2, 6, 7])],
            [numpy_helper.from_array(np.array([0, 2, 3, 0, 1, 0], np.int64), "pads")],
        ),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    codes = [op.code for op in nn_onnx.load(model).model.hal_model.main.operations]
    assert codes == [OperationCode.MIRROR_PAD]
    x = (np.random.default_rng(1).standard_normal((2, 3, 4)) * 10).astype(dtype)
    against_onnxruntime(model, {"x": x})
