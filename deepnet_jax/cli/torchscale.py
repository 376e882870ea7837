"""Bring a torchscale checkpoint into a run workdir, or take a run's parameters back.

    python -m deepnet_jax.cli.torchscale import --checkpoint=model.pt --workdir=RUN \\
        [--spm=sentencepiece.model] [--ts_config=config.json] [--train_config=<name or file>]
    python -m deepnet_jax.cli.torchscale export --workdir=RUN --out=model.pt \\
        [--checkpoint=latest|best|STEP] [--average_last=K]

``import`` reads a torchscale (or fairseq-trained torchscale) ``.pt`` file and writes RUN as a
run at step 0 (``deepnet_jax.interop.torchscale.runs``): ``translate``, ``evaluate`` and
``sample`` read it, and ``python train.py --config=RUN/finetune_config.py --workdir=RUN``
fine-tunes it. ``export`` writes a run's parameters as a torchscale state dict with its config.
Needs torch (``pip install 'deepnet-jax[interop]'``). A bad input ends with one ``error:`` line
and exit status 1, nothing written.
"""

from __future__ import annotations

import sys

from absl import flags

from deepnet_jax.cli import command
from deepnet_jax.cli import flags as cli_flags
from deepnet_jax.interop.torchscale import runs
from deepnet_jax.training import loading as run_loading

COMMANDS = ("import", "export")
_SPM = flags.DEFINE_string("spm", None, "import: a SentencePiece model to keep with the run.")
_TS_CONFIG = flags.DEFINE_string(
    "ts_config", None, "import: the torchscale config as JSON (default: the checkpoint's)."
)
_TRAIN_CONFIG = flags.DEFINE_string(
    "train_config",
    None,
    "import: the training config for fine-tuning, a shipped name or a file (default: defaults).",
)
_TRUST = flags.DEFINE_bool(
    "trust_checkpoint", False, "import: unpickle the checkpoint fully (only a file you trust)."
)
for _shared in (*cli_flags.RUN_FLAGS, cli_flags.OUT):
    flags.declare_key_flag(_shared.name)  # listed by --help


def run_command(command: str) -> str:
    """Run ``import`` or ``export`` with the parsed flags; returns the summary line."""
    checkpoint = cli_flags.CHECKPOINT.value
    if command == "import":
        if not flags.FLAGS["checkpoint"].present:
            raise ValueError("import needs --checkpoint=<torchscale .pt file>")
        return runs.import_checkpoint(
            checkpoint,
            cli_flags.WORKDIR.value,
            _SPM.value,
            _TS_CONFIG.value,
            _TRAIN_CONFIG.value,
            _TRUST.value,
        )
    return runs.export_run(
        cli_flags.WORKDIR.value,
        cli_flags.OUT.value,
        run_loading.parse_checkpoint(checkpoint),
        cli_flags.AVERAGE_LAST.value,
    )


def execute(arguments: list[str]) -> None:
    """Run the one command of ``arguments`` (``import`` or ``export``); its line on stderr."""
    print(run_command(arguments[0]), file=sys.stderr)


def main(argv: list[str]) -> None:
    """The command (absl's ``argv``, flags parsed): :func:`execute` with the shared checks
    and the one-line error (:mod:`deepnet_jax.cli.command`)."""
    command.main(execute, argv, commands=COMMANDS)


if __name__ == "__main__":
    command.run(main)
