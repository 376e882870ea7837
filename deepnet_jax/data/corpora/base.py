"""What every corpus module shares: the dataset request, the registry row, the tfds builder base.

* :class:`DatasetRequest` — the dataset asked for and where it lives: ``data.dataset``,
  ``data.data_dir``, the languages and the user's files, frozen, passed whole to every function
  that prepares or opens a dataset.
* :class:`Dataset` — one row of :mod:`deepnet_jax.data.registry`: name, kind, languages, the
  ``data.*`` arguments it reads and needs, its builder; it checks a request against itself and
  maps the requested direction onto the stored fields.
* :class:`CorpusBuilder` — the ``tfds.core.GeneratorBasedBuilder`` every corpus of ours is
  built on: examples as text features stored in generation order under integer keys, written as
  ``array_record`` (no TensorFlow needed). What a reader dropped is printed (:func:`log_counts`)
  and kept in the dataset's ``metadata.json`` under ``"counts"``.

Kinds (and the tasks, hence model architectures, each can train):

=============  ========================================  ====================================
kind           records of ``sources.open_split``         tasks (``examples.ARCH_TASK``)
=============  ========================================  ====================================
``parallel``   ``{"source", "target"}``                  translation (encdec)
``text``       ``{"text"}``                              lm (decoder), mlm (encoder)
``synthetic``  none: batches generated on the fly        all three
=============  ========================================  ====================================
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import tensorflow_datasets as tfds

from deepnet_jax.common import console

SPLITS = ("train", "validation", "test")
KIND_TASKS = {
    "parallel": ("translation",),
    "text": ("lm", "mlm"),
    "synthetic": ("translation", "lm", "mlm"),
}
SOURCE_ARGUMENTS = ("source_dir", "src_ext", "tgt_ext")  # data.* fields naming local files

VERSION = tfds.core.Version("1.0.0")
RELEASE_NOTES = {"1.0.0": "Initial release."}

Example = tuple[int, dict[str, str]]


@dataclasses.dataclass(frozen=True)
class DatasetRequest:
    """A dataset asked for: the ``data.*`` fields that pick it, its files and its direction.

    ``source_lang``/``target_lang`` pick the direction of a parallel corpus (either may be
    empty: the other language; both empty: the stored default) and, for a corpus with several
    pairs, the pair. ``source_dir``, ``src_ext`` and ``tgt_ext`` name the user's files (the
    local datasets only).
    """

    dataset: str
    data_dir: str = ""
    source_lang: str = ""
    target_lang: str = ""
    source_dir: str = ""
    src_ext: str = ""
    tgt_ext: str = ""

    def local_arguments(self) -> dict[str, str]:
        """The ``data.*`` arguments naming local files (:data:`SOURCE_ARGUMENTS`) by name."""
        return {name: getattr(self, name) for name in SOURCE_ARGUMENTS}


Build = Callable[[DatasetRequest, dict[str, Any]], tfds.core.DatasetBuilder]


@dataclasses.dataclass(frozen=True)
class Needs:
    """Arguments a dataset cannot do without: one-line error ``<dataset> needs data.a and
    data.b (<hint>)`` when any of ``fields`` is empty."""

    fields: tuple[str, ...]
    hint: str


@dataclasses.dataclass(frozen=True)
class Dataset:
    """One row of the registry.

    Attributes:
      name: the ``data.dataset`` value.
      kind: ``"parallel"``, ``"text"`` or ``"synthetic"`` (see the module docstring).
      summary: one line for help texts.
      build: the tfds builder of a corpus, given the request and tfds' keywords (``data_dir``,
        ``file_format``); ``None`` for the synthetic task, which
        :mod:`deepnet_jax.data.synthetic` generates.
      languages: the language pairs of a parallel corpus as stored (source, target); the
        first is the default direction, either direction may be asked for. ``()`` for a
        parallel corpus means the pair is ``(src_ext, tgt_ext)``, given by the user.
      arguments: the local-file ``data.*`` arguments it reads (of :data:`SOURCE_ARGUMENTS`);
        any other one given is an error.
      needs: arguments it cannot do without.
      tfds_module: for tfds' own builders, the module whose import registers it (preparing
        downloads the corpus over the network).
    """

    name: str
    kind: str
    summary: str
    build: Build | None = None
    languages: tuple[tuple[str, str], ...] = ()
    arguments: tuple[str, ...] = ()
    needs: tuple[Needs, ...] = ()
    tfds_module: str = ""

    @property
    def tasks(self) -> tuple[str, ...]:
        """The training tasks its data serves (``translation``, ``lm``, ``mlm``)."""
        return KIND_TASKS[self.kind]

    @property
    def reads_local_files(self) -> bool:
        return "source_dir" in self.arguments

    def pair(self, source_lang: str = "", target_lang: str = "") -> tuple[str, str]:
        """The stored language pair holding the given languages (the first pair when none is
        given). With several pairs and no match: one-line ValueError listing the pairs. With
        one pair it is returned as is (the caller names the language that does not fit)."""
        if len(self.languages) == 1:
            return self.languages[0]
        given = {lang for lang in (source_lang, target_lang) if lang}
        for pair in self.languages:
            if given <= set(pair):
                return pair
        pairs = ", ".join("-".join(p) for p in self.languages)
        raise ValueError(
            f"data.source_lang={source_lang!r} and data.target_lang={target_lang!r}: "
            f"{self.name} has the language pairs {pairs} (either direction)"
        )

    def check(self, request: DatasetRequest) -> None:
        """One-line ValueError for arguments this dataset would ignore or reject (checked
        before anything is prepared): local-file arguments only where :attr:`arguments` lists
        them, and those it :attr:`needs`; languages only for parallel data, and one of its."""
        given = request.local_arguments()
        for name, value in given.items():
            if value and name not in self.arguments:
                raise ValueError(f"data.{name}={value!r} is not used by data.dataset={self.name!r}")
        for needs in self.needs:
            if not all(given[name] for name in needs.fields):
                fields = " and ".join(f"data.{name}" for name in needs.fields)
                raise ValueError(f"{self.name} needs {fields} ({needs.hint})")
        if self.kind == "parallel":
            self.fields(request)
            return
        for name in ("source_lang", "target_lang"):
            if value := getattr(request, name):
                raise ValueError(f"data.{name}={value!r} is not used by text data ({self.name})")

    def fields(self, request: DatasetRequest) -> tuple[tuple[str, str], ...]:
        """``((record key, stored feature), ...)`` of the requested records: ``source`` and
        ``target`` in the requested direction for parallel data, ``text`` for text."""
        if self.kind != "parallel":
            return (("text", "text"),)
        source, target = request.source_lang, request.target_lang
        if self.languages:
            langs = self.pair(source, target)
            keys = {lang: lang for lang in langs}
        else:  # the user's files: the languages are the extensions
            langs = (request.src_ext, request.tgt_ext)
            keys = {request.src_ext: "source", request.tgt_ext: "target"}
        for flag, lang in (("source_lang", source), ("target_lang", target)):
            if lang and lang not in langs:
                raise ValueError(
                    f"data.{flag}={lang!r} is not a language of {self.name} "
                    f"(one of: {', '.join(langs)})"
                )
        if source and not target:
            target = langs[1] if source == langs[0] else langs[0]
        elif target and not source:
            source = langs[1] if target == langs[0] else langs[0]
        elif not source:
            source, target = langs
        if source == target:
            raise ValueError(f"data.source_lang and data.target_lang are both {source!r}")
        return (("source", keys[source]), ("target", keys[target]))


def manual_dir_or_none(dl_manager: tfds.download.DownloadManager) -> str | None:
    """``dl_manager.manual_dir`` when it exists and is not empty, else None (no error)."""
    try:
        return os.fspath(dl_manager.manual_dir)
    except (AssertionError, ValueError):
        return None


def log_counts(dataset: str, what: str, counts: Mapping[str, int]) -> None:
    console.say(f"{dataset}: {what}: " + ", ".join(f"{k}={v}" for k, v in counts.items()))


def split_paragraphs(text: str) -> list[str]:
    """Blank-line-separated paragraphs of ``text``: lines right-stripped, empty ones dropped."""
    paragraphs: list[str] = []
    current: list[str] = []
    for raw in text.split("\n"):
        line = raw.rstrip()
        if line.strip():
            current.append(line)
        elif current:
            paragraphs.append("\n".join(current))
            current = []
    if current:
        paragraphs.append("\n".join(current))
    return paragraphs


class CorpusBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """What every corpus builder here shares: the version, text features, examples stored in
    generation order under integer keys (``disable_shuffling=True``: the stored order is the
    corpus module's documented order; shuffling is the input pipeline's job), and its
    ``DatasetInfo`` from class attributes (``DESCRIPTION``, ``FEATURES``, ``SUPERVISED`` and
    the optional ``HOMEPAGE``, ``CITATION``, ``LICENSE``); a builder whose features depend on
    its config overrides :meth:`description`, :meth:`features` and :meth:`supervised_keys`.

    Prepare with ``download_and_prepare`` after constructing with
    ``file_format="array_record"``; read with ``as_data_source``. tfds writes into
    ``<dataset>/incomplete.XXXXXX_<version>`` and renames it into place only after every split
    and the metadata are written, so a failed build leaves no dataset folder.
    """

    VERSION = VERSION
    RELEASE_NOTES = RELEASE_NOTES
    DESCRIPTION = ""
    FEATURES: tuple[str, ...] = ()
    SUPERVISED: tuple[str, str] | None = None
    HOMEPAGE: str | None = None
    CITATION: str | None = None
    LICENSE: str | None = None

    def description(self) -> str:
        return self.DESCRIPTION

    def features(self) -> tuple[str, ...]:
        return self.FEATURES

    def supervised_keys(self) -> tuple[str, str] | None:
        return self.SUPERVISED

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=self.description(),
            features=tfds.features.FeaturesDict(
                {name: tfds.features.Text() for name in self.features()}
            ),
            supervised_keys=self.supervised_keys(),
            disable_shuffling=True,
            homepage=self.HOMEPAGE,
            citation=self.CITATION,
            license=self.LICENSE,
            metadata=tfds.core.MetadataDict(),
        )

    def _generate_examples(self, examples: list[dict[str, str]]) -> Iterator[Example]:
        yield from enumerate(examples)
