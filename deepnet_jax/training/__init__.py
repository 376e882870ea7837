"""Training: the config, the run, the loop, steps, optimizers, memory planning.

Public API (each name is imported on first use, so ``import deepnet_jax.training`` stays
light)::

    from deepnet_jax import training
    config = training.default_config()       # every field: docs/config.md
    config.total_steps = 1000
    run = training.validate(config)            # one clear error for a bad field; typed
    results = training.run(config, workdir)    # progress bar, checkpoints, eval.json
    plan = training.plan(run, jax.devices())   # compiled per-device memory, before a run
"""

from __future__ import annotations

from deepnet_jax.common import lazy

_SURFACE = {  # name -> the submodule that defines it
    "GROUPS": "config",
    "default_config": "config",
    "resolve": "config",
    "upgrade_saved": "config",
    "RunConfig": "run_config",
    "validate": "config_checks",
    "run": "train",
    "plan": "memory_plan",
    "Plan": "memory_plan",
}
__all__ = sorted(_SURFACE)
__getattr__, __dir__ = lazy.surface(__name__, _SURFACE)
