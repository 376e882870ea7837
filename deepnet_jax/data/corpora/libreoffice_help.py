"""``libreoffice_help``: LibreOffice 7.4 help paragraphs paired across languages.

The source is the HTML help pages of the Debian 12 packages ``libreoffice-help-en-us``, ``-de``
and ``-fr`` (version :data:`LIBREOFFICE_VERSION`, MPL-2.0; fetched at prepare time with
``apt-get download``, never committed). :func:`fetch_libreoffice_debs` gets the packages, the
pages are read, paired and split by :mod:`deepnet_jax.data.corpora.libreoffice_pages`, and
:class:`LibreOfficeHelp` stores the configs ``de-en`` and ``fr-en`` as
``{"de"|"fr": Text, "en": Text, "page": Text}``, split by page.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import tensorflow_datasets as tfds

from deepnet_jax.common import console
from deepnet_jax.data import fetch
from deepnet_jax.data.corpora import libreoffice_pages
from deepnet_jax.data.corpora.base import (
    CorpusBuilder,
    Dataset,
    DatasetRequest,
    Example,
    log_counts,
    manual_dir_or_none,
)

LIBREOFFICE_VERSION = "4:7.4.7-1+deb12u14"
# Language -> Debian package.
LIBREOFFICE_PACKAGES = {
    "en": "libreoffice-help-en-us",
    "de": "libreoffice-help-de",
    "fr": "libreoffice-help-fr",
}
LIBREOFFICE_URL = "https://packages.debian.org/bookworm/all/{package}/download"
# sha256 of the .deb files this code was checked against (a mismatch is logged, not fatal).
LIBREOFFICE_DEB_SHA256 = {
    "en": "8faa840285734d6cfe1ed25537b48f07e74bd6412e3917bf8e5f8a653f7b3712",
    "de": "00490b63c509ac96f7f212d6a6e40452d3e0d1f97ccf4b824dd5ec4c01e8277f",
    "fr": "c796530d3e95af1ea4d054076682efc8aad2b569ae9513f3d4a776b2df3fd206",
}


def libreoffice_deb(lang: str) -> str:
    """The file name ``apt-get download`` gives the help package of ``lang`` (``:`` -> ``%3a``)."""
    version = LIBREOFFICE_VERSION.replace(":", "%3a")
    return f"{_libreoffice_package(lang)}_{version}_all.deb"


def _libreoffice_package(lang: str) -> str:
    try:
        return LIBREOFFICE_PACKAGES[lang]
    except KeyError:
        raise ValueError(
            f"no LibreOffice help package for language {lang!r} "
            f"(one of: {', '.join(LIBREOFFICE_PACKAGES)})"
        ) from None


def _libreoffice_manual_hint(langs: Sequence[str], folders: Sequence[str]) -> str:
    debs = ", ".join(libreoffice_deb(lang) for lang in langs)
    urls = ", ".join(LIBREOFFICE_URL.format(package=_libreoffice_package(lang)) for lang in langs)
    return (
        f"download {debs} (Debian 12, version {LIBREOFFICE_VERSION}; e.g. from {urls}) "
        f"into {' or '.join(folders)} and re-run"
    )


def _find_libreoffice_deb(folders: Sequence[str], lang: str) -> str | None:
    """The help ``.deb`` of ``lang`` in the first folder holding one: the pinned file name if
    present, else the last ``<package>_*.deb`` in sorted order; None if there is none."""
    for folder in folders:
        exact = os.path.join(folder, libreoffice_deb(lang))
        if os.path.isfile(exact):
            return exact
        debs = sorted(glob.glob(os.path.join(folder, f"{_libreoffice_package(lang)}_*.deb")))
        if debs:
            return debs[-1]
    return None


def fetch_libreoffice_debs(
    download_dir: str, langs: Sequence[str], *, manual_dir: str | None = None
) -> dict[str, str]:
    """Paths ``{lang: .deb}`` of the LibreOffice help packages of ``langs``, fetching as needed.

    For each language, a ``<package>_*.deb`` in ``manual_dir`` or ``download_dir`` (in that
    order; the pinned name ``<package>_4%3a7.4.7-1+deb12u14_all.deb`` preferred) is used as it
    is. The missing ones are fetched together with ``apt-get download <package>=<version>``
    in ``download_dir`` (after a failure: ``apt-get update`` once, then a retry; if the pinned
    version is still not to be had, the mirror's own version, with a warning). Each file's
    sha256 is compared with the one this code was checked against; a mismatch (another
    version) is logged, not fatal.

    Raises:
      DataPreparationError: ``apt-get`` is missing or fails; the one-line message names the
        ``.deb`` files to download and the folders to put them in.
      ValueError: a language without a help package here.
    """
    os.makedirs(download_dir, exist_ok=True)
    folders = [d for d in (manual_dir, download_dir) if d]
    found = {lang: _find_libreoffice_deb(folders, lang) for lang in langs}
    missing = [lang for lang, path in found.items() if path is None]
    if missing:
        hint = _libreoffice_manual_hint(missing, folders)
        specs = [f"{_libreoffice_package(lang)}={LIBREOFFICE_VERSION}" for lang in missing]
        result = fetch.apt_get_download(specs, download_dir, "LibreOffice help", hint)
        if result.returncode != 0:  # the mirror moved on (a Debian point release replaces it)
            console.warn(
                f"LibreOffice help: {LIBREOFFICE_VERSION} is not on the package mirror "
                f"({fetch.last_line(result.stderr)}); fetching the version it has (the pairs may "
                "differ slightly from those documented)"
            )
            specs = [_libreoffice_package(lang) for lang in missing]
            result = fetch.apt_get_download(specs, download_dir, "LibreOffice help", hint)
        for lang in missing:
            found[lang] = _find_libreoffice_deb([download_dir], lang)
        if result.returncode != 0 or None in found.values():
            raise fetch.DataPreparationError(
                f"'{' '.join(result.args)}' failed ({fetch.last_line(result.stderr)}): {hint}"
            )
    paths = {lang: path for lang, path in found.items() if path}
    for lang, path in paths.items():
        console.say(f"LibreOffice help: using {path}")
        fetch.check_sha256(path, LIBREOFFICE_DEB_SHA256[lang])
    return paths


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
        f"Initial release: Debian libreoffice-help-* {LIBREOFFICE_VERSION}; pages "
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
        f"libreoffice-help-en-us={LIBREOFFICE_VERSION} "
        "libreoffice-help-<lang>=...`. "
        f"Without apt-get, download {libreoffice_deb('en')} and "
        f"{libreoffice_deb('de')} (or {libreoffice_deb('fr')}) from "
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
        f"{LIBREOFFICE_VERSION}}}, year = {{2026}}, "
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
            f"{LIBREOFFICE_VERSION}), paired by (page, element id); macOS and "
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
        debs = fetch_libreoffice_debs(
            os.path.join(downloads, "libreoffice_help"), langs, manual_dir=manual
        )
        pages = {lang: _help_pages(debs[lang], lang) for lang in langs}
        pairs, counts = libreoffice_pages.align_help_pages(pages[self.lang], pages["en"])
        log_counts(self.name, f"{self.lang}-en pages of {debs[self.lang]}", counts)
        splits = libreoffice_pages.split_help_pairs(pairs, self.SPLIT_SEED, self.HELD_OUT_FRACTION)
        sizes = {split: len(examples) for split, examples in splits.items()}
        page_counts = {split: len({p for p, _, _ in v}) for split, v in splits.items()}
        log_counts(self.name, "split sizes (pairs)", sizes)
        log_counts(self.name, "split sizes (pages)", page_counts)
        _require_all_splits(self.name, sizes, len(pages["en"]))
        self.info.metadata["counts"] = {"align": counts, "splits": sizes, "pages": page_counts}
        self.info.metadata["source"] = {
            "debian_version": LIBREOFFICE_VERSION,
            "packages": {lang: LIBREOFFICE_PACKAGES[lang] for lang in langs},
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


def _help_pages(deb_path: str, lang: str) -> dict[str, list[libreoffice_pages.HelpBlock]]:
    """``{page: blocks}`` of every help page in one language's ``.deb``."""
    return {
        page: libreoffice_pages.help_page_blocks(html)
        for page, html in libreoffice_pages.iter_libreoffice_pages(deb_path, lang)
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


def _build(request: DatasetRequest, tfds_kwargs: dict[str, Any]) -> tfds.core.DatasetBuilder:
    pair = DATASET.pair(request.source_lang, request.target_lang)
    return LibreOfficeHelp(config="-".join(pair), **tfds_kwargs)  # configs de-en, fr-en


DATASET = Dataset(
    "libreoffice_help",
    "parallel",
    "LibreOffice 7.4 help pages; the languages pick the pair",
    _build,
    languages=(("de", "en"), ("fr", "en")),
)
