"""torchscale model configs ↔ this project's model configs.

:func:`model_config_from_torchscale` reads the attributes of a torchscale 0.3.0
``EncoderConfig`` / ``DecoderConfig`` / ``EncoderDecoderConfig`` (``vars(config)``, or the
keyword arguments one would pass it) or a fairseq ``args`` namespace of torchscale's fairseq
models (``vars(args)``). A key that is absent reads torchscale's default, resolved as the config
constructors resolve it (``deepnorm`` turns post-norm and Sub-LN off, ``subln`` turns pre-norm
on). The conventions bridged (see README, "Bringing a torchscale model"):

* the residual scheme comes from ``deepnorm``, ``subln`` and ``*_normalize_before``;
* ``no_scale_embedding`` (torchscale's default True) is ``model.scale_embedding=False``;
* positions start at 2 (fairseq's padding offset): ``model.position_offset=2``; learned
  positions unless ``*_learned_pos`` (fairseq's keys) say False, then fairseq's sinusoids;
* torchscale's encoder zeroes the embeddings of padding tokens: ``zero_padding_embeddings``;
* ``model.init="torchscale"`` (``"torchscale_bert"`` for ``bert_init=True``), so a run started
  from this config initializes as torchscale.

Each field's fate is in the tables of :mod:`deepnet_jax.interop.torchscale.config_fields`:
``MAPPED``, ``UNSUPPORTED`` (refused with one line naming the field and its allowed values),
``IGNORED`` (how torchscale runs, not what it computes: one warning lists those set) and
``INERT``.
:func:`torchscale_args_from_config` is the inverse, for export.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import ml_collections
from absl import logging

from deepnet_jax.interop.torchscale import state_dict
from deepnet_jax.interop.torchscale.config_fields import (
    DEFAULTS,
    check_supported,
    ignored_options,
    refuse,
)
from deepnet_jax.model import architectures, schemes
from deepnet_jax.model.config import ARCHS

POSITION_OFFSET = 2  # torchscale's PositionalEmbedding and fairseq start real positions at 2


def arch_of(args: Mapping[str, Any]) -> str:
    """encoder, decoder or encdec: ``args["arch"]`` when it is one of these, else the sides
    whose ``*_layers`` the config has."""
    if args.get("arch") in ARCHS:
        return args["arch"]
    has = {side for side in ("encoder", "decoder") if f"{side}_layers" in args}
    if not has:
        raise ValueError(
            "torchscale config has neither encoder_layers nor decoder_layers: cannot tell an "
            "EncoderConfig from a DecoderConfig (or set arch to one of " + ", ".join(ARCHS) + ")"
        )
    return "encdec" if len(has) == 2 else has.pop()


def _side_scheme(args: Mapping[str, Any], side: str) -> str:
    """The scheme torchscale's flags make for one side (refusing combinations no scheme is):
    the scheme whose :class:`~deepnet_jax.model.schemes.TorchscaleFlags` they are."""
    deepnorm = bool(args.get("deepnorm", False))
    subln = bool(args.get("subln", not deepnorm))
    before = bool(args.get(f"{side}_normalize_before", not deepnorm))
    flags = schemes.TorchscaleFlags(deepnorm=deepnorm, subln=subln, normalize_before=before)
    made = {s.torchscale: name for name, s in schemes.SCHEMES.items() if s.torchscale}
    if flags not in made:
        each = "; ".join(f"{name}: {_flags_text(f)}" for f, name in made.items())
        raise ValueError(
            f"torchscale options deepnorm={deepnorm}, subln={subln}, {side}_normalize_before="
            f"{before} are no scheme of this project ({each})"
        )
    return made[flags]


def _flags_text(flags: schemes.TorchscaleFlags) -> str:
    """The set options of ``flags`` (``"subln and normalize_before"``; ``"none set"``)."""
    on = [f.name for f in dataclasses.fields(flags) if getattr(flags, f.name)]
    return " and ".join(on) or "none set"


def _one(args: Mapping[str, Any], sides: list[str], name: str, default_key: str = "") -> Any:
    """The value of ``<side>_<name>`` shared by every side (refused when the sides differ)."""
    values = {s: args.get(f"{s}_{name}", DEFAULTS[default_key or name]) for s in sides}
    if len(set(values.values())) > 1:
        listed = ", ".join(f"{s}_{name}={v!r}" for s, v in values.items())
        raise ValueError(f"torchscale options {listed} differ: this project has one value")
    return values[sides[0]]


def _positions(args: Mapping[str, Any], sides: list[str]) -> tuple[str, int]:
    """(model.positions, model.max_len)."""
    learned = {bool(args.get(f"{s}_learned_pos", True)) for s in sides}
    if len(learned) > 1:
        raise ValueError(
            "torchscale options encoder_learned_pos and decoder_learned_pos differ: this "
            "project has one kind of positions"
        )
    keys = {"encoder": "max_source_positions", "decoder": "max_target_positions"}
    lengths = {keys[s]: args.get(keys[s], DEFAULTS["max_positions"]) for s in sides}
    is_learned = learned.pop()
    if is_learned and len(set(lengths.values())) > 1:
        raise ValueError(
            f"torchscale options {lengths} differ: learned positions here have one table "
            "size, model.max_len"
        )
    return ("learned" if is_learned else "sinusoidal"), max(lengths.values())


def _ties(args: Mapping[str, Any], arch: str) -> tuple[bool, bool]:
    """(model.tie_embeddings, model.share_embeddings)."""
    if arch == "encoder":
        return bool(args.get("share_encoder_input_output_embed", False)), False
    share = arch == "encdec" and bool(args.get("share_all_embeddings", False))
    return share or bool(args.get("share_decoder_input_output_embed", False)), share


def model_config_from_torchscale(args: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """This project's model config (``architectures.default_config()`` with every architecture field
    set, validated) for a torchscale config or fairseq ``args`` given as a mapping.

    ``vocab_size`` must be given (> 0); ``arch`` (encoder, decoder, encdec) may be, else it is
    the sides that ``encoder_layers``/``decoder_layers`` name. Raises one ``ValueError`` naming
    the first option this project cannot represent; logs one warning naming the
    ``config_fields.IGNORED`` options that are set (``config_fields.ignored_options``).
    """
    args = dict(args)
    check_supported(args)
    warning = ignored_options(args)
    if warning is not None:
        logging.warning(warning)
    arch = arch_of(args)
    sides = {"encoder": ["encoder"], "decoder": ["decoder"], "encdec": ["encoder", "decoder"]}[arch]
    schemes = {_side_scheme(args, s) for s in sides}
    if len(schemes) > 1:
        raise ValueError(
            "torchscale options encoder_normalize_before and decoder_normalize_before differ: "
            "this project has one scheme for both stacks"
        )
    if (
        "encoder" in sides
        and not args.get("normalize_output", True)
        and schemes.get(_side_scheme(args, "encoder")).final_norm
    ):
        raise refuse(
            "normalize_output", False, "a pre-norm encoder without its final LayerNorm", "True"
        )
    vocab = args.get("vocab_size", DEFAULTS["vocab_size"])
    if not isinstance(vocab, int) or vocab <= 0:
        raise ValueError(f"torchscale option vocab_size={vocab!r}: give the vocabulary size (> 0)")
    c = architectures.default_config()
    c.arch, c.scheme = arch, schemes.pop()
    c.num_encoder_layers = (
        args.get("encoder_layers", DEFAULTS["layers"]) if arch != "decoder" else 0
    )
    c.num_decoder_layers = (
        args.get("decoder_layers", DEFAULTS["layers"]) if arch != "encoder" else 0
    )
    c.d_model = _one(args, sides, "embed_dim")
    c.num_heads = _one(args, sides, "attention_heads")
    c.ffn_dim = _one(args, sides, "ffn_embed_dim")
    c.vocab_size = vocab
    c.positions, c.max_len = _positions(args, sides)
    c.position_offset = POSITION_OFFSET
    c.tie_embeddings, c.share_embeddings = _ties(args, arch)
    for name in ("dropout", "attention_dropout", "activation_dropout"):
        c[name] = float(args.get(name, DEFAULTS[name]) or 0.0)
    c.activation = args.get("activation_fn", DEFAULTS["activation_fn"])
    c.layernorm_eps = float(args.get("layernorm_eps", DEFAULTS["layernorm_eps"]))
    c.scale_embedding = not args.get("no_scale_embedding", DEFAULTS["no_scale_embedding"])
    c.zero_padding_embeddings = arch != "decoder"
    c.init = "torchscale_bert" if args.get("bert_init", False) else "torchscale"
    architectures.validate(c)
    return c


def torchscale_args_from_config(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """The torchscale config keywords (plus fairseq's ``*_learned_pos``) of a model config:
    ``EncoderConfig(**args)`` (or Decoder/EncoderDecoder) builds the same model, given
    torchscale's ``PositionalEmbedding`` (learned) or fairseq's sinusoids. Refuses what torchscale
    lacks: DLCL, models without biases, the blocks beyond the papers' (RMSNorm, grouped-query
    attention, QK-norm, rotary positions, gated FFNs: ``state_dict.check_torchscale_has``),
    sinusoids that do not start at position 2."""
    c = config
    architectures.validate(c)
    state_dict.check_torchscale_has(c)
    if c.positions == "sinusoidal" and c.position_offset != POSITION_OFFSET:
        raise ValueError(
            f"model.position_offset={c.position_offset} with sinusoidal positions: torchscale "
            f"and fairseq sinusoids start at position {POSITION_OFFSET}; train with "
            f"model.position_offset={POSITION_OFFSET} (or learned positions) to export"
        )
    sides = {"encoder": ["encoder"], "decoder": ["decoder"], "encdec": ["encoder", "decoder"]}
    flags = schemes.get(c.scheme).torchscale  # not None: check_torchscale_has
    out: dict[str, Any] = {
        "activation_fn": c.activation,
        "dropout": c.dropout,
        "attention_dropout": c.attention_dropout,
        "activation_dropout": c.activation_dropout,
        "no_scale_embedding": not c.scale_embedding,
        "layernorm_embedding": False,
        "deepnorm": flags.deepnorm,
        "subln": flags.subln,
        "layernorm_eps": c.layernorm_eps,
        "vocab_size": c.vocab_size,
        "bert_init": c.init == "torchscale_bert",
        "drop_path_rate": 0.0,
    }
    positions = {"encoder": "max_source_positions", "decoder": "max_target_positions"}
    for side in sides[c.arch]:
        out |= {
            f"{side}_embed_dim": c.d_model,
            f"{side}_attention_heads": c.num_heads,
            f"{side}_ffn_embed_dim": c.ffn_dim,
            f"{side}_layers": c.num_encoder_layers if side == "encoder" else c.num_decoder_layers,
            f"{side}_normalize_before": flags.normalize_before,
            f"{side}_learned_pos": c.positions == "learned",
            positions[side]: c.max_len,
        }
    if c.arch == "encoder":
        out |= {"normalize_output": True, "share_encoder_input_output_embed": c.tie_embeddings}
    else:
        out["share_decoder_input_output_embed"] = c.tie_embeddings
    if c.arch == "encdec":
        out["normalize_output"] = True
        out["share_all_embeddings"] = c.share_embeddings and c.tie_embeddings
    return out
