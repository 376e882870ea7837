"""The residual schemes are objects (``deepnet_jax.model.schemes``): every registered scheme's
properties agree with each other and give constants in every architecture, and no module outside
``model/schemes/`` branches on a scheme's name.

Names are read from the source (``ast``): a comparison with a scheme's name (``== "deepnorm"``,
``in ("post_ln", …)``) or a dict keyed by scheme names is a branch that belongs to the scheme
object. The shipped configs (``configs/``) name a scheme as a value, which is not a branch.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import os

import pytest

from deepnet_jax.model import schemes, stacks
from deepnet_jax.model.config import ARCHS, SCHEMES, TransformerConfig
from deepnet_jax.model.schemes.base import FAMILIES, ORIGINS, Scheme, SideConstants

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "deepnet_jax")
# where a scheme's name is data rather than a branch, and why
EXEMPT = {
    os.path.join("deepnet_jax", "model", "schemes"): "the schemes themselves",
    os.path.join("deepnet_jax", "configs"): "the shipped configs name a scheme as a value",
    os.path.join("deepnet_jax", "interop", "torchscale"): (
        "torchscale's own option names deepnorm and subln, keys of its config tables (the "
        "scheme a set of its options makes is the scheme's: Scheme.torchscale)"
    ),
}
SELECTED_BY_CONFIG = ("scanned", "grouped", "unrolled")  # the stack kinds of stack=None


def _scheme_names_in(node: ast.AST) -> list[str]:
    """The scheme names ``node`` holds as string constants (itself, or a tuple/list/set)."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return [
        n.value
        for n in items
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in SCHEMES
    ]


def branches_on_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of every comparison with, or dict keyed by, a scheme's name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                found += [(node.lineno, name) for name in _scheme_names_in(operand)]
        elif isinstance(node, ast.Dict):
            for k in node.keys:
                if k is not None:
                    found += [(node.lineno, name) for name in _scheme_names_in(k)]
    return found


def _package_sources() -> list[str]:
    paths = []
    for folder, _, files in os.walk(PACKAGE):
        relative = os.path.relpath(folder, ROOT)
        if any(relative == e or relative.startswith(e + os.sep) for e in EXEMPT):
            continue
        paths += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".py")]
    return sorted(paths)


def test_the_branch_finder_finds_them():
    source = (
        'if c.scheme == "deepnorm": pass\n'
        'ok = scheme in ("post_ln", "pre_ln")\n'
        'KIND = {"dlcl_pre": "dlcl"}\n'
        'fine = ("deepnorm", 6)\n'
        'also_fine = c.norm == "dyt"\n'
    )
    assert branches_on_names(source) == [
        (1, "deepnorm"),
        (2, "post_ln"),
        (2, "pre_ln"),
        (3, "dlcl_pre"),
    ]


def test_no_module_outside_the_schemes_branches_on_a_scheme_name():
    found = []
    for path in _package_sources():
        with open(path) as f:
            found += [
                f"{os.path.relpath(path, ROOT)}:{line}: {name!r}"
                for line, name in branches_on_names(f.read())
            ]
    assert not found, "ask the scheme object (model/schemes/) instead:\n" + "\n".join(found)


def test_the_registry_is_the_configs_choices_papers_first():
    assert SCHEMES == schemes.NAMES == tuple(schemes.SCHEMES)
    papers = schemes.names(origin=schemes.PAPER)
    since = schemes.names(origin=schemes.SINCE_DEEPNET)
    assert papers + since == schemes.NAMES
    assert papers == ("post_ln", "pre_ln", "deepnorm", "subln", "dlcl_pre", "dlcl_post")
    assert schemes.names(stack="dlcl") == ("dlcl_pre", "dlcl_post")
    with pytest.raises(ValueError, match="no scheme has an attribute 'colour'"):
        schemes.names(colour="red")
    with pytest.raises(ValueError, match="scheme='deepnet' is not one of post_ln"):
        schemes.get("deepnet")


def _plain(value: object) -> bool:
    """Plain Python, fixed at trace time: no arrays, nothing mutable."""
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    if isinstance(value, schemes.TorchscaleFlags):  # a frozen dataclass of bools
        return all(_plain(getattr(value, f.name)) for f in dataclasses.fields(value))
    return value is None or isinstance(value, str | bool | int | float | Scheme)


@pytest.mark.parametrize("name", SCHEMES)
def test_each_scheme_is_a_frozen_plain_object(name):
    s = schemes.get(name)
    assert s.name == name and s.title and s.origin in ORIGINS and s.family in FAMILIES
    assert dataclasses.is_dataclass(s) and hash(s) == hash(s)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.name = "other"  # type: ignore[misc]
    assert all(_plain(getattr(s, f.name)) for f in dataclasses.fields(s))
    assert set(s.fields) <= {f.name for f in dataclasses.fields(TransformerConfig)}


@pytest.mark.parametrize("name", SCHEMES)
def test_each_schemes_properties_agree(name):
    s = schemes.get(name)
    assert s.final_norm == (s.family in ("pre", "mixed"))
    assert s.scannable == (s.stack is None)
    assert s.stack is None or (s.stack in stacks.KINDS and s.stack not in SELECTED_BY_CONFIG)
    layer = s.per_layer
    assert layer.name in SCHEMES and layer.scannable and layer.per_layer is layer
    assert layer.family == s.family
    if s.dyt_ok:  # DyT replaces the norms of pre-norm stacks only
        assert s.family == "pre"
    if s.torchscale:  # torchscale 0.3.0 has the papers' scanned schemes
        assert s.origin == schemes.PAPER and s.scannable
        assert s.torchscale.normalize_before == s.final_norm
        assert s.torchscale.subln == s.inner_norm
    if s.branch_output_kept:  # x + c·F(·): a constant weight on a pre-norm branch
        assert s.family == "pre" and s.scannable


def _config(arch: str, scheme: str) -> TransformerConfig:
    N = 6 if arch in ("encoder", "encdec") else 0
    M = 6 if arch in ("decoder", "encdec") else 0
    return TransformerConfig(arch=arch, scheme=scheme, num_encoder_layers=N, num_decoder_layers=M)


@pytest.mark.parametrize("name", SCHEMES)
@pytest.mark.parametrize("arch", ARCHS)
def test_each_scheme_has_constants_for_each_side_of_each_architecture(name, arch):
    s, config = schemes.get(name), _config(arch, name)
    for side in config.sides:
        k = s.constants(config, side)
        assert isinstance(k, SideConstants)
        for value in (k.alpha, k.branch, k.gain, s.init_gain(config, side)):
            assert isinstance(value, float) and math.isfinite(value) and value > 0
        assert config.side_constants(side) == (k.alpha, k.gain)
        assert s.per_layer.constants(config, side) == k


def test_num_layers_and_sides():
    config = TransformerConfig(arch="encdec", num_encoder_layers=3, num_decoder_layers=2)
    assert config.sides == ("encoder", "decoder")
    assert (config.num_layers("encoder"), config.num_layers("decoder")) == (3, 2)
    decoder = TransformerConfig(arch="decoder", num_encoder_layers=0, num_decoder_layers=4)
    assert decoder.sides == ("decoder",) and decoder.num_layers("decoder") == 4
    with pytest.raises(ValueError, match="side='middle' is not one of encoder, decoder"):
        config.num_layers("middle")
