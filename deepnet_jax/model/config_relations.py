"""The relations between a model config's fields that no field's own declaration states: the
layer counts against the architecture, the heads against the width and the positions, the
attention kernels against dropout and dtype, the nested scan against the scan, and each scheme's
own fields (and DyT's) left at their defaults where they do not apply.

:func:`check` takes a frozen model config whose every field has passed its declaration's check
(``deepnet_jax.model.config.validate`` and ``check`` call it) and raises one ``ValueError`` for
the first relation it breaks; the scheme's own checks (``Scheme.check``) come after.
:func:`check_chosen` refuses an ``auto`` a built model cannot have.
"""

from __future__ import annotations

from typing import Any

from deepnet_jax.model import parameterization, schemes
from deepnet_jax.model.remat import AUTO
from deepnet_jax.model.schemes.base import fail


def check(c: Any, defaults: dict[str, Any]) -> None:
    """One ``ValueError`` for the first relation between fields of ``c`` (a frozen
    ``TransformerConfig``) that fails;
    ``defaults``: every field's declared default (a scheme's own fields must keep theirs under
    the other schemes)."""
    for side, arch_uses in (("encoder", ("encoder", "encdec")), ("decoder", ("decoder", "encdec"))):
        name, layers = f"num_{side}_layers", c.num_layers(side)
        if c.arch in arch_uses and layers < 1:  # the declaration checked it is an integer
            fail(name, layers, "must be an integer >= 1")
        elif c.arch not in arch_uses and layers != 0:
            fail(name, layers, f"arch={c.arch!r} has no {side}; set it to 0")
    if c.d_model % c.num_heads:
        fail("num_heads", c.num_heads, f"must divide model.d_model={c.d_model}")
    if c.positions == "sinusoidal" and c.d_model % 2:
        fail("d_model", c.d_model, "must be even with positions='sinusoidal'")
    if c.positions == "rope" and (c.d_model // c.num_heads) % 2:
        fail(
            "num_heads",
            c.num_heads,
            f"positions='rope' rotates pairs of features: head_dim = d_model/num_heads = "
            f"{c.d_model // c.num_heads} must be even",
        )
    if c.num_kv_heads and c.num_heads % c.num_kv_heads:
        fail("num_kv_heads", c.num_kv_heads, f"must divide model.num_heads={c.num_heads}")
    if c.fused_qkv and c.num_kv_heads not in (0, c.num_heads):
        fail(
            "fused_qkv",
            True,
            f"the fused [d_model, 3, heads, head_dim] kernel needs as many key/value heads as "
            f"query heads, not num_kv_heads={c.num_kv_heads}; set model.fused_qkv=False",
        )
    if c.share_embeddings and c.arch != "encdec":
        fail("share_embeddings", True, f"only arch='encdec' has two embeddings, not {c.arch!r}")
    _check_attention(c)
    if c.scan_group_size and not c.scan_layers:
        fail(
            "scan_group_size",
            c.scan_group_size,
            "groups a scanned stack; model.scan_layers=False (a Python loop) has no scan to "
            "group: set it to 0",
        )
    if c.scan_unroll > 1 and not c.scan_layers:
        fail(
            "scan_unroll",
            c.scan_unroll,
            "unrolls the scan over layers; model.scan_layers=False (a Python loop) has none: "
            "set it to 1",
        )
    if not schemes.get(c.scheme).scannable and c.scan_layers:
        fail(
            "scan_layers",
            True,
            f"scheme={c.scheme!r} combines all earlier layer outputs and "
            "cannot be scanned; set model.scan_layers=False",
        )
    _check_scheme_fields(c, defaults)
    _check_parameterization(c, defaults)


def _check_attention(c: Any) -> None:
    """The attention kernel against its dropout, masks and dtype (``attention_impl``)."""
    if c.attention_impl not in ("reference", AUTO) and c.attention_dropout:
        fail(
            "attention_impl",
            c.attention_impl,
            f"jax.nn.dot_product_attention has no attention dropout (attention_dropout="
            f"{c.attention_dropout}); use 'reference' or set model.attention_dropout=0",
        )
    if c.attention_impl == "splash" and c.attention_masks != "native":
        fail(
            "attention_masks",
            c.attention_masks,
            "splash attention takes its masks natively (causal order and segment ids): "
            "set model.attention_masks='native' or model.attention_impl='xla'",
        )
    if c.attention_impl == "cudnn" and c.dtype == "float32":
        fail("attention_impl", "cudnn", "cuDNN attention needs model.dtype bfloat16 or float16")


def _check_scheme_fields(c: Any, defaults: dict[str, Any]) -> None:
    """A scheme's own fields (``Scheme.fields``) at their defaults under the other schemes,
    ``dyt_alpha`` under the other norms, DyT only where the scheme allows it."""
    scheme = schemes.get(c.scheme)
    for owner in schemes.SCHEMES.values():
        for name in owner.fields:
            if name not in scheme.fields and getattr(c, name) != defaults[name]:
                owners = " or ".join(
                    repr(s.name) for s in schemes.SCHEMES.values() if name in s.fields
                )
                fail(
                    name,
                    getattr(c, name),
                    f"applies to scheme={owners} only, not {c.scheme!r}; set it to "
                    f"{defaults[name]!r}",
                )
    if c.dyt_alpha != defaults["dyt_alpha"] and c.norm != "dyt":
        fail("dyt_alpha", c.dyt_alpha, f"applies to norm='dyt' only, not {c.norm!r}")
    if c.norm == "dyt" and not scheme.dyt_ok:
        allowed = ", ".join(schemes.names(dyt_ok=True))
        fail(
            "norm",
            "dyt",
            f"Dynamic Tanh replaces the norms of pre-norm schemes ({allowed}), not "
            f"scheme={c.scheme!r}'s",
        )


def _check_parameterization(c: Any, defaults: dict[str, Any]) -> None:
    """CompleteP's fields at their defaults under ``standard``; under ``completep`` a scheme it
    applies to (``Scheme.completep_ok``), its own init, no width-dependent embedding scale and
    positions that are embeddings too (learned) or none at the input (rope), not fixed sinusoids
    whose scale ``completep_init_std`` does not set."""
    if not parameterization.completep(c):
        for name in parameterization.COMPLETEP_FIELDS:
            if getattr(c, name) != defaults[name]:
                fail(
                    name,
                    getattr(c, name),
                    f"applies to parameterization='completep' only, not {c.parameterization!r}; "
                    f"set it to {defaults[name]!r}",
                )
        return
    scheme = schemes.get(c.scheme)
    why = scheme.completep_refused()
    if why:
        fail(
            "parameterization",
            c.parameterization,
            f"CompleteP (Dey et al. 2025, Table 1) is for pre-norm Transformers and "
            f"scheme={c.scheme!r} is not one it applies to ({why}); it applies to "
            f"{', '.join(schemes.names(completep_ok=True))}",
        )
    if c.init != defaults["init"]:
        fail(
            "init",
            c.init,
            f"parameterization='completep' draws every weight from its own rule "
            f"(model.completep_init_std); leave it at {defaults['init']!r}",
        )
    if c.scale_embedding:
        fail(
            "scale_embedding",
            True,
            "√d_model is a width-dependent embedding multiplier that CompleteP's Table 1 does "
            "not have (its embeddings are N(0, completep_init_std²), unscaled); set it to False",
        )
    if c.positions == "sinusoidal":
        sigma = c.completep_init_std
        fail(
            "positions",
            "sinusoidal",
            f"CompleteP's positions are an embedding table N(0, completep_init_std²) trained as "
            f"an embedding (Table 1's 'Embed'; the authors' code); fixed sinusoids (RMS 1/√2, "
            f"whatever completep_init_std) would outweigh the tokens' N(0, {sigma}²) "
            f"{2**-0.5 / sigma:.0f}-fold at the first layer's input, which then barely sees the "
            f"tokens; use 'learned' or 'rope'",
        )


def check_chosen(c: Any) -> None:
    """The error of a model config (a ``TransformerConfig``) that still says ``auto`` where a
    model needs a choice: the
    trainer and the planner choose the remat policy and the attention kernel before they
    build one."""
    if c.remat_policy == AUTO:
        fail(
            "remat_policy",
            AUTO,
            "it names no jax policy: deepnet_jax.training.remat_auto.resolve turns it into one "
            "(the trainer and the planner do) before a model is built",
        )
    if c.attention_impl == AUTO:
        fail(
            "attention_impl",
            AUTO,
            "it names no kernel: deepnet_jax.training.attention_auto.resolve picks one for "
            "the devices (the trainer and the planner do) before a model is built",
        )
