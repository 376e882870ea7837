"""Runs of the sharding tests that need several (simulated) devices; started by
test_sharding.py with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``, not by pytest.

argv: mode out_json [args]. Modes:

* ``equivalence TMP ARCH...``: for each architecture named, 3 training steps on mesh (2, 2, 2)
  and on a single device; per-step losses of both, and per-device vs total parameter bytes on
  (2, 2, 2); with ``encdec``, beam search outputs with sharded parameters.
* ``restore TMP MESH...``: 4 steps on (2, 2, 2) uninterrupted; then 2 steps on (2, 2, 2) saved
  and resumed for 2 more on each mesh named (``data8``: (8, 1, 1), ``fsdp4_tensor2``:
  (1, 4, 2)); per-step losses of each.
* ``default TMP``: the default test run's ``equivalence TMP encdec`` and ``restore TMP
  fsdp4_tensor2`` in one process (one start-up of python and jax instead of two), as
  ``{"equivalence": ..., "restore": ...}``, sharing runs: restore's uninterrupted 4 steps on
  (2, 2, 2) are the equivalence's sharded run (against 4 single-device steps), and its step-2
  checkpoint the one resumed on fsdp 4 × tensor 2 (three runs instead of five).
* ``processes PID PORT WORKDIR``: one of two processes (4 devices each) of one
  ``jax.distributed`` job, as ``{"process": ..., "admin": ...}``: ``process``, training the
  encdec config of ``equivalence`` on mesh (2, 2, 2), then beam-searching with parameters
  sharded over both processes; ``admin``, building that run under ``scheme="admin"``: the
  profiled ω this process holds, and the ω profiled on its own first batch alone.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import flax.linen as nn
import jax
import numpy as np

from deepnet_jax.configs import base
from deepnet_jax.data import synthetic
from deepnet_jax.decoding import search
from deepnet_jax.model import architectures
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.runs import metrics
from deepnet_jax.runs.workdir import RunDir
from deepnet_jax.scale import distributed, sharding
from deepnet_jax.training import train, trainer
from deepnet_jax.training.run_config import RunConfig

MESHES = {"data8": (8, 1, 1), "fsdp4_tensor2": (1, 4, 2)}  # restore's meshes


def config(arch: str, mesh: tuple[int, int, int], steps: int = 3):
    c = base.get_config()
    m = c.model
    m.arch, m.scheme = arch, "deepnorm"
    m.d_model, m.num_heads, m.ffn_dim, m.vocab_size, m.max_len = 64, 4, 256, 64, 16
    m.num_encoder_layers = 2 if arch != "decoder" else 0
    m.num_decoder_layers = 2 if arch != "encoder" else 0
    m.dropout = 0.0
    m.remat_policy = "full"  # a concrete policy: the worker also builds models directly
    m.attention_impl = "reference"  # a concrete kernel, for the same reason
    c.data.batch_size, c.data.max_len = 8, 16
    c.total_steps, c.log_every, c.eval_every, c.checkpoint_every = steps, 1, 0, 0
    c.eval_batches = 1
    c.optimizer.learning_rate = 1e-3
    c.schedule.warmup_steps = 2
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = mesh
    return c


def losses(workdir: str) -> list[float]:
    return [r["loss"] for r in metrics.read(workdir) if r["split"] == "train"]


def param_bytes(arch: str) -> dict[str, int]:
    """Bytes of the parameters: in total, and on device 0 of a (2, 2, 2) mesh."""
    c = RunConfig.from_config(config(arch, (2, 2, 2)))
    model = architectures.build(c.model)
    mesh = sharding.make_mesh(c.mesh)
    example = synthetic.batch(arch, 8, 64, 16, np.random.default_rng(0))
    plan = sharding.sharded_state(
        lambda: model.init(jax.random.key(0), *model_inputs.model_args(arch, example)),
        lambda p: {},
        mesh,
    )
    params, _ = plan.create()
    total = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
    device0 = jax.devices()[0]
    local = sum(
        s.data.nbytes
        for x in jax.tree.leaves(params)
        for s in x.addressable_shards
        if s.device == device0
    )
    return {"total": int(total), "device0": int(local)}


def translations() -> list[list[int]]:
    """Beam-2 outputs for three sources with the encdec config's parameters (seed 3) sharded
    on mesh (2, 2, 2): the decoder on a mesh that may span processes."""
    c = RunConfig.from_config(config("encdec", (2, 2, 2)))
    model = architectures.build(c.model)
    mesh = sharding.make_mesh(c.mesh)
    rules = sharding.logical_axis_rules(c.mesh)
    example = synthetic.batch("encdec", 8, 64, 16, np.random.default_rng(0))
    state = sharding.sharded_state(
        lambda: model.init(jax.random.key(3), *model_inputs.model_args("encdec", example)),
        lambda p: {},
        mesh,
        rules,
    )
    params, _ = state.create()
    sources = [np.array([5, 6, 7, 2]), np.array([9, 10, 11, 12, 13, 2]), np.array([20, 2])]
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        return search.translate_ids(
            model, params, sources, search.SearchOptions(beam_size=2), batch_size=4
        )


def equivalence(out: str, tmp: str, *archs: str) -> dict:
    result = {"translations": translations()} if "encdec" in archs else {}
    for arch in archs:
        w1, w8 = f"{tmp}/{arch}_single", f"{tmp}/{arch}_sharded"
        train.run(config(arch, (1, 1, 1)), w1, devices=jax.devices()[:1])
        train.run(config(arch, (2, 2, 2)), w8)
        result[arch] = {"single": losses(w1), "sharded": losses(w8), "bytes": param_bytes(arch)}
    return result


def _restore_config(mesh: tuple[int, int, int], steps: int):
    c = config("encdec", mesh, steps)
    c.checkpoint_every = 2
    return c


def _resumed_on(mesh: str, tmp: str, first_half: str) -> list[float]:
    """A copy of ``first_half`` (a run saved at step 2 on (2, 2, 2); a step-4 checkpoint, if
    there, removed) resumed to step 4 on ``mesh``: its per-step losses."""
    shutil.copytree(first_half, f"{tmp}/{mesh}")
    run = RunDir(f"{tmp}/{mesh}")
    if os.path.isdir(run.checkpoint(4)):
        shutil.rmtree(run.checkpoint(4))
    assert os.path.isdir(run.checkpoint(2)) and not os.path.isdir(run.checkpoint(4))
    train.run(_restore_config(MESHES[mesh], 4), f"{tmp}/{mesh}")
    return losses(f"{tmp}/{mesh}")


def restore(out: str, tmp: str, *meshes: str) -> dict:
    train.run(_restore_config((2, 2, 2), 4), f"{tmp}/straight")
    train.run(_restore_config((2, 2, 2), 2), f"{tmp}/first_half")
    result = {"straight": losses(f"{tmp}/straight")}
    for name in meshes:
        result[name] = _resumed_on(name, tmp, f"{tmp}/first_half")
    return result


def process(pid: int, port: str, workdir: str) -> dict:
    c = config("encdec", (2, 2, 2))
    c.checkpoint_every = 3  # every process takes part in the (orbax) save
    d = c.distributed
    d.coordinator_address, d.num_processes, d.process_id = f"127.0.0.1:{port}", 2, pid
    d.initialization_timeout = 60
    train.run(c, workdir)
    result = {
        "process_count": jax.process_count(),
        "local_devices": jax.local_device_count(),
        "devices": jax.device_count(),
    }
    if pid == 0:
        result["losses"] = losses(workdir)
    result["translations"] = translations()
    return result


def admin(pid: int, port: str) -> dict:
    c = config("encdec", (2, 2, 2))
    c.model.scheme = "admin"
    d = c.distributed
    d.coordinator_address, d.num_processes, d.process_id = f"127.0.0.1:{port}", 2, pid
    d.initialization_timeout = 60
    distributed.initialize(c.distributed)  # a no-op after ``process``: the runtime is up
    typed = RunConfig.from_config(c)
    mesh = sharding.make_mesh(typed.mesh, jax.devices())
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.logical_axis_rules(typed.mesh)):
        run = trainer.build_run(typed, None, mesh)
        state, _ = trainer.initial_state(run)
        own_batch = next(run.batches)  # this process's own rows of the first batch
    # outside the mesh: this process's devices only, its batch alone
    own = model_inputs.init_variables(run.model, "encdec", own_batch, run.config.seed)
    names = ("self_attn_omega", "cross_attn_omega", "ffn_omega")

    def omegas(layers, local) -> dict:
        return {n: np.asarray(local(layers[n]))[:, 0].tolist() for n in names}

    held = omegas(state.params["decoder"]["layers"], lambda a: a.addressable_shards[0].data)
    alone = omegas(nn.unbox(own["params"])["decoder"]["layers"], lambda a: a)
    return {"omegas": held, "own_batch_omegas": alone}


def processes(pid: int, port: str, workdir: str) -> dict:
    """``process`` then ``admin`` in one process of the two-process job (one start-up)."""
    result = {"process": process(pid, port, workdir), "admin": admin(pid, port)}
    jax.distributed.shutdown()
    return result


def default(out: str, tmp: str) -> dict:
    """``equivalence`` of the encdec and ``restore`` onto fsdp 4 × tensor 2, in one process,
    sharing runs (4 steps each; the default schedule's rates do not depend on the total)."""
    train.run(_restore_config((2, 2, 2), 4), f"{tmp}/straight")
    train.run(config("encdec", (1, 1, 1), 4), f"{tmp}/single", devices=jax.devices()[:1])
    straight = losses(f"{tmp}/straight")
    single = losses(f"{tmp}/single")
    encdec = {"single": single, "sharded": straight, "bytes": param_bytes("encdec")}
    resumed = _resumed_on("fsdp4_tensor2", tmp, f"{tmp}/straight")
    return {
        "equivalence": {"translations": translations(), "encdec": encdec},
        "restore": {"straight": straight, "fsdp4_tensor2": resumed},
    }


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "processes":
        result = processes(int(sys.argv[3]), sys.argv[4], sys.argv[5])
    elif mode == "default":
        result = default(out, sys.argv[3])
    else:
        tmp, names = sys.argv[3], sys.argv[4:]
        result = {"equivalence": equivalence, "restore": restore}[mode](out, tmp, *names)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
