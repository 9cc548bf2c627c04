"""The compiled module (cffi, built from ``csrc/`` by ``csrc/build_ffi.py``),
for the binding layer's modules only: nothing outside ``nnburst._bindings``
imports this (ruff TID251)."""

from __future__ import annotations

import os

try:
    from .. import _native  # compiled by cffi at build time; typed by _native.pyi
except ImportError as exc:  # the usual cause: a source checkout shadows the installed package
    _here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    raise ImportError(
        f"nnburst's compiled module is missing from {_here}/nnburst: this is a source "
        "checkout without a build (Python looks in the current directory first). Run from "
        "another directory to use the installed nnburst, or build this checkout with "
        "`pip install -e .`"
    ) from exc

ffi = _native.ffi
lib = _native.lib
