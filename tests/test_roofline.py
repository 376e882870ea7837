"""The roofline bound and the memory a target gives a run; the native-noise filter."""

import os

import pytest

from deepnet_jax.common import native_stderr
from deepnet_jax.scale import roofline, targets


def test_the_slowest_resource_bounds_the_step():
    chip = targets.TPU_CHIPS["v5p"]  # 459 TFLOP/s, 2,765 GB/s, 600 GB/s one way
    r = roofline.bound(
        chip,
        program_flops=459e12,
        model_flops=344.25e12,
        hbm_bytes=2765e9 / 2,
        collective_bytes=600e9 / 4,
    )
    assert (r.compute_s, r.memory_s, r.collective_s) == pytest.approx((1.0, 0.5, 0.25))
    assert r.limited_by == "compute" and r.bound_s == pytest.approx(1.0)
    assert r.mfu_upper_bound == pytest.approx(0.75)  # remat's recompute is not model FLOPs
    r = roofline.bound(chip, 459e12, 459e12, hbm_bytes=4 * 2765e9, collective_bytes=0)
    assert r.limited_by == "memory" and r.mfu_upper_bound == pytest.approx(0.25)


def test_work_hidden_from_the_census_still_bounds_the_step():
    """A custom call (cuDNN's attention) hides its FLOPs from the program's census: the compute
    term is then the model's FLOPs, so the bound never exceeds 100% (an H100 run printed 110%)."""
    chip = targets.TPU_CHIPS["v5p"]
    r = roofline.bound(
        chip, program_flops=0.9 * 459e12, model_flops=459e12, hbm_bytes=1.0, collective_bytes=0
    )
    assert r.compute_s == pytest.approx(1.0) and r.limited_by == "compute"
    assert r.mfu_upper_bound == pytest.approx(1.0)


def test_a_gpu_run_gets_the_preallocated_share(monkeypatch):
    h100 = targets.parse("h100-8")
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    assert targets.usable_bytes(h100) == int(0.75 * h100.chip.memory_bytes)
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.9")
    assert targets.usable_bytes(h100) == int(0.9 * h100.chip.memory_bytes)
    assert targets.usable_bytes(targets.parse("v5p-8")) == 95 * 2**30
    assert targets.usable_bytes(targets.parse("cpu:4")) == 0


def test_native_noise_is_dropped_and_the_rest_kept(capfd):
    with native_stderr.filtered():
        os.write(2, b"I0000 00:00:1.0 1 cudart_stub.cc:31] Could not find cuda drivers on x\n")
        os.write(2, b"a real error\n")
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called\n")
    assert capfd.readouterr().err == "a real error\n"
