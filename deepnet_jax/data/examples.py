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

Examples longer than ``max_len`` (and empty ones) are dropped and counted in
``TokenizedExamples.dropped`` — never truncated, never silently misaligned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from deepnet_jax.data.tokenizer import Tokenizer
from deepnet_jax.tokens import BOS_ID, EOS_ID, FIRST_CONTENT_ID, MASK_ID

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
) -> TokenizedExamples:
    """Records (``{"source", "target"}`` or ``{"text"}``) → examples for ``task``."""
    if task not in TASKS:
        raise ValueError(f"task={task!r}; allowed values are {TASKS}")
    if lm_chunking not in LM_CHUNKING:
        raise ValueError(f"data.lm_chunking={lm_chunking!r}; allowed values are {LM_CHUNKING}")
    dropped = {"too_long": 0, "empty": 0, "stream_tail_tokens": 0}
    examples: list[dict[str, np.ndarray]] = []
    if task == "translation":
        sources = tokenizer.encode_batch([r["source"] for r in records])
        targets = tokenizer.encode_batch([r["target"] for r in records])
        for s, t in zip(sources, targets, strict=True):
            if len(s) == 0 or len(t) == 0:
                dropped["empty"] += 1
            elif max(len(s), len(t)) + 1 > max_len:
                dropped["too_long"] += 1
            else:
                examples.append(
                    {
                        "src": _ids([], s, [EOS_ID]),
                        "inputs": _ids([BOS_ID], t, []),
                        "targets": _ids([], t, [EOS_ID]),
                    }
                )
        lengths = [max(len(e["src"]), len(e["targets"])) for e in examples]
    else:
        texts = tokenizer.encode_batch([r["text"] for r in records])
        window = max_len + 1 if task == "lm" else max_len
        if lm_chunking == "stream":
            stream = np.concatenate([_ids([], t, [EOS_ID]) for t in texts if len(t)] or [[]])
            dropped["empty"] = sum(1 for t in texts if not len(t))
            step = window - 1 if task == "lm" else window
            count = max((len(stream) - 1) // step, 0) if task == "lm" else len(stream) // step
            seqs = [stream[i * step : i * step + window] for i in range(count)]
            predicted = count * step  # tokens that are some window's target
            dropped["stream_tail_tokens"] = int(len(stream) - (task == "lm") - predicted)
        else:
            seqs = []
            for t in texts:
                if not len(t):
                    dropped["empty"] += 1
                elif len(t) + 2 > window:
                    dropped["too_long"] += 1
                else:
                    seqs.append(_ids([BOS_ID], t, [EOS_ID]))
        for seq in seqs:
            if task == "lm":
                examples.append({"inputs": seq[:-1], "targets": seq[1:]})
            else:
                examples.append({"targets": seq})
        lengths = [len(e["targets"]) for e in examples]
    return TokenizedExamples(
        task=task,
        examples=examples,
        lengths=np.asarray(lengths, np.int32),
        dropped=dropped,
        num_records=len(records),
    )


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
