"""Model-level behaviour: causality, padding invariance, embeddings options, dtypes."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import (
    ARCH_SCHEME,
    STACK_FORMS,
    arch_scheme_params,
    built,
    init_params,
    jit_apply,
    model_args,
    random_tokens,
    tiny_config,
)
from flax.traverse_util import flatten_dict

from deepnet_jax.model import architectures
from deepnet_jax.model.config import SCHEMES


@pytest.mark.parametrize(
    "arch, scheme",
    arch_scheme_params([(a, s) for a, s in ARCH_SCHEME if a != "encoder"], encdec=STACK_FORMS),
)
def test_causality(arch, scheme):
    """Logits at position t do not change when tokens after t change."""
    cfg, model, params = built(arch, scheme)
    src = random_tokens((2, 7), cfg.vocab_size, seed=1)
    tgt = random_tokens((2, 9), cfg.vocab_size, seed=2)
    t = 4
    tgt2 = tgt.at[:, t + 1 :].set(random_tokens((2, 9 - t - 1), cfg.vocab_size, seed=3))
    inputs = src if arch == "encdec" else None
    fwd = jit_apply(model)
    run = lambda p, y: fwd({"params": p}, *((inputs, y) if inputs is not None else (y,)))  # noqa: E731
    a, b = run(params, tgt), run(params, tgt2)
    np.testing.assert_allclose(a[:, : t + 1], b[:, : t + 1], atol=1e-5)
    assert np.abs(np.asarray(a[:, t + 1 :] - b[:, t + 1 :])).max() > 1e-4


@pytest.mark.parametrize("arch, scheme", arch_scheme_params(encdec=STACK_FORMS))
def test_padding_invariance(arch, scheme):
    """Appending padding (id 0) to the input or the source leaves real positions' logits alone."""
    cfg, model, params = built(arch, scheme)
    src = random_tokens((2, 6), cfg.vocab_size, seed=1)
    tgt = random_tokens((2, 5), cfg.vocab_size, seed=2)
    pad = lambda x, n: jnp.concatenate([x, jnp.zeros((x.shape[0], n), x.dtype)], axis=1)  # noqa: E731
    fwd = jit_apply(model)
    apply = lambda *a: fwd({"params": params}, *a)  # noqa: E731
    if arch == "encdec":
        ref = apply(src, tgt)
        np.testing.assert_allclose(apply(pad(src, 4), tgt), ref, atol=2e-5)
        np.testing.assert_allclose(apply(pad(src, 3), pad(tgt, 2))[:, :5], ref, atol=2e-5)
    else:
        ref = apply(src)
        np.testing.assert_allclose(apply(pad(src, 4))[:, :6], ref, atol=2e-5)


def test_output_shapes_and_dtype():
    for arch in ("encoder", "decoder", "encdec"):
        cfg = tiny_config(arch, "deepnorm", dtype="bfloat16")
        model = architectures.build(cfg)
        src, tgt = random_tokens((3, 7), cfg.vocab_size), random_tokens((3, 5), cfg.vocab_size)
        params = init_params(model, arch, src, tgt)
        assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(params))
        out = jit_apply(model)({"params": params}, *model_args(arch, src, tgt))
        assert out.shape == (3, 5 if arch == "encdec" else 7, cfg.vocab_size)
        assert out.dtype == jnp.float32  # logits in fp32 under bf16 compute
        assert np.isfinite(np.asarray(out)).all()


def test_bf16_params():
    cfg = tiny_config("decoder", "subln", dtype="bfloat16", param_dtype="bfloat16")
    model = architectures.build(cfg)
    x = random_tokens((2, 5), cfg.vocab_size)
    params = init_params(model, "decoder", x)
    assert {p.dtype for p in jax.tree.leaves(params)} == {jnp.dtype(jnp.bfloat16)}
    assert np.isfinite(np.asarray(model.apply({"params": params}, x))).all()


def _param_names(cfg):
    model = architectures.build(cfg)
    x = random_tokens((1, 4), cfg.vocab_size)
    shapes = jax.eval_shape(model.init, jax.random.key(0), *model_args(cfg.arch, x))
    return set(flatten_dict(nn.unbox(shapes["params"]), sep="/"))


def test_tied_and_shared_embeddings():
    untied = _param_names(tiny_config("encdec", "deepnorm"))
    assert {
        "encoder_embed_tokens/embedding",
        "decoder_embed_tokens/embedding",
        "output_projection/kernel",
    } <= untied
    tied = _param_names(tiny_config("encdec", "deepnorm", tie_embeddings=True))
    assert "output_projection/kernel" not in tied
    shared = _param_names(
        tiny_config("encdec", "deepnorm", tie_embeddings=True, share_embeddings=True)
    )
    assert {k for k in shared if "embed_tokens" in k} == {"embed_tokens/embedding"}
    assert "output_projection/kernel" not in shared


def test_tied_output_is_embedding_transpose():
    cfg = tiny_config("decoder", "pre_ln", tie_embeddings=True)
    model = architectures.build(cfg)
    x = random_tokens((2, 5), cfg.vocab_size)
    params = init_params(model, "decoder", x)
    _, inter = model.apply({"params": params}, x, capture_intermediates=True)
    hidden = inter["intermediates"]["decoder"]["__call__"][0]
    logits = model.apply({"params": params}, x)
    emb = params["embed_tokens"]["embedding"]
    np.testing.assert_allclose(logits, np.einsum("btd,vd->btv", hidden, emb), atol=1e-5)


def test_learned_positions_and_gelu():
    cfg = tiny_config("encdec", "subln", positions="learned", activation="gelu")
    names = _param_names(cfg)
    assert {"encoder/embed_positions/embedding", "decoder/embed_positions/embedding"} <= names
    model = architectures.build(cfg)
    src = random_tokens((2, 6), cfg.vocab_size)
    params = init_params(model, "encdec", src)
    assert np.isfinite(np.asarray(model.apply({"params": params}, src, src))).all()


def test_sinusoidal_has_no_position_params():
    assert not any("embed_positions" in k for k in _param_names(tiny_config("decoder", "pre_ln")))


def test_sequence_longer_than_max_len_is_rejected():
    cfg = tiny_config("decoder", "pre_ln", max_len=8)
    model = architectures.build(cfg)
    with pytest.raises(ValueError, match=r"exceeds model\.max_len=8"):
        model.init(jax.random.key(0), random_tokens((1, 9), cfg.vocab_size))


@pytest.mark.parametrize(
    "scheme",
    [s if s in STACK_FORMS else pytest.param(s, marks=pytest.mark.slow) for s in SCHEMES],
)
def test_dropout_changes_train_mode_only(scheme):
    cfg, model, params = built(
        "encdec", scheme, dropout=0.3, attention_dropout=0.1, activation_dropout=0.1
    )
    src = random_tokens((2, 6), cfg.vocab_size)
    fwd = jit_apply(model)

    def run(det, k):
        return fwd(
            {"params": params}, src, src, deterministic=det, rngs={"dropout": jax.random.key(k)}
        )

    np.testing.assert_array_equal(run(True, 0), run(True, 1))
    np.testing.assert_array_equal(run(False, 0), run(False, 0))
    assert np.abs(np.asarray(run(False, 0) - run(False, 1))).max() > 1e-3
