"""The main job's design probes (deepnet_jax/experiments/main_job_probes.py): the smoke setting
end to end, each probe's config, and the table."""

from __future__ import annotations

import json

import pytest

from deepnet_jax.experiments import main_job_probes as probes


def test_smoke_runs_keep_each_validation_and_write_the_table(tmp_path):
    payload = probes.main(["--setting=smoke", f"--out={tmp_path}", "--checkpoint_every=0"])
    assert [r["row"] for r in payload["runs"]] == list(probes.SETTINGS["smoke"][0])
    for run in payload["runs"]:
        assert [v["update"] for v in run["validation"]] == [4, 8]
        assert run["validation"][-1]["loss"] == pytest.approx(run["eval_loss"], rel=1e-6)
        assert "source_sensitivity" in run["validation"][-1]
    saved = json.loads((tmp_path / "main_job_probes.json").read_text())
    assert saved["runs"] == payload["runs"]
    assert (tmp_path / "main_job_probes.md").read_text() == probes.docs_table(payload)


def test_each_probe_changes_the_main_job_in_its_own_fields_only():
    base = probes.base_config("probes")
    assert (base.total_steps, base.eval_every, base.decode.eval_sentences) == (800, 200, 100)
    main = probes.run_config(base, {"row": "main_job"})
    assert (main.model.scheme, main.model.num_encoder_layers, main.model.d_model) == (
        "deepnorm", 6, 128
    )  # fmt: skip
    assert (main.optimizer.learning_rate, main.schedule.warmup_steps) == (2e-3, 400)
    narrow = probes.run_config(base, {"row": "narrow_18l_2heads"})
    assert (narrow.model.num_encoder_layers, narrow.model.num_decoder_layers) == (18, 18)
    assert (narrow.model.d_model, narrow.model.ffn_dim, narrow.model.num_heads) == (64, 256, 2)
    fast = probes.run_config(base, {"row": "lr_4e-3"})
    assert (fast.optimizer.learning_rate, fast.schedule.warmup_steps) == (4e-3, 200)
    assert probes.run_config(base, {"row": "post_ln"}).model.scheme == "post_ln"
    assert probes.run_config(base, {"row": "seed_1"}).seed == 1
    assert probes.run_config(base, {"row": "dropout_0"}).model.dropout == 0.0
    assert main.model.dropout == 0.1 and main.seed == 0
    flat = {k: v for k, v in main.to_dict().items() if k not in ("model", "seed")}
    shared = probes.run_config(base, {"row": "shared_embeddings"})
    assert shared.model.share_embeddings and not main.model.share_embeddings
    assert {k: v for k, v in shared.to_dict().items() if k not in ("model", "seed")} == flat


def test_a_probe_naming_no_config_field_is_refused(monkeypatch):
    bad = probes.Probe("typo", fields=(("model.dropuot", 0.0),))
    monkeypatch.setitem(probes.PROBES, "typo", bad)
    with pytest.raises(KeyError, match=r"model\.dropuot"):
        probes.run_config(probes.base_config("probes"), {"row": "typo"})


def test_the_table_follows_the_probes_order_and_gives_the_last_distinct_share():
    def run(row, sens):
        return {
            "row": row,
            "validation": [
                {"update": 200, "source_sensitivity": sens, "bleu": 0.1, "loss": 6.0},
                {"update": 400, "source_sensitivity": sens, "bleu": 1.5, "loss": 5.0,
                 "distinct_hypotheses": 0.37},
            ],
        }  # fmt: skip

    payload = {"settings": {"sentences": 100}, "runs": [run("seed_1", 0.4), run("post_ln", 0.0)]}
    lines = probes.docs_table(payload).splitlines()
    assert (
        lines[0]
        == "| run | update 200 | update 400 | distinct hypotheses at update 400 (100 sentences) |"
    )
    assert lines[2] == "| 6L-6L d128, **Post-LN** | 0.00 / 0.10 / 6.00 | 0.00 / 1.50 / 5.00 | 37% |"
    assert lines[3].startswith("| 6L-6L d128, seed 1 | 0.40 / 0.10 / 6.00 |")
