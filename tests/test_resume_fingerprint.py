"""A resumed run is the run its checkpoints were written by (``deepnet_jax.training.fingerprint``).

Two tiny runs of 2 updates, checkpointed after each: a decoder on the synthetic task and an
encoder-decoder on a local corpus with its own BPE tokenizer. Resuming them with a field that
defines the run changed stops before anything is read or written, with one line naming the
field; a field that may change on resume is accepted and listed; a checkpoint written before
fingerprints existed still resumes.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest
from test_data_pipeline import _train_config, _write_corpus
from test_reliability import _env
from test_training import small_config

from deepnet_jax.cli import command
from deepnet_jax.runs import checkpoint
from deepnet_jax.training import train

pytestmark = pytest.mark.filterwarnings("ignore:Sharding info not provided:UserWarning")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "configs", "tiny_synthetic.py")


def _synthetic(steps: int = 2):
    c = small_config("decoder", "deepnorm", steps=steps)
    c.checkpoint_every, c.log_every = 1, 1
    return c


def _corpus_config(corpus, steps: int = 2, **data):
    c = _train_config(corpus, **data)
    c.total_steps, c.checkpoint_every, c.log_every = steps, 1, 1
    return c


def _listing(workdir) -> dict[str, int]:
    """Every file under ``workdir`` (relative path → size)."""
    found = {}
    for folder, _, files in os.walk(workdir):
        for name in files:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, workdir)] = os.path.getsize(path)
    return found


def _read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("synthetic")
    train.run(_synthetic(), str(workdir))
    return workdir


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    _write_corpus(root / "toy")
    return root


@pytest.fixture(scope="module")
def corpus_run(corpus, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("corpus_run")
    train.run(_corpus_config(corpus), str(workdir))
    return workdir


def _assert_refused(workdir, config, capsys, *changes: str) -> None:
    """``cli.command.train`` exits 1 with one error line, its last output, naming
    ``changes``; every file under ``workdir`` is as it was."""
    before = _listing(workdir)
    tokenizer = workdir / "tokenizer.model"
    old_tokenizer = _read(tokenizer) if tokenizer.exists() else None
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        command.train(config, str(workdir))
    assert exit_.value.code == 1
    out, err = capsys.readouterr()
    assert err.count("error: ") == 1, err
    line = "error: " + err.split("error: ")[1]  # after data preparation's progress bars, if any
    assert line.startswith(f"error: the checkpoints under {workdir / 'checkpoints'} were "), err
    assert line.endswith("or use a new workdir to start afresh\n"), err
    for change in changes:
        assert change in line, line
    assert "resuming" not in out
    assert _listing(workdir) == before  # no checkpoint moved, renamed or added
    assert not (workdir / "corrupt_checkpoints").exists()
    if old_tokenizer is not None:
        assert _read(tokenizer) == old_tokenizer


@pytest.mark.parametrize(
    "field, value, change",
    [
        ("model.vocab_size", 16, "model.vocab_size: 12 → 16"),
        ("model.scheme", "post_ln", "model.scheme: deepnorm → post_ln"),
        ("model.num_decoder_layers", 3, "model.num_decoder_layers: 2 → 3"),
        ("optimizer.learning_rate", 1e-3, "optimizer.learning_rate: 0.003 → 0.001"),
    ],
)
def test_a_changed_run_field_stops_the_resume_and_touches_nothing(
    synthetic_run, field, value, change, capsys
):
    c = _synthetic()
    group, name = field.split(".")
    c[group][name] = value
    _assert_refused(synthetic_run, c, capsys, change)


@pytest.mark.parametrize(
    "data, change",
    [
        ({"vocab_size": 280}, "data.vocab_size: 300 → 280"),
        ({"character_coverage": 0.9995}, "data.character_coverage: 1.0 → 0.9995"),
        ({"tokenizer": "unigram"}, "data.tokenizer: bpe → unigram"),
    ],
)
def test_a_changed_tokenizer_setting_stops_the_resume_before_data_preparation(
    corpus, corpus_run, data, change, capsys
):
    tokenizers = sorted(os.listdir(corpus / "data" / "tokenizers"))
    _assert_refused(corpus_run, _corpus_config(corpus, **data), capsys, change)
    assert sorted(os.listdir(corpus / "data" / "tokenizers")) == tokenizers  # none trained


def test_another_tokenizer_of_the_same_size_stops_the_resume(corpus, corpus_run, capsys, tmp_path):
    """Same config, another corpus folder (data.source_dir may change on resume): its training
    split differs, so its BPE tokenizer differs, with the same number of pieces."""
    other = tmp_path / "other"
    shutil.copytree(corpus / "toy", other)
    for side in ("de", "en"):
        lines = (other / f"train.{side}").read_text(encoding="utf-8").splitlines()
        (other / f"train.{side}").write_text("\n".join(lines[:300]) + "\n", encoding="utf-8")
    c = _corpus_config(corpus, source_dir=str(other))
    _assert_refused(corpus_run, c, capsys, "were written by another run: tokenizer: sha256 ")


def test_resumable_fields_are_accepted_and_listed(synthetic_run, tmp_path, capsys):
    workdir = tmp_path / "run"
    shutil.copytree(synthetic_run, workdir)
    c = _synthetic(steps=3)
    c.eval_every = 1
    capsys.readouterr()
    train.run(c, str(workdir))
    out = capsys.readouterr().out
    assert "resuming with changed fields: eval_every 0 → 1, total_steps 2 → 3\n" in out, out
    assert f"resuming from {workdir / 'checkpoints'}/2 (step 2)" in out
    assert 3 in checkpoint.Checkpointer(str(workdir), 1, 5, read_only=True).all_steps()


def _without_fingerprints(monkeypatch) -> None:
    """Checkpoints written as before fingerprints existed: state, data and config only."""
    save = checkpoint.Checkpointer.save

    def old_save(self, step, state, data_state, config, fingerprint=None):
        save(self, step, state, data_state, config)

    monkeypatch.setattr(checkpoint.Checkpointer, "save", old_save)


def test_a_checkpoint_without_fingerprint_resumes(monkeypatch, tmp_path, capsys):
    workdir = tmp_path / "old"
    with monkeypatch.context() as m:
        _without_fingerprints(m)
        train.run(_synthetic(), str(workdir))
    assert not (workdir / "checkpoints" / "2" / checkpoint.FINGERPRINT).exists()
    changed = _synthetic()
    changed.model.scheme = "post_ln"
    _assert_refused(workdir, changed, capsys, "model.scheme: deepnorm → post_ln")
    train.run(_synthetic(steps=3), str(workdir))
    out = capsys.readouterr().out
    assert "resuming with changed fields: total_steps 2 → 3" in out
    assert f"resuming from {workdir / 'checkpoints'}/2 (step 2)" in out
    assert "note:" not in out  # the synthetic task: its whole fingerprint is its config


def test_a_corpus_checkpoint_without_fingerprint_says_what_its_tokenizer_was_compared_with(
    corpus, monkeypatch, tmp_path, capsys
):
    workdir = tmp_path / "old"
    with monkeypatch.context() as m:
        _without_fingerprints(m)
        train.run(_corpus_config(corpus), str(workdir))
    capsys.readouterr()
    train.run(_corpus_config(corpus, steps=3), str(workdir))
    out = capsys.readouterr().out
    note = (
        "note: checkpoints 1, 2 record no run fingerprint (an earlier version wrote them); the "
        f"tokenizer was compared with {workdir / 'tokenizer.model'}\n"
    )
    assert note in out, out
    assert f"resuming from {workdir / 'checkpoints'}/2 (step 2)" in out


def test_the_cli_error_is_the_last_thing_printed(tmp_path):
    """train.py on a workdir of another vocabulary size: stderr ends with the error line."""
    spec = importlib.util.spec_from_file_location("tiny_synthetic", TINY)
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    c = tiny.get_config()
    c.total_steps, c.checkpoint_every = 1, 1
    workdir = tmp_path / "run"
    train.run(c, str(workdir))
    before = _listing(workdir)
    proc = subprocess.run(
        [
            *(sys.executable, "train.py", f"--config={TINY}", f"--workdir={workdir}"),
            *("--config.total_steps=1", "--config.model.vocab_size=20"),
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.rstrip("\n").splitlines()[-1]
    assert last.startswith(f"error: the checkpoints under {workdir / 'checkpoints'} were "), (
        proc.stderr[-3000:]
    )
    assert "model.vocab_size: 12 → 20" in last
    assert "Traceback" not in proc.stderr
    assert _listing(workdir) == before
