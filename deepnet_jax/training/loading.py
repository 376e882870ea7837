"""A finished (or running) training run, loaded from its workdir for decoding and evaluation.

A run's workdir holds everything needed: ``checkpoints/<step>/`` (parameters, and the config the
run was started with), ``best/<step>/`` (the parameters with the best validation score) and
``tokenizer.model`` (the SentencePiece model the run trained with). The parameters can be

* ``"latest"`` — the newest checkpoint,
* ``"best"`` — the best-by-validation parameters,
* a step number — that checkpoint,

and, with ``average_last`` = k > 1, the element-wise mean of the k newest checkpoints up to the
chosen one (the DLCL paper averages the last 5; fairseq's ``average_checkpoints.py``).

Only parameters are read (never the optimizer state), placed on the run's mesh when it fits
the devices at hand, else on a data-parallel mesh over all of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from deepnet_jax.data.tokenizer import Tokenizer
from deepnet_jax.model import architectures
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.model.config import AUTO
from deepnet_jax.runs import checkpoint
from deepnet_jax.runs.workdir import RunDir
from deepnet_jax.scale import sharding
from deepnet_jax.scale.sharding import MeshFields
from deepnet_jax.training.run_config import RunConfig


@dataclasses.dataclass
class LoadedRun:
    """A run's config (typed: fields added since it was saved filled, ``auto`` choices made),
    model, parameters (on ``mesh``) and tokenizer (None for synthetic data); ``description``
    says which parameters were loaded."""

    workdir: str
    config: RunConfig
    model: nn.Module
    params: Any
    mesh: jax.sharding.Mesh
    tokenizer: Tokenizer | None
    description: str

    @property
    def run_dir(self) -> RunDir:
        """The run's workdir and the paths in it."""
        return RunDir(self.workdir)

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        """``with run.context():`` — the mesh and logical-axis rules the model runs under."""
        rules = sharding.logical_axis_rules(self.config.mesh)
        with jax.set_mesh(self.mesh), nn.logical_axis_rules(rules):
            yield


def positive(flag: str, value: int | None, default: int) -> int:
    """A command-line count: ``default`` when not given, else an integer >= 1."""
    if value is None:
        return default
    if value < 1:
        raise ValueError(f"--{flag}={value} must be an integer >= 1")
    return value


def parse_checkpoint(value: str) -> str | int:
    """``--checkpoint``: "latest", "best" or a step number."""
    if value in ("latest", "best"):
        return value
    if value.isdigit():
        return int(value)
    raise ValueError(f"checkpoint={value!r}; allowed values are 'latest', 'best' or a step number")


def run_mesh(config: RunConfig) -> jax.sharding.Mesh:
    """The run's mesh if it fits this machine's devices, else all devices on ``data``."""
    try:
        return sharding.make_mesh(config.mesh)
    except ValueError:  # e.g. a pod run evaluated on one host: same rules, data-parallel mesh
        return sharding.make_mesh(MeshFields())


def saved_run_config(saved: dict[str, Any]) -> RunConfig:
    """A checkpoint's config typed (``RunConfig.from_dict``: fields added since filled), its
    ``auto`` choices made for inference: an imported run not trained yet has them unplanned
    (training plans the policy; inference saves nothing, and any kernel computes the same)."""
    config = RunConfig.from_dict(saved)
    if config.model.remat_policy == AUTO:
        config = config.replace(model={"remat_policy": "none"})
    if config.model.attention_impl == AUTO:
        config = config.replace(model={"attention_impl": "reference"})
    return config


def abstract_params(model: nn.Module, config: RunConfig, mesh) -> Any:
    """The model's parameters as sharded ``jax.ShapeDtypeStruct``s (nothing allocated)."""
    arch = config.model.arch
    dummy = np.zeros((1, 8), np.int32)
    example = {"src": dummy, "inputs": dummy}
    return sharding.abstract_parameters(
        lambda: model_inputs.init_variables(model, arch, example),
        mesh,
        sharding.logical_axis_rules(config.mesh),
    )


def load_run(
    workdir: str, checkpoint_choice: str | int = "latest", average_last: int = 1
) -> LoadedRun:
    """Load a run's parameters (see the module docstring for the choices)."""
    if isinstance(average_last, bool) or not isinstance(average_last, int) or average_last < 1:
        raise ValueError(f"average_last={average_last!r} must be an integer >= 1")
    if checkpoint_choice == "best" and average_last > 1:
        raise ValueError("average_last > 1 averages checkpoints/; it cannot be used with 'best'")
    run_dir = RunDir(workdir)
    directory = run_dir.checkpoints
    if not os.path.isdir(directory):
        raise ValueError(f"workdir={workdir!r} holds no checkpoints ({directory} is missing)")
    ckpt = checkpoint.Checkpointer(run_dir, every=1, max_to_keep=1_000_000, read_only=True)
    try:
        steps = ckpt.all_steps()
        if not steps:
            raise ValueError(f"workdir={workdir!r} holds no complete checkpoint in {directory}")
        config = saved_run_config(ckpt.read_config(steps[-1]))
        model = architectures.build(config.model)
        mesh = run_mesh(config)
        target = abstract_params(model, config, mesh)
        if checkpoint_choice == "best":
            params, step, score = ckpt.restore_best_params(target)
            description = f"best parameters (step {step}, validation score {score:.4g})"
        else:
            last = steps[-1] if checkpoint_choice == "latest" else checkpoint_choice
            if last not in steps:
                raise ValueError(f"checkpoint={last} is not one of the saved steps {steps}")
            chosen = [s for s in steps if s <= last][-average_last:]
            if len(chosen) < average_last:
                raise ValueError(
                    f"average_last={average_last} needs {average_last} checkpoints up to step "
                    f"{last}; the run has {chosen}"
                )
            if average_last == 1:
                params = ckpt.restore_params(last, target)
                description = f"checkpoint {last}"
            else:
                params = ckpt.average_params(chosen, target)
                description = f"mean of checkpoints {chosen}"
    finally:
        ckpt.close()
    path = run_dir.tokenizer
    tokenizer = Tokenizer.load(path) if os.path.exists(path) else None
    return LoadedRun(workdir, config, model, params, mesh, tokenizer, description)
