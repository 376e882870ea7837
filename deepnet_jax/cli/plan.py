"""The memory planner's command line (:mod:`deepnet_jax.training.memory_plan`): will this config's
train step fit on that target, and what does it compute and communicate?

    python -m deepnet_jax.cli.plan --config=configs/deepnet_1000l.py --target=v5p-64 \\
        --config.mesh.data=1 --config.mesh.fsdp=32

Compiles the train step for ``--target`` (:mod:`deepnet_jax.scale.targets`: a Cloud TPU slice such
as ``v5p-64`` or ``v5p:4x4x4``, a GPU node such as ``h100-8``, or ``cpu:N`` simulated CPU devices;
``--num_devices=N`` is ``cpu:N``) on abstract inputs, deviceless, and prints the per-device
figures, the fit against the chip's memory, FLOPs, collectives, a roofline bound and, on a TPU or
GPU target, the kernel model's predicted step time, MFU and time per kernel class
(:mod:`deepnet_jax.scale.kernels`; ``--kernels`` lists every kernel) (a table, then the same as
JSON). A step that XLA cannot fit: one ``does not fit`` line, exit 2. With
``--config.model.remat_policy=auto --config.memory_budget_gb=<GiB>`` it plans each candidate
policy and group size in turn (:mod:`deepnet_jax.training.remat_auto`; on a TPU or GPU target the
budget defaults to the chip's memory less ``remat.HEADROOM``), prints the line naming the first
that fits, then that candidate's figures. A bad config or flag: one ``error:`` line, exit 1.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import jax
from absl import flags
from ml_collections import config_flags

from deepnet_jax.cli import command
from deepnet_jax.common import records
from deepnet_jax.scale import targets
from deepnet_jax.training import config_checks, memory_plan, plan_report, remat_auto, train
from deepnet_jax.training.abstract_step import DoesNotFitError

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file.", lock_config=True)
_TARGET = flags.DEFINE_string(
    "target", None, "v4-8 … v6e-256, v5p:4x4x4, h100-8, a100-8, h200-8, b200-8, cpu:N"
)
_NUM_DEVICES = flags.DEFINE_integer("num_devices", None, "Shorthand for --target=cpu:N.")
_RECORD = flags.DEFINE_string(
    "record",
    None,
    "also write the plan's JSON as a record to this path (with --kernels, each class's "
    "seconds by opcode too): the figures under the command, "
    "commit, date, machine and jax version that made them (common.records)",
)
_KERNELS = flags.DEFINE_bool(
    "kernels",
    False,
    "also print every kernel of the compiled step (a TPU or GPU target): its class, FLOPs, HBM "
    "bytes and roofline time, slowest first (scale.kernels)",
)


def _target() -> targets.Target:
    if _TARGET.value is not None and _NUM_DEVICES.value is not None:
        raise ValueError("give --target or --num_devices (= --target=cpu:N), not both")
    if _NUM_DEVICES.value is not None and _NUM_DEVICES.value < 1:
        raise ValueError(f"--num_devices={_NUM_DEVICES.value} must be >= 1")
    name = _TARGET.value or f"cpu:{_NUM_DEVICES.value or 8}"
    return targets.parse(name)


def _devices(target: targets.Target) -> list[jax.Device]:
    """The target's devices; simulated CPU devices are set up here, before any backend starts."""
    if target.platform != "cpu":
        return targets.compile_devices(target)
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", target.num_devices)
    return jax.devices()


def _plan(target: targets.Target) -> memory_plan.Plan:
    devices = _devices(target)
    # typed: what the planner takes, checked against the target's devices (a GPU's cuDNN
    # attention plans on a CPU host)
    platform = "gpu" if target.platform == "cuda" else target.platform
    config = train.validate(_CONFIG.value, len(devices), platform)
    if config_checks.is_auto(config):  # the chosen candidate's plan
        return remat_auto.choose(config, devices, print, target)[1]
    return memory_plan.plan(config, devices, target)


def execute(arguments: list[str]) -> None:
    """Plan ``--config`` on ``--target`` and print the figures (exit 1 on a bad config or flag,
    2 when the step does not fit)."""
    del arguments  # none
    folder = os.path.dirname(os.path.abspath(_RECORD.value or "."))
    if _RECORD.value and not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
        raise ValueError(f"--record={_RECORD.value}: {folder} is not a folder this can write to")
    head = records.header()
    try:
        result = _plan(_target())
    except DoesNotFitError as e:
        print(str(e), file=sys.stderr)
        sys.exit(2)
    print(plan_report.text(result))
    if _KERNELS.value:
        if not result.kernels:
            raise ValueError(f"--kernels: target {result.target} has no chip figures (a CPU)")
        print(plan_report.kernel_table(result))
    print(json.dumps(plan_json(result)))
    if _RECORD.value:  # the header as the plan started: a rewritten record is no change yet
        records.write(_RECORD.value, {"plan": plan_json(result, kernels=_KERNELS.value)}, head)
    if result.fits is False:
        print(memory_plan.does_not_fit_line(result), file=sys.stderr)
        sys.exit(2)


def plan_json(result: memory_plan.Plan, kernels: bool = False) -> dict:
    """The plan's JSON line: every figure, the kernel list left to ``--kernels``' table (and
    with ``kernel_opcodes`` ({class: {opcode: seconds}}) in the ``--record`` of a plan with
    ``--kernels``: ``kernels=True``)."""
    out = dataclasses.asdict(result)
    rows = out.pop("kernels")
    if kernels:  # compact: each class's seconds by opcode (the rows are --kernels' table)
        by_opcode: dict[str, dict[str, float]] = {}
        for row in rows:
            group = by_opcode.setdefault(row["kind"], {})
            group[row["opcode"]] = group.get(row["opcode"], 0.0) + row["seconds"]
        out["kernel_opcodes"] = by_opcode
    return out


def main(argv: list[str]) -> None:
    """The command (absl's ``argv``, flags parsed): :func:`execute` with the shared checks
    and the one-line error (:mod:`deepnet_jax.cli.command`)."""
    command.main(execute, argv)


if __name__ == "__main__":
    command.run(main)
