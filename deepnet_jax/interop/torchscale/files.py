"""torchscale ``.pt`` checkpoint files: read a state dict and its config, write them back.

Reading and writing ``.pt`` files need torch (the ``interop`` extra: ``pip install
'deepnet-jax[interop]'``); it is imported only here, only when such a file is read or written.

A checkpoint is one of

* a fairseq checkpoint of torchscale's fairseq models: ``{"model": state dict, "args":
  Namespace}`` (or ``"cfg": {"model": …}``), names prefixed ``encoder.``/``decoder.``;
* ``{"model" | "state_dict": state dict, "args" | "config": dict}``, as :func:`save` writes;
* a bare state dict (``model.state_dict()``), its config given as a JSON file;
* a numpy archive (``.npz``, read and written without torch): ``state/<name>`` arrays and
  ``args``, the config as a JSON string (tests/fixtures/torchscale holds such files).

fairseq's buffers that hold no weights (``*._float_tensor`` of its sinusoidal positions,
``*.version``) are set aside; a single stack's ``encoder.``/``decoder.`` prefix is removed
(torchscale's own ``Encoder``/``Decoder`` have none) and remembered. Missing config entries
that the tensors settle are filled from them: ``vocab_size`` (the token table's rows),
``*_learned_pos`` (whether an ``embed_positions.weight`` is there) and, for learned positions,
``max_*_positions`` (its rows − 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from deepnet_jax.interop.torchscale.configs import POSITION_OFFSET, arch_of

IGNORED_SUFFIXES = ("._float_tensor", ".version")
POSITIONS = {"encoder": "max_source_positions", "decoder": "max_target_positions"}


@dataclasses.dataclass
class Checkpoint:
    """A read checkpoint: ``state_dict`` (torchscale names, numpy arrays), ``args`` (its
    torchscale config, completed), ``prefix`` removed from every name, ``ignored`` buffers."""

    state_dict: dict[str, np.ndarray]
    args: dict[str, Any]
    prefix: str = ""
    ignored: tuple[str, ...] = ()


def _torch():
    try:
        import torch
    except ImportError:
        raise ValueError(
            "reading or writing a .pt file needs torch: pip install 'deepnet-jax[interop]'"
        ) from None
    return torch


def _load(path: str, trust: bool) -> Any:
    torch = _torch()
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location="cpu", weights_only=not trust)
    except Exception as e:
        if trust:
            raise ValueError(f"--checkpoint={path} cannot be read by torch.load: {e}") from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"--checkpoint={path} cannot be read with torch.load(weights_only=True) ({first}); "
            "pass --trust_checkpoint to unpickle it fully (only for a file you trust)"
        ) from None


def _as_dict(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, argparse.Namespace):
        return vars(value)
    if isinstance(value, Mapping):
        return dict(value)
    return dict(vars(value)) if hasattr(value, "__dict__") else None


def _parts(obj: Any, path: str) -> tuple[Mapping[str, Any], dict[str, Any] | None]:
    """(state dict, config or None) of a loaded checkpoint object."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"--checkpoint={path} holds a {type(obj).__name__}, not a state dict")
    for key in ("model", "state_dict"):
        if isinstance(obj.get(key), Mapping):
            args = _as_dict(obj.get("args")) or _as_dict(obj.get("config"))
            if args is None and isinstance(obj.get("cfg"), Mapping):
                args = _as_dict(obj["cfg"].get("model"))
            return obj[key], args
    return obj, None


def _load_npz(path: str) -> tuple[dict[str, np.ndarray], dict[str, Any] | None]:
    with np.load(path, allow_pickle=False) as archive:
        state = {k.removeprefix("state/"): archive[k] for k in archive if k.startswith("state/")}
        args = json.loads(str(archive["args"])) if "args" in archive else None
    return state, args


def _numpy(tensor: Any, name: str) -> np.ndarray:
    if isinstance(tensor, np.ndarray):
        return tensor
    if not hasattr(tensor, "detach"):
        raise ValueError(f"checkpoint entry {name!r} is a {type(tensor).__name__}, not a tensor")
    tensor = tensor.detach().cpu()
    if str(tensor.dtype) == "torch.bfloat16":  # numpy has no bfloat16
        tensor = tensor.float()
    return tensor.numpy()


def read(path: str, config_json: str | None = None, trust: bool = False) -> Checkpoint:
    """Read ``path`` (and its config from ``config_json`` when given, else from the file);
    one ``ValueError`` for a missing file, an unreadable one or one without a config."""
    for flag, file in (("checkpoint", path), ("ts_config", config_json)):
        if file is not None and not os.path.isfile(file):
            raise ValueError(f"--{flag}={file} does not exist")
    if path.endswith(".npz"):
        state, args = _load_npz(path)
    else:
        state, args = _parts(_load(path, trust), path)
    if config_json is not None:
        with open(config_json) as f:
            args = json.load(f)
    if not args:
        raise ValueError(
            f"--checkpoint={path} holds no torchscale config ('args', 'config' or 'cfg'); "
            "give one as JSON with --ts_config"
        )
    arrays = {k: _numpy(v, k) for k, v in state.items() if not k.endswith(IGNORED_SUFFIXES)}
    ignored = tuple(k for k in state if k.endswith(IGNORED_SUFFIXES))
    arch = arch_of(args)
    prefix = ""
    if arch != "encdec" and arrays and all(k.startswith(f"{arch}.") for k in arrays):
        prefix = f"{arch}."
        arrays = {k.removeprefix(prefix): v for k, v in arrays.items()}
    return Checkpoint(arrays, complete_args(args, arrays, arch), prefix, ignored)


def complete_args(
    args: Mapping[str, Any], state_dict: Mapping[str, np.ndarray], arch: str
) -> dict[str, Any]:
    """``args`` with what the tensors settle filled in where it is missing (module docstring)."""
    out = dict(args)
    sides = ["encoder", "decoder"] if arch == "encdec" else [arch]
    prefix = {s: f"{s}." if arch == "encdec" else "" for s in sides}
    table = state_dict.get(f"{prefix[sides[0]]}embed_tokens.weight")
    if (not isinstance(out.get("vocab_size"), int) or out["vocab_size"] <= 0) and table is not None:
        out["vocab_size"] = int(table.shape[0])
    for side in sides:
        positions = state_dict.get(f"{prefix[side]}embed_positions.weight")
        out.setdefault(f"{side}_learned_pos", positions is not None)
        if positions is not None and POSITIONS[side] not in out:
            out[POSITIONS[side]] = int(positions.shape[0]) - POSITION_OFFSET
    return out


def save(path: str, state_dict: Mapping[str, np.ndarray], args: Mapping[str, Any]) -> None:
    """Write ``{"model": state dict (torch tensors), "args": args}`` to ``path`` (a ``.npz``
    path: ``state/<name>`` arrays and ``args`` as JSON), through a temporary file, so a failed
    write leaves nothing behind."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        if path.endswith(".npz"):
            arrays = {f"state/{k}": np.ascontiguousarray(v) for k, v in state_dict.items()}
            with open(tmp, "wb") as f:
                np.savez(f, **arrays, args=np.array(json.dumps(dict(args), sort_keys=True)))
        else:
            torch = _torch()
            tensors = {k: torch.from_numpy(np.array(v)) for k, v in state_dict.items()}
            torch.save({"model": tensors, "args": dict(args)}, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
