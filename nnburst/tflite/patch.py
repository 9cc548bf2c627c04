"""Run a library written for LiteRT on nnburst without editing it.

Libraries build their own ``Interpreter`` from ``ai_edge_litert.interpreter``
(LiteRT) or ``tflite_runtime.interpreter`` (its former name).  Inside
``patch_litert()`` both names are nnburst's class, so the interpreters the
library builds there are nnburst's (and stay so after the block):

    >>> with nnburst.tflite.patch_litert():
    ...     detector = library.Detector("model.tflite")

A library that ran ``from ai_edge_litert.interpreter import Interpreter``
before the block keeps the class it imported: import it inside the block, or
replace the name for the whole program with one line,
``ai_edge_litert.interpreter.Interpreter = nnburst.tflite.Interpreter``.
TensorFlow's ``tf.lite.Interpreter`` is not replaced.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from .interpreter import Interpreter

__all__ = ["LITERT_MODULES", "patch_litert"]

#: The modules whose ``Interpreter`` is replaced, where installed.
LITERT_MODULES = ("ai_edge_litert.interpreter", "tflite_runtime.interpreter")


@contextmanager
def patch_litert(device: str | None = None) -> Iterator[type[Interpreter]]:
    """``Interpreter`` in LiteRT's modules is nnburst's inside the block, and
    LiteRT's again after it (also when the block raises).

    ``device``: an nnburst device name every interpreter built in the block
    runs on (a driver service device included); None: the in-process CPU
    driver.  The swap is process-wide: every thread sees it.  Neither module
    installed is an ImportError: the library could not have imported one.
    """
    modules = _installed()
    if not modules:
        raise ImportError(
            "patch_litert: neither ai_edge_litert nor tflite_runtime is installed "
            "(pip install ai-edge-litert), so no library can be using LiteRT's Interpreter"
        )
    replacement = Interpreter if device is None else _on_device(device)
    originals = [(module, module.Interpreter) for module in modules]
    for module in modules:
        module.Interpreter = replacement  # type: ignore[attr-defined]
    try:
        yield replacement
    finally:
        for module, original in originals:
            module.Interpreter = original  # type: ignore[attr-defined]


def _installed() -> list[ModuleType]:
    found = []
    for name in LITERT_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if module not in found:  # one module may be installed under both names
            found.append(module)
    return found


def _on_device(device: str) -> type[Interpreter]:
    class OnDevice(Interpreter):
        __doc__ = f"An nnburst Interpreter on {device}."

        def __init__(
            self,
            model_path: str | None = None,
            model_content: bytes | None = None,
            experimental_delegates: Sequence[Any] | None = None,
            num_threads: int | None = None,
            **kwargs: Any,
        ) -> None:
            kwargs.pop("device", None)
            super().__init__(
                model_path, model_content, experimental_delegates, num_threads, device, **kwargs
            )

    OnDevice.__name__ = OnDevice.__qualname__ = "Interpreter"
    return OnDevice
