"""Multi-head scaled dot-product attention (self, causal self and cross), with its decoding
cache, the fused q/k/v projection and the three softmax(q·kᵀ/√K)·v implementations; and the
conversion of parameters between the fused and the separate q/k/v layouts.

Parameters carry logical axis names and are cast to ``config.dtype`` for compute like every
sublayer's (:mod:`deepnet_jax.model.sublayers`); the softmax runs in float32.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from deepnet_jax.model import fused_attention, remat, rotary, splash_attention
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.dropout import dropout
from deepnet_jax.model.masks import AttentionMask, dense
from deepnet_jax.model.norms import normalization, record_input_norm
from deepnet_jax.model.sublayers import Projection


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention (self, causal self or cross).

    Inputs: queries ``x_q`` [B, T, D], keys/values ``x_kv`` [B, S, D] and a ``mask``: a boolean
    array broadcastable to [B, H, T, S] (True = may attend) or an
    :class:`~deepnet_jax.model.masks.AttentionMask` (that array, and where it has one its native
    form: causal order and key lengths). Output [B, T, D].

    Keys and values have ``config.kv_heads`` heads N (``num_kv_heads``; logical axis
    ``kv_heads``): query head h attends with kv head h // (H/N) (grouped-query attention,
    Ainslie et al. 2023; N = 1 multi-query, N = H multi-head), and a decoding cache holds N
    heads. ``config.qk_norm`` normalizes q and k per head before the dot product
    (``q_norm``/``k_norm``, scale [K]); ``rotary`` (self-attention under
    ``positions="rope"``) then rotates them by ``positions``, the queries' positions [B|1, T]
    (:mod:`deepnet_jax.model.rotary`; the keys computed in the call share them).

    ``dropout_key`` seeds the attention-probability dropout (required unless deterministic).

    ``value_gain`` is the Xavier gain of ``v_proj`` and ``out_proj`` (β for DeepNorm, γ for
    Sub-LN); ``q_proj``/``k_proj`` keep gain 1. ``stds`` = (σ_qk, σ_vo) replaces that init by
    N(0, σ²) kernels (DeepScaleLM's; σ_vo may be a traced per-layer value). ``inner_norm``
    adds Sub-LN's ``inner_attn_ln`` on the concatenated heads before ``out_proj`` (Magneto
    eq. 2).

    ``fuse_qkv`` (self-attention only: ``x_kv`` must be ``x_q``) computes q, k and v with one
    ``qkv_proj`` kernel [D, 3, H, K] (slices q, k, v; fans per slice, only v scaled) instead of
    three; :func:`fuse_qkv_params` converts parameters between the two layouts.
    ``config.attention_impl`` picks the softmax(q·kᵀ/√K)·v computation: the einsum reference
    (with attention dropout), ``jax.nn.dot_product_attention`` (``xla`` or ``cudnn``), which
    takes the mask natively or as a bias (``config.attention_masks``), or Pallas' TPU splash
    attention (``splash``, :mod:`deepnet_jax.model.splash_attention`).
    """

    config: TransformerConfig
    value_gain: float = 1.0
    inner_norm: bool = False
    deterministic: bool = True
    fuse_qkv: bool = False
    rotary: bool = False
    stds: tuple[Any, Any] | None = None

    @nn.compact
    def __call__(
        self,
        x_q: jax.Array,
        x_kv: jax.Array | None,
        mask: AttentionMask | jax.Array | None,
        dropout_key: jax.Array | None = None,
        *,
        cache: dict[str, jax.Array] | None = None,
        cache_index: jax.Array | None = None,
        positions: jax.Array | None = None,
    ) -> jax.Array | tuple[jax.Array, dict[str, jax.Array]]:
        """Attend from ``x_q`` to ``x_kv``; with a ``cache``, also return the updated cache.

        Cached decoding (``cache`` = {"k", "v"}, each [B, S_max, N, K]) has three modes:

        * self-attention step (``cache_index`` given): the keys/values of ``x_kv`` [B, T, D]
          are written at positions ``cache_index`` … ``cache_index + T − 1`` and the queries
          attend over the whole cache (``mask`` [B|1, 1, T, S_max] hides future slots);
        * cross-attention prefill (``x_kv`` given, no ``cache_index``): the keys/values of the
          encoder output replace the cache;
        * cross-attention step (``x_kv`` None): the cached keys/values are used as they are.
        """
        if self.rotary and positions is None:
            raise ValueError("rotary attention needs the queries' positions")
        q_BTHK, k_BSHK, v_BSHK = self._projections(x_q, x_kv, positions)
        k_BSHK, v_BSHK = self._update_cache(k_BSHK, v_BSHK, cache, cache_index)
        out_BTHK = self._attention(q_BTHK, k_BSHK, v_BSHK, mask, dropout_key)
        out_BTD = self._output(out_BTHK)
        if cache is None:
            return out_BTD
        return out_BTD, {"k": k_BSHK, "v": v_BSHK}

    def _prescaled(self) -> bool:
        """Whether the queries leave their projection already scaled by 1/√K: for the splash
        kernel, which takes q·kᵀ unscaled, and only where nothing nonlinear (``qk_norm``) comes
        between the projection and the attention. The matmul's output fusion then scales q (no
        kernel of its own forward), and the remat policies save the scaled q, which backward
        hands to the kernel as saved."""
        return self.config.attention_impl == "splash" and not self.config.qk_norm

    def _in_projection(self, name: str, gain: float) -> Projection:
        """``q_proj`` [D] → [H, K] (scaled by 1/√K where :meth:`_prescaled`), or
        ``k_proj``/``v_proj`` [D] → [N, K] (N kv heads)."""
        c = self.config
        queries = name == "q_proj"
        heads, axis = (c.num_heads, "heads") if queries else (c.kv_heads, "kv_heads")
        return Projection(
            (c.d_model,),
            (heads, c.head_dim),
            ("embed",),
            (axis, "kv"),
            c,
            gain,
            tag=name,
            role="attn_in",
            std=self._std(name),
            out_scales=(c.head_dim**-0.5,) if queries and self._prescaled() else None,
            name=name,
        )

    def _projections(
        self, x_q: jax.Array, x_kv: jax.Array | None, positions: jax.Array | None
    ) -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
        """(q [B, T, H, K], k [B, S, N, K], v [B, S, N, K]): q and k normalized (qk_norm) and
        rotated (rotary); k and v None without ``x_kv`` (the cache holds them)."""
        c = self.config
        D, H, K = c.d_model, c.num_heads, c.head_dim
        k_BSHK = v_BSHK = None
        if self.fuse_qkv:
            if x_kv is not x_q:
                raise ValueError("fuse_qkv is for self-attention: x_kv must be x_q")
            qkv_BT3HK = Projection(
                (D,),
                (3, H, K),
                ("embed",),
                ("qkv", "heads", "kv"),
                c,
                tag="qkv_proj",
                slice_gains=(1.0, 1.0, self.value_gain),
                role="attn_in",
                out_scales=(K**-0.5, 1.0, 1.0) if self._prescaled() else None,
                name="qkv_proj",
            )(x_q)
            q_BTHK, k_BSHK, v_BSHK = (qkv_BT3HK[:, :, i] for i in range(3))
            k_BSHK = self._position_keys(k_BSHK, positions)
        else:
            q_BTHK = self._in_projection("q_proj", 1.0)(x_q)
        q_BTHK = self._position(self._qk_norm("q_norm", q_BTHK), positions)
        if x_kv is not None and not self.fuse_qkv:
            k_BSHK = self._position_keys(self._in_projection("k_proj", 1.0)(x_kv), positions)
            v_BSHK = self._in_projection("v_proj", self.value_gain)(x_kv)
        return q_BTHK, k_BSHK, v_BSHK

    def _update_cache(
        self,
        k_BSHK: jax.Array | None,
        v_BSHK: jax.Array | None,
        cache: dict[str, jax.Array] | None,
        cache_index: jax.Array | None,
    ) -> tuple[jax.Array, jax.Array]:
        """The keys and values attended to, in the cache's modes (``__call__``): the cache's
        own when this call computed none, this call's written into the cache at
        ``cache_index``, or this call's in the cache's dtype (a prefill)."""
        if k_BSHK is None:
            if cache is None:
                raise ValueError("attention without x_kv needs a cache holding keys and values")
            return cache["k"], cache["v"]
        if cache is not None and cache_index is not None:
            start = (0, cache_index, 0, 0)
            k_BSHK = jax.lax.dynamic_update_slice(
                cache["k"], k_BSHK.astype(cache["k"].dtype), start
            )
            v_BSHK = jax.lax.dynamic_update_slice(
                cache["v"], v_BSHK.astype(cache["v"].dtype), start
            )
        elif cache is not None:
            k_BSHK = k_BSHK.astype(cache["k"].dtype)
            v_BSHK = v_BSHK.astype(cache["v"].dtype)
        return k_BSHK, v_BSHK

    def _attention(
        self,
        q_BTHK: jax.Array,
        k_BSHK: jax.Array,
        v_BSHK: jax.Array,
        mask: AttentionMask | jax.Array | None,
        dropout_key: jax.Array | None,
    ) -> jax.Array:
        """softmax(q·kᵀ/√K)·v [B, T, H, K] by ``config.attention_impl``: the reference (on the
        dense mask), ``jax.nn.dot_product_attention`` (``xla``, ``cudnn``) with the mask in
        the form ``config.attention_masks`` names (:mod:`deepnet_jax.model.fused_attention`),
        or the splash kernel (:mod:`deepnet_jax.model.splash_attention`). The output is named
        ``remat.ATTENTION_OUT`` for the ``attention_out`` policy (the splash kernel names its
        own, with its log-sum-exp)."""
        c = self.config
        dtype = c.compute_dtype
        if c.attention_impl == "splash":
            q, k, v = (x.astype(dtype) for x in (q_BTHK, k_BSHK, v_BSHK))
            return splash_attention.splash_attention(q, k, v, mask, q_scaled=self._prescaled())
        if c.attention_impl == "reference":
            out = self._reference_attention(q_BTHK, k_BSHK, v_BSHK, dense(mask), dropout_key)
        else:
            out = fused_attention.dot_product_attention(
                q_BTHK.astype(dtype),
                k_BSHK.astype(dtype),
                v_BSHK.astype(dtype),
                mask,
                c.attention_impl,
                c.attention_masks,
            )
        return checkpoint_name(out, remat.ATTENTION_OUT)

    def _output(self, out_BTHK: jax.Array) -> jax.Array:
        """The heads [B, T, H, K] → [B, T, D]: Sub-LN's ``inner_attn_ln`` on the concatenated
        heads (``inner_norm``), then ``out_proj``."""
        c = self.config
        D, H, K = c.d_model, c.num_heads, c.head_dim
        if self.inner_norm:
            B, T = out_BTHK.shape[:2]
            out_BTD = out_BTHK.reshape(B, T, D)
            record_input_norm(self, "inner_attn_ln", out_BTD)
            out_BTD = normalization(c, "inner_attn_ln")(out_BTD)
            out_BTHK = out_BTD.reshape(B, T, H, K)
        return Projection(
            (H, K),
            (D,),
            ("heads", "kv"),
            ("embed",),
            c,
            self.value_gain,
            role="attn_out",
            std=self._std("out_proj"),
            name="out_proj",
        )(out_BTHK)

    def _std(self, name: str) -> Any:
        """The N(0, σ²) std of projection ``name`` under ``stds`` (None: the config's init)."""
        if self.stds is None:
            return None
        return self.stds[0] if name in ("q_proj", "k_proj") else self.stds[1]

    def _qk_norm(self, name: str, x_BTHK: jax.Array) -> jax.Array:
        """``model.qk_norm``: x normalized over head_dim per head (one scale [K] shared by the
        heads; Dehghani et al. 2023, "Scaling ViT to 22B"), else x."""
        if not self.config.qk_norm:
            return x_BTHK
        return normalization(self.config, name, axis_name="kv")(x_BTHK)

    def _position(self, x_BTHK: jax.Array, positions: jax.Array | None) -> jax.Array:
        """x rotated by its positions [B|1, T] (rotary attention), else x."""
        if not self.rotary:
            return x_BTHK
        cos, sin = rotary.angles(positions, self.config.head_dim, self.config.rope_theta)
        return rotary.rotate(x_BTHK, cos, sin)

    def _position_keys(self, k_BSHK: jax.Array, positions: jax.Array | None) -> jax.Array:
        """Keys computed in this call: normalized (qk_norm), then rotated like the queries
        (self-attention: they sit at the queries' positions)."""
        return self._position(self._qk_norm("k_norm", k_BSHK), positions)

    def _reference_attention(
        self,
        q_BTHK: jax.Array,
        k_BSHK: jax.Array,
        v_BSHK: jax.Array,
        mask: jax.Array | None,
        dropout_key: jax.Array | None,
    ) -> jax.Array:
        """softmax(q·kᵀ/√K + mask)·v [B, T, H, K] with float32 logits and softmax, dropout on
        the probabilities; masked logits are float32's lowest value (a row with no visible key
        averages every value uniformly). Keys and values [B, S, N, K] with N = kv heads: query
        head h reads kv head h // (H/N) (grouped-query attention; N = H: multi-head)."""
        c = self.config
        B, T, H, K = q_BTHK.shape
        N = k_BSHK.shape[2]
        q_BTNGK = q_BTHK.reshape(B, T, N, H // N, K)
        logits_BNGTS = jnp.einsum(
            "btngk,bsnk->bngts", q_BTNGK, k_BSHK, preferred_element_type=jnp.float32
        )
        logits_BHTS = logits_BNGTS.reshape(B, H, T, -1) * (c.head_dim**-0.5)
        if mask is not None:
            logits_BHTS = jnp.where(mask, logits_BHTS, jnp.finfo(jnp.float32).min)
        probs_BHTS = jax.nn.softmax(logits_BHTS, axis=-1).astype(c.compute_dtype)
        probs_BHTS = dropout(
            probs_BHTS, c.attention_dropout, dropout_key, self.deterministic, c.dropout_rng
        )
        probs_BNGTS = probs_BHTS.reshape(B, N, H // N, T, -1)
        out_BTNGK = jnp.einsum("bngts,bsnk->btngk", probs_BNGTS, v_BSHK.astype(c.compute_dtype))
        return out_BTNGK.reshape(B, T, H, K)


def fuse_qkv_params(params: Any) -> Any:
    """The same parameters in the ``fused_qkv=True`` layout: every ``self_attn``'s ``q_proj``,
    ``k_proj`` and ``v_proj`` become one ``qkv_proj`` (kernels [..., D, H, K] stacked into
    [..., D, 3, H, K], biases [..., H, K] into [..., 3, H, K]; a leading scanned layer axis is
    kept). The model output is unchanged (up to float rounding)."""
    return _map_self_attention(params, _fuse)


def unfuse_qkv_params(params: Any) -> Any:
    """The inverse of :func:`fuse_qkv_params`: ``qkv_proj`` split into q/k/v projections."""
    return _map_self_attention(params, _unfuse)


def _fuse(attn: dict) -> dict:
    if "qkv_proj" in attn:
        return dict(attn)
    out = {k: v for k, v in attn.items() if k not in ("q_proj", "k_proj", "v_proj")}
    parts = [attn[n] for n in ("q_proj", "k_proj", "v_proj")]
    out["qkv_proj"] = {p: jnp.stack([x[p] for x in parts], axis=-3) for p in parts[0]}
    return out


def _unfuse(attn: dict) -> dict:
    if "qkv_proj" not in attn:
        return dict(attn)
    out = {k: v for k, v in attn.items() if k != "qkv_proj"}
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
        out[name] = {p: jnp.take(x, i, axis=-3) for p, x in attn["qkv_proj"].items()}
    return out


def _map_self_attention(tree: Any, fn: Any) -> Any:
    if not isinstance(tree, Mapping):
        return tree
    return {k: fn(v) if k == "self_attn" else _map_self_attention(v, fn) for k, v in tree.items()}
