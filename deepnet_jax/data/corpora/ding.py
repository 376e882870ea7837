"""``ding_de_en``: German-English example sentences of the Ding dictionary.

The source is ``usr/share/trans/de-en`` of the Debian package ``trans-de-en`` 1.9-6 (GPL-2+;
fetched at prepare time with ``apt-get download``, never committed): one entry a line,
``German :: English``; both sides hold the same number of sub-entries separated by ``" | "``;
lines starting with ``#`` are comments. :func:`fetch_ding_file` gets the file,
:func:`parse_ding` keeps the aligned sub-entries that are sentences, :func:`split_ding` splits
them by German sentence and :class:`DingDeEn` stores them as ``{"de": Text, "en": Text}``.
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Iterable, Iterator
from typing import Any

import tensorflow_datasets as tfds

from deepnet_jax.common import console
from deepnet_jax.data import fetch
from deepnet_jax.data.corpora.base import (
    SPLITS,
    CorpusBuilder,
    Dataset,
    DatasetRequest,
    Example,
    log_counts,
    manual_dir_or_none,
)

DING_PACKAGE = "trans-de-en"
DING_VERSION = "1.9-6"
DING_DEB = f"{DING_PACKAGE}_{DING_VERSION}_all.deb"
DING_MEMBER = "usr/share/trans/de-en"
DING_FILE = "de-en"
DING_URL = "https://packages.debian.org/bookworm/all/trans-de-en/download"
# sha256 of the package this code was checked against (a mismatch is logged, not fatal).
DING_DEB_SHA256 = "45f6b4cf1c434776fba6811d7bc522efabb5425c43ba8afd0e289bf9e2e53df4"

SENTENCE_END = (".", "!", "?")
MIN_WORDS = 3


def _ding_manual_hint(download_dir: str) -> str:
    return (
        f"download {DING_DEB} from {DING_URL} (or the '{DING_FILE}' file inside it, "
        f"{DING_MEMBER}) into {download_dir} and re-run"
    )


def fetch_ding_file(download_dir: str, *, manual_dir: str | None = None) -> str:
    """Path of the extracted Ding ``de-en`` text file, fetching it if needed.

    Order: (1) a ``de-en`` file in ``manual_dir`` or ``download_dir`` is used as is; (2) else a
    ``trans-de-en_*.deb`` there is extracted to ``download_dir/de-en``; (3) else, if
    ``apt-get`` is on ``PATH``, ``apt-get download trans-de-en=1.9-6`` runs in
    ``download_dir`` (after a failure: ``apt-get update`` once, then a retry) and the ``.deb``
    is extracted; (4) else :class:`DataPreparationError` says how to provide the file by hand.
    The extracted file is written atomically (temporary file + ``os.replace``).
    """
    os.makedirs(download_dir, exist_ok=True)
    folders = [d for d in (manual_dir, download_dir) if d]
    for folder in folders:
        path = os.path.join(folder, DING_FILE)
        if os.path.isfile(path):
            console.say(f"Ding: using {path}")
            return path
    for folder in folders:
        debs = sorted(glob.glob(os.path.join(folder, f"{DING_PACKAGE}_*.deb")))
        if debs:
            return _extract_ding(debs[-1], download_dir)

    hint = _ding_manual_hint(download_dir)
    result = fetch.apt_get_download([f"{DING_PACKAGE}={DING_VERSION}"], download_dir, "Ding", hint)
    debs = sorted(glob.glob(os.path.join(download_dir, f"{DING_PACKAGE}_*.deb")))
    if result.returncode != 0 or not debs:
        raise fetch.DataPreparationError(
            f"'{' '.join(result.args)}' failed ({fetch.last_line(result.stderr)}): {hint}"
        )
    return _extract_ding(debs[-1], download_dir)


def _extract_ding(deb_path: str, download_dir: str) -> str:
    console.say(f"Ding: extracting {DING_MEMBER} from {deb_path}")
    if os.path.basename(deb_path) == DING_DEB:
        fetch.check_sha256(deb_path, DING_DEB_SHA256)
    else:
        console.warn(f"Ding: {deb_path} is not {DING_DEB}; using it anyway")
    out = os.path.join(download_dir, DING_FILE)
    fetch.write_atomic(out, fetch.read_deb_file(deb_path, DING_MEMBER))
    return out


def _is_sentence(text: str) -> bool:
    return text.endswith(SENTENCE_END) and len(text.split()) >= MIN_WORDS


def parse_ding_with_counts(text: str) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """:func:`parse_ding` plus a dict of counts.

    Counts: ``lines`` (all lines), ``comment_or_invalid`` (lines starting with ``#`` or lacking
    ``" :: "``), ``mismatched`` (entry lines whose German and English sides have different
    numbers of ``" | "`` sub-entries; skipped whole), ``sub_entries`` (aligned sub-entry pairs
    looked at), ``not_sentences`` (pairs dropped by the sentence filter), ``duplicates`` (exact
    repeats dropped) and ``pairs`` (kept).
    """
    counts = dict.fromkeys(
        (
            "lines",
            "comment_or_invalid",
            "mismatched",
            "sub_entries",
            "not_sentences",
            "duplicates",
            "pairs",
        ),
        0,
    )
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str]] = []
    for line in text.splitlines():
        counts["lines"] += 1
        if line.startswith("#") or " :: " not in line:
            counts["comment_or_invalid"] += 1
            continue
        german, english = line.split(" :: ", 1)
        de_parts, en_parts = german.split(" | "), english.split(" | ")
        if len(de_parts) != len(en_parts):
            counts["mismatched"] += 1
            continue
        for de, en in zip(de_parts, en_parts, strict=True):
            counts["sub_entries"] += 1
            de, en = de.strip(), en.strip()
            if not (_is_sentence(de) and _is_sentence(en)):
                counts["not_sentences"] += 1
                continue
            if (de, en) in seen:
                counts["duplicates"] += 1
                continue
            seen.add((de, en))
            pairs.append((de, en))
    counts["pairs"] = len(pairs)
    return pairs, counts


def parse_ding(text: str) -> list[tuple[str, str]]:
    """Sentence pairs ``(german, english)`` from the text of the Ding ``de-en`` file.

    Rules, in order: skip lines starting with ``#`` or lacking ``" :: "``; split the line at the
    first ``" :: "`` into German and English; split each side at ``" | "`` and skip the line if
    the two sides have different numbers of sub-entries; for each aligned sub-entry pair, strip
    whitespace and keep it when BOTH sides end in ``.``, ``!`` or ``?`` and have at least
    three whitespace-separated words; drop exact repeats of a pair, keeping the first. Order is
    file order. On ``trans-de-en`` 1.9-6 this gives 18,806 pairs.
    """
    return parse_ding_with_counts(text)[0]


def split_ding(
    pairs: Iterable[tuple[str, str]], held_out: int = 1000
) -> dict[str, list[tuple[str, str]]]:
    """Deterministic train/validation/test split of Ding pairs, disjoint by German sentence.

    Pairs are grouped by German sentence (groups keep their pairs' input order); groups are
    walked in the order of ``sha256(german.encode("utf-8")).hexdigest()``; a group goes to
    ``validation`` if it still fits within ``held_out`` pairs, else to ``test`` if it fits
    there, else to ``train``. Within a split, pairs are in walk order. No random number
    generator is involved, so the split is the same on every machine and library version.
    """
    if held_out < 0:
        raise ValueError(f"held_out={held_out} must be >= 0")
    groups: dict[str, list[tuple[str, str]]] = {}
    for de, en in pairs:
        groups.setdefault(de, []).append((de, en))
    order = sorted(groups, key=lambda de: hashlib.sha256(de.encode("utf-8")).hexdigest())
    out: dict[str, list[tuple[str, str]]] = {split: [] for split in SPLITS}
    for de in order:
        group = groups[de]
        if len(out["validation"]) + len(group) <= held_out:
            out["validation"].extend(group)
        elif len(out["test"]) + len(group) <= held_out:
            out["test"].extend(group)
        else:
            out["train"].extend(group)
    return out


class DingDeEn(CorpusBuilder):
    """German-English sentence pairs from the Ding dictionary (Debian ``trans-de-en`` 1.9-6)."""

    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        f"Normally nothing to do: the builder runs `apt-get download "
        f"{DING_PACKAGE}={DING_VERSION}`. Without apt-get, download "
        f"{DING_DEB} from {DING_URL} (or just the file {DING_MEMBER} "
        f"inside it, named '{DING_FILE}') into <data_dir>/downloads/manual/ or "
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
        path = fetch_ding_file(
            os.fspath(dl_manager.download_dir / "ding_de_en"),
            manual_dir=manual_dir_or_none(dl_manager),
        )
        with open(path, encoding="utf-8") as f:
            pairs, counts = parse_ding_with_counts(f.read())
        log_counts(self.name, f"parsed {path}", counts)
        splits = split_ding(pairs, held_out=self.HELD_OUT)
        sizes = {split: len(examples) for split, examples in splits.items()}
        log_counts(self.name, "split sizes", sizes)
        self.info.metadata["counts"] = {"parse": counts, "splits": sizes}
        return {
            split: self._generate_examples([{"de": de, "en": en} for de, en in examples])
            for split, examples in splits.items()
        }


def _build(request: DatasetRequest, tfds_kwargs: dict[str, Any]) -> tfds.core.DatasetBuilder:
    del request  # one corpus, one config
    return DingDeEn(**tfds_kwargs)


DATASET = Dataset(
    "ding_de_en",
    "parallel",
    "Ding dictionary example sentences",
    _build,
    languages=(("de", "en"),),
)
