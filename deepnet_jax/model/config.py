"""The model configuration: defaults, validation, and the frozen form modules consume.

Users edit an ``ml_collections.ConfigDict`` (``default_config()``); ``validate`` checks every field
before anything is traced (each against its declaration, the relations between fields in
:mod:`deepnet_jax.model.config_relations`) and ``TransformerConfig.from_config`` freezes it into a
hashable dataclass that Flax modules take as an attribute (a training run's is typed once, as
``RunConfig.model``; :func:`check` checks a frozen one).

A field is declared (default, allowed values, comment) beside the code it controls: a scheme's
own fields in its family's module (``model/schemes/``), the remat and nested-scan fields in
:mod:`deepnet_jax.model.remat`, CompleteP's in :mod:`deepnet_jax.model.parameterization`, each in
that module's ``CONFIG_FIELDS``; the rest here. :class:`TransformerConfig` names every field in
the config's order, which the docs' table and ``default_config()`` follow.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import ml_collections

from deepnet_jax.common import config_schema
from deepnet_jax.common.config_schema import field
from deepnet_jax.model import config_relations, constants, remat, schemes
from deepnet_jax.model.parameterization import CONFIG_FIELDS as PARAMETERIZATION_FIELDS
from deepnet_jax.model.remat import AUTO
from deepnet_jax.model.schemes import combining, gated, hyper, post_norm, pre_norm
from deepnet_jax.model.schemes.base import SIDES

ARCHS = constants.ARCHS
SCHEMES = schemes.NAMES
ACTIVATIONS = ("relu", "gelu", "swiglu", "geglu")
GATED_ACTIVATIONS = ("swiglu", "geglu")  # gated FFNs: fc2(φ(x·W_gate) ⊙ x·W_fc1)
POSITIONS = ("sinusoidal", "learned", "rope")
NORMS = ("layernorm", "rmsnorm", "dyt")
ATTENTION_IMPLS = ("reference", "xla", "cudnn", "splash")
ATTENTION_MASKS = ("native", "bias")  # fused_attention.MASK_FORMS
DROPOUT_RNGS = ("hash", "jax")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
PARAM_DTYPES = ("float32", "bfloat16")
INITS = ("paper", "torchscale", "torchscale_bert", "fairseq")
# Fields a training config leaves at 0 to take the data's value (train_config.resolve).
DERIVED = ("vocab_size", "max_len")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """The model's fields (``config.model``), each declared once with its default, allowed
    values and comment (here or in its owner's ``CONFIG_FIELDS``: the module docstring);
    validated, frozen and hashable, as Flax modules take it."""

    arch: str = field(
        "encdec", "encoder (MLM), decoder (causal LM) or encdec (translation)", choices=ARCHS
    )
    scheme: str = field(
        "deepnorm",
        f"the residual scheme (docs/schemes.md): the papers' "
        f"{', '.join(schemes.names(origin=schemes.PAPER))}; and "
        f"{', '.join(schemes.names(origin=schemes.SINCE_DEEPNET))}",
        choices=SCHEMES,
    )
    num_encoder_layers: int = field(6, "N: >= 1 when the arch has an encoder, else 0")
    num_decoder_layers: int = field(6, "M: >= 1 when the arch has a decoder, else 0")
    d_model: int = field(512, "residual width", low=1)
    num_heads: int = field(8, "attention heads; must divide d_model", low=1)
    ffn_dim: int = field(2048, "FFN hidden width", low=1)
    vocab_size: int = field(
        8000,
        "shared by source and target; token id 0 is padding (training configs: 0, the "
        "data's tokenizer size)",
        low=2,
    )
    dropout: float = field(
        0.1,
        "on each sublayer's output (residual branch) and the embeddings",
        low=0,
        high=1,
        high_open=True,
    )
    attention_dropout: float = field(
        0.0, "on attention probabilities", low=0, high=1, high_open=True
    )
    activation_dropout: float = field(
        0.0, "on the FFN hidden activation", low=0, high=1, high_open=True
    )
    activation: str = field(
        "relu",
        "FFN nonlinearity: relu (the papers' fairseq runs), gelu, or a gated FFN "
        "fc2(φ(x·W_gate) ⊙ x·W_fc1) with φ = SiLU (swiglu) or GELU (geglu); ffn_dim is the "
        "hidden width of either kind (a gated FFN at the plain one's parameters: ⅔·ffn_dim)",
        choices=ACTIVATIONS,
    )
    max_len: int = field(
        256,
        "longest sequence the model accepts, the position table's rows (training configs: "
        "0, data.max_len)",
        low=1,
    )
    positions: str = field(
        "sinusoidal",
        "sinusoidal (fixed, fairseq), learned, or rope (rotary: q and k of self-attention "
        "rotated by position, nothing added to the embeddings; docs/blocks.md)",
        choices=POSITIONS,
    )
    rope_theta: float = field(
        10000.0,
        "rope only: base of the rotary frequencies θ^(-2i/K)",
        low=1,
        low_open=True,
        before=10000.0,
    )
    tie_embeddings: bool = field(False, "output projection = input embedding transposed")
    share_embeddings: bool = field(False, "encdec only: one embedding for source and target")
    layernorm_eps: float = field(
        1e-5,
        "epsilon of every norm, LayerNorm or RMSNorm (1e-5: PyTorch/fairseq default)",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
    )
    use_bias: bool = field(
        True, "biases in every projection and LayerNorm (as fairseq/torchscale); False: none"
    )
    num_kv_heads: int = field(
        0,
        "key/value heads: 0 = num_heads (multi-head), 1 (multi-query) or a divisor of "
        "num_heads (grouped-query: num_heads/num_kv_heads query heads share one key/value head)",
        low=0,
        before=0,
    )
    norm: str = field(
        "layernorm",
        "every norm a scheme places (post-, pre-, Sub-LN's inner and final norms): layernorm, "
        "rmsnorm (x/√(mean(x²)+ε)·g, no centring, no bias) or dyt (Dynamic Tanh, "
        "g·tanh(a·x) + b, a learned scalar; pre-norm schemes only)",
        choices=NORMS,
        before="layernorm",
    )
    qk_norm: bool = field(
        False,
        "normalize q and k per head (over head_dim, model.norm) before the dot product",
        before=False,
    )
    deepnorm_variant: str = post_norm.CONFIG_FIELDS["deepnorm_variant"]
    dyt_alpha: float = field(
        0.5,
        "norm=dyt only: the initial a of every DyT (Zhu et al. 2025: 0.5)",
        low=0,
        low_open=True,
        before=0.5,
    )
    mix_ln_ratio: float = pre_norm.CONFIG_FIELDS["mix_ln_ratio"]
    deepscalelm_k: float = pre_norm.CONFIG_FIELDS["deepscalelm_k"]
    skipinit_alpha: float = gated.CONFIG_FIELDS["skipinit_alpha"]
    hc_rate: int = hyper.CONFIG_FIELDS["hc_rate"]
    hc_dynamic: bool = hyper.CONFIG_FIELDS["hc_dynamic"]
    mhc_sinkhorn_iters: int = hyper.CONFIG_FIELDS["mhc_sinkhorn_iters"]
    mhc_sinkhorn_eps: float = hyper.CONFIG_FIELDS["mhc_sinkhorn_eps"]
    mhc_variant: str = hyper.CONFIG_FIELDS["mhc_variant"]
    scan_layers: bool = field(True, "nn.scan over depth (False: a Python loop, for comparison)")
    scan_unroll: int = field(
        1,
        "layer bodies per iteration of the scan over layers (nn.scan's unroll; a nested scan: "
        "of each group's): 1 one body; k > 1 k bodies and ceil(L/k) iterations, parameters "
        "still stacked [L, ...]; L <= k runs straight through (docs/benchmarks.md)",
        low=1,
        resumable=True,
        before=1,
    )
    scan_group_size: int = remat.CONFIG_FIELDS["scan_group_size"]
    remat_policy: str = remat.CONFIG_FIELDS["remat_policy"]
    dtype: str = field("float32", "compute dtype", choices=DTYPES)
    param_dtype: str = field("float32", "parameter storage dtype", choices=PARAM_DTYPES)
    dlcl_weights: str = combining.CONFIG_FIELDS["dlcl_weights"]
    dlcl_layer_norm: bool = combining.CONFIG_FIELDS["dlcl_layer_norm"]
    fused_qkv: bool = field(
        False,
        "self-attention q/k/v as one [d_model, 3, heads, head_dim] kernel",
        before=False,
    )
    attention_impl: str = field(
        "reference",
        "reference (einsum + softmax, any dropout), xla or "
        "cudnn (jax.nn.dot_product_attention; no attention dropout; "
        "cudnn: GPU, bfloat16/float16); splash (Pallas' TPU flash attention; no attention "
        "dropout; lengths not a multiple of 128 and packed rows by xla); auto (a training "
        "config's default): cudnn on a GPU or splash on a TPU where it applies, else reference "
        "(training/attention_auto.py)",
        choices=(*ATTENTION_IMPLS, AUTO),
        resumable=True,
        before="reference",
    )
    attention_masks: str = field(
        "native",
        "xla/cudnn attention: masks as native (is_causal and each row's key count under right "
        "padding; packed rows and the decoding cache keep the bias) or bias (a [B, 1, T, S] "
        "mask read for every head); the reference reads the mask",
        choices=ATTENTION_MASKS,
        resumable=True,
        before="bias",
    )
    scale_embedding: bool = field(
        True,
        "token embeddings times sqrt(d_model) (torchscale: no_scale_embedding=False)",
        before=True,
    )
    position_offset: int = field(
        0,
        "position p reads row p + offset of the position table (fairseq/torchscale: 2)",
        low=0,
        before=0,
    )
    zero_padding_embeddings: bool = field(
        False,
        "zero the encoder's input embeddings at padding tokens (as torchscale does)",
        before=False,
    )
    init: str = field(
        "paper",
        "paper (the papers' Xavier-normal times the scheme's gain), torchscale "
        "(torchscale 0.3.0's own initialization) or torchscale_bert (torchscale's "
        "bert_init=True: N(0, 0.02^2) weights times the gain, zero biases) or fairseq "
        "(fairseq's Transformer: q/k/v Xavier-uniform gain 1/sqrt(2), out Xavier-uniform, "
        "FFN PyTorch's default; the scheme's gain on the weights)",
        choices=INITS,
        before="paper",
    )
    parameterization: str = PARAMETERIZATION_FIELDS["parameterization"]
    completep_base_layers: int = PARAMETERIZATION_FIELDS["completep_base_layers"]
    completep_base_width: int = PARAMETERIZATION_FIELDS["completep_base_width"]
    completep_init_std: float = PARAMETERIZATION_FIELDS["completep_init_std"]
    dropout_rng: str = field(
        "hash",
        "dropout masks: hash (a keyed integer hash of each "
        "element's index) or jax (jax.random.bernoulli, as "
        "flax.linen.Dropout)",
        choices=DROPOUT_RNGS,
        before="jax",
    )

    @classmethod
    def from_config(cls, c: ml_collections.ConfigDict) -> TransformerConfig:
        """A model ``ConfigDict`` checked (:func:`validate`, no ``auto`` left) and frozen."""
        validate(c)
        config = _frozen(c)
        config_relations.check_chosen(config)
        return config

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        """Key/value heads (``num_kv_heads``, 0 meaning ``num_heads``)."""
        return self.num_kv_heads or self.num_heads

    @property
    def gated_ffn(self) -> bool:
        return self.activation in GATED_ACTIVATIONS

    @property
    def compute_dtype(self):
        return DTYPES[self.dtype]

    @property
    def storage_dtype(self):
        return DTYPES[self.param_dtype]

    @property
    def sides(self) -> tuple[str, ...]:
        """The sides the architecture has: ("encoder",), ("decoder",) or both."""
        return {"encoder": SIDES[:1], "decoder": SIDES[1:], "encdec": SIDES}[self.arch]

    def num_layers(self, side: str) -> int:
        """The layers of one side, "encoder" (N) or "decoder" (M)."""
        if side not in SIDES:
            raise ValueError(f"side={side!r} is not one of {', '.join(SIDES)}")
        return self.num_encoder_layers if side == "encoder" else self.num_decoder_layers

    def side_constants(self, side: str) -> tuple[float, float]:
        """(α, init gain) of one side ("encoder" or "decoder") under this config's scheme
        (``schemes.Scheme.constants``): α weights the residual x (DeepNorm's α, DeepScaleLM's
        λ; 1 otherwise), the gain is the Xavier gain of v, out, fc1 and fc2 (DeepNorm's β,
        Sub-LN's γ; 1 otherwise)."""
        k = schemes.get(self.scheme).constants(self, side)
        return k.alpha, k.gain

    def deepscalelm_weights(self, side: str) -> tuple[float, float]:
        """DeepScaleLM's (λ, β) of one side (``constants.deepscalelm``)."""
        k = constants.deepscalelm(
            self.arch, self.num_encoder_layers, self.num_decoder_layers, self.deepscalelm_k
        )[side]
        return k["lambda"], k["beta"]


def default_config() -> ml_collections.ConfigDict:
    """The default model: a 6L-6L DeepNorm encoder-decoder at transformer-base width."""
    return config_schema.config_dict(TransformerConfig)


def validate(c: ml_collections.ConfigDict, derived_ok: bool = False) -> None:
    """Raise one clear ``ValueError`` for the first invalid field of a model config: each
    field against its declaration, then the relations between fields
    (:mod:`deepnet_jax.model.config_relations`), then the scheme's own checks
    (``Scheme.check``, on the frozen config). ``derived_ok``: a
    training config's model, whose :data:`DERIVED` fields may still be 0 (the data's value,
    filled by ``deepnet_jax.training.config.resolve``)."""
    fields = list(config_schema.specs(TransformerConfig))
    config_schema.check_names(c, fields, "model.", start="deepnet_jax.default_config()")
    unfilled = [name for name in DERIVED if c[name] == 0]
    if unfilled and not derived_ok:
        raise ValueError(
            f"model.{unfilled[0]}=0 stands for the data's value and is filled by "
            "train_config.resolve(config); set it, or resolve the training config first"
        )
    config_schema.check_values(c, TransformerConfig, "model.", style="invalid", skip=unfilled)
    _check_relations(_frozen(c))


def check(config: TransformerConfig) -> None:
    """:func:`validate` for a frozen config to build (a run's ``RunConfig.model``, derived
    fields filled, ``auto`` chosen): each field against its declaration, the relations, the
    scheme's own checks, no ``auto`` left (``config_relations.check_chosen``)."""
    values = config_schema.as_dict(config)
    config_schema.check_values(values, TransformerConfig, "model.", style="invalid")
    _check_relations(config)
    config_relations.check_chosen(config)


def _check_relations(config: TransformerConfig) -> None:
    config_relations.check(config, config_schema.defaults(TransformerConfig))
    schemes.get(config.scheme).check(config)  # the scheme's own checks


def _frozen(c: ml_collections.ConfigDict) -> TransformerConfig:
    """``c`` as the frozen dataclass, unchecked."""
    return config_schema.typed(TransformerConfig, c, "model.")
