"""The config schema: each field declared once (default, kind, allowed values, comment), one
generic checker, and the reference docs generated from the declarations."""

from __future__ import annotations

import dataclasses
import os

import ml_collections
import pytest

from deepnet_jax.common import config_schema
from deepnet_jax.common.config_schema import field
from deepnet_jax.data import options as data_options
from deepnet_jax.data import pipeline
from deepnet_jax.decoding import options as decoding_options
from deepnet_jax.model import config as model_config
from deepnet_jax.training import config as train_config
from deepnet_jax.training import config_checks, optimizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Kinds:
    """One field of each kind and bound."""

    count: int = field(1, "an integer >= 1", low=1)
    rate: float = field(0.1, "a number in [0, 1)", low=0, high=1, high_open=True)
    positive: float = field(1.0, "a number > 0", low=0, low_open=True)
    eps: float = field(1e-5, "a number in (0, 1)", low=0, high=1, low_open=True, high_open=True)
    flag: bool = field(False, "a switch")
    name: str = field("a", "one of a, b", choices=("a", "b"))
    text: str = field("", "any text")
    lengths: tuple = field((8, 16), "integers", kind="increasing_ints")


BAD = [  # (field, value, plain-style message)
    ("count", 0, "count=0 must be an integer >= 1"),
    ("count", True, "count=True must be an integer >= 1"),  # a bool is not an integer
    ("count", 2.0, "count=2.0 must be an integer >= 1"),
    ("count", "3", "count='3' must be an integer >= 1"),
    ("rate", 1.0, "rate=1.0 must be in [0, 1)"),
    ("rate", -0.1, "rate=-0.1 must be in [0, 1)"),
    ("rate", "0.1", "rate='0.1' must be a number in [0, 1)"),
    ("rate", False, "rate=False must be a number in [0, 1)"),
    ("positive", 0.0, "positive=0.0 must be > 0"),
    ("eps", 0.0, "eps=0.0 must be in (0, 1)"),
    ("eps", 1, "eps=1 must be in (0, 1)"),
    ("flag", 1, "flag=1 must be True or False"),
    ("flag", "yes", "flag='yes' must be True or False"),
    ("name", "c", "name='c'; allowed values are ('a', 'b')"),
    ("name", None, "name=None; allowed values are ('a', 'b')"),
    ("text", 3, "text=3 must be a string"),
    ("lengths", (8, 16.0), "lengths=(8, 16.0) must be strictly increasing integers"),
    ("lengths", (16, 8), "lengths=(16, 8) must be strictly increasing integers"),
    ("lengths", 8, "lengths=8 must be strictly increasing integers"),
]


@pytest.mark.parametrize("name, value, message", BAD, ids=[f"{b[0]}={b[1]!r}" for b in BAD])
def test_checker_refuses_each_bad_value_with_one_line(name, value, message):
    c = {**config_schema.defaults(Kinds), name: value}  # a dict: ConfigDicts refuse new types
    with pytest.raises(ValueError) as info:
        config_schema.check_group(c, Kinds, "")
    assert str(info.value) == message


def test_checker_accepts_the_defaults_and_values_on_closed_bounds():
    config_schema.check_group(config_schema.config_dict(Kinds), Kinds, "")
    c = {**config_schema.defaults(Kinds), "count": 10**9, "rate": 0.0, "lengths": [], "name": "b"}
    config_schema.check_group(c, Kinds, "")


def test_invalid_style_is_the_models_wording():
    spec = config_schema.specs(Kinds)["name"]
    text = config_schema.message("model.name", "c", "allowed values are", spec, style="invalid")
    assert text == "model.name='c' is invalid: allowed values are 'a', 'b'"


def test_unknown_and_missing_fields():
    c = {**config_schema.defaults(Kinds), "cuont": 1}
    with pytest.raises(ValueError, match=r"^unknown config field g\.cuont; the fields of g are"):
        config_schema.check_group(c, Kinds, "g.")
    c = config_schema.defaults(Kinds)
    del c["rate"]
    with pytest.raises(ValueError, match=r"^config field g\.rate is missing"):
        config_schema.check_group(c, Kinds, "g.")


def test_a_default_the_declaration_refuses_is_caught_here():
    for group in train_config.GROUPS.values():
        c = config_schema.config_dict(group.fields)
        config_schema.check_values(c, group.fields, "")
    config_checks.check_groups(train_config.default_config())  # each group's own check too


def test_each_default_is_declared_once():
    """The ConfigDicts are built from the declarations: the defaults are theirs."""
    c = train_config.default_config()
    derived = dict.fromkeys(model_config.DERIVED, 0)  # filled from the data: train_config.resolve
    training = {  # where a training run's default differs from a built model's
        k.removeprefix("model."): v
        for k, v in train_config.TRAINING_DEFAULTS.items()
        if k.startswith("model.")
    }
    assert training == {"remat_policy": "auto", "attention_impl": "auto"}
    assert c.model.to_dict() == {
        **config_schema.defaults(model_config.TransformerConfig),
        **derived,
        **training,
    }
    assert c.optimizer.to_dict() == config_schema.defaults(optimizers.OptimizerFields)
    assert c.schedule.to_dict() == config_schema.defaults(optimizers.ScheduleFields)
    assert c.decode.to_dict() == config_schema.defaults(decoding_options.DecodeFields)
    data = {
        **config_schema.defaults(pipeline.DataOptions),
        "data_dir": data_options.default_data_dir(),
    }
    assert c.data.to_dict() == data
    top = {k: v for k, v in c.items() if not isinstance(v, ml_collections.ConfigDict)}
    assert top == config_schema.defaults(train_config.RunFields)
    assert model_config.TransformerConfig() == model_config.TransformerConfig.from_config(
        model_config.default_config()
    )


def test_a_saved_data_config_without_a_later_field_reads_its_default():
    saved = train_config.default_config().data.to_dict()
    del saved["source_lang"], saved["target_lang"]  # fields added after runs were saved
    options = pipeline.DataOptions.from_config(ml_collections.ConfigDict(saved), seed=3)
    assert (options.source_lang, options.target_lang, options.seed) == ("", "", 3)
    with pytest.raises(ValueError, match=r"^unknown config field data\.vocab; the fields of data"):
        pipeline.DataOptions.from_config(ml_collections.ConfigDict({**saved, "vocab": 1}), 0)


def test_docs_config_md_is_generated_from_the_declarations():
    with open(os.path.join(ROOT, "docs", "config.md")) as f:
        assert f.read() == train_config.reference(), (
            "docs/config.md is stale: python -m deepnet_jax.training.config > docs/config.md"
        )
