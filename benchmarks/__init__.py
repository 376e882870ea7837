"""Benchmarks, each run as ``python -m benchmarks.<name>`` (docs/benchmarks.md).

Run that way, a benchmark prints its own lines only, as the commands do: library INFO logs are
dropped and, on a host with no accelerator, JAX runs on the CPU without starting libtpu or
CUDA's plugin first (which print several lines of failure each), by
:func:`deepnet_jax.cli.log_setup.configure` in quiet mode. ``DEEPNET_JAX_VERBOSITY=0`` (absl's
levels: 0 INFO, 1 DEBUG) shows every library line instead. Imported (by the tests, or one
benchmark by another) the package changes nothing.
"""

import os
import sys

VERBOSITY_ENV = "DEEPNET_JAX_VERBOSITY"


def _run_as_a_program() -> bool:
    """Whether Python is locating a module of this package for ``-m``: while it does, it has
    imported this package and ``sys.argv[0]`` is ``"-m"`` (the Python docs, "-m")."""
    return sys.argv[:1] == ["-m"]


if _run_as_a_program():
    from deepnet_jax.cli import log_setup

    _verbosity = os.environ.get(VERBOSITY_ENV)
    log_setup.configure(int(_verbosity) if _verbosity else None)
