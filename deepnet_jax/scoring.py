"""Translation quality: decode a parallel split and score it with sacrebleu (BLEU and chrF).

Hypotheses are detokenized with the run's SentencePiece model and scored against the raw
reference sentences with sacrebleu's defaults (13a tokenization, BLEU-4; chrF with β = 2), the
scores the papers and WMT report. The returned signature strings say exactly how.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import sacrebleu

from deepnet_jax import decoding
from deepnet_jax.data.pipeline import TranslationSet
from deepnet_jax.data.tokenizer import Tokenizer


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict[str, Any]:
    """Corpus BLEU and chrF of detokenized ``hypotheses`` against one reference each, and
    ``distinct_hypotheses``: the fraction of different strings among the hypotheses (1.0 when
    no two are the same; 1/n when one sentence is output for every source)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    bleu_signature, chrf_signature = str(bleu.get_signature()), str(chrf.get_signature())
    return {
        "distinct_hypotheses": len(set(hypotheses)) / max(len(hypotheses), 1),
        "bleu": bleu_score.score,
        "chrf": chrf_score.score,
        "bleu_signature": bleu_signature,
        "chrf_signature": chrf_signature,
        # sacrebleu's own report lines: signature = score, n-gram precisions, brevity penalty
        "bleu_report": bleu_score.format(signature=bleu_signature),
        "chrf_report": chrf_score.format(signature=chrf_signature),
    }


def translate_split(
    model: nn.Module,
    params: Any,
    tokenizer: Tokenizer,
    pairs: TranslationSet,
    options: decoding.SearchOptions,
    batch_size: int = 64,
    limit: int = 0,
) -> tuple[list[str], dict[str, Any]]:
    """Translate the first ``limit`` pairs (0: all) and score them.

    Returns ``(hypotheses, scores)`` where scores holds ``bleu``, ``chrf``, their signatures,
    ``sentences`` and ``truncated_sources`` (sources cut to ``data.max_len``, see
    ``DataPipeline.translation_set``).
    """
    n = len(pairs.source_ids) if limit <= 0 else min(limit, len(pairs.source_ids))
    ids = decoding.translate_ids(model, params, pairs.source_ids[:n], options, batch_size)
    hypotheses = [tokenizer.decode(h) for h in ids]
    scores = corpus_scores(hypotheses, pairs.references[:n])
    scores["sentences"] = n
    scores["truncated_sources"] = sum(pairs.truncated[:n])
    return hypotheses, scores
