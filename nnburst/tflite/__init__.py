"""TensorFlow Lite models on nnburst: load a ``.tflite`` file, run it.

    >>> loaded = nnburst.tflite.load("model.tflite")     # an nn.Model + its I/O
    >>> run = nnburst.tflite.Runner("model.tflite")       # compiled, bursting
    >>> outputs = run(image)

Apps on Android hand ``.tflite`` files to TFLite's NNAPI delegate, which maps
them to NNAPI operations; :mod:`.convert` does that mapping here, and
:class:`Runner` (:mod:`nnburst.imported`) is the execution loop a delegate
would run: one reusable execution bound to fixed buffers, computed through a
burst.
"""

from __future__ import annotations

from ..imported import LoadedModel, TensorInfo, UnsupportedModelError, Variable
from .interpreter import Interpreter, SignatureRunner
from .loading import Runner, load
from .patch import patch_litert

__all__ = [
    "Interpreter",
    "LoadedModel",
    "Runner",
    "SignatureRunner",
    "TensorInfo",
    "UnsupportedModelError",
    "Variable",
    "load",
    "patch_litert",
]
