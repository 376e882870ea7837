"""Admin's profiling step (Liu et al., EMNLP 2020, "Understanding the Difficulty of Training
Transformers", Sec. 5; its code: Transformer-Clinic's ``adaptive-profiling`` init).

Admin's sublayer is x ← N(x ⊙ ω + G(x)), with ω [D] one trainable vector per sublayer. Its
initial value is measured, once, on a training batch in training mode (dropout on): per stack,
a running ratio starts at r = 1 and, sublayer by sublayer in order (self-attention,
cross-attention, FFN in every layer),

    ω_i = r,    r ← √(Var(r·x_{i−1}) + Var(G_i(x_{i−1}))),

each Var the population variance of the whole [B, T, D] tensor, padding included. Since x_{i−1}
is a norm's output for i ≥ 2 (variance ≈ 1), ω_i² ≈ Var(x_0) + Σ_{j<i} Var(G_j): the residual
is weighted by the spread the branches before it have added, which keeps the update of each
sublayer as small as the paper's Theorem 2 asks. The forward pass that measures uses the ω it
assigns, so one pass profiles the whole model (``transformer_layer``: the layers carry (x, r)).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.traverse_util import flatten_dict, unflatten_dict

from deepnet_jax.model import schemes
from deepnet_jax.model.transformer_layer import ADMIN_PROFILE


def profile(
    model: nn.Module,
    variables: Mapping[str, Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    dropout_key: jax.Array,
) -> dict[str, Any]:
    """``variables`` (boxed or not) with every Admin ω set to its profiled value.

    ``args``/``kwargs`` are the model's inputs for one training batch
    (``model_inputs.model_args``/``model_kwargs``); dropout draws from ``dropout_key`` as in
    training. Each ω [D] (scanned: [L, D]) is filled with its sublayer's scalar ω_i.
    """
    if not schemes.get(model.config.scheme).profiled_init:
        raise ValueError(f"profile is Admin's init; model.scheme={model.config.scheme!r}")
    _, state = model.apply(
        variables,
        *args,
        deterministic=False,
        rngs={"dropout": dropout_key},
        mutable=[ADMIN_PROFILE],
        **kwargs,
    )
    omegas = flatten_dict(state[ADMIN_PROFILE])
    params = flatten_dict(dict(variables["params"]))
    missing = [p for p in params if p[-1].endswith("_omega") and p not in omegas]
    if missing or not omegas:
        raise ValueError(f"Admin's profiling pass measured no ω for {missing or 'any sublayer'}")
    for path, value in omegas.items():
        params[path] = _filled(params[path], value)
    return {**variables, "params": unflatten_dict(params)}


def _filled(param: Any, omega: jax.Array) -> Any:
    """``param`` ([D] or [L, D], possibly boxed) filled with ``omega`` (a scalar, or [L])."""
    raw = param.unbox() if isinstance(param, nn.meta.AxisMetadata) else param
    value = jnp.broadcast_to(jnp.asarray(omega, raw.dtype)[..., None], raw.shape)
    return param.replace_boxed(value) if isinstance(param, nn.meta.AxisMetadata) else value
