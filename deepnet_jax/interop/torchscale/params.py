"""``params_from_torchscale`` / ``params_to_torchscale``: whole state dicts ↔ parameter trees.

Both directions check everything before converting anything: every torchscale tensor a model
of the config has must be present with its shape, no other tensor may be left over (one
``ValueError`` naming the first offending name), tied copies must agree, and the tree built here
must be exactly the one :func:`deepnet_jax.model.architectures.build` initializes (paths, shapes).
The values are only transposed, reshaped and stacked, so import followed by export gives back
the same bytes (cast to ``model.param_dtype`` on import).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax
import flax.linen as nn
import ml_collections
import numpy as np
from flax import traverse_util

from deepnet_jax.interop.torchscale.state_dict import (
    LAYOUTS,
    Entry,
    Path,
    entries,
    expected_params,
    fuse_layer,
    ours_shape,
    unfuse_layer,
)
from deepnet_jax.model import architectures, layout
from deepnet_jax.model.config import DTYPES


def _check_names(state_dict: Mapping[str, Any], table: list[Entry]) -> None:
    names = {e.name for e in table}
    extra = [k for k in state_dict if k not in names]
    if extra:
        raise ValueError(
            f"torchscale tensor {extra[0]!r} has no place in this model config "
            f"({len(extra)} unmapped; a torchscale option this project lacks, or a config "
            "that does not match the checkpoint)"
        )
    missing = [e.name for e in table if e.name not in state_dict]
    if missing:
        raise ValueError(
            f"torchscale tensor {missing[0]!r} is missing ({len(missing)} missing): the "
            "checkpoint does not match the model config"
        )
    for e in table:
        shape = tuple(np.shape(state_dict[e.name]))
        if shape != e.shape:
            raise ValueError(
                f"torchscale tensor {e.name!r} has shape {list(shape)}; the model config "
                f"expects {list(e.shape)}"
            )


def _check_tree(flat: Mapping[Path, Any], config: ml_collections.ConfigDict) -> None:
    """The tree's paths and shapes against the model ``config`` builds."""
    expected = expected_params(config)
    for path in sorted(set(expected) ^ set(flat)):
        where = "missing from" if path in expected else "not a parameter of"
        raise ValueError(f"parameter {'/'.join(path)} is {where} the model config")
    for path, want in expected.items():
        if tuple(np.shape(flat[path])) != tuple(want.shape):
            raise ValueError(
                f"parameter {'/'.join(path)} has shape {list(np.shape(flat[path]))}; the model "
                f"config expects {list(want.shape)}"
            )


def params_from_torchscale(
    state_dict: Mapping[str, np.ndarray], config: ml_collections.ConfigDict
) -> dict[str, Any]:
    """This project's parameter tree (unboxed, numpy, ``model.param_dtype``) for a model built
    from the model config ``config``, from a torchscale state dict (name → array, torchscale's
    module names; see :mod:`~deepnet_jax.interop.torchscale.state_dict`).

    Scanned stacks get ``layers`` arrays [L, …], unrolled ones ``layers_i``; q/k/v are fused
    when ``model.fused_qkv``. Every tensor must be used and none missing, with the shapes the
    config implies: otherwise a ``ValueError`` naming the first unmapped, missing or misshapen
    tensor.
    """
    architectures.validate(config)
    table = entries(config)
    _check_names(state_dict, table)
    dtype = DTYPES[config.param_dtype]
    flat: dict[Path, np.ndarray] = {}
    for e in table:
        value = np.asarray(state_dict[e.name])
        ours = LAYOUTS[e.layout][0](value, ours_shape(e, config)).astype(dtype)
        if e.copy_of_tied:
            if not np.array_equal(flat[e.path], ours):
                first = next(t.name for t in table if t.path == e.path)
                raise ValueError(
                    f"torchscale tensor {e.name!r} differs from {first!r}, which the model "
                    "config ties it to (model.tie_embeddings / model.share_embeddings)"
                )
            continue
        flat[e.path] = np.ascontiguousarray(ours)
    if config.fused_qkv:
        flat = fuse_layer(flat)
    if config.scan_layers:
        flat = _flat(layout.stack_layers(traverse_util.unflatten_dict(flat)))
    _check_tree(flat, config)
    return traverse_util.unflatten_dict(flat)


def params_to_torchscale(params: Any, config: ml_collections.ConfigDict) -> dict[str, np.ndarray]:
    """The inverse of :func:`params_from_torchscale`: a torchscale state dict (name → numpy
    array in the parameters' dtype) for ``params`` (a parameter tree of a model built from
    ``config``, boxed or not, numpy or jax arrays, scanned or unrolled as the config says).
    Tied tables are written under each of their torchscale names."""
    architectures.validate(config)
    table = entries(config)
    flat = {
        tuple(str(k) for k in path): np.asarray(leaf)
        for path, leaf in traverse_util.flatten_dict(_unboxed(params)).items()
    }
    _check_tree(flat, config)
    if config.scan_layers:
        flat = _flat(layout.unstack_layers(traverse_util.unflatten_dict(flat)))
    if config.fused_qkv:
        flat = unfuse_layer(flat)
    out: dict[str, np.ndarray] = {}
    for e in table:
        out[e.name] = np.ascontiguousarray(LAYOUTS[e.layout][1](flat[e.path], e.shape))
    return out


def _flat(tree: Mapping[str, Any]) -> dict[Path, np.ndarray]:
    """A parameter tree as {path: numpy array}."""
    return {path: np.asarray(a) for path, a in traverse_util.flatten_dict(tree).items()}


def _unboxed(params: Any) -> Any:
    """``params`` without flax's partitioning boxes, as a plain nested dict."""
    return flax.core.unfreeze(nn.unbox(params))
