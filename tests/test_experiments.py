"""The depth experiments (deepnet_jax.experiments) end to end in their smoke settings, and
the verdict and unigram-entropy helpers they rest on."""

from __future__ import annotations

import json
import math
import os

import jax
import numpy as np
import pytest
from test_data_pipeline import _write_corpus

from deepnet_jax.common.tokens import EOS_ID
from deepnet_jax.configs import experiment_base
from deepnet_jax.data import pipeline, prepared, synthetic
from deepnet_jax.experiments import (
    common,
    dropout_gap,
    lr_tolerance,
    model_update,
    opening,
    results_file,
    resumable,
    thousand_layers,
    thousand_layers_report,
)


def _outputs(out, name):
    payload = json.loads((out / f"{name}.json").read_text())
    assert (out / f"{name}.png").stat().st_size > 2000
    table = (out / f"{name}.md").read_text()
    return payload, table


@pytest.mark.slow  # a grid through common.run_grid, as thousand_layers' smoke (default run)
def test_model_update_smoke(tmp_path):
    model_update.main(["--setting=smoke", f"--out={tmp_path}"])
    payload, table = _outputs(tmp_path, "model_update")
    runs = payload["runs"]
    assert {(r["scheme"], r["warmup"]) for r in runs} == {
        (s, w) for s in ("post_ln", "deepnorm") for w in ("none", "paper")
    }
    for run in runs:
        steps = [d["step"] for d in run["diagnostics"]]
        assert steps == [0, 2, 4]
        assert run["diagnostics"][0]["model_update"] == 0.0
        assert all(d["model_update"] > 0 for d in run["diagnostics"][1:])
    # warm-up from 1e-7 moves the model far less than the constant peak learning rate
    for scheme in ("post_ln", "deepnorm"):
        moved = {
            r["warmup"]: r["diagnostics"][-1]["model_update"] for r in runs if r["scheme"] == scheme
        }
        assert moved["paper"] < moved["none"] / 10
    assert table.count("\n| post_ln |") == 2 and "ΔF after 4" in table


@pytest.mark.slow  # a grid through common.run_grid, as thousand_layers' smoke (default run)
def test_lr_tolerance_smoke_and_rerun_skips_finished_runs(tmp_path, capsys):
    first = lr_tolerance.main(["--setting=smoke", f"--out={tmp_path}"])
    payload, table = _outputs(tmp_path, "lr_tolerance")
    assert set(payload["largest_trained_lr"]) == {"post_ln", "subln"}
    assert "largest lr that trained" in table
    capsys.readouterr()
    again = lr_tolerance.main(["--setting=smoke", f"--out={tmp_path}"])  # nothing retrained
    assert "== run" not in capsys.readouterr().out
    assert again["runs"] == first["runs"]


def test_a_grid_started_again_skips_the_runs_it_finished(tmp_path, capsys):
    """The results file keeps each finished run; a second start with the same setting trains
    only what is missing."""
    settings = {"steps": 4}
    first = results_file.Results(str(tmp_path), "grid", "smoke", settings)
    first.add({"scheme": "deepnorm", "layers": 2}, {"eval_loss": 1.5, "nonfinite_step": None})

    def untrainable(key):
        raise AssertionError(f"{key} was trained again")

    again = results_file.Results(str(tmp_path), "grid", "smoke", settings)
    keys = [{"scheme": "deepnorm", "layers": 2}]
    runs = common.run_grid(again, keys, untrainable, None, str(tmp_path / "runs"))
    assert runs == [{"scheme": "deepnorm", "layers": 2, "eval_loss": 1.5, "nonfinite_step": None}]
    assert "== run" not in capsys.readouterr().out


def test_a_results_file_is_kept_across_grid_changes_and_refused_across_settings(tmp_path):
    """A row added to a grid (settings that differ only in ``grid`` entries) keeps the
    finished runs; another setting or another recipe is refused with the differing fields,
    and the file is left as it was."""
    settings = {"schemes": ["deepnorm"], "steps": 4}
    first = results_file.Results(str(tmp_path), "grid", "smoke", settings, grid=["schemes"])
    first.add({"scheme": "deepnorm"}, {"eval_loss": 1.5, "nonfinite_step": None})
    wider = {"schemes": ["deepnorm", "pre_ln+dyt"], "steps": 4}
    again = results_file.Results(str(tmp_path), "grid", "smoke", wider, grid=["schemes"])
    assert [r["scheme"] for r in again.runs] == ["deepnorm"]
    again.add({"scheme": "pre_ln+dyt"}, {"eval_loss": 1.2, "nonfinite_step": None})
    with open(again.path) as f:
        on_disk = f.read()
    with pytest.raises(SystemExit, match=r"other settings \(setting differ\)"):
        results_file.Results(str(tmp_path), "grid", "quick", wider, grid=["schemes"])
    longer = {**wider, "steps": 8}
    with pytest.raises(SystemExit, match=r"grid\.json holds .* other settings \(settings\.steps "):
        results_file.Results(str(tmp_path), "grid", "smoke", longer, grid=["schemes"])
    with open(again.path) as f:
        assert f.read() == on_disk


def test_verdicts():
    entropy = 5.0
    assert common.verdict({"nonfinite_step": 7, "eval_loss": math.nan}, entropy) == "diverged"
    assert common.verdict({"nonfinite_step": None, "eval_loss": 4.8}, entropy) == "stuck"
    assert common.verdict({"nonfinite_step": None, "eval_loss": 6.0}, entropy) == "stuck"
    assert common.verdict({"nonfinite_step": None, "eval_loss": 4.7}, entropy) == "trained"
    # a finite blow-up: more than 0.25 nats above the untrained model's loss (ReZero at 3.2e-2
    # ended at 61.5 from 9.13); within 0.25 of it the run never moved, which is stuck
    blown = {"nonfinite_step": None, "eval_loss": 61.469, "first_train_loss": 9.134}
    assert common.verdict(blown, entropy) == "diverged"
    assert common.divergence_text(blown) == "NLL 61.5 from 9.13"
    assert common.judge(blown, None) == "diverged"
    assert thousand_layers.verdict(blown, entropy) == "diverged"
    unmoved = {"nonfinite_step": None, "eval_loss": 9.38, "first_train_loss": 9.134}
    assert common.verdict(unmoved, entropy) == "stuck"
    assert common.divergence_text({"nonfinite_step": 7}) == "update 7"
    runs = [
        {"scheme": "subln", "lr": 1e-3, "verdict": "trained"},
        {"scheme": "subln", "lr": 4e-3, "verdict": "trained"},
        {"scheme": "subln", "lr": 8e-3, "verdict": "diverged"},
        {"scheme": "post_ln", "lr": 1e-3, "verdict": "stuck"},
    ]
    assert lr_tolerance.largest_trained(runs, "subln") == 4e-3
    assert lr_tolerance.largest_trained(runs, "post_ln") is None


def test_unigram_entropy_of_the_validation_targets(tmp_path):
    _write_corpus(tmp_path / "toy")
    c = experiment_base.base_config("quick")
    c.data.dataset, c.data.source_dir = "local_parallel", str(tmp_path / "toy")
    c.data.src_ext, c.data.tgt_ext = "de", "en"
    c.data.data_dir, c.data.vocab_size = str(tmp_path / "data"), 300
    c.data.max_tokens = 256
    c.model.vocab_size = 300
    got = common.unigram_entropy(c)
    # directly: the tokenizer's pieces of every validation target, plus EOS
    options = pipeline.DataOptions(
        dataset="local_parallel",
        data_dir=c.data.data_dir,
        source_dir=c.data.source_dir,
        src_ext="de",
        tgt_ext="en",
        vocab_size=300,
        max_len=c.data.max_len,
    )
    tok = prepared.prepare_corpus(options).tokenizer
    ids = []
    for line in (tmp_path / "toy" / "valid.en").read_text().splitlines():
        pieces = [*tok.encode(line).tolist(), EOS_ID]
        if len(pieces) <= c.data.max_len:
            ids.extend(pieces)
    _, counts = np.unique(ids, return_counts=True)
    p = counts / counts.sum()
    assert got == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-6)
    c.model.vocab_size = 0  # derived from the tokenizer, as in configs/default.py
    assert common.unigram_entropy(c) == got


def test_bad_setting_or_flag_is_one_error_line():
    with pytest.raises(
        SystemExit, match=r"^error: --setting='fast'; allowed values are smoke, quick"
    ):
        model_update.main(["--setting=fast"])
    with pytest.raises(SystemExit, match=r"^error: Unknown command line flag 'outdir'"):
        model_update.main(["--outdir=/tmp/x"])
    with pytest.raises(ValueError, match=r"--setting='fast'; allowed values are"):
        experiment_base.base_config("fast")


def test_smoke_setting_asks_xla_for_fast_compiles(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    opening.compile_fast_for_smoke("quick")  # real runs keep XLA's optimizations
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
    opening.compile_fast_for_smoke("smoke")
    opening.compile_fast_for_smoke("smoke")  # added once
    assert os.environ["XLA_FLAGS"] == (
        "--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=0"
        " --xla_cpu_use_fusion_emitters=false"
    )


def test_runs_share_the_compilation_cache_already_configured(tmp_path):
    configured = jax.config.jax_compilation_cache_dir  # the test session's (conftest)
    assert configured
    common.share_compilations(str(tmp_path / "xla_cache"))
    assert jax.config.jax_compilation_cache_dir == configured


def test_thousand_layers_smoke(tmp_path):
    thousand_layers.main(["--setting=smoke", f"--out={tmp_path}"])
    payload, table = _outputs(tmp_path, "thousand_layers")
    runs = payload["runs"]
    assert [(r["scheme"], r["layers"]) for r in runs] == [("deepnorm", 2), ("post_ln", 2)]
    steps = thousand_layers.SETTINGS["smoke"]["steps"]
    for run in runs:
        assert run["verdict"] in common.VERDICTS and run["cpu_seconds"] > 0
        assert run["device"] == jax.devices()[0].device_kind  # where each run ran ("cpu" here)
        assert run["matmul_precision"] == jax.config.jax_default_matmul_precision
        assert [d["step"] for d in run["diagnostics"]] == [0, 5, 10]
        assert all(d["model_update"] > 0 for d in run["diagnostics"][1:])
        assert "grad_norm/decoder/all_last" in run["diagnostics"][-1]
        assert [r["step"] for r in run["records"] if r["split"] == "train"] == list(
            range(2, steps + 1, 2)
        )
        assert [r["step"] for r in run["records"] if r["split"] == "eval"] == [5, 10]
    assert "| deepnorm | 2L-2L | 1.57 / 0.452 |" in table
    assert "| post_ln | 2L-2L | 1.00 / 1.000 |" in table
    assert "source-blind predictor: accuracy 0.177" in table
    # with several depths the figure adds the onset against depth (the onset setting's)
    deeper = {**runs[0], "layers": 4}
    chance = payload["settings"]["chance"]
    (tmp_path / "onset").mkdir()
    path = thousand_layers_report.plot(
        [runs[0], deeper], chance, 2.0, str(tmp_path / "onset"), thousand_layers.NAME
    )
    assert os.path.getsize(path) > 2000


def test_thousand_layers_blind_chance_by_hand_and_on_the_task():
    # 2 symbols, lengths 2 and 3: accuracy 4/7, NLL ln 2 (worked out by hand)
    got = thousand_layers.blind_chance(vocab_size=7, max_len=4)
    assert got["accuracy"] == pytest.approx(4 / 7) and got["nll"] == pytest.approx(math.log(2))
    # on the task's own batches: lengths n uniform in 2..11, 11 symbols, so from t = 2 on EOS
    # (1/(12 - t)) is likelier than any one symbol ((1 - 1/(12 - t))/11): the best blind guess
    # is a symbol at t = 0, 1 (right 1/11 of the time) and EOS from then on (right once)
    vocab, max_len = 16, 12
    rng = np.random.default_rng(0)
    hits = total = 0.0
    for _ in range(100):
        weights = synthetic.batch("encdec", 64, vocab, max_len, rng)["weights"]
        for n in weights.sum(axis=1) - 1:
            hits += 2 / (vocab - 5) + 1
            total += n + 1
    assert thousand_layers.blind_chance(vocab, max_len)["accuracy"] == pytest.approx(
        hits / total, abs=0.003
    )


def test_thousand_layers_onset_and_verdict():
    curve = [(10, 0.1), (20, 0.3), (30, 0.6), (40, 0.95)]
    assert thousand_layers_report.first_reaching(curve, 0.5) == 30
    assert thousand_layers_report.first_reaching(curve, 0.99) is None
    entropy = 2.4
    assert thousand_layers.verdict({"nonfinite_step": 3, "eval_loss": math.nan}, entropy) == (
        "diverged"
    )
    assert thousand_layers.verdict({"nonfinite_step": None, "eval_loss": 1.5}, entropy) == "stuck"
    assert thousand_layers.verdict({"nonfinite_step": None, "eval_loss": 1.4}, entropy) == (
        "trained"
    )


def _variant(lr: float, dropout: float, layers: int, scheme: str = "deepnorm") -> dict:
    train = [
        {"split": "train", "step": step, "accuracy": acc, "step_time_s": 0.5}
        for step, acc in ((10, 0.1), (20, 0.3), (30, 0.6), (40, 0.95))
    ]
    run = {"scheme": scheme, "layers": layers, "lr": lr, "warmup": 50, "dropout": dropout}
    return {
        **run,
        "records": train,
        "diagnostics": [],
        "eval_loss": 0.25,
        "eval_accuracy": 0.952,
        "verdict": "trained",
    }


def test_thousand_layers_variants_table_orders_and_filters_the_runs():
    settings = {"task": {"vocab_size": 16}, "chance": {"accuracy": 0.15}, "steps": 40}
    onset = {"settings": settings, "runs": [_variant(1e-3, 0.0, 6), _variant(1e-3, 0.0, 50)]}
    onset["runs"].append(_variant(1e-3, 0.0, 50, scheme="post_ln"))
    other = {"settings": settings, "runs": [_variant(5e-3, 0.1, 50)]}
    table = thousand_layers_report.variants_table(other, onset, depths=(50,))
    rows = table.strip().splitlines()[2:]
    assert rows == [
        "| 50L-50L | 0.001 | 50 | 0 | 20 | 30 | 40 | 0.250 / 95.2% | trained | 0.500 |",
        "| 50L-50L | 0.005 | 50 | 0.1 | 20 | 30 | 40 | 0.250 / 95.2% | trained | 0.500 |",
    ]
    other["settings"] = {**settings, "task": {"vocab_size": 32}}
    with pytest.raises(ValueError, match="tasks differ"):
        thousand_layers_report.variants_table(onset, other, depths=(50,))


def test_thousand_layers_flags_change_the_setting():
    opening.parse_args(
        ["--setting=onset", "--depths=3,4", "--lr=2e-3", "--dropout=0.1"],
        ["onset"],
        "thousand_layers",
    )
    s = thousand_layers.setting_with_overrides("onset")
    assert s["runs"] == [("deepnorm", 3), ("deepnorm", 4)]
    assert (s["lr"], s["warmup"], s["dropout"]) == (2e-3, 50, 0.1)
    opening.parse_args(["--setting=quick", "--depths=7"], ["quick"])
    assert thousand_layers.setting_with_overrides("quick")["runs"] == [
        ("deepnorm", 7),
        ("post_ln", 7),
    ]
    opening.parse_args(["--setting=quick", "--depths=a"], ["quick"])
    with pytest.raises(ValueError, match=r"^--depths=a: not integers$"):
        thousand_layers.setting_with_overrides("quick")
    opening.parse_args([], ["quick"])  # the defaults again for later tests


def test_a_run_stopped_by_a_signal_is_not_recorded(tmp_path, monkeypatch):
    """SIGTERM ends a run early with {"stopped": True}: the experiment exits with the trainer's
    line instead of recording a partial run as the config's result."""
    message = "stopped by SIGTERM after update 3/8; nothing saved (checkpoint_every=0)"
    monkeypatch.setattr(
        resumable.train, "run", lambda config, workdir: {"stopped": True, "message": message}
    )
    results = results_file.Results(str(tmp_path), "grid", "smoke", {"steps": 8})
    config = experiment_base.base_config("smoke")
    with pytest.raises(SystemExit, match=r"stopped by SIGTERM after update 3/8.*not recorded"):
        common.run_grid(results, [{"seed": 0}], lambda key: config, None, str(tmp_path / "r"))
    assert results_file.Results(str(tmp_path), "grid", "smoke", {"steps": 8}).runs == []


@pytest.mark.parametrize("setting", ["gated", "gated_first"])
def test_model_update_gated_setting_pairs_each_depth_with_a_plain_and_a_gated_ffn(setting):
    keys = model_update.run_keys(setting)
    assert {(k["scheme"], k["ffn"], k["layers"]) for k in keys} == {
        (s, f, n) for s in ("deepnorm", "subln") for f in ("relu", "swiglu")
        for n in (6, 18, 50, 100, 200)
    }  # fmt: skip
    assert {k["warmup"] for k in keys} == {"none"}
    base = model_update._base_config(setting)
    configs = {k["ffn"]: model_update.run_config(base, setting, k) for k in keys[:: len(keys) - 1]}
    plain, gated = configs["relu"].model, configs["swiglu"].model
    assert (plain.activation, plain.ffn_dim, gated.activation, gated.ffn_dim) == (
        "relu", 128, "swiglu", 88
    )  # fmt: skip
    # equal parameters: 2·d·128 in the plain FFN, 3·d·88 ≈ 2·d·132 in the gated one (+3%)
    assert abs(3 * 88 - 2 * 128) / (2 * 128) < 0.04
    assert configs["relu"].optimizer.learning_rate == common.PAPER_LR
    assert configs["relu"].schedule.name == "constant"  # no warm-up
    # gated_first: ΔF after every one of the first 10 updates (before gated's ceiling)
    first = setting == "gated_first"
    assert (configs["relu"].total_steps, configs["relu"].diagnostics.every) == (
        (10, 1) if first else (100, 10)
    )


def test_dropout_gap_smoke_scores_each_checkpoint_in_both_modes(tmp_path):
    """Both checkpoints, both splits, both modes; dropout off is deterministic, so scoring
    again gives the same figures, and dropout on differs from it (masks fire); the source
    sensitivity of each."""
    payload = dropout_gap.main(["--setting=smoke", f"--out={tmp_path}"])
    results = payload["results"]
    assert {(r["update"], r["split"], r["mode"]) for r in results} == {
        (u, s, m)
        for u in dropout_gap.SETTINGS["smoke"]
        for s in ("train", "validation")
        for m in dropout_gap.MODES
    }
    by = {(r["update"], r["split"], r["mode"]): r for r in results}
    assert by[(2, "train", "dropout off")]["nll"] != by[(4, "train", "dropout off")]["nll"]
    assert by[(4, "train", "dropout off")]["nll"] != by[(4, "train", "dropout on")]["nll"]
    # the smoke model is an encoder-decoder: each cell also scores it with shifted sources
    assert all(isinstance(r["source_sensitivity"], float) for r in results)
    table = (tmp_path / "dropout_gap.md").read_text()
    assert "| update | train, dropout off | train, dropout on |" in table
    assert "NLL / token accuracy / source sensitivity (nats)" in table
    saved = json.loads((tmp_path / "dropout_gap.json").read_text())
    assert saved["results"] == results
    command = f"python -m deepnet_jax.experiments.dropout_gap --setting=smoke --out={tmp_path}"
    assert saved["header"]["command"] == command  # common.records.header


@pytest.mark.parametrize("setting", sorted(dropout_gap.SETTINGS))
def test_dropout_gap_keeps_every_checkpoint_it_scores(tmp_path, setting):
    # the quick setting once kept 4 of its 5 checkpoints and lost update 400 after 1,800 updates
    from deepnet_jax.runs import checkpoint

    c = dropout_gap.base_config(setting)
    ckpt = checkpoint.Checkpointer(str(tmp_path), c.checkpoint_every, c.max_to_keep)
    last = c.total_steps
    saved = [*range(c.checkpoint_every, last + 1, c.checkpoint_every)]
    for step in saved + ([last] if last % c.checkpoint_every else []):  # the trainer's saves
        ckpt.save(step, {"w": np.zeros(2, np.float32)}, {}, {"step": step})
    ckpt.manager.wait_until_finished()
    assert set(dropout_gap.SETTINGS[setting]) <= set(ckpt.manager.all_steps())
