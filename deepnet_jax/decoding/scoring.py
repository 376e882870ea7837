"""Translation quality: decode a parallel split and score it with sacrebleu (BLEU and chrF).

Hypotheses are detokenized with the run's SentencePiece model and scored against the raw
reference sentences with sacrebleu's defaults (13a tokenization, BLEU-4; chrF with β = 2), the
scores the papers and WMT report. The returned signature strings say exactly how.

Beside the whole set, BLEU and chrF are reported on its **unseen** subset: the sentences whose
source does not occur verbatim in the training split (``TranslationSet.seen``). Corpora of
documentation repeat short strings (menu names, "Note") across pages, and a model can recall
their training translation; the unseen figure measures translation alone.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import sacrebleu

from deepnet_jax.data.pipeline import TranslationSet
from deepnet_jax.data.tokenizer import Tokenizer
from deepnet_jax.decoding import search


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
    options: search.SearchOptions,
    batch_size: int = 64,
    limit: int = 0,
    progress: str = "",
) -> tuple[list[str], dict[str, Any]]:
    """Translate the first ``limit`` pairs (0: all) and score them (``progress``: the label of
    a progress bar over the sentences; empty: none).

    Returns ``(hypotheses, scores)`` where scores holds ``bleu``, ``chrf``, their signatures,
    ``sentences`` and ``truncated_sources`` (sources cut to ``data.max_len``, see
    ``DataPipeline.translation_set``), and :func:`unseen_scores`.
    """
    n = len(pairs.source_ids) if limit <= 0 else min(limit, len(pairs.source_ids))
    ids = search.translate_ids(
        model, params, pairs.source_ids[:n], options, batch_size, progress=progress
    )
    hypotheses = [tokenizer.decode(h) for h in ids]
    scores = corpus_scores(hypotheses, pairs.references[:n])
    scores["sentences"] = n
    scores["truncated_sources"] = sum(pairs.truncated[:n])
    scores.update(unseen_scores(hypotheses, pairs.references[:n], pairs.seen[:n]))
    return hypotheses, scores


def unseen_scores(
    hypotheses: list[str], references: list[str], seen: list[bool]
) -> dict[str, float | int]:
    """``unseen_sentences``: how many sources are not in the training split, and
    ``unseen_bleu``/``unseen_chrf`` on those sentences alone (absent when there are none)."""
    unseen = [i for i, s in enumerate(seen) if not s]
    out: dict[str, float | int] = {"unseen_sentences": len(unseen)}
    if unseen:
        scores = corpus_scores([hypotheses[i] for i in unseen], [references[i] for i in unseen])
        out.update(unseen_bleu=scores["bleu"], unseen_chrf=scores["chrf"])
    return out
