"""An experiment's results file kept compact: what its readers take of each run's curves, at a
precision no table or figure shows, one run per line.

    python -m deepnet_jax.experiments.compact_results docs/reproduction/*.json  # in place
    python -m deepnet_jax.experiments.compact_results --check FILE...  # 1 if one is not compact

A run's scalars (its key, results, verdict, times, device, commit, date) are kept as recorded.
Of its curves (the lists of records ``records`` and ``diagnostics``) :data:`CURVES` keeps, per
experiment, the splits and fields that a reader takes; every other curve is dropped:

* ``depth_table``: the training records' step, accuracy and NLL (the onsets of
  :mod:`depth_table_report` and :mod:`depth_table_views`, and of the onset figure; the
  corpus runs' final training NLL and accuracy in docs/reproduction.md), and the slimmed
  diagnostics (ΔF and each side's first and last layer's gradient norm, which
  docs/reproduction.md reads off the corpus runs). Not the per-interval loss, learning rate,
  norms and timings, nor the final validation record (the run's ``eval_*`` scalars hold it,
  all but the corpus runs' chrF, which nothing shows).
* ``model_update``: each diagnostics record's update and ΔF (:mod:`model_update`'s tables and
  figure), not its per-layer LayerNorm inputs and gradient norms (29 KB a run).
* ``lr_tolerance``: no curve (its tables and figures read the final validation NLL);
  ``main_job_probes``: none either (each validation's figures are a run field of their own,
  ``validation``).
* ``lr_transfer``: the training records' step, accuracy and NLL (its sweep table marks a run
  that fitted and fell back, :mod:`collapse`; its runs keep them since those of 2026-12-01).
* ``late_collapse``: the training records' step, accuracy, NLL and gradient norm (its table
  reads the accuracy; the NLL and gradient norm show what the run did before a fall).
* ``deepnorm18_corpus``: each diagnostics record's update, the encoder's per-layer gradient
  norms and LayerNorm inputs (its report's attenuation, predicted and measured); each
  validation's figures are a run field of their own (``validation``).

An experiment not named there (``thousand_layers``, whose report plots every curve) keeps its
curves whole. Kept curve values are written to :data:`DIGITS` significant digits, float32's
round-trip precision: a float32 measurement (ΔF, a gradient norm) reads back as itself, and only
the float64 digits below it go. The reports print a curve value to at most 5 significant digits
(model_update's ΔF ``10.525``, ``.3f``; the docs' tables 4: ``10.52``), and a value stored to
fewer digits than 9 is rounded twice before it is printed: stored to 5 digits, one committed
cell changed (docs/blocks.md, Sub-LN 18L SwiGLU's largest ΔF 10.524552 → 10.525 prints 10.53,
not 10.52). At 9 a printed digit changes only where the value lay within 5·10^-9 of itself of
its rounding boundary. The onsets compare a training accuracy with fixed levels (0.5, 0.9, the
source-blind best + 0.1): 9 digits move it by at most 5·10^-10. The figures (80 dpi) resolve
about 1/300 of an axis.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from deepnet_jax.common import console

DIGITS = 9  # significant digits of a kept curve value (FLT_DECIMAL_DIG)
# experiment → curve field → record split → the record fields kept (None: every field);
# a curve field or split not named is dropped; a record kept without its split is of the split
# its field is named after (``diagnostics``)
CURVES: dict[str, dict[str, dict[str, tuple[str, ...] | None]]] = {
    "depth_table": {
        "records": {"train": ("split", "step", "accuracy", "nll")},
        "diagnostics": {"diagnostics": None},
    },
    "model_update": {"diagnostics": {"diagnostics": ("step", "model_update")}},
    "lr_tolerance": {},
    "lr_transfer": {"records": {"train": ("split", "step", "accuracy", "nll")}},
    "late_collapse": {"records": {"train": ("split", "step", "accuracy", "nll", "grad_norm")}},
    "main_job_probes": {},
    "deepnorm18_corpus": {
        "diagnostics": {
            "diagnostics": (
                "step",
                "grad_norm/encoder/all",
                "ln_input/encoder/self_attn_layer_norm",
                "ln_input/encoder/final_layer_norm",
            )
        }
    },
}
_CURVE_FIELDS = ("records", "diagnostics")


def rounded(value: float, digits: int = DIGITS) -> float:
    """``value`` to ``digits`` significant digits (written back as the shortest float that
    reads as them: 0.015226922621163645 → 0.0152269226)."""
    return float(f"{value:.{digits}g}")


def compact_run(run: dict[str, Any], experiment: str) -> dict[str, Any]:
    """``run`` with only the curves :data:`CURVES` keeps for ``experiment``, their floats
    :func:`rounded`; the run itself when ``experiment`` has no rule. The same run compacted
    again is unchanged."""
    if experiment not in CURVES:
        return run
    keep = CURVES[experiment]
    out = {k: v for k, v in run.items() if k not in _CURVE_FIELDS}
    for field, splits in keep.items():
        if field in run:
            mine = [(r, r.get("split", field)) for r in run[field]]
            out[field] = [_record(r, splits[split]) for r, split in mine if split in splits]
    return out


def _record(record: dict[str, Any], fields: tuple[str, ...] | None) -> dict[str, Any]:
    """A curve's record: its ``fields`` (None: all), floats :func:`rounded`."""
    kept = record if fields is None else {k: record[k] for k in fields if k in record}
    return {k: rounded(v) if isinstance(v, float) else v for k, v in kept.items()}


def compact(payload: dict[str, Any], experiment: str) -> dict[str, Any]:
    """A results payload (``header``, ``setting``, ``settings``, ``runs`` …) with each run
    :func:`compact_run`."""
    return {**payload, "runs": [compact_run(r, experiment) for r in payload.get("runs", [])]}


def dumps(payload: dict[str, Any]) -> str:
    """The payload as JSON without spaces, each top-level field on a line and each run on a
    line of its own (a new or changed run is a one-line diff)."""

    def one(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"))

    lines = []
    for key, value in payload.items():
        if key == "runs" and isinstance(value, list) and value:
            runs = ",\n".join(one(run) for run in value)
            lines.append(f"{one(key)}:[\n{runs}\n]")
        else:
            lines.append(f"{one(key)}:{one(value)}")
    return "{" + ",\n".join(lines) + "}\n"


def experiment_of(path: str) -> str:
    """The experiment whose results file ``path`` is, by its name (``model_update_gated.json``
    → ``model_update``); ValueError for a name no experiment's begins."""
    name = os.path.basename(path)
    for experiment in sorted(CURVES, key=len, reverse=True):
        if name == f"{experiment}.json" or name.startswith(f"{experiment}_"):
            return experiment
    raise ValueError(f"{path}: not a results file of {', '.join(sorted(CURVES))}")


def compacted_text(path: str) -> str:
    """The text the results file at ``path`` has once compact."""
    with open(path) as f:
        payload = json.load(f)
    return dumps(compact(payload, experiment_of(path)))


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a rename)."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main(argv: list[str] | None = None) -> int:
    """Compact each file in place, printing its size before and after (``--check``: write
    nothing, 1 if a file is not compact); 0 otherwise."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("paths", nargs="+", help="results files (depth_table_*.json, ...)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if one is not")
    args = parser.parse_args(argv)
    failed = False
    for path in args.paths:
        try:
            text = compacted_text(path)
        except (OSError, ValueError) as e:
            print(console.error_line(e))
            failed = True
            continue
        with open(path) as f:
            before = f.read()
        if text == before:
            print(f"{path}: compact ({len(before.encode()):,} bytes)")
        elif args.check:
            print(f"not compact: {path} (python -m deepnet_jax.experiments.compact_results)")
            failed = True
        else:
            write_text(path, text)
            print(f"{path}: {len(before.encode()):,} → {len(text.encode()):,} bytes")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
