"""The docs cannot rot: docs/api.md matches the code, and every file the docs cite exists."""

from __future__ import annotations

import difflib
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [
    REPO / "README.md",
    REPO / "CHANGELOG.md",
    REPO / "bench" / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
]

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_CODE_PATH = re.compile(r"`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/?)`")


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_api_docs", REPO / "tools" / "gen_api_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_reference_is_up_to_date(tmp_path):
    out = tmp_path / "api.md"
    assert _generator().main(["--output", str(out)]) == 0
    committed = (REPO / "docs" / "api.md").read_text(encoding="utf-8").splitlines()
    current = out.read_text(encoding="utf-8").splitlines()
    diff = list(
        difflib.unified_diff(committed, current, "docs/api.md", "generated", n=1, lineterm="")
    )
    assert not diff, "docs/api.md is stale: run `python tools/gen_api_docs.py`\n" + "\n".join(
        diff[:40]
    )


def test_api_reference_covers_every_public_name():
    import nnburst
    import nnburst.fmq
    import nnburst.hal

    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    for module, prefix in (
        (nnburst, "nn."),
        (nnburst.fmq, "nnburst.fmq."),
        (nnburst.hal, "nnburst.hal."),
    ):
        for name in module.__all__:
            assert f"`{prefix}{name}" in text, f"{prefix}{name} is not in docs/api.md"


def test_check_mode_reports_a_stale_file(tmp_path):
    stale = tmp_path / "api.md"
    stale.write_text("# API reference\n", encoding="utf-8")
    assert _generator().main(["--output", str(stale), "--check"]) == 1


def _links(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    return [target for target in _LINK.findall(text) if not re.match(r"[a-z]+:|#", target)]


@pytest.mark.parametrize(
    "doc", [d for d in DOCS if d.exists()], ids=lambda d: str(d.relative_to(REPO))
)
def test_relative_links_point_at_existing_files(doc):
    missing = [
        target for target in _links(doc) if not (doc.parent / target.split("#", 1)[0]).exists()
    ]
    assert not missing, f"{doc.relative_to(REPO)} links to files that do not exist: {missing}"


def test_files_the_readme_names_exist():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    cited = {
        path
        for path in _CODE_PATH.findall(readme)
        if "/" in path and not path.startswith(("..", "/"))
    }
    missing = sorted(path for path in cited if not (REPO / path).exists())
    assert cited, "the README names no files: has its format changed?"
    assert not missing, f"README.md names files that do not exist: {missing}"


def test_the_readme_keeps_its_two_commands():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "pip install . && nnburst bench" in readme
    assert "pip install tox && tox -e py" in readme


def test_the_license_is_the_one_pyproject_declares():
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert "Apache-2.0" in pyproject
    license_text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
