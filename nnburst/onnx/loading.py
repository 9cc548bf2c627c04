"""Loading an ONNX model (its shapes and constants fixed), and the Runner
that loads with it."""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import imported
from ..errors import BadDataError
from ..imported import LoadedModel
from .convert import convert

__all__ = ["Runner", "declared_constant", "input_names", "load", "read_model"]


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


def read_model(
    source: str | os.PathLike[str] | bytes | onnx.ModelProto, external_data: bool = False
) -> tuple[onnx.ModelProto, bytes]:
    """The model and the bytes that identify it (its file's, and any external
    data it reads).

    A tensor whose data lives in another file is read only when asked
    (``external_data=True``) and only from a path: from the model's own
    directory, never above it.  A model given as bytes or a ``ModelProto``
    has no directory, so it reads no file at all: its bytes cannot make
    nnburst read ``/etc/passwd`` or a secret beside the current directory.
    """
    if isinstance(source, onnx.ModelProto):
        proto, data, directory = source, source.SerializeToString(), None
    else:
        data = imported.read_source(source)
        proto = _parse(data)
        directory = (
            None if isinstance(source, bytes | bytearray | memoryview) else Path(source).parent
        )
    external = [t for t in _tensors(proto) if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return proto, data
    if directory is None or not external_data:
        where = _external_info(external[0]).get("location", "?")
        how = (
            "load(path, external_data=True) reads it from the model's directory"
            if directory is not None
            else "a model given as bytes reads no file: load it from its path with external_data=True"
        )
        raise BadDataError(
            f"tensor {external[0].name!r} keeps its data in the external file {where!r}: {how}"
        )
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for tensor in _tensors(copy):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            _inline(tensor, directory)
    return copy, copy.SerializeToString()


def _tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor the model holds: initializers and tensor attributes, in every
    subgraph."""
    graphs = [proto.graph]
    while graphs:
        graph = graphs.pop()
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield sparse.values
            yield sparse.indices
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.HasField("t"):
                    yield attribute.t
                yield from attribute.tensors
                if attribute.HasField("g"):
                    graphs.append(attribute.g)
                graphs.extend(attribute.graphs)


def _external_info(tensor: onnx.TensorProto) -> dict[str, str]:
    return {entry.key: entry.value for entry in tensor.external_data}


def _inline(tensor: onnx.TensorProto, directory: Path) -> None:
    """Read ``tensor``'s external data into it, from a file inside ``directory``."""
    info = _external_info(tensor)
    location = info.get("location", "")
    root = directory.resolve()
    path = (root / location).resolve()
    if not location or not path.is_relative_to(root) or path == root:
        raise BadDataError(
            f"tensor {tensor.name!r}: its external data {location!r} is not a file in the "
            f"model's directory {str(root)!r}"
        )
    try:
        offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
        itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (ValueError, KeyError, TypeError) as exc:
        raise BadDataError(f"tensor {tensor.name!r}: bad external data entry: {exc}") from None
    wanted = math.prod(tensor.dims) * itemsize
    if offset < 0 or length not in (-1, wanted):
        raise BadDataError(
            f"tensor {tensor.name!r}: external data of {length} bytes at {offset} for a tensor "
            f"of {wanted} bytes"
        )
    try:
        with open(path, "rb") as file:
            file.seek(offset)
            raw = file.read(wanted)
    except OSError as exc:
        raise BadDataError(
            f"tensor {tensor.name!r}: cannot read {location!r}: {exc.strerror}"
        ) from None
    if len(raw) != wanted:
        raise BadDataError(
            f"tensor {tensor.name!r}: {location!r} holds {len(raw)} of its {wanted} bytes at {offset}"
        )
    tensor.raw_data = raw
    tensor.data_location = onnx.TensorProto.DEFAULT
    del tensor.external_data[:]


def load(
    source: str | os.PathLike[str] | bytes | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constants: Mapping[str, Any] | None = None,
    external_data: bool = False,
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
    ``external_data``: see :func:`read_model`.

    Raises:
        UnsupportedModelError: it uses operators (or attribute values) nnburst
            cannot run; the message lists each, with how often it occurs.
        BadDataError: it is not a valid ONNX model, or ``constants`` names no
            input of it or gives a value that does not fit the input.
    """
    proto, data = read_model(source, external_data)
    if not proto.graph.node and not proto.graph.output:
        raise BadDataError("not an ONNX model: it has no graph")
    fixed = {
        name: declared_constant(proto, name, value) for name, value in (constants or {}).items()
    }
    if fixed:
        proto = _with_initializers(proto, fixed)
    model, inputs, outputs = convert(proto, input_shapes)
    key = repr(sorted((input_shapes or {}).items())).encode()
    for name, value in sorted(fixed.items()):
        key += name.encode() + repr((value.dtype.str, value.shape)).encode() + value.tobytes()
    return LoadedModel(model, inputs, outputs, hashlib.sha256(data + key).digest())


def declared_constant(proto: onnx.ModelProto, name: str, value: Any) -> np.ndarray:
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
