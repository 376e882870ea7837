"""tfds builders for the user's own files: ``local_parallel`` (fairseq-style
``{train,valid,test}.{src_ext,tgt_ext}`` files, ``{"source": Text, "target": Text}``,
configured by :class:`LocalParallelConfig`) and ``local_text`` (``train.txt`` / ``valid.txt`` /
``test.txt`` paragraphs, ``{"text": Text}``, configured by :class:`LocalTextConfig`).

Both store ``"input_fingerprint"`` (name -> size and sha256 of every input file) in
``metadata.json``; :func:`deepnet_jax.data.sources.prepare` compares it with the files on disk
and rebuilds the dataset when they differ (printing a warning), so editing the source files
never leaves a stale dataset in use. Everything else is :class:`~deepnet_jax.data.builders.
CorpusBuilder`'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Iterator, Mapping

import tensorflow_datasets as tfds

from deepnet_jax.common import console
from deepnet_jax.data import corpora, fetch
from deepnet_jax.data.builders import CorpusBuilder, Example, log_counts

# File prefix (fairseq naming) of each split of the local datasets.
LOCAL_PREFIXES = (("train", "train"), ("validation", "valid"), ("test", "test"))

_EXT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def sanitize_name(text: str) -> str:
    """``text`` lower-cased with every run of characters outside ``[a-z0-9]`` turned into ``_``."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def _folder_name(source_dir: str) -> str:
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


@dataclasses.dataclass(eq=False)
class LocalParallelConfig(tfds.core.BuilderConfig):
    """Where the user's parallel files are: ``{source_dir}/{train,valid,test}.{src,tgt}_ext``."""

    source_dir: str = ""
    src_ext: str = ""
    tgt_ext: str = ""

    @classmethod
    def create(cls, source_dir: str, src_ext: str, tgt_ext: str) -> LocalParallelConfig:
        """A config named ``<folder basename>_<path digest>_<src_ext>_<tgt_ext>`` ([a-z0-9_])."""
        if not source_dir:
            raise ValueError("local_parallel needs data.source_dir (the folder with the files)")
        for flag, ext in (("src_ext", src_ext), ("tgt_ext", tgt_ext)):
            if not _EXT.fullmatch(ext or ""):
                raise ValueError(
                    f"local_parallel needs data.{flag}: a file extension such as 'de' "
                    f"(letters, digits, _ or -), got {ext!r}"
                )
        if src_ext == tgt_ext:
            raise ValueError(f"data.src_ext and data.tgt_ext are both {src_ext!r}")
        source_dir = os.path.abspath(source_dir)
        name = f"{_folder_name(source_dir)}_{sanitize_name(src_ext)}_{sanitize_name(tgt_ext)}"
        return cls(
            name=name,
            description=f"{source_dir}/{{train,valid,test}}.{{{src_ext},{tgt_ext}}}",
            source_dir=source_dir,
            src_ext=src_ext,
            tgt_ext=tgt_ext,
        )

    def input_files(self) -> dict[str, str]:
        """``{file name: path}`` of every possible input file (missing ones included)."""
        return {
            f"{prefix}.{ext}": os.path.join(self.source_dir, f"{prefix}.{ext}")
            for _, prefix in LOCAL_PREFIXES
            for ext in (self.src_ext, self.tgt_ext)
        }


@dataclasses.dataclass(eq=False)
class LocalTextConfig(tfds.core.BuilderConfig):
    """Where the user's text files are: ``split_files`` maps a split to a file in ``source_dir``."""

    source_dir: str = ""
    split_files: tuple[tuple[str, str], ...] = (
        ("train", "train.txt"),
        ("validation", "valid.txt"),
        ("test", "test.txt"),
    )

    @classmethod
    def create(cls, source_dir: str, ext: str = "txt") -> LocalTextConfig:
        """Files ``{train,valid,test}.{ext}``; config ``<folder basename>_<path digest>_<ext>``."""
        if not source_dir:
            raise ValueError("local_text needs data.source_dir (the folder with the files)")
        if not _EXT.fullmatch(ext or ""):
            raise ValueError(f"local_text: file extension {ext!r} is not letters/digits/_/-")
        source_dir = os.path.abspath(source_dir)
        return cls(
            name=f"{_folder_name(source_dir)}_{sanitize_name(ext)}",
            description=f"{source_dir}/{{train,valid,test}}.{ext}",
            source_dir=source_dir,
            split_files=tuple((split, f"{prefix}.{ext}") for split, prefix in LOCAL_PREFIXES),
        )

    def input_files(self) -> dict[str, str]:
        """``{file name: path}`` of every possible input file (missing ones included)."""
        return {name: os.path.join(self.source_dir, name) for _, name in self.split_files}


def _require_folder(dataset: str, source_dir: str) -> None:
    if not os.path.isdir(source_dir):
        raise ValueError(f"{dataset}: data.source_dir={source_dir!r} is not a folder")


def _require_train(dataset: str, present: list[str], expected: str) -> None:
    if "train" not in present:
        raise ValueError(f"{dataset}: the training split is required but {expected} is missing")


class LocalParallel(CorpusBuilder):
    """The user's parallel text files (fairseq-prepared ``train.de`` / ``train.en`` …).

    Splits ``train`` / ``validation`` / ``test`` come from the prefixes ``train`` / ``valid`` /
    ``test``; a split whose two files are both missing is absent, ``train`` is required, and a
    split with only one of its two files is an error. Build with ``config=``
    :meth:`LocalParallelConfig.create`.
    """

    DESCRIPTION = "Parallel text from local files (one sentence a line, line-aligned)."
    FEATURES = ("source", "target")
    SUPERVISED = ("source", "target")

    @property
    def local_config(self) -> LocalParallelConfig:
        config = self.builder_config
        if not isinstance(config, LocalParallelConfig):
            raise ValueError(
                "local_parallel needs config=LocalParallelConfig.create(source_dir, src, tgt)"
            )
        return config

    def _split_generators(
        self, dl_manager: tfds.download.DownloadManager
    ) -> dict[str, Iterator[Example]]:
        del dl_manager
        c = self.local_config
        _require_folder(self.name, c.source_dir)
        splits: dict[str, list[dict[str, str]]] = {}
        counts: dict[str, dict[str, int]] = {}
        for split, prefix in LOCAL_PREFIXES:
            paths = [
                os.path.join(c.source_dir, f"{prefix}.{ext}") for ext in (c.src_ext, c.tgt_ext)
            ]
            exists = [os.path.isfile(p) for p in paths]
            if not any(exists):
                continue
            if not all(exists):
                missing = paths[exists.index(False)]
                raise ValueError(f"local_parallel: {missing} is missing (its pair file exists)")
            pairs, counts[split] = corpora.read_parallel_files(
                c.source_dir, prefix, c.src_ext, c.tgt_ext
            )
            log_counts(self.name, f"{paths[0]} + {paths[1]}", counts[split])
            if counts[split]["empty"]:
                console.warn(
                    f"{self.name}: dropped {counts[split]['empty']} line pairs with an empty "
                    f"side from {paths[0]} / {paths[1]}"
                )
            splits[split] = [{"source": s, "target": t} for s, t in pairs]
        _require_train(self.name, list(splits), f"{c.source_dir}/train.{c.src_ext}")
        self.info.metadata["counts"] = counts
        self.info.metadata["input_fingerprint"] = input_fingerprint(c.input_files())
        self.info.metadata["source"] = {
            "source_dir": c.source_dir,
            "src_ext": c.src_ext,
            "tgt_ext": c.tgt_ext,
        }
        return {split: self._generate_examples(examples) for split, examples in splits.items()}


class LocalText(CorpusBuilder):
    """The user's plain text files, one example per paragraph (blank-line separated).

    A split whose file is missing is absent; ``train`` is required. Build with ``config=``
    :meth:`LocalTextConfig.create`.
    """

    DESCRIPTION = "Text from local files, one example per blank-line-separated paragraph."
    FEATURES = ("text",)

    @property
    def local_config(self) -> LocalTextConfig:
        config = self.builder_config
        if not isinstance(config, LocalTextConfig):
            raise ValueError("local_text needs config=LocalTextConfig.create(source_dir)")
        return config

    def _split_generators(
        self, dl_manager: tfds.download.DownloadManager
    ) -> dict[str, Iterator[Example]]:
        del dl_manager
        c = self.local_config
        _require_folder(self.name, c.source_dir)
        splits: dict[str, list[dict[str, str]]] = {}
        counts: dict[str, dict[str, int]] = {}
        for split, name in c.split_files:
            path = os.path.join(c.source_dir, name)
            if not os.path.isfile(path):
                continue
            paragraphs, counts[split] = corpora.read_text_file(path)
            log_counts(self.name, path, counts[split])
            splits[split] = [{"text": p} for p in paragraphs]
        train_file = dict(c.split_files).get("train", "train")
        _require_train(self.name, list(splits), os.path.join(c.source_dir, train_file))
        self.info.metadata["counts"] = counts
        self.info.metadata["input_fingerprint"] = input_fingerprint(c.input_files())
        self.info.metadata["source"] = {
            "source_dir": c.source_dir,
            "split_files": [list(item) for item in c.split_files],
        }
        return {split: self._generate_examples(examples) for split, examples in splits.items()}
