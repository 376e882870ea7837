"""What a language-model run keeps as best/, and the run fields' errors (what a translation run
leaves in its workdir: tests/test_cli.py, on its shared run)."""

import json
import os

import numpy as np
import pytest
from test_data_pipeline import _train_config, corpus  # noqa: F401 (fixture)

from deepnet_jax.runs import metrics
from deepnet_jax.training import train


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
