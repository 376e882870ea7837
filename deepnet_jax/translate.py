"""Translate sentences with a trained encoder-decoder run.

    python -m deepnet_jax.translate --workdir=DIR [--beam_size=5] < src.txt > hyp.txt

Reads one source sentence per line from stdin and writes one detokenized translation per line
to stdout, in order (an empty line gives an empty or very short translation, never a skipped
line). Sources are encoded with the run's own ``tokenizer.model``, cut to ``data.max_len``
pieces like the run's validation sources (a count of cut lines goes to stderr), and decoded with
beam search (``--beam_size=1``: greedy). Defaults come from the run's ``decode`` config.
"""

from __future__ import annotations

import sys

from absl import app

from deepnet_jax import cli_flags, decoding, log_setup, run_loading
from deepnet_jax.data import pipeline


def translate_lines(
    run: run_loading.LoadedRun, lines: list[str], options: decoding.SearchOptions, batch_size: int
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
        out = decoding.translate_ids(run.model, run.params, ids, options, batch_size)
    return [run.tokenizer.decode(o) for o in out], sum(truncated)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    log_setup.configure(log_setup.requested_verbosity())
    try:
        run = cli_flags.load_run()
        options = run_loading.search_options(
            run.config, cli_flags.BEAM_SIZE.value, cli_flags.LENGTH_PENALTY.value
        )
        options.validate(prefix="--")
        batch_size = run_loading.positive(
            "batch_size", cli_flags.BATCH_SIZE.value, run.config.decode.batch_size
        )
        lines = [line.rstrip("\r\n") for line in sys.stdin]
        hyps, cut = translate_lines(run, lines, options, batch_size)
    except (ValueError, OSError) as e:
        print("error: " + " ".join(str(e).split()), file=sys.stderr)
        sys.exit(1)
    print(
        f"translated {len(lines)} lines with {run.description}, beam {options.beam_size}"
        + (f"; {cut} sources cut to data.max_len={run.config.data.max_len}" if cut else ""),
        file=sys.stderr,
    )
    sys.stdout.write("".join(h + "\n" for h in hyps))


if __name__ == "__main__":
    app.run(main)
