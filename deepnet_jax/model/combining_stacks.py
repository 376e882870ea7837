"""The combining stacks, whose layers read a learned combination of every earlier layer's
output: DLCL and DenseFormer (the ``dlcl`` and ``dwa`` stack kinds of ``model.stacks.KINDS``).

DLCL (Wang et al. 2019, eq. 8–9) feeds layer l+1 a learned combination of *all* earlier outputs
y_0 … y_l, so its carry grows with depth and has no fixed shape; it cannot be expressed as a scan
with a constant carry and runs as an unrolled, per-layer rematerialized loop.

DenseFormer (Pagliardini et al. 2024) likewise averages all earlier block outputs after every
block (:func:`denseformer`) and runs as the same kind of loop.

Both combinations are position-wise, so cached decoding only needs each layer's attention
cache; the side's final norm follows in ``model.stacks.apply_layers``.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from deepnet_jax.model import schemes
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.norms import normalization
from deepnet_jax.model.stack_common import (
    Side,
    StackInputs,
    call_layer,
    layer_class,
    stack_caches,
)
from deepnet_jax.model.sublayers import constrain


def dlcl_weight_init(size: int, fill: str) -> np.ndarray:
    """Lower-triangular [size, size] DLCL weights: row i combines y_0 … y_i.

    ``fill`` "one" gives all ones (the paper's "fix 1"); "avg" gives 1/(i+1) (the paper's
    "fix 1/N"), which is also the starting point of the learnable weights.
    """
    rows = np.arange(size)[:, None]
    tril = (np.arange(size)[None, :] <= rows).astype(np.float32)
    return tril if fill == "one" else tril / (rows + 1)


def dlcl(owner: nn.Module, side: Side, inputs: StackInputs) -> tuple[jax.Array, dict | None]:
    """DLCL stack: x_{l+1} = Σ_k W[l, k]·LN_k(y_k) (pre) or LN(Σ_k W[l, k]·y_k) (post).

    W is lower-triangular [(L+1), (L+1)]; row l < L feeds layer l+1 and row L forms the stack
    output (followed by the final LN for dlcl_pre, in ``model.stacks.apply_layers``). The
    combination is position-wise, so cached decoding only needs each layer's attention cache.
    """
    config, L = side.config, side.num_layers
    W = _dlcl_weights(owner, config, L)
    scheme = schemes.get(config.scheme)
    history_norm = scheme.history_norm and config.dlcl_layer_norm  # eq. 8's LN_k
    layer_cls = layer_class(config, scanned=False)

    def push(y: jax.Array, k: int) -> jax.Array:
        return normalization(config, f"history_layer_norm_{k}")(y) if history_norm else y

    def combine(history: list[jax.Array], row: int) -> jax.Array:
        w = W[row, : row + 1].astype(config.compute_dtype)
        x = jnp.einsum("k,kbtd->btd", w, jnp.stack(history))
        if scheme.combine_norm:  # eq. 9
            x = normalization(config, f"combine_layer_norm_{row}")(x)
        return constrain(x)

    history, per_layer = [push(inputs.x, 0)], []
    for i in range(L):
        layer = layer_cls(**side.layer_kwargs(), name=f"layers_{i}")
        y, layer_cache = call_layer(layer, combine(history, i), inputs, i)
        per_layer.append(layer_cache)
        history.append(push(y, i + 1))
    return combine(history, L), stack_caches(per_layer) if inputs.cache is not None else None


def _dlcl_weights(owner: nn.Module, config: TransformerConfig, L: int) -> jax.Array:
    """The [(L+1), (L+1)] lower-triangular combination weights (a parameter when learnable)."""
    if config.dlcl_weights != "learnable":
        return jnp.asarray(dlcl_weight_init(L + 1, config.dlcl_weights.removeprefix("fix_")))
    W = owner.param(  # logical axes unmapped: a tiny matrix, replicated
        "dlcl_weights",
        nn.with_logical_partitioning(
            lambda key, shape, dtype: jnp.asarray(dlcl_weight_init(shape[0], "avg"), dtype),
            (None, None),
        ),
        (L + 1, L + 1),
        jnp.float32,
    )
    return W * jnp.asarray(dlcl_weight_init(L + 1, "one"))  # keep it lower-triangular


def dwa_weight_init(num_layers: int) -> np.ndarray:
    """DenseFormer's initial DWA weights [L, L+1]: row i (the average after block i+1) is 1
    on that block's output X_{i+1} and 0 elsewhere (the identity: Pagliardini et al. 2024,
    Sec. 3; the official code's ``weight[0, -1] = 1``)."""
    W = np.zeros((num_layers, num_layers + 1), np.float32)
    W[np.arange(num_layers), np.arange(1, num_layers + 1)] = 1.0
    return W


def denseformer(owner: nn.Module, side: Side, inputs: StackInputs) -> tuple[jax.Array, dict | None]:
    """DenseFormer (Pagliardini et al., NeurIPS 2024, eq. 1–2; the 1×1 model, every block
    averaged): X_0 the embedded input, X_{i+1} = B_{i+1}(Y_i) with Y_0 = X_0, and after each
    block the depth-weighted average Y_{i+1} = Σ_{j ≤ i+1} W[i, j]·X_j (``dwa_weights``
    [L, L+1], learned, lower-triangular, the identity at init: :func:`dwa_weight_init`). The
    blocks are Pre-LN layers; Y_L goes on to the final norm (in ``model.stacks.apply_layers``).
    The averages are position-wise, so cached decoding only needs each layer's attention cache.
    """
    config, L = side.config, side.num_layers
    W = owner.param(  # logical axes unmapped: a tiny matrix, replicated
        "dwa_weights",
        nn.with_logical_partitioning(
            lambda key, shape, dtype: jnp.asarray(dwa_weight_init(shape[0]), dtype),
            (None, None),
        ),
        (L, L + 1),
        jnp.float32,
    )
    W = W * jnp.asarray(np.tril(np.ones((L, L + 1), np.float32), k=1))  # X_j with j <= i + 1
    layer_cls = layer_class(config, scanned=False)
    history, per_layer, y_BTD = [inputs.x], [], inputs.x
    for i in range(L):
        layer = layer_cls(**side.layer_kwargs(), name=f"layers_{i}")
        x_BTD, layer_cache = call_layer(layer, y_BTD, inputs, i)
        per_layer.append(layer_cache)
        history.append(x_BTD)
        w = W[i, : i + 2].astype(config.compute_dtype)
        y_BTD = constrain(jnp.einsum("k,kbtd->btd", w, jnp.stack(history)))
    return y_BTD, stack_caches(per_layer) if inputs.cache is not None else None
