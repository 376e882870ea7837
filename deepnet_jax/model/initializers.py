"""Initializers with the papers' gains built in (DeepNet Section 4.3 and
Figure 2b; Magneto Section 3.2).

Xavier-normal with gain g draws from N(0, g²·2/(fan_in + fan_out)). ``variance_scaling``'s scale
is a *variance*, so the gain enters squared. For multi-dimensional kernels (e.g. a query kernel
[d_model, heads, head_dim]) ``in_axis``/``out_axis`` name the fan-in and fan-out axes so the fans
are those of the equivalent 2-D matrix [d_model, heads·head_dim].

``model.init="torchscale"`` reproduces torchscale 0.3.0 instead: its projections keep PyTorch's
``nn.Linear`` default, weight and bias both U(−g/√fan_in, g/√fan_in) once torchscale has
multiplied them by the gain g (:func:`torchscale_uniform`), and DeepNorm's encoder-decoder
encoder gain is 1.15·(N⁴M)^(-1/16) (:func:`torchscale_deepnorm_encoder_gain`).
``model.init="torchscale_bert"`` reproduces torchscale's ``bert_init=True``: every ``nn.Linear``
and ``nn.Embedding`` weight N(0, 0.02²) (:data:`BERT_STD`), biases zero, padding rows zeroed,
and then the same gains (torchscale multiplies or divides the re-drawn weights by them
afterwards).

``model.init="fairseq"`` reproduces fairseq's Transformer (``fairseq.modules.MultiheadAttention``
and ``TransformerEncoderLayer``/``DecoderLayer``, the code base of DeepNet's and Magneto's
baselines): q/k/v weights Xavier-*uniform* with gain 1/√2 (:data:`FAIRSEQ_QKV_GAIN`), their biases
PyTorch's default U(±1/√fan_in); the attention output weight Xavier-uniform with gain 1, its bias
zero; the FFN's fc1/fc2 PyTorch's ``nn.Linear`` default, weight and bias U(±1/√fan_in)
(:func:`fairseq_initializers`); embeddings N(0, d^-1/2) with the padding row zeroed. A scheme's
gain (DeepNorm's β, Sub-LN's γ) multiplies the weights, not the biases.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp

Initializer = jax.nn.initializers.Initializer

TORCHSCALE_INITS = ("torchscale", "torchscale_bert")  # model.init values that follow torchscale
ZERO_PADDING_INITS = ("torchscale", "torchscale_bert", "fairseq")  # the padding row zeroed
FAIRSEQ_QKV_GAIN = 2**-0.5  # fairseq MultiheadAttention.reset_parameters (qkv_same_dim)
PROJECTION_ROLES = ("linear", "attn_in", "attn_out")  # what fairseq initializes differently
BERT_STD = 0.02  # torchscale's init_bert_params: N(0, 0.02²) for Linear and Embedding weights


def xavier_normal(
    gain: float = 1.0,
    in_axis: int | Sequence[int] = -2,
    out_axis: int | Sequence[int] = -1,
) -> Initializer:
    """Xavier-normal initializer with gain ``gain``: std = gain·√(2 / (fan_in + fan_out))."""
    if not gain > 0:
        raise ValueError(f"gain={gain!r} must be > 0")
    return jax.nn.initializers.variance_scaling(
        gain**2, "fan_avg", "normal", in_axis=in_axis, out_axis=out_axis
    )


def sliced_xavier_normal(
    gains: Sequence[float],
    slice_axis: int,
    in_axis: int | Sequence[int],
    out_axis: int | Sequence[int],
) -> Initializer:
    """A fused kernel of ``len(gains)`` stacked projections along ``slice_axis`` (e.g. a fused
    QKV kernel [d_model, 3, heads, head_dim]): slice i is Xavier-normal with gain ``gains[i]``
    and the fans of one slice, not those of the fused matrix.
    ``in_axis``/``out_axis`` index the shape *without* the slice axis."""
    return stacked_slices([xavier_normal(g, in_axis, out_axis) for g in gains], slice_axis)


def stacked_slices(inits: Sequence[Initializer], slice_axis: int) -> Initializer:
    """An array of ``len(inits)`` slices along ``slice_axis``, slice i drawn by ``inits[i]``
    (with its own key) in the shape without that axis."""

    def init(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
        shape = tuple(shape)
        axis = slice_axis % len(shape)
        if shape[axis] != len(inits):
            raise ValueError(f"axis {slice_axis} of {shape} must have {len(inits)} slices")
        one = shape[:axis] + shape[axis + 1 :]  # the shape of one slice
        keys = jax.random.split(key, len(inits))
        parts = [f(k, one, dtype) for f, k in zip(inits, keys, strict=True)]
        return jnp.stack(parts, axis=axis)

    return init


def embedding_normal(d_model: int, init: str = "paper") -> Initializer:
    """N(0, d_model^-1/2) for token embeddings, learned positions and output projections
    (fairseq's choice); N(0, 0.02²) under ``init="torchscale_bert"``."""
    return jax.nn.initializers.normal(
        stddev=BERT_STD if init == "torchscale_bert" else d_model**-0.5
    )


def token_embedding_init(
    d_model: int, init: str, pad_id: int, tied_output: bool = False
) -> Initializer:
    """A token table [vocab, d_model]: :func:`embedding_normal`, and under a torchscale or
    fairseq init with row ``pad_id`` zeroed (torchscale's ``TextEmbedding`` and fairseq's
    ``Embedding`` zero their padding row, as does ``bert_init``) — except under
    ``"torchscale_bert"`` for a table that is also the output projection (``tied_output``):
    ``bert_init`` visits the output ``nn.Linear`` after the ``nn.Embedding`` and draws the
    shared weight again, padding row included."""
    normal = embedding_normal(d_model, init)
    if init not in ZERO_PADDING_INITS or (init == "torchscale_bert" and tied_output):
        return normal

    def zero_padding_row(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
        return normal(key, shape, dtype).at[pad_id].set(0)

    return zero_padding_row


def torchscale_uniform(gain: float, fan_in: int) -> Initializer:
    """U(−a, a) with a = gain/√fan_in: PyTorch's ``nn.Linear`` default for a weight or bias
    (kaiming-uniform with a=√5, i.e. bound 1/√fan_in) times torchscale's gain."""
    if not gain > 0:
        raise ValueError(f"gain={gain!r} must be > 0")
    bound = gain / math.sqrt(fan_in)

    def init(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
        return jax.random.uniform(key, tuple(shape), dtype, -bound, bound)

    return init


def xavier_uniform(
    gain: float,
    in_axis: int | Sequence[int] = -2,
    out_axis: int | Sequence[int] = -1,
) -> Initializer:
    """Xavier-uniform with gain ``gain``: U(±gain·√(6 / (fan_in + fan_out))), the variance of
    :func:`xavier_normal` with the same gain."""
    if not gain > 0:
        raise ValueError(f"gain={gain!r} must be > 0")
    return jax.nn.initializers.variance_scaling(
        gain**2, "fan_avg", "uniform", in_axis=in_axis, out_axis=out_axis
    )


def fairseq_initializers(
    role: str,
    gains: Sequence[float],
    n_in: int,
    n_out: int,
    fan_in: int,
) -> tuple[Initializer, Initializer]:
    """(kernel, bias) initializers of fairseq's Transformer for a projection whose kernel has
    ``n_in`` input axes and ``n_out`` output axes: ``role`` "attn_in" (q/k/v: Xavier-uniform
    with gain ``FAIRSEQ_QKV_GAIN``·g, bias U(±1/√fan_in)), "attn_out" (Xavier-uniform with
    gain g, bias zero) or "linear" (the FFN: weight U(±g/√fan_in), bias U(±1/√fan_in)).
    ``gains`` holds one gain g, or one per slice of a fused kernel whose first output axis
    stacks the slices (each with the fans of one slice)."""
    if role not in PROJECTION_ROLES:
        raise ValueError(f"role={role!r}; allowed values are {', '.join(PROJECTION_ROLES)}")
    fused = len(gains) > 1
    in_axis = tuple(range(n_in))
    out_axis = tuple(range(n_in, n_in + n_out - (1 if fused else 0)))
    if role == "linear":
        kernels = [torchscale_uniform(g, fan_in) for g in gains]
    else:
        scale = FAIRSEQ_QKV_GAIN if role == "attn_in" else 1.0
        kernels = [xavier_uniform(scale * g, in_axis, out_axis) for g in gains]
    kernel = stacked_slices(kernels, n_in) if fused else kernels[0]
    bias = jax.nn.initializers.zeros if role == "attn_out" else torchscale_uniform(1.0, fan_in)
    return kernel, bias


def torchscale_bert_normal(gain: float) -> Initializer:
    """N(0, (0.02·gain)²): torchscale's ``bert_init`` weight, then scaled by its gain."""
    if not gain > 0:
        raise ValueError(f"gain={gain!r} must be > 0")
    return jax.nn.initializers.normal(stddev=BERT_STD * gain)


def torchscale_deepnorm_encoder_gain(num_encoder_layers: int, num_decoder_layers: int) -> float:
    """torchscale 0.3.0's gain of DeepNorm's encoder-decoder encoder: it divides the weights by
    (N⁴M)^(1/16)/1.15, a gain 1.15·(N⁴M)^(-1/16) (the paper's β is 0.87·(N⁴M)^(-1/16))."""
    return 1.15 * (num_encoder_layers**4 * num_decoder_layers) ** (-1 / 16)


def sinusoidal_table(num_positions: int, d_model: int) -> jnp.ndarray:
    """Fixed sinusoidal position table [num_positions, d_model] (fairseq layout).

    The first half of the features is sin(p·ω_i), the second half cos(p·ω_i), with
    ω_i = 10000^(-i/(d/2 - 1)), i = 0 … d/2-1; positions p start at 0.
    """
    half = d_model // 2
    step = jnp.log(10000.0) / max(half - 1, 1)
    freqs = jnp.exp(jnp.arange(half, dtype=jnp.float32) * -step)
    angles = jnp.arange(num_positions, dtype=jnp.float32)[:, None] * freqs[None, :]
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)
