"""LibreOffice help's pages: read out of a help package, their text blocks, paired across
languages, split by page.

The HTML help pages are ``usr/share/libreoffice/help/<folder>/**.html`` of the Debian 12
packages ``libreoffice-help-*`` (:mod:`deepnet_jax.data.corpora.libreoffice_help` fetches
them): :func:`iter_libreoffice_pages` reads the pages out of one ``.deb`` without ``dpkg``,
:func:`help_page_blocks` reads the id-carrying text blocks of a page, :func:`align_help_pages`
pairs two languages by (page, block id) and :func:`split_help_pairs` splits the pairs by page.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from html.parser import HTMLParser

from deepnet_jax.data import fetch
from deepnet_jax.data.corpora.base import SPLITS

# Language -> the folder of its pages under LIBREOFFICE_HELP_ROOT.
LIBREOFFICE_HELP_DIRS = {"en": "en-US", "de": "de", "fr": "fr"}
LIBREOFFICE_HELP_ROOT = "usr/share/libreoffice/help"


def iter_libreoffice_pages(deb_path: str, lang: str) -> Iterator[tuple[str, str]]:
    """``(page, html)`` of every help page in the help ``.deb`` of ``lang``.

    ``page`` is the path under ``usr/share/libreoffice/help/<folder>/`` (the folder is
    ``en-US`` for English, the language code otherwise), e.g. ``text/swriter/main0000.html``:
    the same path names the same page in every language. Pages come in archive order.

    Raises:
      DataPreparationError: the archive has no pages for ``lang`` (e.g. the ``.deb`` of another
        language), or a page is not UTF-8.
    """
    folder = f"{LIBREOFFICE_HELP_ROOT}/{LIBREOFFICE_HELP_DIRS[lang]}"
    count = 0
    for page, data in fetch.iter_deb_files(deb_path, folder, ".html"):
        try:
            html = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise fetch.DataPreparationError(
                f"{deb_path}: {folder}/{page} is not UTF-8 ({e})"
            ) from None
        count += 1
        yield page, html
    if not count:
        raise fetch.DataPreparationError(f"{deb_path}: no ./{folder}/*.html pages in its data.tar")


# Elements whose id makes them a translatable block (ids are shared by every language).
HELP_BLOCK_TAGS = frozenset({"p", "h", "h1", "h2", "h3", "h4", "h5", "h6", "li", "td", "th"})
_VOID_TAGS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
)
_NO_TEXT_TAGS = frozenset({"script", "style", "template"})

HelpBlock = tuple[str, str]  # (element id, text)
HelpPair = tuple[str, str, str]  # (page, other-language text, English text)


def normalize_space(text: str) -> str:
    """``text`` with every run of whitespace (Unicode, so also no-break spaces) turned into
    one space and the ends stripped."""
    return " ".join(text.split())


class _HelpPageParser(HTMLParser):
    """Collects the text blocks of one help page; the rules are in :func:`help_page_blocks`."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[HelpBlock] = []
        self._stack: list[tuple[str, str]] = []  # (tag, role): role "block", "skip" or ""
        self._block_id: str | None = None
        self._text: list[str] = []
        self._skip = 0  # open elements whose text is left out (inside the current block)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID_TAGS:
            if tag == "br":
                self.handle_data(" ")
            return
        attributes = dict(attrs)
        block_id = attributes.get("id") or ""
        role = ""
        if tag in _NO_TEXT_TAGS or (
            self._block_id is not None and tag == "span" and _is_platform_case(attributes)
        ):
            role = "skip"
            self._skip += 1
        elif self._block_id is None and _is_block(tag, block_id):
            # (a block nested in a block stays part of the outer one)
            role, self._block_id, self._text = "block", block_id, []
        self._stack.append((tag, role))

    def handle_endtag(self, tag: str) -> None:
        if all(open_tag != tag for open_tag, _ in self._stack):
            return  # a stray end tag
        while self._stack:
            open_tag, role = self._stack.pop()
            if role == "skip":
                self._skip -= 1
            elif role == "block":
                self.blocks.append((self._block_id or "", normalize_space("".join(self._text))))
                self._block_id = None
            if open_tag == tag:
                return

    def handle_data(self, data: str) -> None:
        if self._block_id is not None and not self._skip:
            self._text.append(data)

    def close(self) -> None:
        """Finish parsing; elements left open at the end of the page are closed."""
        super().close()
        while self._stack:
            self.handle_endtag(self._stack[-1][0])


def _is_block(tag: str, block_id: str) -> bool:
    return tag in HELP_BLOCK_TAGS and bool(block_id) and not block_id.startswith("bm_")


def _is_platform_case(attributes: Mapping[str, str | None]) -> bool:
    """A hidden ``<span class="MAC|WIN|UNIX|CALC|WRITER|…">``: one case of a ``switchinline``.

    The default case of a switch is a hidden span without a class; it is the one kept.
    """
    return "hidden" in attributes and bool(attributes.get("class"))


def help_page_blocks(html: str) -> list[HelpBlock]:
    """``(id, text)`` of every translatable block of one LibreOffice help page, in page order.

    Rules:

    1. A block is a ``p``, ``h``, ``h1``–``h6``, ``li``, ``td`` or ``th`` element with an ``id``
       (``par_id…``, ``hd_id…``, ``N…`` …) other than the empty ``bm_…`` bookmarks. A block
       inside a block is part of the outer one (none occur in the 7.4 pages).
    2. Its text is the text of everything inside it: inline markup (``span``, ``a``, ``code``
       …) is flattened, ``<br>`` is a space, character references are decoded.
    3. Inside a block, the cases of a ``<span class="switchinline">`` that are hidden spans with
       a class (``MAC``, ``WIN``, ``UNIX``, ``CALC``, ``WRITER`` …) are left out, so only the
       default case (a hidden span without a class) remains: "Tools - Options", never
       "LibreOffice - Preferences" for macOS as well. Whole paragraphs inside the cases of a
       block-level ``<span class="switch">`` are blocks of their own and kept.
    4. Whitespace is normalized (:func:`normalize_space`); blocks may be empty.

    Ids may repeat within a page (embedded sections, code listings).
    """
    parser = _HelpPageParser()
    parser.feed(html)
    parser.close()
    return parser.blocks


def _page_block_pairs(
    other: Sequence[HelpBlock], english: Sequence[HelpBlock], counts: Counter[str]
) -> list[tuple[str, str]]:
    """``(other, english)`` texts of one page's blocks paired by id (English order).

    When both languages list the same ids in the same order (every page but a few sorted
    lists), the n-th block pairs with the n-th. Otherwise an id pairs with the same id, and a
    repeated id is ambiguous: its blocks are dropped and counted (``ambiguous``). Ids on one
    side only are counted as ``unmatched``.
    """
    if [i for i, _ in other] == [i for i, _ in english]:
        return [(o, e) for (_, o), (_, e) in zip(other, english, strict=True)]
    other_ids, english_ids = Counter(i for i, _ in other), Counter(i for i, _ in english)
    other_text = dict(other)
    pairs: list[tuple[str, str]] = []
    for block_id, text in english:
        if block_id not in other_ids:
            counts["unmatched"] += 1
        elif other_ids[block_id] > 1 or english_ids[block_id] > 1:
            counts["ambiguous"] += 1
        else:
            pairs.append((other_text[block_id], text))
    counts["unmatched"] += sum(n for i, n in other_ids.items() if i not in english_ids)
    return pairs


def align_help_pages(
    other: Mapping[str, Sequence[HelpBlock]], english: Mapping[str, Sequence[HelpBlock]]
) -> tuple[list[HelpPair], dict[str, int]]:
    """Translation pairs ``(page, other text, English text)`` of two languages' help pages.

    ``other`` and ``english`` map a page's relative path to its :func:`help_page_blocks`.
    Pages are walked in sorted path order and blocks paired by id within a page
    (:func:`_page_block_pairs`). Then pairs are dropped, in this order, when a side is empty
    (``empty``), when both sides are the same text (``untranslated``: names, code, formulas)
    and when the same ``(other, English)`` text pair was kept before (``duplicates``: the
    first, by page order, is kept). Returns the pairs and the counts: ``pages`` (in both
    languages), ``pages_one_language``, ``blocks_en``, ``blocks_other``, ``unmatched``,
    ``ambiguous``, ``aligned`` (block pairs found), ``empty``, ``untranslated``,
    ``duplicates`` and ``pairs`` (kept; ``aligned`` is the sum of the last four).
    """
    keys = ("pages", "pages_one_language", "blocks_en", "blocks_other", "unmatched")
    keys += ("ambiguous", "aligned", "empty", "untranslated", "duplicates", "pairs")
    counts: Counter[str] = Counter(dict.fromkeys(keys, 0))
    counts["pages_one_language"] = len(set(other) ^ set(english))
    seen: set[tuple[str, str]] = set()
    out: list[HelpPair] = []
    for page in sorted(set(other) & set(english)):
        counts["pages"] += 1
        counts["blocks_en"] += len(english[page])
        counts["blocks_other"] += len(other[page])
        for other_text, english_text in _page_block_pairs(other[page], english[page], counts):
            counts["aligned"] += 1
            if not other_text or not english_text:
                counts["empty"] += 1
            elif other_text == english_text:
                counts["untranslated"] += 1
            elif (other_text, english_text) in seen:
                counts["duplicates"] += 1
            else:
                seen.add((other_text, english_text))
                out.append((page, other_text, english_text))
    counts["pairs"] = len(out)
    return out, {key: counts[key] for key in keys}


def help_page_split(page: str, seed: int, held_out_fraction: float) -> str:
    """The split of a help page: ``u`` = the first 64 bits of ``sha256(f"{seed}:{page}")`` as
    a fraction of 2**64; ``u < f`` is validation, ``u < 2f`` test, the rest train."""
    digest = hashlib.sha256(f"{seed}:{page}".encode()).hexdigest()
    u = int(digest[:16], 16) / 2**64
    if u < held_out_fraction:
        return "validation"
    return "test" if u < 2 * held_out_fraction else "train"


def split_help_pairs(
    pairs: Iterable[HelpPair], seed: int, held_out_fraction: float
) -> dict[str, list[HelpPair]]:
    """Pairs split by help page (:func:`help_page_split`), keeping their order within a split.

    Every pair of a page goes to the same split, so no page of the validation or test split
    is trained on. Deterministic: the split depends only on the page path, ``seed`` and
    ``held_out_fraction``.
    """
    if not 0.0 <= held_out_fraction <= 0.5:
        raise ValueError(f"held_out_fraction={held_out_fraction} must be in [0, 0.5]")
    out: dict[str, list[HelpPair]] = {split: [] for split in SPLITS}
    for pair in pairs:
        out[help_page_split(pair[0], seed, held_out_fraction)].append(pair)
    return out
