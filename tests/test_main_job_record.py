"""The main job's committed record (benchmarks/main_job.py) and the tables generated from it in
README.md and docs/main_job.md."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import main_job, source_at_init
from deepnet_jax.common import records
from deepnet_jax.runs.workdir import RunDir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "docs", "records", "main_job.json")


def _record() -> dict:
    with open(RECORD) as f:
        return json.load(f)


def test_the_docs_tables_are_the_record():
    record = _record()
    for doc in ("README.md", os.path.join("docs", "main_job.md")):
        assert records.block(os.path.join(ROOT, doc), "main-job") == main_job.table(record), doc
    scores = records.block(os.path.join(ROOT, "docs", "main_job.md"), "main-job-scores")
    assert scores == main_job.arm_table(record)  # beside the arms' tables


def test_docs_get_the_blocks_they_have_markers_of(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text("<!-- generated: main-job -->\n<!-- end: main-job -->\n")
    assert main_job.write_docs(str(doc), _record()) == ["main-job"]
    doc.write_text(
        doc.read_text() + "<!-- generated: main-job-scores -->\nx\n<!-- end: main-job-scores -->\n"
    )
    assert main_job.write_docs(str(doc), _record()) == ["main-job", "main-job-scores"]
    assert records.block(str(doc), "main-job-scores") == main_job.arm_table(_record())


def test_the_record_is_the_shipped_main_job_over_three_seeds():
    record = _record()
    assert record["command"].startswith("python -m benchmarks.main_job")
    assert record["commit"] and record["date"] and record["jax"]
    assert record["overrides"] == []  # the README's command, nothing changed
    assert sorted(r["seed"] for r in record["runs"]) == [0, 1, 2]
    for run in record["runs"]:
        assert run["steps"] == 1800
        assert run["test_sentences"] == 1763
        assert run["cpu_seconds"] > 0 and run["wall_seconds"] > 0
        # a run that translates: 2 updates of the same job score test BLEU 0.01
        assert run["test_bleu"] > 10 and run["test_source_sensitivity"] > 1


def test_progress_keeps_every_validation_and_the_median_step(tmp_path):
    """The record's ``validations`` and ``median_step_s`` come from the run's metrics file."""
    lines = [
        {"split": "train", "step": 50, "loss": 8.2, "step_time_s": 0.58},
        {
            "split": "eval",
            "step": 600,
            "loss": 4.03,
            "source_sensitivity": 0.81,
            "bleu": 5.4,
            "distinct_hypotheses": 0.92,
            "chrf": 19.9,
        },
        {"split": "train", "step": 100, "loss": 7.1, "step_time_s": 0.31},
        {"split": "train", "step": 150, "loss": 6.9, "step_time_s": 0.33},
        {"split": "test", "step": 1800, "bleu": 17.6},
    ]
    with open(RunDir(str(tmp_path)).metrics, "w") as f:
        f.write("".join(json.dumps(row) + "\n" for row in lines))
    kept = main_job.progress(str(tmp_path))
    assert kept["median_step_s"] == 0.33
    assert kept["validations"] == [
        {
            "step": 600,
            "loss": 4.03,
            "source_sensitivity": 0.81,
            "bleu": 5.4,
            "distinct_hypotheses": 0.92,
        }
    ]


def _arm_record() -> dict:
    validations = [
        {"step": s, "source_sensitivity": x} for s, x in ((600, 0.61), (1200, 1.32), (1800, 1.82))
    ]
    run = {
        "seed": 2,
        "test_bleu": 14.7,
        "test_chrf": 35.11,
        "test_distinct_hypotheses": 0.981,
        "wall_seconds": 812.4,
        "validations": validations,
    }
    return {"arm": "modern", "overrides": ["--config.model.norm=rmsnorm"], "runs": [run]}


def test_an_arm_goes_only_into_its_own_block(tmp_path):
    doc = tmp_path / "page.md"
    default = "<!-- generated: main-job -->\nkept\n<!-- end: main-job -->\n"
    doc.write_text(
        default + "<!-- generated: main-job-arm-modern -->\n<!-- end: main-job-arm-modern -->\n"
    )
    assert main_job.write_docs(str(doc), _arm_record()) == ["main-job-arm-modern"]
    assert records.block(str(doc), "main-job") == "kept"
    assert records.block(str(doc), "main-job-arm-modern").splitlines()[2] == (
        "| 2 | 14.70 / 35.11 | 98.1% | 0.61 / 1.32 / 1.82 | 812 s |"
    )


def test_an_arm_needs_a_name_and_its_overrides(tmp_path, monkeypatch, capsys):
    out = str(tmp_path / "r.json")
    for argv, message in (
        (["--arm=Modern", "--config.model.norm=rmsnorm"], "--arm must be lowercase"),
        (["--arm=modern"], "--arm needs the overrides"),
    ):
        monkeypatch.setattr("sys.argv", ["main_job", f"--out={out}", *argv])
        with pytest.raises(SystemExit) as exit_:
            main_job.main()
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err
    assert not os.path.exists(out)  # refused before any run


# the arms' records (docs/main_job.md, "The main job on a modern block"): their overrides are
# the model fields of benchmarks.source_at_init's arms, so the init check measures the same models
ARMS = {
    name: [f"--config.model.{k}={v}" for k, v in fields.items()]
    for name, fields in source_at_init.ARMS.items()
    if fields
}
# the arms on Ding's sentences (docs/main_job.md, "Why the default changed"):
# the shipped ding_de_en config, and the previous default's model, budget and buckets on it
DING = ["--config.data.dataset=ding_de_en"]
ARMS["ding"] = DING
ARMS["previous-default"] = [
    *DING,
    "--config.model.num_encoder_layers=18",
    "--config.model.num_decoder_layers=18",
    "--config.model.d_model=64",
    "--config.model.ffn_dim=256",
    "--config.total_steps=2600",
    "--config.eval_every=650",
    "--config.data.bucket_boundaries=(8,16,32,64)",
]
# bfloat16 compute (docs/benchmarks.md, "bfloat16 compute"), against the budget table's default
ARMS["bf16"] = ["--config.model.dtype=bfloat16"]
# each arm's updates and validations (the default's budget where the arm keeps it)
STEPS = {"previous-default": (2600, [650, 1300, 1950, 2600])}
# the page holding an arm's table, where it is not docs/main_job.md
ARM_DOCS = {"bf16": "benchmarks.md"}


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_each_arms_table_is_its_record(arm):
    path = os.path.join(ROOT, "docs", "records", f"main_job_{arm.replace('-', '_')}.json")
    with open(path) as f:
        record = json.load(f)
    assert record["arm"] == arm and record["overrides"] == ARMS[arm]
    assert record["commit"] and not record["commit"].endswith("+dirty")
    steps, validations = STEPS.get(arm, (1800, [600, 1200, 1800]))
    for run in record["runs"]:
        assert run["steps"] == steps and [v["step"] for v in run["validations"]] == validations
        assert run["test_sentences"] == (1000 if DING[0] in ARMS[arm] else 1763)
    doc = os.path.join(ROOT, "docs", ARM_DOCS.get(arm, "main_job.md"))
    assert records.block(doc, f"main-job-arm-{arm}") == main_job.arm_table(record)
