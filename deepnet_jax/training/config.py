"""Every training configuration field, declared once with its default, allowed values and a
one-line comment (:mod:`deepnet_jax.common.config_schema`).

``default_config()`` is the schema of a training config: ``train.validate`` rejects a field it
does not hold (a typo such as ``nan_polcy``), a config that lacks one of its fields, and a value
a field's declaration refuses. Experiment configs (``configs/*.py``) start from it and change
what they need; its data is the synthetic reversal task. ``docs/config.md`` is generated from
these declarations (``python -m deepnet_jax.training.config > docs/config.md``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections

from deepnet_jax.common import config_schema
from deepnet_jax.common.config_schema import field
from deepnet_jax.data.pipeline import DataOptions
from deepnet_jax.data.pipeline import default_config as data_default
from deepnet_jax.data.sources import SPLITS
from deepnet_jax.decoding.search import LENGTH_PENALTIES
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.scale.distributed import DistributedFields
from deepnet_jax.scale.distributed import default_config as distributed_default
from deepnet_jax.scale.sharding import MeshFields
from deepnet_jax.scale.sharding import default_config as mesh_default
from deepnet_jax.training.diagnostics import DiagnosticsFields
from deepnet_jax.training.diagnostics import default_config as diagnostics_default
from deepnet_jax.training.optimizers import OPTIMIZERS, SCHEDULES

NAN_POLICIES = ("halt", "skip")
RATE = {"low": 0, "high": 1, "high_open": True}  # [0, 1)


@dataclasses.dataclass(frozen=True)
class OptimizerFields:
    """``config.optimizer``."""

    name: str = field(
        "adamw", "adamw (decoupled weight decay; adam with weight_decay=0)", choices=OPTIMIZERS
    )
    learning_rate: float = field(5e-4, "peak learning rate (> 0)")
    b1: float = field(0.9, "Adam β1", **RATE)
    b2: float = field(0.98, "Adam β2 (fairseq's transformer setting)", **RATE)
    eps: float = field(1e-8, "Adam ε", low=0)
    weight_decay: float = field(0.0, "decoupled weight decay (AdamW)", low=0)
    grad_clip: float = field(0.0, "global-norm clipping threshold; 0 disables", low=0)


@dataclasses.dataclass(frozen=True)
class ScheduleFields:
    """``config.schedule`` (see ``optimizers.learning_rate_schedule``)."""

    name: str = field("inverse_sqrt", "the learning-rate schedule", choices=SCHEDULES)
    warmup_steps: int = field(4000, "linear warm-up updates (all schedules but constant)", low=0)
    warmup_init_lr: float = field(1e-7, "learning rate at step 0 of the warm-up (<= lr)", low=0)
    end_lr: float = field(0.0, "polynomial/linear/cosine: learning rate at total_steps", low=0)
    power: float = field(1.0, "polynomial: decay exponent (1 = linear)", low=0, low_open=True)


@dataclasses.dataclass(frozen=True)
class DecodeFields:
    """``config.decode``: translation decoding (``deepnet_jax/decoding/search.py``)."""

    beam_size: int = field(
        5, "beam of the final evaluation (validation is greedy)", low=1, resumable=True
    )
    length_penalty: float = field(1.0, "α of the length penalty", resumable=True)
    length_penalty_form: str = field(
        "fairseq", "fairseq (n^α) or gnmt (((5 + n)/6)^α)", choices=LENGTH_PENALTIES, resumable=True
    )
    max_len_a: float = field(
        1.2, "at most ⌊a·source_length + b⌋ output tokens", low=0, resumable=True
    )
    max_len_b: int = field(10, "(see max_len_a)", low=1, resumable=True)
    batch_size: int = field(64, "sentences per decoding batch", low=1, resumable=True)
    eval_sentences: int = field(
        500, "validation sentences greedy-translated for BLEU; 0: no BLEU", low=0, resumable=True
    )
    num_samples: int = field(
        3, "sample translations printed (and kept in eval.json)", low=0, resumable=True
    )


@dataclasses.dataclass(frozen=True)
class RunFields:
    """The top-level fields of a training config."""

    label_smoothing: float = field(0.1, "label-smoothed cross-entropy ε (0 disables)", **RATE)
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
    )


GROUPS: dict[str, type] = {  # config.<name> declared as dataclasses, checked by check_values
    "data": DataOptions,
    "optimizer": OptimizerFields,
    "schedule": ScheduleFields,
    "decode": DecodeFields,
    "": RunFields,
}


SCHEMA: dict[str, type] = {  # every declared group of a training config
    "": RunFields,
    "model": TransformerConfig,
    **{k: v for k, v in GROUPS.items() if k},
    "diagnostics": DiagnosticsFields,
    "mesh": MeshFields,
    "distributed": DistributedFields,
}
# Undeclared groups that may change on resume too: mesh.rules only moves arrays between devices.
RESUMABLE_GROUPS = ("mesh.rules",)

# Where a training run's default differs from the declaration's (the declaration's default is
# that of a model built directly, which has no memory budget to plan against):
TRAINING_DEFAULTS: dict[str, Any] = {
    "model.remat_policy": "auto",  # the least recomputation that fits (remat_auto.py)
}


def resumable_fields() -> frozenset[str]:
    """The dotted names of the fields declared ``resumable=True`` (``total_steps``,
    ``decode.beam_size``, ``mesh.data``, …): the fields a run may change when it resumes."""
    return frozenset(
        f"{name}.{field_name}" if name else field_name
        for name, group in SCHEMA.items()
        for field_name in config_schema.resumable(group)
    )


def may_change_on_resume(path: str) -> bool:
    """Whether the field ``path`` (dotted) may differ between a run and the checkpoints it
    resumes from: declared resumable, or inside one of :data:`RESUMABLE_GROUPS`."""
    return path in resumable_fields() or any(path.startswith(g + ".") for g in RESUMABLE_GROUPS)


def default_config() -> ml_collections.ConfigDict:
    """Every training field with its default (the schema ``train.validate`` checks against)."""
    c = config_schema.config_dict(RunFields)
    c.model = config_schema.config_dict(TransformerConfig)  # deepnet_jax/model/config.py
    c.model.vocab_size = c.model.max_len = 0  # derived from the data (resolve)
    c.data = data_default()  # DataOptions' defaults, data_dir from $DEEPNET_JAX_DATA
    for name, group in GROUPS.items():
        if name and name != "data":
            c[name] = config_schema.config_dict(group)
    c.diagnostics = (
        diagnostics_default()
    )  # stability instruments: deepnet_jax/training/diagnostics.py
    c.mesh = (
        mesh_default()
    )  # devices per mesh axis and logical-axis rules: deepnet_jax/scale/sharding.py
    c.distributed = distributed_default()  # multi-host start-up: deepnet_jax/scale/distributed.py
    for path, value in TRAINING_DEFAULTS.items():
        group, name = path.rsplit(".", 1)
        c[group][name] = value
    return c


def resolve(
    config: ml_collections.ConfigDict, tokenizer_size: int | None = None
) -> ml_collections.ConfigDict:
    """A copy of ``config`` with its derived fields filled (``model_config.DERIVED``; a value
    set explicitly is kept): ``model.max_len`` 0 → ``data.max_len``; ``model.vocab_size`` 0 →
    ``tokenizer_size``, the prepared tokenizer's pieces, or before the data is built
    ``data.vocab_size``, which a bpe/unigram tokenizer has exactly and a char one at most (the
    synthetic task's vocabulary is ``data.vocab_size`` too). Saved runs keep resolved values."""
    config = config.copy_and_resolve_references()
    m = config.model
    if m.vocab_size == 0:
        m.vocab_size = tokenizer_size or config.data.vocab_size
    if m.max_len == 0:
        m.max_len = config.data.max_len
    return config


def check_values(config: ml_collections.ConfigDict) -> None:
    """One error for the first value a declared field of :data:`GROUPS` refuses."""
    for name, group in GROUPS.items():
        config_schema.check_values(
            config[name] if name else config, group, f"{name}." if name else ""
        )


def reference() -> str:
    """``docs/config.md``: every declared field's default, allowed values and comment."""
    parts = [
        "# Configuration fields",
        "",
        "Generated from the declarations in `deepnet_jax/training/config.py` and",
        "`deepnet_jax/model/config.py` by `python -m deepnet_jax.training.config`; every",
        "config starts from `configs/base.py` (these defaults) and changes what it needs.",
        "`mesh.rules` maps each logical axis to mesh axes (`deepnet_jax/scale/sharding.py`,",
        "`DEFAULT_RULES`).",
        "",
        "Derived fields: a training config leaves `model.vocab_size` and `model.max_len` at 0,",
        "and the run fills them from its data (`train_config.resolve`): the tokenizer's size",
        "(`data.vocab_size` for the synthetic task) and `data.max_len`. A value set explicitly",
        "is kept (at least the data's). Saved runs hold the values they trained with.",
        "",
        "On resume: a run that resumes from the checkpoints in its workdir may change the",
        'fields marked "may change" (and `mesh.rules`); every other field, the derived ones',
        "included, must be what the checkpoints were written with "
        "(`deepnet_jax/training/fingerprint.py`).",
        "",
    ]
    for name, group in SCHEMA.items():
        parts += [
            f"## {name or 'top level'}",
            "",
            config_schema.markdown_table(
                group, f"{name}." if name else "", overrides=TRAINING_DEFAULTS
            ),
            "",
        ]
    return "\n".join(parts)


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


USAGE = """usage: python -m deepnet_jax.training.config > docs/config.md

Prints docs/config.md: every training config field's default, allowed values and comment."""

if __name__ == "__main__":
    import sys

    if sys.argv[1:]:  # --help, or anything else: this command takes no arguments
        print(USAGE)
        sys.exit(0 if sys.argv[1] in ("-h", "--help") else 2)
    print(reference(), end="")
