"""The model configuration: defaults, validation, and the frozen form modules consume.

Users edit an ``ml_collections.ConfigDict`` (``default_config()``); ``validate`` checks every field
before anything is traced and ``TransformerConfig.from_config`` freezes it into a hashable
dataclass that Flax modules take as an attribute.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import ml_collections

from deepnet_jax import constants

ARCHS = constants.ARCHS
SCHEMES = ("post_ln", "pre_ln", "deepnorm", "subln", "dlcl_pre", "dlcl_post")
ACTIVATIONS = ("relu", "gelu")
POSITIONS = ("sinusoidal", "learned")
REMAT_POLICIES = ("none", "full", "dots", "qkv_fc1")
ATTENTION_IMPLS = ("reference", "xla", "cudnn")
DROPOUT_RNGS = ("hash", "jax")
DLCL_WEIGHTS = ("learnable", "fix_one", "fix_avg")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
PARAM_DTYPES = ("float32", "bfloat16")


def default_config() -> ml_collections.ConfigDict:
    """The default model: a 6L-6L DeepNorm encoder-decoder at transformer-base width."""
    c = ml_collections.ConfigDict()
    c.arch = "encdec"  # one of encoder (MLM), decoder (causal LM), encdec (translation)
    c.scheme = "deepnorm"  # one of post_ln, pre_ln, deepnorm, subln, dlcl_pre, dlcl_post
    c.num_encoder_layers = 6  # N; must be 0 for arch=decoder
    c.num_decoder_layers = 6  # M; must be 0 for arch=encoder
    c.d_model = 512  # residual width
    c.num_heads = 8  # attention heads; must divide d_model
    c.ffn_dim = 2048  # FFN hidden width
    c.vocab_size = 8000  # shared by source and target; token id 0 is padding
    c.dropout = 0.1  # on each sublayer's output (residual branch) and on the embeddings
    c.attention_dropout = 0.0  # on attention probabilities
    c.activation_dropout = 0.0  # on the FFN hidden activation
    c.activation = "relu"  # FFN nonlinearity: relu (the papers' fairseq runs) or gelu
    c.max_len = 256  # longest sequence the model accepts (size of the position table)
    c.positions = "sinusoidal"  # sinusoidal (fixed, fairseq) or learned
    c.tie_embeddings = False  # output projection = input embedding transposed
    c.share_embeddings = False  # encdec only: one embedding for source and target (joint vocab)
    c.layernorm_eps = 1e-5  # LayerNorm epsilon (PyTorch/fairseq default)
    c.use_bias = True  # biases in every projection (as fairseq/torchscale)
    c.scan_layers = True  # nn.scan over depth (False: a Python loop, for comparison)
    c.remat_policy = "full"  # none, full (nothing saved), dots (matmul outputs), qkv_fc1 (names)
    c.dtype = "float32"  # compute dtype: float32, bfloat16, float16
    c.param_dtype = "float32"  # parameter storage dtype: float32, bfloat16
    c.dlcl_weights = "learnable"  # dlcl_* only: learnable, fix_one (all 1), fix_avg (1/(l+1))
    c.dlcl_layer_norm = True  # dlcl_pre: the per-layer LN_k of DLCL eq. 8 (False: the ablation)
    c.fused_qkv = False  # self-attention q/k/v as one [d_model, 3, heads, head_dim] kernel
    # reference (einsum + softmax, any dropout), xla or cudnn (jax.nn.dot_product_attention;
    # cudnn: GPU, bfloat16/float16 only); the last two need attention_dropout=0
    c.attention_impl = "reference"
    # dropout masks: hash (a keyed integer hash of each element's index: cheap on every
    # backend) or jax (jax.random.bernoulli with the key's PRNG, as flax.linen.Dropout)
    c.dropout_rng = "hash"
    return c


_FIELDS = tuple(default_config().keys())


def _fail(field: str, value: Any, allowed: str) -> None:
    raise ValueError(f"model.{field}={value!r} is invalid: {allowed}")


def _choice(c: ml_collections.ConfigDict, field: str, options) -> None:
    if c[field] not in options:
        _fail(field, c[field], "allowed values are " + ", ".join(map(repr, options)))


def _int_at_least(c: ml_collections.ConfigDict, field: str, low: int) -> None:
    value = c[field]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        _fail(field, value, f"must be an integer >= {low}")


def _rate(c: ml_collections.ConfigDict, field: str) -> None:
    value = c[field]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        _fail(field, value, "must be a number in [0, 1)")


def _bool(c: ml_collections.ConfigDict, field: str) -> None:
    if not isinstance(c[field], bool):
        _fail(field, c[field], "must be True or False")


def validate(c: ml_collections.ConfigDict) -> None:
    """Raise one clear ``ValueError`` for the first invalid field of a model config."""
    unknown = sorted(set(c.keys()) - set(_FIELDS))
    if unknown:
        raise ValueError(
            f"model.{unknown[0]} is not a model field; known fields: {', '.join(_FIELDS)}"
        )
    missing = [f for f in _FIELDS if f not in c]
    if missing:
        raise ValueError(f"model.{missing[0]} is missing; start from models.default_config()")
    _choice(c, "arch", ARCHS)
    _choice(c, "scheme", SCHEMES)
    for side, arch_uses in (("encoder", ("encoder", "encdec")), ("decoder", ("decoder", "encdec"))):
        field = f"num_{side}_layers"
        if c.arch in arch_uses:
            _int_at_least(c, field, 1)
        elif c[field] != 0:
            _fail(field, c[field], f"arch={c.arch!r} has no {side}; set it to 0")
    for field in ("d_model", "num_heads", "ffn_dim", "max_len"):
        _int_at_least(c, field, 1)
    _int_at_least(c, "vocab_size", 2)
    if c.d_model % c.num_heads:
        _fail("num_heads", c.num_heads, f"must divide model.d_model={c.d_model}")
    for field in ("dropout", "attention_dropout", "activation_dropout"):
        _rate(c, field)
    _choice(c, "activation", ACTIVATIONS)
    _choice(c, "positions", POSITIONS)
    if c.positions == "sinusoidal" and c.d_model % 2:
        _fail("d_model", c.d_model, "must be even with positions='sinusoidal'")
    for field in (
        "tie_embeddings",
        "share_embeddings",
        "use_bias",
        "scan_layers",
        "dlcl_layer_norm",
        "fused_qkv",
    ):
        _bool(c, field)
    if c.share_embeddings and c.arch != "encdec":
        _fail("share_embeddings", True, f"only arch='encdec' has two embeddings, not {c.arch!r}")
    eps = c.layernorm_eps
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        _fail("layernorm_eps", eps, "must be a number in (0, 1)")
    _choice(c, "remat_policy", REMAT_POLICIES)
    _choice(c, "dtype", tuple(DTYPES))
    _choice(c, "param_dtype", PARAM_DTYPES)
    _choice(c, "dlcl_weights", DLCL_WEIGHTS)
    _choice(c, "attention_impl", ATTENTION_IMPLS)
    _choice(c, "dropout_rng", DROPOUT_RNGS)
    if c.attention_impl != "reference" and c.attention_dropout:
        _fail(
            "attention_impl",
            c.attention_impl,
            f"jax.nn.dot_product_attention has no attention dropout (attention_dropout="
            f"{c.attention_dropout}); use 'reference' or set model.attention_dropout=0",
        )
    if c.attention_impl == "cudnn" and c.dtype == "float32":
        _fail("attention_impl", "cudnn", "cuDNN attention needs model.dtype bfloat16 or float16")
    if c.scheme == "dlcl_post" and not c.dlcl_layer_norm:
        _fail(
            "dlcl_layer_norm",
            False,
            "the per-layer LN ablation (DLCL eq. 8, Table 6) exists "
            "only for scheme='dlcl_pre'; eq. 9's LN is part of 'dlcl_post'",
        )
    if c.scheme.startswith("dlcl") and c.scan_layers:
        _fail(
            "scan_layers",
            True,
            f"scheme={c.scheme!r} combines all earlier layer outputs and "
            "cannot be scanned; set model.scan_layers=False",
        )


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Validated, hashable model hyper-parameters (see ``default_config`` for each field)."""

    arch: str
    scheme: str
    num_encoder_layers: int
    num_decoder_layers: int
    d_model: int
    num_heads: int
    ffn_dim: int
    vocab_size: int
    dropout: float
    attention_dropout: float
    activation_dropout: float
    activation: str
    max_len: int
    positions: str
    tie_embeddings: bool
    share_embeddings: bool
    layernorm_eps: float
    use_bias: bool
    scan_layers: bool
    remat_policy: str
    dtype: str
    param_dtype: str
    dlcl_weights: str
    dlcl_layer_norm: bool
    fused_qkv: bool
    attention_impl: str
    dropout_rng: str

    @classmethod
    def from_config(cls, c: ml_collections.ConfigDict) -> TransformerConfig:
        validate(c)
        return cls(**{f.name: c[f.name] for f in dataclasses.fields(cls)})

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def compute_dtype(self):
        return DTYPES[self.dtype]

    @property
    def storage_dtype(self):
        return DTYPES[self.param_dtype]

    def side_constants(self, side: str) -> tuple[float, float]:
        """(α, init gain) of one side ("encoder" or "decoder") under this config's scheme."""
        if self.scheme == "deepnorm":
            k = constants.deepnorm(self.arch, self.num_encoder_layers, self.num_decoder_layers)
            return k[side]["alpha"], k[side]["beta"]
        if self.scheme == "subln":
            k = constants.subln(self.arch, self.num_encoder_layers, self.num_decoder_layers)
            return 1.0, k[side]["gamma"]
        return 1.0, 1.0
