"""Layer stacks over depth: scanned and rematerialized, a Python loop, or DLCL.

Scanned stacks are ``nn.scan(nn.remat(TransformerLayer))`` with parameters stacked on a leading
``layers`` axis, so a 1,000-layer stack traces and compiles one layer body. With remat, the
backward pass keeps one residual [B, T, D] per layer (the scan carry) and recomputes each layer's
internals. ``scan_layers=False`` unrolls the same layers in Python (``layers_0``, ``layers_1``,
…) for comparison; ``deepnet_jax.model.layout`` converts parameters between the two layouts.

Nested scan (``model.scan_group_size`` = k; -1: k ≈ √L, see
:func:`deepnet_jax.model.remat.group_size`): an outer scan over G = ⌊L/k⌋ groups, each group
one rematerialized unit (nothing saved but its input, ``remat.GROUP_POLICY``) holding an inner
scan over its k layers, and the remaining r = L − G·k layers (if any) as one
more rematerialized group after them. The backward pass then keeps G (+ 1) group inputs and,
while it works through one group, that group's k per-layer residuals — about 2√L residuals
instead of L — at the price of one more forward pass of every layer. A remainder costs a second
compiled layer body and, in XLA's temporaries, about one more copy of the layers' gradients (the
two parts' gradients are joined into the [L, …] leaves), so -1 takes a divisor of L when one is
near √L. Only what the backward pass keeps changes: the parameters stay one ``layers`` subtree
stacked [L, …] (the groups read it reshaped, ``nn.map_variables``), so checkpoints, sharding
rules and layout conversions are those of the flat scan, and the forward-only paths — ``init``,
cached decoding and the stability instruments' probe (the ``diagnostics`` collection mutable) —
run the flat scan, with identical results.

DLCL (Wang et al. 2019, eq. 8–9) feeds layer l+1 a learned combination of *all* earlier outputs
y_0 … y_l, so its carry grows with depth and has no fixed shape; it cannot be expressed as a scan
with a constant carry and runs as an unrolled, per-layer rematerialized loop.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from deepnet_jax.model import remat
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.sublayers import DIAGNOSTICS, constrain, layer_norm
from deepnet_jax.model.transformer_layer import TransformerLayer, residual_scheme


def _layer_class(config: TransformerConfig, scanned: bool):
    if config.remat_policy == "none":
        return TransformerLayer
    # prevent_cse=False is safe (and faster) only inside scan, as jax.checkpoint documents.
    return nn.remat(
        TransformerLayer, policy=remat.policy(config.remat_policy), prevent_cse=not scanned
    )


def num_layers(config: TransformerConfig, side: str) -> int:
    return config.num_encoder_layers if side == "encoder" else config.num_decoder_layers


def has_final_norm(config: TransformerConfig) -> bool:
    """Pre-LN-style stacks (pre_ln, subln, dlcl_pre) end with a LayerNorm."""
    return residual_scheme(config.scheme) in ("pre_ln", "subln")


def dlcl_weight_init(size: int, fill: str) -> np.ndarray:
    """Lower-triangular [size, size] DLCL weights: row i combines y_0 … y_i.

    ``fill`` "one" gives all ones (the paper's "fix 1"); "avg" gives 1/(i+1) (the paper's
    "fix 1/N"), which is also the starting point of the learnable weights.
    """
    rows = np.arange(size)[:, None]
    tril = (np.arange(size)[None, :] <= rows).astype(np.float32)
    return tril if fill == "one" else tril / (rows + 1)


def apply_layers(
    owner: nn.Module,
    config: TransformerConfig,
    side: str,
    x_BTD: jax.Array,
    self_mask: jax.Array | None,
    enc_out_BSD: jax.Array | None,
    enc_mask: jax.Array | None,
    has_cross: bool,
    deterministic: bool,
    cache: dict | None = None,
    cache_index: jax.Array | None = None,
) -> jax.Array | tuple[jax.Array, dict]:
    """Run one side's layers (and its final LN) as submodules of ``owner``.

    ``owner`` is the Encoder/Decoder whose compact ``__call__`` is running; layers are created
    in its scope (``owner/layers`` scanned, ``owner/layers_{i}`` unrolled).

    With a decoding ``cache`` (every leaf stacked over layers, [L, B, …], see
    ``architectures.init_cache``) the stack returns ``(x, new_cache)``: a scanned stack scans over
    the cache's layer axis together with the parameters, so one layer body is compiled.
    """
    L = num_layers(config, side)
    keys = layer_dropout_keys(owner, config, L, deterministic)
    args = (x_BTD, self_mask, enc_out_BSD, enc_mask)
    if config.scheme.startswith("dlcl"):
        x_BTD, new_cache = _dlcl(
            owner, config, side, *args, keys, has_cross, deterministic, cache, cache_index
        )
        return x_BTD if cache is None else (x_BTD, new_cache)
    kwargs = dict(config=config, side=side, has_cross=has_cross, deterministic=deterministic)
    # Grouping only changes what the backward pass keeps: init, cached decoding and the
    # instruments' probe (forward only) take the flat scan over the same parameters.
    forward_only = (
        cache is not None or owner.is_initializing() or owner.is_mutable_collection(DIAGNOSTICS)
    )
    if remat.group_size(config, L) and not forward_only:
        layer = _layer_class(config, scanned=True)(**kwargs, carry_output=True, name="layers")
        x_BTD, new_cache = _grouped_scan(layer, L, remat.group_size(config, L), args, keys), None
    elif config.scan_layers:
        scanned = nn.scan(
            _layer_class(config, scanned=True),
            variable_axes={"params": 0, DIAGNOSTICS: 0},  # instruments: one entry per layer
            split_rngs={"params": True, "dropout": True},
            in_axes=(nn.broadcast, nn.broadcast, nn.broadcast, 0, 0, nn.broadcast),
            length=L,
            metadata_params={nn.PARTITION_NAME: "layers"},
        )
        layers = scanned(**kwargs, carry_output=True, name="layers")
        x_BTD, new_cache = layers(*args, keys, cache, cache_index)
    else:
        layer_cls = _layer_class(config, scanned=False)
        per_layer = []
        for i in range(L):
            key = None if keys is None else keys[i]
            layer = layer_cls(**kwargs, name=f"layers_{i}")
            if cache is None:
                x_BTD = layer(x_BTD, *args[1:], key)
            else:
                x_BTD, layer_cache = layer(
                    x_BTD, *args[1:], key, _layer_slice(cache, i), cache_index
                )
                per_layer.append(layer_cache)
        new_cache = _stack_layers(per_layer) if cache is not None else None
    if has_final_norm(config):
        x_BTD = layer_norm(config, "layer_norm")(x_BTD)
    x_BTD = constrain(x_BTD)
    return x_BTD if cache is None else (x_BTD, new_cache)


def _grouped_scan(layer: nn.Module, L: int, k: int, args: tuple, keys: jax.Array | None):
    """``layer`` (parameters stacked [L, …]) applied L times as ⌊L/k⌋ rematerialized groups of
    k scanned layers, then one rematerialized group of the L mod k left (module docstring).

    The scans are Flax's function forms over the one ``layer`` module, so its parameters keep
    their path; ``nn.map_variables`` hands each part its view of the stacked arrays ([G, k, …]
    for the groups, [r, …] for the rest), and the gradients flow back into the [L, …] leaves.
    """
    x_BTD, *broadcast = args
    G, r = divmod(L, k)

    def scan(fn, length: int):
        return nn.scan(
            fn,
            variable_axes={"params": 0},
            split_rngs={"params": False},  # apply only: the parameters exist already
            in_axes=(nn.broadcast, nn.broadcast, nn.broadcast, 0),
            length=length,
        )

    def one_layer(mdl, x, self_mask, enc_out, enc_mask, key):
        return mdl(x, self_mask, enc_out, enc_mask, key)  # (x, None): carry, no output

    def group(n: int, in_scan: bool):
        """n scanned layers as one rematerialized unit that saves nothing but its input."""
        return nn.remat(
            scan(one_layer, n),
            policy=remat.GROUP_POLICY,
            prevent_cse=not in_scan,  # False is safe only inside a scan (jax.checkpoint)
        )

    def view(start: int, stop: int, shape: tuple[int, ...]):
        def trans_in(variables):
            return jax.tree.map(
                lambda a: a[start:stop].reshape(*shape, *a.shape[1:]), nn.unbox(variables)
            )

        return trans_in

    def part_keys(start: int, stop: int, shape: tuple[int, ...]):
        return None if keys is None else keys[start:stop].reshape(*shape, *keys.shape[1:])

    if G:
        groups = nn.map_variables(scan(group(k, True), G), "params", view(0, G * k, (G, k)))
        x_BTD, _ = groups(layer, x_BTD, *broadcast, part_keys(0, G * k, (G, k)))
    if r:
        rest = nn.map_variables(group(r, False), "params", view(G * k, L, (r,)))
        x_BTD, _ = rest(layer, x_BTD, *broadcast, part_keys(G * k, L, (r,)))
    return x_BTD


def _layer_slice(cache: dict, i: int) -> dict:
    """Layer ``i``'s entries of a cache stacked over layers."""
    return jax.tree.map(lambda a: a[i], cache)


def _stack_layers(caches: list[dict]) -> dict:
    """Per-layer caches → one cache stacked over layers (the scanned layout)."""
    return jax.tree.map(lambda *a: jnp.stack(a), *caches)


def layer_dropout_keys(
    owner: nn.Module, config: TransformerConfig, L: int, deterministic: bool
) -> jax.Array | None:
    """One dropout key per layer [L] (None when no dropout can fire).

    Keys are drawn once from the owner's "dropout" stream and handed to the layers explicitly, so
    the scanned and the unrolled stacks apply identical masks for the same parameters.
    """
    rates = (config.dropout, config.attention_dropout, config.activation_dropout)
    if deterministic or max(rates) == 0:
        return None
    return jax.random.split(owner.make_rng("dropout"), L)


def _dlcl(
    owner,
    config,
    side,
    x_BTD,
    self_mask,
    enc_out_BSD,
    enc_mask,
    keys,
    has_cross,
    deterministic,
    cache=None,
    cache_index=None,
):
    """DLCL stack: x_{l+1} = Σ_k W[l, k]·LN_k(y_k) (pre) or LN(Σ_k W[l, k]·y_k) (post).

    W is lower-triangular [(L+1), (L+1)]; row l < L feeds layer l+1 and row L forms the stack
    output (followed by the final LN for dlcl_pre). The combination is position-wise, so cached
    decoding only needs each layer's attention cache. Returns ``(output, new_cache | None)``.
    """
    L = num_layers(config, side)
    pre = config.scheme == "dlcl_pre"
    use_ln = config.dlcl_layer_norm
    if config.dlcl_weights == "learnable":
        # Logical axes unmapped: a tiny matrix, replicated.
        W = owner.param(
            "dlcl_weights",
            nn.with_logical_partitioning(
                lambda key, shape, dtype: jnp.asarray(dlcl_weight_init(shape[0], "avg"), dtype),
                (None, None),
            ),
            (L + 1, L + 1),
            jnp.float32,
        )
        W = W * jnp.asarray(dlcl_weight_init(L + 1, "one"))  # keep it lower-triangular
    else:
        W = jnp.asarray(dlcl_weight_init(L + 1, config.dlcl_weights.removeprefix("fix_")))
    layer_cls = _layer_class(config, scanned=False)

    def push(y: jax.Array, k: int) -> jax.Array:
        return layer_norm(config, f"history_layer_norm_{k}")(y) if pre and use_ln else y

    def combine(history: list[jax.Array], row: int) -> jax.Array:
        w = W[row, : row + 1].astype(config.compute_dtype)
        x = jnp.einsum("k,kbtd->btd", w, jnp.stack(history))
        if not pre:  # eq. 9
            x = layer_norm(config, f"combine_layer_norm_{row}")(x)
        return constrain(x)

    history = [push(x_BTD, 0)]
    per_layer = []
    for i in range(L):
        layer = layer_cls(
            config=config,
            side=side,
            has_cross=has_cross,
            deterministic=deterministic,
            name=f"layers_{i}",
        )
        inputs = (combine(history, i), self_mask, enc_out_BSD, enc_mask)
        key = None if keys is None else keys[i]
        if cache is None:
            y = layer(*inputs, key)
        else:
            y, layer_cache = layer(*inputs, key, _layer_slice(cache, i), cache_index)
            per_layer.append(layer_cache)
        history.append(push(y, i + 1))
    out = combine(history, L)
    if pre:
        out = layer_norm(config, "layer_norm")(out)
    return out, (_stack_layers(per_layer) if cache is not None else None)
