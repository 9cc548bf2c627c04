"""Loading an ONNX model (its shapes and constants fixed), and the Runner
that loads with it."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import imported
from ..errors import BadDataError
from ..imported import LoadedModel
from .convert import convert

__all__ = ["Runner", "input_names", "load"]


def input_names(source: str | os.PathLike[str] | bytes | onnx.ModelProto) -> list[str]:
    """The graph's input names in the order a Runner takes them (initializers
    excluded): what ``input_shapes`` and ``constants`` name."""
    proto = source if isinstance(source, onnx.ModelProto) else _parse(imported.read_source(source))
    initializers = {t.name for t in proto.graph.initializer}
    return [i.name for i in proto.graph.input if i.name not in initializers]


def _parse(data: bytes) -> onnx.ModelProto:
    try:
        return onnx.load_from_string(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise BadDataError(f"not an ONNX model: {exc}") from None


def load(
    source: str | os.PathLike[str] | bytes | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constants: Mapping[str, Any] | None = None,
) -> LoadedModel:
    """Convert an ONNX model (a path, its bytes or a ``ModelProto``) to a finished
    :class:`~nnburst.Model`.

    NNAPI models have static shapes: a symbolic batch dimension becomes 1, and
    any other symbolic input dimension must be given in ``input_shapes``
    (input name → shape).  ``constants`` (input name → value) fixes graph
    inputs for good: they become initializers, so what depends on them
    alone is decided at load.  An ``If`` on a fixed input keeps only the
    branch it takes (silero-vad's sample rate: its 8 kHz branch cannot run
    512-sample chunks, and an NNAPI IF must build both branches).

    Raises:
        UnsupportedModelError: it uses operators (or attribute values) nnburst
            cannot run; the message lists each, with how often it occurs.
        BadDataError: it is not a valid ONNX model, or ``constants`` names no
            input of it or gives a value that does not fit the input.
    """
    if isinstance(source, onnx.ModelProto):
        proto, data = source, source.SerializeToString()
    else:
        data = imported.read_source(source)
        proto = _parse(data)
    if not proto.graph.node and not proto.graph.output:
        raise BadDataError("not an ONNX model: it has no graph")
    fixed = {name: _constant(proto, name, value) for name, value in (constants or {}).items()}
    if fixed:
        proto = _with_initializers(proto, fixed)
    model, inputs, outputs = convert(proto, input_shapes)
    key = repr(sorted((input_shapes or {}).items())).encode()
    for name, value in sorted(fixed.items()):
        key += name.encode() + repr((value.dtype.str, value.shape)).encode() + value.tobytes()
    return LoadedModel(model, inputs, outputs, hashlib.sha256(data + key).digest())


def _constant(proto: onnx.ModelProto, name: str, value: Any) -> np.ndarray:
    """``value`` as the graph input ``name`` declares it: its element type, and its
    shape where the declaration has one."""
    declared = next((i for i in proto.graph.input if i.name == name), None)
    if declared is None:
        inputs = [i.name for i in proto.graph.input]
        raise BadDataError(f"constants: the model has no input {name!r} (its inputs: {inputs})")
    tensor = declared.type.tensor_type
    try:
        dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        array = np.asarray(value, dtype=dtype)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadDataError(f"constants: {name!r} cannot be {value!r}: {exc}") from None
    if tensor.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        if array.ndim == 0 and all(d == 1 for d in dims):  # a number for a one-element input
            array = array.reshape([1] * len(dims))
        if len(dims) != array.ndim or any(d not in (None, n) for d, n in zip(dims, array.shape)):
            raise BadDataError(
                f"constants: {name!r} is declared with shape {dims}; got {list(array.shape)}"
            )
    return array


def _with_initializers(proto: onnx.ModelProto, fixed: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``proto`` whose inputs named in ``fixed`` are initializers instead."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    inputs = [i for i in copy.graph.input if i.name not in fixed]
    defaults = [t for t in copy.graph.initializer if t.name not in fixed]  # inputs' old defaults
    del copy.graph.input[:], copy.graph.initializer[:]
    copy.graph.input.extend(inputs)
    copy.graph.initializer.extend(defaults)
    for name, value in fixed.items():
        copy.graph.initializer.append(numpy_helper.from_array(value, name))
    return copy


class Runner(imported.Runner):
    """Runs an ONNX model (a path, its bytes, a ``ModelProto`` or a
    :class:`LoadedModel`): ``runner(*inputs)`` → outputs.  See
    :class:`nnburst.imported.Runner`."""

    @staticmethod
    def load(source: Any) -> LoadedModel:
        return load(source)
