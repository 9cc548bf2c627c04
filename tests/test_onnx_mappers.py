"""The ONNX mappers, one pinned node test at a time.

test_onnx.py runs ONNX's node tests as one test through ONNX's own runner; here
every pinned passing test is its own pytest item (the same model, inputs and
expected outputs, which ONNX computed with its reference implementation), so a
mutation run picks just the ones that reach the mapper it changed and each
mutant costs seconds, not the whole harness.  The comparison is the runner's:
``assert_allclose`` with rtol 1e-3 and atol 1e-7, exact for integers and booleans.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from .model_cache import wheel_directory

PINNED = [
    line
    for line in (Path(__file__).parent / "onnx_node_tests_passing.txt").read_text().splitlines()
    if line and not line.startswith("#")
]


@pytest.fixture(scope="module")
def node_data() -> Path:
    return wheel_directory("onnx", "1.22.0", "onnx/backend/test/data/node")


def _tensors(directory: Path, prefix: str) -> list[np.ndarray]:
    found = []
    for path in sorted(directory.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[1])):
        tensor = onnx.TensorProto()
        tensor.ParseFromString(path.read_bytes())
        found.append(numpy_helper.to_array(tensor))
    return found


@pytest.mark.parametrize("name", PINNED)
def test_pinned_node_test_matches_onnx_reference_outputs(node_data: Path, name: str) -> None:
    from nnburst.onnx.backend import prepare

    if not (node_data / name / "model.onnx").exists():
        pytest.skip("built by ONNX's runner from its Python test cases, not stored data")
    model = onnx.load(str(node_data / name / "model.onnx"))
    rep = None
    with np.errstate(all="ignore"):
        for data_set in sorted((node_data / name).glob("test_data_set_*")):
            inputs, expected = _tensors(data_set, "input"), _tensors(data_set, "output")
            rep = rep or prepare(model)
            got = rep.run(inputs)
            assert len(got) == len(expected)
            for want, out in zip(expected, got):
                out = np.asarray(out)
                assert out.shape == want.shape, (out.shape, want.shape)
                if want.dtype.kind in "fc":
                    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-7)
                else:
                    np.testing.assert_array_equal(out, want)
    if rep is not None and rep.runner is not None:
        rep.runner.close()


# -- windows whose height and width differ in every argument, against onnxruntime ----------------


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("pads", [[0, 0, 0, 0], [1, 0, 0, 1]], ids=["valid", "padded"])
def test_pools_with_unequal_kernel_stride_and_pads_match_onnxruntime(op: str, pads: list) -> None:
    from onnx import TensorProto, helper

    from .test_onnx import against_onnxruntime, make_model

    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[3, 2], strides=[1, 2], pads=pads)
    model = make_model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 7, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 5 + pads[0], 3])],
        {},
    )
    x = np.random.default_rng(5).uniform(-2, 2, (1, 2, 7, 6)).astype(np.float32)
    against_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("pads", [[0, 0, 0, 0], [2, 0, 1, 1]], ids=["valid", "padded"])
def test_convs_with_unequal_kernel_stride_dilation_and_pads_match_onnxruntime(pads: list) -> None:
    from onnx import TensorProto, helper

    from .test_onnx import against_onnxruntime, make_model

    rng = np.random.default_rng(6)
    w = rng.uniform(-1, 1, (4, 2, 3, 2)).astype(np.float32)
    node = helper.make_node(
        "Conv", ["x", "w"], ["y"], kernel_shape=[3, 2], strides=[1, 2], dilations=[1, 2], pads=pads
    )
    model = make_model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6 + pads[0] + pads[2], 3])],
        {"w": w},
    )
    x = rng.uniform(-2, 2, (1, 2, 8, 7)).astype(np.float32)
    against_onnxruntime(model, {"x": x})
