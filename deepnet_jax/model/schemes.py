"""What each residual scheme is made of: one table the layer, the stacks, the config checks,
FLOPs and export read, so that a scheme's properties are declared once.

A scheme's layers are one of three *families* (where its norms sit):

* ``post``: the norm after the residual sum, x ← LN(a·x + b·G(x)) (Post-LN, DeepNorm, Admin,
  DLCL-post); no final norm.
* ``pre``: the norm on the branch input, x ← a·x + b·G(LN(x)) (Pre-LN, Sub-LN, Peri-LN,
  LayerNorm Scaling, DeepScaleLM, DLCL-pre, DenseFormer); a final norm ends the stack.
* ``none``: no norm in the residual stream, x ← x + α·G(x) (ReZero, SkipInit); no final norm.

Mix-LN mixes the first two by layer (``post`` up to its switch layer, ``pre`` after; the
stack ends with the final norm).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Scheme:
    """One scheme's structure.

    Attributes:
      family: "post", "pre", "none" or "mixed" (module docstring).
      final_norm: the stack ends with a norm.
      scannable: its stack is ``nn.scan``-able (DLCL and DenseFormer read every earlier layer).
      dyt_ok: ``model.norm="dyt"`` may replace its norms (the pre-norm family: DyT's paper
        replaces the norms of pre-norm Transformers; a post-norm stream is bounded only by
        its norm, which DyT's tanh does not re-centre or re-scale).
      branch_output_kept: under full remat, the backward pass needs no sublayer's output
        projection (x + c·F(·) with a constant c: its output only joins the sum);
        ``deepnet_jax.scale.flops`` leaves that projection out of the recomputation.
      torchscale: torchscale 0.3.0 has the scheme (export and import).
    """

    family: str
    final_norm: bool
    scannable: bool = True
    dyt_ok: bool = False
    branch_output_kept: bool = False
    torchscale: bool = False


SCHEMES: dict[str, Scheme] = {
    "post_ln": Scheme("post", False, torchscale=True),
    "pre_ln": Scheme("pre", True, dyt_ok=True, branch_output_kept=True, torchscale=True),
    "deepnorm": Scheme("post", False, torchscale=True),
    "subln": Scheme("pre", True, dyt_ok=True, branch_output_kept=True, torchscale=True),
    "dlcl_pre": Scheme("pre", True, scannable=False, dyt_ok=True),
    "dlcl_post": Scheme("post", False, scannable=False),
    "mix_ln": Scheme("mixed", True),
    "peri_ln": Scheme("pre", True, dyt_ok=True),
    "ln_scaling": Scheme("pre", True, dyt_ok=True, branch_output_kept=True),
    "deepscalelm": Scheme("pre", True, dyt_ok=True, branch_output_kept=True),
    "rezero": Scheme("none", False),
    "skipinit": Scheme("none", False),
    "admin": Scheme("post", False),
    "denseformer": Scheme("pre", True, scannable=False, dyt_ok=True),
}

NAMES = tuple(SCHEMES)


def get(name: str) -> Scheme:
    """The :class:`Scheme` called ``name`` (a one-line error naming the allowed ones)."""
    if name not in SCHEMES:
        raise ValueError(f"scheme={name!r} is not one of {', '.join(NAMES)}")
    return SCHEMES[name]


def residual_scheme(name: str) -> str:
    """The per-layer residual form of a scheme: DLCL's layers are Post-/Pre-LN layers and
    DenseFormer's Pre-LN layers (their cross-layer combination lives in ``stacks.py``)."""
    return {"dlcl_pre": "pre_ln", "dlcl_post": "post_ln", "denseformer": "pre_ln"}.get(name, name)
