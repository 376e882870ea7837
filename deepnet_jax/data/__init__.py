"""Data: real corpora as tfds ``array_record`` datasets (no TensorFlow), opened for grain.

``prepare(DatasetRequest(dataset, data_dir))`` builds a dataset once (``python -m
deepnet_jax.cli.prepare`` does the same from the shell); ``open_split(request, split)`` returns
a random-access sequence of ``{"source", "target"}`` (parallel) or ``{"text"}`` (text) records.
Each corpus is one module of :mod:`deepnet_jax.data.corpora`; the datasets, their kinds,
languages and arguments are listed once, in :mod:`deepnet_jax.data.registry`; the synthetic
reversal task is :mod:`deepnet_jax.data.synthetic`.
"""

from deepnet_jax.data.corpora.base import DatasetRequest
from deepnet_jax.data.fetch import DataPreparationError
from deepnet_jax.data.sources import DATASETS, SPLITS, dataset_kind, open_split, prepare

__all__ = [
    "DATASETS",
    "SPLITS",
    "DataPreparationError",
    "DatasetRequest",
    "dataset_kind",
    "open_split",
    "prepare",
]
