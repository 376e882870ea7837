"""The ``libreoffice_help`` corpus on handwritten help pages packed into tiny ``.deb`` files.

The pages imitate the HTML of Debian's ``libreoffice-help-*`` 7.4 packages (ids on ``p`` and
``h*`` elements, ``switchinline`` spans with hidden ``MAC`` cases, inline ``span``/``a``
markup); the ``.deb`` files are real ``ar`` + ``data.tar.xz`` archives, so preparing goes
through the same manual-folder fetch and extraction as the real packages.
"""

from __future__ import annotations

import os

import pytest
import tensorflow_datasets as tfds
from test_data_sources import _ar, _tar

from deepnet_jax.data import DatasetRequest, fetch, registry, sources
from deepnet_jax.data.corpora import base, libreoffice_help, libreoffice_pages
from deepnet_jax.data.fetch import DataPreparationError

tfds.disable_progress_bar()

LANGS = ("en", "de", "fr")


def _html(body: str, lang: str) -> str:
    """A help page around ``body``: head, the navigation with its ``bm_`` ids, the body."""
    return (
        f'<!DOCTYPE html>\n<html lang="{lang}">\n<head><meta charset="utf-8">'
        "<title>Help</title><script>var x = '<p id=\"par_id0\">no</p>';</script></head>\n"
        '<body><header id="TopLeftHeader"><p dir="auto">LibreOffice 7.4 Help</p></header>\n'
        f'<div id="DisplayArea">\n{body}\n<p id="bm_module" dir="auto"></p>'
        '<p id="bm_HID" dir="auto"></p></div></body></html>\n'
    )


def _switch(default: str, mac: str) -> str:
    return (
        '<span id="swlnsystext_1" class="switchinline">'
        f'<span hidden="true" id="MACtext_1" class="MAC"><span class="keycode">{mac}</span>'
        f'</span><span hidden="true" id="defaulttext_1"><span class="keycode">{default}</span>'
        "</span></span>"
    )


# Page "one": every extraction rule. Language -> its translatable blocks' HTML.
ONE = {
    "en": f"""
<h1 id="hd_id1" dir="auto"><a name="x"></a>Inserting
   Tables</h1>
<p id="par_id1" class="paragraph">Use the shortcut {_switch("Ctrl", "Command")}<span
 class="keycode">+F</span> to open <a href="t.html">the <span class="emph">Find</span>
 toolbar</a>.</p>
<p id="par_id2" class="paragraph">  Line one<br>line\ttwo &amp;&nbsp;more </p>
<p id="par_id3">LibreOffice</p>
<p id="par_id4"><span class="emph"> </span></p>
<p id="par_id5">Click OK.</p>
<p class="embedded">Embedded text without an id.</p>
<ol><li><p id="par_id6" class="listitem">Choose <span class="menuitem">Table - Insert</span>.</p>
</li></ol>
<table><tr><td><p id="par_id7" class="tablecontentintable">Cell text</p></td></tr></table>
<span id="swlnappl_2" class="switch"><span hidden="true" id="CALC_2" class="CALC">
<p id="par_id8">Only in Calc.</p></span></span>
<p id="par_id9">English only.</p>
""",
    "de": f"""
<h1 id="hd_id1" dir="auto"><a name="x"></a>Tabellen einfügen</h1>
<p id="par_id1" class="paragraph">Verwenden Sie {_switch("Strg", "Befehl")}+F, um die
<a href="t.html">Suchleiste</a> zu öffnen.</p>
<p id="par_id2" class="paragraph">Zeile eins<br>Zeile zwei &amp; mehr</p>
<p id="par_id3">LibreOffice</p>
<p id="par_id4">Leer</p>
<p id="par_id5">Klicken Sie auf OK.</p>
<ol><li><p id="par_id6" class="listitem">Wählen Sie Tabelle - Einfügen.</p></li></ol>
<table><tr><td><p id="par_id7" class="tablecontentintable">Zellentext</p></td></tr></table>
<p id="par_id8">Nur in Calc.</p>
<p id="par_id10">Nur Deutsch.</p>
""",
    "fr": f"""
<h1 id="hd_id1">Insertion de tableaux</h1>
<p id="par_id1">Utilisez le raccourci {_switch("Ctrl", "Commande")}+F pour ouvrir la barre
Rechercher.</p>
<p id="par_id2">Ligne un<br>ligne deux &amp; plus</p>
<p id="par_id3">LibreOffice</p>
<p id="par_id4">Vide</p>
<p id="par_id5">Cliquez sur OK.</p>
<ol><li><p id="par_id6">Choisissez Tableau - Insérer.</p></li></ol>
<table><tr><td><p id="par_id7">Texte de cellule</p></td></tr></table>
<p id="par_id8">Seulement dans Calc.</p>
<p id="par_id9">Anglais seulement.</p>
""",
}
ONE_EN_BLOCKS = [
    ("hd_id1", "Inserting Tables"),
    ("par_id1", "Use the shortcut Ctrl+F to open the Find toolbar."),
    ("par_id2", "Line one line two & more"),
    ("par_id3", "LibreOffice"),
    ("par_id4", ""),
    ("par_id5", "Click OK."),
    ("par_id6", "Choose Table - Insert."),
    ("par_id7", "Cell text"),
    ("par_id8", "Only in Calc."),
    ("par_id9", "English only."),
]
# Page "two": a repeat of one of page one's pairs.
TWO = {
    "en": '<p id="par_id1">Second page.</p><p id="par_id5">Click OK.</p>',
    "de": '<p id="par_id1">Zweite Seite.</p><p id="par_id5">Klicken Sie auf OK.</p>',
    "fr": '<p id="par_id1">Deuxième page.</p><p id="par_id5">Cliquez sur OK.</p>',
}
# Page "three": a list in another order in each language (sorted by translated name in the
# real pages), with a repeated id (par_r) that is therefore ambiguous.
THREE = {
    "en": '<h2 id="hd_a">Functions</h2><p id="par_x">ABS</p><p id="par_r">Returns the '
    'absolute value.</p><p id="par_y">SIGN</p><p id="par_r">Returns the sign.</p>',
    "de": '<h2 id="hd_a">Funktionen</h2><p id="par_y">VORZEICHEN</p><p id="par_r">Gibt das '
    'Vorzeichen.</p><p id="par_x">BETRAG</p><p id="par_r">Gibt den Betrag zurück.</p>',
    "fr": '<h2 id="hd_a">Fonctions</h2><p id="par_y">SIGNE</p><p id="par_r">Renvoie le '
    'signe.</p><p id="par_x">ABS.</p><p id="par_r">Renvoie la valeur absolue.</p>',
}
HANDWRITTEN = {
    "text/shared/one.html": ONE,
    "text/shared/three.html": THREE,
    "text/shared/two.html": TWO,
}
DE_PAIRS = [
    ("text/shared/one.html", "Tabellen einfügen", "Inserting Tables"),
    (
        "text/shared/one.html",
        "Verwenden Sie Strg+F, um die Suchleiste zu öffnen.",
        "Use the shortcut Ctrl+F to open the Find toolbar.",
    ),
    ("text/shared/one.html", "Zeile eins Zeile zwei & mehr", "Line one line two & more"),
    ("text/shared/one.html", "Klicken Sie auf OK.", "Click OK."),
    ("text/shared/one.html", "Wählen Sie Tabelle - Einfügen.", "Choose Table - Insert."),
    ("text/shared/one.html", "Zellentext", "Cell text"),
    ("text/shared/one.html", "Nur in Calc.", "Only in Calc."),
    ("text/shared/three.html", "Funktionen", "Functions"),
    ("text/shared/three.html", "BETRAG", "ABS"),
    ("text/shared/three.html", "VORZEICHEN", "SIGN"),
    ("text/shared/two.html", "Zweite Seite.", "Second page."),
]
DE_COUNTS = {
    "pages": 3,
    "pages_one_language": 1,
    "blocks_en": 17,
    "blocks_other": 17,
    "unmatched": 2,
    "ambiguous": 2,
    "aligned": 14,
    "empty": 1,
    "untranslated": 1,
    "duplicates": 1,
    "pairs": 11,
}
GENERATED_PAGES = 16
WORDS = {"en": "Sentence", "de": "Satz", "fr": "Phrase"}


def corpus_pages(generated: int = GENERATED_PAGES) -> dict[str, dict[str, str]]:
    """``{lang: {page: html}}``: the handwritten pages plus ``generated`` pages of 2 blocks."""
    pages: dict[str, dict[str, str]] = {lang: {} for lang in LANGS}
    for path, bodies in HANDWRITTEN.items():
        for lang in LANGS:
            pages[lang][path] = _html(bodies[lang], lang)
    for k in range(generated):
        for lang in LANGS:
            body = "".join(f'<p id="par_id{j}">{WORDS[lang]} {k}.{j}.</p>' for j in range(2))
            pages[lang][f"text/gen/page{k:02d}.html"] = _html(body, lang)
    return pages


def make_help_deb(folder: str, lang: str, pages: dict[str, str]) -> str:
    """A ``.deb`` named as ``apt-get download`` names it, holding ``pages`` as the real one."""
    pages_dir = libreoffice_pages.LIBREOFFICE_HELP_DIRS[lang]
    root = f"./{libreoffice_pages.LIBREOFFICE_HELP_ROOT}/{pages_dir}"
    files = {f"{root}/{page}": html.encode("utf-8") for page, html in pages.items()}
    files[f"{root}/contents.js"] = b"var contents = [];"
    files[f"./usr/share/doc/{libreoffice_help.LIBREOFFICE_PACKAGES[lang]}/copyright"] = b"MPL-2.0"
    control = _tar(
        {"./control": f"Package: {libreoffice_help.LIBREOFFICE_PACKAGES[lang]}\n".encode()}, "w:xz"
    )
    deb = _ar(
        [
            ("debian-binary", b"2.0\n"),
            ("control.tar.xz", control),
            ("data.tar.xz", _tar(files, "w:xz")),
        ]
    )
    path = os.path.join(folder, libreoffice_help.libreoffice_deb(lang))
    with open(path, "wb") as f:
        f.write(deb)
    return path


@pytest.fixture
def no_apt(monkeypatch):
    """apt-get is never found (so nothing is downloaded)."""
    monkeypatch.setattr(fetch.shutil, "which", lambda name: None)


def _data_dir(tmp_path, pages: dict[str, dict[str, str]]) -> str:
    """A data_dir whose tfds manual folder holds a help .deb for every language."""
    manual = tmp_path / "data" / "downloads" / "manual"
    manual.mkdir(parents=True)
    for lang in LANGS:
        make_help_deb(str(manual), lang, pages[lang])
    return str(tmp_path / "data")


@pytest.fixture
def help_data_dir(tmp_path, monkeypatch, no_apt):
    """A data_dir with the fixture .debs; a quarter of the pages each for validation and test."""
    monkeypatch.setattr(libreoffice_help.LibreOfficeHelp, "HELD_OUT_FRACTION", 0.25)
    return _data_dir(tmp_path, corpus_pages())


def _blocks(
    lang: str, pages: dict[str, dict[str, str]]
) -> dict[str, list[libreoffice_pages.HelpBlock]]:
    return {page: libreoffice_pages.help_page_blocks(html) for page, html in pages[lang].items()}


# ------------------------------------------------------------------------------------------
# Page parsing, alignment, split
# ------------------------------------------------------------------------------------------


def test_help_page_blocks_rules():
    """Ids pair blocks; MAC cases are skipped; markup flattened; whitespace normalized."""
    assert libreoffice_pages.help_page_blocks(_html(ONE["en"], "en")) == ONE_EN_BLOCKS
    de = dict(libreoffice_pages.help_page_blocks(_html(ONE["de"], "de")))
    assert de["par_id1"] == "Verwenden Sie Strg+F, um die Suchleiste zu öffnen."
    assert "Befehl" not in " ".join(de.values())
    # Unclosed elements at the end of a page still end their block.
    assert libreoffice_pages.help_page_blocks('<p id="a">x <span>y') == [("a", "x y")]


def test_align_help_pages_exact_pairs_and_counts():
    pages = corpus_pages(generated=0)
    english = _blocks("en", pages)
    english["text/shared/en_only.html"] = [("par_id1", "Only here.")]
    pairs, counts = libreoffice_pages.align_help_pages(_blocks("de", pages), english)
    assert pairs == DE_PAIRS
    assert counts == DE_COUNTS
    assert counts["aligned"] == sum(
        counts[k] for k in ("empty", "untranslated", "duplicates", "pairs")
    )
    # French lists the sorted page in another order: unique ids still pair by id.
    fr_pairs, fr_counts = libreoffice_pages.align_help_pages(
        _blocks("fr", pages), _blocks("en", pages)
    )
    assert ("text/shared/three.html", "SIGNE", "SIGN") in fr_pairs
    assert ("text/shared/one.html", "Anglais seulement.", "English only.") in fr_pairs
    assert fr_counts["unmatched"] == 0 and fr_counts["ambiguous"] == 2


def test_split_help_pairs_by_page_and_deterministic():
    pairs, _ = libreoffice_pages.align_help_pages(
        *(_blocks(lang, corpus_pages()) for lang in ("de", "en"))
    )
    splits = libreoffice_pages.split_help_pairs(pairs, seed=0, held_out_fraction=0.25)
    assert splits == libreoffice_pages.split_help_pairs(list(pairs), seed=0, held_out_fraction=0.25)
    assert all(splits[split] for split in base.SPLITS)
    pages = {split: {page for page, _, _ in v} for split, v in splits.items()}
    assert not pages["train"] & pages["validation"]
    assert not pages["train"] & pages["test"]
    assert not pages["validation"] & pages["test"]
    for split, v in splits.items():
        assert all(libreoffice_pages.help_page_split(page, 0, 0.25) == split for page, _, _ in v)
        assert v == [p for p in pairs if p in v]  # input order kept
    assert sum(len(v) for v in splits.values()) == len(pairs)
    other_seed = libreoffice_pages.split_help_pairs(pairs, seed=1, held_out_fraction=0.25)
    assert other_seed != splits
    with pytest.raises(ValueError, match="held_out_fraction"):
        libreoffice_pages.split_help_pairs(pairs, seed=0, held_out_fraction=0.6)


# ------------------------------------------------------------------------------------------
# Fetching
# ------------------------------------------------------------------------------------------


def test_fetch_uses_manual_debs_and_warns_of_a_sha_mismatch(tmp_path, no_apt, capsys):
    manual = tmp_path / "manual"
    manual.mkdir()
    pages = corpus_pages(generated=1)
    deb = make_help_deb(str(manual), "de", pages["de"])
    make_help_deb(str(manual), "en", pages["en"])
    debs = libreoffice_help.fetch_libreoffice_debs(
        str(tmp_path / "dl"), ("de", "en"), manual_dir=str(manual)
    )
    assert debs == {"de": deb, "en": str(manual / libreoffice_help.libreoffice_deb("en"))}
    printed = capsys.readouterr().out.splitlines()  # plain lines, no log-record prefix
    assert f"LibreOffice help: using {deb}" in printed
    warning = [line for line in printed if line.startswith(f"warning: {deb} has sha256 ")]
    assert len(warning) == 1 and "not the 00490b63" in warning[0]  # not the real package
    read = dict(libreoffice_pages.iter_libreoffice_pages(deb, "de"))
    assert read == pages["de"]
    with pytest.raises(DataPreparationError, match=r"no \./usr/share/libreoffice/help/fr/\*\.html"):
        list(libreoffice_pages.iter_libreoffice_pages(deb, "fr"))


def test_fetch_without_apt_get_says_which_debs_and_where(tmp_path, no_apt):
    manual = tmp_path / "manual"
    manual.mkdir()
    make_help_deb(str(manual), "en", corpus_pages(generated=1)["en"])
    with pytest.raises(DataPreparationError) as err:
        libreoffice_help.fetch_libreoffice_debs(
            str(tmp_path / "dl"), ("fr", "en"), manual_dir=str(manual)
        )
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(
        "apt-get not found: download libreoffice-help-fr_4%3a7.4.7-1+deb12u14"
    )
    assert "libreoffice-help-en-us" not in message  # the English .deb is already there
    assert f"into {manual} or {tmp_path / 'dl'}" in message


def _fake_apt_get(tmp_path, monkeypatch, body: str):
    """An ``apt-get`` first on PATH that logs its arguments to the returned file and runs the
    shell ``body`` over its package arguments (``$STORE`` holds the fixture en/de .debs)."""
    store = tmp_path / "store"
    store.mkdir()
    pages = corpus_pages(generated=1)
    for lang in ("en", "de"):
        make_help_deb(str(store), lang, pages[lang])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"
    script = bin_dir / "apt-get"
    script.write_text(
        f'#!/bin/sh\nSTORE="{store}"\necho "$@" >> "{log}"\n[ "$1" = download ] || exit 0\n'
        f'shift\nfor spec in "$@"; do\n{body}done\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_fetch_runs_apt_get_with_the_pinned_version(tmp_path, monkeypatch):
    """A fake apt-get that 'downloads' the fixture .debs named in its arguments."""
    body = '  pkg="${spec%%=*}"\n  cp "$STORE"/"$pkg"_*.deb . || exit 100\n'
    log = _fake_apt_get(tmp_path, monkeypatch, body)
    debs = libreoffice_help.fetch_libreoffice_debs(str(tmp_path / "dl"), ("de", "en"))
    assert sorted(debs) == ["de", "en"]
    assert log.read_text().splitlines() == [
        "download libreoffice-help-de=4:7.4.7-1+deb12u14 libreoffice-help-en-us=4:7.4.7-1+deb12u14"
    ]
    with pytest.raises(
        DataPreparationError, match=r"^'apt-get download libreoffice-help-fr' failed"
    ):
        libreoffice_help.fetch_libreoffice_debs(str(tmp_path / "dl"), ("fr", "en"))


def test_fetch_takes_the_mirrors_version_when_the_pinned_one_is_gone(tmp_path, monkeypatch, capsys):
    """A fake apt-get that refuses every pinned ``<package>=<version>`` (a Debian point release
    replaced it) and serves the packages asked for by name."""
    body = (
        '  case "$spec" in *=*) echo "E: Version not found" >&2; exit 100;; esac\n'
        '  cp "$STORE"/"$spec"_*.deb . || exit 100\n'
    )
    log = _fake_apt_get(tmp_path, monkeypatch, body)
    debs = libreoffice_help.fetch_libreoffice_debs(str(tmp_path / "dl"), ("de", "en"))
    assert sorted(debs) == ["de", "en"]
    assert log.read_text().splitlines()[-1] == "download libreoffice-help-de libreoffice-help-en-us"
    printed = capsys.readouterr().out.splitlines()
    start = "warning: LibreOffice help: 4:7.4.7-1+deb12u14 is not on the package mirror"
    assert any(line.startswith(start) for line in printed), printed


# ------------------------------------------------------------------------------------------
# Builder through sources.prepare / open_split
# ------------------------------------------------------------------------------------------


def _expected(lang: str, split: str) -> list[tuple[str, str, str]]:
    pages = corpus_pages()
    pairs, _ = libreoffice_pages.align_help_pages(_blocks(lang, pages), _blocks("en", pages))
    return libreoffice_pages.split_help_pairs(pairs, 0, 0.25)[split]


def test_builder_directions_pages_and_counts(help_data_dir):
    builder = sources.prepare(DatasetRequest("libreoffice_help", help_data_dir))
    assert builder.info.full_name == "libreoffice_help/de-en/1.0.0"
    counts = builder.info.metadata["counts"]
    assert counts["align"]["pairs"] == DE_COUNTS["pairs"] + 2 * GENERATED_PAGES
    assert counts["align"]["duplicates"] == 1 and counts["align"]["untranslated"] == 1
    assert builder.info.metadata["source"]["debian_version"] == "4:7.4.7-1+deb12u14"
    assert "4:7.4.7-1+deb12u14" in builder.info.description
    assert builder.info.redistribution_info.license == "MPL-2.0"
    for split in sources.SPLITS:
        expected = _expected("de", split)
        assert builder.info.splits[split].num_examples == len(expected) > 0
        records = sources.open_split(DatasetRequest("libreoffice_help", help_data_dir), split)
        assert list(records) == [{"source": de, "target": en} for _, de, en in expected]
        stored = builder.as_data_source(split)
        assert [r["page"].decode() for r in stored] == [page for page, _, _ in expected]
    en_de = sources.open_split(
        DatasetRequest("libreoffice_help", help_data_dir, source_lang="en"), "train"
    )
    de_en = sources.open_split(
        DatasetRequest("libreoffice_help", help_data_dir, target_lang="en"), "train"
    )
    assert en_de[0] == {"source": de_en[0]["target"], "target": de_en[0]["source"]}
    fr_en = sources.open_split(
        DatasetRequest("libreoffice_help", help_data_dir, source_lang="fr"), "test"
    )
    assert list(fr_en) == [{"source": fr, "target": en} for _, fr, en in _expected("fr", "test")]
    fr_dir = os.path.join(help_data_dir, "libreoffice_help", "fr-en", "1.0.0")
    assert os.path.isdir(fr_dir)
    en_fr = sources.open_split(
        DatasetRequest("libreoffice_help", help_data_dir, target_lang="fr"), "test"
    )
    assert en_fr[0] == {"source": fr_en[0]["target"], "target": fr_en[0]["source"]}


@pytest.mark.parametrize(
    ("source_lang", "target_lang"), [("de", "fr"), ("it", "en"), ("", "it"), ("en", "en")]
)
def test_bad_language_pairs(source_lang, target_lang):
    with pytest.raises(ValueError) as err:
        registry.check(
            DatasetRequest("libreoffice_help", source_lang=source_lang, target_lang=target_lang)
        )
    message = str(err.value)
    assert "\n" not in message
    if source_lang == target_lang:
        assert message == "data.source_lang and data.target_lang are both 'en'"
    else:
        assert message == (
            f"data.source_lang={source_lang!r} and data.target_lang={target_lang!r}: "
            "libreoffice_help has the language pairs de-en, fr-en (either direction)"
        )
    dataset = registry.get("libreoffice_help")  # the pair names the builder's config
    assert dataset.pair("en", "fr") == ("fr", "en")
    assert dataset.pair("en", "") == dataset.pair("", "") == ("de", "en")


def test_empty_split_is_an_error_and_nothing_is_half_written(tmp_path, no_apt):
    pages = {
        lang: {"text/shared/one.html": corpus_pages(0)[lang]["text/shared/one.html"]}
        for lang in LANGS
    }
    data_dir = _data_dir(tmp_path, pages)
    with pytest.raises(DataPreparationError) as err:
        sources.prepare(DatasetRequest("libreoffice_help", data_dir, source_lang="de"))
    message = str(err.value)
    assert "\n" not in message
    assert "would be empty" in message and "from 1 pages" in message
    config_dir = os.path.join(data_dir, "libreoffice_help", "de-en")
    assert not os.path.exists(config_dir) or os.listdir(config_dir) == []
    assert not libreoffice_help.LibreOfficeHelp(config="de-en", data_dir=data_dir).is_prepared()


def test_prepare_without_apt_get_or_debs_is_one_line(tmp_path, no_apt):
    data_dir = str(tmp_path / "data")
    with pytest.raises(DataPreparationError) as err:
        sources.prepare(
            DatasetRequest("libreoffice_help", data_dir, source_lang="fr", target_lang="en")
        )
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(
        "apt-get not found: download libreoffice-help-fr_4%3a7.4.7-1+deb12u14_all.deb, "
        "libreoffice-help-en-us_4%3a7.4.7-1+deb12u14_all.deb (Debian 12"
    )
    manual = os.path.join(data_dir, "downloads", "manual")
    assert f"into {manual} or {os.path.join(data_dir, 'downloads', 'libreoffice_help')}" in message
    assert not os.path.exists(os.path.join(data_dir, "libreoffice_help", "fr-en", "1.0.0"))
