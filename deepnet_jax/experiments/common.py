"""What the depth experiments share: the model, data and optimizer settings, one training run
and its verdict, and the output files.

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
* **Verdict** of a run (:func:`verdict`): ``diverged`` if the loss or a gradient became
  non-finite (the trainer's ``nan_policy="halt"``), or if the loss blew up while staying finite
  (:func:`blew_up`: its final validation NLL more than 0.25 nats above its first training
  loss, the loss of the untrained model); ``stuck`` if its final validation NLL is
  within 0.25 nats of the unigram entropy of the validation targets, or above it (it predicts
  no better than token frequencies); ``trained`` otherwise.

The ``smoke`` setting swaps the corpus for the synthetic reversal task and shrinks everything
so that an experiment runs end to end in under a minute (the CI check of the code path).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np

from deepnet_jax import configs
from deepnet_jax.experiments import results_file, resumable
from deepnet_jax.experiments.opening import SETTINGS
from deepnet_jax.model import parameterization, schemes
from deepnet_jax.training import config as train_config
from deepnet_jax.training import data as train_data
from deepnet_jax.training.run_config import RunConfig

# the papers' schemes of a scanned stack (DLCL, the papers' other, combines layers)
SCHEMES = schemes.names(origin=schemes.PAPER, scannable=True)
# the stability schemes since DeepNet (docs/schemes.md), in the experiments' own settings
SINCE_DEEPNET = schemes.names(origin=schemes.SINCE_DEEPNET)
# rows that are more than a scheme (:data:`ROW_FIELDS`): Pre-LN with Dynamic Tanh in place of
# every norm (the pre-norm Transformer its paper replaces the norms of), and Pre-LN under
# CompleteP (model/parameterization.py; its paper's pre-norm Transformer)
DYT_ROW, COMPLETEP_ROW = "pre_ln+dyt", "pre_ln+completep"
# the rows of the experiments' since_deepnet settings: those schemes, and the two rows above
SINCE_DEEPNET_ROWS = (*SINCE_DEEPNET, DYT_ROW, COMPLETEP_ROW)
# CompleteP's base: 6 layers per side, the shallowest depth of every experiment with its row
# (depth_table's and model_update's since_deepnet settings start at 6L-6L, lr_tolerance's run
# 6L-6L, lr_transfer's sweep starts at 6), and their models' width (d_model 64), so that its
# multipliers are 1 there and the rate a 6L-6L run takes is the rate CompleteP transfers
COMPLETEP_BASE_LAYERS, COMPLETEP_BASE_WIDTH = 6, 64
# a row that is more than a scheme: the model fields it sets (:func:`row_fields`; the positions
# CompleteP needs: :func:`set_row`). CompleteP scales no embedding by √d (its embedding rule is
# its own: Table 1's "Embed")
ROW_FIELDS: dict[str, dict[str, Any]] = {
    DYT_ROW: {"scheme": "pre_ln", "norm": "dyt"},
    COMPLETEP_ROW: {
        "scheme": "pre_ln",
        "parameterization": "completep",
        "completep_base_layers": COMPLETEP_BASE_LAYERS,
        "completep_base_width": COMPLETEP_BASE_WIDTH,
        "scale_embedding": False,
    },
}
PAPER_LR = 5e-4  # DeepNet Table 4 (IWSLT-14 De-En)
PAPER_WARMUP = 4000  # warm-up updates, from 1e-7 (DeepNet Table 4)
STUCK_MARGIN = 0.25  # nats: "stuck" = validation NLL >= unigram entropy - this
VERDICTS = ("trained", "stuck", "diverged")


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


def row_fields(row: str) -> dict[str, Any]:
    """The model fields an experiment row sets: :data:`ROW_FIELDS`'s for a row named
    ``scheme+…`` (``"pre_ln+dyt"`` → ``{"scheme": "pre_ln", "norm": "dyt"}``), else the scheme
    alone (``"deepnorm"`` → ``{"scheme": "deepnorm"}``). ValueError for another ``scheme+…``."""
    if row in ROW_FIELDS:
        return dict(ROW_FIELDS[row])
    if "+" in row:
        raise ValueError(f"row {row!r}: the rows named scheme+… are {', '.join(ROW_FIELDS)}")
    return {"scheme": row}


def row_scheme(row: str) -> str:
    """An experiment row's scheme (:func:`row_fields`)."""
    return row_fields(row)["scheme"]


def set_row(model: ml_collections.ConfigDict, row: str) -> None:
    """Set ``row``'s fields (:func:`row_fields`) on a model config. Under CompleteP fixed
    sinusoids become a learned table, N(0, σ²_base) in the embeddings' group as in the
    authors' code: sinusoids of RMS 1/√2 beside tokens of RMS σ_base = 0.02 hid the tokens
    from the model (35-fold; the model refuses them: model/config_relations.py). Rotary
    positions add nothing to the embeddings and stay."""
    for name, value in row_fields(row).items():
        model[name] = value
    if parameterization.completep(model) and model.positions == "sinusoidal":
        model.positions = "learned"


def with_run(
    c: ml_collections.ConfigDict,
    row: str,
    layers: int,
    learning_rate: float,
    warmup_steps: int,
    steps: int,
) -> ml_collections.ConfigDict:
    """A copy of ``c`` for one run: N-layer encoder and decoder (those ``c``'s arch has) with
    ``row``'s model fields (:func:`set_row`: its scheme, and its norm or parameterization),
    peak ``learning_rate`` after ``warmup_steps`` (0: constant from the first update). DLCL
    stacks are unrolled (each layer reads every earlier one); the others are scanned.
    ValueError if ``c`` names another schedule, which the run would otherwise drop without a
    word."""
    if c.schedule.name not in ("inverse_sqrt", "constant"):
        raise ValueError(
            f"schedule.name={c.schedule.name!r}: an experiment's runs take inverse_sqrt "
            "(constant without a warm-up); set it in the base config"
        )
    c = ml_collections.ConfigDict(c.to_dict())
    set_row(c.model, row)
    has = {"encoder": (layers, 0), "decoder": (0, layers), "encdec": (layers, layers)}
    c.model.num_encoder_layers, c.model.num_decoder_layers = has[c.model.arch]
    c.model.scan_layers = schemes.get(c.model.scheme).scannable  # DLCL reads every earlier layer
    c.optimizer.learning_rate = learning_rate
    if warmup_steps:
        c.schedule.name, c.schedule.warmup_steps = "inverse_sqrt", warmup_steps
    else:
        c.schedule.name = "constant"
    c.total_steps = steps
    return c


def unigram_entropy(config: ml_collections.ConfigDict) -> float:
    """Entropy (nats) of the validation targets' token distribution: the NLL of predicting
    each target token by its frequency, which a model that learned nothing else reaches
    (``config``'s derived fields resolved first, e.g. the main job's ``model.vocab_size=0``)."""
    data = train_data.make_data(RunConfig.from_config(config).resolved(), 1)
    counts: dict[int, float] = {}
    for batch in data.eval_batches("validation"):
        tokens, weights = np.asarray(batch["targets"]), np.asarray(batch["weights"])
        ids, n = np.unique(tokens[weights > 0], return_counts=True)
        for i, k in zip(ids.tolist(), n.tolist(), strict=True):
            counts[i] = counts.get(i, 0.0) + k
    p = np.array(list(counts.values())) / sum(counts.values())
    return float(-(p * np.log(p)).sum())


def blew_up(result: dict[str, Any]) -> bool:
    """Whether a run whose losses stayed finite ended worse than it began: its final validation
    NLL more than :data:`STUCK_MARGIN` above its first training loss (the untrained model's
    loss, e.g. ln V at a uniform start). Such a run diverged without a NaN: a loss spike it
    never recovered from (docs/schemes.md, ReZero at 3.2e-2). False when either loss is
    missing."""
    first, final = result.get("first_train_loss"), result.get("eval_loss")
    if first is None or final is None:
        return False
    return bool(final > first + STUCK_MARGIN)


def diverged(result: dict[str, Any]) -> bool:
    """A non-finite loss or gradient (``nonfinite_step`` set) or a finite blow-up
    (:func:`blew_up`)."""
    return result.get("nonfinite_step") is not None or blew_up(result)


def divergence_text(result: dict[str, Any]) -> str:
    """How a diverged run broke, for tables: ``update 57`` (the first non-finite update) or
    ``NLL 61.5 from 9.13`` (a finite blow-up: final validation NLL from the first loss)."""
    if result.get("nonfinite_step") is not None:
        return f"update {result['nonfinite_step']}"
    return f"NLL {result['eval_loss']:.3g} from {result['first_train_loss']:.3g}"


def verdict(result: dict[str, Any], entropy: float) -> str:
    """``diverged``, ``stuck`` or ``trained`` (see the module docstring)."""
    if diverged(result):
        return "diverged"
    if result["eval_loss"] >= entropy - STUCK_MARGIN:
        return "stuck"
    return "trained"


def run_grid(
    results: results_file.Results,
    keys: Sequence[dict[str, Any]],
    make_config: Callable[[dict[str, Any]], ml_collections.ConfigDict],
    entropy: float | None,
    work_root: str,
    judged: bool = True,
    keep: Callable[[dict[str, Any], str], None] | None = None,
    checkpoint_every: int = 0,
    cache_dir: str | None = None,
) -> list[dict[str, Any]]:
    """Train every ``key`` (a dict of the run's settings) not in ``results`` yet, with
    ``make_config(key)``, in ``<work_root>/<i>``; add its result, its CPU seconds, the kind of
    device it ran on, the default matmul precision it ran under and, when ``judged``, its
    :func:`verdict` (with ``entropy``; None for the synthetic smoke data: then only
    diverged/trained). ``keep(result, workdir)`` adds what an experiment keeps of a run beyond
    its result (e.g. its curves, its own verdict) before the result is saved; the result it
    gets holds the key's fields too.

    ``checkpoint_every`` > 0: each run checkpoints that often, in a workdir named by its key
    (``<work_root>/<resumable.workdir_name(key)>``), and a run stopped before its end resumes
    from its newest checkpoint when the grid is started again (:mod:`resumable`). XLA's
    compilations are kept in ``cache_dir`` (default ``<work_root>/xla_cache``; one per
    process)."""
    share_compilations(cache_dir or os.path.join(work_root, "xla_cache"))
    out = []
    for i, key in enumerate(keys):
        run = results.find(key)
        if run is None:
            summary = ", ".join(f"{k}={v}" for k, v in key.items())
            print(f"== run {i + 1}/{len(keys)}: {summary}", flush=True)
            config = make_config(key)
            if checkpoint_every:
                workdir = os.path.join(work_root, resumable.workdir_name(key))
                config.checkpoint_every, config.max_to_keep = checkpoint_every, 2
            else:
                workdir = os.path.join(work_root, str(i))
            result = resumable.train_once(config, workdir, resume=bool(checkpoint_every))
            result["device"] = jax.devices()[0].device_kind  # "cpu", "NVIDIA H100 80GB HBM3"
            # None: the platform's default (fp32 on a CPU, TF32 passes on a GPU)
            result["matmul_precision"] = jax.config.jax_default_matmul_precision
            if keep is not None:
                result.update(key)  # keep sees the run's settings beside its result
                keep(result, workdir)
            if judged:
                result["verdict"] = judge(result, entropy)
            if "verdict" in result:
                print(
                    f"== {summary}: {result['verdict']}, validation NLL {result['eval_loss']:.3f}"
                )
            run = results.add(key, result)
            if checkpoint_every:  # recorded: nothing will resume it (500L: 1 GB of state)
                resumable.drop_checkpoints(workdir)
        out.append(run)
    return out


def judge(result: dict[str, Any], entropy: float | None) -> str:
    """:func:`verdict` against ``entropy``; without one (the synthetic smoke data) only
    diverged or trained."""
    if entropy is None:
        return "diverged" if diverged(result) else "trained"
    return verdict(result, entropy)


def share_compilations(cache_dir: str) -> None:
    """Keep every XLA compile of this process in ``cache_dir`` (JAX's persistent compilation
    cache), so that runs differing only in their learning rate or schedule reuse the ones that
    do not depend on it (initialization, evaluation steps, the probe). Does nothing when a cache
    is already configured (e.g. by the test suite); has no effect once this process has
    compiled something (JAX decides at its first compile whether to use a cache)."""
    if jax.config.jax_compilation_cache_dir:
        return
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
