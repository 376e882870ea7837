"""The main job's design probes: which of its choices make the decoder read its source, and how
soon (docs/main_job.md, "When the source starts to matter").

Each probe is the main job (configs/default.py: 6L-6L DeepNorm, d 128, on the LibreOffice help
pages) with one thing changed, trained for 800 updates and validated every 200 on 100
sentences: the source sensitivity (the validation NLL with each row's source swapped for
another row's, minus the NLL with its own: ≈ 0 for a decoder that ignores its source), greedy
BLEU and the validation NLL.

==========  =============================================================  ========  =========
setting     runs                                                           updates   validated
==========  =============================================================  ========  =========
smoke       common's smoke model on the synthetic reversal task: the base  8         every 4
            and dropout 0
probes      the :data:`PROBES` rows on the main job                        800       every 200
                                                                                     (BLEU on
                                                                                     100)
==========  =============================================================  ========  =========

Run: ``python -m deepnet_jax.experiments.main_job_probes --setting=probes --out=DIR``
(``--shard=i/n`` beside the other shards into the same ``--out``; a stopped run resumes from
its checkpoint); writes ``main_job_probes.json`` (each run's key, final figures and each
validation's) and ``main_job_probes.md`` (:func:`docs_table`).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import ml_collections

from deepnet_jax.common import console
from deepnet_jax.configs import experiment_base, experiment_rows
from deepnet_jax.experiments import common, opening, report, results_file, resumable

NAME = "main_job_probes"
FLAGS_FROM = ("resumable",)  # --shard, --checkpoint_every (opening.own_flags)


@dataclasses.dataclass(frozen=True)
class Probe:
    """One row: the main job with ``fields`` (dotted config paths) set, as the experiments' row
    ``row`` (a scheme's name: :func:`deepnet_jax.configs.experiment_rows.with_run`) with
    ``layers`` per side (None: the base's)."""

    label: str
    row: str = "deepnorm"
    layers: int | None = None
    fields: tuple[tuple[str, Any], ...] = ()


_NARROW = (("model.d_model", 64), ("model.ffn_dim", 256))  # the previous default's width
# probe name → probe (a name is the run's key in the results file, not a scheme's: the Post-LN
# probe is named for the scheme it trains)
PROBES: dict[str, Probe] = dict([
    ("narrow_18l", Probe("18L-18L d64, 4 heads (the previous default's model)", layers=18,
                         fields=_NARROW)),
    ("narrow_18l_2heads", Probe("18L-18L d64, 2 heads (head width 32)", layers=18,
                                fields=(*_NARROW, ("model.num_heads", 2)))),
    ("main_job", Probe("6L-6L d128, FFN 512 (the main job's model)")),
    ("shared_embeddings", Probe("6L-6L d128, shared source/target embeddings",
                                fields=(("model.share_embeddings", True),))),
    ("lr_4e-3", Probe("6L-6L d128, lr 4e-3 over 200 warm-up updates",
                      fields=(("optimizer.learning_rate", 4e-3),
                              ("schedule.warmup_steps", 200)))),
    ("post_ln", Probe("6L-6L d128, **Post-LN**", row="post_ln")),
    ("label_smoothing_0", Probe("6L-6L d128, label smoothing 0",
                                fields=(("label_smoothing", 0.0),))),
    ("dropout_0", Probe("6L-6L d128, dropout 0", fields=(("model.dropout", 0.0),))),
    ("seed_1", Probe("6L-6L d128, seed 1", fields=(("seed", 1),))),
])  # fmt: skip
# setting → (rows, updates, validation every, greedy-BLEU sentences)
SETTINGS: dict[str, tuple[tuple[str, ...], int, int, int]] = {
    "smoke": (("main_job", "dropout_0"), 8, 4, 0),
    "probes": (tuple(PROBES), 800, 200, 100),
}


def base_config(setting: str) -> ml_collections.ConfigDict:
    """The setting's base: the main job (smoke: common's smoke model) with its validation
    cadence and no final split; each row's changes come per run."""
    _, updates, eval_every, sentences = SETTINGS[setting]
    if setting == "smoke":
        c = experiment_base.base_config("smoke")
    else:
        c = experiment_base.main_job_config()
    c.total_steps, c.eval_every, c.decode.eval_sentences = updates, eval_every, sentences
    c.final_split = ""
    if setting == "smoke":  # 8 updates: constant at a rate that moves the tiny model
        c.optimizer.learning_rate, c.schedule.warmup_steps = 3e-3, 0
    return c


def run_config(base: ml_collections.ConfigDict, key: dict[str, Any]) -> ml_collections.ConfigDict:
    """``base`` with row ``key["row"]``'s scheme, depth and fields."""
    probe = PROBES[key["row"]]
    layers = probe.layers or base.model.num_encoder_layers
    lr, warmup = base.optimizer.learning_rate, base.schedule.warmup_steps
    c = experiment_rows.with_run(base, probe.row, layers, lr, warmup, base.total_steps)
    for path, value in probe.fields:
        *parents, leaf = path.split(".")
        node = c
        for name in parents:
            node = node[name]
        if leaf not in node:
            raise KeyError(f"{path}: not a config field")
        node[leaf] = value
    return c


def _cell(validation: dict[str, Any]) -> str:
    if not validation:
        return "—"
    figures = [validation.get(k) for k in ("source_sensitivity", "bleu", "loss")]
    return " / ".join("—" if v is None else f"{v:.2f}" for v in figures)


def docs_table(payload: dict[str, Any]) -> str:
    """A row per run in :data:`PROBES`' order: source sensitivity (nats) / greedy BLEU /
    validation NLL at each validation, and the share of distinct greedy hypotheses at the last."""
    runs = sorted(payload["runs"], key=lambda r: list(PROBES).index(r["row"]))
    updates = sorted({v["update"] for r in runs for v in r["validation"]})
    sentences = payload["settings"]["sentences"]
    head = ["run", *(f"update {u:,}" for u in updates)]
    head += (
        [f"distinct hypotheses at update {updates[-1]:,} ({sentences} sentences)"]
        if sentences
        else []
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in runs:
        at = {v["update"]: v for v in run["validation"]}
        cells = [PROBES[run["row"]].label, *(_cell(at.get(u, {})) for u in updates)]
        if sentences:
            distinct = at.get(updates[-1], {}).get("distinct_hypotheses")
            cells.append("—" if distinct is None else f"{distinct:.0%}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train this shard's runs of the setting not yet in ``<out>/main_job_probes.json``, then
    write the table of every run the file holds; returns the results payload."""
    args, base, out = opening.start(argv, NAME, base_config, tuple(SETTINGS))
    try:
        index, count = resumable.parse_shard(resumable.SHARD.value)
    except ValueError as e:
        sys.exit(console.error_line(e))
    rows, _, _, sentences = SETTINGS[args.setting]
    entropy = None if args.setting == "smoke" else common.unigram_entropy(base)
    settings = {"rows": list(rows), "sentences": sentences, "unigram_entropy": entropy}
    results = results_file.Results(out, NAME, args.setting, settings, head=args.header)
    keys = [{"row": row} for row in rows]
    payload = common.run_validated_grid(
        results, keys[index::count], lambda key: run_config(base, key), entropy, out
    )
    text = docs_table(payload)
    print(text)
    print(f"wrote {results.path}, {report.write_table(out, NAME, text)}")
    return payload


if __name__ == "__main__":
    main(sys.argv[1:])
