"""Cached autoregressive decoding: greedy and beam search for translation (sampling for LMs is
:mod:`deepnet_jax.decoding.sampling`; the options are :mod:`deepnet_jax.decoding.options`).

Every search runs the model's ``decode_step`` (one token per step) over a decoding cache that is
stacked over layers like the scanned parameters (``architectures.init_cache``), so each step scans
over depth and a 1,000-layer decoder compiles one layer body. The whole search is one jitted
``lax.while_loop``; it compiles once per (batch size, padded source length, options).

Lengths. A search generates at most ``max_len`` tokens y_1 … y_n (EOS included), where
``max_len = min(⌊a·S + b⌋, model.max_len)`` for the padded source length S (a =
``max_len_a``, b = ``max_len_b``, named after fairseq's options; unlike fairseq, whose limit
excludes the final EOS, this one counts it). Each sentence has its own limit
``⌊a·s + b⌋`` from its unpadded length s; at that limit EOS is forced (fairseq), so every
hypothesis ends in EOS and a sentence's output never depends on the padding or on the other
sentences in its batch.

Scores. A hypothesis y of n tokens (EOS included) has log-probability Σ_t log p(y_t | y_<t, x)
(with banned ids such as padding removed from the choice, not renormalized) and beam-search
score log p(y) / lp(n), with the length penalty lp

* ``"fairseq"``: lp(n) = n^α   (fairseq's ``--lenpen``; α = 1 is the papers' setting),
* ``"gnmt"``:    lp(n) = ((5 + n) / 6)^α   (Wu et al. 2016, eq. 14).

Beam search follows fairseq's bookkeeping: each step ranks the 2K best continuations of the K
live hypotheses by log-probability; those among the first K that end in EOS are finished
(scored with the length penalty) and the K best that do not stay live. A sentence is done once
K hypotheses have finished (or none is live); its result is the best-scoring finished one.
With K = 1 this is exactly greedy search.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from tqdm import tqdm

from deepnet_jax.common.tokens import EOS_ID, PAD_ID
from deepnet_jax.decoding.options import LENGTH_PENALTIES, SearchOptions
from deepnet_jax.model import architectures

NEG = -1.0e9  # log-probability of impossible choices (finite, so sums never make NaN)


def length_penalty(length: jax.Array, alpha: float, form: str) -> jax.Array:
    """lp(n) for n generated tokens (see the module docstring)."""
    n = jnp.asarray(length, jnp.float32)
    if form == "fairseq":
        return n**alpha
    if form == "gnmt":
        return ((5.0 + n) / 6.0) ** alpha
    raise ValueError(f"length_penalty_form={form!r}; allowed values are {LENGTH_PENALTIES}")


def max_decode_length(src_len: int, options: SearchOptions, model_max_len: int) -> int:
    """The static number of decoding steps for sources padded to ``src_len``."""
    return max(1, min(int(options.max_len_a * src_len + options.max_len_b), model_max_len))


def _row_limits(src_BS: jax.Array, options: SearchOptions, max_len: int) -> jax.Array:
    """Per-sentence token limit ⌊a·s + b⌋ (s = unpadded source length), within [1, max_len]."""
    s = jnp.sum(src_BS != PAD_ID, axis=1).astype(jnp.float32)
    limit = jnp.floor(options.max_len_a * s + options.max_len_b).astype(jnp.int32)
    return jnp.clip(limit, 1, max_len)


def _log_probs(logits_NV: jax.Array, t: jax.Array, limit_N: jax.Array, options) -> jax.Array:
    """Float32 log-softmax with banned ids removed and EOS forced at each row's limit."""
    logp = jax.nn.log_softmax(logits_NV.astype(jnp.float32), axis=-1)
    vocab = jnp.arange(logp.shape[-1])
    banned = jnp.isin(vocab, jnp.asarray(options.banned_ids, jnp.int32))
    logp = jnp.where(banned[None, :], NEG, logp)
    at_limit = (t + 1 >= limit_N)[:, None]
    return jnp.where(at_limit & (vocab[None, :] != options.eos_id), NEG, logp)


def _step_fn(model: nn.Module, params):
    def step(tokens_N, src_NS, cache, t, enc_out=None):
        logits, cache = model.apply(
            {"params": params},
            tokens_N[:, None],
            src_NS,
            cache,
            t,
            enc_out,
            method=type(model).decode_step,
        )
        return logits[:, 0], cache

    return step


def _encode(model: nn.Module, params, src_BS: jax.Array) -> jax.Array:
    return model.apply({"params": params}, src_BS, method=type(model).encode)


def _check_model(model: nn.Module) -> None:
    if not isinstance(model, architectures.EncoderDecoder):
        raise ValueError(
            f"translation search needs an EncoderDecoder model (model.arch='encdec'), "
            f"got {type(model).__name__}"
        )


class Beams(NamedTuple):
    """The search state of B sentences with K beams each: the live hypotheses' tokens
    [B, K, max_len] and log-probabilities [B, K], the K best finished ones' tokens and scores
    (log p / lp(n); NEG while unfilled) and how many have finished per sentence [B]."""

    live_seqs: jax.Array
    live_logp: jax.Array
    fin_seqs: jax.Array
    fin_scores: jax.Array
    fin_count: jax.Array

    @classmethod
    def start(cls, B: int, K: int, max_len: int) -> Beams:
        """One real start beam per sentence (the others at NEG), nothing finished."""
        seqs = jnp.zeros((B, K, max_len), jnp.int32)
        live_logp = jnp.full((B, K), NEG, jnp.float32).at[:, 0].set(0.0)
        return cls(
            seqs, live_logp, seqs, jnp.full((B, K), NEG, jnp.float32), jnp.zeros((B,), jnp.int32)
        )

    def sentence_done(self) -> jax.Array:
        """[B]: K hypotheses finished, or none live."""
        K = self.live_logp.shape[1]
        return (self.fin_count >= K) | jnp.all(self.live_logp <= NEG / 2, axis=1)


def _expand(
    beams: Beams, logp_BKV: jax.Array, t: jax.Array, options: SearchOptions
) -> tuple[Beams, jax.Array, jax.Array]:
    """One step of the search from the live hypotheses' next-token log-probabilities
    [B, K, V]: the 2K best continuations, those among the first K that end in EOS finished,
    the K best others live. Returns the new beams, each new live beam's parent as a flat row
    [B·K] (to reorder the self-attention cache) and its token [B·K]."""
    B, K, V = logp_BKV.shape
    cand = (beams.live_logp[:, :, None] + logp_BKV).reshape(B, K * V)
    scores_B2K, index_B2K = jax.lax.top_k(cand, 2 * K)
    beam_B2K, token_B2K = index_B2K // V, index_B2K % V
    seqs_B2KT = jnp.take_along_axis(beams.live_seqs, beam_B2K[:, :, None], axis=1)
    seqs_B2KT = seqs_B2KT.at[:, :, t].set(token_B2K)
    valid = scores_B2K > NEG / 2
    is_eos = token_B2K == options.eos_id

    # Finished: EOS among the first K candidates, while the sentence is not done.
    done_B = beams.fin_count >= K
    finish = is_eos & valid & (jnp.arange(2 * K) < K)[None, :] & ~done_B[:, None]
    lp = length_penalty(t + 1, options.length_penalty, options.length_penalty_form)
    all_scores = jnp.concatenate([beams.fin_scores, jnp.where(finish, scores_B2K / lp, NEG)], 1)
    all_seqs = jnp.concatenate([beams.fin_seqs, seqs_B2KT], axis=1)
    fin_scores, keep = jax.lax.top_k(all_scores, K)
    fin_seqs = jnp.take_along_axis(all_seqs, keep[:, :, None], axis=1)

    # Live: the K best candidates that do not end in EOS.
    live_logp, pick = jax.lax.top_k(jnp.where(is_eos | ~valid, NEG, scores_B2K), K)
    live_seqs = jnp.take_along_axis(seqs_B2KT, pick[:, :, None], axis=1)
    parent_N = (jnp.arange(B)[:, None] * K + jnp.take_along_axis(beam_B2K, pick, 1)).reshape(-1)
    tokens_N = jnp.take_along_axis(token_B2K, pick, axis=1).reshape(-1)
    fin_count = beams.fin_count + jnp.sum(finish, axis=1)
    return Beams(live_seqs, live_logp, fin_seqs, fin_scores, fin_count), parent_N, tokens_N


def _advance(
    beams: Beams, cache: dict, logits_NV: jax.Array, t: jax.Array, limit_N, options
) -> tuple[Beams, dict, jax.Array]:
    """:func:`_expand` on the logits [B·K, V], then the self-attention cache reordered to
    follow each live beam's parent."""
    B, K = beams.live_logp.shape
    logp_BKV = _log_probs(logits_NV, t, limit_N, options).reshape(B, K, -1)
    beams, parent_N, tokens_N = _expand(beams, logp_BKV, t, options)
    cache = dict(cache, self=jax.tree.map(lambda a: a[:, parent_N], cache["self"]))
    return beams, cache, tokens_N


@functools.partial(jax.jit, static_argnames=("model", "options"))
def beam_search(
    model: nn.Module, params, src_BS: jax.Array, options: SearchOptions = SearchOptions()
) -> tuple[jax.Array, jax.Array]:
    """Translate a batch of right-padded sources [B, S].

    Returns ``(tokens [B, max_len], scores [B])``: each row holds y_1 … y_n (EOS last) then
    padding, and the score log p(y) / lp(n) of the chosen hypothesis (see the module docstring).
    ``beam_size`` 1 is greedy search.
    """
    _check_model(model)
    B, S = src_BS.shape
    K, cfg = options.beam_size, model.config
    max_len = max_decode_length(S, options, cfg.max_len)
    step = _step_fn(model, params)

    # Every sentence's K beams are rows b·K … b·K + K − 1 of the flattened batch.
    src_N = jnp.repeat(src_BS, K, axis=0)
    limit_N = jnp.repeat(_row_limits(src_BS, options, max_len), K)
    enc_out = jnp.repeat(_encode(model, params, src_BS), K, axis=0)
    cache = architectures.init_cache(cfg, B * K, max_len, S)
    tokens_N = jnp.full((B * K,), options.bos_id, jnp.int32)
    logits_NV, cache = step(tokens_N, src_N, cache, 0, enc_out)  # fills the cross-attn cache
    beams, cache, tokens_N = _advance(
        Beams.start(B, K, max_len), cache, logits_NV, 0, limit_N, options
    )

    def cond(state):
        t, beams, _, _ = state
        return (t < max_len) & ~jnp.all(beams.sentence_done())

    def body(state):
        t, beams, cache, tokens_N = state
        logits_NV, cache = step(tokens_N, src_N, cache, t)
        beams, cache, tokens_N = _advance(beams, cache, logits_NV, t, limit_N, options)
        return t + 1, beams, cache, tokens_N

    _, beams, _, _ = jax.lax.while_loop(cond, body, (jnp.asarray(1), beams, cache, tokens_N))
    best = jnp.argmax(beams.fin_scores, axis=1)
    tokens = jnp.take_along_axis(beams.fin_seqs, best[:, None, None], axis=1)[:, 0]
    return tokens, jnp.max(beams.fin_scores, axis=1)


@functools.partial(jax.jit, static_argnames=("model", "options"))
def greedy_search(
    model: nn.Module, params, src_BS: jax.Array, options: SearchOptions = SearchOptions()
) -> tuple[jax.Array, jax.Array]:
    """Greedy translation of right-padded sources [B, S] (``options.beam_size`` is ignored).

    Returns ``(tokens [B, max_len], log p(y) [B])``: each row is y_1 … y_n (EOS last) then
    padding, where y_t = argmax p(· | y_<t, x) among the allowed ids.
    """
    _check_model(model)
    B, S = src_BS.shape
    cfg = model.config
    max_len = max_decode_length(S, options, cfg.max_len)
    step = _step_fn(model, params)
    limit_B = _row_limits(src_BS, options, max_len)
    enc_out = _encode(model, params, src_BS)
    cache = architectures.init_cache(cfg, B, max_len, S)

    def pick(state, logits_BV, t):
        tokens, logp_sum, done, _ = state
        logp = _log_probs(logits_BV, t, limit_B, options)
        token = jnp.argmax(logp, axis=-1).astype(jnp.int32)
        gained = jnp.take_along_axis(logp, token[:, None], axis=1)[:, 0]
        token = jnp.where(done, PAD_ID, token)
        logp_sum = logp_sum + jnp.where(done, 0.0, gained)
        tokens = tokens.at[:, t].set(token)
        return tokens, logp_sum, done | (token == options.eos_id), token

    state = (
        jnp.zeros((B, max_len), jnp.int32),
        jnp.zeros((B,), jnp.float32),
        jnp.zeros((B,), bool),
        jnp.full((B,), options.bos_id, jnp.int32),
    )
    logits_BV, cache = step(state[3], src_BS, cache, 0, enc_out)
    state = pick(state, logits_BV, 0)

    def cond(loop):
        t, state, _ = loop
        return (t < max_len) & ~jnp.all(state[2])

    def body(loop):
        t, state, cache = loop
        logits_BV, cache = step(state[3], src_BS, cache, t)
        return t + 1, pick(state, logits_BV, t), cache

    _, state, _ = jax.lax.while_loop(cond, body, (jnp.asarray(1), state, cache))
    return state[0], state[1]


def strip(tokens: np.ndarray | jax.Array, eos_id: int = EOS_ID) -> list[list[int]]:
    """Rows of generated ids → lists of ids before the first EOS (padding removed)."""
    out = []
    for row in np.asarray(tokens).tolist():
        ids = row[: row.index(eos_id)] if eos_id in row else row
        out.append([i for i in ids if i != PAD_ID])
    return out


def _like_params(params, array: np.ndarray) -> jax.Array:
    """``array`` as a jax.Array the search can combine with ``params``: on a multi-process
    mesh, a global array replicated over the parameters' mesh (every process passes the same
    rows), else a plain device array."""
    leaf = jax.tree.leaves(params)[0]
    sharding = getattr(leaf, "sharding", None)
    if jax.process_count() == 1 or not isinstance(sharding, jax.sharding.NamedSharding):
        return jnp.asarray(array)
    replicated = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
    return jax.make_array_from_process_local_data(replicated, array)


def _fetch(array: jax.Array) -> np.ndarray:
    """The whole value of a (possibly multi-process) array on this host."""
    if array.is_fully_addressable:
        return np.asarray(array)
    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def translate_ids(
    model: nn.Module,
    params,
    sources: Sequence[Sequence[int]],
    options: SearchOptions = SearchOptions(),
    batch_size: int = 64,
    bucket: int = 16,
    progress: str = "",
) -> list[list[int]]:
    """Translate source id sequences (EOS-terminated, as in training) in fixed-shape batches.

    Sentences are sorted by length, padded to a multiple of ``bucket`` tokens and grouped in
    batches of exactly ``batch_size`` rows (the last one filled with empty rows), so the search
    compiles once per length bucket. Returns the output ids (EOS removed) in input order.
    With ``progress`` (its label) a tqdm bar on process 0 shows the sentences done and the rate.
    """
    options.validate()
    if not sources:
        return []
    search = greedy_search if options.beam_size == 1 else beam_search
    lengths = np.array([len(s) for s in sources])
    if lengths.max() > model.config.max_len:
        raise ValueError(
            f"a source of {lengths.max()} tokens exceeds model.max_len={model.config.max_len}"
        )
    order = np.argsort(lengths, kind="stable")
    results: list[list[int]] = [[] for _ in sources]
    bar = tqdm(
        total=len(sources),
        desc=progress,
        unit="sent",
        leave=False,
        disable=not progress or jax.process_index() != 0,
    )
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = min(-(-int(lengths[rows].max()) // bucket) * bucket, model.config.max_len)
        src = np.full((batch_size, width), PAD_ID, np.int32)
        for r, i in enumerate(rows):
            src[r, : lengths[i]] = sources[i]
        tokens, _ = search(model, params, _like_params(params, src), options)
        for r, ids in zip(rows, strip(_fetch(tokens), options.eos_id), strict=False):
            results[r] = ids
        bar.update(len(rows))
    bar.close()
    return results
