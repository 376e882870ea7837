"""CompleteP (``model.parameterization="completep"``) against Dey et al. 2025, Table 1 at α = 1,
at several depths and widths: the residual multiplier in the traced layer and stack (NumPy
oracles), the init and the output logits' multiplier, the parameter groups of the three
architectures, one AdamW step of every group against the hand-computed update, the config's
errors, a run through the trainer; and ``standard``'s optimizer unchanged."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import init_params, random_tokens, tiny_config
from test_blocks import attention, ffn, layer_inputs
from test_schemes_since_deepnet import norm, randomize
from test_training import small_config

from deepnet_jax.interop.torchscale import state_dict
from deepnet_jax.model import architectures, schemes
from deepnet_jax.model import parameterization as p13n
from deepnet_jax.model.config import TransformerConfig, validate
from deepnet_jax.model.transformer_layer import TransformerLayer
from deepnet_jax.training import config as train_config
from deepnet_jax.training import optimizers, train

DEPTHS = (2, 8, 32)
WIDTHS = (64, 128)
BASE_LAYERS, BASE_WIDTH = 2, 32
ALLOWED = ("pre_ln", "subln", "peri_ln", "ln_scaling")  # pre-norm, layers alone, no own init


def completep(arch="encdec", scheme="pre_ln", **overrides):
    """A tiny CompleteP model config (L_base = 2, N_base = 32; learned positions: the model
    refuses fixed sinusoids under CompleteP)."""
    base = dict(
        parameterization="completep",
        scale_embedding=False,
        completep_base_layers=BASE_LAYERS,
        completep_base_width=BASE_WIDTH,
        positions="learned",
    )
    return tiny_config(arch, scheme, **{**base, **overrides})


def table_1(group, m_l, m_n):
    """(η, ε, λ) factors of Table 1's α-column at α = 1 (weight decay of the gains and biases
    0, the embeddings' and head's λ, and ε·m_N^(-1) outside the blocks (Eq. 40): the authors'
    configure_optimizers)."""
    return {
        "embedding": (1.0, 1.0 / m_n, 1.0),
        "unembedding": (1.0, 1.0 / m_n, 1.0),
        "outer_norm": (1.0, 1.0 / m_n, 0.0),
        "hidden_weight": (1.0 / m_n, 1.0 / (m_n * m_l), m_n),
        "hidden_bias": (1.0, 1.0 / (m_n * m_l), 0.0),
        "hidden_norm": (1.0, 1.0 / (m_n * m_l), 0.0),
    }[group]


def test_the_schemes_completep_applies_to():
    assert schemes.names(completep_ok=True) == ALLOWED


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("width", WIDTHS)
def test_multipliers_and_group_rules_follow_table_1(depth, width):
    c = completep(num_encoder_layers=depth, num_decoder_layers=2 * depth, d_model=width)
    m_n = width / BASE_WIDTH
    for side, layers in (("encoder", depth), ("decoder", 2 * depth)):
        m_l = layers / BASE_LAYERS
        assert p13n.branch_multiplier(c, side) == pytest.approx(1 / m_l)  # m_L^(-α)
        for group in p13n.HIDDEN_GROUPS:
            s = p13n.scales(c)[p13n.label(group, side)]
            assert (s.lr, s.eps, s.weight_decay) == pytest.approx(table_1(group, m_l, m_n))
    assert p13n.output_multiplier(c) == pytest.approx(1 / m_n)
    assert p13n.hidden_std(c) ** 2 == pytest.approx(0.02**2 / m_n)
    for group in ("embedding", "unembedding", "outer_norm"):
        s = p13n.scales(c)[group]
        assert (s.lr, s.eps, s.weight_decay) == table_1(group, 1.0, m_n)


def reference_layer(p, x, cfg, side, index, self_mask, enc=None, enc_mask=None):
    """One pre-norm layer, x ← x + m·G(N(x)) with m = (L/L_base)^(-1), written per scheme."""
    m = BASE_LAYERS / cfg.num_layers(side)
    s = cfg.scheme
    inner = (lambda q: q.get("inner_attn_ln")) if s == "subln" else (lambda q: None)
    sublayers = [
        ("self_attn", lambda h: attention(p["self_attn"], h, h, self_mask, inner(p["self_attn"])))
    ]
    if enc is not None:
        sublayers.append(("cross_attn", lambda h: attention(p["cross_attn"], h, enc, enc_mask)))
    ffn_ln = p["ffn"].get("ffn_layernorm") if s == "subln" else None
    sublayers.append(("ffn", lambda h: ffn(p["ffn"], h, ffn_ln)))
    names = {"self_attn": "self_attn_layer_norm", "cross_attn": "cross_attn_layer_norm"}
    for name, g in sublayers:
        h = norm(x, p[names.get(name, "final_layer_norm")], cfg)
        if s == "ln_scaling":
            h = h / math.sqrt(index + 1)
        f = g(h)
        if s == "peri_ln":
            f = norm(f, p[f"{name}_output_layer_norm"], cfg)
        x = x + m * f
    return x


@pytest.mark.parametrize("scheme", ALLOWED)
@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("side, has_cross", [("encoder", False), ("decoder", True)])
def test_layer_weighs_each_branch_by_the_depth_multiplier(scheme, depth, width, side, has_cross):
    cfg = TransformerConfig.from_config(
        completep(scheme=scheme, num_encoder_layers=depth, num_decoder_layers=depth, d_model=width)
    )
    layer = TransformerLayer(cfg, side=side, has_cross=has_cross)
    rng = np.random.default_rng(0)
    x, self_mask, enc, enc_mask = layer_inputs(width, side, has_cross, rng)
    args = (x, self_mask, enc, enc_mask, None, None, None, None, 1)
    variables = layer.init(jax.random.key(1), *args)
    params = randomize(jax.tree.map(np.asarray, nn.unbox(variables["params"])), rng)
    params = jax.tree.map(lambda a: a * 30.0 if a.ndim > 1 else a, params)  # visible branches
    got = np.asarray(layer.apply({"params": params}, *args))
    want = reference_layer(params, x.astype(np.float64), cfg, side, 1, self_mask, enc, enc_mask)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
    if depth != BASE_LAYERS:  # the multiplier is what the test sees
        unscaled = dataclass_replace(cfg, completep_base_layers=depth)
        other = np.asarray(layer.clone(config=unscaled).apply({"params": params}, *args))
        assert np.abs(other - got).max() > 1e-2


def dataclass_replace(cfg, **changes):
    return TransformerConfig(**{**cfg.__dict__, **changes})


@pytest.mark.parametrize("depth", DEPTHS)
def test_scanned_stack_weighs_each_branch(depth):
    """The decoder's whole scanned stack (the traced model): m = 2/L on every branch."""
    c = completep("decoder", num_decoder_layers=depth, d_model=64, positions="learned")
    cfg = TransformerConfig.from_config(c)
    model = architectures.build(c)
    tokens = random_tokens((2, 5), c.vocab_size)
    params = randomize(
        jax.tree.map(np.asarray, init_params(model, "decoder", tokens)), np.random.default_rng(0)
    )
    params = jax.tree.map(lambda a: a * 30.0 if a.ndim > 1 else a, params)
    got = np.asarray(model.apply({"params": params}, tokens, logits=False))
    p = params["decoder"]
    x = (params["embed_tokens"]["embedding"][np.asarray(tokens)]).astype(np.float64)
    x = x + p["embed_positions"]["embedding"][None, :5]
    causal = np.tril(np.ones((5, 5), bool))[None, None]
    for i in range(depth):
        lp = jax.tree.map(lambda a, i=i: a[i], p["layers"])
        x = reference_layer(lp, x, cfg, "decoder", i, causal)
    want = norm(x, p["layer_norm"], cfg)
    np.testing.assert_allclose(got, want, rtol=5e-4, atol=5e-4)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("tied", [False, True])
def test_output_logits_are_divided_by_the_width_multiplier(width, tied):
    c = completep("decoder", d_model=width, tie_embeddings=tied)
    model = architectures.build(c)
    tokens = random_tokens((2, 5), c.vocab_size)
    params = init_params(model, "decoder", tokens)
    hidden = np.asarray(model.apply({"params": params}, tokens, logits=False), np.float64)
    w = (
        np.asarray(params["embed_tokens"]["embedding"]).T
        if tied
        else np.asarray(params["output_projection"]["kernel"])
    )
    got = np.asarray(model.apply({"params": params}, tokens))
    np.testing.assert_allclose(got, hidden @ w * (BASE_WIDTH / width), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("scheme", ["pre_ln", "subln"])
def test_init_follows_table_1(width, scheme):
    """Embeddings, learned positions and the head N(0, σ²); every hidden kernel N(0, σ²/m_N)
    (times Sub-LN's γ on v, out, fc1, fc2); biases zero; norm gains one."""
    sigma = 0.05
    c = completep(
        scheme=scheme,
        d_model=width,
        ffn_dim=4 * width,
        vocab_size=400,
        max_len=200,
        positions="learned",
        completep_init_std=sigma,
        activation="swiglu",
        num_encoder_layers=4,
        num_decoder_layers=4,
    )
    cfg = TransformerConfig.from_config(c)
    model = architectures.build(c)
    src = random_tokens((1, 4), c.vocab_size)
    params = jax.tree.map(np.asarray, init_params(model, "encdec", src, src))
    flat = {"/".join(k): v for k, v in flatten(params).items()}
    m_n = width / BASE_WIDTH
    for path, v in flat.items():
        if path.endswith("embedding") or path.startswith("output_projection"):
            assert v.std() == pytest.approx(sigma, rel=0.05), path
        elif path.endswith("kernel"):
            side = path.split("/")[0]
            gained = scheme == "subln" and any(
                n in path for n in ("self_attn/v_proj", "self_attn/out_proj", "fc1", "fc2")
            )
            gain = cfg.side_constants(side)[1] if gained else 1.0
            assert v.std() == pytest.approx(gain * sigma / math.sqrt(m_n), rel=0.05), path
        elif path.endswith("bias"):
            assert not v.any(), path
        else:
            assert (v == 1).all(), path


def flatten(tree, prefix=()):
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(flatten(v, (*prefix, k)))
        else:
            out[(*prefix, k)] = v
    return out


def expected_label(path):
    """The group of a parameter path, written out from Table 1's rows."""
    names = path.split("/")
    in_block = any(n == "layers" or n.startswith("layers_") for n in names)
    module, leaf = names[-2], names[-1]
    linear = module.endswith("_proj") or module in ("fc1", "fc2", "gate")
    if in_block:
        group = (
            "hidden_weight"
            if linear and leaf == "kernel"
            else "hidden_bias"
            if linear
            else "hidden_norm"
        )
        return f"{names[0]}/{group}"
    if names[0] == "output_projection":
        return "unembedding"
    return "embedding" if leaf == "embedding" else "outer_norm"


STACKS = {
    "scanned": dict(),
    "unrolled": dict(scan_layers=False),
    "grouped": dict(layers=4, scan_group_size=2),
}


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encdec"])
@pytest.mark.parametrize("stack", STACKS)
def test_labels_of_the_three_architectures(arch, stack):
    """Every parameter's group, from the layout (Peri-LN: norms inside and outside the blocks;
    QK-norm; a gated FFN; the decoder's fused QKV kernel)."""
    overrides = dict(STACKS[stack])
    layers = overrides.pop("layers", None)
    if layers:
        overrides.update(
            {
                f"num_{s}_layers": layers
                for s in ("encoder", "decoder")
                if s in arch or arch == "encdec"
            }
        )
    overrides.update(
        positions="learned", qk_norm=True, activation="swiglu", fused_qkv=arch == "decoder"
    )
    c = completep(arch, "peri_ln", **overrides)
    model = architectures.build(c)
    src = random_tokens((1, 4), c.vocab_size)
    params = init_params(model, arch, *((src, src) if arch == "encdec" else (src,)))
    got = {"/".join(k): v for k, v in flatten(p13n.labels(params)).items()}
    want = {path: expected_label(path) for path in got}
    assert got == want
    assert set(got.values()) <= set(p13n.scales(c))  # the optimizer has a rule for each
    kinds = {v.split("/")[-1] for v in got.values()}
    assert kinds == {"embedding", "unembedding", "outer_norm", *p13n.HIDDEN_GROUPS}


def tiny_tree(rng):
    """A tiny parameter tree in the encoder-decoder's layout, one leaf per group and side."""

    def a(*shape):
        return jnp.asarray(rng.normal(0, 1, shape), jnp.float32)

    def side():
        return {
            "layers": {
                "ffn": {"fc1": {"kernel": a(2, 3, 4), "bias": a(2, 4)}},
                "final_layer_norm": {"scale": a(2, 3), "bias": a(2, 3)},
            },
            "layer_norm": {"scale": a(3)},
            "embed_positions": {"embedding": a(5, 3)},
        }

    return {
        "encoder": side(),
        "decoder": side(),
        "encoder_embed_tokens": {"embedding": a(6, 3)},
        "decoder_embed_tokens": {"embedding": a(6, 3)},
        "output_projection": {"kernel": a(3, 6)},
    }


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("width", WIDTHS)
def test_one_adamw_step_of_each_group_is_table_1s(depth, width):
    """From a zero state Adam's bias-corrected moments are g and g², so the update is
    −η·lr_g·(g/(|g| + ε·ε_g) + λ·λ_g·p), computed here by hand from Table 1's factors."""
    config = train_config.default_config()
    config.model = completep(num_encoder_layers=depth, num_decoder_layers=3 * depth, d_model=width)
    o = config.optimizer
    o.eps, o.weight_decay, o.grad_clip = 0.05, 0.1, 0.0  # an ε comparable to |g|: it shows
    lr = 0.01
    rng = np.random.default_rng(0)
    params = tiny_tree(rng)
    grads = jax.tree.map(lambda p: jnp.asarray(rng.normal(0, 0.05, p.shape), jnp.float32), params)
    opt = optimizers.make_optimizer(config)
    updates, _ = opt.update(grads, opt.init(params), params, learning_rate=jnp.float32(lr))
    m_n = width / BASE_WIDTH
    labels = {"/".join(k): v for k, v in flatten(p13n.labels(params)).items()}
    flat_p, flat_g, flat_u = (
        {"/".join(k): np.asarray(v, np.float64) for k, v in flatten(t).items()}
        for t in (params, grads, updates)
    )
    seen = set()
    for path, label in labels.items():
        side, group = label.split("/") if "/" in label else (None, label)
        m_l = {"encoder": depth, "decoder": 3 * depth, None: BASE_LAYERS}[side] / BASE_LAYERS
        f_lr, f_eps, f_wd = table_1(group, m_l, m_n)
        g, p = flat_g[path], flat_p[path]
        want = -lr * f_lr * (g / (np.abs(g) + o.eps * f_eps) + o.weight_decay * f_wd * p)
        np.testing.assert_allclose(flat_u[path], want, rtol=1e-5, atol=1e-9, err_msg=path)
        seen.add(label)
    assert len(seen) == 3 + 2 * 3  # every group on each side


def test_standard_keeps_todays_optimizer():
    """``standard``: the one chain clip → scale_by_adam → add_decayed_weights → −η_t, its
    state and its updates bit for bit (saved runs' optimizer states restore into it)."""
    config = train_config.default_config()
    config.model = tiny_config("encdec", "pre_ln")
    o = config.optimizer
    o.weight_decay, o.grad_clip = 0.01, 1.0
    today = optax.chain(
        optax.clip_by_global_norm(o.grad_clip),
        optax.scale_by_adam(b1=o.b1, b2=o.b2, eps=o.eps),
        optax.add_decayed_weights(o.weight_decay),
        optimizers.scale_by_learning_rate_argument(),
    )
    rng = np.random.default_rng(0)
    params = tiny_tree(rng)
    grads = jax.tree.map(lambda p: jnp.asarray(rng.normal(0, 1, p.shape), jnp.float32), params)
    ours = optimizers.make_optimizer(config)
    s1, s2 = ours.init(params), today.init(params)
    assert jax.tree.structure(s1) == jax.tree.structure(s2)
    for _ in range(2):
        u1, s1 = ours.update(grads, s1, params, learning_rate=jnp.float32(1e-3))
        u2, s2 = today.update(grads, s2, params, learning_rate=jnp.float32(1e-3))
        assert all(jax.tree.leaves(jax.tree.map(lambda a, b: bool((a == b).all()), u1, u2)))


def test_standard_weights_and_multipliers_are_exactly_one():
    c = tiny_config("encdec", "ln_scaling")
    cfg = TransformerConfig.from_config(c)
    for side in cfg.sides:
        assert p13n.branch_multiplier(cfg, side) == 1.0
        k = schemes.get("ln_scaling")
        assert k.weights(cfg, side) == k.constants(cfg, side)
    assert p13n.output_multiplier(cfg) == 1.0


@pytest.mark.parametrize(
    "overrides, words",
    [
        (dict(scheme="deepnorm"), "scheme='deepnorm' is not one it applies to (its residual form"),
        (dict(scheme="mix_ln"), "not the pre-norm"),
        (dict(scheme="dlcl_pre", scan_layers=False), "combination weights"),
        (dict(scheme="deepscalelm", activation="relu"), "init of its own"),
        (dict(init="torchscale"), "model.init='torchscale' is invalid"),
        (dict(scale_embedding=True), "model.scale_embedding=True is invalid"),
        (dict(positions="sinusoidal"), "outweigh the tokens' N(0, 0.02²) 35-fold"),
        (dict(completep_base_layers=0), "model.completep_base_layers=0 is invalid"),
        (dict(completep_init_std=0.0), "model.completep_init_std=0.0 is invalid"),
        (dict(parameterization="mup"), "model.parameterization='mup' is invalid"),
    ],
)
def test_completep_config_errors(overrides, words):
    c = completep("encdec", **overrides)
    with pytest.raises(ValueError, match=r"^model\.") as error:
        validate(c)
    assert words in str(error.value), str(error.value)
    assert "\n" not in str(error.value)


def test_completep_error_names_the_field_and_the_schemes():
    with pytest.raises(ValueError) as error:
        validate(completep("decoder", "post_ln"))
    message = str(error.value)
    assert message.startswith("model.parameterization='completep' is invalid")
    assert "pre_ln, subln, peri_ln, ln_scaling" in message


@pytest.mark.parametrize("name", p13n.COMPLETEP_FIELDS)
def test_completep_fields_belong_to_completep(name):
    c = tiny_config("decoder", "pre_ln")
    c[name] = 2 * c[name]
    with pytest.raises(
        ValueError, match=f"model.{name}=.* applies to parameterization='completep' only"
    ):
        validate(c)


def test_torchscale_export_refuses_completep():
    with pytest.raises(ValueError, match=r"model\.parameterization='completep': torchscale has no"):
        state_dict.check_torchscale_has(completep("decoder"))


@pytest.mark.parametrize("arch", ["decoder", "encdec"])
def test_completep_trains_through_the_trainer(arch):
    """The real path: validation, the grouped optimizer (in ``skip``'s wrapper on the decoder,
    with accumulation on the encoder-decoder), the jitted steps; the loss falls."""
    c = small_config(arch, "pre_ln", steps=30)
    m = c.model
    m.parameterization, m.scale_embedding, m.positions = "completep", False, "learned"
    m.completep_base_layers, m.completep_base_width, m.completep_init_std = 1, 16, 0.1
    if arch == "encdec":  # optax.MultiSteps around the groups
        c.grad_accum_steps = 2
    else:  # optax.apply_if_finite around them
        c.nan_policy = "skip"
    metrics = train.run(c)
    assert np.isfinite(metrics["eval_loss"])
    assert metrics["eval_loss"] < 0.95 * metrics["first_train_loss"], metrics
