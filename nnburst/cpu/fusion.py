"""Operation pairs the CPU driver runs as one step.

A prepared subgraph is a list of operations; where two of them in a row
would make a temporary that only the second reads, and one pass over the
data can compute both, the pair becomes one operation before the run loop
is built.  The model, its validation and its compilation cache are
untouched: only what runs changes.

PAD + ADD: MobileNet-style detectors (BlazeFace, the MediaPipe detectors)
widen a residual branch by padding its channels with zeros, then add it to
the block's output with a fused ReLU.  The padded copy cost as much as the
add itself (face_detection_short_range: 11 such pairs, a quarter of a run);
the fused step reads the narrow branch directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._bindings import plan as c_plan
from ..codes import OperandCode, OperationCode
from .ops.arguments import constant_scalar
from .ops.fused_activation import FLOAT_ACTIVATION_BOUNDS
from .ops.native import add_padded_channels_f32


def fuse(operations: Sequence[Any], temporaries: set[int]) -> list[Any]:
    """``operations`` (``executor``'s prepared operations, in execution order)
    with each fusable pair replaced by one operation.  ``temporaries``: operand slots that an earlier operation of the
    subgraph writes and that are not its outputs (only those may disappear or
    be read in place of another)."""
    readers: dict[int, list[int]] = {}
    for position, op in enumerate(operations):
        for index in op.inputs:
            readers.setdefault(index, []).append(position)
    fused: dict[int, Any] = {}
    dropped: set[int] = set()
    for position, pad in enumerate(operations):
        if pad.signature.code != OperationCode.PAD or pad.outputs[0] not in temporaries:
            continue
        users = readers.get(pad.outputs[0], [])
        if len(users) != 1 or users[0] in fused:
            continue
        add = operations[users[0]]
        replacement = _pad_add(pad, add, temporaries)
        if replacement is not None:
            fused[users[0]] = replacement
            dropped.add(position)
    return [
        fused.get(position, op) for position, op in enumerate(operations) if position not in dropped
    ]


def _pad_add(pad: Any, add: Any, temporaries: set[int]) -> Any | None:
    """ADD(a, PAD(x)) as one operation reading (a, x), or None if the pair is not
    the float32, zero-padded-last-axis, fully static kind the C loop computes."""
    if add.signature.code != OperationCode.ADD or pad.inputs[0] not in temporaries:
        return None
    padded = pad.outputs[0]
    side = add.inputs.index(padded) if padded in add.inputs[:2] else None
    if side is None or add.inputs[0] == add.inputs[1]:
        return None
    other = add.inputs[1 - side]
    fuse_code = constant_scalar(add.signature, 2)
    paddings = pad.signature.constants.get(1)
    x_info, padded_info = pad.signature.inputs[0], pad.signature.outputs[0]
    a_info, out_info = add.signature.inputs[1 - side], add.signature.outputs[0]
    infos = (x_info, padded_info, a_info, out_info)
    if (
        other not in temporaries
        or fuse_code not in FLOAT_ACTIVATION_BOUNDS
        or paddings is None
        or any(i.code != OperandCode.TENSOR_FLOAT32 or not _static(i.dimensions) for i in infos)
        or not (padded_info.dimensions == a_info.dimensions == out_info.dimensions)
    ):
        return None
    rows = np.asarray(paddings).reshape(-1, 2)
    if rows.shape[0] != len(x_info.dimensions) or rows[:-1].any() or rows[-1, 0] != 0:
        return None  # only zeros after the last axis
    lo, hi = FLOAT_ACTIVATION_BOUNDS[fuse_code]

    def kernel(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        a, x = inputs  # temporaries: written by earlier operations, never omitted
        return [add_padded_channels_f32(a, x, lo, hi)]  # type: ignore[arg-type]

    channels, x_channels = a_info.dimensions[-1], x_info.dimensions[-1]
    step = c_plan.KernelStep(
        c_plan.PADDED_ADD,
        c_plan.padded_add_params(channels, x_channels),
        count=int(np.prod(a_info.dimensions)),
        lo=lo,
        hi=hi,
    )
    kernel = c_plan.mark(kernel, step)
    return dataclasses.replace(add, inputs=(other, pad.inputs[0]), kernel=kernel)


def _static(dimensions: Sequence[int] | None) -> bool:
    return bool(dimensions) and all(d > 0 for d in dimensions)  # type: ignore[union-attr]
