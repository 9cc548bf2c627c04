"""The C plan's arena (plan._lay_out): an intermediate's block is free again once
its last reader has run, and a freed block of exactly the size asked for is
reused, so a chain of equal intermediates needs two blocks, however long."""

from __future__ import annotations

import logging
import re

import pytest

from nnburst.codes import OperationCode
from nnburst.cpu import optimise
from nnburst.cpu import plan as cpu_plan

from .test_cpu_plan_layers import Net, same_answers
from .test_cpu_plan_more import f32

Op = OperationCode


@pytest.mark.parametrize("length", [3, 4, 7])
def test_a_chain_of_equal_intermediates_takes_two_blocks(
    length: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(optimise, "ENABLED", False)
    net = Net(5)
    t = net.input(f32(4, 16))  # 256 bytes, a multiple of the 64-byte alignment
    for k in range(length):
        t = net.op((Op.RELU, Op.RELU6, Op.RELU1)[k % 3], [t], f32(4, 16))
    net.output(t)
    with caplog.at_level(logging.DEBUG, logger=cpu_plan.logger.name):
        same_answers(net, monkeypatch)
    arenas = [
        int(m.group(1))
        for r in caplog.records
        if (m := re.search(r"arena (\d+) bytes", r.getMessage()))
    ]
    assert arenas == [2 * 256]
