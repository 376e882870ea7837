"""Pallas' TPU splash attention (``model.attention_impl='splash'``): the same function as
``jax.nn.dot_product_attention``'s XLA path, checked on the CPU in Pallas' interpret mode, and
compiled deviceless for a TPU slice, where each device calls the kernel on its own shard."""

from __future__ import annotations

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import init_params, model_args, random_tokens, tiny_config

from deepnet_jax.model import architectures, fused_attention, masks, splash_attention
from deepnet_jax.training import attention_auto, losses

EPS32 = float(np.finfo(np.float32).eps)


def _qkv(B: int, T: int, S: int, H: int, N: int, K: int = 16, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    shapes = ((B, T, H, K), (B, S, N, K), (B, S, N, K))
    return tuple(jnp.asarray(rng.normal(size=s), jnp.float32) for s in shapes)


def _summed(fn, q, k, v):
    """``fn``'s output and the gradients of Σ out² with respect to q, k and v."""
    out = fn(q, k, v)
    grads = jax.grad(lambda *x: (fn(*x) ** 2).sum(), argnums=(0, 1, 2))(q, k, v)
    return out, grads


@pytest.mark.parametrize(
    "T, S, H, N, causal",
    [
        pytest.param(128, 128, 4, 4, True, marks=pytest.mark.slow),  # the model test's path
        (128, 256, 4, 2, False),  # cross-attention, grouped-query (2 kv heads)
        (128, 1024, 2, 1, False),  # two 512-key blocks: the fused backward sums dq over them
    ],
)
def test_splash_equals_xlas_attention(T, S, H, N, causal):
    """Outputs and gradients of q, k and v equal the XLA path's with the same native mask (a
    full row, a padded row and an empty row of key length 1) to float32 rounding. The kernel
    sums over S keys in blocks with an online softmax; a recursive sum of S terms is within
    S·ε of exact (Higham, Accuracy and Stability of Numerical Algorithms, §4.2), so each
    figure is within S·ε of the largest magnitude of its kind."""
    q, k, v = _qkv(3, T, S, H, N)
    lengths = jnp.array([S, 37, 1], jnp.int32)
    dense = jnp.arange(S)[None, None, None, :] < lengths[:, None, None, None]
    if causal:
        dense = dense & jnp.tril(jnp.ones((T, S), bool))[None, None]
    mask = masks.AttentionMask(dense=dense, kv_lengths=lengths, causal=causal)
    assert splash_attention.applies(T, S, mask)
    out, grads = _summed(lambda *x: splash_attention.splash_attention(*x, mask), q, k, v)
    want, want_grads = _summed(
        lambda *x: fused_attention.dot_product_attention(*x, mask, "xla"), q, k, v
    )
    assert bool(jnp.isfinite(out).all())
    tolerance = S * EPS32
    np.testing.assert_allclose(out, want, atol=tolerance * float(jnp.abs(want).max()))
    for g, w in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(g, w, atol=tolerance * float(jnp.abs(w).max()))
    assert float(jnp.abs(out[1] - out[0]).max()) > 0.1  # the padding mattered


def test_lengths_off_the_block_and_dense_masks_take_xlas_path():
    """A length not a multiple of the kernel's 128-key block, or a mask with no native form
    (packed rows), is computed by ``jax.nn.dot_product_attention``'s XLA path: bit for bit."""
    q, k, v = _qkv(2, 64, 64, 2, 2)
    tokens = random_tokens((2, 64), 40).at[1, 20:].set(0)
    native = masks.self_attention_mask(tokens, None, causal=True)
    assert not splash_attention.applies(64, 64, native)
    np.testing.assert_array_equal(
        splash_attention.splash_attention(q, k, v, native),
        fused_attention.dot_product_attention(q, k, v, native, "xla"),
    )
    q, k, v = _qkv(2, 128, 128, 2, 2)
    segments = jnp.repeat(jnp.array([[1, 2]]), 64, axis=1).repeat(2, axis=0)
    packed = masks.self_attention_mask(random_tokens((2, 128), 40), segments, causal=True)
    assert packed.kv_lengths is None and not splash_attention.applies(128, 128, packed)
    np.testing.assert_array_equal(
        splash_attention.splash_attention(q, k, v, packed),
        fused_attention.dot_product_attention(q, k, v, packed, "xla"),
    )


@pytest.mark.parametrize("length", [128, 64])  # the kernel; XLA's path (off the block)
def test_queries_scaled_by_their_projection_give_the_kernels_own_scaling(length):
    """``q_scaled=True`` with q/√K given (attention's projection scales q for the kernel) is
    ``q_scaled=False`` with q: bit for bit, since 1/√K = 1/4 is a power of two, so scaling q
    and scaling the logits q·kᵀ round alike."""
    q, k, v = _qkv(2, length, length, 2, 2)
    tokens = random_tokens((2, length), 40).at[1, 20:].set(0)
    mask = masks.self_attention_mask(tokens, None, causal=True)
    want = splash_attention.splash_attention(q, k, v, mask)
    got = splash_attention.splash_attention(q * 0.25, k, v, mask, q_scaled=True)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "fused_qkv, remat_policy",
    [
        (False, "full"),
        pytest.param(True, "full", marks=pytest.mark.slow),  # out_scales' slices: test_blocks
        (False, "attention_out"),
    ],
)
def test_a_model_with_splash_attention_is_the_xla_models(fused_qkv, remat_policy):
    """An encoder-decoder (encoder self-attention, decoder causal self-attention and
    cross-attention, padded rows; q/k/v from separate or fused projections, q scaled by its
    projection for the kernel; the backward recomputing the kernel's forward, or taking its
    output and log-sum-exp as saved) with ``attention_impl='splash'`` gives the ``xla`` model's
    logits, loss and parameter gradients to float32 rounding (the kernel's S·ε per sum,
    above). Gradients are compared at the scale of the largest: the key projection's bias
    has gradient 0 in exact arithmetic (softmax is unchanged by a shift along the keys), so
    both paths give rounding noise there."""
    length = splash_attention.BLOCK
    cfg = tiny_config("encdec", "deepnorm", attention_impl="splash", max_len=length, num_heads=2)
    cfg.num_encoder_layers = cfg.num_decoder_layers = 1
    cfg.fused_qkv, cfg.remat_policy = fused_qkv, remat_policy
    xla_cfg = cfg.copy_and_resolve_references()
    xla_cfg.attention_impl = "xla"
    model, xla = architectures.build(cfg), architectures.build(xla_cfg)
    src = random_tokens((2, length), cfg.vocab_size, seed=1).at[1, 50:].set(0)
    tgt = random_tokens((2, length), cfg.vocab_size, seed=2).at[1, 70:].set(0)
    args = model_args("encdec", src, tgt)
    params = init_params(model, "encdec", src[:, :4], tgt[:, :4])
    weights = (tgt != 0).astype(jnp.float32)

    def outputs(m):
        def loss(p):
            return losses.cross_entropy(m.apply({"params": p}, *args), tgt, weights)[0]

        return m.apply({"params": params}, *args), jax.value_and_grad(loss)(params)

    logits, (loss, grads) = outputs(model)
    want_logits, (want_loss, want_grads) = outputs(xla)
    tolerance = length * EPS32
    np.testing.assert_allclose(
        logits, want_logits, atol=tolerance * float(jnp.abs(want_logits).max())
    )
    assert float(loss) == pytest.approx(float(want_loss), rel=tolerance)
    scale = max(float(jnp.abs(w).max()) for w in jax.tree.leaves(want_grads))
    for g, w in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads), strict=True):
        np.testing.assert_allclose(g, w, atol=tolerance * scale)


def test_splash_compiles_for_a_tpu_slice_one_shard_per_device():
    """Deviceless for a v5p-8 slice (data 2 × tensor 2 of its 4 chips): the forward and the
    one backward kernel (dq, dk and dv together) are Mosaic calls, each on one device's rows and
    heads (q [B/2, H/2, T, K] after the head-major transpose), and no collective gathers the
    activations."""
    from deepnet_jax.scale import targets

    devices = targets.compile_devices(targets.parse("v5p-8"))
    mesh = jax.sharding.Mesh(np.array(devices).reshape(2, 1, 2), ("data", "fsdp", "tensor"))
    B, T, H, K = 8, 256, 8, 64
    row = jax.sharding.NamedSharding(mesh, jax.P(("data", "fsdp"), None, "tensor", None))
    x = jax.ShapeDtypeStruct((B, T, H, K), jnp.bfloat16, sharding=row)
    lengths = jax.ShapeDtypeStruct((B,), jnp.int32, sharding=row.update(spec=jax.P("data")))

    def loss(q, k, v, kv_lengths):
        dense = jnp.ones((1, 1, 1, 1), bool)  # unread: the kernel takes the native form
        mask = masks.AttentionMask(dense=dense, kv_lengths=kv_lengths, causal=True)
        return splash_attention.splash_attention(q, k, v, mask).astype(jnp.float32).sum()

    rules = (("batch", ("data", "fsdp")), ("heads", "tensor"), ("kv_heads", "tensor"))
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        step = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
        text = step.lower(x, x, x, lengths).compile().as_text()
    calls = [line for line in text.splitlines() if 'custom_call_target="tpu_custom_call"' in line]
    assert len(calls) == 2, len(calls)  # forward (with residuals), dq with dk and dv (fused)
    assert [re.search(r"%splash_mha_(\w+?)_", c).group(1) for c in calls] == ["fwd", "dkv"]
    local = f"bf16[{B // 2},{H // 2},{T},{K}]"
    assert all(local in call for call in calls), calls
    assert "all-gather" not in text


def test_splash_is_refused_where_it_cannot_run():
    """Attention dropout and the bias form have no splash kernel: one-line errors naming the
    field, before any model is built."""
    for overrides, message in (
        ({"attention_dropout": 0.1}, r"attention_impl='splash' is invalid: .* no attention"),
        ({"attention_masks": "bias"}, r"attention_masks='bias' is invalid: .* natively"),
    ):
        with pytest.raises(ValueError, match=message):
            architectures.build(tiny_config("decoder", attention_impl="splash", **overrides))


@pytest.mark.parametrize(
    "model, want",
    [({}, "splash"), ({"attention_dropout": 0.1}, "reference")],
)
def test_auto_takes_splash_on_a_tpu(model, want):
    from test_attention_auto import _config

    config = _config(**model)
    assert attention_auto.resolve(config, "tpu").model.attention_impl == want


@pytest.mark.skipif(jax.default_backend() == "tpu", reason="a TPU runs the kernel")
def test_training_with_splash_is_refused_without_a_tpu():
    """Interpret mode is for the tests: a run on anything but a TPU is told so before it
    compiles."""
    from deepnet_jax.training import config as train_config
    from deepnet_jax.training import train

    c = train_config.default_config()
    c.model = tiny_config("decoder", attention_impl="splash")
    c.data.dataset, c.data.max_len = "synthetic_reversal", 16
    with pytest.raises(ValueError, match=r"model\.attention_impl='splash' needs a TPU"):
        train.validate(c)


@pytest.mark.parametrize("policy, forward_calls", [("full", 2), ("attention_out", 1)])
def test_attention_out_keeps_the_kernels_forward_out_of_the_backward(policy, forward_calls):
    """Deviceless for a v5p-8 slice: a rematerialized layer (projections around the kernel),
    differentiated. Under ``full`` the backward recomputes the kernel's forward for its
    residuals (two forward calls); under ``attention_out`` the output and log-sum-exp the kernel
    names (``remat.ATTENTION_OUT``) are saved, and its forward runs once."""
    from deepnet_jax.model import remat
    from deepnet_jax.scale import targets

    devices = targets.compile_devices(targets.parse("v5p-8"))
    mesh = jax.sharding.Mesh(np.array(devices).reshape(4, 1, 1), ("data", "fsdp", "tensor"))
    B, T, H, K = 8, 256, 2, 128
    rows = jax.sharding.NamedSharding(mesh, jax.P("data"))
    x = jax.ShapeDtypeStruct((B, T, H, K), jnp.bfloat16, sharding=rows)
    w = jax.ShapeDtypeStruct((K, K), jnp.bfloat16, sharding=rows.update(spec=jax.P()))

    def layer(x, w):
        q, k, v = (x @ w, x @ w.T, x @ (w + 1))
        return splash_attention.splash_attention(q, k, v, None) @ w

    step = jax.checkpoint(layer, policy=remat.POLICIES[policy])
    loss = lambda x, w: step(x, w).astype(jnp.float32).sum()  # noqa: E731
    grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))  # the forward's value is used
    rules = (("batch", ("data", "fsdp")), ("heads", "tensor"), ("kv_heads", "tensor"))
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        text = grad.lower(x, w).compile().as_text()
    calls = re.findall(r"%splash_mha_(fwd|dkv)[\w.]*\s*=", text)
    assert calls.count("fwd") == forward_calls and calls.count("dkv") == 1, calls
