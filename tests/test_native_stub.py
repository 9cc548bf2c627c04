"""``nnburst/_native.pyi`` gives every C function of the contract headers its
signature, and the compiled module is what the headers say, so mypy checks
the binding layer's C calls against the real C API (csrc/build_ffi.py
writes the stub from the headers' cdef regions)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

import nnburst
from nnburst._bindings.compiled import ffi, lib  # noqa: TID251  (this test checks the compiled module)

BUILD_FFI = Path(__file__).resolve().parents[1] / "csrc" / "build_ffi.py"


@pytest.fixture(scope="module")
def header():
    """(constants, {function: (parameters, result)}) read from the headers."""
    spec = importlib.util.spec_from_file_location("build_ffi", BUILD_FFI)
    assert spec is not None and spec.loader is not None
    build_ffi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_ffi)
    return build_ffi.native_signatures()


def _stub_class(name: str) -> ast.ClassDef:
    stub = Path(nnburst.__file__).with_name("_native.pyi")
    tree = ast.parse(stub.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return cls


def _stub_lib() -> tuple[list[str], dict[str, tuple[list[tuple[str, str]], str]]]:
    constants, functions = [], {}
    for node in _stub_class("_Lib").body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            constants.append(node.target.id)
        elif isinstance(node, ast.FunctionDef):
            params = [
                (a.arg, ast.unparse(a.annotation)) for a in node.args.args[1:] if a.annotation
            ]
            assert len(params) == len(node.args.args) - 1, f"{node.name}: a parameter has no type"
            functions[node.name] = (params, ast.unparse(node.returns) if node.returns else "")
    return constants, functions


def test_the_stub_gives_every_c_function_its_header_signature(header):
    want_constants, want_functions = header
    constants, functions = _stub_lib()
    assert sorted(constants) == sorted(want_constants)
    assert functions == want_functions  # names, parameter names and types, results


def _python_type(ctype) -> str:
    """The stub's type for a C type of the compiled module."""
    if ctype.kind in ("pointer", "function", "array"):
        return "CData"
    if ctype.kind == "void":
        return "None"
    return "float" if ctype.cname in ("float", "double") else "int"


def test_the_compiled_module_is_what_the_headers_declare(header):
    constants, functions = header
    compiled = {name for name in dir(lib) if not name.startswith("_")}
    assert compiled == set(constants) | set(functions)
    for name, (params, result) in functions.items():
        ctype = ffi.typeof(getattr(lib, name))
        assert [_python_type(a) for a in ctype.args] == [t for _, t in params], name
        assert _python_type(ctype.result) == result, name


def test_the_stub_ffi_methods_exist():
    for node in _stub_class("_FFI").body:
        name = getattr(node, "name", None) or getattr(getattr(node, "target", None), "id", None)
        if name:
            assert hasattr(ffi, name), name
