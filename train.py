"""Training from a repository checkout: ``python train.py --config=configs/default.py
--workdir=DIR [--config.x=y ...]``, the same command as ``python -m deepnet_jax.cli.train``
(:mod:`deepnet_jax.cli.train` describes its flags and exit statuses)."""

from deepnet_jax.cli import train

if __name__ == "__main__":
    train.run()
