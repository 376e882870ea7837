"""Every training configuration field, with its default and a one-line comment.

``default_config()`` is the schema of a training config: ``train.validate`` rejects a field it
does not hold (a typo such as ``nan_polcy``) and a config that lacks one of its fields. Experiment
configs (``configs/*.py``) start from it and change what they need; its data is the synthetic
reversal task.
"""

from __future__ import annotations

from typing import Any

import ml_collections

from deepnet_jax.data.pipeline import default_config as data_default
from deepnet_jax.diagnostics import default_config as diagnostics_default
from deepnet_jax.distributed import default_config as distributed_default
from deepnet_jax.models import default_config as model_default
from deepnet_jax.sharding import default_config as mesh_default


def default_config() -> ml_collections.ConfigDict:
    """Every training field with its default (the schema ``train.validate`` checks against)."""
    c = ml_collections.ConfigDict()
    c.model = model_default()  # architecture, scheme, sizes: see deepnet_jax/model_config.py
    c.data = data_default()  # corpus, tokenizer, batching: see deepnet_jax/data/pipeline.py

    c.optimizer = ml_collections.ConfigDict()
    c.optimizer.name = "adamw"  # adamw (decoupled weight decay; "adam" with weight_decay=0)
    c.optimizer.learning_rate = 5e-4  # peak learning rate
    c.optimizer.b1 = 0.9  # Adam β1
    c.optimizer.b2 = 0.98  # Adam β2 (fairseq's transformer setting)
    c.optimizer.eps = 1e-8  # Adam ε
    c.optimizer.weight_decay = 0.0  # decoupled weight decay (AdamW)
    c.optimizer.grad_clip = 0.0  # global-norm clipping threshold; 0 disables

    c.schedule = ml_collections.ConfigDict()
    c.schedule.name = "inverse_sqrt"  # inverse_sqrt, polynomial, linear, cosine or constant
    c.schedule.warmup_steps = 4000  # linear warm-up updates (all schedules but constant)
    c.schedule.warmup_init_lr = 1e-7  # learning rate at step 0 of the warm-up
    c.schedule.end_lr = 0.0  # polynomial/linear/cosine: learning rate at total_steps
    c.schedule.power = 1.0  # polynomial: decay exponent (1 = linear)

    c.decode = ml_collections.ConfigDict()  # translation decoding (deepnet_jax/decoding.py)
    c.decode.beam_size = 5  # beam for the final evaluation (validation during training is greedy)
    c.decode.length_penalty = 1.0  # α of the length penalty
    c.decode.length_penalty_form = "fairseq"  # fairseq (n^α) or gnmt (((5 + n)/6)^α)
    c.decode.max_len_a = 1.2  # at most ⌊a·source_length + b⌋ output tokens
    c.decode.max_len_b = 10  # (see max_len_a)
    c.decode.batch_size = 64  # sentences per decoding batch
    c.decode.eval_sentences = 500  # validation sentences greedy-translated for BLEU; 0: no BLEU
    c.decode.num_samples = 3  # sample translations printed (and kept in eval.json)

    c.label_smoothing = 0.1  # label-smoothed cross-entropy ε (0 disables)
    c.grad_accum_steps = 1  # micro-batches per optimizer update (optax.MultiSteps)
    c.total_steps = 400  # optimizer updates
    c.log_every = 20  # progress-bar refresh interval (steps)
    c.eval_every = 0  # validation loss every this many updates (0: only at the end)
    c.checkpoint_every = 1000  # orbax checkpoint interval in updates (and at the end); 0: never
    c.max_to_keep = 3  # newest checkpoints kept
    c.eval_batches = 8  # synthetic data only: held-out batches for the final evaluation
    c.final_split = ""  # corpora: split evaluated after training (loss; BLEU by beam search)
    c.nan_policy = "halt"  # non-finite loss/gradient: halt (diagnostic save, exit 1) or skip
    c.nan_max_skips = 10  # skip: halt after this many non-finite steps in a row
    c.peak_flops = 0.0  # per-device peak FLOP/s for the MFU estimate; 0: table or measured
    c.diagnostics = diagnostics_default()  # stability instruments: deepnet_jax/diagnostics.py
    c.mesh = mesh_default()  # devices per mesh axis and logical-axis rules: deepnet_jax/sharding.py
    c.distributed = distributed_default()  # multi-host start-up: deepnet_jax/distributed.py
    c.seed = 0  # parameters, dropout and data order
    return c


# Fields added after runs were first saved, with the value that behaves as the code did before
# the field existed (not necessarily today's default): a saved config that lacks one is read
# with this value, so an older run's parameters load into the model they were trained with.
ADDED_FIELDS: dict[str, Any] = {
    "model.fused_qkv": False,
    "model.attention_impl": "reference",
    "model.dropout_rng": "jax",
}


def upgrade_saved(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A copy of a saved run's ``config`` with every :data:`ADDED_FIELDS` entry it lacks."""
    config = ml_collections.ConfigDict(config.to_dict())
    for path, value in ADDED_FIELDS.items():
        *groups, name = path.split(".")
        level = config
        for group in groups:
            level = level[group]
        if name not in level:
            level[name] = value
    return config


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
    allowed = sorted(schema.keys())
    for name in sorted(config.keys()):
        if name not in schema:
            raise ValueError(
                f"unknown config field {prefix}{name}; the fields of "
                f"{prefix.rstrip('.') or 'the config'} are {', '.join(allowed)}"
            )
    for name in allowed:
        if name not in config:
            raise ValueError(f"config field {prefix}{name} is missing (start from base.get_config)")
        if isinstance(schema[name], ml_collections.ConfigDict):
            _check_level(config[name], schema[name], f"{prefix}{name}.")
