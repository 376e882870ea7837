"""softmax(q·kᵀ/√K + mask)·v through ``jax.nn.dot_product_attention`` (``xla`` or ``cudnn``),
with the mask handed over in one of two forms (``model.attention_masks``):

* ``native``: causal order as ``is_causal`` and right padding as ``key_value_seq_lengths``
  (:class:`deepnet_jax.model.masks.AttentionMask`), so cuDNN's flash attention reads no mask
  from memory and skips the key blocks above a causal diagonal;
* ``bias``: the boolean mask [B, 1, T, S], which cuDNN turns into an additive bias read for
  every head, query and key.

A mask with no native form (packed rows, the decoding cache's) goes as the bias under either.
The choice of form is independent of the implementation, so both forms run (and compare) on
any backend through ``implementation="xla"``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from deepnet_jax.model.masks import AttentionMask, dense

MASK_FORMS = ("native", "bias")


def dot_product_attention(
    q_BTHK: jax.Array,
    k_BSNK: jax.Array,
    v_BSNK: jax.Array,
    mask: AttentionMask | jax.Array | None,
    implementation: str,
    form: str = "native",
    scale: float | None = None,
) -> jax.Array:
    """softmax(q·kᵀ/√K masked)·v [B, T, H, K] by ``jax.nn.dot_product_attention``;
    keys and values [B, S, N, K] with N dividing H (grouped-query attention). ``scale``: the
    logits' factor in place of 1/√K (1.0 for queries already scaled).

    ``mask``: an :class:`AttentionMask`, a boolean array broadcastable to [B, 1, T, S] (True =
    may attend: the bias form) or None. ``form``: ``native`` or ``bias`` (:data:`MASK_FORMS`).
    """
    arguments = mask_arguments(mask, q_BTHK.shape[1], implementation, form)
    return jax.nn.dot_product_attention(
        q_BTHK, k_BSNK, v_BSNK, scale=scale, implementation=implementation, **arguments
    )


def mask_arguments(
    mask: AttentionMask | jax.Array | None, length_q: int, implementation: str, form: str
) -> dict[str, Any]:
    """The mask's keyword arguments of ``jax.nn.dot_product_attention``: ``is_causal`` and
    ``key_value_seq_lengths`` [B] (the native form, where ``mask`` has one), else ``mask``
    [B, 1, T, S]. cuDNN reads the boolean mask as a bias over every query and key position: a
    key-padding mask [B, 1, 1, S] is refused ("Bias must have same seq length"), so it is
    broadcast over the ``length_q`` queries."""
    if form not in MASK_FORMS:
        raise ValueError(f"model.attention_masks={form!r} is invalid: allowed are {MASK_FORMS}")
    native = isinstance(mask, AttentionMask) and mask.kv_lengths is not None
    if form == "native" and native:
        return {"is_causal": mask.causal, "key_value_seq_lengths": mask.kv_lengths}
    mask = dense(mask)
    if mask is None:
        return {}
    if implementation == "cudnn":
        B, _, _, S = mask.shape
        mask = jnp.broadcast_to(mask, (B, mask.shape[1], length_q, S))
    return {"mask": mask}
