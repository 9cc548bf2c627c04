"""Loading a ``.tflite`` file, and the Runner that loads with it."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from .. import imported
from ..imported import LoadedModel
from .convert import convert
from .reader import read

__all__ = ["Runner", "load"]


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
