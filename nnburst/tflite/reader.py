"""A ``.tflite`` flatbuffer as plain Python objects, read with the ``tflite``
schema package.

Only what the converter needs is read: tensors (shape, type, quantization,
constant data), operators (their builtin code and options table) and each
subgraph's inputs and outputs.  Constant data are numpy views on the file's
bytes, not copies.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tflite

from ..errors import BadDataError

#: ``tflite.TensorType`` → numpy dtype, for the types a model may hold.
DTYPES: dict[int, np.dtype[Any]] = {
    tflite.TensorType.FLOAT32: np.dtype(np.float32),
    tflite.TensorType.FLOAT16: np.dtype(np.float16),
    tflite.TensorType.INT32: np.dtype(np.int32),
    tflite.TensorType.UINT8: np.dtype(np.uint8),
    tflite.TensorType.INT64: np.dtype(np.int64),
    tflite.TensorType.BOOL: np.dtype(np.bool_),
    tflite.TensorType.INT16: np.dtype(np.int16),
    tflite.TensorType.INT8: np.dtype(np.int8),
    tflite.TensorType.FLOAT64: np.dtype(np.float64),
}

_TYPE_NAMES = {v: k for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}
_OPERATOR_NAMES = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
_OPTION_CLASSES = {
    v: getattr(tflite, k, None)
    for k, v in vars(tflite.BuiltinOptions).items()
    if not k.startswith("_")
}


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    type_name: str
    dtype: np.dtype[Any] | None  # None: a type nnburst cannot hold (string, complex, ...)
    data: np.ndarray | None  # a constant's values (a view on the file)
    scales: np.ndarray | None = None
    zero_points: np.ndarray | None = None
    quantized_dimension: int = 0
    sparse: bool = False
    #: a variable tensor: state an operator (a sequence LSTM or RNN) updates in place
    variable: bool = False
    #: the shape with -1 where the model accepts any size (None: the file has none)
    signature: tuple[int, ...] | None = None

    @property
    def per_channel(self) -> bool:
        return self.scales is not None and self.scales.size > 1


@dataclass
class Operator:
    index: int
    name: str  # the builtin operator's name, or "CUSTOM:<code>"
    inputs: list[int]  # -1: an omitted optional input
    outputs: list[int]
    options: Any = None  # the builtin options table, or None
    custom: bytes = b""  # a custom operator's options, as the file holds them


@dataclass
class Subgraph:
    name: str
    tensors: list[Tensor]
    operators: list[Operator]
    inputs: list[int]
    outputs: list[int]


@dataclass
class FlatModel:
    subgraphs: list[Subgraph] = field(default_factory=list)
    description: str = ""


#: OperatorCode's ``builtin_code`` (int32), the fourth field: its vtable slot.
_BUILTIN_CODE_SLOT = 10


def _builtin_code(code: Any) -> int:
    """The larger of OperatorCode's two code fields, as TFLite's schema says: files
    written before the int32 existed leave it at 0 (ADD), newer converters write 127
    (the escape) in the byte for larger codes, and some (ai-edge-quantizer) write
    only the int32.  The int32 is read raw: the ``tflite`` package's
    ``BuiltinCode()`` returns the byte whenever the int32 is below 127."""
    table = code._tab  # the generated accessors' flatbuffers table
    offset = table.Offset(_BUILTIN_CODE_SLOT)  # 0: the field is absent (its default, 0)
    wide = struct.unpack_from("<i", table.Bytes, table.Pos + offset)[0] if offset else 0
    return max(wide, code.DeprecatedBuiltinCode())


def _operator_name(code: Any) -> str:
    builtin = _builtin_code(code)
    if builtin == tflite.BuiltinOperator.CUSTOM:
        custom = code.CustomCode()
        return "CUSTOM:" + (custom.decode(errors="replace") if custom else "?")
    return _OPERATOR_NAMES.get(builtin, f"BUILTIN_{builtin}")


def _buffer_data(model: Any, data: bytes, index: int) -> np.ndarray | None:
    if index <= 0 or index >= model.BuffersLength():
        return None
    buffer = model.Buffers(index)
    offset, size = buffer.Offset(), buffer.Size()
    if offset > 1:  # a model over 2 GB keeps its buffers after the flatbuffer
        if offset + size > len(data):
            raise BadDataError(f"buffer {index} lies outside the file")
        return np.frombuffer(data, np.uint8, size, offset)
    if buffer.DataLength() == 0:
        return None
    return buffer.DataAsNumpy()


def _tensor(model: Any, data: bytes, index: int, t: Any) -> Tensor:
    shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
    dtype = DTYPES.get(t.Type())
    sparsity = t.Sparsity()
    raw = _buffer_data(model, data, t.Buffer())
    values = None
    if raw is not None and dtype is not None:
        what = f"tensor {index} ({t.Name().decode(errors='replace')})"
        if raw.nbytes % dtype.itemsize:
            raise BadDataError(f"{what}: {raw.nbytes} bytes of data is no whole number of {dtype}")
        if sparsity is not None:
            values = densify(raw.view(dtype), shape, sparsity, what)
        elif raw.nbytes != math.prod(shape) * dtype.itemsize:
            raise BadDataError(
                f"{what}: {raw.nbytes} bytes of data for shape {list(shape)} of {dtype}"
            )
        else:
            values = raw.view(dtype).reshape(shape)
    tensor = Tensor(
        index,
        (t.Name() or b"").decode(errors="replace"),
        shape,
        _TYPE_NAMES.get(t.Type(), str(t.Type())),
        dtype,
        values,
        sparse=sparsity is not None,
        variable=bool(t.IsVariable()),
        signature=(
            tuple(int(d) for d in t.ShapeSignatureAsNumpy()) if t.ShapeSignatureLength() else None
        ),
    )
    q = t.Quantization()
    if q is not None and q.ScaleLength():
        tensor.scales = q.ScaleAsNumpy().astype(np.float64)
        tensor.zero_points = (
            q.ZeroPointAsNumpy().astype(np.int64)
            if q.ZeroPointLength()
            else np.zeros(tensor.scales.size, np.int64)
        )
        tensor.quantized_dimension = q.QuantizedDimension()
    return tensor


#: The largest tensor a sparse constant may expand to.
MAX_DENSE_BYTES = 1 << 30
_DENSE, _SPARSE_CSR = tflite.DimensionType.DENSE, tflite.DimensionType.SPARSE_CSR
_INDEX_VECTORS = {
    tflite.SparseIndexVector.Int32Vector: tflite.Int32Vector,
    tflite.SparseIndexVector.Uint16Vector: tflite.Uint16Vector,
    tflite.SparseIndexVector.Uint8Vector: tflite.Uint8Vector,
}


def _index_vector(kind: int, table: Any, what: str) -> np.ndarray:
    cls = _INDEX_VECTORS.get(kind)
    if cls is None or table is None:
        raise BadDataError(f"{what}: a sparse dimension without its index arrays")
    vector = cls()
    vector.Init(table.Bytes, table.Pos)
    return (
        vector.ValuesAsNumpy().astype(np.int64) if vector.ValuesLength() else np.zeros(0, np.int64)
    )


def densify(values: np.ndarray, shape: tuple[int, ...], sparsity: Any, what: str) -> np.ndarray:
    """The dense tensor of TFLite's sparse format (what the DENSIFY operator computes).

    The stored dimensions are the tensor's, in ``traversal_order``, then one per
    blocked dimension (``block_map``) holding the position inside its block.  Each
    is DENSE (every index) or SPARSE_CSR (per parent position, a segment of the
    index array).  All paths are expanded level by level with numpy, never one
    element at a time; every index and segment is checked against its bounds.
    """
    rank = len(shape)
    order = (
        sparsity.TraversalOrderAsNumpy().astype(np.int64)
        if sparsity.TraversalOrderLength()
        else np.zeros(0, np.int64)
    )
    block_map = (
        sparsity.BlockMapAsNumpy().astype(np.int64)
        if sparsity.BlockMapLength()
        else np.zeros(0, np.int64)
    )
    levels = rank + block_map.size
    if (
        sparsity.DimMetadataLength() != levels
        or sorted(order.tolist()) != list(range(levels))
        or not all(0 <= d < rank for d in block_map.tolist())
    ):
        raise BadDataError(f"{what}: sparsity parameters that do not describe a rank-{rank} tensor")
    elements = math.prod(shape)
    if elements * values.dtype.itemsize > MAX_DENSE_BYTES:
        raise BadDataError(f"{what}: a sparse {list(shape)} tensor is too large to densify")
    level_of = np.argsort(order)  # the traversal level that holds each stored dimension
    positions = np.zeros(1, np.int64)  # per partial path: its position at the current level
    coordinates = np.zeros((1, 0), np.int64)  # per partial path: its index at each level so far
    dense_sizes: dict[int, int] = {}
    for level in range(levels):
        meta = sparsity.DimMetadata(level)
        if meta.Format() == _DENSE:
            size = dense_sizes[level] = meta.DenseSize()
            if size < 0 or positions.size * size > elements:
                raise BadDataError(f"{what}: dense size {size} does not fit {list(shape)}")
            counts = np.full(positions.size, size)
            indexes = np.tile(np.arange(size), positions.size)
            children = np.repeat(positions * size, size) + indexes
        elif meta.Format() == _SPARSE_CSR:
            segments = _index_vector(meta.ArraySegmentsType(), meta.ArraySegments(), what)
            found = _index_vector(meta.ArrayIndicesType(), meta.ArrayIndices(), what)
            if (
                positions.size
                and positions.max() + 1 >= segments.size
                or np.any(np.diff(segments) < 0)
                or segments.size
                and (segments[0] < 0 or segments[-1] > found.size)
            ):
                raise BadDataError(f"{what}: sparse segments out of order or out of bounds")
            starts, counts = segments[positions], segments[positions + 1] - segments[positions]
            firsts = np.repeat(np.cumsum(counts) - counts, counts)
            children = np.arange(int(counts.sum())) - firsts + np.repeat(starts, counts)
            indexes = found[children]
        else:
            raise BadDataError(f"{what}: unknown sparse dimension format {meta.Format()}")
        coordinates = np.column_stack([np.repeat(coordinates, counts, axis=0), indexes])
        positions = children
    if positions.size != values.size:
        raise BadDataError(
            f"{what}: {values.size} stored values for {positions.size} sparse positions"
        )
    index = [coordinates[:, level_of[d]] for d in range(rank)]
    for k, d in enumerate(block_map.tolist()):
        level = int(level_of[rank + k])
        if level not in dense_sizes:
            raise BadDataError(f"{what}: block dimension {k} is not dense")
        index[d] = index[d] * dense_sizes[level] + coordinates[:, level]
    for d, column in enumerate(index):
        if column.size and (column.min() < 0 or column.max() >= shape[d]):
            raise BadDataError(f"{what}: a sparse index outside dimension {d} of {list(shape)}")
    dense = np.zeros(shape, values.dtype)
    if values.size:
        dense[tuple(index)] = values
    return dense


def _options(op: Any) -> Any:
    table = op.BuiltinOptions()
    cls = _OPTION_CLASSES.get(op.BuiltinOptionsType())
    if table is None or cls is None:
        return None
    options = cls()
    options.Init(table.Bytes, table.Pos)
    return options


def read(data: bytes) -> FlatModel:
    """Parse ``data`` (a whole ``.tflite`` file).

    Raises:
        BadDataError: not a TFLite model, or one whose tables contradict each other.
    """
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise BadDataError("not a TensorFlow Lite model (no TFL3 identifier)")
    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        names = [_operator_name(model.OperatorCodes(i)) for i in range(model.OperatorCodesLength())]
        subgraphs = []
        for s in range(model.SubgraphsLength()):
            g = model.Subgraphs(s)
            tensors = [_tensor(model, data, i, g.Tensors(i)) for i in range(g.TensorsLength())]
            operators = []
            for i in range(g.OperatorsLength()):
                op = g.Operators(i)
                if not 0 <= op.OpcodeIndex() < len(names):
                    raise BadDataError(f"operator {i} names opcode {op.OpcodeIndex()}")
                operators.append(
                    Operator(
                        i,
                        names[op.OpcodeIndex()],
                        [int(v) for v in op.InputsAsNumpy()] if op.InputsLength() else [],
                        [int(v) for v in op.OutputsAsNumpy()] if op.OutputsLength() else [],
                        _options(op),
                        op.CustomOptionsAsNumpy().tobytes() if op.CustomOptionsLength() else b"",
                    )
                )
            inputs = [int(v) for v in g.InputsAsNumpy()] if g.InputsLength() else []
            outputs = [int(v) for v in g.OutputsAsNumpy()] if g.OutputsLength() else []
            for t in (*inputs, *outputs, *(v for o in operators for v in (*o.inputs, *o.outputs))):
                if not -1 <= t < len(tensors):
                    raise BadDataError(f"subgraph {s} refers to tensor {t} of {len(tensors)}")
            if -1 in inputs or -1 in outputs:  # -1: an operator's omitted optional input
                raise BadDataError(f"subgraph {s} omits one of its inputs or outputs (-1)")
            name = (g.Name() or b"").decode(errors="replace")
            subgraphs.append(Subgraph(name, tensors, operators, inputs, outputs))
    except BadDataError:
        raise
    except Exception as exc:  # a truncated or corrupt flatbuffer
        raise BadDataError(f"a malformed TensorFlow Lite model: {exc}") from None
    if not subgraphs:
        raise BadDataError("the model has no subgraph")
    description = (model.Description() or b"").decode(errors="replace")
    return FlatModel(subgraphs, description)
