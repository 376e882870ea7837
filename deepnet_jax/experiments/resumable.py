"""One training run of an experiment (:func:`train_once`), and what lets it survive being
stopped: its workdir named by the run, its checkpoints, and the CPU it spent over every process
that trained it.

A long grid (the depth table's 500L-500L runs take about two hours of one core each) is
stopped by signals, crashes and the end of a machine's session. A run of such a grid
checkpoints every ``checkpoint_every`` updates (the trainer's orbax checkpoints: parameters,
optimizer state and the data stream's position), and when the experiment is started again it
resumes from the newest one instead of starting over; the trainer's resume is exact, so the
resumed run's curves and results are bitwise those of an uninterrupted run
(``tests/test_experiments_resume.py``).

Its cost is kept in the workdir's ``experiment_cost.json`` (:class:`CostLedger`): one segment per
process that trained the run, each segment's CPU and wall seconds written every
:data:`LEDGER_EVERY` seconds by a daemon thread, so a process killed without warning loses at
most that much of its count. A run's ``cpu_seconds`` is the sum over its segments, updates
redone after a kill included: what the run cost, not what an uninterrupted run would. Each
segment also names the ``commit`` and ``cpu`` model its process ran (since 2026-12-02): a run
resumed on another machine or at another commit says so (``segment_commits``,
``segment_cpus``), where the results file's ``commit`` and ``cpu`` are the last process's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from typing import Any

import ml_collections
from absl import flags

from deepnet_jax.common import records
from deepnet_jax.runs import metrics
from deepnet_jax.runs.workdir import RunDir
from deepnet_jax.training import actions, train

LEDGER_EVERY = 30.0  # seconds between the ledger's writes
# the flags of every experiment that runs a long grid (an experiment names this module in its
# FLAGS_FROM: deepnet_jax.experiments.opening.own_flags)
SHARD = flags.DEFINE_string(
    "shard",
    "0/1",
    "i/n: this process is the i-th of n started into the same --out; it runs every n-th run "
    "from the i-th, or, where the experiment shares its runs (lr_transfer), the next run no "
    "other process holds (2 shards on 2 cores: about 1.3x the runs per hour)",
)
CHECKPOINT_EVERY = flags.DEFINE_integer(
    "checkpoint_every",
    50,
    "checkpoint each run every this many updates, in a workdir named by the run, so that a run "
    "stopped before its end (a signal, a crash, the machine's session ending) resumes from its "
    "newest checkpoint when the experiment is started again; 0: a run stopped starts over",
    lower_bound=0,
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")


def parse_shard(text: str) -> tuple[int, int]:
    """``--shard=i/n`` → (i, n): this process is the i-th of n (0 ≤ i < n) on one ``--out``."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard={text!r}: expected i/n, e.g. 0/2") from None
    if not 0 <= index < count:
        raise ValueError(f"--shard={text!r}: needs 0 <= i < n")
    return index, count


def workdir_name(key: dict[str, Any]) -> str:
    """A run's workdir name from its key (``{"task": "reversal64", "scheme": "deepnorm",
    "layers": 500, "seed": 0, …}`` → ``task=reversal64,scheme=deepnorm,layers=500,seed=0,…``),
    so that a run finds its checkpoints whichever process or shard starts it again."""
    return ",".join(_UNSAFE.sub("_", f"{k}={v}") for k, v in key.items())


@contextlib.contextmanager
def claim(workdir: str) -> Iterator[bool]:
    """Whether this process may train the run of ``workdir``: True while it holds the run's
    lock (``<workdir>.lock``, an exclusive ``flock`` released when the process ends, however it
    ends), False at once if another process holds it. Two processes whose shards overlap (a
    ``--shard=i/n`` started beside others of another n) would otherwise train one run into
    one workdir together, each writing the other's checkpoints and metrics."""
    os.makedirs(os.path.dirname(os.path.abspath(workdir)), exist_ok=True)
    with open(workdir + ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def drop_checkpoints(workdir: str) -> None:
    """Remove a finished run's checkpoints (its metrics and cost stay): its result is in the
    results file, so nothing resumes it."""
    shutil.rmtree(RunDir(workdir).checkpoints, ignore_errors=True)


class CostLedger:
    """The CPU and wall seconds a run spent, segment by segment (a context: one segment), and
    each segment's ``commit`` and ``cpu`` model (:func:`records.commit`,
    :func:`records.cpu_model`; absent from a ledger written before 2026-12-02).

    ``totals()`` after the context: ``{"cpu_seconds", "seconds", "segments"}`` over every
    segment the workdir's ledger holds, this one included, and where there was more than one,
    ``segment_commits`` and ``segment_cpus`` (one entry a segment, in order; None where the
    segment did not record it). CPU is the process's (``time.process_time``: all its
    threads), so one run per process."""

    def __init__(self, workdir: str, every: float = LEDGER_EVERY):
        self.path = RunDir(workdir).experiment_cost
        self.every = every
        self.earlier: list[dict[str, float]] = []
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.earlier = json.load(f)["segments"]
        self.made = {"commit": records.commit(), "cpu": records.cpu_model()}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> CostLedger:
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._write()
        self._thread = threading.Thread(target=self._keep_writing, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._write()

    def _current(self) -> dict[str, float]:
        return {
            "cpu_seconds": time.process_time() - self._cpu0,
            "seconds": time.perf_counter() - self._wall0,
            **self.made,
        }

    def _keep_writing(self) -> None:
        while not self._stop.wait(self.every):
            self._write()

    def _write(self) -> None:
        with self._lock:
            with open(self.path + ".tmp", "w") as f:
                json.dump({"segments": [*self.earlier, self._current()]}, f)
            os.replace(self.path + ".tmp", self.path)

    def totals(self) -> dict[str, Any]:
        """CPU and wall seconds over every segment, how many segments there were and, where
        more than one, each one's commit and CPU model."""
        with open(self.path) as f:
            segments = json.load(f)["segments"]
        out = {
            "cpu_seconds": sum(s["cpu_seconds"] for s in segments),
            "seconds": sum(s["seconds"] for s in segments),
            "segments": len(segments),
        }
        if len(segments) > 1:
            out["segment_commits"] = [s.get("commit") for s in segments]
            out["segment_cpus"] = [s.get("cpu") for s in segments]
        return out


def train_once(
    config: ml_collections.ConfigDict, workdir: str, resume: bool = False
) -> dict[str, Any]:
    """Train ``config`` in ``workdir`` and return its results: ``eval_loss`` (validation NLL),
    ``eval_accuracy``, ``train_loss``, ``eval_bleu_greedy`` (with ``decode.eval_sentences`` >
    0), ``nonfinite_step`` (the update whose loss or gradient was not finite, else None),
    ``seconds`` and ``cpu_seconds`` (over every process that trained it:
    :class:`CostLedger`), ``segments`` (how many; where more than one, ``segment_commits``
    and ``segment_cpus``: each one's) and ``diagnostics`` (the run's diagnostics records).

    The workdir is emptied first, except ``resume`` where it holds a checkpoint: the run then
    continues from it (exactly; a checkpoint of another config stops with the trainer's
    one-line mismatch). A run stopped by a signal (SIGTERM, SIGINT) exits the process instead:
    its partial result is not one of this config (``resume``: its checkpoint is kept for the
    next start)."""
    if not (resume and RunDir(workdir).has_checkpoints()):
        _empty(workdir)
    os.makedirs(workdir, exist_ok=True)
    out: dict[str, Any] = {"nonfinite_step": None}
    with CostLedger(workdir) as ledger:
        try:
            result = train.run(config, workdir)
            if result.get("stopped"):  # a signal ended it early: not a result of this config
                then = "resume it" if resume else "train it afresh"
                raise SystemExit(
                    f"{result['message']}; this run is not recorded (start the experiment "
                    f"again to {then})"
                )
            out.update({k: v for k, v in result.items() if isinstance(v, (int, float, str))})
        except actions.NonFiniteError as e:
            out["nonfinite_step"] = e.step
            out["error"] = str(e)
            out["eval_loss"] = out["eval_accuracy"] = math.nan
    out.update(ledger.totals())
    records = metrics.read(workdir)
    out["diagnostics"] = [r for r in records if r["split"] == "diagnostics"]
    train_records = [r for r in records if r["split"] == "train"]
    if train_records and "train_loss" not in out:
        out["train_loss"] = train_records[-1]["loss"]
    return out


def _empty(workdir: str) -> None:
    """Remove what ``workdir`` holds (a rerun starts afresh)."""
    if os.path.isdir(workdir):
        for name in os.listdir(workdir):
            path = os.path.join(workdir, name)
            if os.path.isfile(path):
                os.remove(path)
            else:
                shutil.rmtree(path)
