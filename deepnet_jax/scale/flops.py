"""Analytic model FLOPs of a training step, and the peak they are compared with (MFU).

MFU = (model FLOPs of a step / step time) / (peak FLOP/s per device × devices), with the PaLM
convention (Chowdhery et al. 2022, App. B; MaxText computes it the same way): only the model's
matrix multiplications count, a backward pass costs twice the forward pass (training step =
3 × forward), and rematerialization's recomputation is *not* counted, so MFU does not reward
recomputing.

Forward FLOPs, a multiply-add being 2 FLOPs, with d = d_model, F = ffn_dim, V = vocab_size,
r = kv heads / heads (1 for multi-head attention, 1/H multi-query), g = 2 FFN matrices (relu,
gelu) or 3 (the gated swiglu, geglu), B rows, T = target (decoder / MLM input) length and S =
source length, on the padded batch shapes (the work the step really does, padding included):

* per token of a self-attention layer: the q and out projections 2·2d², the k and v
  projections 2·2d²·r, the FFN g·2dF, and the attention scores QKᵀ plus the weighted sum PV,
  2·2·L·d over the L keys of its row (grouped-query attention shares keys, not dot products).
  The full L×L score matrix is computed (causal and padding masks are applied to it, not
  skipped), so causal attention is *not* halved;
* per target token of an encoder-decoder decoder layer, cross-attention adds q and out
  projections 2·2d² and scores + weighted sum 2·2·S·d over the source, and the k, v
  projections of the encoder output cost 2·2d²·r per *source* token (recomputed in every layer);
* the vocabulary projection, 2·d·V per output position (all T positions, MLM included; tied or
  not, it is a d×V matmul).

So, with N encoder and M decoder layers and P = 4d²(1 + r) + 2g·dF per token:

    encoder:  N · B·L_enc · (P + 4·L_enc·d)              L_enc = S (encdec) or T (encoder)
    decoder:  M · B·T · (P + 4·T·d)
    cross:    M · (B·T · (4d² + 4·S·d) + B·S · 4d²·r)   encdec only
    output:   2 · B·T · d·V
    streams:  the stream schemes' connections (hyper_connections, mhc): scale/stream_flops.py
    train step = 3 × (encoder + decoder + cross + output + streams)

(r = 1, g = 2: 8d² + 4dF, the papers' layer.)

Not counted (each O(d) per token or smaller, against the O(d² + dF) matmuls): embedding
lookups, positions (rotary ones included), norms (qk_norm's too), softmax, biases, activations
and the gate's product, dropout, residual scaling, DLCL's
weighted layer combination (2·l·d per token before layer l), the loss and the optimizer update.
Those are a few percent of XLA's own count at small widths and vanish as d grows.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp

from deepnet_jax.model import schemes
from deepnet_jax.model.config import GATED_ACTIVATIONS, TransformerConfig
from deepnet_jax.scale import stream_flops

# Dense (no 2:4 sparsity) bf16 peak FLOP/s per device, from the vendors' datasheets. TPU kinds
# are matched exactly, as ``jax.Device.device_kind`` spells them ("TPU v5 lite" is v5e, "TPU v5"
# is v5p, "TPU v6 lite" is v6e / Trillium); peaks from the Google Cloud TPU system architecture
# pages (cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e): v4 275 TFLOP/s, v5e 197, v5p 459,
# v6e 918 per chip.
TPU_PEAK_BF16_FLOPS = {
    "tpu v4": 275e12,
    "tpu v5 lite": 197e12,
    "tpu v5e": 197e12,
    "tpu v5": 459e12,
    "tpu v5p": 459e12,
    "tpu v6 lite": 918e12,
    "tpu v6e": 918e12,
}
# GPU kinds are matched by substring, first hit wins (so "H100 PCIe" before "H100"). NVIDIA's
# datasheets give bf16 tensor-core peaks *with* sparsity; the dense figure is half of it:
# H100 SXM 1,979 → 989 TFLOP/s, H100 PCIe 1,513 → 756, H200 SXM 1,979 → 989 (GH200 likewise);
# A100 (SXM and PCIe) 312 dense.
GPU_PEAK_BF16_FLOPS = (
    ("h100 pcie", 756e12),
    ("h100", 989e12),
    ("h200", 989e12),
    ("a100", 312e12),
)


def _layer_shapes(model_config: TransformerConfig) -> tuple[int, int, int]:
    """(d_model, ffn_dim, vocab_size) of a model config."""
    return model_config.d_model, model_config.ffn_dim, model_config.vocab_size


def _kv_ratio(model_config: TransformerConfig) -> float:
    """r: key/value heads over query heads (``num_kv_heads``, 0 meaning all)."""
    return (model_config.num_kv_heads or model_config.num_heads) / model_config.num_heads


def _ffn_matrices(model_config: TransformerConfig) -> int:
    """g: the FFN's d×F matrices, 3 for a gated FFN (gate, fc1, fc2), else 2."""
    return 3 if model_config.activation in GATED_ACTIVATIONS else 2


def _layer_matmul_flops(model_config: TransformerConfig) -> float:
    """P: a self-attention layer's projection and FFN FLOPs per token, 4d²(1 + r) + 2g·dF."""
    d, f, _ = _layer_shapes(model_config)
    return 4 * d * d * (1 + _kv_ratio(model_config)) + 2 * _ffn_matrices(model_config) * d * f


def matmul_params(model_config: TransformerConfig) -> int:
    """Number of weights that enter matrix multiplications: Σ of the projection kernels.

    Per encoder layer 2d²(1 + r) + g·dF (attention q, out and k, v at r = kv heads / heads;
    the FFN's g matrices), per decoder layer the same plus 2d²(1 + r) for cross-attention in
    ``encdec``, and d·V for the vocabulary projection (the embedding table itself when
    embeddings are tied), and the stream schemes' connection weights
    (``stream_flops.connection_params``: HC's (A_m A_r) and dynamic W's, mHC's φ, every
    sublayer's and each stack's end). Embedding lookups, biases and norms are excluded.
    For a decoder-only model, forward FLOPs ≈ 2 · matmul_params · tokens + attention scores.

    ``model_config``: a ``TransformerConfig`` (a run's ``RunConfig.model``;
    ``TransformerConfig.from_config`` types a ``deepnet_jax.default_config()``).
    """
    d, f, v = _layer_shapes(model_config)
    attn = round(2 * d * d * (1 + _kv_ratio(model_config)))
    layer = attn + _ffn_matrices(model_config) * d * f
    cross = attn if model_config.arch == "encdec" else 0
    return (
        model_config.num_encoder_layers * layer
        + model_config.num_decoder_layers * (layer + cross)
        + d * v
        + stream_flops.total_connection_params(model_config)
    )


def _shape2(batch_shapes: Mapping[str, Sequence[int]], key: str) -> tuple[int, int]:
    shape = tuple(batch_shapes[key])
    if len(shape) != 2:
        raise ValueError(f"batch[{key!r}] must be [batch, length], got shape {shape}")
    return shape[0], shape[1]


def sequence_shapes(
    model_config: TransformerConfig, batch_shapes: Mapping[str, Sequence[int]]
) -> tuple[int, int, int]:
    """(B, T, S) of a batch: rows, target (decoder / MLM input) length, source length (0 unless
    ``encdec``).

    ``batch_shapes`` maps the trainer's batch keys to shapes: ``inputs`` [B, T] (decoder input
    for ``decoder``/``encdec``, masked tokens for ``encoder``) for every arch, ``src`` [B, S] for
    ``encdec``; other keys (``targets``, ``weights``, packing's ``segment_ids``/``positions``…)
    are allowed, and ``targets`` must match ``inputs``. Raises ``ValueError`` on a missing key or
    an inconsistent shape.
    """
    arch = model_config.arch
    if arch not in ("encoder", "decoder", "encdec"):
        raise ValueError(f"model.arch={arch!r} is not one of 'encoder', 'decoder', 'encdec'")
    needed = ("src", "inputs") if arch == "encdec" else ("inputs",)
    missing = [k for k in needed if k not in batch_shapes]
    if missing:
        raise ValueError(
            f"batch shapes lack {' and '.join(missing)} for model.arch={arch!r}: batches carry "
            f"{' and '.join(needed)} (and targets), got keys {sorted(batch_shapes)}"
        )
    B, T = _shape2(batch_shapes, "inputs")
    if "targets" in batch_shapes and tuple(batch_shapes["targets"]) != (B, T):
        raise ValueError(
            f"batch['targets'] has shape {tuple(batch_shapes['targets'])}, "
            f"batch['inputs'] {(B, T)}: they must match"
        )
    if arch != "encdec":
        return B, T, 0
    B_src, S = _shape2(batch_shapes, "src")
    if B_src != B:
        raise ValueError(f"batch['src'] has {B_src} rows but batch['inputs'] has {B}")
    return B, T, S


def forward_flops(
    model_config: TransformerConfig, batch_shapes: Mapping[str, Sequence[int]]
) -> float:
    """Matmul FLOPs of one forward pass of ``model_config`` on a batch of these shapes.

    The formula is the module docstring's (encoder + decoder + cross + output + streams); see
    ``sequence_shapes`` for the keys ``batch_shapes`` needs.
    """
    B, T, S = sequence_shapes(model_config, batch_shapes)
    d, _, v = _layer_shapes(model_config)
    per_token = _layer_matmul_flops(model_config)

    def self_attention_layers(layers: int, rows: int, length: int) -> float:
        return layers * rows * length * (per_token + 4 * length * d)

    n_enc, n_dec = model_config.num_encoder_layers, model_config.num_decoder_layers
    if model_config.arch == "encoder":
        total = self_attention_layers(n_enc, B, T)
    elif model_config.arch == "decoder":
        total = self_attention_layers(n_dec, B, T)
    else:
        cross = B * T * (4 * d * d + 4 * S * d) + B * S * 4 * d * d * _kv_ratio(model_config)
        total = self_attention_layers(n_enc, B, S) + self_attention_layers(n_dec, B, T)
        total += n_dec * cross
    total += stream_flops.forward_flops(model_config, B, T, S)
    return float(total + 2 * B * T * d * v)


def train_flops_per_step(
    model_config: TransformerConfig, batch_shapes: Mapping[str, Sequence[int]]
) -> float:
    """Model FLOPs of one training step on one batch: 3 × ``forward_flops`` (forward, and a
    backward pass computing the input and the weight gradient of every matmul); remat's
    recomputation is not counted.

    ``batch_shapes`` is e.g. ``{name: array.shape for name, array in batch.items()}`` of the
    global batch (``src`` [B, S] for encdec, ``inputs``/``targets`` [B, T]); divide by the device
    count for a per-device figure.
    """
    return 3.0 * forward_flops(model_config, batch_shapes)


def attention_flops(
    model_config: TransformerConfig, batch_shapes: Mapping[str, Sequence[int]]
) -> float:
    """The attention-score part of ``forward_flops``: QKᵀ and PV, 4·L·d per query token of
    every self- and cross-attention layer (L its keys)."""
    B, T, S = sequence_shapes(model_config, batch_shapes)
    d = model_config.d_model
    n_enc, n_dec = model_config.num_encoder_layers, model_config.num_decoder_layers
    if model_config.arch == "encoder":
        return float(n_enc * B * T * 4 * T * d)
    total = n_dec * B * T * 4 * T * d
    if model_config.arch == "encdec":
        total += n_enc * B * S * 4 * S * d + n_dec * B * T * 4 * S * d
    return float(total)


def remat_flops_ratio(
    model_config: TransformerConfig, batch_shapes: Mapping[str, Sequence[int]]
) -> float | None:
    """The matmul FLOPs a step runs, rematerialization included, over ``train_flops_per_step``:
    1 + (recomputed forward matmuls) ÷ (3 × forward), by ``model.remat_policy``:

    * ``none``: nothing recomputed, 1;
    * ``dots`` (``dots_with_no_batch_dims_saveable``): projection and FFN outputs are kept, the
      attention scores and PV (batched dots) are recomputed: ``attention_flops``, and the stream
      schemes' mixes by a matrix per position (``stream_flops.batched_forward_flops``);
    * ``full``: every layer's forward is recomputed (``forward_flops`` less the vocabulary
      projection and DeepSeek-V4's HyperHead, which are outside the layers), but for the
      pre-norm schemes (pre_ln, subln: x + F(LN(x))) the FFN's output projection, 2·d·F per
      token: its output only joins the residual sum, which the backward pass does not need (jax
      drops that recomputation);
    * a nested scan (``scan_group_size`` ≠ 0) recomputes each group's whole forward once more,
      before its layers' own policy applies: + the layers' forward;
    * ``qkv_fc1``, and the DLCL schemes (whose layer combination is a matmul flops.py leaves
      out): None, not tabulated.

    The rules were read off the lowered programs (``hlo_census.matmul_flops``) of 4-layer
    decoders of every non-DLCL scheme under each policy, flat and grouped;
    ``tests/test_plan_targets.py`` checks them exactly on decoders, encoder-decoders and an
    encoder, ``tests/test_stream_flops.py`` for the stream schemes.
    """
    scheme = schemes.get(model_config.scheme)
    if not scheme.scannable:
        return None
    forward = forward_flops(model_config, batch_shapes)
    B, T, S = sequence_shapes(model_config, batch_shapes)
    d, f = model_config.d_model, model_config.ffn_dim
    layers = forward - 2.0 * B * T * d * model_config.vocab_size
    layers -= stream_flops.end_flops(model_config, B, T, S)
    tokens = model_config.num_decoder_layers * B * T
    tokens += model_config.num_encoder_layers * (S if model_config.arch == "encdec" else T) * B
    kept = 2.0 * d * f * tokens if scheme.branch_output_kept else 0.0
    batched = stream_flops.batched_forward_flops(model_config, B, T, S)
    recompute = {
        "none": 0.0,
        "dots": attention_flops(model_config, batch_shapes) + batched,
        "full": layers - kept,
    }.get(model_config.remat_policy)
    if recompute is None:
        return None
    if getattr(model_config, "scan_layers", True) and getattr(model_config, "scan_group_size", 0):
        recompute += layers
    return 1.0 + recompute / (3.0 * forward)


def measured_matmul_flops_per_s(
    dtype: jnp.dtype | type = jnp.float32, size: int = 2048, repeats: int = 3
) -> float:
    """FLOP/s of a jitted [size, size] × [size, size] matmul (2·size³ FLOPs) on the default
    device: best of ``repeats`` timed calls after one warm-up (compile) call.

    At the defaults this takes ~0.5 s on two CPU cores (~0.1 s per 17 GFLOP call).
    """
    if size < 1 or repeats < 1:
        raise ValueError(f"size={size} and repeats={repeats} must be >= 1")
    a = jnp.ones((size, size), dtype)
    b = jnp.full((size, size), 0.5, dtype)
    matmul = jax.jit(jnp.dot)
    matmul(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best


def table_peak_flops(platform: str, device_kind: str) -> float | None:
    """The datasheet dense bf16 peak of a TPU/GPU ``device_kind``, or None if not tabulated."""
    kind = device_kind.lower()
    if platform == "tpu":
        return TPU_PEAK_BF16_FLOPS.get(kind)
    if platform in ("gpu", "cuda", "rocm"):
        for name, peak in GPU_PEAK_BF16_FLOPS:
            if name in kind:
                return peak
    return None


def peak_flops_per_device(override: float = 0.0) -> tuple[float, str]:
    """(peak FLOP/s of one device, where the figure comes from).

    ``override`` > 0 wins: ``(override, "config")``. Else a tabulated TPU/GPU kind's datasheet
    dense bf16 peak: ``(peak, "table:<device_kind>")``. Else (CPU, unknown kinds) the float32
    matmul throughput measured now: ``(flop_s, "measured fp32 matmul")``.
    """
    if override > 0:
        return float(override), "config"
    device = jax.local_devices()[0]
    peak = table_peak_flops(device.platform, device.device_kind)
    if peak is not None:
        return peak, f"table:{device.device_kind}"
    return measured_matmul_flops_per_s(), "measured fp32 matmul"
