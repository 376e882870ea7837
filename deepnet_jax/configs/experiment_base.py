"""The configs the depth experiments start from: the tiny model's (:func:`base_config`) and the
shipped ones with checkpoints off (:func:`shipped_config`, the main job's:
:func:`main_job_config`). Not a config of its own (not in ``configs.NAMES``); an experiment
sets the row, depth, learning rate and schedule of each run
(:func:`configs.experiment_rows.with_run`).

The tiny-model settings of model_update and lr_tolerance, the same for every scheme (fixed before
the first quick run; the length buckets changed after the first model_update run, which was then
repeated: docs/reproduction.md, "Settings"):

* **Model**: the DeepNet paper's tiny 64-128-2 encoder-decoder (d_model 64, FFN 128, 2 heads;
  its Figure 5), N encoder and N decoder layers, dropout 0.1, sinusoidal positions.
* **Data**: ``ding_de_en`` German→English, a joint 4,000-piece BPE vocabulary, sentences of
  at most 64 tokens, batches of at most 1,024 tokens per update (the paper's IWSLT-14 runs
  use 4,000; 2 CPU cores set this budget) in length buckets of 16, 32 and 64 tokens (one
  compile each; without the default 8-token bucket 61.6% of a batch's target slots hold
  tokens against 62.8%, measured over 300 batches, for one train-step compile fewer per run).
* **Optimizer**: the paper's IWSLT-14 De-En recipe (its Table 4): Adam β = (0.9, 0.98),
  ε = 1e-8, weight decay 1e-4 (decoupled), label smoothing 0.1, no gradient clipping (it
  would hide divergence), inverse-square-root schedule with a linear warm-up from 1e-7.

The ``smoke`` setting swaps the corpus for the synthetic reversal task and shrinks everything
so that an experiment runs end to end in under a minute (the CI check of the code path).
"""

from __future__ import annotations

import ml_collections

from deepnet_jax import configs
from deepnet_jax.training import config as train_config

# the settings of the tiny model (an experiment's ``--setting`` choices unless it has its own):
# smoke its 16-32-2 stand-in on the synthetic task; quick and full the model above
SETTINGS = ("smoke", "quick", "full")


def base_config(setting: str) -> ml_collections.ConfigDict:
    """The shared settings above as a training config (no checkpoints, no BLEU, validation
    loss only at the end); experiments set the scheme, depth, learning rate and schedule."""
    if setting not in SETTINGS:
        raise ValueError(f"--setting={setting!r}; allowed values are {SETTINGS}")
    c = train_config.default_config()
    m = c.model
    m.arch = "encdec"
    m.d_model, m.ffn_dim, m.num_heads = 64, 128, 2
    m.dropout = 0.1
    # the committed results (docs/reproduction.md) were measured with jax.random masks; the
    # faster hash masks would draw others (in effect another dropout seed)
    m.dropout_rng = "jax"
    c.optimizer.name = "adamw"
    c.optimizer.b1, c.optimizer.b2, c.optimizer.eps = 0.9, 0.98, 1e-8
    c.optimizer.weight_decay = 1e-4
    c.optimizer.grad_clip = 0.0
    c.schedule.name = "inverse_sqrt"
    c.schedule.warmup_init_lr = 1e-7
    c.label_smoothing = 0.1
    c.checkpoint_every = 0
    c.eval_every = 0
    c.decode.eval_sentences = 0
    c.final_split = ""
    c.nan_policy = "halt"
    c.diagnostics.plot = False  # the experiment draws its own figure
    if setting == "smoke":
        m.vocab_size, m.max_len = 12, 16
        m.d_model, m.ffn_dim, m.num_heads = 16, 32, 2
        c.data.dataset = "synthetic_reversal"
        c.data.max_len, c.data.batch_size = 12, 8
        c.eval_batches = 1
        c.log_every = 1
        c.peak_flops = 1e12  # no fp32 matmul measurement for the MFU estimate
        m.scan_layers, m.remat_policy = False, "none"  # 2 layers: the quickest compiles
    else:
        m.vocab_size, m.max_len = 4000, 64
        c.data.dataset = "ding_de_en"
        c.data.vocab_size = 4000
        c.data.max_len = 64
        c.data.max_tokens = 1024
        c.data.bucket_boundaries = (16, 32, 64)
        c.log_every = 25
    return c


def main_job_config() -> ml_collections.ConfigDict:
    """The ``default`` config (the README's main job): :func:`shipped_config`."""
    return shipped_config("default")


def shipped_config(name: str) -> ml_collections.ConfigDict:
    """The shipped config ``name`` (:mod:`deepnet_jax.configs`) with checkpoints off:
    experiments that compare against a shipped config change only what they vary."""
    c = configs.load(name)
    c.checkpoint_every = 0
    c.final_split = ""
    c.diagnostics.plot = False
    return c
