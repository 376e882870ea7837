"""``model.remat_policy='auto'``: the least recomputation whose planned peak fits the budget.

Before a model is built, :func:`resolve` (called by ``trainer.build_run`` once the data has
fixed the vocabulary; the planner's command line calls :func:`choose`) replaces ``auto`` with a
concrete ``model.remat_policy`` and ``model.scan_group_size`` (the nested scan:
``deepnet_jax/model/stacks.py``): it compiles the run's train step for each candidate with the AOT
planner (:func:`deepnet_jax.training.memory_plan.plan`, abstract inputs, nothing allocated),
cheapest first, and takes the first whose planned peak per device fits the budget:

* ``memory_budget_gb`` when it is set;
* planning for a TPU or GPU target (``python -m deepnet_jax.cli.plan --target=…``), the chip's
  memory less ``HEADROOM``;
* the device's own limit (``memory_stats()["bytes_limit"]``, reported by GPU and TPU backends);
* on CPU, the host's memory (its cgroup limit where lower) less ``HEADROOM["cpu"]``, shared by
  the process's CPU devices.

It prints one line with the choice and its planned peak, or raises one ``ValueError`` naming
the smallest peak found and what to change.

``auto`` is the training config's default (``train_config.TRAINING_DEFAULTS``): a model that
fits trains without recomputation, at the cost of one planning compile before the first step
(candidate 1 fits: one compile; each candidate that does not fit adds one). A model built
directly (``deepnet_jax.build``) has no budget to plan against and defaults to ``full``.

Candidates, in order of recomputation in the backward pass (forward passes of every layer
recomputed; "+" marks a cheaper partial recomputation):

====  ==============  ===================  =================================================
 #     remat_policy    scan_group_size      recomputed / kept for the backward pass
====  ==============  ===================  =================================================
 1     none            0                    nothing / every layer's internals
 2     dots            0                    0+ (non-matmul ops) / every layer's matmul outputs
 3     qkv_fc1         0                    0+ (more) / q, k, v and FFN-in per layer
 4     full            0                    1 / one residual per layer
 5     dots            -1 (k ≈ √L)          1+ / a residual per group + one group's matmuls
 6     full            -1 (k ≈ √L)          2 / about 2√L residuals
====  ==============  ===================  =================================================

A stack that is not scanned (``model.scan_layers=False``, DLCL) has no groups: candidates 1–4.
With ``model.scan_group_size`` set (k ≠ 0), auto keeps that grouping: candidates 5 and 6 at k.
The planner's figures are those of the backend it compiles for (the run's devices in
``trainer.build_run``; simulated CPU devices in ``python -m deepnet_jax.cli.plan``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import jax
import ml_collections
import numpy as np

from deepnet_jax.model.config import AUTO
from deepnet_jax.training.progress import say

if TYPE_CHECKING:
    from deepnet_jax.scale.targets import Target
    from deepnet_jax.training.memory_plan import Plan

# (model.remat_policy, model.scan_group_size), least recomputation first (module docstring)
# Share of a target chip's memory that ``auto`` leaves free when planning deviceless: on TPUs
# for the runtime's own buffers and fragmentation; on GPUs jax's client preallocates 75% of the
# memory by default (XLA_PYTHON_CLIENT_MEM_FRACTION), and that is what a run can use.
# On CPU the host's memory also holds the data pipeline, the checkpoint writer and Python.
HEADROOM = {"tpu": 0.10, "cuda": 0.25, "cpu": 0.25}
CANDIDATES = (("none", 0), ("dots", 0), ("qkv_fc1", 0), ("full", 0), ("dots", -1), ("full", -1))
GIB = 2**30


def _policy(config: ml_collections.ConfigDict):
    model = config.get("model")
    return (
        model.get("remat_policy") if isinstance(model, (ml_collections.ConfigDict, dict)) else None
    )


def is_auto(config: ml_collections.ConfigDict) -> bool:
    return _policy(config) == AUTO


def candidates(config: ml_collections.ConfigDict) -> list[tuple[str, int]]:
    """The (policy, group size) pairs ``auto`` tries for ``config``, cheapest first: with a
    ``scan_group_size`` set, the grouped candidates at that size only."""
    group = config.model.scan_group_size
    if group:
        return [(p, group) for p, k in CANDIDATES if k == -1]
    return [(p, k) for p, k in CANDIDATES if config.model.scan_layers or k == 0]


def candidate(config: ml_collections.ConfigDict, policy: str, group: int):
    """A copy of ``config`` with ``model.remat_policy=policy``, ``model.scan_group_size=group``."""
    c = config.copy_and_resolve_references()
    c.model.remat_policy, c.model.scan_group_size = policy, group
    return c


def budget_bytes(
    config: ml_collections.ConfigDict,
    devices: Sequence[jax.Device],
    target: Target | None = None,
) -> tuple[int, str]:
    """(bytes per device, where the figure comes from) for ``auto``; a ``ValueError`` when
    ``memory_budget_gb`` is 0 and neither the target nor the backend gives a memory size."""
    if config.memory_budget_gb:
        return int(config.memory_budget_gb * GIB), f"memory_budget_gb={config.memory_budget_gb}"
    if target is not None and target.chip.memory_bytes:
        headroom = HEADROOM[target.platform]
        budget = int(target.chip.memory_bytes * (1 - headroom))
        return budget, f"{target.chip.name} memory less {headroom:.0%} headroom"
    local = [d for d in devices if d.process_index == jax.process_index()] or list(devices)
    stats = local[0].memory_stats() or {}  # None where the backend does not report
    if stats.get("bytes_limit"):
        return _agreed(int(stats["bytes_limit"])), f"the {local[0].platform} device's bytes_limit"
    host = host_memory_bytes()
    if local[0].platform == "cpu" and host:
        budget = _agreed(int(host * (1 - HEADROOM["cpu"]) / len(local)))
        return budget, (
            f"host memory {host / GIB:.1f} GiB less {HEADROOM['cpu']:.0%} headroom"
            + (f", shared by {len(local)} CPU devices" if len(local) > 1 else "")
            + (", the smallest of the processes'" if jax.process_count() > 1 else "")
        )
    raise ValueError(
        f"model.remat_policy='auto' needs a memory budget: this backend "
        f"({devices[0].platform}) reports no device memory limit; set memory_budget_gb "
        "(GiB per device)"
    )


def _agreed(budget: int) -> int:
    """The smallest of every process's ``budget``: the processes of a multi-host run must
    choose the same candidate (they compile one program), whatever memory each host has."""
    if jax.process_count() == 1:
        return budget
    from jax.experimental import multihost_utils

    return int(np.min(multihost_utils.process_allgather(np.array(budget, np.int64))))


def host_memory_bytes(
    cgroup_files: Sequence[str] = (
        "/sys/fs/cgroup/memory.max",  # cgroup v2
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",  # cgroup v1
    ),
) -> int:
    """This host's physical memory in bytes, or the process's cgroup memory limit where that
    is lower (a container's); 0 where neither can be read."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 0
    limits = [physical] if physical > 0 else []
    for path in cgroup_files:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) > 0:  # "max": no limit
            limits.append(int(text))
    return min(limits) if limits else 0


def check(config: ml_collections.ConfigDict) -> None:
    """The error of a ``memory_budget_gb`` set beside a concrete policy (nothing would read
    it)."""
    budget = config.get("memory_budget_gb")
    if not is_auto(config) and isinstance(budget, (int, float)) and budget > 0:
        raise ValueError(
            f"memory_budget_gb={budget} is read only by model.remat_policy='auto' (this "
            f"config has {_policy(config)!r}); set it to 0 or the policy to 'auto'"
        )


def stand_in(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """``config`` itself, or for ``auto`` a copy with ``remat_policy='none'``: what validation
    builds (the candidates differ only in the two fields auto sets, which change no parameter's
    shape; ``scan_group_size`` is kept, for the model's own check of it)."""
    if not is_auto(config):
        return config
    return candidate(config, CANDIDATES[0][0], config.model.scan_group_size)


def choose(
    config: ml_collections.ConfigDict,
    devices: Sequence[jax.Device],
    report: Callable[[str], None] = say,
    target: Target | None = None,
) -> tuple[ml_collections.ConfigDict, Plan]:
    """The first candidate of ``config`` (``remat_policy='auto'``, already validated: see
    :func:`stand_in`) whose planned peak fits, and its plan."""
    from deepnet_jax.training import memory_plan as planner

    check(config)
    configs = {pair: candidate(config, *pair) for pair in candidates(config)}
    budget, source = budget_bytes(config, devices, target)  # its errors before any compile
    tried = []
    for (policy, group), c in configs.items():
        try:
            result = planner.plan(c, list(devices), target)
        except planner.DoesNotFitError:  # XLA itself refused it: more than the chip has
            continue
        tried.append((policy, group, result.peak))
        if result.peak <= budget:
            report(
                f"model.remat_policy='auto': {_name(policy, group)}, planned peak "
                f"{_size(result.peak)} per device of {budget / GIB:.2f} GiB ({source})"
                + (f"; did not fit: {_tried(tried[:-1])}" if len(tried) > 1 else "")
            )
            return c, result
    if not tried:
        raise ValueError(
            "model.remat_policy='auto': XLA refused every candidate for lack of device "
            "memory; shard over more devices (mesh.fsdp) or shrink the batch"
        )
    policy, group, peak = min(tried, key=lambda t: t[2])
    raise ValueError(
        f"model.remat_policy='auto': no candidate fits {budget / GIB:.2f} GiB per device "
        f"({source}); the smallest planned peak is {_size(peak)} "
        f"({_name(policy, group)}); raise memory_budget_gb, shard over more devices "
        "(mesh.fsdp) or shrink the batch (data.batch_size / data.max_tokens)"
    )


def resolve(
    config: ml_collections.ConfigDict,
    devices: Sequence[jax.Device],
    report: Callable[[str], None] = say,
) -> ml_collections.ConfigDict:
    """``config`` itself unless ``model.remat_policy='auto'``; then a copy with the chosen
    policy and group size (see :func:`choose`). ``config`` is validated already."""
    check(config)
    return choose(config, devices, report)[0] if is_auto(config) else config


def _name(policy: str, group: int) -> str:
    return f"remat_policy={policy!r}, scan_group_size={group}"


def _tried(tried: list[tuple[str, int, int]]) -> str:
    return ", ".join(f"{_name(p, k)} {_size(peak)}" for p, k, peak in tried)


def _size(nbytes: int) -> str:
    """``nbytes`` in GiB, or in MiB below 0.1 GiB (a tiny model's peak is not "0.00 GiB")."""
    return f"{nbytes / GIB:.2f} GiB" if nbytes >= GIB / 10 else f"{nbytes / 2**20:.1f} MiB"
