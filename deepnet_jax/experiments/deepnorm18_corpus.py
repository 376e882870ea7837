"""DeepNorm 18L-18L on the main job's corpus, seed by seed and at two peak learning rates: which
seeds read their source, and the encoder's LayerNorm inputs that predict it (docs/reproduction.md,
"Why DeepNorm 18L-18L ignores its source on some seeds").

=========  ============================================================  ========  ==========
setting    runs (seed at peak learning rate)                             updates   validated
=========  ============================================================  ========  ==========
smoke      common's 16-32-2 DeepNorm on the synthetic reversal task:     8         every 4
           seeds 0 and 1 at 3e-3
probes     the main job at 18L-18L: seeds 0–4 at 2e-3 (its peak),        500       every 100
           seeds 0 and 2 at 1e-3                                                   (no BLEU)
full       the main job at 18L-18L: seeds 0 and 1 at 2e-3, seeds 0 and   1,800     every 600
           2 at 1e-3                                                               (BLEU on
                                                                                   300)
=========  ============================================================  ========  ==========

Every run measures the trainer's diagnostics every 100 updates (smoke: 2): each layer's
gradient norm and each LayerNorm's input (``grad_norm/<side>/all``, ``ln_input/<side>/<norm>``).
A DeepNorm sublayer computes LN(α·x + G(x)); backwards, its LayerNorm divides the gradient by
the norm of its input and the residual path multiplies it by α, so each sublayer passes down
about ‖α·x‖ / ‖α·x + G(x)‖ of the gradient it gets (DeepNet §3, with α = 1 for Post-LN).
:func:`deepnorm18_corpus_report.predicted_attenuation` multiplies those ratios over the
encoder's LayerNorms above its first layer (layers 2 … N, two each): the first layer's gradient
against the last's, predicted from the LN inputs; the measured one is
``grad_norm/encoder/all`` first ÷ last.

Run: ``python -m deepnet_jax.experiments.deepnorm18_corpus --setting=probes --out=DIR``
(``--shard=i/n`` beside the other shards into the same ``--out``; a stopped run resumes from
its checkpoint); writes ``deepnorm18_corpus.json`` (the runs: key, final figures, each
validation's, the encoder's diagnostics) and ``deepnorm18_corpus.md``
(:mod:`deepnorm18_corpus_report`).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import ml_collections

from deepnet_jax.common import console
from deepnet_jax.configs import experiment_base, experiment_rows
from deepnet_jax.experiments import common, opening, report, results_file, resumable
from deepnet_jax.experiments import deepnorm18_corpus_report as corpus_report
from deepnet_jax.model import constants

NAME = "deepnorm18_corpus"
FLAGS_FROM = ("resumable",)  # --shard, --checkpoint_every (opening.own_flags)
# setting → (runs as (seed, peak lr), updates, validation every, greedy-BLEU sentences,
# diagnostics every)
SETTINGS: dict[str, tuple[tuple[tuple[int, float], ...], int, int, int, int]] = {
    "smoke": (((0, 3e-3), (1, 3e-3)), 8, 4, 0, 2),
    "probes": (((0, 2e-3), (1, 2e-3), (2, 2e-3), (3, 2e-3), (4, 2e-3), (0, 1e-3), (2, 1e-3)),
               500, 100, 0, 100),
    "full": (((0, 2e-3), (1, 2e-3), (0, 1e-3), (2, 1e-3)), 1800, 600, 300, 100),
}  # fmt: skip
LAYERS = {"smoke": 2, "probes": 18, "full": 18}


def base_config(setting: str) -> ml_collections.ConfigDict:
    """The setting's model and data: the main job at 18L-18L (smoke: common's smoke model),
    DeepNorm, with its validation and diagnostics cadence; the seed and peak come per run."""
    _, updates, eval_every, sentences, every = SETTINGS[setting]
    if setting == "smoke":
        c = experiment_base.base_config("smoke")
    else:
        c = experiment_base.main_job_config()
    warmup = 0 if setting == "smoke" else c.schedule.warmup_steps
    c = experiment_rows.with_run(c, "deepnorm", LAYERS[setting], 2e-3, warmup, updates)
    c.eval_every, c.decode.eval_sentences, c.final_split = eval_every, sentences, ""
    c.diagnostics.every, c.diagnostics.plot = every, False
    return c


def run_config(base: ml_collections.ConfigDict, key: dict[str, Any]) -> ml_collections.ConfigDict:
    """``base`` with the run's seed and peak learning rate."""
    c = ml_collections.ConfigDict(base.to_dict())
    c.seed, c.optimizer.learning_rate = key["seed"], key["lr"]
    return c


def residual_norm(config: ml_collections.ConfigDict) -> float:
    """‖α·x‖ of the encoder at initialization: α·√d_model (a LayerNorm's output has norm
    √d_model; DeepNet's α of the encoder for the model's depths)."""
    m = config.model
    alpha = constants.deepnorm(
        m.arch, m.num_encoder_layers, m.num_decoder_layers, m.deepnorm_variant
    )["encoder"]["alpha"]
    return alpha * math.sqrt(m.d_model)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train this shard's runs of the setting not yet in ``<out>/deepnorm18_corpus.json``,
    then write the tables of every run the file holds; returns the results payload."""
    args, base, out = opening.start(argv, NAME, base_config, tuple(SETTINGS))
    try:
        index, count = resumable.parse_shard(resumable.SHARD.value)
    except ValueError as e:
        sys.exit(console.error_line(e))
    runs = [{"seed": s, "lr": lr} for s, lr in SETTINGS[args.setting][0]]
    entropy = None if args.setting == "smoke" else common.unigram_entropy(base)
    settings = {"runs": runs, "alpha_x": residual_norm(base), "unigram_entropy": entropy}
    results = results_file.Results(out, NAME, args.setting, settings, head=args.header)
    payload = common.run_validated_grid(
        results, runs[index::count], lambda key: run_config(base, key), entropy, out
    )
    text = corpus_report.tables(payload)
    print(text)
    print(f"wrote {results.path}, {report.write_table(out, NAME, text)}")
    return payload


if __name__ == "__main__":
    main(sys.argv[1:])
