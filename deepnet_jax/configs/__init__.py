"""The named training configs, shipped in the package: ``--config=<name>`` from any directory.

Each module of :data:`NAMES` is one config whose ``get_config()`` returns the run's
``ConfigDict`` (``wmt17_ende``, ``deepnet_1000l``, ``default`` — the main job — …). A repository
checkout's ``configs/<name>.py`` files import them, so ``--config=configs/default.py`` and
``--config=default`` train the same run; a config of the user's own is a path to a file that
defines ``get_config()``. The package's other modules are what configs are built from, not
configs: an experiment's rows and one run of a row
(:mod:`~deepnet_jax.configs.experiment_rows`), the experiments' base configs
(:mod:`~deepnet_jax.configs.experiment_base`), the depth table's tasks, recipe and run configs
(:mod:`~deepnet_jax.configs.depth_table_recipe`).

:func:`path` turns a ``--config`` value into the file ml_collections loads; :func:`load` gives
a named config's ``ConfigDict`` to code (the experiments).
"""

from __future__ import annotations

import importlib
import os

import ml_collections

_HERE = os.path.dirname(os.path.abspath(__file__))

# the shipped configs, each a module of this package with a get_config() (tests/test_install.py:
# these and no other)
NAMES: tuple[str, ...] = (
    "base",
    "bert_mlm",
    "deepnet_1000l",
    "deepnet_3b",
    "deepnorm_lm",
    "default",
    "depth_table",
    "ding_de_en",
    "dlcl_30l",
    "iwslt14_deen",
    "labml_shakespeare",
    "magneto_lm",
    "subln_lm",
    "wmt17_ende",
)


def path(value: str) -> str:
    """The config file a ``--config`` value names, with its ``:argument`` kept: a file that
    exists is itself; otherwise a name in :data:`NAMES` (``wmt17_ende``, or
    ``depth_table:reversal64,deepnorm,500``) is the packaged module's file. ValueError naming
    the shipped names when it is neither."""
    file, sep, argument = value.partition(":")
    if os.path.isfile(file):
        return value
    if file not in NAMES:
        raise ValueError(
            f"--config={value}: no such file, and not a shipped config (one of {', '.join(NAMES)})"
        )
    return os.path.join(_HERE, f"{file}.py") + sep + argument


def load(name: str, argument: str | None = None) -> ml_collections.ConfigDict:
    """The shipped config ``name``'s ``get_config()`` (with ``argument`` where it takes one)."""
    if name not in NAMES:
        raise ValueError(f"config {name!r}: not a shipped config (one of {', '.join(NAMES)})")
    module = importlib.import_module(f"{__name__}.{name}")
    return module.get_config() if argument is None else module.get_config(argument)
