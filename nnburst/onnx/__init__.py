"""ONNX models on nnburst: load a ``.onnx`` file (or ``ModelProto``), run it.

    >>> loaded = nnburst.onnx.load("model.onnx")      # an nn.Model + its I/O
    >>> run = nnburst.onnx.Runner("model.onnx")        # compiled, bursting
    >>> outputs = run(image)

The same contract as :mod:`nnburst.tflite`: inputs in the graph's input
order (initializers excluded), outputs as a list in its output order.
:mod:`.backend` lets ONNX's own backend test runner drive nnburst.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

try:
    import onnx
except ImportError as exc:  # an optional extra, as onnxruntime is
    raise ImportError("nnburst.onnx needs the onnx package: pip install 'nnburst[onnx]'") from exc

from .. import imported
from ..errors import BadDataError
from ..imported import LoadedModel, TensorInfo, UnsupportedModelError
from .convert import convert

__all__ = ["LoadedModel", "Runner", "TensorInfo", "UnsupportedModelError", "load"]


def load(
    source: str | os.PathLike[str] | bytes | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> LoadedModel:
    """Convert an ONNX model (a path, its bytes or a ``ModelProto``) to a finished
    :class:`~nnburst.Model`.

    NNAPI models have static shapes: a symbolic batch dimension becomes 1, and
    any other symbolic input dimension must be given in ``input_shapes``
    (input name → shape).

    Raises:
        UnsupportedModelError: it uses operators (or attribute values) nnburst
            cannot run; the message lists each, with how often it occurs.
        BadDataError: it is not a valid ONNX model.
    """
    if isinstance(source, onnx.ModelProto):
        proto, data = source, source.SerializeToString()
    else:
        data = imported.read_source(source)
        try:
            proto = onnx.load_from_string(data)
        except Exception as exc:  # protobuf's DecodeError and friends
            raise BadDataError(f"not an ONNX model: {exc}") from None
    if not proto.graph.node and not proto.graph.output:
        raise BadDataError("not an ONNX model: it has no graph")
    model, inputs, outputs = convert(proto, input_shapes)
    digest = hashlib.sha256(data + repr(sorted((input_shapes or {}).items())).encode()).digest()
    return LoadedModel(model, inputs, outputs, digest)


class Runner(imported.Runner):
    """Runs an ONNX model (a path, its bytes, a ``ModelProto`` or a
    :class:`LoadedModel`): ``runner(*inputs)`` → outputs.  See
    :class:`nnburst.imported.Runner`."""

    @staticmethod
    def load(source: Any) -> LoadedModel:
        return load(source)
