"""Evaluate a trained run on a split of its corpus.

    python -m deepnet_jax.cli.evaluate --workdir=DIR --split=test [--beam_size=5] [--average_last=5]

Prints, for every run, the split's token-level loss (NLL), perplexity = exp(NLL) and accuracy
(next-token for LMs and translation targets, masked tokens for MLM); for a translation run also
BLEU and chrF of beam-search translations against the raw references (sacrebleu, with its
signature and the n-gram precisions / brevity penalty), on every sentence and on those whose
source is not in the training split. Each figure names its set: the loss covers every pair of
the split, the long ones cut to ``data.max_len`` (``loss_examples``, ``loss_truncated``); BLEU
the ``sentences`` decoded (``unseen_sentences`` for the unseen figure). The run's own
``tokenizer.model`` and config (data set, lengths, decoding options) are used, so the figures
match the run's final evaluation. The last line is the results as JSON (also written to
``--output`` if given).
"""

from __future__ import annotations

import json
from typing import Any

from absl import flags

from deepnet_jax.cli import command
from deepnet_jax.cli import flags as cli_flags
from deepnet_jax.data import pipeline, registry, sources
from deepnet_jax.decoding import options as decoding_options
from deepnet_jax.decoding import scoring
from deepnet_jax.scale import sharding
from deepnet_jax.training import loading as run_loading
from deepnet_jax.training import steps as train_steps

_SPLIT = flags.DEFINE_enum("split", "test", list(sources.SPLITS), "The split to evaluate.")
_LIMIT = flags.DEFINE_integer("limit", 0, "Translate only the first N sentences (0: all).")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the results as JSON here.")
for _shared in (*cli_flags.RUN_FLAGS, *cli_flags.DECODE_FLAGS):
    flags.declare_key_flag(_shared.name)  # listed by --help


def evaluate_run(
    run: run_loading.LoadedRun,
    split: str,
    beam_size: int | None = None,
    length_penalty: float | None = None,
    batch_size: int | None = None,
    limit: int = 0,
) -> dict[str, Any]:
    """Loss/perplexity/accuracy of ``split`` and, for translation, BLEU/chrF (see module doc)."""
    config = run.config
    if config.data.dataset == registry.SYNTHETIC:
        raise ValueError(
            f"{run.workdir} trained on data.dataset={registry.SYNTHETIC!r}, which has no splits"
        )
    if limit < 0:
        raise ValueError(f"--limit={limit} must be >= 0")
    options = decoding_options.search_options(config.decode, beam_size, length_penalty)
    options.validate(prefix="--")
    batch_size = run_loading.positive("batch_size", batch_size, config.decode.batch_size)
    data = pipeline.DataPipeline(
        config.data,
        config.model.arch,
        row_multiple=sharding.data_parallel_size(run.mesh),
        tokenizer_path=run.run_dir.tokenizer,
    )
    rows = sharding.batch_sharding(run.mesh)

    def place(batch):
        return pipeline.global_batch(batch, rows)

    result: dict[str, Any] = {"split": split, "parameters": run.description}
    with run.context():
        eval_step = train_steps.make_eval_step(run.model, config.model.arch)
        result.update(
            train_steps.split_loss(eval_step, run.params, map(place, data.eval_batches(split)))
        )
        result.update(data.eval_counts(split))
        if data.task == "translation":
            _, scores = scoring.translate_split(
                run.model,
                run.params,
                data.tokenizer,
                data.translation_set(split),
                options,
                batch_size,
                limit,
                progress=f"{split}, beam {options.beam_size}",
            )
            result.update(scores, beam_size=options.beam_size)
    return result


def report(result: dict[str, Any]) -> str:
    """Human-readable lines for :func:`evaluate_run`'s result."""
    examples = f"{result['loss_examples']:,} {'pairs' if 'bleu' in result else 'examples'}"
    if result["loss_truncated"]:
        examples += f", {result['loss_truncated']:,} of them cut to data.max_len"
    if result["loss_dropped"]:
        examples += f", {result['loss_dropped']:,} empty records left out"
    lines = [
        f"{result['split']} ({result['parameters']}): loss {result['loss']:.4f}, "
        f"perplexity {result['perplexity']:.2f}, accuracy {result['accuracy']:.4f} "
        f"on {examples}"
    ]
    if "bleu" in result:
        lines.append(
            f"{result['sentences']:,} sentences, beam {result['beam_size']}"
            + (
                f", {result['truncated_sources']:,} sources cut to data.max_len"
                if result["truncated_sources"]
                else ""
            )
        )
        lines += [result["bleu_report"], result["chrf_report"]]
        if "unseen_bleu" in result:
            lines.append(
                f"the {result['unseen_sentences']:,} sentences whose source is not in the "
                f"training split: BLEU {result['unseen_bleu']:.2f}, "
                f"chrF {result['unseen_chrf']:.2f}"
            )
    return "\n".join(lines)


def execute(arguments: list[str]) -> None:
    """Evaluate the run of ``--workdir`` on ``--split``; print the report and its JSON."""
    del arguments  # none
    run = cli_flags.load_run()
    result = evaluate_run(
        run,
        _SPLIT.value,
        cli_flags.BEAM_SIZE.value,
        cli_flags.LENGTH_PENALTY.value,
        cli_flags.BATCH_SIZE.value,
        _LIMIT.value,
    )
    print(report(result))
    print(json.dumps(result))
    if _OUTPUT.value:
        with open(_OUTPUT.value, "w") as f:
            json.dump(result, f, indent=1)


def main(argv: list[str]) -> None:
    """The command (absl's ``argv``, flags parsed): :func:`execute` with the shared checks
    and the one-line error (:mod:`deepnet_jax.cli.command`)."""
    command.main(execute, argv)


if __name__ == "__main__":
    command.run(main)
