"""ONNX graphs → NNAPI operations.

ONNX convolutions and pools are NCHW; NNAPI's have a layout flag, so they
run on NCHW tensors as they are (filters are transposed once, at load).
Shapes are static: ONNX's shape inference gives every intermediate its
shape, and nodes whose inputs are all known at load (shape arithmetic,
``Constant``) are evaluated then, so only real computation reaches the model; an
``If`` whose condition is so evaluated becomes the branch it takes.
int64 tensors become int32 when their values fit.

As for TFLite, conversion is all or nothing: every node is checked first,
and one :class:`~nnburst.imported.UnsupportedModelError` lists every
unsupported operator (or attribute value) with its count.

Where things live: :mod:`.converter` is the core (the graph loaded with static
shapes, folded, checked node by node and handed to the mappers; the
registries); :mod:`.folding` evaluates nodes at load; each operator family's
mappers are a module of :mod:`.ops`.  Importing this module imports them all,
and each mapper registers itself as its module loads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from ..imported import TensorInfo
from ..model import Model
from . import folding
from .converter import Converter
from .ops import (
    control,
    convolution,
    elementwise,
    indexing,
    pooling,
    quantization,
    recurrent,
    reduction,
    resize,
    shape,
    transformer,
)

#: The modules whose mappers and folders register themselves as they load: importing them
#: here fills the registries before any model is converted.
FAMILIES = (
    folding,
    control,
    convolution,
    elementwise,
    indexing,
    pooling,
    quantization,
    recurrent,
    reduction,
    resize,
    shape,
    transformer,
)


def describe(c: Converter, names: Sequence[str]) -> list[TensorInfo]:
    return [TensorInfo(n, c.shape(n), c.dtype(n)) for n in names]


def convert(
    model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None
) -> tuple[Model, list[TensorInfo], list[TensorInfo]]:
    """The graph as a finished model, with its inputs (initializers excluded) and outputs."""
    c = Converter(model, input_shapes)
    finished = c.convert()
    inputs = [i.name for i in c.graph.input if i.name not in c.constants]
    return finished, describe(c, inputs), describe(c, [o.name for o in c.graph.output])
