"""Translate sentences with a trained encoder-decoder run.

    python -m deepnet_jax.cli.translate --workdir=DIR [--beam_size=5] < src.txt > hyp.txt

Reads one source sentence per line from stdin and writes one detokenized translation per line
to stdout, in order (an empty line gives an empty or very short translation, never a skipped
line). Sources are encoded with the run's own ``tokenizer.model``, cut to ``data.max_len``
pieces like the run's validation sources (a count of cut lines goes to stderr), and decoded with
beam search (``--beam_size=1``: greedy). Defaults come from the run's ``decode`` config.
"""

from __future__ import annotations

import sys

from absl import flags

from deepnet_jax.cli import command
from deepnet_jax.cli import flags as cli_flags
from deepnet_jax.data import pipeline
from deepnet_jax.decoding import options as decoding_options
from deepnet_jax.decoding import search
from deepnet_jax.training import loading as run_loading

for _shared in (*cli_flags.RUN_FLAGS, *cli_flags.DECODE_FLAGS):
    flags.declare_key_flag(_shared.name)  # listed by --help


def translate_lines(
    run: run_loading.LoadedRun, lines: list[str], options: search.SearchOptions, batch_size: int
) -> tuple[list[str], int]:
    """(detokenized translations of ``lines``, how many sources were cut to data.max_len)."""
    if run.config.model.arch != "encdec" or run.tokenizer is None:
        raise ValueError(
            f"{run.workdir} is a model.arch={run.config.model.arch!r} run on "
            f"data.dataset={run.config.data.dataset!r}; translation needs an encdec run on a "
            "parallel corpus"
        )
    ids, truncated = pipeline.source_ids(run.tokenizer, lines, run.config.data.max_len)
    with run.context():
        out = search.translate_ids(run.model, run.params, ids, options, batch_size)
    return [run.tokenizer.decode(o) for o in out], sum(truncated)


def execute(arguments: list[str]) -> None:
    """Translate stdin's lines with the run of ``--workdir``; one hypothesis per line out."""
    del arguments  # none
    run = cli_flags.load_run()
    options = decoding_options.search_options(
        run.config.decode, cli_flags.BEAM_SIZE.value, cli_flags.LENGTH_PENALTY.value
    )
    options.validate(prefix="--")
    batch_size = run_loading.positive(
        "batch_size", cli_flags.BATCH_SIZE.value, run.config.decode.batch_size
    )
    lines = [line.rstrip("\r\n") for line in sys.stdin]
    hyps, cut = translate_lines(run, lines, options, batch_size)
    print(
        f"translated {len(lines)} lines with {run.description}, beam {options.beam_size}"
        + (f"; {cut} sources cut to data.max_len={run.config.data.max_len}" if cut else ""),
        file=sys.stderr,
    )
    sys.stdout.write("".join(h + "\n" for h in hyps))


def main(argv: list[str]) -> None:
    """The command (absl's ``argv``, flags parsed): :func:`execute` with the shared checks
    and the one-line error (:mod:`deepnet_jax.cli.command`)."""
    command.main(execute, argv)


if __name__ == "__main__":
    command.run(main)
