"""The test suite's outcome on one Python and jax, as a record (docs/install.md, "Tested sets").

    python -m benchmarks.suite_record --out=docs/records/suite_py3.13_jax0.12.0.1.json \\
        [--docs=docs/install.md] [-- pytest arguments]

Runs ``python -m pytest`` (the default run: what ``.ci/run`` runs, or the given arguments) with
this interpreter, its output passed through, and writes a record
(:mod:`deepnet_jax.common.records`) holding the Python version, the versions of jax and of the
libraries it compiles and runs with, the counts of passed, failed, errored and skipped tests,
the failed tests' ids, each skip reason with its count, and each warning the run reported (its
category, message and count). The exit status is pytest's. The run has
``DEEPNET_JAX_SUITE_RECORD=1`` in its environment: the tests of the docs' table of tested sets
skip, since that table is written after the run. ``--docs`` writes the table of every committed
suite record between the ``tested-sets`` markers of that file; ``tests/test_install.py``
regenerates it.
"""

from __future__ import annotations

import argparse
import collections
import glob
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from typing import Any

from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = (
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "grain",
    "libtpu",
    "jax-cuda12-plugin",
    "numpy",
)
RECORDING = "DEEPNET_JAX_SUITE_RECORD"  # set in the suite's environment while it is recorded
_WARNING = re.compile(r"^\s+\S+:\d+: (\w+(?:Warning|Error)): (.*)$")


def versions() -> dict[str, str | None]:
    """The installed version of each of :data:`PACKAGES` (None where it is not installed)."""
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def outcome(junit_xml: str) -> dict[str, Any]:
    """Counts, failed ids and skip reasons from pytest's JUnit XML report."""
    cases = ET.parse(junit_xml).getroot().iter("testcase")
    counts: collections.Counter[str] = collections.Counter()
    failed: list[str] = []
    skips: collections.Counter[str] = collections.Counter()
    for case in cases:
        test_id = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        if "failure" in kinds or "error" in kinds:
            counts["failed" if "failure" in kinds else "errors"] += 1
            failed.append(test_id)
        elif "skipped" in kinds:
            counts["skipped"] += 1
            skips[case.find("skipped").get("message", "")] += 1
        else:
            counts["passed"] += 1
    return {
        **{k: counts[k] for k in ("passed", "failed", "errors", "skipped")},
        "failed_tests": sorted(failed),
        "skip_reasons": dict(sorted(skips.items())),
    }


def warnings_of(output: str) -> list[dict[str, Any]]:
    """Each distinct warning of pytest's "warnings summary" (category, message) with how many
    times its line appears there."""
    if "warnings summary" not in output:
        return []
    section = output.split("warnings summary", 1)[1].split("-- Docs:", 1)[0]
    seen: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in section.splitlines():
        match = _WARNING.match(line)
        if match:
            seen[(match.group(1), match.group(2).strip())] += 1
    return [{"category": c, "message": m, "count": n} for (c, m), n in sorted(seen.items())]


def run_suite(pytest_args: list[str]) -> tuple[int, dict[str, Any]]:
    """pytest's exit status and the record's outcome fields."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = os.path.join(tmp, "suite.xml")
        cmd = [sys.executable, "-m", "pytest", f"--junitxml={junit}", *pytest_args]
        env = {**os.environ, RECORDING: "1"}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        lines = []
        for line in proc.stdout:
            sys.stdout.write(line)
            lines.append(line)
        status = proc.wait()
        if not os.path.exists(junit):
            raise SystemExit(f"error: pytest wrote no report (exit status {status})")
        found = outcome(junit)
    found["warnings"] = warnings_of("".join(lines))
    found["pytest_args"] = pytest_args
    return status, found


def tested_sets_table(found: list[dict[str, Any]]) -> str:
    """docs/install.md's table of tested sets: one row per suite record, oldest jax first."""
    rows = [
        "| jax | Python | flax | libtpu | CUDA 12 plugin | passed | failed | skipped "
        "| warnings | date | machine | record |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path, r in sorted(found, key=lambda pr: _version_key(pr[1]["versions"]["jax"])):
        v = r["versions"]
        failed = r["failed"] + r["errors"]
        rows.append(
            f"| jax {v['jax']} | Python {r['python']} | {v['flax']} | {v['libtpu'] or '—'} "
            f"| {v['jax-cuda12-plugin'] or '—'} | {r['passed']} | {failed} | {r['skipped']} "
            f"| {sum(w['count'] for w in r['warnings'])} | {r['date'][:10]} | {r['machine']} "
            f"| `{path}` |"
        )
    return "\n".join(rows)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def committed_records() -> list[tuple[str, dict[str, Any]]]:
    """(path from the repository root, record) of every ``docs/records/suite_*.json``."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, records.RECORDS_DIR, "suite_*.json"))):
        with open(path) as f:
            out.append((os.path.relpath(path, ROOT), json.load(f)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the record's path")
    parser.add_argument("--docs", help="write the tested-sets table into this markdown file")
    args, pytest_args = parser.parse_known_args()
    pytest_args = [a for a in pytest_args if a != "--"]
    status, found = run_suite(pytest_args)
    record = {
        **records.header(),
        "python": platform.python_version(),
        "versions": versions(),
        "exit_status": status,
        **found,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    if args.docs:
        records.replace_block(args.docs, "tested-sets", tested_sets_table(committed_records()))
    return status


if __name__ == "__main__":
    sys.exit(main())
