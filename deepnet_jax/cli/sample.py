"""Sample continuations from a trained decoder-only (language model) run.

    python -m deepnet_jax.cli.sample --workdir=DIR --prompt="ROMEO:" [--prompt=...] \\
        [--num_samples=3] [--max_new_tokens=200] [--temperature=0.8] [--top_k=0] [--top_p=0.9]

Each prompt is encoded with the run's ``tokenizer.model`` after the start marker the run's
examples begin with (BOS for ``data.lm_chunking="document"``; EOS, the separator between texts,
for ``"stream"``), and continued ``--num_samples`` times with cached sampling
(``sampling.sample``: temperature, top-k, nucleus top-p; temperature 0 is greedy). Each sample
is printed (the prompt and its continuation), followed by a line of dashes.
"""

from __future__ import annotations

import sys

import jax
import numpy as np
from absl import flags

from deepnet_jax.cli import command
from deepnet_jax.cli import flags as cli_flags
from deepnet_jax.common.tokens import BOS_ID, EOS_ID, PAD_ID
from deepnet_jax.decoding import sampling, search
from deepnet_jax.training import loading as run_loading

_PROMPT = flags.DEFINE_multi_string("prompt", [""], "Prompt text (repeat for several).")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 1, "Samples per prompt.")
_MAX_NEW_TOKENS = flags.DEFINE_integer("max_new_tokens", 128, "Tokens per sample.")
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "Softmax temperature (0: greedy).")
_TOP_K = flags.DEFINE_integer("top_k", 0, "Sample among the k most likely (0: off).")
_TOP_P = flags.DEFINE_float("top_p", 1.0, "Nucleus sampling mass (1.0: off).")
_SEED = flags.DEFINE_integer("seed", 0, "Sampling seed.")
for _shared in cli_flags.RUN_FLAGS:
    flags.declare_key_flag(_shared.name)  # listed by --help


def sample_texts(
    run: run_loading.LoadedRun,
    prompts: list[str],
    options: sampling.SampleOptions,
    num_samples: int = 1,
    seed: int = 0,
) -> list[list[str]]:
    """``num_samples`` detokenized texts (the prompt and its continuation) for each prompt."""
    config = run.config
    if config.model.arch != "decoder" or run.tokenizer is None:
        raise ValueError(
            f"{run.workdir} is a model.arch={config.model.arch!r} run on "
            f"data.dataset={config.data.dataset!r}; sampling needs a decoder run on a text corpus "
            "(use deepnet_jax.cli.translate for encdec runs)"
        )
    if num_samples < 1:
        raise ValueError(f"--num_samples={num_samples} must be an integer >= 1")
    options.validate(prefix="--")
    start = BOS_ID if config.data.lm_chunking == "document" else EOS_ID
    encoded = [np.append(start, run.tokenizer.encode(p)).astype(np.int32) for p in prompts]
    width = max(len(e) for e in encoded)
    if width + options.max_new_tokens > config.model.max_len:
        raise ValueError(
            f"the longest prompt ({width} tokens with the start marker) + --max_new_tokens="
            f"{options.max_new_tokens} exceeds model.max_len={config.model.max_len}"
        )
    rows = np.full((len(prompts) * num_samples, width), PAD_ID, np.int32)
    for i, e in enumerate(encoded):
        rows[i * num_samples : (i + 1) * num_samples, : len(e)] = e
    with run.context():
        tokens = sampling.sample(
            run.model, run.params, jax.numpy.asarray(rows), jax.random.key(seed), options
        )
    tokens = np.asarray(tokens)
    out: list[list[str]] = [[] for _ in prompts]
    for r in range(tokens.shape[0]):
        i = r // num_samples
        continuation = search.strip(tokens[r : r + 1, len(encoded[i]) :], options.eos_id)[0]
        # decoded together with the prompt, so word boundaries at the seam come out right
        out[i].append(run.tokenizer.decode([*encoded[i][1:].tolist(), *continuation]))
    return out


def execute(arguments: list[str]) -> None:
    """Sample continuations of ``--prompt`` from the run of ``--workdir``; one per line out."""
    del arguments  # none
    run = cli_flags.load_run()
    options = sampling.SampleOptions(
        max_new_tokens=_MAX_NEW_TOKENS.value,
        temperature=_TEMPERATURE.value,
        top_k=_TOP_K.value,
        top_p=_TOP_P.value,
    )
    texts = sample_texts(run, list(_PROMPT.value), options, _NUM_SAMPLES.value, _SEED.value)
    print(f"samples from {run.description}", file=sys.stderr)
    for samples in texts:
        for text in samples:
            print(text)
            print("-" * 40)


def main(argv: list[str]) -> None:
    """The command (absl's ``argv``, flags parsed): :func:`execute` with the shared checks
    and the one-line error (:mod:`deepnet_jax.cli.command`)."""
    command.main(execute, argv)


if __name__ == "__main__":
    command.run(main)
