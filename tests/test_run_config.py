"""The training config typed once (``training.run_config.RunConfig``): its dict is the
ConfigDict's, saved configs read back through it (fields added since with their declared
``before`` value), and ``ADDED_FIELDS`` is generated from the declarations."""

from __future__ import annotations

import dataclasses
import json
import typing

import ml_collections
import pytest

from deepnet_jax import configs
from deepnet_jax.common import config_schema
from deepnet_jax.common.config_schema import field
from deepnet_jax.data.options import DataOptions
from deepnet_jax.model import architectures
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.scale import sharding
from deepnet_jax.scale.sharding import MeshFields
from deepnet_jax.training import config as train_config
from deepnet_jax.training import config_checks, loading, train
from deepnet_jax.training.run_config import RunConfig

# runs/checkpoint.py's ADDED_FIELDS as it was written by hand before the fields declared them
# (``before=``): the generated table must keep every entry and value.
ADDED_FIELDS_BEFORE_GENERATION = {
    "model.fused_qkv": False,
    "model.attention_impl": "reference",
    "model.dropout_rng": "jax",
    "model.scan_group_size": 0,
    "model.scale_embedding": True,
    "model.position_offset": 0,
    "model.zero_padding_embeddings": False,
    "model.init": "paper",
    "memory_budget_gb": 0.0,
    "data.min_len": 2,
    "model.rope_theta": 10000.0,
    "model.num_kv_heads": 0,
    "model.norm": "layernorm",
    "model.qk_norm": False,
    "model.deepnorm_variant": "paper",
    "model.dyt_alpha": 0.5,
    "model.mix_ln_ratio": 0.25,
    "model.deepscalelm_k": 2.0,
    "model.skipinit_alpha": 0.0,
    "loss_chunk": 0,
}
# declared with their before-values since (CompleteP; Hyper-Connections and mHC; cuDNN's native
# masks; the unrolled scan)
ADDED_SINCE = {
    "model.parameterization": "standard",
    "model.completep_base_layers": 2,
    "model.completep_base_width": 256,
    "model.completep_init_std": 0.02,
    "model.hc_rate": 4,
    "model.hc_dynamic": True,
    "model.mhc_sinkhorn_iters": 20,
    "model.mhc_sinkhorn_eps": 0.0,
    "model.mhc_variant": "paper",
    "model.attention_masks": "bias",
    "model.scan_unroll": 1,
}


def _shipped(name: str) -> ml_collections.ConfigDict:
    c = configs.load(name)
    if c.data.dataset == "local_parallel" and not c.data.source_dir:
        c.data.source_dir = "/path/to/iwslt14"  # the one field the user must give
    return c


def _json(tree) -> str:
    return json.dumps(tree)  # key order included, tuples as lists (what a checkpoint holds)


def test_run_config_has_one_attribute_per_group_typed_by_its_declaration():
    hints = typing.get_type_hints(RunConfig)
    groups = {f.name for f in dataclasses.fields(RunConfig) if "spec" not in f.metadata}
    assert groups == set(train_config.GROUPS) - {""}
    assert all(hints[name] is train_config.GROUPS[name].fields for name in groups)
    top = {f.name for f in dataclasses.fields(RunConfig) if "spec" in f.metadata}
    assert top == set(config_schema.specs(train_config.RunFields))


def test_the_generated_added_fields_are_the_hand_written_table():
    assert train_config.ADDED_FIELDS == ADDED_FIELDS_BEFORE_GENERATION | ADDED_SINCE
    assert train_config.added_fields() == train_config.ADDED_FIELDS


@pytest.mark.parametrize("name", configs.NAMES)
def test_a_shipped_config_typed_gives_back_its_dict(name):
    c = _shipped(name)
    run = train.validate(c)  # the check types the config: what a command passes on
    assert run == RunConfig.from_config(c)
    assert _json(run.to_dict()) == _json(c.to_dict())  # what checkpoints save, order included
    assert RunConfig.from_dict(json.loads(_json(run.to_dict()))) == run  # and read back
    assert isinstance(run.model, TransformerConfig) and isinstance(run.data, DataOptions)
    assert run.data.seed == run.seed and run.total_steps == c.total_steps
    for name_, group in train_config.GROUPS.items():  # one typed attribute per group
        assert name_ == "" or isinstance(getattr(run, name_), group.fields)


def test_mesh_rules_survive_the_round_trip_as_given():
    c = train_config.default_config()
    c.mesh.rules.embed = ""  # no ZeRO-3 sharding of d_model
    run = RunConfig.from_config(c)
    assert run.to_dict()["mesh"]["rules"] == c.mesh.rules.to_dict()
    assert dict(sharding.logical_axis_rules(run.mesh))["embed"] is None
    saved = c.to_dict()
    del saved["mesh"]["rules"]  # a config without the undeclared sub-dict keeps none
    typed = RunConfig.from_dict(saved, upgrade=False)
    assert typed.mesh.rules is None and "rules" not in typed.to_dict()["mesh"]
    assert sharding.logical_axis_rules(typed.mesh) == sharding.LOGICAL_AXIS_RULES


def test_a_config_saved_before_fields_existed_reads_with_their_declared_before_values():
    c = train_config.default_config()
    c.model.dropout_rng, c.loss_chunk = "hash", 64  # today's values, other than the old code's
    saved = c.to_dict()
    del saved["model"]["dropout_rng"], saved["loss_chunk"], saved["data"]["min_len"]
    run = RunConfig.from_dict(saved)
    assert run.model.dropout_rng == "jax"  # the behaviour of the code that saved it
    assert (run.loss_chunk, run.data.min_len) == (0, 2)
    with pytest.raises(ValueError, match=r"^config field model\.dropout_rng is missing"):
        RunConfig.from_dict(saved, upgrade=False)
    unchanged = RunConfig.from_dict(c.to_dict())  # fields that are there are left alone
    assert (unchanged.model.dropout_rng, unchanged.loss_chunk) == ("hash", 64)


def test_a_saved_data_group_lacking_a_later_undeclared_addition_reads_its_default():
    saved = train_config.default_config().to_dict()
    del saved["data"]["source_lang"]  # added before fields declared before=: its default
    assert RunConfig.from_dict(saved).data.source_lang == ""


def test_a_before_value_is_declared_by_the_field_and_must_be_allowed():
    @dataclasses.dataclass(frozen=True)
    class Group:
        old: str = field("new", "a field added later", choices=("old", "new"), before="old")
        always: int = field(1, "a field from the start", low=1)

    assert config_schema.added(Group) == {"old": "old"}
    assert "a run saved before this field reads as `'old'`" in config_schema.markdown_table(
        Group, ""
    )
    with pytest.raises(TypeError, match="before='older' is not a value of the field"):
        field("new", "a field added later", choices=("old", "new"), before="older")


def test_replace_resolved_and_the_run_seed():
    c = train_config.default_config()
    c.data.vocab_size, c.data.max_len = 300, 48
    run = RunConfig.from_config(c)
    assert (run.model.vocab_size, run.model.max_len) == (0, 0)  # derived: the data's
    resolved = run.resolved()
    assert (resolved.model.vocab_size, resolved.model.max_len) == (300, 48)
    assert run.resolved(tokenizer_size=271).model.vocab_size == 271
    assert resolved.resolved(tokenizer_size=5).model.vocab_size == 300  # set: kept
    assert train_config.resolve(c).to_dict() == resolved.to_dict()  # the ConfigDict's rule
    changed = run.replace(total_steps=7, model={"d_model": 256}, seed=3)
    assert (changed.total_steps, changed.model.d_model) == (7, 256)
    assert changed.data.seed == changed.seed == 3 and run.seed == 0
    with pytest.raises(ValueError, match=r"data\.seed=1 must be the run's seed=0"):
        dataclasses.replace(run, data=dataclasses.replace(run.data, seed=1))


def test_validation_checks_the_typed_config():
    c = train_config.default_config()
    c.data.vocab_size = 1  # a model vocabulary of 1 once derived: the model's own check
    with pytest.raises(ValueError, match=r"model\.vocab_size=1 is invalid"):
        train.validate(c)
    c = train_config.default_config()
    c.memory_budget_gb, c.model.remat_policy = 2.0, "full"
    with pytest.raises(ValueError, match=r"memory_budget_gb=2\.0 is read only by"):
        train.validate(c)
    run = RunConfig.from_config(train_config.default_config())
    stand_in = config_checks.stand_in(run)
    assert (stand_in.model.remat_policy, stand_in.model.attention_impl) == ("none", "reference")
    assert (run.model.remat_policy, run.model.attention_impl) == ("auto", "auto")


def test_build_takes_the_frozen_model_as_it_is_and_a_config_dict_typed_once():
    run = RunConfig.from_config(train_config.default_config()).resolved()
    with pytest.raises(ValueError, match=r"model\.remat_policy='auto' is invalid: it names no"):
        architectures.build(run.model)
    model = architectures.build(config_checks.stand_in(run).model)
    assert model.config == config_checks.stand_in(run).model
    c = architectures.default_config()
    assert architectures.build(c).config == TransformerConfig.from_config(c)
    bad = dataclasses.replace(config_checks.stand_in(run).model, num_heads=7)
    with pytest.raises(ValueError, match=r"model\.num_heads=7 is invalid: must divide"):
        architectures.build(bad)


def test_a_loaded_run_config_has_its_auto_choices_made():
    saved = train_config.default_config().to_dict()
    run = loading.saved_run_config(saved)
    assert (run.model.remat_policy, run.model.attention_impl) == ("none", "reference")
    assert run.mesh == MeshFields(rules=tuple(saved["mesh"]["rules"].items()))
