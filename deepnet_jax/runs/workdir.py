"""Checks on a run's working directory, made before anything is compiled.

A week-long run should not find out at its first checkpoint that its workdir cannot be written
or has no room: :func:`check_writable` creates (and removes) a probe file there, and
:func:`check_free_space` compares the free bytes of its file system with what the checkpoints
will take.
"""

from __future__ import annotations

import os
import shutil
import tempfile


def check_writable(workdir: str) -> None:
    """Create ``workdir`` if needed and write a probe file in it; a one-line ``OSError``
    naming the path otherwise."""
    path = os.path.abspath(workdir)
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write_probe_"):
            pass
    except OSError as e:
        raise OSError(f"workdir {path} is not writable: {e.strerror or e}") from None


def checkpoint_bytes_needed(state_bytes: int, params_bytes: int, max_to_keep: int) -> int:
    """Disk a run's checkpoints can take at once: ``max_to_keep`` kept train states plus one
    being written, and the best parameters."""
    return state_bytes * (max_to_keep + 1) + params_bytes


def check_free_space(workdir: str, needed_bytes: int) -> None:
    """A one-line ``OSError`` when the file system holding ``workdir`` has fewer than
    ``needed_bytes`` free."""
    path = os.path.abspath(workdir)
    free = shutil.disk_usage(path).free
    if free < needed_bytes:
        raise OSError(
            f"workdir {path} has {free / 2**20:.1f} MiB free; the checkpoints need "
            f"{needed_bytes / 2**20:.1f} MiB (train state × (max_to_keep + 1) + best parameters)"
        )
