"""A corpus prepared for training: its tfds dataset prepared if missing and its SentencePiece
tokenizer trained (or loaded) on the training split, on every process alike; its records read
in order."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from deepnet_jax.common.tokens import EOS_ID
from deepnet_jax.data import sources
from deepnet_jax.data.fetch import DataPreparationError
from deepnet_jax.data.options import DataOptions
from deepnet_jax.data.tokenizer import Tokenizer, cache_path, load_or_train, save


@dataclasses.dataclass(frozen=True)
class PreparedCorpus:
    """A prepared dataset (its tfds builder and cache key) with its tokenizer."""

    builder: Any
    key: str
    tokenizer: Tokenizer
    tokenizer_path: str


def iter_records(records, chunk: int = 10_000) -> Iterator[dict[str, str]]:
    """Every record of a random-access source in order, read in slices (batched reads)."""
    for start in range(0, len(records), chunk):
        yield from records[start : start + chunk]


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def prepare_corpus(options: DataOptions, tokenizer_proto: bytes | None = None) -> PreparedCorpus:
    """Prepare the dataset if missing and load (or train and cache) its tokenizer.

    The tokenizer is trained on the training split only — both sides for parallel data (one
    joint source+target model). ``tokenizer_proto`` (another process's trained model) is
    installed in the cache instead of training.
    """
    request = options.request()
    builder = sources.prepare(request)
    key = dataset_key(builder, options.dataset)
    if tokenizer_proto is not None:
        tokenizer = Tokenizer(tokenizer_proto)
        path = cache_path(options.tokenizer_options(), key, options.data_dir)
        if not os.path.exists(path) or _read_bytes(path) != tokenizer_proto:
            save(tokenizer, path)
        return PreparedCorpus(builder, key, tokenizer, path)
    fields = (
        ("source", "target") if sources.dataset_kind(request.dataset) == "parallel" else ("text",)
    )

    def sentences() -> Iterator[str]:
        for record in iter_records(sources.open_split(request, "train", builder)):
            for field in fields:
                yield record[field]

    tokenizer, path = load_or_train(options.tokenizer_options(), key, options.data_dir, sentences)
    return PreparedCorpus(builder, key, tokenizer, path)


def prepare_on_all_processes(options: DataOptions) -> PreparedCorpus:
    """:func:`prepare_corpus` on process 0 first, then on the others with process 0's tokenizer.

    Process 0 prepares the dataset and trains (or loads) the tokenizer; its success flag and
    tokenizer bytes are broadcast, so every process gets a byte-identical tokenizer (hence
    identical examples and batch plans) whether ``data_dir`` is shared or per host. The others
    then prepare their dataset (found ready on a shared disk, built from the same packages on a
    per-host disk). A failure on process 0 is raised there and as one line on the others; no
    process is left waiting at a barrier.
    """
    if jax.process_count() == 1:
        return prepare_corpus(options)
    corpus, error = None, None
    if jax.process_index() == 0:
        try:
            corpus = prepare_corpus(options)
        except Exception as e:
            error = e
    ok = int(multihost_utils.broadcast_one_to_all(np.int32(error is None)))
    if not ok:
        if error is not None:
            raise error
        raise DataPreparationError("process 0 could not prepare the data; its log has the error")
    proto = corpus.tokenizer.model_proto if corpus is not None else b""
    size = int(multihost_utils.broadcast_one_to_all(np.int64(len(proto))))
    buffer = np.frombuffer(proto, np.uint8) if corpus is not None else np.zeros(size, np.uint8)
    proto = np.asarray(multihost_utils.broadcast_one_to_all(buffer), np.uint8).tobytes()
    return corpus if corpus is not None else prepare_corpus(options, tokenizer_proto=proto)


def dataset_key(builder: Any, dataset: str) -> str:
    """Name + version of the prepared data, plus a digest of a local corpus's input files.

    The tokenizer cache is keyed on it, so editing a local corpus retrains the tokenizer.
    """
    info = getattr(builder, "info", None)
    key = getattr(info, "full_name", dataset)
    fingerprint = (getattr(info, "metadata", None) or {}).get("input_fingerprint")
    if fingerprint:
        digest = json.dumps(fingerprint, sort_keys=True, default=str).encode()
        key += "@" + hashlib.sha256(digest).hexdigest()[:10]
    return key


def source_ids(
    tokenizer: Tokenizer, texts: Sequence[str], max_len: int
) -> tuple[list[np.ndarray], list[bool]]:
    """Source sentences as encoder input: encode(text) + EOS, as in training. A sentence of
    more than ``max_len − 1`` pieces is cut to its first ``max_len − 1`` (+ EOS) and flagged."""
    ids, truncated = [], []
    for body in tokenizer.encode_batch(list(texts)):
        truncated.append(len(body) > max_len - 1)
        ids.append(np.append(body[: max_len - 1], EOS_ID).astype(np.int32))
    return ids, truncated
