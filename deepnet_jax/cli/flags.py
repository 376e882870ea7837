"""Command-line flags shared by the package's CLIs, each defined once here (absl flags are
process-wide): the run-picking and search flags of ``translate``, ``evaluate`` and ``sample``,
``--data_dir`` of ``cli.prepare`` and the experiments, and ``--out`` of the experiments and
``cli.torchscale export``.

Library modules never import this one, so importing the package defines no flags; each CLI
module imports it and defines its own flags at module level, so its ``main(argv)`` can be
called again after ``absl.flags.FLAGS(argv)`` (tests do).
"""

from __future__ import annotations

from absl import flags

from deepnet_jax.training import loading as run_loading

DATA_DIR = flags.DEFINE_string(
    "data_dir", None, "tfds data_dir of the prepared corpora (default: the config's data.data_dir)."
)
OUT = flags.DEFINE_string(
    "out",
    None,
    "Where the CLI writes: an experiment's output folder (default "
    "/tmp/deepnet_experiments/<name>); interop.torchscale export's .pt or .npz file.",
)
WORKDIR = flags.DEFINE_string("workdir", None, "The training run's workdir.")
CHECKPOINT = flags.DEFINE_string(
    "checkpoint",
    "latest",
    "Parameters to use: 'latest', 'best' or a checkpoint step (interop.torchscale import: "
    "the torchscale .pt file).",
)
AVERAGE_LAST = flags.DEFINE_integer(
    "average_last", 1, "Average this many newest checkpoints (up to --checkpoint)."
)
BEAM_SIZE = flags.DEFINE_integer(
    "beam_size", None, "Beam size (default: the run's decode.beam_size; 1: greedy)."
)
LENGTH_PENALTY = flags.DEFINE_float(
    "length_penalty", None, "α of the length penalty (default: the run's)."
)
BATCH_SIZE = flags.DEFINE_integer(
    "batch_size", None, "Sentences per decoding batch (default: the run's)."
)


def load_run() -> run_loading.LoadedRun:
    """:func:`run_loading.load_run` with ``--workdir``, ``--checkpoint`` and
    ``--average_last``; ``--workdir`` is required."""
    if not WORKDIR.value:
        raise ValueError("--workdir is required: the training run's workdir")
    return run_loading.load_run(
        WORKDIR.value, run_loading.parse_checkpoint(CHECKPOINT.value), AVERAGE_LAST.value
    )


# The shared flags each command reads, listed by its --help (flags.declare_key_flag there):
RUN_FLAGS = (WORKDIR, CHECKPOINT, AVERAGE_LAST)  # load_run
DECODE_FLAGS = (BEAM_SIZE, LENGTH_PENALTY, BATCH_SIZE)  # translation decoding
