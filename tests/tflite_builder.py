"""Small synthetic ``.tflite`` models, built in memory, for the importer tests.

A TFLite importer has to be tested on exact, tiny models: one operator with
chosen options, one quantization layout, one omitted optional input.  Real
models never cover a case on purpose, and a converter is far too heavy to run
in a unit test, so this module writes the flatbuffer directly with the object
API of LiteRT's own schema bindings (``ai_edge_litert.schema_py_generated``),
and ``run_litert`` runs the result on LiteRT, which makes each model its own
reference answer.

* ``single_op(op, inputs, outputs, options)``: one operator, the usual case;
* ``graph(tensors, operators, inputs, outputs)``: several operators over one
  list of tensors;
* ``run_litert(model, inputs)``: LiteRT's outputs for those inputs;
* ``run_litert_calls(model, calls)``: one interpreter invoked once per list of
  inputs, so variable tensors carry their state from call to call;
* ``with_outputs(model, tensors)``: a real model with some intermediate
  tensors as extra outputs, to compare a value inside it;
* ``options(cls, **fields)``: an operator's options object;
* ``repack(parsed)``: a model parsed with ``schema.ModelT`` (and edited) as bytes.

The layout follows what the TFLite converter writes, because an importer may
rely on it: buffer 0 is the empty sentinel, every constant has its own buffer
(data 16-byte aligned, little-endian), ``deprecated_builtin_code`` is
``min(code, 127)`` next to the real ``builtin_code``, and the file carries the
``TFL3`` identifier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

__all__ = [
    "OPTIONAL",
    "RESOURCE",
    "Tensor",
    "graph",
    "options",
    "options_type",
    "run_litert",
    "repack",
    "run_litert_calls",
    "schema",
    "single_op",
    "sparse",
    "subgraphs",
    "with_outputs",
]

#: ``Tensor.dtype`` of a resource-variable handle.
RESOURCE = "resource"

# The index the schema uses for an omitted optional operator input.
OPTIONAL = -1

# TFLite schema version (Model.version) and file identifier the converter writes.
SCHEMA_VERSION = 3
FILE_IDENTIFIER = b"TFL3"

# deprecated_builtin_code is an int8: codes past it read 127 there
# (PLACEHOLDER_FOR_GREATER_OP_CODES) and only builtin_code holds the real one.
_DEPRECATED_CODE_LIMIT = schema.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES

# Constant data starts on a 16-byte boundary, as the converter aligns it,
# so an importer may view it in place with any element type.
_BUFFER_ALIGNMENT = 16

_TENSOR_TYPES: dict[np.dtype[Any], int] = {
    np.dtype(np.float32): schema.TensorType.FLOAT32,
    np.dtype(np.float16): schema.TensorType.FLOAT16,
    np.dtype(np.int32): schema.TensorType.INT32,
    np.dtype(np.uint8): schema.TensorType.UINT8,
    np.dtype(np.int8): schema.TensorType.INT8,
    np.dtype(np.int64): schema.TensorType.INT64,
    np.dtype(np.bool_): schema.TensorType.BOOL,
    np.dtype(np.int16): schema.TensorType.INT16,
    np.dtype(np.float64): schema.TensorType.FLOAT64,
}


@dataclass
class Tensor:
    """One tensor of a test model.

    ``data`` makes it a constant (its own buffer); without it the tensor is a
    model input or an intermediate.  ``scale``/``zero_point`` add quantization:
    a scalar or one-element list is per-tensor, a longer list is per-channel
    along ``quantized_dimension``.  An empty ``name`` becomes ``t<index>`` so
    LiteRT's messages and the importer's can still say which tensor.
    """

    shape: tuple[int, ...]
    dtype: Any
    data: np.ndarray | None = None
    scale: float | list[float] | None = None
    zero_point: int | list[int] | None = None
    quantized_dimension: int = 0
    name: str = ""
    #: TFLite's sparse format (see ``sparse``): ``data`` then holds the stored values only.
    sparsity: Any = None
    #: a variable tensor (``is_variable``): state an operator updates in place, as
    #: a sequence LSTM's; not a model input, zero when the interpreter starts
    variable: bool = False


def options(cls: Any, **fields: Any) -> Any:
    """An options object of schema class ``cls`` (``Conv2DOptionsT``...) with ``fields`` set."""
    o = cls()
    for name, value in fields.items():
        setattr(o, name, value)
    return o


def options_type(options: object) -> tuple[str, int]:
    """Which union field of Operator an options object goes in, and its type
    tag: ``Conv2DOptionsT`` -> (``"builtinOptions"``,
    ``BuiltinOptions.Conv2DOptions``); the StableHLO ones go in
    ``builtinOptions2``."""
    cls = type(options).__name__
    name = cls[:-1] if cls.endswith("T") else cls
    if hasattr(schema.BuiltinOptions, name):
        return "builtinOptions", getattr(schema.BuiltinOptions, name)
    if hasattr(schema.BuiltinOptions2, name):
        return "builtinOptions2", getattr(schema.BuiltinOptions2, name)
    raise TypeError(f"{cls} is not a schema options class (no BuiltinOptions.{name})")


def single_op(
    op: str,
    inputs: Sequence[Tensor | None],
    outputs: Sequence[Tensor],
    options: object | None = None,
    version: int = 1,
    *,
    legacy_opcodes: bool = False,
) -> bytes:
    """A model of one ``BuiltinOperator.<op>`` operator.

    ``None`` inputs are omitted optional inputs (index -1).  The non-constant
    inputs are the model inputs, in order; the outputs are the model outputs.
    A tensor passed twice (``x + x``) is one tensor of the model.
    ``legacy_opcodes`` writes operator codes as pre-2.4 converters did (see
    ``graph``).
    """
    tensors: list[Tensor] = []
    index_of: dict[int, int] = {}

    def index(t: Tensor) -> int:
        if id(t) not in index_of:
            index_of[id(t)] = len(tensors)
            tensors.append(t)
        return index_of[id(t)]

    op_inputs = [OPTIONAL if t is None else index(t) for t in inputs]
    op_outputs = [index(t) for t in outputs]
    model_inputs = list(
        dict.fromkeys(
            i
            for i in op_inputs
            if i != OPTIONAL and tensors[i].data is None and not tensors[i].variable
        )
    )
    for t in outputs:
        if t.data is not None:
            raise ValueError(f"output {t.name or t.shape} has data: outputs cannot be constants")
    return _model(
        tensors,
        [(op, op_inputs, op_outputs, options, version)],
        model_inputs,
        op_outputs,
        legacy_opcodes,
    )


def graph(
    tensors: Sequence[Tensor],
    operators: Sequence[tuple[Any, ...]],
    inputs: Sequence[int],
    outputs: Sequence[int],
    *,
    legacy_opcodes: bool = False,
) -> bytes:
    """A one-subgraph model of several operators.

    Each operator is ``(op, input_indices, output_indices, options)``, with an
    optional fifth element, its version; indices point into ``tensors`` and -1
    is an omitted optional input.  ``inputs``/``outputs`` are the model's.

    ``legacy_opcodes=True`` leaves ``builtin_code`` at 0 (ADD) with the real
    code only in ``deprecated_builtin_code``, as older converters wrote it and
    as real models still ship (mediapipe's face detector): a reader must take
    ``max(builtin_code, deprecated_builtin_code)``.
    """
    ops = []
    for entry in operators:
        if len(entry) not in (4, 5):
            raise ValueError(
                f"operator entry {entry!r}: want (op, inputs, outputs, options[, version])"
            )
        op, op_in, op_out, options = entry[:4]
        version = entry[4] if len(entry) == 5 else 1
        ops.append((op, list(op_in), list(op_out), options, version))
    for i in (*inputs, *outputs, *(j for o in ops for j in (*o[1], *o[2]) if j != OPTIONAL)):
        if not 0 <= i < len(tensors):
            raise IndexError(f"tensor index {i} out of range for {len(tensors)} tensors")
    return _model(list(tensors), ops, list(inputs), list(outputs), legacy_opcodes)


def run_litert(model: bytes, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """LiteRT's outputs (copies, in model output order) for ``inputs`` (in
    model input order), single-threaded so results do not vary by machine.
    An input whose shape differs from the model's resizes that input first."""
    return run_litert_calls(model, [inputs])[0]


def run_litert_calls(
    model: bytes, calls: Sequence[Sequence[np.ndarray]], tensors: Sequence[int] = ()
) -> list[list[np.ndarray]]:
    """``run_litert`` for several calls on one interpreter (shapes from the
    first): each call starts from the variable tensors the previous one left.
    Each call's outputs are followed by the values of ``tensors`` (indices of
    the main subgraph's tensors, such as its variables) after it."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=bytes(model), num_threads=1)
    details = interpreter.get_input_details()
    results = []
    for number, inputs in enumerate(calls):
        if len(details) != len(inputs):
            raise ValueError(f"the model has {len(details)} inputs, got {len(inputs)}")
        arrays = [np.asarray(x) for x in inputs]
        if number == 0:
            for detail, x in zip(details, arrays):
                if tuple(detail["shape"]) != x.shape:
                    interpreter.resize_tensor_input(detail["index"], list(x.shape))
            interpreter.allocate_tensors()
        for detail, x in zip(details, arrays):
            interpreter.set_tensor(detail["index"], x)
        interpreter.invoke()
        indices = [d["index"] for d in interpreter.get_output_details()] + list(tensors)
        results.append([np.array(interpreter.get_tensor(i)) for i in indices])
    return results


def with_outputs(model: bytes, tensors: Sequence[int]) -> bytes:
    """``model`` with main-subgraph ``tensors`` appended to its outputs, so a
    test can compare an intermediate value (a classifier's logits before its
    softmax) where the final output would magnify a small difference."""
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    main = parsed.subgraphs[0]
    main.outputs = [*(int(i) for i in main.outputs), *(int(i) for i in tensors)]
    return repack(parsed)


def repack(parsed: schema.ModelT) -> bytes:
    """A model read with ``schema.ModelT.InitFromPackedBuf`` (then edited) as bytes
    again; its constants keep the converter's alignment (see _AlignedBufferT)."""
    parsed.buffers = [
        _AlignedBufferT(bytes(b.data)) if b.data is not None and len(b.data) else b
        for b in parsed.buffers
    ]
    builder = flatbuffers.Builder(1024)
    builder.Finish(parsed.Pack(builder), FILE_IDENTIFIER)
    return bytes(builder.Output())


# --------------------------------------------------------------------------- internals


class _AlignedBufferT(schema.BufferT):
    """A BufferT whose bytes start 16-byte aligned (``BufferT.Pack`` aligns a
    byte vector only to 4)."""

    def __init__(self, raw: bytes) -> None:
        super().__init__()
        self.raw = raw

    def Pack(self, builder: flatbuffers.Builder) -> int:
        n = len(self.raw)
        builder.StartVector(1, n, _BUFFER_ALIGNMENT)
        builder.head -= n
        builder.Bytes[builder.head : builder.head + n] = self.raw
        data = builder.EndVector()
        schema.BufferStart(builder)
        schema.BufferAddData(builder, data)
        return schema.BufferEnd(builder)


_INDEX_VECTORS = {
    np.dtype(np.int32): (schema.SparseIndexVector.Int32Vector, schema.Int32VectorT),
    np.dtype(np.uint16): (schema.SparseIndexVector.Uint16Vector, schema.Uint16VectorT),
    np.dtype(np.uint8): (schema.SparseIndexVector.Uint8Vector, schema.Uint8VectorT),
}


def sparse(
    traversal_order: Sequence[int],
    levels: Sequence[int | tuple[Sequence[int], Sequence[int]]],
    block_map: Sequence[int] = (),
    index_dtype: Any = np.int32,
) -> schema.SparsityParametersT:
    """``Tensor.sparsity``: per traversal level a dense size, or (segments, indices)
    of a SPARSE_CSR level, stored as ``index_dtype`` vectors; written as given, so a
    test can also write malformed ones."""
    kind, vector_class = _INDEX_VECTORS[np.dtype(index_dtype)]
    metadata = []
    for level in levels:
        meta = schema.DimensionMetadataT()
        if isinstance(level, int):
            meta.format, meta.denseSize = schema.DimensionType.DENSE, level
        else:
            meta.format = schema.DimensionType.SPARSE_CSR
            segments, indices = vector_class(), vector_class()
            segments.values, indices.values = [int(v) for v in level[0]], [int(v) for v in level[1]]
            meta.arraySegmentsType = meta.arrayIndicesType = kind
            meta.arraySegments, meta.arrayIndices = segments, indices
        metadata.append(meta)
    parameters = schema.SparsityParametersT()
    parameters.traversalOrder = list(traversal_order)
    parameters.blockMap = list(block_map)
    parameters.dimMetadata = metadata
    return parameters


def _dtype(t: Tensor) -> np.dtype[Any]:
    dtype = np.dtype(t.dtype)
    if dtype not in _TENSOR_TYPES:
        raise TypeError(f"tensor {t.name or t.shape}: no TFLite type for {dtype}")
    return dtype


def _raw_bytes(t: Tensor) -> bytes:
    """The constant's bytes, little-endian, row-major; checks its shape."""
    dtype = _dtype(t)
    data = np.asarray(t.data)
    if data.size != int(np.prod(t.shape, dtype=np.int64)):
        raise ValueError(f"tensor {t.name or t.shape}: data has shape {data.shape}, not {t.shape}")
    if data.dtype != dtype and not np.can_cast(data.dtype, dtype, casting="same_kind"):
        raise TypeError(f"tensor {t.name or t.shape}: data is {data.dtype}, tensor is {dtype}")
    return np.ascontiguousarray(data.reshape(t.shape), dtype=dtype.newbyteorder("<")).tobytes()


def _quantization(t: Tensor) -> schema.QuantizationParametersT | None:
    if t.scale is None:
        if t.zero_point is not None:
            raise ValueError(f"tensor {t.name or t.shape}: zero_point without scale")
        return None
    scales = [float(s) for s in np.atleast_1d(t.scale)]
    if t.zero_point is None:
        zero_points = [0] * len(scales)
    else:
        zero_points = [int(z) for z in np.atleast_1d(t.zero_point)]
    if len(zero_points) != len(scales):
        raise ValueError(
            f"tensor {t.name or t.shape}: {len(scales)} scales but {len(zero_points)} zero points"
        )
    if len(scales) > 1:
        axis = t.quantized_dimension
        if not 0 <= axis < len(t.shape) or t.shape[axis] != len(scales):
            raise ValueError(
                f"tensor {t.name or t.shape}: {len(scales)} per-channel scales do not fit "
                f"dimension {axis} of shape {t.shape}"
            )
    q = schema.QuantizationParametersT()
    q.scale = scales
    q.zeroPoint = zero_points
    q.quantizedDimension = t.quantized_dimension
    return q


def _builtin_code(op: str) -> int:
    code = getattr(schema.BuiltinOperator, op, None)
    if not isinstance(code, int):
        raise ValueError(f"no BuiltinOperator.{op}")
    return code


Ops = list[tuple[str, list[int], list[int], object | None, int]]


def _model(
    tensors: list[Tensor],
    ops: Ops,
    inputs: list[int],
    outputs: list[int],
    legacy_opcodes: bool = False,
) -> bytes:
    return _models([(tensors, ops, inputs, outputs)], legacy_opcodes)


def subgraphs(
    graphs: Sequence[
        tuple[Sequence[Tensor], Sequence[tuple[Any, ...]], Sequence[int], Sequence[int]]
    ],
) -> bytes:
    """A model of several subgraphs (the first is the main one), each given as
    ``graph`` takes it: for IF, WHILE and CALL_ONCE, which name subgraphs by index."""
    return _models(
        [
            (list(t), [(*o[:4], o[4] if len(o) == 5 else 1) for o in ops], list(i), list(out))
            for t, ops, i, out in graphs
        ]
    )


def _models(
    graphs: list[tuple[list[Tensor], Ops, list[int], list[int]]], legacy_opcodes: bool = False
) -> bytes:
    buffers: list[schema.BufferT] = [schema.BufferT()]  # buffer 0: the empty sentinel
    codes: list[schema.OperatorCodeT] = []
    code_index: dict[tuple[int, int], int] = {}
    subgraph_ts = []
    for number, (tensors, ops, inputs, outputs) in enumerate(graphs):
        tensor_ts = []
        for i, t in enumerate(tensors):
            tt = schema.TensorT()
            tt.shape = [int(d) for d in t.shape]
            # RESOURCE: a variable's handle (VAR_HANDLE), a type numpy has no name for.
            tt.type = (
                schema.TensorType.RESOURCE if t.dtype == RESOURCE else _TENSOR_TYPES[_dtype(t)]
            )
            tt.name = t.name or f"t{i}"
            tt.quantization = _quantization(t)
            tt.isVariable = t.variable
            if t.sparsity is not None:
                tt.sparsity = t.sparsity
                tt.buffer = len(buffers)
                stored = np.ascontiguousarray(t.data, dtype=_dtype(t).newbyteorder("<"))
                buffers.append(_AlignedBufferT(stored.tobytes()))
            elif t.data is not None:
                tt.buffer = len(buffers)
                buffers.append(_AlignedBufferT(_raw_bytes(t)))
            tensor_ts.append(tt)
        operator_ts = []
        for op, op_in, op_out, options, version in ops:
            code = _builtin_code(op)
            if (code, version) not in code_index:
                oc = schema.OperatorCodeT()
                if legacy_opcodes and code > _DEPRECATED_CODE_LIMIT:
                    raise ValueError(f"{op} ({code}) has no legacy (int8) operator code")
                oc.builtinCode = 0 if legacy_opcodes else code
                oc.deprecatedBuiltinCode = min(code, _DEPRECATED_CODE_LIMIT)
                oc.version = version
                code_index[(code, version)] = len(codes)
                codes.append(oc)
            ot = schema.OperatorT()
            ot.opcodeIndex = code_index[(code, version)]
            ot.inputs = list(op_in)
            ot.outputs = list(op_out)
            if options is not None:
                field, tag = options_type(options)
                setattr(ot, field + "Type", tag)
                setattr(ot, field, options)
            operator_ts.append(ot)
        subgraph = schema.SubGraphT()
        subgraph.tensors = tensor_ts
        subgraph.inputs = list(inputs)
        subgraph.outputs = list(outputs)
        subgraph.operators = operator_ts
        subgraph.name = "main" if number == 0 else f"subgraph{number}"
        subgraph_ts.append(subgraph)

    model = schema.ModelT()
    model.version = SCHEMA_VERSION
    model.operatorCodes = codes
    model.subgraphs = subgraph_ts
    model.buffers = buffers
    model.description = "nnburst tests/tflite_builder.py"

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())
