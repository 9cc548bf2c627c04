"""Run a library written for onnxruntime on nnburst without editing it.

A wake-word detector or an OCR pipeline builds its own
``onnxruntime.InferenceSession``; it cannot be handed ours.  Inside
``patch_onnxruntime()`` that name is nnburst's class, so the sessions the
library builds there are nnburst sessions (and stay so after the block):

    >>> with nnburst.onnx.patch_onnxruntime():
    ...     detector = openwakeword.Model(inference_framework="onnx")

A library that ran ``from onnxruntime import InferenceSession`` before the
block keeps the class it imported: import it inside the block, or replace
the name for the whole program with one line,
``onnxruntime.InferenceSession = nnburst.onnx.InferenceSession``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .session import InferenceSession, SessionOptions

__all__ = ["patch_onnxruntime"]


@contextmanager
def patch_onnxruntime(device: str | None = None) -> Iterator[type[InferenceSession]]:
    """``onnxruntime.InferenceSession`` is nnburst's inside the block, and
    onnxruntime's again after it (also when the block raises).

    ``device``: an nnburst device name (``nnburst devices``) every session
    built in the block runs on, whatever providers the library asks for: one
    line moves its inference into a driver service.  None: the library's
    ``providers`` decide, onnxruntime's CPU provider meaning the in-process
    CPU driver.  The swap is process-wide: every thread sees it.
    """
    import onnxruntime  # the library's own import must find the same module

    replacement = InferenceSession if device is None else _on_device(device)
    original = onnxruntime.InferenceSession
    onnxruntime.InferenceSession = replacement
    try:
        yield replacement
    finally:
        onnxruntime.InferenceSession = original


def _on_device(device: str) -> type[InferenceSession]:
    class OnDevice(InferenceSession):
        __doc__ = f"An nnburst InferenceSession on {device}, whatever the providers asked."

        def __init__(
            self,
            path_or_bytes: Any,
            sess_options: SessionOptions | None = None,
            providers: Sequence[Any] | None = None,
            provider_options: Sequence[Mapping[str, Any]] | None = None,
            **kwargs: Any,
        ) -> None:
            super().__init__(path_or_bytes, sess_options, [device], None, **kwargs)

    OnDevice.__name__ = OnDevice.__qualname__ = "InferenceSession"
    return OnDevice
