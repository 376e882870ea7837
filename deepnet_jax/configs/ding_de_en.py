"""The main job's model and recipe on the Ding dictionary's German→English example sentences.

Run: python -m deepnet_jax.cli.train --config=ding_de_en --workdir=/tmp/deepnet_ding

Prepares ``ding_de_en`` on first use (Debian's trans-de-en via apt-get; 16,806 / 1,000 / 1,000
pairs, held-out pairs chosen by a hash of the German sentence) and trains ``default.py``'s 6L-6L
DeepNorm encoder-decoder with the same recipe. Ding's sentences are idiomatic dictionary
examples full of rare words, harder to learn from 17k pairs than the LibreOffice help pages:
on the main job's budget this model reads its source but is still learning at the end (test
BLEU 3.55, validation NLL 4.26 → 3.65 from update 600 to 1,800: docs/records/main_job_ding.json,
docs/main_job.md, "Why the default changed").
"""

import ml_collections

from deepnet_jax.configs import default


def get_config() -> ml_collections.ConfigDict:
    c = default.get_config()
    c.data.dataset = "ding_de_en"
    return c
