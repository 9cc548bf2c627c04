"""onnxruntime's ``InferenceSession`` on nnburst: code written for onnxruntime
runs on any nnburst device by changing one import.

    >>> from nnburst.onnx import InferenceSession     # was: from onnxruntime import ...
    >>> session = InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    >>> scores, = session.run(None, {"image": image})

NNAPI models have static shapes, so a session compiles the model for each
set of input shapes it is fed (once: a bounded cache of compiled shapes, the
compilation cache on disk behind it).  An int64 or one-element boolean input
that decides shapes (a Reshape's target, a Loop's count) cannot be data of a
static model: when the model does not convert with it as data, the session
fixes such inputs to the values fed, and a new value compiles again.
"""

from __future__ import annotations

import enum
import threading
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..cpu import threads as kernel_threads
from ..devices import get_devices
from ..errors import BadDataError
from ..imported import DEFAULT_CACHE_DIR, LoadedModel, UnsupportedModelError
from .loading import Runner, load, read_model

__all__ = [
    "GraphOptimizationLevel",
    "InferenceSession",
    "ModelMetadata",
    "NodeArg",
    "RunOptions",
    "SessionOptions",
]

#: onnxruntime's name for its CPU provider: here, the in-process CPU driver.
CPU_PROVIDER = "CPUExecutionProvider"
#: How many compiled shapes a session keeps (least recently used goes first).
MAX_COMPILED_SHAPES = 8


class GraphOptimizationLevel(enum.IntEnum):
    """Accepted for compatibility: nnburst's CPU driver optimises at prepare whatever the level."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


@dataclass
class SessionOptions:
    """onnxruntime's session options.  ``intra_op_num_threads`` is the CPU
    driver's kernel threads for the session's models (0: ``NNBURST_THREADS``,
    else one; see the README's "Threads"); the rest are kept and reported but
    change nothing: nnburst executes one operation at a time."""

    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_ENABLE_ALL
    execution_mode: ExecutionMode = ExecutionMode.ORT_SEQUENTIAL
    log_severity_level: int = 2
    log_verbosity_level: int = 0
    enable_profiling: bool = False
    enable_mem_pattern: bool = True
    enable_cpu_mem_arena: bool = True
    optimized_model_filepath: str = ""
    entries: dict[str, str] = field(default_factory=dict)

    def add_session_config_entry(self, key: str, value: str) -> None:
        self.entries[key] = value

    def get_session_config_entry(self, key: str) -> str:
        return self.entries[key]


@dataclass
class RunOptions:
    """Accepted for compatibility; a run cannot be tagged or terminated early."""

    log_severity_level: int = 2
    log_verbosity_level: int = 0
    logid: str = ""
    run_tag: str = ""
    only_execute_path_to_fetches: bool = False


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as onnxruntime describes it: ``shape`` holds an int
    per known dimension, the symbol's name for a symbolic one (None when it has
    neither), ``type`` is ``'tensor(float)'`` and so on."""

    name: str
    type: str
    shape: list[int | str | None]


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str]


def _type_name(elem_type: int) -> str:
    """``'tensor(float)'`` for FLOAT: onnxruntime's spelling (numpy's names, with
    float for float32 and double for float64)."""
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError):
        return f"tensor({onnx.TensorProto.DataType.Name(elem_type).lower()})"
    names = {"float32": "float", "float64": "double", "bool": "bool", "object": "string"}
    return f"tensor({names.get(dtype.name, dtype.name)})"


def _dtype(info: onnx.ValueInfoProto) -> np.dtype[Any] | None:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type))
    except (KeyError, TypeError):
        return None


def _node_arg(info: onnx.ValueInfoProto) -> NodeArg:
    if not info.type.HasField("tensor_type"):
        return NodeArg(info.name, info.type.WhichOneof("value") or "unknown", [])
    tensor = info.type.tensor_type
    shape: list[int | str | None] = []
    for d in tensor.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:  # Paddle writes -1 for "any"
            shape.append(int(d.dim_value))
        else:
            shape.append(d.dim_param or None)
    return NodeArg(info.name, _type_name(tensor.elem_type), shape)


def _device_name(providers: Sequence[Any] | None) -> str | None:
    """The nnburst device ``providers`` asks for: the in-process CPU driver for
    onnxruntime's CPU provider or none given; a device by its nnburst name.
    Other onnxruntime providers (CUDA, ...) are skipped with a warning, as
    onnxruntime skips the ones it was not built with."""
    names = [p[0] if isinstance(p, tuple | list) else p for p in providers or []]
    known = {d.name for d in get_devices()}
    for name in names:
        if not isinstance(name, str):
            raise BadDataError(f"providers: {name!r} is not a provider name")
        if name == CPU_PROVIDER:
            return "nnburst-reference"
        if name in known:
            return name
        if name.endswith("ExecutionProvider"):
            warnings.warn(
                f"{name} is not available in nnburst; skipping it", RuntimeWarning, stacklevel=3
            )
            continue
        raise BadDataError(
            f"providers: no device named {name!r} (devices: {', '.join(sorted(known))}, "
            f"or {CPU_PROVIDER})"
        )
    return "nnburst-reference"


def _array(arg: NodeArg, dtype: np.dtype[Any] | None, value: Any) -> np.ndarray:
    """A fed value as an array: a list or tuple takes the input's type, as
    onnxruntime converts it; None is a missing input, as onnxruntime finds it."""
    if value is None:
        raise BadDataError(f"Missing Input: {arg.name}")
    if isinstance(value, list | tuple):
        try:
            return np.asarray(value, dtype)
        except (TypeError, ValueError) as exc:
            raise BadDataError(f"input {arg.name}: the list is not {arg.type}: {exc}") from None
    return np.asarray(value)


def _decides_shapes(value: np.ndarray) -> bool:
    """What may decide an output's shape: int64 values (shapes, axes, counts in
    ONNX graphs) and a one-element boolean (an If's or Loop's condition)."""
    return value.dtype == np.int64 or (value.dtype == np.bool_ and value.size == 1)


class InferenceSession:
    """onnxruntime's ``InferenceSession``, running the model on an nnburst device.

    ``providers``: onnxruntime's ``CPUExecutionProvider`` (or nothing) runs it
    on the in-process CPU driver; an nnburst device name (``nnburst devices``)
    runs it there, through a burst: a driver service device moves inference
    into another process.

    Threads: as onnxruntime's, one session serves ``run`` from any number of
    threads at once, each call getting its own outputs.  Calls at the same
    input shapes take turns on that shape's compiled model (one set of
    buffers); a shape met for the first time is compiled once, whichever
    threads feed it together.  ``close`` must not race a ``run``.
    """

    def __init__(
        self,
        path_or_bytes: str | bytes | Any,
        sess_options: SessionOptions | None = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        # As onnxruntime: a model from a path reads its external data beside it.
        self._model, _ = read_model(path_or_bytes, external_data=True)
        self._options = sess_options or SessionOptions()
        self._threads = kernel_threads.checked_threads(
            self._options.intra_op_num_threads, "SessionOptions.intra_op_num_threads"
        )
        self._device = _device_name(providers)
        self._provider_options = list(provider_options or [{}])
        graph = self._model.graph
        initializers = {t.name for t in graph.initializer}
        self._inputs = [_node_arg(i) for i in graph.input if i.name not in initializers]
        self._outputs = [_node_arg(o) for o in graph.output]
        self._input_names = [i.name for i in self._inputs]
        self._dtypes = [_dtype(i) for i in graph.input if i.name not in initializers]
        #: each input's shape where every dimension is known (None: a symbolic one)
        self._static_shapes = [
            tuple(a.shape) if all(isinstance(d, int) for d in a.shape) else None
            for a in self._inputs
        ]
        self._output_index = {o.name: i for i, o in enumerate(self._outputs)}
        #: input names fixed to the values fed: None until the first run decides
        self._frozen: frozenset[str] | None = None
        self._runners: OrderedDict[Any, Runner] = OrderedDict()
        self._lock = threading.Lock()
        #: (name, dtype, shape) per input when every input's shape is known
        self._fixed = (
            [(a.name, d, s) for a, d, s in zip(self._inputs, self._dtypes, self._static_shapes)]
            if all(s is not None for s in self._static_shapes)
            else None
        )
        #: the one Runner of such a model once compiled, when no input is frozen
        self._only_runner: Runner | None = None

    # -- what onnxruntime's session reports --------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        return []  # an initializer cannot be fed: it is a constant of the NNAPI model

    def get_providers(self) -> list[str]:
        return [CPU_PROVIDER if self._device == "nnburst-reference" else str(self._device)]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {name: {} for name in self.get_providers()}

    def get_session_options(self) -> SessionOptions:
        return self._options

    def get_modelmeta(self) -> ModelMetadata:
        model = self._model
        return ModelMetadata(
            producer_name=model.producer_name,
            graph_name=model.graph.name,
            domain=model.domain,
            description=model.doc_string,
            graph_description=model.graph.doc_string,
            version=model.model_version,
            custom_metadata_map={p.key: p.value for p in model.metadata_props},
        )

    def end_profiling(self) -> str:
        return ""  # no profile is written (NNBURST_TRACE=file.json traces executions)

    # -- running -----------------------------------------------------------------------
    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[np.ndarray]:
        """The outputs named (all when None or empty), in that order."""
        runner = self._only_runner
        fixed = self._fixed
        if (
            runner is not None
            and fixed is not None
            and type(input_feed) is dict
            and len(input_feed) == len(fixed)
        ):
            # The usual call on a model of fixed shapes: arrays of the model's exact
            # dtypes (numpy's are singletons) and shapes; anything else goes the long way.
            values = []
            for name, dtype, shape in fixed:
                value = input_feed.get(name)
                if (
                    type(value) is not np.ndarray
                    or value.dtype is not dtype
                    or value.shape != shape
                ):
                    break
                values.append(value)
            else:
                outputs = runner(*values)
                return [outputs[i] for i in self._wanted(output_names)] if output_names else outputs
        wanted = self._wanted(output_names) if output_names else None
        values = self._feed(input_feed)
        runner, fed = self._runner(values)
        outputs = runner(*fed)
        return outputs if wanted is None else [outputs[i] for i in wanted]

    def _wanted(self, output_names: Sequence[str]) -> list[int]:
        if isinstance(output_names, str):
            raise BadDataError(
                f"output_names must be a list of names, not the str {output_names!r}"
            )
        wanted = []
        for name in output_names:
            if name not in self._output_index:
                raise BadDataError(f"Invalid output name:{name}")
            wanted.append(self._output_index[name])
        return wanted

    def _feed(self, input_feed: Mapping[str, Any]) -> list[np.ndarray]:
        """The fed values in input order, checked as onnxruntime checks them: the
        names first (missing, then unknown), then each value's type and shape."""
        if not isinstance(input_feed, Mapping):
            raise BadDataError(
                f"input_feed must map input names to values, not {type(input_feed).__name__}"
            )
        missing = [name for name in self._input_names if name not in input_feed]
        if missing:
            raise BadDataError(
                f"Required inputs ({missing}) are missing from input feed ({list(input_feed)})."
            )
        if len(input_feed) != len(self._inputs):
            unknown = [name for name in input_feed if name not in self._input_names]
            raise BadDataError(f"Invalid input name: {unknown[0]}")
        values = []
        for arg, dtype, static in zip(self._inputs, self._dtypes, self._static_shapes):
            value = input_feed[arg.name]
            if type(value) is not np.ndarray or value.dtype != dtype or value.shape != static:
                value = self._checked(arg, dtype, _array(arg, dtype, value))
            values.append(value)
        return values

    def _checked(self, arg: NodeArg, dtype: Any, value: np.ndarray) -> np.ndarray:
        """``value`` for ``arg`` if its type, rank and known dimensions fit."""
        if (
            value.dtype == dtype
            and value.ndim == len(arg.shape)
            and all(not isinstance(w, int) or w == g for g, w in zip(value.shape, arg.shape))
        ):
            return value  # symbolic dimensions: nothing to spell
        try:
            given = _type_name(helper.np_dtype_to_tensor_dtype(value.dtype))
        except (KeyError, TypeError, ValueError):
            given = f"numpy {value.dtype}"
        if given != arg.type:
            raise BadDataError(
                f"Unexpected input data type. Actual: ({given}) , expected: ({arg.type})"
            )
        if value.ndim != len(arg.shape):
            raise BadDataError(
                f"Invalid rank for input: {arg.name} Got: {value.ndim} Expected: "
                f"{len(arg.shape)} Please fix either the inputs/outputs or the model."
            )
        bad = "".join(
            f"\n index: {i} Got: {got} Expected: {want}"
            for i, (got, want) in enumerate(zip(value.shape, arg.shape))
            if isinstance(want, int) and want != got
        )
        if bad:
            raise BadDataError(
                f"Got invalid dimensions for input: {arg.name} for the following indices"
                f"{bad}\n Please fix either the inputs/outputs or the model."
            )
        return value

    def _key(self, values: list[np.ndarray], frozen: frozenset[str]) -> Any:
        """What a compiled model depends on: the shapes, and frozen inputs' values."""
        if not frozen:
            return tuple([v.shape for v in values])
        return tuple(
            [
                (v.shape, v.tobytes()) if n in frozen else v.shape
                for n, v in zip(self._input_names, values)
            ]
        )

    def _runner(self, values: list[np.ndarray]) -> tuple[Runner, list[np.ndarray]]:
        """The Runner compiled for these shapes (and values of frozen inputs), and
        the values it takes."""
        with self._lock:
            if self._frozen is None:
                self._frozen = self._first_conversion(values)
            frozen = self._frozen
            key = self._key(values, frozen)
            runner = self._runners.get(key)
            if runner is None:
                runner = self._compile(self._load(values, frozen))
                self._runners[key] = runner
                if len(self._runners) > MAX_COMPILED_SHAPES:
                    self._runners.popitem(last=False)[1].close()
            elif len(self._runners) > 1:
                self._runners.move_to_end(key)
            if self._fixed is not None and not frozen:
                self._only_runner = runner  # fixed shapes, nothing frozen: the only key
        if not frozen:
            return runner, values
        return runner, [v for n, v in zip(self._input_names, values) if n not in frozen]

    def _first_conversion(self, values: list[np.ndarray]) -> frozenset[str]:
        """Which inputs must be fixed to their values: none when the model converts
        with every input as data, else those that may decide shapes."""
        candidates = frozenset(n for n, v in zip(self._input_names, values) if _decides_shapes(v))
        try:
            plain = self._compile(self._load(values, frozenset()))
            self._runners[self._key(values, frozenset())] = plain
            return frozenset()
        except UnsupportedModelError:
            if not candidates:
                raise
        return candidates

    def _load(self, values: list[np.ndarray], frozen: frozenset[str]) -> LoadedModel:
        shapes = {n: v.shape for n, v in zip(self._input_names, values) if n not in frozen}
        constants = {n: v for n, v in zip(self._input_names, values) if n in frozen}
        return load(self._model, shapes, constants=constants)

    def _compile(self, loaded: LoadedModel) -> Runner:
        return Runner(
            loaded,
            self._device,
            cache_dir=DEFAULT_CACHE_DIR,
            threads=self._threads,
            threads_option="SessionOptions.intra_op_num_threads",
        )

    def close(self) -> None:
        """Release the compiled models (onnxruntime has no close; a session's
        resources also go when it is collected)."""
        with self._lock:
            self._only_runner = None
            while self._runners:
                self._runners.popitem()[1].close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
