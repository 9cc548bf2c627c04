"""Build hooks pyproject.toml cannot state: the cffi extension, the wheel's
stable-ABI tag, and the package page's long description."""

import re
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent

# A link to another file of the checkout: [text](docs/x.md) or [text](examples/).
_RELATIVE_LINK = re.compile(r"\[([^\]]+)\]\((?![a-z]+:|#)([^)\s]+)\)")


def package_page() -> str:
    """README.md for the package index, whose page has none of the files the
    README links to: each relative link becomes its text and the path it names
    in the source distribution."""
    readme = (HERE / "README.md").read_text(encoding="utf-8")
    return _RELATIVE_LINK.sub(
        lambda m: m.group(1) if m.group(1).strip("`") == m.group(2) else f"{m.group(1)} (`{m.group(2)}`)",
        readme,
    )


setup(
    cffi_modules=["csrc/build_ffi.py:ffibuilder"],
    long_description=package_page(),
    long_description_content_type="text/markdown",
    # cffi compiles nnburst._native against the stable ABI (Py_LIMITED_API):
    # one wheel serves CPython 3.11 and every later version.
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
