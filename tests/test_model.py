"""Model building: the NDK's rules, each broken once, with the result code it must give."""

from __future__ import annotations

import numpy as np
import pytest

import nnburst as nn
from nnburst.hal.interfaces import IDevice
from nnburst.hal.model import Lifetime
from nnburst.hal.types import Capabilities, DeviceType

F32 = nn.OperandCode.TENSOR_FLOAT32
T3x4 = nn.OperandType(F32, (3, 4))
ACT = nn.OperandType(nn.OperandCode.INT32)

#: Constants of the worked example: operand 1 (added) and operand 3 (multiplied).
C1 = np.arange(12, dtype=np.float32).reshape(3, 4)
C3 = np.full((3, 4), 2.0, np.float32)


def raises(code: nn.ResultCode):
    """``pytest.raises(NNError)`` that also checks the result code."""

    class _Check:
        def __enter__(self):
            self._ctx = pytest.raises(nn.NNError)
            self.info = self._ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self._ctx.__exit__(*exc)
            assert self.info.value.code == code, f"expected {code.name}, got {self.info.value}"
            return handled

    return _Check()


def build_example(
    memory: nn.Memory | None = None, finish: bool = True, identify: bool = True
) -> nn.Model:
    """The NNAPI guide's example: operand 6 = (operand 1 + operand 0) * operand 3.

    Seven [3][4] float32 / activation operands; operands 1 and 3 come from
    ``memory`` (CONSTANT_REFERENCE) when given, else are copied; operations
    are added in reverse order on purpose.
    """
    model = nn.Model()
    for t in (T3x4, T3x4, ACT, T3x4, T3x4, ACT, T3x4):
        model.add_operand(t)
    if memory is not None:
        np.frombuffer(memory.buffer, np.float32, 24)[:] = np.concatenate([C1.ravel(), C3.ravel()])
        model.set_operand_value_from_memory(1, memory, 0, 48)
        model.set_operand_value_from_memory(3, memory, 48, 48)
    else:
        model.set_operand_value(1, C1)
        model.set_operand_value(3, C3)
    model.set_operand_value(2, nn.FuseCode.NONE)
    model.set_operand_value(5, np.int32(0))
    model.add_operation(nn.OperationCode.MUL, [3, 4, 5], [6])
    model.add_operation(nn.OperationCode.ADD, [1, 0, 2], [4])
    if identify:
        model.identify_inputs_and_outputs([0], [6])
    if finish:
        model.finish()
    return model


def example_expected(x: np.ndarray) -> np.ndarray:
    return (C1 + x) * C3


def add_model(dims=(2,), out_dims=None) -> nn.Model:
    """out = a + b (activation NONE), dims possibly unknown."""
    model = nn.Model()
    t = nn.OperandType(F32, dims)
    a, b = model.add_operand(t), model.add_operand(t)
    act = model.add_operand(ACT)
    out = model.add_operand(nn.OperandType(F32, dims if out_dims is None else out_dims))
    model.set_operand_value(act, 0)
    model.add_operation(nn.OperationCode.ADD, [a, b, act], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    return model


# -- the worked example -----------------------------------------------------------------------
def test_worked_example_finishes_with_hal_lifetimes():
    with nn.Memory.create_shared(96) as memory:
        model = build_example(memory)
        main = model.hal_model.main
        lifetimes = [op.lifetime for op in main.operands]
        assert lifetimes == [
            Lifetime.SUBGRAPH_INPUT,
            Lifetime.CONSTANT_REFERENCE,
            Lifetime.CONSTANT_COPY,
            Lifetime.CONSTANT_REFERENCE,
            Lifetime.TEMPORARY_VARIABLE,
            Lifetime.CONSTANT_COPY,
            Lifetime.SUBGRAPH_OUTPUT,
        ]
        assert main.input_indexes == (0,) and main.output_indexes == (6,)
        assert [op.code for op in main.operations] == [nn.OperationCode.MUL, nn.OperationCode.ADD]
        np.testing.assert_array_equal(main.operands[1].value, C1)
        assert main.operands[2].value.shape == ()


def test_operands_are_numbered_in_insertion_order():
    model = nn.Model()
    assert [model.add_operand(ACT) for _ in range(4)] == [0, 1, 2, 3]


def test_value_from_memory_is_referenced_not_copied():
    with nn.Memory.create_shared(96) as memory:
        model = build_example(memory)
        np.frombuffer(memory.buffer, np.float32, 1)[0] = 42.0
        assert model.hal_model.main.operands[1].value[0, 0] == 42.0


def test_set_operand_value_copies_the_array():
    model = build_example(finish=False)
    source = np.ones((3, 4), np.float32)
    model.set_operand_value(1, source)
    source[:] = 7
    model.finish()
    np.testing.assert_array_equal(model.hal_model.main.operands[1].value, 1.0)


def test_set_operand_value_takes_raw_bytes():
    model = build_example(finish=False)
    model.set_operand_value(1, np.full((3, 4), 3.0, np.float32).tobytes())
    model.set_operand_value(2, np.int32(1).tobytes())
    model.finish()
    assert model.hal_model.main.operands[2].value == 1


def softmax_model(omit_axis_in_model: bool) -> nn.Model:
    """SOFTMAX(x, beta=1, axis): the axis is optional; omitted in the model or a model input."""
    model = nn.Model()
    x = model.add_operand(nn.OperandType(F32, (2, 3)))
    beta = model.add_operand(nn.OperandType(nn.OperandCode.FLOAT32))
    axis = model.add_operand(ACT)
    out = model.add_operand(nn.OperandType(F32, (2, 3)))
    model.set_operand_value(beta, 1.0)
    if omit_axis_in_model:
        model.set_operand_value(axis, None)
    model.add_operation(nn.OperationCode.SOFTMAX, [x, beta, axis], [out])
    model.identify_inputs_and_outputs([x] if omit_axis_in_model else [x, axis], [out])
    model.finish()
    return model


def test_none_omits_an_optional_operand():
    model = softmax_model(omit_axis_in_model=True)
    assert model.hal_model.main.operands[2].lifetime == Lifetime.NO_VALUE
    model = build_example(finish=False)
    model.set_operand_value(2, b"")  # the NDK's (NULL, 0)
    model.set_operand_value(2, 0)  # and a value can be given again before finish


def test_unknown_dimensions_are_allowed():
    model = add_model(dims=(0, 4))
    assert model.hal_model.main.operands[0].info.dimensions == (0, 4)
    model = add_model(dims=None)
    assert model.hal_model.main.operands[0].info.dimensions is None


def test_relaxed_flag_reaches_the_hal_model():
    model = build_example(finish=False)
    model.relax_computation_float32_to_float16(True)
    model.finish()
    assert model.hal_model.relax_float32_to_float16


# -- add_operand ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "operand_type",
    [
        nn.OperandType(nn.OperandCode.INT32, (1,)),  # a scalar with dimensions
        nn.OperandType(F32, (2, -1)),  # negative dimension
        nn.OperandType(F32, (2**32,)),  # not a uint32
        nn.OperandType(F32, (2,), scale=0.5),  # float tensors take no scale
        nn.OperandType(nn.OperandCode.FLOAT32, (), zero_point=1),
        nn.OperandType(nn.OperandCode.TENSOR_QUANT8_ASYMM, (2,), scale=0.0),  # quant needs a scale
        nn.OperandType(nn.OperandCode.TENSOR_QUANT8_ASYMM, (2,), scale=0.5, zero_point=256),
        nn.OperandType(nn.OperandCode.TENSOR_QUANT8_SYMM, (2,), scale=0.5, zero_point=1),
        nn.OperandType(nn.OperandCode.TENSOR_INT32, (2,), zero_point=3),
    ],
    ids=lambda t: f"{t.code.name}-{t.dimensions}-{t.scale}-{t.zero_point}",
)
def test_add_operand_rejects_invalid_types(operand_type):
    with raises(nn.ResultCode.BAD_DATA):
        nn.Model().add_operand(operand_type)


def test_add_operand_rejects_none_and_non_types():
    with raises(nn.ResultCode.UNEXPECTED_NULL):
        nn.Model().add_operand(None)
    with raises(nn.ResultCode.BAD_DATA):
        nn.Model().add_operand(3)


def test_add_operand_accepts_quantized_bias_scale():
    model = nn.Model()
    model.add_operand(nn.OperandType(nn.OperandCode.TENSOR_INT32, (2,), scale=0.25))
    model.add_operand(
        nn.OperandType(nn.OperandCode.TENSOR_QUANT8_ASYMM, (2,), scale=0.5, zero_point=128)
    )


# -- set_operand_value* -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "index, value",
    [
        (7, C1),  # no such operand
        (1, np.ones((2, 4), np.float32)),  # wrong element count
        (1, b"\0" * 47),  # wrong byte length
        (2, np.float32(1.0)),  # float data for an INT32 scalar would be truncated
        (2, 1.5),  # a float for an INT32 scalar
        (2, 2**40),  # out of int32 range
        (2, np.int64(2**40)),  # numpy integers are range-checked too
        (2, "RELU"),  # not a number
    ],
)
def test_set_operand_value_rejects_bad_values(index, value):
    model = build_example(finish=False)
    with raises(nn.ResultCode.BAD_DATA):
        model.set_operand_value(index, value)


def test_constant_tensor_needs_known_dimensions():
    model = nn.Model()
    model.add_operand(nn.OperandType(F32, (0, 2)))
    with raises(nn.ResultCode.BAD_DATA) as info:
        model.set_operand_value(0, np.zeros((1, 2), np.float32))
    assert "operand 0" in str(info.value)


def test_model_inputs_cannot_take_values():
    model = build_example(finish=False)
    with raises(nn.ResultCode.BAD_DATA):
        model.set_operand_value(0, C1)


def test_set_operand_value_from_memory_checks_its_arguments():
    model = build_example(finish=False)
    with nn.Memory.create_shared(64) as memory:
        with raises(nn.ResultCode.UNEXPECTED_NULL):
            model.set_operand_value_from_memory(1, None, 0, 48)
        with raises(nn.ResultCode.BAD_DATA):
            model.set_operand_value_from_memory(1, memory, 32, 48)  # past the end
        with raises(nn.ResultCode.BAD_DATA):
            model.set_operand_value_from_memory(1, memory, 0, 44)  # wrong length
        with raises(nn.ResultCode.BAD_DATA):
            model.set_operand_value_from_memory(1, memory, -4, 48)
        with raises(nn.ResultCode.BAD_DATA):
            model.set_operand_value_from_memory(1, b"\0" * 48, 0, 48)
        model.set_operand_value_from_memory(1, memory, 16, 48)


def test_set_operand_value_from_model_links_a_finished_model():
    branch = build_example()
    model = nn.Model()
    model.add_operand(nn.OperandType(nn.OperandCode.MODEL))
    model.add_operand(ACT)
    with raises(nn.ResultCode.BAD_DATA):
        model.set_operand_value_from_model(1, branch)  # not a MODEL operand
    with raises(nn.ResultCode.BAD_STATE):
        model.set_operand_value_from_model(0, build_example(finish=False))
    with raises(nn.ResultCode.UNEXPECTED_NULL):
        model.set_operand_value_from_model(0, None)
    with raises(nn.ResultCode.BAD_DATA):
        model.set_operand_value(0, 1)  # MODEL operands take a model
    model = build_example(finish=False, identify=False)
    ref = model.add_operand(nn.OperandType(nn.OperandCode.MODEL))
    model.set_operand_value_from_model(ref, branch)
    model.identify_inputs_and_outputs([0], [6])
    model.finish()
    hal = model.hal_model
    assert hal.main.operands[ref].lifetime == Lifetime.SUBGRAPH
    assert hal.main.operands[ref].subgraph == 0
    assert len(hal.referenced) == 1 and len(hal.referenced[0].operands) == 7


def test_model_operand_without_a_model_fails_finish():
    model = build_example(finish=False)
    model.add_operand(nn.OperandType(nn.OperandCode.MODEL))
    with raises(nn.ResultCode.BAD_DATA) as info:
        model.finish()
    assert "operand 7" in str(info.value)


def test_per_channel_quant_params_are_checked():
    per_channel = nn.OperandType(nn.OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 3))
    model = nn.Model()
    w = model.add_operand(per_channel)
    f = model.add_operand(T3x4)
    with raises(nn.ResultCode.BAD_DATA):
        model.set_operand_symm_per_channel_quant_params(f, 0, [1.0])  # wrong operand type
    with raises(nn.ResultCode.BAD_DATA):
        model.set_operand_symm_per_channel_quant_params(w, 2, [1.0, 1.0])  # no such axis
    with raises(nn.ResultCode.BAD_DATA):
        model.set_operand_symm_per_channel_quant_params(w, 1, [1.0, 1.0])  # 3 channels
    with raises(nn.ResultCode.BAD_DATA):
        model.set_operand_symm_per_channel_quant_params(w, 0, [1.0, 0.0])  # scales must be > 0
    with raises(nn.ResultCode.UNEXPECTED_NULL):
        model.set_operand_symm_per_channel_quant_params(w, 0, None)
    model.set_operand_symm_per_channel_quant_params(w, 0, [0.5, 0.25])
    model.set_operand_value(w, np.zeros((2, 3), np.int8))
    model.add_operation(
        nn.OperationCode.ADD, [f, f, model.add_operand(ACT)], [model.add_operand(T3x4)]
    )
    model.set_operand_value(2, 0)
    model.identify_inputs_and_outputs([f], [3])
    model.finish()
    assert model.hal_model.main.operands[w].info.channel_quant.scales == (0.5, 0.25)


def test_per_channel_operand_without_params_fails_finish():
    model = build_example(finish=False)
    model.add_operand(nn.OperandType(nn.OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2,)))
    with raises(nn.ResultCode.BAD_DATA):
        model.finish()


# -- add_operation and identify_inputs_and_outputs --------------------------------------------
def test_add_operation_checks_codes_and_indexes():
    model = build_example(finish=False)
    with raises(nn.ResultCode.BAD_DATA):
        model.add_operation(9999, [0, 1, 2], [4])
    with raises(nn.ResultCode.BAD_DATA):
        model.add_operation(nn.OperationCode.ADD, [0, 1, 99], [4])
    with raises(nn.ResultCode.BAD_DATA):
        model.add_operation(nn.OperationCode.ADD, [0, 1, 2], [])
    with raises(nn.ResultCode.BAD_DATA):
        model.add_operation(nn.OperationCode.ADD, [0, 4, 2], [4])  # same operand in and out
    with raises(nn.ResultCode.BAD_DATA):
        model.add_operation(nn.OperationCode.ADD, [0, "1", 2], [4])
    with raises(nn.ResultCode.UNEXPECTED_NULL):
        model.add_operation(nn.OperationCode.ADD, None, [4])
    with raises(nn.ResultCode.UNEXPECTED_NULL):
        model.add_operation(None, [0], [4])


def _unidentified_example() -> nn.Model:
    return build_example(finish=False, identify=False)


@pytest.mark.parametrize(
    "inputs, outputs, code",
    [
        ([0], [0], nn.ResultCode.BAD_DATA),  # both input and output
        ([0, 0], [6], nn.ResultCode.BAD_DATA),  # listed twice
        ([1], [6], nn.ResultCode.BAD_DATA),  # a constant
        ([0], [9], nn.ResultCode.BAD_DATA),  # no such operand
        (None, [6], nn.ResultCode.UNEXPECTED_NULL),
    ],
)
def test_identify_inputs_and_outputs_rules(inputs, outputs, code):
    with raises(code):
        _unidentified_example().identify_inputs_and_outputs(inputs, outputs)


def test_identify_inputs_and_outputs_only_once():
    with raises(nn.ResultCode.BAD_STATE):
        build_example(finish=False).identify_inputs_and_outputs([0], [6])


# -- finish -----------------------------------------------------------------------------------
def test_finish_needs_operations_and_outputs():
    model = nn.Model()
    model.add_operand(T3x4)
    with raises(nn.ResultCode.BAD_DATA):
        model.finish()
    model = _unidentified_example()
    with raises(nn.ResultCode.BAD_DATA) as info:
        model.finish()
    assert "no outputs" in str(info.value)


def test_operand_written_twice_is_rejected():
    model = build_example(finish=False)
    model.add_operation(nn.OperationCode.ADD, [0, 1, 2], [4])
    with raises(nn.ResultCode.BAD_DATA) as info:
        model.finish()
    assert "operand 4" in str(info.value)


def test_operand_never_written_is_rejected():
    model = build_example(finish=False)
    model.add_operand(T3x4)  # operand 7: no value, not an input, no writer
    with raises(nn.ResultCode.BAD_DATA) as info:
        model.finish()
    assert "operand 7" in str(info.value)


def test_operation_cannot_write_a_constant_or_a_model_input():
    model = build_example(finish=False)
    model.add_operation(nn.OperationCode.ADD, [4, 4, 2], [1])
    with raises(nn.ResultCode.BAD_DATA) as info:
        model.finish()
    assert "operand 1" in str(info.value) and "constant" in str(info.value)
    model = build_example(finish=False)
    model.add_operation(nn.OperationCode.ADD, [4, 4, 2], [0])
    with raises(nn.ResultCode.BAD_DATA) as info:
        model.finish()
    assert "model input" in str(info.value)


def test_cycles_are_rejected():
    model = nn.Model()
    a, b, c = (model.add_operand(T3x4) for _ in range(3))
    act = model.add_operand(ACT)
    model.set_operand_value(act, 0)
    model.add_operation(nn.OperationCode.ADD, [a, c, act], [b])
    model.add_operation(nn.OperationCode.ADD, [a, b, act], [c])
    model.identify_inputs_and_outputs([a], [c])
    with raises(nn.ResultCode.BAD_DATA) as info:
        model.finish()
    assert "cycle" in str(info.value)


def test_invalid_operation_is_reported_by_index_and_name():
    model = build_example(finish=False, identify=False)
    ints = model.add_operand(nn.OperandType(nn.OperandCode.TENSOR_INT32, (3, 4)))
    out = model.add_operand(T3x4)
    model.add_operation(nn.OperationCode.ADD, [0, ints, 2], [out])  # float + int32: invalid
    model.identify_inputs_and_outputs([0, ints], [6, out])
    with raises(nn.ResultCode.BAD_DATA) as info:
        model.finish()
    assert "operation 2 (ADD)" in str(info.value)


def test_failed_finish_leaves_the_model_invalid():
    model = build_example(finish=False)
    model.add_operand(T3x4)
    with raises(nn.ResultCode.BAD_DATA):
        model.finish()
    with raises(nn.ResultCode.BAD_STATE):
        model.finish()
    with raises(nn.ResultCode.BAD_STATE):
        model.add_operand(T3x4)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.add_operand(T3x4),
        lambda m: m.set_operand_value(2, 0),
        lambda m: m.set_operand_value_from_memory(1, nn.Memory.create_shared(48), 0, 48),
        lambda m: m.set_operand_value_from_model(0, m),
        lambda m: m.set_operand_symm_per_channel_quant_params(0, 0, [1.0]),
        lambda m: m.add_operation(nn.OperationCode.ADD, [0, 1, 2], [4]),
        lambda m: m.identify_inputs_and_outputs([0], [6]),
        lambda m: m.relax_computation_float32_to_float16(True),
        lambda m: m.finish(),
    ],
    ids=[
        "add_operand",
        "set_operand_value",
        "set_operand_value_from_memory",
        "set_operand_value_from_model",
        "set_operand_symm_per_channel_quant_params",
        "add_operation",
        "identify_inputs_and_outputs",
        "relax_computation_float32_to_float16",
        "finish",
    ],
)
def test_finished_model_cannot_change(call):
    model = build_example()
    with raises(nn.ResultCode.BAD_STATE):
        call(model)


# -- supported operations ---------------------------------------------------------------------
def test_supported_operations_for_devices():
    model = build_example()
    assert model.get_supported_operations_for_devices(nn.get_devices()) == [True, True]
    with raises(nn.ResultCode.BAD_DATA):
        model.get_supported_operations_for_devices([])
    with raises(nn.ResultCode.UNEXPECTED_NULL):
        model.get_supported_operations_for_devices(None)
    with raises(nn.ResultCode.BAD_STATE):
        build_example(finish=False).get_supported_operations_for_devices(nn.get_devices())


class AddOnlyDevice(IDevice):
    """A device that runs ADD and nothing else (it never prepares anything)."""

    name = "test-addonly"
    type = DeviceType.ACCELERATOR
    version_string = "test-addonly 1"
    feature_level = 2

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities()

    def get_supported_operations(self, model):
        return [op.code == nn.OperationCode.ADD for op in model.main.operations]

    def prepare_model(self, model, preference=None, priority=None, deadline_ns=None, cache=None):
        raise AssertionError("an add-only device cannot prepare the example")


def test_supported_operations_combine_devices():
    model = build_example()  # operation 0 is MUL, operation 1 is ADD
    add_only = nn.Device(AddOnlyDevice())
    assert model.get_supported_operations_for_devices([add_only]) == [False, True]
    assert model.get_supported_operations_for_devices([add_only, *nn.get_devices()]) == [True, True]


# -- errors at the call that made the mistake ----------------------------------------------------


def test_add_operation_checks_operand_counts_when_called():
    model = nn.Model()
    tensor = nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, (2,))
    a, b, out = (model.add_operand(tensor) for _ in range(3))
    with pytest.raises(nn.NNError, match=r"ADD\): takes 3 inputs, got 2") as caught:
        model.add_operation(nn.OperationCode.ADD, [a, b], [out])
    assert caught.value.code == nn.ResultCode.BAD_DATA
    with pytest.raises(nn.NNError, match=r"TOPK_V2\): gives 2 outputs, got 1"):
        model.add_operation(nn.OperationCode.TOPK_V2, [a, b], [out])
    with pytest.raises(nn.NNError, match="takes at least 2 inputs, got 1"):
        model.add_operation(nn.OperationCode.CONCATENATION, [a], [out])


def test_every_operation_has_operand_counts():
    from nnburst.arity import arity

    assert [code.name for code in nn.OperationCode if arity(code) is None] == []


@pytest.mark.parametrize("dimensions", [("a",), (1.5,), 3, (True,)])
def test_a_bad_operand_type_dimension_is_bad_data(dimensions):
    with pytest.raises(nn.NNError) as caught:
        nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, dimensions)
    assert caught.value.code == nn.ResultCode.BAD_DATA
    assert "dimensions" in str(caught.value)
