"""The run fingerprint: what every checkpoint records about the run that wrote it, and the
comparison a resumed run makes with it before it reads any checkpoint's state.

A checkpoint's fingerprint is its ``config`` item (the run's resolved config,
``RunConfig.to_dict()``: model, data, optimizer, schedule, …, with
``model.vocab_size``/``max_len`` as derived from the data) and its
``fingerprint`` item, :func:`record`: ``{"tokenizer_sha256": …}``, the sha256 of the
SentencePiece model file the run trained with (``None`` for the synthetic task, whose vocabulary
is the config's ``data.vocab_size``). Each checkpoint keeps the fingerprint it was written
under, so a workdir whose runs changed a resumable field (``total_steps`` 1800 → 2400) is
compared field by field with the checkpoint actually resumed.

On resume (:func:`check_config` before the data is prepared, :func:`check` once the tokenizer
is known):

* a field declared ``resumable=True`` (``train_config.may_change_on_resume``: cadences, total
  steps, decoding, paths, mesh, diagnostics, …) may differ: the changes are listed in one line;
* any other difference, or another tokenizer, is a :class:`FingerprintMismatchError`: one
  line naming each field (``model.scheme: deepnorm → post_ln``) and the two ways out. Nothing
  in the workdir has been touched then: no checkpoint is read, moved or renamed and
  ``tokenizer.model`` is not rewritten (a checkpoint of step 0, whose parameters were imported,
  binds only the model, the tokenizer and the optimizer state's shape:
  :data:`INITIAL_STATE_FIELDS`);
* a checkpoint written before fingerprints existed has only its config: that is compared, its
  tokenizer is compared with the workdir's ``tokenizer.model`` (when there is one), and one line
  says what could not be compared.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import ml_collections

from deepnet_jax.common import console
from deepnet_jax.data import fetch
from deepnet_jax.model.config import AUTO, DERIVED
from deepnet_jax.runs import checkpoint
from deepnet_jax.runs.workdir import RunDir
from deepnet_jax.training import config as train_config
from deepnet_jax.training import data as train_data
from deepnet_jax.training.run_config import RunConfig

TOKENIZER = "tokenizer"  # the tokenizer's entry in a list of differences
# A checkpoint of step 0 has nothing trained: its parameters are an initialization (imported,
# ``deepnet_jax.interop.torchscale``). It binds a run only to its model, its tokenizer and the
# fields that shape the optimizer state it holds; the rest (learning rate, schedule, data …)
# is the fine-tuning's own choice.
INITIAL_STATE_FIELDS = ("grad_accum_steps", "nan_policy", "optimizer.name", "optimizer.grad_clip")


class FingerprintMismatchError(console.UserError, ValueError):
    """The workdir's checkpoints were written by a run this config does not continue."""


@dataclasses.dataclass(frozen=True)
class Saved:
    """One checkpoint's fingerprint: its step, its config as dotted names → values, and the
    tokenizer's sha256 (``recorded``: False for a checkpoint written before fingerprints,
    whose ``tokenizer_sha256`` is then unknown, None)."""

    step: int
    config: dict[str, Any]
    tokenizer_sha256: str | None
    recorded: bool


def tokenizer_sha256(data: train_data.Data) -> str | None:
    """The sha256 of the run's tokenizer model file; None for the synthetic task."""
    if isinstance(data, train_data.CorpusData):
        return fetch.sha256_file(data.pipeline.tokenizer_path)
    return None


def record(tokenizer: str | None) -> dict[str, Any]:
    """The ``fingerprint`` item a checkpoint saves beside its config."""
    return {"tokenizer_sha256": tokenizer}


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config (dict or ConfigDict) as ``{"model.scheme": "deepnorm", …}``; lists
    become tuples (JSON gives lists where the config holds tuples)."""
    if isinstance(tree, ml_collections.ConfigDict):
        tree = tree.to_dict()
    out: dict[str, Any] = {}
    for name, value in tree.items():
        if isinstance(value, (dict, ml_collections.ConfigDict)):
            out.update(flatten(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = tuple(value) if isinstance(value, list) else value
    return out


def read(workdir: str | None) -> list[Saved]:
    """The fingerprints of the workdir's checkpoints, newest first ([] without any); a step
    whose config does not read is left out (its restore reports it as damaged)."""
    if not workdir:
        return []
    saved = []
    for step, config, item in checkpoint.read_fingerprints(workdir):
        upgraded = train_config.upgrade_saved(config)
        sha = item.get("tokenizer_sha256") if item is not None else None
        saved.append(Saved(step, flatten(upgraded), sha, item is not None))
    return saved


@dataclasses.dataclass(frozen=True)
class Differences:
    """How a config differs from a checkpoint's: ``fixed`` (path, saved, now) that stop a
    resume, ``accepted`` ones that may change, and ``unrecorded`` fields the checkpoint lacks."""

    fixed: list[tuple[str, Any, Any]]
    accepted: list[tuple[str, Any, Any]]
    unrecorded: list[str]


def differences(saved: Saved, config: RunConfig, derived: bool) -> Differences:
    """Field-by-field comparison of ``config`` (its :meth:`RunConfig.to_dict`, as a checkpoint
    saves it) with a checkpoint's. ``derived=False``: the data is not read yet, so derived
    model fields still at 0 are not compared."""
    now = flatten(config.to_dict())
    if now.get("model.remat_policy") == AUTO:  # auto plans both again and prints its choice
        del now["model.remat_policy"], now["model.scan_group_size"]
    fixed, accepted, unrecorded = [], [], []
    for path, value in now.items():
        resumable = train_config.may_change_on_resume(path)
        if saved.step == 0:
            resumable = resumable or not (path.startswith("model.") or path in INITIAL_STATE_FIELDS)
        if not derived and path in {f"model.{d}" for d in DERIVED} and value == 0:
            continue
        if path not in saved.config:
            if not resumable:
                unrecorded.append(path)
        elif saved.config[path] != value:
            (accepted if resumable else fixed).append((path, saved.config[path], value))
    return Differences(fixed, accepted, unrecorded)


def check_config(saved: list[Saved], config: RunConfig, workdir: str | None) -> None:
    """Before the data is prepared: a :class:`FingerprintMismatchError` for a field that differs
    from the checkpoints' (all but the derived fields and the tokenizer)."""
    if not saved:
        return
    directory = RunDir(workdir).checkpoints
    for s in saved:
        fixed = differences(s, config, derived=False).fixed
        if fixed:
            raise FingerprintMismatchError(_mismatch(directory, fixed))


def check(saved: list[Saved], config: RunConfig, tokenizer: str | None, workdir: str) -> list[str]:
    """Compare the resolved ``config`` and the run's ``tokenizer`` (sha256; None: synthetic)
    with every checkpoint's fingerprint; raise :class:`FingerprintMismatchError` on a field that may
    not change, else return the lines to print (accepted changes; what could not be compared)."""
    if not saved:
        return []
    run_dir = RunDir(workdir)
    directory, path = run_dir.checkpoints, run_dir.tokenizer
    in_workdir = fetch.sha256_file(path) if os.path.isfile(path) else None
    unrecorded: set[str] = set()
    for s in saved:
        found = differences(s, config, derived=True)
        fixed = list(found.fixed)
        old = s.tokenizer_sha256 if s.recorded else in_workdir
        if (s.recorded or in_workdir is not None) and old != tokenizer:
            fixed.append((TOKENIZER, _short(old), _short(tokenizer)))
        if fixed:
            raise FingerprintMismatchError(_mismatch(directory, fixed))
        unrecorded.update(found.unrecorded)
    if in_workdir is not None and in_workdir != tokenizer:  # the checkpoints' record matches
        raise FingerprintMismatchError(
            f"{path} is not this run's tokenizer ({_short(in_workdir)}, this run's: "
            f"{_short(tokenizer)}) though the checkpoints under {directory} were trained with "
            "this run's; put the run's tokenizer back, or use a new workdir"
        )
    lines = []
    accepted = differences(saved[0], config, derived=True).accepted
    if accepted:
        changes = ", ".join(f"{p} {_shown(a)} → {_shown(b)}" for p, a, b in accepted)
        lines.append(f"resuming with changed fields: {changes}")
    old = [s.step for s in saved if not s.recorded]
    note = _unrecorded_note(old, sorted(unrecorded), tokenizer, in_workdir, path)
    return lines + ([note] if note else [])


def _unrecorded_note(
    steps: list[int], fields: list[str], tokenizer: str | None, in_workdir: str | None, path: str
) -> str | None:
    """One line on what could not be compared (fields a checkpoint does not record; the
    tokenizer of checkpoints written before fingerprints, or what it was compared with); None
    when everything was compared."""
    missing = list(fields)
    if steps and tokenizer is not None and in_workdir is None:
        missing.insert(0, f"the tokenizer (no {path})")
    if steps:
        which = ", ".join(map(str, sorted(steps)))
        line = (
            f"note: checkpoint {which} records no run fingerprint (an earlier version wrote it)"
            if len(steps) == 1
            else f"note: checkpoints {which} record no run fingerprint (an earlier version "
            "wrote them)"
        )
    elif missing:
        line = "note: the checkpoints do not record every field"
    else:
        return None
    if missing:
        return f"{line}; not compared: {', '.join(missing)}"
    if tokenizer is not None:
        return f"{line}; the tokenizer was compared with {path}"
    return None


def _mismatch(directory: str, fixed: list[tuple[str, Any, Any]]) -> str:
    changes = ", ".join(f"{p}: {_shown(a)} → {_shown(b)}" for p, a, b in fixed)
    return (
        f"the checkpoints under {directory} were written by another run: {changes}. Resume "
        "with the config they were written with, or use a new workdir to start afresh"
    )


def _short(sha: str | None) -> str:
    return "none" if sha is None else f"sha256 {sha[:12]}"


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)
