"""An experiment's row as model fields, and one run of a row as a training config.

A row is what a line of an experiment's table trains: a scheme (``"deepnorm"`` →
``{"scheme": "deepnorm"}``), or a row named ``scheme+…`` that sets more model fields
(:data:`ROW_FIELDS`: Dynamic Tanh in place of every norm, CompleteP's parameterization).
:func:`with_run` makes a base config one run of a row: N layers per side, the peak learning
rate, its warm-up and the updates. Not a config of its own (not in ``configs.NAMES``): the
experiments (:mod:`deepnet_jax.experiments`) and :mod:`deepnet_jax.configs.depth_table_recipe`
build their configs with it.
"""

from __future__ import annotations

from typing import Any

import ml_collections

from deepnet_jax.model import parameterization, schemes

# rows that are more than a scheme (:data:`ROW_FIELDS`): Pre-LN with Dynamic Tanh in place of
# every norm (the pre-norm Transformer its paper replaces the norms of), and Pre-LN under
# CompleteP (model/parameterization.py; its paper's pre-norm Transformer)
DYT_ROW, COMPLETEP_ROW = "pre_ln+dyt", "pre_ln+completep"
# CompleteP's base: 6 layers per side, the shallowest depth of every experiment with its row
# (depth_table's and model_update's since_deepnet settings start at 6L-6L, lr_tolerance's run
# 6L-6L, lr_transfer's sweep starts at 6), and their models' width (d_model 64), so that its
# multipliers are 1 there and the rate a 6L-6L run takes is the rate CompleteP transfers
COMPLETEP_BASE_LAYERS, COMPLETEP_BASE_WIDTH = 6, 64
# a row that is more than a scheme: the model fields it sets (:func:`row_fields`; the positions
# CompleteP needs: :func:`set_row`). CompleteP scales no embedding by √d (its embedding rule is
# its own: Table 1's "Embed")
ROW_FIELDS: dict[str, dict[str, Any]] = {
    DYT_ROW: {"scheme": "pre_ln", "norm": "dyt"},
    COMPLETEP_ROW: {
        "scheme": "pre_ln",
        "parameterization": "completep",
        "completep_base_layers": COMPLETEP_BASE_LAYERS,
        "completep_base_width": COMPLETEP_BASE_WIDTH,
        "scale_embedding": False,
    },
}


def row_fields(row: str) -> dict[str, Any]:
    """The model fields an experiment row sets: :data:`ROW_FIELDS`'s for a row named
    ``scheme+…`` (``"pre_ln+dyt"`` → ``{"scheme": "pre_ln", "norm": "dyt"}``), else the scheme
    alone (``"deepnorm"`` → ``{"scheme": "deepnorm"}``). ValueError for another ``scheme+…``."""
    if row in ROW_FIELDS:
        return dict(ROW_FIELDS[row])
    if "+" in row:
        raise ValueError(f"row {row!r}: the rows named scheme+… are {', '.join(ROW_FIELDS)}")
    return {"scheme": row}


def row_scheme(row: str) -> str:
    """An experiment row's scheme (:func:`row_fields`)."""
    return row_fields(row)["scheme"]


def set_row(model: ml_collections.ConfigDict, row: str) -> None:
    """Set ``row``'s fields (:func:`row_fields`) on a model config. Under CompleteP fixed
    sinusoids become a learned table, N(0, σ²_base) in the embeddings' group as in the
    authors' code: sinusoids of RMS 1/√2 beside tokens of RMS σ_base = 0.02 hid the tokens
    from the model (35-fold; the model refuses them: model/config_relations.py). Rotary
    positions add nothing to the embeddings and stay."""
    for name, value in row_fields(row).items():
        model[name] = value
    if parameterization.completep(model) and model.positions == "sinusoidal":
        model.positions = "learned"


def with_run(
    c: ml_collections.ConfigDict,
    row: str,
    layers: int,
    learning_rate: float,
    warmup_steps: int,
    steps: int,
) -> ml_collections.ConfigDict:
    """A copy of ``c`` for one run: N-layer encoder and decoder (those ``c``'s arch has) with
    ``row``'s model fields (:func:`set_row`: its scheme, and its norm or parameterization),
    peak ``learning_rate`` after ``warmup_steps`` (0: constant from the first update). DLCL
    stacks are unrolled (each layer reads every earlier one); the others are scanned.
    ValueError if ``c`` names another schedule, which the run would otherwise drop without a
    word."""
    if c.schedule.name not in ("inverse_sqrt", "constant"):
        raise ValueError(
            f"schedule.name={c.schedule.name!r}: an experiment's runs take inverse_sqrt "
            "(constant without a warm-up); set it in the base config"
        )
    c = ml_collections.ConfigDict(c.to_dict())
    set_row(c.model, row)
    has = {"encoder": (layers, 0), "decoder": (0, layers), "encdec": (layers, layers)}
    c.model.num_encoder_layers, c.model.num_decoder_layers = has[c.model.arch]
    c.model.scan_layers = schemes.get(c.model.scheme).scannable  # DLCL reads every earlier layer
    c.optimizer.learning_rate = learning_rate
    if warmup_steps:
        c.schedule.name, c.schedule.warmup_steps = "inverse_sqrt", warmup_steps
    else:
        c.schedule.name = "constant"
    c.total_steps = steps
    return c
