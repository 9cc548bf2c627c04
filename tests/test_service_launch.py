"""Starting nnburst's children: they import the installed package from any
directory (a source checkout's root included), a service that cannot start
says why, a service dies with the parent that started it, and an unbuilt
checkout says what to do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

import nnburst as nn
from nnburst._version import __version__
from nnburst.service import launch


@pytest.fixture
def decoy_checkout(tmp_path, monkeypatch):
    """A working directory holding an ``nnburst`` folder that cannot be imported,
    as a source checkout's root is for an installed nnburst."""
    decoy = tmp_path / "checkout"
    (decoy / "nnburst").mkdir(parents=True)
    (decoy / "nnburst" / "__init__.py").write_text(
        "raise ImportError('imported the decoy checkout')\n"
    )
    monkeypatch.chdir(decoy)
    return decoy


def test_children_import_the_installed_package_whatever_the_directory(decoy_checkout):
    result = subprocess.run(
        launch.child_python("nnburst", "--version"),
        capture_output=True,
        text=True,
        cwd=decoy_checkout,
        env=launch.child_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"nnburst {__version__}"


def test_the_service_starts_from_a_checkout_root(decoy_checkout, tmp_path):
    process, stderr = launch.start_service(str(tmp_path / "svc" / "driver.sock"))
    try:
        assert process.poll() is None
    finally:
        launch.stop_process(process)
        stderr.close()
    assert process.returncode == 0


def test_a_service_that_fails_to_start_reports_its_own_error(tmp_path):
    with pytest.raises(launch.ServiceStartError) as caught:
        launch.start_service(str(tmp_path / "driver.sock"), ["--emulate-performance", "nonsense"])
    message = str(caught.value)
    assert "exited with code 2" in message
    assert "expected DEVICE=TIME[/POWER]" in message  # the child's own argparse error


def test_a_service_started_by_a_killed_parent_does_not_outlive_it(tmp_path):
    """The parent dies by SIGKILL (no cleanup runs): its service must go too."""
    script = (
        "import sys\n"
        "from nnburst.service.launch import start_service\n"
        "process, _ = start_service(sys.argv[1])\n"
        "print(process.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-P", "-c", script, str(tmp_path / "s.sock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=launch.child_env(),
    )
    try:
        service_pid = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait()
        parent.stdin.close()
        parent.stdout.close()
    for _ in range(400):  # up to 20 s: only guards against a hang
        try:
            os.kill(service_pid, 0)
        except ProcessLookupError:
            return
        with open(f"/proc/{service_pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return  # exited, waiting for init to reap it
        time.sleep(0.05)
    os.kill(service_pid, 9)
    pytest.fail("the service outlived its killed parent")


#: The test environment is an editable install, whose finder would supply the
#: compiled module to any ``nnburst`` package; a user's ``pip install .`` has none.
_WITHOUT_EDITABLE_FINDER = (
    "import sys; sys.meta_path[:] = "
    "[f for f in sys.meta_path if 'Editable' not in getattr(f, '__name__', '')]; "
)


def test_importing_an_unbuilt_checkout_says_what_to_do(tmp_path):
    """``python -c 'import nnburst'`` at a clone's root finds the checkout first."""
    checkout = tmp_path / "clone"
    shutil.copytree(
        os.path.dirname(nn.__file__),
        checkout / "nnburst",
        ignore=shutil.ignore_patterns("*.so", "__pycache__"),
    )
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EDITABLE_FINDER + "import nnburst"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 1
    assert "compiled module is missing" in result.stderr
    assert "pip install -e ." in result.stderr
