"""What the depth experiments share beyond their configs: the rows of their grids
(:data:`SCHEMES`, :data:`SINCE_DEEPNET_ROWS`), the paper's learning rate and warm-up, training
a grid of runs (:func:`run_grid`) and each run's verdict. The configs they train, the tiny
model's and each run's, are :mod:`deepnet_jax.configs.experiment_base`'s and
:mod:`deepnet_jax.configs.experiment_rows`'.

**Verdict** of a run (:func:`verdict`): ``diverged`` if the loss or a gradient became
non-finite (the trainer's ``nan_policy="halt"``), or if the loss blew up while staying finite
(:func:`blew_up`: its final validation NLL more than 0.25 nats above its first training loss,
the loss of the untrained model); ``stuck`` if its final validation NLL is within 0.25 nats of
the unigram entropy of the validation targets, or above it (it predicts no better than token
frequencies); ``trained`` otherwise.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np

from deepnet_jax.configs import experiment_rows
from deepnet_jax.experiments import results_file, resumable
from deepnet_jax.model import schemes
from deepnet_jax.runs import metrics
from deepnet_jax.training import data as train_data
from deepnet_jax.training.run_config import RunConfig

# the papers' schemes of a scanned stack (DLCL, the papers' other, combines layers)
SCHEMES = schemes.names(origin=schemes.PAPER, scannable=True)
# the stability schemes since DeepNet (docs/schemes.md), in the experiments' own settings
SINCE_DEEPNET = schemes.names(origin=schemes.SINCE_DEEPNET)
# the rows of the experiments' since_deepnet settings: those schemes, and the rows that are
# more than a scheme (configs.experiment_rows.ROW_FIELDS: DyT's, CompleteP's)
SINCE_DEEPNET_ROWS = (*SINCE_DEEPNET, experiment_rows.DYT_ROW, experiment_rows.COMPLETEP_ROW)
# what a translation run's validations report (the trainer's eval records), kept per validation
VALIDATION_KEYS = ("loss", "source_sensitivity", "bleu", "distinct_hypotheses")
PAPER_LR = 5e-4  # DeepNet Table 4 (IWSLT-14 De-En)
PAPER_WARMUP = 4000  # warm-up updates, from 1e-7 (DeepNet Table 4)
STUCK_MARGIN = 0.25  # nats: "stuck" = validation NLL >= unigram entropy - this
VERDICTS = ("trained", "stuck", "diverged")


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
    ``make_config(key)``, in a workdir named by its key
    (``<work_root>/<resumable.workdir_name(key)>``, claimed by one process at a time:
    :func:`resumable.claim`); add its result, its CPU seconds, the kind of
    device it ran on, the default matmul precision it ran under, the commit its command started
    from and the date (:meth:`results_file.Results.provenance`) and, when ``judged``, its
    :func:`verdict` (with ``entropy``; None for the synthetic smoke data: then only
    diverged/trained). ``keep(result, workdir)`` adds what an experiment keeps of a run beyond
    its result (e.g. its curves, its own verdict) before the result is saved; the result it
    gets holds the key's fields too.

    ``checkpoint_every`` > 0: each run checkpoints that often, and a run stopped before its end
    resumes from its newest checkpoint when the grid is started again (:mod:`resumable`); 0: a
    run stopped starts over. XLA's
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
            train = functools.partial(_train, results, key, config, entropy=entropy,
                                      judged=judged, keep=keep)  # fmt: skip
            # a workdir named by the run, which any process (shard) may start or resume
            workdir = os.path.join(work_root, resumable.workdir_name(key))
            if checkpoint_every:
                config.checkpoint_every, config.max_to_keep = checkpoint_every, 2
            with resumable.claim(workdir) as mine:
                if mine:
                    results.reload()  # another process may have recorded it meanwhile
                    run = results.find(key) or train(workdir, resume=checkpoint_every > 0)
                    resumable.drop_checkpoints(workdir)  # recorded: nothing resumes it
            if not mine:
                print(f"== {summary}: another process is training it; left to it")
                continue
        out.append(run)
    return out


def _train(
    results: results_file.Results,
    key: dict[str, Any],
    config: ml_collections.ConfigDict,
    workdir: str,
    resume: bool,
    entropy: float | None,
    judged: bool,
    keep: Callable[[dict[str, Any], str], None] | None,
) -> dict[str, Any]:
    """:func:`run_grid`'s one run: trained in ``workdir`` (from its newest checkpoint when
    ``resume``), judged, added to ``results``; returns the run as written."""
    result = resumable.train_once(config, workdir, resume=resume)
    result["device"] = jax.devices()[0].device_kind  # "cpu", "NVIDIA H100 80GB HBM3"
    # None: the platform's default (fp32 on a CPU, TF32 passes on a GPU)
    result["matmul_precision"] = jax.config.jax_default_matmul_precision
    result.update(results.provenance())  # commit, date, cpu: a file gathers many sessions
    if keep is not None:
        result.update(key)  # keep sees the run's settings beside its result
        keep(result, workdir)
    if judged:
        result["verdict"] = judge(result, entropy)
    if "verdict" in result:
        print(f"== {', '.join(f'{k}={v}' for k, v in key.items())}: {result['verdict']}, "
              f"validation NLL {result['eval_loss']:.3f}")  # fmt: skip
    return results.add(key, result)


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


def keep_validations(result: dict[str, Any], workdir: str) -> None:
    """``run_grid``'s ``keep``: each validation's update and :data:`VALIDATION_KEYS` (those
    the run measured), in ``result["validation"]``."""
    result["validation"] = [
        {"update": r["step"], **{k: r[k] for k in VALIDATION_KEYS if k in r}}
        for r in metrics.read(workdir)
        if r["split"] == "eval"
    ]


def run_validated_grid(
    results: results_file.Results,
    keys: Sequence[dict[str, Any]],
    make_config: Callable[[dict[str, Any]], ml_collections.ConfigDict],
    entropy: float | None,
    work_root: str,
) -> dict[str, Any]:
    """:func:`run_grid` of translation runs that keep each validation
    (:func:`keep_validations`), checkpointing as ``--checkpoint_every`` says
    (:mod:`resumable`); returns the results payload as the file holds it after (every shard's
    runs so far)."""
    run_grid(
        results,
        keys,
        make_config,
        entropy,
        work_root,
        keep=keep_validations,
        checkpoint_every=resumable.CHECKPOINT_EVERY.value,
    )
    results.reload()
    return results.payload
