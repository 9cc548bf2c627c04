"""A C plan step of a dense quantized layer with int16 output (a quantized LSTM's
gates) counts two bytes an output element when the plan is checked: an output
buffer of one byte an element is refused, one of two is run and equals the
layer run alone."""

from __future__ import annotations

import numpy as np
import pytest

from nnburst._bindings import plan as c_plan
from nnburst._bindings.qconv import QuantConv
from nnburst.errors import BadDataError


def _gates() -> QuantConv:
    rng = np.random.default_rng(3)
    return QuantConv(
        (1, 1, 40),
        rng.integers(-255, 256, (40, 24)),
        (1, 1),
        rng.integers(-(2**20), 2**20, 24),
        (np.array([1 << 30]), np.array([-2])),
        None,
        (np.uint8, 128),
        (np.int16, 0),
        (-32768, 32767),
    )


def _table(out_bytes: int) -> c_plan.PlanTable:
    fields = _gates().plan_fields()
    step = c_plan.PlanStep(c_plan.QCONV, -1, -2, b=0, params=c_plan.qconv_params(fields, 2))
    return c_plan.PlanTable([step], [2 * 40, out_bytes], fields["scratch_bytes"])


def test_an_int16_output_needs_two_bytes_an_element() -> None:
    with pytest.raises(BadDataError, match="reaches outside"):
        _table(2 * 24)
    x = np.random.default_rng(4).integers(0, 256, (2, 40)).astype(np.uint8)
    out = np.empty((2, 24), np.int16)
    _table(out.nbytes).run([x, out])
    want = _gates()(x.reshape(2, 1, 1, 40)).reshape(2, 24)
    np.testing.assert_array_equal(out, want)
