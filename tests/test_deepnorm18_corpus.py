"""DeepNorm 18L-18L on the main job's corpus (deepnet_jax/experiments/deepnorm18_corpus.py): the
smoke setting end to end, the attenuation its tables predict, and the settings' runs."""

from __future__ import annotations

import json
import math

import pytest

from deepnet_jax.experiments import deepnorm18_corpus as dn
from deepnet_jax.experiments import deepnorm18_corpus_report as dn_report


def test_smoke_runs_keep_validations_and_the_encoders_diagnostics(tmp_path):
    payload = dn.main(["--setting=smoke", f"--out={tmp_path}", "--checkpoint_every=0"])
    assert [(r["seed"], r["lr"]) for r in payload["runs"]] == list(dn.SETTINGS["smoke"][0])
    for run in payload["runs"]:
        assert [v["update"] for v in run["validation"]] == [4, 8]
        assert [d["step"] for d in run["diagnostics"]] == [0, 2, 4, 6, 8]
        assert run["validation"][-1]["loss"] == pytest.approx(run["eval_loss"], rel=1e-6)
        d = run["diagnostics"][-1]
        assert len(d["grad_norm/encoder/all"]) == 2  # the smoke model's 2 layers
        assert not any(k.startswith(("ln_input/decoder", "grad_norm/decoder")) for k in d)
    saved = json.loads((tmp_path / "deepnorm18_corpus.json").read_text())
    assert saved["runs"] == payload["runs"]
    text = (tmp_path / "deepnorm18_corpus.md").read_text()
    assert text == dn_report.tables(payload)
    assert "| seed 0, peak 0.003 | 2 |" in text and "| seed 1, peak 0.003 | 2 |" in text
    assert text.count("|  | 8 |") == 2  # each run's second row


def test_predicted_attenuation_multiplies_the_ratios_above_the_first_layer():
    d = {  # layer 1's LN inputs (9) are below the first layer's gradient: not in the product
        "ln_input/encoder/self_attn_layer_norm": [9.0, 2.0, 4.0],
        "ln_input/encoder/final_layer_norm": [9.0, 4.0, 2.0],
    }
    assert dn_report.predicted_attenuation(d, alpha_x=2.0) == pytest.approx(1 * 0.5 * 0.5 * 1)


def test_the_residual_norm_is_deepnets_encoder_alpha_times_root_d():
    c = dn.base_config("probes")
    # 0.81·(N⁴M)^(1/16) at N = M = 18, times √128: docs/reproduction.md's 22.6
    assert dn.residual_norm(c) == pytest.approx(0.81 * 18 ** (5 / 16) * math.sqrt(128), rel=1e-6)
    assert round(dn.residual_norm(c), 1) == 22.6


@pytest.mark.parametrize("setting", ["probes", "full"])
def test_the_settings_train_the_main_job_at_18_layers(setting):
    runs, updates, eval_every, sentences, every = dn.SETTINGS[setting]
    c = dn.run_config(dn.base_config(setting), {"seed": 4, "lr": 1e-3})
    assert (c.model.num_encoder_layers, c.model.num_decoder_layers) == (18, 18)
    assert (c.model.scheme, c.model.d_model) == ("deepnorm", 128)
    assert c.data.dataset == "libreoffice_help"
    assert (c.seed, c.optimizer.learning_rate, c.total_steps) == (4, 1e-3, updates)
    assert (c.eval_every, c.decode.eval_sentences, c.diagnostics.every) == (
        eval_every, sentences, every
    )  # fmt: skip
    assert c.schedule.warmup_steps == 400 and c.final_split == ""
    assert len(set(runs)) == len(runs)
