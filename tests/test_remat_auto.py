"""model.remat_policy='auto': the first candidate (least recomputation first) whose planned peak
fits the budget, one line saying which; one error line when none fits."""

import dataclasses
import json
import os
import re
import subprocess
import sys

import jax
import pytest
from conftest import xla_flags
from test_training import small_config

from deepnet_jax.cli import command
from deepnet_jax.model import architectures, remat
from deepnet_jax.runs import checkpoint
from deepnet_jax.training import config as train_config
from deepnet_jax.training import memory_plan, remat_auto, train
from deepnet_jax.training.run_config import RunConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 2**30


def _config():
    """A 16-layer decoder whose saved residuals (256 rows × 12 tokens × d 32 per layer) weigh
    enough for every candidate to plan a different peak."""
    c = small_config("decoder", "deepnorm", steps=2)
    c.model.num_decoder_layers = 16
    c.data.batch_size = 256
    c.eval_batches, c.checkpoint_every = 1, 0
    c.model.remat_policy = "auto"
    return c


@pytest.fixture(scope="module")
def planned():
    """memory_plan.compile_step, memoized by (remat_policy, scan_group_size): each candidate
    compiles once in this module (the plans are deterministic; a run whose config differs from
    the memoized step's jits its own step: planned_step.reuse)."""
    real, cache = memory_plan.compile_step, {}

    def memo(config, devices=None, target=None):
        key = (config.model.remat_policy, config.model.scan_group_size)
        if key not in cache:
            cache[key] = real(config, devices, target)
        return cache[key]

    return memo


@pytest.fixture
def memoized(planned, monkeypatch):
    monkeypatch.setattr(memory_plan, "compile_step", planned)
    return planned


def _peaks(planned) -> dict[tuple[str, int], int]:
    c = RunConfig.from_config(_config())
    return {
        (p, k): planned(remat_auto.candidate(c, p, k), jax.devices()).plan.peak
        for p, k in remat.candidates(c.model)
    }


def test_each_budget_picks_the_first_candidate_that_fits(memoized):
    peaks = _peaks(memoized)
    order = remat.candidates(RunConfig.from_config(_config()).model)
    # the candidates trade recomputation for memory: no recomputation plans the largest peak,
    # and the grouped full remat the smallest (residual-dominated model)
    assert peaks[order[0]] == max(peaks.values())
    assert peaks[order[-1]] == min(peaks.values()) < peaks[("full", 0)]
    chosen = set()
    for candidate in order:
        c = _config()
        c.memory_budget_gb = peaks[candidate] / GIB  # exact: a power-of-two division
        expected = next(k for k in order if peaks[k] <= peaks[candidate])
        lines = []
        resolved = remat_auto.resolve(RunConfig.from_config(c), jax.devices(), lines.append)
        got = (resolved.model.remat_policy, resolved.model.scan_group_size)
        assert got == expected, (candidate, peaks)
        assert c.model.remat_policy == "auto"  # the caller's config is left as it was
        (line,) = lines
        assert line.startswith(
            f"model.remat_policy='auto': remat_policy={got[0]!r}, scan_group_size={got[1]}, "
            f"planned peak {remat_auto._size(peaks[got])} per device of"
        ), line
        chosen.add(got)
    assert {order[0], order[-1]} <= chosen and len(chosen) >= 3, peaks


def test_the_chosen_plan_lists_every_candidate_it_compiled(memoized):
    """On a CPU ``auto`` plans the candidates in order up to the first that fits: the chosen
    plan's ``auto_candidates`` (cli.plan's JSON line and record) are those, with their peaks."""
    from deepnet_jax.cli.plan import plan_json

    peaks = _peaks(memoized)
    order = remat.candidates(RunConfig.from_config(_config()).model)
    c = _config()
    c.memory_budget_gb = peaks[order[len(order) // 2]] / GIB
    _, plan = remat_auto.choose(RunConfig.from_config(c), jax.devices(), lambda line: None)
    chosen = (plan.auto_candidates[-1]["remat_policy"], plan.auto_candidates[-1]["scan_group_size"])
    tried = order[: order.index(chosen) + 1]
    assert [(x["remat_policy"], x["scan_group_size"]) for x in plan.auto_candidates] == tried
    assert [x["peak"] for x in plan.auto_candidates] == [peaks[k] for k in tried]
    assert [x["fits"] for x in plan.auto_candidates] == [False] * (len(tried) - 1) + [True]
    assert all(x["predicted_step_s"] is None for x in plan.auto_candidates)  # a CPU: not ranked
    assert plan.peak == peaks[chosen]
    assert json.loads(json.dumps(plan_json(plan)))["auto_candidates"] == plan.auto_candidates


def test_nothing_fits_is_one_line(memoized, capsys):
    peaks = _peaks(memoized)
    smallest = min(peaks.values())
    c = _config()
    c.memory_budget_gb = (smallest - 1) / GIB
    with pytest.raises(SystemExit) as exit_:
        command.train(c, None)
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.search(
        rf"no candidate fits .* the smallest planned peak is {remat_auto._size(smallest)} "
        r"\(remat_policy='full', scan_group_size=-1\); raise memory_budget_gb",
        lines[0],
    ), lines[0]


def test_auto_trains_with_its_choice(memoized, capsys, tmp_path):
    """train.run resolves auto before the model is built; the run's saved config holds the
    choice, so the checkpoint loads without the planner."""
    peaks = _peaks(memoized)
    c = _config()
    c.memory_budget_gb = peaks[("full", -1)] / GIB  # only the last candidate fits
    c.checkpoint_every = 2
    result = train.run(c, str(tmp_path))
    assert result["steps"] == 2
    out = capsys.readouterr().out
    assert "model.remat_policy='auto': remat_policy='full', scan_group_size=-1" in out
    saved = checkpoint.Checkpointer(str(tmp_path), 2, 1, read_only=True).read_config(2)
    assert (saved["model"]["remat_policy"], saved["model"]["scan_group_size"]) == ("full", -1)


@pytest.mark.slow  # the planner command: test_plan.py's runs; auto's plan: the tests above
def test_planner_command_with_auto():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "deepnet_jax.cli.plan",
            "--config=tests/configs/tiny_synthetic.py",
            "--num_devices=2",
            "--config.model.remat_policy=auto",
            "--config.memory_budget_gb=64",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "XLA_FLAGS": xla_flags()},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith(
        "model.remat_policy='auto': remat_policy='none', scan_group_size=0, planned peak"
    ), proc.stdout
    assert json.loads(lines[-1])["peak"] <= 64 * GIB


def test_the_training_default_is_auto_a_built_model_full():
    assert train_config.default_config().model.remat_policy == "auto"
    assert architectures.default_config().remat_policy == "full"  # no budget to plan against
    with open(os.path.join(ROOT, "docs", "config.md")) as f:
        assert "| `model.remat_policy` | `'auto'` |" in f.read()


def test_on_cpu_the_budget_is_the_hosts_memory_shared_by_its_devices(monkeypatch):
    monkeypatch.setattr(remat, "host_memory_bytes", lambda: 16 * GIB)
    devices = jax.devices()
    budget, source = remat_auto.run_budget(RunConfig.from_config(_config()), devices)
    assert budget == int(16 * GIB * (1 - remat.HEADROOM["cpu"]) / len(devices))
    assert source.startswith("host memory 16.0 GiB less 25% headroom"), source
    c = RunConfig.from_config(_config()).replace(memory_budget_gb=2.5)  # wins over the host's
    assert remat_auto.run_budget(c, devices) == (int(2.5 * GIB), "memory_budget_gb=2.5")
    monkeypatch.setattr(remat, "host_memory_bytes", lambda: 0)
    with pytest.raises(ValueError, match=r"reports no device memory limit; set memory_budget_gb"):
        remat_auto.run_budget(RunConfig.from_config(_config()), devices)


def test_host_memory_is_the_lower_of_physical_and_the_cgroup_limit(tmp_path):
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("max\n")  # cgroup v2 without a limit
    v1.write_text("9223372036854771712\n")  # cgroup v1 without a limit
    assert remat.host_memory_bytes([str(v2), str(v1)]) == physical
    v2.write_text(f"{physical // 4}\n")
    assert remat.host_memory_bytes([str(v2), str(v1)]) == physical // 4
    assert remat.host_memory_bytes([str(tmp_path / "absent")]) == physical


def test_a_default_run_plans_once_and_trains_without_recomputation(capsys, monkeypatch):
    """The training default (auto) on CPU: the first candidate (no remat) fits the host's
    memory, so one planning compile, and the run's model recomputes nothing."""
    calls = []
    real = memory_plan.compile_step
    monkeypatch.setattr(memory_plan, "compile_step", lambda c, *a: calls.append(c) or real(c, *a))
    c = small_config("decoder", "deepnorm", steps=2)
    c.model.remat_policy = train_config.default_config().model.remat_policy  # the default
    c.eval_batches = 1
    assert c.model.remat_policy == "auto"
    assert train.run(c)["steps"] == 2
    assert [(p.model.remat_policy, p.model.scan_group_size) for p in calls] == [("none", 0)]
    out = capsys.readouterr().out
    assert re.search(
        r"model\.remat_policy='auto': remat_policy='none', scan_group_size=0, planned peak "
        r"\d+\.\d+ [MG]iB per device of \d+\.\d\d GiB \(host memory [\d.]+ GiB less 25% headroom",
        out,
    ), out


def test_a_group_size_set_beside_auto_is_kept():
    c = _config()
    c.model.scan_group_size = 4
    assert remat.candidates(c.model) == [("dots", 4), ("full", 4)]
    c.model.scan_group_size, c.model.scan_layers = 0, False  # unscanned: no groups
    assert remat.candidates(c.model) == [("none", 0), ("dots", 0), ("qkv_fc1", 0), ("full", 0)]
    c.model.attention_impl = "splash"  # the one attention whose forward kernel it saves
    assert ("attention_out", 0) in remat.candidates(c.model)


def test_on_a_chip_auto_picks_the_fastest_predicted_candidate_that_fits(monkeypatch):
    """Judged on a chip (the run's own GPU or TPU, or a deviceless target), every candidate is
    planned and the fastest predicted one that fits wins; on CPU the first that fits."""
    from deepnet_jax.scale import targets

    predicted = {("none", 0): 3.0, ("dots", 0): 1.0, ("qkv_fc1", 0): 0.5, ("full", 0): 2.0}
    peaks = {("none", 0): 9 * GIB, ("qkv_fc1", 0): 9 * GIB}  # the rest: 1 GiB
    planned = []

    def compile_step(config, devices=None, target=None):
        key = (config.model.remat_policy, config.model.scan_group_size)
        planned.append(key)
        step = predicted.get(key, 4.0) if target is not None else None
        return memory_plan.CompiledStep(
            _plan_with(peaks.get(key, GIB), step), None, None, {}, config
        )

    monkeypatch.setattr(memory_plan, "compile_step", compile_step)
    c = RunConfig.from_config(_config()).replace(memory_budget_gb=2.0)
    lines = []
    chosen, _ = remat_auto.choose(c, jax.devices(), lines.append, judged_on=targets.parse("h100-1"))
    assert (chosen.model.remat_policy, chosen.model.scan_group_size) == ("dots", 0)
    every = remat.candidates(c.model)  # reference attention: no attention_out
    flat = [pair for pair in every if pair[1] == 0]
    assert planned == flat  # every flat candidate planned; a flat one fits: no nested ones
    assert "predicted step" in lines[0] and "did not fit" in lines[0]
    planned.clear()
    peaks.update({pair: 9 * GIB for pair in flat})  # no flat candidate fits: the nested ones
    chosen, _ = remat_auto.choose(c, jax.devices(), lines.append, judged_on=targets.parse("h100-1"))
    assert planned == every and chosen.model.scan_group_size == -1
    for pair in flat:
        del peaks[pair]
    peaks.update({("none", 0): 9 * GIB, ("qkv_fc1", 0): 9 * GIB})
    planned.clear()
    chosen, _ = remat_auto.choose(c, jax.devices(), lines.append)  # CPU: no chip figures
    assert (chosen.model.remat_policy, planned) == ("dots", [("none", 0), ("dots", 0)])


def test_a_calibrated_prediction_ranks_before_the_roofline_sum(monkeypatch):
    """Where the chip's family is calibrated, ``auto`` ranks by the calibrated step: here the
    roofline sum prefers ``full`` and the calibrated step ``dots``; candidates within
    ``TIE`` of the fastest are equal and the least recomputation among them wins."""
    from deepnet_jax.scale import targets

    roofline = {("none", 0): 3.0, ("dots", 0): 2.0, ("qkv_fc1", 0): 2.5, ("full", 0): 1.5}
    calibrated = {("none", 0): 5.0, ("dots", 0): 3.0, ("qkv_fc1", 0): 4.0, ("full", 0): 3.5}

    def compile_step(config, devices=None, target=None):
        key = (config.model.remat_policy, config.model.scan_group_size)
        plan = _plan_with(GIB, roofline[key], calibrated[key])
        return memory_plan.CompiledStep(plan, None, None, {}, config)

    monkeypatch.setattr(memory_plan, "compile_step", compile_step)
    c = RunConfig.from_config(_config()).replace(memory_budget_gb=2.0)
    lines = []
    chosen, _ = remat_auto.choose(c, jax.devices(), lines.append, judged_on=targets.parse("h200-1"))
    assert chosen.model.remat_policy == "dots"
    assert "remat_policy='dots', scan_group_size=0 3e+03 ms" in lines[0]
    assert lines[0].endswith("(calibrated)")
    # within TIE of the fastest the least recomputation wins; just outside it the fastest
    calibrated.update({("dots", 0): 3.0 * (1 + remat_auto.TIE) * 0.999, ("full", 0): 3.0})
    chosen, _ = remat_auto.choose(c, jax.devices(), lines.append, judged_on=targets.parse("h200-1"))
    assert chosen.model.remat_policy == "dots"
    calibrated[("dots", 0)] = 3.0 * (1 + remat_auto.TIE) * 1.001
    chosen, _ = remat_auto.choose(c, jax.devices(), lines.append, judged_on=targets.parse("h200-1"))
    assert chosen.model.remat_policy == "full"


def _plan_with(peak: int, step: float | None, calibrated: float | None = None) -> memory_plan.Plan:
    """A plan of this peak, predicted and calibrated step time (the fields ``choose`` does not
    read: None)."""
    fields = {f.name: None for f in dataclasses.fields(memory_plan.Plan) if f.name != "kernels"}
    return memory_plan.Plan(
        **{**fields, "peak": peak, "predicted_step_s": step, "calibrated_step_s": calibrated}
    )


@pytest.mark.parametrize("target, splash", [("v5p-8", True), ("h100-1", False)])
def test_attention_out_is_planned_where_attention_resolves_to_splash(monkeypatch, target, splash):
    """With ``model.attention_impl='auto'``, the candidates are those of the kernel the target
    gets (the trainer resolves attention first): a TPU's splash attention adds
    ``attention_out``, an H100's kernel does not."""
    from deepnet_jax.scale import targets

    planned = []

    def compile_step(config, devices=None, target=None):
        planned.append((config.model.remat_policy, config.model.scan_group_size))
        return memory_plan.CompiledStep(_plan_with(GIB, 1.0), None, None, {}, config)

    monkeypatch.setattr(memory_plan, "compile_step", compile_step)
    c = _config()
    c.model.attention_impl, c.model.dropout, c.model.attention_dropout = "auto", 0.0, 0.0
    c = RunConfig.from_config(c).replace(memory_budget_gb=2.0)
    remat_auto.choose(c, jax.devices(), lambda line: None, judged_on=targets.parse(target))
    assert (("attention_out", 0) in planned) == splash, planned
