"""glibc's ``malloc`` on transparent huge pages for a command that trains on a CPU host.

XLA:CPU allocates a step's buffers afresh on every execution, and glibc hands large freed
blocks back to the kernel, so each step touches them again as new 4 KiB pages: about 10⁵ minor
page faults a step for the 12-layer d_model-256 decoder, against about 600 when glibc backs its
blocks with 2 MiB transparent huge pages (``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``, glibc ≥
2.35), with the step 3–11% faster (docs/records/step_efficiency_unrolled*.json; docs/benchmarks.md,
"Unrolled stack and the allocator"). Nothing computed changes: only where the bytes live.

glibc reads its tunables once, when the process starts, so :func:`restart_with_hugepages`
replaces the starting process (``os.execve``: the same PID, interpreter options and arguments)
with one that has the setting. It does so only on Linux with glibc ≥ 2.35, transparent huge
pages not ``never``, and no GPU or TPU device files (:func:`applies`), and only when
``GLIBC_TUNABLES`` does not already name ``glibc.malloc.hugetlb``: set
``GLIBC_TUNABLES=glibc.malloc.hugetlb=0`` to keep glibc's default. A library user's own process
is never restarted; it gets the setting by starting with it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from deepnet_jax.common import native_stderr

HUGETLB = "glibc.malloc.hugetlb"
MIN_GLIBC = (2, 35)  # the first glibc with the hugetlb tunable
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def glibc_version() -> tuple[int, int] | None:
    """(major, minor) of the C library this process runs on, or None if it is not glibc."""
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()  # "glibc 2.36"
    except (AttributeError, ValueError, OSError):
        return None
    if name != "glibc":
        return None
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def thp_mode(path: str = THP_ENABLED) -> str | None:
    """The kernel's transparent-huge-page mode (``always``, ``madvise`` or ``never``: the
    bracketed word of ``path``), or None where the file is absent."""
    try:
        with open(path) as f:
            words = f.read().split()
    except OSError:
        return None
    return next((w.strip("[]") for w in words if w.startswith("[")), None)


def applies() -> bool:
    """Whether this host is one the setting is for: Linux, glibc ≥ 2.35, transparent huge pages
    available (``always`` or ``madvise``), no GPU or TPU device files."""
    version = glibc_version()
    return (
        sys.platform == "linux"
        and version is not None
        and version >= MIN_GLIBC
        and thp_mode() in ("always", "madvise")
        and not native_stderr.has_accelerator()
    )


def tunables_with_hugepages(tunables: str) -> str | None:
    """``GLIBC_TUNABLES``' value with ``glibc.malloc.hugetlb=1`` added (``:``-separated), or
    None when ``tunables`` already names it (whatever its value)."""
    items = [item for item in tunables.split(":") if item]
    if any(item.split("=")[0] == HUGETLB for item in items):
        return None
    return ":".join([*items, f"{HUGETLB}=1"])


def restart_environment(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The environment to restart with (``environ`` with the tunable added), or None when
    ``environ`` already decides it."""
    tunables = tunables_with_hugepages(environ.get("GLIBC_TUNABLES", ""))
    return None if tunables is None else {**environ, "GLIBC_TUNABLES": tunables}


def started_as_command(argv: Sequence[str], orig_argv: Sequence[str]) -> bool:
    """Whether the process whose interpreter got ``orig_argv`` (``sys.orig_argv``) runs
    ``argv`` (``sys.argv``) as its own command: ``python [options] script args`` or
    ``python [options] -m module args``. False when something else (a test's worker, a
    notebook) runs the command's code with an ``argv`` of its own, whose restart would start
    that other program again."""
    k = len(orig_argv) - len(argv)
    if k < 1 or list(orig_argv[k + 1 :]) != list(argv[1:]):
        return False
    program = orig_argv[k]
    if program == argv[0]:
        return True
    stem = program.replace(".", os.sep)
    return orig_argv[k - 1] == "-m" and argv[0].endswith(
        (f"{stem}.py", os.path.join(stem, "__main__.py"))
    )


def restart_with_hugepages() -> None:
    """Replace this process with the same command under ``glibc.malloc.hugetlb=1`` where
    :func:`applies`, ``GLIBC_TUNABLES`` does not name it and the process was started as the
    command (:func:`started_as_command`); otherwise return. Call it before the command reads
    its input or starts threads (nothing it did survives the restart)."""
    env = restart_environment(os.environ)
    if env is None or not applies() or not started_as_command(sys.argv, sys.orig_argv):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
