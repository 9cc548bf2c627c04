"""Shared fixtures: hypothesis profiles, the /dev/shm leak guard, stress switch."""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import HealthCheck, settings

from nnburst import shm

settings.register_profile("default", deadline=None, max_examples=60)
settings.register_profile(
    "ci", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("expensive", deadline=None, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-stress", action="store_true", help="run the long stress tests too")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-stress"):
        return
    skip = pytest.mark.skip(reason="stress test: pass --run-stress")
    for item in items:
        if "stress" in item.keywords:
            item.add_marker(skip)


def nnburst_segments() -> set[str]:
    """Our segments with this run's name tag: a mutation-testing run tags
    its segments (NNBURST_SHM_TAG), and neither run reports the other's."""
    try:
        entries = os.listdir(shm.SHM_DIR)
    except OSError:
        return set()
    tag = shm.name_tag() or None
    return {
        e
        for e in entries
        if (m := shm.NAME_PATTERN.match("/" + e)) is not None and m.group("tag") == tag
    }


def leaked_since(before: set[str]) -> list[str]:
    """New segments created by this process or by processes that are gone
    (test peers); live processes of parallel test runs are left alone."""
    leaked = []
    for entry in nnburst_segments() - before:
        pid = shm.creator_pid("/" + entry)
        if pid == os.getpid() or not shm.pid_alive(pid):
            leaked.append(entry)
    return sorted(leaked)


@pytest.fixture(autouse=True)
def no_leaked_segments_or_threads():
    """Every test must leave /dev/shm and the thread list as it found them."""
    before = nnburst_segments()
    threads_before = set(threading.enumerate())
    yield
    leaked = leaked_since(before)
    assert not leaked, f"shared-memory segments leaked: {leaked}"
    extra = [
        t for t in set(threading.enumerate()) - threads_before if t.is_alive() and not t.daemon
    ]
    assert not extra, f"threads left running: {extra}"
