"""torchscale state dicts ↔ this project's parameter trees, tensor by tensor (numpy only).

One table (:func:`entries`) lists, for a model config, every torchscale tensor name with the
parameter it is in this project, how the two layouts relate and the torchscale shape:

===========================================  =======================================  ==========
torchscale (Linear weights are [out, in])    here (``layers`` of the side's stack)    layout
===========================================  =======================================  ==========
``layers.i.self_attn.{q,k,v}_proj.weight``   ``self_attn/{q,k,v}_proj/kernel``        [D, H, K]
``layers.i.self_attn.{q,k,v}_proj.bias``     ``self_attn/{q,k,v}_proj/bias``          [H, K]
``layers.i.self_attn.out_proj.weight``       ``self_attn/out_proj/kernel``            [H, K, D]
``layers.i.encoder_attn.*``                  ``cross_attn/*``
``layers.i.encoder_attn_layer_norm.weight``  ``cross_attn_layer_norm/scale``
``layers.i.ffn.fc1.weight`` [F, D]           ``ffn/fc1/kernel``                       [D, F]
``*layer_norm.weight``, ``*_ln.weight``      ``…/scale`` (``bias`` as it is)
``output_projection.weight`` [V, D]          ``output_projection/kernel``             [D, V]
``embed_{tokens,positions}.weight``          ``…/embedding``                          as it is
===========================================  =======================================  ==========

Every kernel is the transposed torchscale weight, reshaped.

Names are those of torchscale's own modules: no prefix for an ``Encoder`` or ``Decoder`` alone,
``encoder.``/``decoder.`` inside an ``EncoderDecoder``. Layer ``i`` of a scanned stack is row
``i`` of the stacked ``layers`` arrays (``layers_i`` unrolled; a nested scan keeps the same
[L, …] arrays); with ``model.fused_qkv`` the
self-attention q/k/v kernels [D, H, K] stack into ``qkv_proj`` [D, 3, H, K]. A tied table
appears under each of its torchscale names (e.g. ``decoder.output_projection.weight`` and
``decoder.embed_tokens.weight``), which must then hold the same values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import flax.linen as nn
import jax
import ml_collections
import numpy as np
from flax import traverse_util

from deepnet_jax.model import architectures, schemes
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.model.config import AUTO

Path = tuple[str, ...]
QKV = ("q_proj", "k_proj", "v_proj")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One torchscale tensor: its name, its path here (per layer: ``layers_i``), the layout
    relation (a key of :data:`LAYOUTS`), its torchscale shape, and whether it only repeats a
    tied table another entry already maps (``copy_of_tied``)."""

    name: str
    path: Path
    layout: str
    shape: tuple[int, ...]
    copy_of_tied: bool = False


def _transpose(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return a.T.reshape(shape)


# layout → (torchscale → here, here → torchscale); each takes the array and the target shape
LAYOUTS: dict[str, tuple[Callable, Callable]] = {
    "same": (lambda a, s: a.reshape(s), lambda a, s: a.reshape(s)),
    "transpose": (_transpose, lambda a, s: a.reshape(s[::-1]).T),
}


def ours_shape(entry: Entry, c: ml_collections.ConfigDict) -> tuple[int, ...]:
    """The entry's shape here (per layer, unfused)."""
    H, K, D = c.num_heads, c.d_model // c.num_heads, c.d_model
    proj = entry.path[-2] if len(entry.path) > 1 else ""
    if entry.layout == "same":
        return (H, K) if proj in QKV else entry.shape
    if proj in QKV:
        return (D, H, K)
    if proj == "out_proj":
        return (H, K, D)
    return entry.shape[::-1]


def _norm(ts: str, ours: Path, width: int) -> list[Entry]:
    return [
        Entry(f"{ts}.weight", (*ours, "scale"), "same", (width,)),
        Entry(f"{ts}.bias", (*ours, "bias"), "same", (width,)),
    ]


def _linear(ts: str, ours: Path, shape: tuple[int, int]) -> list[Entry]:
    return [
        Entry(f"{ts}.weight", (*ours, "kernel"), "transpose", shape),
        Entry(f"{ts}.bias", (*ours, "bias"), "same", (shape[0],)),
    ]


def _layer_entries(c: ml_collections.ConfigDict, prefix: str, base: Path, cross: bool):
    D, F = c.d_model, c.ffn_dim
    subln = schemes.get(c.scheme).per_layer.inner_norm
    out: list[Entry] = []
    attentions = [("self_attn", "self_attn")] + ([("encoder_attn", "cross_attn")] if cross else [])
    for ts, ours in attentions:
        for proj in (*QKV, "out_proj"):
            out += _linear(f"{prefix}{ts}.{proj}", (*base, ours, proj), (D, D))
        if subln and ours == "self_attn":
            out += _norm(f"{prefix}{ts}.inner_attn_ln", (*base, ours, "inner_attn_ln"), D)
        out += _norm(f"{prefix}{ts}_layer_norm", (*base, f"{ours}_layer_norm"), D)
    out += _linear(f"{prefix}ffn.fc1", (*base, "ffn", "fc1"), (F, D))
    out += _linear(f"{prefix}ffn.fc2", (*base, "ffn", "fc2"), (D, F))
    if subln:
        out += _norm(f"{prefix}ffn.ffn_layernorm", (*base, "ffn", "ffn_layernorm"), F)
    return out + _norm(f"{prefix}final_layer_norm", (*base, "final_layer_norm"), D)


def _side_entries(c: ml_collections.ConfigDict, side: str) -> list[Entry]:
    """A stack's layers, final LayerNorm and learned positions."""
    prefix = f"{side}." if c.arch == "encdec" else ""
    cross = c.arch == "encdec" and side == "decoder"
    depth = c.num_encoder_layers if side == "encoder" else c.num_decoder_layers
    out: list[Entry] = []
    if c.positions == "learned":
        rows = c.max_len + c.position_offset
        name = f"{prefix}embed_positions.weight"
        out.append(Entry(name, (side, "embed_positions", "embedding"), "same", (rows, c.d_model)))
    for i in range(depth):
        out += _layer_entries(c, f"{prefix}layers.{i}.", (side, f"layers_{i}"), cross)
    if schemes.get(c.scheme).per_layer.final_norm:
        out += _norm(f"{prefix}layer_norm", (side, "layer_norm"), c.d_model)
    return out


def _table_entries(c: ml_collections.ConfigDict) -> list[Entry]:
    """Token tables and the output projection (tied ones listed as copies)."""
    V, D = c.vocab_size, c.d_model
    if c.arch != "encdec":
        tables = [Entry("embed_tokens.weight", ("embed_tokens", "embedding"), "same", (V, D))]
        head = "output_projection.weight"
    else:
        tables = [
            Entry(
                f"{side}.embed_tokens.weight",
                ("embed_tokens" if c.share_embeddings else f"{side}_embed_tokens", "embedding"),
                "same",
                (V, D),
                copy_of_tied=c.share_embeddings and side == "decoder",
            )
            for side in ("encoder", "decoder")
        ]
        head = "decoder.output_projection.weight"
    if c.tie_embeddings:
        return [*tables, dataclasses.replace(tables[-1], name=head, copy_of_tied=True)]
    return [*tables, Entry(head, ("output_projection", "kernel"), "transpose", (V, D))]


# (model field, its value torchscale 0.3.0's Encoder/Decoder has, what torchscale lacks)
_TORCHSCALE_HAS = (
    ("use_bias", True, "models without biases (its projections and LayerNorms all have them)"),
    ("norm", "layernorm", "RMSNorm in its Encoder/Decoder"),
    ("num_kv_heads", (0, "num_heads"), "grouped-query attention (its k/v have every head)"),
    ("qk_norm", False, "QK-norm"),
    ("positions", ("sinusoidal", "learned"), "rotary positions (its relative positions: xPos)"),
    ("activation", ("relu", "gelu"), "gated FFNs in its Encoder/Decoder"),
    ("deepnorm_variant", "paper", "GLM-130B's DeepNorm constants"),
    ("parameterization", "standard", "CompleteP's multipliers (its layers weigh branches by 1)"),
)


def check_torchscale_has(c: ml_collections.ConfigDict) -> None:
    """One-line ``ValueError`` naming the first field of model config ``c`` whose value
    torchscale 0.3.0's Encoder/Decoder/EncoderDecoder cannot express (DLCL, the blocks beyond
    the papers'), so that an export fails before anything is converted."""
    scheme = schemes.get(c.scheme)
    if not scheme.torchscale:
        raise ValueError(f"model.scheme={c.scheme!r}: torchscale has no {scheme.title}")
    for name, allowed, lacks in _TORCHSCALE_HAS:
        values = allowed if isinstance(allowed, tuple) else (allowed,)
        values = tuple(c.num_heads if v == "num_heads" else v for v in values)
        if c[name] not in values:
            raise ValueError(f"model.{name}={c[name]!r}: torchscale has no {lacks}")


def entries(c: ml_collections.ConfigDict) -> list[Entry]:
    """Every torchscale tensor of a model built from ``c`` (a validated model config whose
    scheme torchscale has: post_ln, pre_ln, deepnorm or subln), in state-dict order."""
    check_torchscale_has(c)
    sides = {"encoder": ["encoder"], "decoder": ["decoder"], "encdec": ["encoder", "decoder"]}
    out = _table_entries(c)
    for side in sides[c.arch]:
        out += _side_entries(c, side)
    return out


def expected_params(c: ml_collections.ConfigDict) -> dict[Path, jax.ShapeDtypeStruct]:
    """path → shape and dtype of every parameter of the model ``c`` builds (nothing
    allocated; ``remat_policy="auto"`` and ``attention_impl="auto"``, which change no
    parameter, are read as "full" and "reference")."""
    c = c.copy_and_resolve_references()
    if c.remat_policy == AUTO:
        c.remat_policy = "full"
    if c.attention_impl == AUTO:
        c.attention_impl = "reference"
    model = architectures.build(c)
    dummy = np.zeros((1, 2), np.int32)
    shapes = jax.eval_shape(
        lambda: model_inputs.init_variables(model, c.arch, {"src": dummy, "inputs": dummy})
    )
    return traverse_util.flatten_dict(nn.unbox(shapes["params"]))


def fuse_layer(per_layer: dict[Path, np.ndarray]) -> dict[Path, np.ndarray]:
    """Self-attention q/k/v of every layer (paths ``…/self_attn/{q,k,v}_proj/{kernel,bias}``)
    stacked into ``qkv_proj`` (axis -3: kernels [D, 3, H, K], biases [3, H, K])."""
    out = {p: a for p, a in per_layer.items() if not _is_self_qkv(p)}
    for path in [p for p in per_layer if _is_self_qkv(p) and p[-2] == "q_proj"]:
        parts = [per_layer[(*path[:-2], proj, path[-1])] for proj in QKV]
        out[(*path[:-2], "qkv_proj", path[-1])] = np.stack(parts, axis=-3)
    return out


def unfuse_layer(params: dict[Path, np.ndarray]) -> dict[Path, np.ndarray]:
    """The inverse of :func:`fuse_layer`."""
    out = {}
    for path, a in params.items():
        if len(path) > 2 and path[-2] == "qkv_proj" and path[-3] == "self_attn":
            for i, proj in enumerate(QKV):
                out[(*path[:-2], proj, path[-1])] = np.take(a, i, axis=-3)
        else:
            out[path] = a
    return out


def _is_self_qkv(path: Path) -> bool:
    return len(path) > 2 and path[-3] == "self_attn" and path[-2] in QKV
