"""Fused QKV and jax.nn.dot_product_attention: the same model as the reference layout/path."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import init_params, jit_apply, model_args, random_tokens, tiny_config
from flax.traverse_util import flatten_dict
from test_decoding import _incremental_logits

from deepnet_jax.model import architectures, attention, constants
from deepnet_jax.training import config as train_config
from deepnet_jax.training import losses, train


def _padded_batch(arch, vocab):
    """Source [2, 7] and target [2, 6] ids with trailing padding in the second row."""
    src = random_tokens((2, 7), vocab, seed=1).at[1, 4:].set(0)
    tgt = random_tokens((2, 6), vocab, seed=2).at[1, 3:].set(0)
    return model_args(arch, src if arch != "decoder" else tgt, tgt)


@pytest.mark.parametrize(
    "arch, scheme, scan",
    [
        ("encdec", "deepnorm", True),
        ("decoder", "subln", False),
        pytest.param("encdec", "subln", False, marks=pytest.mark.slow),
        pytest.param("encoder", "deepnorm", True, marks=pytest.mark.slow),
    ],
)
def test_fused_qkv_gives_the_unfused_outputs_for_converted_params(arch, scheme, scan):
    cfg = tiny_config(arch, scheme, scan_layers=scan)
    model = architectures.build(cfg)
    params = init_params(model, arch, jnp.ones((1, 4), jnp.int32))
    fused_cfg = tiny_config(arch, scheme, scan_layers=scan, fused_qkv=True)
    fused_model = architectures.build(fused_cfg)
    fused_params = attention.fuse_qkv_params(params)
    # the converted tree is exactly the tree the fused model initializes
    expected = jax.eval_shape(lambda: init_params(fused_model, arch, jnp.ones((1, 4), jnp.int32)))
    assert jax.tree.structure(fused_params) == jax.tree.structure(expected)
    for a, b in zip(jax.tree.leaves(fused_params), jax.tree.leaves(expected), strict=True):
        assert a.shape == b.shape
    args = _padded_batch(arch, cfg.vocab_size)
    ref = jit_apply(model)({"params": params}, *args)
    out = jit_apply(fused_model)({"params": fused_params}, *args)
    np.testing.assert_allclose(out, ref, atol=1e-5)
    back = attention.unfuse_qkv_params(fused_params)
    assert jax.tree.structure(back) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(a, b)
    names = "/".join(flatten_dict(fused_params, sep="/"))
    assert "self_attn/qkv_proj/kernel" in names and "self_attn/q_proj" not in names
    assert ("cross_attn/q_proj/kernel" in names) == (arch == "encdec")  # cross stays unfused


def test_fused_qkv_gradients_are_the_converted_unfused_gradients():
    """Through the remat policy that saves the q/k/v projections by name."""
    kw = {"remat_policy": "qkv_fc1", "dropout": 0.0}
    cfg, fused_cfg = tiny_config("decoder", **kw), tiny_config("decoder", fused_qkv=True, **kw)
    model, fused_model = architectures.build(cfg), architectures.build(fused_cfg)
    params = init_params(model, "decoder", jnp.ones((1, 4), jnp.int32))
    (tokens,) = _padded_batch("decoder", cfg.vocab_size)
    weights = (tokens > 0).astype(jnp.float32)

    def loss(m):
        def f(p):
            logits = m.apply({"params": p}, tokens)
            return losses.cross_entropy(logits, tokens, weights)[0]

        return jax.jit(jax.grad(f))

    grads = attention.fuse_qkv_params(loss(model)(params))
    fused_grads = loss(fused_model)(attention.fuse_qkv_params(params))
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(fused_grads), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_fused_qkv_init_has_per_slice_fans_and_scales_only_v():
    D, H, N = 256, 8, 4
    cfg = tiny_config(
        "encoder", "deepnorm", d_model=D, num_heads=H, ffn_dim=512, num_encoder_layers=N
    )
    cfg.fused_qkv = True
    model = architectures.build(cfg)
    params = init_params(model, "encoder", random_tokens((1, 4), cfg.vocab_size))
    kernel = np.asarray(params["encoder"]["layers"]["self_attn"]["qkv_proj"]["kernel"])
    assert kernel.shape == (N, D, 3, H, D // H)
    beta = constants.deepnorm("encoder", N, 0)["encoder"]["beta"]
    per_slice = math.sqrt(2.0 / (D + D))  # fans of one [D, D] projection, not of [D, 3D]
    for i, gain in enumerate((1.0, 1.0, beta)):
        got = float(np.sqrt(np.mean(kernel[:, :, i].astype(np.float64) ** 2)))
        assert got == pytest.approx(gain * per_slice, rel=0.03), (i, got)
    assert not np.allclose(kernel[:, :, 0], kernel[:, :, 1])  # independent draws


@pytest.mark.slow  # decoder: test_dot_product_attention_cached_decoding_equals_full_forward
def test_fused_qkv_cached_decoding_equals_full_forward():
    cfg = tiny_config("encdec", "deepnorm", fused_qkv=True)
    model = architectures.build(cfg)
    params = init_params(model, "encdec", jnp.ones((1, 4), jnp.int32))
    src = random_tokens((2, 7), cfg.vocab_size, seed=1)
    tgt = random_tokens((2, 9), cfg.vocab_size, seed=2)
    full = jit_apply(model)({"params": params}, src, tgt)
    incremental = _incremental_logits(model, params, cfg, "encdec", src, tgt)
    np.testing.assert_allclose(incremental, full, atol=1e-5)


@pytest.mark.parametrize(
    "arch, dtype",
    [
        ("encdec", "float32"),  # padding, causal and cross-attention masks
        ("decoder", "bfloat16"),
        pytest.param("decoder", "float32", marks=pytest.mark.slow),
        pytest.param("encoder", "float32", marks=pytest.mark.slow),
        pytest.param("encdec", "bfloat16", marks=pytest.mark.slow),
    ],
)
def test_dot_product_attention_matches_the_reference_path(arch, dtype):
    """Padding masks (all archs), causal masks (decoders) and cross-attention (encdec).

    float32: the two paths differ by float32 rounding only (atol 1e-5 on logits of order 1).
    bfloat16: both take float32 logits and softmax and round probabilities and values to
    bfloat16, but XLA may order their sums differently, and one bfloat16 rounding that differs
    (up to 2⁻⁸ relative) reaches the logits like the model's own bfloat16 rounding does. So the
    tolerance is the bfloat16 reference's own distance from the float32 model, times 2, not a
    fixed figure that holds only while both paths compile to the same operations.
    """
    cfg = tiny_config(arch, "subln", dtype=dtype)
    fast_cfg = tiny_config(arch, "subln", dtype=dtype, attention_impl="xla")
    model, fast = architectures.build(cfg), architectures.build(fast_cfg)
    params = init_params(model, arch, jnp.ones((1, 4), jnp.int32))
    args = _padded_batch(arch, cfg.vocab_size)
    ref = jit_apply(model)({"params": params}, *args).astype(jnp.float32)
    out = jit_apply(fast)({"params": params}, *args).astype(jnp.float32)
    assert 0.1 < float(jnp.abs(ref).mean()) < 10  # logits of order 1
    atol = 1e-5
    if dtype == "bfloat16":
        exact = jit_apply(architectures.build(tiny_config(arch, "subln")))(
            {"params": params}, *args
        )
        rounding = float(jnp.abs(ref - exact).max())
        # bfloat16 really used (not 0), and its error a few of its 2⁻⁸ steps (measured 1-2%)
        assert 0 < rounding < 0.05 * float(jnp.abs(exact).max()), rounding
        atol = 2 * rounding
    np.testing.assert_allclose(out, ref, atol=atol)


def test_dot_product_attention_cached_decoding_equals_full_forward():
    cfg = tiny_config("decoder", "deepnorm", attention_impl="xla", fused_qkv=True)
    model = architectures.build(cfg)
    params = init_params(model, "decoder", jnp.ones((1, 4), jnp.int32))
    tgt = random_tokens((2, 9), cfg.vocab_size, seed=2)
    full = jit_apply(model)({"params": params}, tgt)
    incremental = _incremental_logits(model, params, cfg, "decoder", None, tgt)
    np.testing.assert_allclose(incremental, full, atol=1e-5)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"attention_impl": "flash"}, r"model\.attention_impl='flash' is invalid: allowed values"),
        (
            {"attention_impl": "xla", "attention_dropout": 0.1},
            r"model\.attention_impl='xla' is invalid: .* no attention dropout",
        ),
        (
            {"attention_impl": "cudnn", "dtype": "float32"},
            r"model\.attention_impl='cudnn' is invalid: .* bfloat16 or float16",
        ),
    ],
)
def test_bad_attention_fields(overrides, message):
    with pytest.raises(ValueError, match=message):
        architectures.build(tiny_config("decoder", **overrides))


@pytest.mark.parametrize(
    "arch, form",
    [("encdec", "native"), ("decoder", "native"), ("encoder", "native"), ("encdec", "bias")],
)
def test_cudnn_attention_traces_with_every_mask(arch, form, monkeypatch):
    """cuDNN's attention takes a boolean mask as a bias over every query and key position (the
    bias form, and the decoding cache's mask under either), and its checks run while tracing:
    key-padding masks [B, 1, 1, S] were refused on an H100 ("Bias must have same seq length as
    QKV, got 1 and 8"); the native form hands it key lengths and causal order instead. Traced
    here without a GPU: jax asks for cuDNN's version before the checks, so that one query (a
    private function) is answered."""
    from jax._src.cudnn import fused_attention_stablehlo

    monkeypatch.setattr(fused_attention_stablehlo, "check_cudnn_version", lambda: 91000)
    cfg = tiny_config(
        arch, dtype="bfloat16", attention_impl="cudnn", num_heads=2, attention_masks=form
    )  # K = 16
    model = architectures.build(cfg)
    params = jax.eval_shape(lambda: init_params(model, arch, jnp.ones((1, 4), jnp.int32)))
    src = random_tokens((2, 8), cfg.vocab_size, seed=1).at[1, 5:].set(0)  # even lengths:
    tgt = random_tokens((2, 6), cfg.vocab_size, seed=2).at[1, 3:].set(0)  # cuDNN's rule
    args = model_args(arch, src if arch != "decoder" else tgt, tgt)

    def loss(p):
        return model.apply({"params": p}, *args).astype(jnp.float32).mean()

    grads = jax.eval_shape(jax.grad(loss), params)  # forward and backward traced
    assert jax.tree.structure(grads) == jax.tree.structure(params)
    if arch == "decoder":  # cached decoding: one query against the cache's keys
        jax.eval_shape(lambda p: _incremental_logits(model, p, cfg, arch, None, args[0]), params)


def test_cudnn_attention_refuses_odd_batch_lengths():
    c = train_config.default_config()
    c.model = tiny_config("decoder", attention_impl="cudnn", dtype="bfloat16")
    c.data.dataset, c.data.max_len, c.data.bucket_boundaries = "synthetic_reversal", 16, (7,)
    with pytest.raises(ValueError, match=r"attention_impl='cudnn' trains on even lengths only"):
        train.validate(c)


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="cuDNN is there on a GPU")
def test_cudnn_attention_is_refused_without_a_gpu():
    c = train_config.default_config()
    c.model = tiny_config("decoder", attention_impl="cudnn", dtype="bfloat16")
    c.data.dataset, c.data.max_len = "synthetic_reversal", 16
    with pytest.raises(ValueError, match=r"model\.attention_impl='cudnn' needs a GPU"):
        train.validate(c)


def test_cudnn_attention_is_checked_against_the_planned_devices():
    """A planner compiling for a GPU target on a CPU host (cli.plan --target=h100-1) names the
    target's platform: cuDNN is accepted for it, and refused for a CPU or TPU target."""
    c = train_config.default_config()
    c.model = tiny_config("decoder", attention_impl="cudnn", dtype="bfloat16")
    c.data.dataset, c.data.max_len = "synthetic_reversal", 16
    assert train.validate(c, 1, "gpu").model.attention_impl == "cudnn"
    for platform in ("cpu", "tpu"):
        with pytest.raises(ValueError, match=rf"needs a GPU; these devices are '{platform}'"):
            train.validate(c, 1, platform)


def _max_abs(tree_a, tree_b) -> float:
    return max(
        float(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32)).max())
        for a, b in zip(jax.tree.leaves(tree_a), jax.tree.leaves(tree_b), strict=True)
    )


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="cuDNN's kernels run on a GPU only")
@pytest.mark.parametrize("arch", ["encdec", "decoder", "encoder"])
def test_cudnn_attention_matches_the_reference_path_on_a_gpu(arch):
    """cuDNN's fused kernel against the reference attention, both bfloat16, with padding,
    causal and cross-attention masks: logits and every parameter's gradient. As for
    ``attention_impl='xla'`` above, the two paths round differently in bfloat16, so the
    tolerance is twice the bfloat16 reference's own distance from the float32 model (logits;
    gradients: the largest such distance over the leaves), computed at full float32 matmul
    precision. The decoder's cached decoding (one query against the cache) equals its full
    forward within the same tolerance."""
    kw = {"num_heads": 2}  # head dim 16: a size cuDNN takes
    ref_model = architectures.build(tiny_config(arch, "subln", dtype="bfloat16", **kw))
    fast_cfg = tiny_config(arch, "subln", dtype="bfloat16", attention_impl="cudnn", **kw)
    fast_model = architectures.build(fast_cfg)
    exact_model = architectures.build(tiny_config(arch, "subln", **kw))
    src = random_tokens((2, 8), fast_cfg.vocab_size, seed=1).at[1, 5:].set(0)  # even lengths
    tgt = random_tokens((2, 6), fast_cfg.vocab_size, seed=2).at[1, 3:].set(0)
    args = model_args(arch, src if arch != "decoder" else tgt, tgt)
    params = init_params(exact_model, arch, jnp.ones((1, 4), jnp.int32))
    weights = jax.random.normal(jax.random.key(3), (*args[-1].shape, fast_cfg.vocab_size))

    def outputs(model):
        def loss(p):
            return (model.apply({"params": p}, *args).astype(jnp.float32) * weights).mean()

        logits = jax.jit(model.apply)({"params": params}, *args).astype(jnp.float32)
        return logits, jax.jit(jax.grad(loss))(params)

    with jax.default_matmul_precision("highest"):
        exact, exact_grads = outputs(exact_model)
    ref, ref_grads = outputs(ref_model)
    out, out_grads = outputs(fast_model)
    rounding = float(jnp.abs(ref - exact).max())
    assert 0 < rounding < 0.05 * float(jnp.abs(exact).max()), rounding
    np.testing.assert_allclose(out, ref, atol=2 * rounding)
    grad_rounding = _max_abs(ref_grads, exact_grads)
    assert grad_rounding > 0
    assert _max_abs(out_grads, ref_grads) <= 2 * grad_rounding
    if arch == "decoder":
        incremental = _incremental_logits(fast_model, params, fast_cfg, arch, None, tgt)
        real = np.asarray(tgt != 0)  # the padded tail is fed, not masked, when decoding
        np.testing.assert_allclose(
            np.asarray(incremental, np.float32)[real], np.asarray(out)[real], atol=2 * rounding
        )


def test_fused_kernel_carries_logical_names():
    """The fused kernel carries logical names, with the q/k/v axis replicated by the rules."""
    model = architectures.build(tiny_config("decoder", fused_qkv=True))
    boxed = jax.eval_shape(model.init, jax.random.key(0), jnp.ones((1, 4), jnp.int32))["params"]
    kernel = boxed["decoder"]["layers"]["self_attn"]["qkv_proj"]["kernel"]
    assert isinstance(kernel, nn.Partitioned)
    assert kernel.names == ("layers", "embed", "qkv", "heads", "kv")
