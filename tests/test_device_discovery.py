"""Finding devices: each service that cannot be reached is named once with the
reason, a missing default socket is no warning, and a device asked for by a
missing name lists the names that exist."""

from __future__ import annotations

import logging
import socket

import pytest

import nnburst as nn
from nnburst.service import remote


def test_each_unreachable_service_path_is_named_once_with_the_reason(tmp_path, monkeypatch, caplog):
    regular = tmp_path / "regular"
    regular.write_text("")
    stale = tmp_path / "stale.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(stale))
    listener.close()  # the socket file stays, nothing listens
    missing = tmp_path / "missing.sock"
    monkeypatch.setenv("NNBURST_SERVICES", f"{missing}:{regular}:{stale}")
    remote.disconnect_all()
    with caplog.at_level(logging.WARNING, logger="nnburst.service"):
        names = [d.name for d in nn.get_devices()]
        nn.get_devices()
    assert names == ["nnburst-reference"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3, warnings
    assert f"{missing}: it does not exist" in warnings[0]
    assert f"{regular}: it is not a socket" in warnings[1]
    assert f"{stale}: nothing listens on it" in warnings[2]


def test_the_default_socket_missing_is_not_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("NNBURST_SERVICES", raising=False)
    monkeypatch.setenv("NNBURST_SOCKET", str(tmp_path / "none.sock"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    remote.disconnect_all()
    with caplog.at_level(logging.WARNING, logger="nnburst.service"):
        nn.get_devices()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_device_asked_for_by_a_missing_name_lists_the_names_that_exist():
    assert nn.get_device("nnburst-reference").name == "nnburst-reference"
    with pytest.raises(
        nn.NNError, match=r"no device named 'nnburst-gpu'; the devices are: nnburst-reference"
    ) as caught:
        nn.get_device("nnburst-gpu")
    assert caught.value.code == nn.ResultCode.BAD_DATA
