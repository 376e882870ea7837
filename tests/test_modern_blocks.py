"""Modern blocks (RoPE, gated FFNs, grouped-query attention, RMSNorm, QK-norm) under every scheme:
each against a NumPy transcription of its formula, and every model built with them trains
(forward and backward) and decodes from its cache exactly as its full forward pass."""

import itertools

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from branch_variance import ffn_output_variance
from conftest import (
    STACK_FORMS,
    arch_scheme_params,
    init_params,
    jit_apply,
    random_tokens,
    tiny_config,
)
from flax.traverse_util import flatten_dict
from test_blocks import (
    B,
    T,
    attention,
    layer_inputs,
    randomize_norms,
    reference_layer,
    rope,
)
from test_decoding import _incremental_logits

from deepnet_jax.interop.torchscale import configs as torchscale_configs
from deepnet_jax.interop.torchscale import state_dict as torchscale_state_dict
from deepnet_jax.model import architectures, constants, rotary
from deepnet_jax.model.attention import MultiHeadAttention
from deepnet_jax.model.config import SCHEMES, TransformerConfig
from deepnet_jax.model.sublayers import FeedForward
from deepnet_jax.model.transformer_layer import TransformerLayer
from deepnet_jax.training import memory_plan

# one block at a time, and all of them together (the modern decoder's block)
BLOCKS = {
    "rope": {"positions": "rope", "rope_theta": 500.0},
    "swiglu": {"activation": "swiglu", "ffn_dim": 48},
    "geglu": {"activation": "geglu", "ffn_dim": 48},
    "gqa": {"num_kv_heads": 2},
    "mqa": {"num_kv_heads": 1},
    "rmsnorm": {"norm": "rmsnorm"},
    "qk_norm": {"qk_norm": True},
    "all": {
        "positions": "rope",
        "activation": "swiglu",
        "ffn_dim": 48,
        "num_kv_heads": 2,
        "norm": "rmsnorm",
        "qk_norm": True,
        "use_bias": False,
    },
}


def _layer(scheme, side, has_cross, blocks, pos_start=3):
    cfg = TransformerConfig.from_config(
        tiny_config("encdec", scheme, num_encoder_layers=18, num_decoder_layers=7, **blocks)
    )
    layer = TransformerLayer(cfg, side=side, has_cross=has_cross)
    rng = np.random.default_rng(0)
    x, self_mask, enc, enc_mask = layer_inputs(cfg.d_model, side, has_cross, rng)
    # packed-row-like positions that do not start at 0 (row 1 restarts mid-row)
    pos = np.stack([np.arange(T) + pos_start, np.r_[np.arange(2), np.arange(T - 2)]])
    pos = pos.astype(np.int32) if cfg.positions == "rope" else None
    variables = layer.init(jax.random.key(1), x, self_mask, enc, enc_mask, pos)
    params = randomize_norms(jax.tree.map(np.asarray, nn.unbox(variables["params"])), rng)
    return cfg, layer, params, (x, self_mask, enc, enc_mask, pos)


@pytest.mark.parametrize("block", list(BLOCKS))
@pytest.mark.parametrize("scheme", ["post_ln", "pre_ln", "deepnorm", "subln"])
def test_layer_with_block_matches_formula(scheme, block):
    """A decoder layer with cross-attention (every sublayer kind) against the NumPy layer."""
    cfg, layer, params, (x, self_mask, enc, enc_mask, pos) = _layer(
        scheme, "decoder", True, BLOCKS[block]
    )
    got = layer.apply({"params": params}, x, self_mask, enc, enc_mask, pos)
    alpha = cfg.side_constants("decoder")[0]
    want = reference_layer(
        params, x.astype(np.float64), scheme, alpha, self_mask, enc, enc_mask, blocks=cfg, pos=pos
    )
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-4, atol=2e-4)


def test_block_parameters_have_their_shapes():
    cfg, _, params, _ = _layer("subln", "decoder", True, BLOCKS["all"])
    attn, ffn = params["self_attn"], params["ffn"]
    D, H, N, K, F = cfg.d_model, cfg.num_heads, cfg.kv_heads, cfg.head_dim, cfg.ffn_dim
    assert attn["q_proj"]["kernel"].shape == (D, H, K)
    assert attn["k_proj"]["kernel"].shape == attn["v_proj"]["kernel"].shape == (D, N, K)
    assert set(attn["q_norm"]) == set(attn["k_norm"]) == {"scale"}  # RMSNorm: no bias
    assert attn["q_norm"]["scale"].shape == (K,)
    assert {k: v["kernel"].shape for k, v in ffn.items() if k != "ffn_layernorm"} == {
        "gate": (D, F),
        "fc1": (D, F),
        "fc2": (F, D),
    }
    assert not any("bias" in path for path in flatten_dict(params, sep="/"))


def test_rope_rotates_pairs_and_depends_on_offsets_only():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 6, 3, 8)).astype(np.float32)
    pos = np.array([[0, 1, 2, 3, 4, 5], [7, 9, 100, 4000, 5, 6]], np.int32)
    cos, sin = rotary.angles(jnp.asarray(pos), 8, 10000.0)
    got = np.asarray(rotary.rotate(jnp.asarray(x), cos, sin))
    np.testing.assert_allclose(got, rope(x.astype(np.float64), pos, 10000.0), atol=2e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)
    # q'·k' depends on the positions only through their difference
    q, k = x[:1, :1], x[1:, :1]

    def score(p, s):
        rq = rotary.rotate(jnp.asarray(q), *rotary.angles(jnp.full((1, 1), p), 8, 10000.0))
        rk = rotary.rotate(jnp.asarray(k), *rotary.angles(jnp.full((1, 1), s), 8, 10000.0))
        return np.asarray((rq * rk).sum(-1))

    np.testing.assert_allclose(score(5, 2), score(1005, 1002), atol=1e-4)
    assert np.abs(score(5, 2) - score(5, 3)).max() > 1e-3


def test_grouped_query_attention_equals_multi_head_with_repeated_kv_heads():
    """GQA with N kv heads is MHA whose k/v kernels repeat each kv head for its H/N queries."""
    gqa = TransformerConfig.from_config(tiny_config("decoder", "pre_ln", num_kv_heads=2))
    mha = TransformerConfig.from_config(tiny_config("decoder", "pre_ln"))
    x = np.random.default_rng(2).normal(size=(B, T, gqa.d_model)).astype(np.float32)
    mask = np.tril(np.ones((T, T), bool))[None, None]
    params = nn.unbox(MultiHeadAttention(gqa).init(jax.random.key(0), x, x, mask)["params"])
    group = gqa.num_heads // gqa.kv_heads
    repeated = dict(params)
    for name in ("k_proj", "v_proj"):
        repeated[name] = {
            "kernel": np.repeat(params[name]["kernel"], group, axis=1),
            "bias": np.repeat(params[name]["bias"], group, axis=0),
        }
    got = MultiHeadAttention(gqa).apply({"params": params}, x, x, mask)
    want = MultiHeadAttention(mha).apply({"params": repeated}, x, x, mask)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)
    ref = attention(params, x.astype(np.float64), x, mask, blocks=gqa)
    np.testing.assert_allclose(np.asarray(got), ref, atol=1e-4)


@pytest.mark.parametrize("impl", ["xla"])
def test_grouped_query_attention_through_dot_product_attention(impl):
    ref_cfg = TransformerConfig.from_config(tiny_config("decoder", "pre_ln", num_kv_heads=1))
    cfg = TransformerConfig.from_config(
        tiny_config("decoder", "pre_ln", num_kv_heads=1, attention_impl=impl)
    )
    x = np.random.default_rng(3).normal(size=(B, T, cfg.d_model)).astype(np.float32)
    mask = np.tril(np.ones((T, T), bool))[None, None]
    params = MultiHeadAttention(ref_cfg).init(jax.random.key(0), x, x, mask)
    want = MultiHeadAttention(ref_cfg).apply(params, x, x, mask)
    got = MultiHeadAttention(cfg).apply(params, x, x, mask)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


# every scheme with all the blocks on the two decoding architectures (the default run: DeepNorm
# and DLCL-Post on the encoder-decoder, which holds every layer kind, and Sub-LN on the decoder:
# its pre-norm stack with the final norm, where DeepNorm's scanned stack is the encoder-decoder's
# decoder); each block alone on the encoder-decoder with DeepNorm under -m slow (the layer tests
# above check each block alone under every scheme)
MATRIX = [
    pytest.param(*p.values, "all", marks=p.marks)
    for p in arch_scheme_params(
        itertools.product(("encdec", "decoder"), SCHEMES),
        encdec=STACK_FORMS,
        single_stack=("subln",),
    )
] + [pytest.param("encdec", "deepnorm", b, marks=pytest.mark.slow) for b in BLOCKS if b != "all"]


@pytest.mark.parametrize("arch, scheme, block", MATRIX)
def test_model_with_blocks_trains_and_decodes_from_its_cache(arch, scheme, block):
    blocks = dict(BLOCKS[block])
    if scheme == "deepscalelm":  # its init is ReLU's: every other block
        blocks["activation"] = "relu"
    cfg = tiny_config(arch, scheme, remat_policy="none", **blocks)
    model = architectures.build(cfg)
    src = random_tokens((2, 7), cfg.vocab_size, seed=1)
    tgt = random_tokens((2, 9), cfg.vocab_size, seed=2)
    params = init_params(model, arch, src, tgt)
    # ReZero's and SkipInit's branch weights start at 0, which stops the branches' gradients
    params = flax.traverse_util.path_aware_map(
        lambda path, a: a + 0.5 if path[-1].endswith("_alpha") and a.ndim <= 1 else a, params
    )
    args = (src, tgt) if arch == "encdec" else (tgt,)

    def loss(p):
        return jnp.mean(model.apply({"params": p}, *args) ** 2)

    grads = jax.jit(jax.grad(loss))(params)
    norms = [float(jnp.linalg.norm(g)) for g in jax.tree.leaves(grads)]
    assert all(np.isfinite(norms)) and min(norms) > 0  # every parameter receives a gradient
    full = jit_apply(model)({"params": params}, *args)
    incremental = _incremental_logits(model, params, cfg, arch, src, tgt)
    np.testing.assert_allclose(incremental, full, atol=1e-5)


def test_encoder_only_model_with_all_blocks():
    cfg = tiny_config("encoder", "deepnorm", **BLOCKS["all"])
    model = architectures.build(cfg)
    src = random_tokens((2, 7), cfg.vocab_size)
    params = init_params(model, "encoder", src)
    out = jit_apply(model)({"params": params}, src)
    assert out.shape == (2, 7, cfg.vocab_size) and bool(jnp.isfinite(out).all())


def test_kv_cache_holds_kv_heads_only():
    full = TransformerConfig.from_config(tiny_config("decoder", "deepnorm"))
    grouped = TransformerConfig.from_config(tiny_config("decoder", "deepnorm", num_kv_heads=1))
    size = {
        name: sum(a.nbytes for a in jax.tree.leaves(architectures.init_cache(c, 4, 32)))
        for name, c in (("mha", full), ("mqa", grouped))
    }
    assert size["mha"] == full.num_heads * size["mqa"]


def test_glm_constants_and_where_they_apply():
    for L in (6, 100):
        k = constants.deepnorm("decoder", 0, L, "glm")["decoder"]
        assert k == {"alpha": (2 * L) ** 0.5, "beta": (2 * L) ** -0.5}
    assert constants.deepnorm("encoder", 50, 0, "glm")["encoder"]["alpha"] == 10.0
    cfg = TransformerConfig.from_config(tiny_config("decoder", "deepnorm", deepnorm_variant="glm"))
    assert cfg.side_constants("decoder") == (2.0, 0.5)  # 2 decoder layers: (2·2)^(±1/2)
    with pytest.raises(ValueError, match=r"deepnorm_variant='glm' is invalid: GLM-130B"):
        architectures.validate(tiny_config("encdec", "deepnorm", deepnorm_variant="glm"))


@pytest.mark.parametrize(
    "field, value",
    [
        ("positions", "rope"),
        ("activation", "swiglu"),
        ("num_kv_heads", 2),
        ("norm", "rmsnorm"),
        ("qk_norm", True),
        ("use_bias", False),
        ("deepnorm_variant", "glm"),
    ],
)
def test_torchscale_export_refuses_blocks_it_lacks_in_one_line(field, value):
    cfg = tiny_config("decoder", "deepnorm", **{field: value})
    with pytest.raises(ValueError, match=rf"^model\.{field}={value!r}: torchscale has no "):
        torchscale_configs.torchscale_args_from_config(cfg)
    with pytest.raises(ValueError, match=rf"^model\.{field}={value!r}: torchscale has no "):
        torchscale_state_dict.entries(cfg)
    plain = tiny_config("decoder", "deepnorm", num_kv_heads=4)  # = num_heads: multi-head
    torchscale_state_dict.check_torchscale_has(plain)


@pytest.mark.parametrize(
    "scheme, activation",
    [("deepnorm", a) for a in ("relu", "gelu", "swiglu", "geglu")]
    # Sub-LN's inner norm with a gated FFN; with ReLU (its inner norm the same code, ReLU's
    # formula DeepNorm's above) under -m slow
    + [pytest.param("subln", "relu", marks=pytest.mark.slow), ("subln", "swiglu")],
)
def test_ffn_output_variance_at_init_is_the_derived_value(scheme, activation):
    """Mean square of the FFN's outputs over 256 weight draws × 64 LayerNorm-output inputs against
    branch_variance's formula (docs/blocks.md), within 5 standard errors of the 256 per-draw
    means (their spread measured, not assumed); and the scheme's gain enters squared."""
    cfg = TransformerConfig.from_config(
        tiny_config("decoder", scheme, num_decoder_layers=100, d_model=64, ffn_dim=96,
                    activation=activation)
    )  # fmt: skip
    gain = cfg.side_constants("decoder")[1]
    inner = scheme == "subln"
    ffn = FeedForward(cfg, gain, inner_norm=inner)
    x = jax.random.normal(jax.random.key(0), (64, cfg.d_model))
    x = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)  # a LayerNorm's rows, so
    # that given x each projection is exactly N(0, ‖x‖²·σ²) = N(0, d·σ²) over the weights
    keys = jax.random.split(jax.random.key(1), 256)

    def mean_square(key):
        return jnp.mean(ffn.apply(ffn.init(key, x), x) ** 2)

    per_draw = np.asarray(jax.jit(jax.vmap(mean_square))(keys), np.float64)
    want = ffn_output_variance(activation, cfg.d_model, cfg.ffn_dim, gain, inner)
    se = per_draw.std(ddof=1) / np.sqrt(per_draw.size)
    assert abs(per_draw.mean() - want) < 5 * se, (per_draw.mean(), want, se)
    one = ffn_output_variance(activation, cfg.d_model, cfg.ffn_dim, 1.0, inner)
    if inner:  # Sub-LN: the inner LN removes fc1's scale; fc2's γ remains
        assert want == pytest.approx(gain**2 * one)
    elif activation != "gelu":  # ReLU is homogeneous, a gated FFN's gate keeps gain 1: β²·β²
        assert want == pytest.approx(gain**4 * one, rel=1e-9)


@pytest.mark.parametrize("arch", ["decoder", "encdec"])
def test_planner_decode_cache_is_init_caches_size(arch):
    for kv in (0, 2, 1):
        cfg = tiny_config(arch, "deepnorm", num_kv_heads=kv, dtype="bfloat16")
        tc = TransformerConfig.from_config(cfg)
        cache = architectures.init_cache(tc, 1, 24, 24 if arch == "encdec" else None)
        want = sum(a.nbytes for a in jax.tree.leaves(cache))
        assert memory_plan.decode_cache_bytes(tc, 24) == want
    encoder = TransformerConfig.from_config(tiny_config("encoder", "deepnorm"))
    assert memory_plan.decode_cache_bytes(encoder, 24) == 0
