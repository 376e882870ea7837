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

DenseFormer (Pagliardini et al. 2024) likewise averages all earlier block outputs after every
block (:func:`_denseformer`) and runs as the same kind of loop.

Interface: every stack kind (:data:`KINDS`: scanned, grouped, unrolled, DLCL, DenseFormer) is
one function
``(owner, side: Side, inputs: StackInputs) -> (x [B, T, D], cache | None)``; :func:`stack_kind`
picks one and :func:`apply_layers` runs it and the side's final LayerNorm. The parameter paths
are those of the kind (``layers`` stacked [L, …], or ``layers_{i}``), whichever runs them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from deepnet_jax.model import remat, schemes
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.sublayers import DIAGNOSTICS, constrain, normalization
from deepnet_jax.model.transformer_layer import ADMIN_PROFILE, TransformerLayer


@dataclasses.dataclass(frozen=True)
class Side:
    """One side's stack, fixed at trace time: the model ``config``, the side's ``name``
    ("encoder" or "decoder"), whether its layers cross-attend to an encoder (``has_cross``) and
    whether dropout is off (``deterministic``)."""

    config: TransformerConfig
    name: str
    has_cross: bool
    deterministic: bool

    @property
    def num_layers(self) -> int:
        return self.config.num_layers(self.name)

    def layer_kwargs(self) -> dict:
        """The attributes every :class:`TransformerLayer` of this side takes."""
        return dict(
            config=self.config,
            side=self.name,
            has_cross=self.has_cross,
            deterministic=self.deterministic,
        )


@dataclasses.dataclass(frozen=True)
class StackInputs:
    """What one side's layers read.

    Attributes:
      x: the embedded input [B, T, D].
      self_mask: self-attention mask [B|1, 1, T|1, T] (None: none).
      enc_out, enc_mask: the encoder output [B, S, D] and its mask [B, 1, 1|T, S], for
        cross-attention (None: none, or read from the cache while decoding).
      positions: the positions of x's tokens [B|1, T], for rotary self-attention (None: the
        model has no rotary positions).
      keys: one dropout key per layer [L, …] (None: no dropout fires).
      cache, cache_index: a decoding cache stacked over layers ([L, B, …] leaves, see
        ``architectures.init_cache``) and the position this call writes (None: no decoding).
    """

    x: jax.Array
    self_mask: jax.Array | None
    enc_out: jax.Array | None = None
    enc_mask: jax.Array | None = None
    positions: jax.Array | None = None
    keys: jax.Array | None = None
    cache: dict | None = None
    cache_index: jax.Array | None = None

    def attention_inputs(self) -> tuple:
        """``(self_mask, enc_out, enc_mask, positions)``: what every layer reads besides x
        (the same for every layer)."""
        return self.self_mask, self.enc_out, self.enc_mask, self.positions

    def key(self, i: int) -> jax.Array | None:
        return None if self.keys is None else self.keys[i]


StackFn = Callable[[nn.Module, Side, StackInputs], tuple[jax.Array, dict | None]]


def _layer_class(config: TransformerConfig, scanned: bool):
    if config.remat_policy == "none":
        return TransformerLayer
    # prevent_cse=False is safe (and faster) only inside scan, as jax.checkpoint documents.
    return nn.remat(
        TransformerLayer, policy=remat.policy(config.remat_policy), prevent_cse=not scanned
    )


def has_final_norm(config: TransformerConfig) -> bool:
    """Pre-norm stacks (pre_ln, subln, dlcl_pre, mix_ln, peri_ln, …) end with a norm
    (``schemes.Scheme.final_norm``)."""
    return schemes.get(config.scheme).final_norm


def admin_profiling(owner: nn.Module, config: TransformerConfig) -> bool:
    """A profiled init's pass (Admin's, ``schemes.Scheme.profiled_init``) is running: its
    collection mutable outside init."""
    return (
        schemes.get(config.scheme).profiled_init
        and owner.is_mutable_collection(ADMIN_PROFILE)
        and not owner.is_initializing()
    )


def dlcl_weight_init(size: int, fill: str) -> np.ndarray:
    """Lower-triangular [size, size] DLCL weights: row i combines y_0 … y_i.

    ``fill`` "one" gives all ones (the paper's "fix 1"); "avg" gives 1/(i+1) (the paper's
    "fix 1/N"), which is also the starting point of the learnable weights.
    """
    rows = np.arange(size)[:, None]
    tril = (np.arange(size)[None, :] <= rows).astype(np.float32)
    return tril if fill == "one" else tril / (rows + 1)


def apply_layers(owner: nn.Module, side: Side, inputs: StackInputs) -> jax.Array | tuple:
    """Run one side's layers (the kind :func:`stack_kind` picks) and its final LN as
    submodules of ``owner``, the Encoder/Decoder whose compact ``__call__`` is running.

    Returns x [B, T, D], or with a decoding ``inputs.cache`` ``(x, new_cache)``: a scanned
    stack scans over the cache's layer axis together with the parameters, so one layer body is
    compiled. ``inputs.keys`` is filled here (:func:`layer_dropout_keys`).
    """
    keys = layer_dropout_keys(owner, side.config, side.num_layers, side.deterministic)
    profiling = admin_profiling(owner, side.config)
    x0 = (inputs.x, jnp.ones((), jnp.float32)) if profiling else inputs.x  # Admin: r₀ = 1
    inputs = dataclasses.replace(inputs, keys=keys, x=x0)
    x_BTD, new_cache = KINDS[stack_kind(owner, side, inputs)](owner, side, inputs)
    if profiling:
        x_BTD = x_BTD[0]
    if has_final_norm(side.config):
        x_BTD = normalization(side.config, "layer_norm")(x_BTD)
    x_BTD = constrain(x_BTD)
    return x_BTD if inputs.cache is None else (x_BTD, new_cache)


def stack_kind(owner: nn.Module, side: Side, inputs: StackInputs) -> str:
    """The key of :data:`KINDS` that runs this side. Grouping only changes what the backward
    pass keeps, so init, cached decoding and the instruments' probe (forward only) take the
    flat scan over the same parameters. A combining scheme names its own
    (``schemes.Scheme.stack``)."""
    c = side.config
    own = schemes.get(c.scheme).stack
    if own is not None:
        return own
    forward_only = (
        inputs.cache is not None
        or owner.is_initializing()
        or owner.is_mutable_collection(DIAGNOSTICS)
        or admin_profiling(owner, c)
    )
    if remat.group_size(c, side.num_layers) and not forward_only:
        return "grouped"
    return "scanned" if c.scan_layers else "unrolled"


def _scanned(owner: nn.Module, side: Side, inputs: StackInputs) -> tuple[jax.Array, dict | None]:
    """``nn.scan`` over the layers: parameters (and a cache) stacked [L, …] under ``layers``."""
    scanned = nn.scan(
        _layer_class(side.config, scanned=True),
        variable_axes={"params": 0, DIAGNOSTICS: 0, ADMIN_PROFILE: 0},  # one entry per layer
        split_rngs={"params": True, "dropout": True},
        in_axes=(nn.broadcast,) * 4 + (0, 0, nn.broadcast, 0),
        length=side.num_layers,
        metadata_params={nn.PARTITION_NAME: "layers"},
    )
    layers = scanned(**side.layer_kwargs(), carry_output=True, name="layers")
    return layers(
        inputs.x,
        *inputs.attention_inputs(),
        inputs.keys,
        inputs.cache,
        inputs.cache_index,
        jnp.arange(side.num_layers),
    )


def _unrolled(owner: nn.Module, side: Side, inputs: StackInputs) -> tuple[jax.Array, dict | None]:
    """A Python loop over ``layers_0`` … ``layers_{L-1}`` (the cache sliced and restacked)."""
    layer_cls = _layer_class(side.config, scanned=False)
    x_BTD, per_layer = inputs.x, []
    for i in range(side.num_layers):
        layer = layer_cls(**side.layer_kwargs(), name=f"layers_{i}")
        x_BTD, layer_cache = _call_layer(layer, x_BTD, inputs, i)
        per_layer.append(layer_cache)
    return x_BTD, _stack_layers(per_layer) if inputs.cache is not None else None


def _call_layer(
    layer: nn.Module, x_BTD: jax.Array, inputs: StackInputs, i: int
) -> tuple[jax.Array, dict | None]:
    """Layer ``i`` on ``x_BTD``: ``(y, its cache | None)``."""
    if inputs.cache is None:
        return layer(x_BTD, *inputs.attention_inputs(), inputs.key(i), layer_index=i), None
    return layer(
        x_BTD,
        *inputs.attention_inputs(),
        inputs.key(i),
        _layer_slice(inputs.cache, i),
        inputs.cache_index,
        i,
    )


def _grouped(owner: nn.Module, side: Side, inputs: StackInputs) -> tuple[jax.Array, None]:
    """The layers (parameters stacked [L, …] under ``layers``) applied as ⌊L/k⌋
    rematerialized groups of k scanned layers, then one rematerialized group of the L mod k
    left (module docstring). Training only: no cache.

    The scans are Flax's function forms over the one layer module, so its parameters keep
    their path; ``nn.map_variables`` hands each part its view of the stacked arrays ([G, k, …]
    for the groups, [r, …] for the rest), and the gradients flow back into the [L, …] leaves.
    """
    L = side.num_layers
    k = remat.group_size(side.config, L)
    layer = _layer_class(side.config, scanned=True)(
        **side.layer_kwargs(), carry_output=True, name="layers"
    )
    x_BTD, broadcast = inputs.x, inputs.attention_inputs()
    index = jnp.arange(L)
    G, r = divmod(L, k)
    if G:
        groups = nn.map_variables(
            _scan_layers(_group(k, in_scan=True), G), "params", _view(0, G * k, (G, k))
        )
        x_BTD, _ = groups(
            layer,
            x_BTD,
            *broadcast,
            _part(inputs.keys, 0, G * k, (G, k)),
            _part(index, 0, G * k, (G, k)),
        )
    if r:
        rest = nn.map_variables(_group(r, in_scan=False), "params", _view(G * k, L, (r,)))
        x_BTD, _ = rest(
            layer, x_BTD, *broadcast, _part(inputs.keys, G * k, L, (r,)), index[G * k :]
        )
    return x_BTD, None


def _scan_layers(fn: Callable, length: int) -> Callable:
    """``fn(layer, x, self_mask, enc_out, enc_mask, positions, key, index)`` scanned
    ``length`` times over the layer's (already created) parameters, the keys and the layer
    indices."""
    return nn.scan(
        fn,
        variable_axes={"params": 0},
        split_rngs={"params": False},  # apply only: the parameters exist already
        in_axes=(nn.broadcast,) * 4 + (0, 0),
        length=length,
    )


def _one_layer(layer: nn.Module, x, self_mask, enc_out, enc_mask, positions, key, index):
    # (x, None): carry, no output
    return layer(x, self_mask, enc_out, enc_mask, positions, key, layer_index=index)


def _group(n: int, in_scan: bool) -> Callable:
    """n scanned layers as one rematerialized unit that saves nothing but its input."""
    return nn.remat(
        _scan_layers(_one_layer, n),
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


def _dlcl(owner: nn.Module, side: Side, inputs: StackInputs) -> tuple[jax.Array, dict | None]:
    """DLCL stack: x_{l+1} = Σ_k W[l, k]·LN_k(y_k) (pre) or LN(Σ_k W[l, k]·y_k) (post).

    W is lower-triangular [(L+1), (L+1)]; row l < L feeds layer l+1 and row L forms the stack
    output (followed by the final LN for dlcl_pre, in :func:`apply_layers`). The combination is
    position-wise, so cached decoding only needs each layer's attention cache.
    """
    config, L = side.config, side.num_layers
    W = _dlcl_weights(owner, config, L)
    scheme = schemes.get(config.scheme)
    history_norm = scheme.history_norm and config.dlcl_layer_norm  # eq. 8's LN_k
    layer_cls = _layer_class(config, scanned=False)

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
        y, layer_cache = _call_layer(layer, combine(history, i), inputs, i)
        per_layer.append(layer_cache)
        history.append(push(y, i + 1))
    return combine(history, L), _stack_layers(per_layer) if inputs.cache is not None else None


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


def _denseformer(
    owner: nn.Module, side: Side, inputs: StackInputs
) -> tuple[jax.Array, dict | None]:
    """DenseFormer (Pagliardini et al., NeurIPS 2024, eq. 1–2; the 1×1 model, every block
    averaged): X_0 the embedded input, X_{i+1} = B_{i+1}(Y_i) with Y_0 = X_0, and after each
    block the depth-weighted average Y_{i+1} = Σ_{j ≤ i+1} W[i, j]·X_j (``dwa_weights``
    [L, L+1], learned, lower-triangular, the identity at init: :func:`dwa_weight_init`). The
    blocks are Pre-LN layers; Y_L goes on to the final norm (in :func:`apply_layers`). The
    averages are position-wise, so cached decoding only needs each layer's attention cache.
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
    layer_cls = _layer_class(config, scanned=False)
    history, per_layer, y_BTD = [inputs.x], [], inputs.x
    for i in range(L):
        layer = layer_cls(**side.layer_kwargs(), name=f"layers_{i}")
        x_BTD, layer_cache = _call_layer(layer, y_BTD, inputs, i)
        per_layer.append(layer_cache)
        history.append(x_BTD)
        w = W[i, : i + 2].astype(config.compute_dtype)
        y_BTD = constrain(jnp.einsum("k,kbtd->btd", w, jnp.stack(history)))
    return y_BTD, _stack_layers(per_layer) if inputs.cache is not None else None


KINDS: dict[str, StackFn] = {  # stack_kind(...) -> the function that runs it
    "scanned": _scanned,
    "grouped": _grouped,
    "unrolled": _unrolled,
    "dlcl": _dlcl,
    "dwa": _denseformer,  # DenseFormer's depth-weighted averages
}
