"""Every NNAPI 1.0/1.1 conformance vector straight through the CPU driver's executor.

The runtime paths (compute, start_compute, burst_compute) are covered by
``test_cts_runtime.py``; this test pins the driver's arithmetic on its own so a
failure points at the operation, not at the plumbing.
"""

from __future__ import annotations

import pytest

from nnburst.cpu.executor import PreparedModel
from nnburst.errors import NNError

from .cts_vectors import check_outputs, iter_vectors, parse_vector

VECTORS = list(iter_vectors())


@pytest.mark.skipif(not VECTORS, reason="no NNAPI conformance vectors found (NNBURST_CTS_DIR)")
@pytest.mark.parametrize("raw", [raw for _, raw in VECTORS], ids=[name for name, _ in VECTORS])
def test_cts_vector_on_cpu_driver(raw):
    vector = parse_vector(raw)
    if vector.expect_failure:
        with pytest.raises(NNError):
            PreparedModel(vector.model).run(vector.inputs)
        return
    outputs = PreparedModel(vector.model).run(vector.inputs)
    check_outputs(vector, outputs)
