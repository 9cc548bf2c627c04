"""A ``.tflite`` flatbuffer as plain Python objects, read with the ``tflite``
schema package.

Only what the converter needs is read: tensors (shape, type, quantization,
constant data), operators (their builtin code and options table) and each
subgraph's inputs and outputs.  Constant data are numpy views on the file's
bytes, not copies.
"""

from __future__ import annotations

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


def _operator_name(code: Any) -> str:
    # Files written before the 4-byte field existed leave BuiltinCode at 0 (ADD) and
    # newer ones leave the deprecated byte at 127 (the escape): the larger is right.
    builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
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
    sparse = t.Sparsity() is not None
    raw = _buffer_data(model, data, t.Buffer())
    values = None
    if raw is not None and dtype is not None and not sparse:  # sparse data is not dense bytes
        count = int(np.prod(shape)) if shape else 1
        if raw.nbytes != count * dtype.itemsize:
            raise BadDataError(
                f"tensor {index} ({t.Name().decode(errors='replace')}): {raw.nbytes} bytes of "
                f"data for shape {list(shape)} of {dtype}"
            )
        values = raw.view(dtype).reshape(shape)
    tensor = Tensor(
        index,
        (t.Name() or b"").decode(errors="replace"),
        shape,
        _TYPE_NAMES.get(t.Type(), str(t.Type())),
        dtype,
        values,
        sparse=sparse,
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
                    )
                )
            inputs = [int(v) for v in g.InputsAsNumpy()] if g.InputsLength() else []
            outputs = [int(v) for v in g.OutputsAsNumpy()] if g.OutputsLength() else []
            for t in (*inputs, *outputs, *(v for o in operators for v in (*o.inputs, *o.outputs))):
                if not -1 <= t < len(tensors):
                    raise BadDataError(f"subgraph {s} refers to tensor {t} of {len(tensors)}")
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
