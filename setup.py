import sys

import setuptools
from setuptools import setup

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
)
