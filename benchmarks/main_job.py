"""The main job (the README's first command) over several seeds, as a record: the tables of
its results in README ("The main job") and docs/main_job.md (:data:`BLOCKS`) are generated
from it.

    python -m benchmarks.main_job --seeds=0,1,2 --jobs=2 --out=docs/records/main_job.json \\
        --docs=README.md --docs=docs/main_job.md

Runs ``python -m deepnet_jax.cli.train --config=default --config.seed=N`` for each seed, ``--jobs``
at a time, each in its own process and workdir (``--workdir_root``), and times each: wall-clock
and CPU seconds of its process. Where ``$DEEPNET_JAX_DATA`` holds no prepared corpus, the first
seed runs alone first and prepares the corpus and tokenizer, so its time holds that too
(``prepared_here``). The record holds each seed's final results from its ``eval.json``, its
validations along the way and median seconds per update (:func:`progress`) and its seconds,
under a header naming the command, commit, machine and date (:mod:`deepnet_jax.common.records`);
``concurrent_runs`` says how many ran side by side, since
two runs on 2 cores each take longer than one alone. Arguments it does not know
(``--config.total_steps=2``) go to every run and into the record's ``overrides``.

An arm (``--arm=modern`` with the overrides that make it) is the same job with something changed:
its record is named by the arm and its table (:func:`arm_table`) goes between the
``main-job-arm-<name>`` markers of each ``--docs`` file, never into the default's tables::

    python -m benchmarks.main_job --arm=modern --seeds=0,1,2 --jobs=1 \\
        --out=docs/records/main_job_modern.json --docs=docs/main_job.md \\
        --config.model.positions=rope --config.model.activation=swiglu \\
        --config.model.ffn_dim=344 --config.model.norm=rmsnorm
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

from deepnet_jax.common import records
from deepnet_jax.data import options as data_options
from deepnet_jax.runs.workdir import RunDir

# eval.json's fields the record keeps (the README's columns and what the prose cites)
KEPT = (
    "test_bleu",
    "test_bleu_report",  # sacrebleu's line: n-gram precisions, brevity penalty
    "test_chrf",
    "test_sentences",
    "test_unseen_bleu",
    "test_unseen_sentences",
    "test_distinct_hypotheses",
    "test_source_sensitivity",
    "eval_bleu_greedy",
    "eval_bleu_sentences",
    "eval_source_sensitivity",
    "eval_loss",
    "first_train_loss",
    "train_loss",
    "steps",
)


def run_seed(seed: int, workdir: str, extra: list[str]) -> dict[str, Any]:
    """One main job: its process's wall-clock and CPU seconds and its kept results."""
    cmd = [
        sys.executable,
        "-m",
        "deepnet_jax.cli.train",
        "--config=default",
        f"--workdir={workdir}",
        f"--config.seed={seed}",
        *extra,
    ]
    os.makedirs(workdir, exist_ok=True)
    start = time.monotonic()
    with open(os.path.join(workdir, "stderr.txt"), "w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own CPU time
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - start
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"error: seed {seed} exited {proc.returncode}: {err.read()[-2000:]}")
    with open(os.path.join(workdir, "eval.json")) as f:
        results = json.load(f)
    return {
        "seed": seed,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
        **{k: results[k] for k in KEPT if k in results},
        **progress(workdir),
    }


# a validation's fields the record keeps (docs/main_job.md cites them at updates 600 and 1,200)
VALIDATION_KEPT = ("step", "loss", "source_sensitivity", "bleu", "distinct_hypotheses")


def progress(workdir: str) -> dict[str, Any]:
    """From a run's metrics file: every validation's :data:`VALIDATION_KEPT` fields
    (``validations``) and the median of the logged train steps' seconds per update
    (``median_step_s``; None when none was logged)."""
    validations, step_s = [], []
    with open(RunDir(workdir).metrics) as f:
        for line in f:
            row = json.loads(line)
            if row.get("split") == "eval":
                validations.append({k: row[k] for k in VALIDATION_KEPT if k in row})
            elif row.get("split") == "train" and "step_time_s" in row:
                step_s.append(row["step_time_s"])
    median = sorted(step_s)[len(step_s) // 2] if step_s else None
    return {"validations": validations, "median_step_s": median}


def run_all(seeds: list[int], jobs: int, root: str, extra: list[str]) -> list[dict[str, Any]]:
    """Each seed's run, ``jobs`` at a time; where the corpus is not prepared yet, the first
    seed alone first (it prepares the corpus and tokenizer the others then read)."""
    prepared = os.path.isdir(os.path.join(data_options.default_data_dir(), "libreoffice_help"))
    runs = []
    if not prepared:
        runs.append(run_seed(seeds[0], os.path.join(root, f"seed_{seeds[0]}"), extra))
        runs[0]["prepared_here"] = True
        seeds = seeds[1:]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_seed, s, os.path.join(root, f"seed_{s}"), extra) for s in seeds]
        runs += [f.result() for f in futures]
    return runs


def table(record: dict[str, Any]) -> str:
    """README's table of the main job: a row per seed."""
    rows = [
        "| seed | test BLEU (beam 5, all {n}) | chrF | BLEU, unseen sources ({u}) | distinct "
        "hypotheses | source sensitivity, test (nats) | greedy BLEU, validation (first {v}) "
        "| sensitivity, validation | wall-clock |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    first = record["runs"][0]
    rows[0] = rows[0].format(
        n=f"{first['test_sentences']:,}",
        u=f"{first['test_unseen_sentences']:,}",
        v=first["eval_bleu_sentences"],
    )
    for r in record["runs"]:
        rows.append(
            f"| {r['seed']} | {r['test_bleu']:.2f} | {r['test_chrf']:.2f} "
            f"| {r['test_unseen_bleu']:.2f} | {r['test_distinct_hypotheses']:.0%} "
            f"| {r['test_source_sensitivity']:.2f} | {r['eval_bleu_greedy']:.2f} "
            f"| {r['eval_source_sensitivity']:.2f} | {r['wall_seconds']:.0f} s |"
        )
    return "\n".join(rows)


def arm_table(record: dict[str, Any]) -> str:
    """An arm's table (docs/main_job.md; the default's too, beside them): each seed's test
    BLEU / chrF, distinct hypotheses, the validation source sensitivity at every validation of
    the record's first run (the default's: 600, 1,200 and 1,800) and the run's wall-clock."""
    steps = [v["step"] for v in record["runs"][0]["validations"]]
    rows = [
        f"| seed | test BLEU / chrF | distinct | source sensitivity at "
        f"{' / '.join(map(str, steps))} (validation) | wall-clock |",
        "|---|---|---|---|---|",
    ]
    for r in record["runs"]:
        at = {v["step"]: v["source_sensitivity"] for v in r["validations"]}
        # a source-blind run's sensitivity is ±1e-9: shown as 0.00, not -0.00
        sens = " / ".join(f"{at[s]:.2f}".replace("-0.00", "0.00") for s in steps)
        rows.append(
            f"| {r['seed']} | {r['test_bleu']:.2f} / {r['test_chrf']:.2f} "
            f"| {r['test_distinct_hypotheses']:.1%} | {sens} | {r['wall_seconds']:.0f} s |"
        )
    return "\n".join(rows)


# the blocks made from the default's record: a --docs file gets main-job, and each other one it
# has markers of
BLOCKS = {"main-job": table, "main-job-scores": arm_table}


def write_docs(doc: str, record: dict[str, Any]) -> list[str]:
    """Write the record's blocks into ``doc``; the names written. The default's record: its
    :data:`BLOCKS` (``main-job`` always, the others where ``doc`` has their markers). An arm's
    record: its :func:`arm_table` between ``main-job-arm-<arm>`` markers (they must be there)."""
    if record.get("arm"):
        name = f"main-job-arm-{record['arm']}"
        records.replace_block(doc, name, arm_table(record))
        return [name]
    with open(doc) as f:
        text = f.read()
    names = [n for n in BLOCKS if n == "main-job" or f"<!-- generated: {n} -->" in text]
    for name in names:
        records.replace_block(doc, name, BLOCKS[name](record))
    return names


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--jobs", type=int, default=2, help="runs side by side")
    parser.add_argument("--workdir_root", default="/tmp/deepnet_main_job")
    parser.add_argument("--out", required=True, help="the record's path")
    parser.add_argument(
        "--arm",
        default=None,
        help="name of the changed job the overrides make (lowercase letters, digits, '-')",
    )
    parser.add_argument(
        "--docs",
        action="append",
        default=[],
        help="write the tables between this file's markers (BLOCKS; repeatable)",
    )
    args, extra = parser.parse_known_args()
    if args.arm is not None and not re.fullmatch(r"[a-z0-9-]+", args.arm):
        parser.error(f"--arm must be lowercase letters, digits and '-', got {args.arm!r}")
    if args.arm is not None and not extra:
        parser.error("--arm needs the overrides that make it (e.g. --config.model.norm=rmsnorm)")
    seeds = [int(s) for s in args.seeds.split(",")]
    header = records.header()  # the commit the runs start from
    start = time.monotonic()
    runs = run_all(seeds, args.jobs, args.workdir_root, extra)
    record = {
        **header,
        "arm": args.arm,
        "concurrent_runs": args.jobs,
        "overrides": extra,
        "wall_seconds_all": round(time.monotonic() - start, 1),
        "runs": runs,
    }
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    for doc in args.docs:
        write_docs(doc, record)
    print(arm_table(record) if args.arm else table(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
