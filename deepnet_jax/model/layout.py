"""Convert parameters between the scanned (stacked) and the unrolled (per-layer) layouts.

Scanned stacks keep one subtree ``layers`` whose arrays have a leading axis of size L; unrolled
stacks keep ``layers_0`` … ``layers_{L-1}`` with the per-layer arrays. Both functions take and
return plain (unboxed) parameter trees, e.g. ``nn.unbox(variables["params"])``, of jax or numpy
arrays, and leave every other entry untouched, so one call converts a whole model. The torchscale
import and export (``deepnet_jax.interop.torchscale.params``) convert through them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_STACKED = "layers"
_PER_LAYER = re.compile(r"^layers_(\d+)$")


def unstack_layers(params: Mapping[str, Any]) -> dict[str, Any]:
    """Scanned → unrolled: ``layers`` [L, ...] becomes ``layers_0`` … ``layers_{L-1}``."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if key == _STACKED and isinstance(value, Mapping):
            sizes = {leaf.shape[0] for leaf in jax.tree.leaves(value)}
            if len(sizes) != 1:
                raise ValueError(f"'layers' arrays disagree on the layer count: {sorted(sizes)}")
            for i in range(sizes.pop()):
                out[f"layers_{i}"] = jax.tree.map(lambda a, i=i: a[i], dict(value))
        elif isinstance(value, Mapping):
            out[key] = unstack_layers(value)
        else:
            out[key] = value
    return out


def stack_layers(params: Mapping[str, Any]) -> dict[str, Any]:
    """Unrolled → scanned: ``layers_0`` … ``layers_{L-1}`` become one ``layers`` [L, ...]."""
    out: dict[str, Any] = {}
    indices = sorted(int(m.group(1)) for k in params if (m := _PER_LAYER.match(k)))
    if indices:
        if indices != list(range(len(indices))):
            raise ValueError(f"per-layer keys are not layers_0 … layers_{len(indices) - 1}")
        per_layer = [params[f"layers_{i}"] for i in indices]
        out[_STACKED] = jax.tree.map(_stack, *per_layer)
    for key, value in params.items():
        if _PER_LAYER.match(key):
            continue
        out[key] = stack_layers(value) if isinstance(value, Mapping) else value
    return out


def _stack(*arrays: Any) -> Any:
    """One [L, …] array of L per-layer arrays: numpy for numpy (kept on the host), else jax."""
    if all(isinstance(a, np.ndarray) for a in arrays):
        return np.stack(arrays)
    return jnp.stack(arrays)
