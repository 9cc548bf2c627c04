"""The model cache: a real fetch from the index, and its offline paths (cache
hit, the other-platform retry, skips) with pip replaced by a stub."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from . import model_cache
from .model_cache import FetchError, wheel_member

FACE_DETECTION = (
    "mediapipe",
    "0.10.14",
    "mediapipe/modules/face_detection/face_detection_short_range.tflite",
)


@pytest.mark.timeout(model_cache.DOWNLOAD_TIMEOUT * 2 + 60)  # two pip runs at worst
def test_fetches_face_detection_model():
    path = wheel_member(*FACE_DETECTION)
    assert path.is_file()
    with path.open("rb") as f:
        head = f.read(8)
    assert head[4:8] == b"TFL3"
    assert path.stat().st_size > 100_000
    assert wheel_member(*FACE_DETECTION) == path  # now from the cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("NNBURST_MODEL_CACHE", str(root))
    return root


def stub_pip(monkeypatch, outcomes: list, member: str = "pkg/model.tflite"):
    """Replace pip: each call pops an outcome, an exception to raise or None
    to 'download' a wheel holding ``member``; returns the calls' extra args."""
    calls: list[list[str]] = []

    def fake(package: str, version: str, dest: Path, extra: list[str]) -> None:
        calls.append(list(extra))
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        with zipfile.ZipFile(dest / f"{package}-{version}-py3-none-any.whl", "w") as z:
            z.writestr(member, b"\x1c\x00\x00\x00TFL3model")

    monkeypatch.setattr(model_cache, "_pip_download", fake)
    return calls


def test_cache_dir_default(monkeypatch):
    monkeypatch.delenv("NNBURST_MODEL_CACHE", raising=False)
    assert model_cache.cache_dir() == Path.home() / ".cache" / "nnburst" / "models"


def test_extracts_once_then_hits_the_cache(cache, monkeypatch):
    calls = stub_pip(monkeypatch, [None])
    path = wheel_member("pkg", "1.0", "pkg/model.tflite")
    assert path == cache / "pkg-1.0" / "pkg" / "model.tflite"
    assert path.read_bytes() == b"\x1c\x00\x00\x00TFL3model"
    assert wheel_member("pkg", "1.0", "pkg/model.tflite") == path
    assert calls == [[]]
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.tflite"]  # no temp left


def test_retries_for_another_platform(cache, monkeypatch):
    no_wheel = FetchError("ERROR: No matching distribution found for pkg==1.0")
    calls = stub_pip(monkeypatch, [no_wheel, None])
    assert wheel_member("pkg", "1.0", "pkg/model.tflite").is_file()
    assert calls == [[], model_cache.FALLBACK_PLATFORM]


def test_no_network_skips_without_retrying(cache, monkeypatch):
    offline = FetchError(
        "NewConnectionError: Failed to establish a new connection | "
        "ERROR: No matching distribution found for pkg==1.0"
    )
    calls = stub_pip(monkeypatch, [offline])
    with pytest.raises(pytest.skip.Exception, match="pkg==1.0 .* cannot be fetched: .*NewConn"):
        wheel_member("pkg", "1.0", "pkg/model.tflite")
    assert len(calls) == 1
    assert not cache.exists() or not any(cache.rglob("*.tflite"))


def test_missing_member_skips(cache, monkeypatch):
    stub_pip(monkeypatch, [None], member="pkg/other/model.tflite")
    with pytest.raises(pytest.skip.Exception, match=r"no member pkg/model.tflite .*pkg/other"):
        wheel_member("pkg", "1.0", "pkg/model.tflite")


def test_pip_failure_skips(tmp_path, cache, monkeypatch):
    # a real pip run, offline by construction: an index that does not exist
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "no-index").as_uri())
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    with pytest.raises(pytest.skip.Exception, match="cannot be fetched: .*pip download failed"):
        wheel_member("nnburst-no-such-package", "0.0.1", "x/model.tflite")


def test_refuses_paths_outside_the_cache(cache):
    for member in ("../escape.tflite", "/abs/model.tflite", ""):
        with pytest.raises(ValueError):
            wheel_member("pkg", "1.0", member)
