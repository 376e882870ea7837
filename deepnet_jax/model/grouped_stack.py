"""The nested (√L) scan, the ``grouped`` stack kind (``model.scan_group_size`` = k; -1: k ≈ √L,
see :func:`deepnet_jax.model.remat.group_size`).

An outer scan over G = ⌊L/k⌋ groups, each group one rematerialized unit (nothing saved but its
input, ``remat.GROUP_POLICY``) holding an inner scan over its k layers, and the remaining
r = L − G·k layers (if any) as one more rematerialized group after them. The backward pass then
keeps G (+ 1) group inputs and, while it works through one group, that group's k per-layer
residuals — about 2√L residuals instead of L — at the price of one more forward pass of every
layer. A remainder costs a second compiled layer body and, in XLA's temporaries, about one more
copy of the layers' gradients (the two parts' gradients are joined into the [L, …] leaves), so
-1 takes a divisor of L when one is near √L. Only what the backward pass keeps changes: the
parameters stay one ``layers`` subtree stacked [L, …] (the groups read it reshaped,
``nn.map_variables``), so checkpoints, sharding rules and layout conversions are those of the
flat scan, and the forward-only paths — ``init``, cached decoding and the stability
instruments' probe (the ``diagnostics`` collection mutable) — run the flat scan
(``model.stacks.stack_kind``), with identical results.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from deepnet_jax.model import remat
from deepnet_jax.model.stack_common import Side, StackInputs, in_loop, layer_class


def grouped(owner: nn.Module, side: Side, inputs: StackInputs) -> tuple[jax.Array, None]:
    """The layers (parameters stacked [L, …] under ``layers``) applied as ⌊L/k⌋
    rematerialized groups of k scanned layers, then one rematerialized group of the L mod k
    left (module docstring). Training only: no cache.

    The scans are Flax's function forms over the one layer module, so its parameters keep
    their path; ``nn.map_variables`` hands each part its view of the stacked arrays ([G, k, …]
    for the groups, [r, …] for the rest), and the gradients flow back into the [L, …] leaves.
    """
    L = side.num_layers
    k = remat.group_size(side.config, L)
    unroll = side.config.scan_unroll  # within a group: its k (or r) layers per loop iteration
    G, r = divmod(L, k)
    looped = in_loop(k, unroll) and (not r or in_loop(r, unroll))
    layer = layer_class(side.config, scanned=looped)(
        **side.layer_kwargs(), carry_output=True, name="layers"
    )
    x_BTD, broadcast = inputs.x, inputs.attention_inputs()
    index = jnp.arange(L)
    if G:
        groups = nn.map_variables(
            _scan_layers(_group(k, unroll, in_scan=True), G), "params", _view(0, G * k, (G, k))
        )
        x_BTD, _ = groups(
            layer,
            x_BTD,
            *broadcast,
            _part(inputs.keys, 0, G * k, (G, k)),
            _part(index, 0, G * k, (G, k)),
        )
    if r:
        rest = nn.map_variables(_group(r, unroll, in_scan=False), "params", _view(G * k, L, (r,)))
        x_BTD, _ = rest(
            layer, x_BTD, *broadcast, _part(inputs.keys, G * k, L, (r,)), index[G * k :]
        )
    return x_BTD, None


def _scan_layers(fn: Callable, length: int, unroll: int = 1) -> Callable:
    """``fn(layer, x, self_mask, enc_out, enc_mask, positions, key, index)`` scanned
    ``length`` times over the layer's (already created) parameters, the keys and the layer
    indices, ``unroll`` calls per loop iteration."""
    return nn.scan(
        fn,
        variable_axes={"params": 0},
        split_rngs={"params": False},  # apply only: the parameters exist already
        in_axes=(nn.broadcast,) * 4 + (0, 0),
        length=length,
        unroll=unroll,
    )


def _one_layer(layer: nn.Module, x, self_mask, enc_out, enc_mask, positions, key, index):
    # (x, None): carry, no output
    return layer(x, self_mask, enc_out, enc_mask, positions, key, layer_index=index)


def _group(n: int, unroll: int, in_scan: bool) -> Callable:
    """n scanned layers (``unroll`` per loop iteration) as one rematerialized unit that saves
    nothing but its input."""
    return nn.remat(
        _scan_layers(_one_layer, n, unroll),
        policy=remat.GROUP_POLICY,
        prevent_cse=not in_scan,  # False is safe only inside a scan (jax.checkpoint)
    )


def _view(start: int, stop: int, shape: tuple[int, ...]) -> Callable:
    """Layers ``start:stop`` of stacked variables, reshaped to ``shape`` + the layer's own."""

    def trans_in(variables):
        return jax.tree.map(
            lambda a: a[start:stop].reshape(*shape, *a.shape[1:]), nn.unbox(variables)
        )

    return trans_in


def _part(keys: jax.Array | None, start: int, stop: int, shape: tuple[int, ...]):
    return None if keys is None else keys[start:stop].reshape(*shape, *keys.shape[1:])
