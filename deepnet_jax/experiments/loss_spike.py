"""Why ReZero, SkipInit and mHC diverge at the largest learning rate: their ``lr_tolerance`` runs
again, update by update, with the gates and the largest weights read at every checkpoint
(docs/schemes.md, "Measurements").

At 3.2e-2 ``lr_tolerance --setting=since_deepnet`` calls these runs diverged: ReZero's and
SkipInit's validation NLL ends far above their first training loss without any loss or gradient
going non-finite; mHC's gradient goes non-finite. This experiment repeats those cells exactly
(the same config: 6L-6L on quick's corpus, 150 updates, a 75-update warm-up; only the logging
and checkpoint cadence differ, which do not change the updates), mHC beside the same with
ε = 1e-6 in Sinkhorn-Knopp only (``model.mhc_sinkhorn_eps``) and its DeepSeek-V4 variant
(``model.mhc_variant=deepseek_v4``: that ε in H_pre and in Sinkhorn-Knopp, a learned head), and
keeps what the grid does not:

- every update's training NLL and global gradient norm (``log_every`` 1);
- at every checkpoint: the largest gate ``|α|`` (every ``*_alpha`` parameter: ReZero's one per
  layer, x + α·F(x); SkipInit's one per sublayer; mHC's α_pre, α_post, α_res per sublayer, which
  scale its mappings' logits), and the Frobenius norms of the output projection and of the
  encoder's token embedding, which nothing normalizes in ReZero's and SkipInit's stacks.

A run whose loss or gradient goes non-finite is recorded too: its ``nonfinite_step``, its curve
up to it and the checkpoints written before it.

=========  ==========================================================  ========  ============
setting    runs                                                        updates   checkpoints
=========  ==========================================================  ========  ============
smoke      common's 16-32-2 model, ReZero and SkipInit at a constant   4         every 2
           3e-2 (the synthetic reversal task)
quick      lr_tolerance since_deepnet's cells: ReZero and SkipInit     150       every 25
           6L-6L at peak 3.2e-2
sinkhorn   lr_tolerance since_deepnet's mHC cell at peak 3.2e-2, the   150       every 25
           same with ``mhc_sinkhorn_eps=1e-6``, and with
           ``mhc_variant=deepseek_v4``
=========  ==========================================================  ========  ============

Run: ``python -m deepnet_jax.experiments.loss_spike --setting=quick --out=DIR``; writes
``loss_spike.json`` (the command's header, :func:`deepnet_jax.common.records.header`; per run
its final figures, its ``curve`` and its ``weights`` at each checkpoint) and ``loss_spike.md``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import flax.linen as nn
import ml_collections
import numpy as np
from flax import traverse_util

from deepnet_jax.configs import experiment_base, experiment_rows
from deepnet_jax.experiments import common, lr_tolerance, opening, report, resumable
from deepnet_jax.runs import metrics
from deepnet_jax.runs.workdir import RunDir
from deepnet_jax.training import loading

NAME = "loss_spike"
# setting → (peak learning rate, updates, checkpoint every)
SETTINGS = {"smoke": (3e-2, 4, 2), "quick": (3.2e-2, 150, 25), "sinkhorn": (3.2e-2, 150, 25)}
# setting → its runs, each (name, scheme, model fields changed from the lr_tolerance cell's)
_GATED = (("rezero", "rezero", {}), ("skipinit", "skipinit", {}))
RUNS: dict[str, tuple[tuple[str, str, dict[str, Any]], ...]] = {
    "smoke": _GATED,
    "quick": _GATED,
    "sinkhorn": (
        ("mhc", "mhc", {}),
        ("mhc+sinkhorn_eps", "mhc", {"mhc_sinkhorn_eps": 1e-6}),
        ("mhc+deepseek_v4", "mhc", {"mhc_variant": "deepseek_v4"}),
    ),
}
NORMED = {  # the weights whose norms are read: name → parameter path
    "output_projection_norm": ("output_projection", "kernel"),
    "encoder_embedding_norm": ("encoder_embed_tokens", "embedding"),
}


def base_config(setting: str) -> ml_collections.ConfigDict:
    """The setting's data and model (quick, mhc: lr_tolerance's since_deepnet base)."""
    return experiment_base.base_config("smoke" if setting == "smoke" else "quick")


def run_config(
    base: ml_collections.ConfigDict, setting: str, name: str
) -> ml_collections.ConfigDict:
    """Run ``name`` of ``setting`` (:data:`RUNS`): its scheme's lr_tolerance since_deepnet cell
    (smoke: 2 layers at a constant rate) with the run's model fields, logged every update, a
    checkpoint every ``SETTINGS[setting][2]`` updates, all kept."""
    lr, updates, every = SETTINGS[setting]
    scheme, fields = next((r[1], r[2]) for r in RUNS[setting] if r[0] == name)
    if setting == "smoke":
        c = experiment_rows.with_run(base, scheme, 2, lr, 0, updates)
    else:
        c = lr_tolerance.run_config(base, "since_deepnet", {"scheme": scheme, "lr": lr})
        if (c.total_steps, c.optimizer.learning_rate) != (updates, lr):
            raise ValueError(
                f"lr_tolerance's since_deepnet cell has {c.total_steps} updates at peak "
                f"{c.optimizer.learning_rate}; SETTINGS[{setting!r}] says {updates} at {lr}"
            )
    c.model.update(fields)
    c.log_every, c.checkpoint_every, c.max_to_keep = 1, every, updates // every
    return c


def weights(params: Any) -> dict[str, float]:
    """The largest gate ``|α|`` (over every parameter named ``*_alpha``) and the :data:`NORMED`
    weights' Frobenius norms of one parameter tree."""
    flat = traverse_util.flatten_dict(nn.unbox(params))
    gates = [np.abs(np.asarray(v)).max() for k, v in flat.items() if k[-1].endswith("_alpha")]
    if not gates:
        raise ValueError("the model has no *_alpha gate parameters")
    out = {"max_abs_gate": float(max(gates))}
    for name, path in NORMED.items():
        out[name] = float(np.linalg.norm(np.asarray(flat[path], np.float64)))
    return out


def one_run(config: ml_collections.ConfigDict, workdir: str, entropy: float | None) -> dict:
    """Train ``config`` in ``workdir``; its final figures and verdict, every update's training
    NLL and gradient norm, and :func:`weights` at each checkpoint it wrote (a run halted by a
    non-finite loss stops writing them)."""
    result = resumable.train_once(config, workdir)
    train = [r for r in metrics.read(workdir) if r["split"] == "train"]
    every, last = config.checkpoint_every, config.total_steps
    saved = RunDir(workdir).checkpoints
    return {
        "eval_loss": result["eval_loss"],
        "first_train_loss": result.get("first_train_loss"),
        "nonfinite_step": result["nonfinite_step"],
        "verdict": common.judge(result, entropy),
        "curve": [
            {"update": r["step"], "loss": r["loss"], "grad_norm": r["grad_norm"]} for r in train
        ],
        "weights": [
            {"update": step, **weights(loading.load_run(workdir, step).params)}
            for step in range(every, last + 1, every)
            if os.path.isdir(os.path.join(saved, str(step)))
        ],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train the setting's runs (again: workdirs from before are emptied), write the results and
    the table; returns the results."""
    args, base, out = opening.start(argv, NAME, base_config, tuple(SETTINGS))
    entropy = None if args.setting == "smoke" else common.unigram_entropy(base)
    runs = []
    for name, _, _ in RUNS[args.setting]:
        config = run_config(base, args.setting, name)
        workdir = os.path.join(out, "runs", name)
        lr = config.optimizer.learning_rate
        runs.append({"scheme": name, "lr": lr} | one_run(config, workdir, entropy))
    payload = {"header": args.header, "setting": args.setting, "runs": runs}
    report.write_results(out, NAME, payload, docs_table(payload))
    return payload


def docs_table(payload: dict[str, Any]) -> str:
    """A row per run and checkpoint: the training NLL and gradient norm logged at that update,
    the largest gate and the two norms (docs/schemes.md shows it between its markers)."""
    header = ["scheme", "update", "training NLL", "gradient norm", "largest gate",
              "‖output projection‖", "‖encoder embedding‖"]  # fmt: skip
    rows = []
    for run in payload["runs"]:
        at = {r["update"]: r for r in run["curve"]}
        for c in run["weights"]:
            logged = at[c["update"]]
            rows.append([run["scheme"], c["update"], f"{logged['loss']:.2f}",
                         _norm(logged["grad_norm"]), f"{c['max_abs_gate']:.3f}",
                         f"{c['output_projection_norm']:.1f}",
                         f"{c['encoder_embedding_norm']:.1f}"])  # fmt: skip
    return report.markdown_table(header, rows).strip()


def _norm(value: float) -> str:
    """A gradient norm for the table: 2 decimals below 10 (mHC's 0.2–0.5), 1 above."""
    return f"{value:.2f}" if value < 10 else f"{value:,.1f}"


if __name__ == "__main__":
    main(sys.argv[1:])
