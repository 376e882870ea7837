"""The corpora, one module each: its fetching, its parsing, its tfds builder and its registry row
(``DATASET``, or ``DATASETS`` for a module of several) together, over :mod:`.base`.

``ding`` (``ding_de_en``), ``libreoffice_help`` (its pages read by ``libreoffice_pages``),
``shakespeare``, ``local_parallel`` and ``local_text`` (the user's files, sharing
``local_files``) and ``wmt`` (tfds' own WMT builders). :mod:`deepnet_jax.data.registry` lists
their rows; the generic fetching helpers are :mod:`deepnet_jax.data.fetch`.
"""
