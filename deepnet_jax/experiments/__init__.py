"""Small-scale reproductions of the DeepNet and Magneto depth results.

Each experiment is a module run as ``python -m deepnet_jax.experiments.<name>
--setting=smoke|quick|full --out=DIR``; it trains through ``deepnet_jax.train.run`` and writes
``<name>.json`` (every run's settings and results), ``<name>.png`` and ``<name>.md`` (the
table) into ``--out``. The settings shared by every scheme are in :mod:`.common`; they were
fixed before any result was looked at. Results and discussion: docs/reproduction.md.
"""
