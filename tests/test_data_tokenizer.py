"""SentencePiece tokenizers: reserved ids, exact round trips, caching, corrupt-cache rebuild."""

import os
import pickle
import random

import pytest

from deepnet_jax.common import tokens
from deepnet_jax.data import tokenizer as tok

# Handwritten text (no corpus committed): enough distinct words for a few hundred pieces.
WORDS = str.split(
    "der die das und ist nicht ein eine zu mit auf für von sie er wir ihr Haus Baum Wasser "
    "Stadt Zeit Jahr Hand Auge Weg Tag Nacht Licht Straße über groß klein schön heute morgen "
    "the a and is not to with on for from she he we house tree water city time year hand eye"
)
SENTENCES = [" ".join(random.Random(i).choices(WORDS, k=3 + i % 9)) + "." for i in range(600)]
assert len(set(SENTENCES)) == len(SENTENCES)


def _options(model_type="bpe", vocab=320):
    return tok.TokenizerOptions(model_type=model_type, vocab_size=vocab)


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_round_trip_and_reserved_ids(model_type):
    t = tok.train(_options(model_type), SENTENCES)
    assert t.vocab_size == 320
    pieces = [t.id_to_piece(i) for i in range(5)]
    assert pieces == ["<pad>", "<s>", "</s>", "<unk>", "<mask>"]
    for text in [*SENTENCES[:20], "Größe… „Zitat“ ☃  two  spaces", "ünknöwn wörds ÿ"]:
        ids = t.encode(text)
        assert ids.dtype.name == "int32" and ids.min() >= 3
        assert tokens.UNK_ID not in ids  # byte fallback covers unseen characters
        assert t.decode(ids) == text
    assert t.decode([*t.encode("Haus"), tokens.EOS_ID, *t.encode("Baum")]) == "Haus"
    clone = pickle.loads(pickle.dumps(t))
    assert (clone.encode(SENTENCES[3]) == t.encode(SENTENCES[3])).all()


def test_char_model_is_the_character_set():
    t = tok.train(_options("char", 500), SENTENCES)
    chars = set("".join(SENTENCES))
    assert t.vocab_size == 5 + len(chars)  # reserved ids + one piece per character
    text = SENTENCES[5]
    ids = t.encode(text)
    assert len(ids) == len(text) and t.decode(ids) == text


def test_training_is_deterministic():
    a = tok.train(_options(), SENTENCES)
    b = tok.train(_options(), SENTENCES)
    assert a.model_proto == b.model_proto


def test_cache_reuse_and_corrupt_rebuild(tmp_path):
    calls = []

    def sentences():
        calls.append(1)
        return SENTENCES

    t1, path = tok.load_or_train(_options(), "toy/1.0.0", str(tmp_path), sentences)
    t2, path2 = tok.load_or_train(_options(), "toy/1.0.0", str(tmp_path), sentences)
    assert path == path2 and len(calls) == 1 and t1.model_proto == t2.model_proto
    assert os.path.dirname(path) == str(tmp_path / "tokenizers")
    # A different option is a different cache entry.
    _, path3 = tok.load_or_train(_options(vocab=300), "toy/1.0.0", str(tmp_path), sentences)
    assert path3 != path and len(calls) == 2
    for corruption in (b"", b"not a sentencepiece model"):
        with open(path, "wb") as f:
            f.write(corruption)
        t4, _ = tok.load_or_train(_options(), "toy/1.0.0", str(tmp_path), sentences)
        assert t4.model_proto == t1.model_proto
    os.remove(path)
    t5, _ = tok.load_or_train(_options(), "toy/1.0.0", str(tmp_path), sentences)
    assert t5.model_proto == t1.model_proto and len(calls) == 5
    assert not [p for p in os.listdir(tmp_path / "tokenizers") if p.endswith(".tmp")]


@pytest.mark.parametrize(
    "options, match",
    [
        (tok.TokenizerOptions(model_type="wordpiece"), r"data\.tokenizer='wordpiece'"),
        (tok.TokenizerOptions(vocab_size=100), r"data\.vocab_size=100 must be >= 262"),
        (tok.TokenizerOptions(vocab_size=300.0), r"data\.vocab_size=300\.0 must be an integer"),
        (tok.TokenizerOptions(character_coverage=0.5), r"data\.character_coverage=0\.5"),
    ],
)
def test_bad_options(options, match):
    with pytest.raises(ValueError, match=match):
        tok.train(options, SENTENCES)


def test_vocab_too_large_for_corpus_is_one_line():
    with pytest.raises(ValueError, match=r"data\.vocab_size=50000: Vocabulary size too high") as e:
        tok.train(_options(vocab=50000), SENTENCES)
    assert "\n" not in str(e.value)


def test_errors_from_the_sentence_source_pass_through():
    def broken():
        yield from SENTENCES[:10]
        raise KeyError("record 10 is missing")

    with pytest.raises(KeyError, match="record 10 is missing"):
        tok.train(_options(), broken())


def test_char_vocab_below_the_character_set_is_an_error():
    chars = len(set("".join(SENTENCES)))
    with pytest.raises(ValueError, match=rf"data\.vocab_size=20 is below the {chars} characters"):
        tok.train(_options("char", 20), SENTENCES)
