"""Matmul FLOPs of the stream schemes' connections (``hyper_connections``, ``mhc``:
:mod:`deepnet_jax.model.schemes.hyper`), counted as the model computes them; the rest of the
model's count is :mod:`deepnet_jax.scale.flops`, which adds these.

Forward FLOPs per token, a multiply-add being 2 FLOPs, with n = ``hc_rate`` and D = d_model.
Every sublayer (self-attention, cross-attention, FFN) has its own connection, over its input
streams H [B, T, n, D]:

* HC static: (A_m A_r)ᵀH, an [n, n+1] matrix against the n streams: 2n(n+1)D;
* HC dynamic: that with the per-position (A_m A_r), plus the projections of the normed streams
  H̄W (W_m W_r) [D, n+1] and H̄W_β [D], each per stream: 2n(n+1)D + 2n(n+1)D + 2nD = 2nD(2n+3);
* mHC: vec(x)·φ, [nD] against [nD, n² + 2n] (φ_pre, φ_post, φ_res): 2nD(n² + 2n). Its mixes
  H_pre·x (2nD) and H_res·x (2n²D) are n broadcast products summed (``hyper.combine``, so
  that XLA fuses them with their neighbours), not matmuls.

Where each stack ends, per token: the paper's sum of the streams is no matmul (0); DeepSeek-V4's
HyperHead (``mhc_variant="deepseek_v4"``) projects vec(x)·φ [nD, n]: 2n²D (its Σ wᵢxᵢ is a
``hyper.combine``).

Not counted, as flops.py leaves out the O(D) work: Bᵀ·G and H_postᵀ·G (a broadcast product,
n·D multiplies), mHC's mixes (O(n²D) multiplies, elementwise), the norms (N_hc, mHC's RMSNorm),
tanh, σ, the copy into n streams, the sum at the end, and Sinkhorn-Knopp (per iteration a column
and a row sum and division of the n×n matrix: reductions, no matmul). The backward pass is
2 × forward, as for every matmul here: each connection matmul takes the gradient of both
operands (the streams and a weight or a mixing matrix), so a training step counts 3 × these too.
"""

from __future__ import annotations

from deepnet_jax.model import constants, schemes
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.schemes.hyper import MHC, HyperConnections


def connection_flops(model_config: TransformerConfig) -> tuple[int, int]:
    """(forward matmul FLOPs per token of one sublayer's connection, per token of a stack's end)
    by the module docstring's rules; (0, 0) for a one-stream scheme."""
    scheme = schemes.get(model_config.scheme)
    n, d = model_config.hc_rate, model_config.d_model
    if isinstance(scheme, HyperConnections):
        return (2 * n * d * (2 * n + 3) if model_config.hc_dynamic else 2 * n * (n + 1) * d), 0
    if isinstance(scheme, MHC):
        head = 2 * n * n * d if model_config.mhc_variant == "deepseek_v4" else 0
        return 2 * n * d * (n * n + 2 * n), head
    return 0, 0


def connection_params(model_config: TransformerConfig) -> tuple[int, int]:
    """(weights that enter one sublayer's connection matmuls, those of a stack's end) by the
    module docstring's rules: static HC's [n, n+1] (A_m A_r); dynamic HC adds W (W_m W_r)
    [D, n+1] and W_β [D]; mHC's φ [n, D, n² + 2n]; DeepSeek-V4's HyperHead φ [n, D, n] at the
    end. (0, 0) for a one-stream scheme. Each weight is one multiply-add per token, so the
    forward FLOPs are 2 × these per token wherever the matmul has no per-position operand."""
    scheme = schemes.get(model_config.scheme)
    n, d = model_config.hc_rate, model_config.d_model
    if isinstance(scheme, HyperConnections):
        return n * (n + 1) + (d * (n + 1) + d if model_config.hc_dynamic else 0), 0
    if isinstance(scheme, MHC):
        head = n * d * n if model_config.mhc_variant == "deepseek_v4" else 0
        return n * d * (n * n + 2 * n), head
    return 0, 0


def total_connection_params(model_config: TransformerConfig) -> int:
    """:func:`connection_params` over the model: every sublayer of every layer and each stack's
    end (``flops.matmul_params`` adds these)."""
    sublayer, end = connection_params(model_config)
    return round(_over_sides(model_config, 1, 1, 1, sublayer, end))


def batched_connection_flops(model_config: TransformerConfig) -> int:
    """The part of a sublayer's connection FLOPs per token whose matmuls have batch dimensions
    (a mixing matrix per position: dynamic HC's (A_m A_r)ᵀH), which ``remat_policy="dots"``
    (``dots_with_no_batch_dims_saveable``) recomputes; the projections against a weight (and
    static HC's mix) have none and are saved, and mHC's mixes are no matmuls."""
    scheme = schemes.get(model_config.scheme)
    n, d = model_config.hc_rate, model_config.d_model
    if isinstance(scheme, HyperConnections):
        return 2 * n * (n + 1) * d if model_config.hc_dynamic else 0
    return 0


def _over_sides(
    model_config: TransformerConfig,
    B: int,
    T: int,
    S: int,
    sublayer: int,
    end: int = 0,
    layer: int = 0,
) -> float:
    """Σ over the sides with layers of (layers · (sublayers per layer · ``sublayer`` + ``layer``)
    + ``end``) · the side's tokens: B·S for an encoder-decoder's encoder, else B·T; the sublayers
    per layer ``constants.residual_branches`` (2, 3 in an encoder-decoder's decoder)."""
    c = model_config
    sides = (
        ("encoder", c.num_encoder_layers, S if c.arch == "encdec" else T),
        ("decoder", c.num_decoder_layers, T),
    )
    return float(
        sum(
            B
            * length
            * (layers * (constants.residual_branches(c.arch, side, 1) * sublayer + layer) + end)
            for side, layers, length in sides
            if layers
        )
    )


def forward_flops(model_config: TransformerConfig, B: int, T: int, S: int) -> float:
    """The connections' forward matmul FLOPs on a batch of B rows, T target (decoder / MLM
    input) and S source tokens: every sublayer's connection and each stack's end."""
    sublayer, end = connection_flops(model_config)
    return _over_sides(model_config, B, T, S, sublayer, end)


def end_flops(model_config: TransformerConfig, B: int, T: int, S: int) -> float:
    """The part of :func:`forward_flops` at the stacks' ends, outside the (rematerialized)
    layers: DeepSeek-V4's HyperHead."""
    return _over_sides(model_config, B, T, S, 0, connection_flops(model_config)[1])


def batched_forward_flops(model_config: TransformerConfig, B: int, T: int, S: int) -> float:
    """The part of :func:`forward_flops` in matmuls with batch dimensions: every sublayer's
    :func:`batched_connection_flops`."""
    return _over_sides(model_config, B, T, S, batched_connection_flops(model_config))
