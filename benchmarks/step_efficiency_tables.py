"""docs/benchmarks.md's tables of ``benchmarks/step_efficiency.py`` records ("CPU efficiency,
and what each optimization switch measures").

* ``step-efficiency`` (:func:`table`): one run's variants; ``python -m benchmarks.step_efficiency
  --out=docs/records/step_efficiency.json --docs=docs/benchmarks.md`` writes it.
* ``step-efficiency-allocator`` (:func:`allocator_table`): the same variants run several times,
  plain and under other glibc allocator settings (the summary row's ``malloc_env``), side by
  side. Each run writes its own record; then::

      python -m benchmarks.step_efficiency_tables --docs=docs/benchmarks.md [--runs=a.json,b.json]

  (default ``--runs``: :data:`ALLOCATOR_RUNS`) writes the block from them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

from deepnet_jax.common import records

BLOCK = "step-efficiency"
ALLOCATOR_BLOCK = "step-efficiency-allocator"
ALLOCATOR_RUNS = (  # from the repository root: three pairs, plain then under hugetlb=1
    *(f"docs/records/step_efficiency_unrolled{n}.json" for n in ("", "_2", "_3")),
    *(f"docs/records/step_efficiency_unrolled_hugetlb{n}.json" for n in ("", "_2", "_3")),
)


def _switch(fields: dict[str, Any]) -> str:
    return ", ".join(f"`{k}={v}`" for k, v in fields.items()) or "—"


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in record["rows"] if r["row"] == "summary")


def _variants(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in record["rows"] if r["row"] == "variant"]


def _env(record: dict[str, Any]) -> str:
    env = _summary(record)["malloc_env"]
    return ", ".join(f"`{k}={v}`" for k, v in env.items()) or "plain"


def table(record: dict[str, Any]) -> str:
    """The ``step-efficiency`` block: the run's matmul throughput (the efficiency's
    denominator), model GFLOP per step, batch, devices and allocator settings, then per variant
    its switch (model fields), median step time, step time ÷ the first variant's, tokens per
    second, efficiency (model FLOP/s ÷ matmul FLOP/s; the largest in bold), compile time and the
    fastest and slowest round."""
    s, variants = _summary(record), _variants(record)
    best = max(r["efficiency"] for r in variants)
    gflops = ", ".join(sorted({f"{r['model_gflops_per_step']:.1f}" for r in variants}))
    env = "none" if _env(record) == "plain" else _env(record)
    lines = [
        f"Matmul throughput measured in the run: {s['matmul_tflops_per_s']:.3f} TFLOP/s "
        f"({s['matmul_tflops_per_s_before']:.3f} before the steps); model FLOPs per step: "
        f"{gflops} GFLOP; batch {s['batch'][0]} × {s['batch'][1]}; {s['devices']}; "
        f"allocator settings: {env}. " + records.made_line(record),
        "",
        f"| variant | switch | median s/step | vs {variants[0]['variant']} | tokens/s "
        "| efficiency | compile s | rounds min–max |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in variants:
        eff = f"{r['efficiency'] * 100:.1f}%"
        eff = f"**{eff}**" if r["efficiency"] == best else eff
        rounds = r["rounds_step_s"]
        lines.append(
            f"| {r['variant']} | {_switch(r['fields'])} | {r['step_s']:.3f} "
            f"| {r['vs_first']:.3f} | {r['tokens_per_s']:,} | {eff} | {r['compile_s']:.1f} "
            f"| {min(rounds):.2f}–{max(rounds):.2f} |"
        )
    return "\n".join(lines)


def _span(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{lo:{fmt}}–{hi:{fmt}}"


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def allocator_table(runs: list[dict[str, Any]]) -> str:
    """The ``step-efficiency-allocator`` block from several records of the same variants: per
    variant (the first run's, in its order) its switches, its median step time in each run,
    grouped by allocator settings (plain first), the median over each group's runs of the page
    faults per step, and the range over all runs of the efficiency and the compile time."""
    groups: dict[str, list[int]] = {}  # allocator settings: indices of their runs
    for i in sorted(range(len(runs)), key=lambda i: _env(runs[i]) != "plain"):
        groups.setdefault(_env(runs[i]), []).append(i)
    dates = sorted(r["date"] for r in runs)
    tflops = [_summary(r)["matmul_tflops_per_s"] for r in runs]
    lines = [
        f"{_runs(len(runs))}, {dates[0]} to {dates[-1]}, at {records.commits_text(runs)}; "
        f"{'; '.join(sorted({r['machine'] for r in runs}))}; matmul throughput measured in "
        f"the runs: {_span(tflops, '.3f')} TFLOP/s.",
        "",
        "| variant | switches "
        + "".join(f"| median s/step, {env} ({_runs(len(g))}) " for env, g in groups.items())
        + f"| page faults/step, {' → '.join(groups)} | efficiency, all {_runs(len(runs))} "
        "| compile s |",
        "|---|---|" + "---:|" * len(groups) + "---|---|---|",
    ]
    for first in _variants(runs[0]):
        name = first["variant"]
        rows = [next((r for r in _variants(run) if r["variant"] == name), None) for run in runs]
        steps, faults = [], []
        for group in groups.values():
            mine = [rows[i] for i in group if rows[i] is not None]
            steps.append(", ".join(f"{r['step_s']:.3f}" for r in mine) or "—")
            median = statistics.median(r["page_faults_per_step"] for r in mine) if mine else None
            faults.append("—" if median is None else f"{median:,.0f}")
        found = [r for r in rows if r is not None]
        eff = _span([r["efficiency"] * 100 for r in found], ".1f") + "%"
        compile_s = _span([r["compile_s"] for r in found], ".1f")
        lines.append(
            f"| {name} | {_switch(first['fields'])} | {' | '.join(steps)} "
            f"| {' → '.join(faults)} | {eff} | {compile_s} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    """Write the ``step-efficiency-allocator`` block of ``--docs`` from the ``--runs`` records;
    return the block."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default=",".join(ALLOCATOR_RUNS), help="records, comma-separated")
    p.add_argument("--docs", required=True, help=f"write the {ALLOCATOR_BLOCK} block of this file")
    args = p.parse_args(argv)
    runs = []
    for path in filter(None, args.runs.split(",")):
        if not os.path.isfile(path):
            p.error(f"--runs: {path} is not there; allowed are step_efficiency records (--out)")
        with open(path) as f:
            runs.append(json.load(f))
    if not runs:
        p.error("--runs: no record given; allowed are comma-separated record paths")
    text = allocator_table(runs)
    records.replace_block(args.docs, ALLOCATOR_BLOCK, text)
    return text


if __name__ == "__main__":
    main(sys.argv[1:])
