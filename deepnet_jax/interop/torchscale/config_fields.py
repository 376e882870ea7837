"""What the torchscale config import does with each field of torchscale 0.3.0's
``EncoderConfig``, ``DecoderConfig`` and ``EncoderDecoderConfig`` (and the fairseq keys read):
the tables :data:`MAPPED`, :data:`UNSUPPORTED` (refused with one line naming the field and its
allowed values), :data:`IGNORED` (how torchscale runs, not what it computes: one warning lists
those set) and :data:`INERT`, torchscale's :data:`DEFAULTS` for the keys read, and the checks
that read the tables. The conversions are :mod:`deepnet_jax.interop.torchscale.configs`'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# torchscale 0.3.0's config defaults for the keys read here (the same for the three configs)
DEFAULTS: dict[str, Any] = {
    "embed_dim": 768,
    "attention_heads": 12,
    "ffn_embed_dim": 3072,
    "layers": 12,
    "activation_fn": "gelu",
    "dropout": 0.0,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "no_scale_embedding": True,
    "layernorm_eps": 1e-5,
    "vocab_size": -1,
    "max_positions": 1024,
    "normalize_output": True,
}

# What the import does with each field of torchscale 0.3.0's EncoderConfig, DecoderConfig and
# EncoderDecoderConfig (and the fairseq keys of its fairseq models read here). Every field is
# mapped or refused (activation_fn is both: relu and gelu mapped, others refused), or ignored
# or inert (tests/test_interop_torchscale.py checks the tables against torchscale's fields).
# Keys in none of them (a fairseq ``args`` namespace's training options) are not read.
#
# mapped: read into the model config (field → what it sets).
MAPPED: dict[str, str] = {
    "encoder_embed_dim": "d_model",
    "decoder_embed_dim": "d_model",
    "encoder_attention_heads": "num_heads",
    "decoder_attention_heads": "num_heads",
    "encoder_ffn_embed_dim": "ffn_dim",
    "decoder_ffn_embed_dim": "ffn_dim",
    "encoder_layers": "num_encoder_layers",
    "decoder_layers": "num_decoder_layers",
    "encoder_normalize_before": "scheme",
    "decoder_normalize_before": "scheme",
    "deepnorm": "scheme",
    "subln": "scheme",
    "normalize_output": "scheme (False refused for a pre-norm encoder)",
    "activation_fn": "activation",
    "dropout": "dropout",
    "attention_dropout": "attention_dropout",
    "activation_dropout": "activation_dropout",
    "no_scale_embedding": "scale_embedding",
    "bert_init": "init (torchscale_bert when True, else torchscale)",
    "share_encoder_input_output_embed": "tie_embeddings",
    "share_decoder_input_output_embed": "tie_embeddings",
    "share_all_embeddings": "share_embeddings",
    "max_source_positions": "max_len",
    "max_target_positions": "max_len",
    "layernorm_eps": "layernorm_eps",
    "vocab_size": "vocab_size",
    "encoder_learned_pos": "positions (fairseq's key)",
    "decoder_learned_pos": "positions (fairseq's key)",
    "arch": "arch (this project's key; fairseq's model name is read as absent)",
}

# refused: field → (is this value one this project cannot represent?, what it is, allowed)
UNSUPPORTED: dict[str, tuple[Callable[[Any], bool], str, str]] = {
    "drop_path_rate": (
        lambda v: float(v or 0.0) != 0.0,
        "stochastic depth",
        "0; to import the weights without it, give --ts_config with drop_path_rate 0",
    ),
    "multiway": (bool, "multiway (per-modality) experts", "False"),
    "xpos_rel_pos": (bool, "xPos relative positions", "False"),
    "moe_freq": (bool, "mixture-of-experts layers", "0"),
    "use_xmoe": (bool, "X-MoE routing", "False"),
    "rel_pos_buckets": (bool, "relative position buckets", "0 (or max_rel_pos 0)"),
    "layernorm_embedding": (bool, "a LayerNorm on the embeddings", "False"),
    "no_output_layer": (bool, "a model without an output projection", "False"),
    "no_token_positional_embeddings": (bool, "a model without position embeddings", "False"),
    "decoder_retention_heads": (lambda v: True, "RetNet retention layers", "absent"),
    "activation_fn": (lambda v: v not in ("relu", "gelu"), "this activation", "relu, gelu"),
    # torchscale after 0.3.0 (LongNet's dilated attention)
    "segment_length": (lambda v: v not in (None, ""), "dilated attention", "None"),
    "dilated_ratio": (lambda v: v not in (None, ""), "dilated attention", "None"),
}

# ignored: field → (its default, what it chooses): how torchscale runs, not what it computes.
# Listed in one warning when set to anything but the default.
IGNORED: dict[str, tuple[Any, str]] = {
    "checkpoint_activations": (False, "activation checkpointing; here model.remat_policy"),
    "fsdp": (False, "fully sharded data parallelism; here the mesh"),
    # torchscale after 0.3.0
    "flash_attention": (False, "the attention kernel; here model.attention_impl"),
    "seq_parallel": (False, "sequence parallelism; here the mesh"),
}

# inert: field → why it has no effect in torchscale either (it is read only with an option
# refused above, or outside the Encoder/Decoder).
INERT: dict[str, str] = {
    **{
        name: "read only with moe_freq > 0 (refused)"
        for name in (
            "moe_top1_expert",
            "moe_expert_count",
            "moe_gating_use_fp32",
            "moe_eval_capacity_token_fraction",
            "moe_second_expert_policy",
            "moe_normalize_gate_prob_before_dropping",
            "ddp_rank",  # seeds the experts
        )
    },
    "max_rel_pos": "read only with rel_pos_buckets > 0 (refused)",
    "xpos_scale_base": "read only with xpos_rel_pos (refused)",
    **{
        name: "read only by torchscale's VisionEmbedding, whose tensors have no place here"
        for name in ("img_size", "patch_size", "in_chans")
    },
}


def refuse(key: str, value: Any, what: str, allowed: str = "") -> ValueError:
    tail = f"; allowed: {allowed}" if allowed else ""
    return ValueError(f"torchscale option {key}={value!r} is not supported: {what}{tail}")


def check_supported(args: Mapping[str, Any]) -> None:
    for key, (is_bad, what, allowed) in UNSUPPORTED.items():
        value = args.get(key)
        relevant = key != "rel_pos_buckets" or args.get("max_rel_pos")  # built only with both
        if value is not None and relevant and is_bad(value):
            raise refuse(key, value, f"{what} (this project has none)", allowed)


def ignored_options(args: Mapping[str, Any]) -> str | None:
    """The one warning line for the :data:`IGNORED` fields of ``args`` set to anything but
    their default, or None when there are none."""
    set_ = [k for k, (default, _) in IGNORED.items() if k in args and args[k] != default]
    if not set_:
        return None
    listed = ", ".join(f"{k}={args[k]!r}" for k in set_)
    why = "; ".join(IGNORED[k][1] for k in set_)
    return (
        f"torchscale options not read: {listed} (they choose how torchscale runs, not what it "
        f"computes: {why})"
    )
