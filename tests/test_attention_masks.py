"""Fused attention's two mask forms (``model.attention_masks``): native (``is_causal`` and key
lengths) against the bias (the boolean [B, 1, T, S] mask), through ``implementation="xla"``, which
runs both forms on a CPU; and what cuDNN is handed in each form (traced, no GPU needed)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import init_params, model_args, random_tokens, tiny_config

from deepnet_jax.model import architectures, fused_attention, masks
from deepnet_jax.training import losses

EPS32 = float(np.finfo(np.float32).eps)


def _batch(arch: str, vocab: int) -> tuple:
    """Right-padded source [3, 8] and target [3, 6]: a full row, a padded row and an empty
    row (all padding, as ``data.batching`` completes a bucket's last batch)."""
    src = random_tokens((3, 8), vocab, seed=1).at[1, 5:].set(0).at[2].set(0)
    tgt = random_tokens((3, 6), vocab, seed=2).at[1, 3:].set(0).at[2].set(0)
    return model_args(arch, src if arch != "decoder" else tgt, tgt)


@pytest.mark.parametrize(
    "arch",
    [
        "encdec",  # encoder self-attention with padding, decoder causal with padding, cross
        # causal self-attention with padding: the same Decoder side as encdec's
        pytest.param("decoder", marks=pytest.mark.slow),
        pytest.param("encoder", marks=pytest.mark.slow),  # covered by encdec's encoder
    ],
)
def test_native_masks_give_the_bias_forms_outputs_and_gradients(arch):
    """Both forms select the same keys for every query of a row with tokens, padded queries
    included (only key lengths are passed, so a padded query attends like the bias form's),
    and XLA computes the same masked logits: the logits agree to float32 rounding, 8 ulps of
    their largest magnitude. The empty row has no key to attend to: the bias form spreads its
    weight over every key, the native form (key length 1) puts it on key 0; both finite, and
    with weight 0 in the loss its gradients are the bias form's to the same rounding."""
    native_cfg = tiny_config(arch, "subln", attention_impl="xla")
    bias_cfg = tiny_config(arch, "subln", attention_impl="xla", attention_masks="bias")
    native, bias = architectures.build(native_cfg), architectures.build(bias_cfg)
    params = init_params(native, arch, jnp.ones((1, 4), jnp.int32))
    args = _batch(arch, native_cfg.vocab_size)
    labels = args[-1]
    weights = (labels != 0).astype(jnp.float32)

    def outputs(model):
        def loss(p):
            return losses.cross_entropy(model.apply({"params": p}, *args), labels, weights)[0]

        logits = jax.jit(model.apply)({"params": params}, *args)
        return logits, jax.jit(jax.value_and_grad(loss))(params)

    logits, (loss, grads) = outputs(native)
    bias_logits, (bias_loss, bias_grads) = outputs(bias)
    assert bool(jnp.isfinite(logits).all()) and bool(jnp.isfinite(bias_logits).all())
    rows = slice(0, 2)  # the rows with tokens; row 2 is empty
    atol = 8 * EPS32 * float(jnp.abs(bias_logits[rows]).max())
    np.testing.assert_allclose(logits[rows], bias_logits[rows], rtol=0, atol=atol)
    assert float(jnp.abs(logits[2] - bias_logits[2]).max()) > atol  # the forms differ there
    assert loss == pytest.approx(float(bias_loss), rel=8 * EPS32)
    for g, b in zip(jax.tree.leaves(grads), jax.tree.leaves(bias_grads), strict=True):
        assert bool(jnp.isfinite(g).all())
        np.testing.assert_allclose(g, b, rtol=0, atol=8 * EPS32 * float(jnp.abs(b).max()))


def test_the_native_form_selects_the_dense_masks_keys():
    """Under right padding, keys s < kv_lengths[b] (and s ≤ t when causal) are exactly the
    dense mask's on every row with tokens; an empty row's length is 1, not 0."""
    tokens = random_tokens((3, 6), 40).at[1, 4:].set(0).at[2].set(0)
    for causal in (False, True):
        mask = masks.self_attention_mask(tokens, None, causal)
        T = tokens.shape[1]
        s, t = jnp.arange(T)[None, None, None, :], jnp.arange(T)[None, None, :, None]
        native = s < mask.kv_lengths[:, None, None, None]
        if causal:
            native = native & (s <= t)
        native, want = (jnp.broadcast_to(m, (3, 1, T, T)) for m in (native, mask.dense))
        np.testing.assert_array_equal(native[:2], want[:2])
        assert mask.causal == causal
    np.testing.assert_array_equal(masks.key_lengths(tokens), [6, 4, 1])
    cross = masks.cross_attention_mask(tokens)
    np.testing.assert_array_equal(cross.kv_lengths, [6, 4, 1])
    assert not cross.causal


def test_mask_arguments_by_form_and_mask():
    tokens = random_tokens((2, 6), 40).at[1, 3:].set(0)
    causal = masks.self_attention_mask(tokens, None, causal=True)
    native = fused_attention.mask_arguments(causal, 6, "cudnn", "native")
    assert set(native) == {"is_causal", "key_value_seq_lengths"} and native["is_causal"]
    assert native["key_value_seq_lengths"].dtype == jnp.int32
    bias = fused_attention.mask_arguments(causal, 6, "xla", "bias")
    np.testing.assert_array_equal(bias["mask"], causal.dense)
    # packed rows have no native form: the bias under either form
    segments = jnp.array([[1, 1, 2, 2, 2, 0], [1, 1, 1, 0, 0, 0]])
    packed = masks.self_attention_mask(tokens, segments, causal=True)
    assert packed.kv_lengths is None
    assert set(fused_attention.mask_arguments(packed, 6, "xla", "native")) == {"mask"}
    # a plain boolean mask (the decoding cache's) stays one; cuDNN's is broadcast over queries
    padding = masks.padding_mask(tokens)  # [B, 1, 1, S]
    assert fused_attention.mask_arguments(padding, 1, "xla", "native")["mask"] is padding
    assert fused_attention.mask_arguments(padding, 4, "cudnn", "native")["mask"].shape == (
        2,
        1,
        4,
        6,
    )
    assert fused_attention.mask_arguments(None, 4, "cudnn", "native") == {}
    with pytest.raises(ValueError, match=r"model\.attention_masks='dense' is invalid"):
        fused_attention.mask_arguments(causal, 6, "xla", "dense")


@pytest.mark.parametrize(
    "form, mask_types",
    [("native", {"PADDING", "PADDING_CAUSAL"}), ("bias", {"NO_MASK"})],
)
def test_cudnn_is_handed_its_native_masks(form, mask_types, monkeypatch):
    """What the encoder-decoder's forward and backward hand cuDNN: padding (encoder self and
    cross) and padding with causal order (decoder self) natively, or a bias and no mask type.
    Traced without a GPU (cuDNN's version answered, as in test_attention_paths)."""
    from jax._src.cudnn import fused_attention_stablehlo

    monkeypatch.setattr(fused_attention_stablehlo, "check_cudnn_version", lambda: 91000)
    cfg = tiny_config(
        "encdec", dtype="bfloat16", attention_impl="cudnn", num_heads=2, attention_masks=form
    )
    model = architectures.build(cfg)
    params = jax.eval_shape(lambda: init_params(model, "encdec", jnp.ones((1, 4), jnp.int32)))
    src = random_tokens((2, 8), cfg.vocab_size, seed=1).at[1, 5:].set(0)
    tgt = random_tokens((2, 6), cfg.vocab_size, seed=2).at[1, 3:].set(0)

    def loss(p):
        return model.apply({"params": p}, src, tgt).astype(jnp.float32).mean()

    text = str(jax.make_jaxpr(jax.grad(loss))(params))
    assert set(re.findall(r"mask_type=MaskType\.(\w+)", text)) == mask_types
