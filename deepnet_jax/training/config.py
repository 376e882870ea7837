"""The training config: every field declared once, by the module that owns it, with its default,
allowed values and one-line comment (:mod:`deepnet_jax.common.config_schema`), and gathered here
in one table, :data:`GROUPS` (``{prefix: Group(fields, default, check)}``).

:func:`default_config` (what ``configs/*.py`` start from: the synthetic reversal task), the
checks (:mod:`deepnet_jax.training.config_checks`: unknown and missing fields, each group's
values, then the relations across groups) and ``docs/config.md`` (:func:`reference`,
``python -m deepnet_jax.training.config > docs/config.md``) all iterate that table;
:func:`resolve` fills the fields derived from the data.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import ml_collections

from deepnet_jax.common import config_schema
from deepnet_jax.common.config_schema import FRACTION, field
from deepnet_jax.data import options as data_options
from deepnet_jax.data.options import DataOptions
from deepnet_jax.data.sources import SPLITS
from deepnet_jax.decoding import options as decoding_options
from deepnet_jax.decoding.options import DecodeFields
from deepnet_jax.model import config as model_config
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.scale import distributed, sharding
from deepnet_jax.scale.distributed import DistributedFields
from deepnet_jax.scale.sharding import MeshFields
from deepnet_jax.training import optimizers
from deepnet_jax.training.diagnostics import DiagnosticsFields

NAN_POLICIES = ("halt", "skip")


@dataclasses.dataclass(frozen=True)
class RunFields:
    """The top-level fields of a training config."""

    label_smoothing: float = field(0.1, "label-smoothed cross-entropy ε (0 disables)", **FRACTION)
    loss_chunk: int = field(
        0,
        "target positions per chunk of the output head and the loss (losses.fused_mean_loss, "
        "each chunk's gradients computed beside its loss): the float32 logits [B, chunk, vocab] "
        "at a time instead of [B, T, vocab]; 0: all at once",
        low=0,
        resumable=True,
        before=0,
    )
    grad_accum_steps: int = field(1, "micro-batches per optimizer update (optax.MultiSteps)", low=1)
    total_steps: int = field(400, "optimizer updates", low=1, resumable=True)
    log_every: int = field(20, "micro-batches between log lines", low=1, resumable=True)
    eval_every: int = field(
        0, "validation every this many updates (0: only at the end)", low=0, resumable=True
    )
    checkpoint_every: int = field(
        1000,
        "orbax checkpoint interval in updates (and at the end); 0: never",
        low=0,
        resumable=True,
    )
    max_to_keep: int = field(3, "newest checkpoints kept", low=1, resumable=True)
    eval_batches: int = field(
        8, "synthetic data only: held-out batches for the final evaluation", low=1, resumable=True
    )
    final_split: str = field(
        "",
        "corpora: split evaluated after training (loss; BLEU by beam search); empty: none",
        choices=("", *SPLITS),
        resumable=True,
    )
    nan_policy: str = field(
        "halt",
        "non-finite loss/gradient: halt (diagnostic save, exit 1) or skip the update",
        choices=NAN_POLICIES,
    )
    nan_max_skips: int = field(
        10, "skip: halt after this many non-finite steps in a row", low=1, resumable=True
    )
    peak_flops: float = field(
        0.0,
        "per-device peak FLOP/s for the MFU estimate; 0: table or measured",
        low=0,
        resumable=True,
    )
    seed: int = field(0, "parameters, dropout and data order", low=0)
    memory_budget_gb: float = field(
        0.0,
        "model.remat_policy='auto': per-device memory budget in GiB; 0: the device's own "
        "limit (GPU/TPU), on CPU the host's memory less 25% shared by its devices",
        low=0,
        resumable=True,
        before=0.0,
    )


@dataclasses.dataclass(frozen=True)
class Group:
    """One group of a training config, declared by the module that owns it: the dataclass of
    its fields (:mod:`deepnet_jax.common.config_schema`), the ``ConfigDict`` of its defaults
    (``default``; None: the declared ones) and the check of its values on their own
    (``check``; None: each value against its declaration). Relations across groups are
    ``config_checks.validate``'s."""

    fields: type
    default: Callable[[], ml_collections.ConfigDict] | None = None
    check: Callable[[ml_collections.ConfigDict], None] | None = None

    def defaults(self) -> ml_collections.ConfigDict:
        return self.default() if self.default else config_schema.config_dict(self.fields)

    def validate(self, values: ml_collections.ConfigDict, prefix: str) -> None:
        if self.check:
            self.check(values)
        else:
            config_schema.check_values(values, self.fields, prefix)


def _model_default() -> ml_collections.ConfigDict:
    c = config_schema.config_dict(TransformerConfig)
    c.vocab_size = c.max_len = 0  # derived from the data (resolve)
    return c


# config.<prefix> -> its group ("" is the top level), in the order the checks and the docs run.
GROUPS: dict[str, Group] = {
    "": Group(RunFields),
    "model": Group(
        TransformerConfig, _model_default, functools.partial(model_config.validate, derived_ok=True)
    ),
    "data": Group(DataOptions, data_options.default_config),
    "optimizer": Group(optimizers.OptimizerFields),
    "schedule": Group(optimizers.ScheduleFields),
    "decode": Group(DecodeFields, check=decoding_options.validate),
    "diagnostics": Group(DiagnosticsFields),
    "mesh": Group(MeshFields, sharding.default_config, sharding.validate),
    "distributed": Group(DistributedFields, check=distributed.validate),
}
# Undeclared groups that may change on resume too: mesh.rules only moves arrays between devices.
RESUMABLE_GROUPS = ("mesh.rules",)

# Where a training run's default differs from the declaration's (the declaration's default is
# that of a model built directly, which has no memory budget to plan against):
TRAINING_DEFAULTS: dict[str, Any] = {
    "model.remat_policy": "auto",  # the fastest recomputation that fits (remat_auto.py)
    "model.attention_impl": "auto",  # cuDNN's fused attention where it applies (attention_auto.py)
}


def resumable_fields() -> frozenset[str]:
    """The dotted names of the fields declared ``resumable=True`` (``total_steps``,
    ``decode.beam_size``, ``mesh.data``, …): the fields a run may change when it resumes."""
    return frozenset(
        f"{name}.{field_name}" if name else field_name
        for name, group in GROUPS.items()
        for field_name in config_schema.resumable(group.fields)
    )


def may_change_on_resume(path: str) -> bool:
    """Whether the field ``path`` (dotted) may differ between a run and the checkpoints it
    resumes from: declared resumable, or inside one of :data:`RESUMABLE_GROUPS`."""
    return path in resumable_fields() or any(path.startswith(g + ".") for g in RESUMABLE_GROUPS)


def default_config() -> ml_collections.ConfigDict:
    """Every training field with its default (the schema ``config_checks.validate`` checks
    against): each group's defaults (:data:`GROUPS`), then :data:`TRAINING_DEFAULTS`."""
    c = GROUPS[""].defaults()
    for name, group in GROUPS.items():
        if name:
            c[name] = group.defaults()
    for path, value in TRAINING_DEFAULTS.items():
        group_name, name = path.rsplit(".", 1)
        c[group_name][name] = value
    return c


def derived(model: Any, data: Any, tokenizer_size: int | None = None) -> dict[str, int]:
    """The values of the derived model fields (``model_config.DERIVED``) for a config's
    ``model`` and ``data`` groups (``ConfigDict`` or typed; a value set explicitly is kept):
    ``max_len`` 0 → ``data.max_len``; ``vocab_size`` 0 → ``tokenizer_size``, the prepared
    tokenizer's pieces, or before the data is built ``data.vocab_size``, which a bpe/unigram
    tokenizer has exactly and a char one at most (the synthetic task's vocabulary is
    ``data.vocab_size`` too). Saved runs keep resolved values."""
    return {
        "vocab_size": model.vocab_size or tokenizer_size or data.vocab_size,
        "max_len": model.max_len or data.max_len,
    }


def resolve(
    config: ml_collections.ConfigDict, tokenizer_size: int | None = None
) -> ml_collections.ConfigDict:
    """A copy of ``config`` with its derived fields filled (:func:`derived`); the typed run's
    is ``RunConfig.resolved``."""
    config = config.copy_and_resolve_references()
    config.model.update(derived(config.model, config.data, tokenizer_size))
    return config


def added_fields() -> dict[str, Any]:
    """Every field declared with a ``before`` value (``config_schema.field(..., before=…)``:
    added after runs were saved), by dotted path (``model.dropout_rng``), with that value."""
    return {
        f"{name}.{field_name}" if name else field_name: before
        for name, group in GROUPS.items()
        for field_name, before in config_schema.added(group.fields).items()
    }


# Fields added after runs were first saved, with the value that behaves as the code did before
# the field existed (not necessarily today's default), generated from the declarations: a saved
# config that lacks one is read with this value (:func:`upgrade_saved`), so an older run's
# parameters load into the model they were trained with.
ADDED_FIELDS: dict[str, Any] = added_fields()


def upgrade_saved(
    config: ml_collections.ConfigDict | Mapping[str, Any],
) -> ml_collections.ConfigDict:
    """A copy of a saved run's ``config`` (as its checkpoint or ``config.json`` holds it) with
    every :data:`ADDED_FIELDS` entry it lacks."""
    if isinstance(config, ml_collections.ConfigDict):
        config = config.to_dict()
    config = ml_collections.ConfigDict(copy.deepcopy(dict(config)))
    for path, value in ADDED_FIELDS.items():
        *groups, name = path.split(".")
        level = config
        for group in groups:
            level = level[group]
        if name not in level:
            level[name] = value
    return config


def reference() -> str:
    """``docs/config.md``: every declared field's default, allowed values and comment."""
    parts = [
        "# Configuration fields",
        "",
        "Generated by `python -m deepnet_jax.training.config` from the table of groups in",
        "`deepnet_jax/training/config.py` (`GROUPS`), each declared by the module that owns",
        "it; every config starts from `configs/base.py` (these defaults) and changes what it",
        "needs.",
        "`mesh.rules` maps each logical axis to mesh axes (`deepnet_jax/scale/sharding.py`,",
        "`DEFAULT_RULES`).",
        "",
        "Derived fields: a training config leaves `model.vocab_size` and `model.max_len` at 0,",
        "and the run fills them from its data (`resolve` in `deepnet_jax/training/config.py`):",
        "the tokenizer's size (`data.vocab_size` for the synthetic task) and `data.max_len`. A",
        "value set explicitly is kept (at least the data's). Saved runs hold the values they",
        "trained with.",
        "",
        "On resume: a run that resumes from the checkpoints in its workdir may change the",
        'fields marked "may change" (and `mesh.rules`); every other field, the derived ones',
        "included, must be what the checkpoints were written with "
        "(`deepnet_jax/training/fingerprint.py`).",
        "",
        "Saved runs: a field added after runs were saved says what a run saved before it reads",
        "as (the value that behaves as the code did then, declared by the field: `before=`;",
        "`ADDED_FIELDS` in `deepnet_jax/training/config.py` gathers them).",
        "",
    ]
    for name, group in GROUPS.items():
        parts += [
            f"## {name or 'top level'}",
            "",
            f"Declared by `{group.fields.__module__.replace('.', '/')}.py`"
            f" (`{group.fields.__name__}`).",
            "",
            config_schema.markdown_table(
                group.fields, f"{name}." if name else "", overrides=TRAINING_DEFAULTS
            ),
            "",
        ]
    return "\n".join(parts)


USAGE = """usage: python -m deepnet_jax.training.config > docs/config.md

Prints docs/config.md: every training config field's default, allowed values and comment."""

if __name__ == "__main__":
    import sys

    from deepnet_jax.training import config as declared  # the package's module, not __main__

    if sys.argv[1:]:  # --help, or anything else: this command takes no arguments
        print(USAGE)
        sys.exit(0 if sys.argv[1] in ("-h", "--help") else 2)
    print(declared.reference(), end="")
