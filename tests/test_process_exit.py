"""A command's process ends with the command's own exit status once every atexit handler has
run (deepnet_jax.common.process_exit), and a library user's process is left alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from deepnet_jax.common import process_exit

PROGRAM = """
import atexit, sys
{before}
from deepnet_jax.common import process_exit
atexit.register(lambda: print("jax-like handler ran", flush=True))  # registered after ours
print("printed, not flushed")
{body}
"""


def _run(body: str, before: str = "") -> subprocess.CompletedProcess:
    code = PROGRAM.format(before=before, body=body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "exc, status",
    [
        (SystemExit(None), 0),
        (SystemExit(0), 0),
        (SystemExit(2), 2),
        (SystemExit("error: a message"), 1),
        (KeyboardInterrupt(), 130),
        (ValueError("x"), 1),
    ],
)
def test_status_is_cpythons(exc, status):
    assert process_exit.status_of(exc) == status


def test_a_command_exits_with_its_status_after_every_later_handler():
    done = _run("process_exit.run(lambda: sys.exit(3))")
    assert done.returncode == 3
    assert done.stdout == "printed, not flushed\njax-like handler ran\n"
    crashed = _run("process_exit.run(lambda: 1 / 0)")
    assert crashed.returncode == 1 and "ZeroDivisionError" in crashed.stderr
    assert crashed.stdout.endswith("jax-like handler ran\n")


def test_a_library_user_or_a_late_import_is_left_alone():
    plain = _run("sys.exit(4)")  # never run(): the handler does nothing
    assert plain.returncode == 4 and plain.stdout.endswith("jax-like handler ran\n")
    # jax imported first: its handlers would come after ours, so ours stays inert
    body = "print(process_exit._STATE['registered_first']); process_exit.run(lambda: sys.exit(5))"
    late = _run(body, before="import jax")
    assert late.returncode == 5 and "\nFalse\n" in late.stdout
    assert "\nTrue\n" in _run(body).stdout  # deepnet_jax itself imports it before jax
