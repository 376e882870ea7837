"""Training: ``python -m deepnet_jax.cli.train --config=<name or file> --workdir=DIR
[--config.x=y ...]`` (in a checkout, ``python train.py`` is the same command).

``--config`` is a shipped config's name (``default``, the main job; ``wmt17_ende``; …:
:mod:`deepnet_jax.configs`) or a file defining ``get_config()``, with ml_collections'
``:argument`` and ``--config.<field>=<value>`` overrides.

Library log lines (orbax, jax, tensorflow_datasets, grain) below WARNING are hidden; add
``-v 0`` (absl's ``--verbosity``; ``-v 1`` for DEBUG) to see them.

Exit status 0 when training completes or SIGTERM/SIGINT stops it after a checkpoint (run the
same command again to resume); 1 with a one-line error for a bad config or environment.
"""

from __future__ import annotations

import re
import sys

from absl import app, flags
from ml_collections import config_flags

from deepnet_jax import configs
from deepnet_jax.cli import command
from deepnet_jax.common import console, process_exit

_CONFIG = config_flags.DEFINE_config_file(
    "config", configs.path("default"), "a shipped config's name or a config file", lock_config=True
)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Run directory: checkpoints (resumed from), metrics, results."
)


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing: ``--help`` as every command answers it, ``--config`` resolved to
    its file first (:func:`command.with_config_files`), and a mistyped ``--config.<field>``
    override (which ml_collections reports as a traceback) turned into one ``error:`` line and
    exit status 1."""
    command.help_if_asked(argv)
    argv = command.with_config_files(argv)
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        message = str(e)
    except (AttributeError, KeyError) as e:  # an override naming a field the config lacks
        message = _unknown_override(argv, str(e.args[0]) if e.args else str(e))
    print(console.error_line(message), file=sys.stderr)
    sys.exit(1)


def _unknown_override(argv: list[str], text: str) -> str:
    """``--config.model.d_modle: unknown config field (did you mean d_model?)`` from
    ml_collections' KeyError text."""
    key = re.search(r"'\\?'?([\w-]+)", text)
    name = key.group(1) if key else text
    flag = next(
        (a.split("=")[0] for a in argv if a.startswith("--config.") and name in a.split("=")[0]),
        f"--config.*{name}",
    )
    hint = re.search(r'Did you mean "([^"]+)"', text)
    return f"{flag}: unknown config field" + (f" (did you mean {hint.group(1)}?)" if hint else "")


def main(argv: list[str]) -> None:
    """The command's ``main(argv)``: :func:`command.train` with the flags' config and workdir."""
    command.train(_CONFIG.value, _WORKDIR.value, argv)


def run() -> None:
    """This process's command: absl's ``app.run`` with :func:`parse_flags`; the process ends
    as soon as every ``atexit`` handler has run (:mod:`deepnet_jax.common.process_exit`)."""
    process_exit.run(lambda: app.run(main, flags_parser=parse_flags))


if __name__ == "__main__":
    run()
