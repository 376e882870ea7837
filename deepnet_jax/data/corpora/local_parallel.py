"""``local_parallel``: the user's parallel files, fairseq-style
``{train,valid,test}.{src_ext,tgt_ext}``, one sentence a line, line-aligned
(:func:`read_parallel_files`), stored as ``{"source": Text, "target": Text}`` by
:class:`LocalParallel` configured by :class:`LocalParallelConfig`."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import tensorflow_datasets as tfds

from deepnet_jax.common import console
from deepnet_jax.data.corpora.base import (
    SOURCE_ARGUMENTS,
    Dataset,
    DatasetRequest,
    Needs,
    log_counts,
)
from deepnet_jax.data.corpora.local_files import (
    EXTENSION,
    FOLDER,
    LOCAL_PREFIXES,
    LocalFilesBuilder,
    folder_name,
    read_lines,
    sanitize_name,
)


def read_parallel_files(
    source_dir: str, prefix: str, src_ext: str, tgt_ext: str
) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """Aligned ``(source, target)`` lines of ``{prefix}.{src_ext}`` and ``{prefix}.{tgt_ext}``.

    The files (fairseq's prepared format, e.g. ``train.de`` / ``train.en``) hold one sentence a
    line, line ``i`` of one translating line ``i`` of the other. Both are UTF-8 (a leading BOM is
    ignored). Whitespace around each line is stripped; pairs where either side is then empty are
    dropped and counted, never shifted. Returns the pairs and ``{"lines": n, "empty": dropped,
    "pairs": kept}``.

    Raises:
      ValueError: the two files have different numbers of lines (both files and both counts
        are named), or a file is not valid UTF-8 (file and 1-based line named).
      FileNotFoundError: a file is missing.
    """
    src_path = os.path.join(source_dir, f"{prefix}.{src_ext}")
    tgt_path = os.path.join(source_dir, f"{prefix}.{tgt_ext}")
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise ValueError(
            f"parallel files differ in line count: {src_path} has {len(src_lines)} lines, "
            f"{tgt_path} has {len(tgt_lines)}"
        )
    pairs: list[tuple[str, str]] = []
    empty = 0
    for src, tgt in zip(src_lines, tgt_lines, strict=True):
        src, tgt = src.strip(), tgt.strip()
        if src and tgt:
            pairs.append((src, tgt))
        else:
            empty += 1
    return pairs, {"lines": len(src_lines), "empty": empty, "pairs": len(pairs)}


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
            if not EXTENSION.fullmatch(ext or ""):
                raise ValueError(
                    f"local_parallel needs data.{flag}: a file extension such as 'de' "
                    f"(letters, digits, _ or -), got {ext!r}"
                )
        if src_ext == tgt_ext:
            raise ValueError(f"data.src_ext and data.tgt_ext are both {src_ext!r}")
        source_dir = os.path.abspath(source_dir)
        name = f"{folder_name(source_dir)}_{sanitize_name(src_ext)}_{sanitize_name(tgt_ext)}"
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

    def train_file(self) -> str:
        return f"train.{self.src_ext}"

    def metadata(self) -> dict[str, str]:
        return {"source_dir": self.source_dir, "src_ext": self.src_ext, "tgt_ext": self.tgt_ext}


class LocalParallel(LocalFilesBuilder):
    """The user's parallel text files (fairseq-prepared ``train.de`` / ``train.en`` …).

    Splits ``train`` / ``validation`` / ``test`` come from the prefixes ``train`` / ``valid`` /
    ``test``; a split whose two files are both missing is absent, ``train`` is required, and a
    split with only one of its two files is an error. Build with ``config=``
    :meth:`LocalParallelConfig.create`.
    """

    DESCRIPTION = "Parallel text from local files (one sentence a line, line-aligned)."
    FEATURES = ("source", "target")
    SUPERVISED = ("source", "target")
    CONFIG = LocalParallelConfig
    CREATE = "LocalParallelConfig.create(source_dir, src, tgt)"

    def read_splits(self) -> tuple[dict[str, list[dict[str, str]]], dict[str, dict[str, int]]]:
        c = self.local_config
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
            pairs, counts[split] = read_parallel_files(c.source_dir, prefix, c.src_ext, c.tgt_ext)
            log_counts(self.name, f"{paths[0]} + {paths[1]}", counts[split])
            if counts[split]["empty"]:
                console.warn(
                    f"{self.name}: dropped {counts[split]['empty']} line pairs with an empty "
                    f"side from {paths[0]} / {paths[1]}"
                )
            splits[split] = [{"source": s, "target": t} for s, t in pairs]
        return splits, counts


def _build(request: DatasetRequest, tfds_kwargs: dict[str, Any]) -> tfds.core.DatasetBuilder:
    r = request
    config = LocalParallelConfig.create(r.source_dir, r.src_ext, r.tgt_ext)
    return LocalParallel(config=config, **tfds_kwargs)


DATASET = Dataset(
    "local_parallel",
    "parallel",
    "your {train,valid,test}.{src_ext,tgt_ext} files",
    _build,
    arguments=SOURCE_ARGUMENTS,
    needs=(FOLDER, Needs(("src_ext", "tgt_ext"), "e.g. 'de', 'en'")),
)
