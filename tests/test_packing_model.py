"""Packed rows (segment ids + restarting positions) give each example its unpacked logits."""

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import built, jit_apply

from deepnet_jax.data import batching

LENGTHS = {"a": (5, 4), "b": (3, 6), "c": (2, 2)}  # (source length, target length)


def _example(rng, vocab, arch, src_len, tgt_len):
    ex = {"targets": rng.integers(5, vocab, tgt_len).astype(np.int32)}
    ex["inputs"] = rng.integers(5, vocab, tgt_len).astype(np.int32)
    if arch == "encdec":
        ex["src"] = rng.integers(5, vocab, src_len).astype(np.int32)
    return ex


def _pack_by_hand(exs, length, features):
    """One row holding every example in order, with segment ids 1.. and positions from 0."""
    row = {f: np.zeros((1, length), np.int32) for f in features}
    for name in ("segment_ids", "positions", "src_segment_ids", "src_positions"):
        row[name] = np.zeros((1, length), np.int32)
    offsets = dict.fromkeys(features, 0)
    for seg, ex in enumerate(exs, start=1):
        for f in features:
            n, o = len(ex[f]), offsets[f]
            row[f][0, o : o + n] = ex[f]
            prefix = "src_" if f == "src" else ""
            row[prefix + "segment_ids"][0, o : o + n] = seg
            row[prefix + "positions"][0, o : o + n] = np.arange(n)
            offsets[f] += n
    return row


def _apply(model, params, arch, batch, **kw):
    apply = jit_apply(model)
    if arch == "encdec":
        return apply({"params": params}, batch["src"], batch["inputs"], deterministic=True, **kw)
    return apply({"params": params}, batch["inputs"], deterministic=True, **kw)


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
# the encoder-decoder holds both single stacks' attention (a packed encoder, a packed causal
# decoder) and cross-attention; the single stacks alone under -m slow
@pytest.mark.parametrize(
    "arch", ["encdec", *(pytest.param(a, marks=pytest.mark.slow) for a in ("decoder", "encoder"))]
)
def test_packed_logits_equal_unpacked(arch, positions):
    cfg, model, params = built(arch, "deepnorm", positions=positions)
    rng = np.random.default_rng(0)
    exs = [_example(rng, cfg.vocab_size, arch, *LENGTHS[k]) for k in "abc"]
    features = ("src", "inputs", "targets") if arch == "encdec" else ("inputs", "targets")
    packed = _pack_by_hand(exs, 16, features)
    kwargs = {"segment_ids": packed["segment_ids"], "positions": packed["positions"]}
    if arch == "encdec":
        kwargs.update(
            src_segment_ids=packed["src_segment_ids"], src_positions=packed["src_positions"]
        )
    packed_logits = np.asarray(_apply(model, params, arch, packed, **kwargs))
    offset = 0
    for ex in exs:
        alone = batching.collate([ex], 8, features)
        logits = np.asarray(_apply(model, params, arch, alone))
        n = len(ex["targets"])
        np.testing.assert_allclose(
            packed_logits[0, offset : offset + n], logits[0, :n], atol=1e-5, rtol=1e-5
        )
        offset += n
    # Without segment ids the same row mixes examples: the check above is not vacuous.
    mixed = np.asarray(_apply(model, params, arch, packed))
    assert not np.allclose(
        mixed[0, len(exs[0]["targets"]) :], packed_logits[0, len(exs[0]["targets"]) :], atol=1e-3
    )


def test_cross_mask_needs_both_segment_ids():
    from deepnet_jax.model.masks import cross_mask

    src = jnp.ones((1, 4), jnp.int32)
    with pytest.raises(ValueError, match="both source and target segment ids"):
        cross_mask(src, jnp.ones((1, 3), jnp.int32), None)


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_out_of_range_positions_are_loud(positions):
    cfg, model, params = built("decoder", "deepnorm", positions=positions)
    tokens = jnp.ones((1, 4), jnp.int32)
    for bad in (cfg.max_len, -1):
        pos = jnp.array([[0, 1, 2, bad]], jnp.int32)
        logits = jit_apply(model)(
            {"params": params}, tokens, deterministic=True, segment_ids=tokens, positions=pos
        )
        assert np.isnan(np.asarray(logits[0, 3])).all()  # NaN (it also spreads via attention)
    good = jnp.array([[0, 1, 2, 3]], jnp.int32)
    logits = jit_apply(model)(
        {"params": params}, tokens, deterministic=True, segment_ids=tokens, positions=good
    )
    assert np.isfinite(np.asarray(logits)).all()
