"""Examples per task, MLM masking, fixed-shape batch plans and token budgets."""

import numpy as np
import pytest
from test_data_tokenizer import SENTENCES

from deepnet_jax.common import tokens
from deepnet_jax.data import batching, examples
from deepnet_jax.data import tokenizer as tok


@pytest.fixture(scope="module")
def tokenizer():
    return tok.train(tok.TokenizerOptions("bpe", 320), SENTENCES)


def test_translation_layout_and_length_filter(tokenizer):
    records = [
        {"source": "das Haus ist groß.", "target": "the house is big."},
        {"source": "", "target": "empty source."},
        {"source": " ".join(["Wasser"] * 40), "target": "water."},
    ]
    out = examples.tokenize(records, tokenizer, "translation", max_len=16)
    assert len(out) == 1 and out.dropped == {"too_long": 1, "empty": 1, "stream_tail_tokens": 0}
    ex = out.examples[0]
    src, tgt = tokenizer.encode(records[0]["source"]), tokenizer.encode(records[0]["target"])
    np.testing.assert_array_equal(ex["src"], [*src, tokens.EOS_ID])
    np.testing.assert_array_equal(ex["inputs"], [tokens.BOS_ID, *tgt])
    np.testing.assert_array_equal(ex["targets"], [*tgt, tokens.EOS_ID])
    assert out.lengths[0] == max(len(src), len(tgt)) + 1


def test_lm_stream_windows_cover_the_stream(tokenizer):
    records = [{"text": s} for s in SENTENCES[:50]]
    out = examples.tokenize(records, tokenizer, "lm", max_len=16, lm_chunking="stream")
    stream = np.concatenate([[*tokenizer.encode(r["text"]), tokens.EOS_ID] for r in records])
    predicted = np.concatenate([e["targets"] for e in out.examples])
    np.testing.assert_array_equal(predicted, stream[1 : 1 + len(predicted)])
    for e in out.examples:
        assert len(e["inputs"]) == len(e["targets"]) == 16
        np.testing.assert_array_equal(e["inputs"][1:], e["targets"][:-1])
    assert out.dropped["stream_tail_tokens"] == len(stream) - 1 - len(predicted) < 16


def test_lm_documents_and_filter(tokenizer):
    records = [{"text": "the house."}, {"text": ""}, {"text": " ".join(["tree"] * 50)}]
    out = examples.tokenize(records, tokenizer, "lm", max_len=12, lm_chunking="document")
    assert len(out) == 1 and out.dropped["too_long"] == 1 and out.dropped["empty"] == 1
    ids = tokenizer.encode("the house.")
    np.testing.assert_array_equal(out.examples[0]["inputs"], [tokens.BOS_ID, *ids])
    np.testing.assert_array_equal(out.examples[0]["targets"], [*ids, tokens.EOS_ID])


def test_mlm_masking_rates():
    rng = np.random.default_rng(0)
    targets = rng.integers(5, 300, 200_000).astype(np.int32)
    targets[::50] = tokens.EOS_ID  # never maskable
    inputs, weights = examples.mask_tokens(targets, rng, 300, 0.15)
    chosen = weights == 1
    assert not chosen[::50].any()
    assert abs(chosen.mean() / (1 - 1 / 50) - 0.15) < 0.005
    masked = inputs[chosen] == tokens.MASK_ID
    kept = inputs[chosen] == targets[chosen]
    assert abs(masked.mean() - 0.8) < 0.01
    assert abs(kept.mean() - 0.1 - 0.1 * (1 / 295)) < 0.01  # random may redraw the same id
    assert (inputs[~chosen] == targets[~chosen]).all()
    assert inputs.min() >= 2 and inputs.max() < 300
    _, w = examples.mask_tokens(np.array([1, 9, 2], np.int32), rng, 300, 0.01)
    assert w.tolist() == [0, 1, 0]  # at least one prediction per sequence


def test_bucket_boundaries():
    assert batching.bucket_boundaries(100) == (8, 16, 32, 64, 100)
    assert batching.bucket_boundaries(64, (16, 32)) == (16, 32, 64)
    with pytest.raises(ValueError, match=r"data\.bucket_boundaries=\(32, 16\)"):
        batching.bucket_boundaries(64, (32, 16))
    with pytest.raises(ValueError, match=r"data\.bucket_boundaries=\(8, 128\)"):
        batching.bucket_boundaries(64, (8, 128))


def test_token_budget_plan_never_exceeds_budget_and_covers_each_epoch():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 65, 3000)
    buckets = batching.make_buckets(64, 0, max_tokens=1000, row_multiple=4)
    assert [b.length for b in buckets] == [8, 16, 32, 64]
    assert all(b.rows * b.length <= 1000 and b.rows % 4 == 0 for b in buckets)
    plan = batching.BatchPlan(lengths, buckets, seed=3)
    epochs = []
    for epoch in range(2):
        seen = []
        for k in range(plan.batches_per_epoch):
            b, idx = plan.batch(epoch, k)
            real = idx[idx >= 0]
            assert len(idx) == buckets[b].rows
            assert (lengths[real] <= buckets[b].length).all()
            assert b == 0 or (lengths[real] > buckets[b - 1].length).all()
            assert len(real) * buckets[b].length <= 1000
            seen.extend(real.tolist())
        assert sorted(seen) == list(range(len(lengths)))  # each example exactly once
        epochs.append(seen)
    assert epochs[0] != epochs[1]  # reshuffled every epoch
    again = batching.BatchPlan(lengths, buckets, seed=3)
    assert all((again.batch(1, k)[1] == plan.batch(1, k)[1]).all() for k in range(5))


def test_fixed_plan_and_eval_order():
    lengths = np.array([5, 3, 9, 1, 7])
    buckets = batching.make_buckets(10, batch_size=2, max_tokens=0)
    assert buckets == (batching.Bucket(2, 10),)
    plan = batching.BatchPlan(lengths, buckets, shuffle=False)
    got = [plan.batch(0, k)[1].tolist() for k in range(plan.batches_per_epoch)]
    assert got == [[3, 1], [0, 4], [2, -1]]  # by length; last batch completed with an empty row


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"batch_size": 6, "max_tokens": 0, "row_multiple": 4}, r"data\.batch_size=6 must be a"),
        ({"batch_size": 8, "max_tokens": 100, "row_multiple": 2}, r"data\.max_tokens=100 must"),
    ],
)
def test_bad_batch_shapes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        batching.make_buckets(64, **kwargs)


def test_collate_pads_and_weights():
    rows = [
        {"inputs": np.array([1, 7]), "targets": np.array([7, 2])},
        None,
        {"inputs": np.array([1]), "targets": np.array([2]), "weights": np.array([0.0])},
    ]
    out = batching.collate(rows, 4, ("inputs", "targets"))
    assert out["inputs"].tolist() == [[1, 7, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]]
    assert out["weights"].tolist() == [[1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert out["inputs"].dtype == np.int32 and out["weights"].dtype == np.float32


def test_local_rows_split_a_global_batch():
    idx = np.arange(8)
    shares = [batching.local_rows(idx, p, 4).tolist() for p in range(4)]
    assert shares == [[0, 1], [2, 3], [4, 5], [6, 7]]
    with pytest.raises(ValueError, match="8 rows do not split over 3 processes"):
        batching.local_rows(idx, 0, 3)
