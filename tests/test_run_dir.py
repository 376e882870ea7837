"""A run's workdir is one value (deepnet_jax.runs.workdir.RunDir): its paths, its checks, the
README table made from its declared entries, and no other module of the package naming a file
of the workdir itself."""

from __future__ import annotations

import ast
import os
import re

import pytest

from deepnet_jax.common import records
from deepnet_jax.runs import workdir
from deepnet_jax.runs.workdir import ENTRIES, RunDir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "deepnet_jax")
OWNER = "deepnet_jax/runs/workdir.py"


def _every_path(run_dir: RunDir) -> list[str]:
    """Every path RunDir gives, each accessor called once."""
    paths = [
        getattr(run_dir, name)
        for name, value in vars(RunDir).items()
        if isinstance(value, property)
    ]
    return [
        *paths,
        run_dir.checkpoint(7),
        run_dir.diagnostics_figure("model_update"),
        run_dir.diagnostic(7),
    ]


def test_paths_are_the_declared_entries_under_an_absolute_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = RunDir("run")
    assert run_dir.root == str(tmp_path / "run") and os.fspath(run_dir) == run_dir.root
    assert RunDir(run_dir) == run_dir == RunDir(tmp_path / "run")
    assert run_dir.checkpoints == str(tmp_path / "run" / "checkpoints")
    assert run_dir.checkpoint(12) == str(tmp_path / "run" / "checkpoints" / "12")
    assert run_dir.metrics == str(tmp_path / "run" / "metrics.jsonl")
    assert run_dir.tokenizer == str(tmp_path / "run" / "tokenizer.model")
    assert run_dir.diagnostics_figure("ln_inputs") == str(
        tmp_path / "run" / "diagnostics_ln_inputs.png"
    )
    assert run_dir.diagnostic(5) == str(tmp_path / "run" / "diagnostic" / "5")
    # every accessor lands on a declared entry, and every entry has an accessor
    patterns = {re.escape(e.name).replace(r"\{\}", "[a-z_]+") for e in ENTRIES}
    reached = set()
    for path in _every_path(run_dir):
        first = os.path.relpath(path, run_dir.root).split(os.sep)[0]
        (pattern,) = [p for p in patterns if re.fullmatch(p, first)]
        reached.add(pattern)
    assert reached == patterns


def test_entries_are_named_once_with_one_line_each():
    names = [e.name for e in ENTRIES]
    assert len(names) == len(set(names))
    for entry in ENTRIES:
        assert entry.what and "\n" not in entry.what and "|" not in entry.what, entry.name
        assert entry.shown.endswith("/") == entry.folder


def test_has_checkpoints_needs_a_step_folder(tmp_path):
    run_dir = RunDir(tmp_path)
    assert not run_dir.has_checkpoints()
    os.makedirs(os.path.join(run_dir.checkpoints, "3.orbax-checkpoint-tmp-1"))
    assert not run_dir.has_checkpoints()
    os.makedirs(run_dir.checkpoint(3))
    assert run_dir.has_checkpoints()


def test_check_writable_creates_the_workdir_or_names_it(tmp_path):
    run_dir = RunDir(tmp_path / "new" / "run")
    run_dir.check_writable()
    assert os.path.isdir(run_dir.root) and os.listdir(run_dir.root) == []  # the probe is gone
    (tmp_path / "a_file").write_text("")
    blocked = RunDir(tmp_path / "a_file" / "run")
    with pytest.raises(OSError, match=rf"^workdir {re.escape(blocked.root)} is not writable"):
        blocked.check_writable()


def test_check_free_space(tmp_path, monkeypatch):
    usage = workdir.shutil.disk_usage(tmp_path)
    monkeypatch.setattr(workdir.shutil, "disk_usage", lambda path: usage._replace(free=2**20))
    RunDir(tmp_path).check_free_space(2**20)
    with pytest.raises(OSError, match=r"has 1\.0 MiB free; the checkpoints need 2\.0 MiB"):
        RunDir(tmp_path).check_free_space(2**21)
    assert workdir.checkpoint_bytes_needed(10, 3, max_to_keep=2) == 33


def test_readme_lists_every_entry():
    block = records.block(os.path.join(ROOT, "README.md"), "run-dir")
    assert block == workdir.docs_table()
    rows = block.splitlines()[2:]
    assert [row.split("`")[1] for row in rows] == [e.shown for e in ENTRIES]


def _strings(path: str) -> list[str]:
    """The string constants of a module, docstrings left out (f-strings' literal parts in)."""
    with open(path) as f:
        tree = ast.parse(f.read())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def _modules() -> list[str]:
    out = []
    for folder, _, files in os.walk(PACKAGE):
        out += [os.path.join(folder, name) for name in files if name.endswith(".py")]
    return sorted(out)


@pytest.mark.parametrize("name", ["checkpoints", "metrics.jsonl"])
def test_a_file_name_of_the_workdir_is_written_in_one_module(name):
    """Each of these names appears in one module of the package: RunDir's (for
    ``metrics.jsonl`` anywhere in a module's text, docstrings included)."""
    found = []
    for path in _modules():
        with open(path) as f:
            text = f.read()
        segment = re.compile(rf"(^|[/\\]){re.escape(name)}([/\\]|$)")
        if any(segment.search(s) for s in _strings(path)) or ("." in name and name in text):
            found.append(os.path.relpath(path, ROOT))
    assert found == [OWNER]


def test_no_module_but_run_dirs_joins_a_workdir_file_name():
    """No string constant outside RunDir's module is (or has as a path segment) the name of
    a workdir entry; words that are also values elsewhere (``best``, ``diagnostic``) aside."""
    words = {"best", "diagnostic"}  # --checkpoint=best; the diagnostics collection's name
    names = [e.name for e in ENTRIES if e.name not in words and "{}" not in e.name]
    segments = {n: re.compile(rf"(^|[/\\]){re.escape(n)}([/\\]|$)") for n in names}
    found = {}
    for path in _modules():
        relative = os.path.relpath(path, ROOT)
        if relative == OWNER or relative.startswith("deepnet_jax/data/"):
            continue  # data/ names its own corpora's files (a corpus's tokenizer.model …)
        strings = _strings(path)
        hits = [n for n in names for s in strings if segments[n].search(s)]
        if hits:
            found[relative] = sorted(set(hits))
    assert found == {}
