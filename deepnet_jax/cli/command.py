"""The entry point every ``python -m deepnet_jax.cli.<command>`` shares.

``run(main)`` parses the absl flags (``--help`` prints the command's flags and exits 0);
``main(body, argv)`` refuses unexpected positional arguments, sets library log verbosity from
``-v``/``--verbosity`` (:mod:`deepnet_jax.cli.log_setup`), calls ``body(arguments)`` and
answers a user's mistake — a bad flag value, a missing file — with one ``error:`` line on
stderr and exit status 1, never a traceback. Each command's own ``main(argv)`` is this, so it
can be called in-process with absl's argv too. A command with its own exit statuses
(``plan``: 2 when the step does not fit) handles them inside ``body``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import ml_collections
from absl import app

from deepnet_jax import configs
from deepnet_jax.cli import log_setup
from deepnet_jax.common import console, process_exit

HELP_FLAGS = ("-h", "--help", "-help", "--helpshort", "--helpfull")
CONFIG_FLAGS = ("--config", "--train_config")  # a shipped config's name or a config file


def run(main: Callable[[list[str]], None]) -> None:
    """Run absl's ``main(argv)`` as this process's command; ``--help`` prints the command's
    docstring and flags and exits 0 (absl's own help exits 1). The process ends as soon as
    every ``atexit`` handler has run (:mod:`deepnet_jax.common.process_exit`)."""
    process_exit.run(lambda: app.run(main, flags_parser=_parse))


def main(
    body: Callable[[list[str]], None],
    argv: Sequence[str],
    *,
    commands: Sequence[str] = (),
    errors: tuple[type[BaseException], ...] = console.USER_ERRORS,
) -> None:
    """A command's ``main(argv)`` (``argv[0]`` the program, flags parsed): ``body(arguments)``
    after the positional arguments are checked and log verbosity set; one of ``errors`` becomes
    one ``error:`` line and exit status 1. ``commands``: when given, exactly one positional
    argument, one of these (``import`` or ``export``); otherwise none."""
    arguments = list(argv[1:])
    if commands and (len(arguments) != 1 or arguments[0] not in commands):
        raise app.UsageError(f"give one command, {' or '.join(commands)}; got {arguments}")
    if not commands and arguments:
        raise app.UsageError(f"unexpected arguments: {' '.join(arguments)}")
    log_setup.configure(log_setup.requested_verbosity())
    try:
        body(arguments)
    except errors as e:
        print(console.error_line(e), file=sys.stderr)
        sys.exit(1)


def train(
    config: ml_collections.ConfigDict, workdir: str | None, argv: Sequence[str] = ("train",)
) -> None:
    """Train ``config`` in ``workdir`` as ``python -m deepnet_jax.cli.train`` does: :func:`main`
    around :func:`deepnet_jax.training.train.run` (a bad config or environment, a non-finite
    loss, checkpoints that cannot be restored or belong to another run: one ``error:`` line and
    exit status 1). Training that completes, or that a stop signal ends with its checkpoint,
    returns. Here rather than in ``cli.train``, whose flags would clash with other commands'."""
    from deepnet_jax.training import train as training  # optax, orbax: not on every --help

    main(lambda _: training.run(config, workdir), argv)


def with_config_files(argv: Sequence[str]) -> list[str]:
    """``argv`` with each config flag's value (``--config=wmt17_ende``, ``--config wmt17_ende``,
    ``--train_config=...``) replaced by the file it names (:func:`deepnet_jax.configs.path`); a
    value that is neither a file nor a shipped name is one ``error:`` line and exit status 1."""
    out = list(argv)
    try:
        for i, arg in enumerate(out):
            flag, eq, value = arg.partition("=")
            if flag in CONFIG_FLAGS and eq:
                out[i] = f"{flag}={configs.path(value)}"
            elif arg in CONFIG_FLAGS and i + 1 < len(out):
                out[i + 1] = configs.path(out[i + 1])
    except ValueError as e:
        print(console.error_line(e), file=sys.stderr)
        sys.exit(1)
    return out


def help_if_asked(argv: Sequence[str]) -> None:
    """With a help flag in ``argv``: print the command's docstring and flags, exit 0."""
    if any(arg in HELP_FLAGS for arg in argv[1:]):
        full = "--helpfull" in argv[1:]
        app.usage(shorthelp=not full, writeto_stdout=True, exitcode=0)


def _parse(argv: list[str]) -> list[str]:
    help_if_asked(argv)
    return app.parse_flags_with_usage(with_config_files(argv))
