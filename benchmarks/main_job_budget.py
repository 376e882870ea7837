"""How the main job's budget was chosen: the shipped job (seed 0) at the other budgets and
lengths that were weighed against it, each alone on the machine, as records, and the table of
docs/main_job.md ("How the budget was chosen") generated from them.

    python -m benchmarks.main_job_budget --run --docs=docs/main_job.md

Each arm of :data:`ARMS` runs as ``python -m benchmarks.main_job --arm=<arm> --seeds=0 --jobs=1
--out=docs/records/main_job_<arm>.json <overrides>`` (its own record, whose command says so; the
``default`` arm, the shipped job itself, without ``--arm``), one after the other; then the
``main-job-budget`` block of each ``--docs`` file is written from the records. Without
``--run`` only the block is rewritten, from the committed records.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from typing import Any

from deepnet_jax.common import records

# the arms: the config fields each changes from the shipped job (deepnet_jax/configs/default.py:
# 1,800 updates, validation every 600 on 300 sentences, buckets 16/32/64, max_len 64)
ARMS: dict[str, list[str]] = {
    "default": [],  # the shipped job itself, run alone as the others are
    "budget-2000": [
        "--config.total_steps=2000",
        "--config.eval_every=500",
        "--config.decode.eval_sentences=500",
        "--config.data.bucket_boundaries=(8,16,32,64)",
    ],
    "budget-1600": ["--config.total_steps=1600", "--config.eval_every=400"],
    "budget-1600-len128": [
        "--config.total_steps=1600",
        "--config.eval_every=400",
        "--config.data.max_len=128",
        "--config.data.bucket_boundaries=(16,32,64,128)",
    ],
}
BLOCK = "main-job-budget"


def record_path(arm: str) -> str:
    """The committed record of ``arm``: docs/records/main_job_<arm with '_'>.json."""
    return os.path.join(records.RECORDS_DIR, f"main_job_{arm.replace('-', '_')}.json")


def brevity_penalty(report: str) -> float:
    """The brevity penalty sacrebleu's BLEU report line states (``BP = 0.890``)."""
    found = re.search(r"BP = ([0-9.]+)", report)
    if not found:
        raise ValueError(f"no brevity penalty in the BLEU report {report!r}")
    return float(found.group(1))


def table(arms: dict[str, dict[str, Any]]) -> str:
    """docs/main_job.md's budget table: a row per arm record (its one run), with the fields its
    overrides change, its test scores (all sentences; the sensitivity on the test pairs of at
    most ``max_len`` tokens), the brevity penalty, its wall-clock and median seconds per update."""
    rows = [
        "| arm | overrides | test BLEU | chrF | BP | distinct | sensitivity (test) "
        "| wall-clock | s/update |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, record in arms.items():
        (run,) = record["runs"]
        fields = ", ".join(f"`{o.removeprefix('--config.')}`" for o in record["overrides"])
        fields = fields or "none (the shipped job)"
        rows.append(
            f"| {arm} | {fields} | {run['test_bleu']:.2f} | {run['test_chrf']:.2f} "
            f"| {brevity_penalty(run['test_bleu_report']):.3f} "
            f"| {run['test_distinct_hypotheses']:.0%} | {run['test_source_sensitivity']:.2f} nats "
            f"| {run['wall_seconds']:,.0f} s | {run['median_step_s']:.3f} |"
        )
    return "\n".join(rows)


def run_arm(arm: str, workdir_root: str) -> None:
    """One arm through benchmarks.main_job, alone (seed 0, one job), into its record; the
    ``default`` arm changes nothing and runs as the plain job (no ``--arm``)."""
    cmd = [sys.executable, "-m", "benchmarks.main_job", "--seeds=0", "--jobs=1"]
    cmd += [f"--arm={arm}"] if ARMS[arm] else []
    cmd += [f"--out={record_path(arm)}", f"--workdir_root={workdir_root}/{arm}", *ARMS[arm]]
    subprocess.run(cmd, check=True)


def load() -> dict[str, dict[str, Any]]:
    """The arms' committed records, in :data:`ARMS`' order."""
    out = {}
    for arm in ARMS:
        with open(record_path(arm)) as f:
            out[arm] = json.load(f)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", action="store_true", help="run the arms (else: tables only)")
    parser.add_argument("--workdir_root", default="/tmp/deepnet_main_job_budget")
    parser.add_argument("--docs", action="append", default=[], help="write the block here")
    args = parser.parse_args()
    if args.run:
        for arm in ARMS:
            run_arm(arm, args.workdir_root)
    text = table(load())
    for doc in args.docs:
        records.replace_block(doc, BLOCK, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
