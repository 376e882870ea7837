"""An experiment's results file (:class:`Results`): its runs, kept after every run so that an
interrupted experiment skips what it finished, shared by the processes of its shards under a
lock, refused when made with other settings, and written compact (:mod:`compact_results`).

Its ``header`` (:func:`deepnet_jax.common.records.header`) is the command that created the
file, as that command started; runs, shards and merges that add to the file later keep it as it
is. A file created before results files carried one (those committed under docs/reproduction/
before it) has none, and keeps having none. Each run trained since says its own
``commit`` (the one its command started from) and ``date`` (when it was recorded): a file
gathers runs of many sessions."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Sequence
from typing import Any

from deepnet_jax.common import console, records
from deepnet_jax.experiments import compact_results


def find_run(runs: Sequence[dict[str, Any]], key: dict[str, Any]) -> dict[str, Any] | None:
    """The first of ``runs`` holding every field of ``key`` with its value, or None."""
    for run in runs:
        if all(run.get(k) == v for k, v in key.items()):
            return run
    return None


class Results:
    """An experiment's runs, kept in ``<out>/<name>.json`` after every run, so that a long
    experiment that was interrupted skips the runs it finished when started again. Several
    processes may share one file (each running its own share of the runs: ``--shard``): each
    addition re-reads the file under an exclusive lock (``<name>.json.lock``) and adds its run
    to what the others wrote.

    ``grid`` names the entries of ``settings`` that only list which runs the setting has (the
    schemes, depths, seeds): a file whose settings differ from these only there keeps its runs
    (each run's key says which it is), so a row added to a grid trains only the new runs. A
    file made with another setting or other settings (a recipe, a step count) is refused, not
    overwritten. The file is written compact (:mod:`compact_results`: the curves the readers
    of ``name``'s results take, one run per line).

    ``head`` is the command's :func:`records.header` as it started (None: taken now, of this
    process's command line): the header of the file if this command creates it, and the
    ``commit`` of the runs it trains (:meth:`provenance`)."""

    def __init__(
        self,
        out_dir: str,
        name: str,
        setting: str,
        settings: dict[str, Any],
        grid: Sequence[str] = (),
        head: dict[str, Any] | None = None,
    ):
        self.name = name
        self.path = os.path.join(out_dir, f"{name}.json")
        self.started = records.header() if head is None else head
        self.payload: dict[str, Any] = {
            "header": self.started,
            "setting": setting,
            "settings": settings,
            "runs": [],
        }
        self.grid = tuple(grid)
        os.makedirs(out_dir, exist_ok=True)
        self.reload()

    def reload(self) -> None:
        """Take the runs and the header (or its absence) of the file on disk; SystemExit if it
        was made with another setting or settings that differ outside ``grid``."""
        if not os.path.exists(self.path):
            return
        with open(self.path) as f:
            kept = json.load(f)
        differ = self.differing(kept)
        if differ:
            raise SystemExit(
                console.error_line(
                    f"{self.path} holds runs made with other settings ({', '.join(differ)} "
                    "differ); pass another --out, or move the file away to start afresh"
                )
            )
        self.payload["runs"] = kept["runs"]
        if "header" in kept:  # the command that created the file: kept as it is
            self.payload["header"] = kept["header"]
        else:  # a file from before headers: written without one, as it was
            self.payload.pop("header", None)

    def differing(self, kept: dict[str, Any]) -> list[str]:
        """The fields in which a results file's payload ``kept`` differs from this one's
        ("setting", or ``settings.<entry>`` outside ``grid``)."""
        if kept.get("setting") != self.payload["setting"]:
            return ["setting"]
        mine, theirs = _plain(self.payload["settings"]), kept.get("settings", {})
        return [
            f"settings.{k}"
            for k in sorted(set(mine) | set(theirs))
            if k not in self.grid and mine.get(k) != theirs.get(k)
        ]

    @property
    def runs(self) -> list[dict[str, Any]]:
        return self.payload["runs"]

    def find(self, key: dict[str, Any]) -> dict[str, Any] | None:
        return find_run(self.runs, key)

    def provenance(self) -> dict[str, Any]:
        """What a run this command trained records of its making: the ``commit`` its command
        started from, the ``date`` now (UTC), the ``cpu`` model of the machine it ended on
        (:func:`records.cpu_model`: two 2-core VMs train the same seed of a chaotic cell to
        different ends, their rounding being different) and the ``cores`` it could run on
        (:func:`records.cores`: 1 where it was pinned to one; recorded since 2026-12-01)."""
        return {
            "commit": self.started.get("commit"),
            "date": records.now(),
            "cpu": records.cpu_model(),
            "cores": records.cores(),
        }

    def add(self, key: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        """Add one run's result, compact (:func:`compact_results.compact_run`: the run returned
        is the run written), under the lock, to the runs on disk, and save. The next
        addition re-reads the file, so later changes to the returned run are not saved: what an
        experiment adds to a run belongs in :func:`run_grid`'s ``keep``, before this."""
        run = compact_results.compact_run(_plain({**key, **result}), self.name)
        with open(self.path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.reload()
            self.runs.append(run)
            self.save()
        return run

    def save(self) -> None:
        """Write the payload compact (atomically: a rename); the runs kept are the runs written."""
        payload = compact_results.compact(_plain(self.payload), self.name)
        compact_results.write_text(self.path, compact_results.dumps(payload))
        self.payload["runs"] = payload["runs"]


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=_json_default))


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")
