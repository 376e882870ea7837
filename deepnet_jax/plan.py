"""The memory planner's command line (:mod:`deepnet_jax.memory_plan`): will this config's train
step fit on that many devices?

    python -m deepnet_jax.plan --config=configs/deepnet_1000l.py --num_devices=256 \\
        --config.mesh.data=8 --config.mesh.fsdp=32

Compiles the train step for ``--num_devices`` simulated CPU devices on abstract inputs and
prints the per-device figures (a table, then the same as JSON). With
``--config.model.remat_policy=auto --config.memory_budget_gb=<GiB>`` it plans each candidate
policy and group size in turn (:mod:`deepnet_jax.remat_auto`), prints the line naming the first
that fits, then that candidate's figures. A bad config or flag: one ``error:`` line, exit 1.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import jax
from absl import app, flags
from ml_collections import config_flags

from deepnet_jax import log_setup, memory_plan, remat_auto, train

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file.", lock_config=True)
_NUM_DEVICES = flags.DEFINE_integer("num_devices", 8, "Simulated CPU devices to plan for.")


def main(argv: list[str]) -> None:
    """Plan ``--config`` on ``--num_devices`` simulated CPU devices and print the figures. The
    devices are set up here, so this must run before anything starts a JAX backend."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    n = _NUM_DEVICES.value
    if n < 1:
        print(f"error: --num_devices={n} must be >= 1", file=sys.stderr)
        sys.exit(1)
    log_setup.configure(log_setup.requested_verbosity())
    jax.config.update("jax_platforms", "cpu")  # before any backend starts
    jax.config.update("jax_num_cpu_devices", n)
    config, devices = _CONFIG.value, jax.devices()
    try:
        if remat_auto.is_auto(config):  # the chosen candidate's plan
            config, result = remat_auto.choose(
                config, devices, lambda c: train.validate(c, len(devices)), print
            )
        else:
            config = remat_auto.resolve(config, devices)  # unchanged; checks memory_budget_gb
            train.validate(config, len(devices))
            result = memory_plan.plan(config, devices)
    except ValueError as e:
        print("error: " + " ".join(str(e).split()), file=sys.stderr)
        sys.exit(1)
    print(result.report())
    print(json.dumps(dataclasses.asdict(result)))


if __name__ == "__main__":
    app.run(main)
