"""Cached decoding: incremental logits, greedy/beam search, sampling, compile counts."""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import (
    STACK_FORMS,
    arch_scheme_params,
    built,
    init_params,
    jit_apply,
    random_tokens,
    tiny_config,
)

from deepnet_jax.common import tokens
from deepnet_jax.decoding import sampling, search
from deepnet_jax.model import architectures
from deepnet_jax.model.config import SCHEMES


def _incremental_logits(model, params, cfg, arch, src, tgt):
    """Feed ``tgt`` one token per step through ``decode_step``; logits [B, T, V]."""
    tc = architectures.TransformerConfig.from_config(cfg)
    B, T = tgt.shape
    if arch == "encdec":
        enc = model.apply({"params": params}, src, method=architectures.EncoderDecoder.encode)
        cache = architectures.init_cache(tc, B, T, src.shape[1])
        step = jax.jit(
            lambda p, tok, c, t, e: model.apply(
                {"params": p}, tok, src, c, t, e, method=architectures.EncoderDecoder.decode_step
            )
        )
    else:
        enc, cache = None, architectures.init_cache(tc, B, T)
        step = jax.jit(
            lambda p, tok, c, t, e: model.apply(
                {"params": p}, tok, c, t, method=architectures.DecoderOnly.decode_step
            )
        )
    outs = []
    for t in range(T):
        logits, cache = step(params, tgt[:, t : t + 1], cache, t, enc if t == 0 else None)
        outs.append(logits)
    return jnp.concatenate(outs, axis=1)


# the default run: DeepNorm and DLCL-Post on the encoder-decoder, DeepNorm and Sub-LN on the
# decoder (conftest.STACK_FORMS); the other pairs under -m slow
@pytest.mark.parametrize(
    "arch, scheme",
    arch_scheme_params(itertools.product(("encdec", "decoder"), SCHEMES), encdec=STACK_FORMS),
)
def test_cached_logits_equal_full_forward(arch, scheme):
    cfg, model, params = built(arch, scheme)
    src = random_tokens((2, 7), cfg.vocab_size, seed=1)
    tgt = random_tokens((2, 9), cfg.vocab_size, seed=2)
    args = (src, tgt) if arch == "encdec" else (tgt,)
    full = jit_apply(model)({"params": params}, *args)
    incremental = _incremental_logits(model, params, cfg, arch, src, tgt)
    np.testing.assert_allclose(incremental, full, atol=1e-5)


def test_unrolled_stack_decodes_like_scanned():
    cfg, model, params = built("encdec", "deepnorm", scan_layers=False, remat_policy="none")
    src = random_tokens((2, 5), cfg.vocab_size, seed=3)
    tgt = random_tokens((2, 6), cfg.vocab_size, seed=4)
    full = jit_apply(model)({"params": params}, src, tgt)
    np.testing.assert_allclose(
        _incremental_logits(model, params, cfg, "encdec", src, tgt), full, atol=1e-5
    )


@pytest.mark.slow
def test_unrolled_scan_decodes_like_the_full_forward():
    """model.scan_unroll=2 over 3 layers: the cache is scanned with the layers, 2 per iteration."""
    cfg, model, params = built("decoder", "deepnorm", num_decoder_layers=3, scan_unroll=2)
    tgt = random_tokens((2, 6), cfg.vocab_size, seed=4)
    full = jit_apply(model)({"params": params}, tgt)
    np.testing.assert_allclose(
        _incremental_logits(model, params, cfg, "decoder", None, tgt), full, atol=1e-5
    )


def _sources(cfg, lengths, seed=0):
    rng = np.random.default_rng(seed)
    src = np.zeros((len(lengths), max(lengths)), np.int32)
    for i, n in enumerate(lengths):
        src[i, : n - 1] = rng.integers(3, cfg.vocab_size, n - 1)
        src[i, n - 1] = tokens.EOS_ID
    return jnp.asarray(src)


def test_beam_size_one_equals_greedy():
    cfg, model, params = built("encdec", "subln")
    src = _sources(cfg, [7, 4, 6, 2])
    options = search.SearchOptions(max_len_a=1.0, max_len_b=4)
    greedy, logp = search.greedy_search(model, params, src, options)
    beam, score = search.beam_search(model, params, src, dataclasses.replace(options))
    np.testing.assert_array_equal(greedy, beam)
    lengths = np.array([len(r) + 1 for r in search.strip(greedy)])  # EOS included
    np.testing.assert_allclose(score, np.asarray(logp) / lengths, rtol=1e-5)


def _sequence_log_probs(model, params, src, hypotheses):
    """log p(ys | src) for each hypothesis, from one batched full forward pass (no cache)."""
    T = max(map(len, hypotheses))
    tgt_in = np.zeros((len(hypotheses), T), np.int32)
    for i, ys in enumerate(hypotheses):
        tgt_in[i, : len(ys)] = [tokens.BOS_ID, *ys[:-1]]
    src_rows = jnp.repeat(src, len(hypotheses), axis=0)
    logp = jax.nn.log_softmax(jit_apply(model)({"params": params}, src_rows, tgt_in), axis=-1)
    return [float(sum(logp[i, t, y] for t, y in enumerate(ys))) for i, ys in enumerate(hypotheses)]


MODERN = {  # the modern blocks (docs/blocks.md): rotary positions in the cached steps too
    "positions": "rope",
    "activation": "swiglu",
    "num_kv_heads": 2,
    "norm": "rmsnorm",
    "qk_norm": True,
}


@pytest.mark.parametrize(
    "form, alpha, blocks",
    [("fairseq", 1.0, {}), ("gnmt", 0.6, {}), ("fairseq", 1.0, MODERN)],
    ids=["fairseq", "gnmt", "fairseq-modern-blocks"],
)
def test_beam_search_finds_brute_force_best(form, alpha, blocks):
    """Vocab 4 (pad 0, BOS-as-word 1, EOS 2, word 3), at most 3 tokens: 7 hypotheses."""
    cfg = tiny_config("encdec", "deepnorm", vocab_size=4, d_model=16, ffn_dim=32, **blocks)
    model = architectures.build(cfg)
    src = jnp.asarray([[3, 1, 3, 2]], jnp.int32)
    params = init_params(model, "encdec", src, seed=7)
    # Sharpen the output distribution so hypotheses differ clearly in score.
    params = jax.tree.map(lambda a: a, params)
    params["output_projection"]["kernel"] = params["output_projection"]["kernel"] * 8
    options = search.SearchOptions(
        beam_size=8,
        length_penalty=alpha,
        length_penalty_form=form,
        max_len_a=0.0,
        max_len_b=3,
        banned_ids=(0,),
    )
    tokens, score = search.beam_search(model, params, src, options)
    words = (1, 3)
    hypotheses = [(2,)] + [(*w, 2) for n in (1, 2) for w in itertools.product(words, repeat=n)]
    log_probs = _sequence_log_probs(model, params, src, hypotheses)
    scored = {
        ys: lp / float(search.length_penalty(len(ys), alpha, form))
        for ys, lp in zip(hypotheses, log_probs, strict=True)
    }
    best = max(scored, key=scored.get)
    assert (*search.strip(tokens)[0], 2) == best
    np.testing.assert_allclose(float(score[0]), scored[best], rtol=1e-5)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_padding_and_batch_composition_do_not_change_outputs(beam_size):
    cfg, model, params = built("encdec", "deepnorm")
    options = search.SearchOptions(beam_size=beam_size, max_len_a=1.0, max_len_b=3)
    run_search = search.greedy_search if beam_size == 1 else search.beam_search
    lengths = [5, 3, 8, 2]
    batch = _sources(cfg, lengths, seed=5)
    together = search.strip(run_search(model, params, batch, options)[0])
    for i in range(len(lengths)):
        alone = run_search(model, params, batch[i : i + 1], options)[0]
        assert search.strip(alone)[0] == together[i]
    padded = jnp.pad(batch, ((0, 3), (0, 6)))  # extra empty rows and padding columns
    assert search.strip(run_search(model, params, padded, options)[0])[:4] == together


def test_translate_ids_restores_order_and_compiles_once_per_bucket():
    cfg, model, params = built("encdec", "pre_ln")
    options = search.SearchOptions(beam_size=2, max_len_a=1.0, max_len_b=3)
    sources = [list(np.asarray(r[r != 0])) for r in np.asarray(_sources(cfg, [9, 2, 5, 3]))]
    before = search.beam_search._cache_size()
    out = search.translate_ids(model, params, sources, options, batch_size=2, bucket=16)
    assert search.beam_search._cache_size() - before == 1  # one (batch, bucket) shape
    unsorted = jnp.pad(_sources(cfg, [9, 2, 5, 3]), ((0, 0), (0, 7)))  # the same bucket width
    assert search.strip(search.beam_search(model, params, unsorted, options)[0]) == out


def test_thousand_layer_decoder_compiles_once():
    cfg = tiny_config(
        "encdec",
        "deepnorm",
        num_encoder_layers=500,
        num_decoder_layers=500,
        d_model=8,
        num_heads=2,
        ffn_dim=16,
        vocab_size=12,
    )
    model = architectures.build(cfg)
    params = init_params(model, "encdec", jnp.ones((1, 4), jnp.int32))
    options = search.SearchOptions(beam_size=2, max_len_a=0.0, max_len_b=4)
    before = search.beam_search._cache_size()
    for seed in range(2):
        tokens, score = search.beam_search(model, params, _sources(cfg, [4, 3], seed), options)
        assert np.all(np.isfinite(score)) and tokens.shape == (2, 4)
    assert search.beam_search._cache_size() - before == 1
    cache = architectures.init_cache(architectures.TransformerConfig.from_config(cfg), 2, 4, 4)
    assert cache["self"]["k"].shape == (500, 2, 4, 2, 4)  # one array stacked over layers


def test_filter_logits_top_k_and_top_p():
    logits = jnp.log(jnp.asarray([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    kept = lambda x: np.asarray(x[0] > search.NEG / 2)  # noqa: E731
    np.testing.assert_array_equal(kept(sampling.filter_logits(logits, top_k=2)), [1, 1, 0, 0, 0])
    np.testing.assert_array_equal(kept(sampling.filter_logits(logits, top_p=0.7)), [1, 1, 0, 0, 0])
    np.testing.assert_array_equal(kept(sampling.filter_logits(logits, top_p=0.71)), [1, 1, 1, 0, 0])
    np.testing.assert_array_equal(kept(sampling.filter_logits(logits, top_p=0.1)), [1, 0, 0, 0, 0])


def test_sample_keeps_prompts_and_greedy_matches_argmax():
    _, model, params = built("decoder", "subln")
    prompts = jnp.asarray([[1, 5, 6, 7], [1, 9, 0, 0]], jnp.int32)
    options = sampling.SampleOptions(max_new_tokens=5, temperature=0.0)
    out = np.asarray(sampling.sample(model, params, prompts, jax.random.key(0), options))
    np.testing.assert_array_equal(out[0, :4], [1, 5, 6, 7])
    np.testing.assert_array_equal(out[1, :2], [1, 9])
    # Each generated token is the argmax (pad and BOS banned) of a full forward pass.
    logits = jit_apply(model)({"params": params}, jnp.asarray(out))
    logits = logits.at[:, :, jnp.asarray([0, 1])].set(-jnp.inf)
    for row, prompt_len in ((0, 4), (1, 2)):
        ids = list(out[row][: prompt_len + 5])  # at most max_new_tokens after its prompt
        end = ids.index(tokens.EOS_ID, prompt_len) + 1 if tokens.EOS_ID in ids else len(ids)
        for t in range(prompt_len - 1, end - 1):
            assert out[row, t + 1] == int(jnp.argmax(logits[row, t]))
        assert np.all(out[row, end:] == 0)
    sampled = sampling.sample(
        model,
        params,
        prompts,
        jax.random.key(1),
        sampling.SampleOptions(max_new_tokens=5, temperature=1.0, top_k=3),
    )
    assert sampled.shape == (2, 9) and np.all(np.asarray(sampled)[:, 0] == 1)


def test_sample_gives_every_row_exactly_its_budget():
    _, model, params = built("decoder", "subln")
    prompts = jnp.asarray([[1, 5, 6, 7], [1, 9, 0, 0]], jnp.int32)
    # EOS banned too, so no row stops early: each gets exactly max_new_tokens new tokens
    options = sampling.SampleOptions(max_new_tokens=2, temperature=0.0, banned_ids=(0, 1, 2))
    out = np.asarray(sampling.sample(model, params, prompts, jax.random.key(0), options))
    assert out.shape == (2, 6)
    assert [int((row != 0).sum()) for row in out] == [4 + 2, 2 + 2]
    assert np.all(out[1, 4:] == 0)  # the short prompt's row stops at its own budget


def test_bad_options_fail_with_one_line_errors():
    _, model, params = built("encdec", "deepnorm")
    with pytest.raises(ValueError, match="beam_size=0"):
        search.translate_ids(model, params, [[3, 2]], search.SearchOptions(beam_size=0))
    with pytest.raises(ValueError, match="length_penalty_form='x'"):
        search.SearchOptions(length_penalty_form="x").validate()
    with pytest.raises(ValueError, match="top_p=0"):
        sampling.SampleOptions(top_p=0).validate()
    with pytest.raises(ValueError, match="EncoderDecoder"):
        _, lm, lm_params = built("decoder", "deepnorm")
        search.beam_search(lm, lm_params, jnp.ones((1, 3), jnp.int32))
