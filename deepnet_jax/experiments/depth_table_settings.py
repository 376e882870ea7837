"""The depth table's settings: its tasks (:data:`TASKS`), its one recipe (:data:`RECIPE`), the
grid of each setting (:data:`GRIDS`: tasks, scheme × depth cells, seeds), the runs of a setting
in the order they run (:func:`keys`) and each run's training config (:func:`base_config`,
:func:`make_config`). :mod:`deepnet_jax.experiments.depth_table`'s docstring tables the
settings; that module runs them."""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections

from deepnet_jax.common.tokens import FIRST_CONTENT_ID
from deepnet_jax.experiments import common
from deepnet_jax.model import schemes

SETTINGS = ("smoke", "recipe", "init", "quick", "full", "corpus", "modern_lm", "since_deepnet")
CORPUS_BLEU_SENTENCES = 300  # greedy BLEU at the end of a corpus run (the main job's count)


@dataclasses.dataclass(frozen=True)
class Task:
    """A reversal task: ``symbols`` content symbols, content lengths ``min_len`` … ``max_len``
    − 1 (``max_len`` is ``data.max_len``: the target adds EOS)."""

    symbols: int
    min_len: int
    max_len: int

    @property
    def vocab_size(self) -> int:
        return self.symbols + FIRST_CONTENT_ID


TASKS = {
    "reversal": Task(symbols=11, min_len=2, max_len=12),
    "reversal64": Task(symbols=64, min_len=16, max_len=25),
}


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What every run of a synthetic setting shares (the model is common.base_config's)."""

    lr: float
    warmup: int
    updates: int
    batch_size: int
    dropout: float
    log_every: int


# Fixed on 2026-11-26 from the exploratory grid (the ``recipe`` setting; docs/reproduction.md,
# "The recipe") by the rule written before its last runs: the grid point where Post-LN 6L-6L
# reaches the highest validation accuracy, every scheme trained; before any other run of the
# table (earlier designs of the experiment ran before it: docs/reproduction.md, "What was tried
# before this design").
RECIPE = Recipe(lr=2e-3, warmup=400, updates=800, batch_size=32, dropout=0.0, log_every=25)
SMOKE_RECIPE = Recipe(lr=3e-3, warmup=2, updates=4, batch_size=8, dropout=0.0, log_every=2)

_SCHEMES = list(common.SCHEMES)  # the papers' scanned schemes
_DLCL = list(schemes.names(stack="dlcl"))
GRIDS: dict[str, dict[str, Any]] = {
    "smoke": {
        "tasks": ["reversal"],
        "cells": [(s, 2) for s in ("post_ln", "deepnorm", "dlcl_pre")],
        "seeds": [0, 1],
    },
    # the exploratory grid RECIPE was chosen on (one seed; docs/reproduction.md, "The recipe")
    "recipe": {
        "tasks": ["reversal64"],
        "cells": [(s, 6) for s in ("post_ln", "pre_ln", "deepnorm")],
        "seeds": [0],
        "recipes": [(lr, warmup) for lr in (5e-4, 1e-3, 2e-3) for warmup in (50, 400)],
    },
    # Post-LN and Pre-LN under the reference initializations (model.init: docs/reproduction.md,
    # "Is our Post-LN the paper's?"), at the recipe
    "init": {
        "tasks": ["reversal64"],
        "cells": [(s, n) for n in (6, 18) for s in ("post_ln", "pre_ln")],
        "seeds": [0, 1, 2],
        "inits": ["fairseq", "torchscale"],
    },
    "quick": {
        "tasks": ["reversal64", "reversal"],
        "cells": [(s, n) for n in (6, 18, 50, 100) for s in _SCHEMES]
        + [(s, n) for n in (6, 18) for s in _DLCL],
        "seeds": [0, 1, 2],
        # the 1,000-layer columns, on reversal64 only, after the runs above: 200L-200L with
        # every seed (seed 0 of each scheme first), 500L-500L with seed 0 of each scheme, then
        # DeepNorm's seeds 1 and 2
        "more": [
            {"tasks": ["reversal64"], "cells": [(s, 200) for s in _SCHEMES], "seeds": [0]},
            {"tasks": ["reversal64"], "cells": [(s, 200) for s in _SCHEMES], "seeds": [1, 2]},
            {"tasks": ["reversal64"], "cells": [(s, 500) for s in _SCHEMES], "seeds": [0]},
            {"tasks": ["reversal64"], "cells": [("deepnorm", 500)], "seeds": [1, 2]},
        ],
    },
    "full": {
        "tasks": ["reversal64", "reversal"],
        "cells": [(s, n) for n in (6, 12, 18, 50, 100, 200) for s in _SCHEMES]
        + [(s, n) for n in (6, 12, 18) for s in _DLCL],
        "seeds": [0, 1, 2],
    },
    # the schemes since DeepNet, DyT and CompleteP (its base at 6L: common.ROW_FIELDS) under
    # the same recipe and verdict rules, beside quick's rows (docs/schemes.md); seed 0 of every
    # cell first, then seeds 1 and 2
    "since_deepnet": {
        "tasks": ["reversal64"],
        "cells": [(s, n) for n in (6, 18) for s in common.SINCE_DEEPNET_ROWS],
        "seeds": [0, 1, 2],
        "seeds_first": True,
    },
    "corpus": {
        "tasks": ["corpus"],
        "cells": [(s, n) for n in (6, 18) for s in ("post_ln", "pre_ln", "deepnorm")],
        "seeds": [0, 1],
    },
    # the modern decoder (configs/deepnorm_lm.py's blocks at MODERN_LM's tiny width) on
    # character-level Shakespeare: DeepNorm and Sub-LN against Pre-LN at equal updates
    "modern_lm": {
        "tasks": ["shakespeare"],
        "cells": [(s, n) for n in (6, 100) for s in ("pre_ln", "deepnorm", "subln")],
        "seeds": [0, 1],
    },
}
# the modern_lm setting's model and recipe: configs/deepnorm_lm.py's blocks (rotary positions,
# SwiGLU at ⅔·4d → 168, 2 kv heads of 4, RMSNorm, no biases) at d 64, windows of 128 characters
MODERN_LM = {
    "d_model": 64,
    "num_heads": 4,
    "num_kv_heads": 2,
    "ffn_dim": 168,
    "max_len": 128,
    "batch_size": 16,
    "updates": 600,
    "warmup": 100,
    "lr": 1e-3,
}


def keys(setting: str, base: ml_collections.ConfigDict) -> list[dict[str, Any]]:
    """The setting's runs in the order they run: task by task (the grid's order), the scanned
    schemes by depth before the unrolled stacks (DLCL, DenseFormer), every seed of a cell
    together (or, in a grid with ``seeds_first``, every cell of a seed together), so that a
    partial table holds the paper's Table 1 shape on the first task first, then the runs of
    the grid's ``more`` (sub-grids of their own tasks, cells and seeds), each in that order:
    ``{"task", "scheme", "layers", "seed", "lr", "warmup"}`` each, plus ``"init"`` in a grid of
    initializations; the learning rate and warm-up are ``base``'s (the recipe's) except in the
    ``recipe`` setting's grid."""
    grid = GRIDS[setting]
    runs = _grid_keys(grid, base)
    for part in grid.get("more", []):  # runs the grid adds after its own, in their order
        runs += _grid_keys(part, base)
    return runs


def _grid_keys(grid: dict[str, Any], base: ml_collections.ConfigDict) -> list[dict[str, Any]]:
    """One grid's runs (:func:`keys` without the grid's ``more``)."""
    scannable = {row: schemes.get(common.row_scheme(row)).scannable for row, _ in grid["cells"]}
    cells = sorted(grid["cells"], key=lambda cell: (not scannable[cell[0]], cell[1]))
    recipes = grid.get("recipes", [(base.optimizer.learning_rate, base.schedule.warmup_steps)])
    inits = [{"init": init} for init in grid["inits"]] if "inits" in grid else [{}]
    runs = [
        {"task": task, "scheme": scheme, "layers": n, "seed": seed, "lr": lr, "warmup": warmup}
        | init
        for lr, warmup in recipes
        for init in inits
        for task in grid["tasks"]
        for scheme, n in cells
        for seed in grid["seeds"]
    ]
    if grid.get("seeds_first"):  # stable: within a seed, the order above
        runs.sort(key=lambda run: grid["seeds"].index(run["seed"]))
    return runs


def base_config(setting: str) -> ml_collections.ConfigDict:
    """The main job's config (corpus; greedy BLEU on the validation split at the end, no
    validation before it, the diagnostics every 100 updates), or common.base_config's tiny
    model under :data:`RECIPE` (smoke: common's 16-32-2 smoke model under
    :data:`SMOKE_RECIPE`); the task is set per run."""
    if setting == "corpus":
        c = common.main_job_config()
        c.eval_every = 0
        c.decode.eval_sentences = CORPUS_BLEU_SENTENCES
        c.diagnostics.every = 100  # per-layer gradient norms and LN inputs (measurement only)
        return c
    if setting == "modern_lm":
        return modern_lm_config()
    c = common.base_config("smoke" if setting == "smoke" else "quick")
    recipe = SMOKE_RECIPE if setting == "smoke" else RECIPE
    c.data.dataset = "synthetic_reversal"
    c.data.max_tokens, c.data.bucket_boundaries = 0, ()
    c.data.batch_size = recipe.batch_size
    c.model.dropout = recipe.dropout
    c.log_every = recipe.log_every
    c.eval_batches = 4
    c.peak_flops = 1e12  # no fp32 matmul measurement for the MFU estimate
    c.model.remat_policy = "none"  # 200 layers of B×T×64 activations fit; no recompute
    c.optimizer.learning_rate = recipe.lr
    c.schedule.warmup_steps = recipe.warmup
    c.total_steps = recipe.updates
    return c


def modern_lm_config() -> ml_collections.ConfigDict:
    """configs/deepnorm_lm.py at :data:`MODERN_LM`'s width and recipe (the inverse square root
    schedule every depth_table run takes from ``common.with_run``, not the shipped config's
    polynomial decay; dropout 0), validation NLL at the end only, no checkpoints."""
    c = common.shipped_config("deepnorm_lm")
    m, k = c.model, MODERN_LM
    m.d_model, m.num_heads, m.num_kv_heads, m.ffn_dim = (
        k["d_model"], k["num_heads"], k["num_kv_heads"], k["ffn_dim"]
    )  # fmt: skip
    m.dropout = 0.0
    c.data.max_len, c.data.batch_size = k["max_len"], k["batch_size"]
    c.optimizer.learning_rate, c.schedule.warmup_steps = k["lr"], k["warmup"]
    c.schedule.name = "inverse_sqrt"  # what with_run gives each run, so the record says it
    c.total_steps = k["updates"]
    c.eval_every, c.eval_batches, c.log_every = 0, 16, 25
    c.peak_flops = 1e12  # no fp32 matmul measurement for the MFU estimate
    return c


def task_config(base: ml_collections.ConfigDict, task: str) -> ml_collections.ConfigDict:
    """``base`` on ``task`` (a :data:`TASKS` name; "corpus", "shakespeare": ``base`` as it
    is)."""
    c = ml_collections.ConfigDict(base.to_dict())
    if task in TASKS:
        t = TASKS[task]
        c.model.vocab_size = c.data.vocab_size = t.vocab_size
        c.model.max_len = c.data.max_len = t.max_len
        c.data.min_len = t.min_len
    return c


def make_config(base: ml_collections.ConfigDict, key: dict[str, Any]) -> ml_collections.ConfigDict:
    """``base`` for one run: ``key``'s task, scheme, N encoder and N decoder layers, seed, peak
    learning rate and warm-up (inverse square root) and, if it names one, its ``model.init``;
    the updates stay the recipe's."""
    c = task_config(base, key["task"])
    c = common.with_run(c, key["scheme"], key["layers"], key["lr"], key["warmup"], c.total_steps)
    c.seed = key["seed"]
    c.model.init = key.get("init", c.model.init)
    return c
