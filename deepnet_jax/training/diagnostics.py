"""Stability instruments: the quantities of DeepNet's Figures 3–5, for any run.

* **Model update** (DeepNet Figures 4a and 5). F(x; θ) is the final hidden state of the stack
  that feeds the vocabulary projection — the decoder's output (after its final LayerNorm, where
  the scheme has one) for decoder-only and encoder-decoder models, the encoder's for
  encoder-only ones — on a fixed probe batch x (the run's first validation batch). The model
  update after t updates is

      ΔF_t = (1/N) Σ_{b,t'} ‖F(x; θ_t)[b, t'] − F(x; θ_0)[b, t']‖₂,

  the L2 norm over the hidden dimension averaged over the N non-padding positions of the
  probe batch's (decoder-side) inputs.
* **Per-layer gradient norms** (Figures 3 and 4d). For each side and each sublayer type (the
  first key under a layer: ``self_attn``, ``cross_attn``, ``ffn`` and the LayerNorms
  ``self_attn_layer_norm``, ``cross_attn_layer_norm``, ``final_layer_norm``, plus ``all``), the
  L2 norm of that sublayer's gradient in each layer: an [L] vector, reduced over every axis but
  the leading ``layers`` axis of the scanned (stacked) gradients, so no per-layer copies are
  made. Unrolled stacks (``layers_0`` …) give the same vectors.
* **Inputs to LayerNorm** (Figures 4b and 4c). For every LayerNorm of every layer, the mean over
  the probe batch's positions (padding included) of the L2 norm of what enters it: for Post-LN
  and DeepNorm α·x + G(x), for Pre-LN and Sub-LN the residual stream x, and for Sub-LN's inner
  LayerNorms (``inner_attn_ln``, ``ffn_layernorm``) their inputs. They are sown into the
  ``diagnostics`` collection inside the scan (one entry per layer) and only computed when that
  collection is mutable, so training without the instruments costs nothing.

The trainer switches them on with ``config.diagnostics.every`` > 0 and writes them to the run's
metrics file as ``split: "diagnostics"`` records; :func:`plot` renders them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from deepnet_jax.common import tokens
from deepnet_jax.common.config_schema import field
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.model.norms import DIAGNOSTICS, LN_INPUT_SUFFIX
from deepnet_jax.runs.workdir import RunDir

SIDES = ("encoder", "decoder")
_UNROLLED = re.compile(r"^layers_(\d+)$")


@dataclasses.dataclass(frozen=True)
class DiagnosticsFields:
    """``config.diagnostics``: the stability instruments (off by default)."""

    every: int = field(
        0,
        "updates between measurements (model update, LN inputs, layer gradient norms); 0: off",
        low=0,
        resumable=True,
    )
    plot: bool = field(
        True, "with every > 0: render diagnostics_*.png in the workdir at the end", resumable=True
    )


def feature_module(arch: str) -> str:
    """The submodule whose output is F: "decoder" (decoder-only, encoder-decoder) or
    "encoder" (encoder-only)."""
    return "encoder" if arch == "encoder" else "decoder"


def make_probe(model: nn.Module, arch: str) -> Callable:
    """Jitted ``probe(params, batch) -> (features [B, T, D] float32, ln_inputs)`` without
    dropout; ``ln_inputs`` maps ``"<side>/<ln name>"`` to [L] (see :func:`ln_input_norms`)."""
    target = feature_module(arch)

    def capture(module: nn.Module, method_name: str) -> bool:
        return (
            method_name == "__call__" and module.name == target and module.scope.path == (target,)
        )

    @jax.jit
    def probe(params, batch):
        _, state = model.apply(
            {"params": params},
            *model_inputs.model_args(arch, batch),
            deterministic=True,
            capture_intermediates=capture,
            mutable=["intermediates", DIAGNOSTICS],
            **model_inputs.model_kwargs(batch),
        )
        features = state["intermediates"][target]["__call__"][0].astype(jnp.float32)
        return features, ln_input_norms(state.get(DIAGNOSTICS, {}))

    return probe


def model_update(features: jax.Array, features_0: jax.Array, inputs: jax.Array) -> jax.Array:
    """ΔF = Σ mask·‖features − features_0‖₂ / Σ mask, the norm over the hidden axis of
    [B, T, D] features, mask = the non-padding positions of ``inputs`` [B, T] (the
    decoder-side tokens; the encoder's for encoder-only models)."""
    mask = (inputs != tokens.PAD_ID).astype(jnp.float32)
    distance = jnp.sqrt(jnp.sum(jnp.square(features - features_0), axis=-1))
    return jnp.sum(distance * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def ln_input_norms(collection: Any) -> dict[str, jax.Array]:
    """``{"<side>/<ln name>": [L]}`` from a model's ``diagnostics`` collection (scanned: one
    stacked entry per LayerNorm; unrolled: one per ``layers_i``, stacked here in layer order)."""
    out: dict[str, list] = {}
    for side in SIDES:
        node = collection.get(side, {})
        for name, value in _per_layer(node):
            for path, leaf in _flatten(value):
                path = path.removesuffix(LN_INPUT_SUFFIX)
                out.setdefault(f"{side}/{path}", []).append((name, leaf))
    return {k: _stack(v) for k, v in out.items()}


def layer_grad_norms(grads: Any) -> dict[str, jax.Array]:
    """``{"<side>/<sublayer>": [L]}``: the L2 norm of each sublayer type's gradient in each
    layer, plus ``"<side>/all"`` (the whole layer), from gradients shaped like the parameters.
    Reduces the stacked [L, …] leaves over their non-leading axes (no unstacking)."""
    out: dict[str, list] = {}
    for side in SIDES:
        node = grads.get(side, {}) if isinstance(grads, dict) else {}
        for name, layer in _per_layer(node):
            total = 0.0
            for sub, tree in layer.items():
                sq = sum(_per_layer_sum_of_squares(leaf, name) for leaf in jax.tree.leaves(tree))
                out.setdefault(f"{side}/{sub}", []).append((name, sq))
                total = total + sq
            out.setdefault(f"{side}/all", []).append((name, total))
    return {k: jnp.sqrt(_stack(v)) for k, v in out.items()}


def _per_layer(node: Any) -> list[tuple[Any, Any]]:
    """(layer index or "stacked", subtree) for a side's ``layers`` / ``layers_i`` entries."""
    if not isinstance(node, dict):
        return []
    if "layers" in node:
        return [("stacked", node["layers"])]
    found = [(int(m.group(1)), v) for k, v in node.items() if (m := _UNROLLED.match(k))]
    return sorted(found, key=lambda item: item[0])


def _per_layer_sum_of_squares(leaf: jax.Array, name: Any) -> jax.Array:
    x = jnp.square(leaf.astype(jnp.float32))
    if name == "stacked":
        return jnp.sum(x, axis=tuple(range(1, x.ndim)))  # [L]
    return jnp.sum(x)


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            items.extend(_flatten(v, f"{prefix}{k}/" if isinstance(v, dict) else f"{prefix}{k}"))
        return items
    return [(prefix.rstrip("/"), value)]


def _stack(entries: list[tuple[Any, Any]]) -> jax.Array:
    if len(entries) == 1 and entries[0][0] == "stacked":
        return jnp.asarray(entries[0][1])
    return jnp.stack([jnp.asarray(v) for _, v in entries])


def plot(workdir: str | RunDir) -> list[str]:
    """Figures of a run's ``diagnostics`` records: ``diagnostics_model_update.png`` (ΔF over
    updates), and heat maps (layer × update) ``diagnostics_ln_inputs.png`` and
    ``diagnostics_grad_norms.png``; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from deepnet_jax.runs import metrics

    run_dir = RunDir(workdir)
    records = [r for r in metrics.read(run_dir) if r["split"] == "diagnostics"]
    if not records:
        return []
    steps = [r["step"] for r in records]
    paths = []
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(steps, [r["model_update"] for r in records])
    ax.set_xlabel("updates")
    ax.set_ylabel("‖F(x; θ_t) − F(x; θ_0)‖")
    ax.set_title("model update")
    fig.tight_layout()
    paths.append(run_dir.diagnostics_figure("model_update"))
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    for prefix, filename in (("ln_input/", "ln_inputs"), ("grad_norm/", "grad_norms")):
        names = sorted(k for k in records[-1] if k.startswith(prefix))
        if not names:
            continue
        cols = min(3, len(names))
        rows = -(-len(names) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False)
        for ax, name in zip(axes.flat, names, strict=False):
            having = [r for r in records if name in r]  # no gradients at update 0
            grid = np.array([r[name] for r in having], dtype=np.float64).T  # [L, steps]
            image = ax.imshow(
                np.log10(np.maximum(grid, 1e-12)),
                aspect="auto",
                origin="lower",
                extent=(having[0]["step"], having[-1]["step"], 0.5, grid.shape[0] + 0.5),
                cmap="viridis",
            )
            ax.set_title(name.removeprefix(prefix), fontsize=9)
            ax.set_xlabel("updates")
            ax.set_ylabel("layer")
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            fig.colorbar(image, ax=ax, label="log10")
        for ax in list(axes.flat)[len(names) :]:
            ax.axis("off")
        fig.tight_layout()
        paths.append(run_dir.diagnostics_figure(filename))
        fig.savefig(paths[-1], dpi=100)
        plt.close(fig)
    return paths
