"""The checks of a training config, before any data is prepared or anything compiled.

:func:`validate`: unknown and missing fields (:func:`check_fields`), each group's own check
(:func:`check_groups`, over :data:`deepnet_jax.training.config.GROUPS`), then the relations
across groups, on the typed config (:class:`~deepnet_jax.training.run_config.RunConfig`) with
its derived fields filled (``RunConfig.resolved``). An ``auto`` choice is the trainer's to plan:
:func:`is_auto` says whether the remat policy is one, :func:`check_budget` refuses a memory
budget beside a concrete policy, and :func:`stand_in` is what the checks build in its place.
"""

from __future__ import annotations

from typing import Any

import jax
import ml_collections

from deepnet_jax.common import config_schema
from deepnet_jax.data import registry, synthetic
from deepnet_jax.data.options import DataOptions
from deepnet_jax.model import architectures, remat
from deepnet_jax.scale import sharding
from deepnet_jax.training import attention_auto, optimizers
from deepnet_jax.training.config import GROUPS, default_config
from deepnet_jax.training.run_config import RunConfig


def validate(
    config: ml_collections.ConfigDict,
    device_count: int | None = None,
    platform: str | None = None,
) -> RunConfig:
    """One clear error for the first invalid training field, before any data is prepared or
    anything compiled: unknown and missing fields, each group's own check (:data:`GROUPS`),
    then the relations across groups, on the typed config. Returns that typed config
    (:class:`RunConfig`, its derived fields and ``auto`` choices as given): what a command
    passes on. ``device_count``: the devices the mesh spans (default: all); ``platform``: theirs
    ("gpu", "tpu" or "cpu"; default: jax's backend), which a planner compiling for another
    machine's devices names."""
    check_fields(config)  # typos and missing fields first
    check_groups(config)  # each group on its own
    run = RunConfig.from_config(config)
    check_budget(run)  # memory_budget_gb and remat_policy='auto'
    resolved = stand_in(run).resolved()  # fields derived from the data
    architectures.build(resolved.model)  # the model as the run will build it
    devices = jax.device_count() if device_count is None else device_count
    _check_across(resolved, devices, platform or jax.default_backend())
    if resolved.data.dataset == registry.SYNTHETIC:
        _check_synthetic(resolved)
    else:
        _check_corpus(resolved)
    return run


def _check_cudnn_lengths(data: DataOptions) -> None:
    """cuDNN's masked attention trains only on even lengths (its flash attention with a bias:
    "Unsupported sequence length"); the model sees each batch bucket's length."""
    odd = attention_auto.odd_lengths(data)
    if odd:
        raise ValueError(
            f"model.attention_impl='cudnn' trains on even lengths only (cuDNN's masked "
            f"attention); the batch lengths {odd} from data.max_len={data.max_len} and "
            f"data.bucket_boundaries={data.bucket_boundaries} are odd"
        )


def _check_across(config: RunConfig, device_count: int, platform: str) -> None:
    """The relations between groups that every dataset shares, for devices of ``platform``."""
    if config.model.attention_impl == "cudnn":
        _check_cudnn_lengths(config.data)
    if config.model.attention_impl == "cudnn" and platform != "gpu":
        raise ValueError(
            f"model.attention_impl='cudnn' needs a GPU; these devices are {platform!r}: "
            "allowed here are 'reference' and 'xla'"
        )
    if config.model.attention_impl == "splash" and platform != "tpu":
        raise ValueError(
            f"model.attention_impl='splash' needs a TPU; these devices are {platform!r}: "
            "allowed here are 'reference' and 'xla'"
        )
    if config.data.dataset not in registry.NAMES:
        raise ValueError(
            f"data.dataset={config.data.dataset!r}; allowed values are {registry.NAMES}"
        )
    optimizers.validate(config)  # the learning rate and the schedule's relations to it
    if config.data.max_len > config.model.max_len:
        raise ValueError(
            f"data.max_len={config.data.max_len} exceeds model.max_len={config.model.max_len}"
        )
    data, fsdp, _ = sharding.mesh_shape(config.mesh, device_count)
    if config.data.dataset == registry.SYNTHETIC and config.data.batch_size % (data * fsdp):
        raise ValueError(
            f"data.batch_size={config.data.batch_size} does not divide over the {data * fsdp} "
            "data-parallel devices (mesh.data × mesh.fsdp)"
        )


def _check_synthetic(config: RunConfig) -> None:
    """The synthetic task has no splits and no corpus batching."""
    if config.final_split:
        raise ValueError(
            f"final_split={config.final_split!r} needs a corpus; data.dataset="
            f"{registry.SYNTHETIC!r} is evaluated on its held-out batches (use final_split='')"
        )
    for name in ("max_tokens", "bucket_boundaries", "packing", "source_dir"):
        if getattr(config.data, name):
            raise ValueError(
                f"data.{name}={getattr(config.data, name)!r} is not used by "
                f"data.dataset={registry.SYNTHETIC!r}"
            )
    longest = synthetic.longest_content(config.model.arch, config.data.max_len)
    if config.data.min_len > longest:
        raise ValueError(
            f"data.min_len={config.data.min_len} exceeds the {longest} content tokens that "
            f"data.max_len={config.data.max_len} holds for model.arch={config.model.arch!r}"
        )


def _check_corpus(config: RunConfig) -> None:
    """A corpus's data options together, and a model vocabulary that holds the tokenizer's."""
    options = config.data
    options.validate()
    if options.min_len != DataOptions.min_len:
        raise ValueError(
            f"data.min_len={options.min_len} is used by data.dataset={registry.SYNTHETIC!r} "
            f"only; a corpus keeps every example up to data.max_len (leave it at "
            f"{DataOptions.min_len})"
        )
    if options.tokenizer != "char" and config.model.vocab_size < options.vocab_size:
        raise ValueError(
            f"model.vocab_size={config.model.vocab_size} is smaller than "
            f"data.vocab_size={options.vocab_size} (the tokenizer's pieces)"
        )


def is_auto(config: RunConfig) -> bool:
    """Whether ``config`` asks for ``model.remat_policy='auto'`` (planned by the trainer:
    :mod:`deepnet_jax.training.remat_auto`)."""
    return config.model.remat_policy == remat.AUTO


def check_budget(config: RunConfig) -> None:
    """The error of a ``memory_budget_gb`` set beside a concrete policy (nothing would read
    it)."""
    if not is_auto(config) and config.memory_budget_gb > 0:
        raise ValueError(
            f"memory_budget_gb={config.memory_budget_gb} is read only by "
            f"model.remat_policy='auto' (this config has {config.model.remat_policy!r}); set "
            "it to 0 or the policy to 'auto'"
        )


def stand_in(config: RunConfig) -> RunConfig:
    """``config`` itself, or for ``auto`` a copy with auto's first candidate policy and, for
    ``attention_impl='auto'``, the reference attention: what validation builds (the candidates
    differ only in the remat policy and the group size, the attention kernels in none of the
    parameters; ``scan_group_size`` is kept, for the model's own check)."""
    changes = {}
    if is_auto(config):
        changes["remat_policy"] = remat.CANDIDATES[0][0]
    if config.model.attention_impl == remat.AUTO:  # any kernel builds the same parameters
        changes["attention_impl"] = "reference"
    return config.replace(model=changes) if changes else config


def check_fields(config: ml_collections.ConfigDict) -> None:
    """One error for the first field of ``config`` that the schema lacks (a typo) or the first
    schema field ``config`` lacks, naming it and the fields allowed at its level."""
    _check_level(config, default_config(), "")


def _check_level(config: Any, schema: ml_collections.ConfigDict, prefix: str) -> None:
    if not isinstance(config, (ml_collections.ConfigDict, dict)):
        raise ValueError(
            f"{prefix.rstrip('.') or 'config'}={config!r} must be a group of fields "
            f"({', '.join(sorted(schema.keys()))})"
        )
    config_schema.check_names(config, sorted(schema.keys()), prefix)
    for name in sorted(schema.keys()):
        if isinstance(schema[name], ml_collections.ConfigDict):
            _check_level(config[name], schema[name], f"{prefix}{name}.")


def check_groups(config: ml_collections.ConfigDict) -> None:
    """One error for the first value a group of :data:`GROUPS` refuses on its own."""
    for name, group in GROUPS.items():
        group.validate(config[name] if name else config, f"{name}." if name else "")
