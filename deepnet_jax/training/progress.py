"""What a training run shows while it trains: the progress bar, one log line per ``log_every``
micro-batches (the interval's means, also written as a ``train`` metrics record) and warnings.
Everything is printed by process 0 only."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
from tqdm import tqdm

from deepnet_jax.common.console import say
from deepnet_jax.runs import metrics as metrics_lib
from deepnet_jax.training.run_config import RunConfig

SOURCE_BLIND_NATS = 0.1  # source sensitivity below this after the warm-up: a warning
# what jax reports of a compile (jax.monitoring): tracing, lowering to MLIR and XLA's compile
COMPILE_EVENTS = frozenset(
    {
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    }
)


class CompileClock:
    """Seconds this process spent compiling (:data:`COMPILE_EVENTS`) while listening: from
    :meth:`start` to :meth:`stop`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.listening = False

    def on_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        if event in COMPILE_EVENTS:
            self.seconds += duration

    def start(self) -> None:
        jax.monitoring.register_event_duration_secs_listener(self.on_duration)
        self.listening = True

    def stop(self) -> None:
        if self.listening:
            jax.monitoring.unregister_event_duration_listener(self.on_duration)
            self.listening = False


PARTIAL = "train_partial"  # the split of a stopped run's unfinished log interval


class Interval:
    """Host-side sums of the per-step metrics between two log lines; the time jax spent
    compiling in it (``clock``'s) is not step time."""

    def __init__(self, clock: CompileClock) -> None:
        self.clock = clock
        self.compiled_before = clock.seconds
        self.sums: dict[str, float] = {}
        self.steps = 0
        self.updates = 0
        self.update_norm = 0.0
        self.param_norm = 0.0
        self.flops = 0.0
        self.skipped = 0  # steps with a non-finite loss or gradient (nan_policy="skip")
        self.carried = {"steps": 0, "weight": 0.0}  # what a resumed run's interval took over
        self.start = time.perf_counter()

    def add(self, metrics: dict[str, Any], boundary: bool, flops: float) -> None:
        for k in ("loss_sum", "nll_sum", "weight", "correct", "grad_norm"):
            self.sums[k] = self.sums.get(k, 0.0) + float(metrics[k])
        self.steps += 1
        self.flops += flops
        if boundary:
            self.updates += 1
            self.update_norm += float(metrics["update_norm"])
            self.param_norm = float(metrics["param_norm"])

    def carry(self) -> dict[str, Any]:
        """The sums a run stopped inside this interval hands to its resumption
        (:meth:`take_over`), so that the resumed run's first record is the one an
        uninterrupted run writes (the same floats added in the same order)."""
        return {
            "sums": dict(self.sums),
            "steps": self.steps,
            "updates": self.updates,
            "update_norm": self.update_norm,
            "param_norm": self.param_norm,
            "skipped": self.skipped,
        }

    def take_over(self, carried: dict[str, Any]) -> None:
        """Continue the interval a stopped run :meth:`carry`-ed (its rates stay this
        process's own: tokens and steps over this process's time)."""
        self.sums = dict(carried["sums"])
        self.steps, self.updates = carried["steps"], carried["updates"]
        self.update_norm, self.param_norm = carried["update_norm"], carried["param_norm"]
        self.skipped = carried["skipped"]
        self.carried = {"steps": self.steps + self.skipped, "weight": self.sums.get("weight", 0.0)}

    def record(self, lr: float, peak_flops_per_s: float) -> dict[str, float]:
        """The interval's means; its rates over its time less the time spent compiling
        (``compile_s``, reported beside them)."""
        compile_s = self.clock.seconds - self.compiled_before
        elapsed = max(time.perf_counter() - self.start - compile_s, 1e-9)
        sums = {k: self.sums.get(k, 0.0) for k in ("loss_sum", "nll_sum", "weight", "correct")}
        timed = {"weight": sums["weight"] - self.carried["weight"]}
        timed["steps"] = self.steps + self.skipped - self.carried["steps"]
        w = max(sums["weight"], 1.0)
        nll = sums["nll_sum"] / w
        steps = max(self.steps, 1)
        return {
            "loss": sums["loss_sum"] / w,
            "nll": nll,
            "perplexity": float(np.exp(min(nll, 50.0))),
            "accuracy": sums["correct"] / w,
            "lr": lr,
            "grad_norm": self.sums.get("grad_norm", 0.0) / steps,
            "update_norm": self.update_norm / max(self.updates, 1),
            "param_norm": self.param_norm,
            "tokens_per_s": timed["weight"] / elapsed,
            "step_time_s": elapsed / (timed["steps"] or 1),
            "mfu": self.flops / elapsed / peak_flops_per_s,
            "compile_s": compile_s,
            "skipped_steps": self.skipped,
        }


def log_line(updates: int, total: int, r: dict[str, float]) -> str:
    """``step u/T | loss … | nll … | acc … | lr … | gnorm … | tok/s | ms/step | mfu``, and
    ``| compiled … s`` where the interval compiled (its rates leave that time out)."""
    return (
        f"step {updates}/{total} | loss {r['loss']:.3f} | nll {r['nll']:.3f} | "
        f"acc {r['accuracy']:.3f} | lr {r['lr']:.2e} | gnorm {r['grad_norm']:.2f} | "
        f"{r['tokens_per_s']:.0f} tok/s | {r['step_time_s'] * 1e3:.0f} ms/step | "
        f"mfu {100 * r['mfu']:.1f}%"
    ) + (f" | compiled {r['compile_s']:.1f} s" if r.get("compile_s", 0.0) >= 0.05 else "")


def source_blind_warning(result: dict[str, Any], updates: int, warmup_steps: int) -> str:
    """A one-line warning when, past the warm-up, the validation NLL barely depends on the
    source (``source_sensitivity`` < 0.1 nats per target token); else ``""``."""
    sensitivity = result.get("source_sensitivity")
    if sensitivity is None or updates <= warmup_steps or sensitivity >= SOURCE_BLIND_NATS:
        return ""
    return (
        f"warning: source sensitivity {sensitivity:.3f} nats at update {updates} (< "
        f"{SOURCE_BLIND_NATS} after the warm-up): the decoder is ignoring its source, "
        "predicting targets from the target prefix alone"
    )


def scored_set(result: dict[str, Any], translates: bool, max_len: int) -> str:
    """What a loss figure was computed on, from :meth:`Validator.loss`'s counts: ``1,943
    pairs (116 cut to 64 tokens)``; records left out (empty texts) are named too."""
    text = f"{result['loss_examples']:,} {'pairs' if translates else 'examples'}"
    notes = []
    if result.get("loss_truncated"):
        notes.append(f"{result['loss_truncated']:,} cut to {max_len} tokens")
    if result.get("loss_dropped"):
        notes.append(f"{result['loss_dropped']:,} empty left out")
    return text + (f" ({', '.join(notes)})" if notes else "")


class Progress:
    """The progress bar over micro-batches and the interval behind each log line.

    ``interval`` collects the checked metrics of each step; :meth:`log` closes it into a log
    line and a ``train`` record; time spent in :meth:`paused` (validation, probes) is not
    training time.
    """

    def __init__(
        self,
        config: RunConfig,
        writer: metrics_lib.MetricsWriter | None,
        learning_rates: np.ndarray,
        peak_flops_per_s: float,
    ):
        self.config, self.writer = config, writer
        self.learning_rates, self.peak = learning_rates, peak_flops_per_s
        self.clock = CompileClock()
        self.clock.start()  # until close()
        self.interval = Interval(self.clock)
        self.last_record: dict[str, float] = {}
        self.first_loss: float | None = None  # the first step's loss in this process
        self.bar: tqdm | None = None

    def steps(self, start: int, micro_steps: int) -> tqdm:
        """The micro-step indices ``start … micro_steps − 1`` behind a progress bar that counts
        the run's micro-steps (a resumed run's bar starts at ``start`` of ``micro_steps``)."""
        self.bar = tqdm(
            range(start, micro_steps),
            desc="train",
            unit="batch",
            initial=start,
            total=micro_steps,
            disable=jax.process_index() != 0,
        )
        return self.bar

    def due(self, step: int, last: bool) -> bool:
        """Whether micro-step ``step`` (0-based) ends a log interval."""
        return (step + 1) % self.config.log_every == 0 or last

    def log(self, updates: int, first_loss: float | None = None) -> None:
        """Close the interval: a log line, the bar's postfix and a ``train`` record (the
        run's first one carries ``first_loss``, the untrained model's loss, so that a resumed
        run still knows it)."""
        lr = float(self.learning_rates[max(updates - 1, 0)])
        record = self.interval.record(lr, self.peak)
        if first_loss is not None:
            record["first_loss"] = first_loss
        self.last_record = record
        self.bar.set_postfix(
            loss=f"{record['loss']:.3f}",
            lr=f"{record['lr']:.2e}",
            tok_s=f"{record['tokens_per_s']:.0f}",
        )
        say(log_line(updates, self.config.total_steps, record))
        if self.writer:
            self.writer.write("train", updates, record)
        self.interval = Interval(self.clock)

    def carry(self, micro_step: int) -> None:
        """A run stopping at ``micro_step`` inside a log interval: a ``train_partial`` record
        (JSONL only) holding the interval's sums for the resumed run (:meth:`take_over`)."""
        if self.writer and self.interval.steps + self.interval.skipped:
            updates = micro_step // self.config.grad_accum_steps
            carried = {"micro_step": micro_step, **self.interval.carry()}
            self.writer.write(PARTIAL, updates, {"carried": carried})

    def take_over(self, records: list[dict[str, Any]], micro_step: int) -> None:
        """Resuming at ``micro_step``: continue the interval the stopped run carried there,
        if it carried one (the last ``train_partial`` record at that micro-step)."""
        carried = [
            r["carried"]
            for r in records
            if r["split"] == PARTIAL and r["carried"]["micro_step"] == micro_step
        ]
        if carried:
            self.interval.take_over(carried[-1])

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Leave the time spent inside (and what it compiled) out of the interval's training
        time."""
        started, compiled = time.perf_counter(), self.clock.seconds
        try:
            yield
        finally:
            self.interval.start += time.perf_counter() - started
            self.interval.compiled_before += self.clock.seconds - compiled

    def close(self) -> None:
        self.clock.stop()
        if self.bar is not None:
            self.bar.close()
