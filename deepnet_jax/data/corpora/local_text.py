"""``local_text``: the user's plain text files, ``{train,valid,test}.txt`` (or ``.src_ext``),
one example per paragraph (:func:`read_text_file`), stored as ``{"text": Text}`` by
:class:`LocalText` configured by :class:`LocalTextConfig`."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import tensorflow_datasets as tfds

from deepnet_jax.data.corpora.base import Dataset, DatasetRequest, log_counts, split_paragraphs
from deepnet_jax.data.corpora.local_files import (
    EXTENSION,
    FOLDER,
    LOCAL_PREFIXES,
    LocalFilesBuilder,
    folder_name,
    read_lines,
    sanitize_name,
)


def read_text_file(path: str) -> tuple[list[str], dict[str, int]]:
    """Paragraph examples of a plain UTF-8 text file, for language modelling.

    An example is a paragraph: a maximal run of non-blank lines (trailing whitespace of each
    line removed), joined with ``"\\n"``. Blank (whitespace-only) lines separate paragraphs and
    are dropped; they are counted as ``empty``. Returns the paragraphs and ``{"lines": n,
    "empty": blank lines dropped, "paragraphs": kept}``. A file with no blank lines is one
    example (the pipeline is expected to concatenate and chunk text anyway).

    Raises:
      ValueError: the file is not valid UTF-8 (file and 1-based line named).
      FileNotFoundError: the file is missing.
    """
    lines = read_lines(path)
    paragraphs = split_paragraphs("\n".join(lines))
    empty = sum(1 for line in lines if not line.strip())
    return paragraphs, {"lines": len(lines), "empty": empty, "paragraphs": len(paragraphs)}


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
        if not EXTENSION.fullmatch(ext or ""):
            raise ValueError(f"local_text: file extension {ext!r} is not letters/digits/_/-")
        source_dir = os.path.abspath(source_dir)
        return cls(
            name=f"{folder_name(source_dir)}_{sanitize_name(ext)}",
            description=f"{source_dir}/{{train,valid,test}}.{ext}",
            source_dir=source_dir,
            split_files=tuple((split, f"{prefix}.{ext}") for split, prefix in LOCAL_PREFIXES),
        )

    def input_files(self) -> dict[str, str]:
        """``{file name: path}`` of every possible input file (missing ones included)."""
        return {name: os.path.join(self.source_dir, name) for _, name in self.split_files}

    def train_file(self) -> str:
        return dict(self.split_files).get("train", "train")

    def metadata(self) -> dict[str, Any]:
        return {
            "source_dir": self.source_dir,
            "split_files": [list(item) for item in self.split_files],
        }


class LocalText(LocalFilesBuilder):
    """The user's plain text files, one example per paragraph (blank-line separated).

    A split whose file is missing is absent; ``train`` is required. Build with ``config=``
    :meth:`LocalTextConfig.create`.
    """

    DESCRIPTION = "Text from local files, one example per blank-line-separated paragraph."
    FEATURES = ("text",)
    CONFIG = LocalTextConfig
    CREATE = "LocalTextConfig.create(source_dir)"

    def read_splits(self) -> tuple[dict[str, list[dict[str, str]]], dict[str, dict[str, int]]]:
        c = self.local_config
        splits: dict[str, list[dict[str, str]]] = {}
        counts: dict[str, dict[str, int]] = {}
        for split, name in c.split_files:
            path = os.path.join(c.source_dir, name)
            if os.path.isfile(path):
                paragraphs, counts[split] = read_text_file(path)
                log_counts(self.name, path, counts[split])
                splits[split] = [{"text": p} for p in paragraphs]
        return splits, counts


def _build(request: DatasetRequest, tfds_kwargs: dict[str, Any]) -> tfds.core.DatasetBuilder:
    config = LocalTextConfig.create(request.source_dir, request.src_ext or "txt")
    return LocalText(config=config, **tfds_kwargs)


DATASET = Dataset(
    "local_text",
    "text",
    "your {train,valid,test}.txt (or .src_ext) files",
    _build,
    arguments=("source_dir", "src_ext"),
    needs=(FOLDER,),
)
