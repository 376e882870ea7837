"""The synthetic sequence-reversal task: a data source for every architecture, generated on the fly.

Used by the tests, the smoke runs and ``data.dataset="synthetic_reversal"``; it serves batches
through the same interface as the corpus pipeline (``train_iterator()`` with
``get_state``/``set_state``, ``eval_batches(split)``). Token ids are
:mod:`deepnet_jax.common.tokens`'s: PAD 0, BOS 1, EOS 2, MASK 4 (the MLM pipeline's
mask id; UNK 3 is never used) and content tokens ``FIRST_CONTENT_ID`` (5) … vocab_size-1. A
content sequence x of random length in [min_len, longest] (``data.min_len``; the longest is
:func:`longest_content` of ``data.max_len``) becomes:

* ``encdec``: source x, target reverse(x)+EOS, decoder input BOS+reverse(x).
* ``decoder``: BOS x reverse(x) EOS as a language-modelling stream (loss on every next token).
* ``encoder``: x reverse(x) with 15% of positions replaced by MASK; loss on the masked ones.

Every batch is a dict of int32 arrays with ``inputs`` (and ``src`` for encdec), ``targets`` and
float32 ``weights`` (0 on padding / unmasked positions), all [B, T].
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import jax
import numpy as np

from deepnet_jax.common.tokens import BOS_ID, EOS_ID, FIRST_CONTENT_ID, MASK_ID
from deepnet_jax.data.options import DataOptions


def batch(
    arch: str,
    batch_size: int,
    vocab_size: int,
    max_len: int,
    rng: np.random.Generator,
    min_len: int = 2,
    mask_rate: float = 0.15,
) -> dict[str, np.ndarray]:
    """One batch of the reversal task for ``arch`` ("encoder", "decoder" or "encdec"):
    arrays [batch_size, max_len] (see the module docstring)."""
    if vocab_size <= FIRST_CONTENT_ID:
        raise ValueError(f"vocab_size={vocab_size} must exceed {FIRST_CONTENT_ID} (reserved ids)")
    longest = longest_content(arch, max_len)
    if longest < min_len:
        raise ValueError(
            f"max_len={max_len} is too short for the {arch} reversal task of content length "
            f">= {min_len} (it holds {longest} content tokens)"
        )
    out = {k: np.zeros((batch_size, max_len), np.int32) for k in ("inputs", "targets", "src")}
    weights = np.zeros((batch_size, max_len), np.float32)
    for b in range(batch_size):
        n = int(rng.integers(min_len, longest + 1))
        x = rng.integers(FIRST_CONTENT_ID, vocab_size, size=n)
        if arch == "encdec":
            out["src"][b, :n] = x
            tgt = np.concatenate([x[::-1], [EOS_ID]])
            out["targets"][b, : n + 1] = tgt
            out["inputs"][b, : n + 1] = np.concatenate([[BOS_ID], x[::-1]])
            weights[b, : n + 1] = 1
        elif arch == "decoder":
            stream = np.concatenate([[BOS_ID], x, x[::-1], [EOS_ID]])
            out["inputs"][b, : len(stream) - 1] = stream[:-1]
            out["targets"][b, : len(stream) - 1] = stream[1:]
            weights[b, : len(stream) - 1] = 1
        else:
            seq = np.concatenate([x, x[::-1]])
            masked = rng.random(len(seq)) < mask_rate
            masked[rng.integers(len(seq))] = True  # at least one prediction per row
            out["targets"][b, : len(seq)] = seq
            out["inputs"][b, : len(seq)] = np.where(masked, MASK_ID, seq)
            weights[b, : len(seq)] = masked
    result = {"inputs": out["inputs"], "targets": out["targets"], "weights": weights}
    if arch == "encdec":
        result["src"] = out["src"]
    return result


def longest_content(arch: str, max_len: int) -> int:
    """The longest content sequence x whose example fits ``max_len`` tokens for ``arch``:
    encdec max_len-1 (the target adds EOS), decoder (max_len-2)//2 (BOS x reverse(x) EOS, the
    last token only a target), encoder max_len//2 (x reverse(x))."""
    content = {"encdec": max_len - 1, "decoder": (max_len - 2) // 2, "encoder": max_len // 2}
    if arch not in content:
        raise ValueError(f"arch={arch!r} is not one of 'encoder', 'decoder', 'encdec'")
    return content[arch]


class SyntheticIterator:
    """The reversal task's endless batch stream; batch i is drawn from ``default_rng([seed, i])``
    so the stream position is its whole state (``get_state``/``set_state`` like grain's)."""

    def __init__(self, make: Callable[[np.random.Generator], dict], seed: int):
        self._make, self._seed, self._next = make, seed, 0

    def __iter__(self) -> SyntheticIterator:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        result = self._make(np.random.default_rng([self._seed, self._next]))
        self._next += 1
        return result

    def get_state(self) -> dict[str, int]:
        return {"next_index": self._next}

    def set_state(self, state: dict[str, int]) -> None:
        self._next = int(state["next_index"])


class SyntheticData:
    """The reversal task behind the same interface as ``pipeline.DataPipeline``.

    Every process draws the same global batch (``data.batch_size`` rows of ``data.max_len``)
    and keeps its own contiguous share of the rows (as the corpus pipeline does), so a run's
    batches do not depend on the process count.
    """

    tokenizer_size = None  # no tokenizer: the vocabulary is model.vocab_size (data.vocab_size)

    def __init__(self, data: DataOptions, arch: str, vocab_size: int, eval_batches: int):
        """``data``: the run's ``config.data`` (and seed); ``arch`` and ``vocab_size``: its
        model's (the vocabulary resolved); ``eval_batches``: the held-out set's batches."""
        self._arch = arch
        self._batch_size = data.batch_size
        self._vocab_size = vocab_size
        self._max_len = data.max_len
        self._min_len = data.min_len
        self._rows = data.batch_size // jax.process_count()
        self._first_row = jax.process_index() * self._rows
        self._seed = data.seed
        self._eval_batches = eval_batches

    def _make(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """This process's rows [batch_size / processes, max_len] of a global batch."""
        rows = slice(self._first_row, self._first_row + self._rows)
        full = batch(
            self._arch, self._batch_size, self._vocab_size, self._max_len, rng, self._min_len
        )
        return {k: v[rows] for k, v in full.items()}

    def train_iterator(self) -> SyntheticIterator:
        return SyntheticIterator(self._make, self._seed)

    def eval_counts(self, split: str) -> dict[str, int]:
        """Generated examples are never cut nor left out."""
        return {"loss_truncated": 0, "loss_dropped": 0}

    def eval_batches(self, split: str = "validation") -> Iterator[dict[str, np.ndarray]]:
        """The held-out batches (the task has one held-out set, whatever ``split`` says)."""
        rng = np.random.default_rng(self._seed + 10_000)
        for _ in range(self._eval_batches):
            yield self._make(rng)
