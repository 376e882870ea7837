"""Sampling from a decoder-only model: temperature, top-k and nucleus (top-p) filtering over the
same cached ``decode_step`` as translation search (:mod:`deepnet_jax.decoding.search`)."""

from __future__ import annotations

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from deepnet_jax.common.tokens import BOS_ID, EOS_ID, PAD_ID
from deepnet_jax.decoding.search import NEG
from deepnet_jax.model import architectures


@dataclasses.dataclass(frozen=True)
class SampleOptions:
    """Options of :func:`sample` (hashable: static under jit).

    Attributes:
      max_new_tokens: tokens generated after the prompt (EOS included).
      temperature: logits are divided by it; 0 picks the most likely token (greedy).
      top_k: sample among the k most likely tokens (0: all).
      top_p: sample from the smallest set of most likely tokens whose probability reaches p
        (nucleus sampling, Holtzman et al. 2020; 1.0: all).
      eos_id: generation stops for a row once it samples this id.
      banned_ids: ids never sampled.
    """

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    eos_id: int = EOS_ID
    banned_ids: tuple[int, ...] = (PAD_ID, BOS_ID)

    def validate(self, prefix: str = "") -> None:
        """One-line ValueError for the first invalid option; ``prefix`` names its config group
        (e.g. ``"decode."``)."""
        p = prefix
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int):
            raise ValueError(f"{p}max_new_tokens={self.max_new_tokens!r} must be an integer >= 1")
        if self.max_new_tokens < 1:
            raise ValueError(f"{p}max_new_tokens={self.max_new_tokens!r} must be an integer >= 1")
        if not self.temperature >= 0:
            raise ValueError(f"{p}temperature={self.temperature!r} must be >= 0")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"{p}top_k={self.top_k!r} must be an integer >= 0 (0: off)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"{p}top_p={self.top_p!r} must be in (0, 1]")


def filter_logits(logits_NV: jax.Array, top_k: int = 0, top_p: float = 1.0) -> jax.Array:
    """Float32 logits with everything outside the top-k / top-p (nucleus) set set to NEG.

    The nucleus is the smallest set of most likely tokens whose total probability is ≥ p
    (the most likely token is always kept).
    """
    logits = logits_NV.astype(jnp.float32)
    if top_k:
        kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
        logits = jnp.where(logits < kth, NEG, logits)
    if top_p < 1.0:
        sorted_desc = jnp.sort(logits, axis=-1)[:, ::-1]
        probs = jax.nn.softmax(sorted_desc, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # mass of strictly more likely tokens
        cutoff = jnp.min(jnp.where(before < top_p, sorted_desc, jnp.inf), axis=-1, keepdims=True)
        logits = jnp.where(logits < cutoff, NEG, logits)
    return logits


def _check_request(model: nn.Module, prompt_len: int, options: SampleOptions) -> None:
    """One-line ValueError if ``model`` is not a ``DecoderOnly`` or the prompt [B, P] plus
    ``max_new_tokens`` does not fit in ``model.max_len``."""
    if not isinstance(model, architectures.DecoderOnly):
        raise ValueError(
            f"sampling needs a DecoderOnly model (model.arch='decoder'), got {type(model).__name__}"
        )
    if prompt_len + options.max_new_tokens > model.config.max_len:
        raise ValueError(
            f"prompt length {prompt_len} + max_new_tokens {options.max_new_tokens} exceeds "
            f"model.max_len={model.config.max_len}"
        )


def _pick_token(
    logits_BV: jax.Array, banned_V: jax.Array, key: jax.Array, options: SampleOptions
) -> jax.Array:
    """Token ids [B] from one step's logits [B, V]: banned ids masked to NEG, then greedy
    (temperature 0) or a categorical draw from ``filter_logits(logits / temperature)``."""
    logits = jnp.where(banned_V[None, :], NEG, logits_BV.astype(jnp.float32))
    if options.temperature == 0:
        return jnp.argmax(logits, axis=-1)
    logits = filter_logits(logits / options.temperature, options.top_k, options.top_p)
    return jax.random.categorical(key, logits, axis=-1)


def _write_token(
    seq_BT: jax.Array,
    done_B: jax.Array,
    token_B: jax.Array,
    t: jax.Array,
    prompt_len_B: jax.Array,
    options: SampleOptions,
) -> tuple[jax.Array, jax.Array]:
    """Write position t + 1 of ``seq`` [B, T]: the prompt's own token while t + 1 < p_b
    (teacher forcing), else the sampled token, or PAD once a row is done (EOS sampled or its
    ``max_new_tokens`` spent). Returns the new (seq [B, T], done [B])."""
    generating = t + 1 >= prompt_len_B
    done_B = done_B | (t + 1 >= prompt_len_B + options.max_new_tokens)  # budget spent
    current = jax.lax.dynamic_slice_in_dim(seq_BT, t + 1, 1, axis=1)[:, 0]
    token_B = jnp.where(generating, jnp.where(done_B, PAD_ID, token_B), current).astype(jnp.int32)
    seq_BT = jax.lax.dynamic_update_slice_in_dim(seq_BT, token_B[:, None], t + 1, axis=1)
    done_B = done_B | (generating & (token_B == options.eos_id))
    return seq_BT, done_B


@functools.partial(jax.jit, static_argnames=("model", "options"))
def sample(
    model: nn.Module,
    params,
    prompts_BP: jax.Array,
    rng: jax.Array,
    options: SampleOptions = SampleOptions(),
) -> jax.Array:
    """Continue right-padded prompts [B, P] (each at least one token, e.g. BOS) with a
    ``DecoderOnly`` model.

    Returns tokens [B, P + max_new_tokens]: row b is its prompt (length p_b) followed by up to
    ``max_new_tokens`` sampled ids ending at the first EOS, then padding. The prompt is fed
    through the same cached step (teacher-forced), so rows with different prompt lengths share
    one loop; the key for position t is ``fold_in(rng, t)``.
    """
    B, P = prompts_BP.shape
    _check_request(model, P, options)
    total = P + options.max_new_tokens
    prompt_len = jnp.sum(prompts_BP != PAD_ID, axis=1)
    seq = jnp.zeros((B, total), jnp.int32).at[:, :P].set(prompts_BP)
    cache = architectures.init_cache(model.config, B, total)
    vocab = jnp.arange(model.config.vocab_size)
    banned = jnp.isin(vocab, jnp.asarray(options.banned_ids, jnp.int32))

    def body(loop):
        t, seq, done, cache = loop
        logits, cache = model.apply(
            {"params": params},
            jax.lax.dynamic_slice_in_dim(seq, t, 1, axis=1),
            cache,
            t,
            method=architectures.DecoderOnly.decode_step,
        )
        token = _pick_token(logits[:, 0], banned, jax.random.fold_in(rng, t), options)
        seq, done = _write_token(seq, done, token, t, prompt_len, options)
        return t + 1, seq, done, cache

    def cond(loop):
        t, _, done, _ = loop
        return (t < total - 1) & ~jnp.all(done)

    _, seq, _, _ = jax.lax.while_loop(
        cond, body, (jnp.asarray(0), seq, jnp.zeros((B,), bool), cache)
    )
    return seq
