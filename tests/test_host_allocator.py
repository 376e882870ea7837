"""The train command's restart under glibc's huge-page ``malloc``
(:mod:`deepnet_jax.common.host_allocator`)."""

import os
import subprocess
import sys

import pytest

from deepnet_jax.cli import train as train_command
from deepnet_jax.common import host_allocator

PRINT_TUNABLES = """import os, sys
from deepnet_jax.common import host_allocator
host_allocator.restart_with_hugepages()
print(os.environ.get("GLIBC_TUNABLES", ""), sys.argv[1:])
"""


@pytest.mark.parametrize(
    "tunables, expected",
    [
        ("", "glibc.malloc.hugetlb=1"),
        ("glibc.malloc.arena_max=2", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"),
        ("glibc.malloc.hugetlb=0", None),  # the user's choice stands
        ("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2", None),
        ("glibc.malloc.hugetlb_x=1", "glibc.malloc.hugetlb_x=1:glibc.malloc.hugetlb=1"),
    ],
)
def test_the_tunable_is_added_unless_named(tunables, expected):
    assert host_allocator.tunables_with_hugepages(tunables) == expected


def test_thp_mode_reads_the_bracketed_word(tmp_path):
    path = tmp_path / "enabled"
    path.write_text("always [madvise] never\n")
    assert host_allocator.thp_mode(str(path)) == "madvise"
    path.write_text("always madvise [never]\n")
    assert host_allocator.thp_mode(str(path)) == "never"
    assert host_allocator.thp_mode(str(tmp_path / "absent")) is None


def test_glibc_version_is_this_processs():
    version = host_allocator.glibc_version()
    if sys.platform == "linux" and os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):
        assert version is not None and version >= (2, 0)


@pytest.mark.parametrize(
    "argv, orig_argv, started",
    [
        (["train.py", "--a=1"], ["python", "train.py", "--a=1"], True),
        (
            ["/site/deepnet_jax/cli/train.py", "--a=1"],
            ["python", "-X", "faulthandler", "-m", "deepnet_jax.cli.train", "--a=1"],
            True,
        ),
        (["/site/deepnet_jax/cli/__main__.py"], ["python", "-m", "deepnet_jax.cli"], True),
        # a test's worker that runs the command's module with an argv of its own
        (
            ["deepnet_jax.cli.train", "--help"],
            ["python", "tests/help_worker.py", "out.json", "deepnet_jax.cli.train"],
            False,
        ),
        (["train.py", "--a=1"], ["python", "other.py", "--a=1"], False),
        (["/site/deepnet_jax/cli/plan.py"], ["python", "-m", "deepnet_jax.cli.train"], False),
        (["train.py"], ["python", "-c", "code"], False),
    ],
)
def test_only_the_process_started_as_the_command_restarts(argv, orig_argv, started):
    assert host_allocator.started_as_command(argv, orig_argv) is started


def _run(tmp_path, env_tunables: str | None) -> str:
    script = tmp_path / "print_tunables.py"
    script.write_text(PRINT_TUNABLES)
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if env_tunables is not None:
        env["GLIBC_TUNABLES"] = env_tunables
    out = subprocess.run(
        [sys.executable, str(script), "--flag=1"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return out.stdout.strip()


def test_a_process_restarts_with_the_tunable_where_it_applies(tmp_path):
    """The real restart (``os.execve``): the new process has the setting and the same
    arguments; one that names the tunable already, or a host it is not for, is not restarted."""
    if host_allocator.applies():
        assert _run(tmp_path, None) == "glibc.malloc.hugetlb=1 ['--flag=1']"
    else:
        assert _run(tmp_path, None) == "['--flag=1']"
    assert _run(tmp_path, "glibc.malloc.hugetlb=0") == "glibc.malloc.hugetlb=0 ['--flag=1']"


def test_the_train_command_restarts_before_it_parses_its_flags(monkeypatch):
    calls = []
    monkeypatch.setattr(host_allocator, "restart_with_hugepages", lambda: calls.append("restart"))
    monkeypatch.setattr(train_command.process_exit, "run", lambda fn: calls.append("command"))
    train_command.run()
    assert calls == ["restart", "command"]
