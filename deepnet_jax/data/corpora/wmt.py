"""``wmt14_translate/de-en`` and ``wmt17_translate/de-en``: tfds' own WMT builders.

Importing a builder's tfds module registers it (no TensorFlow needed to construct it);
preparing downloads the WMT corpora over the network. A copy already prepared as ``tfrecord``
(tfds with TensorFlow installed) is read through TensorFlow when the ``tf`` extra is installed
(:func:`deepnet_jax.data.sources.open_split`).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import tensorflow_datasets as tfds

from deepnet_jax.data.corpora.base import Dataset, DatasetRequest

_WMT14 = "tensorflow_datasets.translate.wmt14"
_WMT17 = "tensorflow_datasets.translate.wmt17"


def _build(
    module: str, request: DatasetRequest, tfds_kwargs: dict[str, Any]
) -> tfds.core.DatasetBuilder:
    importlib.import_module(module)  # registers the builder, no TensorFlow needed
    return tfds.builder(request.dataset, **tfds_kwargs)


DATASETS = tuple(
    Dataset(
        f"wmt{year}_translate/de-en",
        "parallel",
        f"tfds' WMT-{year} builder (network)",
        functools.partial(_build, module),
        languages=(("de", "en"),),
        tfds_module=module,
    )
    for year, module in (("14", _WMT14), ("17", _WMT17))
)
