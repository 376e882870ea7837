"""Block math: each scheme's layer equals an independent NumPy transcription of its formula."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import PAPER_SCHEMES, tiny_config
from flax.traverse_util import flatten_dict, unflatten_dict

from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.transformer_layer import TransformerLayer

B, T, S = 2, 5, 6


def ln(x, p, eps=1e-5, kind="layernorm"):
    """LayerNorm (bias only where the parameters have one) or RMSNorm over the last axis."""
    if kind == "rmsnorm":
        return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * p["scale"]
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * p["scale"] + p.get("bias", 0.0)


def rope(x, pos, theta):
    """x [B, T, H, K] with each pair (i, i + K/2) turned by the angle p·θ^(-2i/K): a 2×2
    rotation matrix per pair, written out (RoFormer eq. 34 in the half-split layout)."""
    K = x.shape[-1]
    out = np.empty_like(x)
    for i in range(K // 2):
        a = pos[..., None] * theta ** (-2 * i / K)  # [B|1, T, 1]
        c, s = np.cos(a), np.sin(a)
        out[..., i] = c * x[..., i] - s * x[..., i + K // 2]
        out[..., i + K // 2] = s * x[..., i] + c * x[..., i + K // 2]
    return out


def attention(p, xq, xkv, mask, inner_ln=None, blocks=None, pos=None):
    """Multi-head attention; ``blocks`` (a model config) adds grouped kv heads (each repeated
    for its query heads), qk_norm and, with ``pos``, the rotary positions."""
    q = np.einsum("btd,dhk->bthk", xq, p["q_proj"]["kernel"]) + p["q_proj"].get("bias", 0.0)
    k = np.einsum("bsd,dhk->bshk", xkv, p["k_proj"]["kernel"]) + p["k_proj"].get("bias", 0.0)
    v = np.einsum("bsd,dhk->bshk", xkv, p["v_proj"]["kernel"]) + p["v_proj"].get("bias", 0.0)
    if blocks is not None:
        eps, kind = blocks.layernorm_eps, blocks.norm
        if blocks.qk_norm:
            q, k = ln(q, p["q_norm"], eps, kind), ln(k, p["k_norm"], eps, kind)
        if pos is not None:
            q, k = rope(q, pos, blocks.rope_theta), rope(k, pos, blocks.rope_theta)
        group = q.shape[2] // k.shape[2]
        k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)  # kv head h // group
    logits = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(mask, logits, -1e30)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    o = np.einsum("bhts,bshk->bthk", w, v)
    if inner_ln is not None:
        kind = "layernorm" if blocks is None else blocks.norm
        o = ln(o.reshape(o.shape[0], o.shape[1], -1), inner_ln, kind=kind).reshape(o.shape)
    return np.einsum("bthk,hkd->btd", o, p["out_proj"]["kernel"]) + p["out_proj"].get("bias", 0.0)


def _gelu(z):
    return 0.5 * z * (1 + np.vectorize(math.erf)(z / np.sqrt(2)))


ACTIVATIONS = {
    "relu": lambda z: np.maximum(z, 0),
    "gelu": _gelu,
    "swiglu": lambda z: z / (1 + np.exp(-z)),  # SiLU
    "geglu": _gelu,
}


def ffn(p, x, inner_ln=None, blocks=None):
    """fc2(φ(fc1(x))), or fc2(φ(gate(x)) ⊙ fc1(x)) for a gated ``blocks.activation``."""

    def lin(name, h):
        return h @ p[name]["kernel"] + p[name].get("bias", 0.0)

    act = "relu" if blocks is None else blocks.activation
    if act in ("swiglu", "geglu"):
        h = ACTIVATIONS[act](lin("gate", x)) * lin("fc1", x)
    else:
        h = ACTIVATIONS[act](lin("fc1", x))
    if inner_ln is not None:
        h = ln(h, inner_ln, kind="layernorm" if blocks is None else blocks.norm)
    return lin("fc2", h)


def reference_layer(
    p, x, scheme, alpha, self_mask, enc=None, enc_mask=None, eps=1e-5, blocks=None, pos=None
):
    """The papers' residual forms (docs/schemes.md), written out sublayer by sublayer;
    ``blocks`` (the model config) for the blocks beyond the papers' (norm, activation, kv heads,
    qk_norm, rope at ``pos``)."""
    scheme = {"dlcl_pre": "pre_ln", "dlcl_post": "post_ln"}.get(scheme, scheme)
    sub = scheme == "subln"
    kind = "layernorm" if blocks is None else blocks.norm
    sublayers = [
        (
            "self_attn_layer_norm",
            lambda h: attention(
                p["self_attn"],
                h,
                h,
                self_mask,
                p["self_attn"].get("inner_attn_ln") if sub else None,
                blocks,
                pos,
            ),
        ),
    ]
    if enc is not None:
        sublayers.append(
            (
                "cross_attn_layer_norm",
                lambda h: attention(p["cross_attn"], h, enc, enc_mask, None, blocks),
            )
        )
    sublayers.append(
        (
            "final_layer_norm",
            lambda h: ffn(p["ffn"], h, p["ffn"].get("ffn_layernorm") if sub else None, blocks),
        )
    )
    for norm, g in sublayers:
        if scheme in ("pre_ln", "subln"):
            x = x + g(ln(x, p[norm], eps, kind))  # x + G(LN(x))
        elif scheme == "deepnorm":
            x = ln(alpha * x + g(x), p[norm], eps, kind)  # LN(α·x + G(x))
        else:
            x = ln(x + g(x), p[norm], eps, kind)  # LN(x + G(x))
    return x


def randomize_norms(params, rng):
    """Non-trivial LayerNorm scales/biases so the test sees where each LN sits."""
    flat = flatten_dict(params)
    for k, v in flat.items():
        if k[-1] in ("scale", "bias") and ("norm" in "/".join(k) or "_ln" in "/".join(k)):
            flat[k] = v + rng.normal(0, 0.3, v.shape).astype(np.float32)
    return unflatten_dict(flat)


def layer_inputs(d_model, side, has_cross, rng):
    """A layer's inputs: x [B, T, D], its self-attention mask (causal on the decoder side),
    the encoder output [B, S, D] (with cross-attention) and its mask (row 1: 2 padded keys)."""
    x = rng.normal(0, 1, (B, T, d_model)).astype(np.float32)
    enc = rng.normal(0, 1, (B, S, d_model)).astype(np.float32) if has_cross else None
    causal = np.tril(np.ones((T, T), bool))[None, None]
    self_mask = causal if side == "decoder" else np.ones((1, 1, 1, T), bool)
    enc_mask = np.ones((B, 1, 1, S), bool)
    enc_mask[1, ..., -2:] = False
    return x, self_mask, enc, enc_mask


def layer_setup(scheme, side, has_cross, **overrides):
    arch = "encdec"
    cfg = TransformerConfig.from_config(
        tiny_config(arch, scheme, num_encoder_layers=18, num_decoder_layers=7, **overrides)
    )
    layer = TransformerLayer(cfg, side=side, has_cross=has_cross)
    rng = np.random.default_rng(0)
    x, self_mask, enc, enc_mask = layer_inputs(cfg.d_model, side, has_cross, rng)
    variables = layer.init(jax.random.key(1), x, self_mask, enc, enc_mask)
    params = randomize_norms(jax.tree.map(np.asarray, nn.unbox(variables["params"])), rng)
    return cfg, layer, params, x, self_mask, enc, enc_mask


@pytest.mark.parametrize("scheme", PAPER_SCHEMES)  # the others: test_schemes_since_deepnet.py
@pytest.mark.parametrize("side, has_cross", [("encoder", False), ("decoder", True)])
def test_layer_matches_formula(scheme, side, has_cross):
    cfg, layer, params, x, self_mask, enc, enc_mask = layer_setup(scheme, side, has_cross)
    got = layer.apply({"params": params}, x, self_mask, enc, enc_mask)
    alpha = cfg.side_constants(side)[0]
    if scheme == "deepnorm":
        assert alpha > 1.5  # the test must be able to tell α·x from α·G(x)
    want = reference_layer(params, x.astype(np.float64), scheme, alpha, self_mask, enc, enc_mask)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-4, atol=2e-4)


def test_layernorm_eps_and_no_bias():
    """model.layernorm_eps reaches every LayerNorm; use_bias=False drops projection and
    LayerNorm biases."""
    cfg, layer, params, x, self_mask, _, _ = layer_setup(
        "deepnorm", "encoder", False, layernorm_eps=0.5, use_bias=False
    )
    assert "bias" not in params["self_attn"]["q_proj"] and "bias" not in params["ffn"]["fc1"]
    assert "bias" not in params["final_layer_norm"]
    got = layer.apply({"params": params}, x, self_mask)
    alpha = cfg.side_constants("encoder")[0]
    want = reference_layer(params, x.astype(np.float64), "deepnorm", alpha, self_mask, eps=0.5)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-4, atol=2e-4)


def zero_sublayer_outputs(params):
    """G(x) = 0 for every sublayer: zero the output projections."""
    flat = flatten_dict(params)
    for k in flat:
        if k[-2] in ("out_proj", "fc2"):
            flat[k] = np.zeros_like(flat[k])
    return unflatten_dict(flat)


@pytest.mark.parametrize("scheme", ["pre_ln", "subln", "deepnorm", "post_ln"])
def test_zeroed_sublayers(scheme):
    cfg, layer, params, x, self_mask, enc, enc_mask = layer_setup(scheme, "decoder", True)
    params = zero_sublayer_outputs(params)
    got = np.asarray(layer.apply({"params": params}, x, self_mask, enc, enc_mask))
    if scheme in ("pre_ln", "subln"):
        np.testing.assert_allclose(got, x, atol=1e-6)  # identity: x + 0
    else:
        alpha = cfg.side_constants("decoder")[0]
        want = x.astype(np.float64)
        for norm in ("self_attn_layer_norm", "cross_attn_layer_norm", "final_layer_norm"):
            want = ln(alpha * want, params[norm])  # LN(α·x) per sublayer (α = 1 for post_ln)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_deepnorm_alpha_scales_residual_not_branch():
    """Scaling G(x) by α (labml's variant) gives a measurably different layer."""
    cfg, layer, params, x, self_mask, _, _ = layer_setup("deepnorm", "encoder", False)
    got = np.asarray(layer.apply({"params": params}, x, self_mask))
    alpha = cfg.side_constants("encoder")[0]
    h = x.astype(np.float64)
    h = ln(
        h + alpha * attention(params["self_attn"], h, h, self_mask), params["self_attn_layer_norm"]
    )
    h = ln(h + alpha * ffn(params["ffn"], h), params["final_layer_norm"])
    assert np.abs(got - h).max() > 1e-2


def test_bf16_compute_with_fp32_params():
    cfg = TransformerConfig.from_config(tiny_config("encoder", "deepnorm", dtype="bfloat16"))
    layer = TransformerLayer(cfg)
    x = jnp.ones((B, T, cfg.d_model), jnp.bfloat16)
    variables = layer.init(jax.random.key(0), x, None)
    assert all(v.dtype == jnp.float32 for v in jax.tree.leaves(variables))
    assert layer.apply(variables, x, None).dtype == jnp.bfloat16


def test_projection_out_scales_scale_each_slice_before_the_tag():
    """``Projection.out_scales`` (attention's 1/√K on q): a fused [D, 3, H, K] projection with
    factors (1/4, 1, 1) gives the plain projection's q slice times 1/4 (a power of two: exact)
    and its k and v slices unchanged, and the value tagged for the remat policies is the
    scaled one (``checkpoint_name``'s operand is the multiply's result)."""
    from deepnet_jax.model.sublayers import Projection

    cfg = TransformerConfig.from_config(tiny_config("decoder"))
    shapes = dict(in_shape=(8,), out_shape=(3, 2, 4), in_names=("embed",))
    names = dict(out_names=("qkv", "heads", "kv"), config=cfg, tag="qkv_proj")
    plain = Projection(**shapes, **names)
    scaled = Projection(**shapes, **names, out_scales=(0.25, 1.0, 1.0))
    x = jax.random.normal(jax.random.key(0), (2, 5, 8))
    variables = plain.init(jax.random.key(1), x)
    variables = jax.tree.map(lambda p: p + 0.1, variables)  # a nonzero bias too
    want, got = plain.apply(variables, x), scaled.apply(variables, x)
    np.testing.assert_array_equal(got[:, :, 0], want[:, :, 0] * 0.25)
    np.testing.assert_array_equal(got[:, :, 1:], want[:, :, 1:])
    eqns = jax.make_jaxpr(lambda x: scaled.apply(variables, x))(x).jaxpr.eqns
    made_by = {str(v): e.primitive.name for e in eqns for v in e.outvars}
    tag = next(e for e in eqns if e.primitive.name == "name")
    assert made_by[str(tag.invars[0])] == "mul"
