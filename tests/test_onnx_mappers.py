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
