"""Tokenized training examples for the three tasks, filtered by length, plus MLM masking.

Every example is a dict of 1-D int32 arrays of equal length ``n`` (its length), ready to be
padded or packed into a row of ``max_len``:

* ``translation`` — ``src`` = encode(source)+EOS (its own length), and for the target
  ``inputs`` = BOS+encode(target), ``targets`` = encode(target)+EOS (fairseq's layout);
  the example's length is max(len(src), len(targets)).
* ``lm`` — ``inputs`` = seq[:-1], ``targets`` = seq[1:]. With ``lm_chunking="document"`` each
  text is one sequence seq = BOS+encode(text)+EOS; with ``"stream"`` all texts of the split
  (each followed by EOS) form one token stream cut into consecutive windows of ``max_len + 1``
  tokens (windows overlap by one token, so every stream token is predicted once; the tail
  shorter than a full window is dropped and counted).
* ``mlm`` — ``targets`` = BOS+encode(text)+EOS (or a stream window of ``max_len``); the
  ``inputs`` and ``weights`` are drawn per example by :func:`mask_tokens`.

Training examples longer than ``max_len`` (and empty ones) are dropped and counted in
``TokenizedExamples.dropped`` — never truncated, never silently misaligned. Evaluation
examples (``truncate=True``) keep every translation pair and every document, cutting the long
ones to ``max_len`` and counting them in ``TokenizedExamples.truncated``: a source keeps its
first ``max_len − 1`` pieces + EOS (the decoder's input for BLEU, see
``prepared.source_ids``) and a target its first ``max_len`` positions (teacher forcing over a
prefix of the reference), so every pair is scored and the scored set is the decoded set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from deepnet_jax.common.tokens import BOS_ID, EOS_ID, FIRST_CONTENT_ID, MASK_ID
from deepnet_jax.data.tokenizer import Tokenizer

TASKS = ("translation", "lm", "mlm")
LM_CHUNKING = ("stream", "document")
ARCH_TASK = {"encdec": "translation", "decoder": "lm", "encoder": "mlm"}


@dataclasses.dataclass
class TokenizedExamples:
    """A split as a list of example dicts; ``lengths[i]`` is example i's padded-row length."""

    task: str
    examples: list[dict[str, np.ndarray]]
    lengths: np.ndarray
    dropped: dict[str, int]
    num_records: int
    truncated: int = 0  # examples cut to max_len (evaluation only)

    def __len__(self) -> int:
        return len(self.examples)


def _ids(prefix: list[int], body: np.ndarray, suffix: list[int]) -> np.ndarray:
    return np.concatenate([np.asarray(prefix, np.int32), body, np.asarray(suffix, np.int32)])


def tokenize(
    records: Sequence[dict[str, str]],
    tokenizer: Tokenizer,
    task: str,
    max_len: int,
    lm_chunking: str = "stream",
    truncate: bool = False,
) -> TokenizedExamples:
    """Records (``{"source", "target"}`` or ``{"text"}``) → examples for ``task``; with
    ``truncate`` (evaluation) long examples are cut to ``max_len`` instead of dropped and
    translation pairs with an empty side are kept (see the module doc)."""
    if task not in TASKS:
        raise ValueError(f"task={task!r}; allowed values are {TASKS}")
    if lm_chunking not in LM_CHUNKING:
        raise ValueError(f"data.lm_chunking={lm_chunking!r}; allowed values are {LM_CHUNKING}")
    counts = {"too_long": 0, "empty": 0, "stream_tail_tokens": 0, "truncated": 0}
    if task == "translation":
        sources = tokenizer.encode_batch([r["source"] for r in records])
        targets = tokenizer.encode_batch([r["target"] for r in records])
        examples = _translation_examples(sources, targets, max_len, truncate, counts)
        lengths = [max(len(e["src"]), len(e["targets"])) for e in examples]
    else:
        texts = tokenizer.encode_batch([r["text"] for r in records])
        window = max_len + 1 if task == "lm" else max_len
        if lm_chunking == "stream":
            seqs = _stream_windows(texts, window, task, counts)
        else:
            seqs = _documents(texts, window, truncate, counts)
        examples = []
        for seq in seqs:
            if task == "lm":
                examples.append({"inputs": seq[:-1], "targets": seq[1:]})
            else:
                examples.append({"targets": seq})
        lengths = [len(e["targets"]) for e in examples]
    truncated = counts.pop("truncated")
    return TokenizedExamples(
        task=task,
        examples=examples,
        lengths=np.asarray(lengths, np.int32),
        dropped=counts,
        num_records=len(records),
        truncated=truncated,
    )


def _translation_examples(
    sources: Sequence[np.ndarray],
    targets: Sequence[np.ndarray],
    max_len: int,
    truncate: bool,
    counts: dict[str, int],
) -> list[dict[str, np.ndarray]]:
    """``src`` = s+EOS, ``inputs`` = BOS+t, ``targets`` = t+EOS per pair; a pair longer than
    ``max_len`` is dropped, or with ``truncate`` cut (source to ``max_len − 1`` pieces + EOS,
    target side to its first ``max_len`` positions). ``counts`` is updated in place."""
    out = []
    for s, t in zip(sources, targets, strict=True):
        if not truncate and (len(s) == 0 or len(t) == 0):
            counts["empty"] += 1
            continue
        if max(len(s), len(t)) + 1 > max_len:
            if not truncate:
                counts["too_long"] += 1
                continue
            counts["truncated"] += 1
        out.append(
            {
                "src": _ids([], s[: max_len - 1], [EOS_ID]),
                "inputs": _ids([BOS_ID], t, [])[:max_len],
                "targets": _ids([], t, [EOS_ID])[:max_len],
            }
        )
    return out


def _stream_windows(
    texts: Sequence[np.ndarray], window: int, task: str, counts: dict[str, int]
) -> list[np.ndarray]:
    """All texts (each + EOS) as one stream cut into windows of ``window`` tokens (LM windows
    overlap by one token); the short tail is dropped and counted."""
    stream = np.concatenate([_ids([], t, [EOS_ID]) for t in texts if len(t)] or [[]])
    counts["empty"] = sum(1 for t in texts if not len(t))
    step = window - 1 if task == "lm" else window
    count = max((len(stream) - 1) // step, 0) if task == "lm" else len(stream) // step
    predicted = count * step  # tokens that are some window's target
    counts["stream_tail_tokens"] = int(len(stream) - (task == "lm") - predicted)
    return [stream[i * step : i * step + window] for i in range(count)]


def _documents(
    texts: Sequence[np.ndarray], window: int, truncate: bool, counts: dict[str, int]
) -> list[np.ndarray]:
    """BOS+text+EOS per non-empty text; longer than ``window``: dropped, or with ``truncate``
    cut to its first ``window`` tokens. ``counts`` is updated in place."""
    seqs = []
    for t in texts:
        if not len(t):
            counts["empty"] += 1
            continue
        seq = _ids([BOS_ID], t, [EOS_ID])
        if len(seq) > window:
            if not truncate:
                counts["too_long"] += 1
                continue
            counts["truncated"] += 1
        seqs.append(seq[:window])
    return seqs


def mask_tokens(
    targets: np.ndarray,
    rng: np.random.Generator,
    vocab_size: int,
    mask_rate: float = 0.15,
    first_maskable: int = FIRST_CONTENT_ID,
) -> tuple[np.ndarray, np.ndarray]:
    """BERT masking of one sequence: (inputs, weights), both [n].

    Each maskable position (ids ≥ ``first_maskable``: not pad/BOS/EOS/UNK/MASK) is chosen with
    probability ``mask_rate`` (at least one when any is maskable); a chosen position becomes
    MASK with probability 0.8, a uniformly random ordinary id with 0.1, and stays with 0.1.
    ``weights`` is 1 exactly on the chosen positions (the loss positions).
    """
    maskable = targets >= first_maskable
    chosen = maskable & (rng.random(targets.shape) < mask_rate)
    if maskable.any() and not chosen.any():
        chosen[rng.choice(np.flatnonzero(maskable))] = True
    action = rng.random(targets.shape)
    random_ids = rng.integers(first_maskable, vocab_size, size=targets.shape, dtype=np.int32)
    inputs = np.where(chosen & (action < 0.8), MASK_ID, targets)
    inputs = np.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs.astype(np.int32), chosen.astype(np.float32)
