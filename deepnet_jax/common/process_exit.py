"""How a command's process ends: with the command's exit status as soon as every ``atexit``
handler has run, without CPython's teardown of the interpreter.

After a command returns, the interpreter still finalizes every module and object, and the
libraries' C++ parts (XLA, TensorFlow's datasets, …) their static state: seconds on a 2-core
machine after a training run, many times what every ``atexit`` handler takes together. Nothing
the command wrote depends on it: its files are closed (the metrics file after every line,
TensorBoard's and the checkpoints' writers at the end of a run), and its threads were joined
before ``atexit`` ran.

:func:`register`, called when this module is imported (``deepnet_jax/__init__.py`` imports
it before jax), puts :func:`_exit_now` first in ``atexit``'s list, so it runs after every
handler registered later: jax's (which clears its backends and shuts ``jax.distributed``
down), orbax's, tensorboardX's. It does nothing unless :func:`run` is running the command;
then it flushes stdout and stderr and ends the process with the status the command exited
with (``SystemExit``'s code; 1 after an uncaught exception, whose traceback Python has printed
by then; 130 after an uncaught ``KeyboardInterrupt``). A library user's process is never ended
by it.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable

_STATE: dict[str, int | bool | None] = {"registered_first": None, "status": None}


def register() -> None:
    """Put the handler in ``atexit``'s list once; it can end the process early only if no
    library that registers ``atexit`` handlers (jax) was imported before it."""
    if _STATE["registered_first"] is None:
        _STATE["registered_first"] = "jax" not in sys.modules
        atexit.register(_exit_now)


def status_of(exc: BaseException) -> int:
    """The exit status CPython gives a process that ends with ``exc`` uncaught."""
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1  # a message: printed, status 1
    return 130 if isinstance(exc, KeyboardInterrupt) else 1


def run(command: Callable[[], None]) -> None:
    """``command()`` (absl's ``app.run``, which exits) with its exit status kept for
    :func:`_exit_now`; exceptions propagate unchanged."""
    try:
        command()
    except BaseException as e:
        _STATE["status"] = status_of(e)
        raise
    _STATE["status"] = 0


def _exit_now() -> None:
    status = _STATE["status"]
    if status is None or not _STATE["registered_first"]:
        return  # not a command run by run(), or handlers after ours would be skipped
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


register()
