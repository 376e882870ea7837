"""Small-scale reproductions of the DeepNet and Magneto depth results.

Each experiment is a module run as ``python -m deepnet_jax.experiments.<name>
--setting=smoke|quick|full --out=DIR``; it trains through ``deepnet_jax.training.train.run`` and
writes ``<name>.json`` (every run's settings and results), ``<name>.png`` and ``<name>.md`` (the
table) into ``--out``. The tiny-model settings of model_update and lr_tolerance are in
:mod:`.common`; depth_table (DeepNet's Table 1: every scheme, depth and seed under one
recipe) and thousand_layers run the reversal tasks, depth_table's corpus setting the main job. Which
settings were fixed before which results: docs/reproduction.md, "Settings", with the results
and discussion.
"""
