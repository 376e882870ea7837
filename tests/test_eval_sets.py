"""Each evaluation figure names its set: the loss side scores every pair (the long ones cut to
data.max_len, as the decoder's input is), BLEU/chrF come with their sentence count and an
unseen-source figure, and decoding shows a progress bar.

The corpus is tiny and character-tokenized: one validation and one test pair are longer than
``data.max_len``, and one test source is a training source, verbatim.
"""

import json

import numpy as np
import pytest
from test_data_pipeline import _train_config
from test_data_tokenizer import SENTENCES

from deepnet_jax.common.tokens import BOS_ID, EOS_ID
from deepnet_jax.data import pipeline
from deepnet_jax.decoding import scoring
from deepnet_jax.training import train

MAX_LEN = 64  # every SENTENCES entry is at most 61 characters (+ EOS)
LONG = " ".join(SENTENCES[200:205])  # about 160 characters: longer than MAX_LEN
REPEATED = SENTENCES[5]  # a training source, again in the test split
SPLITS = {
    "train": SENTENCES[:120],
    "valid": [*SENTENCES[120:130], LONG],
    "test": [REPEATED, LONG, *SENTENCES[130:136]],
}


def _reverse(sentence: str) -> str:
    return " ".join(reversed(sentence.rstrip(".").split())) + "."


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval_sets")
    folder = root / "toy"
    folder.mkdir()
    for split, sources in SPLITS.items():
        targets = [_reverse(s) for s in sources]
        (folder / f"{split}.de").write_text("\n".join(sources) + "\n", encoding="utf-8")
        (folder / f"{split}.en").write_text("\n".join(targets) + "\n", encoding="utf-8")
    return root


def _data_fields() -> dict:
    return {"tokenizer": "char", "vocab_size": 200, "max_len": MAX_LEN, "batch_size": 4}


def test_eval_examples_keep_every_pair_cutting_the_long_one(corpus):
    options = pipeline.DataOptions(
        dataset="local_parallel",
        data_dir=str(corpus / "data"),
        source_dir=str(corpus / "toy"),
        src_ext="de",
        tgt_ext="en",
        **_data_fields(),
    )
    data = pipeline.DataPipeline(options, "encdec")
    assert len(data.examples("test")) == 7  # training-style: the long pair dropped
    scored = data.eval_examples("test")
    assert len(scored) == 8 and scored.truncated == 1
    long = data.tokenizer.encode(LONG)
    cut = [e for e in scored.examples if len(e["targets"]) == MAX_LEN]
    assert len(cut) == 1
    # the source as the decoder reads it for BLEU; the target's first MAX_LEN positions
    pairs = data.translation_set("test")
    np.testing.assert_array_equal(cut[0]["src"], pairs.source_ids[1])
    np.testing.assert_array_equal(cut[0]["src"], [*long[: MAX_LEN - 1], EOS_ID])
    target = data.tokenizer.encode(_reverse(LONG))
    np.testing.assert_array_equal(cut[0]["inputs"], [BOS_ID, *target[: MAX_LEN - 1]])
    np.testing.assert_array_equal(cut[0]["targets"], target[:MAX_LEN])
    rows = sum(int((b["weights"].sum(axis=1) > 0).sum()) for b in data.eval_batches("test"))
    assert rows == 8
    assert pairs.seen == [True] + [False] * 7


def test_unseen_scores_are_the_scores_of_the_unseen_subset():
    hyps = ["the house is small.", "a tree.", "it is late today."]
    refs = ["the house is small.", "a big tree.", "it is late."]
    got = scoring.unseen_scores(hyps, refs, [True, False, False])
    want = scoring.corpus_scores(hyps[1:], refs[1:])
    assert got == {"unseen_sentences": 2, "unseen_bleu": want["bleu"], "unseen_chrf": want["chrf"]}
    assert scoring.corpus_scores(hyps, refs)["bleu"] != want["bleu"]
    assert scoring.unseen_scores(hyps, refs, [True] * 3) == {"unseen_sentences": 0}


def test_eval_json_counts_the_pairs_behind_each_figure(corpus, tmp_path, capsys):
    c = _train_config(corpus, **_data_fields())
    c.model.vocab_size, c.model.max_len = 0, 0  # the char tokenizer's size, data.max_len
    m = c.model
    m.num_encoder_layers = m.num_decoder_layers = 1
    c.total_steps, c.log_every, c.eval_every, c.checkpoint_every = 2, 1, 0, 0
    c.final_split = "test"
    c.decode.beam_size, c.decode.eval_sentences, c.decode.num_samples = 2, 4, 0
    c.decode.max_len_a, c.decode.max_len_b = 0.0, 4  # short outputs: a fast search
    train.run(c, str(tmp_path))
    saved = json.loads((tmp_path / "eval.json").read_text())
    counts = {k: v for k, v in saved.items() if k.endswith(("_examples", "_truncated", "_dropped"))}
    assert counts == {
        "eval_loss_examples": 11,  # every validation pair, the long one cut
        "eval_loss_truncated": 1,
        "eval_loss_dropped": 0,
        "test_loss_examples": 8,
        "test_loss_truncated": 1,
        "test_loss_dropped": 0,
    }
    assert saved["eval_bleu_sentences"] == 4 and saved["eval_unseen_sentences"] == 4
    assert saved["test_sentences"] == 8 and saved["test_truncated_sources"] == 1
    assert saved["test_unseen_sentences"] == 7  # the repeated source left out
    assert 0 <= saved["test_unseen_bleu"] <= 100 and 0 <= saved["test_unseen_chrf"] <= 100

    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert any(
        line.startswith("test: loss ") and line.endswith(" nats on 8 pairs (1 cut to 64 tokens)")
        for line in lines
    ), lines
    bleu = [line for line in lines if line.startswith("test: beam 2 on all 8 sentences")]
    assert len(bleu) == 1 and "(1 source cut to 63 pieces)" in bleu[0]
    assert "on the 7 whose source is not in the training split: BLEU " in bleu[0]
    # the decoding progress bars: sentences done and the rate
    frames = err.replace("\r", "\n").splitlines()
    assert any(f.startswith("validation, greedy: 100%") and "4/4" in f for f in frames), err
    assert any(f.startswith("test, beam 2: 100%") and "8/8" in f for f in frames), err
    assert any("sent/s" in f for f in frames if f.startswith("test, beam 2"))
