"""Every table of the docs whose figures come from a committed results file, generated from it,
and the tables made from the code's own declarations (what a run leaves in its workdir).

    python -m deepnet_jax.experiments.docs_tables          # rewrite every such table
    python -m deepnet_jax.experiments.docs_tables --check  # exit 1 naming the stale ones

:data:`TABLES` is the registry: each entry names a markdown file, the block of it between
``<!-- generated: NAME -->`` and ``<!-- end: NAME -->`` (:mod:`deepnet_jax.common.records`),
the results files under ``docs/reproduction/`` it is made from (none for a table made from the
code) and the function that renders it from their payloads. ``tests/test_docs_tables.py``
regenerates every entry and fails on any difference, and on a marker in README.md or
docs/*.md that no entry (nor :data:`ELSEWHERE`) generates. An experiment that adds runs to a
results file changes its tables, and a new entry of ``runs.workdir.ENTRIES`` README's: rerun
this. Blocks other commands write from their records are :data:`ELSEWHERE` (each checked by
its own test; :mod:`~deepnet_jax.experiments.docs_blocks_elsewhere`); one registered before its
record exists is pending (:data:`RECORD_FILES`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import glob
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from deepnet_jax.common import console, records
from deepnet_jax.experiments import deepnorm18_corpus_report as dn18
from deepnet_jax.experiments import depth_table_recipe_grid as recipe_grid
from deepnet_jax.experiments import depth_table_views as views
from deepnet_jax.experiments import (
    dropout_gap,
    late_collapse,
    loss_spike,
    lr_tolerance,
    main_job_probes,
    model_update,
    results_provenance,
)
from deepnet_jax.experiments import lr_transfer_report as transfer
from deepnet_jax.experiments import postln_main_job as postln
from deepnet_jax.experiments import thousand_layers_report as thousand
from deepnet_jax.experiments.docs_blocks_elsewhere import ELSEWHERE, RECORD_FILES
from deepnet_jax.runs import workdir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_RESULTS = "docs/reproduction"
QUICK = f"{_RESULTS}/depth_table_quick.json"
LONG500 = f"{_RESULTS}/depth_table_long500.json"  # the 500L-500L row at 1,600 updates
INIT = f"{_RESULTS}/depth_table_init.json"
CORPUS = f"{_RESULTS}/depth_table_corpus.json"
MODERN_LM = f"{_RESULTS}/depth_table_modern_lm.json"
SINCE_DEEPNET = f"{_RESULTS}/depth_table_since_deepnet.json"
LR_SINCE_DEEPNET = f"{_RESULTS}/lr_tolerance_since_deepnet.json"
GATED = f"{_RESULTS}/model_update_gated.json"
GATED_FIRST = f"{_RESULTS}/model_update_gated_first.json"
MU_SINCE_DEEPNET = f"{_RESULTS}/model_update_since_deepnet.json"
LR_TRANSFER = f"{_RESULTS}/lr_transfer_quick.json"
LR_QUICK = f"{_RESULTS}/lr_tolerance_quick.json"
MU_QUICK = f"{_RESULTS}/model_update_quick.json"
RECIPE = f"{_RESULTS}/depth_table_recipe.json"
ONSET = f"{_RESULTS}/thousand_layers_onset.json"
THOUSAND = f"{_RESULTS}/thousand_layers_quick.json"
# the onset setting at other learning rates and dropout (--lr, --warmup, --dropout)
ONSET_DROPOUT = f"{_RESULTS}/thousand_layers_onset_dropout.json"  # 50L, 200L
ONSET_DROPOUT_500 = f"{_RESULTS}/thousand_layers_onset_dropout_500.json"
ONSET_LR3 = f"{_RESULTS}/thousand_layers_onset_lr3e-3.json"
ONSET_LR5 = f"{_RESULTS}/thousand_layers_onset_lr5e-3.json"
DROPOUT_GAP = f"{_RESULTS}/dropout_gap_quick.json"
LOSS_SPIKE = f"{_RESULTS}/loss_spike_quick.json"
LOSS_SPIKE_SINKHORN = f"{_RESULTS}/loss_spike_sinkhorn.json"
LATE_COLLAPSE = f"{_RESULTS}/late_collapse_quick.json"
LATE_COLLAPSE_LRT = f"{_RESULTS}/late_collapse_lr_transfer_runs.json"  # lr_transfer's, retrained
DROPOUT_GAP_DN18 = f"{_RESULTS}/dropout_gap_deepnorm18.json"
POSTLN_MAIN_JOB = f"{_RESULTS}/postln_main_job_quick.json"
DN18_PROBES = f"{_RESULTS}/deepnorm18_corpus_probes.json"
DN18_FULL = f"{_RESULTS}/deepnorm18_corpus_full.json"
MAIN_JOB_PROBES = f"{_RESULTS}/main_job_probes.json"
_ALL_RESULTS = results_provenance.results_files(ROOT)  # every results file, for its provenance


@dataclasses.dataclass(frozen=True)
class Table:
    """A generated table: ``render(*payloads)`` of ``results`` (paths from the repository
    root, loaded as JSON in that order; none: ``render()`` reads the code) is the text of block
    ``name`` of ``doc``."""

    doc: str
    name: str
    results: tuple[str, ...]
    render: Callable[..., str]


def _task(render: Callable[..., str], task: str) -> Callable[..., str]:
    return functools.partial(render, task=task)


_REPRODUCTION = "docs/reproduction.md"
TABLES: tuple[Table, ...] = (
    Table("README.md", "run-dir", (), workdir.docs_table),
    *(
        Table(_REPRODUCTION, f"depth-table-quick-{task}{suffix}", (QUICK,), _task(render, task))
        for task in ("reversal64", "reversal")
        for suffix, render in (
            ("", views.verdicts),
            ("-onsets", views.onsets),
            ("-calls", views.calls),
        )
    ),
    Table(_REPRODUCTION, "depth-table-quick-costs", (QUICK,), views.cpu_costs),
    *(
        Table(
            _REPRODUCTION, f"depth-table-long500{suffix}", (LONG500,), _task(render, "reversal64")
        )
        for suffix, render in (("", views.verdicts), ("-onsets", views.onsets))
    ),
    Table(
        _REPRODUCTION,
        "results-provenance",
        _ALL_RESULTS,
        functools.partial(results_provenance.docs_table, _ALL_RESULTS),
    ),
    Table(_REPRODUCTION, "depth-table-recipe", (RECIPE,), recipe_grid.recipe_grid),
    *(
        Table(_REPRODUCTION, f"lr-transfer-{t}", (LR_TRANSFER,), _task(transfer.docs_table, t))
        for t in ("reversal64", "shakespeare")
    ),
    Table(_REPRODUCTION, "model-update-quick", (MU_QUICK,), model_update.warmups_table),
    Table(_REPRODUCTION, "lr-tolerance-quick", (LR_QUICK,), lr_tolerance.grid_table),
    Table(_REPRODUCTION, "thousand-layers-quick", (THOUSAND,), thousand.docs_table),
    Table(_REPRODUCTION, "thousand-layers-onset", (ONSET,), thousand.docs_table),
    Table(
        _REPRODUCTION,
        "thousand-layers-dropout",
        (ONSET, THOUSAND, ONSET_DROPOUT, ONSET_DROPOUT_500),
        functools.partial(thousand.variants_table, depths=(50, 200, 500)),
    ),
    Table(
        _REPRODUCTION,
        "thousand-layers-lr",
        (ONSET, ONSET_LR3, ONSET_LR5),
        functools.partial(thousand.variants_table, depths=(200,)),
    ),
    Table(_REPRODUCTION, "depth-table-corpus", (CORPUS,), views.corpus_runs),
    Table(_REPRODUCTION, "dropout-gap", (DROPOUT_GAP,), dropout_gap.docs_table),
    Table(_REPRODUCTION, "dropout-gap-deepnorm18", (DROPOUT_GAP_DN18,), dropout_gap.docs_table),
    Table("docs/schemes.md", "loss-spike", (LOSS_SPIKE,), loss_spike.docs_table),
    Table("docs/schemes.md", "loss-spike-mhc", (LOSS_SPIKE_SINKHORN,), loss_spike.docs_table),
    Table(_REPRODUCTION, "late-collapse", (LATE_COLLAPSE,), late_collapse.docs_table),
    Table(
        _REPRODUCTION,
        "late-collapse-lr-transfer",
        (LATE_COLLAPSE_LRT, LR_TRANSFER),
        late_collapse.retrained_table,
    ),
    Table(_REPRODUCTION, "postln-main-job-gradients", (POSTLN_MAIN_JOB,), postln.docs_table),
    Table(
        _REPRODUCTION,
        "depth-table-corpus-gradient-ratios",
        (CORPUS,),
        views.encoder_gradient_ratios,
    ),
    Table(_REPRODUCTION, "deepnorm18-probes", (DN18_PROBES,), dn18.sensitivity_table),
    Table(_REPRODUCTION, "deepnorm18-probes-ln-inputs", (DN18_PROBES,), dn18.ln_input_table),
    Table(_REPRODUCTION, "deepnorm18-full", (DN18_FULL,), dn18.final_table),
    Table(_REPRODUCTION, "deepnorm18-full-ln-inputs", (DN18_FULL,), dn18.ln_input_table),
    Table(_REPRODUCTION, "depth-table-init", (INIT, QUICK), views.init_cells),
    Table("docs/main_job.md", "main-job-probes", (MAIN_JOB_PROBES,), main_job_probes.docs_table),
    Table(
        "docs/schemes.md",
        "depth-table-since-deepnet",
        (SINCE_DEEPNET, QUICK),
        views.since_deepnet_verdicts,
    ),
    Table(
        "docs/schemes.md",
        "lr-tolerance-since-deepnet",
        (LR_SINCE_DEEPNET,),
        lr_tolerance.largest_lr_table,
    ),
    Table("docs/schemes.md", "lr-tolerance-papers", (LR_QUICK,), lr_tolerance.largest_lr_table),
    Table("docs/schemes.md", "model-update-papers", (MU_QUICK,), model_update.warmup_table),
    Table(
        "docs/schemes.md",
        "model-update-since-deepnet",
        (MU_SINCE_DEEPNET,),
        model_update.warmup_table,
    ),
    Table(
        "docs/blocks.md",
        "model-update-gated-first",
        (GATED_FIRST,),
        model_update.first_update_table,
    ),
    Table("docs/blocks.md", "model-update-gated", (GATED,), model_update.gated_table),
    Table(
        "docs/blocks.md",
        "depth-table-modern-lm",
        (MODERN_LM,),
        _task(views.seed_values, "shakespeare"),
    ),
)
_MARKER = re.compile(r"<!-- generated: (\S+) -->")


def _load(path: str) -> dict[str, Any]:
    with open(os.path.join(ROOT, path)) as f:
        return json.load(f)


def render(table: Table) -> str:
    """The block's text as its results files give it."""
    return table.render(*(_load(path) for path in table.results)).strip()


def current(table: Table) -> str:
    """The block's text as the doc has it."""
    return records.block(os.path.join(ROOT, table.doc), table.name)


def docs() -> list[str]:
    """The markdown files whose markers are checked: README.md and docs/*.md (from the
    repository root)."""
    found = glob.glob(os.path.join(ROOT, "docs", "*.md"))
    return ["README.md", *sorted(os.path.relpath(p, ROOT) for p in found)]


def markers() -> list[tuple[str, str]]:
    """(doc, block name) of every ``<!-- generated: NAME -->`` marker in :func:`docs`."""
    out = []
    for doc in docs():
        with open(os.path.join(ROOT, doc)) as f:
            out += [(doc, name) for name in _MARKER.findall(f.read())]
    return out


def unregistered() -> list[tuple[str, str]]:
    """The markers that neither :data:`TABLES` nor :data:`ELSEWHERE` generates."""
    known = {(t.doc, t.name) for t in TABLES} | set(ELSEWHERE)
    return [m for m in markers() if m not in known]


def pending() -> list[tuple[str, str]]:
    """The :data:`ELSEWHERE` entries whose record (:data:`RECORD_FILES`) is not there yet."""
    return [k for k, path in RECORD_FILES.items() if not os.path.isfile(os.path.join(ROOT, path))]


def elsewhere_problems() -> list[str]:
    """One line per :data:`ELSEWHERE` entry out of step with the docs: its markers missing
    (unless :func:`pending`), or a pending entry's markers there before its record."""
    found, waiting, out = set(markers()), set(pending()), []
    for key, command in ELSEWHERE.items():
        doc, name = key
        if key in waiting and key in found:
            out.append(f"{doc} block {name} has markers but {RECORD_FILES[key]} is not there")
        elif key not in waiting and key not in found:
            out.append(f"{doc} block {name} has no markers (made by: {command})")
    return out


def stale() -> list[Table]:
    """The entries whose block differs from what their results files give (or whose markers
    are missing)."""
    out = []
    for table in TABLES:
        try:
            if current(table) != render(table):
                out.append(table)
        except ValueError:  # the markers are not there once each
            out.append(table)
    return out


def main(argv: list[str] | None = None) -> int:
    """Rewrite every stale block (``--check``: only name them); 1 if any was stale under
    ``--check`` or a marker has no generator, else 0."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    failed = False
    tables = stale()
    if not tables:
        print(f"all {len(TABLES)} generated tables match their results files")
    for table in tables:
        if args.check:
            source = ", ".join(table.results) or table.render.__module__
            print(f"stale: {table.doc} block {table.name} (from {source})")
            failed = True
            continue
        try:
            records.replace_block(os.path.join(ROOT, table.doc), table.name, render(table))
            print(f"wrote {table.doc} block {table.name}")
        except ValueError as e:  # its markers are not there once each
            print(console.error_line(e))
            failed = True
    for doc, name in unregistered():
        print(console.error_line(f"{doc} block {name} has no generator (experiments.docs_tables)"))
        failed = True
    for problem in elsewhere_problems():
        print(console.error_line(problem))
        failed = True
    for key in pending():
        print(f"pending: {key[0]} block {key[1]}, no {RECORD_FILES[key]} yet ({ELSEWHERE[key]})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
