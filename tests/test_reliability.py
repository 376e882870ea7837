"""Fault injection: stop signals, kill -9, damaged checkpoints, and the trainer's resume.

The subprocess tests run ``python train.py`` on ``tests/configs/tiny_synthetic.py`` (60 updates,
dropout on, a line per update) with real signals, each bounded by a watchdog; a run that is
interrupted and resumed must end with the same train state, bit for bit, as one that was not.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from conftest import xla_flags

from deepnet_jax.cli import command
from deepnet_jax.runs import metrics
from deepnet_jax.training import preemption

pytestmark = pytest.mark.filterwarnings("ignore:Sharding info not provided:UserWarning")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "tests", "configs", "tiny_synthetic.py")
TOTAL = 60  # the config's updates
LIMIT_S = 240  # the longest any one training process may take


def _env(devices: int = 1) -> dict[str, str]:
    """The test session's compilation cache and PRNG, so the runs share their compiles."""
    return {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": xla_flags(devices),
        "JAX_DEFAULT_PRNG_IMPL": "rbg",
        "JAX_COMPILATION_CACHE_DIR": jax.config.jax_compilation_cache_dir,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }


class Trainer:
    """``python train.py`` in a subprocess, read line by line, killed after ``LIMIT_S``."""

    def __init__(self, workdir, *overrides: str, devices: int = 1):
        self.proc = subprocess.Popen(
            [sys.executable, "train.py", f"--config={CONFIG}", f"--workdir={workdir}", *overrides],
            cwd=ROOT,
            env=_env(devices),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._watchdog = threading.Timer(LIMIT_S, self.proc.kill)
        self._watchdog.start()

    def wait_for_update(self, update: int) -> None:
        """Read output until the log line of ``update`` (the process may run a little further)."""
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith(f"step {update}/{TOTAL} "):
                return
        raise AssertionError(f"the run ended before update {update}:\n{self.output[-3000:]}")

    def finish(self) -> int:
        """Read the rest of the output; the exit status."""
        self.lines.extend(self.proc.stdout)
        self.proc.stdout.close()
        rc = self.proc.wait()
        self._watchdog.cancel()
        return rc

    @property
    def output(self) -> str:
        return "".join(self.lines)


def run_to_end(workdir, *overrides: str) -> str:
    t = Trainer(workdir, *overrides)
    rc = t.finish()
    assert rc == 0, t.output[-3000:]
    return t.output


def final_state(workdir) -> dict:
    """The train state of the run's last checkpoint, as host arrays (params, opt_state, step)."""
    step = max(int(d) for d in os.listdir(workdir / "checkpoints") if d.isdigit())
    assert step == TOTAL
    with ocp.PyTreeCheckpointer() as reader:
        state = reader.restore(workdir / "checkpoints" / str(step) / "state")
    return jax.tree.map(np.asarray, state)


def assert_bitwise_equal(a: dict, b: dict) -> None:
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y), "train states differ"


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The final train state of an uninterrupted run."""
    workdir = tmp_path_factory.mktemp("reference")
    run_to_end(workdir)
    evaluation = json.loads((workdir / "eval.json").read_text())  # train.py's end-of-run eval
    assert evaluation["steps"] == TOTAL and evaluation["eval_loss"] > 0
    return final_state(workdir)


def test_sigterm_saves_exits_0_and_the_resumed_run_ends_identical(reference, tmp_path):
    t = Trainer(tmp_path)
    t.wait_for_update(10)
    # Freeze the run while the signal is queued, so it lands mid-run on any machine.
    os.kill(t.proc.pid, signal.SIGSTOP)
    os.kill(t.proc.pid, signal.SIGTERM)
    os.kill(t.proc.pid, signal.SIGCONT)
    assert t.finish() == 0, t.output[-3000:]
    stop_lines = [line for line in t.lines if line.startswith("stopped by SIGTERM after update")]
    assert len(stop_lines) == 1, t.output[-3000:]
    update = int(stop_lines[0].split("after update ")[1].split("/")[0])
    assert 10 <= update < TOTAL
    assert (tmp_path / "checkpoints" / str(update)).is_dir()
    assert "run the same command again to resume" in stop_lines[0]
    assert not (tmp_path / "eval.json").exists()  # stopped before the end-of-run evaluation

    output = run_to_end(tmp_path)
    assert f"(step {update})" in output  # resumed where the signal stopped it
    assert_bitwise_equal(final_state(tmp_path), reference)


def test_kill_9_at_random_steps_then_resume_ends_identical(reference, tmp_path):
    """Two kill -9s at random updates (checkpoints every 3, so some land mid-save)."""
    rng = random.Random()
    first = rng.randrange(4, 30)
    second = rng.randrange(first + 4, 56)
    every = "--config.checkpoint_every=3"
    for update in (first, second):
        t = Trainer(tmp_path, every)
        t.wait_for_update(update)
        t.proc.kill()  # SIGKILL: no handler, no flush, possibly mid-save
        assert t.finish() == -signal.SIGKILL, f"kill at update {update}"
    output = run_to_end(tmp_path, every)
    assert "resuming from" in output, f"kills at updates {first}, {second}"
    assert_bitwise_equal(final_state(tmp_path), reference)
    # what the killed runs logged after their last checkpoint was dropped before being redone
    logged = [r["step"] for r in metrics.read(str(tmp_path)) if r["split"] == "train"]
    assert logged == list(range(1, TOTAL + 1)), f"kills at updates {first}, {second}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_to_one_process_stops_both_after_the_same_update(tmp_path):
    """Two processes on 127.0.0.1; only process 1 is signalled; both checkpoint and exit 0."""
    port = _free_port()
    trainers = [
        Trainer(
            tmp_path,
            f"--config.distributed.coordinator_address=127.0.0.1:{port}",
            "--config.distributed.num_processes=2",
            f"--config.distributed.process_id={pid}",
            "--config.distributed.initialization_timeout=60",
            "--config.model.remat_policy=auto",  # both processes must agree on its budget
        )
        for pid in (0, 1)
    ]
    try:
        trainers[0].wait_for_update(5)  # process 0 alone logs
        target = trainers[1].proc.pid
        os.kill(target, signal.SIGSTOP)
        os.kill(target, signal.SIGTERM)
        os.kill(target, signal.SIGCONT)
        codes = [t.finish() for t in trainers]
    finally:
        for t in trainers:
            if t.proc.poll() is None:
                t.proc.kill()
                t.finish()
    assert codes == [0, 0], trainers[0].output[-2000:] + trainers[1].output[-2000:]
    stop = [line for line in trainers[0].lines if line.startswith("stopped by")]
    assert len(stop) == 1 and stop[0].startswith("stopped by a signal to another process")
    update = int(stop[0].split("after update ")[1].split("/")[0])
    steps = sorted(int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit())
    assert steps == [update]  # one checkpoint, written by both processes together


def test_sigint_in_process_stops_cleanly_and_a_second_one_interrupts(monkeypatch, tmp_path):
    from test_training import small_config

    from deepnet_jax.data import synthetic
    from deepnet_jax.training import train

    original_next = synthetic.SyntheticIterator.__next__

    def next_with_signal(self):
        if self._next == 4:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while batch 5 is prepared
        return original_next(self)

    monkeypatch.setattr(synthetic.SyntheticIterator, "__next__", next_with_signal)
    c = small_config("decoder", "deepnorm", steps=20)
    c.checkpoint_every, c.log_every = 1000, 1
    handler_before = signal.getsignal(signal.SIGINT)
    result = train.run(c, str(tmp_path))
    assert result["stopped"] and 5 <= result["steps"] <= 7, result
    assert os.path.isdir(tmp_path / "checkpoints" / str(result["step"]))
    assert signal.getsignal(signal.SIGINT) is handler_before  # handlers are given back

    # Python's own Ctrl-C handler underneath (a shell's background job starts with SIGINT
    # ignored, and then a second SIGINT would do nothing at all)
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        signals = preemption.StopSignals()
        with signals, pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            assert signals.received == "SIGINT"
            np.testing.assert_array_equal(signals.flags(3), [1, 1, 1])
            os.kill(os.getpid(), signal.SIGINT)  # the second acts as usual
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)


def _checkpointed_config(steps: int):
    from test_training import small_config

    c = small_config("decoder", "deepnorm", steps=steps)
    c.checkpoint_every, c.max_to_keep, c.log_every = 2, 5, 2
    return c


@pytest.fixture(scope="module")
def checkpointed_run(tmp_path_factory):
    """A workdir with checkpoints at updates 2, 4, 6 and 8 of an uninterrupted run."""
    from deepnet_jax.training import train

    workdir = tmp_path_factory.mktemp("checkpointed")
    train.run(_checkpointed_config(8), str(workdir))
    return workdir


# the default run: an array file cut short and a step folder copied half-way; a missing state
# metadata file and a garbled data item (the same fallback) under -m slow
@pytest.mark.parametrize(
    "damage",
    [
        "truncated_file",
        pytest.param("missing_file", marks=pytest.mark.slow),
        "half_written",
        pytest.param("bad_json", marks=pytest.mark.slow),
    ],
)
def test_damaged_latest_checkpoint_falls_back_with_a_warning(
    damage, checkpointed_run, tmp_path, capsys
):
    from deepnet_jax.training import train

    workdir = tmp_path / "run"
    shutil.copytree(checkpointed_run, workdir)
    steps = workdir / "checkpoints"
    if damage == "truncated_file":  # the largest array file, cut in half
        files = [os.path.join(d, f) for d, _, fs in os.walk(steps / "8" / "state") for f in fs]
        biggest = max(files, key=os.path.getsize)
        with open(biggest, "r+b") as f:
            f.truncate(os.path.getsize(biggest) // 2)
    elif damage == "missing_file":
        os.remove(steps / "8" / "state" / "_METADATA")
    elif damage == "half_written":  # a step folder copied half-way: no data item, no metadata
        shutil.rmtree(steps / "8" / "data")
        os.remove(steps / "8" / "_CHECKPOINT_METADATA")
    else:
        (steps / "8" / "data" / "metadata").write_text('{"ste')
    capsys.readouterr()

    train.run(_checkpointed_config(8), str(workdir))
    out = capsys.readouterr().out
    assert f"warning: checkpoint {steps / '8'} cannot be restored (" in out
    assert f"resuming from {steps}/6 (step 6)" in out
    assert (workdir / "corrupt_checkpoints" / "8").is_dir()  # kept for inspection
    assert sorted(int(d) for d in os.listdir(steps) if d.isdigit()) == [2, 4, 6, 8]
    with ocp.PyTreeCheckpointer() as reader:
        redone, straight = (
            jax.tree.map(np.asarray, reader.restore(d / "checkpoints" / "8" / "state"))
            for d in (workdir, checkpointed_run)
        )
    assert_bitwise_equal(redone, straight)  # nothing lost: the redone steps match


def test_every_checkpoint_damaged_is_an_error_that_moves_nothing(
    checkpointed_run, tmp_path, capsys
):

    workdir = tmp_path / "run"
    shutil.copytree(checkpointed_run, workdir)
    for step in (2, 4, 6, 8):
        (workdir / "checkpoints" / str(step) / "data" / "metadata").write_text("{")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        command.train(_checkpointed_config(8), str(workdir))
    assert exit_.value.code == 1
    captured = capsys.readouterr().err
    assert "Traceback" not in captured, captured
    err = captured.strip().splitlines()[-1]
    assert err.startswith("error: none of the checkpoints [2, 4, 6, 8] under "), err
    assert sorted(os.listdir(workdir / "checkpoints")) == ["2", "4", "6", "8"]
    assert not (workdir / "corrupt_checkpoints").exists()
