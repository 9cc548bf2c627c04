"""``nnburst.__all__`` is exactly the documented runtime surface (docs/api.md §1)."""

from __future__ import annotations

import enum

import pytest

import nnburst

#: api.md §1, in the order it lists them.
DOCUMENTED = [
    "OperandCode",
    "OperationCode",
    "FuseCode",
    "PaddingCode",
    "PreferenceCode",
    "PriorityCode",
    "DeviceTypeCode",
    "DurationCode",
    "ResultCode",
    "NNError",
    "OperandType",
    "Model",
    "get_devices",
    "get_default_loop_timeout",
    "get_maximum_loop_timeout",
    "Device",
    "Compilation",
    "Memory",
    "MemoryDesc",
    "Execution",
    "Event",
    "Burst",
    # additions beyond api.md §1 (nothing documented there is renamed or removed)
    "get_device",
]


def test_all_is_the_documented_surface():
    assert sorted(nnburst.__all__) == sorted(DOCUMENTED)


def test_every_exported_name_exists_and_is_public():
    for name in nnburst.__all__:
        assert getattr(nnburst, name).__name__ == name


def test_fmq_is_not_re_exported():
    assert "fmq" not in nnburst.__all__
    assert not any(
        getattr(getattr(nnburst, n), "__module__", "").startswith("nnburst.fmq")
        for n in nnburst.__all__
    )


def test_enums_carry_ndk_numbers():
    for name in (
        "OperandCode",
        "OperationCode",
        "FuseCode",
        "PaddingCode",
        "PreferenceCode",
        "PriorityCode",
        "DeviceTypeCode",
        "DurationCode",
        "ResultCode",
    ):
        assert issubclass(getattr(nnburst, name), enum.IntEnum)
    assert nnburst.OperationCode.RESIZE_NEAREST_NEIGHBOR == 94
    assert nnburst.PriorityCode.DEFAULT == nnburst.PriorityCode.MEDIUM == 100
    assert nnburst.ResultCode.DEAD_OBJECT == 14


@pytest.mark.parametrize(
    "name",
    ["Model", "Compilation", "Execution", "Burst", "Memory", "MemoryDesc", "Event", "Device"],
)
def test_documented_methods_exist(name):
    methods = {
        "Model": [
            "add_operand",
            "set_operand_value",
            "set_operand_value_from_memory",
            "set_operand_value_from_model",
            "set_operand_symm_per_channel_quant_params",
            "add_operation",
            "identify_inputs_and_outputs",
            "relax_computation_float32_to_float16",
            "finish",
            "get_supported_operations_for_devices",
        ],
        "Compilation": [
            "set_preference",
            "set_priority",
            "set_timeout",
            "set_caching",
            "finish",
            "close",
            "__enter__",
            "__exit__",
        ],
        "Execution": [
            "set_input",
            "set_input_from_memory",
            "set_output",
            "set_output_from_memory",
            "set_measure_timing",
            "set_timeout",
            "set_loop_timeout",
            "compute",
            "start_compute",
            "start_compute_with_dependencies",
            "burst_compute",
            "get_output_operand_rank",
            "get_output_operand_dimensions",
            "get_duration",
            "set_reusable",
        ],
        "Burst": ["close", "__enter__", "__exit__"],
        "Memory": [
            "create_shared",
            "from_fd",
            "from_desc",
            "copy",
            "buffer",
            "close",
            "__enter__",
            "__exit__",
        ],
        "MemoryDesc": ["add_input_role", "add_output_role", "set_dimensions", "finish"],
        "Event": ["wait"],
        "Device": ["name", "type", "version", "feature_level", "wait", "hal"],
    }[name]
    cls = getattr(nnburst, name)
    missing = [m for m in methods if not hasattr(cls, m)]
    assert not missing
