"""Builds ``nnburst._native`` (cffi, out-of-line API mode) from ``csrc/``.

The cdef is cut from the marked region of each header in ``HEADERS``, so the
headers are the only place the C API is written down.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
#: Headers whose cdef regions make the C API, each a concept of its own.
HEADERS = [HERE / "nnburst.h", HERE / "plan.h", HERE / "qconv.h"]
SOURCES = ["fmq.c", "fmq_blocking.c", "event_flag.c", "kernels.c", "heap.c", "plan.c", "qconv.c"]


def cdef_region(header: Path) -> str:
    match = re.search(
        r"/\* cffi cdef begin \*/(.*?)/\* cffi cdef end \*/", header.read_text(), re.S
    )
    if match is None:
        raise RuntimeError(f"{header} has no cffi cdef region")
    return match.group(1)


ffibuilder = FFI()
ffibuilder.cdef("".join(cdef_region(header) for header in HEADERS))
ffibuilder.set_source(
    "nnburst._native",
    "".join(f'#include "{header.name}"\n' for header in HEADERS),
    # Paths relative to the project root, where setup.py runs: setuptools
    # refuses absolute source paths.
    sources=[os.path.relpath(HERE / s) for s in SOURCES],
    include_dirs=[os.path.relpath(HERE)],
    # Hidden visibility: calls between the C files (the spin loop's counter
    # loads) bind directly instead of through the PLT.
    extra_compile_args=["-std=gnu11", "-O3", "-fvisibility=hidden", "-Wall", "-Wextra"],
)

if __name__ == "__main__":
    # Quick C iteration without pip: rebuilds nnburst/_native*.so in place.
    os.chdir(HERE.parent)
    ffibuilder.compile(tmpdir=".", verbose=True)
