"""A checkout's configs (``python train.py --config=configs/<name>.py``): each imports the shipped
config of its name from ``deepnet_jax.configs``."""
