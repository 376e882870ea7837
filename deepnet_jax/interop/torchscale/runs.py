"""A torchscale checkpoint as a run workdir (import) and a run's parameters as one (export).

:func:`import_checkpoint` writes what a finished run leaves, so the run tools read it as one:

* ``checkpoints/0/``: the train state at step 0 (the imported parameters, a fresh optimizer
  state, the data stream's start) and the run config, as the trainer saves them: ``translate``,
  ``evaluate`` and ``sample`` load its parameters, and ``train.py`` resumes (fine-tunes) from it;
* ``finetune_config.py`` beside ``config.json`` (the run config): ``train.py``'s ``--config``;
* ``tokenizer.model`` when a SentencePiece model is given (its ids must be this project's:
  ``deepnet_jax.common.tokens``);
* ``torchscale_import.json``: where the parameters came from, the names' prefix and the
  torchscale config, which :func:`export_run` gives back.

The run config is a training config (``--train_config``, else the defaults) whose model is the
imported one, keeping the training config's execution choices (:data:`RUNTIME_FIELDS`), with
``data.max_len`` capped at the model's ``max_len`` (and the synthetic task's ``data.vocab_size``
at the model's). Everything is checked before anything is
written: a bad input ends in one ``ValueError`` with the workdir untouched.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from typing import Any

import jax
import ml_collections
import numpy as np

from deepnet_jax.data import fetch
from deepnet_jax.data.registry import SYNTHETIC
from deepnet_jax.data.tokenizer import Tokenizer
from deepnet_jax.interop.torchscale import files
from deepnet_jax.interop.torchscale.configs import (
    POSITION_OFFSET,
    model_config_from_torchscale,
    torchscale_args_from_config,
)
from deepnet_jax.interop.torchscale.params import params_from_torchscale, params_to_torchscale
from deepnet_jax.runs import checkpoint
from deepnet_jax.runs.workdir import CONFIG_JSON, RunDir
from deepnet_jax.scale import sharding
from deepnet_jax.training import config as train_config
from deepnet_jax.training import data as train_data
from deepnet_jax.training import fingerprint, optimizers, train
from deepnet_jax.training import loading as run_loading
from deepnet_jax.training.run_config import RunConfig

# Model fields that choose how the model runs, not what it computes: kept from the training config
RUNTIME_FIELDS = (
    "scan_layers",
    "scan_unroll",
    "scan_group_size",
    "remat_policy",
    "dtype",
    "param_dtype",
    "fused_qkv",
    "attention_impl",
    "attention_masks",
    "dropout_rng",
)
FINETUNE_SOURCE = '''"""This run's training config ({config_json} beside this file), written by
``python -m deepnet_jax.cli.torchscale import``. Fine-tune (resume from step 0) with

    python train.py --config={finetune} --workdir=<this folder> [--config.total_steps=...]
"""

import json
import os

import ml_collections

from deepnet_jax import training


def get_config() -> ml_collections.ConfigDict:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "{config_json}")) as f:
        return training.upgrade_saved(json.load(f))
'''


def load_train_config(path: str | None) -> ml_collections.ConfigDict:
    """The training config of a ``configs/*.py``-style file (its ``get_config()``), or the
    defaults (``train_config.default_config()``) when ``path`` is None."""
    if path is None:
        return train_config.default_config()
    if not os.path.isfile(path):
        raise ValueError(f"--train_config={path} does not exist")
    spec = importlib.util.spec_from_file_location("deepnet_jax_import_train_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
        raise ValueError(f"--train_config={path} has no get_config()")
    return module.get_config()


def run_config(
    model: ml_collections.ConfigDict, base: ml_collections.ConfigDict
) -> ml_collections.ConfigDict:
    """``base`` with ``model`` as its model (module docstring), validated as ``train.py`` does."""
    config = ml_collections.ConfigDict(base.to_dict())
    runtime = {name: base.model[name] for name in RUNTIME_FIELDS}
    config.model = ml_collections.ConfigDict(model.to_dict())
    config.model.update(runtime)
    config.data.max_len = min(config.data.max_len, model.max_len)
    if config.data.dataset == SYNTHETIC:  # its ids must be the model's
        config.data.vocab_size = min(config.data.vocab_size, model.vocab_size)
    train.validate(config)
    return config


def _record(source: str, read: files.Checkpoint) -> dict[str, Any]:
    jsonable = (bool, int, float, str, type(None))
    args = {k: v for k, v in read.args.items() if isinstance(v, jsonable)}
    return {
        "source": os.path.abspath(source),
        "prefix": read.prefix,
        "ignored": list(read.ignored),
        "args": args,
    }


def _check_workdir(workdir: str) -> None:
    if not workdir:
        raise ValueError("--workdir is required: the run directory to write")
    directory = RunDir(workdir).checkpoints
    if os.path.isdir(directory) and os.listdir(directory):
        raise ValueError(f"--workdir={workdir} already holds checkpoints; import into a new one")


def import_checkpoint(
    source: str,
    workdir: str,
    spm: str | None = None,
    ts_config: str | None = None,
    train_config_path: str | None = None,
    trust: bool = False,
) -> str:
    """Write ``workdir`` from the torchscale checkpoint ``source`` (module docstring); returns
    a one-line summary."""
    _check_workdir(workdir)
    if spm is not None:
        if not os.path.isfile(spm):
            raise ValueError(f"--spm={spm} does not exist")
        Tokenizer.load(spm)  # its reserved ids must be this project's
    read = files.read(source, ts_config, trust)
    config = run_config(
        model_config_from_torchscale(read.args), load_train_config(train_config_path)
    )
    params = params_from_torchscale(read.state_dict, config.model)
    if spm is not None and Tokenizer.load(spm).vocab_size > config.model.vocab_size:
        raise ValueError(
            f"--spm={spm} has more pieces than the model's vocab_size={config.model.vocab_size}"
        )
    typed = RunConfig.from_config(config)  # validated by run_config
    mesh = run_loading.run_mesh(typed)
    data = train_data.make_data(typed, sharding.data_parallel_size(mesh))
    data_state = data.train_iterator().get_state()
    tokenizer = fetch.sha256_file(spm) if spm else fingerprint.tokenizer_sha256(data)
    opt_state = optimizers.make_optimizer(typed).init(params)
    run_dir = RunDir(workdir)
    writer = checkpoint.Checkpointer(run_dir, every=1, max_to_keep=typed.max_to_keep)
    try:
        state = {"params": params, "opt_state": opt_state, "step": np.asarray(0, np.int64)}
        writer.save(0, state, data_state, typed.to_dict(), fingerprint.record(tokenizer))
    finally:
        writer.close()
    _write_json(run_dir.config_json, typed.to_dict())
    with open(run_dir.finetune_config, "w") as f:
        source_text = FINETUNE_SOURCE.format(
            config_json=CONFIG_JSON.name, finetune=run_dir.finetune_config
        )
        f.write(source_text)
    _write_json(run_dir.torchscale_import, _record(source, read))
    if spm is not None:
        shutil.copyfile(spm, run_dir.tokenizer)
    m = config.model
    return (
        f"imported {len(read.state_dict)} tensors of a torchscale {m.arch} ({m.scheme}, "
        f"{m.num_encoder_layers}L-{m.num_decoder_layers}L, d_model {m.d_model}) into "
        f"{run_dir.checkpoint(0)}; fine-tune with: python train.py "
        f"--config={run_dir.finetune_config} --workdir={workdir}"
    )


def _write_json(path: str, value: Any) -> None:
    with open(path, "w") as f:
        json.dump(value, f, indent=1, sort_keys=True)


def reoffset_positions(
    state_dict: dict[str, np.ndarray], config: ml_collections.ConfigDict
) -> dict[str, np.ndarray]:
    """Learned position tables read from row p + ``model.position_offset`` moved to torchscale's
    row p + 2 (zero rows added in front, or unread leading rows dropped)."""
    shift = POSITION_OFFSET - config.position_offset
    if config.positions != "learned" or shift == 0:
        return state_dict
    out = dict(state_dict)
    for name, table in state_dict.items():
        if name.endswith("embed_positions.weight"):
            if shift > 0:
                out[name] = np.concatenate([np.zeros((shift, table.shape[1]), table.dtype), table])
            else:
                out[name] = np.ascontiguousarray(table[-shift:])
    return out


def export_run(
    workdir: str, out: str, checkpoint_choice: str | int = "latest", average_last: int = 1
) -> str:
    """Write the run's chosen parameters to ``out`` as a torchscale checkpoint (``{"model":
    state dict, "args": torchscale config}``); returns a one-line summary. A run imported from
    torchscale gets its tensor names' prefix and its other config entries back."""
    if not out:
        raise ValueError("--out is required: the .pt file to write")
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        raise ValueError(f"--out={out}: its directory does not exist")
    if not workdir or not os.path.isdir(workdir):
        raise ValueError(f"--workdir={workdir} does not exist")
    run = run_loading.load_run(workdir, checkpoint_choice, average_last)
    model = run.config.to_config().model  # the conversions read a model ConfigDict
    args = torchscale_args_from_config(model)
    state_dict = reoffset_positions(params_to_torchscale(jax.device_get(run.params), model), model)
    prefix = ""
    record = RunDir(workdir).torchscale_import
    if os.path.isfile(record):
        with open(record) as f:
            imported = json.load(f)
        args, prefix = {**imported["args"], **args}, imported["prefix"]
    files.save(out, {prefix + k: v for k, v in state_dict.items()}, args)
    return f"exported {run.description} of {workdir} ({len(state_dict)} tensors) to {out}"
