"""What the backward pass keeps: every decision in one place.

* ``model.remat_policy`` names a per-layer ``jax.checkpoint`` policy (:data:`POLICIES`): what
  each layer's rematerialized body saves for the backward pass (``none``: no remat at all).
* ``model.scan_group_size`` k nests the scan (``deepnet_jax/model/grouped_stack.py``): groups
  of k layers, each rematerialized as one unit that saves nothing but its input
  (:data:`GROUP_POLICY`); -1 picks k ≈ √L (:func:`group_size`).
* ``model.remat_policy='auto'`` (:data:`AUTO`) is resolved before a model is built by
  ``deepnet_jax.training.remat_auto``, which compiles the train step for each of
  :func:`candidates` in turn, cheapest first, and takes the first whose planned peak fits
  :func:`budget_bytes`.

Candidates, in order of recomputation in the backward pass (forward passes of every layer
recomputed; "+" marks a cheaper partial recomputation):

====  ==============  ===================  =================================================
 #     remat_policy    scan_group_size      recomputed / kept for the backward pass
====  ==============  ===================  =================================================
 1     none            0                    nothing / every layer's internals
 2     dots            0                    0+ (non-matmul ops) / every layer's matmul outputs
 3     qkv_fc1         0                    0+ (more) / q, k, v and FFN-in per layer
 4     attention_out   0                    1− (all but the attention kernel's forward) /
                                            the attention's output and log-sum-exp per layer
                                            (splash attention only)
 5     full            0                    1 / one residual per layer
 6     dots            -1 (k ≈ √L)          1+ / a residual per group + one group's matmuls
 7     full            -1 (k ≈ √L)          2 / about 2√L residuals
====  ==============  ===================  =================================================

``attention_out`` is a candidate where the attention is Pallas' splash kernel, which names its
output and log-sum-exp (:data:`ATTENTION_OUT`) as the residuals of its backward kernel: with
both saved, the backward recomputes the layer's projections, norms and FFN but not the
attention's forward kernel. Other attention implementations name only their output, and
recompute their forward for its softmax statistics anyway.
A stack that is not scanned (``model.scan_layers=False``, DLCL) has no groups: candidates 1–5.
With ``model.scan_group_size`` set (k ≠ 0), auto keeps that grouping: candidates 6 and 7 at k.

The budget, per device: ``memory_budget_gb`` when set; planning for a TPU or GPU target, the
chip's memory less :data:`HEADROOM`; the device's own limit (``memory_stats()["bytes_limit"]``,
reported by GPU and TPU backends); on CPU the host's memory (its cgroup limit where lower) less
``HEADROOM["cpu"]``, shared by the process's CPU devices. The processes of a multi-host run
take the smallest of their budgets, so that they choose the same program.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Protocol

import jax
import numpy as np

from deepnet_jax.common.config_schema import field

# Names tagged with ``checkpoint_name`` inside each layer, saved by the "qkv_fc1" policy.
SAVED_NAMES = ("q_proj", "k_proj", "v_proj", "qkv_proj", "fc1", "gate")
# The attention's output, and splash attention's log-sum-exp [B, H, T] (the residuals of its
# backward kernel), saved by the "attention_out" policy.
ATTENTION_OUT = "attention_out"
# model.remat_policy → the jax.checkpoint policy of each layer (None: no remat)
POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "qkv_fc1": jax.checkpoint_policies.save_only_these_names(*SAVED_NAMES),
    "attention_out": jax.checkpoint_policies.save_only_these_names(ATTENTION_OUT),
}
AUTO = "auto"  # model.remat_policy resolved to a policy and a group size before a model is built
# A nested scan's group keeps nothing but its input (the per-layer policy applies inside it).
GROUP_POLICY = jax.checkpoint_policies.nothing_saveable
# (model.remat_policy, model.scan_group_size), least recomputation first (module docstring)
CANDIDATES = (
    ("none", 0),
    ("dots", 0),
    ("qkv_fc1", 0),
    ("attention_out", 0),
    ("full", 0),
    ("dots", -1),
    ("full", -1),
)

# The model config fields remat owns, each declared once (default, allowed values,
# comment): ``deepnet_jax.model.config.TransformerConfig`` names them in the config's order.
CONFIG_FIELDS = {
    "scan_group_size": field(
        0,
        "nested scan: 0 one flat scan; k >= 1 an outer scan over groups of k layers, each "
        "rematerialized as one unit; -1: k ≈ sqrt(L), a divisor of L when one is near "
        "(deepnet_jax/model/remat.py)",
        low=-1,
        resumable=True,
        before=0,
    ),
    "remat_policy": field(
        "full",
        "none, full (nothing saved), dots (matmul outputs), qkv_fc1 (the named projections), "
        "attention_out (the attention's output; splash's log-sum-exp too); "
        "auto: the least recomputation whose planned peak fits memory_budget_gb (or the "
        "device's or host's memory), chosen with scan_group_size "
        "(deepnet_jax/training/remat_auto.py); a training config defaults to auto, a model built "
        "directly to full",
        choices=(*POLICIES, AUTO),
        resumable=True,
    ),
}

# Share of a target chip's memory that ``auto`` leaves free when planning deviceless: on TPUs
# for the runtime's own buffers and fragmentation; on GPUs jax's client preallocates 75% of the
# memory by default (XLA_PYTHON_CLIENT_MEM_FRACTION), and that is what a run can use.
# On CPU the host's memory also holds the data pipeline, the checkpoint writer and Python.
HEADROOM = {"tpu": 0.10, "cuda": 0.25, "cpu": 0.25}
GIB = 2**30


class ScanFields(Protocol):
    """The two model fields that shape a stack's scan (``TransformerConfig`` has them)."""

    scan_layers: bool
    scan_group_size: int


def policy(name: str) -> Any:
    """The ``jax.checkpoint`` policy for a ``model.remat_policy`` name (None: no remat)."""
    if name not in POLICIES:
        raise ValueError(f"model.remat_policy={name!r}; allowed values are {', '.join(POLICIES)}")
    return POLICIES[name]


def group_size(config: ScanFields, L: int) -> int:
    """Layers per rematerialized group of a nested scan over ``L`` layers; 0: one flat scan.

    ``model.scan_group_size`` k ≥ 1 (at most L), or -1: k ≈ √L, which makes the L/k + k
    residuals the backward pass keeps (``stacks``' docstring) smallest — the smallest divisor
    of L that is ≥ √L when it keeps L/k + k ≤ 3√L (no remainder group), else ⌈√L⌉.
    """
    k = config.scan_group_size if config.scan_layers else 0
    if k == -1:
        k = math.isqrt(L - 1) + 1  # ⌈√L⌉
        divisor = next(d for d in range(k, L + 1) if L % d == 0)
        if L // divisor + divisor <= 3 * math.sqrt(L):
            k = divisor
    return min(k, L)


def candidates(config: ScanFields) -> list[tuple[str, int]]:
    """The (policy, group size) pairs ``auto`` tries for a model config, cheapest first: with
    a ``scan_group_size`` set, the grouped candidates at that size only; ``attention_out``
    only under splash attention (a config's ``attention_impl``; the module docstring)."""
    group = config.scan_group_size
    if group:
        return [(p, group) for p, k in CANDIDATES if k == -1]
    splash = getattr(config, "attention_impl", None) == "splash"
    return [
        (p, k)
        for p, k in CANDIDATES
        if (config.scan_layers or k == 0) and (p != "attention_out" or splash)
    ]


def budget_bytes(
    budget_gb: float,
    devices: Sequence[jax.Device],
    chip_memory: int = 0,
    platform: str = "",
    chip_name: str = "",
) -> tuple[int, str]:
    """(bytes per device, where the figure comes from) for ``auto``: ``budget_gb``
    (``memory_budget_gb``) when set, else ``chip_memory`` (a deviceless target's chip
    ``chip_name``, of ``platform``: tpu or cuda) less :data:`HEADROOM`, else the devices' or the
    host's memory (module docstring); a ``ValueError`` when none of them gives a size."""
    if budget_gb:
        return int(budget_gb * GIB), f"memory_budget_gb={budget_gb}"
    if chip_memory:
        headroom = HEADROOM[platform]
        return int(chip_memory * (1 - headroom)), f"{chip_name} memory less {headroom:.0%} headroom"
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
        f"({local[0].platform}) reports no device memory limit; set memory_budget_gb "
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
