"""grain pipelines on local fixture corpora: determinism, resumption, budgets, packing, shards."""

import json
import os
import re
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from test_data_tokenizer import SENTENCES

from deepnet_jax.common import tokens
from deepnet_jax.data import pipeline
from deepnet_jax.training import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPLIT_SIZES = {"train": 400, "valid": 40, "test": 30}


def _write_corpus(folder):
    """Handwritten pseudo-sentences: a 'source' side and a word-reversed 'target' side."""
    folder.mkdir(parents=True, exist_ok=True)
    start = 0
    for split, n in SPLIT_SIZES.items():
        src = SENTENCES[start : start + n]
        tgt = [" ".join(reversed(s.rstrip(".").split())) + "." for s in src]
        (folder / f"{split}.de").write_text("\n".join(src) + "\n", encoding="utf-8")
        (folder / f"{split}.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
        (folder / f"{split}.txt").write_text("\n\n".join(src + tgt) + "\n", encoding="utf-8")
        start += n


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    _write_corpus(root / "toy")
    return root


def _options(corpus, dataset="local_parallel", **overrides):
    values = {
        "dataset": dataset,
        "data_dir": str(corpus / "data"),
        "source_dir": str(corpus / "toy"),
        "src_ext": "de" if dataset == "local_parallel" else "",
        "tgt_ext": "en" if dataset == "local_parallel" else "",
        "vocab_size": 300,
        "max_len": 48,
        "batch_size": 8,
    }
    values.update(overrides)
    return pipeline.DataOptions(**values)


ARCH = {"local_parallel": "encdec", "local_text": "decoder"}
MODES = {
    "fixed": ("local_parallel", "encdec", {}),
    "max_tokens": ("local_parallel", "encdec", {"max_tokens": 192, "bucket_boundaries": (16, 32)}),
    "packed": ("local_parallel", "encdec", {"packing": True}),
    "lm_stream": ("local_text", "decoder", {}),
    "lm_document_packed": ("local_text", "decoder", {"lm_chunking": "document", "packing": True}),
    "mlm": ("local_text", "encoder", {"lm_chunking": "document"}),
}


def _take(iterator, n):
    return [next(iterator) for _ in range(n)]


def _equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("mode", list(MODES))
def test_same_seed_same_batches_and_resume_from_state(corpus, mode):
    dataset, arch, overrides = MODES[mode]
    data = pipeline.DataPipeline(_options(corpus, dataset, **overrides), arch)
    it = iter(data.train_dataset())
    head = _take(it, 7)
    state = json.loads(json.dumps(it.get_state()))  # JSON-serializable (saved with checkpoints)
    tail = _take(it, 6)
    again = iter(
        pipeline.DataPipeline(_options(corpus, dataset, **overrides), arch).train_dataset()
    )
    for a, b in zip(head + tail, _take(again, 13), strict=True):
        _equal(a, b)
    resumed = iter(
        pipeline.DataPipeline(_options(corpus, dataset, **overrides), arch).train_dataset()
    )
    resumed.set_state(state)
    for a, b in zip(tail, _take(resumed, 6), strict=True):
        _equal(a, b)
    other = iter(
        pipeline.DataPipeline(_options(corpus, dataset, seed=1, **overrides), arch).train_dataset()
    )
    assert any(
        not np.array_equal(a["targets"], b["targets"])
        for a, b in zip(head, _take(other, 7), strict=True)
    )


def test_fixed_batches_cover_each_epoch_once(corpus):
    data = pipeline.DataPipeline(_options(corpus), "encdec")
    train_ex = data.examples("train")
    n = data.train_plan().batches_per_epoch
    it = iter(data.train_dataset())
    for _ in range(2):  # two epochs: each example's target appears exactly once per epoch
        seen = sorted(
            tuple(row[row != 0]) for b in _take(it, n) for row in b["targets"] if row.any()
        )
        assert seen == sorted(tuple(e["targets"]) for e in train_ex.examples)
    assert len(train_ex) + train_ex.dropped["too_long"] == SPLIT_SIZES["train"]
    assert len(train_ex) > 0.8 * SPLIT_SIZES["train"]


def test_token_budget_batches_never_exceed_budget(corpus):
    data = pipeline.DataPipeline(_options(corpus, max_tokens=192), "encdec")
    shapes = set()
    for b in _take(iter(data.train_dataset()), 60):
        rows, length = b["targets"].shape
        assert rows * length <= 192 and b["src"].shape == (rows, length)
        shapes.add((rows, length))
    assert len(shapes) > 1  # several buckets in use
    assert shapes <= {(bk.rows, bk.length) for bk in data.buckets}


def test_packed_rows_hold_whole_examples(corpus):
    data = pipeline.DataPipeline(_options(corpus, packing=True), "encdec")
    pairs = {(tuple(e["src"]), tuple(e["targets"])) for e in data.examples("train").examples}
    total = 0
    for b in _take(iter(data.train_dataset()), 10):
        for r in range(b["targets"].shape[0]):
            segs = set(b["segment_ids"][r]) - {0}
            assert segs == set(b["src_segment_ids"][r]) - {0}
            for s in segs:
                tgt = b["targets"][r][b["segment_ids"][r] == s]
                src = b["src"][r][b["src_segment_ids"][r] == s]
                inp = b["inputs"][r][b["segment_ids"][r] == s]
                assert (tuple(src), tuple(tgt)) in pairs
                assert inp[0] == tokens.BOS_ID and (inp[1:] == tgt[:-1]).all()
                pos = b["positions"][r][b["segment_ids"][r] == s]
                assert (pos == np.arange(len(tgt))).all()
            total += len(segs)
    assert total > 10 * 8  # more than one example per row on average


@pytest.mark.parametrize("mode", ["fixed", "max_tokens", "packed"])
def test_process_shards_are_disjoint_and_cover(corpus, mode):
    dataset, arch, overrides = MODES[mode]
    opts = _options(corpus, dataset, **overrides)
    whole = _take(iter(pipeline.DataPipeline(opts, arch).train_dataset()), 6)
    shards = [
        _take(
            iter(
                pipeline.DataPipeline(opts, arch, process_index=p, process_count=2).train_dataset()
            ),
            6,
        )
        for p in range(2)
    ]
    if mode != "packed":  # the two shares are the global batch's two halves
        for g, a, b in zip(whole, *shards, strict=True):
            for k in g:
                np.testing.assert_array_equal(np.concatenate([a[k], b[k]]), g[k])
    else:  # each process packs its own stride of the stream: disjoint

        def segments(batches):
            out = []
            for b in batches:
                for r in range(len(b["targets"])):
                    for s in set(b["segment_ids"][r]) - {0}:
                        out.append(tuple(b["targets"][r][b["segment_ids"][r] == s]))
            return out

        a, b = segments(shards[0]), segments(shards[1])
        assert not set(a) & set(b) and len(a) == len(set(a))


def test_eval_batches_cover_validation_once(corpus):
    """Every pair once: the long ones cut to data.max_len, not dropped as in training."""
    data = pipeline.DataPipeline(_options(corpus, max_tokens=192), "encdec")
    rows = [
        tuple(r[r != 0]) for b in data.eval_batches("validation") for r in b["targets"] if r.any()
    ]
    scored = data.eval_examples("validation")
    assert sorted(rows) == sorted(tuple(e["targets"]) for e in scored.examples)
    assert len(rows) == SPLIT_SIZES["valid"]
    too_long = data.examples("validation").dropped["too_long"]
    assert too_long > 0 and scored.truncated == too_long
    assert data.eval_counts("validation") == {"loss_truncated": too_long, "loss_dropped": 0}


def test_mlm_batches_mask_only_weighted_positions(corpus):
    data = pipeline.DataPipeline(_options(corpus, "local_text", lm_chunking="document"), "encoder")
    for b in _take(iter(data.train_dataset()), 5):
        changed = b["inputs"] != b["targets"]
        assert (b["weights"][changed] == 1).all()
        assert (b["inputs"] == tokens.MASK_ID).sum() > 0
        assert (b["weights"][b["targets"] == 0] == 0).all()


def test_global_batch_on_a_mesh(corpus):
    data = pipeline.DataPipeline(_options(corpus), "encdec")
    local = next(iter(data.train_dataset()))
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    batch = pipeline.global_batch(local, sharding)
    for k, v in local.items():
        assert batch[k].sharding == sharding
        np.testing.assert_array_equal(np.asarray(batch[k]), v)


@pytest.mark.parametrize(
    "overrides, arch, match",
    [
        ({}, "decoder", r"data\.dataset='local_parallel' is parallel data but model\.arch"),
        (
            {"packing": True, "max_tokens": 192},
            "encdec",
            r"data\.packing=True needs data\.max_tokens=0",
        ),
        ({"lm_chunking": "sentences"}, "encdec", r"data\.lm_chunking='sentences'"),
        ({"max_tokens": 10}, "encdec", r"data\.max_tokens=10 must be at least"),
        ({"batch_size": 0}, "encdec", r"data\.batch_size=0 must be an integer >= 1"),
        ({"mask_rate": 1.5}, "encdec", r"data\.mask_rate=1\.5"),
        ({"dataset": "wmt19"}, "encdec", r"data\.dataset='wmt19' is not one of"),
        ({"data_dir": ""}, "encdec", r"data\.data_dir is empty"),
        ({"bucket_boundaries": (16,)}, "encdec", r"data\.bucket_boundaries=\(16,\) needs data"),
        ({"bucket_boundaries": (16.5,), "max_tokens": 192}, "encdec", r"must be strictly incr"),
        ({"source_lang": "fr"}, "encdec", r"data\.source_lang='fr' is not a language of local_p"),
        ({"tgt_ext": ""}, "encdec", r"local_parallel needs data\.src_ext and data\.tgt_ext"),
        ({"dataset": "ding_de_en"}, "encdec", r"data\.source_dir='.*' is not used by data\.dat"),
        ({"seed": -1}, "encdec", r"seed=-1 must be an integer >= 0"),
    ],
)
def test_bad_data_options(corpus, overrides, arch, match, tmp_path):
    overrides.setdefault("data_dir", str(tmp_path / "untouched"))
    with pytest.raises(ValueError, match=match):
        pipeline.DataPipeline(_options(corpus, **overrides), arch)
    assert not (tmp_path / "untouched").exists()  # rejected before anything is prepared


def _train_config(corpus, dataset="local_parallel", arch="encdec", **data_overrides):
    from deepnet_jax.configs import base

    c = base.get_config()
    m = c.model
    m.arch, m.d_model, m.num_heads, m.ffn_dim, m.vocab_size, m.max_len = arch, 32, 4, 64, 300, 64
    m.num_encoder_layers = 2 if arch != "decoder" else 0
    m.num_decoder_layers = 2 if arch != "encoder" else 0
    # These runs test the data and the run's outputs: full spares each one auto's planning
    # compile (auto: test_remat_auto.py and the two-process run of test_reliability.py).
    m.remat_policy = "full"
    opts = _options(corpus, dataset, **data_overrides).__dict__.copy()
    opts.pop("seed")
    opts["bucket_boundaries"] = list(opts["bucket_boundaries"])
    c.data = type(c)(opts)
    c.optimizer.learning_rate = 3e-3
    c.schedule.warmup_steps = 10
    c.total_steps, c.log_every = 40, 10
    c.decode.eval_sentences = 0  # no validation BLEU (its decoder compiles per length bucket)
    return c


# the default run: packed translation pairs and the encoder's masked LM on whole documents; the
# token-budget buckets and the decoder's LM stream under -m slow (the default run trains both
# in test_cli.py's runs, test_trainer_outputs.py and the derived-vocabulary test below)
@pytest.mark.parametrize(
    "dataset, arch, overrides",
    [
        pytest.param("local_parallel", "encdec", {"max_tokens": 192}, marks=pytest.mark.slow),
        ("local_parallel", "encdec", {"packing": True}),
        pytest.param("local_text", "decoder", {}, marks=pytest.mark.slow),
        ("local_text", "encoder", {"lm_chunking": "document"}),
    ],
)
def test_training_on_a_prepared_corpus(corpus, dataset, arch, overrides):
    metrics = train.run(_train_config(corpus, dataset, arch, **overrides))
    assert metrics["eval_loss"] < 0.85 * metrics["first_train_loss"], metrics


def test_model_vocab_smaller_than_tokenizer_is_an_error(corpus):
    c = _train_config(corpus)
    c.model.vocab_size = 100
    c.data.data_dir = str(corpus / "never_created")
    with pytest.raises(ValueError, match=r"model\.vocab_size=100 is smaller than data\.vocab_size"):
        train.run(c)
    assert not (corpus / "never_created").exists()  # rejected before anything is prepared


def test_model_vocabulary_and_length_derived_from_the_data(corpus, tmp_path):
    """model.vocab_size=0 takes the tokenizer's size (a char tokenizer's is known only once
    it is built) and model.max_len=0 takes data.max_len; the saved run holds both values."""
    from deepnet_jax.training import loading as run_loading

    c = _train_config(corpus, "local_text", "decoder", tokenizer="char", vocab_size=200)
    c.model.vocab_size = c.model.max_len = 0
    c.total_steps, c.log_every, c.checkpoint_every = 2, 1, 2
    train.run(c, str(tmp_path))
    saved = run_loading.load_run(str(tmp_path))
    pieces = saved.tokenizer.vocab_size
    assert pieces < 200  # the toy corpus has fewer characters than the bound
    assert saved.config.model.vocab_size == pieces
    assert saved.config.model.max_len == c.data.max_len
    assert saved.params["embed_tokens"]["embedding"].shape[0] == pieces


def test_prepare_cli_trains_the_tokenizer_a_run_reuses(corpus, tmp_path):
    data_dir = tmp_path / "cli_data"
    args = [f"--data_dir={data_dir}", f"--source_dir={corpus / 'toy'}", "--src_ext=de"]
    cmd = [sys.executable, "-m", "deepnet_jax.cli.prepare", "--dataset=local_parallel", *args]
    cmd += ["--tgt_ext=en", "--tokenizer=bpe", "--vocab_size=300"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    progress = proc.stderr.splitlines()  # preparation's own messages: plain lines, no log prefix
    assert any(line.startswith("Preparing local_parallel in ") for line in progress), progress
    assert any(line.startswith("trained local_parallel/") for line in progress), progress
    assert not [
        line
        for line in progress
        if re.search(r"(sources|tokenizer|base|local_files|local_parallel)\.py:\d+\]", line)
    ]
    line = proc.stdout.splitlines()[-1]
    assert line.startswith("tokenizer: ") and line.endswith("(300 pieces)")
    options = _options(corpus, data_dir=str(data_dir))
    data = pipeline.DataPipeline(options, "encdec")
    assert line == f"tokenizer: {data.tokenizer_path} (300 pieces)"
    bad = subprocess.run(
        [*cmd[:-2], "--tokenizer=wordpiece"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert "error: data.tokenizer='wordpiece'; allowed values are" in bad.stderr


def test_missing_validation_split_fails_before_training(corpus, tmp_path):
    folder = tmp_path / "no_valid"
    folder.mkdir()
    for ext in ("de", "en"):
        (folder / f"train.{ext}").write_text((corpus / "toy" / f"train.{ext}").read_text())
    c = _train_config(corpus, source_dir=str(folder), data_dir=str(tmp_path / "data"))
    c.total_steps = 10**9  # would never finish if training started
    with pytest.raises(ValueError, match="has no 'validation' split"):
        train.run(c)


@pytest.mark.parametrize(
    ("dataset", "lang", "message"),
    [
        # the single pair's language check is also held in-process by test_bad_data_options
        pytest.param("ding_de_en", "fr", "error: data.source_lang='fr'", marks=pytest.mark.slow),
        ("libreoffice_help", "it", "error: data.source_lang='it' and data.target_lang='en'"),
    ],
)
def test_train_cli_bad_data_field_is_one_line(tmp_path, dataset, lang, message):
    cmd = [
        sys.executable,
        "train.py",
        "--config=configs/default.py",
        f"--config.data.dataset={dataset}",
        f"--config.data.source_lang={lang}",
        f"--config.data.data_dir={tmp_path / 'data'}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(message)
    assert not (tmp_path / "data").exists()  # rejected before anything is prepared


def test_tfrecord_prepared_data_is_read_with_tensorflow(corpus, tmp_path):
    """A dataset prepared as tfrecord (tfds' default with TensorFlow) is read via tfds.load's
    path when the tf extra is installed (skipped without it: the CI install has no TF)."""
    pytest.importorskip("tensorflow")
    from deepnet_jax.data import DatasetRequest, sources
    from deepnet_jax.data.corpora import local_parallel

    data_dir = str(tmp_path / "tfrecord_data")
    kwargs = {"source_dir": str(corpus / "toy"), "src_ext": "de", "tgt_ext": "en"}
    config = local_parallel.LocalParallelConfig.create(**kwargs)
    local_parallel.LocalParallel(
        config=config, data_dir=data_dir
    ).download_and_prepare()  # tfrecord
    written = [f for _, _, files in os.walk(data_dir) for f in files]
    assert any(".tfrecord" in f for f in written) and not any("array_record" in f for f in written)
    via_tf = sources.open_split(DatasetRequest("local_parallel", data_dir, **kwargs), "validation")
    reference = sources.open_split(
        DatasetRequest("local_parallel", str(corpus / "data"), **kwargs), "validation"
    )
    assert list(via_tf) == list(reference) and len(via_tf) == SPLIT_SIZES["valid"]
    data = pipeline.DataPipeline(_options(corpus, data_dir=data_dir), "encdec")
    assert next(iter(data.train_dataset()))["targets"].shape == (8, 48)


def test_tfrecord_data_without_tensorflow_is_one_clear_error(corpus, tmp_path, monkeypatch):
    from deepnet_jax.data import DataPreparationError, DatasetRequest, sources

    data_dir = tmp_path / "copied"
    kwargs = {"source_dir": str(corpus / "toy"), "src_ext": "de", "tgt_ext": "en"}
    prepared = sources.prepare(DatasetRequest("local_parallel", str(corpus / "data"), **kwargs))
    version_dir = os.fspath(prepared.data_path)
    target = data_dir / os.path.relpath(version_dir, corpus / "data")
    shutil.copytree(version_dir, target)
    info = target / "dataset_info.json"  # what a TensorFlow install of tfds would have written
    info.write_text(info.read_text().replace('"array_record"', '"tfrecord"'))
    monkeypatch.setattr(sources, "_tensorflow_available", lambda: False)
    with pytest.raises(DataPreparationError, match="install the tf extra") as e:
        sources.open_split(DatasetRequest("local_parallel", str(data_dir), **kwargs), "train")
    assert "\n" not in str(e.value)
