"""Bad configs and environments: each is one ``error: ...`` line naming the field or path, exit
status 1, no traceback, and nothing compiled (train.py's own path, ``cli.command.train``)."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys

import jax
import ml_collections
import pytest
from test_training import small_config

from deepnet_jax.cli import command
from deepnet_jax.runs import workdir as workdir_lib
from deepnet_jax.training import config_checks, train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _set(path: str, value):
    def apply(c, tmp_path):
        *parents, name = path.split(".")
        node = c
        for p in parents:
            node = node[p]
        node[name] = value

    return apply


def _delete(path: str):
    def apply(c, tmp_path):
        *parents, name = path.split(".")
        node = c
        for p in parents:
            node = node[p]
        del node[name]

    return apply


def _both(*changes):
    def apply(c, tmp_path):
        for change in changes:
            change(c, tmp_path)

    return apply


def _missing_source(c, tmp_path):
    c.data.dataset, c.data.source_dir = "local_text", str(tmp_path / "no_such_corpus")
    c.data.data_dir = str(tmp_path / "prepared")
    c.data.tokenizer, c.model.vocab_size = "char", 300
    c.final_split = ""


BAD = [  # (id, change, what the one line must say)
    ("unknown_field", _set("nan_polcy", "skip"), r"unknown config field nan_polcy; the fields"),
    ("unknown_nested", _set("model.d_modle", 64), r"unknown config field model\.d_modle"),
    ("missing_field", _delete("decode.beam_size"), r"config field decode\.beam_size is missing"),
    ("scheme", _set("model.scheme", "deepnrom"), r"scheme='deepnrom' is invalid: allowed"),
    ("arch", _set("model.arch", "gpt"), r"model\.arch='gpt'"),
    ("heads_vs_width", _set("model.num_heads", 5), r"num_heads=5 is invalid: must divide"),
    ("kv_heads", _set("model.num_kv_heads", 3), r"num_kv_heads=3 is invalid: must divide model"),
    (
        "rope_odd_head_dim",
        _both(_set("model.positions", "rope"), _set("model.num_heads", 32)),
        r"num_heads=32 is invalid: positions='rope' rotates pairs of features: head_dim",
    ),
    (
        "fused_qkv_with_gqa",
        _both(_set("model.fused_qkv", True), _set("model.num_kv_heads", 2)),
        r"fused_qkv=True is invalid: the fused .* not num_kv_heads=2",
    ),
    (
        "glm_constants_without_deepnorm",
        _both(_set("model.scheme", "pre_ln"), _set("model.deepnorm_variant", "glm")),
        r"deepnorm_variant='glm' is invalid: applies to scheme='deepnorm' only",
    ),
    ("norm", _set("model.norm", "batchnorm"), r"model\.norm='batchnorm' is invalid: allowed"),
    ("dataset", _set("data.dataset", "wmt99"), r"data\.dataset='wmt99'; allowed values"),
    ("schedule_name", _set("schedule.name", "cosine_restarts"), r"schedule\.name='cosine_re"),
    ("optimizer", _set("optimizer.name", "sgd"), r"optimizer\.name='sgd'; allowed values"),
    ("learning_rate", _set("optimizer.learning_rate", 0.0), r"learning_rate=0\.0 must be"),
    ("label_smoothing", _set("label_smoothing", 1.0), r"label_smoothing=1\.0 must be in"),
    ("total_steps", _set("total_steps", 0), r"total_steps=0 must be an integer >= 1"),
    ("max_to_keep", _set("max_to_keep", 0), r"max_to_keep=0 must be an integer >= 1"),
    ("eval_sentences", _set("decode.eval_sentences", -1), r"decode\.eval_sentences=-1 must"),
    ("checkpoint_every", _set("checkpoint_every", -1), r"checkpoint_every=-1 must be"),
    ("grad_accum", _set("grad_accum_steps", 0), r"grad_accum_steps=0 must be"),
    ("warmup_vs_total", _set("schedule.name", "cosine"), r"warmup_steps=10 must be below"),
    ("max_len_conflict", _set("data.max_len", 40), r"data\.max_len=40 exceeds model\.max_len"),
    ("beam_size", _set("decode.beam_size", 0), r"decode\.beam_size=0"),
    ("length_penalty_form", _set("decode.length_penalty_form", "google"), r"length_penalty_f"),
    ("final_split", _set("final_split", "dev"), r"final_split='dev'; allowed values"),
    ("final_split_synthetic", _set("final_split", "test"), r"final_split='test' needs a corpus"),
    ("packing_synthetic", _set("data.packing", True), r"data\.packing=True is not used by"),
    ("min_len_zero", _set("data.min_len", 0), r"data\.min_len=0 must be an integer >= 1"),
    ("min_len_too_long", _set("data.min_len", 40), r"data\.min_len=40 exceeds the \d+ content"),
    (
        "min_len_corpus",
        _both(_missing_source, _set("data.min_len", 5)),
        r"data\.min_len=5 is used by data\.dataset='synthetic_reversal' only",
    ),
    ("nan_policy", _set("nan_policy", "ignore"), r"nan_policy='ignore'; allowed values"),
    ("nan_max_skips", _set("nan_max_skips", 0), r"nan_max_skips=0 must be"),
    ("peak_flops", _set("peak_flops", -1.0), r"peak_flops=-1\.0 must be >= 0"),
    ("mesh_devices", _set("mesh.data", 2), r"mesh=.*needs 2 devices; 1 are available"),
    ("mesh_axis", _set("mesh.tensor", 0), r"mesh\.tensor=0 must be a positive integer"),
    ("mesh_rules", _set("mesh.rules.embed", "pipe"), r"mesh\.rules\.embed='pipe'"),
    ("processes", _set("distributed.num_processes", 0), r"distributed\.num_processes=0"),
    (
        "vocab_conflict",
        _both(_set("data.dataset", "ding_de_en"), _set("data.vocab_size", 4000)),
        r"model\.vocab_size=12 is smaller than data\.vocab_size=4000",
    ),
    ("unpreparable_dataset", _missing_source, r"no_such_corpus"),
    ("scan_group_size", _set("model.scan_group_size", -2), r"scan_group_size=-2 is invalid: m"),
    (
        "group_unscanned",
        _both(_set("model.scan_layers", False), _set("model.scan_group_size", 2)),
        r"scan_group_size=2 is invalid: groups a scanned stack",
    ),
    ("scan_unroll", _set("model.scan_unroll", 0), r"scan_unroll=0 is invalid: m"),
    (
        "unroll_unscanned",
        _both(_set("model.scan_layers", False), _set("model.scan_unroll", 2)),
        r"scan_unroll=2 is invalid: unrolls the scan over layers",
    ),
    (
        "budget_without_auto",
        _both(_set("model.remat_policy", "full"), _set("memory_budget_gb", 4.0)),
        r"memory_budget_gb=4\.0 is read only by model\.remat_policy='auto' \(this config has "
        r"'full'\)",
    ),
]


@pytest.fixture
def compiles():
    """Counts XLA compilations (cache hits included) while the test runs."""
    counts = collections.Counter()

    def on_event(event: str, **kwargs) -> None:
        if event == "/jax/compilation_cache/compile_requests_use_cache":
            counts["requests"] += 1

    def on_duration(event: str, duration: float, **kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            counts["backend"] += 1

    jax.monitoring.register_event_listener(on_event)
    jax.monitoring.register_event_duration_secs_listener(on_duration)
    yield counts
    jax.monitoring.unregister_event_listener(on_event)
    jax.monitoring.unregister_event_duration_listener(on_duration)


def _expect_one_line_error(config, workdir, capsys, compiles, pattern: str) -> None:
    capsys.readouterr()
    compiles.clear()
    with pytest.raises(SystemExit) as exit_:
        command.train(config, workdir)
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    assert re.search(pattern, lines[0]), lines[0]
    assert not compiles, f"compiled before the error: {dict(compiles)}"


def test_there_are_at_least_twenty_bad_configs():
    assert len(BAD) >= 20


@pytest.mark.parametrize("change, pattern", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_config_is_one_line_before_compiling(change, pattern, tmp_path, capsys, compiles):
    c = small_config("decoder", "deepnorm", steps=4)
    change(c, tmp_path)
    _expect_one_line_error(c, str(tmp_path / "run"), capsys, compiles, pattern)


def test_a_group_replaced_by_a_value():
    c = ml_collections.ConfigDict(small_config("decoder", "deepnorm").to_dict(), type_safe=False)
    c.schedule = 3
    with pytest.raises(ValueError, match=r"^schedule=3 must be a group of fields \(end_lr, "):
        config_checks.check_fields(c)


def test_batch_that_does_not_divide_over_the_devices():
    c = small_config("decoder", "deepnorm")
    c.data.batch_size = 10
    with pytest.raises(ValueError, match=r"data\.batch_size=10 does not divide over the 4 data"):
        train.validate(c, device_count=4)


def test_unwritable_workdir(tmp_path, capsys, compiles):
    (tmp_path / "a_file").write_text("")
    workdir = str(tmp_path / "a_file" / "run")
    c = small_config("decoder", "deepnorm", steps=4)
    _expect_one_line_error(c, workdir, capsys, compiles, rf"workdir {workdir} is not writable")


def test_full_workdir(tmp_path, capsys, compiles, monkeypatch):
    usage = workdir_lib.shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        workdir_lib.shutil, "disk_usage", lambda path: usage._replace(free=100 * 1024)
    )
    c = small_config("decoder", "deepnorm", steps=4)
    _expect_one_line_error(
        c, str(tmp_path), capsys, compiles, r"has 0\.1 MiB free; the checkpoints need [0-9.]+ MiB"
    )


def test_train_py_reports_a_bad_field_in_one_line(tmp_path):
    """The real command line: a bad value, a typo in an override and an unparsable one, each
    one line on stderr."""
    config = os.path.join(ROOT, "tests", "configs", "tiny_synthetic.py")
    for flag, expected in (
        ("--config.model.scheme=deepnrom", "error: model.scheme='deepnrom' is invalid: allowed"),
        ("--config.nan_polcy=skip", "error: --config.nan_polcy: unknown config field (did you"),
        ("--config.total_steps=abc", "error: flag --config.total_steps=abc: invalid literal"),
    ):
        proc = subprocess.run(
            [sys.executable, "train.py", f"--config={config}", f"--workdir={tmp_path}", flag],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
        assert len(lines) == 1 and lines[0].startswith(expected), proc.stderr[-2000:]
