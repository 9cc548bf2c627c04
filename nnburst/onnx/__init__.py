"""ONNX models on nnburst: load a ``.onnx`` file (or ``ModelProto``), run it.

    >>> loaded = nnburst.onnx.load("model.onnx")      # an nn.Model + its I/O
    >>> run = nnburst.onnx.Runner("model.onnx")        # compiled, bursting
    >>> outputs = run(image)

The same contract as :mod:`nnburst.tflite`: inputs in the graph's input
order (initializers excluded), outputs as a list in its output order.
:mod:`.backend` lets ONNX's own backend test runner drive nnburst.
"""

from __future__ import annotations

try:
    import onnx  # noqa: F401 -- the optional extra, checked before anything needs it
except ImportError as exc:  # an optional extra, as onnxruntime is
    raise ImportError(
        "nnburst.onnx needs the onnx package: pip install onnx (or pip install '.[onnx]' in nnburst's checkout)"
    ) from exc

from ..imported import LoadedModel, TensorInfo, UnsupportedModelError
from .loading import Runner, input_names, load
from .patch import patch_onnxruntime
from .session import GraphOptimizationLevel, InferenceSession, RunOptions, SessionOptions

__all__ = [
    "GraphOptimizationLevel",
    "InferenceSession",
    "LoadedModel",
    "Runner",
    "RunOptions",
    "SessionOptions",
    "TensorInfo",
    "UnsupportedModelError",
    "input_names",
    "load",
    "patch_onnxruntime",
]
