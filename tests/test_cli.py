"""What a translation run leaves in its workdir, loading a run from it, checkpoint averaging, and
the translate/evaluate/sample CLIs."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from test_data_pipeline import _train_config, corpus  # noqa: F401 (fixture)

from deepnet_jax.cli import evaluate, sample, translate
from deepnet_jax.decoding import sampling, search
from deepnet_jax.runs import metrics
from deepnet_jax.training import loading as run_loading
from deepnet_jax.training import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


@pytest.fixture(scope="module")
def translation_run(corpus, tmp_path_factory):  # noqa: F811
    """A finished tiny translation run with checkpoints at 3, 6, 9 and 12 updates, two samples
    in its eval.json."""
    workdir = tmp_path_factory.mktemp("translation_run")
    c = _train_config(corpus, max_tokens=192)
    c.total_steps, c.log_every, c.eval_every, c.checkpoint_every, c.max_to_keep = 12, 6, 6, 3, 10
    c.final_split = "test"
    c.decode.beam_size, c.decode.eval_sentences, c.decode.num_samples = 2, 10, 2
    result = train.run(c, str(workdir))
    return str(workdir), result


@pytest.fixture(scope="module")
def lm_run(corpus, tmp_path_factory):  # noqa: F811
    workdir = tmp_path_factory.mktemp("lm_run")
    c = _train_config(corpus, "local_text", "decoder")
    c.total_steps, c.log_every, c.eval_every, c.checkpoint_every = 4, 4, 0, 4
    train.run(c, str(workdir))
    return str(workdir)


def test_the_runs_workdir_outputs(translation_run):
    """What a translation run leaves in its workdir: metrics, TensorBoard, curves, best/,
    eval.json (the fixture's run: 12 updates, logged and validated every 6)."""
    workdir, result = translation_run
    path = pathlib.Path(workdir)
    records = metrics.read(workdir)
    train_records = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train_records] == [6, 12]
    for r in train_records:
        assert r.keys() >= TRAIN_KEYS, r
        assert r["nll"] != r["loss"]  # label smoothing 0.1: the optimized loss is not the NLL
        assert r["perplexity"] == pytest.approx(np.exp(r["nll"]))
        assert r["grad_norm"] > 0 and r["update_norm"] > 0 and r["param_norm"] > 0
        assert 0 < r["mfu"] < 1
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [6, 12]
    assert all(0 <= r["bleu"] <= 100 and r["bleu_sentences"] == 10 for r in evals)
    for r in evals:  # the decoder-reads-its-source figures, at every validation
        assert np.isfinite(r["source_sensitivity"]) and 0 < r["distinct_hypotheses"] <= 1
    test_records = [r for r in records if r["split"] == "test"]
    assert test_records and test_records[0]["bleu"] == pytest.approx(result["test_bleu"])

    saved = json.loads((path / "eval.json").read_text())
    assert saved["test_sentences"] == 30  # the whole test split, beam search
    assert "BLEU" in saved["test_bleu_signature"] or "nrefs" in saved["test_bleu_signature"]
    assert 0 <= saved["test_chrf"] <= 100 and saved["test_loss"] > 0
    assert len(saved["test_samples"]) == 2
    for key in ("eval_source_sensitivity", "test_source_sensitivity"):
        assert np.isfinite(saved[key]), key
    assert 0 < saved["eval_distinct_hypotheses"] <= 1 and 0 < saved["test_distinct_hypotheses"] <= 1
    assert set(saved["test_samples"][0]) == {"source", "reference", "hypothesis"}

    assert (path / "tokenizer.model").stat().st_size > 0
    assert (path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any(f.startswith("events") for f in os.listdir(path / "tensorboard"))
    best = [int(d) for d in os.listdir(path / "best") if d.isdigit()]
    assert len(best) == 1  # the best validation BLEU's parameters, kept apart
    score = json.loads((path / "best" / str(best[0]) / "score" / "metadata").read_text())
    bleus = {r["step"]: r["bleu"] for r in evals}
    assert score["score"] == pytest.approx(max(bleus.values()))
    params = ocp.StandardCheckpointer().restore(path / "best" / str(best[0]) / "params")
    assert "encoder" in params


def test_evaluate_reproduces_the_runs_final_test_figures(translation_run):
    workdir, result = translation_run
    run = run_loading.load_run(workdir)
    assert run.description == "checkpoint 12"
    got = evaluate.evaluate_run(run, "test")
    assert got["loss"] == pytest.approx(result["test_loss"], rel=1e-6)
    assert got["bleu"] == pytest.approx(result["test_bleu"])
    assert got["chrf"] == pytest.approx(result["test_chrf"])
    assert got["sentences"] == 30 and got["beam_size"] == 2
    assert got["bleu_report"].startswith("BLEU|nrefs:1|")
    lines = evaluate.report(got).splitlines()
    assert lines[0].startswith("test (checkpoint 12): loss ") and "BLEU|" in lines[2]


def test_checkpoint_choices_and_averaging(translation_run):
    workdir, _ = translation_run
    latest = run_loading.load_run(workdir)
    ckpts = {s: run_loading.load_run(workdir, s).params for s in (6, 9, 12)}
    mean = run_loading.load_run(workdir, "latest", average_last=3)
    assert mean.description == "mean of checkpoints [6, 9, 12]"
    expected = jax.tree.map(lambda *x: sum(x) / 3, *ckpts.values())
    for got, want in zip(jax.tree.leaves(mean.params), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    jax.tree.map(np.testing.assert_array_equal, latest.params, ckpts[12])
    assert not np.array_equal(jax.tree.leaves(mean.params)[0], jax.tree.leaves(latest.params)[0])
    two = run_loading.load_run(workdir, 9, average_last=2)
    assert two.description == "mean of checkpoints [6, 9]"
    best = run_loading.load_run(workdir, "best")
    assert best.description.startswith("best parameters (step ")


@pytest.mark.parametrize(
    "choice, average, message",
    [
        (7, 1, r"checkpoint=7 is not one of the saved steps \[3, 6, 9, 12\]"),
        ("latest", 5, r"average_last=5 needs 5 checkpoints up to step 12; the run has"),
        ("best", 2, r"average_last > 1 averages checkpoints/"),
        ("latest", 0, r"average_last=0 must be an integer >= 1"),
    ],
)
def test_bad_checkpoint_choices(translation_run, choice, average, message):
    with pytest.raises(ValueError, match=message):
        run_loading.load_run(translation_run[0], choice, average)


def test_loading_writes_nothing_into_the_workdir(translation_run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(translation_run[0], copy)
    shutil.rmtree(copy / "best")
    before = sorted(str(p.relative_to(copy)) for p in copy.rglob("*"))
    run = run_loading.load_run(str(copy))
    assert run.description == "checkpoint 12"
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == before
    with pytest.raises(ValueError, match=r"no best parameters under"):
        run_loading.load_run(str(copy), "best")


def test_bad_workdir_and_checkpoint_flag(tmp_path):
    with pytest.raises(ValueError, match=r"holds no checkpoints"):
        run_loading.load_run(str(tmp_path))
    with pytest.raises(ValueError, match=r"checkpoint='newest'; allowed values are"):
        run_loading.parse_checkpoint("newest")


def test_translate_cli_keeps_every_line_in_order(translation_run):
    workdir, _ = translation_run
    lines = ["ein kleines haus", "", "das ist gut"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "deepnet_jax.cli.translate",
            f"--workdir={workdir}",
            "--beam_size=1",
        ],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.splitlines()
    assert len(out) == 3
    run = run_loading.load_run(workdir)
    expected, cut = translate.translate_lines(
        run, lines, search.SearchOptions(beam_size=1), batch_size=64
    )
    assert out == expected and cut == 0
    assert "translated 3 lines with checkpoint 12, beam 1" in proc.stderr


def test_evaluate_cli_prints_sacrebleu_signature_and_json(translation_run, tmp_path):
    workdir, result = translation_run
    out_file = tmp_path / "test.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "deepnet_jax.cli.evaluate",
            f"--workdir={workdir}",
            "--split=test",
            f"--output={out_file}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in proc.stdout
    assert "chrF2|nrefs:1|" in proc.stdout
    saved = json.loads(out_file.read_text())
    assert saved["bleu"] == pytest.approx(result["test_bleu"])


def test_cli_errors_are_one_line(translation_run, lm_run):
    workdir, _ = translation_run
    proc = subprocess.run(
        [sys.executable, "-m", "deepnet_jax.cli.sample", f"--workdir={workdir}", "--prompt=x"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "sampling needs a decoder run" in proc.stderr and "Traceback" not in proc.stderr
    run = run_loading.load_run(lm_run)
    with pytest.raises(ValueError, match=r"translation needs an encdec run"):
        translate.translate_lines(run, ["x"], search.SearchOptions(), 8)


def test_sample_continues_each_prompt(lm_run):
    run = run_loading.load_run(lm_run)
    greedy = sampling.SampleOptions(max_new_tokens=8, temperature=0.0)
    texts = sample.sample_texts(run, ["the", "a b"], greedy, num_samples=2, seed=0)
    assert [len(t) for t in texts] == [2, 2]
    assert texts[0][0] == texts[0][1]  # temperature 0: both samples are the greedy one
    assert all(t[0].startswith(p) for t, p in zip(texts, ["the", "a b"], strict=True))
    assert sample.sample_texts(run, ["the"], greedy, seed=7) == [[texts[0][0]]]
    hot = sampling.SampleOptions(max_new_tokens=8, temperature=1.0, top_p=0.9)
    draws = sample.sample_texts(run, ["the"], hot, num_samples=4, seed=1)[0]
    assert len(draws) == 4
    with pytest.raises(ValueError, match=r"exceeds model\.max_len=64"):
        sample.sample_texts(run, ["the"], sampling.SampleOptions(max_new_tokens=100))
    with pytest.raises(ValueError, match=r"--top_p=0\.0 must be in \(0, 1\]"):
        sample.sample_texts(run, ["the"], sampling.SampleOptions(top_p=0.0))


def test_cli_main_is_reusable_in_process(translation_run, tmp_path):
    """The CLIs define their flags at module level (all three imported in this one process
    without clashing), so ``main`` runs again after each ``FLAGS(argv)``."""
    from absl import flags

    workdir, _ = translation_run
    try:
        for split in ("validation", "test"):
            out = tmp_path / f"{split}.json"
            flags.FLAGS.unparse_flags()
            flags.FLAGS(
                [
                    "evaluate",
                    f"--workdir={workdir}",
                    f"--split={split}",
                    "--limit=4",
                    "--beam_size=1",
                    f"--output={out}",
                ]
            )
            evaluate.main(["evaluate"])
            saved = json.loads(out.read_text())
            assert saved["split"] == split and saved["sentences"] == 4
            assert saved["beam_size"] == 1
    finally:
        flags.FLAGS.unparse_flags()


def test_every_cli_module_imports_in_one_process():
    """absl flags are process-wide: two CLI modules defining one flag name would clash."""
    modules = [
        "deepnet_jax.cli.evaluate",
        "deepnet_jax.cli.translate",
        "deepnet_jax.cli.sample",
        "deepnet_jax.cli.plan",
        "deepnet_jax.cli.prepare",
        "deepnet_jax.cli.torchscale",
        "deepnet_jax.experiments.depth_table",
        "deepnet_jax.experiments.lr_tolerance",
        "deepnet_jax.experiments.model_update",
        "deepnet_jax.experiments.thousand_layers",
    ]
    code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
