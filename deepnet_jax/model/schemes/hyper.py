"""The stream schemes: the residual is n streams x [B, T, n, D] instead of one, and each sublayer
G (self-attention, cross-attention, FFN: one "layer" T of the papers, each with its own
connection) reads a learned mix of the streams through the config's norm (Pre-LN inside the
branch) and writes its output back into every stream with learned weights. The embedded input is
copied into the n streams before the first layer (:meth:`Stream.expand`); after the last the
streams are joined (:meth:`Stream.collapse`) and the stack's final norm follows. The streams are
the scan's carry, so a scanned stack still traces one layer body.

* Hyper-Connections (Zhu et al., ICLR 2025, arXiv 2409.19606), ``hyper_connections``, with
  H = (h_1 … h_n)ᵀ [n, D] at one position and k the sublayer's index in its stack:
  h_0ᵀ = A_mᵀH, Ĥ = Bᵀ·G(N(h_0)) + A_rᵀH (eq. 2–5); static (SHC) A_m [n, 1], A_r [n, n], B [1, n]
  learned, or dynamic (DHC, eq. 10–13): H̄ = N_hc(H) per stream, B(H) = s_β∘tanh(H̄W_β)ᵀ + B,
  A_m(H) = s_α∘tanh(H̄W_m) + A_m, A_r(H) = s_α∘tanh(H̄W_r) + A_r. Init (eq. 14): B = 1, A_m =
  e_{k mod n}, A_r = I, W = 0, s_α = s_β = 0.01 (Appendix J), so the network starts as Pre-LN.
  The streams are summed at the end (Algorithm 1, line 11).
* mHC (Xie et al. 2025, arXiv 2512.24880), ``mhc``: x_{l+1} = H_res·x_l + H_postᵀ·G(N(H_pre·x_l))
  (eq. 3) with x̃′ = RMSNorm(vec(x_l)) [nD], H̃ = α∘(x̃′φ) + b (eq. 7), H_pre = σ(H̃_pre),
  H_post = 2σ(H̃_post), H_res = Sinkhorn-Knopp(H̃_res) (eq. 8–9, :func:`sinkhorn`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from deepnet_jax.common.config_schema import field
from deepnet_jax.model import constants
from deepnet_jax.model.schemes.base import (
    SINCE_DEEPNET,
    Ops,
    Residual,
    Scheme,
    Sublayer,
    fail,
    need_index,
)

MHC_VARIANTS = ("paper", "deepseek_v4")
_FLOAT = jnp.float32


# The model config fields this family owns, each declared once (default, allowed values,
# comment): ``deepnet_jax.model.config.TransformerConfig`` names them in the config's order.
CONFIG_FIELDS = {
    "hc_rate": field(
        constants.HC_RATE,
        "hyper_connections, mhc only: n, the residual streams (Zhu et al. 2025's best and Xie et "
        "al.'s: 4; 1 is allowed)",
        low=1,
        before=constants.HC_RATE,
    ),
    "hc_dynamic": field(
        True,
        "hyper_connections only: dynamic (DHC: the weights also predicted from the streams, "
        "eq. 10–13) or static (SHC: learned matrices only)",
        before=True,
    ),
    "mhc_sinkhorn_iters": field(
        constants.MHC_SINKHORN_ITERS,
        "mhc only: Sinkhorn-Knopp iterations t_max of H_res (Xie et al. 2025: 20)",
        low=1,
        before=constants.MHC_SINKHORN_ITERS,
    ),
    "mhc_sinkhorn_eps": field(
        0.0,
        "mhc only: ε added to Sinkhorn-Knopp's softmax and to each of its denominators (0: the "
        "paper's eq. 9; > 0 bounds them away from 0, as DeepSeek-V4's 1e-6 does; "
        "mhc_variant='deepseek_v4' sets its own)",
        low=0.0,
        before=0.0,
    ),
    "mhc_variant": field(
        "paper",
        "mhc only: paper (eq. 7–9, the streams summed at the end) or deepseek_v4 (Hugging "
        "Face's DeepSeek-V4: ε = 1e-6 in H_pre and Sinkhorn-Knopp, its HyperHead's learned sum; "
        "docs/schemes.md)",
        choices=MHC_VARIANTS,
        before="paper",
    ),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Stream(Scheme):
    """A scheme whose residual is ``model.hc_rate`` = n streams: copied in, summed out."""

    family: ClassVar[str] = "pre"  # the norm on the branch input, a final norm

    def completep_refused(self) -> str | None:
        """CompleteP's residual multiplier (its Table 1) scales the branch of one residual
        stream; a stream scheme writes its branch into n streams with learned weights that take
        no multiplier (its sublayer reads no ``Residual.beta``)."""
        return "its branch joins n streams through learned weights, not one residual x + β·G"

    def expand(self, config: Any, x_BTD: jax.Array) -> jax.Array:
        """H⁰ = (x … x)ᵀ: the embedded input [B, T, D] copied into n streams [B, T, n, D]."""
        B, T, D = x_BTD.shape
        return jnp.broadcast_to(x_BTD[:, :, None, :], (B, T, config.hc_rate, D))

    def collapse(self, ops: Ops, x: jax.Array) -> jax.Array:
        """h^L = the sum of the streams (HC's Algorithm 1, line 11): [B, T, n, D] → [B, T, D]."""
        return jnp.sum(x, axis=-2)


def _static_alpha(k: Any, n: int):
    """HC eq. 14's (A_m A_r) = (e_{k mod n} I) [n, n+1] for the k-th sublayer (k may be traced:
    the scanned stack's layer index)."""

    def init(key: jax.Array, shape: tuple[int, ...], dtype=_FLOAT) -> jax.Array:
        a_m = jax.nn.one_hot(jnp.asarray(k) % n, n, dtype=dtype)[:, None]
        return jnp.concatenate([a_m, jnp.eye(n, dtype=dtype)], axis=1)

    return init


@dataclasses.dataclass(frozen=True, kw_only=True)
class HyperConnections(Stream):
    """Zhu et al.'s static or dynamic hyper-connections (``model.hc_dynamic``); the parameters of
    sublayer ``s`` are ``{s}_hc_alpha`` (A_m A_r) [n, n+1], ``{s}_hc_beta`` (B) [n] and, dynamic,
    ``{s}_hc_norm``, ``{s}_hc_alpha_fn`` (W_m W_r) [D, n+1], ``{s}_hc_beta_fn`` (W_β) [D] and the
    scalars ``{s}_hc_alpha_scale`` (s_α), ``{s}_hc_beta_scale`` (s_β)."""

    def layer_state(
        self, ops: Ops, side: str, layer_index: Any, ratio: jax.Array | None
    ) -> Residual:
        per_layer = constants.residual_branches(ops.config.arch, side, 1)
        return Residual(index=need_index(self.name, layer_index) * per_layer)

    def sublayer(
        self, ops: Ops, sub: Sublayer, state: Residual, x: jax.Array
    ) -> tuple[jax.Array, Residual]:
        """H [B, T, n, D] → Bᵀ·dropout(G(N(h_0))) + A_rᵀH with h_0ᵀ = A_mᵀH (eq. 2–5)."""
        alpha, beta = self.connection(ops, sub.name, x, state.index)
        mix = jnp.einsum("...ij,...id->...jd", alpha.astype(x.dtype), x)  # (A_m A_r)ᵀH
        h0 = mix[..., 0, :]
        ops.record(sub.norm, h0)
        f = sub.branch(ops.norm(sub.norm)(h0))
        x = beta.astype(x.dtype)[..., None] * f[..., None, :] + mix[..., 1:, :]
        return x, dataclasses.replace(state, index=state.index + 1)

    def connection(self, ops: Ops, name: str, x: jax.Array, k: Any) -> tuple[jax.Array, jax.Array]:
        """(A_m A_r) [.., n, n+1] and B [.., n] of sublayer ``name`` (the k-th of its stack):
        the static matrices [n, n+1], [n], or with ``hc_dynamic`` eq. 11–13 per position
        [B, T, n, n+1], [B, T, n]; float32."""
        n, D = x.shape[-2:]
        alpha = ops.param(f"{name}_hc_alpha", _static_alpha(k, n), (n, n + 1), (None, None))
        beta = ops.param(f"{name}_hc_beta", jax.nn.initializers.ones, (n,), (None,))
        if not ops.config.hc_dynamic:
            return alpha, beta
        zeros, scale = jax.nn.initializers.zeros, constants.HC_SCALE_INIT
        w_alpha = ops.param(f"{name}_hc_alpha_fn", zeros, (D, n + 1), ("embed", None))
        w_beta = ops.param(f"{name}_hc_beta_fn", zeros, (D,), ("embed",))
        s_alpha = ops.param(f"{name}_hc_alpha_scale", jax.nn.initializers.constant(scale), (), ())
        s_beta = ops.param(f"{name}_hc_beta_scale", jax.nn.initializers.constant(scale), (), ())
        h = ops.norm(f"{name}_hc_norm")(x).astype(_FLOAT)  # eq. 10: H̄ = norm(H), per stream
        alpha = s_alpha * jnp.tanh(h @ w_alpha) + alpha
        beta = s_beta * jnp.tanh(h @ w_beta) + beta
        return alpha, beta


def sinkhorn(logits: jax.Array, iters: int, eps: float = 0.0) -> jax.Array:
    """Sinkhorn-Knopp (mHC eq. 9) over the last two axes [.., n, n]: M⁽⁰⁾ = exp(H̃),
    M⁽ᵗ⁾ = T_r(T_c(M⁽ᵗ⁻¹⁾)) for t = 1 … ``iters``, T_c dividing each column by its sum and T_r
    each row. The first T_c of exp is a softmax over the column (the same numbers, computed
    stably). ``eps`` > 0 is DeepSeek-V4's (Hugging Face's ``DeepseekV4HyperConnection``):
    M ← softmax + ε after the first T_c and every sum + ε; eps = 0 is the paper's.

    The iterations are unrolled (``iters`` is static): XLA fuses each normalization of the
    per-position [n, n] matrices into one small kernel, where a ``fori_loop``'s backward pass
    stacks every iterate into [iters − 1, .., n, n] buffers and copies them (docs/schemes.md).
    Rematerialized (``jax.checkpoint``): the backward pass recomputes the iterates from the
    logits rather than keeping 2·iters − 1 of them per sublayer, which a scan over layers
    stacks, writes and reads back; the paper's fused kernels recompute them too (docs/schemes.md,
    "Speed"). On the CPU the iterations run with the positions minor (:func:`_positions_minor`).
    """
    return _sinkhorn_iterates(logits, iters, eps)


@functools.partial(jax.checkpoint, static_argnums=(1, 2))
def _sinkhorn_iterates(logits: jax.Array, iters: int, eps: float) -> jax.Array:
    """The iterations on [.., n, n] (GPUs, TPUs) or, on the CPU, on [n, n, B·T]
    (:func:`_positions_minor`); the platform is the compile target's, chosen when the step is
    lowered."""
    return jax.lax.platform_dependent(
        logits,
        cpu=lambda z: _positions_minor(z, iters, eps),
        default=lambda z: _iterations(z, iters, eps, columns=-2, rows=-1),
    )


def _iterations(m: jax.Array, iters: int, eps: float, columns: int, rows: int) -> jax.Array:
    """Sinkhorn-Knopp on the matrices of ``m``: T_c divides by the sums over axis ``columns``
    (a column's entries: the row index, −2 of [.., n, n]), T_r by those over axis ``rows``."""
    m = jax.nn.softmax(m, axis=columns) + eps
    m = m / (jnp.sum(m, axis=rows, keepdims=True) + eps)
    for _ in range(iters - 1):
        m = m / (jnp.sum(m, axis=columns, keepdims=True) + eps)
        m = m / (jnp.sum(m, axis=rows, keepdims=True) + eps)
    return m


def _positions_minor(logits: jax.Array, iters: int, eps: float) -> jax.Array:
    """The iterations on [n, n, B·T]: XLA:CPU adds each row or column sum as n contiguous
    vectors of positions, where on [.., n, n] it adds n scalars per position. Faster on the
    CPU; on a TPU the transposes cost more than they save, on a GPU nothing changes (the
    measurements: docs/schemes.md, "Speed")."""
    n = logits.shape[-1]
    m = jnp.moveaxis(logits.reshape(-1, n, n), 0, -1)
    m = _iterations(m, iters, eps, columns=0, rows=1)
    return jnp.moveaxis(m, -1, 0).reshape(logits.shape)


def combine(weights: jax.Array, x: jax.Array) -> jax.Array:
    """Σ_j w_j·x_j over the n streams x [.., n, D], with weights a vector [.., n] per position
    (→ [.., D]: H_pre·x, the head) or a matrix [.., m, n] (→ [.., m, D]: H_res·x, row i the
    weights of new stream i). Written as n broadcast products summed in stream order, so that
    XLA fuses it elementwise with its neighbours (the branch's H_postᵀ·F added, the norm that
    reads H_pre·x); an einsum over the few streams lowers to a batched matmul, a kernel of its
    own that writes the mix to memory (and, in float32 on an NVIDIA GPU, rounds the streams to
    TF32 at jax's default precision)."""
    if weights.ndim == x.ndim:  # a matrix per position: [.., m, n] → [.., m, D]
        terms = (weights[..., :, j, None] * x[..., j, None, :] for j in range(x.shape[-2]))
    else:
        terms = (weights[..., j, None] * x[..., j, :] for j in range(x.shape[-2]))
    return functools.reduce(operator.add, terms)


def _fan_in_normal(key: jax.Array, shape: tuple[int, ...], dtype=_FLOAT) -> jax.Array:
    """φ [n, D, width] ~ N(0, 1/(nD)): unit-variance logits from the RMS-normed x̃′."""
    return jax.random.normal(key, shape, dtype) * (shape[0] * shape[1]) ** -0.5


def _projected(ops: Ops, prefix: str, x: jax.Array, sizes: tuple[int, ...]) -> list[jax.Array]:
    """mHC eq. 7 for parameters ``{prefix}_phi`` (φ [n, D, Σ sizes], flattened stream-major as
    vec(x)), ``{prefix}_bias`` (b [Σ sizes], 0 at init) and ``{prefix}_alpha`` (one α per
    part, 0.01 at init): α∘(RMSNorm(vec(x))·φ) + b, split into ``sizes`` parts [B, T, size].
    The RMSNorm has no weight (the paper folds it into φ: Section 4.3.1); its ε is Table 5's
    1e-20, ``layernorm_eps`` under ``mhc_variant="deepseek_v4"`` (Hugging Face's RMSNorm ε).
    As the paper's kernels do (Section 4.3.1), the division by the RMS follows the matmul,
    (vec(x)·φ)/RMS: the same product, scaled [B, T, Σ sizes] instead of [B, T, nD]."""
    n, D = x.shape[-2:]
    width = sum(sizes)
    phi = ops.param(f"{prefix}_phi", _fan_in_normal, (n, D, width), (None, "embed", None))
    bias = ops.param(f"{prefix}_bias", jax.nn.initializers.zeros, (width,), (None,))
    init = jax.nn.initializers.constant(constants.MHC_ALPHA_INIT)
    alpha = ops.param(f"{prefix}_alpha", init, (len(sizes),), (None,))
    flat = x.astype(_FLOAT).reshape(*x.shape[:-2], n * D)
    c = ops.config
    eps = c.layernorm_eps if c.mhc_variant == "deepseek_v4" else constants.MHC_RMS_EPS
    inv_rms = jax.lax.rsqrt(jnp.mean(flat * flat, -1, keepdims=True) + eps)
    z = (flat @ phi.reshape(n * D, width)) * inv_rms
    z = z * alpha[np.repeat(np.arange(len(sizes)), sizes)] + bias
    return jnp.split(z, list(itertools.accumulate(sizes))[:-1], axis=-1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MHC(Stream):
    """Xie et al.'s manifold-constrained hyper-connections; sublayer ``s``'s parameters are
    ``{s}_mhc_phi`` [n, D, 2n + n²] (φ_pre, φ_post, φ_res), ``{s}_mhc_bias`` [2n + n²] and
    ``{s}_mhc_alpha`` [3] (α_pre, α_post, α_res); H̃_res = mat(·) row-major, H_res[i, j] the
    weight of stream j in the new stream i. ``model.mhc_variant="deepseek_v4"`` is Hugging
    Face's DeepSeek-V4 instead: H_pre = σ(·) + ε, :func:`sinkhorn` with ε, and the streams
    joined by its HyperHead (:meth:`collapse`)."""

    def eps(self, config: Any) -> float:
        """0 (the paper), or DeepSeek-V4's ε (``constants.MHC_DEEPSEEK_V4_EPS``)."""
        return constants.MHC_DEEPSEEK_V4_EPS if config.mhc_variant == "deepseek_v4" else 0.0

    def sinkhorn_eps(self, config: Any) -> float:
        """Sinkhorn-Knopp's ε: DeepSeek-V4's, else ``model.mhc_sinkhorn_eps`` (0: the paper)."""
        return self.eps(config) if config.mhc_variant == "deepseek_v4" else config.mhc_sinkhorn_eps

    def check(self, config: Any) -> None:
        """DeepSeek-V4's variant has its own ε: ``mhc_sinkhorn_eps`` is the paper variant's."""
        if config.mhc_variant == "deepseek_v4" and config.mhc_sinkhorn_eps != 0.0:
            fail(
                "mhc_sinkhorn_eps",
                config.mhc_sinkhorn_eps,
                "mhc_variant='deepseek_v4' adds its own ε (1e-6) in Sinkhorn-Knopp; leave it 0",
            )

    def mappings(self, ops: Ops, name: str, x: jax.Array) -> tuple[jax.Array, ...]:
        """(H_pre [B, T, n], H_post [B, T, n], H_res [B, T, n, n]) of sublayer ``name`` from
        its input streams x [B, T, n, D] (eq. 7–9), float32."""
        c, n = ops.config, x.shape[-2]
        pre, post, res = _projected(ops, f"{name}_mhc", x, (n, n, n * n))
        res = res.reshape(*res.shape[:-1], n, n)
        res = sinkhorn(res, c.mhc_sinkhorn_iters, self.sinkhorn_eps(c))
        return jax.nn.sigmoid(pre) + self.eps(c), 2.0 * jax.nn.sigmoid(post), res

    def sublayer(
        self, ops: Ops, sub: Sublayer, state: Residual, x: jax.Array
    ) -> tuple[jax.Array, Residual]:
        """x [B, T, n, D] → H_res·x + H_postᵀ·dropout(G(N(H_pre·x))) (eq. 3)."""
        pre, post, res = (m.astype(x.dtype) for m in self.mappings(ops, sub.name, x))
        h0 = combine(pre, x)
        ops.record(sub.norm, h0)
        f = sub.branch(ops.norm(sub.norm)(h0))
        return combine(res, x) + post[..., None] * f[..., None, :], state

    def collapse(self, ops: Ops, x: jax.Array) -> jax.Array:
        """The paper's: the sum of the streams (HC's). DeepSeek-V4's HyperHead: Σ_i w_i·x_i with
        w = σ(α·(RMSNorm(vec(x))·φ) + b) + ε (``mhc_head_phi`` [n, D, n], ``mhc_head_bias`` [n],
        ``mhc_head_alpha`` [1]; initialized as a sublayer's)."""
        if ops.config.mhc_variant == "paper":
            return super().collapse(ops, x)
        (w,) = _projected(ops, "mhc_head", x, (x.shape[-2],))
        w = jax.nn.sigmoid(w) + self.eps(ops.config)
        return combine(w.astype(x.dtype), x)


HYPER_CONNECTIONS = HyperConnections(
    name="hyper_connections",
    title="Hyper-Connections",
    origin=SINCE_DEEPNET,
    fields=("hc_rate", "hc_dynamic"),
)
MHC_SCHEME = MHC(
    name="mhc",
    title="mHC",
    origin=SINCE_DEEPNET,
    fields=("hc_rate", "mhc_sinkhorn_iters", "mhc_sinkhorn_eps", "mhc_variant"),
)
