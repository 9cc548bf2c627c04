"""Builds ``nnburst._native`` (cffi, out-of-line API mode) from ``csrc/``.

The cdef is cut from the marked region of ``csrc/nnburst.h``, so the header
is the only place the C API is written down.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
HEADER = HERE / "nnburst.h"
SOURCES = ["fmq.c", "fmq_blocking.c", "event_flag.c", "kernels.c", "heap.c"]


def cdef_region(text: str) -> str:
    match = re.search(r"/\* cffi cdef begin \*/(.*?)/\* cffi cdef end \*/", text, re.S)
    if match is None:
        raise RuntimeError(f"{HEADER} has no cffi cdef region")
    return match.group(1)


ffibuilder = FFI()
ffibuilder.cdef(cdef_region(HEADER.read_text()))
ffibuilder.set_source(
    "nnburst._native",
    '#include "nnburst.h"',
    # Paths relative to the project root, where setup.py runs: setuptools
    # refuses absolute source paths.
    sources=[f"csrc/{s}" for s in SOURCES],
    include_dirs=["csrc"],
    # Hidden visibility: calls between the C files (the spin loop's counter
    # loads) bind directly instead of through the PLT.
    extra_compile_args=["-std=gnu11", "-O3", "-fvisibility=hidden", "-Wall", "-Wextra"],
)

if __name__ == "__main__":
    # Quick C iteration without pip: rebuilds nnburst/_native*.so in place.  It
    # compiles in a scratch directory that sees csrc/ but no pyproject.toml:
    # cffi's build reads the working directory's, and setuptools older than 77
    # rejects its SPDX license (the error `python setup.py build_ext` gives).
    with tempfile.TemporaryDirectory() as scratch:
        os.symlink(HERE, os.path.join(scratch, "csrc"))
        os.chdir(scratch)
        ffibuilder.compile(tmpdir=".", verbose=True)
        (built,) = Path(scratch, "nnburst").glob("_native*.so")
        target = HERE.parent / "nnburst" / built.name
        staged = target.with_name(target.name + ".new")
        shutil.copyfile(built, staged)
        os.replace(staged, target)  # a process that has the old one mapped keeps it
        print(f"built {target}")
