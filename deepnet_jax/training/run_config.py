"""The training config typed once: :class:`RunConfig`, one frozen value per run.

A command validates the user's ``ConfigDict`` (``config_checks.validate``) and builds the
:class:`RunConfig` from it (:meth:`RunConfig.from_config`); everything below the command —
the trainer, the data, the planner, the fingerprint, evaluation — takes that value, whose
groups are the dataclasses that declare them (:data:`deepnet_jax.training.config.GROUPS`):
``run.model`` a :class:`~deepnet_jax.model.config.TransformerConfig`, ``run.data`` a
:class:`~deepnet_jax.data.options.DataOptions`, and so on, with the top-level fields
(:class:`~deepnet_jax.training.config.RunFields`) as its own attributes (``run.total_steps``).

:meth:`RunConfig.to_dict` is the nested dict a checkpoint saves and the resume fingerprint
compares (the ``ConfigDict``'s ``to_dict()`` field for field, ``mesh.rules`` included);
:meth:`RunConfig.from_dict` reads one back, a config saved before a field existed read with the
field's declared ``before`` value (``config.upgrade_saved``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import ml_collections

from deepnet_jax.common import config_schema
from deepnet_jax.data.options import DataOptions
from deepnet_jax.decoding.options import DecodeFields
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.scale.distributed import DistributedFields
from deepnet_jax.scale.sharding import MeshFields
from deepnet_jax.training import config as train_config
from deepnet_jax.training.config import GROUPS, RunFields
from deepnet_jax.training.diagnostics import DiagnosticsFields
from deepnet_jax.training.optimizers import OptimizerFields, ScheduleFields


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig(RunFields):
    """A validated training config as one frozen value: the top-level fields
    (:class:`RunFields`: ``total_steps``, ``seed``, …) and one attribute per group of
    :data:`GROUPS`, typed by the dataclass that declares it. ``data.seed`` is the run's
    ``seed``. Derived model fields (``model.vocab_size``, ``model.max_len``) are 0 until
    :meth:`resolved`; ``model.remat_policy`` / ``attention_impl`` may be ``auto`` until the
    trainer or the planner chooses (``remat_auto``, ``attention_auto``)."""

    model: TransformerConfig
    data: DataOptions
    optimizer: OptimizerFields
    schedule: ScheduleFields
    decode: DecodeFields
    diagnostics: DiagnosticsFields
    mesh: MeshFields
    distributed: DistributedFields

    def __post_init__(self) -> None:
        if self.data.seed != self.seed:
            raise ValueError(f"data.seed={self.data.seed} must be the run's seed={self.seed}")

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> RunConfig:
        """The typed value of a ``ConfigDict`` whose fields are checked already (by
        ``config_checks.validate``; nothing is checked here), its references resolved."""
        return cls.from_dict(config.to_dict(), upgrade=False)

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any], upgrade: bool = True) -> RunConfig:
        """The typed value of a config as a nested dict (:meth:`to_dict`'s form, or a
        checkpoint's JSON). ``upgrade``: a saved config, whose fields added since it was
        written take their declared ``before`` value (``config.upgrade_saved``); a field it
        still lacks is one error naming it, a field no group declares is left out."""
        values = train_config.upgrade_saved(saved) if upgrade else saved
        groups = {
            name: _group(name, group.fields, values) for name, group in GROUPS.items() if name
        }
        top = config_schema.as_dict(config_schema.typed(RunFields, values))
        return cls(**top, **groups)

    def to_dict(self) -> dict[str, Any]:
        """The nested dict of the config (what checkpoints save and the fingerprint compares):
        each group's declared fields and ``mesh.rules``, as the ``ConfigDict``'s
        ``to_dict()`` gives them (names sorted at each level)."""
        out = config_schema.as_dict(self)
        for name in GROUPS:
            if name:
                out[name] = config_schema.as_dict(getattr(self, name))
        return dict(sorted(out.items()))

    def to_config(self) -> ml_collections.ConfigDict:
        """The config as a ``ConfigDict`` again (for code that reads one: the torchscale
        conversions of a loaded run's model)."""
        return ml_collections.ConfigDict(self.to_dict())

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with fields replaced: a top-level field by its value (``total_steps=10``), a
        group by a dict of its fields to change (``model={"remat_policy": "dots"}``); a new
        ``seed`` is the data's too."""
        for name, value in changes.items():
            if name in GROUPS and isinstance(value, Mapping):
                changes[name] = dataclasses.replace(getattr(self, name), **value)
        if "seed" in changes:
            data = changes.get("data", self.data)
            changes["data"] = dataclasses.replace(data, seed=changes["seed"])
        return dataclasses.replace(self, **changes)

    def resolved(self, tokenizer_size: int | None = None) -> RunConfig:
        """The config with its derived model fields filled (``config.derived``: the data's
        ``max_len``; ``tokenizer_size``, the prepared tokenizer's pieces, else
        ``data.vocab_size``); a value set explicitly is kept."""
        return self.replace(model=train_config.derived(self.model, self.data, tokenizer_size))


def _group(name: str, fields: type, values: Mapping[str, Any]) -> Any:
    """The group ``name`` of the config ``values`` as its dataclass ``fields``. ``data`` carries
    the run's seed, and a saved run's data group may lack fields added since (their defaults:
    ``DataOptions.from_config``)."""
    if fields is DataOptions:
        return DataOptions.from_config(values[name], values["seed"])
    return config_schema.typed(fields, values[name], f"{name}.")


def typed(config: RunConfig | ml_collections.ConfigDict) -> RunConfig:
    """``config`` itself, or a ``ConfigDict`` (checked already) as its :class:`RunConfig`:
    for the surfaces that take either (``memory_plan.plan``)."""
    return config if isinstance(config, RunConfig) else RunConfig.from_config(config)
