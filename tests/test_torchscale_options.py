"""The model options torchscale interop needs: init="torchscale" and "torchscale_bert"
(torchscale 0.3.0's initialization, without and with bert_init), scale_embedding,
position_offset and zero_padding_embeddings."""

import json
import math
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import init_params, jit_apply, tiny_config
from flax.traverse_util import flatten_dict

from deepnet_jax.interop import torchscale as ts
from deepnet_jax.model import architectures, constants
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.embeddings import PositionEmbedding, TokenEmbedding
from deepnet_jax.model.initializers import sinusoidal_table

D, F, N, M = 128, 512, 4, 3  # unequal depths: the two sides' gains differ
# torchscale 0.3.0's bert_init statistics (tests/fixtures/make_torchscale_init_stats.py)
BERT_STATS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "fixtures", "torchscale", "bert_init_stats.json"
)


def side_gains(scheme: str, init: str) -> dict[str, float]:
    """side → the gain of v_proj, out_proj, fc1, fc2 (and cross-attention's v/out for DeepNorm)
    of a 4L-3L encoder-decoder."""
    if scheme == "subln":
        return {s: v["gamma"] for s, v in constants.subln("encdec", N, M).items()}
    gains = {s: v["beta"] for s, v in constants.deepnorm("encdec", N, M).items()}
    if init != "paper":  # torchscale divides the encoder by (N⁴M)^(1/16)/1.15
        gains["encoder"] = 1.15 * (N**4 * M) ** (-1 / 16)
    return gains


def expected(scheme: str, init: str) -> dict[str, tuple[float, int, int]]:
    """ "side/sublayer/proj" → (gain, fan_in, fan_out)."""
    out = {}
    for side, g in side_gains(scheme, init).items():
        projections = {"self_attn": g} | (
            {"cross_attn": g if scheme == "deepnorm" else 1.0} if side == "decoder" else {}
        )
        for attn, gain in projections.items():
            out |= {f"{side}/{attn}/q_proj": (1.0, D, D), f"{side}/{attn}/k_proj": (1.0, D, D)}
            out |= {f"{side}/{attn}/v_proj": (gain, D, D), f"{side}/{attn}/out_proj": (gain, D, D)}
        out |= {f"{side}/ffn/fc1": (g, D, F), f"{side}/ffn/fc2": (g, F, D)}
    return out


def pooled(flat: dict, key: str, leaf: str) -> np.ndarray:
    side, rest = key.split("/", 1)
    return np.asarray(flat[f"{side}/layers/{rest}/{leaf}"], np.float64).ravel()


@pytest.mark.parametrize(
    "scheme, init",
    [
        ("deepnorm", "paper"),
        ("deepnorm", "torchscale"),
        ("subln", "torchscale"),
        # bert's draws on these models are held to torchscale's own statistics in the default
        # run (test_bert_init_draws_as_torchscale_does[encdec_deepnorm, encdec_subln])
        pytest.param("deepnorm", "torchscale_bert", marks=pytest.mark.slow),
        pytest.param("subln", "torchscale_bert", marks=pytest.mark.slow),
    ],
)
def test_per_kernel_std_of_the_inits(scheme, init):
    """paper: kernels N(0, g²·2/(fan_in+fan_out)), biases 0. torchscale: kernels and biases
    U(±g/√fan_in) (std g/√(3·fan_in)), the encoder-decoder encoder's DeepNorm gain 1.15·(N⁴M)^-1/16.
    torchscale_bert: kernels N(0, (0.02·g)²) with torchscale's gains, biases 0.
    Each kernel pools L·fan_in·fan_out ≥ 49,152 draws: 1σ of its std is ≤ 0.4%, so 3% is > 7σ;
    each bias pools L·fan_out ≥ 384 draws (1σ of a uniform's std ≈ 2.3%): 10%, > 4σ."""
    cfg = tiny_config(
        "encdec",
        scheme,
        d_model=D,
        num_heads=4,
        ffn_dim=F,
        init=init,
        num_encoder_layers=N,
        num_decoder_layers=M,
    )
    flat = flatten_dict(
        init_params(architectures.build(cfg), "encdec", jnp.ones((1, 4), jnp.int32)), sep="/"
    )
    checks = expected(scheme, init)
    assert len(checks) == 16
    for key, (gain, fan_in, fan_out) in checks.items():
        kernel, bias = pooled(flat, key, "kernel"), pooled(flat, key, "bias")
        if init == "paper":
            want = gain * math.sqrt(2.0 / (fan_in + fan_out))
            assert not bias.any(), key
        elif init == "torchscale_bert":
            want = 0.02 * gain
            assert not bias.any(), key
        else:
            bound = gain / math.sqrt(fan_in) * (1 + 1e-6)  # float32 rounding of the bound
            want = bound / math.sqrt(3)
            assert np.abs(kernel).max() <= bound and np.abs(bias).max() <= bound, key
            assert np.abs(kernel).max() > 0.99 * bound, key  # uniform: the bound is reached
            assert np.std(bias) == pytest.approx(want, rel=0.10), key
        assert np.std(kernel) == pytest.approx(want, rel=0.03), (key, np.std(kernel), want)
    for side in ("encoder", "decoder"):  # untied tables: torchscale zeroes the padding row
        table = np.asarray(flat[f"{side}_embed_tokens/embedding"])
        std = 0.02 if init == "torchscale_bert" else D**-0.5
        assert np.std(table[1:]) == pytest.approx(std, rel=0.03)
        assert (not table[0].any()) == (init != "paper")


def pooled_statistics(state: dict[str, np.ndarray]) -> dict[str, tuple[float, float]]:
    """torchscale name with the layer index as ``*`` → (mean, std) over every such tensor."""
    pooled: dict[str, list[np.ndarray]] = {}
    for name, value in state.items():
        key = re.sub(r"(^|\.)layers\.\d+\.", r"\1layers.*.", name)
        pooled.setdefault(key, []).append(np.asarray(value, np.float64).ravel())
    return {k: (np.concatenate(v).mean(), np.concatenate(v).std()) for k, v in pooled.items()}


@pytest.mark.parametrize(
    "case", ["encdec_deepnorm", "encdec_subln", "decoder_deepnorm", "encoder_subln"]
)
def test_bert_init_draws_as_torchscale_does(case):
    """A torchscale config with bert_init=True imports as init="torchscale_bert", whose draws
    match torchscale 0.3.0's own (d 128, FFN 512, 4L-3L, vocabulary 512, 256 positions): per
    tensor name, layers pooled, constants (biases, LayerNorms) equal and every std within 3% of
    torchscale's (≥ 33,024 draws a side: 1σ ≤ 0.4% each, so 3% is > 5σ), the mean within 5% of
    the std (1σ ≤ 0.6%); the padding row zero where torchscale's is (not for the table tied to
    the output projection: bert_init draws it again as the Linear's weight)."""
    with open(BERT_STATS) as f:
        want = json.load(f)["cases"][case]
    config = ts.model_config_from_torchscale(want["args"])
    assert config.init == "torchscale_bert"
    tokens = jnp.ones((1, 4), jnp.int32)
    params = init_params(architectures.build(config), config.arch, tokens)
    state = ts.params_to_torchscale(jax.device_get(params), config)
    got = pooled_statistics(state)
    assert sorted(got) == sorted(want["stats"])
    for key, stats in want["stats"].items():
        mean, std = got[key]
        if stats["std"] == 0:  # a constant: zero biases, LayerNorm scales 1 and offsets 0
            assert std == 0 and mean == stats["mean"], key
        else:
            assert std == pytest.approx(stats["std"], rel=0.03), (key, std, stats["std"])
            assert abs(mean) <= 0.05 * stats["std"], (key, mean)
    for name, zero in want["pad_row_zero"].items():
        assert (not state[name][0].any()) == zero, name


def _embed(cfg, module_cls, *args):
    module = module_cls(TransformerConfig.from_config(cfg))
    variables = module.init(jax.random.key(0), *args)
    return variables, np.asarray(module.apply(variables, *args))


def test_scale_embedding():
    tokens = jnp.asarray([[3, 0, 7]])
    for scale in (True, False):
        variables, out = _embed(tiny_config(scale_embedding=scale), TokenEmbedding, tokens)
        table = np.asarray(variables["params"]["embedding"].value)
        np.testing.assert_allclose(
            out[0], table[[3, 0, 7]] * (32**0.5 if scale else 1.0), rtol=1e-6
        )


@pytest.mark.parametrize("kind", ["sinusoidal", "learned"])
def test_position_offset_reads_row_p_plus_offset(kind):
    cfg = tiny_config(positions=kind, position_offset=2, max_len=10)
    given = jnp.asarray([[0, 1, 2, 9, 10, -1]])  # 10 and -1 are out of range
    variables, rows = _embed(cfg, PositionEmbedding, 4)
    _, picked = _embed(cfg, PositionEmbedding, 6, given)
    if kind == "learned":
        table = np.asarray(variables["params"]["embedding"].value)
        assert table.shape == (12, 32)  # max_len + offset rows
    else:
        table = np.asarray(sinusoidal_table(12, 32))
        assert "params" not in variables
    np.testing.assert_allclose(rows[0], table[2:6], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(picked[0, :4], table[[2, 3, 4, 11]], rtol=1e-6, atol=1e-6)
    assert np.isnan(picked[0, 4:]).all()
    _, plain = _embed(tiny_config(positions=kind, max_len=10), PositionEmbedding, 4)
    if kind == "sinusoidal":  # offset 0 is the table from position 0, as before
        np.testing.assert_allclose(plain[0], table[:4], rtol=1e-6, atol=1e-6)


def test_zero_padding_embeddings():
    """Zeroed padded inputs make every output independent of the padding row; without, only
    the padded positions depend on it. Real positions agree either way."""
    tokens = jnp.asarray([[5, 9, 12, 0, 0], [7, 8, 0, 0, 0]])
    outs = {}
    for zero in (True, False):
        cfg = tiny_config("encoder", "post_ln", zero_padding_embeddings=zero)
        model = architectures.build(cfg)
        params = init_params(model, "encoder", tokens)
        moved = jax.tree.map(lambda x: x, params)
        moved["embed_tokens"]["embedding"] = params["embed_tokens"]["embedding"].at[0].add(1.0)
        apply = jit_apply(model)
        outs[zero] = [np.asarray(apply({"params": p}, tokens)) for p in (params, moved)]
    real = np.asarray(tokens != 0)
    np.testing.assert_array_equal(outs[True][0], outs[True][1])
    assert not np.allclose(outs[False][0][~real], outs[False][1][~real])
    np.testing.assert_allclose(outs[False][0][real], outs[False][1][real], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs[True][0][real], outs[False][0][real], rtol=1e-5, atol=1e-5)
