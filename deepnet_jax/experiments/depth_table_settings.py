"""The depth table's settings: the grid of each (:data:`GRIDS`: tasks, scheme × depth cells,
seeds) and the runs of a setting in the order they run (:func:`keys`). Their tasks, recipe and
training configs are :mod:`deepnet_jax.configs.depth_table_recipe`'s;
:mod:`deepnet_jax.experiments.depth_table`'s docstring tables the settings; that module runs
them."""

from __future__ import annotations

from typing import Any

import ml_collections

from deepnet_jax.configs import experiment_rows
from deepnet_jax.experiments import common
from deepnet_jax.model import schemes

SETTINGS = (
    "smoke", "recipe", "init", "quick", "full", "long500", "corpus", "modern_lm", "since_deepnet"
)  # fmt: skip

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
    # the longer-budget row: quick's four scanned schemes at 500L-500L, seed 0, under the recipe
    # with twice its updates (configs.depth_table_recipe.LONG_UPDATES), since none of them
    # trained at 500L within quick's 800 (docs/reproduction.md, "At 500L-500L")
    "long500": {
        "tasks": ["reversal64"],
        "cells": [(s, 500) for s in _SCHEMES],
        "seeds": [0],
    },
    # the schemes since DeepNet, DyT and CompleteP (its base at 6L:
    # configs.experiment_rows.ROW_FIELDS) under the same recipe and verdict rules, beside quick's
    # rows (docs/schemes.md); seed 0 of every cell first, then seeds 1 and 2
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
    scannable = {
        row: schemes.get(experiment_rows.row_scheme(row)).scannable for row, _ in grid["cells"]
    }
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
