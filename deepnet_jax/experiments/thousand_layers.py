"""DeepNet's 1,000-layer claim at the papers' tiny width: a 500L-500L encoder-decoder.

DeepNorm and, with identical settings, Post-LN train the DeepNet paper's tiny 64-128-2
encoder-decoder (d_model 64, FFN 128, 2 heads; its Figure 5) with 500 encoder and 500 decoder
layers on the synthetic sequence-reversal task (``data.dataset="synthetic_reversal"``: a random
sequence of 2–11 tokens drawn from 11 content symbols, the target is the sequence reversed then
EOS). Every run records its training loss and token accuracy every ``log_every`` updates, the
validation NLL and accuracy every ``eval_every`` updates, the model update ΔF (DeepNet's
Figure 5: ``deepnet_jax.training.diagnostics``, the decoder's output on the first validation batch
against θ₀) every ``every`` updates, the update at which the loss or a gradient became
non-finite (``nan_policy="halt"``), its wall and CPU time and its time per update.

Why the synthetic task and not the translation corpus: at this width and depth an update costs
the same few seconds whatever the batch (2 CPU cores spend it on the 1,000 layers' small
operations, not on arithmetic), so the budget is a few hundred updates per model, and in
that many updates the tiny corpus models barely leave the unigram level (``model_update``:
none 0.25 nats below it after 100 updates; the earlier tiny-model depth sweep on Ding:
validation NLL 5.629–5.822 against a unigram entropy of 6.222 after 200, docs/reproduction.md,
"What was tried before this design"), short of the 1-nat bar. The reversal task is learned
in that many updates, and its chance level is exact: :func:`blind_chance` is the accuracy and
NLL of the best predictor that does not read the source (it knows the target prefix and the
length distribution, not the sequence).

**Verdict** of a run: ``diverged`` (a non-finite loss or gradient, or a finite blow-up:
:func:`common.blew_up`), ``trained`` (final
validation NLL at least ``MARGIN_NATS`` = 1 nat below the unigram entropy of the validation
targets), otherwise ``stuck``. **Onset**: the first logged update whose training accuracy over
the log interval is at least the blind chance accuracy + ``ONSET_MARGIN``; also the updates to
reach 50% and 90% accuracy.

Settings (peak learning rate 1e-3 after a 50-update warm-up, dropout 0; smoke: 3e-3, 4):

=========  ====================  ====================  =======  ==================================
setting    depths (N L-N L)      schemes               updates  cost on 2 CPU cores (measured)
=========  ====================  ====================  =======  ==================================
smoke      2                     deepnorm, post_ln     10       < 1 min (16-32-2, CI)
onset      6, 18, 50, 100, 200   deepnorm              300      16 min (792 s CPU), machine shared
quick      500                   deepnorm, post_ln     300      49 min (2,110 s CPU), machine shared
=========  ====================  ====================  =======  ==================================

``--depths=6,50``, ``--lr``, ``--warmup``, ``--updates`` and ``--dropout`` change a setting's
depths (every scheme of the setting at each), peak learning rate, warm-up, updates and dropout
(use another ``--out``: a results file made with other settings is started afresh).

Run: ``python -m deepnet_jax.experiments.thousand_layers --setting=quick --out=DIR``; writes
``thousand_layers.json`` (every run's settings, curves, ΔF and results),
``thousand_layers.png`` (training accuracy, NLL and ΔF against updates; for ``onset`` also the
onset against depth) and ``thousand_layers.md``.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from typing import Any

import ml_collections
from absl import flags

from deepnet_jax.common.tokens import FIRST_CONTENT_ID
from deepnet_jax.configs import experiment_base, experiment_rows
from deepnet_jax.experiments import common, opening, report, results_file
from deepnet_jax.experiments import thousand_layers_report as tl_report
from deepnet_jax.experiments.thousand_layers_report import MARGIN_NATS
from deepnet_jax.runs import metrics

NAME = "thousand_layers"
# the task and optimizer every non-smoke run shares (fixed by the exploration reported in
# docs/reproduction.md before the quick run)
TASK = {"vocab_size": 16, "max_len": 12, "batch_size": 32, "dropout": 0.0}
SETTINGS: dict[str, dict[str, Any]] = {
    "smoke": {
        "runs": [("deepnorm", 2), ("post_ln", 2)],
        "lr": 3e-3,
        "warmup": 4,
        "steps": 10,
        "log_every": 2,
        "eval_every": 5,
        "every": 5,
    },
    "onset": {
        "runs": [("deepnorm", n) for n in (6, 18, 50, 100, 200)],
        "lr": 1e-3,
        "warmup": 50,
        "steps": 300,
        "log_every": 10,
        "eval_every": 100,
        "every": 50,
    },
    "quick": {
        "runs": [("deepnorm", 500), ("post_ln", 500)],
        "lr": 1e-3,
        "warmup": 50,
        "steps": 300,
        "log_every": 10,
        "eval_every": 100,
        "every": 25,
    },
}


_DEPTHS = flags.DEFINE_list("depths", None, "layers per side instead of the setting's depths")
_LR = flags.DEFINE_float("lr", None, "peak learning rate instead of the setting's")
_WARMUP = flags.DEFINE_integer("warmup", None, "warm-up updates instead of the setting's")
_UPDATES = flags.DEFINE_integer("updates", None, "updates per run instead of the setting's")
_DROPOUT = flags.DEFINE_float("dropout", None, f"dropout instead of {TASK['dropout']}")


def setting_with_overrides(setting: str) -> dict[str, Any]:
    """``SETTINGS[setting]`` with what ``--depths``, ``--lr``, ``--warmup``, ``--updates`` and
    ``--dropout`` change (each scheme of the setting runs at every ``--depths`` depth)."""
    s = {**SETTINGS[setting], "dropout": TASK["dropout"]}
    if _DEPTHS.value:
        try:
            depths = [int(n) for n in _DEPTHS.value]
        except ValueError:
            raise ValueError(f"--depths={','.join(_DEPTHS.value)}: not integers") from None
        schemes = list(dict.fromkeys(scheme for scheme, _ in s["runs"]))
        s["runs"] = [(scheme, n) for n in depths for scheme in schemes]
    for name, flag in (("lr", _LR), ("warmup", _WARMUP), ("steps", _UPDATES)):
        if flag.value is not None:
            s[name] = flag.value
    if _DROPOUT.value is not None:
        s["dropout"] = _DROPOUT.value
    return s


def base_config(setting: str) -> ml_collections.ConfigDict:
    """``configs.experiment_base.base_config`` (the tiny model, the paper's Adam recipe, no gradient
    clipping, halt on a non-finite step) on the reversal task of ``TASK`` (smoke: its 16-32-2 smoke
    model and task), with ``TASK``'s dropout (none: the task's data never repeats). The scanned
    layers keep nothing for the backward pass but each layer's input (``remat_policy="full"``: 500
    layers × B×T×64 floats)."""
    if setting not in SETTINGS:
        raise ValueError(f"--setting={setting!r}; allowed values are {tuple(SETTINGS)}")
    c = experiment_base.base_config("smoke" if setting == "smoke" else "quick")
    s = SETTINGS[setting]
    if setting != "smoke":
        c.data.dataset = "synthetic_reversal"
        c.model.vocab_size = c.data.vocab_size = TASK["vocab_size"]
        c.model.max_len = TASK["max_len"]
        c.data.max_len, c.data.batch_size = TASK["max_len"], TASK["batch_size"]
        c.data.max_tokens, c.data.bucket_boundaries = 0, ()
        c.eval_batches = 4
        c.peak_flops = 1e12  # no fp32 matmul measurement for the MFU estimate
    c.model.dropout = TASK["dropout"]
    c.log_every = s["log_every"]
    c.eval_every = s["eval_every"]
    c.diagnostics.every = s["every"]
    return c


def make_config(base: ml_collections.ConfigDict, key: dict[str, Any]) -> ml_collections.ConfigDict:
    """``base`` for one run: ``key["scheme"]`` with ``key["layers"]`` encoder and decoder
    layers, peak learning rate ``key["lr"]`` after ``key["warmup"]`` updates (inverse square
    root), ``key["steps"]`` updates, dropout ``key["dropout"]``."""
    c = experiment_rows.with_run(
        base, key["scheme"], key["layers"], key["lr"], key["warmup"], key["steps"]
    )
    c.model.dropout = key["dropout"]
    return c


def blind_chance(vocab_size: int, max_len: int, min_len: int = 2) -> dict[str, float]:
    """Token accuracy and NLL (nats) of the best predictor of the encoder-decoder reversal
    task's targets that does not read the source. The content length n is uniform in
    [``min_len``, ``max_len`` − 1] and the tokens uniform over the K content symbols, so at
    target position t (t content tokens seen) EOS has probability P(n = t | n ≥ t) and each
    symbol (1 − that) / K. The accuracy is per target token (EOS included), as the trainer's."""
    symbols = vocab_size - FIRST_CONTENT_ID
    lengths = range(min_len, max_len)
    if symbols < 1 or not lengths:
        raise ValueError(f"vocab_size={vocab_size}, max_len={max_len}: no reversal task")
    correct = nll = tokens = 0.0
    for n in lengths:
        for t in range(n + 1):
            p_eos = (1.0 if t >= min_len else 0.0) / sum(1 for m in lengths if m >= t)
            p_symbol = (1.0 - p_eos) / symbols
            says_eos = p_eos >= p_symbol
            if t == n:
                correct += float(says_eos)
                nll -= math.log(p_eos)
            else:
                correct += 0.0 if says_eos else 1.0 / symbols
                nll -= math.log(p_symbol)
            tokens += 1
    return {"accuracy": correct / tokens, "nll": nll / tokens}


def verdict(run: dict[str, Any], entropy: float) -> str:
    """``diverged``, ``trained`` or ``stuck`` (see the module docstring)."""
    if common.diverged(run):
        return "diverged"
    return "trained" if run["eval_loss"] <= entropy - MARGIN_NATS else "stuck"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the setting's runs not yet in ``<out>/thousand_layers.json``, then write the table
    and the figure; returns the results payload."""
    args, base, out = opening.start(argv, NAME, base_config, tuple(SETTINGS))
    s = setting_with_overrides(args.setting)
    chance = blind_chance(base.model.vocab_size, base.data.max_len)
    entropy = common.unigram_entropy(base)
    settings = {**s, "task": TASK, "chance": chance, "unigram_entropy": entropy}
    grid = ["runs", "lr", "warmup", "steps", "dropout"]  # each run's key holds these
    results = results_file.Results(out, NAME, args.setting, settings, grid=grid, head=args.header)
    keys = [
        {"scheme": scheme, "layers": n, **{k: s[k] for k in ("lr", "warmup", "steps", "dropout")}}
        for scheme, n in s["runs"]
    ]
    runs = common.run_grid(
        results,
        keys,
        functools.partial(make_config, base),
        entropy,
        os.path.join(out, "runs"),
        judged=False,
        keep=functools.partial(_keep, entropy),
    )
    table = tl_report.table(runs, s, chance, entropy)
    figure = tl_report.plot(runs, chance, entropy, out, NAME)
    paths = [results.path, report.write_table(out, NAME, table), figure]
    print(table)
    print("wrote " + ", ".join(paths))
    return results.payload


def _keep(entropy: float, result: dict[str, Any], workdir: str) -> None:
    """A run's curves (:func:`keep_curves`) and its :func:`verdict`, kept in its result."""
    keep_curves(result, workdir)
    result["verdict"] = verdict(result, entropy)


def keep_curves(result: dict[str, Any], workdir: str) -> None:
    """Keep a run's metrics records (train, eval and ΔF curves) in its result, slimmed."""
    result["records"] = [
        _slim(r) for r in metrics.read_if_any(workdir) if r["split"] in ("train", "eval")
    ]
    result["diagnostics"] = [_slim(r) for r in result["diagnostics"]]


def _slim(record: dict[str, Any]) -> dict[str, Any]:
    """A metrics record without its per-layer vectors, except each side's whole-layer gradient
    norm at the first and the last layer (``grad_norm/<side>/all``)."""
    out = {k: v for k, v in record.items() if not isinstance(v, list)}
    for key, value in record.items():
        if isinstance(value, list) and key.endswith("/all") and value:
            out[key + "_first"], out[key + "_last"] = value[0], value[-1]
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
