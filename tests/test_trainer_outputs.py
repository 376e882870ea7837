"""What a training run leaves in its workdir: metrics, TensorBoard, curves, best/, eval.json."""

import json
import os

import numpy as np
import orbax.checkpoint as ocp
import pytest
from test_data_pipeline import _train_config, corpus  # noqa: F401 (fixture)

from deepnet_jax.runs import metrics
from deepnet_jax.training import train

TRAIN_KEYS = {
    "loss",
    "nll",
    "perplexity",
    "accuracy",
    "lr",
    "grad_norm",
    "update_norm",
    "param_norm",
    "tokens_per_s",
    "step_time_s",
    "mfu",
}


def test_translation_run_outputs(corpus, tmp_path):  # noqa: F811
    c = _train_config(corpus, max_tokens=192)
    c.total_steps, c.log_every, c.eval_every, c.checkpoint_every = 8, 4, 4, 4
    c.final_split = "test"
    c.decode.beam_size, c.decode.eval_sentences, c.decode.num_samples = 2, 10, 2
    result = train.run(c, str(tmp_path))

    records = metrics.read(str(tmp_path))
    train_records = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train_records] == [4, 8]
    for r in train_records:
        assert r.keys() >= TRAIN_KEYS, r
        assert r["nll"] != r["loss"]  # label smoothing 0.1: the optimized loss is not the NLL
        assert r["perplexity"] == pytest.approx(np.exp(r["nll"]))
        assert r["grad_norm"] > 0 and r["update_norm"] > 0 and r["param_norm"] > 0
        assert 0 < r["mfu"] < 1
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [4, 8]
    assert all(0 <= r["bleu"] <= 100 and r["bleu_sentences"] == 10 for r in evals)
    for r in evals:  # the decoder-reads-its-source figures, at every validation
        assert np.isfinite(r["source_sensitivity"]) and 0 < r["distinct_hypotheses"] <= 1
    test_records = [r for r in records if r["split"] == "test"]
    assert test_records and test_records[0]["bleu"] == pytest.approx(result["test_bleu"])

    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved["test_sentences"] == 30  # the whole test split, beam search
    assert "BLEU" in saved["test_bleu_signature"] or "nrefs" in saved["test_bleu_signature"]
    assert 0 <= saved["test_chrf"] <= 100 and saved["test_loss"] > 0
    assert len(saved["test_samples"]) == 2
    for key in ("eval_source_sensitivity", "test_source_sensitivity"):
        assert np.isfinite(saved[key]), key
    assert 0 < saved["eval_distinct_hypotheses"] <= 1 and 0 < saved["test_distinct_hypotheses"] <= 1
    assert set(saved["test_samples"][0]) == {"source", "reference", "hypothesis"}

    assert (tmp_path / "tokenizer.model").stat().st_size > 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any(f.startswith("events") for f in os.listdir(tmp_path / "tensorboard"))
    best = [int(d) for d in os.listdir(tmp_path / "best") if d.isdigit()]
    assert len(best) == 1  # the best validation BLEU's parameters, kept apart
    score = json.loads((tmp_path / "best" / str(best[0]) / "score" / "metadata").read_text())
    bleus = {r["step"]: r["bleu"] for r in evals}
    assert score["score"] == pytest.approx(max(bleus.values()))
    params = ocp.StandardCheckpointer().restore(tmp_path / "best" / str(best[0]) / "params")
    assert "encoder" in params


def test_best_keeps_lowest_validation_loss_for_language_models(corpus, tmp_path):  # noqa: F811
    c = _train_config(corpus, "local_text", "decoder")
    c.total_steps, c.log_every, c.eval_every, c.checkpoint_every = 6, 3, 3, 3
    c.final_split = "test"
    # what a run killed before its first checkpoint logged: dropped when the run starts over
    stale = [{"split": "train", "step": 3, "loss": 9.0}, {"split": "eval", "step": 3, "loss": 0.1}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stale))
    result = train.run(c, str(tmp_path))
    records = metrics.read(str(tmp_path))
    assert [(r["split"], r["step"]) for r in records if r["split"] in ("train", "eval")] == [
        ("train", 3),
        ("eval", 3),
        ("train", 6),
        ("eval", 6),
    ]
    evals = [r for r in records if r["split"] == "eval"]
    best = [int(d) for d in os.listdir(tmp_path / "best") if d.isdigit()]
    score = json.loads((tmp_path / "best" / str(best[0]) / "score" / "metadata").read_text())
    assert score["score"] == pytest.approx(-min(r["loss"] for r in evals))
    assert result["test_perplexity"] == pytest.approx(np.exp(result["test_loss"]))
    assert "test_bleu" not in result


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("decode.beam_size", 0, r"decode\.beam_size=0 must be an integer >= 1"),
        ("decode.length_penalty_form", "wu", r"decode\.length_penalty_form='wu'"),
        ("decode.eval_sentences", -1, r"decode\.eval_sentences=-1 must be an integer >= 0"),
        ("final_split", "dev", r"final_split='dev'; allowed values"),
        ("peak_flops", -1.0, r"peak_flops=-1\.0 must be >= 0"),
    ],
)
def test_bad_run_fields(corpus, field, value, message):  # noqa: F811
    c = _train_config(corpus)
    group, _, name = field.rpartition(".")
    (c[group] if group else c)[name] = value
    with pytest.raises(ValueError, match=message):
        train.validate(c)
