"""Known noise that native libraries print straight to stderr on a host without their hardware,
and a filter that drops it (and nothing else).

jax's CUDA plugin (the ``gpu-plan`` extra) prints "Could not find cuda drivers" three times when
``import jax`` loads it on a host with no CUDA driver, and libtpu (the ``tpu`` extra) prints
that it cannot find the TPU VM's metadata whenever it is loaded on a host that is not a TPU VM
(e.g. to compile for a TPU topology). Both write to file descriptor 2 before any logging is set
up, so Python's logging cannot filter them; :func:`filtered` captures the descriptor around the
code that loads them and writes every other line back.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import sys
import tempfile
from collections.abc import Iterator

NOISE = re.compile(
    r"All log messages before absl::InitializeLog|Logging before InitGoogle"
    r"|cudart_stub\.cc:\d+\] Could not find cuda drivers"
    r"|could not determine TPU (accelerator type|worker hostnames)"
    r"|unexpected worker hostname|=== Source Location Trace|libtpu_init_utils\.cc"
)


# device files of the accelerators jax has backends for (TPU VMs, NVIDIA and AMD GPUs)
ACCELERATOR_DEVICE_FILES = ("/dev/accel*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*", "/dev/kfd")


def has_accelerator() -> bool:
    """Whether this host has TPU or GPU device files (whatever jax can do with them)."""
    return any(glob.glob(pattern) for pattern in ACCELERATOR_DEVICE_FILES)


@contextlib.contextmanager
def filtered(noise: re.Pattern = NOISE) -> Iterator[None]:
    """Capture file descriptor 2 inside the block; afterwards write back every line that does
    not match ``noise`` (in order, to ``sys.stderr``)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines(keepends=True)
            kept = [line for line in lines if not noise.search(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
