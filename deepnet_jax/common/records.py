"""Records behind the docs' figures, and the docs' tables generated from them.

A **record** is the JSON a measuring command writes: its figures under a :func:`header` saying
which command made them, at which commit, when, on what machine and with which jax. Records the
docs use are committed under ``docs/records/``.

A **generated table** sits in a markdown file between two markers,
``<!-- generated: NAME -->`` and ``<!-- end: NAME -->``; :func:`replace_block` writes it and
:func:`block` reads it back, so a test can regenerate the table from its record and compare.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from typing import Any

RECORDS_DIR = os.path.join("docs", "records")  # from the repository root


def header(argv: list[str] | None = None) -> dict[str, Any]:
    """What a record says of its making: the command line, the commit (``+dirty`` where the
    work tree had changes), the UTC date, the machine (OS, architecture, CPU count), the
    processor's model name and the jax version (None where jax is not installed)."""
    argv = sys.argv if argv is None else argv
    try:
        import jax

        jax_version: str | None = jax.__version__
    except ImportError:
        jax_version = None
    return {
        "command": "python " + " ".join(shlex.quote(a) for a in _module_argv(argv)),
        "commit": commit(),
        "date": now(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "cpu": cpu_model(),
        "jax": jax_version,
    }


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The processor's model name and, where Linux's ``/proc/cpuinfo`` gives them, its family
    and model numbers (e.g. ``AMD EPYC (family 26, model 2)``; else ``platform.processor()``),
    None where neither says: two VMs with the same ``machine`` line can time the same step 25%
    apart, and a VM's generic model name (``AMD EPYC``) does not tell a Zen 3 from a Zen 5."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                if not key.strip() and fields:
                    break  # the first processor's block ends
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name")
    if not name:
        return platform.processor() or None
    numbers = [f"{k} {fields[k]}" for k in ("cpu family", "model") if fields.get(k)]
    return f"{name} ({', '.join(numbers).replace('cpu family', 'family')})" if numbers else name


def cores() -> int | None:
    """The cores this process may run on: its CPU affinity where the OS has one (Linux), else
    ``os.cpu_count()``. A run pinned to one core (``taskset -c 0``) gives 1 on a 2-core VM, a
    free one 2: its ``cpu_seconds`` are one core's, or two cores' shared with whatever else ran."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def now() -> str:
    """The UTC date and time to the second, as a record writes it (``2026-11-28T14:03:51Z``)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _module_argv(argv: list[str]) -> list[str]:
    """``argv`` with a module's file path written as ``-m package.module``."""
    first = argv[0] if argv else ""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.abspath(first)
    if first.endswith(".py") and path.startswith(root + os.sep):
        module = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
        return ["-m", module.removesuffix(".__main__"), *argv[1:]]
    return list(argv)


def commit() -> str | None:
    """The repository's HEAD commit, ``+dirty`` with uncommitted changes; None outside git."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        head = _git(root, "rev-parse", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def _git(root: str, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def write(path: str, payload: dict[str, Any], head: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the record ``{**head, **payload}`` to ``path`` as indented JSON and return it;
    ``head`` is :func:`header` taken when the measurement started (now where None), so the
    commit is the one the run started from. ValueError where ``payload`` names a header key."""
    head = header() if head is None else head
    clash = sorted(set(head) & set(payload))
    if clash:
        raise ValueError(f"payload: {clash[0]!r} is a header key; allowed are other names")
    record = {**head, **payload}
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    return record


def commits_text(runs: list[dict[str, Any]]) -> str:
    """The commits of one or more records, short and with ``+dirty`` kept: ``commit `0123abc```,
    ``commits `0123abc`, `4567def```, or ``an unknown commit`` for records with none (after the
    known ones when some have one: ``commit `0123abc` and an unknown commit``)."""
    known = sorted({f"`{r['commit'][:7]}{r['commit'][40:]}`" for r in runs if r.get("commit")})
    if not known:
        return "an unknown commit"
    text = ("commit " if len(known) == 1 else "commits ") + ", ".join(known)
    return text + (" and an unknown commit" if any(not r.get("commit") for r in runs) else "")


def made_line(record: dict[str, Any]) -> str:
    """One line for a generated block saying where its figures were measured, from the
    record's header: ``Measured at commit `0123abc` (2026-11-28T14:03:51Z; Linux x86_64,
    2 CPUs; jax 0.10.2).`` (``+dirty`` kept: the work tree had changes)."""
    head = commits_text([record])
    return f"Measured at {head} ({record['date']}; {record['machine']}; jax {record['jax']})."


def made_line_of_runs(runs: list[dict[str, Any]]) -> str:
    """:func:`made_line` for a block made from several records: one record's line, or
    ``Measured in 3 runs, <first date> to <last date>, at commits `0123abc`, `4567def`
    (<machines>; jax <versions>).`` naming every commit (:func:`commits_text`), machine and jax
    version among them."""
    if len(runs) == 1:
        return made_line(runs[0])
    dates = sorted(r["date"] for r in runs)
    machines = "; ".join(sorted({r["machine"] for r in runs}))
    jaxes = ", ".join(sorted({r["jax"] for r in runs}))
    return (
        f"Measured in {len(runs)} runs, {dates[0]} to {dates[-1]}, at {commits_text(runs)} "
        f"({machines}; jax {jaxes})."
    )


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- generated: {name} -->", f"<!-- end: {name} -->"


def block(path: str, name: str) -> str:
    """The text between ``name``'s markers in ``path``; ValueError if they are not there once
    each, in order."""
    with open(path) as f:
        text = f.read()
    begin, end = _markers(name)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{path}: needs one {begin!r} and then one {end!r}")
    return text[text.index(begin) + len(begin) : text.index(end)].strip("\n")


def replace_block(path: str, name: str, content: str) -> None:
    """Write ``content`` between ``name``'s markers in ``path`` (they must be there)."""
    block(path, name)  # the markers' check
    with open(path) as f:
        text = f.read()
    begin, end = _markers(name)
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w") as f:
        f.write(f"{head}{begin}\n{content.strip()}\n{end}{tail}")
