"""The stability schemes since DeepNet (docs/schemes.md): each layer, stack and init step against
an independent NumPy transcription of its paper's equations, in every architecture; constants
against the papers' (or their code's) numbers; decoding, training, config errors and export."""

import itertools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import init_params, random_tokens, tiny_config
from flax.traverse_util import flatten_dict, unflatten_dict
from test_blocks import attention, ffn, layer_inputs, ln

from deepnet_jax.interop.torchscale import state_dict
from deepnet_jax.model import architectures, constants, schemes
from deepnet_jax.model.combining_stacks import dwa_weight_init
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.initializers import sinusoidal_table
from deepnet_jax.model.inputs import init_variables
from deepnet_jax.model.schemes.hyper import Stream
from deepnet_jax.model.transformer_layer import TransformerLayer

STACKS = schemes.names(origin=schemes.SINCE_DEEPNET)
# the schemes of one residual stream, whose equations this file's NumPy layer transcribes (the
# stream schemes, Hyper-Connections and mHC, have theirs in test_hyper_connections.py)
ONE_STREAM = tuple(s for s in STACKS if not isinstance(schemes.get(s), Stream))
NEW = tuple(s for s in ONE_STREAM if schemes.get(s).scannable)  # one layer body each
ARCHS = ("encoder", "decoder", "encdec")
EXTRA = {"mix_ln": dict(mix_ln_ratio=0.5)}  # ⌊0.5·3⌋ = 1 encoder and ⌊0.5·2⌋ = 1 decoder Post-LN


def config(arch, scheme, **overrides):
    return tiny_config(arch, scheme, **{**EXTRA.get(scheme, {}), **overrides})


def dyt(x, p):
    """Dynamic Tanh, eq. 1 of Zhu et al. 2025: g·tanh(a·x) + b."""
    return p["scale"] * np.tanh(p["alpha"] * x) + p.get("bias", 0.0)


def norm(x, p, cfg):
    return dyt(x, p) if cfg.norm == "dyt" else ln(x, p, cfg.layernorm_eps, cfg.norm)


def reference_layer(p, x, cfg, side, index, self_mask, enc=None, enc_mask=None):
    """One layer of a scheme since DeepNet, sublayer by sublayer (index: 0-based layer)."""
    L = cfg.num_encoder_layers if side == "encoder" else cfg.num_decoder_layers
    sublayers = [("self_attn", lambda h: attention(p["self_attn"], h, h, self_mask))]
    if enc is not None:
        sublayers.append(("cross_attn", lambda h: attention(p["cross_attn"], h, enc, enc_mask)))
    sublayers.append(("ffn", lambda h: ffn(p["ffn"], h)))
    norms = {"self_attn": "self_attn_layer_norm", "cross_attn": "cross_attn_layer_norm"}
    for name, g in sublayers:
        n = p.get(norms.get(name, "final_layer_norm"))
        s = cfg.scheme
        if s == "mix_ln":  # Post-LN below the switch layer ⌊ratio·L⌋, Pre-LN from it on
            post = index < math.floor(cfg.mix_ln_ratio * L)
            x = norm(x + g(x), n, cfg) if post else x + g(norm(x, n, cfg))
        elif s == "peri_ln":
            x = x + norm(g(norm(x, n, cfg)), p[f"{name}_output_layer_norm"], cfg)
        elif s == "ln_scaling":
            x = x + g(norm(x, n, cfg) / math.sqrt(index + 1))
        elif s == "deepscalelm":
            lam, beta = cfg.deepscalelm_weights(side)
            x = lam * x + beta * g(norm(x, n, cfg))
        elif s == "rezero":
            x = x + p["rezero_alpha"] * g(x)
        elif s == "skipinit":
            x = x + p[f"{name}_alpha"] * g(x)
        elif s == "admin":
            x = norm(x * p[f"{name}_omega"] + g(x), n, cfg)
        else:  # pre_ln: DenseFormer's blocks, and DyT's host
            x = x + g(norm(x, n, cfg))
    return x


def randomize(params, rng):
    """Non-trivial norm, ReZero/SkipInit/Admin/DyT/DWA parameters and dynamic Hyper-Connections'
    W, so the test sees where each sits (and ReZero's α = 0 does not hide the branch)."""
    flat = flatten_dict(params)
    for k, v in flat.items():
        name = "/".join(k)
        if k[-1] in ("scale", "bias") and ("norm" in name or "_ln" in name):
            flat[k] = v + rng.normal(0, 0.3, v.shape).astype(np.float32)
        elif k[-1] in ("rezero_alpha", "alpha") or k[-1].endswith(("_alpha", "_omega")):
            flat[k] = v + rng.uniform(0.3, 1.2, v.shape).astype(np.float32)
        elif k[-1] == "dwa_weights":
            flat[k] = v + rng.normal(0, 0.5, v.shape).astype(np.float32)
        elif k[-1].endswith("_hc_alpha_fn") or k[-1].endswith("_hc_beta_fn"):  # 0 at init:
            flat[k] = v + rng.normal(0, 0.3, v.shape).astype(np.float32)  # its s, N_hc inert
    return unflatten_dict(flat)


B, T, S = 2, 5, 6


@pytest.mark.parametrize("side, has_cross", [("encoder", False), ("decoder", True)])
@pytest.mark.parametrize(
    "scheme, index",
    [(s, 0) for s in NEW]
    + [  # the layer index matters to Mix-LN and LayerNorm Scaling only
        (s, 2) if s in ("mix_ln", "ln_scaling") else pytest.param(s, 2, marks=pytest.mark.slow)
        for s in NEW
    ],
)
def test_layer_matches_formula(scheme, side, has_cross, index):
    """Every sublayer kind (self-attention, cross-attention, FFN) of every scheme; index 0 and
    2 sit on both sides of Mix-LN's switch and give LayerNorm Scaling 1 and 1/√3."""
    cfg = TransformerConfig.from_config(
        config("encdec", scheme, num_encoder_layers=6, num_decoder_layers=5)
    )
    layer = TransformerLayer(cfg, side=side, has_cross=has_cross)
    rng = np.random.default_rng(0)
    x, self_mask, enc, enc_mask = layer_inputs(cfg.d_model, side, has_cross, rng)
    args = (x, self_mask, enc, enc_mask, None, None, None, None, index)
    variables = layer.init(jax.random.key(1), *args)
    params = randomize(jax.tree.map(np.asarray, nn.unbox(variables["params"])), rng)
    got = layer.apply({"params": params}, *args)
    want = reference_layer(params, x.astype(np.float64), cfg, side, index, self_mask, enc, enc_mask)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-4, atol=2e-4)


def embedded(params, table, tokens, cfg):
    emb = np.asarray(params[table]["embedding"], np.float64)
    T = tokens.shape[1]
    return (
        emb[np.asarray(tokens)] * np.sqrt(cfg.d_model)
        + np.asarray(sinusoidal_table(T, cfg.d_model))[None]
    )


def reference_stack(p, x, cfg, side, self_mask, enc=None, enc_mask=None):
    """One side: Peri-LN's embedding norm, the layers (DenseFormer's averages after each),
    the final norm where the scheme has one."""
    L = cfg.num_encoder_layers if side == "encoder" else cfg.num_decoder_layers
    if cfg.scheme == "peri_ln":
        x = norm(x, p["embed_layer_norm"], cfg)
    history, W = [x], None
    if cfg.scheme == "denseformer":
        W = np.tril(np.asarray(p["dwa_weights"], np.float64), k=1)
    for i in range(L):
        lp = (
            p[f"layers_{i}"]
            if "layers" not in p
            else jax.tree.map(lambda a, i=i: a[i], p["layers"])
        )
        x = reference_layer(lp, x, cfg, side, i, self_mask, enc, enc_mask)
        if W is not None:  # Y_{i+1} = Σ_j W[i, j]·X_j over the block outputs X_0 … X_{i+1}
            history.append(x)
            x = sum(W[i, j] * history[j] for j in range(i + 2))
    if schemes.get(cfg.scheme).final_norm:
        x = norm(x, p["layer_norm"], cfg)
    return x


def args_of(arch, src, tgt):
    """The model's positional inputs: (src, tgt), (src,) for the encoder, (tgt,) else."""
    return (src, tgt) if arch == "encdec" else ((src,) if arch == "encoder" else (tgt,))


def hidden_states(model, params, args):
    """The encoder's and decoder's outputs [B, T, D] of one forward pass."""
    _, inter = model.apply({"params": params}, *args, capture_intermediates=True)
    inter = inter["intermediates"]
    return {
        side: np.asarray(inter[side]["__call__"][0])
        for side in ("encoder", "decoder")
        if side in inter
    }


@pytest.mark.parametrize(
    "arch",  # the encoder-decoder holds both sides' layers; the single stacks under -m slow
    [pytest.param(a, marks=() if a == "encdec" else pytest.mark.slow) for a in ARCHS],
)
@pytest.mark.parametrize("scheme", (*ONE_STREAM, "dyt"))
def test_model_matches_formula(scheme, arch):
    """The whole model in each architecture: embeddings, every layer at its index, the
    stack's extras and final norm against the NumPy stack (``dyt``: Pre-LN with DyT)."""
    overrides = dict(norm="dyt") if scheme == "dyt" else {}
    cfg = config(arch, "pre_ln" if scheme == "dyt" else scheme, **overrides)
    tc = TransformerConfig.from_config(cfg)
    model = architectures.build(cfg)
    src = random_tokens((B, 7), cfg.vocab_size, seed=1).at[1, 5:].set(0)
    tgt = random_tokens((B, T), cfg.vocab_size, seed=2)
    params = init_params(
        model, arch, *((src, tgt) if arch == "encdec" else args_of(arch, src, tgt))
    )
    params = randomize(jax.tree.map(np.asarray, params), np.random.default_rng(0))
    args = args_of(arch, src, tgt)
    got = hidden_states(model, params, args)
    enc_table = "encoder_embed_tokens" if arch == "encdec" else "embed_tokens"
    dec_table = "decoder_embed_tokens" if arch == "encdec" else "embed_tokens"
    enc = None
    if arch != "decoder":
        mask = np.asarray(src != 0)[:, None, None, :]
        enc = reference_stack(
            params["encoder"], embedded(params, enc_table, src, tc), tc, "encoder", mask
        )
        np.testing.assert_allclose(got["encoder"], enc, rtol=2e-4, atol=2e-4)
    if arch != "encoder":
        causal = np.tril(np.ones((T, T), bool))[None, None]
        enc_mask = None if enc is None else np.asarray(src != 0)[:, None, None, :]
        dec = reference_stack(
            params["decoder"],
            embedded(params, dec_table, tgt, tc),
            tc,
            "decoder",
            causal,
            enc,
            enc_mask,
        )
        np.testing.assert_allclose(got["decoder"], dec, rtol=2e-4, atol=2e-4)


def reference_admin_profile(p, x, cfg, self_mask):
    """Transformer-Clinic's profiling, written out: r = 1; per sublayer ω = r,
    r ← √(Var(r·x) + Var(G(x))), x ← LN(r·x + G(x)) (ω = r in this pass)."""
    r, omegas = 1.0, []
    for i in range(cfg.num_decoder_layers):
        lp = jax.tree.map(lambda a, i=i: a[i], p["layers"])
        for _name, g, n in (
            (
                "self_attn",
                lambda h, lp=lp: attention(lp["self_attn"], h, h, self_mask),
                "self_attn_layer_norm",
            ),
            ("ffn", lambda h, lp=lp: ffn(lp["ffn"], h), "final_layer_norm"),
        ):
            omegas.append(r)
            f = g(x)
            x_new = ln(r * x + f, lp[n])
            r = math.sqrt(np.var(r * x) + np.var(f))
            x = x_new
    return omegas


@pytest.mark.parametrize("layers", [2, 5])
def test_admin_profiling_step(layers):
    """init_variables profiles ω on the batch it is given: each sublayer's ω [D] is filled
    with the NumPy profile's value (ω₁ = 1, then the running ratio)."""
    cfg = tiny_config("decoder", "admin", num_decoder_layers=layers)
    model = architectures.build(cfg)
    tgt = random_tokens((B, T), cfg.vocab_size, seed=3)
    variables = init_variables(model, "decoder", {"inputs": tgt})
    params = jax.tree.map(np.asarray, nn.unbox(variables["params"]))
    layers_p = params["decoder"]["layers"]
    got = np.stack([layers_p["self_attn_omega"], layers_p["ffn_omega"]], axis=1)  # [L, 2, D]
    assert np.all(got == got[..., :1])  # one value per sublayer, filled over D
    x = embedded(params, "embed_tokens", tgt, TransformerConfig.from_config(cfg))
    causal = np.tril(np.ones((T, T), bool))[None, None]
    want = reference_admin_profile(params["decoder"], x, cfg, causal)
    np.testing.assert_allclose(got[..., 0].reshape(-1), want, rtol=1e-4)
    assert want[0] == 1.0 and all(w > 1.0 for w in want[1:])  # the residual gains weight


def test_admin_profiles_encoder_and_decoder_apart():
    cfg = tiny_config("encdec", "admin")
    model = architectures.build(cfg)
    src, tgt = random_tokens((B, 7), cfg.vocab_size), random_tokens((B, T), cfg.vocab_size)
    params = nn.unbox(init_variables(model, "encdec", {"src": src, "inputs": tgt})["params"])
    for side, n in (("encoder", 3), ("decoder", 2)):
        layers_p = params[side]["layers"]
        assert float(layers_p["self_attn_omega"][0, 0]) == 1.0  # each stack starts at r = 1
        names = ["self_attn_omega", "ffn_omega"] + (
            ["cross_attn_omega"] if side == "decoder" else []
        )
        assert all(layers_p[k].shape == (n, cfg.d_model) for k in names)
    assert float(params["decoder"]["layers"]["cross_attn_omega"][0, 0]) > 1.0


def test_constants_at_two_depths():
    # Mix-LN: α = 0.25 makes 3 of 12 and 6 of 24 layers Post-LN (the paper's 71M and 1B runs)
    assert constants.mix_ln_post_layers(12, 0.25) == 3
    assert constants.mix_ln_post_layers(24, 0.25) == 6
    assert constants.mix_ln_post_layers(32, 0.0625) == 2  # 7B: α = 6.25%
    # LayerNorm Scaling: 1/√ℓ
    assert constants.ln_scaling(1) == 1.0 and constants.ln_scaling(4) == 0.5
    # DeepScaleLM: β² = 2/(2L) per branch; 192 layers: the code's λ² = 0.995, β² = 0.005
    k = constants.deepscalelm("decoder", 0, 192)["decoder"]
    assert k["beta"] ** 2 == pytest.approx(1 / 192) and k["beta"] ** 2 == pytest.approx(
        0.005, abs=3e-4
    )
    assert k["lambda"] ** 2 + k["beta"] ** 2 == pytest.approx(1.0)
    k = constants.deepscalelm("encdec", 6, 6)
    assert k["encoder"]["beta"] ** 2 == pytest.approx(2 / 12)
    assert k["decoder"]["beta"] ** 2 == pytest.approx(2 / 18)  # 3 branches per decoder layer


def test_deepscalelm_init_stds_are_its_codes():
    """The official code's values at d = 512, p = 0.1 (its comments: q/k 0.044, fc 0.036, the
    first layer's v/out 0.065, embeddings 0.548 per BERT table)."""
    assert pytest.approx(0.044, abs=5e-4) == 512**-0.5
    assert constants.deepscalelm_ffn_std(512, 2048, 0.1) == pytest.approx(0.036, abs=5e-4)
    lam_sq, beta_sq = 0.995, 0.005
    stds = constants.deepscalelm_value_stds(192, 512, 0.1, lam_sq, beta_sq)
    assert stds[0] == pytest.approx(0.065, abs=1e-3)  # 0.0645, the comment's rounding
    assert all(b < a for a, b in itertools.pairwise(stds))  # correlation grows with depth
    tok, pos = constants.deepscalelm_embedding_variances("learned", 0.1)
    assert tok + pos == pytest.approx(0.9)


def test_deepscalelm_model_init_draws_those_stds():
    cfg = tiny_config(
        "decoder", "deepscalelm", d_model=64, num_decoder_layers=4, ffn_dim=256, activation="relu"
    )
    tc = TransformerConfig.from_config(cfg)
    params = init_params(architectures.build(cfg), "decoder", random_tokens((1, 4), 40))
    layers_p = params["decoder"]["layers"]
    lam, beta = tc.deepscalelm_weights("decoder")
    want = constants.deepscalelm_value_stds(4, 64, 0.0, lam**2, beta**2)
    # per layer: v [64, 4, 16] and out [4, 16, 64] give 2·4096 draws: std within 5 standard errors
    for i in range(4):
        w = np.concatenate(
            [np.ravel(layers_p["self_attn"][n]["kernel"][i]) for n in ("v_proj", "out_proj")]
        )
        assert abs(w.std() / want[i] - 1) < 5 / math.sqrt(2 * w.size)
    fc = np.ravel(layers_p["ffn"]["fc1"]["kernel"])
    assert abs(fc.std() / constants.deepscalelm_ffn_std(64, 256, 0.0) - 1) < 5 / math.sqrt(
        2 * fc.size
    )
    q = np.ravel(layers_p["self_attn"]["q_proj"]["kernel"])
    assert abs(q.std() * 8 - 1) < 5 / math.sqrt(2 * q.size)  # 1/√d = 1/8


@pytest.mark.parametrize("scheme", ["rezero", "skipinit"])
def test_zero_initialized_branches_make_the_stack_the_identity(scheme):
    cfg = tiny_config("decoder", scheme)
    model = architectures.build(cfg)
    tgt = random_tokens((B, T), cfg.vocab_size)
    params = init_params(model, "decoder", tgt)
    got = hidden_states(model, params, (tgt,))["decoder"]
    x = embedded(
        jax.tree.map(np.asarray, params), "embed_tokens", tgt, TransformerConfig.from_config(cfg)
    )
    np.testing.assert_allclose(got, x, rtol=1e-6, atol=1e-6)  # no norm, every α = 0


def test_denseformer_starts_as_pre_ln():
    """DWA weights start at the identity: the stack equals Pre-LN's on the same layers."""
    dense = tiny_config("decoder", "denseformer")
    pre = tiny_config("decoder", "pre_ln", scan_layers=False)
    tgt = random_tokens((B, T), dense.vocab_size)
    params = init_params(architectures.build(dense), "decoder", tgt)
    np.testing.assert_array_equal(params["decoder"]["dwa_weights"], dwa_weight_init(2))
    pre_params = {
        **params,
        "decoder": {k: v for k, v in params["decoder"].items() if k != "dwa_weights"},
    }
    a = architectures.build(dense).apply({"params": params}, tgt)
    b = architectures.build(pre).apply({"params": pre_params}, tgt)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


# in the default run: a scheme of each residual form whose cache differs (a mixed norm, the n
# streams, DyT in place of the norms); the others under -m slow
DECODED_BY_DEFAULT = ("mix_ln", "hyper_connections", "dyt")


@pytest.mark.parametrize(
    "scheme",
    [
        pytest.param(s, marks=() if s in DECODED_BY_DEFAULT else pytest.mark.slow)
        for s in (*STACKS, "dyt")
    ],
)
def test_encoder_decoder_trains_and_decodes_from_its_cache(scheme):
    """Forward, backward (every parameter a gradient) and cached decoding equal to the full
    forward, with dropout off; Admin after its profiling."""
    overrides = dict(norm="dyt") if scheme == "dyt" else {}
    cfg = config("encdec", "subln" if scheme == "dyt" else scheme, remat_policy="none", **overrides)
    model = architectures.build(cfg)
    src = random_tokens((2, 7), cfg.vocab_size, seed=1)
    tgt = random_tokens((2, 6), cfg.vocab_size, seed=2)
    params = nn.unbox(init_variables(model, "encdec", {"src": src, "inputs": tgt})["params"])
    params = randomize(jax.tree.map(np.asarray, params), np.random.default_rng(1))

    def loss(p):
        return jnp.mean(model.apply({"params": p}, src, tgt) ** 2)

    grads = jax.jit(jax.grad(loss))(params)
    assert all(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(grads)), scheme
    full = np.asarray(jax.jit(model.apply)({"params": params}, src, tgt))
    enc = model.apply({"params": params}, src, method=model.encode)
    cache = architectures.init_cache(
        TransformerConfig.from_config(cfg), 2, tgt.shape[1], src.shape[1]
    )
    step = jax.jit(
        lambda p, t, c, i, e: model.apply({"params": p}, t, src, c, i, e, method=model.decode_step)
    )
    logits = []
    for i in range(tgt.shape[1]):
        out, cache = step(params, tgt[:, i : i + 1], cache, jnp.asarray(i), enc if i == 0 else None)
        logits.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(logits, axis=1), full, rtol=1e-4, atol=1e-4)


BAD = [
    (dict(scheme="post_ln", norm="dyt"), r"model\.norm='dyt'.*pre-norm schemes.*'post_ln'"),
    (dict(scheme="rezero", norm="dyt"), r"model\.norm='dyt'"),
    (dict(scheme="pre_ln", mix_ln_ratio=0.5), r"model\.mix_ln_ratio=0\.5.*scheme='mix_ln' only"),
    (dict(scheme="mix_ln", mix_ln_ratio=1.5), r"model\.mix_ln_ratio=1\.5"),
    (dict(scheme="pre_ln", dyt_alpha=0.8), r"model\.dyt_alpha=0\.8.*norm='dyt' only"),
    (dict(scheme="deepscalelm", activation="gelu"), r"model\.activation='gelu'.*ReLU"),
    (dict(scheme="deepscalelm", deepscalelm_k=4.0), r"model\.deepscalelm_k=4\.0.*must be < 1"),
    (dict(scheme="deepscalelm", init="fairseq"), r"model\.init='fairseq'.*own init"),
    (dict(scheme="denseformer", scan_layers=True), r"model\.scan_layers=True.*denseformer"),
    (dict(scheme="skipinit", skipinit_alpha=-0.1), r"model\.skipinit_alpha=-0\.1"),
]


@pytest.mark.parametrize("overrides, message", BAD)
def test_bad_scheme_fields_are_named(overrides, message):
    cfg = tiny_config("encdec", "deepnorm", num_encoder_layers=1, num_decoder_layers=1)
    for k, v in overrides.items():
        cfg[k] = v
    with pytest.raises(ValueError, match=message):
        architectures.build(cfg)


@pytest.mark.parametrize("scheme", STACKS)
def test_torchscale_export_refuses(scheme):
    cfg = config("encdec", scheme)
    with pytest.raises(ValueError, match=rf"model\.scheme='{scheme}': torchscale has no"):
        state_dict.check_torchscale_has(cfg)
    cfg = tiny_config("encdec", "pre_ln", norm="dyt")
    with pytest.raises(ValueError, match=r"model\.norm='dyt': torchscale has no"):
        state_dict.check_torchscale_has(cfg)
