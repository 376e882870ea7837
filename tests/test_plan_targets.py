"""The planner on the accelerators' own compilers, deviceless: TPU topologies through libtpu (the
``tpu`` extra) and GPU nodes through jax's CUDA plugin (the ``gpu-plan`` extra)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from deepnet_jax.configs import bert_mlm, default, magneto_lm
from deepnet_jax.scale import flops, targets
from deepnet_jax.training import memory_plan
from deepnet_jax.training.run_config import RunConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_libtpu = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason='libtpu is not installed (pip install -e ".[tpu]"): no TPU compiler to plan with',
)
needs_cuda_plugin = pytest.mark.skipif(
    importlib.util.find_spec("jax_plugins.xla_cuda12") is None,
    reason='jax-cuda12-plugin is not installed (pip install -e ".[gpu-plan]")',
)


def _plan(config, target: str) -> memory_plan.Plan:
    return memory_plan.plan(config, target=targets.parse(target))


def _decoder(layers: int, remat: str = "full"):
    c = magneto_lm.get_config()
    c.model.num_decoder_layers = layers
    c.model.d_model, c.model.num_heads, c.model.ffn_dim = 128, 4, 512
    c.model.remat_policy = remat
    c.data.vocab_size, c.data.max_len, c.data.batch_size = 1000, 64, 8
    return c


def _argument_bytes_are_the_plan(plan: memory_plan.Plan) -> None:
    """arguments = params + optimizer state + batch + step, learning rate, gate (4 B each), and
    the padding of XLA:TPU's tiled layouts (hlo_module.padded_nbytes of each parameter)."""
    args = plan.memory_analysis["argument_size_in_bytes"]
    assert args == plan.params + plan.opt_state + plan.batch + 12 + plan.layout_padding


@needs_libtpu
@pytest.mark.parametrize(
    "name, kind, hosts",
    [
        ("v4-8", "TPU v4", 1),  # megacore: 4 devices, not libtpu's default 8 TensorCores
        ("v5e-1", "TPU v5 lite", 1),
        ("v5p-64", "TPU v5", 8),
        ("v6e-8", "TPU v6 lite", 1),
        ("v5e-256", "TPU v5 lite", 64),
    ],
)
def test_every_tpu_generation_gives_its_devices(name, kind, hosts):
    target = targets.parse(name)
    devices = targets.compile_devices(target)
    assert len(devices) == target.num_devices and {d.device_kind for d in devices} == {kind}
    assert len({d.process_index for d in devices}) == hosts == target.num_hosts


@needs_cuda_plugin
@pytest.mark.parametrize(
    "name, kind",
    [
        ("a100-8", "NVIDIA A100-SXM4-80GB"),
        ("h100-64", "NVIDIA H100 80GB HBM3"),
        ("h200-8", "NVIDIA H200 141GB HBM3e"),
        ("b200-8", "NVIDIA B200"),
    ],
)
def test_every_gpu_gives_its_devices(name, kind):
    target = targets.parse(name)
    devices = targets.compile_devices(target)
    assert len(devices) == target.num_devices and {d.device_kind for d in devices} == {kind}
    assert len({d.process_index for d in devices}) == target.num_hosts
    # the chip table's memory and bandwidth are the shipped device description's
    spec = targets.gpu_spec(target.chip)
    assert f"device_memory_size: {target.chip.memory_bytes}" in spec
    assert f"memory_bandwidth: {round(target.chip.memory_bytes_per_s)}" in spec


@pytest.fixture(scope="module")
def default_on_v5e_4() -> memory_plan.Plan:
    """The default config's plan on v5e-4 (pure data parallelism), compiled once for the three
    tests that read it: the next two, and the FSDP one's data-parallel side (XLA:TPU takes
    about half a minute for it on a 2-core machine)."""
    return _plan(default.get_config(), "v5e-4")


@needs_libtpu
def test_default_config_on_v5e_4(default_on_v5e_4):
    plan = default_on_v5e_4
    assert plan.device_kind == "TPU v5 lite" and plan.mesh == {"data": 4, "fsdp": 1, "tensor": 1}
    _argument_bytes_are_the_plan(plan)
    assert plan.fits and plan.device_memory == 16 * 2**30 and plan.warnings == []
    assert plan.outputs_not_aliased <= memory_plan.NOT_ALIASED_LIMIT
    r = plan.roofline
    assert r["bound_s"] == max(r["compute_s"], r["memory_s"], r["collective_s"]) > 0
    assert 0 < r["mfu_upper_bound"] <= 1


@needs_libtpu
def test_a_tpu_plans_kernels_count_every_matmul(default_on_v5e_4):
    """On XLA:TPU most matmuls are convolutions: the kernels' FLOPs (one device's program, a
    quarter of the batch under pure data parallelism) are still the program's."""
    plan = default_on_v5e_4
    assert sum(k.flops for k in plan.kernels) * 4 == plan.program_flops
    # at least the compute bound and the state's read and write; not the roofline's memory
    # term, XLA's "bytes accessed", which also counts reads of on-chip (S(1)) copies
    state = (
        plan.memory_analysis["argument_size_in_bytes"]
        + plan.memory_analysis["output_size_in_bytes"]
    )
    hbm = targets.parse("v5e-4").chip.memory_bytes_per_s
    assert plan.predicted_step_s >= max(plan.roofline["compute_s"], state / hbm)
    unclassified = [k for k in plan.kernels if k.kind == "unclassified"]
    assert all(k.seconds < 0.01 * plan.predicted_step_s for k in unclassified)


@needs_libtpu
@pytest.mark.parametrize(
    "scheme, remat, group",
    [  # the default run: a saving policy and the nested scan; the rest under -m slow
        pytest.param("subln", "none", 0, marks=pytest.mark.slow),
        ("subln", "dots", 0),
        pytest.param("subln", "full", 0, marks=pytest.mark.slow),
        pytest.param("deepnorm", "full", 0, marks=pytest.mark.slow),
        ("deepnorm", "full", -1),
        pytest.param("pre_ln", "dots", -1, marks=pytest.mark.slow),
        # the schemes since DeepNet under full remat: which keep the branch output (x + c·F);
        # one that does in the default run (one that does not: DeepNorm's above)
        ("deepscalelm", "full", 0),
        *(
            pytest.param(s, "full", 0, marks=pytest.mark.slow)
            for s in ("peri_ln", "mix_ln", "ln_scaling", "rezero", "skipinit", "admin")
        ),
    ],
)
def test_compiled_flops_are_the_analytic_count_with_remat_recompute(scheme, remat, group):
    """The lowered step's matmul FLOPs (every scan trip) equal flops.py's 3 × forward plus the
    policy's recomputation (flops.remat_flops_ratio): both count the same matmuls on the same
    padded shapes, so they agree exactly, not within a tolerance."""
    config = _decoder(6, remat)
    config.model.scheme, config.model.scan_group_size = scheme, group
    if scheme == "deepscalelm":
        config.model.activation = "relu"  # its init is ReLU's
    plan = _plan(config, "v5e-4")
    model = RunConfig.from_config(config).resolved().model
    shapes = {"inputs": plan.batch_shape}
    assert plan.model_flops == flops.train_flops_per_step(model, shapes)
    assert plan.program_flops / plan.model_flops == pytest.approx(plan.expected_recompute, rel=1e-9)
    # XLA's cost analysis counts the scanned layer once: far below the program's count
    assert plan.xla_flops * 4 < 0.5 * plan.program_flops


@pytest.mark.parametrize(
    "config, scheme, remat",
    [
        pytest.param(default, "subln", "full", marks=pytest.mark.slow),
        (default, "deepnorm", "dots"),
        (bert_mlm, "pre_ln", "full"),
    ],
)
def test_remat_flops_of_the_encoder_decoder_and_the_encoder(config, scheme, remat):
    """The lowered program is the same for any target: these plan on one CPU device."""
    c = config.get_config()
    c.model.scheme, c.model.remat_policy = scheme, remat
    c.model.num_encoder_layers = min(c.model.num_encoder_layers, 3)
    c.model.num_decoder_layers = min(c.model.num_decoder_layers, 3)
    plan = _plan(c, "cpu:1")
    assert plan.program_flops / plan.model_flops == pytest.approx(plan.expected_recompute, rel=1e-9)


# the default run: the exact count on 6 layers (above) and the CPU planner on the 1,000-layer
# model (test_plan.py)
@pytest.mark.slow
@needs_libtpu
def test_200_layers_compile_like_6_and_count_every_layer(capsys):
    shallow, deep = _plan(_decoder(6), "v5e-4"), _plan(_decoder(200), "v5e-4")
    for plan in (shallow, deep):
        assert plan.program_flops / plan.model_flops == pytest.approx(
            plan.expected_recompute, rel=1e-9
        )
    # one scanned layer body, not 200: an unrolled program would grow with depth (200/6 = 33×);
    # the scanned one stays well under a quarter of that
    code = [p.memory_analysis["generated_code_size_in_bytes"] for p in (shallow, deep)]
    assert code[1] < (200 / 6) / 4 * code[0]
    with capsys.disabled():
        print(f"\nTPU compile 200 vs 6 layers: {deep.compile_s / shallow.compile_s:.2f}x")


@needs_libtpu
def test_fsdp_gathers_and_scatters_data_parallel_all_reduces(default_on_v5e_4):
    fsdp_config = default.get_config()
    fsdp_config.mesh.data, fsdp_config.mesh.fsdp = 1, 4
    fsdp, dp = _plan(fsdp_config, "v5e-4"), default_on_v5e_4
    c = fsdp.collectives
    assert c["all-gather"]["count"] > 0 and c["reduce-scatter"]["count"] > 0
    assert fsdp.params < dp.params / 3  # a quarter of each matrix; norms and biases replicated
    c = dp.collectives
    assert c["all-gather"]["count"] == 0 and c["reduce-scatter"]["count"] == 0
    # every f32 gradient is all-reduced once: ring volume 2·(n-1)/n of the parameters' bytes
    assert c["all-reduce"]["bytes"] >= 1.5 * dp.params


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.run(
        [sys.executable, "-m", "deepnet_jax.cli.plan", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )


@needs_libtpu
def test_a_step_too_big_for_the_chip_is_one_line():
    """2M tokens a step on one v5e: XLA:TPU refuses to compile (its temporaries exceed HBM)."""
    proc = _cli(
        "--config=configs/default.py",
        "--target=v5e-1",
        "--config.mesh.data=1",
        "--config.data.max_tokens=2097152",
    )
    assert proc.returncode == 2, proc.stdout[:1500] + proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("does not fit on v5e-1: the train step"), lines
    assert "RESOURCE_EXHAUSTED" in lines[0] and proc.stdout == ""


def test_an_unknown_target_is_one_line():
    proc = _cli("--config=configs/default.py", "--target=v5p-6")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --target='v5p-6' is not a known")


# the default run: the default config on h100-8 below (fsdp 8) and the arguments' bytes on v5e-4
@pytest.mark.slow
@needs_cuda_plugin
def test_default_config_on_h100_8_deviceless():
    plan = _plan(default.get_config(), "h100-8")
    assert "H100" in plan.device_kind and plan.mesh == {"data": 8, "fsdp": 1, "tensor": 1}
    _argument_bytes_are_the_plan(plan)
    assert plan.fits and plan.warnings == []


@needs_cuda_plugin
def test_fsdp_state_stays_sharded_and_in_place_on_gpu():
    """XLA:GPU chose replicated outputs for the step's new state (the whole state per GPU)
    until the step pinned its output shardings to the state's."""
    config = default.get_config()
    config.mesh.data, config.mesh.fsdp = 1, 8
    plan = _plan(config, "h100-8")
    assert plan.outputs_not_aliased <= memory_plan.NOT_ALIASED_LIMIT, plan.outputs_not_aliased
    assert plan.warnings == []


def test_cli_json_has_the_target_figures(tmp_path):
    record = tmp_path / "plan.json"
    proc = _cli("--config=configs/default.py", "--target=cpu:2", f"--record={record}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = json.loads(proc.stdout.strip().splitlines()[-1])
    assert plan["target"] == "cpu:2" and plan["fits"] is None and plan["roofline"] is None
    assert plan["program_flops"] == plan["model_flops"]  # the default config: no remat
    assert plan["predicted_step_s"] is None  # a CPU has no chip figures for the kernel model
    saved = json.loads(record.read_text())
    assert saved["plan"] == plan and saved["command"].startswith("python -m deepnet_jax.cli.plan")


@needs_cuda_plugin
def test_a_runs_own_accelerators_are_their_target():
    """``auto`` judges a run's candidates by its own chip's figures (targets.of_devices)."""
    import jax

    devices = targets.compile_devices(targets.parse("h100-1"))
    target = targets.of_devices(devices)
    assert target.chip == targets.GPU_CHIPS["h100"] and target.num_devices == 1
    assert targets.of_devices(jax.devices()) is None  # the CPU: no chip figures
