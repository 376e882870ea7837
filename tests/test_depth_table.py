"""The depth table (deepnet_jax.experiments.depth_table): its smoke setting end to end, two
shards into one results file, the grids and configs of each setting, and the report's rules
(seed aggregation, onsets, differences called only beyond the seed spread)."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

from deepnet_jax.common import records
from deepnet_jax.configs import depth_table_recipe as table_recipe
from deepnet_jax.configs import experiment_base, experiment_rows
from deepnet_jax.data import synthetic
from deepnet_jax.experiments import (
    common,
    compact_results,
    depth_table,
    lr_tolerance,
    model_update,
    opening,
    results_file,
    resumable,
    thousand_layers,
)
from deepnet_jax.experiments import depth_table_plot as dtp
from deepnet_jax.experiments import depth_table_report as dtr
from deepnet_jax.experiments import depth_table_settings as dts
from deepnet_jax.model import architectures
from deepnet_jax.training import config_checks, progress
from deepnet_jax.training.run_config import RunConfig

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_smoke_end_to_end_and_a_second_shard_adds_to_the_same_file(tmp_path):
    """Shard 0/2 runs half the smoke grid and reports it; shard 1/2 (another process would run
    beside it) adds the other half to the same file and reports all six runs."""
    first = depth_table.main(["--setting=smoke", f"--out={tmp_path}", "--shard=0/2"])
    assert len(first["runs"]) == 3 and {r["seed"] for r in first["runs"]} == {0}
    payload = depth_table.main(["--setting=smoke", f"--out={tmp_path}", "--shard=1/2"])
    runs = payload["runs"]
    assert {(r["scheme"], r["seed"]) for r in runs} == {
        (s, seed) for s in ("post_ln", "deepnorm", "dlcl_pre") for seed in (0, 1)
    }
    assert all(r["verdict"] in common.VERDICTS for r in runs)
    assert all(r["records"] and r["task"] == "reversal" for r in runs)
    saved = json.loads((tmp_path / "depth_table.json").read_text())
    assert len(saved["runs"]) == 6
    # the header is the command that created the file (shard 0), kept by shard 1's additions;
    # each run says the commit its command started from and when it was recorded
    module = "python -m deepnet_jax.experiments.depth_table"
    assert saved["header"]["command"] == f"{module} --setting=smoke --out={tmp_path} --shard=0/2"
    assert saved["header"]["commit"] == records.commit() and next(iter(saved)) == "header"
    assert all(r["commit"] == records.commit() and r["date"].endswith("Z") for r in runs)
    assert all(r["cpu"] == records.cpu_model() for r in runs)
    assert all(r["cores"] == records.cores() >= 1 for r in runs)
    table = (tmp_path / "depth_table.md").read_text()
    assert "| dlcl_pre | " in table and "×2" in table and "seeds 0, 1" in table
    assert "2L-2L: post_ln" in table  # the called differences
    assert dtr._CALLS_LEGEND in table  # what >, ≈ and ? mean
    assert f"Runs by device: {jax.devices()[0].device_kind}: 6 (2L-2L)." in table
    assert (tmp_path / "depth_table.png").stat().st_size > 2000
    # what depth costs: CPU and wall seconds per run by depth, onsets against depth
    device = jax.devices()[0].device_kind
    assert f"| reversal | 2L-2L | {device} | 6 | " in table and "### What depth costs" in table
    assert (tmp_path / "depth_table_onsets.png").stat().st_size > 2000
    # the two seeds of a cell draw different data and initial weights
    losses = {r["seed"]: r["eval_loss"] for r in runs if r["scheme"] == "deepnorm"}
    assert losses[0] != losses[1]
    # another machine's share merges into a file by run, training nothing
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    seed0 = dict(saved, runs=[r for r in saved["runs"] if r["seed"] == 0])
    (elsewhere / "depth_table.json").write_text(json.dumps(seed0))
    merged = depth_table.main(
        ["--setting=smoke", f"--out={elsewhere}", f"--merge={tmp_path / 'depth_table.json'}"]
    )
    assert sorted(json.dumps(r, sort_keys=True) for r in merged["runs"]) == sorted(
        json.dumps(r, sort_keys=True) for r in saved["runs"]
    )  # each run with its own commit and date
    assert merged["header"] == saved["header"]  # the file's, not the merging command's
    assert not (elsewhere / "runs").exists()  # no run was trained
    assert "×2" in (elsewhere / "depth_table.md").read_text()
    with pytest.raises(SystemExit, match="made with other settings"):
        depth_table.main(
            [
                "--setting=smoke",
                f"--out={elsewhere}",
                f"--merge={REPO / 'docs/reproduction/depth_table_init.json'}",
            ]
        )


def test_bad_shard_is_one_error_line():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "deepnet_jax.experiments.depth_table",
            "--setting=smoke",
            "--shard=2/2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == "error: --shard='2/2': needs 0 <= i < n"
    assert resumable.parse_shard("1/3") == (1, 3)
    with pytest.raises(ValueError, match="expected i/n"):
        resumable.parse_shard("1")


def test_another_commands_flag_is_refused_not_ignored():
    """depth_table imports thousand_layers, so absl knows its --lr; depth_table does not read
    it, so it refuses it (one line naming the flags it takes) instead of training without it."""
    with pytest.raises(SystemExit) as e:
        depth_table.main(["--setting=smoke", "--lr=0.1"])
    assert str(e.value) == (
        "error: --lr is not a flag of depth_table; it takes --checkpoint_every, --data_dir, "
        "--layers, --merge, --out, --setting, --shard, --tasks"
    )
    with pytest.raises(SystemExit, match="--batch_size is not a flag of depth_table"):
        depth_table.main(["--setting=smoke", "--batch_size=4"])  # the decoding CLI's
    text = opening.usage(dts.SETTINGS, "depth_table")
    assert all(f"  --{name}: " in text for name in ("shard", "tasks", "layers", "merge", "out"))
    assert "--lr" not in text
    opening.parse_args([], ["quick"])  # the defaults again for later tests


def test_the_longer_budget_row_is_quicks_500l_cells_with_twice_the_updates():
    """``long500``: the four scanned schemes at 500L-500L on reversal64, seed 0, each run's
    config quick's with 1,600 updates in place of 800 and nothing else changed."""
    base, quick = table_recipe.base_config("long500"), table_recipe.base_config("quick")
    keys = dts.keys("long500", base)
    assert [(k["scheme"], k["layers"], k["seed"], k["task"]) for k in keys] == [
        (s, 500, 0, "reversal64") for s in ("post_ln", "pre_ln", "deepnorm", "subln")
    ]
    quick_keys = {json.dumps(k, sort_keys=True) for k in dts.keys("quick", quick)}
    assert all(json.dumps(k, sort_keys=True) in quick_keys for k in keys)  # quick's own runs
    for key in keys:
        run = table_recipe.make_config(base, key).to_dict()
        same = table_recipe.make_config(quick, key).to_dict()
        assert (run.pop("total_steps"), same.pop("total_steps")) == (1600, 800)
        assert run == same
    recorded = depth_table.run_recipe(base)
    assert recorded["updates"] == 1600 and recorded["lr"] == 2e-3 and recorded["warmup"] == 400


def test_tasks_and_depths_pick_part_of_a_setting_in_its_order():
    base = table_recipe.base_config("quick")
    every = dts.keys("quick", base)
    part = depth_table.select(every, "quick", ["reversal"], ["6", "18"])
    assert part == [k for k in every if k["task"] == "reversal" and k["layers"] in (6, 18)]
    assert len(part) == 12 * 3  # 4 scanned schemes and 2 DLCL rows at 2 depths, 3 seeds
    assert depth_table.select(every, "quick", [], []) == every
    assert {k["layers"] for k in depth_table.select(every, "quick", [], ["50"])} == {50}
    with pytest.raises(ValueError, match=r"^--tasks=wmt: quick has tasks reversal64, reversal$"):
        depth_table.select(every, "quick", ["wmt"], [])
    layers = r"^--layers=12: quick has layers 6, 18, 50, 100, 200, 500$"
    with pytest.raises(ValueError, match=layers):
        depth_table.select(every, "quick", [], ["12"])


def test_grids_hold_every_cell_the_issue_names():
    quick = dts.GRIDS["quick"]
    assert quick["seeds"] == [0, 1, 2] and quick["tasks"] == ["reversal64", "reversal"]
    schemes = ("post_ln", "pre_ln", "deepnorm", "subln")
    assert set(quick["cells"]) == {(s, n) for s in schemes for n in (6, 18, 50, 100)} | {
        (s, n) for s in ("dlcl_pre", "dlcl_post") for n in (6, 18)
    }
    full = dts.GRIDS["full"]
    assert set(quick["cells"]) < set(full["cells"])
    assert {n for _, n in full["cells"]} == {6, 12, 18, 50, 100, 200}
    corpus = dts.GRIDS["corpus"]
    assert set(corpus["cells"]) == {
        (s, n) for s in ("post_ln", "pre_ln", "deepnorm") for n in (6, 18)
    }
    assert corpus["seeds"] == [0, 1]
    base = table_recipe.base_config("quick")
    keys = dts.keys("quick", base)
    assert len(keys) == 2 * 20 * 3 + 18  # and the 1,000-layer columns' 18 runs
    first = keys[:60]  # reversal64: the scanned schemes by depth, then DLCL's, seeds together
    assert {k["task"] for k in first} == {"reversal64"}
    assert [k["layers"] for k in first] == [n for n in (6, 18, 50, 100) for _ in range(12)] + [
        n for n in (6, 18) for _ in range(6)
    ]
    assert [k["seed"] for k in first[:6]] == [0, 1, 2, 0, 1, 2]
    recipe = table_recipe.RECIPE
    assert {(k["lr"], k["warmup"]) for k in keys} == {(recipe.lr, recipe.warmup)}
    # the 1,000-layer columns on reversal64, last: 200L every seed, seed 0 of each scheme
    # first; 500L seed 0 of each scheme, then DeepNorm's seeds 1 and 2
    deep = [(k["scheme"], k["layers"], k["seed"]) for k in keys[120:]]
    assert {k["task"] for k in keys[120:]} == {"reversal64"}
    assert deep[:4] == [(s, 200, 0) for s in schemes]
    assert sorted(deep[4:12]) == sorted((s, 200, seed) for s in schemes for seed in (1, 2))
    assert deep[12:] == [(s, 500, 0) for s in schemes] + [
        ("deepnorm", 500, 1),
        ("deepnorm", 500, 2),
    ]


def test_since_deepnet_setting_is_quicks_recipe_for_the_new_schemes_seed_by_seed():
    base = table_recipe.base_config("since_deepnet")
    quick = table_recipe.base_config("quick")
    assert base.to_dict() == quick.to_dict()  # the same recipe, task and model as quick's rows
    keys = dts.keys("since_deepnet", base)
    # every scheme, Pre-LN with DyT and Pre-LN under CompleteP
    rows = (*common.SINCE_DEEPNET, "pre_ln+dyt", "pre_ln+completep")
    assert rows == common.SINCE_DEEPNET_ROWS
    per_seed = len(rows) * 2
    assert len(keys) == per_seed * 3
    assert {k["scheme"] for k in keys} == set(rows)
    assert [k["seed"] for k in keys] == [s for s in (0, 1, 2) for _ in range(per_seed)]
    # within a seed: the scanned schemes by depth, then DenseFormer's unrolled stacks
    assert [(k["scheme"], k["layers"]) for k in keys[per_seed - 2 : per_seed]] == [
        ("denseformer", 6),
        ("denseformer", 18),
    ]
    configs = [table_recipe.make_config(base, k) for k in keys[:per_seed]]
    assert [c.model.scan_layers for c in configs] == [True] * (per_seed - 2) + [False] * 2
    for key, c in zip(keys[:per_seed], configs, strict=True):  # the row's fields and norm
        for name, value in experiment_rows.row_fields(key["scheme"]).items():
            assert c.model[name] == value, (key, name)
        assert c.model.norm == ("dyt" if key["scheme"] == "pre_ln+dyt" else "layernorm")
        typed = config_checks.stand_in(RunConfig.from_config(c))
        architectures.build(typed.model)  # an accepted config is a model
    for experiment in (model_update, lr_tolerance):  # the other instruments' rows
        assert experiment.SETTINGS["since_deepnet"]
    assert {k["scheme"] for k in model_update.run_keys("since_deepnet")} == set(rows)
    assert lr_tolerance.SETTINGS["since_deepnet"]["schemes"] == list(rows)


def test_one_recipe_every_synthetic_run_differs_only_in_task_scheme_depth_and_seed():
    base = table_recipe.base_config("quick")
    r = table_recipe.RECIPE
    assert (base.optimizer.learning_rate, base.schedule.warmup_steps) == (r.lr, r.warmup)
    assert (base.total_steps, base.data.batch_size, base.model.dropout) == (
        r.updates,
        r.batch_size,
        r.dropout,
    )
    configs = [table_recipe.make_config(base, k) for k in dts.keys("quick", base)]
    shared = ("optimizer", "schedule", "total_steps", "label_smoothing", "log_every")
    for c in configs:
        assert all(c[f] == configs[0][f] for f in shared)
        assert (c.model.d_model, c.model.ffn_dim, c.model.num_heads) == (64, 128, 2)
    hard = next(c for c in configs if c.model.vocab_size == 69)
    assert (hard.data.min_len, hard.data.max_len) == (16, 25)
    rows = synthetic.batch("encdec", 256, 69, 25, np.random.default_rng(0), hard.data.min_len)
    lengths = rows["weights"].sum(axis=1) - 1  # content tokens (the target adds EOS)
    assert lengths.min() == 16 and lengths.max() == 24
    assert set(np.unique(rows["src"])) - {0} <= set(range(5, 69))


def test_corpus_setting_is_the_main_job_with_only_scheme_depth_and_seed_changed():
    main_job = experiment_base.main_job_config()
    base = table_recipe.base_config("corpus")
    assert base.decode.eval_sentences == table_recipe.CORPUS_BLEU_SENTENCES
    assert base.checkpoint_every == 0 and base.eval_every == 0
    assert base.diagnostics.every == 100  # measurement only: the training is the main job's
    key = dts.keys("corpus", base)[-1]
    run = table_recipe.make_config(base, key)
    assert (run.model.scheme, run.model.num_encoder_layers, run.seed) == ("deepnorm", 18, 1)
    assert run.model.num_decoder_layers == 18 and run.total_steps == main_job.total_steps
    for group in ("optimizer", "schedule", "data"):
        assert run[group].to_dict() == main_job[group].to_dict(), group
    varied = ("scheme", "num_encoder_layers", "num_decoder_layers")
    assert {k: v for k, v in run.model.items() if k not in varied} == {
        k: v for k, v in main_job.model.items() if k not in varied
    }


def test_a_corpus_run_that_ignores_its_source_is_stuck_however_low_its_nll():
    """The corpus's 0.25-nat bar is passed by a target-side language model too (DeepNorm
    18L-18L on the main job ended at NLL 4.44 against the unigram 6.27 with source
    sensitivity 0.00 and greedy BLEU 0): trained needs a decoder that reads its source."""
    corpus = {"unigram_entropy": 6.27}
    run = {"eval_loss": 4.44, "train_loss": 3.6, "first_train_loss": 8.8, "nonfinite_step": None}
    assert depth_table.verdict(run | {"eval_source_sensitivity": 2.06}, corpus) == "trained"
    assert depth_table.verdict(run | {"eval_source_sensitivity": 0.0}, corpus) == "stuck"
    edge = progress.SOURCE_BLIND_NATS
    assert depth_table.verdict(run | {"eval_source_sensitivity": edge}, corpus) == "trained"
    high = run | {"eval_loss": 6.1, "eval_source_sensitivity": 2.0}
    assert depth_table.verdict(high, corpus) == "stuck"  # the NLL bar still applies
    lm = {"unigram_entropy": 3.3, "lm": True}  # no source: the NLL bar alone
    assert depth_table.verdict(run | {"eval_loss": 2.0}, lm) == "trained"


def test_a_difference_is_called_only_beyond_the_seed_spread():
    assert dtr.compare([0.9, 0.95, 0.97], [0.4, 0.5, 0.6]) == ">"
    assert dtr.compare([0.4, 0.5, 0.6], [0.9, 0.95, 0.97]) == "<"
    assert dtr.compare([0.5, 0.9], [0.6, 0.7]) == "≈"  # ranges overlap
    assert dtr.compare([0.1, 0.2], [math.nan, 0.05]) == ">"  # a diverged seed loses
    assert dtr.compare([3.0, 3.1], [4.0, 4.2], higher_better=False) == ">"  # lower NLL wins
    assert dtr.compare([0.9], [0.1, 0.2]) == "?"  # one seed: no spread, nothing called


def _run(seed, verdict, acc, train_acc, nonfinite=None):
    records = [
        {"split": "train", "step": 25 * (i + 1), "accuracy": a, "nll": 3.0 - a}
        for i, a in enumerate(train_acc)
    ]
    return {
        "task": "reversal",
        "scheme": "post_ln",
        "layers": 6,
        "seed": seed,
        "lr": 1e-3,
        "warmup": 50,
        "verdict": verdict,
        "eval_accuracy": acc,
        "eval_loss": 1.0,
        "nonfinite_step": nonfinite,
        "records": records,
    }


def test_cell_text_and_onsets():
    chance = thousand_layers.blind_chance(16, 12)
    levels = {"unigram_entropy": 2.4, "chance": chance}
    runs = [
        _run(0, "trained", 0.9, [0.1, 0.3, 0.6, 0.95]),
        _run(1, "trained", 0.7, [0.1, 0.2, 0.55, 0.8]),
        _run(2, "diverged", math.nan, [0.1], nonfinite=31),
    ]
    assert (
        dtr.cell_text(runs, "eval_accuracy")
        == "trained ×2, diverged ×1; 0.8 (0.7–0.9); diverged at update 31"
    )
    assert dtr.onsets(runs[0], levels) == {"left_chance": 50, "to_0.5": 75, "to_0.9": 100}
    assert dtr.onsets(runs[1], levels) == {"left_chance": 75, "to_0.5": 75, "to_0.9": None}
    corpus = {"unigram_entropy": 3.0}  # left chance: training NLL ≤ 2.75 (3 − 0.25)
    assert dtr.onsets(runs[0], corpus)["left_chance"] == 50
    assert dtr.metric(corpus)[0] == "eval_bleu_greedy" and dtr.metric(levels)[0] == "eval_accuracy"


def test_newer_schemes_are_called_against_the_papers_rows_only():
    runs = [
        _run(seed, "trained", acc, [0.5]) | {"scheme": scheme}
        for scheme, accs in (("pre_ln", (0.5, 0.6)), ("rezero", (0.8, 0.9)), ("admin", (0.7, 0.8)))
        for seed, acc in enumerate(accs)
    ]
    settings = {"lr": 1e-3, "warmup": 50, "updates": 100, "batch": 8, "dropout": 0.0}
    settings |= {"log_every": 25, "grid": {"seeds": [0, 1], "tasks": ["reversal"]}}
    levels = {"unigram_entropy": 2.4, "chance": {"accuracy": 0.1, "nll": 2.3}}
    text = dtr.table(runs, {**settings, "levels": {"reversal": levels}})
    calls = text[text.index("differences") :]
    assert "pre_ln < rezero" in calls and "pre_ln < admin" in calls
    assert "rezero" not in calls.replace("pre_ln < rezero", "")  # no newer-vs-newer pair


def test_the_corpus_report_states_the_source_rule_beside_the_nll_bar():
    """A reader of the corpus table sees both conditions of ``verdict`` for a translation
    task; a language-model task, which has no source, gets the NLL bar alone."""
    settings = {"lr": 2e-3, "warmup": 400, "updates": 1800, "batch": 1024, "dropout": 0.1}
    settings |= {"log_every": 50, "grid": {"seeds": [0], "tasks": ["corpus"]}}
    translation = _run(0, "stuck", 0.2, [0.2]) | {"task": "corpus", "eval_bleu_greedy": 0.0}
    translation["eval_source_sensitivity"] = 0.0
    text = dtr.table([translation], {**settings, "levels": {"corpus": {"unigram_entropy": 6.266}}})
    bar = f"trained: validation NLL < 6.016 and source sensitivity ≥ {progress.SOURCE_BLIND_NATS:g}"
    assert bar in text
    lm = {k: v for k, v in translation.items() if k != "eval_source_sensitivity"}
    text = dtr.table([lm], {**settings, "levels": {"corpus": {"unigram_entropy": 6.266}}})
    assert "(trained: validation NLL < 6.016)." in text


def test_two_results_objects_on_one_file_keep_both_runs(tmp_path):
    """What two shards do: each adds under the lock to what the other wrote."""
    a = results_file.Results(str(tmp_path), "grid", "smoke", {"steps": 4})
    b = results_file.Results(str(tmp_path), "grid", "smoke", {"steps": 4})
    a.add({"seed": 0}, {"eval_loss": 1.0})
    b.add({"seed": 1}, {"eval_loss": 2.0})
    a.add({"seed": 2}, {"eval_loss": 3.0})
    again = results_file.Results(str(tmp_path), "grid", "smoke", {"steps": 4})
    assert [r["seed"] for r in again.runs] == [0, 1, 2]


def test_a_results_file_keeps_its_creators_header_and_an_old_file_stays_without(tmp_path):
    """The command that writes a results file first is its header, whichever shard started
    first; a file from before headers takes runs and is written as before, with none."""
    first = results_file.Results(str(tmp_path), "grid", "smoke", {"steps": 4}, head={"c": 1})
    second = results_file.Results(str(tmp_path), "grid", "smoke", {"steps": 4}, head={"c": 2})
    second.add({"seed": 0}, {"eval_loss": 1.0})
    first.add({"seed": 1}, {"eval_loss": 2.0})
    saved = json.loads((tmp_path / "grid.json").read_text())
    assert saved["header"] == {"c": 2} and [r["seed"] for r in saved["runs"]] == [0, 1]
    old = {"setting": "smoke", "settings": {"steps": 4}, "runs": [{"seed": 0, "eval_loss": 1.0}]}
    (tmp_path / "old").mkdir()
    path = tmp_path / "old" / "grid.json"
    path.write_text(compact_results.dumps(old))
    later = results_file.Results(str(tmp_path / "old"), "grid", "smoke", {"steps": 4})
    later.add({"seed": 1}, {"eval_loss": 2.0})
    grown = {**old, "runs": [*old["runs"], {"seed": 1, "eval_loss": 2.0}]}
    assert path.read_text() == compact_results.dumps(grown)


def test_init_setting_trains_each_reference_initialization():
    """The init grid's runs differ from the recipe only in model.init (and scheme, seed)."""
    base = table_recipe.base_config("init")
    configs = [table_recipe.make_config(base, k) for k in dts.keys("init", base)]
    assert len(configs) == 2 * 4 * 3
    assert {c.model.init for c in configs} == {"torchscale", "fairseq"}
    assert {(c.model.scheme, c.model.num_encoder_layers) for c in configs} == {
        (s, n) for s in ("post_ln", "pre_ln") for n in (6, 18)
    }
    assert base.model.init == "paper"  # the quick table's


def test_modern_lm_setting_is_the_modern_config_at_its_tiny_width():
    """configs/deepnorm_lm.py's blocks, the MODERN_LM width and recipe, decoder-only runs whose
    one stack has the cell's depth; the report reads bits per character, lower being better."""
    shipped = experiment_base.shipped_config("deepnorm_lm")
    base = table_recipe.base_config("modern_lm")
    k = table_recipe.MODERN_LM
    keys = dts.keys("modern_lm", base)
    assert {(key["scheme"], key["layers"]) for key in keys} == {
        (s, n) for s in ("pre_ln", "deepnorm", "subln") for n in (6, 100)
    }
    run = table_recipe.make_config(base, keys[-1])
    m = run.model
    assert (m.arch, m.scheme, m.num_encoder_layers, m.num_decoder_layers) == (
        "decoder", "subln", 0, 100
    )  # fmt: skip
    for name in ("positions", "activation", "norm", "use_bias", "tie_embeddings"):
        assert m[name] == shipped.model[name], name
    assert (m.d_model, m.num_kv_heads, m.ffn_dim) == (k["d_model"], k["num_kv_heads"], 168)
    assert (run.total_steps, run.optimizer.learning_rate) == (k["updates"], k["lr"])
    assert run.data.to_dict() | {"max_len": 0, "batch_size": 0} == shipped.data.to_dict() | {
        "max_len": 0,
        "batch_size": 0,
    }
    assert dtr.metric({"lm": True, "unigram_entropy": 3.0}) == (
        "eval_bits_per_char", "validation bits per character", False
    )  # fmt: skip
    assert dtr.depth_label(100, {"lm": True}) == "100L"


@pytest.mark.parametrize("setting", sorted(dts.GRIDS))
def test_the_recorded_recipe_is_the_one_the_runs_train_with(setting):
    """A results file records its recipe from the setting's base config; each run's config is
    made from that base by ``make_config``. They must agree on the schedule, the warm-up and
    the updates: modern_lm's record once said polynomial decay while its runs took the inverse
    square root that ``experiment_rows.with_run`` sets."""
    base = table_recipe.base_config(setting)
    recorded = depth_table.run_recipe(base, "recipes" not in dts.GRIDS[setting])
    for key in dts.keys(setting, base)[:2]:
        run = table_recipe.make_config(base, key)
        assert run.schedule.name == recorded.get("schedule", "inverse_sqrt")
        assert run.schedule.warmup_steps == recorded.get("warmup", key["warmup"])
        assert run.optimizer.learning_rate == recorded.get("lr", key["lr"])
        assert run.total_steps == recorded["updates"]
    note = dtr._recipe_note({"grid": dts.GRIDS[setting], **recorded})
    assert "(inverse square root)" in note or "constant" in note, note


def test_a_base_schedule_a_run_would_drop_is_refused():
    base = table_recipe.base_config("smoke")
    base.schedule.name = "cosine"
    with pytest.raises(ValueError, match=r"^schedule.name='cosine': an experiment's runs take"):
        experiment_rows.with_run(base, "deepnorm", 2, 1e-3, 10, 20)
    base.schedule.name = "constant"  # a warm-up-free base is one with_run may give a warm-up
    assert (
        experiment_rows.with_run(base, "deepnorm", 2, 1e-3, 10, 20).schedule.name == "inverse_sqrt"
    )


def test_every_row_of_a_figure_has_its_own_color():
    """The papers' rows beside the since_deepnet rows (docs/schemes.md's figure): no two rows
    share a color, and only the papers' rows are drawn solid."""
    rows = [*dtp.COLORS, *common.SINCE_DEEPNET_ROWS]
    styles = [dtp.style(row, rows) for row in rows]
    assert len({s["color"] for s in styles}) == len(rows)
    assert [s.get("linestyle", "-") == "-" for s in styles] == [r in dtp.COLORS for r in rows]


def test_a_device_added_after_the_run_is_reported_as_not_recorded():
    note = {"device": "cpu", "how": "typed in later"}
    runs = [{"layers": 6, "device": "cpu"}, {"layers": 6, "device": None, "device_note": note}]
    assert dtr.devices_note(runs, {}) == (
        "Runs by device: cpu: 1 (6L-6L); not recorded (cpu by a later note, device_note): "
        "1 (6L-6L)."
    )


@pytest.mark.parametrize(
    "setting, noted", [("quick", 33), ("init", 21), ("corpus", 2), ("modern_lm", 12)]
)
def test_committed_runs_record_their_device_or_say_how_it_is_known(setting, noted):
    """A run records the device JAX reported or none; the runs made before the field was kept
    whose device was typed in later carry null and a note of where they ran and how that is
    known, never a value as if recorded."""
    path = REPO / "docs" / "reproduction" / f"depth_table_{setting}.json"
    runs = json.loads(path.read_text())["runs"]
    notes = [run for run in runs if "device_note" in run]
    assert len(notes) == noted
    for run in notes:
        assert run["device"] is None and set(run["device_note"]) == {"device", "how"}


def test_the_report_names_each_columns_device_where_a_panel_mixes_devices():
    """The report's tables (:func:`dtr.table`) mark devices as the docs' tables do (tests/
    test_docs_tables.py): a header per column, `` · CPU`` on a cell off its column's device,
    each onset row's own device, the calls' depths and cross-device pairs; a panel on one
    device is as it was without the field."""
    h100 = "NVIDIA H100 80GB HBM3"
    cells = {("post_ln", 6): h100, ("pre_ln", 6): h100, ("dlcl_pre", 6): "cpu"}
    cells[("pre_ln", 50)] = "cpu"
    runs = [
        _run(seed, "trained", 0.5 + seed / 100, [0.5]) | {"scheme": s, "layers": n, "device": d}
        for (s, n), d in cells.items()
        for seed in range(2)
    ]
    settings = {"lr": 1e-3, "warmup": 50, "updates": 100, "batch": 8, "dropout": 0.0}
    settings |= {"log_every": 25, "grid": {"seeds": [0, 1], "tasks": ["reversal"]}}
    levels = {"unigram_entropy": 2.4, "chance": {"accuracy": 0.1, "nll": 2.3}}
    settings["levels"] = {"reversal": levels}
    text = dtr.table(runs, settings)
    assert "| scheme | 6L-6L (H100) | 50L-50L (CPU) |" in text
    assert "| dlcl_pre | trained ×2; 0.505 (0.5–0.51) · CPU |  |" in text
    assert "| post_ln | trained ×2; 0.505 (0.5–0.51) |  |" in text
    assert "| dlcl_pre | 6L-6L (CPU) |" in text and "| pre_ln | 6L-6L (H100) |" in text
    assert "- 6L-6L (H100): post_ln ≈ pre_ln; post_ln ≈ dlcl_pre (H100 against CPU);" in text
    one = dtr.table([r | {"device": "cpu"} for r in runs], settings)
    bare = dtr.table([r | {"device": None} for r in runs], settings)
    assert "Runs by device: cpu: 8" in one  # the note differs, and only the note
    assert one.replace("cpu: 8", "not recorded: 8") == bare
    assert "| scheme | 6L-6L | 50L-50L |" in one and "| pre_ln | 6L-6L |" in one
