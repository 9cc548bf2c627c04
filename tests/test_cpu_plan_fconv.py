"""The packed float32 convolutions (csrc/fconv.c) as steps of the C plan (FCONV,
FDWCONV in csrc/plan.c): a chain of them runs as one C call and gives the
bits of the same model run operation by operation, over random shapes,
strides, paddings and tails; and the plan refuses a step whose packed layer,
scratch or batches do not match the layer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnburst._bindings import fconv
from nnburst._bindings import plan as c_plan
from nnburst.cpu.ops import conv
from nnburst.errors import BadDataError
from tests.test_cpu_plan_layers import F32, Net, Op, random_image, same_answers


@pytest.fixture(autouse=True)
def packed_everywhere(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every float convolution on the packed kernels (whatever this CPU's
    measured routes say), and the kinds of every plan table built."""
    monkeypatch.setattr(conv, "float_route", lambda filt, in_shape, win: "fconv")
    monkeypatch.setattr(conv, "depthwise_route", lambda in_shape, win, filter_hw: "fdwconv")
    kinds: list[int] = []
    build = c_plan.PlanTable.__init__

    def recording(table: Any, steps: Any, *args: Any) -> None:
        kinds.extend(step.kind for step in steps)
        build(table, steps, *args)

    monkeypatch.setattr(c_plan.PlanTable, "__init__", recording)
    return kinds


@pytest.mark.parametrize("seed", range(16))
def test_packed_convolution_chains_give_the_operations_bits(
    seed: int, monkeypatch: pytest.MonkeyPatch, packed_everywhere: list[int]
) -> None:
    net = Net(300 + seed)
    x = random_image(net, F32)
    t = net.conv(x, int(net.rng.integers(1, 40)))
    t = net.conv(t, 0, depthwise=True)
    t = net.conv(t, int(net.rng.integers(1, 24)))
    if seed % 2:
        t = net.pool(t, Op.MAX_POOL_2D if seed % 4 == 1 else Op.AVERAGE_POOL_2D)
    t = net.conv(t, 0, depthwise=True)
    net.output(net.add_op(t, net.conv(t, 0, depthwise=True)))
    planned = same_answers(net, monkeypatch)
    assert len(planned.main._plan) == 1, "a packed layer split the plan"
    assert packed_everywhere.count(c_plan.FCONV) == 2
    assert packed_everywhere.count(c_plan.FDWCONV) == 3


@pytest.mark.parametrize("seed", range(4))
def test_packed_nchw_convolutions_run_between_transposing_copies(
    seed: int, monkeypatch: pytest.MonkeyPatch, packed_everywhere: list[int]
) -> None:
    net = Net(400 + seed)
    x = random_image(net, F32, nchw=True)
    t = net.conv(x, int(net.rng.integers(1, 20)), nchw=True)
    t = net.conv(t, 0, depthwise=True, nchw=True)
    net.output(net.add_op(t, t))
    same_answers(net, monkeypatch)
    assert c_plan.FCONV in packed_everywhere and c_plan.FDWCONV in packed_everywhere


def layer(depthwise: bool) -> fconv.FloatConv:
    class Window:
        pad_top = pad_left = 1
        stride_h = stride_w = dilation_h = dilation_w = 1
        out_h = out_w = 5

    rng = np.random.default_rng(7)
    channels = 6
    rows = 9 if depthwise else 9 * channels
    weights = rng.normal(0, 1, (rows, channels)).astype(np.float32)
    bias = rng.normal(0, 1, channels).astype(np.float32)
    return fconv.FloatConv(
        (5, 5, channels), weights, (3, 3), bias, Window(), (-np.inf, np.inf), depthwise=depthwise
    )


LAYERS = {depthwise: layer(depthwise) for depthwise in (False, True)}


def fconv_table(depthwise: bool, batches: int, **wrong: int) -> c_plan.PlanTable:
    """One step of LAYERS[depthwise] from a buffer of 2 images to another."""
    fields = LAYERS[depthwise].plan_fields()
    kind = c_plan.FDWCONV if depthwise else c_plan.FCONV
    params = c_plan.fconv_params({**fields, **wrong}, batches)
    floats = 2 * 5 * 5 * 6 * 4
    step = c_plan.PlanStep(kind, -1, -2, b=0, params=params)
    return c_plan.PlanTable([step], [floats, floats], fields["scratch_bytes"])


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
def test_the_plan_runs_a_packed_layer_as_the_layer_does(depthwise: bool) -> None:
    packed = LAYERS[depthwise]
    x = np.random.default_rng(1).normal(0, 1, (2, 5, 5, 6)).astype(np.float32)
    out = np.full_like(x, np.nan)
    fconv_table(depthwise, 2).run([x, out])
    np.testing.assert_array_equal(out, packed(x))


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
def test_the_plan_refuses_a_packed_layer_that_does_not_match(depthwise: bool) -> None:
    fields = LAYERS[depthwise].plan_fields()
    fconv_table(depthwise, 2)  # the right sizes pass
    for batches, wrong in (
        (2, {"packed_bytes": fields["packed_bytes"] + 4}),
        (2, {"packed_bytes": fields["packed_bytes"] - 4}),
        (2, {"scratch_bytes": fields["scratch_bytes"] - 1}),
        (3, {}),  # one image more than the buffers hold
        (0, {}),
    ):
        with pytest.raises(BadDataError, match="refuses its tables"):
            fconv_table(depthwise, batches, **wrong)
