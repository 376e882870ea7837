"""The residual schemes, one object each (:class:`~.base.Scheme`), by ``model.scheme`` name.

One module per family: :mod:`.post_norm` (Post-LN, DeepNorm, Admin), :mod:`.pre_norm` (Pre-LN,
Sub-LN, Peri-LN, LayerNorm Scaling, DeepScaleLM, Mix-LN), :mod:`.gated` (ReZero, SkipInit),
:mod:`.combining` (DLCL pre/post, DenseFormer) and :mod:`.hyper` (Hyper-Connections, mHC: n
residual streams); :mod:`.base` holds what a scheme is. Callers
ask the object (``schemes.get(config.scheme)``) for a property or a hook, never compare names;
lists of schemes come from :func:`names` (``names(origin="paper")``: the papers' schemes).

A new scheme: its object in its family's module (a new class where its residual form is new),
its constants in ``model/constants.py``, its entry in :data:`SCHEMES`, and a NumPy oracle test.
"""

from __future__ import annotations

from deepnet_jax.model.schemes import combining, gated, hyper, post_norm, pre_norm
from deepnet_jax.model.schemes.base import (
    FAMILIES,
    ORIGINS,
    PAPER,
    SINCE_DEEPNET,
    Residual,
    Scheme,
    SideConstants,
    Sublayer,
    TorchscaleFlags,
)

__all__ = [
    "FAMILIES",
    "NAMES",
    "ORIGINS",
    "PAPER",
    "SCHEMES",
    "SINCE_DEEPNET",
    "Residual",
    "Scheme",
    "SideConstants",
    "Sublayer",
    "TorchscaleFlags",
    "get",
    "names",
]

# the registry, in the order the config's choices, the docs and the tests list them: the papers'
# schemes, then those since DeepNet
SCHEMES: dict[str, Scheme] = {
    s.name: s
    for s in (
        post_norm.POST_LN,
        pre_norm.PRE_LN,
        post_norm.DEEPNORM,
        pre_norm.SUBLN,
        combining.DLCL_PRE,
        combining.DLCL_POST,
        pre_norm.MIX_LN,
        pre_norm.PERI_LN,
        pre_norm.LN_SCALING,
        pre_norm.DEEPSCALELM,
        gated.REZERO,
        gated.SKIPINIT,
        post_norm.ADMIN,
        combining.DENSEFORMER,
        hyper.HYPER_CONNECTIONS,
        hyper.MHC_SCHEME,
    )
}

NAMES = tuple(SCHEMES)


def get(name: str) -> Scheme:
    """The :class:`Scheme` called ``name`` (a one-line error naming the allowed ones)."""
    if name not in SCHEMES:
        raise ValueError(f"scheme={name!r} is not one of {', '.join(NAMES)}")
    return SCHEMES[name]


_MISSING = object()


def names(**where: object) -> tuple[str, ...]:
    """The names of the schemes whose attributes equal ``where``'s, in registry order:
    ``names(origin="paper")`` the papers', ``names(stack="dlcl")`` DLCL's,
    ``names(dyt_ok=True)`` those DyT may replace the norms of."""
    unknown = [
        a for a in where if all(getattr(s, a, _MISSING) is _MISSING for s in SCHEMES.values())
    ]
    if unknown:
        raise ValueError(f"no scheme has an attribute {unknown[0]!r}")
    return tuple(
        name
        for name, s in SCHEMES.items()
        if all(getattr(s, a, _MISSING) == v for a, v in where.items())
    )
