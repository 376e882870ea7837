"""The data a training run reads, picked by ``data.dataset``: a real corpus through the grain
pipeline, or the synthetic reversal task (:mod:`deepnet_jax.data.synthetic`), both behind one
interface (``train_iterator()`` with ``get_state``/``set_state``, ``eval_batches(split)``)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from deepnet_jax.data import pipeline, registry
from deepnet_jax.data.synthetic import SyntheticData
from deepnet_jax.training.run_config import RunConfig


class CorpusData:
    """A real corpus (prepared if missing) through the grain pipeline."""

    def __init__(self, config: RunConfig, row_multiple: int = 1):
        self.pipeline = pipeline.DataPipeline(
            config.data, config.model.arch, row_multiple=row_multiple
        )
        self.tokenizer_size = self.pipeline.vocab_size  # the model's vocabulary when derived
        if config.model.vocab_size < self.pipeline.vocab_size:  # char: known only now
            raise ValueError(
                f"model.vocab_size={config.model.vocab_size} is smaller than the tokenizer's "
                f"{self.pipeline.vocab_size} pieces (data.vocab_size={config.data.vocab_size})"
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

    def eval_counts(self, split: str) -> dict[str, int]:
        """Examples of ``split`` cut to ``data.max_len`` / records left out by evaluation."""
        return self.pipeline.eval_counts(split)


Data = SyntheticData | CorpusData  # what make_data returns


def make_data(config: RunConfig, row_multiple: int = 1) -> Data:
    """The run's data (``config`` with its derived fields resolved: ``RunConfig.resolved``);
    every batch's row count divides over ``row_multiple`` devices.

    The one place that picks the source: the registry's ``synthetic`` kind is generated, every
    other dataset is a corpus."""
    if registry.get(config.data.dataset).kind == "synthetic":
        return SyntheticData(
            config.data, config.model.arch, config.model.vocab_size, config.eval_batches
        )
    return CorpusData(config, row_multiple)
