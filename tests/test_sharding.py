"""Sharded training on 8 simulated CPU devices, mesh changes on restore, two processes, and the
config's mesh and logical-axis rules."""

import json
import os
import socket
import subprocess
import sys

import ml_collections
import numpy as np
import pytest
from conftest import xla_flags

from deepnet_jax.common import config_schema
from deepnet_jax.scale import distributed, sharding

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # for `configs`
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sharding_worker.py")


def _env(devices: int) -> dict[str, str]:
    return {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": xla_flags(devices),
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
    }


def _worker(mode: str, tmp_path, *args: str, devices: int = 8) -> dict:
    out = tmp_path / f"{mode}.json"
    proc = subprocess.run(
        [sys.executable, WORKER, mode, str(out), *args],
        env=_env(devices),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def default_runs(tmp_path_factory):
    """The default run's 8-device runs, in one worker process (one start-up of jax): the
    equivalence of the encoder-decoder and its restore onto fsdp 4 × tensor 2."""
    tmp = tmp_path_factory.mktemp("default_runs")
    return _worker("default", tmp, str(tmp))


@pytest.fixture(scope="module")
def equivalence(default_runs):
    """The encoder-decoder's runs (both stacks, cross-attention) and the sharded translations."""
    return default_runs["equivalence"]


@pytest.fixture(scope="module")
def single_stack_equivalence(tmp_path_factory):
    """The decoder-only and encoder-only runs (-m slow: the same layers and sharding rules)."""
    tmp = tmp_path_factory.mktemp("single_stack_equivalence")
    return _worker("equivalence", tmp, str(tmp), "decoder", "encoder")


ARCHS = ["encdec", *(pytest.param(a, marks=pytest.mark.slow) for a in ("decoder", "encoder"))]


def _equivalence(request, arch: str) -> dict:
    name = "equivalence" if arch == "encdec" else "single_stack_equivalence"
    return request.getfixturevalue(name)[arch]


@pytest.mark.parametrize("arch", ARCHS)
def test_sharded_losses_equal_single_device(request, arch):
    r = _equivalence(request, arch)
    assert len(r["single"]) == (4 if arch == "encdec" else 3)  # the default run: shared, 4 steps
    np.testing.assert_allclose(r["sharded"], r["single"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_per_device_parameter_bytes(request, arch):
    b = _equivalence(request, arch)["bytes"]
    expected = b["total"] / 4  # fsdp 2 × tensor 2
    assert abs(b["device0"] - expected) <= 0.1 * expected, b


# the default run: (2, 2, 2) onto fsdp 4 × tensor 2 (every parameter resharded); onto pure data
# parallelism (8, 1, 1) under -m slow
@pytest.mark.parametrize("mesh", ["fsdp4_tensor2", pytest.param("data8", marks=pytest.mark.slow)])
def test_checkpoint_restores_onto_other_meshes(request, tmp_path, mesh):
    if mesh == "fsdp4_tensor2":
        r = request.getfixturevalue("default_runs")["restore"]
    else:
        r = _worker("restore", tmp_path, str(tmp_path), mesh)
    assert len(r["straight"]) == 4
    np.testing.assert_allclose(r[mesh], r["straight"], rtol=1e-5, atol=1e-5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes(mode: str, tmp_path, *args: str) -> list[dict]:
    """The worker's ``mode`` as processes 0 and 1 of one ``jax.distributed`` job on
    127.0.0.1 (4 devices each): their results."""
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, mode, str(tmp_path / f"p{pid}.json"), str(pid), port, *args],
            env=_env(4),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for pid in (0, 1)
    ]
    try:
        errors = [p.communicate(timeout=300)[1] for p in procs]
    finally:
        for p in procs:  # only this test's own processes
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, err in zip(procs, errors, strict=True):
        assert p.returncode == 0, err[-3000:]
    return [json.loads((tmp_path / f"p{pid}.json").read_text()) for pid in (0, 1)]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """One two-process job (one start-up of both) for the next two tests: the workdir of its
    encdec run and each process's results."""
    tmp = tmp_path_factory.mktemp("two_processes")
    workdir = tmp / "run"
    return workdir, _two_processes("processes", tmp, str(workdir))


def test_two_processes_equal_one_process_with_eight_devices(equivalence, two_processes):
    workdir, results = two_processes
    r0, r1 = (r["process"] for r in results)
    assert (r0["process_count"], r0["local_devices"], r0["devices"]) == (2, 4, 8)
    assert r1["process_count"] == 2 and "losses" not in r1  # process 0 alone logs
    sharded = equivalence["encdec"]["sharded"][:3]  # its first 3 of 4 steps
    np.testing.assert_allclose(r0["losses"], sharded, rtol=1e-5, atol=1e-5)
    assert (workdir / "checkpoints" / "3").is_dir()  # saved by both processes together
    # decoding with parameters sharded over both processes: each gets the whole output,
    # the same as one process with 8 devices
    assert r0["translations"] == r1["translations"] == equivalence["translations"]
    assert all(len(t) > 0 for t in r0["translations"])


def test_admin_profiles_one_batch_for_every_process(two_processes):
    """Each process reads its own rows, but Admin's ω is profiled on process 0's first batch
    (all of it) by every process: each holds the ω of that batch alone."""
    r0, r1 = (r["admin"] for r in two_processes[1])
    assert r0["own_batch_omegas"] != r1["own_batch_omegas"]  # the rows differ
    for r in (r0, r1):
        for name, want in r0["own_batch_omegas"].items():
            np.testing.assert_allclose(r["omegas"][name], want, rtol=1e-5)
    assert r0["omegas"]["self_attn_omega"][0] == 1.0  # the profile's ω₁
    assert all(w > 1.0 for w in r0["omegas"]["ffn_omega"])


@pytest.mark.parametrize(
    "rules, message",
    [
        ({"embed": "fsdp,pipe"}, r"mesh\.rules\.embed='fsdp,pipe': 'pipe' is not a mesh axis"),
        ({"layers": "fsdp"}, r"mesh\.rules\.layers='fsdp' must be ''"),
        ({"hidden": "tensor"}, r"mesh\.rules\.hidden: unknown logical axis"),
        ({"batch": "data,data"}, r"mesh\.rules\.batch='data,data' names a mesh axis twice"),
        ({"mlp": 2}, r"mesh\.rules\.mlp=2 must be a string"),
    ],
)
def test_bad_logical_axis_rules(rules, message):
    c = ml_collections.ConfigDict(
        {"data": -1, "fsdp": 1, "tensor": 1, "rules": {**sharding.DEFAULT_RULES, **rules}}
    )
    with pytest.raises(ValueError, match=message):
        sharding.validate(c)  # the group's check, on the config as given


def test_rules_from_config():
    c = sharding.default_config()
    c.rules.embed = ""  # pure data parallelism over fsdp: parameters replicated
    rules = dict(sharding.logical_axis_rules(config_schema.typed(sharding.MeshFields, c)))
    assert rules["embed"] is None and rules["batch"] == ("data", "fsdp")
    assert dict(sharding.LOGICAL_AXIS_RULES)["embed"] == "fsdp"


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"num_processes": 2}, r"num_processes=2 needs distributed\.coordinator_address"),
        ({"num_processes": 0}, r"num_processes=0 must be an integer >= 1"),
        ({"num_processes": 2, "process_id": 2, "coordinator_address": "h:1"}, r"process_id=2"),
        ({"auto": True, "num_processes": 2}, r"auto=True detects the cluster itself"),
        (
            {"coordinator_address": "localhost"},
            r"coordinator_address='localhost' must be host:port",
        ),
    ],
)
def test_bad_distributed_fields(fields, message):
    c = distributed.default_config()
    for k, v in fields.items():
        c[k] = v
    with pytest.raises(ValueError, match=message):
        distributed.validate(c)
