"""Entry point: python train.py --config=configs/default.py --workdir=DIR [--config.x=y ...]."""

import sys

from absl import app, flags
from ml_collections import config_flags

from deepnet_jax import train
from deepnet_jax.data import DataPreparationError

_CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for metrics (and, later, checkpoints).")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        train.run(_CONFIG.value, _WORKDIR.value)
    except (ValueError, OSError, DataPreparationError, train.NonFiniteError) as e:  # one line
        print("error: " + " ".join(str(e).split()), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
