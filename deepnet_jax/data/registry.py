"""The one table of datasets ``data.dataset`` may name: each corpus module's row, and the
synthetic task's.

A row (:class:`~deepnet_jax.data.corpora.base.Dataset`) holds a dataset's kind, languages,
allowed ``data.*`` arguments and builder; its corpus module (:mod:`deepnet_jax.data.corpora`)
defines it beside the corpus's fetching, parsing and tfds builder. Everything that needs the
dataset list, a dataset's kind, languages or allowed arguments — the config check in
``train.validate``, :mod:`deepnet_jax.data.sources`, the pipeline and the ``prepare`` CLI —
reads this table.
"""

from __future__ import annotations

from deepnet_jax.data.corpora import (
    ding,
    libreoffice_help,
    local_parallel,
    local_text,
    shakespeare,
    wmt,
)
from deepnet_jax.data.corpora.base import (
    KIND_TASKS,
    SOURCE_ARGUMENTS,
    Dataset,
    DatasetRequest,
    Needs,
)

__all__ = [
    "CORPORA",
    "KIND_TASKS",
    "NAMES",
    "REGISTRY",
    "SOURCE_ARGUMENTS",
    "SYNTHETIC",
    "Dataset",
    "DatasetRequest",
    "Needs",
    "check",
    "corpus",
    "get",
]

SYNTHETIC = "synthetic_reversal"

# The order is the order of every listing (help texts, error messages).
REGISTRY: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset(SYNTHETIC, "synthetic", "the built-in sequence-reversal task (any model)"),
        ding.DATASET,
        libreoffice_help.DATASET,
        shakespeare.DATASET,
        local_parallel.DATASET,
        local_text.DATASET,
        *wmt.DATASETS,
    )
}
NAMES = tuple(REGISTRY)  # every data.dataset value
CORPORA = tuple(name for name, d in REGISTRY.items() if d.kind != "synthetic")


def get(name: str) -> Dataset:
    """The row of ``name``; one-line ValueError listing every name for others."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"data.dataset={name!r}; allowed values are {NAMES}") from None


def corpus(name: str) -> Dataset:
    """The row of a corpus (a dataset with a tfds builder); one-line ValueError listing the
    corpora for other names (the synthetic task included: it has nothing to prepare)."""
    entry = REGISTRY.get(name) if isinstance(name, str) else None
    if entry is None or entry.build is None:
        raise ValueError(f"data.dataset={name!r} is not one of: {', '.join(CORPORA)}")
    return entry


def check(request: DatasetRequest) -> None:
    """One-line ValueError for a request its corpus would reject or whose arguments it would
    ignore, before anything is prepared (:meth:`Dataset.check`)."""
    corpus(request.dataset).check(request)
