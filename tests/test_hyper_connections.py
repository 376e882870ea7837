"""Hyper-Connections and mHC (docs/schemes.md): one layer and each architecture's stack against
NumPy transcriptions of the papers' equations, their initialization (HC's eq. 14; both start as
Pre-LN), Sinkhorn-Knopp, the scan (one traced body; unrolled and grouped stacks agree with it),
Hugging Face's DeepSeek-V4 mixing from a committed fixture, and the config's one-line errors."""

import math
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import init_params, random_tokens, tiny_config
from flax.traverse_util import flatten_dict, unflatten_dict
from test_blocks import attention, ffn, layer_inputs, ln
from test_schemes_since_deepnet import args_of, embedded, hidden_states
from test_training import small_config

from deepnet_jax.model import architectures, constants, layout
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.schemes import hyper
from deepnet_jax.model.schemes.base import Residual, Sublayer
from deepnet_jax.model.transformer_layer import LayerOps, TransformerLayer
from deepnet_jax.scale import targets
from deepnet_jax.training import memory_plan

# (scheme, overrides) of each variant; n = 3 streams, so that n is none of the other sizes
VARIANTS = {
    "hc_dynamic": ("hyper_connections", dict(hc_rate=3)),
    "hc_static": ("hyper_connections", dict(hc_rate=3, hc_dynamic=False)),
    "mhc": ("mhc", dict(hc_rate=3)),
    "mhc_deepseek_v4": ("mhc", dict(hc_rate=3, mhc_variant="deepseek_v4")),
    # the paper's mHC with Sinkhorn-Knopp guarded (a large ε, so that ignoring it shows)
    "mhc_sinkhorn_eps": ("mhc", dict(hc_rate=3, mhc_sinkhorn_eps=1e-3)),
}
# n = 1 (allowed): one stream, HC's connection a scalar triple, mHC's H_res the scalar 1
ONE_STREAM = {
    "hc_n1": ("hyper_connections", dict(hc_rate=1)),
    "mhc_n1": ("mhc", dict(hc_rate=1)),
}
EPS_V4 = constants.MHC_DEEPSEEK_V4_EPS
FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "mhc", "deepseek_v4.npz")
B, T, S = 2, 5, 6


def config(variant, arch="encdec", **overrides):
    scheme, own = {**VARIANTS, **ONE_STREAM}[variant]
    return tiny_config(arch, scheme, **own, **overrides)


def norm(x, p, cfg):
    return ln(x, p, cfg.layernorm_eps, cfg.norm)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def hc_sublayer(p, name, H, g, cfg):
    """Zhu et al. eq. 2–5 (and 10–13 when dynamic) for sublayer ``name``, H [B, T, n, D]."""
    A, beta = p[f"{name}_hc_alpha"], p[f"{name}_hc_beta"]  # (A_m A_r) [n, n+1], B [n]
    if cfg.hc_dynamic:
        Hn = norm(H, p[f"{name}_hc_norm"], cfg)  # eq. 10, each stream over D
        A = p[f"{name}_hc_alpha_scale"] * np.tanh(Hn @ p[f"{name}_hc_alpha_fn"]) + A  # 12–13
        beta = p[f"{name}_hc_beta_scale"] * np.tanh(Hn @ p[f"{name}_hc_beta_fn"]) + beta  # 11
    h0 = np.einsum("...i,...id->...d", A[..., :, 0], H)  # eq. 3: h_0ᵀ = A_mᵀH
    H_prime = np.einsum("...ij,...id->...jd", A[..., :, 1:], H)  # eq. 4: H′ = A_rᵀH
    return beta[..., :, None] * g(norm(h0, p[NORMS[name]], cfg))[..., None, :] + H_prime  # eq. 5


def sinkhorn(logits, iters, eps=0.0):
    """Xie et al. eq. 9: M⁽⁰⁾ = exp(H̃), M⁽ᵗ⁾ = T_r(T_c(M⁽ᵗ⁻¹⁾)); with ``eps`` Hugging Face's
    DeepSeek-V4 (ε after the first T_c, its softmax, and in every later denominator)."""
    M = np.exp(logits)
    for t in range(iters):
        M = M / (M.sum(-2, keepdims=True) + (eps if t else 0.0))  # T_c: columns sum to 1
        M = M + (eps if t == 0 else 0.0)
        M = M / (M.sum(-1, keepdims=True) + eps)  # T_r: rows sum to 1
    return M


def mhc_parts(p, prefix, X, cfg, sizes):
    """Eq. 7: α∘(RMSNorm(vec(x))·φ) + b, one α per part."""
    n, D = X.shape[-2:]
    flat = X.reshape(*X.shape[:-2], n * D)
    eps = cfg.layernorm_eps if cfg.mhc_variant == "deepseek_v4" else constants.MHC_RMS_EPS
    xn = flat / np.sqrt((flat**2).mean(-1, keepdims=True) + eps)
    z = xn @ p[f"{prefix}_phi"].reshape(n * D, -1)
    edges = np.cumsum((0, *sizes))
    return [
        a * z[..., lo:hi] + p[f"{prefix}_bias"][lo:hi]
        for a, lo, hi in zip(p[f"{prefix}_alpha"], edges[:-1], edges[1:], strict=True)
    ]


def mhc_eps(cfg):
    return EPS_V4 if cfg.mhc_variant == "deepseek_v4" else 0.0


def mhc_sinkhorn_eps(cfg):
    """Sinkhorn-Knopp's ε: DeepSeek-V4's, else the paper variant's ``mhc_sinkhorn_eps``."""
    return EPS_V4 if cfg.mhc_variant == "deepseek_v4" else cfg.mhc_sinkhorn_eps


def mhc_sublayer(p, name, X, g, cfg):
    """Eq. 3 with eq. 7–9: x ← H_res·x + H_postᵀ·G(N(H_pre·x))."""
    n, eps = X.shape[-2], mhc_eps(cfg)
    pre, post, res = mhc_parts(p, f"{name}_mhc", X, cfg, (n, n, n * n))
    H_pre, H_post = sigmoid(pre) + eps, 2 * sigmoid(post)
    H_res = sinkhorn(
        res.reshape(*res.shape[:-1], n, n), cfg.mhc_sinkhorn_iters, mhc_sinkhorn_eps(cfg)
    )
    h0 = np.einsum("...i,...id->...d", H_pre, X)
    branch = g(norm(h0, p[NORMS[name]], cfg))
    return np.einsum("...ij,...jd->...id", H_res, X) + H_post[..., None] * branch[..., None, :]


NORMS = {
    "self_attn": "self_attn_layer_norm",
    "cross_attn": "cross_attn_layer_norm",
    "ffn": "final_layer_norm",
}


def reference_layer(p, X, cfg, self_mask, enc=None, enc_mask=None):
    """One layer on the streams X [B, T, n, D]: each sublayer with its own connection."""
    sublayer = hc_sublayer if cfg.scheme == "hyper_connections" else mhc_sublayer
    X = sublayer(p, "self_attn", X, lambda h: attention(p["self_attn"], h, h, self_mask), cfg)
    if enc is not None:
        g = lambda h: attention(p["cross_attn"], h, enc, enc_mask)  # noqa: E731
        X = sublayer(p, "cross_attn", X, g, cfg)
    return sublayer(p, "ffn", X, lambda h: ffn(p["ffn"], h), cfg)


def reference_stack(p, x, cfg, side, self_mask, enc=None, enc_mask=None):
    """HC's Algorithm 1: n copies of x, the layers, the streams joined (summed; DeepSeek-V4's
    head: Σ_i (σ(eq. 7) + ε)·x_i), the final norm."""
    n, L = cfg.hc_rate, cfg.num_layers(side)
    X = np.repeat(x[:, :, None, :], n, axis=2)
    for i in range(L):
        X = reference_layer(
            jax.tree.map(lambda a, i=i: a[i], p["layers"]), X, cfg, self_mask, enc, enc_mask
        )
    if cfg.scheme == "mhc" and cfg.mhc_variant == "deepseek_v4":
        (w,) = mhc_parts(p, "mhc_head", X, cfg, (n,))
        x = np.einsum("...i,...id->...d", sigmoid(w) + EPS_V4, X)
    else:
        x = X.sum(-2)
    return norm(x, p["layer_norm"], cfg)


def randomize(params, rng):
    """Every norm and every hyper-connection parameter away from its init (the dynamic W and
    the mHC φ, b, α included), so the test sees where each sits."""
    flat = flatten_dict(params)
    for k, v in flat.items():
        name = "/".join(k)
        if k[-1] in ("scale", "bias") and "norm" in name:
            flat[k] = v + rng.normal(0, 0.3, v.shape).astype(np.float32)
        elif "_hc_" in k[-1] or "mhc_" in k[-1]:
            spread = 0.5 if k[-1].endswith(("_fn", "_phi")) else 0.3
            flat[k] = v + rng.normal(0, spread, v.shape).astype(np.float32)
    return unflatten_dict(flat)


@pytest.mark.parametrize("side, has_cross", [("encoder", False), ("decoder", True)])
@pytest.mark.parametrize("variant", VARIANTS)
def test_layer_matches_formula(variant, side, has_cross):
    """Every sublayer kind of one layer on n = 3 streams, at layer index 2."""
    cfg = TransformerConfig.from_config(config(variant))
    layer = TransformerLayer(cfg, side=side, has_cross=has_cross)
    rng = np.random.default_rng(0)
    _, self_mask, enc, enc_mask = layer_inputs(cfg.d_model, side, has_cross, rng)
    X = rng.normal(0, 1, (B, T, cfg.hc_rate, cfg.d_model)).astype(np.float32)
    args = (X, self_mask, enc, enc_mask, None, None, None, None, 2)
    variables = layer.init(jax.random.key(1), *args)
    params = randomize(jax.tree.map(np.asarray, nn.unbox(variables["params"])), rng)
    got = layer.apply({"params": params}, *args)
    want = reference_layer(params, X.astype(np.float64), cfg, self_mask, enc, enc_mask)
    assert got.shape == X.shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-4, atol=2e-4)


def _model_params(cfg, arch, seed=0):
    model = architectures.build(cfg)
    src = random_tokens((B, 7), cfg.vocab_size, seed=1).at[1, 5:].set(0)
    tgt = random_tokens((B, T), cfg.vocab_size, seed=2)
    params = init_params(
        model, arch, *((src, tgt) if arch == "encdec" else args_of(arch, src, tgt))
    )
    return model, src, tgt, jax.tree.map(np.asarray, params)


# the default run: the encoder-decoder, which holds both sides' layers (as
# test_schemes_since_deepnet.py's model test), with dynamic Hyper-Connections and DeepSeek-V4's
# mHC; the stack around the layers (the n copies, the per-sublayer index, the streams joined)
# is shared by the variants, whose layers test_layer_matches_formula checks each in the default
# run. Static HC, the paper's mHC and the single stacks under -m slow.
FAST_MODELS = {("hc_dynamic", "encdec"), ("mhc_deepseek_v4", "encdec")}


@pytest.mark.parametrize(
    "variant, arch",
    [
        pytest.param(v, a, marks=() if (v, a) in FAST_MODELS else pytest.mark.slow)
        for v in VARIANTS
        for a in ("encoder", "decoder", "encdec")
    ],
)
def test_model_matches_formula(variant, arch):
    """The whole model: embeddings, the n copies, every layer (the decoder's with
    cross-attention), the streams joined, the final norm, against the NumPy stack."""
    cfg = config(variant, arch)
    tc = TransformerConfig.from_config(cfg)
    model, src, tgt, params = _model_params(cfg, arch)
    params = randomize(params, np.random.default_rng(0))
    got = hidden_states(model, params, args_of(arch, src, tgt))
    enc_table = "encoder_embed_tokens" if arch == "encdec" else "embed_tokens"
    dec_table = "decoder_embed_tokens" if arch == "encdec" else "embed_tokens"
    enc = enc_mask = None
    if arch != "decoder":
        enc_mask = np.asarray(src != 0)[:, None, None, :]
        x = embedded(params, enc_table, src, tc)
        enc = reference_stack(params["encoder"], x, tc, "encoder", enc_mask)
        np.testing.assert_allclose(got["encoder"], enc, rtol=2e-4, atol=2e-4)
    if arch != "encoder":
        causal = np.tril(np.ones((T, T), bool))[None, None]
        x = embedded(params, dec_table, tgt, tc)
        dec = reference_stack(params["decoder"], x, tc, "decoder", causal, enc, enc_mask)
        np.testing.assert_allclose(got["decoder"], dec, rtol=2e-4, atol=2e-4)


def _without_streams(params):
    """The parameters a Pre-LN model of the same shape has (the connections' dropped)."""
    flat = flatten_dict(params)
    keep = {k: v for k, v in flat.items() if not any("hc_" in p or "mhc_" in p for p in k)}
    return unflatten_dict(keep)


@pytest.mark.parametrize("variant", [*VARIANTS, *ONE_STREAM])
def test_starts_as_pre_ln(variant):
    """HC's init (eq. 14: B = 1, A_m = e_{k mod n}, A_r = I, W = 0) keeps the n streams equal
    to Pre-LN's x, whose sum n·x the final norm takes back to Pre-LN's output (up to its ε).
    mHC's (b = 0, α = 0.01) does with its gates α at 0: H_pre = 1/2 (the branch's norm removes
    the scale), H_post = 1, H_res = 1/n; at α = 0.01 the logits differ by about that."""
    cfg = config(variant, "encdec")
    model, src, tgt, params = _model_params(cfg, "encdec")
    pre = architectures.build(tiny_config("encdec", "pre_ln"))
    want = np.asarray(pre.apply({"params": _without_streams(params)}, src, tgt))
    got = np.asarray(model.apply({"params": params}, src, tgt))
    if cfg.scheme == "hyper_connections":
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        return
    flat = flatten_dict(params)
    gated = {k: v for k, v in flat.items() if k[-1].endswith("_alpha")}
    assert gated and all(np.all(v == constants.MHC_ALPHA_INIT) for v in gated.values())
    assert 0 < np.abs(got - want).max() < 10 * constants.MHC_ALPHA_INIT * np.abs(want).max()
    closed = unflatten_dict({**flat, **{k: np.zeros_like(v) for k, v in gated.items()}})
    got = np.asarray(model.apply({"params": closed}, src, tgt))
    # mhc_sinkhorn_eps = ε > 0: from equal logits Sinkhorn-Knopp converges to H_res = (1 − ε)/n
    # everywhere (m ← m / (n·m + ε) has that fixed point), so each of the S sublayers scales the
    # residual by 1 − ε: the logits move by at most about S·ε of their size (2× for margin)
    sublayers = 2 * cfg.num_encoder_layers + 3 * cfg.num_decoder_layers
    bound = 2 * sublayers * cfg.get("mhc_sinkhorn_eps", 0.0) * np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 + bound)


@pytest.mark.parametrize("scan", [True, False])
def test_hc_init_is_eq14_per_sublayer(scan):
    """Sublayer k of a stack (k = 3ℓ + s in an encoder-decoder's decoder, 2ℓ + s elsewhere)
    starts with A_m = e_{k mod n}: traced from the layer index in the scanned stack."""
    cfg = tiny_config(
        "encdec", "hyper_connections", hc_rate=4, num_encoder_layers=3, scan_layers=scan
    )
    _, _, _, params = _model_params(cfg, "encdec")
    if not scan:
        params = layout.stack_layers(params)
    for side, subs in (("encoder", ("self_attn", "ffn")), ("decoder", NORMS)):
        layers = params[side]["layers"]
        for ell in range(cfg.num_encoder_layers if side == "encoder" else cfg.num_decoder_layers):
            for s, name in enumerate(subs):
                k = len(subs) * ell + s
                alpha = layers[f"{name}_hc_alpha"][ell]
                np.testing.assert_array_equal(alpha[:, 0], np.eye(4)[k % 4])
                np.testing.assert_array_equal(alpha[:, 1:], np.eye(4))
                np.testing.assert_array_equal(layers[f"{name}_hc_beta"][ell], np.ones(4))
                assert not layers[f"{name}_hc_alpha_fn"][ell].any()
                assert not layers[f"{name}_hc_beta_fn"][ell].any()
                assert layers[f"{name}_hc_alpha_scale"][ell] == np.float32(0.01)


def test_mhc_init():
    cfg = tiny_config("decoder", "mhc", d_model=64, num_heads=4, num_decoder_layers=2)
    _, _, _, params = _model_params(cfg, "decoder")
    layers = params["decoder"]["layers"]
    n, D = cfg.hc_rate, cfg.d_model
    for name in ("self_attn", "ffn"):
        phi = layers[f"{name}_mhc_phi"]
        assert phi.shape == (2, n, D, 2 * n + n * n)
        assert abs(phi.std() * math.sqrt(n * D) - 1) < 5 / math.sqrt(2 * phi.size)
        assert not layers[f"{name}_mhc_bias"].any()
        np.testing.assert_array_equal(
            layers[f"{name}_mhc_alpha"], np.full((2, 3), 0.01, np.float32)
        )


def test_sinkhorn_is_eq9_and_doubly_stochastic():
    logits = np.random.default_rng(0).normal(0, 2, (5, 4, 4)).astype(np.float32)
    for eps in (0.0, EPS_V4):
        got = np.asarray(hyper.sinkhorn(jnp.asarray(logits), 20, eps))
        np.testing.assert_allclose(got, sinkhorn(logits.astype(np.float64), 20, eps), atol=1e-6)
    got = np.asarray(hyper.sinkhorn(jnp.asarray(logits), 20))
    assert (got > 0).all()
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-6)  # T_r last: rows exactly
    # columns within 0.5% after 20 iterations of logits this spread (Xie et al. Fig. 7(a): the
    # backward gain, a column sum, "deviates slightly from 1")
    np.testing.assert_allclose(got.sum(-2), 1.0, atol=5e-3)
    np.testing.assert_array_equal(hyper.sinkhorn(jnp.zeros((1, 1)), 20), [[1.0]])  # n = 1


@pytest.mark.parametrize("variant", ["hc_dynamic", "mhc"])
def test_unrolled_stack_and_one_traced_body(variant):
    """The unrolled stack on the same parameters gives the scanned one's logits, and the
    scanned program does not grow with depth (one layer body traced)."""
    cfg = config(variant, "decoder")
    model, _, tgt, params = _model_params(cfg, "decoder")
    params = randomize(params, np.random.default_rng(2))
    unrolled = architectures.build(config(variant, "decoder", scan_layers=False))
    want = model.apply({"params": params}, tgt)
    got = unrolled.apply({"params": layout.unstack_layers(params)}, tgt)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    sizes = []
    for depth in (3, 7):
        deep = architectures.build(config(variant, "decoder", num_decoder_layers=depth))
        p = jax.eval_shape(lambda m=deep: init_params(m, "decoder", tgt))
        sizes.append(len(str(jax.make_jaxpr(lambda q, m=deep: m.apply({"params": q}, tgt))(p))))
    assert sizes[0] == sizes[1]


def _hf_params(f, n, D):
    """The fixture's Hugging Face weights in this project's names and layout: φ [n, D, 2n+n²]
    (HF's ``fn`` [(2+n)n, nD] transposed, its comb block transposed, as HF mixes by combᵀ:
    H_res = combᵀ), b, α; the head's; the pre-norm's weight (an ``rmsnorm`` scale)."""
    perm = [*range(2 * n), *(2 * n + j * n + i for i in range(n) for j in range(n))]
    width = 2 * n + n * n
    return {
        "ffn_mhc_phi": f["fn"][perm].T.reshape(n, D, width),
        "ffn_mhc_bias": f["base"][perm],
        "ffn_mhc_alpha": f["scale"],
        "final_layer_norm": {"scale": f["norm_weight"]},
        "mhc_head_phi": f["head_fn"].T.reshape(n, D, n),
        "mhc_head_bias": f["head_base"],
        "mhc_head_alpha": f["head_scale"],
    }


class _Host(nn.Module):
    """One mHC sublayer (G = tanh, as the fixture's stand-in) and the stack's collapse, or with
    ``maps`` its (H_pre, H_post, H_res)."""

    config: TransformerConfig
    maps: bool = False

    @nn.compact
    def __call__(self, x):
        scheme, ops = hyper.MHC_SCHEME, LayerOps(self)
        if self.maps:
            return scheme.mappings(ops, "ffn", x)
        sub = Sublayer("ffn", "final_layer_norm", jnp.tanh, lambda y: y)
        return scheme.sublayer(ops, sub, Residual(), x)[0], scheme.collapse(ops, x)


def _hosted(f, variant):
    n, D = int(f["n"]), int(f["D"])
    cfg = TransformerConfig(
        scheme="mhc",
        d_model=D,
        num_heads=1,
        hc_rate=n,
        norm="rmsnorm",
        layernorm_eps=float(f["rms_eps"]),
        mhc_sinkhorn_iters=int(f["iters"]),
        mhc_variant=variant,
    )
    params, x = {"params": _hf_params(f, n, D)}, jnp.asarray(f["hidden_streams"])
    pre, post, res = _Host(cfg, maps=True).apply(params, x)
    update, head = _Host(cfg).apply(params, x)
    return cfg, np.asarray(pre), np.asarray(post), np.asarray(res), update, head


def _logit_rounding(f) -> float:
    """δ = |α|(2K + 2)u·max Σ_k|x̃′_kφ_k| (K = nD, u = 2⁻²⁴): how far two float32 evaluations
    of a logit α·(x̃′φ)/RMS on the fixture may part (the next test's docstring)."""
    u, K = 2.0**-24, int(f["n"]) * int(f["D"])
    x = f["hidden_streams"].astype(np.float64).reshape(-1, K)
    xn = np.abs(x / np.sqrt((x**2).mean(-1, keepdims=True)))
    return np.abs(f["scale"]).max() * (2 * K + 2) * u * (xn @ np.abs(f["fn"].T)).max()


def _map_bounds(f) -> dict[str, float]:
    """How far two float32 evaluations of H_pre, H_post and H_res may part (the next test)."""
    u, delta, n, iters = 2.0**-24, _logit_rounding(f), int(f["n"]), int(f["iters"])
    return {
        "pre": delta / 4 + 2 * u,
        "post": delta / 2 + 4 * u,
        "res": 2 * delta + 4 * iters * (n + 1) * u,
    }


def test_deepseek_v4_variant_is_hugging_faces_mhc():
    """Hugging Face transformers 5.24.0's ``DeepseekV4HyperConnection`` and
    ``DeepseekV4HyperHead`` (tests/fixtures/make_mhc_fixture.py) on its seeded weights: H_pre·x
    (HF's ``collapsed``), H_post (``post``), H_res (``combᵀ``), one sublayer's update and the
    head agree to float32 rounding. The bound, u = 2⁻²⁴ and K = nD: the RMS-normed projection is
    a K-term dot product, off by ≤ γ_K·Σ_k|x̃′_kφ_k| in each implementation (γ_K ≈ Ku), the
    norm by ≤ (K + 2)u relative: |Δz| ≤ δ = |α|(2K + 2)u·max Σ_k|x̃′_kφ_k|. σ is 1/4-Lipschitz
    (H_post: 1/2), and each of the 2·t_max Sinkhorn normalizations adds ≤ (n + 1)u relative
    error per entry on either side, a logit's relative change ≤ δ in exp: entries ≤ 1, so
    |ΔH_res| ≤ 2δ + 4·t_max(n + 1)u. The update and head add their own n + 1-term sums."""
    f = np.load(FIXTURE)
    n = int(f["n"])
    _, pre, post, res, update, head = _hosted(f, "deepseek_v4")
    u, delta, bounds = 2.0**-24, _logit_rounding(f), _map_bounds(f)
    xmax = np.abs(f["hidden_streams"]).max()
    np.testing.assert_allclose(post, f["post"], rtol=0, atol=bounds["post"])
    np.testing.assert_allclose(res, np.swapaxes(f["comb"], -1, -2), rtol=0, atol=bounds["res"])
    collapsed = np.einsum("...i,...id->...d", pre, f["hidden_streams"])
    atol = (n * bounds["pre"] + (n + 1) * u) * xmax
    np.testing.assert_allclose(collapsed, f["collapsed"], rtol=0, atol=atol)
    atol = (n * bounds["res"] + bounds["post"] + 4 * (n + 1) * u) * (xmax + 1) + 1e-5
    np.testing.assert_allclose(np.asarray(update), f["update"], rtol=0, atol=atol)
    np.testing.assert_allclose(
        np.asarray(head), f["head"], rtol=0, atol=(n * delta + 2 * n * u) * xmax
    )
    # worst-case bounds (1e-5 … 2e-4 here; the differences seen are 1–6 ulp): a swapped or
    # transposed weight, a wrong ε or Sinkhorn order would be off by far more
    assert max(bounds.values()) < 1e-3


def test_the_papers_maps_do_not_see_the_streams_scale():
    """Eq. 7's RMSNorm(vec(x)) makes H_pre, H_post and H_res of x and of 10⁻⁴·x the same: with
    Table 5's ε = 1e-20 under a mean square of about 10⁻⁸ (with an ε of 1e-5 they would not be:
    its RMS would grow about 30-fold). Both are float32 evaluations of the same logits, whose
    relative rounding (:func:`_logit_rounding`) bounds the difference."""
    f = np.load(FIXTURE)
    small = {k: f[k] for k in f.files} | {"hidden_streams": f["hidden_streams"] * 1e-4}
    maps, maps_small = _hosted(f, "paper")[1:4], _hosted(small, "paper")[1:4]
    for name, a, b in zip(("pre", "post", "res"), maps, maps_small, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=_map_bounds(f)[name], err_msg=name)


def test_where_the_paper_differs_from_deepseek_v4(monkeypatch):
    """On the same weights (this project's code): H_pre differs by exactly DeepSeek-V4's ε,
    H_post not at all, H_res by O(ε) (its ε in Sinkhorn-Knopp), and the streams are joined
    differently (the paper's sum against DeepSeek-V4's learned head). The RMS of vec(x) takes
    the same ε in both here (the paper's 1e-20 set to Hugging Face's RMSNorm ε), so that these
    differences are all there is; the paper's own ε is the oracle tests' (:func:`mhc_parts`)."""
    f = np.load(FIXTURE)
    monkeypatch.setattr(constants, "MHC_RMS_EPS", float(f["rms_eps"]))
    _, pre_p, post_p, res_p, update_p, head_p = _hosted(f, "paper")
    _, pre_v, post_v, res_v, update_v, head_v = _hosted(f, "deepseek_v4")
    np.testing.assert_allclose(pre_v - pre_p, EPS_V4, rtol=0, atol=1.2e-7)
    np.testing.assert_array_equal(post_v, post_p)
    # each of Sinkhorn-Knopp's 2·t_max normalizations (and the softmax's + ε) moves an entry
    # ≤ 1 by at most ε
    shift = (2 * int(f["iters"]) + 1) * EPS_V4
    assert 0 < np.abs(res_v - res_p).max() < shift
    streams = int(f["n"]) * np.abs(f["hidden_streams"]).max()
    assert np.abs(np.asarray(update_v) - np.asarray(update_p)).max() < shift * streams
    np.testing.assert_allclose(np.asarray(head_p), f["hidden_streams"].sum(-2), rtol=1e-6)
    assert np.abs(np.asarray(head_v) - np.asarray(head_p)).max() > 0.1


def test_the_planner_sees_the_streams():
    """The AOT planner compiles the real train step, so the scan's carry of n streams shows in
    its temporaries: with full remat the backward pass keeps each layer's [B, T, n, D] input,
    (n − 1)·L·B·T·D·4 bytes more at n than at 1 stream (float32)."""
    plans = {}
    for n in (1, 4):
        c = small_config("decoder", "hyper_connections")
        c.model.num_decoder_layers, c.model.hc_rate = 8, n
        plans[n] = memory_plan.plan(c, target=targets.parse("cpu:1"))
    (rows, length), D = plans[4].batch_shape, c.model.d_model
    added = plans[4].temporaries - plans[1].temporaries
    assert added >= 3 * 8 * rows * length * D * 4


BAD = [
    (dict(scheme="hyper_connections", hc_rate=0), r"model\.hc_rate=0"),
    (dict(scheme="pre_ln", hc_rate=2), r"model\.hc_rate=2.*'hyper_connections' or 'mhc' only"),
    (dict(scheme="mhc", hc_dynamic=False), r"model\.hc_dynamic=False.*'hyper_connections' only"),
    (dict(scheme="hyper_connections", mhc_sinkhorn_iters=5), r"mhc_sinkhorn_iters=5.*'mhc'"),
    (dict(scheme="mhc", mhc_sinkhorn_iters=0), r"model\.mhc_sinkhorn_iters=0"),
    (dict(scheme="mhc", mhc_variant="v3"), r"model\.mhc_variant='v3'"),
    (dict(scheme="mhc", mhc_sinkhorn_eps=-1e-6), r"model\.mhc_sinkhorn_eps=-1e-06"),
    (dict(scheme="hyper_connections", mhc_sinkhorn_eps=1e-6), r"mhc_sinkhorn_eps=1e-06.*'mhc'"),
    (
        dict(scheme="mhc", mhc_variant="deepseek_v4", mhc_sinkhorn_eps=1e-6),
        r"model\.mhc_sinkhorn_eps=1e-06 is invalid: mhc_variant='deepseek_v4' adds its own",
    ),
]


@pytest.mark.parametrize("overrides, message", BAD)
def test_bad_fields_are_named(overrides, message):
    cfg = tiny_config("encdec", "deepnorm", num_encoder_layers=1, num_decoder_layers=1)
    for k, v in overrides.items():
        cfg[k] = v
    with pytest.raises(ValueError, match=message):
        architectures.build(cfg)
