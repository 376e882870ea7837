"""A run's working directory as one value, :class:`RunDir`: every path a run writes there, and
the checks made on it before anything is compiled.

:data:`ENTRIES` declares what a workdir can hold, each :class:`Entry` with its name and a line
saying what it is; README.md's table "What a run leaves in its workdir" is generated from them
(``python -m deepnet_jax.experiments.docs_tables``). Writers and readers ask a :class:`RunDir`
for their paths (``RunDir(workdir).metrics``, ``.checkpoint(step)``, …) and never join a file
name to a workdir themselves.

A week-long run should not find out at its first checkpoint that its workdir cannot be written
or has no room: :meth:`RunDir.check_writable` creates (and removes) a probe file there, and
:meth:`RunDir.check_free_space` compares the free bytes of its file system with what the
checkpoints will take (:func:`checkpoint_bytes_needed`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile


@dataclasses.dataclass(frozen=True)
class Entry:
    """One thing a run writes in its workdir: ``name`` (``{}`` where a part of the name varies),
    whether it is a ``folder`` and what each item inside it is named (``inside``: ``<step>/``),
    and ``what`` it holds and when it is written, in one line."""

    name: str
    what: str
    folder: bool = False
    inside: str = ""

    @property
    def shown(self) -> str:
        """The entry as the docs name it: ``checkpoints/<step>/``, ``diagnostics_*.png``."""
        shown = self.name.replace("{}", "*")
        return f"{shown}/{self.inside}" if self.folder else shown


METRICS = Entry(
    "metrics.jsonl",
    'one JSON record per log interval (`split: "train"`: loss, nll, perplexity, accuracy, lr, '
    'grad/update/param norms, tokens/s, step time, MFU), per validation (`"eval"`: loss, '
    "perplexity, accuracy, and for translation the source sensitivity, greedy BLEU/chrF and the "
    "share of distinct hypotheses) and for the final split",
)
TENSORBOARD = Entry(
    "tensorboard",
    "the same scalars as TensorBoard event files (`tensorboard --logdir=<workdir>`)",
    folder=True,
)
CURVES = Entry("curves.png", "training and validation loss (and BLEU) against updates")
EVAL = Entry(
    "eval.json",
    "final validation and `final_split` figures: loss, perplexity, source sensitivity (with "
    "`*_loss_examples` scored, `*_loss_truncated` of them cut to `data.max_len`), beam "
    "BLEU/chrF with sacrebleu signatures (`*_sentences`), BLEU/chrF on the sentences whose "
    "source is not in the training split (`*_unseen_*`), distinct hypotheses, sample "
    "translations",
)
CHECKPOINTS = Entry(
    "checkpoints",
    "train state, data-iterator position, config and run fingerprint (every "
    "`checkpoint_every` updates and at the end); a resumed run starts from the newest",
    folder=True,
    inside="<step>/",
)
BEST = Entry(
    "best",
    "parameters with the best validation score (greedy BLEU for translation, else −loss; "
    "−loss also when `decode.eval_sentences` = 0)",
    folder=True,
    inside="<step>/",
)
CORRUPT_CHECKPOINTS = Entry(
    "corrupt_checkpoints",
    "checkpoints that failed to restore on resume, set aside for inspection (never deleted)",
    folder=True,
    inside="<step>/",
)
TOKENIZER = Entry(
    "tokenizer.model",
    "the SentencePiece model the run trained with (used by the CLIs below)",
)
DIAGNOSTICS_FIGURES = Entry(
    "diagnostics_{}.png",
    "with `diagnostics.every` > 0: model update over updates, and layer × update heat maps of "
    "LayerNorm inputs and per-layer gradient norms (the records are "
    '`split: "diagnostics"` lines in `metrics.jsonl`)',
)
STABILITY_PROBE = Entry(
    "stability_probe",
    "with `diagnostics.every` > 0 and checkpoints: F(x; θ₀) on the probe batch, read back on "
    "resume to measure the model update",
    folder=True,
)
DIAGNOSTIC = Entry(
    "diagnostic",
    "after a halt on a non-finite loss or gradient (`nan_policy`): the train state after the "
    "step that halted it",
    folder=True,
    inside="<step>/",
)
CONFIG_JSON = Entry(
    "config.json",
    "imported from torchscale (`cli.torchscale import`): the run config as JSON",
)
FINETUNE_CONFIG = Entry(
    "finetune_config.py",
    "imported from torchscale: the run config as `train.py`'s `--config`, to fine-tune",
)
TORCHSCALE_IMPORT = Entry(
    "torchscale_import.json",
    "imported from torchscale: the source checkpoint, its tensor names' prefix and its "
    "config, which `cli.torchscale export` gives back",
)
EXPERIMENT_COST = Entry(
    "experiment_cost.json",
    "a run of an experiment (`deepnet_jax.experiments`): the CPU and wall seconds of each "
    "process that trained it",
)
ENTRIES: tuple[Entry, ...] = (
    METRICS,
    TENSORBOARD,
    CURVES,
    EVAL,
    CHECKPOINTS,
    BEST,
    CORRUPT_CHECKPOINTS,
    TOKENIZER,
    DIAGNOSTICS_FIGURES,
    STABILITY_PROBE,
    DIAGNOSTIC,
    CONFIG_JSON,
    FINETUNE_CONFIG,
    TORCHSCALE_IMPORT,
    EXPERIMENT_COST,
)


@dataclasses.dataclass(frozen=True, init=False)
class RunDir:
    """A run's workdir (``root``, absolute): the path of each of its :data:`ENTRIES`, and its
    checks. ``RunDir(path)`` takes a path or a ``RunDir``; it is path-like itself."""

    root: str

    def __init__(self, root: str | os.PathLike[str]):
        object.__setattr__(self, "root", os.path.abspath(os.fspath(root)))

    def __fspath__(self) -> str:
        return self.root

    def __str__(self) -> str:
        return self.root

    def path(self, entry: Entry, *parts: str | int) -> str:
        """``entry``'s path; a folder's ``parts`` name what is inside it (``<step>``), a
        varying name's one part fills its ``{}``."""
        if "{}" in entry.name:
            (part,) = parts
            return os.path.join(self.root, entry.name.format(part))
        return os.path.join(self.root, entry.name, *map(str, parts))

    @property
    def checkpoints(self) -> str:
        """The orbax checkpoints' folder, one ``<step>/`` each."""
        return self.path(CHECKPOINTS)

    def checkpoint(self, step: int) -> str:
        """Checkpoint ``step``'s folder."""
        return self.path(CHECKPOINTS, step)

    @property
    def best(self) -> str:
        """The best parameters' folder."""
        return self.path(BEST)

    @property
    def corrupt_checkpoints(self) -> str:
        """Where checkpoints that fail to restore are set aside."""
        return self.path(CORRUPT_CHECKPOINTS)

    @property
    def metrics(self) -> str:
        """The JSON-lines metrics file."""
        return self.path(METRICS)

    @property
    def tensorboard(self) -> str:
        """The TensorBoard event files' folder."""
        return self.path(TENSORBOARD)

    @property
    def curves(self) -> str:
        """The training curves' PNG."""
        return self.path(CURVES)

    @property
    def eval_results(self) -> str:
        """The final evaluation's JSON."""
        return self.path(EVAL)

    @property
    def tokenizer(self) -> str:
        """The SentencePiece model the run trained with."""
        return self.path(TOKENIZER)

    def diagnostics_figure(self, name: str) -> str:
        """The stability instruments' figure ``name`` (``model_update``, ``ln_inputs``, …)."""
        return self.path(DIAGNOSTICS_FIGURES, name)

    @property
    def stability_probe(self) -> str:
        """The probe batch's features under the initial parameters, F(x; θ₀)."""
        return self.path(STABILITY_PROBE)

    def diagnostic(self, step: int) -> str:
        """The train state saved after a halt at micro-step ``step``."""
        return self.path(DIAGNOSTIC, step)

    @property
    def config_json(self) -> str:
        """An imported run's config as JSON."""
        return self.path(CONFIG_JSON)

    @property
    def finetune_config(self) -> str:
        """An imported run's config as a ``--config`` file."""
        return self.path(FINETUNE_CONFIG)

    @property
    def torchscale_import(self) -> str:
        """An imported run's record of where its parameters came from."""
        return self.path(TORCHSCALE_IMPORT)

    @property
    def experiment_cost(self) -> str:
        """An experiment run's CPU and wall seconds, segment by segment."""
        return self.path(EXPERIMENT_COST)

    def has_checkpoints(self) -> bool:
        """Whether a step folder exists under :attr:`checkpoints` (complete or not)."""
        folder = self.checkpoints
        return os.path.isdir(folder) and any(name.isdigit() for name in os.listdir(folder))

    def check_writable(self) -> None:
        """Create the workdir if needed and write a probe file in it; a one-line ``OSError``
        naming the path otherwise."""
        try:
            os.makedirs(self.root, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.root, prefix=".write_probe_"):
                pass
        except OSError as e:
            raise OSError(f"workdir {self.root} is not writable: {e.strerror or e}") from None

    def check_free_space(self, needed_bytes: int) -> None:
        """A one-line ``OSError`` when the file system holding the workdir has fewer than
        ``needed_bytes`` free."""
        free = shutil.disk_usage(self.root).free
        if free < needed_bytes:
            raise OSError(
                f"workdir {self.root} has {free / 2**20:.1f} MiB free; the checkpoints need "
                f"{needed_bytes / 2**20:.1f} MiB (train state × (max_to_keep + 1) + best "
                "parameters)"
            )


def checkpoint_bytes_needed(state_bytes: int, params_bytes: int, max_to_keep: int) -> int:
    """Disk a run's checkpoints can take at once: ``max_to_keep`` kept train states plus one
    being written, and the best parameters."""
    return state_bytes * (max_to_keep + 1) + params_bytes


def docs_table() -> str:
    """README.md's table of :data:`ENTRIES`: one row per entry, its name and its line."""
    rows = [f"| `{entry.shown}` | {entry.what} |" for entry in ENTRIES]
    return "\n".join(["| path | what |", "|---|---|", *rows])
