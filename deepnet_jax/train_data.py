"""The data a training run reads: a real corpus through the grain pipeline, or the synthetic
reversal task behind the same interface (``train_iterator()`` with ``get_state``/``set_state``,
``eval_batches(split)``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import jax
import ml_collections
import numpy as np

from deepnet_jax import synthetic
from deepnet_jax.data import pipeline

SYNTHETIC = "synthetic_reversal"


class SyntheticIterator:
    """The reversal task's endless batch stream; batch i is drawn from ``default_rng([seed, i])``
    so the stream position is its whole state (``get_state``/``set_state`` like grain's)."""

    def __init__(self, make: Callable[[np.random.Generator], dict], seed: int):
        self._make, self._seed, self._next = make, seed, 0

    def __iter__(self) -> SyntheticIterator:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        batch = self._make(np.random.default_rng([self._seed, self._next]))
        self._next += 1
        return batch

    def get_state(self) -> dict[str, int]:
        return {"next_index": self._next}

    def set_state(self, state: dict[str, int]) -> None:
        self._next = int(state["next_index"])


class SyntheticData:
    """The reversal task behind the same interface as ``pipeline.DataPipeline``.

    Every process draws the same global batch and keeps its own contiguous share of the rows
    (as the corpus pipeline does), so a run's batches do not depend on the process count.
    """

    def __init__(self, config: ml_collections.ConfigDict):
        make_global = functools.partial(
            synthetic.batch,
            config.model.arch,
            config.data.batch_size,
            config.model.vocab_size,
            config.data.max_len,
        )
        n, i = jax.process_count(), jax.process_index()
        rows = config.data.batch_size // n

        def make(rng: np.random.Generator) -> dict[str, np.ndarray]:
            batch = make_global(rng)
            return {k: v[i * rows : (i + 1) * rows] for k, v in batch.items()}

        self._make = make
        self._seed = config.seed
        self._eval_batches = config.eval_batches

    def train_iterator(self) -> SyntheticIterator:
        return SyntheticIterator(self._make, self._seed)

    def eval_batches(self, split: str = "validation") -> Iterator[dict[str, np.ndarray]]:
        """The held-out batches (the task has one held-out set, whatever ``split`` says)."""
        rng = np.random.default_rng(self._seed + 10_000)
        for _ in range(self._eval_batches):
            yield self._make(rng)


class CorpusData:
    """A real corpus (prepared if missing) through the grain pipeline."""

    def __init__(self, config: ml_collections.ConfigDict, row_multiple: int = 1):
        options = pipeline.DataOptions.from_config(config.data, config.seed)
        self.pipeline = pipeline.DataPipeline(options, config.model.arch, row_multiple=row_multiple)
        if config.model.vocab_size < self.pipeline.vocab_size:  # char: known only now
            raise ValueError(
                f"model.vocab_size={config.model.vocab_size} is smaller than the tokenizer's "
                f"{self.pipeline.vocab_size} pieces (data.vocab_size={options.vocab_size})"
            )
        self.pipeline.check_split("validation")  # fail now, not after training
        if config.final_split:
            self.pipeline.check_split(config.final_split)

    @property
    def translates(self) -> bool:
        return self.pipeline.task == "translation"

    def train_iterator(self):
        """grain's iterator: ``next`` gives a batch; ``get_state``/``set_state`` its position."""
        return iter(self.pipeline.train_dataset())

    def eval_batches(self, split: str = "validation") -> Iterator[dict[str, np.ndarray]]:
        return self.pipeline.eval_batches(split)


def make_data(
    config: ml_collections.ConfigDict, row_multiple: int = 1
) -> SyntheticData | CorpusData:
    """The run's data; every batch's row count divides over ``row_multiple`` devices."""
    if config.data.dataset == SYNTHETIC:
        return SyntheticData(config)
    return CorpusData(config, row_multiple)
