"""TFLite operators → NNAPI operations, the way an NNAPI delegate maps them.

Each builtin operator has one mapper in
:data:`~nnburst.tflite.converter.MAPPERS`.  A mapper reads the operator's
options, creates the scalar operands NNAPI wants (padding code, strides, fused
activation, ...) and adds one or more operations.  Operators without a direct
NNAPI equivalent are decomposed into ones that have (LEAKY_RELU → PRELU,
SPLIT_V → SLICEs, PACK → RESHAPEs + CONCATENATION).

Conversion is all or nothing: every operator is checked first, and a model
using anything nnburst cannot run fails with one error that lists every
unsupported operator and how often it occurs.

Where things live: :mod:`.converter` is the core (a subgraph's tensors as
operands, fp16 and sparse constants folded, activations fused, variables,
the check that lists what cannot be converted; the registry); each operator
family's mappers are a module of :mod:`.ops`.  Importing this module imports
them all, and each mapper registers itself as its module loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..imported import TensorInfo, Variable
from ..model import Model
from .converter import Converter
from .ops import (
    control,
    convolution,
    custom,
    elementwise,
    quantization,
    recurrent,
    reduction,
    shape,
)
from .reader import FlatModel, Subgraph

#: The modules whose mappers register themselves as they load: importing them
#: here fills the registry before any model is converted.
FAMILIES = (control, convolution, custom, elementwise, quantization, recurrent, reduction, shape)


def describe(graph: Subgraph, indices: Sequence[int]) -> list[TensorInfo]:
    infos = []
    for i in indices:
        t = graph.tensors[i]
        scale = float(t.scales[0]) if t.scales is not None and t.scales.size == 1 else 0.0
        zero_point = (
            int(t.zero_points[0]) if t.zero_points is not None and t.zero_points.size == 1 else 0
        )
        infos.append(
            TensorInfo(t.name, t.shape, t.dtype or np.dtype(np.float32), scale, zero_point)
        )
    return infos


@dataclass
class Converted:
    """A finished model; its first inputs and outputs are the file's, then one
    input and one output per variable (its value before and after a call)."""

    model: Model
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    variables: list[Variable]


def convert(flat: FlatModel) -> Converted:
    """The main subgraph as a finished model, with its inputs and outputs described."""
    graph = flat.subgraphs[0]
    converter = Converter(flat)
    model = converter.convert()
    variables = converter.used_variables()
    return Converted(
        model, describe(graph, graph.inputs), describe(graph, graph.outputs), variables
    )
