"""What the datasets of the user's own files share (``local_parallel``, ``local_text``).

A prepared dataset of local files is named after its folder (:func:`folder_name`) and stores
``"input_fingerprint"`` (name -> size and sha256 of every input file) in ``metadata.json``;
:func:`changed_inputs` compares it with the files on disk, and
:func:`deepnet_jax.data.sources.prepare` rebuilds the dataset when they differ (printing a
warning), so editing the source files never leaves a stale dataset in use. The files are read
as UTF-8 lines (:func:`read_lines`); :class:`LocalFilesBuilder` is the builders' base.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

import tensorflow_datasets as tfds

from deepnet_jax.data import fetch
from deepnet_jax.data.corpora.base import CorpusBuilder, Example, Needs

# File prefix (fairseq naming) of each split of the local datasets.
LOCAL_PREFIXES = (("train", "train"), ("validation", "valid"), ("test", "test"))

EXTENSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")

FOLDER = Needs(("source_dir",), "the folder with the files")


def read_lines(path: str) -> list[str]:
    """Lines of a UTF-8 file split at ``\\n`` only (a final ``\\n`` ends the last line).

    Only ``\\n`` separates lines, never the other characters ``str.splitlines`` breaks at
    (``\\x1c``, ``\\u2028`` …), so two parallel files stay aligned as line-oriented tools see
    them; a ``\\r`` before the ``\\n`` is removed. Raises ``ValueError`` naming the file and the
    1-based line of the first invalid UTF-8 byte.
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(
            f"{path}: invalid UTF-8 on line {line} (byte {e.start} of the file: {e.reason})"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def sanitize_name(text: str) -> str:
    """``text`` lower-cased with every run of characters outside ``[a-z0-9]`` turned into ``_``."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def folder_name(source_dir: str) -> str:
    """``<sanitized basename>_<6 hex of sha256(absolute path)>``: two folders with the same
    basename (or names that sanitize alike) never share a prepared dataset."""
    path = os.path.normpath(os.path.abspath(source_dir))
    digest = hashlib.sha256(path.encode()).hexdigest()[:6]
    return f"{sanitize_name(os.path.basename(path)) or 'data'}_{digest}"


def input_fingerprint(paths: Mapping[str, str]) -> dict[str, dict[str, int | str]]:
    """``{name: {"size": bytes, "sha256": hex}}`` for each existing file in ``paths``."""
    return {
        name: {"size": os.path.getsize(path), "sha256": fetch.sha256_file(path)}
        for name, path in sorted(paths.items())
        if os.path.isfile(path)
    }


def changed_inputs(builder: tfds.core.DatasetBuilder) -> list[str]:
    """Input files of a prepared local dataset that were added, removed or changed since."""
    stored = (builder.info.metadata or {}).get("input_fingerprint") or {}
    current = input_fingerprint(builder.builder_config.input_files())
    return sorted(n for n in set(stored) | set(current) if stored.get(n) != current.get(n))


class LocalFilesBuilder(CorpusBuilder, skip_registration=True):
    """What the builders of the user's files share: the config they need, the folder and the
    training split required, the splits' counts, the input fingerprint and the source in the
    metadata. A subclass reads its splits (:meth:`read_splits`)."""

    CONFIG: type[tfds.core.BuilderConfig] = tfds.core.BuilderConfig
    CREATE = ""  # how to make the config, for the error message

    @property
    def local_config(self) -> Any:
        config = self.builder_config
        if not isinstance(config, self.CONFIG):
            raise ValueError(f"{self.name} needs config={self.CREATE}")
        return config

    def read_splits(self) -> tuple[dict[str, list[dict[str, str]]], dict[str, dict[str, int]]]:
        """``({split: examples}, {split: counts})`` of the splits whose files exist."""
        raise NotImplementedError

    def _split_generators(
        self, dl_manager: tfds.download.DownloadManager
    ) -> dict[str, Iterator[Example]]:
        del dl_manager
        c = self.local_config
        if not os.path.isdir(c.source_dir):
            raise ValueError(f"{self.name}: data.source_dir={c.source_dir!r} is not a folder")
        splits, counts = self.read_splits()
        if "train" not in splits:
            train = os.path.join(c.source_dir, c.train_file())
            raise ValueError(f"{self.name}: the training split is required but {train} is missing")
        self.info.metadata["counts"] = counts
        self.info.metadata["input_fingerprint"] = input_fingerprint(c.input_files())
        self.info.metadata["source"] = c.metadata()
        return {split: self._generate_examples(examples) for split, examples in splits.items()}
