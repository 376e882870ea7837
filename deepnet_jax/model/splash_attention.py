"""softmax(q·kᵀ/√K + mask)·v on TPUs through Pallas' splash attention
(``jax.experimental.pallas.ops.tpu.splash_attention``): ``model.attention_impl='splash'``.

Splash attention is a flash-attention kernel for the TPU's matrix units (Mosaic): the [T, S]
logits never reach HBM, the blocks a mask hides entirely are skipped (the causal mask's upper
triangle), and the backward pass recomputes the probabilities block by block, in one kernel
that gives dq, dk and dv together (``use_fused_bwd_kernel``: q, k, v and dO are read once, not
once for dq and again for dk, dv; dq is summed over the key blocks in q's dtype, one block up
to 512 keys). Its masks come in its own terms:

* causal order as a :class:`CausalMask` over every head (a static property of the kernel);
* right padding (:class:`deepnet_jax.model.masks.AttentionMask`'s ``kv_lengths``) as segment
  ids: every query is in segment 1, key s of row b in segment 1 when s < kv_lengths[b] and 0
  otherwise, so query t attends to exactly the keys the native form names. A row of padding
  only has key count 1 (``masks.AttentionMask``): its queries see key 0, finite.

The kernel tiles keys in blocks of :data:`BLOCK` positions (its smallest: the TPU's 128
lanes). A batch whose lengths are not multiples of it, and a mask with no native form (packed
rows, the decoding cache), are computed by ``jax.nn.dot_product_attention``'s XLA
implementation with the same mask (:mod:`deepnet_jax.model.fused_attention`): the same
function, for the short buckets where attention is a small part of the step.

Inside a mesh the kernel runs under ``shard_map`` (a Pallas call has no partitioning rule of
its own): rows are split as ``batch`` and heads as ``heads``/``kv_heads`` map onto the mesh
(``mesh.rules``), each device calling the kernel on its shard. On anything but a TPU the
kernel runs in Pallas' interpret mode (exact and slow: the tests' path on the CPU).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernel
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

from deepnet_jax.model import fused_attention, remat
from deepnet_jax.model.masks import AttentionMask

BLOCK = 128  # the kernel's key block: a multiple of the TPU's 128 lanes
BLOCK_CHOICES = (512, 256, 128)  # the largest that divides a length is used


def applies(length_q: int, length_k: int, mask: AttentionMask | jax.Array | None) -> bool:
    """Whether the splash kernel computes this call: both lengths multiples of :data:`BLOCK`
    and the mask absent or native (:class:`AttentionMask` with ``kv_lengths``)."""
    native = mask is None or (isinstance(mask, AttentionMask) and mask.kv_lengths is not None)
    return native and length_q % BLOCK == 0 and length_k % BLOCK == 0


def splash_attention(
    q_BTHK: jax.Array,
    k_BSNK: jax.Array,
    v_BSNK: jax.Array,
    mask: AttentionMask | jax.Array | None,
    q_scaled: bool = False,
) -> jax.Array:
    """softmax(q·kᵀ/√K masked)·v [B, T, H, K]; keys and values [B, S, N, K] with N dividing H
    (query head h reads kv head h // (H/N)). The splash kernel where :func:`applies`, else
    ``jax.nn.dot_product_attention`` (XLA) with the same mask. ``q_scaled``: q is already
    q/√K (its projection scaled it), so the kernel's logits are q·kᵀ as given."""
    B, T, _, K = q_BTHK.shape
    S = k_BSNK.shape[1]
    scale = 1.0 if q_scaled else K**-0.5
    if not applies(T, S, mask):
        return fused_attention.dot_product_attention(
            q_BTHK, k_BSNK, v_BSNK, mask, "xla", scale=scale
        )
    causal = bool(mask is not None and mask.causal)
    lengths_B = mask.kv_lengths if mask is not None else jnp.full((B,), S, jnp.int32)
    kv_segments_BS = (jnp.arange(S)[None, :] < lengths_B[:, None]).astype(jnp.int32)
    if not q_scaled:
        q_BTHK = q_BTHK * jnp.asarray(scale, q_BTHK.dtype)
    call = functools.partial(_attend, causal=causal, interpret=_platform() != "tpu")
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return call(q_BTHK, k_BSNK, v_BSNK, kv_segments_BS)
    q_spec = nn.logical_to_mesh_axes(("batch", "length", "heads", "kv"))
    kv_spec = nn.logical_to_mesh_axes(("batch", "length", "kv_heads", "kv"))
    rows_spec = nn.logical_to_mesh_axes(("batch", "length"))
    sharded = jax.shard_map(
        call,
        in_specs=(q_spec, kv_spec, kv_spec, rows_spec),
        out_specs=q_spec,
        check_vma=False,
    )
    return sharded(q_BTHK, k_BSNK, v_BSNK, kv_segments_BS)


def _attend(
    q_BTHK: jax.Array,
    k_BSNK: jax.Array,
    v_BSNK: jax.Array,
    kv_segments_BS: jax.Array,
    causal: bool,
    interpret: bool,
) -> jax.Array:
    """The kernel on one device's rows and heads: q already scaled by 1/√K. Multi-head (N = H)
    through ``make_splash_mha`` on [H, T, K]; grouped-query through ``make_splash_mqa`` on each
    kv head's [H/N, T, K] queries. Rows are mapped with ``vmap``."""
    B, T, H, K = q_BTHK.shape
    S, N = k_BSNK.shape[1], k_BSNK.shape[2]
    G = H // N
    shape = (T, S)
    one = masks.CausalMask(shape) if causal else masks.FullMask(shape)
    sizes = _block_sizes(T, S)
    q_segments_BT = jnp.ones((B, T), jnp.int32)
    make = kernel.make_splash_mha if G == 1 else kernel.make_splash_mqa
    attend = make(
        masks.MultiHeadMask([one] * (H if G == 1 else G)),
        block_sizes=sizes,
        head_shards=1,
        q_seq_shards=1,
        residual_checkpoint_name=remat.ATTENTION_OUT,  # out and log-sum-exp, for the policies
        interpret=interpret,
    )
    if G == 1:
        q, k, v = (jnp.swapaxes(x, 1, 2) for x in (q_BTHK, k_BSNK, v_BSNK))  # [B, H, ·, K]
        out_BHTK = jax.vmap(attend)(q, k, v, segment_ids=_segments(q_segments_BT, kv_segments_BS))
        return jnp.swapaxes(out_BHTK, 1, 2)
    q_BNGTK = q_BTHK.reshape(B, T, N, G, K).transpose(0, 2, 3, 1, 4)
    k_BNSK, v_BNSK = (jnp.swapaxes(x, 1, 2) for x in (k_BSNK, v_BSNK))
    ids = _segments(q_segments_BT, kv_segments_BS)
    per_row = jax.vmap(lambda q, k, v, ids: jax.vmap(attend, (0, 0, 0, None))(q, k, v, ids))
    out_BNGTK = per_row(q_BNGTK, k_BNSK, v_BNSK, ids)
    return out_BNGTK.transpose(0, 3, 1, 2, 4).reshape(B, T, H, K)


def _segments(q_BT: jax.Array, kv_BS: jax.Array) -> kernel.SegmentIds:
    return kernel.SegmentIds(q=q_BT, kv=kv_BS)


def _block_sizes(length_q: int, length_k: int) -> kernel.BlockSizes:
    """Blocks of queries and keys: the largest of :data:`BLOCK_CHOICES` dividing each length."""
    bq = next(b for b in BLOCK_CHOICES if length_q % b == 0)
    bk = next(b for b in BLOCK_CHOICES if length_k % b == 0)
    return kernel.BlockSizes(
        block_q=bq,
        block_kv=bk,
        block_kv_compute=bk,
        block_q_dkv=bq,
        block_kv_dkv=bk,
        block_kv_dkv_compute=bk,
        use_fused_bwd_kernel=True,  # dq in the dkv kernel: q, k, v, dO read once backward
    )


def _platform() -> str:
    """The platform the program is compiled for: the current mesh's devices (a deviceless
    plan's compile-only TPUs among them), else jax's default backend."""
    device = getattr(jax.sharding.get_abstract_mesh(), "abstract_device", None)
    return device.platform if device is not None else jax.default_backend()
