"""The kernel-level cost model (deepnet_jax.scale.kernels): hand counts of a plain matmul, an
elementwise program and an in-place update; a scanned step's kernels against hlo_census; and the
planner's kernel figures on a GPU target, deviceless."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import os
import warnings

import jax
import jax.numpy as jnp
import pytest

from deepnet_jax.scale import calibration, hlo_census, kernels, targets
from deepnet_jax.training import memory_plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a made-up chip with round figures, so that each time is a hand count
CHIP = targets.Chip("test chip", "tpu", 2**30, 1e12, 1e11, 1e10, 1)
needs_cuda_plugin = pytest.mark.skipif(
    importlib.util.find_spec("jax_plugins.xla_cuda12") is None,
    reason='jax-cuda12-plugin is not installed (pip install -e ".[gpu-plan]")',
)


def _kernels(fn, *args, **jit_options) -> list[kernels.Kernel]:
    text = jax.jit(fn, **jit_options).lower(*args).compile().as_text()
    return kernels.kernels(text, CHIP)


def test_a_plain_matmul_is_one_kernel_of_its_hand_count():
    (k,) = _kernels(lambda a, b: a @ b, jnp.zeros((64, 128)), jnp.zeros((128, 32)))
    assert k.flops == 2 * 64 * 32 * 128 and k.count == 1
    assert k.bytes == 4 * (64 * 128 + 128 * 32 + 64 * 32)  # both operands read, result written
    assert k.seconds == max(k.flops / CHIP.peak_flops, k.bytes / CHIP.memory_bytes_per_s)


def test_an_elementwise_program_reads_its_inputs_and_writes_its_output_once():
    x = jnp.zeros((256, 512))
    (k,) = _kernels(lambda a, b: jnp.tanh(a) * b + 1.0, x, x)
    assert k.flops == 0 and k.bytes == 3 * 256 * 512 * 4
    assert k.seconds == k.bytes / CHIP.memory_bytes_per_s and k.kind == "unclassified"


def test_an_in_place_update_moves_its_update_not_the_buffer():
    buffer, row = jnp.zeros((1024, 256)), jnp.ones((1, 256))
    found = _kernels(
        lambda b, r, i: jax.lax.dynamic_update_slice(b, r * 2.0, (i, 0)),
        buffer,
        row,
        jnp.int32(3),
        donate_argnums=0,
    )
    moved = sum(k.bytes for k in found)
    assert moved == 4 * 256 + 4 * 256 + 4  # the row read, and written doubled; the index


def _scanned_loss(w, x):
    def body(c, wi):
        return jnp.tanh(c @ wi), None

    return jax.lax.scan(body, x, w)[0].sum()


def test_a_scanned_step_adds_up_and_matches_the_census():
    w, x = jnp.ones((6, 64, 64)), jnp.ones((16, 64))
    text = jax.jit(jax.grad(_scanned_loss)).lower(w, x).compile().as_text()
    found = kernels.kernels(text, CHIP)
    assert sum(k.flops for k in found) == hlo_census.matmul_flops(text)
    assert hlo_census.matmul_flops(text) == 3 * 6 * 2 * 16 * 64 * 64
    classes = kernels.by_class(found)
    assert set(classes) == set(kernels.CLASSES)
    assert math.isclose(sum(classes.values()), sum(k.seconds for k in found), rel_tol=1e-12)
    assert max(k.count for k in found) == 6  # the loop's kernels run once a layer


def test_hidden_flops_go_to_the_custom_calls():
    visible = kernels.Kernel("f", "fusion", "ffn", 1, 100.0, 10.0, 1e-10, "")
    call = kernels.Kernel("c", "custom-call tpu_custom_call", "attention", 1, 0.0, 10.0, 0, "")
    out = kernels._with_hidden_flops([visible, call], model_flops=1000.0, chip=CHIP)
    assert out[0] == visible and out[1].flops == 900.0
    assert out[1].seconds == max(900.0 / CHIP.peak_flops, 10.0 / CHIP.memory_bytes_per_s)


_ASYNC_DUS = """HloModule m, is_scheduled=true

%fused_dus (p0: bf16[18,128,64], p1: s32[], p2: bf16[128,64]) -> bf16[18,128,64] {
  %p0 = bf16[18,128,64]{2,1,0} parameter(0)
  %p2 = bf16[128,64]{1,0} parameter(2)
  %b = bf16[1,128,64]{2,1,0} bitcast(%p2)
  %p1 = s32[] parameter(1)
  %z = s32[] constant(0)
  ROOT %dus = bf16[18,128,64]{2,1,0} dynamic-update-slice(%p0, %b, %p1, %z, %z)
}

ENTRY %main (a: bf16[18,128,64], i: s32[], u: bf16[128,64]) -> bf16[18,128,64] {
  %a = bf16[18,128,64]{2,1,0} parameter(0)
  %i = s32[] parameter(1)
  %u = bf16[128,64]{1,0} parameter(2)
  LAUNCH
}
"""
_SYNC = "ROOT %fusion.1 = bf16[18,128,64]{2,1,0} fusion(%a, %i, %u), kind=kLoop, calls=%fused_dus"
_ASYNC = (
    "%fusion-start.1 = ((bf16[18,128,64]{2,1,0}, s32[], bf16[128,64]{1,0}), "
    "bf16[18,128,64]{2,1,0}, u32[]) fusion-start(%a, %i, %u), kind=kLoop, calls=%fused_dus\n"
    "  ROOT %fusion-done.1 = bf16[18,128,64]{2,1,0} fusion-done(%fusion-start.1)"
)


def test_an_async_fusion_costs_what_its_synchronous_form_costs():
    """jax 0.11's XLA:GPU runs a scan's per-layer writes as fusion-start/-done pairs (the
    H200 profiles of docs/records/h200): the in-place rule holds for them too."""
    (sync,) = kernels.kernels(_ASYNC_DUS.replace("LAUNCH", _SYNC), CHIP)
    (start,) = kernels.kernels(_ASYNC_DUS.replace("LAUNCH", _ASYNC), CHIP)
    assert start.opcode == "fusion-start" and start.kind == sync.kind
    assert start.bytes == sync.bytes < 18 * 128 * 64 * 2  # the bf16 buffer is not moved


def _fmha(target: str, mask: str) -> str:
    """An HLO module of one cuDNN attention call, its backend config as compiled HLO writes it
    (XLA puts a space after each colon)."""
    q = "bf16[4,256,8,64]{3,2,1,0}"
    call = (
        f'custom_call_target="__cudnn$fmha{target}", '
        f'backend_config={{"cudnn_fmha_backend_config": {{"mask_type": "{mask}"}}}}'
    )
    return f"""HloModule m

ENTRY %main (q: bf16[4,256,8,64], k: bf16[4,512,8,64], v: bf16[4,512,8,64]) -> bf16[4,8,256,64] {{
  %q = {q} parameter(0)
  %k = bf16[4,512,8,64]{{3,2,1,0}} parameter(1)
  %v = bf16[4,512,8,64]{{3,2,1,0}} parameter(2)
  %a = (bf16[4,8,256,64]{{3,1,2,0}}, u8[256]{{0}}) custom-call(%q, %k, %v), {call}
  ROOT %o = bf16[4,8,256,64]{{3,1,2,0}} get-tuple-element(%a), index=0
}}
"""


@pytest.mark.parametrize(
    "target, mask, matmuls",
    [
        ("Softmax", "NO_MASK", 4),
        ("SoftmaxBackward", "NO_MASK", 10),
        ("Softmax", "CAUSAL", 2),
        ("Softmax", "PADDING", 4),
        ("Softmax", "PADDING_CAUSAL", 2),
        ("SoftmaxBackward", "PADDING_CAUSAL", 5),
    ],
)
def test_cudnn_attention_counts_its_matmuls_from_q_and_k(target, mask, matmuls):
    """cuDNN's fused attention hides its matmuls in a custom call: q·kᵀ and p·v forward (4·B·H·
    T·S·K), 2.5 times that backward, half of either under a causal mask (with key lengths or
    without); key lengths alone skip nothing the count can know."""
    text = _fmha(target, mask)
    flops = matmuls * 4 * 8 * 256 * 512 * 64
    assert hlo_census.matmul_flops(text) == flops
    (k,) = kernels.kernels(text, CHIP, model_flops=10 * flops)  # visible: nothing is spread
    assert k.flops == flops


@pytest.fixture(scope="module")
def h100_plan_run(tmp_path_factory):
    """``cli.plan --config=default --target=h100-1 --kernels --record=…`` run once in-process
    (the XLA:GPU compile of the default step takes ~20 s; both tests below read it): the Plan
    that ``memory_plan.plan`` returned inside the command (a spy around the real function), the
    command's stdout and its record's path."""
    from absl import flags

    from deepnet_jax.cli import plan as plan_cli  # its flags: process-wide, parsed below

    record = tmp_path_factory.mktemp("h100_plan") / "plan.json"
    planned, real_plan = [], memory_plan.plan

    def spy(*args, **kwargs):
        planned.append(real_plan(*args, **kwargs))
        return planned[-1]

    out = io.StringIO()
    argv = [
        "plan", f"--config={os.path.join(ROOT, 'configs', 'default.py')}", "--target=h100-1",
        "--kernels", f"--record={record}",
    ]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        mp.setattr(memory_plan, "plan", spy)
        # ml_collections loads the config file with importlib's deprecated load_module
        warnings.filterwarnings("ignore", "the load_module", DeprecationWarning)
        try:
            flags.FLAGS.unparse_flags()
            flags.FLAGS(argv)
            with contextlib.redirect_stdout(out):
                plan_cli.main(["plan"])
        finally:
            flags.FLAGS.unparse_flags()
    (plan,) = planned
    return plan, out.getvalue(), record


@needs_cuda_plugin
def test_the_plan_predicts_a_gpu_step_from_its_kernels(h100_plan_run):
    plan, _, _ = h100_plan_run
    assert plan.target == "h100-1"
    assert plan.kernels and math.isclose(
        plan.predicted_step_s, sum(k.seconds for k in plan.kernels), rel_tol=1e-12
    )
    assert math.isclose(sum(plan.kernel_classes.values()), plan.predicted_step_s, rel_tol=1e-12)
    chip = targets.GPU_CHIPS["h100"]
    assert math.isclose(
        plan.predicted_mfu, plan.model_flops / chip.peak_flops / plan.predicted_step_s
    )
    # the roofline bound is a lower bound on the sum of the kernels' times
    assert plan.predicted_step_s >= plan.roofline["bound_s"]
    assert sum(k.flops for k in plan.kernels) >= plan.program_flops  # no matmul missed
    unclassified = [k for k in plan.kernels if k.kind == "unclassified"]
    assert all(k.seconds < 0.01 * plan.predicted_step_s for k in unclassified)
    for kind in ("attention", "projections", "ffn", "norms", "loss", "optimizer"):
        assert plan.kernel_classes[kind] > 0, kind
    # the H100 is calibrated (Hopper's factors): each class times its factor, plus u
    cal = calibration.for_chip(chip.name)
    assert math.isclose(plan.calibrated_step_s, cal.seconds(plan.kernel_classes), rel_tol=1e-12)
    assert math.isclose(
        plan.calibrated_mfu, plan.model_flops / chip.peak_flops / plan.calibrated_step_s
    )


@needs_cuda_plugin
def test_cli_prints_the_kernel_table_and_the_json_figures(h100_plan_run):
    """The command's output (its ``python -m`` entry point runs in tests/test_plan.py and
    tests/test_plan_targets.py; here its ``main``, in-process, shares the compile above)."""
    _, stdout, record = h100_plan_run
    lines = stdout.strip().splitlines()
    plan = json.loads(lines[-1])
    assert plan["predicted_step_s"] > 0 and 0 < plan["predicted_mfu"] < 1
    assert plan["calibrated_step_s"] > 0
    assert any(line.startswith("calibrated (") for line in lines)
    assert set(plan["kernel_classes"]) == set(kernels.CLASSES) and "kernels" not in plan
    rows = [line for line in lines if line.startswith("| ") and "| class |" not in line]
    assert len(rows) > 20 and "kernel model" in stdout
    # the record of a plan with --kernels: each class's seconds by opcode, summing to the class
    recorded = json.loads(record.read_text())["plan"]
    for kind, seconds in recorded["kernel_classes"].items():
        by_opcode = recorded["kernel_opcodes"].get(kind, {})
        assert math.isclose(sum(by_opcode.values()), seconds, rel_tol=1e-9, abs_tol=1e-15)
    assert recorded["kernel_opcodes"]["ffn"]["fusion"] > 0
