"""Every NNAPI 1.0/1.1 conformance vector prepared from the compilation cache:
each operation's prepared state (and the rewritten graph) written, read back
and bound, answering bit for bit as the uncached compilation did."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nnburst.cpu.prepare import prepare_model
from nnburst.errors import NNError

from .cts_vectors import check_outputs, iter_vectors, parse_vector

VECTORS = list(iter_vectors())
TOKEN = b"\x2a" * 32


@pytest.mark.skipif(not VECTORS, reason="no NNAPI conformance vectors found (NNBURST_CTS_DIR)")
@pytest.mark.parametrize("raw", [raw for _, raw in VECTORS], ids=[name for name, _ in VECTORS])
def test_cts_vector_from_the_compilation_cache(raw: dict, tmp_path: Path) -> None:
    vector = parse_vector(raw)
    if vector.expect_failure:
        with pytest.raises(NNError):
            prepare_model(vector.model, (str(tmp_path), TOKEN))[0].run(vector.inputs)
        return
    first, hit = prepare_model(vector.model, (str(tmp_path), TOKEN))
    assert not hit
    want = first.run(vector.inputs)
    second, hit = prepare_model(vector.model, (str(tmp_path), TOKEN))
    assert hit
    got = second.run(vector.inputs)
    check_outputs(vector, got)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
