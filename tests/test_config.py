"""Model-config validation: one clear error naming the field and the allowed values."""

import dataclasses
import importlib
import pkgutil

import ml_collections
import pytest
from conftest import tiny_config

import deepnet_jax.model
from deepnet_jax.model import architectures, schemes
from deepnet_jax.model.config import TransformerConfig

BAD = [
    (dict(scheme="t_fixup"), r"model\.scheme='t_fixup'.*'post_ln', 'pre_ln', 'deepnorm', 'subln'"),
    (dict(arch="t5"), r"model\.arch='t5'.*'encoder', 'decoder', 'encdec'"),
    (dict(num_heads=5), r"model\.num_heads=5.*must divide model\.d_model=32"),
    (dict(num_encoder_layers=0), r"model\.num_encoder_layers=0.*integer >= 1"),
    (dict(num_decoder_layers=-2), r"model\.num_decoder_layers=-2.*integer >= 1"),
    (dict(dtype="float64"), r"model\.dtype='float64'.*'float32', 'bfloat16', 'float16'"),
    (dict(param_dtype="float16"), r"model\.param_dtype='float16'.*'float32', 'bfloat16'"),
    (dict(dropout=1.0), r"model\.dropout=1\.0.*\[0, 1\)"),
    (dict(attention_dropout=-0.1), r"model\.attention_dropout=-0\.1"),
    (dict(activation="swish"), r"model\.activation='swish'.*'relu', 'gelu'"),
    (dict(positions="rotary"), r"model\.positions='rotary'.*'sinusoidal', 'learned'"),
    (dict(remat_policy="some"), r"model\.remat_policy='some'.*'none', 'full', 'dots'"),
    (dict(scheme="dlcl_pre", scan_layers=True), r"model\.scan_layers=True.*cannot be scanned"),
    (dict(dlcl_weights="fix_half"), r"model\.dlcl_weights='fix_half'.*'learnable'"),
    (
        dict(scheme="dlcl_post", scan_layers=False, dlcl_layer_norm=False),
        r"model\.dlcl_layer_norm=False.*only for scheme='dlcl_pre'",
    ),
    (dict(vocab_size=1), r"model\.vocab_size=1.*integer >= 2"),
    (dict(d_model=33, num_heads=3), r"model\.d_model=33.*even with positions='sinusoidal'"),
    (dict(layernorm_eps=0.0), r"model\.layernorm_eps=0\.0"),
    (dict(tie_embeddings="yes"), r"model\.tie_embeddings='yes'.*True or False"),
    (dict(ffn_dim=64.0), r"model\.ffn_dim=64\.0.*integer"),
]


@pytest.mark.parametrize("overrides, message", BAD)
def test_invalid_field_is_named(overrides, message):
    # A fresh ConfigDict, as a user building one from a dict would (no type locking).
    cfg = ml_collections.ConfigDict({**tiny_config("encdec").to_dict(), **overrides})
    with pytest.raises(ValueError, match=message):
        architectures.build(cfg)


def test_unused_side_must_be_zero():
    cfg = tiny_config("decoder", "deepnorm", num_encoder_layers=6)
    with pytest.raises(ValueError, match=r"num_encoder_layers=6.*arch='decoder' has no encoder"):
        architectures.build(cfg)


def test_share_embeddings_needs_encdec():
    with pytest.raises(ValueError, match=r"share_embeddings.*arch='encdec'"):
        architectures.build(tiny_config("decoder", "pre_ln", share_embeddings=True))


def test_unknown_field():
    cfg = tiny_config()
    cfg.num_layers = 12
    with pytest.raises(ValueError, match=r"unknown config field model\.num_layers; the fields of"):
        architectures.build(cfg)


def test_default_config_builds():
    model = architectures.build(architectures.default_config())
    assert isinstance(model, architectures.EncoderDecoder)


def _field_owners() -> dict[str, dict]:
    """Every ``deepnet_jax.model`` module that declares model fields: its ``CONFIG_FIELDS``."""
    owners = {}
    for info in pkgutil.walk_packages(deepnet_jax.model.__path__, "deepnet_jax.model."):
        module = importlib.import_module(info.name)
        if hasattr(module, "CONFIG_FIELDS"):
            owners[info.name] = module.CONFIG_FIELDS
    return owners


def test_each_field_declared_outside_the_config_is_the_one_it_names():
    """A field declared in its owner's ``CONFIG_FIELDS`` is the very declaration
    ``TransformerConfig`` holds under that name: none misnamed, none left out, none twice."""
    declared = {f.name: f for f in dataclasses.fields(TransformerConfig)}
    owners = _field_owners()
    assert set(owners) >= {
        "deepnet_jax.model.remat",
        "deepnet_jax.model.parameterization",
        "deepnet_jax.model.schemes.hyper",
    }
    names = [name for fields in owners.values() for name in fields]
    assert len(names) == len(set(names))
    for module, fields in owners.items():
        for name, f in fields.items():
            assert declared[name] is f, f"{module}.CONFIG_FIELDS[{name!r}]"


@pytest.mark.parametrize("name", schemes.NAMES)
def test_a_schemes_own_fields_are_declared_in_its_familys_module(name):
    scheme = schemes.get(name)
    owned = importlib.import_module(type(scheme).__module__).__dict__.get("CONFIG_FIELDS", {})
    assert set(scheme.fields) <= set(owned)
