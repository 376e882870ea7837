"""A batch of any data source turned into a model's arguments (and its initial variables).

A batch is a dict of [B, T] arrays: ``inputs`` (int32 token ids; ``tokens.PAD_ID`` is padding),
``src`` [B, S] for an encoder-decoder, ``targets``/``weights`` (read by the loss, not the model)
and, for packed rows, ``segment_ids``/``positions`` (+ ``src_segment_ids``/``src_positions``)
[B, T] (or [B, S]). Every data source (the corpus pipeline and the synthetic task alike) yields
this layout; these functions are the one place that maps it onto the models' signatures:
``model.apply(variables, *model_args(arch, batch), **model_kwargs(batch), ...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax

from deepnet_jax.model import admin, schemes

PACKING_KEYS = ("segment_ids", "positions", "src_segment_ids", "src_positions")


def model_args(arch: str, batch: Mapping[str, Any]) -> tuple[Any, ...]:
    """Positional model inputs: ``(src [B, S], inputs [B, T])`` for ``"encdec"``, else
    ``(inputs [B, T],)``."""
    return (batch["src"], batch["inputs"]) if arch == "encdec" else (batch["inputs"],)


def model_kwargs(batch: Mapping[str, Any]) -> dict[str, Any]:
    """Packing keywords of a batch for ``model.apply`` (each [B, T] or [B, S]; empty for
    unpacked batches)."""
    return {k: batch[k] for k in PACKING_KEYS if k in batch}


def init_variables(model: Any, arch: str, batch: Mapping[str, Any], seed: int = 0) -> dict:
    """``model.init`` on a batch's inputs (only their shapes matter, but for a profiled init,
    Admin's, whose ω is profiled on the batch: :mod:`deepnet_jax.model.admin`), with parameter
    key ``seed`` and dropout key ``seed + 1`` (the trainer's keys; abstract shapes need any
    seed)."""
    args = model_args(arch, batch)
    variables = model.init(
        {"params": jax.random.key(seed), "dropout": jax.random.key(seed + 1)}, *args
    )
    if schemes.get(model.config.scheme).profiled_init:
        variables = admin.profile(
            model, variables, args, model_kwargs(batch), jax.random.key(seed + 1)
        )
    return variables


def init_params(model: Any, arch: str, batch: Mapping[str, Any], seed: int = 0) -> Any:
    """Unboxed parameters of ``model`` for inputs shaped like ``batch``, with the keys of
    :func:`init_variables`, initialized under jit (eager scan and remat dispatch are slow)."""
    init = jax.jit(init_variables, static_argnums=(0, 1))
    return nn.unbox(init(model, arch, batch, seed)["params"])
