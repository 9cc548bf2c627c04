"""Loading a ``.tflite`` file, and the Runner that loads with it."""

from __future__ import annotations

import hashlib
import os
import struct
from typing import Any

from .. import imported
from ..errors import BadDataError
from ..imported import LoadedModel
from .convert import convert
from .reader import read
from .shapes import InputShapes, settle

__all__ = ["Runner", "load"]

#: What the ``tflite`` schema package raises on a corrupt offset or string.  It
#: reads tables lazily, so these surface wherever a mapper reads an option (an
#: options table of another type than its operator's is an AttributeError).
_CORRUPT_FLATBUFFER = (struct.error, UnicodeDecodeError, AttributeError, IndexError)


def load(
    source: str | os.PathLike[str] | bytes,
    input_shapes: InputShapes | None = None,
    *,
    strict: bool = True,
) -> LoadedModel:
    """Convert a ``.tflite`` file (a path, or its bytes) to a finished :class:`~nnburst.Model`.

    The model runs at the shapes its file records (as LiteRT does until an
    input is resized), or with ``input_shapes`` (input name or tensor index →
    shape) at those, every shape after them recomputed.  A dimension the
    file's shape signature fixes keeps its size unless ``strict=False``
    (LiteRT's ``resize_tensor_input`` without ``strict``).

    Raises:
        UnsupportedModelError: it uses operators or tensors nnburst cannot run
            (the message lists each, with how often it occurs).
        BadDataError: it is not a valid TFLite model, or ``input_shapes`` does
            not fit it.
    """
    data = imported.read_source(source)
    try:
        converted = convert(settle(read(data), input_shapes, strict))
    except _CORRUPT_FLATBUFFER as exc:
        raise BadDataError(f"a malformed TFLite model: {type(exc).__name__}: {exc}") from None
    key = repr(sorted((str(k), [int(d) for d in v]) for k, v in (input_shapes or {}).items()))
    digest = hashlib.sha256(data + (key.encode() if input_shapes else b"")).digest()
    return LoadedModel(
        converted.model, converted.inputs, converted.outputs, digest, converted.variables
    )


class Runner(imported.Runner):
    """Runs a TFLite model (a path, its bytes, or a :class:`LoadedModel`):
    ``runner(*inputs)`` → outputs.  See :class:`nnburst.imported.Runner`."""

    @staticmethod
    def load(source: Any) -> LoadedModel:
        return load(source)
