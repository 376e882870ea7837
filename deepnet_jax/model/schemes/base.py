"""What a residual scheme is: one frozen object that the layer, the stacks, the embeddings, the
initializers, the config checks, the trainer and the experiments ask, instead of its name.

A scheme's layer is 2 sublayers (self-attention, FFN), or 3 in the decoder of an
encoder-decoder (+ cross-attention), each a function G joined to the residual stream x by the
scheme's *residual form* (N: the config's norm, α the residual's weight, β the branch's):

* ``post`` family: x ← N(α·x + G(x)); no final norm (Post-LN, DeepNorm, Admin);
* ``pre`` family: x ← α·x + β·G(N(x)); the stack ends with a norm (Pre-LN, Sub-LN, Peri-LN,
  LayerNorm Scaling, DeepScaleLM);
* ``none`` family: x ← x + g·G(x), a learned gate g and no norm (ReZero, SkipInit);
* ``mixed``: Post-LN layers, then Pre-LN layers (Mix-LN), ending with a norm.

A combining scheme (DLCL, DenseFormer) has the layers of one of these and its own stack, which
feeds each layer a combination of every earlier layer's output. A stream scheme
(Hyper-Connections, mHC) carries n residual streams [B, T, n, D] through the same stacks: it
widens the embedded input before the first layer (:meth:`Scheme.expand`) and joins the
streams after the last (:meth:`Scheme.collapse`).

Everything a scheme holds is plain Python, fixed when the model is traced, so a scanned stack
traces one layer body. Its hooks build traced values (a layer's state, a sublayer's update)
through :class:`Ops`, which the layer provides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, NoReturn, Protocol

import jax

from deepnet_jax.model import parameterization

PAPER = "paper"  # DeepNet's and Magneto's tables: Post-LN, Pre-LN, DeepNorm, Sub-LN, DLCL
SINCE_DEEPNET = "since_deepnet"  # the stability schemes since DeepNet (docs/schemes.md)
ORIGINS = (PAPER, SINCE_DEEPNET)
FAMILIES = ("post", "pre", "none", "mixed")
SIDES = ("encoder", "decoder")


def fail(field_name: str, value: Any, reason: str) -> NoReturn:
    """Raise the config checks' one-line error for ``model.<field_name>=<value>``."""
    raise ValueError(f"model.{field_name}={value!r} is invalid: {reason}")


@dataclasses.dataclass(frozen=True)
class SideConstants:
    """One side's constants: ``alpha`` weights the residual x (DeepNorm's α, DeepScaleLM's λ),
    ``branch`` weights G's output (DeepScaleLM's β), ``gain`` is the Xavier gain of v, out, fc1
    and fc2 (DeepNorm's β, Sub-LN's γ); 1 where a scheme has none."""

    alpha: float = 1.0
    branch: float = 1.0
    gain: float = 1.0


@dataclasses.dataclass(frozen=True)
class Residual:
    """One layer's residual state while it is traced (made by :meth:`Scheme.layer_state`).

    Attributes:
      alpha, beta: the residual's and the branch's constant weights.
      post: Mix-LN: this layer is a Post-LN layer (a traced bool).
      norm_scale: LayerNorm Scaling's 1/√ℓ (a traced scalar).
      gate: ReZero's α of this layer, shared by its sublayers.
      ratio: Admin's running ratio r in its profiling pass; carried out of the layer with x.
      index: Hyper-Connections' k, the 0-based count of sublayers before this one in the
        stack (an int or a traced scalar); moves on by one with each sublayer.
    """

    alpha: float = 1.0
    beta: float = 1.0
    post: jax.Array | None = None
    norm_scale: jax.Array | None = None
    gate: jax.Array | None = None
    ratio: jax.Array | None = None
    index: Any = None


@dataclasses.dataclass(frozen=True)
class Sublayer:
    """One sublayer as a residual form sees it: its ``name`` (self_attn, cross_attn, ffn), the
    name of its norm (``norm``, fairseq's), its function ``g`` and the branch's ``dropout``."""

    name: str
    norm: str
    g: Callable[[jax.Array], jax.Array]
    dropout: Callable[[jax.Array], jax.Array]

    def branch(self, h: jax.Array) -> jax.Array:
        """dropout(G(h)): what joins the residual sum."""
        return self.dropout(self.g(h))


class Ops(Protocol):
    """What a scheme's hooks may do inside the layer being built (``TransformerLayer``)."""

    config: Any  # the TransformerConfig

    def param(self, name: str, init: Callable, shape: tuple[int, ...], axes: tuple) -> jax.Array:
        """A float32 parameter of the layer with logical ``axes``."""
        ...

    def norm(self, name: str) -> Callable[[jax.Array], jax.Array]:
        """The config's norm, a submodule of the layer called ``name``."""
        ...

    def record(self, name: str, x: jax.Array) -> None:
        """Note what the norm ``name`` reads (the stability instruments' diagnostics)."""
        ...

    def sow(self, name: str, value: jax.Array) -> None:
        """Keep ``value`` as ``name`` in the profiling pass's collection."""
        ...


@dataclasses.dataclass(frozen=True)
class TorchscaleFlags:
    """The torchscale 0.3.0 options that make a scheme (``EncoderConfig``/``DecoderConfig``
    keywords): ``deepnorm``, ``subln`` and each side's ``{side}_normalize_before``."""

    deepnorm: bool = False
    subln: bool = False
    normalize_before: bool = False


def weighted(weight: float, x: jax.Array) -> jax.Array:
    """weight·x, with no multiply for a weight of 1 (the program of the unweighted schemes)."""
    return x if weight == 1.0 else weight * x


def need_index(scheme: str, layer_index: int | jax.Array | None) -> int | jax.Array:
    """``layer_index``, which a scheme that depends on the layer needs."""
    if layer_index is None:
        raise ValueError(f"scheme={scheme!r} depends on the layer: pass layer_index")
    return layer_index


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scheme:
    """One residual scheme: its properties and the hooks the model calls at trace time.

    Attributes:
      name: its ``model.scheme`` value.
      title: its name in the papers ("DeepNorm").
      origin: :data:`PAPER` or :data:`SINCE_DEEPNET`.
      stack: None, the config's stack (scanned, grouped or unrolled); otherwise the key of
        ``model.stacks.KINDS`` that runs it (a combining scheme's).
      dyt_ok: ``model.norm="dyt"`` may replace its norms (DyT's paper replaces the norms of
        pre-norm Transformers; a post-norm stream is bounded only by its norm, which DyT's tanh
        does not re-centre or re-scale).
      branch_output_kept: under full remat, the backward pass needs no sublayer's output
        projection (x + c·F(·) with a constant c: its output only joins the sum);
        ``deepnet_jax.scale.flops`` leaves that projection out of the recomputation.
      torchscale: the torchscale 0.3.0 options that make the scheme (export and import);
        None where torchscale lacks it.
      fields: the model config fields that belong to it (another scheme leaves them at their
        defaults).
      inner_norm: Sub-LN's extra norm before the output projection of self-attention and FFN.
      cross_gain: the cross-attention's v and out take the init gain (Sub-LN's do not).
      embedding_norm: a norm of the embedded input before the first layer (Peri-LN).
      profiled_init: part of its init is measured on a training batch (Admin's ω,
        ``model.admin.profile``): every process must profile the same batch.
    """

    family: ClassVar[str] = ""  # its residual form's family (FAMILIES), set by its class

    name: str
    title: str
    origin: str
    stack: str | None = None
    dyt_ok: bool = False
    branch_output_kept: bool = False
    torchscale: TorchscaleFlags | None = None
    fields: tuple[str, ...] = ()
    inner_norm: bool = False
    cross_gain: bool = True
    embedding_norm: bool = False
    profiled_init: bool = False

    @property
    def final_norm(self) -> bool:
        """The stack ends with a norm (the pre-norm and mixed families)."""
        return self.family in ("pre", "mixed")

    @property
    def scannable(self) -> bool:
        """Its stack is ``nn.scan``-able (a combining stack reads every earlier layer)."""
        return self.stack is None

    @property
    def own_init(self) -> bool:
        """Part of its init is its own (it overrides :meth:`init_stds` or
        :meth:`embedding_variances`: DeepScaleLM's unit-moment init)."""
        cls = type(self)
        return (
            cls.init_stds is not Scheme.init_stds
            or cls.embedding_variances is not Scheme.embedding_variances
        )

    @property
    def completep_ok(self) -> bool:
        """``model.parameterization="completep"`` applies (:meth:`completep_refused` is None)."""
        return self.completep_refused() is None

    def completep_refused(self) -> str | None:
        """Why CompleteP (its Table 1 is for pre-norm Transformers) does not apply, or None: it
        needs the pre-norm residual form x ← α·x + β·G(N(x)) in a stack of layers alone, and no
        init of its own for CompleteP's to replace."""
        if self.family != "pre":
            return "its residual form is not the pre-norm x + β·G(N(x))"
        if not self.scannable:
            return "Table 1 has no rule for its combination weights"
        if self.own_init:
            return "it has an init of its own, which CompleteP's would replace"
        return None

    @property
    def per_layer(self) -> Scheme:
        """The scheme of each of its layers (itself; a combining scheme's Pre- or Post-LN)."""
        return self

    def constants(self, config: Any, side: str) -> SideConstants:
        """One side's α, branch weight and init gain under ``config`` (a TransformerConfig)."""
        return SideConstants()

    def weights(self, config: Any, side: str) -> SideConstants:
        """:meth:`constants` under ``config``'s parameterization: the branch weight β times
        ``parameterization.branch_multiplier`` (CompleteP's m_L^(-α); under ``standard`` 1, and
        the constants unchanged)."""
        k = self.constants(config, side)
        m = parameterization.branch_multiplier(config, side)
        return k if m == 1.0 else dataclasses.replace(k, branch=k.branch * m)

    def init_gain(self, config: Any, side: str) -> float:
        """The Xavier gain of v, out, fc1 and fc2 on ``side`` (``model.init`` may change it)."""
        return self.constants(config, side).gain

    def init_stds(self, config: Any, side: str, layer_index: Any) -> tuple | None:
        """The stds (σ_qk, σ_vo, σ_ffn) its init draws the layer's projections from, or None
        (the initializers' own); asked only while initializing."""
        return None

    def embedding_variances(self, config: Any) -> tuple[float, float] | None:
        """(token, position) variances of its embeddings' init, or None (the initializers')."""
        return None

    def check(self, config: Any) -> None:
        """Raise :func:`fail` for a config its rules exclude (after every field's own check)."""

    def layer_state(
        self, ops: Ops, side: str, layer_index: Any, ratio: jax.Array | None
    ) -> Residual:
        """The layer's residual state, before its sublayers: this side's constant weights
        (:meth:`weights`)."""
        k = self.weights(ops.config, side)
        return Residual(alpha=k.alpha, beta=k.branch)

    def sublayer(
        self, ops: Ops, sub: Sublayer, state: Residual, x: jax.Array
    ) -> tuple[jax.Array, Residual]:
        """One sublayer's update of x [B, T, D] under its residual form, and the state after."""
        raise NotImplementedError(f"scheme {self.name!r} has no residual form")

    def expand(self, config: Any, x_BTD: jax.Array) -> jax.Array:
        """What the first layer reads of the embedded input x [B, T, D]: x itself (a stream
        scheme: its n copies [B, T, n, D])."""
        return x_BTD

    def collapse(self, ops: Ops, x: jax.Array) -> jax.Array:
        """The stack's output [B, T, D] from the last layer's (before the final norm): itself
        (a stream scheme joins its streams); ``ops`` makes parameters of the Encoder/Decoder."""
        return x
