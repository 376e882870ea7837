"""Decoding: greedy and beam search, sampling, BLEU/chrF scoring.

Public API (each name is imported on first use, so ``import deepnet_jax.decoding`` stays
light)::

    from deepnet_jax import decoding
    options = decoding.SearchOptions(beam_size=5, length_penalty=1.0)
    tokens, scores = decoding.beam_search(model, params, src_BS, options)   # [B, T], [B]
    ids = decoding.translate_ids(model, params, sources, options, batch_size=64)
    seq = decoding.sample(model, params, prompts_BP, rng, decoding.SampleOptions(top_p=0.9))
    figures = decoding.corpus_scores(hypotheses, references)   # sacrebleu BLEU and chrF
"""

from __future__ import annotations

from deepnet_jax.common import lazy

_SURFACE = {  # name -> the submodule that defines it
    "SearchOptions": "options",
    "beam_search": "search",
    "greedy_search": "search",
    "translate_ids": "search",
    "strip": "search",
    "length_penalty": "search",
    "SampleOptions": "sampling",
    "sample": "sampling",
    "filter_logits": "sampling",
    "corpus_scores": "scoring",
    "translate_split": "scoring",
}
__all__ = sorted(_SURFACE)
__getattr__, __dir__ = lazy.surface(__name__, _SURFACE)
