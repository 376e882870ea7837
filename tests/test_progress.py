"""The log line's rates leave out the time jax spent compiling (the first interval of every run
compiles the train step): that time is reported beside them, as ``compile_s``."""

import numpy as np
import pytest
from jax._src import monitoring as jax_monitoring
from test_nan_policy import _config, _poison
from test_training import small_config

from deepnet_jax.runs import metrics
from deepnet_jax.training import actions, progress, train

COMPILE = "/jax/core/compile/backend_compile_duration"


class FakeTime:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _interval_and_time(monkeypatch):
    now = FakeTime(100.0)
    monkeypatch.setattr(progress.time, "perf_counter", now)
    clock = progress.CompileClock()
    return clock, progress.Interval(clock), now


def _step(interval: progress.Interval) -> None:
    one = {"loss_sum": 2.0, "nll_sum": 2.0, "weight": 4.0, "correct": 1.0, "grad_norm": 1.0}
    interval.add({**one, "update_norm": 0.1, "param_norm": 3.0}, True, 1e6)


def test_compile_time_is_reported_and_left_out_of_the_rates(monkeypatch):
    clock, interval, now = _interval_and_time(monkeypatch)
    clock.on_duration(COMPILE, 3.0)  # the step's compile, inside the interval
    clock.on_duration("/jax/compilation_cache/cache_retrieval_time_sec", 7.0)  # not a compile
    _step(interval)
    _step(interval)
    now.now = 104.0  # 4 s: 3 compiling, 1 stepping
    r = interval.record(lr=1e-3, peak_flops_per_s=1e7)
    assert r["compile_s"] == 3.0
    assert r["step_time_s"] == pytest.approx(0.5)
    assert r["tokens_per_s"] == pytest.approx(8.0)
    assert r["mfu"] == pytest.approx(2e6 / 1.0 / 1e7)
    assert progress.log_line(2, 10, r).endswith("| 500 ms/step | mfu 20.0% | compiled 3.0 s")
    assert "compiled" not in progress.log_line(2, 10, {**r, "compile_s": 0.0})


def test_time_and_compiles_of_a_pause_are_not_the_intervals(monkeypatch):
    now = FakeTime(100.0)
    monkeypatch.setattr(progress.time, "perf_counter", now)
    p = progress.Progress(small_config("encdec", "deepnorm"), None, np.ones(10), 1e7)
    try:
        with p.paused():  # validation: 5 s, 2 of them compiling its functions
            p.clock.on_duration(COMPILE, 2.0)
            now.now = 105.0
        _step(p.interval)
        now.now = 106.0
        r = p.interval.record(lr=1e-3, peak_flops_per_s=1e7)
    finally:
        p.close()
    assert r["compile_s"] == 0.0 and r["step_time_s"] == pytest.approx(1.0)


def test_a_run_reports_its_first_intervals_compile_and_stops_listening(tmp_path):
    before = len(jax_monitoring.get_event_duration_listeners())
    c = small_config("encdec", "deepnorm", steps=20)
    train.run(c, str(tmp_path))
    train_records = [r for r in metrics.read(str(tmp_path)) if r["split"] == "train"]
    assert train_records[0]["compile_s"] > 0  # the train step compiled in the first interval
    assert len(jax_monitoring.get_event_duration_listeners()) == before


def test_a_halted_run_stops_listening_too(monkeypatch, tmp_path):
    before = len(jax_monitoring.get_event_duration_listeners())
    _poison(monkeypatch, {2})
    with pytest.raises(actions.NonFiniteError):
        train.run(_config("halt"), str(tmp_path))
    assert len(jax_monitoring.get_event_duration_listeners()) == before


def test_a_resumed_runs_bar_counts_the_whole_run():
    """Resumed at micro-step 65 of 800: the bar shows 65/800 and yields 65 … 799."""
    p = progress.Progress(small_config("encdec", "deepnorm"), None, np.ones(10), 1e7)
    try:
        bar = p.steps(65, 800)
        assert (bar.n, bar.total) == (65, 800)
        assert list(bar) == list(range(65, 800))
    finally:
        p.close()
