"""The project's own messages to the user: plain lines on process 0, above any progress bar.

Progress (``Preparing libreoffice_help in …``, counts, the tokenizer trained) and warnings
(``warning: …``) of the project print through :func:`say` / :func:`warn` as plain lines, not as
absl log records with their ``I1125 06:10:57.334215 139822584916864 file.py:188]`` prefix;
library logging stays behind ``-v`` (:mod:`deepnet_jax.cli.log_setup`). On a multi-process run
only process 0 prints, so a message appears once.
"""

from __future__ import annotations

import jax
from tqdm import tqdm


class UserError(Exception):
    """A mistake the user can fix (a bad config or flag, a missing or foreign file, an
    environment without what a run needs, a run that diverged): every command reports it, like
    ``ValueError`` and ``OSError``, as one :func:`error_line` and exit status 1, never a
    traceback. The project's own error classes derive from it."""


# What every command (``cli``, ``experiments``) answers with one ``error:`` line: a bug is
# anything else, and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, UserError)


def error_line(e: BaseException | str) -> str:
    """``error: <message>`` on one line (the message's whitespace runs folded)."""
    return "error: " + " ".join(str(e).split())


def say(message: str) -> None:
    """Print ``message`` on process 0 only (above an open tqdm bar); other processes stay quiet."""
    if jax.process_index() == 0:
        tqdm.write(message)


def warn(message: str) -> None:
    """:func:`say` ``warning: <message>``."""
    say(f"warning: {message}")
