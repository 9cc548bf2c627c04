"""PADs the graph optimiser must not fold into a layer are refused by the rewrite
itself, not by the prepare that follows: a fold the layer's validation rejects
makes the driver drop every rewrite of the subgraph and run it as written (with
a warning), so the other layers lose theirs."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from nnburst.codes import OperationCode, PaddingCode
from tests.test_cpu_plan_layers import Net
from tests.test_pad_fold import padded_layer, run_both

Op = OperationCode


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
@pytest.mark.parametrize("padded_axis", [0, 3], ids=["batches", "channels"])
def test_a_pad_outside_rows_and_columns_is_refused_without_a_fallback(
    depthwise: bool, padded_axis: int, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    net = Net(91 + padded_axis)
    pads = np.zeros((4, 2), np.int64)
    pads[1:3] = 1
    pads[padded_axis] = (0, 2)
    padded_layer(net, depthwise, pads, PaddingCode.VALID)
    with caplog.at_level(logging.WARNING, logger="nnburst"):
        optimised, removed = run_both(net, monkeypatch)
    assert removed == 0
    assert Op.PAD in [op.code for op in optimised.main.subgraph.operations]
    assert not [r for r in caplog.records if "graph optimiser" in r.getMessage()]
