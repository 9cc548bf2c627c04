"""``nnburst/_native.pyi`` names exactly what the compiled module exports, so
mypy checks the C calls of shm/event_flag/fmq against the real C API."""

from __future__ import annotations

import ast
from pathlib import Path

import nnburst
from nnburst import _bindings


def _stub_names(class_name: str) -> set[str]:
    stub = Path(nnburst.__file__).with_name("_native.pyi")
    tree = ast.parse(stub.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    names = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_the_stub_lists_every_c_function_and_constant_and_nothing_else():
    compiled = {name for name in dir(_bindings.lib) if not name.startswith("_")}
    assert _stub_names("_Lib") == compiled


def test_the_stub_ffi_methods_exist():
    for name in _stub_names("_FFI"):
        assert hasattr(_bindings.ffi, name), name
