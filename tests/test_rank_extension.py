"""The nnburst.rank_above_4 extension: tensors of rank 5 to 8 for the operations
where rank is only bookkeeping, given only to devices that declare it."""

from __future__ import annotations

import numpy as np
import pytest

import nnburst as nn
from nnburst.codes import OperandCode, OperationCode
from nnburst.cpu.driver import cpu_device
from nnburst.errors import BadDataError
from nnburst.extensions import MAX_EXTENDED_RANK, RANK_ABOVE_4, uses_rank_above_4
from nnburst.operands import OperandInfo

from .op_models import model as one_op_model
from .op_models import rejects, run
from .test_partition import FakeDevice, cpu, register, step_devices  # noqa: F401 (a fixture)

F32 = OperandCode.TENSOR_FLOAT32
INT = OperandCode.INT32
RNG = np.random.default_rng(28)
SHAPE5 = (2, 1, 3, 2, 4)


def t(dims: tuple[int, ...], code: OperandCode = F32) -> OperandInfo:
    return OperandInfo(code, tuple(dims))


def scalar(value: int | float, code: OperandCode = INT) -> tuple[OperandInfo, np.ndarray]:
    dtype = np.int32 if code == INT else np.float32
    return (OperandInfo(code, ()), np.array(value, dtype))


def ints(values: list[int]) -> tuple[OperandInfo, np.ndarray]:
    array = np.array(values, np.int32)
    return (OperandInfo(OperandCode.TENSOR_INT32, array.shape), array)


def test_the_cpu_driver_declares_the_extension() -> None:
    assert RANK_ABOVE_4 in cpu_device().extensions


# -- the CPU driver at rank 5 and over ----------------------------------------------------------


def test_rank_5_operations_compute_as_at_rank_4() -> None:
    x = RNG.standard_normal(SHAPE5).astype(np.float32)
    y = RNG.standard_normal((1, 1, 3, 1, 4)).astype(np.float32)
    (out,) = run(OperationCode.ADD, [t(SHAPE5), t(y.shape), scalar(0)], [t(SHAPE5)], x, y)
    np.testing.assert_array_equal(out, x + y)
    (out,) = run(OperationCode.MUL, [t(SHAPE5), t(y.shape), scalar(1)], [t(SHAPE5)], x, y)
    np.testing.assert_array_equal(out, np.maximum(x * y, 0))
    perm = [4, 0, 3, 1, 2]
    (out,) = run(OperationCode.TRANSPOSE, [t(SHAPE5), ints(perm)], [t(x.transpose(perm).shape)], x)
    np.testing.assert_array_equal(out, x.transpose(perm))
    (out,) = run(
        OperationCode.RESHAPE, [t((6, 8)), ints([2, 1, 3, 2, 4])], [t(SHAPE5)], x.reshape(6, 8)
    )
    np.testing.assert_array_equal(out, x)
    (out,) = run(
        OperationCode.SOFTMAX, [t(SHAPE5), scalar(1.0, OperandCode.FLOAT32)], [t(SHAPE5)], x
    )
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-6)
    (out,) = run(
        OperationCode.CONCATENATION, [t(SHAPE5), t(SHAPE5), scalar(3)], [t((2, 1, 3, 4, 4))], x, x
    )
    np.testing.assert_array_equal(out, np.concatenate([x, x], 3))
    (out,) = run(OperationCode.SQUEEZE, [t(SHAPE5), ints([1])], [t((2, 3, 2, 4))], x)
    np.testing.assert_array_equal(out, x[:, 0])
    strided = [
        ints([0, 0, 1, 0, 0]),
        ints([2, 1, 3, 2, 4]),
        ints([1, 1, 1, 1, 2]),
        scalar(0),
        scalar(0),
        scalar(0),
    ]
    (out,) = run(OperationCode.STRIDED_SLICE, [t(SHAPE5), *strided], [t((2, 1, 2, 2, 2))], x)
    np.testing.assert_array_equal(out, x[:, :, 1:3, :, ::2])
    (out,) = run(OperationCode.LOGISTIC, [t(SHAPE5)], [t(SHAPE5)], x)
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-x)), rtol=1e-6)


def test_rank_8_is_the_limit() -> None:
    dims = (1,) * (MAX_EXTENDED_RANK + 1)
    rejects(OperationCode.ADD, [t(dims), t(dims), scalar(0)], [t(dims)], "rank 9")
    rejects(OperationCode.RESHAPE, [t((2,)), ints([2] + [1] * 8)], [t((0,) * 9)], "rank 9")
    x = np.arange(2, dtype=np.float32).reshape((1,) * 7 + (2,))
    (out,) = run(OperationCode.ADD, [t(x.shape), t(x.shape), scalar(0)], [t(x.shape)], x, x)
    np.testing.assert_array_equal(out, 2 * x)


def test_operations_outside_the_extension_keep_nnapis_limit() -> None:
    rejects(OperationCode.FLOOR, [t(SHAPE5)], [t(SHAPE5)], "rank 5")
    rejects(OperationCode.MEAN, [t(SHAPE5), ints([1]), scalar(1)], [t(SHAPE5)], "rank 5")


def test_uses_rank_above_4_looks_at_every_operand() -> None:
    hal = one_op_model(OperationCode.RESHAPE, [t((6, 8)), ints([2, 1, 3, 2, 4])], [t(SHAPE5)])
    assert uses_rank_above_4(hal.main, hal.main.operations[0])  # the output alone is rank 5
    hal = one_op_model(OperationCode.ADD, [t((2, 3)), t((2, 3)), scalar(0)], [t((2, 3))])
    assert not uses_rank_above_4(hal.main, hal.main.operations[0])
    hal = one_op_model(OperationCode.TILE, [t(SHAPE5), ints([1] * 5)], [t(SHAPE5)])
    assert not uses_rank_above_4(hal.main, hal.main.operations[0])  # NNAPI's TILE has no limit


# -- partitioning -------------------------------------------------------------------------------


class Declaring(FakeDevice):
    extensions = (RANK_ABOVE_4,)


def _model() -> nn.Model:
    """[6, 8] -> RESHAPE to rank 5 -> ADD to itself (rank 5) -> RESHAPE back -> ADD (rank 2)."""
    model = nn.Model()
    flat = nn.OperandType(F32, (6, 8))
    five = nn.OperandType(F32, SHAPE5)
    x, r5, s5, back, out = (model.add_operand(o) for o in (flat, five, five, flat, flat))
    to5 = model.add_operand(nn.OperandType(OperandCode.TENSOR_INT32, (5,)))
    to2 = model.add_operand(nn.OperandType(OperandCode.TENSOR_INT32, (2,)))
    act = model.add_operand(nn.OperandType(INT))
    model.set_operand_value(to5, np.array(SHAPE5, np.int32))
    model.set_operand_value(to2, np.array([6, 8], np.int32))
    model.set_operand_value(act, 0)
    model.add_operation(OperationCode.RESHAPE, [x, to5], [r5])
    model.add_operation(OperationCode.ADD, [r5, r5, act], [s5])
    model.add_operation(OperationCode.RESHAPE, [s5, to2], [back])
    model.add_operation(OperationCode.ADD, [back, x, act], [out])
    model.identify_inputs_and_outputs([x], [out])
    model.finish()
    return model


def _run(compilation: nn.Compilation) -> np.ndarray:
    x = RNG.standard_normal((6, 8)).astype(np.float32)
    out = np.zeros((6, 8), np.float32)
    execution = nn.Execution(compilation)
    execution.set_input(0, x)
    execution.set_output(0, out)
    execution.compute()
    np.testing.assert_array_equal(out, 3 * x)
    return out


def test_a_device_that_does_not_declare_it_never_receives_such_an_operation(register) -> None:  # noqa: F811
    (fast,) = register(FakeDevice("test-fast", (F32, INT), exec_time=0.1, power=0.1))
    compilation = nn.Compilation(_model(), [fast, cpu()])
    compilation.finish()
    # Operations 0-2 touch a rank-5 operand: the CPU; only the rank-2 ADD is the fast device's.
    assert step_devices(compilation) == [("nnburst-reference", [0, 1, 2]), ("test-fast", [3])]
    _run(compilation)
    with pytest.raises(
        BadDataError,
        match=r"no device \(test-fast\) supports operation\(s\) 0 \(RESHAPE\), 1 \(ADD\), 2",
    ):
        nn.Compilation(_model(), [fast]).finish()


def test_a_device_that_declares_it_receives_them(register) -> None:  # noqa: F811
    (fast,) = register(Declaring("test-declaring", (F32, INT), exec_time=0.1, power=0.1))
    compilation = nn.Compilation(_model(), [fast, cpu()])
    compilation.finish()
    assert compilation.device is fast or step_devices(compilation) == [
        ("test-declaring", [0, 1, 2, 3])
    ]
    _run(compilation)
    assert fast.hal.executions == 1
