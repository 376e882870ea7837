"""The commands (``python -m deepnet_jax.cli.<command>``) and their shared flags."""
