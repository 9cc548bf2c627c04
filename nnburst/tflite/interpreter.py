"""LiteRT's ``Interpreter`` on nnburst: code written for LiteRT (or
``tf.lite``) runs on any nnburst device by changing one import.

    >>> from nnburst.tflite import Interpreter   # was: from ai_edge_litert.interpreter import ...
    >>> interpreter = Interpreter(model_path="model.tflite")
    >>> interpreter.allocate_tensors()
    >>> interpreter.set_tensor(interpreter.get_input_details()[0]["index"], image)
    >>> interpreter.invoke()
    >>> scores = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])

Tensors are named by the file's tensor indices, as LiteRT names them; only
the main subgraph's inputs can be set and only its inputs and outputs read
(the model runs as one NNAPI model, whose intermediates have no place to be
read from).  Stateful models keep their variables from ``invoke`` to
``invoke``, as LiteRT does.  Like LiteRT's, an Interpreter is for one thread
at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tflite as schema

from .. import imported
from ..cpu import threads as kernel_threads
from ..devices import Device
from ..errors import BadDataError
from ..imported import UnsupportedModelError
from .loading import Runner, load
from .reader import Tensor, read

__all__ = ["Interpreter", "InterpreterError", "InterpreterRuntimeError", "SignatureRunner"]


class InterpreterError(BadDataError, ValueError):
    """A call LiteRT would refuse with a ValueError, in LiteRT's words: code that
    catches ValueError keeps working."""


class InterpreterRuntimeError(BadDataError, RuntimeError):
    """A call LiteRT would refuse with a RuntimeError (a resize it cannot do, a
    model not ready): code that catches RuntimeError keeps working."""


def _details(tensor: Tensor, signature: Sequence[int], shape: Sequence[int]) -> dict[str, Any]:
    """One entry of ``get_input_details()``, with LiteRT's keys and types."""
    scales = tensor.scales if tensor.scales is not None else np.zeros(0)
    zero_points = tensor.zero_points if tensor.zero_points is not None else np.zeros(0)
    per_tensor = (float(scales[0]), int(zero_points[0])) if scales.size == 1 else (0.0, 0)
    return {
        "name": tensor.name,
        "index": tensor.index,
        "shape": np.array(shape, np.int32),
        "shape_signature": np.array(signature, np.int32),
        "dtype": tensor.dtype.type if tensor.dtype is not None else None,
        "quantization": per_tensor,
        "quantization_parameters": {
            "scales": np.asarray(scales, np.float32),
            "zero_points": np.asarray(zero_points, np.int32),
            "quantized_dimension": tensor.quantized_dimension,
            "block_size": 0,
        },
        "sparsity_parameters": {},
    }


def _type_name(dtype: np.dtype[Any]) -> str:
    return {"float32": "FLOAT32", "float64": "FLOAT64", "bool": "BOOL", "object": "STRING"}.get(
        dtype.name, dtype.name.upper()
    )


class Interpreter:
    """LiteRT's ``Interpreter``, running the model on an nnburst device.

    ``num_threads``: the CPU driver's kernel threads for this model (None or
    0: ``NNBURST_THREADS``, else one; see ``nnburst/cpu/threads.py``), a
    BadDataError for a negative or absurd count;
    ``experimental_delegates`` must be empty: ``device`` (an nnburst device
    name, or a :class:`~nnburst.Device`) says where the model runs, a driver
    service device included, through a burst.

    Threads: as LiteRT's, an Interpreter is for one thread at a time (its
    tensors are one set: two threads' ``set_tensor``/``invoke`` would mix).
    Give each thread its own Interpreter of the model; they run side by side,
    each with its own variables, sharing only the compilation cache on disk.
    """

    def __init__(
        self,
        model_path: str | None = None,
        model_content: bytes | None = None,
        experimental_delegates: Sequence[Any] | None = None,
        num_threads: int | None = None,
        device: str | Device | None = None,
        **kwargs: Any,
    ) -> None:
        if (model_path is None) == (model_content is None):
            raise InterpreterError("`model_path` or `model_content` must be specified.")
        if experimental_delegates:
            raise InterpreterError(
                "experimental_delegates: nnburst runs no LiteRT delegate; name an nnburst "
                "device with device= instead"
            )
        self._data = imported.read_source(model_path if model_path is not None else model_content)  # type: ignore[arg-type]
        flat = read(self._data)
        self._graph = flat.subgraphs[0]
        try:  # what the reader does not read, from the same flatbuffer
            self._signature = _shape_signatures(self._data)
            self._signatures = _signature_defs(self._data)
        except BadDataError:
            raise
        except Exception as exc:  # flatbuffers' struct.error, IndexError, ... on a broken file
            raise BadDataError(
                f"malformed TFLite signatures: {type(exc).__name__}: {exc}"
            ) from None
        self._device = device
        kernel_threads.checked_threads(num_threads, "num_threads")
        self.num_threads = num_threads
        self._inputs = list(self._graph.inputs)
        self._outputs = list(self._graph.outputs)
        #: (position, tensor index) of the outputs that are not inputs too
        self._outputs_only = [
            (position, index)
            for position, index in enumerate(self._outputs)
            if index not in self._inputs
        ]
        #: the inputs as set (zeros until then) and the outputs of the last invoke
        self._values: dict[int, np.ndarray] = {  # the inputs as set, the outputs of invoke
            i: np.zeros(self._tensor(i).shape, self._tensor(i).dtype or np.float32)
            for i in self._inputs
        }
        self._runner: Runner | None = None
        #: input position -> tensor index of the inputs the Runner has no buffer
        #: to fill as is (their values go in at invoke)
        self._fed_at_invoke: dict[int, int] = {}
        #: each input's and output's shape now: an input's as resized, an output's as
        #: the last allocate_tensors computed it
        self._shapes: dict[int, tuple[int, ...]] = {
            i: self._tensor(i).shape for i in (*self._inputs, *self._outputs)
        }
        #: the input shapes the runner was compiled for (None: the file's own)
        self._compiled_shapes: dict[int, tuple[int, ...]] | None = None

    # -- descriptions ------------------------------------------------------------------
    def _tensor(self, index: int) -> Tensor:
        count = len(self._graph.tensors)
        if not isinstance(index, int | np.integer) or not 0 <= index < count:
            raise InterpreterError(f"Invalid tensor index {index} exceeds max tensor index {count}")
        return self._graph.tensors[int(index)]

    def _described(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        return [
            _details(
                self._tensor(i),
                self._signature.get(i, self._tensor(i).shape),
                self._shapes.get(i, self._tensor(i).shape),
            )
            for i in indices
        ]

    def get_input_details(self) -> list[dict[str, Any]]:
        return self._described(self._inputs)

    def get_output_details(self) -> list[dict[str, Any]]:
        return self._described(self._outputs)

    def get_signature_list(self) -> dict[str, dict[str, list[str]]]:
        return {
            key: {"inputs": list(inputs), "outputs": list(outputs)}
            for key, (inputs, outputs) in self._signatures.items()
        }

    def get_signature_runner(self, signature_key: str | None = None) -> SignatureRunner:
        if signature_key is None:
            if len(self._signatures) != 1:
                raise InterpreterError(
                    f"SignatureDef signature_key is None and model has {len(self._signatures)} "
                    "Signatures. None is only allowed when the model has 1 SignatureDef"
                )
            (signature_key,) = self._signatures
        if signature_key not in self._signatures:
            raise InterpreterError(f'Invalid signature_key provided: "{signature_key}".')
        inputs, outputs = self._signatures[signature_key]
        return SignatureRunner(self, inputs, outputs)

    # -- running -----------------------------------------------------------------------
    def allocate_tensors(self) -> None:
        """Compile the model (once, cached on disk) at the inputs' current shapes:
        after a ``resize_tensor_input``, for the new ones."""
        wanted = {i: self._shapes[i] for i in self._inputs}
        if self._runner is not None and wanted == self._compiled_shapes:
            return
        resized: dict[int, Sequence[int]] = {
            i: shape for i, shape in wanted.items() if shape != self._tensor(i).shape
        }
        try:
            loaded = load(self._data, resized or None, strict=False)
        except UnsupportedModelError:
            raise
        except BadDataError as exc:
            if not resized:
                raise
            raise InterpreterRuntimeError(
                f"allocate_tensors: the model cannot run at input shapes "
                f"{ {i: list(s) for i, s in resized.items()} }: {exc}"
            ) from None
        self._drop_runner()
        runner = self._runner = Runner(
            loaded, self._device, threads=self.num_threads, threads_option="num_threads"
        )
        self._compiled_shapes = wanted
        for index, info in zip(self._outputs, loaded.outputs):
            self._shapes[index] = info.shape
        # Each input's value lives in the Runner's own buffer where its type
        # allows (set_tensor writes it there; invoke copies nothing more in).
        self._fed_at_invoke = {}
        for position, (index, buffer) in enumerate(zip(self._inputs, runner._buffers_as_is())):
            current = self._values.get(index)
            if current is None or current.shape != self._shapes[index]:
                current = np.zeros(self._shapes[index], self._tensor(index).dtype or np.float32)
            if buffer is not None and buffer.shape == current.shape:
                buffer[...] = current
                self._values[index] = buffer
            else:
                self._values[index] = current
                self._fed_at_invoke[position] = index

    def _drop_runner(self) -> None:
        """Close the Runner, keeping copies of the inputs that lived in its
        buffers and forgetting the outputs (views of them) first: views left
        behind would keep the closed Runner's shared memory mapped."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        for index in self._inputs:
            self._values[index] = self._values[index].copy()
        for index in self._outputs:
            if index not in self._inputs:
                self._values.pop(index, None)
        runner.close()

    def resize_tensor_input(
        self, input_index: int, tensor_size: Sequence[int], strict: bool = False
    ) -> None:
        """The input's new shape; ``allocate_tensors`` then compiles the model for it
        (every shape after the input recomputed).  ``strict``: only the dimensions
        the shape signature leaves open (-1) may change, as in LiteRT."""
        tensor = self._tensor(input_index)
        if tensor.index not in self._inputs:
            raise InterpreterRuntimeError("Attempting to resize a fixed-size tensor.")
        try:
            shape = tuple(int(d) for d in tensor_size)
        except (TypeError, ValueError):
            raise InterpreterError(f"resize_tensor_input: {tensor_size!r} is not a shape") from None
        if any(d < 0 for d in shape):
            raise InterpreterRuntimeError(
                f"resize_tensor_input: a negative dimension in {list(shape)}"
            )
        signature = self._signature.get(tensor.index)
        if strict and signature is not None:
            if len(shape) != len(signature):
                raise InterpreterRuntimeError(
                    f"ResizeInputTensorStrict: tensor {tensor.index} has rank {len(signature)}, "
                    f"not {len(shape)}"
                )
            current = self._shapes[tensor.index]
            for axis, (size, fixed) in enumerate(zip(shape, signature)):
                if fixed != -1 and size != current[axis]:
                    raise InterpreterRuntimeError(
                        f"Attempting to resize dimension {axis} of tensor {tensor.index} with "
                        f"value {current[axis]} to {size}. ResizeInputTensorStrict only allows "
                        "mutating unknown dimensions identified by -1."
                    )
        if shape != self._shapes[tensor.index]:
            self._shapes[tensor.index] = shape
            self._drop_runner()

    def set_tensor(self, tensor_index: int, value: Any) -> None:
        current = self._values.get(tensor_index) if tensor_index in self._inputs else None
        if (
            current is not None
            and self._runner is not None
            and type(value) is np.ndarray
            and value.dtype is current.dtype  # numpy's dtypes are singletons
            and value.shape == current.shape
        ):
            # the usual call: an input's own type and shape, into the Runner's buffer
            current[...] = value
            return
        tensor = self._tensor(tensor_index)
        if self._compiled_shapes is None:  # never allocated (a resize keeps the old buffers)
            raise InterpreterError(
                "Cannot set tensor: Tensor is unallocated. Try calling allocate_tensors() first"
            )
        position = self._inputs.index(tensor.index) if tensor.index in self._inputs else -1
        if position < 0:
            raise InterpreterError(
                f"Cannot set tensor: tensor {tensor.index} ({tensor.name}) is not an input of "
                "the model (nnburst sets inputs only)"
            )
        array = np.asarray(value)
        if array.dtype != tensor.dtype:
            raise InterpreterError(
                f"Cannot set tensor: Got value of type {_type_name(array.dtype)} but expected "
                f"type {_type_name(np.dtype(tensor.dtype))} for input {position}, name: "
                f"{tensor.name} "
            )
        shape = self._shapes[tensor.index]
        if array.ndim != len(shape):
            raise InterpreterError(
                f"Cannot set tensor: Dimension mismatch. Got {array.ndim} but expected "
                f"{len(shape)} for input {position}."
            )
        for axis, (got, want) in enumerate(zip(array.shape, shape)):
            if got != want:
                raise InterpreterError(
                    f"Cannot set tensor: Dimension mismatch. Got {got} but expected {want} "
                    f"for dimension {axis} of input {position}."
                )
        current = self._values[tensor.index]
        if self._runner is not None and current.shape == array.shape:
            current[...] = array  # the Runner's buffer, or this input's own array
        else:  # resized since allocate_tensors: no Runner until the next one
            self._values[tensor.index] = array.copy()

    def invoke(self) -> None:
        if self._runner is None:
            raise InterpreterRuntimeError("Invoke called on model that is not ready.")
        values = self._values
        fed = {position: values[index] for position, index in self._fed_at_invoke.items()}
        outputs = self._runner._run_in_place(fed)
        # The Runner's own buffers: get_tensor copies them.  An output that is
        # also an input keeps the input's buffer (the same value).
        for position, index in self._outputs_only:
            values[index] = outputs[position]

    def get_tensor(self, tensor_index: int) -> np.ndarray:
        """A copy of an input as set, or of an output after ``invoke``."""
        if type(tensor_index) is int and tensor_index in self._values:
            return self._values[tensor_index].copy()  # the usual call: said below otherwise
        tensor = self._tensor(tensor_index)
        if tensor.index not in self._values:
            kind = (
                "an output before invoke"
                if tensor.index in self._outputs
                else "not an input or output"
            )
            raise InterpreterError(
                f"get_tensor: tensor {tensor.index} ({tensor.name}) is {kind}: nnburst keeps the "
                "model's inputs and outputs only"
            )
        return self._values[tensor.index].copy()

    def tensor(self, tensor_index: int) -> Callable[[], np.ndarray]:
        """A function returning the tensor's current value (a copy here, where
        LiteRT returns a view of its buffer)."""
        self._tensor(tensor_index)
        return lambda: self.get_tensor(tensor_index)

    def reset_all_variables(self) -> None:
        if self._runner is not None:
            self._runner.reset()

    def close(self) -> None:
        self._drop_runner()


class SignatureRunner:
    """``get_signature_runner(...)``: the model called with keyword inputs by
    signature name, outputs as a dict by signature name.  As in LiteRT, each
    input is resized to the shape it is given (a new shape compiles again)."""

    def __init__(
        self, interpreter: Interpreter, inputs: dict[str, int], outputs: dict[str, int]
    ) -> None:
        self._interpreter = interpreter
        self._inputs = inputs
        self._outputs = outputs

    def get_input_details(self) -> dict[str, dict[str, Any]]:
        described = self._interpreter._described(list(self._inputs.values()))
        return dict(zip(self._inputs, described))

    def get_output_details(self) -> dict[str, dict[str, Any]]:
        described = self._interpreter._described(list(self._outputs.values()))
        return dict(zip(self._outputs, described))

    def __call__(self, **inputs: Any) -> dict[str, np.ndarray]:
        if len(inputs) != len(self._inputs):
            raise InterpreterError(
                "Invalid number of inputs provided for running a SignatureDef, expected "
                f"{len(self._inputs)} vs provided {len(inputs)}"
            )
        unknown = sorted(set(inputs) - set(self._inputs))
        if unknown:
            raise InterpreterError(f"Invalid Input name ({unknown[0]}) for SignatureDef")
        interpreter = self._interpreter
        arrays = {name: np.asarray(value) for name, value in inputs.items()}
        for name, array in arrays.items():  # as LiteRT's: each input at the shape it is given
            interpreter.resize_tensor_input(self._inputs[name], array.shape)
        interpreter.allocate_tensors()
        for name, array in arrays.items():
            interpreter.set_tensor(self._inputs[name], array)
        interpreter.invoke()
        return {name: interpreter.get_tensor(index) for name, index in self._outputs.items()}


def _root(data: bytes) -> Any:
    return schema.Model.GetRootAsModel(data, 0)


def _shape_signatures(data: bytes) -> dict[int, tuple[int, ...]]:
    """The main subgraph's tensors' shape signatures (-1 for a dynamic dimension),
    where the file has them."""
    graph = _root(data).Subgraphs(0)
    signatures = {}
    for i in [*graph.InputsAsNumpy().tolist(), *graph.OutputsAsNumpy().tolist()]:
        tensor = graph.Tensors(i)
        if tensor is not None and tensor.ShapeSignatureLength():
            signatures[i] = tuple(int(d) for d in tensor.ShapeSignatureAsNumpy())
    return signatures


def _signature_defs(data: bytes) -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    """Signature key → (input name → tensor index, output name → tensor index), for
    the signatures of the main subgraph."""
    model = _root(data)
    found = {}
    for i in range(model.SignatureDefsLength()):
        signature = model.SignatureDefs(i)
        if signature.SubgraphIndex() != 0:
            continue  # another subgraph's entry point: nnburst runs the main one
        inputs = {_text(m.Name()): m.TensorIndex() for m in _maps(signature, "Inputs")}
        outputs = {_text(m.Name()): m.TensorIndex() for m in _maps(signature, "Outputs")}
        found[_text(signature.SignatureKey())] = (inputs, outputs)
    return found


def _maps(signature: Any, field: str) -> list[Any]:
    get, count = getattr(signature, field), getattr(signature, field + "Length")()
    return [get(i) for i in range(count)]


def _text(raw: bytes | None) -> str:
    try:
        return (raw or b"").decode()
    except UnicodeDecodeError:
        raise BadDataError("a signature name is not UTF-8") from None
