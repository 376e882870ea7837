"""DLCL (Wang et al. 2019, eq. 8–9): the stack equals the combination written out by hand."""

import flax.linen as nn
import jax
import numpy as np
import pytest
from conftest import init_params, random_tokens, tiny_config
from test_blocks import ln

from deepnet_jax.model import architectures
from deepnet_jax.model.combining_stacks import dlcl_weight_init
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.initializers import sinusoidal_table
from deepnet_jax.model.transformer_layer import TransformerLayer

L = 3


def manual_encoder(cfg, params, tokens, W):
    """x_{l+1} = Σ_k W[l,k]·LN_k(y_k) (pre) or LN(Σ_k W[l,k]·y_k) (post); output row L."""
    tc = TransformerConfig.from_config(cfg)
    enc = params["encoder"]
    pre, use_ln = cfg.scheme == "dlcl_pre", cfg.dlcl_layer_norm
    emb = np.asarray(params["embed_tokens"]["embedding"])
    y0 = (
        emb[np.asarray(tokens)] * np.sqrt(cfg.d_model)
        + np.asarray(sinusoidal_table(tokens.shape[1], cfg.d_model))[None]
    )
    mask = np.asarray(tokens != 0)[:, None, None, :]
    hist = [ln(y0, enc["history_layer_norm_0"]) if pre and use_ln else y0]

    def combine(row):
        x = sum(W[row, k] * hist[k] for k in range(row + 1))
        return x if pre else ln(x, enc[f"combine_layer_norm_{row}"])

    for i in range(L):
        y = np.asarray(
            TransformerLayer(tc, side="encoder").apply(
                {"params": enc[f"layers_{i}"]}, combine(i).astype(np.float32), mask
            )
        )
        hist.append(ln(y, enc[f"history_layer_norm_{i + 1}"]) if pre and use_ln else y)
    out = combine(L)
    return ln(out, enc["layer_norm"]) if pre else out


@pytest.mark.parametrize(
    "scheme, weights, layer_norm",
    [(s, w, True) for s in ("dlcl_pre", "dlcl_post") for w in ("learnable", "fix_one", "fix_avg")]
    + [("dlcl_pre", "learnable", False)],  # the paper's "without LN" ablation (Table 6)
)
def test_dlcl_matches_equations(scheme, weights, layer_norm):
    cfg = tiny_config(
        "encoder", scheme, num_encoder_layers=L, dlcl_weights=weights, dlcl_layer_norm=layer_norm
    )
    model = architectures.build(cfg)
    tokens = random_tokens((2, 6), cfg.vocab_size).at[1, 4:].set(0)
    params = jax.tree.map(np.asarray, init_params(model, "encoder", tokens))
    rng = np.random.default_rng(0)
    if weights == "learnable":
        W0 = params["encoder"]["dlcl_weights"]
        np.testing.assert_allclose(W0, dlcl_weight_init(L + 1, "avg"))  # starts at "fix 1/N"
        # arbitrary values, including above the diagonal, which must have no effect
        params["encoder"]["dlcl_weights"] = rng.normal(1, 0.5, W0.shape).astype(np.float32)
        W = np.tril(params["encoder"]["dlcl_weights"])
    else:
        assert "dlcl_weights" not in params["encoder"]
        W = dlcl_weight_init(L + 1, weights.removeprefix("fix_"))
    for k, v in params["encoder"].items():  # non-trivial LayerNorm parameters
        if "layer_norm" in k:
            params["encoder"][k] = {
                n: a + rng.normal(0, 0.3, a.shape).astype(np.float32) for n, a in v.items()
            }
    _, inter = model.apply({"params": params}, tokens, capture_intermediates=True)
    got = np.asarray(inter["intermediates"]["encoder"]["__call__"][0])
    want = manual_encoder(cfg, params, tokens, W)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_fixed_weight_tables():
    np.testing.assert_array_equal(dlcl_weight_init(3, "one"), np.tril(np.ones((3, 3))))
    np.testing.assert_allclose(
        dlcl_weight_init(3, "avg"), [[1, 0, 0], [1 / 2, 1 / 2, 0], [1 / 3, 1 / 3, 1 / 3]]
    )


def test_dlcl_encdec_has_weights_on_both_sides():
    cfg = tiny_config("encdec", "dlcl_pre")
    model = architectures.build(cfg)
    shapes = jax.eval_shape(
        model.init, jax.random.key(0), random_tokens((1, 4), 9), random_tokens((1, 4), 9)
    )
    p = nn.unbox(shapes["params"])
    assert p["encoder"]["dlcl_weights"].shape == (4, 4)
    assert p["decoder"]["dlcl_weights"].shape == (3, 3)
