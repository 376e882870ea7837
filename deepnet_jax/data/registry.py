"""The one table of datasets ``data.dataset`` may name: kind, languages, arguments, builder.

Adding a corpus means adding its row to :data:`REGISTRY` (and writing its tfds builder in
:mod:`deepnet_jax.data.builders`); everything that needs the dataset list, a dataset's kind,
languages or allowed ``data.*`` arguments — the config check in ``train.validate``, the corpus
functions of :mod:`deepnet_jax.data.sources`, the pipeline and the ``prepare`` CLI — reads it.

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
import functools
import importlib
from collections.abc import Callable
from typing import Any

import tensorflow_datasets as tfds

from deepnet_jax.data import builders, local_builders

SYNTHETIC = "synthetic_reversal"
KIND_TASKS = {
    "parallel": ("translation",),
    "text": ("lm", "mlm"),
    "synthetic": ("translation", "lm", "mlm"),
}
SOURCE_ARGUMENTS = ("source_dir", "src_ext", "tgt_ext")  # data.* fields naming local files


@dataclasses.dataclass(frozen=True)
class BuildRequest:
    """What a builder function is given: the tfds keywords (``data_dir``, ``file_format``),
    the local-file arguments and the chosen language ``pair`` (source, target; ``("", "")``
    when the dataset has no fixed languages)."""

    dataset: str
    tfds_kwargs: dict[str, Any]
    source_dir: str = ""
    src_ext: str = ""
    tgt_ext: str = ""
    pair: tuple[str, str] = ("", "")


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
      build: the tfds builder of a corpus (``None`` for the synthetic task, which
        :mod:`deepnet_jax.data.synthetic` generates).
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
    build: Callable[[BuildRequest], tfds.core.DatasetBuilder] | None = None
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


# ------------------------------------------------------------------------------------------
# Builders: how each corpus is prepared (a tfds builder reading/writing under data_dir)
# ------------------------------------------------------------------------------------------


def _ding(request: BuildRequest) -> tfds.core.DatasetBuilder:
    return builders.DingDeEn(**request.tfds_kwargs)


def _libreoffice(request: BuildRequest) -> tfds.core.DatasetBuilder:
    config = "-".join(request.pair)  # the configs are named de-en, fr-en
    return builders.LibreOfficeHelp(config=config, **request.tfds_kwargs)


def _shakespeare(request: BuildRequest) -> tfds.core.DatasetBuilder:
    return builders.Shakespeare(**request.tfds_kwargs)


def _local_parallel(request: BuildRequest) -> tfds.core.DatasetBuilder:
    r = request
    config = local_builders.LocalParallelConfig.create(r.source_dir, r.src_ext, r.tgt_ext)
    return local_builders.LocalParallel(config=config, **r.tfds_kwargs)


def _local_text(request: BuildRequest) -> tfds.core.DatasetBuilder:
    config = local_builders.LocalTextConfig.create(request.source_dir, request.src_ext or "txt")
    return local_builders.LocalText(config=config, **request.tfds_kwargs)


def _tfds_builder(module: str, request: BuildRequest) -> tfds.core.DatasetBuilder:
    importlib.import_module(module)  # registers the builder, no TensorFlow needed
    return tfds.builder(request.dataset, **request.tfds_kwargs)


_FOLDER = Needs(("source_dir",), "the folder with the files")
_WMT14 = "tensorflow_datasets.translate.wmt14"
_WMT17 = "tensorflow_datasets.translate.wmt17"

# The order is the order of every listing (help texts, error messages).
REGISTRY: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset(SYNTHETIC, "synthetic", "the built-in sequence-reversal task (any model)"),
        Dataset(
            "ding_de_en",
            "parallel",
            "Ding dictionary example sentences",
            _ding,
            languages=(("de", "en"),),
        ),
        Dataset(
            "libreoffice_help",
            "parallel",
            "LibreOffice 7.4 help pages; the languages pick the pair",
            _libreoffice,
            languages=(("de", "en"), ("fr", "en")),
        ),
        Dataset("shakespeare", "text", "the plays, one example per paragraph", _shakespeare),
        Dataset(
            "local_parallel",
            "parallel",
            "your {train,valid,test}.{src_ext,tgt_ext} files",
            _local_parallel,
            arguments=SOURCE_ARGUMENTS,
            needs=(_FOLDER, Needs(("src_ext", "tgt_ext"), "e.g. 'de', 'en'")),
        ),
        Dataset(
            "local_text",
            "text",
            "your {train,valid,test}.txt (or .src_ext) files",
            _local_text,
            arguments=("source_dir", "src_ext"),
            needs=(_FOLDER,),
        ),
        Dataset(
            "wmt14_translate/de-en",
            "parallel",
            "tfds' WMT-14 builder (network)",
            functools.partial(_tfds_builder, _WMT14),
            languages=(("de", "en"),),
            tfds_module=_WMT14,
        ),
        Dataset(
            "wmt17_translate/de-en",
            "parallel",
            "tfds' WMT-17 builder (network)",
            functools.partial(_tfds_builder, _WMT17),
            languages=(("de", "en"),),
            tfds_module=_WMT17,
        ),
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
