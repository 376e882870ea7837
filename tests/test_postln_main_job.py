"""The instrumented Post-LN main job (deepnet_jax/experiments/postln_main_job.py): its smoke run
end to end, and the table it makes of a results payload."""

from __future__ import annotations

import json

from deepnet_jax.experiments import postln_main_job as pm


def test_smoke_run_keeps_validation_and_every_layers_diagnostics(tmp_path):
    payload = pm.main(["--setting=smoke", f"--out={tmp_path}"])
    updates, every, eval_every, _ = pm.SETTINGS["smoke"]
    assert [r["update"] for r in payload["train"]] == list(range(1, updates + 1))
    assert [r["update"] for r in payload["validation"]] == [eval_every, 2 * eval_every]
    assert all(set(pm.TRAIN_KEYS) <= set(r) for r in payload["train"])
    diagnostics = {d["update"]: d for d in payload["diagnostics"]}
    assert sorted(diagnostics) == list(range(0, updates + 1, every))
    assert diagnostics[0]["model_update"] == 0.0  # ΔF against θ0 at θ0
    for update in range(every, updates + 1, every):
        d = diagnostics[update]
        assert d["model_update"] > 0
        for side in pm.SIDES:  # the smoke model's 2 layers, each a positive norm
            assert len(d[f"grad_norm/{side}/all"]) == 2 and min(d[f"grad_norm/{side}/all"]) > 0
            assert len(d[f"ln_input/{side}/final_layer_norm"]) == 2
    saved = json.loads((tmp_path / "postln_main_job.json").read_text())
    assert saved == json.loads(json.dumps(payload))
    command = f"python -m deepnet_jax.experiments.postln_main_job --setting=smoke --out={tmp_path}"
    assert saved["header"]["command"] == command
    assert (tmp_path / "postln_main_job.md").read_text().strip() == pm.docs_table(payload)


def test_the_table_has_a_row_per_update_and_a_figure_per_layer():
    grads = {"decoder": [3.4e-6, 1.9e-5, 0.011, 0.23], "encoder": [0.3, 0.037, 9.3e-4, 0.017]}
    payload = {
        "setting": "smoke",
        "diagnostics": [
            {"update": u, **{f"grad_norm/{s}/all": v for s, v in grads.items()}} for u in (2, 8)
        ],
    }
    lines = pm.docs_table(payload).splitlines()
    assert lines[0] == "| update | decoder | encoder |"
    assert lines[2] == "| 2 | 3.4e-6, 1.9e-5, 0.011, 0.23 | 0.3, 0.037, 9.3e-4, 0.017 |"
    assert [line.split(" |")[0] for line in lines[2:]] == ["| 2", "| 8"]
