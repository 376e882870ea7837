"""Generic fetching helpers the corpora share: files' checksums, atomic writes, ``.deb``
archives read without ``dpkg``, ``apt-get download`` and ``pip download`` with a retry or a
one-line error.

Nothing fetched is committed to the repository: the corpus modules
(:mod:`deepnet_jax.data.corpora`) fetch their files into a download folder at prepare time, or
use what the user put there. A ``.deb`` is an ``ar`` archive whose ``data.tar.xz`` (or ``.gz``)
member holds the package's files: :func:`read_deb_file` reads one of them and
:func:`iter_deb_files` every file under a folder.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Sequence

from deepnet_jax.common import console

APT_TIMEOUT_S = 600
PIP_TIMEOUT_S = 600


class DataPreparationError(console.UserError, RuntimeError):
    """A corpus could not be fetched or prepared; the message (one line) says what to do."""


def sha256_file(path: str) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_sha256(path: str, expected: str) -> None:
    actual = sha256_file(path)
    if actual != expected:
        console.warn(
            f"{path} has sha256 {actual}, not the {expected} this code was checked against; "
            "using it anyway"
        )


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder + ``os.replace``."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------------------------
# .deb (ar + tar) reading
# --------------------------------------------------------------------------------------------


def read_ar_members(data: bytes) -> dict[str, bytes]:
    """Members (name -> bytes) of a Unix ``ar`` archive such as a ``.deb``.

    Format: the global header ``!<arch>\\n``, then per member a 60-byte ASCII header (name 16,
    mtime 12, uid 6, gid 6, mode 8, size 10, magic ``\\x60\\n``) followed by ``size`` bytes and
    one padding byte when ``size`` is odd. A GNU-style trailing ``/`` on names is removed.
    """
    if not data.startswith(b"!<arch>\n"):
        raise DataPreparationError("not an ar archive (no '!<arch>' header)")
    members: dict[str, bytes] = {}
    pos = 8
    while pos < len(data):
        header = data[pos : pos + 60]
        if len(header) < 60 or header[58:60] != b"`\n":
            raise DataPreparationError(f"corrupt ar archive: bad member header at byte {pos}")
        name = header[0:16].decode("ascii", "replace").strip()
        name = name.removesuffix("/")
        try:
            size = int(header[48:58].decode("ascii").strip())
        except ValueError:
            raise DataPreparationError(f"corrupt ar archive: bad size at byte {pos}") from None
        start = pos + 60
        if start + size > len(data):
            raise DataPreparationError(f"truncated ar archive: member {name!r} is cut short")
        members[name] = data[start : start + size]
        pos = start + size + (size % 2)
    return members


_DATA_TAR_MODES = {"data.tar.xz": "r:xz", "data.tar.gz": "r:gz", "data.tar": "r:"}


def _open_deb_data(deb_path: str, hint: str) -> tarfile.TarFile:
    """The ``data.tar*`` member of a ``.deb``, opened for reading (the caller closes it).

    ``hint`` ends the message raised for an unsupported compression (e.g. ``.zst``).
    """
    with open(deb_path, "rb") as f:
        try:
            members = read_ar_members(f.read())
        except DataPreparationError as e:
            raise DataPreparationError(f"{deb_path}: {e}") from None
    data_names = [name for name in members if name.startswith("data.tar")]
    if not data_names:
        raise DataPreparationError(f"{deb_path}: no data.tar member (found {sorted(members)})")
    name = data_names[0]
    if name not in _DATA_TAR_MODES:
        raise DataPreparationError(
            f"{deb_path}: {name} uses an unsupported compression (supported: .xz, .gz); {hint}"
        )
    return tarfile.open(fileobj=io.BytesIO(members[name]), mode=_DATA_TAR_MODES[name])


def read_deb_file(deb_path: str, member: str) -> bytes:
    """The bytes of file ``member`` (e.g. ``usr/share/trans/de-en``) inside a ``.deb``.

    Supports ``data.tar.xz``, ``data.tar.gz`` and an uncompressed ``data.tar``; other
    compressions (e.g. ``.zst``) raise :class:`DataPreparationError` naming the member.
    """
    wanted = {member.lstrip("./"), "./" + member.lstrip("./")}
    hint = f"extract {member} yourself and put it next to the .deb"
    with _open_deb_data(deb_path, hint) as tar:
        for info in tar:
            if info.name in wanted and info.isfile():
                extracted = tar.extractfile(info)
                assert extracted is not None
                return extracted.read()
    raise DataPreparationError(f"{deb_path}: data.tar has no ./{member.lstrip('./')}")


def iter_deb_files(deb_path: str, folder: str, suffix: str = "") -> Iterator[tuple[str, bytes]]:
    """``(path relative to folder, bytes)`` of every regular file under ``folder`` in a ``.deb``.

    ``folder`` is a path inside the package such as ``usr/share/libreoffice/help/de``; only
    names ending in ``suffix`` are read. Files come in archive order, read one at a time from
    the (decompressed in memory) ``data.tar``; links and folders are skipped.
    """
    prefix = folder.strip("/").removeprefix("./") + "/"
    hint = f"unpack it (e.g. dpkg-deb -R) and rebuild it with xz: dpkg-deb -Zxz -b <dir> {deb_path}"
    with _open_deb_data(deb_path, hint) as tar:
        for info in tar:
            name = info.name.removeprefix("./")
            if info.isfile() and name.startswith(prefix) and name.endswith(suffix):
                extracted = tar.extractfile(info)
                assert extracted is not None
                yield name[len(prefix) :], extracted.read()


def run_command(cmd: list[str], cwd: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; a timeout is reported as a failed process instead of raising."""
    try:
        return subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"timed out after {timeout:.0f} s")


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def apt_get_download(
    specs: Sequence[str], download_dir: str, label: str, hint: str
) -> subprocess.CompletedProcess[str]:
    """``apt-get download <specs>`` in ``download_dir``; after a failure, ``apt-get update``
    once and a retry. Returns the last run (the caller checks its status and the files).

    Raises:
      DataPreparationError: ``apt-get`` is not on ``PATH``: ``apt-get not found: <hint>``.
    """
    if shutil.which("apt-get") is None:
        raise DataPreparationError(f"apt-get not found: {hint}")
    cmd = ["apt-get", "download", *specs]
    console.say(f"{label}: running {' '.join(cmd)} in {download_dir}")
    result = run_command(cmd, download_dir, APT_TIMEOUT_S)
    if result.returncode != 0:
        console.say(
            f"{label}: apt-get download failed ({last_line(result.stderr)}); running apt-get update"
        )
        update = run_command(["apt-get", "update"], download_dir, APT_TIMEOUT_S)
        if update.returncode != 0:
            console.warn(f"apt-get update failed: {last_line(update.stderr)}")
        result = run_command(cmd, download_dir, APT_TIMEOUT_S)
    return result


def pip_download(
    requirement: str, download_dir: str, label: str
) -> subprocess.CompletedProcess[str]:
    """``python -m pip download --no-deps <requirement> -d download_dir`` with this interpreter
    (the file is downloaded, never installed). Returns the run (the caller checks it)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", requirement, "-d", download_dir]
    console.say(f"{label}: running {' '.join(cmd)}")
    return run_command(cmd, download_dir, PIP_TIMEOUT_S)
