"""Build hooks pyproject.toml cannot state: the cffi extension, the wheel's
stable-ABI tag, and the package page's long description."""

import re
import sys
from pathlib import Path

import setuptools
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


# pyproject.toml's SPDX `license = "Apache-2.0"` needs setuptools 77 (PEP 639);
# an older one fails validating it.  pip's isolated build brings a new enough
# one; a plain `python setup.py build_ext --inplace` uses the environment's.
if int(setuptools.__version__.split(".")[0]) < 77:
    sys.exit(
        f"setuptools {setuptools.__version__} is too old for pyproject.toml (needs >= 77). "
        "Rebuild the C module in place with `python csrc/build_ffi.py`, "
        "or upgrade setuptools, or use `pip install -e .`."
    )

setup(
    cffi_modules=["csrc/build_ffi.py:ffibuilder"],
    long_description=package_page(),
    long_description_content_type="text/markdown",
    # cffi compiles nnburst._native against the stable ABI (Py_LIMITED_API):
    # one wheel serves CPython 3.11 and every later version.
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
