"""Library logging for the command-line tools: quiet by default, INFO with ``-v 0``.

A run shows its own output (progress bar, step and validation lines, samples, results) and the
project's own log lines; the INFO lines of the libraries under it (orbax, jax,
tensorflow_datasets, grain: many per checkpoint, some of them whole option dumps) only when
asked for. Every CLI calls :func:`configure` once its flags are parsed:

* default: library records below WARNING are dropped; the project's own records (logged from
  a file of this package or the entry script) pass at any level, and library warnings and
  errors pass, but for the few known, repeated, not actionable ones in ``NOISY_WARNINGS``;
* ``-v 0`` / ``--verbosity=0`` (absl's standard flag; ``-v 1`` for DEBUG): nothing is dropped,
  every logger at that level.

Library tracebacks that no caller can catch go the same way. When a checkpoint fails to
restore (a damaged file), orbax abandons the array reads still in flight and closes its event
loop: TensorStore then hands each finished read to that closed loop (``RuntimeError: Event loop
is closed``) and each abandoned read coroutine raises again when it is collected (with the whole
TensorStore spec), and Python prints all of them through ``sys.unraisablehook``: hundreds of
lines after the run's own warning or ``error:`` line. Quiet mode drops these
(:class:`QuietUnraisable`); with ``-v`` they print as before.

The filter sits on absl's handler, which ``app.run`` puts on the root logger. CLIs not started
by ``app.run`` (the experiments' ``main``) get it on the root logger's own handler instead: the
one ``logging.basicConfig()`` adds, which absl's logging functions call when they log before
any handler is set (orbax does at import), and which quiet mode adds itself otherwise, so their
library warnings print as ``WARNING:logger:message``. Either way it sees both absl-style
logging (orbax, tensorflow_datasets, grain and this project use ``absl.logging``) and plain
Python loggers (jax). C++ logs of XLA (and TensorFlow, if installed) follow
``TF_CPP_MIN_LOG_LEVEL``: quiet mode sets it to 1 (warnings and errors) when it is unset, for
native libraries loaded from then on (jax's GPU plugins load when the backend starts); jaxlib
itself reads it at import, and its own default already hides C++ INFO (set
``TF_CPP_MIN_LOG_LEVEL=0`` to see it).

On a host with no TPU or GPU device files, quiet mode also runs JAX on the CPU unless
``JAX_PLATFORMS`` says otherwise, so an installed libtpu or CUDA plugin (the planner's ``tpu`` and
``gpu-plan`` extras) is not started only to fail with a page of messages; their native start-up
lines are dropped (:mod:`deepnet_jax.common.native_stderr`).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Any

from absl import flags
from absl import logging as absl_logging

from deepnet_jax.common import native_stderr

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

# (library folder, start of the message's format string) of warnings that are neither rare
# nor actionable here, dropped in quiet mode:
NOISY_WARNINGS: tuple[tuple[str, str], ...] = (
    # Every data set of this project is a custom BuilderConfig, so tfds warns on every builder
    # construction (twice a run), with the whole config: 300+ characters.
    ("tensorflow_datasets", "Using custom data configuration"),
    # Printed before every first preparation of a data set (the folder is not written yet).
    ("tensorflow_datasets", "Variant folder %s has no %s"),
    # evaluate/translate/sample open a finished run's checkpoints read-only on purpose; orbax
    # warns about every option that implies and about the directory (6 lines per run).
    ("orbax", "CheckpointManagerOptions.read_only=True, setting"),
    ("orbax", "Given directory is read only"),
)

# Unraisable exceptions dropped in quiet mode, left by the reads a failed orbax restore abandons:
# (exception type, message) of those delivered to its closed event loop, and the library whose
# code raised the others (its abandoned read coroutines, when they are collected).
NOISY_UNRAISABLE: tuple[tuple[type[BaseException], str], ...] = (
    (RuntimeError, "Event loop is closed"),
)
NOISY_UNRAISABLE_LIBRARIES = ("orbax",)


def requested_verbosity() -> int | None:
    """The ``-v``/``--verbosity`` given on an absl command line (flags parsed), else ``None``.
    absl's own default (INFO, set by ``app.run``) counts as not given."""
    flag = flags.FLAGS["verbosity"]
    return flag.value if flag.present else None


def configure(verbosity: int | None = None) -> None:
    """Set up library logging for a CLI: quiet (``None``, see the module doc) or everything
    at absl ``verbosity`` (0 INFO, 1 DEBUG, -1 WARNING). Idempotent; call after flag parsing."""
    handler = absl_logging.get_absl_handler()
    # absl's handler in absl apps; in CLIs not started by app.run (deepnet_jax.experiments)
    # Python's last-resort handler (WARNING and above, when the root logger has no handler), or
    # the root handler absl's own functions add with logging.basicConfig() when one logs before
    # any handler is set (orbax does at import)
    handlers = list(dict.fromkeys(
        h for h in (handler, logging.lastResort, *logging.root.handlers) if h is not None
    ))  # fmt: skip
    for h in handlers:
        for f in [f for f in h.filters if isinstance(f, QuietLibraries)]:
            h.removeFilter(f)
    if verbosity is None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        quiet = QuietLibraries(_main_file())
        if not logging.root.handlers:  # the handler absl.logging would add on its first record
            logging.basicConfig()
            handlers.append(logging.root.handlers[0])
        for h in handlers:
            h.addFilter(quiet)
        _quiet_plugins_on_a_cpu_host()
        sys.unraisablehook = QuietUnraisable()
        return
    sys.unraisablehook = sys.__unraisablehook__
    if handler not in logging.root.handlers:  # not an absl app
        if not flags.FLAGS.is_parsed():  # absl's flags keep their defaults; no pre-parse notice
            flags.FLAGS.mark_as_parsed()
        absl_logging.use_absl_handler()
    absl_logging.set_verbosity(verbosity)


def _quiet_plugins_on_a_cpu_host() -> None:
    """On a host with no accelerator: JAX on the CPU unless ``JAX_PLATFORMS`` says otherwise
    (no attempt to start libtpu or CUDA, which fails after printing several lines), and jax's
    plugins (the planning extras' CUDA plugin) discovered now with their stderr noise dropped.
    Does not start a backend, so device-count settings made later still apply."""
    import jax

    from deepnet_jax.common import jax_compat

    if native_stderr.has_accelerator():
        return
    if not jax.config.jax_platforms:
        jax.config.update("jax_platforms", "cpu")
    with native_stderr.filtered():
        jax_compat.register_pjrt_plugins()


class QuietLibraries(logging.Filter):
    """Passes the project's own records (from files under ``deepnet_jax/`` or ``main_file``)
    and library records at WARNING or above, except ``NOISY_WARNINGS``."""

    def __init__(self, main_file: str | None = None) -> None:
        super().__init__()
        self._main_file = os.path.abspath(main_file) if main_file else None

    def filter(self, record: logging.LogRecord) -> bool:
        if self._is_own(record.pathname):
            return True
        return record.levelno >= logging.WARNING and not _is_noise(record)

    def _is_own(self, pathname: str) -> bool:
        path = _absolute(pathname)
        return path.startswith(_PACKAGE_DIR) or path == self._main_file


class QuietUnraisable:
    """``sys.unraisablehook`` of quiet mode: drops :data:`NOISY_UNRAISABLE` and exceptions
    raised in :data:`NOISY_UNRAISABLE_LIBRARIES`; passes the rest to Python's own hook.

    It holds everything it reads, since it also runs while the interpreter shuts down, when
    module globals (this module's too) are already cleared."""

    def __init__(self) -> None:
        self._messages = NOISY_UNRAISABLE
        self._folders = tuple(f"{os.sep}{lib}{os.sep}" for lib in NOISY_UNRAISABLE_LIBRARIES)
        self._default = sys.__unraisablehook__

    def __call__(self, unraisable: Any) -> None:
        if not self.drops(unraisable.exc_value, unraisable.exc_traceback):
            self._default(unraisable)

    def drops(self, error: BaseException | None, tb: Any) -> bool:
        """Whether an unraisable ``error`` (with its traceback ``tb``) is dropped."""
        if any(isinstance(error, t) and str(error) == m for t, m in self._messages):
            return True
        while tb is not None and tb.tb_next is not None:  # the innermost frame raised it
            tb = tb.tb_next
        raised_in = tb.tb_frame.f_code.co_filename if tb is not None else ""
        return any(folder in raised_in for folder in self._folders)


@functools.lru_cache(maxsize=1024)
def _absolute(pathname: str) -> str:
    return os.path.abspath(pathname)


def _is_noise(record: logging.LogRecord) -> bool:
    text = record.msg if isinstance(record.msg, str) else ""
    return any(
        f"{os.sep}{library}{os.sep}" in record.pathname and text.startswith(start)
        for library, start in NOISY_WARNINGS
    )


def _main_file() -> str | None:
    return getattr(sys.modules.get("__main__"), "__file__", None)
