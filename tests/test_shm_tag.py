"""Segment names carry the run's tag (NNBURST_SHM_TAG), so a mutation-testing
run and a normal test run never take each other's segments for leaks."""

from __future__ import annotations

import pytest

from nnburst import shm
from nnburst.errors import BadDataError

from .conftest import nnburst_segments


def test_a_tagged_name_keeps_its_creator_pid_and_is_ours(monkeypatch):
    monkeypatch.setenv(shm.TAG_ENV, "mutant")
    name = shm.unique_name()
    assert name.startswith("/nnburst-mutant-")
    assert shm.creator_pid(name) == int(name.split("-")[2])
    assert shm.NAME_PATTERN.match(name).group("tag") == "mutant"


def test_the_leak_guard_sees_only_segments_of_its_own_tag(monkeypatch):
    monkeypatch.setenv(shm.TAG_ENV, "mutant")
    region = shm.SharedRegion.create(64)
    try:
        tagged = region.name[1:]
        assert tagged in nnburst_segments()
        monkeypatch.delenv(shm.TAG_ENV)
        assert tagged not in nnburst_segments()
    finally:
        region.close()
        region.unlink()


@pytest.mark.parametrize("tag", ["Mutant", "mu-tant", "m1"])
def test_a_tag_other_than_lowercase_letters_is_refused(monkeypatch, tag):
    monkeypatch.setenv(shm.TAG_ENV, tag)
    with pytest.raises(ValueError, match="expected lowercase letters only"):
        shm.unique_name()


def test_an_untagged_name_is_unchanged(monkeypatch):
    monkeypatch.delenv(shm.TAG_ENV, raising=False)
    name = shm.unique_name()
    assert shm.NAME_PATTERN.match(name).group("tag") is None
    with pytest.raises(BadDataError):
        shm.creator_pid("/nnburst--1-" + "0" * 16)
