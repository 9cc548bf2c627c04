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

import hashlib
import os
from typing import Any

from .. import imported
from ..imported import LoadedModel, TensorInfo, UnsupportedModelError, Variable
from .convert import convert
from .reader import read

__all__ = ["LoadedModel", "Runner", "TensorInfo", "UnsupportedModelError", "Variable", "load"]


def load(source: str | os.PathLike[str] | bytes) -> LoadedModel:
    """Convert a ``.tflite`` file (a path, or its bytes) to a finished :class:`~nnburst.Model`.

    Raises:
        UnsupportedModelError: it uses operators or tensors nnburst cannot run
            (the message lists each, with how often it occurs).
        BadDataError: it is not a valid TFLite model.
    """
    data = imported.read_source(source)
    converted = convert(read(data))
    digest = hashlib.sha256(data).digest()
    return LoadedModel(
        converted.model, converted.inputs, converted.outputs, digest, converted.variables
    )


class Runner(imported.Runner):
    """Runs a TFLite model (a path, its bytes, or a :class:`LoadedModel`):
    ``runner(*inputs)`` → outputs.  See :class:`nnburst.imported.Runner`."""

    @staticmethod
    def load(source: Any) -> LoadedModel:
        return load(source)
